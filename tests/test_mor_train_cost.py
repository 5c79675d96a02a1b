"""Sec. 3.1's training time and peak memory of MoR-2 vs vanilla (rlib.mor.train_cost): a real measurement in fresh
processes on the smoke shapes, its step bookkeeping, the paired-round ratios and the settings it refuses."""

from __future__ import annotations

import pytest

from rlib.config import ConfigError
from rlib.mor import MoRSpec, plots, train_cost
from rlib.mor.config import MoRConfig

SMOKE = MoRConfig.preset("smoke")


def test_one_measurement_times_the_steps_after_warmup_and_reads_a_peak_above_the_training_state():
    got = train_cost.measure_one(SMOKE, MoRSpec.expert(2), warmup=1, steps=2)
    assert len(got["step_s_all"]) == 2 and all(s > 0 for s in got["step_s_all"])
    assert min(got["step_s_all"]) <= got["step_s"] <= max(got["step_s_all"])
    # fp32 parameters: the state is parameters + gradients + AdamW's two moments, 16 bytes a parameter
    assert got["state_mib"] == pytest.approx(16 * got["params"] / 2**20)
    assert got["peak_mib"] > got["state_mib"]  # the activations of a step come on top
    vanilla = train_cost.measure_one(SMOKE, None, warmup=1, steps=1)
    assert vanilla["params"] > got["params"]  # Middle-Cycle with Nr=2 stores fewer layers


def test_rounds_pair_each_mor_measurement_with_its_own_rounds_vanilla(monkeypatch):
    script = iter([{"step_s": 2.0, "step_s_all": [2.0], "peak_mib": 100.0, "state_mib": 10.0, "params": 9,
                    "device": "cpu", "threads": 2},
                   {"step_s": 1.0, "step_s_all": [1.0], "peak_mib": 90.0, "state_mib": 6.0, "params": 6,
                    "device": "cpu", "threads": 2},
                   {"step_s": 3.0, "step_s_all": [3.0], "peak_mib": 80.0, "state_mib": 6.0, "params": 6,
                    "device": "cpu", "threads": 2},
                   {"step_s": 4.0, "step_s_all": [4.0], "peak_mib": 100.0, "state_mib": 10.0, "params": 9,
                    "device": "cpu", "threads": 2}])
    order = []

    def measure(cfg, spec, warmup, steps):
        order.append(spec and spec.n_recursions)
        return next(script)

    monkeypatch.setattr(train_cost, "measure_one", measure)
    table = train_cost.train_cost_table(SMOKE, rounds=2)
    assert order == [None, 2, 2, None]  # every model once a round, the order reversed every other round
    assert table["model"].tolist() == ["Vanilla", "MoR-2 EC"] * 2 and table["position"].tolist() == [0, 1, 1, 0]
    mor = table[table["model"] == "MoR-2 EC"]
    assert mor["step_s / vanilla"].tolist() == [0.5, 0.75]  # each over its own round's vanilla, not a pooled one
    assert mor["rest_mib"].tolist() == [84.0, 74.0]
    summary = train_cost.cost_summary(table).set_index("model")
    assert summary.loc["MoR-2 EC", "step_s ratio"] == 0.625
    assert (summary.loc["MoR-2 EC", "step_s ratio lo"], summary.loc["MoR-2 EC", "step_s ratio hi"]) == (0.5, 0.75)
    assert summary.loc["Vanilla", "peak_mib ratio"] == 1.0
    figure = plots.plot_train_cost(table, {"step time": 0.81, "peak memory": 0.75}, "test")
    assert len(figure.axes) == 2


def test_bad_settings_are_refused_before_any_process_starts():
    with pytest.raises(ValueError, match="warmup=0"):
        train_cost.measure_one(SMOKE, MoRSpec.expert(2), warmup=0, steps=2)
    with pytest.raises(ValueError, match="rounds=0"):
        train_cost.train_cost_table(SMOKE, rounds=0)
    with pytest.raises(ConfigError, match="cost_warmup=0"):
        SMOKE.override(cost_warmup=0)
