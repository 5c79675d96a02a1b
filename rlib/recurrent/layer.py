"""One Recurrent Transformer layer and its Transformer twin (paper 002, Sec. 2.1-2.2, Eq. 1-2, App. E.2).

For position i with layer input x_i (single-head notation; multi-head and GQA in the code):

    q_i = RMS[Q RMS(x_i)] / sqrt(d),  k~_i = RMS[K RMS(x_i)],  v~_i = V RMS(x_i)      queries and temporary pair
    a_i = Attn((k_1, v_1) .. (k_{i-1}, v_{i-1}), (k~_i, v~_i); q_i)                  persistent pairs + temporary
    h_i = x_i + alpha W_O a_i,   z_i = h_i + alpha MLP[RMS(h_i)]                     alpha = 1/sqrt(L)
    k_i = RMS[K RMS(z_i)],  v_i = V RMS(z_i)                                         the persistent pair (Eq. 1-2)

The same Q, K, V serve the temporary and the persistent pair, so the layer has exactly the parameters of a
Transformer layer; `block="transformer"` keeps (k~_i, v~_i) as the pair every later position sees (Sec. 2.1).
The outer RMS on keys and queries is QK-norm (per head here); `kv_norm=False` drops the inner RMS before the
persistent projections (k_i = RMS[K z_i], v_i = V z_i: Appendix E.2's ablation, our reading of it).
ALiBi adds -slope_h (j - i) to query j's score for key i (0 for the temporary pair, which sits at j); RoPE rotates
queries and keys by their positions. The layer only defines these maps; `rlib.recurrent.naive` and
`rlib.recurrent.tiled` evaluate the recurrence.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from rlib.model.layers import RotaryTable, apply_rotary
from rlib.recurrent.config import RTConfig, alibi_slopes

__all__ = ["RMSNorm", "RTLayer", "accumulation_dtype", "attend", "expand_heads"]


def accumulation_dtype(x: torch.Tensor) -> torch.dtype:
    """fp32 for every input dtype except fp64 (which the exactness tests use)."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


class RMSNorm(nn.Module):
    """w * x / rms(x) over the last dim, computed in fp32 (fp64 for fp64 inputs, so gradcheck can see it)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # one fused op (the RT layer's token loop runs three of these per position, where op count, not FLOPs, sets the
        # time on a CPU); the weight multiplies in the accumulation dtype as well, then the result returns to x's dtype
        wide = accumulation_dtype(x)
        return F.rms_norm(x.to(wide), (x.shape[-1],), self.weight.to(wide), self.eps).to(x.dtype)


def expand_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """[B, Hkv, T, d] -> [B, H, T, d]: each KV head serves H / Hkv query heads (GQA)."""
    groups = n_heads // x.shape[1]
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """softmax(q k^T + bias) v in fp32 (fp64 for fp64 inputs): q [B, H, Tq, d] (pre-scaled), k, v [B, Hkv, Tk, d],
    bias broadcasting to [B, H, Tq, Tk] (-inf = masked) -> [B, H, Tq, d] in q's dtype."""
    n_heads, dtype = q.shape[1], accumulation_dtype(q)
    k, v = expand_heads(k, n_heads), expand_heads(v, n_heads)
    scores = q.to(dtype) @ k.to(dtype).transpose(-1, -2)  # [B, H, Tq, Tk]
    if bias is not None:
        scores = scores + bias.to(dtype)
    return (torch.softmax(scores, dim=-1) @ v.to(dtype)).to(q.dtype)


class RTLayer(nn.Module):
    """Parameters and maps of one layer; see the module docstring for the equations."""

    def __init__(self, config: RTConfig):
        super().__init__()
        self.config = config
        d, heads, kv_heads, head_dim = config.d_model, config.n_heads, config.kv_heads, config.head_dim
        self.attn_norm = RMSNorm(d, config.norm_eps)
        self.q_proj = nn.Linear(d, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(d, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(d, kv_heads * head_dim, bias=False)
        self.q_norm = RMSNorm(head_dim, config.norm_eps)
        self.k_norm = RMSNorm(head_dim, config.norm_eps)
        self.o_proj = nn.Linear(heads * head_dim, d, bias=False)
        self.ff_norm = RMSNorm(d, config.norm_eps)
        self.up = nn.Linear(d, config.ff_dim, bias=False)
        self.down = nn.Linear(config.ff_dim, d, bias=False)
        self.rotary = RotaryTable(head_dim, (config.rope_theta,)) if config.position == "rope" else None
        self._slope_values = alibi_slopes(heads, config.alibi_max_bias) if config.position == "alibi" else [0.0] * heads
        self.register_buffer("slopes", torch.tensor(self._slope_values, dtype=torch.float64), persistent=False)  # [H]

    def _apply(self, fn, recurse=True):
        """Moves and casts like any module, but the ALiBi slopes stay exact fp64 (a bf16 or fp32 cast would round
        them once, and every later cast would inherit that rounding); `slopes_in` rounds them per use."""
        super()._apply(fn, recurse)
        self.slopes = torch.tensor(self._slope_values, dtype=torch.float64, device=self.slopes.device)
        return self

    def slopes_in(self, dtype: torch.dtype) -> torch.Tensor:
        """[H] ALiBi slopes in the accumulation dtype of activations in `dtype` (fp64 for fp64, else fp32)."""
        return self.slopes.to(torch.float64 if dtype == torch.float64 else torch.float32)

    # ---- maps --------------------------------------------------------------------------------------------------

    def _heads(self, x: torch.Tensor, n: int) -> torch.Tensor:
        batch, tokens, _ = x.shape
        return x.view(batch, tokens, n, self.config.head_dim).transpose(1, 2)  # [B, n, T, d]

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x [B, heads, T, d] rotated by RoPE at `positions` [T] (unchanged without RoPE)."""
        if self.rotary is None:
            return x
        cos, sin = self.rotary.cos_sin(positions[None].to(x.device), self.config.rope_theta, x.dtype)
        return apply_rotary(x, cos, sin)

    def _keys_values(self, source: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k = self.rotate(self.k_norm(self._heads(self.k_proj(source), self.config.kv_heads)), positions)
        return k, self._heads(self.v_proj(source), self.config.kv_heads)  # [B, Hkv, T, d] each

    def pre_attention(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """x [B, T, D] at `positions` [T] -> q [B, H, T, d] (times 1/sqrt(d)), k~, v~ [B, Hkv, T, d]."""
        normed = self.attn_norm(x)
        q = self.rotate(self.q_norm(self._heads(self.q_proj(normed), self.config.n_heads)), positions)
        k, v = self._keys_values(normed, positions)
        return q / math.sqrt(self.config.head_dim), k, v

    def persistent_kv(self, z: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The pair later positions see, from the layer output z [B, T, D] (Eq. 1-2) -> [B, Hkv, T, d] each."""
        return self._keys_values(self.attn_norm(z) if self.config.kv_norm else z, positions)

    def post_attention(self, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """x [B, T, D] and the attention output a [B, H, T, d] -> the layer output z [B, T, D]."""
        batch, heads, tokens, head_dim = a.shape
        a = a.transpose(1, 2).reshape(batch, tokens, heads * head_dim).to(x.dtype)
        alpha = self.config.alpha
        h = x + alpha * self.o_proj(a)
        return h + alpha * self.down(F.gelu(self.up(self.ff_norm(h))))

    def alibi(self, query_positions: torch.Tensor, key_positions: torch.Tensor,
              dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """[H, Tq, Tk]: -slope_h (j - i) for query position j and key position i (zeros without ALiBi), in the
        accumulation dtype of activations in `dtype`."""
        slopes = self.slopes_in(dtype)
        distance = (query_positions[:, None] - key_positions[None, :]).to(slopes.device, slopes.dtype)  # [Tq, Tk]
        return -slopes[:, None, None] * distance

    # ---- the Transformer twin --------------------------------------------------------------------------------

    def transformer_forward(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """A standard causal layer: keys and values from the input; -> z [B, T, D], k, v [B, Hkv, T, d]."""
        q, k, v = self.pre_attention(x, positions)
        causal = torch.ones(len(positions), len(positions), dtype=torch.bool, device=x.device).tril()
        bias = self.alibi(positions, positions, x.dtype).masked_fill(~causal, float("-inf"))  # [H, T, T]
        return self.post_attention(x, attend(q, k, v, bias)), k, v
