"""Linear maps for the few-token products of decoding on CPU (an engineering aid for timing paper 004's Sec. 4.3
self-speculation and its autoregressive baseline; not from a paper).

Decoding multiplies a few token vectors x [M, D] (M = batch x new tokens: 1 when drafting or decoding
autoregressively, d + 1 when verifying) by every weight matrix. Each weight is read from memory once per product, so
a product should cost about its bytes over the memory bandwidth. On x86 CPUs `F.linear` (MKL) does not manage that
for such M. `benchmarks/decode_matmul.py` times each path on cold weights (SmolLM2's shapes on 2 cores:
`benchmarks/results/decode_matmul_cpu.csv`), and `decode_linear` takes the faster one by the shape:

    M = 1, out >= in       y = x @ W^T with W^T stored row-major (a contiguous transposed copy): a streaming
                           axpy; 1.8x faster for the 49,152 x 576 head, 1.5x for gate/up, slower for out < in
    2 <= M <= 4, or        y = (W @ x^T)^T: the weight becomes the large left operand; 2x to 8x faster for
    M <= 8 and out > in    the head, 2x to 3.6x for q/o, k/v and gate/up, about 1.2x for down
    otherwise              F.linear unchanged (prefill, training)

`fast_decoding(model)` is a context manager. It swaps every adapter-free `Projection` for a `DecodeProjection` that
shares the weight and adds the transposed copy where M = 1 uses it, and it routes the LM head the same way. The
copies hold the head's and the projections with out >= in (about 0.4 GB for SmolLM2) while the block lasts; the model
is restored on exit. The products sum the same terms in another order, so logits agree to float rounding, not bit
for bit: compare decoders inside one block, as `rlib.layerskip.decoding` times every method. Off CPU it does nothing
(cuBLAS handles small M). Under autograd a `DecodeProjection` uses F.linear, so gradients stay right.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.nn as nn
import torch.nn.functional as F

from rlib.model.layers import Projection

__all__ = ["SMALL_M", "WIDE_SMALL_M", "DecodeProjection", "decode_linear", "fast_decoding", "wants_transposed"]

SMALL_M = 4  # up to this many token vectors every product is weight-major
WIDE_SMALL_M = 8  # and up to this many for a weight with out > in


def wants_transposed(weight: torch.Tensor) -> bool:
    """Whether `decode_linear` uses a contiguous transpose of this weight [out, in] (at M = 1: when out >= in)."""
    return weight.shape[0] >= weight.shape[1]


def decode_linear(x: torch.Tensor, weight: torch.Tensor, weight_t: torch.Tensor | None = None,
                  bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [..., in] -> [..., out] as F.linear(x, weight, bias), with weight [out, in] and weight_t its contiguous
    transpose [in, out] (needed where `wants_transposed`); the product is chosen by the token count M and the shape
    (module docstring)."""
    flat = x.reshape(-1, x.shape[-1])  # [M, in]
    tokens, (out_features, in_features) = flat.shape[0], weight.shape
    if tokens == 1 and weight_t is not None and wants_transposed(weight):
        y = flat @ weight_t  # [1, out]
    elif 1 < tokens <= SMALL_M or (1 < tokens <= WIDE_SMALL_M and out_features > in_features):
        y = (weight @ flat.t()).t()  # [M, out]
    else:
        y = F.linear(flat, weight)
    if bias is not None:
        y = y + bias
    return y.reshape(*x.shape[:-1], out_features)


class _Transposed:
    """A weight's contiguous transpose, recomputed whenever the weight is changed in place."""

    def __init__(self, weight: torch.Tensor):
        self.weight = weight
        self.version = -1
        self.value = weight

    def get(self) -> torch.Tensor:
        if self.version != self.weight._version:
            with torch.no_grad():
                self.value = self.weight.detach().t().contiguous()  # [in, out]
            self.version = self.weight._version
        return self.value


class DecodeProjection(nn.Module):
    """An adapter-free `Projection` for decoding: the same weight and bias (shared, same state-dict names), the
    product of `decode_linear`. `depth` is accepted and ignored, as an adapter-free Projection ignores it."""

    def __init__(self, projection: Projection):
        super().__init__()
        if len(projection.adapters):
            raise ValueError("DecodeProjection takes adapter-free projections only (depth-wise LoRA keeps F.linear)")
        self.weight = projection.weight
        self.bias = projection.bias
        self.source = [projection]  # a list: not a submodule, so the state dict keeps the Projection's names
        self._transposed = _Transposed(projection.weight) if wants_transposed(projection.weight) else None

    def forward(self, x: torch.Tensor, depth: int | None = None) -> torch.Tensor:
        if torch.is_grad_enabled() and self.weight.requires_grad:
            return F.linear(x, self.weight, self.bias)
        weight_t = self._transposed.get() if self._transposed is not None else None
        return decode_linear(x, self.weight, weight_t, self.bias)


def _decode_head(model, transposed: _Transposed):
    """Decoder.head with `decode_linear` for the LM head product."""

    def head(hidden: torch.Tensor) -> torch.Tensor:
        hidden = model.final_norm(hidden)
        weight = transposed.weight
        if torch.is_grad_enabled() and weight.requires_grad:
            logits = F.linear(hidden, weight)
        else:
            logits = decode_linear(hidden, weight, transposed.get())
        if model.config.logit_softcap is not None:
            cap = model.config.logit_softcap
            logits = cap * torch.tanh(logits / cap)
        return logits

    return head


@contextmanager
def fast_decoding(model, enabled: bool = True):
    """Within the block, `model` (an rlib Decoder on CPU) decodes with `decode_linear`; restored on exit, also on an
    error. A no-op when `enabled` is False, off CPU, or when the model is already inside such a block."""
    if not enabled or model.embed.weight.device.type != "cpu" or "head" in vars(model):
        yield model
        return
    swapped: list[tuple[nn.Module, str, Projection]] = []
    try:
        for parent in list(model.modules()):
            for name, child in list(parent.named_children()):
                if isinstance(child, Projection) and not len(child.adapters):
                    setattr(parent, name, DecodeProjection(child))
                    swapped.append((parent, name, child))
        weight = model.embed.weight if model.lm_head is None else model.lm_head.weight
        model.head = _decode_head(model, _Transposed(weight))  # an instance attribute shadows Decoder.head
        yield model
    finally:
        vars(model).pop("head", None)
        for parent, name, child in swapped:
            setattr(parent, name, child)
