"""Chapter 05's from-scratch grid (rlib.layerskip.config / experiments): recipes wire the right dropout and loss, run
lists, bad configs, and one
smoke run end to end on the corpus."""

from __future__ import annotations

import pytest

from rlib.config import ConfigError
from rlib.layerskip import config, experiments
from rlib.train import train
from tests.test_looping import ids


def test_recipes_set_dropout_and_exit_loss_as_named():
    cfg = config.LayerSkipConfig.preset("cpu-long")
    windows = ids(2, 8)
    seen = {}
    for recipe in config.RECIPES:
        model, hook, probe, tcfg = experiments.build(config.LayerSkipRun(recipe, 0), cfg, 64, windows)
        seen[recipe] = (model.p_max, model.layer_schedule, hook.e_scale, hook.curriculum)
        expected_time = "constant" if recipe == "ld_tconst" else "exp"  # Sec. 4.1.1's S(t) = 1 against S_exp
        assert model.n_layers == cfg.n_layers and model.time_schedule == expected_time
        assert hook.rotation == cfg.n_layers - 1
        assert probe.exits == (6, 12) and tcfg.max_steps == cfg.steps == 400
        assert model.decoder.lm_head is not None  # untied, as the paper's Llama models
    assert seen["baseline"] == (0.0, "exp", 0.0, "rotational")
    assert seen["ld"] == (0.2, "exp", 0.0, "rotational") and seen["ld_const"] == (0.2, "constant", 0.0, "rotational")
    assert seen["ld_tconst"] == seen["ld"]  # only the time schedule differs
    assert seen["ee"] == (0.0, "exp", 0.2, "rotational") and seen["ld_ee"] == (0.2, "exp", 0.2, "rotational")
    assert seen["ee_all"][3] == "all" and seen["ee_gradual"][3] == "gradual"
    names = [r.name for r in config.scratch_runs(cfg)]
    assert len(set(names)) == len(names) == len(config.RECIPES) + len(cfg.spread_recipes) * (len(cfg.seeds) - 1)
    assert {r.recipe for r in config.scratch_runs(cfg) if r.seed != cfg.seeds[0]} == set(cfg.spread_recipes)
    short = config.LayerSkipConfig.preset("cpu")  # the decoding tables' two models, under cpu-long's keys
    assert [r.name for r in config.scratch_runs(short)] == ["baseline-s0", "ld_ee-s0"]
    assert short.training_key() == cfg.training_key()


def test_a_built_run_trains(tmp_path):
    cfg = config.LayerSkipConfig.preset("smoke")
    model, hook, probe, tcfg = experiments.build(config.LayerSkipRun("ld_ee", 0), cfg, 128, ids(2, cfg.seq_len))
    train(model, ids(8, cfg.seq_len, seed=3), tcfg, tmp_path, hooks=[hook, probe])
    assert [r["step"] for r in probe.final(cfg.steps)] == [0, 2, 4]


def test_bad_configs_fail_before_any_work():
    cfg = config.LayerSkipConfig.preset("smoke")
    with pytest.raises(ConfigError, match=r"recipes \['dropout'\] unknown"):
        cfg.override(recipes=("baseline", "dropout"))
    with pytest.raises(ConfigError, match="must include 'baseline'"):
        cfg.override(recipes=("ld",))
    with pytest.raises(ConfigError, match="curriculum='cyclic'"):
        cfg.override(curriculum="cyclic")
    with pytest.raises(ConfigError, match=r"spread_recipes \['ld'\] are not among recipes"):
        cfg.override(spread_recipes=("ld",))
    with pytest.raises(ConfigError, match="n_layers=2"):
        cfg.override(n_layers=2)


def test_a_run_is_keyed_on_its_own_recipe_and_seed_not_the_list_of_runs():
    from dataclasses import replace

    cfg = config.LayerSkipConfig.preset("cpu")
    fewer = replace(cfg, recipes=("baseline", "ld_ee"), seeds=(0,), spread_recipes=())
    resampled = replace(cfg, decode_temperature=0.5, decode_prompts=3)
    assert cfg.training_key() == fewer.training_key() == resampled.training_key()
    assert cfg.training_key() != replace(cfg, steps=cfg.steps + 1).training_key()
    with pytest.raises(ConfigError, match="decode_temperature"):
        replace(cfg, decode_temperature=-1.0)
