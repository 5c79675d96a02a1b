"""UpdateTile: the one step of the Recurrent Transformer's exact tiled prefill (paper 002, Sec. 5, App. C).

After position s - 1 of a layer is final, its persistent keys/values [s - T, s), T = lowbit(s), are folded into
the online-softmax accumulators of queries [s, s + T) at once. `rlib.recurrent.tiled` runs the schedule (and
the backward, whose tiles are `tile_backward`); this package holds the step itself:

    from kernels.tiled_prefill import update_tile, tiles
    update_tile(q, k, v, acc, m, l, q0, q1, k0, k1, slopes)   # in place on acc, m, l rows [q0, q1)

`impl="auto"` runs the Triton kernel on CUDA tensors (and on CPU under TRITON_INTERPRET=1, which is how the tests
run it) and the PyTorch reference elsewhere. Benchmarks: `python -m kernels.tiled_prefill.bench`.
"""

from __future__ import annotations

import torch

from kernels.lora_batch import triton_available
from kernels.tiled_prefill.reference import alibi_bias, lowbit, tile_backward, tile_traffic, tiles
from kernels.tiled_prefill.reference import update_tile as update_tile_reference

__all__ = ["IMPLS", "alibi_bias", "lowbit", "resolve_impl", "tile_backward", "tile_traffic", "tiles", "update_tile",
           "update_tile_reference"]

IMPLS = ("auto", "triton", "reference")


def resolve_impl(impl: str, device: torch.device | str) -> str:
    """"triton" or "reference" for tensors on `device`; a clear error for an unknown or unavailable choice."""
    if impl not in IMPLS:
        raise ValueError(f"impl={impl!r}: choose from {IMPLS}")
    if impl == "auto":
        return "triton" if triton_available(device) else "reference"
    if impl == "triton" and not triton_available(device):
        raise RuntimeError(f"impl='triton' needs a CUDA device or TRITON_INTERPRET=1 (tensors are on {device}); "
                           "use impl='reference' or 'auto'")
    return impl


def update_tile(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, acc: torch.Tensor, m: torch.Tensor,
                l: torch.Tensor, q0: int, q1: int, k0: int, k1: int, slopes: torch.Tensor | None = None,  # noqa: E741
                *, impl: str = "auto", bias: torch.Tensor | None = None) -> None:
    """Algorithm 2 in place (shapes in `kernels.tiled_prefill.reference`). `bias`: the tile's ALiBi bias precomputed
    by `alibi_bias`, which the reference adds instead of computing it from `slopes` (the Triton kernel always
    computes it from `slopes` in registers)."""
    if resolve_impl(impl, q.device) == "triton":
        from kernels.tiled_prefill.triton_ops import update_tile_triton

        update_tile_triton(q, k, v, acc, m, l, q0, q1, k0, k1, slopes)
    else:
        update_tile_reference(q, k, v, acc, m, l, q0, q1, k0, k1, slopes, bias)
