"""Chapter 03's run keys: every module that builds, trains or scores a run is in them, and an ablation row reaches
them through its run's whole MoRSpec (rlib.mor.ablations is outside CODE_MODULES, so correcting one row re-keys
that row's run only)."""

from __future__ import annotations

import dataclasses

from rlib import experiments as grid
from rlib.mor import ablations, experiments
from rlib.mor.config import MoRConfig, variants


def test_the_modules_that_build_train_and_score_a_run_are_in_its_key():
    needed = {"rlib.mor.model", "rlib.mor.routers", "rlib.mor.relaxation", "rlib.mor.spec", "rlib.model.decoder",
              "rlib.model.layers", "rlib.model.init", "rlib.model.cache", "rlib.model.lora", "rlib.relax",
              "rlib.looping", "rlib.train", "rlib.data", "rlib.eval", "rlib.mor.analysis"}
    assert needed <= set(experiments.CODE_MODULES)
    assert "rlib.mor.ablations" not in experiments.CODE_MODULES


def test_a_corrected_ablation_row_re_keys_its_run_only(monkeypatch):
    long = MoRConfig.preset("cpu-long")

    def keys() -> dict[str, str]:
        return {v.name: grid.digest(v, long.grid_context()) for v in variants(long)}

    before = keys()
    routing, changes = ablations.ROUTER_ABLATIONS["tc_mlp"]
    monkeypatch.setitem(ablations.ROUTER_ABLATIONS, "tc_mlp", (routing, {**changes, "alpha": 0.5}))
    after = keys()
    changed = [name for name in before if before[name] != after.get(name)]
    assert len(changed) == 1 and "tc_mlp" in changed[0]
    (run,) = [v for v in variants(long) if v.tag == "tc_mlp"]
    assert dataclasses.asdict(run.spec)["alpha"] == 0.5
