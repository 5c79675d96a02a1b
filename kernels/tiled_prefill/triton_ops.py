"""Triton kernel of UpdateTile (see `reference.py` for the operation and shapes).

One program takes BLOCK_M query rows of one (batch, head) and streams the tile's keys and values in blocks of
BLOCK_N, keeping the online-softmax state (acc, m, l) in fp32 registers, then writes it back once. A tile has
T = lowbit(s) keys: half of all tiles have a single key and 15/16 have at most 8, so the blocks are masked
16-wide minimum (`tl.dot` needs 16) and the launcher sizes them to the tile.

Launch configurations: `tile_config` picks one of `tile_configs(head_dim)` (blocks of 16, 32 or 64 rows and keys;
at head dim >= 128 the 64-wide tile runs on 8 warps, whose 128 registers a thread leave room, where 4 warps sit at
the 255-register ceiling). `python -m kernels.aot` compiles every one of them for sm_80 and sm_90 and checks
registers, spills and shared memory. The tile coordinates, head counts and the statistics' strides are not
specialized (`do_not_specialize`) and ALiBi is a run-time flag, so one compiled kernel per configuration serves
every tile of the schedule, with or without ALiBi. fp32 inputs use IEEE products
(no TF32), so the kernel can be checked against the reference at 1e-5; fp16/bf16 inputs use the tensor cores
with fp32 accumulation. Under TRITON_INTERPRET=1 (CPU) bf16 arithmetic is wrong in the interpreter, so bf16
tiles are upcast on load there (`UPCAST`).
"""

from __future__ import annotations

import os
from typing import NamedTuple

import torch
import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")

__all__ = ["TileConfig", "launch_args", "tile_config", "tile_configs", "update_tile_triton"]


class TileConfig(NamedTuple):
    """One launch configuration of `_update_tile_kernel`."""

    block_m: int  # query rows per program
    block_n: int  # keys per inner step
    num_warps: int
    num_stages: int

    @property
    def label(self) -> str:
        return f"BM{self.block_m} BN{self.block_n} w{self.num_warps} s{self.num_stages}"


BLOCKS = (16, 32, 64)  # the tile widths the launcher chooses from (tl.dot needs >= 16)


def tile_config(keys: int, head_dim: int) -> TileConfig:
    """The configuration for a tile of `keys` = T keys (and at most T query rows) at this head dim."""
    block = max(BLOCKS[0], min(BLOCKS[-1], triton.next_power_of_2(max(1, keys))))
    wide = block == BLOCKS[-1]
    return TileConfig(block, block, 8 if wide and head_dim >= 128 else 4, 2 if wide else 1)


def tile_configs(head_dim: int) -> list[TileConfig]:
    """Every configuration `tile_config` can return at this head dim (what `kernels.aot` compiles)."""
    return sorted({tile_config(keys, head_dim) for keys in BLOCKS})


@triton.jit(do_not_specialize=["q0", "q1", "k0", "k1", "n_heads", "groups", "stride_mb", "stride_mh", "has_alibi"])
def _update_tile_kernel(q_ptr, k_ptr, v_ptr, acc_ptr, m_ptr, l_ptr, slopes_ptr, q0, q1, k0, k1, n_heads, groups,
                        stride_qb, stride_qh, stride_qn, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh,
                        stride_vn, stride_ab, stride_ah, stride_an, stride_mb, stride_mh, head_dim, has_alibi,
                        IEEE: tl.constexpr, UPCAST: tl.constexpr, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    bh = tl.program_id(0)
    b = bh // n_heads
    h = bh % n_heads
    kv = h // groups
    rows = q0 + tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)  # query positions
    dims = tl.arange(0, BLOCK_D)
    row_ok = rows < q1
    dim_ok = dims < head_dim
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + rows[:, None] * stride_qn + dims[None, :],
                mask=row_ok[:, None] & dim_ok[None, :], other=0.0)  # [BM, BD]
    if UPCAST:
        q = q.to(tl.float32)
    acc_ptrs = acc_ptr + b * stride_ab + h * stride_ah + rows[:, None] * stride_an + dims[None, :]
    acc = tl.load(acc_ptrs, mask=row_ok[:, None] & dim_ok[None, :], other=0.0)  # [BM, BD] fp32
    stat = b * stride_mb + h * stride_mh + rows
    m = tl.load(m_ptr + stat, mask=row_ok, other=0.0)  # [BM]
    den = tl.load(l_ptr + stat, mask=row_ok, other=1.0)
    slope = 0.0
    if has_alibi != 0:
        slope = tl.load(slopes_ptr + h).to(tl.float32)  # fp32 whatever the slopes tensor holds
    for start in range(k0, k1, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)  # key positions
        col_ok = cols < k1
        kmask = col_ok[:, None] & dim_ok[None, :]
        keys = tl.load(k_ptr + b * stride_kb + kv * stride_kh + cols[:, None] * stride_kn + dims[None, :],
                       mask=kmask, other=0.0)  # [BN, BD]
        values = tl.load(v_ptr + b * stride_vb + kv * stride_vh + cols[:, None] * stride_vn + dims[None, :],
                         mask=kmask, other=0.0)
        if UPCAST:
            keys = keys.to(tl.float32)
            values = values.to(tl.float32)
        if IEEE:
            scores = tl.dot(q, tl.trans(keys), input_precision="ieee")  # [BM, BN] fp32
        else:
            scores = tl.dot(q, tl.trans(keys))
        if has_alibi != 0:
            scores -= slope * (rows[:, None] - cols[None, :]).to(tl.float32)
        scores = tl.where(col_ok[None, :], scores, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, axis=1))
        p = tl.exp(scores - m_new[:, None])
        rescale = tl.exp(m - m_new)
        if IEEE:
            acc = acc * rescale[:, None] + tl.dot(p, values, input_precision="ieee")
        else:
            acc = acc * rescale[:, None] + tl.dot(p.to(values.dtype), values)
        den = den * rescale + tl.sum(p, axis=1)
        m = m_new
    tl.store(acc_ptrs, acc, mask=row_ok[:, None] & dim_ok[None, :])
    tl.store(m_ptr + stat, m, mask=row_ok)
    tl.store(l_ptr + stat, den, mask=row_ok)


def launch_args(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, acc: torch.Tensor, m: torch.Tensor,
                l: torch.Tensor, q0: int, q1: int, k0: int, k1: int,  # noqa: E741
                slopes: torch.Tensor | None = None, config: TileConfig | None = None) -> tuple[tuple, tuple, dict]:
    """(grid, args, kwargs) of the kernel launch for one tile; `config` overrides `tile_config` (tests, AOT)."""
    batch, heads, _, head_dim = q.shape
    for name, t in (("q", q), ("k", k), ("v", v), ("acc", acc)):
        if t.stride(-1) != 1:
            raise ValueError(f"{name} must be contiguous in its last dimension (stride {t.stride(-1)})")
    if m.stride(-1) != 1 or l.stride(-1) != 1 or m.stride() != l.stride():
        raise ValueError("m and l must have the same strides and be contiguous along N")
    config = config or tile_config(k1 - k0, head_dim)
    slopes_arg = slopes if slopes is not None else m  # a valid pointer, never read without ALiBi
    grid = (batch * heads, triton.cdiv(max(q1 - q0, 1), config.block_m))
    args = (q, k, v, acc, m, l, slopes_arg, q0, q1, k0, k1, heads, heads // k.shape[1],
            q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2), v.stride(0), v.stride(1),
            v.stride(2), acc.stride(0), acc.stride(1), acc.stride(2), m.stride(0), m.stride(1), head_dim,
            int(slopes is not None))
    kwargs = {"IEEE": q.dtype == torch.float32,
              "UPCAST": INTERPRET and q.dtype == torch.bfloat16, "BLOCK_M": config.block_m,
              "BLOCK_N": config.block_n, "BLOCK_D": max(16, triton.next_power_of_2(head_dim)),
              "num_warps": config.num_warps, "num_stages": config.num_stages}
    return grid, args, kwargs


def update_tile_triton(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, acc: torch.Tensor, m: torch.Tensor,
                       l: torch.Tensor, q0: int, q1: int, k0: int, k1: int,  # noqa: E741
                       slopes: torch.Tensor | None = None, config: TileConfig | None = None) -> None:
    """Algorithm 2 on rows [q0, q1) x keys [k0, k1), in place on acc, m, l (shapes in `reference.py`)."""
    if q1 <= q0 or k1 <= k0:
        return
    grid, args, kwargs = launch_args(q, k, v, acc, m, l, q0, q1, k0, k1, slopes, config)
    _update_tile_kernel[grid](*args, **kwargs)
