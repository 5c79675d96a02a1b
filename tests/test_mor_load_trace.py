"""MaxVio against training steps (paper 001, App. F.2-F.3): `MoRLoss` counts each optimizer step's tokens per
recursion depth for a token-choice model, the counts are the step's tokens, MaxVio is App. F.2's formula, and
recording the loads leaves training bit-identical; the table and the claim judge App. F.3's statement."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch

from rlib.mor import MoRLoss, MoRSpec, build
from rlib.mor.claims import JUDGES, Missing
from rlib.mor.config import MoRConfig
from rlib.mor.routers import max_violation
from rlib.mor.tables import load_imbalance_table, load_trace_table, uniform_maxvio
from rlib.train import TrainConfig, train
from tests.test_looping import tiny_config
from tests.test_mor_train import L, windows


class RouterTermsOnly:
    """The hook as it was before the load trace: the router's loss terms and nothing else."""

    def loss(self, step, batch, logits, model):
        return dict(getattr(model, "module", model).last_routing.losses)


def _config(steps: int) -> TrainConfig:
    return TrainConfig(lr=3e-3, max_steps=steps, batch_size=8, micro_batch_size=4, warmup_steps=2, eval_every=steps,
                       eval_batches=1, checkpoint_final=False, seed=0)


def test_max_violation_is_app_f2s_formula():
    assert max_violation(torch.tensor([5, 5, 5])) == 0.0
    assert max_violation(torch.tensor([9, 0, 0])) == pytest.approx(2.0)  # (9 - 3) / 3
    assert max_violation(torch.tensor([4, 2, 0])) == pytest.approx(1.0)  # (4 - 2) / 2


def test_token_choice_trace_has_one_entry_per_step_over_all_its_tokens(tmp_path):
    model = build(tiny_config(4), L, MoRSpec.token(3), seed=0)
    hook = MoRLoss()
    train(model, windows(), _config(6), tmp_path / "run", val_windows=windows(8, seed=1), hooks=[hook])
    trace = hook.load_trace()
    assert trace["step"] == sorted(trace["step"]) and len(trace["step"]) == 6
    assert set(trace["tokens"]) == {8 * 16}  # both micro batches of a step, every position of each window
    for step, maxvio in zip(trace["step"], trace["maxvio"]):
        assert maxvio == pytest.approx(max_violation(hook.loads[step]))
        assert 0.0 <= maxvio <= 2.0  # Nr - 1 is the largest MaxVio with Nr = 3


def test_recording_loads_leaves_training_bit_identical(tmp_path):
    logs = {}
    for name, hook in (("traced", MoRLoss()), ("plain", RouterTermsOnly())):
        model = build(tiny_config(4), L, MoRSpec.token(3), seed=0)
        train(model, windows(), _config(5), tmp_path / name, val_windows=windows(8, seed=1), hooks=[hook])
        logs[name] = pd.read_csv(tmp_path / name / "metrics.csv").drop(columns=["seconds", "tokens_per_s"],
                                                                       errors="ignore")
        logs[name + "_weights"] = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert torch.equal(logs["traced_weights"], logs["plain_weights"])
    numeric = logs["traced"].select_dtypes("number").columns
    pd.testing.assert_frame_equal(logs["traced"][numeric].drop(columns=[c for c in numeric if "time" in c]),
                                  logs["plain"][numeric].drop(columns=[c for c in numeric if "time" in c]))


def test_other_routings_record_no_trace(tmp_path):
    for spec in (MoRSpec.expert(3), MoRSpec.recursive(3)):
        model = build(tiny_config(4), L, spec, seed=0)
        hook = MoRLoss()
        train(model, windows(), _config(3), tmp_path / spec.routing, val_windows=windows(8, seed=1), hooks=[hook])
        assert hook.load_trace() == {"step": [], "tokens": [], "maxvio": []}


def _trace_result(name: str, seed: int, maxvios: list[float], end: float, budget: str = "flops") -> dict:
    """A run's result as `run_variant` writes it, with only what the load-trace table reads."""
    spec = MoRSpec.token(3)
    return {"name": name, "label": spec.label(), "tag": "", "budget": budget, "seed": seed,
            "spec": dataclasses.asdict(spec), "steps": len(maxvios), "after": {"routing": {"maxvio": end}},
            "load_trace": {"step": list(range(len(maxvios))), "tokens": [4096] * len(maxvios), "maxvio": maxvios}}


def _judge(results: list[dict]):
    trace = load_trace_table(results)
    return JUDGES["mor.apph.tc_load_imbalance"]({"load_trace": trace}, MoRConfig.preset("cpu"))


def test_imbalance_claim_holds_for_a_long_imbalanced_start_and_flips_on_each_threshold():
    long_start = [0.9] * 45 + [0.1] * 55  # 45% of the steps above 0.266
    held = _judge([_trace_result("tc-s0", 0, long_start, 0.2), _trace_result("tc-s1", 1, long_start, 0.2)])
    assert held.held is True and "45% of 100 steps" in held.measured
    short_start = [0.9] * 30 + [0.1] * 70
    early = _judge([_trace_result("tc-s0", 0, long_start, 0.2), _trace_result("tc-s1", 1, short_start, 0.2)])
    assert early.held is False and early.diagnosis[0] == "scale"
    assert "balanced from step 30 of 100" in early.diagnosis[1]
    balanced_end = _judge([_trace_result("tc-s0", 0, long_start, 0.05)])  # below 10 x 0.007 at the end
    assert balanced_end.held is False


def test_imbalance_summary_per_run():
    table = load_imbalance_table(load_trace_table([_trace_result("tc-s0", 0, [0.9] * 8 + [0.1] * 12, 0.3),
                                                   _trace_result("tc-s1", 1, [0.9] * 20, 0.5)]))
    first, second = table.iloc[0], table.iloc[1]
    assert first["share_above"] == pytest.approx(0.4) and first["balanced_from_step"] == 8
    assert first["late_maxvio"] == pytest.approx(0.1) and first["end_maxvio"] == pytest.approx(0.3)
    assert np.isnan(second["balanced_from_step"])  # never settles


def test_claim_is_not_measured_without_a_final_design_trace():
    with pytest.raises(Missing):
        _judge([])


def test_the_chance_floor_of_maxvio_shrinks_with_the_token_count_and_is_reported_beside_the_verdict():
    few, many = uniform_maxvio(4096, 3), uniform_maxvio(409_600, 3)
    assert 0 < many[0] < few[0] < few[1]  # 100x the tokens: a tenth of the chance MaxVio (it falls as 1 / sqrt(N))
    assert few[0] / many[0] == pytest.approx(10, rel=0.1)
    assert uniform_maxvio(4096, 3) == few  # seeded
    with pytest.raises(ValueError, match="n_experts=1"):
        uniform_maxvio(10, 1)
    verdict = _judge([_trace_result("tc-s0", 0, [0.9] * 45 + [0.1] * 55, 0.2)])
    cfg = MoRConfig.preset("cpu")
    assert f"{few[0]:.3f}, 95th percentile {few[1]:.3f}, on a step's 4096 tokens" in verdict.measured
    assert f"on the {cfg.eval_windows * cfg.seq_len} held-out tokens" in verdict.measured
