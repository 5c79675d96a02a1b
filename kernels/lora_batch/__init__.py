"""Depth-indexed multi-LoRA linear: Y[n] = X[n] W^T + bias + scale * B[d(n)] A[d(n)] X[n], d(n) = -1: no adapter.

Relaxed Recursive Transformers (Sec. 2.3-2.4, App. K) give each depth of a looped model its own LoRA; continuous
depth-wise batching then mixes depths in one batch, so each row needs its own adapter. The paper merges the
adapters into one large LoRA and computes every depth's product for every row; this kernel gathers instead.

    from kernels.lora_batch import lora_batch
    y = lora_batch(x, weight, lora_a, lora_b, depth)           # x [N, K], weight [M, K], lora_a [D, R, K],
                                                                # lora_b [D, M, R], depth [N] in {-1, 0..D-1}

`impl="auto"` runs the Triton kernel on CUDA tensors (and on CPU under TRITON_INTERPRET=1, which is how the tests
run it) and the gathered PyTorch reference elsewhere. Forward only: training batches of the book hold one depth per
call, where the ordinary per-depth LoRA modules of `rlib.relax` apply (no multi-LoRA kernel of the field has a
backward either). Benchmarks: `python -m kernels.lora_batch.bench`.
"""

from __future__ import annotations

import os

import torch

from kernels.lora_batch.reference import (
    check_inputs,
    concat_adapters,
    lora_batch_concat,
    lora_batch_loop,
    lora_batch_reference,
    lora_delta_reference,
)

__all__ = ["IMPLS", "VARIANTS", "concat_adapters", "lora_batch", "lora_batch_concat", "lora_batch_loop",
           "lora_batch_reference", "lora_delta_reference", "triton_available"]

IMPLS = ("auto", "triton", "reference", "loop")
VARIANTS = ("segmented", "per_row")


def triton_available(device: torch.device | str) -> bool:
    """Whether the Triton path can run for tensors on `device` (CUDA, or any device under the interpreter)."""
    interpret = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    if torch.device(device).type != "cuda" and not interpret:
        return False
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def lora_batch(x: torch.Tensor, weight: torch.Tensor, lora_a: torch.Tensor, lora_b: torch.Tensor,
               depth: torch.Tensor, bias: torch.Tensor | None = None, scale: float = 1.0, *, impl: str = "auto",
               variant: str = "segmented", fuse_base: bool = False) -> torch.Tensor:
    """The depth-indexed multi-LoRA linear (module docstring); returns Y [N, M] in x's dtype."""
    if impl not in IMPLS:
        raise ValueError(f"impl={impl!r}: choose from {IMPLS}")
    if variant not in VARIANTS:
        raise ValueError(f"variant={variant!r}: choose from {VARIANTS}")
    check_inputs(x, weight, lora_a, lora_b, depth, bias)
    if impl == "auto":
        impl = "triton" if triton_available(x.device) else "reference"
    if impl == "reference":
        return lora_batch_reference(x, weight, lora_a, lora_b, depth, bias, scale)
    if impl == "loop":
        return lora_batch_loop(x, weight, lora_a, lora_b, depth, bias, scale)
    if not triton_available(x.device):
        raise RuntimeError(f"impl='triton' needs CUDA tensors or TRITON_INTERPRET=1; x is on {x.device}")
    from kernels.lora_batch.triton_ops import lora_batch_triton

    return lora_batch_triton(x.contiguous(), weight, lora_a, lora_b, depth, bias, scale, variant=variant,
                             fuse_base=fuse_base)
