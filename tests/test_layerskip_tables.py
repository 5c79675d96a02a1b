"""Chapter 05's tables (rlib.layerskip.tables) on hand-made run records (their claims: test_layerskip_claims)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from rlib.layerskip import tables


def record(recipe, seed, mid_nll, last_nll, final_loss=3.0, step_seconds=0.1, probe_mid=(5.0, 4.0, 3.5),
           agree_mid=None, probe_last=(3.4, 3.2, 3.0)):
    nll = [mid_nll + 1.0, mid_nll, (mid_nll + last_nll) / 2, last_nll]  # exits 1..4, middle = 2
    return {"recipe": recipe, "seed": seed, "step_seconds": step_seconds,
            "exits": {"exit_layer": [1, 2, 3, 4], "nll": nll, "ppl": [math.exp(x) for x in nll],
                      "top1_acc": [0.1, 0.2, 0.3, 0.4],
                      "agree_last": [0.2, 0.5 if agree_mid is None else agree_mid, 0.8, 1.0]},
            "probe": [{"step": 10 * i, "nll_exit_2": v, "nll_exit_4": w}
                      for i, (v, w) in enumerate(zip(probe_mid, probe_last))],
            "train_curve": {"step": list(range(1, 21)), "loss": [final_loss + 0.01 * (20 - s) for s in range(1, 21)]}}


def results():
    return [record("baseline", 0, 6.0, 3.00, probe_mid=(5.0, 4.0, 4.5)), record("baseline", 1, 6.2, 3.02,
                                                                                 probe_mid=(5.0, 4.1, 4.6)),
            record("ld_ee", 0, 4.0, 3.03, agree_mid=0.7), record("ld_ee", 1, 4.1, 3.04, agree_mid=0.6),
            record("ee", 0, 4.2, 3.01), record("ld", 0, 5.5, 3.0),
            record("ld", 1, 5.5, 3.0, final_loss=2.9), record("ld_const", 0, 5.6, 3.0, final_loss=3.2),
            record("ld_const", 1, 5.6, 3.0, final_loss=3.2),
            record("ee_all", 0, 4.0, 3.10, step_seconds=0.2)]


def test_exit_and_mid_last_tables_average_seeds():
    exits = tables.exit_table(results())
    base = exits[(exits["recipe"] == "baseline") & (exits["exit_layer"] == 2)].iloc[0]
    assert base["nll"] == pytest.approx(6.1) and base["seeds"] == 2 and base["ppl"] == pytest.approx(math.exp(6.1))
    mid_last = tables.mid_last_table(results(), middle=2, last=4).set_index("recipe")
    assert mid_last.loc["baseline", "middle_vs_baseline"] == pytest.approx(1.0)
    assert mid_last.loc["ld_ee", "middle_vs_baseline"] == pytest.approx(math.exp(6.1 - 4.05))
    assert mid_last.loc["ld_ee", "last_vs_baseline"] == pytest.approx(math.exp(3.035 - 3.01))


def test_long_curves_and_the_curriculum_table():
    curves = tables.probe_curves(results())
    assert set(curves["exit_layer"]) == {2, 4} and len(curves) == 2 * 3 * len(results())
    train = tables.train_curves(results(), recipes=("ld", "ld_const"))
    assert set(train["recipe"]) == {"ld", "ld_const"} and len(train) == 4 * 20
    curriculum = tables.curriculum_table(results(), middle=2, last=4).set_index("recipe")
    assert curriculum.loc["ee_all", "step_seconds"] == pytest.approx(0.2)
    assert set(curriculum.index) == {"baseline", "ee", "ee_all"}


def test_the_figures_draw_every_recipe():
    from rlib.layerskip import plots

    exit_fig = plots.plot_exit_curves(tables.exit_table(results()), "exits")
    assert len(exit_fig.axes[0].lines) == len({r["recipe"] for r in results()})
    probe_fig = plots.plot_probe(tables.probe_curves(results()), "probe")
    assert len(probe_fig.axes[0].lines) == 2 * len({r["recipe"] for r in results()})
    loss_fig = plots.plot_train_loss(tables.train_curves(results(), ("ld", "ld_const")), "loss")
    assert len(loss_fig.axes[0].lines) == 2


def decode_rows(recipe, base_ms, acceptance_by_exit, kvq_factor=0.9, peer_factor=1.2):
    rows = [{"recipe": recipe, "method": "autoregressive", "exit_layer": 4, "n_draft": 0, "reuse": "",
             "ms_per_token": base_ms, "acceptance": float("nan"), "identical_to_greedy": True,
             "distinct_2": 0.9 if recipe == "ld_ee" else 0.1}]
    for exit_layer, acceptance in acceptance_by_exit.items():
        for n_draft in (2, 4):
            ms = base_ms * (0.5 + 0.1 * exit_layer) / (1 + acceptance)
            for reuse, factor in (("kvq", kvq_factor), ("none", 1.0)):
                rows.append({"recipe": recipe, "method": "self_speculative", "exit_layer": exit_layer,
                             "n_draft": n_draft, "reuse": reuse, "ms_per_token": ms * factor, "acceptance": acceptance,
                             "identical_to_greedy": True, "predicted_speedup": 1.5})
            rows.append({"recipe": recipe, "method": "hf_early_exit", "exit_layer": exit_layer, "n_draft": n_draft,
                         "reuse": "", "ms_per_token": ms * peer_factor, "acceptance": float("nan"),
                         "identical_to_greedy": True})
    return rows


def test_table_10_and_the_figure_tell_vocabulary_drafting_apart():
    rows = decode_rows("ld_ee", 10.0, {1: 0.6, 2: 0.8, 3: 0.95})
    for row in [r for r in rows if r["method"] == "self_speculative" and r["reuse"] == "kvq"]:
        rows.append({**row, "draft_vocab": True, "ms_per_token": row["ms_per_token"] / 3,
                     "acceptance": 1.0 - 0.1 * row["exit_layer"]})
    table = pd.DataFrame(rows)
    table["draft_vocab"] = table["draft_vocab"].fillna(False).astype(bool)
    table["speedup"] = [10.0 / ms for ms in table["ms_per_token"]]
    table["score"] = 0.5
    ten = tables.table_10(table)
    assert set(ten.loc[ten["method"] == "self_speculative", "draft"]) == {"head", "vocab"}
    assert (ten.loc[ten["method"] != "self_speculative", "draft"] == "").all()
    assert (ten["draft"] == "vocab").sum() == 6
    from rlib.layerskip import plots

    fig = plots.plot_self_speculation(table, "ld_ee", "self-speculation", goal=4.0)
    left, right = fig.axes
    assert len(right.lines) == 4  # d in (2, 4) x (whole head, task vocabulary)
    assert sorted(line.get_linestyle() for line in right.lines) == ["-", "-", "--", "--"]
    with pytest.raises(ValueError, match="recipe 'plain'"):
        plots.plot_self_speculation(table, "plain", "none")
