"""Sec. 2.1's shared exit head against a head per layer (rlib.layerskip.exit_heads on rlib.train_cost): the dedicated
heads' exits and gradients, the paired-round table, a real measurement in a fresh process, the claim's verdict on
scripted tables, and the settings refused."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from rlib import train_cost
from rlib.config import ConfigError
from rlib.layerskip import exit_heads
from rlib.layerskip.config import LayerSkipConfig
from rlib.layerskip.training import LayerSkipDecoder, LayerSkipLoss
from rlib.train import next_token_loss
from tests.test_layerskip_claims import judged
from tests.test_looping import ids, tiny_model

SMOKE = LayerSkipConfig.preset("smoke")
CLAIM = "ls.s21.shared_head_cheaper"


def test_dedicated_heads_start_as_the_shared_head_and_then_answer_for_their_own_exit_only():
    decoder = tiny_model(4)
    batch = ids(2, 7)
    shared = LayerSkipDecoder(decoder).eval()
    dedicated = exit_heads.DedicatedExitHeads(decoder).eval()
    n_heads, size = len(dedicated.exit_heads), decoder.lm_head.weight.numel()
    assert n_heads == 3  # layers 0 .. L-2; the last layer keeps the model's head
    assert sum(p.numel() for p in dedicated.parameters()) == sum(p.numel() for p in decoder.parameters()) + 3 * size
    with torch.no_grad():
        shared(batch)
        hidden = shared.hidden_states
        for layer in range(4):  # copies of the model's head: every exit's logits as the shared head's
            own, one = dedicated.exit_head(layer, hidden[layer]), shared.exit_head(layer, hidden[layer])
            torch.testing.assert_close(own, one)
        dedicated.exit_heads[1].mul_(2.0)
        moved = [not torch.allclose(dedicated.exit_head(k, hidden[k]), shared.exit_head(k, hidden[k]))
                 for k in range(4)]
    assert moved == [False, True, False, False]


def test_the_exit_loss_trains_each_enabled_exits_own_head_and_leaves_the_models_head_to_the_last_layer():
    decoder = tiny_model(4)
    batch = ids(3, 9, seed=2)
    model = exit_heads.DedicatedExitHeads(decoder, total_steps=4).train()
    hook = LayerSkipLoss(model, e_scale=1.0, curriculum="rotational", rotation=2)  # step 0: layers 0, 2 and the last
    assert [w > 0 for w in hook.weights(0)] == [False, False, True, True]  # Eq. 6's e(0) = 0: layer 0 gets no weight
    logits = model(batch)
    exit_term = hook.loss(0, batch, logits, model)["exit"]
    expected = sum(w * next_token_loss(model.exit_head(k, model.hidden_states[k]), batch)
                   for k, w in enumerate(hook.weights(0)[:-1]) if w > 0)
    torch.testing.assert_close(exit_term, expected)
    exit_term.backward()
    assert [h.grad is not None for h in model.exit_heads] == [False, False, True]
    assert decoder.lm_head.weight.grad is None  # the early exits no longer reach the model's head


def test_rounds_pair_the_heads_within_each_curriculum(monkeypatch):
    sizes = {"shared": 100, "dedicated": 130}
    times = iter([1.0, 1.2, 2.1, 2.0, 1.0, 1.5, 1.6, 1.0])  # rotational r0, r1 (reversed), then all r0, r1
    calls = []

    def measure(job, warmup, steps, what="", timeout_s=0):
        calls.append((job.curriculum, job.head, warmup, steps))
        step = next(times)
        return {"step_s": step, "step_s_all": [step], "peak_mib": 10.0 + sizes[job.head] / 10, "state_mib": 1.0,
                "params": sizes[job.head], "device": "cpu", "threads": 2}

    monkeypatch.setattr(train_cost, "measure_one", measure)
    table = exit_heads.head_cost_table(SMOKE, rounds=2)
    assert [c[:2] for c in calls] == [(c, h) for c in ("rotational", "all")
                                      for h in ("shared", "dedicated", "dedicated", "shared")]  # odd rounds reversed
    assert {c[2:] for c in calls} == {(SMOKE.cost_warmup, SMOKE.cost_steps)}
    dedicated = table[table["model"] == "dedicated"]
    assert dedicated["step_s / shared"].round(6).tolist() == [1.2, 1.05, 1.5, 1.6]  # over its own round's shared
    assert dedicated["params / shared"].tolist() == [1.3] * 4
    summary = exit_heads.head_cost_summary(table).set_index(["curriculum", "model"])
    assert summary.loc[("rotational", "dedicated"), "step_s ratio lo"] == pytest.approx(1.05)
    assert summary.loc[("all", "dedicated"), "params ratio"] == 1.3


def test_one_real_measurement_counts_every_dedicated_head_in_the_training_state():
    shared = train_cost.measure_one(exit_heads.HeadCostJob(SMOKE, "shared", "rotational"), 3, 1)
    dedicated = train_cost.measure_one(exit_heads.HeadCostJob(SMOKE, "dedicated", "rotational"), 3, 1)
    head = SMOKE.text().size * SMOKE.d_model
    assert dedicated["params"] - shared["params"] == (SMOKE.n_layers - 1) * head
    assert dedicated["state_mib"] == pytest.approx(16 * dedicated["params"] / 2**20)  # fp32: param, grad, 2 moments
    assert dedicated["peak_mib"] > dedicated["state_mib"] > shared["state_mib"]


def _cost_table(step: list[float], peak: list[float], all_step: float = 1.3) -> pd.DataFrame:
    rows = []
    for curriculum, steps in (("rotational", step), ("all", [all_step] * len(step))):
        for r, (s, p) in enumerate(zip(steps, peak)):
            for model, factor in (("shared", None), ("dedicated", 1)):
                ratio = {"step_s": 1.0 if factor is None else s, "peak_mib": 1.0 if factor is None else p,
                         "params": 1.0 if factor is None else 2.5}
                rows.append({"round": r, "model": model, "curriculum": curriculum, "n_layers": 12, "vocab": 4096,
                             "d_model": 128, "step_s": 0.2 * ratio["step_s"], "peak_mib": 300 * ratio["peak_mib"],
                             "params": int(3_000_000 * ratio["params"]), "device": "cpu", "threads": 2,
                             **{f"{k} / shared": v for k, v in ratio.items()}})
    return pd.DataFrame(rows)


def test_the_claim_holds_only_when_the_median_ratios_interval_lies_above_one():
    held = judged({"exit_head_cost": _cost_table([1.02, 1.04, 1.01, 1.03, 1.05], [1.2, 1.2, 1.3, 1.2, 1.2])}).loc[CLAIM]
    assert held["verdict"] == "held"
    assert "step time 1.030x [1.010, 1.050]" in held["measured"] and "all curriculum: step time 1.300x" in \
        held["measured"]
    slow_round = judged({"exit_head_cost": _cost_table([1.02, 0.99, 1.01, 1.03, 1.04],
                                                       [1.2, 1.2, 1.3, 1.2, 1.2])}).loc[CLAIM]
    assert slow_round["verdict"] == "not held"
    assert slow_round["diagnosis"] == "scale" and "step time 1.020x [0.990, 1.040]" in slow_round["evidence"]
    assert "the median ratio's interval reaches 1" in slow_round["evidence"] and "at 93.8%" in slow_round["measured"]
    assert "1 early exit(s) get a loss per step" in slow_round["evidence"]
    assert "the all curriculum) the step takes 1.300x" in slow_round["evidence"]
    # a step-time interval that reaches 1 is timing noise, under either curriculum: never read as a disagreement
    faster_all = judged({"exit_head_cost": _cost_table([1.02, 0.99, 1.01, 1.03, 1.04], [1.2, 1.2, 1.3, 1.2, 1.2],
                                                       all_step=0.975)}).loc[CLAIM]
    assert faster_all["verdict"] == "not held" and faster_all["diagnosis"] == "scale"
    assert "the all curriculum) the step takes 0.975x" in faster_all["evidence"]
    # 3 rounds' range holds the median with 75 % only: measured and reported, but they decide nothing
    three = judged({"exit_head_cost": _cost_table([1.02, 1.04, 1.01], [1.2, 1.2, 1.3])}).loc[CLAIM]
    assert three["verdict"] == "not testable at this scale"
    assert "3 round(s) hold the median with 75.0% only: the rounds decide from 5 (93.8%)" in three["measured"]
    assert "step time 1.020x [1.010, 1.040]" in three["measured"]
    assert judged({"exit_head_cost": _cost_table([], [])}).loc[CLAIM, "verdict"] == "not measured"
    # from 9 rounds the 95 % interval drops the extreme rounds: one slow round of 9 no longer decides
    nine = _cost_table([1.02, 0.99, 1.03, 1.04, 1.02, 1.05, 1.03, 1.02, 1.04], [1.2] * 9)
    assert judged({"exit_head_cost": nine}).loc[CLAIM, "verdict"] == "held"


def test_bad_settings_are_refused_and_the_cost_fields_never_retrain_a_run():
    with pytest.raises(ConfigError, match="cost_warmup=2"):
        LayerSkipConfig.preset("cpu").override(cost_warmup=2)  # below the rotation R = 11
    with pytest.raises(ConfigError, match="cost_rounds=-1"):
        SMOKE.override(cost_rounds=-1)
    with pytest.raises(ValueError, match="head='tied'"):
        exit_heads.HeadCostJob(SMOKE, "tied", "rotational")
    with pytest.raises(ValueError, match="rounds=0"):
        train_cost.paired_rounds(["a"], lambda label: {}, 0, "a")
    cpu = LayerSkipConfig.preset("cpu")
    assert cpu.training_key() == cpu.override(cost_rounds=5, cost_steps=9).training_key()
