"""PyTorch references for the depth-indexed multi-LoRA linear (Relaxed Recursive Transformers, Sec. 2.3-2.4).

A relaxed recursive model gives every depth d its own low-rank update of a shared weight W. When continuous
depth-wise batching puts tokens of different depths into one batch, row n of the batch needs its own adapter:

    Y[n] = X[n] W^T + bias + scale * B[d(n)] A[d(n)] X[n]        d(n) = -1: no adapter (Y[n] = X[n] W^T + bias)

Shapes (nn.Linear convention): X [N, K], W [M, K], A [D, R, K], B [D, M, R], d [N] (int, -1 or 0..D-1).

Three ways to compute it in plain PyTorch, each a baseline of the Triton kernel's benchmark:

    lora_batch_reference    gather each row's A and B and batch the two small products (exact; the test oracle)
    lora_batch_loop         one masked matmul pair per depth present (what a per-depth Python loop costs)
    lora_batch_concat       the paper's approach (Sec. 2.4 / App. K): one large LoRA of rank D*R applied to every
                            row, with the other depths' ranks masked out (redundant compute, no gather)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def check_inputs(x: torch.Tensor, weight: torch.Tensor, lora_a: torch.Tensor, lora_b: torch.Tensor,
                 depth: torch.Tensor, bias: torch.Tensor | None = None) -> None:
    """Shapes and dtypes of a lora_batch call; raises ValueError naming the bad argument."""
    if x.dim() != 2:
        raise ValueError(f"x must be [N, K]; got shape {tuple(x.shape)} (flatten batch and time first)")
    n, k = x.shape
    if weight.dim() != 2 or weight.shape[1] != k:
        raise ValueError(f"weight must be [M, {k}] to match x [N, {k}]; got {tuple(weight.shape)}")
    m = weight.shape[0]
    if lora_a.dim() != 3 or lora_a.shape[2] != k:
        raise ValueError(f"lora_a must be [D, R, {k}]; got {tuple(lora_a.shape)}")
    d, r = lora_a.shape[:2]
    if tuple(lora_b.shape) != (d, m, r):
        raise ValueError(f"lora_b must be [D, M, R] = {(d, m, r)} to match lora_a and weight; "
                         f"got {tuple(lora_b.shape)}")
    if depth.dim() != 1 or depth.shape[0] != n or depth.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"depth must be an int tensor [N={n}]; got {depth.dtype} {tuple(depth.shape)}")
    if bias is not None and tuple(bias.shape) != (m,):
        raise ValueError(f"bias must be [M={m}]; got {tuple(bias.shape)}")
    if not (x.dtype == weight.dtype == lora_a.dtype == lora_b.dtype):
        raise ValueError(f"x, weight, lora_a and lora_b must share a dtype; got {x.dtype}, {weight.dtype}, "
                         f"{lora_a.dtype}, {lora_b.dtype}")
    if n and depth.numel() and (int(depth.min()) < -1 or int(depth.max()) >= d):
        raise ValueError(f"depth values must be -1 (no adapter) or 0..{d - 1}; got min {int(depth.min())}, "
                         f"max {int(depth.max())}")


def lora_delta_reference(x: torch.Tensor, lora_a: torch.Tensor, lora_b: torch.Tensor, depth: torch.Tensor,
                         scale: float = 1.0) -> torch.Tensor:
    """scale * B[d(n)] A[d(n)] X[n] for every row, 0 where d(n) = -1; [N, M], in fp32 (or fp64 for fp64 input)."""
    acc = torch.promote_types(x.dtype, torch.float32)
    has = depth >= 0  # [N]
    idx = depth.clamp(min=0).long()
    a = lora_a.to(acc)[idx]  # [N, R, K]
    b = lora_b.to(acc)[idx]  # [N, M, R]
    shrunk = torch.bmm(a, x.to(acc).unsqueeze(-1))  # [N, R, 1]
    delta = torch.bmm(b, shrunk).squeeze(-1)  # [N, M]
    return scale * delta * has.unsqueeze(-1)


def lora_batch_reference(x: torch.Tensor, weight: torch.Tensor, lora_a: torch.Tensor, lora_b: torch.Tensor,
                         depth: torch.Tensor, bias: torch.Tensor | None = None, scale: float = 1.0) -> torch.Tensor:
    """The test oracle: fp32 base product plus the gathered per-row update, cast back to x's dtype. [N, M]"""
    check_inputs(x, weight, lora_a, lora_b, depth, bias)
    acc = torch.promote_types(x.dtype, torch.float32)
    y = F.linear(x.to(acc), weight.to(acc), None if bias is None else bias.to(acc))  # [N, M]
    return (y + lora_delta_reference(x, lora_a, lora_b, depth, scale)).to(x.dtype)


def lora_batch_loop(x: torch.Tensor, weight: torch.Tensor, lora_a: torch.Tensor, lora_b: torch.Tensor,
                    depth: torch.Tensor, bias: torch.Tensor | None = None, scale: float = 1.0) -> torch.Tensor:
    """Base GEMM, then for each depth present: select its rows, two matmuls, add back (index_add). [N, M]"""
    y = F.linear(x, weight, bias)  # [N, M]
    for d in torch.unique(depth).tolist():
        if d < 0:
            continue
        rows = (depth == d).nonzero(as_tuple=True)[0]
        delta = F.linear(F.linear(x[rows], lora_a[d]), lora_b[d])  # [n_d, M]
        y.index_add_(0, rows, delta, alpha=scale)
    return y


def concat_adapters(lora_a: torch.Tensor, lora_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The paper's merged LoRA: A_cat [D*R, K] (depths stacked) and B_cat [M, D*R] (depths side by side)."""
    d, r, k = lora_a.shape
    return lora_a.reshape(d * r, k), lora_b.permute(1, 0, 2).reshape(lora_b.shape[1], d * r)


def lora_batch_concat(x: torch.Tensor, weight: torch.Tensor, a_cat: torch.Tensor, b_cat: torch.Tensor,
                      depth: torch.Tensor, rank: int, bias: torch.Tensor | None = None,
                      scale: float = 1.0) -> torch.Tensor:
    """All D low-rank products for every row, the ones of other depths zeroed: Y = XW^T + ((X A_cat^T) * mask) B_cat^T.

    `a_cat`, `b_cat` come from `concat_adapters` (built once, outside the timed region).
    """
    n_depths = a_cat.shape[0] // rank
    shrunk = F.linear(x, a_cat)  # [N, D*R]
    mask = (depth.unsqueeze(1) == torch.arange(n_depths, device=x.device).unsqueeze(0))  # [N, D]
    shrunk = shrunk * mask.repeat_interleave(rank, dim=1).to(shrunk.dtype)
    return F.linear(x, weight, bias) + scale * F.linear(shrunk, b_cat)
