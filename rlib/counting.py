"""Parameters, FLOPs and KV-cache bytes of a Decoder and its execution plan, with the papers' conventions.

Parameters (Relaxed Recursive Transformers, `paper-relaxed-recursive.md`: a looped model's *unique*
parameters shrink by the number of loops while its compute stays that of the unrolled depth):

    unique          every distinct tensor once (tied embedding / LM head once): what is stored and trained
    effective       the parameters a token passes through: embedding + final norm + each plan step's block
                    again (a cycle(K, n) plan counts each block n times) + per-depth adapters once each
    embedding       the token embedding (+ an untied LM head)
    non_embedding   unique - embedding (the papers' "non-embedding parameters")

FLOPs per token (MoR, `paper-mor.md` section 1.8, after Kaplan et al. 2020: a linear map costs 2 FLOPs per
weight per token; attention counts QK^T and AV over the causal lower triangle only; norms, softmax and
non-linearities are ignored):

    convention "mor"    the paper's exact isoFLOP formula: per step F_lin = 2 (4 d^2 + 3 d f) (Q, K, V, O each
                        d x d, GQA ignored; SwiGLU = 3 matrices), F_att = 2 T d; embeddings and LM head not
                        counted; a step that reuses shared K/V saves F_kv = 2 * 2 d^2
    convention "exact"  the same rules with this model's real shapes: GQA-sized K/V, biases, sliding windows
                        (a query sees min(position, window) keys) and the LM head's 2 d V

    forward   per token of a length-T training sequence: sum over plan steps of F_lin + F_att(T)
    training  3 x forward (backward = 2 x forward: Kaplan's C = 6N + 6 L T d, i.e. "6N + attention")
    decode    one new token against a context of T cached tokens: F_lin + 4 d_attn min(T, window) per step
              ("2N + attention"; one query sees every key, so no causal half)

Executed FLOPs (`executed_flops`): what a call really ran, counted by torch's FlopCounterMode (every matmul, and
every scaled-dot-product attention call as its whole score rectangle, QK^T and PV, whether a causal mask lets the
kernel skip half of it or not): a count of the code, not of a convention.

KV cache bytes per token: 2 (K and V) x n_kv_heads x head_dim x dtype bytes for every plan step that writes a
slot; steps that reuse a shared slot (`ExecutionPlan.cycle(..., share_kv=True)`) add nothing (MoR Table 2:
sharing needs 1/Nr of the memory of one cache per depth). Our KVCache keeps every position, so a sliding
window does not cap it here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from rlib.config import ConfigError
from rlib.model import Decoder, DecoderConfig, ExecutionPlan
from rlib.model.layers import BLOCK_WINDOW

__all__ = [
    "CONVENTIONS",
    "count_parameters",
    "decode_flops_per_token",
    "executed_flops",
    "forward_flops_per_token",
    "kv_cache_bytes_per_token",
    "training_flops_per_token",
]

CONVENTIONS = ("mor", "exact")


def _decoder(model: Decoder | DecoderConfig, plan: ExecutionPlan | None) -> Decoder:
    """The model itself, or one built from a config on the meta device (no memory, no init time)."""
    if isinstance(model, Decoder):
        if plan is not None and plan != model.plan:
            raise ConfigError("pass `plan` only with a DecoderConfig; a Decoder brings its own plan")
        return model
    if isinstance(model, DecoderConfig):
        with torch.device("meta"):
            return Decoder(model, plan)
    raise TypeError(f"expected a Decoder or a DecoderConfig, got {type(model).__name__}")


def _numel(params) -> int:
    seen: set[int] = set()
    total = 0
    for p in params:
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total


def _shared_block_params(block: nn.Module) -> list[nn.Parameter]:
    """A block's own weights, without per-depth adapters (those belong to one depth each)."""
    return [p for name, p in block.named_parameters() if ".adapters." not in f".{name}"]


def _adapter_params(block: nn.Module) -> list[nn.Parameter]:
    return [p for name, p in block.named_parameters() if ".adapters." in f".{name}"]


def count_parameters(model: Decoder | DecoderConfig, plan: ExecutionPlan | None = None) -> dict[str, int]:
    """{unique, effective, embedding, non_embedding, effective_non_embedding} (see the module docstring).

    Blocks the plan never runs count in `unique` but not in `effective`.
    """
    decoder = _decoder(model, plan)
    unique = _numel(decoder.parameters())
    embedding_params = [decoder.embed.weight] + ([decoder.lm_head.weight] if decoder.lm_head is not None else [])
    embedding = _numel(embedding_params)
    block_params = [_numel(_shared_block_params(block)) for block in decoder.blocks]
    adapters = _numel(p for block in decoder.blocks for p in _adapter_params(block))
    outside_blocks = unique - sum(block_params) - adapters
    effective = outside_blocks + adapters + sum(block_params[step.block] for step in decoder.plan.steps)
    return {
        "unique": unique,
        "effective": effective,
        "embedding": embedding,
        "non_embedding": unique - embedding,
        "effective_non_embedding": effective - embedding,
    }


# ---- FLOPs ------------------------------------------------------------------------------------------------


def _check(convention: str, seq_len: int) -> None:
    if convention not in CONVENTIONS:
        raise ConfigError(f"convention={convention!r}; choose one of {CONVENTIONS}")
    if not isinstance(seq_len, int) or seq_len < 1:
        raise ConfigError(f"seq_len (context length) must be an integer >= 1, got {seq_len!r}")


def _kv_weights(config: DecoderConfig) -> int:
    """Weights (and biases) of the K and V projections of one block."""
    d_kv = config.n_kv_heads * config.head_dim
    return 2 * (config.d_model * d_kv + (d_kv if config.attn_bias else 0))


def _linear_flops(config: DecoderConfig, block: nn.Module, reuse_kv: bool, convention: str) -> int:
    """Forward FLOPs per token of one step's linear maps: 2 per weight (F_lin, minus F_kv when K/V are reused)."""
    d, f = config.d_model, config.d_ffn
    if convention == "mor":
        return 2 * (4 * d * d + 3 * d * f) - (2 * 2 * d * d if reuse_kv else 0)
    weights = sum(p.numel() for name, p in block.named_parameters() if p.dim() == 2 and ".adapters." not in name)
    biases = sum(p.numel() for name, p in block.named_parameters() if name.endswith("bias"))
    adapters = sum(p.numel() for p in _adapter_params(block))
    return 2 * (weights + biases + adapters) - (2 * _kv_weights(config) if reuse_kv else 0)


def _mean_keys_per_query(seq_len: int, window: int | None) -> float:
    """Causal attention over positions 1..T: the mean of min(p, window) keys per query ((T + 1) / 2 without window)."""
    if window is None or window >= seq_len:
        return (seq_len + 1) / 2
    return (window * (window + 1) / 2 + (seq_len - window) * window) / seq_len


def _attention_flops(config: DecoderConfig, step, seq_len: int, convention: str, decode: bool) -> float:
    """Per token per step: QK^T and AV cost 2 * 2 * d_attn per key attended to (the step's own window)."""
    if convention == "mor":
        return (4 if decode else 2) * seq_len * config.d_model  # causal half for training: 2 T d
    d_attn = config.n_heads * config.head_dim
    window = config.sliding_windows[step.block] if step.window == BLOCK_WINDOW else step.window
    keys = min(seq_len, window or seq_len) if decode else _mean_keys_per_query(seq_len, window)
    return 4 * d_attn * keys


def _head_flops(config: DecoderConfig, convention: str) -> int:
    return 0 if convention == "mor" else 2 * config.d_model * config.vocab_size


def _flops(model, plan, seq_len: int, convention: str, decode: bool) -> float:
    _check(convention, seq_len)
    decoder = _decoder(model, plan)
    config = decoder.config
    total = 0.0
    for step in decoder.plan.steps:
        block = decoder.blocks[step.block]
        total += _linear_flops(config, block, step.reuse_kv, convention)
        total += _attention_flops(config, step, seq_len, convention, decode)
    return total + _head_flops(config, convention)


def forward_flops_per_token(
    model: Decoder | DecoderConfig, plan: ExecutionPlan | None = None, *, seq_len: int, convention: str = "mor"
) -> float:
    """Forward FLOPs per token of a length-`seq_len` sequence (MoR App. C: the paper's isoFLOP budget unit)."""
    return _flops(model, plan, seq_len, convention, decode=False)


def training_flops_per_token(
    model: Decoder | DecoderConfig, plan: ExecutionPlan | None = None, *, seq_len: int, convention: str = "mor"
) -> float:
    """Training FLOPs per token = 3 x forward (Kaplan's 6N + attention; MoR budgets are forward-only, 1/3 of this)."""
    return 3 * forward_flops_per_token(model, plan, seq_len=seq_len, convention=convention)


def decode_flops_per_token(
    model: Decoder | DecoderConfig, plan: ExecutionPlan | None = None, *, context: int, convention: str = "mor"
) -> float:
    """Inference FLOPs of generating one token after `context` cached tokens (2N + 4 d_attn * keys per step)."""
    return _flops(model, plan, context, convention, decode=True)


# ---- KV cache ---------------------------------------------------------------------------------------------


def kv_cache_bytes_per_token(
    config: DecoderConfig, plan: ExecutionPlan | None = None, dtype: torch.dtype = torch.bfloat16
) -> int:
    """Bytes of K and V stored per token: one entry per slot a plan step writes (shared-KV reuse counts once)."""
    plan = plan or ExecutionPlan.identity(config.n_layers)
    written_slots = sum(not step.reuse_kv for step in plan.steps)
    itemsize = torch.empty((), dtype=dtype).element_size()
    return written_slots * 2 * config.n_kv_heads * config.head_dim * itemsize


def _attention_call_flops(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    """One scaled-dot-product attention call [B, H, Tq, d] x [B, Hkv, Tk, d]: 2 Tq Tk (d + d_v) per head and row
    (GQA's key heads are shared, the work is per query head)."""
    batch, heads, q_len, dim = query_shape
    return 2 * batch * heads * q_len * key_shape[-2] * (dim + value_shape[-1])


# the CPU kernel torch's counter has no formula for (its GPU kernels have one, counted the same way)
_ATTENTION_OPS = tuple(getattr(torch.ops.aten, name) for name in ("_scaled_dot_product_flash_attention_for_cpu",)
                       if hasattr(torch.ops.aten, name))


def executed_flops(fn: Callable[..., Any], *args, **kwargs) -> tuple[Any, dict[str, int]]:
    """Run `fn(*args, **kwargs)` under torch's FlopCounterMode: (its result, {"total", "attention", "other"}), where
    "attention" is every scaled-dot-product attention call's score rectangle and "other" the rest (the matmuls of
    projections, MLPs, routers and the head)."""
    counter = FlopCounterMode(display=False, custom_mapping={op: _attention_call_flops for op in _ATTENTION_OPS})
    with counter:
        out = fn(*args, **kwargs)
    by_op = {str(op): int(n) for op, n in counter.get_flop_counts().get("Global", {}).items()}
    attention = sum(n for op, n in by_op.items() if "attention" in op)
    total = int(counter.get_total_flops())
    return out, {"total": total, "attention": attention, "other": total - attention}
