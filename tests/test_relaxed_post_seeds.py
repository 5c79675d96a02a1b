"""App. J's post-training seed study (`rlib.relaxed.post_seeds`): its presets refuse what cannot be a study, its seed-0
run on new tokens is the chapter grid's own post-training run (an equivalence test), its overlapped runs read only
windows the uptraining read, and `tables.paired` pairs by seed."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from rlib.config import ConfigError
from rlib.data import WindowSampler
from rlib.relaxed import experiments as ch02
from rlib.relaxed import post_seeds, tables
from rlib.relaxed.config import RelaxedConfig, RelaxedVariant
from rlib.relaxed.post_seeds import PostRun, PostSeedsConfig

SMOKE = RelaxedConfig.preset("smoke")


def test_presets_and_refusals():
    assert PostSeedsConfig.preset("cpu").seeds == ()
    long = PostSeedsConfig.preset("cpu-long")
    runs = post_seeds.study_runs(long)
    assert len(runs) == len(long.seeds) * 4 and len({r.name for r in runs}) == len(runs)
    for bad, says in ((dict(seeds=(0,), exits=("aggressive",), data=("new",)), ">= 2 seeds"),
                      (dict(seeds=(0, 1), exits=("weighted",), data=("new",)), "exits ['weighted'] unknown"),
                      (dict(seeds=(0, 1), exits=("aggressive",), data=("ovlp",)), "data ['ovlp'] unknown"),
                      (dict(seeds=(0, 1), exits=(), data=("new",)), "give all three"),
                      (dict(seeds=(0, 0), exits=("aggressive",), data=("new",)), "distinct")):
        with pytest.raises(ConfigError, match=says.replace("[", r"\[").replace("]", r"\]")):
            PostSeedsConfig(**bad)


def test_uptraining_indices_are_the_batches_the_uptraining_sampler_hands_out():
    cfg = RelaxedConfig.preset("cpu")
    indices = post_seeds.uptraining_indices(cfg, 1000)
    assert len(indices) == cfg.steps * cfg.batch_size == len(set(indices.tolist()))
    sampler = WindowSampler(1000, cfg.batch_size, seed=cfg.train_config(RelaxedVariant()).seed)
    assert indices[: cfg.batch_size].tolist() == next(iter(sampler))
    # a second epoch where the steps outrun one: every window once, then the next epoch's order
    assert sorted(post_seeds.uptraining_indices(cfg, 100)[:100].tolist()) == list(range(100))


def test_paired_subtracts_within_each_seed_only_where_both_runs_exist():
    table = pd.DataFrame([{"exit": e, "data": "new", "seed": s, "nll loop 1": v}
                          for s, e, v in ((0, "aggressive", 6.0), (0, "aggressive_kd", 5.9), (1, "aggressive", 6.2),
                                          (1, "aggressive_kd", 6.25), (2, "aggressive", 6.1))])
    diffs = tables.paired(table, "nll loop 1", "exit", "aggressive", "aggressive_kd", data="new")
    assert diffs.round(6).to_dict() == {0: -0.1, 1: 0.05}
    assert tables.paired(table, "nll loop 1", "exit", "aggressive", "aggressive_kd", data="overlapped").empty


def test_seed_0_on_new_tokens_is_the_grids_own_run_and_overlapped_reads_only_uptraining_windows(tmp_path,
                                                                                                  needs_assets):
    needs_assets(SMOKE.model, SMOKE.train_corpus)
    from rlib.recursive import experiments as recursive

    source = recursive.load_source(SMOKE)
    parent = RelaxedVariant("stepwise", 0)
    grid_run = dataclasses.replace(parent, exit="aggressive", phase="post")
    _, own = ch02.run_grid(SMOKE, tmp_path, source, None, runs=[parent, grid_run])
    study = PostSeedsConfig(seeds=(0, 1), exits=("aggressive",), data=post_seeds.DATA)
    results = {r["name"]: r for r in post_seeds.run(SMOKE, study, tmp_path, source, None)}
    new0 = results[PostRun("aggressive", "new", 0).name]
    for key in ("nll_loop1", "nll_loop2", f"nll[{SMOKE.train_corpus}]"):
        assert new0["after"][key] == own["after"][key]  # the same batches, loss and evaluation
    assert new0["train_seed"] == SMOKE.train_config(grid_run).seed
    for seed in study.seeds:
        ovlp = results[PostRun("aggressive", "overlapped", seed).name]
        assert ovlp["seen_in_uptraining"] == ovlp["windows"] == SMOKE.post_steps * SMOKE.batch_size
    table = tables.seeds_table(list(results.values()))
    assert list(table.columns) == ["exit", "data", "seed", "coef", "train_seed", "windows", "seen_in_uptraining",
                                   "train loss first", "train loss last", "nll loop 1", "nll loop 2"]
    assert len(table) == 4 and table["nll loop 1"].notna().all()
