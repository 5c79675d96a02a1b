"""What a served model holds in memory, and the largest batch a memory budget allows (Relaxed Recursive Transformers
App. K, Table K.3: under a 16 GB cap at prefix 64 / decode 256 the smaller recursive models fit larger batches).

A served model holds its weights once (a looped model stores its K shared blocks once, plus any per-depth LoRA and
norm deltas) and, per sequence, the keys and values of every plan depth it has a cache slot for, at every position up
to `max_len` (`rlib.serving.rows.RowStores`: keys, values and a position index). So sharing layers frees weight
memory but not KV memory: the freed bytes become more sequences.

    weights = weight_bytes(model); per_seq = kv_bytes_per_sequence(model, max_len)
    max_batch_under(budget, model, max_len)
"""

from __future__ import annotations

import torch

from rlib.config import ConfigError

__all__ = ["budget_for", "kv_bytes_per_sequence", "max_batch_under", "weight_bytes"]


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of the model's parameters and buffers, each stored tensor counted once (shared blocks and tied
    embeddings included once)."""
    seen, total = set(), 0
    for t in [*model.parameters(), *model.buffers()]:
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))
        if key not in seen:
            seen.add(key)
            total += t.numel() * t.element_size()
    return total


def kv_bytes_per_sequence(model, max_len: int) -> int:
    """Bytes of one engine slot's KV stores: keys and values [cache slots, H_kv, max_len, head_dim] in the model's
    dtype and the int64 position index [cache slots, max_len] (what `RowStores` allocates per slot)."""
    if max_len < 1:
        raise ConfigError(f"max_len={max_len} must be >= 1")
    cfg = model.config
    element = next(model.parameters()).element_size()
    n_cache = model.plan.n_slots
    return n_cache * max_len * (2 * cfg.n_kv_heads * cfg.head_dim * element + 8)


def max_batch_under(budget_bytes: int, model, max_len: int) -> int:
    """The most sequences of `max_len` tokens whose KV stores fit beside the weights in `budget_bytes` (0: none)."""
    free = budget_bytes - weight_bytes(model)
    return max(0, free // kv_bytes_per_sequence(model, max_len))


def budget_for(model, batch: int, max_len: int) -> int:
    """The budget in which `model` fits exactly `batch` sequences: the book sets the cap by the vanilla model."""
    if batch < 1:
        raise ConfigError(f"batch={batch} must be >= 1")
    return weight_bytes(model) + batch * kv_bytes_per_sequence(model, max_len)
