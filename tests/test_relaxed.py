"""rlib.relaxed (chapter 02's grid): presets, variants and their dependencies, configuration errors."""

from __future__ import annotations

import dataclasses

import pytest

from rlib.config import ConfigError
from rlib.relaxed.config import RelaxedConfig, RelaxedVariant, main_variants, variants


@pytest.mark.parametrize("profile", ["smoke", "cpu", "gpu", "paper"])
def test_every_preset_builds_and_post_training_runs_follow_their_parents(profile):
    cfg = RelaxedConfig.preset(profile)
    runs = variants(cfg)
    names = [v.name for v in runs]
    assert len(names) == len(set(names))
    for i, v in enumerate(runs):
        if v.parent is not None:
            assert v.parent.name in names[:i], (v.name, v.parent.name)
    for main in main_variants(cfg):
        assert main.name in names


def test_cpu_grid_covers_the_claims():
    cfg = RelaxedConfig.preset("cpu")
    runs = variants(cfg)
    uptrained = {(v.init, v.rank, v.lora_init) for v in runs if v.phase == "uptrain" and not v.kd
                 and v.steps_factor == 1}
    for init in cfg.inits:
        ranks = cfg.ranks if init in cfg.rank_inits else (max(cfg.ranks),)
        assert {(init, 0, "svd")} | {(init, r, "svd") for r in ranks} <= uptrained
    assert {(i, max(cfg.ranks), "zero") for i in ("average", "lower")} <= uptrained
    post = {(v.rank, v.exit) for v in runs if v.phase == "post"}
    assert {(0, "none"), (0, "aggressive")} <= post
    assert cfg.train_config(RelaxedVariant(phase="post", exit="aggressive")).max_steps == cfg.post_steps
    assert cfg.train_config(RelaxedVariant(steps_factor=2)).max_steps == 2 * cfg.steps
    assert cfg.train_config(RelaxedVariant(phase="post", exit="none")).seed != cfg.train_config(RelaxedVariant()).seed


def test_bad_settings_name_the_value():
    cfg = RelaxedConfig.preset("cpu")
    with pytest.raises(ConfigError, match=r"exit_schedules \['greedy'\] unknown"):
        cfg.override(exit_schedules=("greedy",))
    with pytest.raises(ConfigError, match="n_loops=1"):
        cfg.override(n_loops=1)
    with pytest.raises(ConfigError, match="phase 'later' unknown"):
        RelaxedVariant(phase="later")
    with pytest.raises(ConfigError, match="'uptrain' has no exit loss"):
        RelaxedVariant(exit="weighted")
    assert dataclasses.replace(RelaxedVariant("average", 64), exit="weighted", phase="co").name == \
        "average-r64-svd-co_weighted-s0"
