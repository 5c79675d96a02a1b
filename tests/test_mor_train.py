"""MoR models train with rlib.train (router terms logged), save and reload exactly, and the analyses of the
chapter return what they promise on known cases."""

from __future__ import annotations

import pandas as pd
import torch

from rlib.mor import MoRLoss, MoRSpec, analysis, build, io
from rlib.train import TrainConfig, train
from tests.test_looping import VOCAB, tiny_config

L = 8


def windows(n=32, tokens=16, seed=0):
    """A learnable stream: each window counts up from a random start (mod the vocabulary)."""
    starts = torch.randint(3, VOCAB, (n, 1), generator=torch.Generator().manual_seed(seed))
    return (starts + torch.arange(tokens)) % (VOCAB - 3) + 3


def test_expert_choice_trains_with_router_terms_and_reloads_exactly(tmp_path):
    model = build(tiny_config(4), L, MoRSpec.expert(3), seed=0)
    cfg = TrainConfig(lr=3e-3, max_steps=30, batch_size=8, micro_batch_size=8, warmup_steps=2, eval_every=30,
                      eval_batches=1, checkpoint_final=False)
    result = train(model, windows(), cfg, tmp_path / "run", val_windows=windows(8, seed=1), hooks=[MoRLoss()])
    log = pd.read_csv(tmp_path / "run" / "metrics.csv")
    assert "router_aux" in log.columns and log["router_aux"].notna().all()
    assert log["ce"].iloc[-1] < log["ce"].iloc[0] - 0.5
    assert result.val_loss is not None
    folder = io.save(model, tmp_path / "saved")
    again = io.load(folder)
    x = windows(2, seed=5)
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(again(x), model(x), rtol=0, atol=0)
        torch.testing.assert_close(again(x, mode="causal"), model(x, mode="causal"), rtol=0, atol=0)


def test_token_choice_with_loss_free_bias_reloads_its_bias(tmp_path):
    model = build(tiny_config(4), L, MoRSpec.token(3, balance="loss_free", bias_rate=0.01)).train()
    model(windows(4))
    again = io.load(io.save(model, tmp_path / "saved"))
    assert torch.equal(again.balance_bias, model.balance_bias) and model.balance_bias.abs().sum() > 0


def test_routing_metrics_on_known_cases():
    x = windows(6)
    everyone = build(tiny_config(4), L, MoRSpec.expert(3, capacities=(1.0, 1.0, 1.0)))
    metrics = analysis.routing_metrics(everyone, x)
    assert metrics["dead_ratio"] == 0.0
    model = build(tiny_config(4), L, MoRSpec.expert(3))
    metrics = analysis.routing_metrics(model, x)
    assert 0 <= metrics["sampling_acc"] <= 1 and 0 <= metrics["dead_ratio"] < 1
    assert metrics["sampling_acc_step1"] == 1.0  # capacity 1: top-k and the decoder both keep everyone
    outputs = analysis.router_outputs(model, x)
    kept_share = outputs.groupby("step")["selected"].mean().round(3).tolist()
    assert kept_share == [1.0, 10 / 16, 5 / 10]  # k_r = int(c_r 16) = 16, 10, 5 among the previous step's
    token = build(tiny_config(4), L, MoRSpec.token(3))
    tm = analysis.routing_metrics(token, x)
    assert abs(sum(tm[f"share_depth{i}"] for i in (1, 2, 3)) - 1) < 1e-6
    assert 0 <= tm["entropy"] <= tm["entropy_max"] + 1e-6


def test_depth_scaling_and_decode_agreement():
    x = windows(3)
    model = build(tiny_config(4), L, MoRSpec.expert(3))
    table = analysis.depth_scaling(model, x)
    assert table["depth_cap"].tolist() == [1, 2, 3] and table["nll"].notna().all()
    # paired standard errors: none at cap 1, the step from cap 1 to 2 is the gain at cap 2, both finite
    assert table["step_se"].isna().tolist() == [True, False, False] and table["gain_se"].isna().tolist() == [
        True, False, False]
    assert table["step_se"].iloc[1] == table["gain_se"].iloc[1] and (table["gain_se"].iloc[1:] >= 0).all()
    everyone = build(tiny_config(4), L, MoRSpec.expert(3, capacities=(1.0, 1.0, 1.0)))
    agree = analysis.decode_agreement(everyone, x)
    assert agree["depth_agreement"] == 1.0
    assert abs(agree["nll_topk"] - agree["nll_causal_decode"]) < 1e-4
    partial = analysis.decode_agreement(model, x)
    assert 0 <= partial["depth_agreement"] <= 1


def test_kv_geometry_of_a_recursive_model_repeats_with_the_recursion():
    model = build(tiny_config(4), L, MoRSpec.recursive(3), std=0.2)
    geo = analysis.kv_geometry(model, windows(2))
    norms = geo["norms"]
    assert len(norms) == L and norms["block"].tolist() == [0, 1, 2, 1, 2, 1, 2, 3]
    sim = geo["similarity_key"].to_numpy()
    assert sim.shape == (L, L) and abs(sim[0, 0] - 1) < 1e-5
