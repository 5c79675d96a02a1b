"""Table 2's data-shift pair at the paper's rate (`rlib.recursive.paper_rate`): its presets and refusals, its runs are
the chapter's variants trained at 2e-4 and nothing else changed, its table, and how the ledger's diagnosis of
`rrt.tab2.uptraining_shift_degrades` reads it."""

from __future__ import annotations

import dataclasses
import math

import pandas as pd
import pytest

from rlib.book.claims import check_ledger
from rlib.config import ConfigError
from rlib.recursive import experiments as ch01
from rlib.recursive import paper_rate
from rlib.recursive.claims import judge
from rlib.recursive.config import RecursiveConfig, variants
from rlib.recursive.paper_rate import PAPER_RATE, ShiftRateConfig

CLAIM = "rrt.tab2.uptraining_shift_degrades"


def test_presets_refusals_and_the_chapters_own_runs():
    assert ShiftRateConfig.preset("cpu").run and not ShiftRateConfig.preset("paper").run
    with pytest.raises(ConfigError, match="already uptrains at the paper's rate 0.0002"):
        paper_rate.rate_config(RecursiveConfig.preset("paper"))
    with pytest.raises(SystemExit):  # the command line refuses the paper profile before any training
        paper_rate.main(["--profile", "paper"])
    cfg = RecursiveConfig.preset("cpu")
    pair = paper_rate.shift_runs(cfg)
    assert set(pair) <= set(variants(cfg)) and [v.corpus for v in pair] == ["", cfg.shift_corpus]
    rated = paper_rate.rate_config(cfg)
    for variant in pair:  # everything that decides how the full model trains is the chapter's, the peak rate aside
        ours, theirs = dataclasses.asdict(cfg.train_config(variant)), dataclasses.asdict(rated.train_config(variant))
        assert {k for k in ours if ours[k] != theirs[k]} == {"lr"} and theirs["lr"] == PAPER_RATE
    assert rated.grid_context() != cfg.grid_context()  # keyed apart from the chapter's runs


def _result(name: str, corpus: str, ppl: dict[str, float], task_avg: float, home: str = "c") -> dict:
    variant = {"kind": "full", "n_loops": 1, "init": "stepwise", "norm_init": "average",
               "corpus": "" if corpus == home else corpus, "kd": False, "seed": 0}
    return {"name": name, "variant": variant, "corpus": corpus, "params": {"unique": 1, "non_embedding": 1},
            "train": {"tokens": 10, "tokens_per_s": 1.0}, "before": {},
            "after": {**{f"ppl[{c}]": p for c, p in ppl.items()}, "task[t]": task_avg, "task_avg": task_avg}}


CFG = RecursiveConfig.preset("smoke").override(train_corpus="c", shift_corpus="d", eval_corpora=("c", "d"),
                                               task_limit=40)
SOURCE = {"ppl[c]": 10.0, "ppl[d]": 10.0, "task[t]": 50.0, "task_avg": 50.0}


def _pair(own: float, task: float) -> list[dict]:
    return [_result("full-s0", "c", {"c": 10.0 * own, "d": 11.0}, task),
            _result("full@d-s0", "d", {"c": 11.0, "d": 10.0 * own}, task)]


def test_the_table_reads_both_rates_against_the_source():
    table = paper_rate.shift_rate_table(_pair(1.2, 45.0), _pair(0.9, 47.5), CFG, SOURCE)
    assert list(table["model"]) == ["full-size, not uptrained"] + ["full-size"] * 4
    assert table["lr"].isna().iloc[0] and list(table["lr"].iloc[1:]) == [CFG.lr] * 2 + [PAPER_RATE] * 2
    assert list(table["paper_rate"]) == [False, False, False, True, True]
    assert table["own_nll_change"].iloc[1:].round(4).tolist() == [0.1823] * 2 + [-0.1054] * 2
    assert table["task_avg_change"].iloc[1:].tolist() == [-5.0, -5.0, -2.5, -2.5]
    with pytest.raises(ConfigError, match="paper_rate.run"):
        paper_rate.shift_rate_table(_pair(1.2, 45.0), [], CFG, SOURCE)


@pytest.mark.parametrize("own, task, diagnosis, phrase", [
    (None, None, "setup", "needs: the full model uptrained at 2e-4 and lower"),
    (0.9, 45.0, "setup", "the claim holds at the paper's rate, so its failure here is the chapter's rate's"),
    (0.9, 55.0, "scale", "so the rate explains (a), but the few-shot average does not fall on every corpus; a "
                         "task-average change carries a standard error up to 11.2 points at 40 items a task, against "
                         "Table 2's -1.6; needs: about 7,"),
    (1.1, 45.0, "setup", "its own corpus gets worse at the paper's rate too"),
])
def test_the_diagnosis_of_a_rising_own_corpus_reads_the_paper_rate(own, task, diagnosis, phrase):
    written = {"data_shift": _shift_table(_pair(1.2, 45.0))}
    if own is not None:
        written["data_shift_paper_rate"] = paper_rate.shift_rate_table(_pair(1.2, 45.0), _pair(own, task), CFG,
                                                                       SOURCE)
    table = judge(written, CFG, "cpu").finish().set_index("id")
    row = table.loc[CLAIM]
    assert row["verdict"] == "not held" and row["diagnosis"] == diagnosis and phrase in row["evidence"]
    assert "task_avg -5.0 (s.e. 11.2)" in row["measured"]  # ours: sqrt((0.45 x 0.55 + 0.25) / 40), one task
    if own is not None:  # the paper-rate pair's own numbers, beside the chapter's
        assert f"at the paper's 0.0002 (App. E): uptrained on c: own NLL {math.log(own):+.3f}" in row["evidence"]
    assert check_ledger(table.reset_index()) == []


def _shift_table(results: list[dict]) -> pd.DataFrame:
    from rlib.recursive import tables

    return tables.shift_table(results, CFG, SOURCE)


def test_the_pair_trains_at_the_paper_rate_in_its_own_folder(tmp_path, needs_assets):
    cfg = RecursiveConfig.preset("smoke").override(tasks=())
    needs_assets(cfg.model, cfg.train_corpus, cfg.shift_corpus)
    source = ch01.load_source(cfg)
    chapter = ch01.run_grid(cfg, tmp_path, source, only=[v.name for v in paper_rate.shift_runs(cfg)])
    rated = paper_rate.run(cfg, ShiftRateConfig(run=True), tmp_path)
    assert [r["name"] for r in rated] == [r["name"] for r in chapter]
    assert (tmp_path / paper_rate.FOLDER / chapter[0]["name"] / "result.json").exists()
    assert not (tmp_path / paper_rate.FOLDER / chapter[0]["name"] / "model").exists()  # the study saves no model
    lrs = pd.read_csv(next((tmp_path / paper_rate.FOLDER / chapter[0]["name"]).glob("train-*/metrics.csv")))
    assert lrs["lr"].max() <= PAPER_RATE * (1 + 1e-6) < cfg.lr  # the schedule peaks at the paper's rate
    assert rated[0]["after"] != chapter[0]["after"]
    table = paper_rate.shift_rate_table(chapter, rated, cfg, ch01.source_result(cfg, source))
    assert len(table) == 5 and table["own_nll_change"].iloc[1:].notna().all()
    assert paper_rate.run(cfg, ShiftRateConfig(run=False), tmp_path) == []


def test_the_figure_draws_both_rates_for_each_corpus_beside_table_2():
    from rlib.book.figcheck import overlapping_labels
    from rlib.recursive import plots
    from rlib.recursive.claims import SHIFT_GAIN, SHIFT_TASK_CHANGE

    table = paper_rate.shift_rate_table(_pair(1.2, 45.0), _pair(0.9, 47.5), CFG, SOURCE)
    assert table["task_avg_change_se"].iloc[1:].notna().all() and table["task_avg_change_se"].isna().iloc[0]
    fig = plots.plot_shift_rates(table, -SHIFT_GAIN, SHIFT_TASK_CHANGE, "t")
    nll, task = fig.axes[:2]
    assert len(nll.patches) == len(task.patches) == 4  # 2 corpora x 2 rates
    heights = sorted(round(p.get_height(), 4) for p in nll.patches)
    assert heights == [-0.1054, -0.1054, 0.1823, 0.1823]
    assert any("the paper's" in t.get_text() for t in fig.legends[0].get_texts())
    assert overlapping_labels(fig) == []


def test_an_improving_own_corpus_without_a_task_drop_is_read_against_the_task_suites_resolution():
    table = judge({"data_shift": _shift_table(_pair(0.9, 55.0))}, CFG, "cpu").finish().set_index("id")
    row = table.loc[CLAIM]
    assert row["verdict"] == "not held" and row["diagnosis"] == "scale"
    assert "standard error up to 11.2 points at 40 items a task, against Table 2's -1.6" in row["evidence"]
