"""rlib.relaxed.average_rate: the relaxed Average trained again at other peak rates (Sec. 3.5, App. E)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from rlib.config import ConfigError
from rlib.relaxed import average_rate
from rlib.relaxed.config import RelaxedConfig

CFG = RelaxedConfig.preset("smoke")


def test_the_study_config_refuses_1x_repeats_and_bad_multiples():
    assert average_rate.AverageRateConfig.preset("cpu").multipliers == ()
    assert average_rate.AverageRateConfig.preset("cpu-long").multipliers == (0.2, 3.0, 10.0)
    for bad in ((1.0,), (3.0, 3.0), (-2.0,), (math.inf,)):
        with pytest.raises(ConfigError, match="multipliers"):
            average_rate.AverageRateConfig(multipliers=bad)


def test_a_run_at_a_multiple_is_the_chapters_main_relaxed_run_with_only_the_rate_scaled():
    scaled = average_rate.at_multiple(CFG, 3.0)
    assert scaled.lr == pytest.approx(3 * CFG.lr)
    assert {k: v for k, v in scaled.to_dict().items() if k != "lr"} == \
        {k: v for k, v in CFG.to_dict().items() if k != "lr"}
    variant = average_rate.study_variant(CFG)
    assert (variant.init, variant.rank, variant.lora_init, variant.phase) == ("average", max(CFG.ranks), "svd",
                                                                              "uptrain")


def _result(name: str, where, losses: list[float], nll: float, **extra) -> dict:
    train = where / name / "train-k"
    train.mkdir(parents=True)
    pd.DataFrame({"step": range(1, len(losses) + 1), "tokens": range(len(losses)), "loss": losses,
                  "val_loss": [math.nan] * (len(losses) - 1) + [losses[-1] + 0.1]}).to_csv(train / "metrics.csv",
                                                                                       index=False)
    return {"name": name, "train_dir": "train-k", "after": {"nll[shakespeare]": nll, "ppl[shakespeare]": 1.0},
            **extra}


def test_the_rate_table_puts_the_chapters_run_beside_the_studys_with_their_curves(tmp_path):
    name = average_rate.study_variant(CFG).name
    chapter = [_result(name, tmp_path / "chapter", [9.0, 12.0, 7.0], 7.5)]
    study = [_result(name, tmp_path / "lr-x3", [9.0, 8.0, 6.0], 6.5, lr=3 * CFG.lr, multiple=3.0,
                     folder=str(tmp_path / "lr-x3"))]
    table = average_rate.rate_table(study, chapter, CFG, tmp_path / "chapter")
    assert list(table["multiple"]) == [1.0, 3.0] and list(table["after nll[shakespeare]"]) == [7.5, 6.5]
    assert list(table["climbs"]) == [True, False] and list(table["peak_loss"]) == [12.0, 9.0]
    assert table["last_val_loss"].tolist() == pytest.approx([7.1, 6.1])
    assert "after ppl[shakespeare]" not in table.columns
    assert average_rate.rate_table([], chapter, CFG, tmp_path).empty  # no study, no table
    with pytest.raises(ConfigError, match="no average-r"):
        average_rate.rate_table(study, [], CFG, tmp_path)


def test_the_command_line_refuses_a_profile_without_the_study_before_any_work(capsys):
    with pytest.raises(SystemExit) as stop:
        average_rate.main(["--profile", "cpu"])
    assert stop.value.code == 2 and "has no runs for this study" in capsys.readouterr().err
