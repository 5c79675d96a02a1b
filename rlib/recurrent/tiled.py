"""The exact tiled evaluation of one Recurrent Transformer layer, forward and backward (paper 002, Sec. 5-6,
Algorithms 1-2, App. C).

Forward (Algorithm 1). All queries and temporary pairs come from the layer input, so they are computed at once and
seed each query's online-softmax state with its temporary pair. Then, for t = 0..N-1: read a_t = acc_t / l_t
(every earlier key is already in it), run the post-attention block and the persistent projections on the B tokens
at t (`rlib.recurrent.token_maps.TokenForward`), write the pair into the cache, and fold keys [s - T, s) into
queries [s, s + T), s = t + 1, T = lowbit(s) (`kernels.tiled_prefill`). Each (query, key) pair is scored once:
the same FLOPs as the naive loop, but keys are read O(log N) times instead of O(N).

Backward (custom autograd; only x and z are saved, as the paper's activation checkpointing does). The queries,
temporary pairs and persistent pairs are recomputed in parallel from x and z. A reverse loop then carries the
only sequential dependency, z_t -> (k_t, v_t) -> later a -> later z: at position t the gradient reaching (k_t, v_t)
is complete, is pushed through the persistent projections into z_t, then through the post-attention block into
a_t (hand-written VJPs at the forward's values, `token_maps.TokenVJP`: no autograd graph per position), and the
tile that read keys [t - T, t) with queries [t, t + T) sends its gradient back to those keys (the
mirror of the forward schedule). Parameter and input gradients are then taken in three batched backward calls.
"""

from __future__ import annotations

import torch

from kernels.tiled_prefill import alibi_bias, resolve_impl, tile_backward, update_tile
from rlib.recurrent.layer import RTLayer, accumulation_dtype, expand_heads
from rlib.recurrent.token_maps import TokenForward, TokenVJP

__all__ = ["tiled_layer"]


class _TileBias:
    """Each tile's ALiBi bias, computed once per tile size T (a tile's queries start T after its keys, so its bias is
    the first rows of T's) and kept up to `max_elements` per size; None without ALiBi."""

    def __init__(self, layer: RTLayer, dtype: torch.dtype, max_elements: int = 1 << 20):
        """`dtype`: the accumulation dtype (fp32, or fp64 in the tests), which the slopes and the bias take."""
        self.slopes = layer.slopes_in(dtype) if layer.config.position == "alibi" else None  # [H] or None
        self.dtype, self.max_elements, self.by_size = dtype, max_elements, {}

    def __call__(self, q0: int, q1: int, k0: int, k1: int) -> torch.Tensor | None:
        if self.slopes is None:
            return None
        size = k1 - k0
        full = self.by_size.get(size)
        if full is None:
            full = alibi_bias(self.slopes, k1, k1 + size, k0, k1, self.dtype)  # [H, T, T]
            if full.numel() <= self.max_elements:
                self.by_size[size] = full
        return full[:, :q1 - q0]


def _sum_groups(x: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """[B, H, ...] per query head -> [B, Hkv, ...]: the gradient of `expand_heads`."""
    batch, heads = x.shape[:2]
    return x.view(batch, kv_heads, heads // kv_heads, *x.shape[2:]).sum(dim=2)


@torch.no_grad()
def tiled_forward(layer: RTLayer, x: torch.Tensor, positions: torch.Tensor,
                  impl: str = "auto") -> dict[str, torch.Tensor]:
    """Algorithm 1 without autograd -> {z [B, N, D], k, v [B, Hkv, N, d], a [B, H, N, d] fp32, lse [B, H, N]}."""
    batch, n, _ = x.shape
    impl = resolve_impl(impl, x.device)
    q, k_tmp, v_tmp = layer.pre_attention(x, positions)  # [B, H, N, d], [B, Hkv, N, d] x 2
    heads, dtype = q.shape[1], accumulation_dtype(x)
    q = q.contiguous()
    m = (q.to(dtype) * expand_heads(k_tmp, heads).to(dtype)).sum(-1).contiguous()  # [B, H, N]: temporary pair's score
    den = torch.ones_like(m)
    acc = expand_heads(v_tmp, heads).to(dtype).contiguous()  # [B, H, N, d]
    keys, values = torch.empty_like(k_tmp).contiguous(), torch.empty_like(v_tmp).contiguous()
    z = torch.empty_like(x)
    tile_bias = _TileBias(layer, dtype)
    step = TokenForward(layer, positions)
    for t in range(n):
        a_t = acc[:, :, t] / den[:, :, t, None]  # [B, H, d]
        z[:, t], keys[:, :, t], values[:, :, t] = step(t, x[:, t], a_t)
        s = t + 1
        if s < n:
            size = s & -s
            q1, k0 = min(s + size, n), s - size
            update_tile(q, keys, values, acc, m, den, s, q1, k0, s, tile_bias.slopes, impl=impl,
                        bias=tile_bias(s, q1, k0, s))
    return {"z": z, "k": keys, "v": values, "a": acc / den[..., None], "lse": m + torch.log(den)}


def tiled_backward(layer: RTLayer, x: torch.Tensor, positions: torch.Tensor, saved: dict[str, torch.Tensor],
                   grad_z: torch.Tensor, params: list[torch.nn.Parameter]) -> tuple[torch.Tensor, ...]:
    """dL/dx and dL/dparams from dL/dz (see the module docstring)."""
    n = x.shape[1]
    kv_heads = layer.config.kv_heads
    z, a, lse = saved["z"], saved["a"], saved["lse"]
    with torch.enable_grad():
        x_in = x.detach().requires_grad_(True)
        q, k_tmp, v_tmp = layer.pre_attention(x_in, positions)
        z_out = layer.post_attention(x_in, a)  # a is a constant here: its gradient is found in the loop
        keys, values = layer.persistent_kv(z.detach(), positions)  # parameters only; z's part is in the loop
    heads, dtype = q.shape[1], a.dtype
    tile_bias = _TileBias(layer, dtype)
    qf = q.detach().to(dtype)
    kf, vf = expand_heads(keys.detach(), heads).to(dtype), expand_heads(values.detach(), heads).to(dtype)
    dq, dk, dv = torch.zeros_like(qf), torch.zeros_like(kf), torch.zeros_like(vf)  # [B, H, N, d]
    grad_a = torch.zeros_like(a)  # [B, H, N, d] fp32
    delta = torch.zeros_like(lse)  # [B, H, N]
    token = TokenVJP(layer, x.detach(), a, z.detach(), positions)  # the per-position maps, linearised
    dz = grad_z.detach().to(dtype).transpose(0, 1).contiguous()  # [N, B, D]: upstream, plus the persistent pairs'
    for t in reversed(range(n)):
        dz_t = dz[t]  # [B, D]
        if t < n - 1:  # (k_t, v_t) was read by later queries: its gradient is complete now and adds to z_t's
            dz_t = dz_t + token.through_pair(t, dk[:, :, t], dv[:, :, t])
            dz[t] = dz_t
        g_t = token.through_block(t, dz_t)  # [B, H, d]
        grad_a[:, :, t] = g_t
        delta[:, :, t] = (g_t * a[:, :, t]).sum(-1)
        if t >= 1:
            size = t & -t
            q1, k0 = min(t + size, n), t - size
            tile_backward(qf, kf, vf, lse, grad_a, delta, dq, dk, dv, t, q1, k0, t, bias=tile_bias(t, q1, k0, t))
    dz = dz.transpose(0, 1)  # [B, N, D]
    # the temporary pairs (the diagonal)
    kt, vt = expand_heads(k_tmp.detach(), heads).to(dtype), expand_heads(v_tmp.detach(), heads).to(dtype)
    p_diag = torch.exp((qf * kt).sum(-1) - lse)  # [B, H, N]
    ds_diag = p_diag * ((vt * grad_a).sum(-1) - delta)
    dq += ds_diag[..., None] * kt
    d_ktmp, d_vtmp = ds_diag[..., None] * qf, p_diag[..., None] * grad_a
    outputs = (z_out, keys, values, q, k_tmp, v_tmp)
    grads = (dz, _sum_groups(dk, kv_heads), _sum_groups(dv, kv_heads), dq, _sum_groups(d_ktmp, kv_heads),
             _sum_groups(d_vtmp, kv_heads))
    return torch.autograd.grad(outputs, [x_in, *params], [g.to(o.dtype) for o, g in zip(outputs, grads)],
                               allow_unused=True)


class _TiledLayer(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, positions, layer, impl, *params):  # noqa: ANN001 - autograd.Function signature
        out = tiled_forward(layer, x, positions, impl)
        ctx.layer, ctx.params = layer, params
        ctx.save_for_backward(x, positions, out["z"], out["a"], out["lse"])
        ctx.mark_non_differentiable(out["k"], out["v"])
        return out["z"], out["k"], out["v"]

    @staticmethod
    def backward(ctx, grad_z, _grad_k, _grad_v):  # noqa: ANN001
        x, positions, z, a, lse = ctx.saved_tensors
        grads = tiled_backward(ctx.layer, x, positions, {"z": z, "a": a, "lse": lse}, grad_z, list(ctx.params))
        return (grads[0], None, None, None, *grads[1:])


def tiled_layer(layer: RTLayer, x: torch.Tensor, positions: torch.Tensor,
                impl: str = "auto") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x [B, N, D] at `positions` [N] -> z [B, N, D] and the persistent keys and values [B, Hkv, N, d].

    Differentiable in x and the layer's parameters (not through the returned cache). `impl` picks the tile step:
    "triton", "reference" (PyTorch) or "auto" (`kernels.tiled_prefill.resolve_impl`).
    """
    if not torch.is_grad_enabled() or not (x.requires_grad or any(p.requires_grad for p in layer.parameters())):
        out = tiled_forward(layer, x, positions, impl)
        return out["z"], out["k"], out["v"]
    params = [p for p in layer.parameters() if p.requires_grad]
    return _TiledLayer.apply(x, positions, layer, impl, *params)

