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


def test_exit_plot_takes_a_table_without_coefficient_sweep_rows():
    """The cpu profile leaves Table J.1's sweep to cpu-long: every `sweep` is False and the labels stay plain."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from rlib.relaxed.plots import plot_exits

    table = pd.DataFrame({"model": ["recursive", "recursive"], "phase": ["post", "post"],
                          "exit": ["none", "aggressive"], "coef": [float("nan"), 0.1], "sweep": [False, False],
                          "nll loop 1": [7.0, 6.5], "nll loop 2": [6.2, 6.25]})
    table = table.astype({"model": "string", "phase": "string", "exit": "string"})
    fig = plot_exits(table, 2, "exits")
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels == ["recursive · post none", "recursive · post aggressive"]
    plt.close(fig)


def test_the_serving_warm_up_runs_one_batch_of_short_replies():
    from rlib.relaxed.throughput import WARM_UP_TOKENS, warm_up_requests
    from rlib.serving import Request

    reqs = [Request(i, [1, 2, 3], n) for i, n in enumerate([3, 40, 256, 9])]
    warm = warm_up_requests(reqs, 3)
    assert [r.id for r in warm] == [0, 1, 2] and [r.prompt for r in warm] == [[1, 2, 3]] * 3
    assert [r.max_new_tokens for r in warm] == [3, WARM_UP_TOKENS, WARM_UP_TOKENS]
    assert [r.max_new_tokens for r in reqs] == [3, 40, 256, 9]  # the timed requests are untouched
