"""Fig. F.1(b)'s norm weights over seeds (`rlib.recursive.norm_seeds`): its presets, its runs are the chapter's own
variants (the grid's first seed read back, not trained again), and its table."""

from __future__ import annotations

import pytest

from rlib.config import ConfigError
from rlib.recursive import experiments as ch01
from rlib.recursive import norm_seeds
from rlib.recursive.config import RecursiveConfig, Variant, variants
from rlib.recursive.norm_seeds import NormSeedsConfig


def test_presets_refusals_and_the_chapters_own_names():
    assert NormSeedsConfig.preset("cpu").seeds == ()
    for bad in ((0,), (1, 1), (0, -1)):
        with pytest.raises(ConfigError, match="give none, or >= 2 distinct seeds"):
            NormSeedsConfig(seeds=bad)
    long = RecursiveConfig.preset("cpu-long")
    runs = norm_seeds.study_runs(long, NormSeedsConfig.preset("cpu-long"))
    assert len(runs) == 9 and {v.norm_init for v in runs} == set(norm_seeds.NORMS)
    first = [v for v in runs if v.seed == long.seeds[0]]
    assert set(first) <= set(variants(long))  # the grid's own runs at its first seed: read back, not trained again
    assert first[0].name == "recursive-B2-average-s0"


def test_the_studys_first_seed_is_the_grids_run_and_every_seed_has_all_three(tmp_path, needs_assets):
    cfg = RecursiveConfig.preset("smoke").override(tasks=(), inits=("stepwise", "average"))
    needs_assets(cfg.model, cfg.train_corpus)
    source = ch01.load_source(cfg)
    grid_run = Variant("recursive", cfg.init_loops, "average", seed=0)
    assert grid_run in variants(cfg)
    (own,) = ch01.run_grid(cfg, tmp_path, source, only=[grid_run.name])
    results = norm_seeds.run(cfg, NormSeedsConfig(seeds=(0, 1)), tmp_path)
    same = next(r for r in results if r["name"] == grid_run.name)
    assert same["after"] == own["after"] and same["train"] == own["train"]  # read back from the grid's folder
    table = norm_seeds.norm_seeds_table(results, cfg)
    assert sorted(zip(table["seed"], table["norm_init"])) == [(s, n) for s in (0, 1) for n in sorted(norm_seeds.NORMS)]
    assert table[f"after nll[{cfg.train_corpus}]"].notna().all()
