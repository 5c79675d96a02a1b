"""Triton kernels of the depth-indexed multi-LoRA linear (see `reference.py` for the operation and shapes).

The update B[d] A[d] x is split, as in Punica/S-LoRA/vLLM, into a *shrink* (S = A[d] x, K -> R, fp32 [N, R]) and
an *expand* (Y += scale * B[d] S, R -> M). Two schedules of each:

segmented   rows are grouped by depth (a stable sort, on the device); a program takes a tile of up to BLOCK_M rows of
            one depth and uses tensor-core dots. The grid is (depth groups, cdiv(N, BLOCK_M), output blocks):
            programs past the end of their group exit at once, so no host synchronization is needed to build it.
per_row     one row per program, vector products (BGMV-style): no sort, best when N is a handful of tokens.

The expand can fuse the base GEMM (Y = X W^T + bias + the update, one pass over each output tile, rows without an
adapter included); without fusion it adds into a Y that `F.linear` (cuBLAS) computed. Accumulation is fp32.

stacked     (`lora_batch_stacked`) no shrink kernel: one vendor GEMM against [W; A[0]; ...; A[D-1]] (`stack_weights`,
            built once) writes the base product and every depth's S side by side, then the expand (either schedule)
            reads each row's own depth's S columns and adds into the base product in place: two kernels in all.

Launch configurations: `lora_config` picks the segmented kernels' configuration from `SEGMENTED_CONFIGS` by the
number of rows only (a 16-row tile for a handful of tokens, 64 rows on 8 warps otherwise); the per-row kernels have
one (`PER_ROW_CONFIG`). The output, reduction and rank steps are 64 wide whatever the shapes (masked lanes load
nothing), so a rank-8 adapter and a rank-512 one run the same compiled kernel (rank > 64 loops in steps of 64).
`python -m kernels.aot` compiles every configuration for sm_80 and sm_90 and checks registers, spills and shared
memory. Whether a bias is added is a run-time flag, not a compile-time one.

Under TRITON_INTERPRET=1 (CPU) bf16 arithmetic is wrong in the interpreter; the kernels upcast tiles to fp32 on
load when `UPCAST` is set, which the launcher does for bf16 there.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


class LoraConfig(NamedTuple):
    """One launch configuration of the four kernels."""

    block_m: int  # rows per program (segmented kernels; 1 for the per-row ones)
    block_n: int  # output columns per program (expand)
    block_k: int  # reduction step over the input features
    block_r: int  # rank step
    num_warps: int
    num_stages: int

    @property
    def label(self) -> str:
        return (f"BM{self.block_m} BN{self.block_n} BK{self.block_k} BR{self.block_r} w{self.num_warps} "
                f"s{self.num_stages}")


SEGMENTED_CONFIGS = (LoraConfig(16, 64, 64, 64, 4, 2), LoraConfig(64, 64, 64, 64, 8, 2))
PER_ROW_CONFIG = LoraConfig(1, 64, 64, 64, 4, 2)


def lora_config(n_rows: int, variant: str = "segmented") -> LoraConfig:
    """The configuration of a call on `n_rows` rows (see `lora_configs`)."""
    if variant == "per_row":
        return PER_ROW_CONFIG
    small, large = SEGMENTED_CONFIGS
    return small if n_rows <= small.block_m else large


def lora_configs(variant: str) -> tuple[LoraConfig, ...]:
    """Every configuration `lora_config` can return for `variant` (what `kernels.aot` compiles)."""
    return SEGMENTED_CONFIGS if variant == "segmented" else (PER_ROW_CONFIG,)


class Segments(NamedTuple):
    """Rows grouped by depth: group 0 = no adapter (depth -1), group d + 1 = depth d."""

    order: torch.Tensor  # [N] int32, row indices sorted by depth (stable)
    starts: torch.Tensor  # [D + 1] int32, first position of each group in `order`
    counts: torch.Tensor  # [D + 1] int32, rows per group


def segments(depth: torch.Tensor, n_depths: int) -> Segments:
    """Sort rows by depth on the device (no host synchronization, so a CUDA graph can capture it: `bincount` would
    read the maximum back to size its output)."""
    groups = (depth.long() + 1).clamp(min=0, max=n_depths)  # [N]
    order = torch.argsort(groups, stable=True).to(torch.int32)
    counts = torch.zeros(n_depths + 1, dtype=torch.long, device=depth.device).scatter_add_(
        0, groups, torch.ones_like(groups))  # [D + 1]
    starts = torch.cumsum(counts, 0) - counts
    return Segments(order, starts.to(torch.int32), counts.to(torch.int32))


@triton.jit
def _tile_rows(order_ptr, start, tile, count, BLOCK_M: tl.constexpr):
    """The row indices (int64) of tile `tile` of a depth group, and which of its BLOCK_M slots are real rows."""
    offs_m = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_m = offs_m < count
    rows = tl.load(order_ptr + start + offs_m, mask=mask_m, other=0).to(tl.int64)
    return rows, mask_m


@triton.jit
def _rows_times_t(acc, x_ptr, rows, mask_m, stride_xn, stride_xk, m_ptr, offs_c, mask_c, stride_mc, stride_mk, K,
                  BLOCK_K: tl.constexpr, UPCAST: tl.constexpr):
    """acc [BM, BC] += X[rows, :] @ M[offs_c, :]^T over K in BLOCK_K steps (M row-major like nn.Linear weights)."""
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        mask_k = offs_k < K
        x = tl.load(x_ptr + rows[:, None] * stride_xn + offs_k[None, :] * stride_xk,
                    mask=mask_m[:, None] & mask_k[None, :], other=0.0)  # [BM, BK]
        m = tl.load(m_ptr + offs_c[None, :] * stride_mc + offs_k[:, None] * stride_mk,
                    mask=mask_k[:, None] & mask_c[None, :], other=0.0)  # [BK, BC]
        if UPCAST:
            x = x.to(tl.float32)
            m = m.to(tl.float32)
        acc += tl.dot(x, m)
    return acc


@triton.jit
def _shrink_segmented(x_ptr, a_ptr, s_ptr, order_ptr, starts_ptr, counts_ptr, K, R,
                      stride_xn, stride_xk, stride_ad, stride_ar, stride_ak, stride_sn, stride_sr,
                      BLOCK_M: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr, UPCAST: tl.constexpr):
    depth = tl.program_id(0)
    tile = tl.program_id(1)
    count = tl.load(counts_ptr + depth + 1)
    if tile * BLOCK_M < count:
        rows, mask_m = _tile_rows(order_ptr, tl.load(starts_ptr + depth + 1), tile, count, BLOCK_M)
        offs_r = tl.program_id(2) * BLOCK_R + tl.arange(0, BLOCK_R)
        mask_r = offs_r < R
        acc = _rows_times_t(tl.zeros((BLOCK_M, BLOCK_R), dtype=tl.float32), x_ptr, rows, mask_m, stride_xn,
                            stride_xk, a_ptr + depth * stride_ad, offs_r, mask_r, stride_ar, stride_ak, K, BLOCK_K,
                            UPCAST)
        tl.store(s_ptr + rows[:, None] * stride_sn + offs_r[None, :] * stride_sr, acc,
                 mask=mask_m[:, None] & mask_r[None, :])


@triton.jit(do_not_specialize=["has_bias"])
def _expand_segmented(x_ptr, w_ptr, bias_ptr, s_ptr, b_ptr, y_ptr, order_ptr, starts_ptr, counts_ptr, K, M, R, scale,
                      has_bias, stride_xn, stride_xk, stride_wm, stride_wk, stride_sn, stride_sd, stride_sr,
                      stride_bd, stride_bm, stride_br, stride_yn, stride_ym,
                      FUSE_BASE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr, UPCAST: tl.constexpr):
    group = tl.program_id(0) + (0 if FUSE_BASE else 1)  # with a fused base, group 0 (no adapter) needs Y too
    depth = group - 1
    tile = tl.program_id(1)
    count = tl.load(counts_ptr + group)
    if tile * BLOCK_M < count:
        rows, mask_m = _tile_rows(order_ptr, tl.load(starts_ptr + group), tile, count, BLOCK_M)
        offs_n = tl.program_id(2) * BLOCK_N + tl.arange(0, BLOCK_N)
        mask_n = offs_n < M
        mask_y = mask_m[:, None] & mask_n[None, :]
        y_ptrs = y_ptr + rows[:, None] * stride_yn + offs_n[None, :] * stride_ym
        if FUSE_BASE:
            acc = _rows_times_t(tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32), x_ptr, rows, mask_m, stride_xn,
                                stride_xk, w_ptr, offs_n, mask_n, stride_wm, stride_wk, K, BLOCK_K, UPCAST)
            if has_bias != 0:
                acc += tl.load(bias_ptr + offs_n, mask=mask_n, other=0.0).to(tl.float32)[None, :]
        else:
            acc = tl.load(y_ptrs, mask=mask_y, other=0.0).to(tl.float32)
        if depth >= 0:
            for r0 in range(0, R, BLOCK_R):
                offs_r = r0 + tl.arange(0, BLOCK_R)
                mask_r = offs_r < R
                s = tl.load(s_ptr + depth * stride_sd + rows[:, None] * stride_sn + offs_r[None, :] * stride_sr,
                            mask=mask_m[:, None] & mask_r[None, :], other=0.0)  # [BM, BR] fp32 (stacked: x dtype)
                b = tl.load(b_ptr + depth * stride_bd + offs_n[None, :] * stride_bm + offs_r[:, None] * stride_br,
                            mask=mask_r[:, None] & mask_n[None, :], other=0.0)  # [BR, BN] = B[d]^T tile
                if UPCAST:
                    b = b.to(tl.float32)
                    s = s.to(tl.float32)
                else:
                    s = s.to(b.dtype)
                acc += scale * tl.dot(s, b)
        tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=mask_y)


@triton.jit
def _shrink_per_row(x_ptr, a_ptr, s_ptr, depth_ptr, K, R, stride_xn, stride_xk, stride_ad, stride_ar, stride_ak,
                    stride_sn, stride_sr, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    depth = tl.load(depth_ptr + row)
    if depth >= 0:
        offs_r = tl.program_id(1) * BLOCK_R + tl.arange(0, BLOCK_R)
        mask_r = offs_r < R
        acc = tl.zeros((BLOCK_R,), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            mask_k = offs_k < K
            x = tl.load(x_ptr + row * stride_xn + offs_k * stride_xk, mask=mask_k, other=0.0).to(tl.float32)
            a = tl.load(a_ptr + depth * stride_ad + offs_r[:, None] * stride_ar + offs_k[None, :] * stride_ak,
                        mask=mask_r[:, None] & mask_k[None, :], other=0.0).to(tl.float32)  # [BR, BK]
            acc += tl.sum(a * x[None, :], axis=1)
        tl.store(s_ptr + row * stride_sn + offs_r * stride_sr, acc, mask=mask_r)


@triton.jit(do_not_specialize=["has_bias"])
def _expand_per_row(x_ptr, w_ptr, bias_ptr, s_ptr, b_ptr, y_ptr, depth_ptr, K, M, R, scale, has_bias,
                    stride_xn, stride_xk, stride_wm, stride_wk, stride_sn, stride_sd, stride_sr,
                    stride_bd, stride_bm, stride_br, stride_yn, stride_ym,
                    FUSE_BASE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    BLOCK_R: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    depth = tl.load(depth_ptr + row)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < M
    y_ptrs = y_ptr + row * stride_yn + offs_n * stride_ym
    if FUSE_BASE:
        acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            mask_k = offs_k < K
            x = tl.load(x_ptr + row * stride_xn + offs_k * stride_xk, mask=mask_k, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + offs_n[:, None] * stride_wm + offs_k[None, :] * stride_wk,
                        mask=mask_n[:, None] & mask_k[None, :], other=0.0).to(tl.float32)  # [BN, BK]
            acc += tl.sum(w * x[None, :], axis=1)
        if has_bias != 0:
            acc += tl.load(bias_ptr + offs_n, mask=mask_n, other=0.0).to(tl.float32)
    else:
        acc = tl.load(y_ptrs, mask=mask_n, other=0.0).to(tl.float32)
    if depth >= 0:
        for r0 in range(0, R, BLOCK_R):
            offs_r = r0 + tl.arange(0, BLOCK_R)
            mask_r = offs_r < R
            s = tl.load(s_ptr + row * stride_sn + depth * stride_sd + offs_r * stride_sr, mask=mask_r,
                        other=0.0).to(tl.float32)  # [BR]
            b = tl.load(b_ptr + depth * stride_bd + offs_n[:, None] * stride_bm + offs_r[None, :] * stride_br,
                        mask=mask_n[:, None] & mask_r[None, :], other=0.0).to(tl.float32)  # [BN, BR]
            acc += scale * tl.sum(b * s[None, :], axis=1)
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=mask_n)


Launch = tuple  # (kernel, grid, args, kwargs)


def launches(x: torch.Tensor, weight: torch.Tensor, lora_a: torch.Tensor, lora_b: torch.Tensor, depth: torch.Tensor,
             seg: Segments | None, shrunk: torch.Tensor, y: torch.Tensor, bias: torch.Tensor | None, scale: float,
             variant: str, fuse_base: bool, config: LoraConfig, shrink: bool = True) -> list[Launch]:
    """The shrink and the expand launch, as (kernel, grid, args, kwargs); `seg` is needed by the segmented variant.
    Without `shrink`, only the expand, reading S from `shrunk` [N, D*R] at columns d*R ... (d+1)*R - 1 of each row
    (the stacked schedule, where one GEMM has computed every depth's shrink). Pure bookkeeping (shapes and strides
    only), shared by `lora_batch_triton`, `lora_batch_stacked` and `kernels.aot`."""
    n, k = x.shape
    m = weight.shape[0]
    n_depths, r = lora_b.shape[0], lora_b.shape[2]
    upcast = INTERPRET and x.dtype == torch.bfloat16
    bias_arg = bias if bias is not None else y  # a valid pointer; never read without a bias
    shrunk_strides = (shrunk.stride(0), 0, shrunk.stride(1)) if shrink else \
        (shrunk.stride(0), r * shrunk.stride(1), shrunk.stride(1))  # row, depth, rank
    common = (x.stride(0), x.stride(1), *weight.stride(), *shrunk_strides, *lora_b.stride(), *y.stride())
    warps = {"num_warps": config.num_warps, "num_stages": config.num_stages}
    if variant == "segmented":
        n_tiles = triton.cdiv(n, config.block_m)
        groups = n_depths + 1 if fuse_base else n_depths
        plan = [(_expand_segmented, (groups, n_tiles, triton.cdiv(m, config.block_n)),
                 (x, weight, bias_arg, shrunk, lora_b, y, seg.order, seg.starts, seg.counts, k, m, r, float(scale),
                  int(bias is not None), *common),
                 {"FUSE_BASE": fuse_base, "BLOCK_M": config.block_m, "BLOCK_N": config.block_n,
                  "BLOCK_K": config.block_k, "BLOCK_R": config.block_r, "UPCAST": upcast, **warps})]
        if shrink:
            plan.insert(0, (_shrink_segmented, (n_depths, n_tiles, triton.cdiv(r, config.block_r)),
                            (x, lora_a, shrunk, seg.order, seg.starts, seg.counts, k, r, x.stride(0), x.stride(1),
                             *lora_a.stride(), *shrunk.stride()),
                            {"BLOCK_M": config.block_m, "BLOCK_R": config.block_r, "BLOCK_K": config.block_k,
                             "UPCAST": upcast, **warps}))
        return plan
    plan = [(_expand_per_row, (n, triton.cdiv(m, config.block_n)),
             (x, weight, bias_arg, shrunk, lora_b, y, depth, k, m, r, float(scale), int(bias is not None), *common),
             {"FUSE_BASE": fuse_base, "BLOCK_N": config.block_n, "BLOCK_K": config.block_k,
              "BLOCK_R": config.block_r, **warps})]
    if shrink:
        plan.insert(0, (_shrink_per_row, (n, triton.cdiv(r, config.block_r)),
                        (x, lora_a, shrunk, depth, k, r, x.stride(0), x.stride(1), *lora_a.stride(),
                         *shrunk.stride()),
                        {"BLOCK_R": config.block_r, "BLOCK_K": config.block_k, **warps}))
    return plan


def lora_batch_triton(x: torch.Tensor, weight: torch.Tensor, lora_a: torch.Tensor, lora_b: torch.Tensor,
                      depth: torch.Tensor, bias: torch.Tensor | None = None, scale: float = 1.0,
                      variant: str = "segmented", fuse_base: bool = False,
                      config: LoraConfig | None = None) -> torch.Tensor:
    """Y [N, M] = X W^T + bias + scale * B[d] A[d] X per row (see the module docstring for the schedules).

    No host synchronization: with fixed shapes the call can be captured in a CUDA graph and replayed with another
    depth mix written into `depth` (the grid covers every row in every depth group)."""
    if variant not in ("segmented", "per_row"):
        raise ValueError(f"variant={variant!r}: use 'segmented' or 'per_row'")
    n = x.shape[0]
    m = weight.shape[0]
    n_depths, r = lora_a.shape[:2]
    depth = depth.to(device=x.device, dtype=torch.int32).contiguous()
    if fuse_base:
        y = torch.empty((n, m), device=x.device, dtype=x.dtype)
    else:
        y = F.linear(x, weight, bias)  # [N, M], the base GEMM by the vendor library
    if n == 0:
        return y
    # [N, R]; rows without an adapter are neither written by the shrink nor read by the expand
    shrunk = torch.empty((n, r), device=x.device, dtype=torch.float32)
    seg = segments(depth, n_depths) if variant == "segmented" else None
    for kernel, grid, args, kwargs in launches(x, weight, lora_a, lora_b, depth, seg, shrunk, y, bias, scale, variant,
                                               fuse_base, config or lora_config(n, variant)):
        kernel[grid](*args, **kwargs)
    return y


class StackedWeights(NamedTuple):
    """A shared weight with every depth's LoRA A stacked under it, for `lora_batch_stacked` (built once, at load)."""

    weight: torch.Tensor  # [M + D*R, K]: rows 0..M-1 = W, then A[0], ..., A[D-1]
    bias: torch.Tensor | None  # [M + D*R]: the bias, then zeros (None without a bias)
    out_features: int  # M
    rank: int  # R


def stack_weights(weight: torch.Tensor, lora_a: torch.Tensor, bias: torch.Tensor | None = None) -> StackedWeights:
    """[W; A[0]; ...; A[D-1]] (and the bias padded with zeros) for `lora_batch_stacked`."""
    n_depths, rank, k = lora_a.shape
    if weight.shape[1] != k:
        raise ValueError(f"weight [M, {weight.shape[1]}] and lora_a [D, R, {k}] must share K")
    stacked = torch.cat([weight, lora_a.reshape(n_depths * rank, k).to(weight.dtype)])  # [M + D*R, K]
    padded = None if bias is None else torch.cat([bias, bias.new_zeros(n_depths * rank)])
    return StackedWeights(stacked, padded, weight.shape[0], rank)


def lora_batch_stacked(x: torch.Tensor, stacked: StackedWeights, lora_b: torch.Tensor, depth: torch.Tensor,
                       scale: float = 1.0, variant: str = "per_row", config: LoraConfig | None = None) -> torch.Tensor:
    """Y [N, M] = X W^T + bias + scale * B[d] A[d] X per row, as two kernels: one vendor GEMM against the stacked
    weight computes the base product and every depth's shrink at once (the D*R extra output columns cost D*R / M of
    the base GEMM), then one Triton expand adds B[d(n)] S[n, d(n)] into each row in place. Rows without an adapter
    (depth -1) are left as the GEMM wrote them. The same schedule as the paper's merged LoRA (App. K) for the shrink,
    with the expand gathered per row instead of masked over every depth.

    Returns a view [N, M] of the GEMM's [N, M + D*R] output (`.contiguous()` copies it if a caller needs that). No
    host synchronization: capturable in a CUDA graph and replayable with another depth mix."""
    if variant not in ("segmented", "per_row"):
        raise ValueError(f"variant={variant!r}: use 'segmented' or 'per_row'")
    m, rank = stacked.out_features, stacked.rank
    n_depths = lora_b.shape[0]
    if tuple(lora_b.shape[1:]) != (m, rank) or stacked.weight.shape[0] != m + n_depths * rank:
        raise ValueError(f"lora_b must be [D, M={m}, R={rank}] with D*R = {stacked.weight.shape[0] - m} stacked "
                         f"rows; got {tuple(lora_b.shape)}")
    depth = depth.to(device=x.device, dtype=torch.int32).contiguous()
    out = F.linear(x, stacked.weight, stacked.bias)  # [N, M + D*R]
    y, shrunk = out[:, :m], out[:, m:]  # [N, M], [N, D*R]
    if x.shape[0] == 0:
        return y
    seg = segments(depth, n_depths) if variant == "segmented" else None
    config = config or lora_config(x.shape[0], variant)
    for kernel, grid, args, kwargs in launches(x, stacked.weight[:m], None, lora_b, depth, seg, shrunk, y, None,
                                               scale, variant, False, config, shrink=False):
        kernel[grid](*args, **kwargs)
    return y
