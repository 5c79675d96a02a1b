"""Self-speculation's memory footprint: one model and one KV cache (LayerSkip, paper 004, abstract; Sec. 4.3, 4.3.3).

The paper's abstract: "Our proposed self-speculative decoding approach has less memory footprint than other
speculative decoding approaches"; Sec. 4.3.3: the draft and verify stages "maintain a single KV cache ..., reducing
memory and latency". Two things make it so, and both are measured here on the chapter's models:

    weights  the drafter is the model's own first E layers and shared head: nothing is loaded beside the model. A
             two-model speculative decoder of the same drafting depth loads a draft model: its own embedding, E
             layers, final norm and head (counted from the model's own tensors)
    caches   `self_speculative_generate` decodes each prompt in every reuse mode while every KV cache it creates is
             recorded; the bytes each holds at the end (keys, values, positions) are summed. "kvq" and "kv" keep one
             cache; "none" keeps a second cache for the drafting layers, as a separate draft model (or transformers'
             `assistant_early_exit`) must. The exit-query states kvq carries between draft and verify are d
             positions of one layer's input, counted as their bound d x D per row.

    footprint_table(model, prompts, exits, drafts, new_tokens)   one row per (E, d, decoder) in bytes
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import contextmanager

import pandas as pd
import torch

from rlib.layerskip.speculative import REUSE_MODES, self_speculative_generate
from rlib.model import Decoder, KVCache

__all__ = ["TWO_MODEL", "cache_bytes", "draft_model_bytes", "footprint_table", "recorded_caches", "tensor_bytes"]

TWO_MODEL = "two-model"  # a separate draft model of E layers beside the full model, with its own cache


def tensor_bytes(tensors: Iterable[torch.Tensor | None]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def cache_bytes(cache: KVCache) -> int:
    """Bytes a KV cache holds now: every slot's keys, values and positions."""
    return tensor_bytes([*cache.keys, *cache.values, *cache.positions])


def draft_model_bytes(model: Decoder, exit_layer: int) -> int:
    """Bytes of a separate draft model made of `model`'s embedding, first `exit_layer` layers (those its plan runs
    there), final norm and head: what a two-model speculative decoder of drafting depth E loads beside the model."""
    blocks = sorted({step.block for step in model.plan.steps[:exit_layer]})
    parts = [*model.embed.parameters(), *model.final_norm.parameters()]
    parts += [p for b in blocks for p in model.blocks[b].parameters()]
    if model.lm_head is not None:  # a tied head is the embedding, counted once
        parts += list(model.lm_head.parameters())
    return tensor_bytes(parts)


@contextmanager
def recorded_caches(model: Decoder):
    """Within the block, every `model.new_cache()` call's cache is appended to the yielded list."""
    made: list[KVCache] = []
    original = model.new_cache

    def recording(*args, **kwargs):
        cache = original(*args, **kwargs)
        made.append(cache)
        return cache

    model.new_cache = recording
    try:
        yield made
    finally:
        del model.new_cache  # back to the class's method


@torch.no_grad()
def footprint_table(model: Decoder, prompts: Sequence[torch.Tensor], exits: Sequence[int], drafts: Sequence[int],
                    new_tokens: int, reuses: Sequence[str] = REUSE_MODES) -> pd.DataFrame:
    """One row per (E, d, decoder): each reuse mode of self-speculation, measured (largest cache bytes over the
    prompts), and the two-model decoder (the separate draft model's weights, the caches of mode "none"). Columns:
    weight_bytes (the model, shared by every decoder), extra_weight_bytes (a draft model beside it), kv_bytes,
    exit_query_bytes (kvq's carried layer-E states, bound), total_bytes and total_over_kvq."""
    model.eval()
    weights = tensor_bytes(model.parameters())
    d_model = model.config.d_model
    element = next(model.parameters()).element_size()
    rows = []
    for exit_layer in exits:
        for n_draft in drafts:
            kv = {}
            for reuse in reuses:
                held = 0
                for prompt in prompts:
                    with recorded_caches(model) as made:
                        self_speculative_generate(model, prompt, new_tokens, exit_layer, n_draft, reuse=reuse)
                    held = max(held, sum(cache_bytes(c) for c in made))
                kv[reuse] = held
                carried = n_draft * d_model * element * prompts[0].shape[0] if reuse == "kvq" else 0
                rows.append({"exit_layer": exit_layer, "n_draft": n_draft, "decoder": reuse, "weight_bytes": weights,
                             "extra_weight_bytes": 0, "kv_bytes": held, "exit_query_bytes": carried})
            if "none" in kv:
                rows.append({"exit_layer": exit_layer, "n_draft": n_draft, "decoder": TWO_MODEL,
                             "weight_bytes": weights, "extra_weight_bytes": draft_model_bytes(model, exit_layer),
                             "kv_bytes": kv["none"], "exit_query_bytes": 0})
    table = pd.DataFrame(rows)
    table["total_bytes"] = table[["weight_bytes", "extra_weight_bytes", "kv_bytes", "exit_query_bytes"]].sum(axis=1)
    kvq = table[table["decoder"] == "kvq"].set_index(["exit_layer", "n_draft"])["total_bytes"]
    keys = list(zip(table["exit_layer"], table["n_draft"]))
    table["total_over_kvq"] = [t / kvq.get(k, float("nan")) for t, k in zip(table["total_bytes"], keys)]
    return table
