"""Compute and memory accounting of Mixture-of-Recursions (paper 001, App. C and Table 2, right).

Forward FLOPs per token, the paper's convention (Kaplan et al.; reverse-engineered in `paper-mor.md` Sec. 1.8 and
checked there against every token count of Tables 3 and 7; `tests/test_mor_flops.py` checks them again):

    F_lin = 2 (4 d^2 + 3 d f)      Q, K, V, O counted as d x d (GQA ignored), SwiGLU = 3 matrices; no embeddings/head
    F_att = 2 T d                  QK^T and AV over the causal half, per token per layer
    vanilla / Recursive            L (F_lin + F_att)
    MoR, recursion-wise caching    E (F_lin + F_att) + b sum_r [c_r F_lin + c_r^2 F_att]
    MoR, recursive KV sharing      E (F_lin + F_att) + b (sum_r c_r (F_lin - F_kv) + F_kv + sum_r c_r F_att),
                                   F_kv = 2 * 2 d^2
with E the unique end layers (2 for Middle-Cycle), b the shared block's layers and c_r the capacities (token-choice:
the same fractions, assuming perfect balance). Budgets are *forward* FLOPs; tokens = budget / FLOPs per token.

KV-cache memory relative to one cache per depth for the recursions (Table 2): recursion-wise caching keeps
sum_r c_r / Nr = (Nr + 1) / (2 Nr) of it, sharing 1 / Nr; the paper's "relative maximum batch" is 32 / ratio.
`cache_bytes` measures a real KVCache (only positions >= 0 count: padding written for inactive rows does not).
"""

from __future__ import annotations

import math

from rlib.config import ConfigError
from rlib.model.cache import KVCache
from rlib.mor.spec import MoRSpec

__all__ = ["PAPER_360M", "PAPER_MAX_BATCH", "RELEASED_360M_STEPS", "cache_bytes", "kv_memory_ratio",
           "paper_flops_per_token", "relative_max_batch", "tokens_for_budget"]

# the paper's 360M base (Table 3: d 960, FFN 2560, 2K context) at its 16.5e18 isoFLOP budget, 1024 x 2048 tokens a step
PAPER_360M = dict(d_model=960, d_ffn=2560, seq_len=2048, budget=16.5e18, step_tokens=1024 * 2048)
# optimizer steps of the released 360M configs at that budget: (label, unrolled layers, spec, steps)
RELEASED_360M_STEPS = (
    ("Vanilla", 32, None, 9438),
    ("Recursive-2", 32, MoRSpec.recursive(2), 9438),
    ("Recursive-3", 32, MoRSpec.recursive(3), 9438),
    ("Recursive-4", 34, MoRSpec.recursive(4), 8883),
    ("MoR-2 EC", 32, MoRSpec.expert(2), 12619),
    ("MoR-3 EC", 32, MoRSpec.expert(3), 14161),
    ("MoR-4 EC", 34, MoRSpec.expert(4), 14216),
    ("MoR-3 EC KV share", 32, MoRSpec.expert(3, kv="share"), 14672),
    ("MoR-3 TC", 32, MoRSpec.token(3), 14161),
)
# App. D's relative maximum batch of MoR-EC with recursion-wise caching, per Nr (Fig. 4a's "B = Max")
PAPER_MAX_BATCH = {2: 42, 3: 48, 4: 51}


def paper_flops_per_token(d_model: int, d_ffn: int, seq_len: int, n_layers: int, spec: MoRSpec | None = None) -> float:
    """Forward FLOPs per training token of an `n_layers`-deep unrolled model (spec None: vanilla)."""
    f_lin = 2 * (4 * d_model**2 + 3 * d_model * d_ffn)
    f_att = 2 * seq_len * d_model
    if spec is None or not spec.routed:
        return n_layers * (f_lin + f_att)
    ends = 2 if spec.sharing == "middle_cycle" else 0
    block = (n_layers - ends) // spec.n_recursions
    if block * spec.n_recursions + ends != n_layers:
        raise ConfigError(f"n_layers={n_layers} is not {ends} + Nr * b for Nr={spec.n_recursions}")
    caps = [spec.capacity(r) for r in range(spec.n_recursions)]
    if spec.kv == "cache":
        shared = sum(c * f_lin + c * c * f_att for c in caps)
    else:
        f_kv = 2 * 2 * d_model**2
        shared = sum(c * (f_lin - f_kv) for c in caps) + f_kv + sum(c * f_att for c in caps)
    return ends * (f_lin + f_att) + block * shared


def tokens_for_budget(budget_flops: float, flops_per_tok: float, tokens_per_step: int | None = None) -> int:
    """Training tokens a forward-FLOPs budget buys; with tokens_per_step, the nearest whole number of steps.

    Against the released 360M configs' step counts this is exact for vanilla, Recursive-2/3/4, MoR-2, MoR-4 and
    MoR-3 with KV sharing, and one step short for MoR-3 (14160 vs 14161: the formula gives 14160.01)."""
    tokens = budget_flops / flops_per_tok
    return max(1, round(tokens / tokens_per_step)) if tokens_per_step else int(tokens)


def kv_memory_ratio(spec: MoRSpec) -> float:
    """KV-cache entries of the recursions relative to caching every token at every depth."""
    if spec.kv == "share":
        return 1 / spec.n_recursions
    if spec.routing == "none":
        return 1.0
    return sum(spec.capacity(r) for r in range(spec.n_recursions)) / spec.n_recursions


def relative_max_batch(spec: MoRSpec, vanilla_batch: int = 32) -> int:
    """The paper's "B = Max" setting: vanilla_batch scaled by the inverse KV-memory ratio (42 / 48 / 51)."""
    return math.floor(vanilla_batch / kv_memory_ratio(spec) + 1e-9)


def cache_bytes(cache: KVCache, slots: list[int] | None = None) -> int:
    """Bytes of keys and values at real positions (>= 0) in `slots` (default: all)."""
    total = 0
    for slot in range(cache.n_slots) if slots is None else slots:
        if cache.keys[slot] is None:
            continue
        keys, values, positions = cache.read(slot)
        real = int((positions >= 0).sum())  # over rows
        per_entry = (keys.shape[1] * keys.shape[3]) * (keys.element_size() + values.element_size())
        total += real * per_entry
    return total
