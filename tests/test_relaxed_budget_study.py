"""rlib.relaxed.budget_study: the main models and Fig. 6's rival uptrained 4x and 8x longer (Sec. 3.5, 3.6, App. I)."""

from __future__ import annotations

import dataclasses
import math

import pandas as pd
import pytest

from rlib.config import ConfigError
from rlib.relaxed import budget_study
from rlib.relaxed.config import RelaxedConfig, RelaxedVariant, variants

CFG = RelaxedConfig.preset("smoke")
LONG = RelaxedConfig.preset("cpu-long")


def test_the_study_config_refuses_1x_repeats_and_fractions():
    assert budget_study.BudgetStudyConfig.preset("cpu").empty
    study = budget_study.BudgetStudyConfig.preset("cpu-long")
    assert (study.factors, study.rival_factors) == ((4, 8), (2, 4, 8))
    for bad in ((1,), (4, 4), (2.5,), (0,), (True,)):
        with pytest.raises(ConfigError, match="factors"):
            budget_study.BudgetStudyConfig(factors=bad, rival_factors=())
        with pytest.raises(ConfigError, match="rival_factors"):
            budget_study.BudgetStudyConfig(factors=(), rival_factors=bad)
    assert (study.seeds, study.seed_factors) == ((1, 2), (4,))
    for seeds in ((0,), (1, 1), (True,), (1.5,)):
        with pytest.raises(ConfigError, match=r"seeds .* must be distinct whole numbers >= 1"):
            budget_study.BudgetStudyConfig(factors=(4,), rival_factors=(), seeds=seeds, seed_factors=(4,))
    for seeds, where in (((1,), ()), ((), (4,)), ((1,), (8,))):
        with pytest.raises(ConfigError, match="give both or neither"):
            budget_study.BudgetStudyConfig(factors=(4,), rival_factors=(), seeds=seeds, seed_factors=where)


def _result(variant: RelaxedVariant, nll: float, where=None, val: float | None = None) -> dict:
    result = {"name": variant.name, "variant": dataclasses.asdict(variant), "after": {"nll[c]": nll, "ppl[c]": 9.0,
                                                                                     "nll[gutenberg-poetry]": nll}}
    if where is not None:  # a training curve with one validation loss at its end
        train = where / variant.name / "train-k"
        train.mkdir(parents=True)
        pd.DataFrame({"step": [1, 2], "tokens": [0, 1], "loss": [9.0, 8.0],
                      "val_loss": [math.nan, val]}).to_csv(train / "metrics.csv", index=False)
        result["train_dir"] = "train-k"
    return result


def test_the_runs_are_the_chapters_main_models_and_its_best_other_relaxed_init_at_longer_schedules():
    top = max(LONG.ranks)
    chapter = [_result(RelaxedVariant("lower", top), 6.4), _result(RelaxedVariant("stepwise", top), 6.6),
               _result(RelaxedVariant("average", top), 7.2), _result(RelaxedVariant("lower", 0), 6.0),
               _result(RelaxedVariant("stepwise", top, kd=True), 5.0)]  # r=0 and KD runs are not Fig. 6's rival
    assert budget_study.fig6_rival(chapter, LONG) == "lower"
    assert budget_study.fig6_rival(chapter[2:3], LONG) is None
    runs = budget_study.study_runs(LONG, budget_study.BudgetStudyConfig.preset("cpu-long"), "lower")
    assert [v.name for v in runs] == ["stepwise-r0-x4-s0", f"average-r{top}-svd-x4-s0", "stepwise-r0-x8-s0",
                                      f"average-r{top}-svd-x8-s0", f"lower-r{top}-svd-x2-s0",
                                      f"lower-r{top}-svd-x4-s0", f"lower-r{top}-svd-x8-s0",
                                      "stepwise-r0-x4-s1", f"average-r{top}-svd-x4-s1",
                                      "stepwise-r0-x4-s2", f"average-r{top}-svd-x4-s2"]  # the seeds at 4x
    # the chapter's own longer runs are these runs under the same keys: the same variants, only steps_factor set
    chapter_long = {v for v in variants(LONG) if v.steps_factor > 1 and not v.kd}
    assert chapter_long <= {dataclasses.replace(v, steps_factor=LONG.long_factor) for v in runs}
    assert budget_study.study_runs(LONG, budget_study.BudgetStudyConfig(factors=(4,), rival_factors=(2,)), None) \
        == runs[:2]


def test_the_budget_table_lists_each_longer_model_at_every_factor_once(tmp_path):
    top = max(CFG.ranks)
    step, avg, lower = RelaxedVariant("stepwise", 0), RelaxedVariant("average", top), RelaxedVariant("lower", top)
    longer = lambda v, f: dataclasses.replace(v, steps_factor=f)  # noqa: E731
    results = [_result(step, 6.4, tmp_path, 6.5), _result(avg, 7.2, tmp_path, 7.1), _result(lower, 6.3),
               _result(RelaxedVariant("lower", 0), 6.5),
               _result(dataclasses.replace(avg, kd=True, steps_factor=2), 6.0),
               _result(longer(step, 4), 5.8, tmp_path, 5.9), _result(longer(avg, 4), 6.3), _result(longer(avg, 2), 6.6),
               _result(avg, 7.2)]  # a repeat of the chapter's 1x run is listed once
    table = budget_study.budget_table(results, CFG, tmp_path)
    assert list(zip(table["init"], table["steps_factor"])) == [("average", 1), ("average", 2), ("average", 4),
                                                               ("stepwise", 1), ("stepwise", 4)]
    assert table["after nll[c]"].tolist() == [7.2, 6.6, 6.3, 6.4, 5.8]
    assert "after ppl[c]" not in table  # lower has no longer run: not listed; the KD run is not plain
    assert table.loc[3, "last_val_loss"] == pytest.approx(6.5) and math.isnan(table.loc[1, "last_val_loss"])
    assert table["tokens"].tolist() == [CFG.steps * f * CFG.batch_size * CFG.seq_len for f in (1, 2, 4, 1, 4)]
    assert budget_study.budget_table(results[:4], CFG, tmp_path).empty  # no longer run, no table
    assert table["seed"].tolist() == [0] * 5
    # the study's other seeds at a longer factor are listed, each once; Table G.1's 1x seeds are not
    seeded = results + [_result(dataclasses.replace(avg, steps_factor=4, seed=1), 6.4),
                        _result(dataclasses.replace(avg, seed=1), 7.3)]
    table = budget_study.budget_table(seeded, CFG, tmp_path)
    assert list(zip(table["steps_factor"], table["seed"]))[:4] == [(1, 0), (2, 0), (4, 0), (4, 1)]
    assert table["after nll[c]"].tolist() == [7.2, 6.6, 6.3, 6.4, 6.4, 5.8]


def test_the_command_line_refuses_a_profile_without_the_study_before_any_work(capsys):
    with pytest.raises(SystemExit) as stop:
        budget_study.main(["--profile", "cpu"])
    assert stop.value.code == 2 and "has no runs for this study" in capsys.readouterr().err
