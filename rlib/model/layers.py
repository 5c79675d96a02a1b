"""The decoder's building blocks, written here (not wrapped from transformers):

    RMSNorm            x / rms(x) * w (Llama) or * (1 + w) (Gemma), computed in fp32 like transformers; optional
                       per-depth weight deltas (relaxed tied norms)
    RotaryTable        rotary position embeddings, one inverse-frequency table per distinct theta
    attention_mask     causal + sliding-window + padding mask from query and key *positions*
    Projection         nn.Linear with an optional per-depth adapter slot (the seam for depth-wise LoRA)
    Attention          GQA/MQA self-attention via SDPA, optional Q/K/V(/O) biases, QK-norm and score soft-capping
    GatedMLP           SwiGLU (silu) or GeGLU (tanh GELU)
    DecoderBlock       one layer with Llama (pre-norm) or Gemma 3 (pre- and post-norm) placement
    StepContext        what one execution step needs besides the hidden states (positions, rope, cache, depth)

Masks are built from token positions, not from tensor indices, so a step may run on a subset of the
tokens (a router's selection, with the tokens' original positions) or attend to keys cached by earlier
calls. Position -1 marks padding: no query attends to a padded key.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from rlib.model.cache import KVCache
from rlib.model.config import DecoderConfig
from rlib.model.rows import RowDepths


class RMSNorm(nn.Module):
    """RMSNorm over the last dim. `plus_one`: Gemma's x * (1 + w) with w initialised at 0."""

    def __init__(self, dim: int, eps: float, plus_one: bool = False):
        super().__init__()
        self.eps = eps
        self.plus_one = plus_one
        self.weight = nn.Parameter(torch.zeros(dim) if plus_one else torch.ones(dim))
        self.adapters = nn.ModuleDict()  # depth -> NormDelta (relaxation of tied norms, rlib.relax)

    def forward(self, x: torch.Tensor, depth: int | RowDepths | None = None) -> torch.Tensor:
        if isinstance(depth, RowDepths):  # rows at different depths (continuous depth-wise batching)
            return depth.norm(self, x)
        weight = self.weight
        if len(self.adapters) and depth is not None and str(depth) in self.adapters:
            weight = weight + self.adapters[str(depth)].delta
        return self.scaled(x, weight)

    def scaled(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """The norm of x with `weight` (broadcast against x: [D], or one row per batch row)."""
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.plus_one:  # Gemma: the scale is applied in fp32, then cast back
            return (normed * (1.0 + weight.float())).type_as(x)
        return weight * normed.type_as(x)  # Llama: cast back first, then scale

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}, plus_one={self.plus_one}"


class RotaryTable:
    """Rotary embeddings for several thetas (Gemma 3: 1e4 on sliding layers, 1e6 on global ones).

    The inverse frequencies are computed in fp32 on every call (D / 2 numbers), never stored as a buffer
    that a `.to(bfloat16)` would round.
    """

    def __init__(self, head_dim: int, thetas: tuple[float, ...]):
        self.head_dim = head_dim
        self.thetas = sorted(set(thetas))

    def inv_freq(self, theta: float, device: torch.device) -> torch.Tensor:
        exponents = torch.arange(0, self.head_dim, 2, dtype=torch.int64, device=device).float() / self.head_dim
        return 1.0 / (theta**exponents)  # [D / 2]

    @torch.no_grad()
    def cos_sin(self, positions: torch.Tensor, theta: float, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """positions [B, T] -> cos, sin [B, 1, T, D], in fp32 then cast to `dtype` (as transformers does)."""
        with torch.autocast(positions.device.type, enabled=False):
            freqs = positions[..., None].float() * self.inv_freq(theta, positions.device)  # [B, T, D / 2]
            angles = torch.cat((freqs, freqs), dim=-1)  # [B, T, D]
            return angles.cos().to(dtype)[:, None], angles.sin().to(dtype)[:, None]


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, H, T, D] rotated by cos, sin [B, 1, T, D]."""
    return x * cos + rotate_half(x) * sin


def attention_mask(query_positions: torch.Tensor, key_positions: torch.Tensor, window: int | None) -> torch.Tensor:
    """True where a query may attend: key <= query, key > query - window, key not padding (position -1).

    query_positions [B, T_q], key_positions [B, T_k] -> [B, 1, T_q, T_k] bool. A padded query (-1) may attend to
    everything, so that its (discarded) output is finite. `window` may be one width per row ([B]).
    """
    q = query_positions[:, None, :, None]  # [B, 1, T_q, 1]
    k = key_positions[:, None, None, :]  # [B, 1, 1, T_k]
    allowed = (k <= q) & (k >= 0)
    if window is not None:
        allowed &= k > q - (window.view(-1, 1, 1, 1) if torch.is_tensor(window) else window)
    return allowed | (q < 0)


class Projection(nn.Linear):
    """A linear map whose output may get a per-depth additive term: y = W x + b + adapters[depth](x).

    Without adapters it is exactly nn.Linear (same parameters and state-dict names). Depth-wise LoRA
    (Relaxed Recursive Transformers) adds modules to `adapters` keyed by the execution step's index.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = False):
        super().__init__(in_features, out_features, bias=bias)
        self.adapters = nn.ModuleDict()

    def forward(self, x: torch.Tensor, depth: int | RowDepths | None = None) -> torch.Tensor:
        if isinstance(depth, RowDepths):  # rows at different depths: row r gets its depth's adapter
            return depth.linear(self, x)
        y = F.linear(x, self.weight, self.bias)
        if len(self.adapters) and depth is not None and str(depth) in self.adapters:
            y = y + self.adapters[str(depth)](x)
        return y


BLOCK_WINDOW = "block"  # a step's window when it attends with its block's own sliding window (or none)


@dataclass
class StepContext:
    """Everything one execution step needs besides the hidden states.

    positions   [B, T] the tokens' positions (original positions when a router selected a subset)
    rope        theta -> (cos, sin) [B, 1, T, D], filled lazily and shared by all steps of a forward
    depth       the step's index in the plan (selects per-depth adapters)
    cache       the KV cache, or None (then keys/values come from this call only)
    slot        which cache slot the step writes or reads
    reuse_kv    read the slot's keys/values (written by an earlier step) instead of computing new ones
    plain_causal  positions are 0..T-1 in every row: with empty slots an ordinary causal mask is exact
    """

    positions: torch.Tensor
    rope: dict[float, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    depth: int = 0
    cache: KVCache | None = None
    slot: int = 0
    reuse_kv: bool = False
    plain_causal: bool = False
    window: int | str | torch.Tensor | None = BLOCK_WINDOW  # the step's sliding window (BLOCK_WINDOW = the block's
    # own; None = global; a [B] tensor = one width per row)
    rope_theta: float | str | None = None  # the step's rope theta (None = the block's own); a key of `rope`
    masks: dict = field(default_factory=dict)  # window -> mask, for steps whose keys are this call's tokens


class Attention(nn.Module):
    """Causal self-attention with GQA/MQA, optional QK-norm, RoPE of the block's theta and optional sliding window."""

    def __init__(self, config: DecoderConfig, layer: int):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = config.n_heads, config.n_kv_heads, config.head_dim
        self.scale = config.attn_scale
        self.softcap = config.attn_softcap
        self.theta = config.rope_thetas[layer]
        self.window = config.sliding_windows[layer]
        d_q, d_kv = config.n_heads * config.head_dim, config.n_kv_heads * config.head_dim
        qkv_bias = config.attn_bias or config.qkv_bias  # Qwen2: biases on Q, K, V but not on O
        self.q_proj = Projection(config.d_model, d_q, bias=qkv_bias)
        self.k_proj = Projection(config.d_model, d_kv, bias=qkv_bias)
        self.v_proj = Projection(config.d_model, d_kv, bias=qkv_bias)
        self.o_proj = Projection(d_q, config.d_model, bias=config.attn_bias)
        plus_one = config.norm_kind == "rms_plus_one"
        self.q_norm = RMSNorm(config.head_dim, config.norm_eps, plus_one) if config.qk_norm else None
        self.k_norm = RMSNorm(config.head_dim, config.norm_eps, plus_one) if config.qk_norm else None
        self.adapters = nn.ModuleDict()  # depth -> PrefixAdapter (prefix relaxation, rlib.relax.prefix_relax)

    def _heads(self, x: torch.Tensor, n_heads: int) -> torch.Tensor:
        batch, tokens, _ = x.shape
        return x.view(batch, tokens, n_heads, self.head_dim).transpose(1, 2)  # [B, H, T, D]

    def window_at(self, ctx: StepContext) -> int | None:
        """The sliding window at this step: the plan step's if it sets one, else the block's."""
        return self.window if isinstance(ctx.window, str) else ctx.window

    def rope_at(self, ctx: StepContext) -> tuple[torch.Tensor, torch.Tensor]:
        return ctx.rope[self.theta if ctx.rope_theta is None else ctx.rope_theta]

    def queries(self, x: torch.Tensor, ctx: StepContext) -> torch.Tensor:
        """x [B, T, D_model] -> rotated queries [B, H, T, D]."""
        q = self._heads(self.q_proj(x, ctx.depth), self.n_heads)
        if self.q_norm is not None:
            q = self.q_norm(q, ctx.depth)
        return apply_rotary(q, *self.rope_at(ctx))

    def keys_values(self, x: torch.Tensor, ctx: StepContext) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, T, D_model] -> rotated keys, values [B, H_kv, T, D] (a recurrent layer calls this on its output)."""
        k = self._heads(self.k_proj(x, ctx.depth), self.n_kv_heads)
        v = self._heads(self.v_proj(x, ctx.depth), self.n_kv_heads)
        if self.k_norm is not None:
            k = self.k_norm(k, ctx.depth)
        return apply_rotary(k, *self.rope_at(ctx)), v

    def forward(self, x: torch.Tensor, ctx: StepContext) -> torch.Tensor:
        q = self.queries(x, ctx)  # [B, H, T, D]
        keys_are_queries = False
        if ctx.reuse_kv:
            k, v, key_positions = ctx.cache.read(ctx.slot)
        else:
            k, v = self.keys_values(x, ctx)  # [B, H_kv, T, D]
            keys_are_queries = ctx.cache is None or ctx.cache.length(ctx.slot) == 0
            key_positions = ctx.positions
            if ctx.cache is not None:
                k, v, key_positions = ctx.cache.append(ctx.slot, k, v, ctx.positions)  # [B, H_kv, T_k, D]
        out = self.attend(q, k, v, ctx, key_positions, keys_are_queries)  # [B, T, H * D]
        if len(self.adapters) and str(ctx.depth) in self.adapters:
            out = out + self.prefix_attention(q, self.adapters[str(ctx.depth)], ctx.depth)
        return self.o_proj(out, ctx.depth)

    def prefix_attention(self, q: torch.Tensor, prefix, depth: int) -> torch.Tensor:
        """Gated attention of every query to a depth's prefix (Relaxed Recursive Transformers App. H, in the
        adaption-prompt form): keys/values are the shared K/V projections of the prefix's hidden vectors, without
        rotary position; gate [H] starts at 0. q [B, H, T, D] -> [B, T, H * D]."""
        batch, _, tokens, _ = q.shape
        hidden = prefix.prompt.to(q.dtype)[None]  # [1, P, D_model]
        k = self._heads(self.k_proj(hidden, depth), self.n_kv_heads)  # [1, H_kv, P, D]
        v = self._heads(self.v_proj(hidden, depth), self.n_kv_heads)
        if self.k_norm is not None:
            k = self.k_norm(k, depth)
        k, v = k.expand(batch, -1, -1, -1), v.expand(batch, -1, -1, -1)
        out = F.scaled_dot_product_attention(q, k, v, scale=self.scale, enable_gqa=self.n_heads != self.n_kv_heads)
        out = out * prefix.gate.to(q.dtype)[None, :, None, None]  # [B, H, T, D]
        return out.transpose(1, 2).reshape(batch, tokens, self.n_heads * self.head_dim)

    def _mask(self, ctx: StepContext, key_positions: torch.Tensor, keys_are_queries: bool) -> torch.Tensor | None:
        """None means "plain causal" (SDPA's fast path); otherwise a [B, 1, T_q, T_k] bool mask."""
        tokens, window = ctx.positions.shape[1], self.window_at(ctx)
        if keys_are_queries and ctx.plain_causal:
            if window is None or window >= tokens:
                return None
            if window not in ctx.masks:
                ctx.masks[window] = attention_mask(ctx.positions, key_positions, window)
            return ctx.masks[window]
        return attention_mask(ctx.positions, key_positions, window)

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        ctx: StepContext,
        key_positions: torch.Tensor,
        keys_are_queries: bool,
    ) -> torch.Tensor:
        """q [B, H, T_q, D], k and v [B, H_kv, T_k, D] -> [B, T_q, H * D]."""
        batch, _, tokens, _ = q.shape
        mask = self._mask(ctx, key_positions, keys_are_queries)
        if self.softcap is not None:
            out = self._attend_softcapped(q, k, v, mask)
        elif tokens == 1 and self.n_heads != self.n_kv_heads:  # decode: fold the query heads of a group into "tokens"
            grouped = q.reshape(batch, self.n_kv_heads, self.n_heads // self.n_kv_heads, self.head_dim)
            out = F.scaled_dot_product_attention(grouped, k, v, attn_mask=mask, scale=self.scale)
            out = out.reshape(batch, self.n_heads, 1, self.head_dim)
        else:
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, is_causal=mask is None and tokens > 1, scale=self.scale,
                enable_gqa=self.n_heads != self.n_kv_heads,
            )
        return out.transpose(1, 2).reshape(batch, tokens, self.n_heads * self.head_dim)

    def _attend_softcapped(self, q, k, v, mask: torch.Tensor | None) -> torch.Tensor:
        """Eager attention with scores = c * tanh(scores / c) (Gemma 2 style); SDPA cannot soft-cap."""
        groups = self.n_heads // self.n_kv_heads
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)  # [B, H, T_k, D]
        scores = (q @ k.transpose(-1, -2)) * self.scale  # [B, H, T_q, T_k]
        scores = self.softcap * torch.tanh(scores / self.softcap)
        if mask is None:
            mask = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype) @ v


class GatedMLP(nn.Module):
    """down(act(gate(x)) * up(x)): SwiGLU with silu, GeGLU with tanh-approximated GELU."""

    def __init__(self, config: DecoderConfig):
        super().__init__()
        self.gate_proj = Projection(config.d_model, config.d_ffn, bias=config.mlp_bias)
        self.up_proj = Projection(config.d_model, config.d_ffn, bias=config.mlp_bias)
        self.down_proj = Projection(config.d_ffn, config.d_model, bias=config.mlp_bias)
        self.activation = config.activation

    def act(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(x) if self.activation == "silu" else F.gelu(x, approximate="tanh")

    def forward(self, x: torch.Tensor, depth: int | None = None) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_proj(x, depth)) * self.up_proj(x, depth), depth)  # [B, T, D_model]


class DecoderBlock(nn.Module):
    """x + attn(norm(x)), then + mlp(norm(.)); Gemma 3 also normalises each sublayer's output (`post_norms`)."""

    def __init__(self, config: DecoderConfig, layer: int):
        super().__init__()
        plus_one = config.norm_kind == "rms_plus_one"
        norm = lambda: RMSNorm(config.d_model, config.norm_eps, plus_one)
        self.attn_norm = norm()
        self.attn = Attention(config, layer)
        self.attn_out_norm = norm() if config.post_norms else None
        self.mlp_norm = norm()
        self.mlp = GatedMLP(config)
        self.mlp_out_norm = norm() if config.post_norms else None

    def forward(self, x: torch.Tensor, ctx: StepContext) -> torch.Tensor:
        """x [B, T, D_model] -> [B, T, D_model]."""
        return self.mlp_residual(self.attention_residual(x, ctx), ctx.depth)

    def attention_residual(self, x: torch.Tensor, ctx: StepContext) -> torch.Tensor:
        """The attention sublayer with its residual: x + attn(norm(x)) [B, T, D_model] (a drafter that skips the MLP
        sublayer, Draft & Verify's, runs this half alone)."""
        update = self.attn(self.attn_norm(x, ctx.depth), ctx)
        if self.attn_out_norm is not None:
            update = self.attn_out_norm(update, ctx.depth)
        return x + update

    def mlp_residual(self, x: torch.Tensor, depth: int | RowDepths | None = None) -> torch.Tensor:
        """The MLP sublayer with its residual: x + mlp(norm(x)) [B, T, D_model]."""
        update = self.mlp(self.mlp_norm(x, depth), depth)
        if self.mlp_out_norm is not None:
            update = self.mlp_out_norm(update, depth)
        return x + update
