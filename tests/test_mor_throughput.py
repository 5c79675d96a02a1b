"""rlib.mor.throughput (Fig. 4a's measurement): every round times all models back to back, and the speed-up is the
median of each round's paired ratio to vanilla, with the rounds' smallest and largest beside it. The engine is
replaced by one whose speed is set per model and per round, so the arithmetic is checked exactly; the real engine runs
in the smoke book."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from rlib.mor import throughput
from rlib.mor.config import MoRConfig, MoRVariant
from rlib.mor.experiments import MAIN

SMOKE = MoRConfig.preset("smoke")
# decode tokens/s per model and round; round 1 is a slow spell of the machine that hits every model alike
SPEED = {"Vanilla": (100.0, 50.0, 100.0), "Recursive": (110.0, 55.0, 104.0), "MoR EC": (120.0, 61.0, 96.0),
         "MoR EC KV share": (130.0, 64.0, 125.0), "MoR TC": (90.0, 45.0, 92.0)}


def _names() -> dict[str, str]:
    n = SMOKE.n_recursions
    specs = {"Vanilla": None, "Recursive": MAIN["rec"](n), "MoR EC": MAIN["ec"](n),
             "MoR EC KV share": MAIN["ec-share"](n), "MoR TC": MAIN["tc"](n)}
    return {MoRVariant(spec, "flops", SMOKE.seeds[0]).name: label for label, spec in specs.items()}


@pytest.fixture
def fake_engines(monkeypatch):
    names, calls = _names(), SimpleNamespace(labels=[], requests=[])

    class Engine:
        def __init__(self, label: str, max_batch: int):
            self.label, self.max_batch, self.runs = label, max_batch, 0

        def run(self, requests):
            calls.labels.append(self.label)
            calls.requests.append(requests)
            speed = SPEED[self.label][self.runs] * (1 + 0.01 * (self.max_batch > 2))  # B = Max a little faster
            self.runs += 1
            return SimpleNamespace(decode_tokens_per_s=speed, tokens_per_s=speed / 2, mean_exit_loop=2.0,
                                   mean_busy=float(len(requests)))

    monkeypatch.setattr(throughput, "load_model", lambda work, name: names[name])
    monkeypatch.setattr(throughput, "make_engine", lambda label, max_batch, max_len: Engine(label, max_batch))
    monkeypatch.setattr(throughput.MoRConfig, "text", lambda self: SimpleNamespace(
        heldout=lambda split, n, seed=0: torch.zeros(n, self.seq_len, dtype=torch.long)))
    return calls


def test_rounds_pair_every_model_with_vanilla(fake_engines):
    results = [{"name": name, "after": {"nll": 6.0}} for name in _names()]
    table = throughput.throughput_table(SMOKE, "unused", results, repeats=3).set_index(["model", "setting"])
    # each round runs every engine once, vanilla first: a slow spell hits a whole round, never one model
    labels = fake_engines.labels
    assert len(labels) == 3 * len(table) and labels[: len(table)][0] == "Vanilla"
    assert labels[: len(table)] == labels[len(table): 2 * len(table)]
    mor = table.loc[("MoR EC", "B")]  # ratios 1.20, 1.22, 0.96 (the last round's MoR was slow)
    assert mor["speedup_vs_vanilla"] == pytest.approx(1.20)
    assert (mor["speedup_lo"], mor["speedup_hi"]) == (pytest.approx(0.96), pytest.approx(1.22))
    assert mor["decode_tokens_per_s"] == pytest.approx(96.0)  # the median round's throughput
    assert table.loc[("Vanilla", "B"), "speedup_lo"] == table.loc[("Vanilla", "B"), "speedup_hi"] == 1.0
    assert (table["rounds"] == 3).all()


def test_every_model_serves_the_same_requests_of_app_d_varied_lengths(fake_engines):
    """App. D: each request's generation length is drawn from a normal distribution; every model and round serves
    the same requests, so the lengths never favour one model."""
    results = [{"name": name, "after": {"nll": 6.0}} for name in _names()]
    table = throughput.throughput_table(SMOKE, "unused", results, repeats=2)
    first = fake_engines.requests[0]
    assert all(reqs == first for reqs in fake_engines.requests)
    lengths = [r.max_new_tokens for r in first]
    mean = max(2, SMOKE.seq_len // 8)
    assert len(set(lengths)) > 1 and min(lengths) >= 1 and max(lengths) <= 2 * mean - 1
    assert all(len(r.prompt) == mean for r in first)
    assert table["new_tokens_mean"].iloc[0] == pytest.approx(np.mean(lengths))
    assert table["new_tokens_sd"].iloc[0] == pytest.approx(np.std(lengths))
    assert (table["requests"] == len(first)).all()


def test_repeats_must_be_positive(fake_engines):
    with pytest.raises(ValueError, match="repeats=0"):
        throughput.throughput_table(SMOKE, "unused", [], repeats=0)


def test_the_presets_extra_depths_join_the_rounds(monkeypatch):
    """Fig. 4a compares MoR at Nr = 2, 3, 4: each extra Nr of the preset is timed in the same rounds, with its Nr."""
    cfg = SMOKE.override(extra_recursions=(2,))
    specs = {"Vanilla": None, "Recursive": MAIN["rec"](3), "MoR EC": MAIN["ec"](3),
             "MoR EC KV share": MAIN["ec-share"](3), "MoR TC": MAIN["tc"](3), "MoR-2 EC": MAIN["ec"](2)}
    names = {MoRVariant(spec, "flops", cfg.seeds[0]).name: label for label, spec in specs.items()}
    speeds = {**SPEED, "MoR-2 EC": (115.0, 58.0, 110.0)}

    class Engine:
        def __init__(self, label: str):
            self.label, self.runs = label, 0

        def run(self, requests):
            self.runs += 1
            speed = speeds[self.label][self.runs - 1]
            return SimpleNamespace(decode_tokens_per_s=speed, tokens_per_s=speed, mean_exit_loop=2.0, mean_busy=1.0)

    monkeypatch.setattr(throughput, "load_model", lambda work, name: names[name])
    monkeypatch.setattr(throughput, "make_engine", lambda label, max_batch, max_len: Engine(label))
    monkeypatch.setattr(throughput.MoRConfig, "text", lambda self: SimpleNamespace(
        heldout=lambda split, n, seed=0: torch.zeros(n, self.seq_len, dtype=torch.long)))
    results = [{"name": name, "after": {"nll": 6.0}} for name in names]
    table = throughput.throughput_table(cfg, "unused", results, repeats=3).set_index(["model", "setting"])
    assert table.loc[("MoR-2 EC", "B"), "nr"] == 2 and table.loc[("MoR EC", "B"), "nr"] == 3
    assert table.loc[("Vanilla", "B"), "nr"] == 0
    assert table.loc[("MoR-2 EC", "B"), "speedup_vs_vanilla"] == pytest.approx(1.15)  # 1.15, 1.16, 1.10
