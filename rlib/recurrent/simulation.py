"""What one Recurrent Transformer layer can represent (paper 002, Sec. 3.1 Theorem 1 / App. A Theorem A.1, Sec. 3.2).

Theorem A.1: without norms, a width-3D RT with as many layers simulates any width-D Transformer exactly. The RT's
width holds three D-blocks, carry c, live l and scratch s. Every layer reads queries and keys from carry only,
writes values into scratch, and its MLP overwrites live with the Transformer layer's output y and cancels scratch:

    input   (c, l, s) = (x, w, 0)                 w arbitrary (the previous layer's carry)
    Q^ = [Q 0 0], K^ = [K 0 0], V^(c, l, s) = (0, 0, V c)          so every key/value pair is the Transformer's
    attention output (0, 0, a);  h = (x, w, a);  MLP^(h) = (0, y - w, -a),  y = x + a + MLP(x + a)
    output  (x, y, 0): its persistent pair is (K x, V x), the Transformer's pair at that position

The next layer reads the other block as carry (the paper's swap, absorbed into that layer's parameters). With a
ReLU MLP the construction is exact: the identity passes through a ReLU layer as relu(u) - relu(-u), so MLP^ is a
ReLU MLP of hidden width H + 6D. `simulation_table` builds it for random norm-free Transformers and compares
attention probabilities and outputs.

A single layer needs only width 2D (Sec. 3.1, App. A's closing remark): keep carry, let the attention output land in
the live block and have the MLP complete the residual there,

    input   (c, l) = (x, 0);  attention output (0, a);  h = (x, a);  MLP^(h) = (0, x + MLP(x + a))
    output  (x, y),  y = x + a + MLP(x + a)

(`simulate_single`); stacking a second such layer fails because its live block would start at x, not 0.

Sec. 3.2: if attention at position t concentrates on the previous persistent pair (logit gap G to every other key,
the temporary pair included), the layer becomes the state recurrence
`z_t = x_t + alpha (V RMS(z_{t-1}) + MLP[RMS(x_t + alpha V RMS(z_{t-1}))])` (with the output projection and the
norms of `rlib.recurrent.layer`). `recurrence_table` runs the chapter's own `RTLayer` position by position with that
logit gap and the recurrence beside it, and reports their distance as G grows.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import pandas as pd
import torch

from rlib.recurrent.config import RTConfig
from rlib.recurrent.layer import RTLayer, attend, expand_heads

__all__ = ["RECURRENCE_LAYER", "NormFreeLayer", "embed", "local_attention_layer", "random_transformer",
           "recurrence_table", "rnn_layer", "rt_forward", "simulate", "simulate_single", "simulation_table",
           "transformer_forward"]


@dataclass
class NormFreeLayer:
    """One norm-free single-head layer: q = Q u, k = K u, v = V u (V includes the output map), and a ReLU MLP
    u -> W2 relu(W1 u + b1) + b2."""

    Q: torch.Tensor  # [d_head, width]
    K: torch.Tensor  # [d_head, width]
    V: torch.Tensor  # [width, width]
    W1: torch.Tensor  # [hidden, width]
    b1: torch.Tensor  # [hidden]
    W2: torch.Tensor  # [width, hidden]
    b2: torch.Tensor  # [width]

    def mlp(self, u: torch.Tensor) -> torch.Tensor:
        return torch.relu(u @ self.W1.T + self.b1) @ self.W2.T + self.b2


def random_transformer(n_layers: int, width: int, d_head: int, hidden: int, seed: int,
                       dtype: torch.dtype = torch.float64) -> list[NormFreeLayer]:
    """Random norm-free Transformer layers (Gaussian weights scaled by 1/sqrt(fan-in))."""
    g = torch.Generator().manual_seed(seed)

    def w(rows: int, cols: int) -> torch.Tensor:
        return torch.randn(rows, cols, generator=g, dtype=dtype) / math.sqrt(cols)

    return [NormFreeLayer(w(d_head, width), w(d_head, width), w(width, width), w(hidden, width),
                          torch.randn(hidden, generator=g, dtype=dtype) * 0.1, w(width, hidden),
                          torch.randn(width, generator=g, dtype=dtype) * 0.1) for _ in range(n_layers)]


def _attention(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Softmax over the keys of the scaled scores q [d] . k [n, d] -> [n]."""
    return torch.softmax(k @ q / math.sqrt(q.shape[-1]), dim=-1)


def transformer_forward(layers: list[NormFreeLayer], x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """x [N, D] -> (output [N, D], per layer the causal attention probabilities [N, N]); y = u + a + MLP(u + a)."""
    probs = []
    for layer in layers:
        n = x.shape[0]
        q, k, v = x @ layer.Q.T, x @ layer.K.T, x @ layer.V.T
        p = torch.zeros(n, n, dtype=x.dtype)
        for t in range(n):
            p[t, :t + 1] = _attention(q[t], k[:t + 1])
        a = p @ v  # [N, D]
        x = x + a + layer.mlp(x + a)
        probs.append(p)
    return x, probs


def rt_forward(layers: list[NormFreeLayer], x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The norm-free RT (Eq. 1-2 without norms, residual scale 1): position t attends to the persistent pairs of the
    outputs z_j (j < t) and its own temporary pair of x_t; z_t = h_t + MLP(h_t), h_t = x_t + a_t."""
    probs = []
    for layer in layers:
        n = x.shape[0]
        q = x @ layer.Q.T
        keys: list[torch.Tensor] = []
        values: list[torch.Tensor] = []
        z = torch.empty_like(x)
        p = torch.zeros(n, n, dtype=x.dtype)
        for t in range(n):
            k_all = torch.stack([*keys, layer.K @ x[t]])  # persistent pairs j < t, then the temporary pair
            v_all = torch.stack([*values, layer.V @ x[t]])
            p[t, :t + 1] = _attention(q[t], k_all)
            h = x[t] + p[t, :t + 1] @ v_all
            z[t] = h + layer.mlp(h)
            keys.append(layer.K @ z[t])
            values.append(layer.V @ z[t])
        x = z
        probs.append(p)
    return x, probs


def _blocks(width: int, carry: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Selection matrices [D, 3D] of the carry, live and scratch blocks (carry = block 0 or 1, live the other)."""
    eye = torch.eye(width, dtype=dtype)
    zero = torch.zeros(width, width, dtype=dtype)

    def pick(i: int) -> torch.Tensor:
        return torch.cat([eye if j == i else zero for j in range(3)], dim=1)

    return pick(carry), pick(1 - carry), pick(2)


def simulate(layers: list[NormFreeLayer]) -> list[NormFreeLayer]:
    """Theorem A.1's width-3D RT layers for a norm-free Transformer (see the module docstring); layer i reads block
    i % 2 as carry, so the output of layer i (its live block) is the next layer's carry."""
    out = []
    for i, layer in enumerate(layers):
        width, dtype = layer.V.shape[0], layer.V.dtype
        carry, live, scratch = _blocks(width, i % 2, dtype)  # each [D, 3D]
        both = carry + scratch  # u -> c + s = x + a, the Transformer MLP's input
        hidden = torch.cat([layer.W1 @ both, both, -both, live, -live, scratch, -scratch])  # [H + 6D, 3D]
        b1 = torch.cat([layer.b1, torch.zeros(6 * width, dtype=dtype)])
        eye, n_hidden = torch.eye(width, dtype=dtype), layer.W1.shape[0]
        # live gets MLP(x + a) + (x + a) - w; scratch gets -a; carry gets nothing
        to_live = torch.cat([layer.W2, eye, -eye, -eye, eye, 0 * eye, 0 * eye], dim=1)  # [D, H + 6D]
        to_scratch = torch.cat([torch.zeros(width, n_hidden + 4 * width, dtype=dtype), -eye, eye], dim=1)
        W2 = live.T @ to_live + scratch.T @ to_scratch  # [3D, H + 6D]
        out.append(NormFreeLayer(layer.Q @ carry, layer.K @ carry, scratch.T @ layer.V @ carry, hidden, b1, W2,
                                 live.T @ layer.b2))
    return out


def simulate_single(layer: NormFreeLayer) -> NormFreeLayer:
    """Sec. 3.1's width-2D RT layer for one norm-free Transformer layer, input (x, 0) -> output (x, y) (see the
    module docstring): queries, keys and values read carry, values land in live, and the ReLU MLP of hidden width
    H + 2D writes MLP(x + a) + x into live."""
    width, dtype = layer.V.shape[0], layer.V.dtype
    eye, zero = torch.eye(width, dtype=dtype), torch.zeros(width, width, dtype=dtype)
    carry, live = torch.cat([eye, zero], dim=1), torch.cat([zero, eye], dim=1)  # [D, 2D] each
    both = carry + live  # u -> c + l = x + a, the Transformer MLP's input
    hidden = torch.cat([layer.W1 @ both, carry, -carry])  # [H + 2D, 2D]: relu(x) - relu(-x) passes x through
    b1 = torch.cat([layer.b1, torch.zeros(2 * width, dtype=dtype)])
    W2 = live.T @ torch.cat([layer.W2, eye, -eye], dim=1)  # [2D, H + 2D]
    return NormFreeLayer(layer.Q @ carry, layer.K @ carry, live.T @ layer.V @ carry, hidden, b1, W2,
                         live.T @ layer.b2)


def embed(x: torch.Tensor, seed: int) -> torch.Tensor:
    """The RT's input (c, l, s) = (x, w, 0) with an arbitrary (random) live block w."""
    w = torch.randn(x.shape, generator=torch.Generator().manual_seed(seed), dtype=x.dtype)
    return torch.cat([x, w, torch.zeros_like(x)], dim=-1)


def _row(construction: str, depth: int, seed: int, x: torch.Tensor, y: torch.Tensor, y_hat: torch.Tensor,
         p: list[torch.Tensor], p_hat: list[torch.Tensor], rt_width: int, scratch: float) -> dict[str, object]:
    return {"construction": construction, "depth": depth, "seed": seed, "width": x.shape[1], "rt_width": rt_width,
            "tokens": x.shape[0], "dtype": str(x.dtype).removeprefix("torch."),
            "max_prob_diff": max(float((a - b).abs().max()) for a, b in zip(p, p_hat)),
            "max_output_diff": float((y - y_hat).abs().max()), "output_scale": float(y.abs().max()),
            "scratch_max": scratch}


def simulation_table(depths: tuple[int, ...] = (1, 2, 3, 4), width: int = 8, tokens: int = 12, seeds: int = 3,
                     dtype: torch.dtype = torch.float64) -> pd.DataFrame:
    """Per construction, depth and seed: the largest difference between the Transformer's and its simulating RT's
    attention probabilities (every layer) and final outputs (read from the block the last layer writes), and the
    RT's width. `construction` "stacked" is Theorem A.1's width 3D at every depth; "single" is the width-2D layer
    (depth 1 only; it has no scratch block, so `scratch_max` is 0 by construction there)."""
    rows = []
    for depth in depths:
        for seed in range(seeds):
            layers = random_transformer(depth, width, d_head=width // 2, hidden=2 * width, seed=seed, dtype=dtype)
            x = torch.randn(tokens, width, generator=torch.Generator().manual_seed(100 + seed), dtype=dtype)
            y, p = transformer_forward(layers, x)
            z, p_hat = rt_forward(simulate(layers), embed(x, seed))
            out_block = depth % 2  # layer i writes block 1 - i % 2; the last one is layer depth - 1
            y_hat = z[:, out_block * width:(out_block + 1) * width]
            rows.append(_row("stacked", depth, seed, x, y, y_hat, p, p_hat, z.shape[1],
                             float(z[:, 2 * width:].abs().max())))
            if depth == 1:
                z, p_hat = rt_forward([simulate_single(layers[0])], torch.cat([x, torch.zeros_like(x)], dim=-1))
                rows.append(_row("single", depth, seed, x, y, z[:, width:], p, p_hat, z.shape[1], 0.0))
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------------------------ Sec. 3.2


def _previous_bias(n: int, gap: float, dtype: torch.dtype) -> torch.Tensor:
    """[N, N] score bias: 0 on key t - 1 (row t), -gap on every other key of row t, the temporary pair included."""
    bias = torch.full((n, n), -gap, dtype=dtype)
    idx = torch.arange(1, n)
    bias[idx, idx - 1] = 0.0
    bias[0, 0] = 0.0  # position 0 has only its temporary pair
    return bias


@torch.no_grad()
def local_attention_layer(layer: RTLayer, x: torch.Tensor, gap: float) -> torch.Tensor:
    """x [B, N, D] -> z [B, N, D]: `layer` position by position (as `rlib.recurrent.naive`) with every query's
    scores biased towards the previous persistent pair by `gap` (ALiBi and RoPE as the layer has them)."""
    n = x.shape[1]
    positions = torch.arange(n)
    q, k_tmp, v_tmp = layer.pre_attention(x, positions)  # [B, H, N, d], [B, Hkv, N, d] x 2
    bias = layer.alibi(positions, positions, x.dtype) + _previous_bias(n, gap, x.dtype)  # [H, N, N]
    keys: list[torch.Tensor] = []
    values: list[torch.Tensor] = []
    outputs = []
    for t in range(n):
        k_all = torch.cat([*keys, k_tmp[:, :, t:t + 1]], dim=2)
        v_all = torch.cat([*values, v_tmp[:, :, t:t + 1]], dim=2)
        z = layer.post_attention(x[:, t:t + 1], attend(q[:, :, t:t + 1], k_all, v_all, bias[:, t:t + 1, :t + 1]))
        k_t, v_t = layer.persistent_kv(z, positions[t:t + 1])
        keys.append(k_t)
        values.append(v_t)
        outputs.append(z)
    return torch.cat(outputs, dim=1)


@torch.no_grad()
def rnn_layer(layer: RTLayer, x: torch.Tensor) -> torch.Tensor:
    """Sec. 3.2's recurrence with the layer's own maps: a_t = v_{t-1} (the previous persistent value, every head of its
    group), z_t = post_attention(x_t, a_t); position 0 attends to its temporary pair alone."""
    n, positions = x.shape[1], torch.arange(x.shape[1])
    heads = layer.config.n_heads
    _, _, v_tmp = layer.pre_attention(x[:, :1], positions[:1])
    z = layer.post_attention(x[:, :1], expand_heads(v_tmp, heads))
    outputs = [z]
    for t in range(1, n):
        _, v_prev = layer.persistent_kv(z, positions[t - 1:t])  # [B, Hkv, 1, d]
        z = layer.post_attention(x[:, t:t + 1], expand_heads(v_prev, heads))
        outputs.append(z)
    return torch.cat(outputs, dim=1)


# the layer shapes of `rlib.recurrent.experiments.exactness_table`: 4 heads over 2 KV heads, d 64
RECURRENCE_LAYER = RTConfig(vocab_size=8, d_model=64, n_layers=4, n_heads=4, n_kv_heads=2)


def recurrence_table(config: RTConfig = RECURRENCE_LAYER, gaps: tuple[float, ...] = (0.0, 2.0, 4.0, 8.0, 16.0, 32.0),
                     positions: tuple[str, ...] = ("alibi", "rope"), tokens: int = 24, seed: int = 0) -> pd.DataFrame:
    """Per position encoding and logit gap G: the largest |z_layer - z_recurrence| over positions and features, also
    relative to max |z|, for a randomly initialised layer of `config` in float64."""
    rows = []
    for position in positions:
        torch.manual_seed(seed)
        layer = RTLayer(dataclasses.replace(config, position=position)).double().eval()
        x = torch.randn(1, tokens, config.d_model, dtype=torch.float64)
        target = rnn_layer(layer, x)
        for gap in gaps:
            z = local_attention_layer(layer, x, gap)
            rows.append({"position": position, "gap": gap, "tokens": tokens, "d_model": config.d_model,
                         "n_layers": config.n_layers, "max_abs_diff": float((z - target).abs().max()),
                         "rel_diff": float((z - target).abs().max() / target.abs().max())})
    return pd.DataFrame(rows)
