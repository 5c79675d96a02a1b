"""RT decode cost vs its Transformer twin (rlib.recurrent.decode_cost; paper 002, abstract and Sec. 7.3): the counted
MACs per token differ by exactly the persistent pair's two projections, the table's ratios are to the twin of the
same shape, and bad arguments are refused before any timing."""

from __future__ import annotations

import pytest

from rlib.recurrent.config import RTConfig
from rlib.recurrent.decode_cost import count_decode_macs, decode_cost_table
from rlib.recurrent.model import RTModel


def _config(block: str, kv_heads: int | None = None) -> RTConfig:
    return RTConfig(vocab_size=97, d_model=32, n_layers=3, n_heads=4, n_kv_heads=kv_heads, block=block,
                    tie_embeddings=True)


@pytest.mark.parametrize("kv_heads", [None, 2])
def test_recurrent_step_counts_two_more_kv_projections_per_layer(kv_heads):
    rt = count_decode_macs(RTModel(_config("recurrent", kv_heads)).eval(), batch=2, context=7)
    tf = count_decode_macs(RTModel(_config("transformer", kv_heads)).eval(), batch=2, context=7)
    config = _config("recurrent", kv_heads)
    kv_dim = config.kv_heads * config.head_dim
    assert rt["total"] - tf["total"] == config.n_layers * 2 * config.d_model * kv_dim
    assert rt["head"] == tf["head"] == config.d_model * config.vocab_size


def test_transformer_count_matches_the_layer_arithmetic():
    config = _config("transformer")
    macs = count_decode_macs(RTModel(config).eval(), batch=1, context=5)
    d, ff, keys = config.d_model, config.ff_dim, 6  # 5 cached tokens + the new one
    per_layer = 4 * d * d + 2 * d * ff + 2 * keys * d  # Q, K, V, O; MLP; scores and weighted values
    assert macs["total"] == config.n_layers * per_layer + d * config.vocab_size


def test_table_ratios_are_to_the_twin_of_the_same_shape():
    shapes = {"deep": _config("recurrent"), "shallow": RTConfig(vocab_size=97, d_model=48, n_layers=1, n_heads=4,
                                                                tie_embeddings=True)}
    table = decode_cost_table(shapes, batches=(1, 3), context=4, steps=2, repeats=1)
    assert len(table) == 2 * 2 * 2
    twins = table[table["block"] == "transformer"]
    assert (twins["ms_per_token_ratio"] == 1.0).all() and (twins["macs_per_token_ratio"] == 1.0).all()
    assert (table.loc[table["block"] == "recurrent", "macs_per_token_ratio"] > 1.0).all()
    first = table[(table["shape"] == "deep") & (table["block"] == "transformer")]
    assert (first["ms_vs_first_transformer"] == 1.0).all()
    assert (table["ms_per_token"] > 0).all()
    assert (twins["ms_per_token_ratio_lo"] == 1.0).all() and (twins["ms_per_token_ratio_hi"] == 1.0).all()
    rt = table[table["block"] == "recurrent"]
    assert ((rt["ms_per_token_ratio_lo"] <= rt["ms_per_token_ratio"])
            & (rt["ms_per_token_ratio"] <= rt["ms_per_token_ratio_hi"])).all() and (table["rounds"] == 1).all()


def test_paired_ratios_are_taken_round_by_round(monkeypatch):
    """Each round's ratio is its own RT time over its own T time: a slow spell that hits both blocks of one round
    (the second round here, 10x slower) leaves that round's ratio as it is."""
    from rlib.recurrent import decode_cost

    ticks = iter([2.0, 1.0, 20.0, 10.0, 2.2, 1.0] * 4)  # per round: RT, T (seconds per step, faked clock below)
    monkeypatch.setattr(decode_cost, "time_decode", lambda model, batch, context, steps: next(ticks))
    table = decode_cost.decode_cost_table({"deep": _config("recurrent")}, batches=(1,), context=4, steps=2, repeats=3)
    rt = table[table["block"] == "recurrent"].iloc[0]  # rounds 20 / 10, 2.2 / 1, 2 / 1 (the first pair warms up)
    assert rt["ms_per_token_ratio"] == pytest.approx(2.0) and rt["ms_per_token_ratio_lo"] == pytest.approx(2.0)
    assert rt["ms_per_token_ratio_hi"] == pytest.approx(2.2) and rt["rounds"] == 3  # 3 rounds: min and max


@pytest.mark.parametrize("kwargs", [dict(batches=()), dict(batches=(0,)), dict(context=0), dict(steps=0),
                                    dict(repeats=0)])
def test_bad_arguments_are_refused(kwargs):
    args = dict(batches=(1,), context=4, steps=2, repeats=1) | kwargs
    with pytest.raises(ValueError, match="must be >= 1"):
        decode_cost_table({"deep": _config("recurrent")}, **args)
