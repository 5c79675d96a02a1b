"""One Recurrent Transformer layer's per-position maps as the tiled schedule's two loops use them (paper 002,
Sec. 5-6, Algorithm 1 and its backward, App. C): the forward step at one position, and its vector-Jacobian products.

`TokenForward` is `RTLayer.post_attention` followed by `RTLayer.persistent_kv` for the B tokens at one position, with
the same equations and fewer op calls: the residual adds fold into `addmm` and the key and value projections share one
matrix product. The tiled-vs-naive tests (the naive loop calls the layer's own maps) hold it to them.

At position t the reverse loop needs two maps of the layer (`rlib.recurrent.layer`, equations in its docstring):

    through_pair   (dk_t, dv_t) -> dz_t:  the persistent pair k_t = rope(RMS_k[K u_t]), v_t = V u_t, u_t = RMS(z_t)
    through_block  dz_t -> da_t:          z_t = h_t + alpha MLP[RMS(h_t)], h_t = x_t + alpha W_O a_t

Both are linear in the incoming gradient once the forward's values are known, and every value they depend on
(h, the MLP's pre-activation, the RMS statistics of h, z and the keys) follows from x, a and z, which the forward
saved. So the factors are computed for all N positions at once, position-major, before the loop, and each step is a
handful of small matrix products instead of an autograd graph per position (autograd recorded about 540 ATen calls
per position at chapter 04's task shapes, and on a CPU the op count, not the FLOPs, set the time). The tiled-vs-naive
gradient tests (fp64 to 1e-10, gradcheck) check these hand-written derivatives against autograd through the naive loop.

Everything runs in the accumulation dtype (fp32, or fp64 in the tests). RMS(x) = w x r with r = (mean x^2 + eps)^-1/2
has the VJP  g -> r (w g - x_hat mean(w g x_hat)), x_hat = x r;  GELU (erf form) has the derivative
Phi(p) + p phi(p); RoPE's rotation x cos + rotate_half(x) sin has the VJP g cos - rotate_half(g sin).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from rlib.model.layers import rotate_half
from rlib.recurrent.layer import RTLayer, accumulation_dtype

__all__ = ["TokenForward", "TokenVJP"]


class TokenForward:
    """z_t and the persistent pair (k_t, v_t) from x_t and a_t for the B tokens at one position."""

    def __init__(self, layer: RTLayer, positions: torch.Tensor):
        config = layer.config
        self.layer, self.alpha, self.kv_width = layer, config.alpha, config.kv_heads * config.head_dim
        self.kv_heads, self.head_dim, self.kv_norm = config.kv_heads, config.head_dim, config.kv_norm
        self.w_out = layer.o_proj.weight.t()  # [H d, D]
        self.w_up, self.w_down = layer.up.weight.t(), layer.down.weight.t()  # [D, F], [F, D]
        self.w_kv = torch.cat((layer.k_proj.weight, layer.v_proj.weight)).t()  # [D, 2 Hkv d]
        self.positions = positions

    def __call__(self, t: int, x_t: torch.Tensor, a_t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """x_t [B, D], a_t [B, H, d] -> z_t [B, D], k_t, v_t [B, Hkv, d] (in x's dtype)."""
        layer, batch = self.layer, x_t.shape[0]
        h = torch.addmm(x_t, a_t.reshape(batch, -1).to(x_t.dtype), self.w_out, alpha=self.alpha)  # [B, D]
        z = torch.addmm(h, F.gelu(layer.ff_norm(h) @ self.w_up), self.w_down, alpha=self.alpha)  # [B, D]
        kv = (layer.attn_norm(z) if self.kv_norm else z) @ self.w_kv  # [B, 2 Hkv d]
        k = layer.k_norm(kv[:, :self.kv_width].view(batch, self.kv_heads, 1, self.head_dim))  # [B, Hkv, 1, d]
        k = layer.rotate(k, self.positions[t:t + 1])
        return z, k[:, :, 0], kv[:, self.kv_width:].view(batch, self.kv_heads, self.head_dim)


class _RMSFactors:
    """The statistics of an RMSNorm's input x [..., D] that its VJP needs, in the accumulation dtype."""

    def __init__(self, x: torch.Tensor, weight: torch.Tensor, eps: float):
        self.r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)  # [..., 1]
        self.x_hat = x * self.r  # [..., D]
        self.weight = weight

    def vjp(self, grad: torch.Tensor, index: int) -> torch.Tensor:
        """dL/dx at position `index` (the factors are position-major) from dL/dRMS(x)."""
        g = grad * self.weight
        x_hat = self.x_hat[index]
        return self.r[index] * (g - x_hat * (g * x_hat).mean(-1, keepdim=True))


class TokenVJP:
    """The layer's token maps linearised at the forward's values; `through_pair` and `through_block` per position."""

    def __init__(self, layer: RTLayer, x: torch.Tensor, a: torch.Tensor, z: torch.Tensor, positions: torch.Tensor):
        """x, z [B, N, D] (the layer's input and output), a [B, H, N, d] (the normalised attention outputs)."""
        config = layer.config
        batch, n, _ = x.shape
        wide = accumulation_dtype(x)
        self.alpha, self.heads, self.kv_heads = config.alpha, config.n_heads, config.kv_heads
        self.head_dim = config.head_dim
        with torch.no_grad():
            # the post-attention block, recomputed for all positions as the forward computed it (in x's dtype)
            a_flat = a.transpose(1, 2).reshape(batch, n, -1).to(x.dtype)  # [B, N, H d]
            h = x + self.alpha * layer.o_proj(a_flat)  # [B, N, D]
            pre = layer.up(layer.ff_norm(h)).to(wide)  # [B, N, F]: the GELU's input
            gelu_grad = 0.5 * (1.0 + torch.erf(pre / math.sqrt(2.0))) + pre * torch.exp(-0.5 * pre * pre) / math.sqrt(
                2.0 * math.pi)
            self.mlp_scale = (self.alpha * gelu_grad).transpose(0, 1).contiguous()  # [N, B, F]
            self.ff_norm = _RMSFactors(h.to(wide).transpose(0, 1).contiguous(), layer.ff_norm.weight.to(wide),
                                       config.norm_eps)
            self.w_down = layer.down.weight.to(wide)  # [D, F]
            self.w_up = layer.up.weight.to(wide)  # [F, D]
            self.w_out = self.alpha * layer.o_proj.weight.to(wide)  # [D, H d]
            # the persistent pair's projections
            source = layer.attn_norm(z) if config.kv_norm else z  # [B, N, D]
            self.attn_norm = (_RMSFactors(z.to(wide).transpose(0, 1).contiguous(), layer.attn_norm.weight.to(wide),
                                          config.norm_eps) if config.kv_norm else None)
            k_pre = layer.k_proj(source).view(batch, n, self.kv_heads, self.head_dim).to(wide)  # [B, N, Hkv, d]
            self.k_norm = _RMSFactors(k_pre.transpose(0, 1).contiguous(), layer.k_norm.weight.to(wide), config.norm_eps)
            self.w_kv = torch.cat((layer.k_proj.weight, layer.v_proj.weight)).to(wide)  # [2 Hkv d, D]
            self.cos_sin = None
            if layer.rotary is not None:
                cos, sin = layer.rotary.cos_sin(positions[None].to(x.device), config.rope_theta, wide)  # [1, 1, N, d]
                self.cos_sin = (cos[0, 0, :, None], sin[0, 0, :, None])  # [N, 1, d] each: broadcast over [B, Hkv, d]

    def _sum_groups(self, grad: torch.Tensor) -> torch.Tensor:
        """[B, H, d] per query head -> [B, Hkv, d] (the VJP of GQA's head expansion)."""
        if self.heads == self.kv_heads:
            return grad
        return grad.view(grad.shape[0], self.kv_heads, self.heads // self.kv_heads, self.head_dim).sum(2)

    def through_pair(self, t: int, grad_k: torch.Tensor, grad_v: torch.Tensor) -> torch.Tensor:
        """dL/dz_t [B, D] from the gradients reaching the persistent pair, grad_k, grad_v [B, H, d] per query head."""
        grad_k, grad_v = self._sum_groups(grad_k), self._sum_groups(grad_v)  # [B, Hkv, d]
        if self.cos_sin is not None:
            cos, sin = self.cos_sin
            grad_k = grad_k * cos[t] - rotate_half(grad_k * sin[t])
        grad_k = self.k_norm.vjp(grad_k, t)  # [B, Hkv, d]: through the QK-norm to K u_t
        batch = grad_k.shape[0]
        grad_u = torch.cat((grad_k.reshape(batch, -1), grad_v.reshape(batch, -1)), dim=1) @ self.w_kv  # [B, D]
        return self.attn_norm.vjp(grad_u, t) if self.attn_norm is not None else grad_u

    def through_block(self, t: int, grad_z: torch.Tensor) -> torch.Tensor:
        """dL/da_t [B, H, d] from dL/dz_t [B, D] (its total: the upstream part plus `through_pair`'s)."""
        grad_pre = (grad_z @ self.w_down) * self.mlp_scale[t]  # [B, F]
        grad_h = grad_z + self.ff_norm.vjp(grad_pre @ self.w_up, t)  # [B, D]
        return (grad_h @ self.w_out).view(grad_z.shape[0], self.heads, self.head_dim)  # [B, H, d]

