"""The naive evaluation of one Recurrent Transformer layer: position by position (paper 002, Sec. 2.2, 5).

Position t attends to the persistent pairs of positions < t and its own temporary pair, then computes z_t and
its persistent pair, which only now becomes visible to later positions. This is the definition, and the
reference that the tiled schedule and the Triton kernel are tested against. Two caches:

    concat        the keys of positions < t concatenated anew at every step (like the official reference block);
                  differentiable by autograd, O(N^2) copies
    preallocated  written in place into [B, Hkv, N, d] buffers; no autograd (prefill only): the fair baseline of
                  the benchmarks, which still reads t keys at step t
"""

from __future__ import annotations

import torch

from rlib.recurrent.layer import RTLayer, attend

__all__ = ["naive_layer"]


def naive_layer(layer: RTLayer, x: torch.Tensor, positions: torch.Tensor,
                cache: str = "auto") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x [B, N, D] at `positions` [N] -> z [B, N, D] and the persistent keys and values [B, Hkv, N, d].

    `cache="auto"` concatenates when autograd is recording and writes in place otherwise.
    """
    if cache == "auto":
        cache = "concat" if torch.is_grad_enabled() else "preallocated"
    if cache not in ("concat", "preallocated"):
        raise ValueError(f"cache={cache!r}: use 'concat', 'preallocated' or 'auto'")
    n = x.shape[1]
    q, k_tmp, v_tmp = layer.pre_attention(x, positions)  # [B, H, N, d], [B, Hkv, N, d] x 2
    bias = layer.alibi(positions, positions, x.dtype)  # [H, N, N]; row t, columns 0..t are used
    outputs: list[torch.Tensor] = []
    keys: list[torch.Tensor] = []
    values: list[torch.Tensor] = []
    k_buf = v_buf = None
    if cache == "preallocated":
        k_buf, v_buf = torch.empty_like(k_tmp), torch.empty_like(v_tmp)
    for t in range(n):
        if cache == "concat":
            k_all = torch.cat([*keys, k_tmp[:, :, t:t + 1]], dim=2)  # [B, Hkv, t + 1, d]
            v_all = torch.cat([*values, v_tmp[:, :, t:t + 1]], dim=2)
        else:
            k_buf[:, :, t] = k_tmp[:, :, t]  # the temporary pair sits in row t until the persistent one replaces it
            v_buf[:, :, t] = v_tmp[:, :, t]
            k_all, v_all = k_buf[:, :, :t + 1], v_buf[:, :, :t + 1]
        a = attend(q[:, :, t:t + 1], k_all, v_all, bias[:, t:t + 1, :t + 1])  # [B, H, 1, d]
        z = layer.post_attention(x[:, t:t + 1], a)  # [B, 1, D]
        k_t, v_t = layer.persistent_kv(z, positions[t:t + 1])  # [B, Hkv, 1, d]
        outputs.append(z)
        if cache == "concat":
            keys.append(k_t)
            values.append(v_t)
        else:
            k_buf[:, :, t] = k_t[:, :, 0]
            v_buf[:, :, t] = v_t[:, :, 0]
    if cache == "concat":
        return torch.cat(outputs, dim=1), torch.cat(keys, dim=2), torch.cat(values, dim=2)
    return torch.cat(outputs, dim=1), k_buf, v_buf
