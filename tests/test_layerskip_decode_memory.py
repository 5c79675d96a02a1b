"""rlib.layerskip.decode_memory: the bytes self-speculation holds (one model, one cache) against a separate draft
cache and a separate draft model, measured on the caches the decoder really creates."""

from __future__ import annotations

import pytest

from rlib.layerskip.decode_memory import (
    TWO_MODEL,
    cache_bytes,
    draft_model_bytes,
    footprint_table,
    recorded_caches,
    tensor_bytes,
)
from rlib.layerskip.speculative import self_speculative_generate
from tests.test_looping import ids, tiny_model

N_LAYERS = 6


@pytest.fixture(scope="module")
def model():
    return tiny_model(N_LAYERS, seed=2)


def test_recorded_caches_see_every_cache_and_restore_the_method(model):
    prompt = ids(1, 5, seed=1)
    with recorded_caches(model) as made:
        self_speculative_generate(model, prompt, 8, 2, 3, reuse="none")
    assert len(made) == 2  # the model's cache and the draft cache
    assert "new_cache" not in vars(model)  # the instance is left as it was
    full, draft = sorted(made, key=cache_bytes, reverse=True)
    filled = [k for k in draft.keys if k is not None]
    assert len(filled) == 2 and all(k.shape[2] <= prompt.shape[1] + 8 for k in filled)  # E = 2 slots only
    assert sum(k is not None for k in full.keys) == N_LAYERS


def test_one_cache_for_kvq_and_kv_a_second_for_none_and_a_draft_model_beside_it(model):
    table = footprint_table(model, [ids(2, 6, seed=3)], exits=(2, 3), drafts=(2,), new_tokens=8)
    assert len(table) == 2 * 4 and set(table["decoder"]) == {"kvq", "kv", "none", TWO_MODEL}
    for (exit_layer, _), rows in table.groupby(["exit_layer", "n_draft"]):
        rows = rows.set_index("decoder")
        assert rows.loc["kvq", "kv_bytes"] == rows.loc["kv", "kv_bytes"]  # the same single cache
        extra = rows.loc["none", "kv_bytes"] - rows.loc["kvq", "kv_bytes"]
        per_layer = rows.loc["kvq", "kv_bytes"] / N_LAYERS
        assert 0 < extra <= exit_layer * per_layer * 1.01  # a draft cache of the E drafting layers, no more
        assert rows.loc[TWO_MODEL, "extra_weight_bytes"] == draft_model_bytes(model, exit_layer)
        assert (rows["weight_bytes"] == tensor_bytes(model.parameters())).all()
        assert rows.loc["kvq", "total_over_kvq"] == 1.0
        assert rows.loc[TWO_MODEL, "total_over_kvq"] > rows.loc["none", "total_over_kvq"] > 1.0


def test_a_draft_model_counts_its_layers_embedding_norm_and_an_untied_head(model):
    blocks = [tensor_bytes(b.parameters()) for b in model.blocks]
    shared = tensor_bytes([*model.embed.parameters(), *model.final_norm.parameters()])
    head = 0 if model.lm_head is None else tensor_bytes(model.lm_head.parameters())
    assert draft_model_bytes(model, 3) == shared + sum(blocks[:3]) + head
