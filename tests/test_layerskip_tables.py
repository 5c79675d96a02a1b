"""Chapter 05's tables and training claims (rlib.layerskip.tables) on hand-made run records."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from rlib.layerskip import tables


def record(recipe, seed, mid_nll, last_nll, final_loss=3.0, step_seconds=0.1, probe_mid=(5.0, 4.0, 3.5),
           agree_mid=None):
    nll = [mid_nll + 1.0, mid_nll, (mid_nll + last_nll) / 2, last_nll]  # exits 1..4, middle = 2
    return {"recipe": recipe, "seed": seed, "step_seconds": step_seconds,
            "exits": {"exit_layer": [1, 2, 3, 4], "nll": nll, "ppl": [math.exp(x) for x in nll],
                      "top1_acc": [0.1, 0.2, 0.3, 0.4],
                      "agree_last": [0.2, 0.5 if agree_mid is None else agree_mid, 0.8, 1.0]},
            "probe": [{"step": 10 * i, "nll_exit_2": v, "nll_exit_4": 3.0} for i, v in enumerate(probe_mid)],
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


def test_training_claims_follow_the_numbers():
    claims = tables.training_claims(results(), middle=2, last=4).set_index("claim")["held"]
    assert list(claims) == ["held"] * 6
    assert "50.0 % of positions (baseline) vs 65.0 %" in tables.training_claims(results(), 2, 4)["evidence"].iloc[1]
    worse = [r for r in results() if r["recipe"] != "ld_ee"] + [record("ld_ee", 0, 5.9, 3.5, agree_mid=0.4)]
    held = tables.training_claims(worse, middle=2, last=4)["held"]
    assert held.iloc[0] == "not held" and held.iloc[1] == "not held"


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


def test_decoding_claims_follow_the_numbers():
    import pandas as pd

    rows = decode_rows("ld_ee", 10.0, {1: 0.6, 2: 0.8, 3: 0.95}) + decode_rows("baseline", 10.0, {1: 0.0, 2: 0.0,
                                                                                                   3: 0.05})
    table = pd.DataFrame(rows)
    table["speedup"] = [10.0 / ms for ms in table["ms_per_token"]]
    claims = tables.decoding_claims(table).set_index("claim")["held"]
    assert len(claims) == 6
    assert list(claims)[:2] == ["held", "held"] and claims.iloc[2] == "not held"  # baseline E=1..3 still speeds up
    assert claims.iloc[3] == "held" and claims.iloc[5] == "held"
    assert "distinct-2 (1 = no repeated bigram): baseline 0.10, LayerSkip 0.90" in claims.index[2] + \
        tables.decoding_claims(table)["evidence"].iloc[2]
    table.loc[table["method"] == "hf_early_exit", "identical_to_greedy"] = [False] + [True] * 11
    assert tables.decoding_claims(table)["held"].iloc[0] == "not held"


def test_speedup_goal_needs_output_that_is_not_a_loop():
    import pandas as pd

    table = pd.DataFrame(decode_rows("ld_ee", 10.0, {1: 0.9, 2: 0.95}))
    table["speedup"] = [10.0 / ms for ms in table["ms_per_token"]]
    speedup = tables.decoding_claims(table, goal=1.2).set_index("claim")
    (name,) = [c for c in speedup.index if c.startswith("Self-speculation vs autoregressive")]
    assert speedup.loc[name, "held"] == "held" and "distinct-2 0.90" in speedup.loc[name, "evidence"]
    table.loc[table["method"] == "autoregressive", "distinct_2"] = 0.2  # the same speedup on a greedy loop
    looping = tables.decoding_claims(table, goal=1.2).set_index("claim")
    assert looping.loc[name, "held"] == "not held" and "distinct-2 0.20" in looping.loc[name, "evidence"]


def test_vocabulary_drafting_rows_get_their_own_claim_and_leave_the_papers_alone():
    import pandas as pd

    from rlib.layerskip import tables as parse_tables

    rows = decode_rows("ld_ee", 10.0, {1: 0.6, 2: 0.8, 3: 0.95})
    for row in [r for r in rows if r["method"] == "self_speculative" and r["reuse"] == "kvq"]:
        # faster, but acceptance falling with E: counted in the paper's claims, these rows would flip two of them
        rows.append({**row, "draft_vocab": True, "ms_per_token": row["ms_per_token"] / 3,
                     "acceptance": 1.0 - 0.1 * row["exit_layer"]})
    table = pd.DataFrame(rows)
    table["draft_vocab"] = table["draft_vocab"].fillna(False).astype(bool)
    table["speedup"] = [10.0 / ms for ms in table["ms_per_token"]]
    claims = tables.decoding_claims(table, goal=4.0).set_index("claim")
    paper = pd.DataFrame([r for r in rows if not r.get("draft_vocab")])
    paper["speedup"] = [10.0 / ms for ms in paper["ms_per_token"]]
    alone = tables.decoding_claims(paper, goal=4.0).set_index("claim")
    assert claims.drop(index=[c for c in claims.index if c.startswith("Beyond the paper")]).iloc[1:].equals(
        alone.iloc[1:])  # the exactness claim counts every setting: 18 + 6 here
    assert "18 of 18" in alone["evidence"].iloc[0] and "24 of 24" in claims["evidence"].iloc[0]
    (name,) = [c for c in claims.index if c.startswith("Beyond the paper")]
    paper_best = [c for c in alone.index if c.startswith("Self-speculation vs")][0]
    assert alone.loc[paper_best, "held"] == "not held" and claims.loc[name, "held"] == "held"
    table.loc[table["draft_vocab"], "identical_to_greedy"] = [False] + [True] * 5
    assert tables.decoding_claims(table, goal=4.0).set_index("claim").loc[name, "held"] == "not held"

    table["score"] = 0.5
    ten = parse_tables.table_10(table)
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


def _ablation(ar_off: float, ar_on: float, exact: bool = True) -> pd.DataFrame:
    rows = []
    for fast, ar in ((False, ar_off), (True, ar_on)):
        rows.append({"method": "autoregressive", "label": "autoregressive", "ms_per_token": ar, "speedup": 1.0,
                     "identical_to_greedy": True, "fast_matmul": fast, "score": 0.5})
        rows.append({"method": "self_speculative", "label": "self_speculative E=8 d=3 kvq", "ms_per_token": ar / 1.2,
                     "speedup": 1.2 if not fast else 1.4, "identical_to_greedy": exact, "fast_matmul": fast,
                     "score": 0.5})
    return pd.DataFrame(rows)


def test_matmul_claims_follow_the_numbers():
    held = tables.matmul_claims(_ablation(60.0, 50.0), scope="parsing")
    assert held["held"].tolist() == ["held"] and held["claim"].iloc[0].startswith("parsing: Beyond the paper")
    assert "60.0 ms/token off vs 50.0 on" in held["evidence"].iloc[0]
    assert "1.20x off, 1.40x on" in held["evidence"].iloc[0]
    assert tables.matmul_claims(_ablation(50.0, 60.0))["held"].tolist() == ["not held"]  # slower
    assert tables.matmul_claims(_ablation(60.0, 50.0, exact=False))["held"].tolist() == ["not held"]  # not exact
