"""Chapter 02 starts its plain recursive runs from chapter 01's models when the two chapters' recipes agree
(`rlib.relaxed.experiments.recipe_differences`, `rlib.recursive.experiments.shared_run`): an equivalence test (the
shared run's evaluation and loss curve equal a run trained in chapter 02 itself) and the cases that must train."""

from __future__ import annotations

import dataclasses

import pandas as pd

from rlib.recursive import experiments as ch01
from rlib.recursive.config import RecursiveConfig, Variant
from rlib.relaxed import experiments as ch02
from rlib.relaxed.config import RelaxedConfig, RelaxedVariant

RELAXED = RelaxedConfig.preset("smoke")
# chapter 01's smoke recipe brought to chapter 02's (steps, evaluation points, corpus); tasks off to stay quick
RECURSIVE = RecursiveConfig.preset("smoke").override(steps=RELAXED.steps, eval_every=RELAXED.eval_every,
                                                     keep_models=True, tasks=())
PLAIN = RelaxedVariant(init="stepwise", seed=0)


def test_only_a_plain_recursive_uptraining_has_a_twin():
    assert ch02.chapter01_twin(PLAIN, RECURSIVE) == Variant("recursive", RECURSIVE.init_loops, "stepwise", seed=0)
    for other in (dataclasses.replace(PLAIN, rank=8), dataclasses.replace(PLAIN, kd=True),
                  dataclasses.replace(PLAIN, steps_factor=2), dataclasses.replace(PLAIN, prefix=4),
                  RelaxedVariant(init="stepwise", exit="aggressive_kd", phase="post")):
        assert ch02.chapter01_twin(other, RECURSIVE) is None
        assert ch02.recipe_differences(RELAXED, RECURSIVE, other) == ["not a plain recursive uptraining"]


def test_recipe_differences_name_each_setting_that_differs():
    assert ch02.recipe_differences(RELAXED, RECURSIVE, PLAIN) == []
    smoke = RecursiveConfig.preset("smoke")  # 3 steps, evaluated every 3: not chapter 02's smoke recipe
    assert ch02.recipe_differences(RELAXED, smoke, PLAIN) == [
        "max_steps: 2 here, 3 in chapter 01", "eval_every: 2 here, 3 in chapter 01"]
    assert ch02.recipe_differences(RELAXED, RECURSIVE.override(lr=3e-3), PLAIN) == [
        "lr: 0.001 here, 0.003 in chapter 01"]
    assert ch02.recipe_differences(RELAXED, RECURSIVE.override(init_loops=3, loops=(3,)), PLAIN) == [
        "n_loops: 2 here, 3 in chapter 01"]


def test_the_cpu_presets_share_their_plain_recursive_runs():
    """The point of the sharing: chapter 02's cpu rank-0 runs are chapter 01's cpu runs, and chapter 01 keeps them."""
    cpu02, cpu01 = RelaxedConfig.preset("cpu"), RecursiveConfig.preset("cpu")
    plain = [v for v in ch02.variants(cpu02) if ch02.chapter01_twin(v, cpu01) is not None]
    assert {v.init for v in plain} == set(cpu02.inits)
    for v in plain:
        assert ch02.recipe_differences(cpu02, cpu01, v) == []
        twin = ch02.chapter01_twin(v, cpu01)
        assert twin in ch01.variants(cpu01) and ch01._keeps(twin, cpu01)


def test_a_shared_run_equals_one_trained_here(tmp_path, needs_assets):
    needs_assets(RECURSIVE.model, RECURSIVE.train_corpus)
    source = ch01.load_source(RECURSIVE)
    ch01_work = tmp_path / "01"
    twin = ch02.chapter01_twin(PLAIN, RECURSIVE)
    (trained01,) = ch01.run_grid(RECURSIVE, ch01_work, source, only=[twin.name])
    assert ch01.shared_run(RECURSIVE, ch01_work, twin) is not None
    assert ch01.shared_run(RECURSIVE.override(lr=3e-3), ch01_work, twin) is None  # another key: not current

    (shared,) = ch02.run_grid(RELAXED, tmp_path / "02a", source, None, runs=[PLAIN], chapter01=(RECURSIVE, ch01_work))
    (own,) = ch02.run_grid(RELAXED, tmp_path / "02b", source, None, runs=[PLAIN])
    assert shared["trained_by"].startswith(f"chapter 01's {twin.name}") and "trained_by" not in own
    assert shared["before"] == own["before"] and shared["after"] == own["after"]
    assert shared["train"]["tokens"] == own["train"]["tokens"] == trained01["train"]["tokens"]
    curves = [pd.read_csv(tmp_path / w / PLAIN.name / r["train_dir"] / "metrics.csv")
              for w, r in (("02a", shared), ("02b", own))]
    pd.testing.assert_series_equal(curves[0]["loss"], curves[1]["loss"])
    pd.testing.assert_series_equal(curves[0]["val_loss"], curves[1]["val_loss"])
    assert (tmp_path / "02a" / PLAIN.name / "model").exists() == (tmp_path / "02b" / PLAIN.name / "model").exists()
