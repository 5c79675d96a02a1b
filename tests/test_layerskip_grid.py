"""Chapter 05's grid (rlib.layerskip.grid): recipes wire the right dropout and loss, run lists, bad configs, and one
smoke run end to end on the corpus."""

from __future__ import annotations

import pytest

from rlib.config import ConfigError
from rlib.layerskip import grid
from rlib.train import train
from tests.test_looping import ids


def test_recipes_set_dropout_and_exit_loss_as_named():
    cfg = grid.LayerSkipConfig.preset("cpu")
    windows = ids(2, 8)
    seen = {}
    for recipe in grid.RECIPES:
        model, hook, probe, tcfg = grid.build(grid.LayerSkipRun(recipe, 0), cfg, 64, windows)
        seen[recipe] = (model.p_max, model.layer_schedule, hook.e_scale, hook.curriculum)
        assert model.n_layers == cfg.n_layers and model.time_schedule == "exp" and hook.rotation == cfg.n_layers - 1
        assert probe.exits == (6, 12) and tcfg.max_steps == cfg.steps == 400
        assert model.decoder.lm_head is not None  # untied, as the paper's Llama models
    assert seen["baseline"] == (0.0, "exp", 0.0, "rotational")
    assert seen["ld"] == (0.2, "exp", 0.0, "rotational") and seen["ld_const"] == (0.2, "constant", 0.0, "rotational")
    assert seen["ee"] == (0.0, "exp", 0.2, "rotational") and seen["ld_ee"] == (0.2, "exp", 0.2, "rotational")
    assert seen["ee_all"][3] == "all" and seen["ee_gradual"][3] == "gradual"
    names = [r.name for r in grid.runs(cfg)]
    assert len(set(names)) == len(names) == len(grid.RECIPES) + len(cfg.spread_recipes) * (len(cfg.seeds) - 1)
    assert {r.recipe for r in grid.runs(cfg) if r.seed != cfg.seeds[0]} == set(cfg.spread_recipes)


def test_a_built_run_trains(tmp_path):
    cfg = grid.LayerSkipConfig.preset("smoke")
    model, hook, probe, tcfg = grid.build(grid.LayerSkipRun("ld_ee", 0), cfg, 128, ids(2, cfg.seq_len))
    train(model, ids(8, cfg.seq_len, seed=3), tcfg, tmp_path, hooks=[hook, probe])
    assert [r["step"] for r in probe.final(cfg.steps)] == [0, 2, 4]


def test_bad_configs_fail_before_any_work():
    cfg = grid.LayerSkipConfig.preset("smoke")
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


def test_run_cached_computes_each_item_once_per_key(tmp_path):
    from rlib import experiments

    calls = []

    def compute(run, key):
        calls.append(run.name)
        return {"name": run.name, "key": key}

    items = grid.runs(grid.LayerSkipConfig.preset("smoke"))
    first = experiments.run_cached(items, tmp_path, ("a",), ("rlib.layerskip.grid",), compute)
    again = experiments.run_cached(items, tmp_path, ("a",), ("rlib.layerskip.grid",), compute)
    assert first == again and calls == [r.name for r in items]
    experiments.run_cached(items[:1], tmp_path, ("b",), ("rlib.layerskip.grid",), compute)  # new settings: rerun
    assert calls[-1] == items[0].name and len(calls) == len(items) + 1
