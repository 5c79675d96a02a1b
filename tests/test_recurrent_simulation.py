"""rlib.recurrent.simulation: Theorem A.1's width-3D simulation of a Transformer and Sec. 3.2's token recurrence."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest
import torch

from rlib.recurrent import claims, simulation
from rlib.recurrent.config import RecurrentConfig
from rlib.recurrent.layer import RTLayer
from rlib.recurrent.naive import naive_layer


def _judge(tables: dict[str, pd.DataFrame], claim: str) -> pd.Series:
    return claims.judge(tables, RecurrentConfig.preset("cpu"), "cpu").finish().set_index("id").loc[claim]


def test_the_width_3d_rt_reproduces_every_attention_score_and_output():
    table = simulation.simulation_table(depths=(1, 2, 3), seeds=2)
    stacked = table[table["construction"] == "stacked"]
    assert len(stacked) == 6 and (stacked["rt_width"] == 3 * stacked["width"]).all()
    assert stacked["max_prob_diff"].max() <= 1e-12
    assert (stacked["max_output_diff"] / stacked["output_scale"]).max() <= 1e-12
    assert (stacked["scratch_max"] == 0).all()
    assert _judge({"theorem_a1": table}, "rt.thm1.simulates_transformer")["verdict"] == "held"


def test_one_layer_needs_only_width_2d_but_two_such_layers_do_not_stack():
    """Sec. 3.1 / App. A's remark: a single layer is simulated at width 2D; stacking is what needs the third block."""
    table = simulation.simulation_table(depths=(1, 2), seeds=2)
    single = table[table["construction"] == "single"]
    assert set(single["depth"]) == {1} and (single["rt_width"] == 2 * single["width"]).all()
    assert single["max_prob_diff"].max() <= 1e-12
    assert _judge({"theorem_a1": table}, "rt.s3_1.single_layer_width_2d")["verdict"] == "held"
    assert _judge({"theorem_a1": table}, "rt.thm1.simulates_transformer")["verdict"] == "held"  # the 3D rows only
    # two width-2D layers in a row: the second's live block starts at x, not 0, so its MLP sees x + y + a'
    layers = simulation.random_transformer(2, 6, d_head=3, hidden=12, seed=4)
    x = torch.randn(10, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    y, _ = simulation.transformer_forward(layers, x)
    first = simulation.simulate_single(layers[0])
    z, _ = simulation.rt_forward([first], torch.cat([x, torch.zeros_like(x)], dim=-1))
    torch.testing.assert_close(z[:, :6], x, rtol=0, atol=0)  # carry untouched: the persistent pairs are K x, V x
    swap = torch.cat([z[:, 6:], z[:, :6]], dim=-1)  # the best a second 2D layer can read: carry y, live x
    z2, _ = simulation.rt_forward([simulation.simulate_single(layers[1])], swap)
    assert float((y - z2[:, 6:]).abs().max()) > 1e-3
    off = table.assign(max_output_diff=table["max_output_diff"].where(table["construction"] == "stacked", 1e-3))
    assert _judge({"theorem_a1": off}, "rt.s3_1.single_layer_width_2d")["verdict"] == "not held"


def test_the_construction_fails_without_its_scratch_or_its_swap():
    layers = simulation.random_transformer(2, 6, d_head=3, hidden=12, seed=4)
    x = torch.randn(10, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    y, _ = simulation.transformer_forward(layers, x)
    exact = simulation.simulate(layers)
    z, _ = simulation.rt_forward(exact, simulation.embed(x, 0))
    assert float((y - z[:, :6]).abs().max()) < 1e-12  # depth 2: the output sits in block 0
    # leave the attention output in scratch: the next layer's keys still read carry, but its MLP sees a + a'
    kept = [dataclasses.replace(layer, W2=torch.cat([layer.W2[:12], torch.zeros(6, layer.W2.shape[1],
                                                                                  dtype=torch.float64)]))
            for layer in exact]
    z, _ = simulation.rt_forward(kept, simulation.embed(x, 0))
    assert float((y - z[:, :6]).abs().max()) > 1e-3
    # no swap: the second layer built as a first one reads block 0 (the model's input) as its carry
    no_swap = [exact[0], simulation.simulate(layers[1:])[0]]
    z, p = simulation.rt_forward(no_swap, simulation.embed(x, 0))
    _, p_ref = simulation.transformer_forward(layers, x)
    assert float((p[1] - p_ref[1]).abs().max()) > 1e-3  # its attention scores no longer match


def test_the_layer_becomes_its_rnn_form_as_the_gap_grows():
    table = simulation.recurrence_table(gaps=(0.0, 4.0, 16.0, 32.0), tokens=12)
    for _, rows in table.groupby("position"):
        assert rows["rel_diff"].iloc[0] > 1e-2 and rows["rel_diff"].iloc[-1] < 1e-9
        assert (rows["rel_diff"].diff().dropna() < 0).all()
    assert _judge({"token_recurrence": table}, "rt.s3_2.token_recurrence")["verdict"] == "held"
    stuck = table.assign(rel_diff=lambda d: d["rel_diff"].where(d["gap"] < 32, 1e-2))
    row = _judge({"token_recurrence": stuck}, "rt.s3_2.token_recurrence")
    assert row["verdict"] == "not held" and row["diagnosis"] == "setup"


@torch.no_grad()
@pytest.mark.parametrize("position", ["alibi", "rope"])
def test_the_biased_loop_is_the_naive_layer_at_gap_zero(position):
    torch.manual_seed(1)
    config = dataclasses.replace(simulation.RECURRENCE_LAYER, position=position)
    layer = RTLayer(config).double().eval()
    x = torch.randn(2, 9, config.d_model, dtype=torch.float64)
    z, _, _ = naive_layer(layer, x, torch.arange(9))
    torch.testing.assert_close(simulation.local_attention_layer(layer, x, 0.0), z, rtol=1e-12, atol=1e-12)
    # position 0 has only its temporary pair: the recurrence starts where the layer does
    torch.testing.assert_close(simulation.rnn_layer(layer, x)[:, :1], z[:, :1], rtol=1e-12, atol=1e-12)
