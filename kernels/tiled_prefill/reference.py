"""PyTorch reference of the dyadic tile schedule and its UpdateTile step (Recurrent Transformer, paper 002, Sec. 5,
App. C, Algorithms 1-2), forward and backward.

Shapes (one layer, batch B, H query heads, Hkv key/value heads, N positions, head dim d):

    q          [B, H, N, d]     queries, already times 1/sqrt(d)
    k, v       [B, Hkv, N, d]   the persistent cache; rows < k1 are final when a tile reads them
    acc        [B, H, N, d]     fp32 running numerators      (online softmax, one row per query; fp64 in tests)
    m, l       [B, H, N]        running max and denominator, in acc's dtype
    slopes     [H] fp32 or None ALiBi: query j's score for key i gets -slope_h (j - i)

After position t - 1 (0-indexed) is final, with s = t and T = lowbit(s) = s & -s, keys [s - T, s) are folded into
queries [s, min(s + T, N)). Over s = 1..N-1 these tiles cover every (query j, key i < j) pair exactly once, before
query j is read (`tiles`). The backward walks the same tiles in reverse and pushes each query block's gradient to
its key block: the mirror image, so key i's gradient is complete when the reverse loop reaches i.
"""

from __future__ import annotations

import torch

__all__ = ["alibi_bias", "lowbit", "tile_backward", "tile_traffic", "tiles", "update_tile"]


def lowbit(s: int) -> int:
    """The largest power of two dividing s (s >= 1)."""
    return s & -s


def tiles(n: int) -> list[tuple[int, int, int, int]]:
    """(q0, q1, k0, k1) of every tile, in schedule order, for N = n positions."""
    out = []
    for s in range(1, n):
        size = lowbit(s)
        out.append((s, min(s + size, n), s - size, s))
    return out


def _rows(x: torch.Tensor, heads: int, k0: int, k1: int, dtype: torch.dtype) -> torch.Tensor:
    """Rows [k0, k1) of a key or value cache [B, Hkv, N, d], one copy per query head, in `dtype`."""
    rows = x[:, :, k0:k1].to(dtype)
    return rows if rows.shape[1] == heads else rows.repeat_interleave(heads // rows.shape[1], dim=1)


def alibi_bias(slopes: torch.Tensor, q0: int, q1: int, k0: int, k1: int, dtype: torch.dtype) -> torch.Tensor:
    """[H, q1 - q0, k1 - k0]: -slope_h (j - i) for query j in [q0, q1) and key i in [k0, k1), in `dtype`.

    A schedule tile always has q0 - k0 = T = k1 - k0, so the bias depends on T and the row count only: callers that
    run many tiles (`rlib.recurrent.tiled`) compute it once per tile size and pass it as `bias`.
    """
    dist = torch.arange(q0, q1, device=slopes.device)[:, None] - torch.arange(k0, k1, device=slopes.device)[None, :]
    return -slopes.to(dtype)[:, None, None] * dist.to(dtype)


def _scores(q: torch.Tensor, keys: torch.Tensor, bias: torch.Tensor | None, q0: int, q1: int,
            dtype: torch.dtype) -> torch.Tensor:
    """S = q[q0:q1] k^T (+ the ALiBi bias [H, tq, tk]) in `dtype` (fp32, or fp64 in the tests) -> [B, H, tq, tk]."""
    scores = q[:, :, q0:q1].to(dtype) @ keys.transpose(-1, -2)  # keys: rows [k0, k1) from `_rows`
    return scores if bias is None else scores + bias


def _tile_bias(slopes: torch.Tensor | None, bias: torch.Tensor | None, q0: int, q1: int, k0: int, k1: int,
               dtype: torch.dtype) -> torch.Tensor | None:
    if bias is not None or slopes is None:
        return bias
    return alibi_bias(slopes, q0, q1, k0, k1, dtype)


@torch.no_grad()
def update_tile(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, acc: torch.Tensor, m: torch.Tensor,
                l: torch.Tensor, q0: int, q1: int, k0: int, k1: int, slopes: torch.Tensor | None = None,  # noqa: E741
                bias: torch.Tensor | None = None) -> None:
    """Algorithm 2 (UpdateTile), in place on acc, m, l rows [q0, q1). `bias` [H, tq, tk], if given, is the tile's
    ALiBi bias precomputed by `alibi_bias` (it replaces `slopes`)."""
    bias = _tile_bias(slopes, bias, q0, q1, k0, k1, acc.dtype)
    scores = _scores(q, _rows(k, q.shape[1], k0, k1, acc.dtype), bias, q0, q1, acc.dtype)  # [B, H, tq, tk]
    m_rows, l_rows, acc_rows = m[:, :, q0:q1], l[:, :, q0:q1], acc[:, :, q0:q1]  # views: updated in place
    m_new = torch.maximum(m_rows, scores.amax(dim=-1))
    p = torch.exp(scores - m_new[..., None])
    rescale = torch.exp(m_rows - m_new)
    acc_rows.mul_(rescale[..., None]).add_(p @ _rows(v, q.shape[1], k0, k1, acc.dtype))
    l_rows.mul_(rescale).add_(p.sum(dim=-1))
    m_rows.copy_(m_new)


@torch.no_grad()
def tile_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lse: torch.Tensor, grad_a: torch.Tensor,
                  delta: torch.Tensor, dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor, q0: int, q1: int,
                  k0: int, k1: int, slopes: torch.Tensor | None = None, bias: torch.Tensor | None = None) -> None:
    """The gradient of one tile, accumulated in place (FlashAttention-2's backward on one block).

    lse [B, H, N] = log of each query's final softmax denominator (with its running max); grad_a [B, H, N, d] =
    dL/da for the normalised attention outputs a; delta [B, H, N] = <a, grad_a>. dq [B, H, N, d], dk, dv
    [B, H, N, d] (per query head; GQA groups are summed by the caller) are fp32. `bias` as in `update_tile`.
    """
    dtype = dq.dtype
    bias = _tile_bias(slopes, bias, q0, q1, k0, k1, dtype)
    values, keys = _rows(v, q.shape[1], k0, k1, dtype), _rows(k, q.shape[1], k0, k1, dtype)
    p = torch.exp(_scores(q, keys, bias, q0, q1, dtype) - lse[:, :, q0:q1, None])  # [B, H, tq, tk]
    g = grad_a[:, :, q0:q1].to(dtype)  # [B, H, tq, d]
    dv[:, :, k0:k1] += p.transpose(-1, -2) @ g
    ds = p * (g @ values.transpose(-1, -2) - delta[:, :, q0:q1, None])
    dk[:, :, k0:k1] += ds.transpose(-1, -2) @ q[:, :, q0:q1].to(dtype)
    dq[:, :, q0:q1] += ds @ keys


def tile_traffic(n: int, head_dim: int, schedule: str = "tiled") -> dict[str, float]:
    """Elements read and written per (sequence, head) by the attention part of one layer's prefill, the (query,
    persistent key) pairs scored, and the key/value slice each step reads (Sec. 5 'Asymptotics', Sec. 6.3).

    naive: step t reads q_t, t persistent keys and values (plus the temporary pair) and writes one output row.
    tiled: each tile reads T_q queries, T keys, T values, and reads and writes T_q accumulator rows (d + 2 with
    the max and the denominator), where T_q = min(T, N - s). Pairs are counted from the steps themselves (tiles:
    T_q x T each), so a schedule that skipped or repeated a pair would show it; the slice is the number of persistent
    positions a step reads (naive: the whole prefix; tiled: T = lowbit(s)), averaged and maximised over its steps.
    """
    if schedule == "naive":
        elements = sum(head_dim + 2 * (t + 1) * head_dim + head_dim for t in range(n))
        slices = list(range(n))  # step t reads the t persistent pairs before it
        pairs = sum(slices)
    elif schedule == "tiled":
        elements = 3 * n * head_dim  # q, and the temporary pair, read once to initialise the accumulators
        slices, pairs = [], 0
        for q0, q1, k0, k1 in tiles(n):
            rows = q1 - q0
            elements += rows * head_dim + 2 * (k1 - k0) * head_dim + 2 * rows * (head_dim + 2)
            slices.append(k1 - k0)
            pairs += rows * (k1 - k0)
    else:
        raise ValueError(f"schedule={schedule!r}: use 'naive' or 'tiled'")
    return {"n": n, "elements": elements, "pairs": pairs, "kv_slice_mean": sum(slices) / max(len(slices), 1),
            "kv_slice_max": max(slices, default=0)}
