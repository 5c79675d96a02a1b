"""A Recurrent Transformer language model, its Transformer twin, and KV-cached decoding (paper 002, Sec. 2, 5, 7.3).

Layers run one after another over the whole sequence (each recurrent layer needs all of its input before its
tiles can start). `schedule` picks how a recurrent layer is evaluated: "tiled" (Algorithm 1, tiles by
`kernels.tiled_prefill`, custom backward) or "naive" (the per-position loop). Transformer layers ignore it.

Decoding keeps one (key, value) per token per layer, as a Transformer does; for a recurrent layer that pair is
the persistent one, made from the layer's output after the token's own attention (with its temporary pair) and
MLP. `prefill` runs the tiled forward and keeps its cache; `decode_step` appends one token. The official code has
no cached decoding; the tests check that it reproduces the full forward's logits.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from rlib.recurrent.config import RTConfig
from rlib.recurrent.layer import RMSNorm, RTLayer, attend
from rlib.recurrent.naive import naive_layer
from rlib.recurrent.tiled import tiled_layer

__all__ = ["SCHEDULES", "RTCache", "RTModel", "greedy_generate", "init_std"]

SCHEDULES = ("tiled", "naive")


@dataclass
class RTCache:
    """Per layer, keys and values [B, Hkv, capacity, d]; rows < length are filled."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    length: int

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2]

    def nbytes(self) -> int:
        """Bytes of the filled rows (what a serving system would hold for these tokens)."""
        return sum(t[:, :, :self.length].numel() * t.element_size() for t in (*self.keys, *self.values))


def init_std(name: str, weight: torch.Tensor) -> float:
    """The official code's initialization (OLMo's "mitchell" scheme, paper 002 App. D), without its depth factor
    (the 1/sqrt(L) residual scale already does that): std 1/sqrt(fan_in) for embeddings (fan_in = width) and
    input projections, 1/sqrt(2 fan_in) for the projections back into the residual stream (o_proj, down),
    truncated at 3 sigma. With std 0.02 everywhere instead (our first choice), one RT layer stayed at chance on
    recall and took > 6000 steps to start learning induction, which it learns in ~1500 steps from this init."""
    fan_in = weight.shape[1]
    if name.endswith(("o_proj", "down")):
        return (2.0 * fan_in) ** -0.5
    return fan_in ** -0.5


class RTModel(nn.Module):
    """Embeddings, `n_layers` RTLayers (recurrent or Transformer blocks), final RMSNorm and LM head.

    `std=None` initializes as the official code does (`init_std`); a number draws every weight from N(0, std^2)
    (the tests use large ones to make differences visible)."""

    def __init__(self, config: RTConfig, seed: int = 0, std: float | None = None):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.layers = nn.ModuleList(RTLayer(config) for _ in range(config.n_layers))
        self.norm = RMSNorm(config.d_model, config.norm_eps)
        self.head = None if config.tie_embeddings else nn.Linear(config.d_model, config.vocab_size, bias=False)
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, module in self.named_modules():
                if isinstance(module, (nn.Linear, nn.Embedding)):
                    scale = std if std is not None else init_std(name, module.weight)
                    noise = torch.randn(module.weight.shape, generator=generator)
                    module.weight.copy_((noise if std is not None else noise.clamp(-3.0, 3.0)) * scale)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        hidden = self.norm(hidden)
        return hidden @ self.embed.weight.T if self.head is None else self.head(hidden)

    def hidden_states(self, ids: torch.Tensor, schedule: str = "tiled",
                      tile_impl: str = "auto") -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
        """ids [B, T] -> the last layer's output [B, T, D] (before the final norm) and each layer's cached keys and
        values [B, Hkv, T, d]."""
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule={schedule!r}: choose from {SCHEDULES}")
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.embed(ids)  # [B, T, D]
        keys, values = [], []
        for layer in self.layers:
            if self.config.block == "transformer":
                x, k, v = layer.transformer_forward(x, positions)
            elif schedule == "naive":
                x, k, v = naive_layer(layer, x, positions)
            else:
                x, k, v = tiled_layer(layer, x, positions, tile_impl)
            keys.append(k)
            values.append(v)
        return x, keys, values

    def forward(self, ids: torch.Tensor, schedule: str = "tiled", tile_impl: str = "auto",
                return_cache: bool = False, capacity: int | None = None):
        """ids [B, T] -> logits [B, T, V] (and, with `return_cache`, the RTCache for decoding on from T)."""
        x, keys, values = self.hidden_states(ids, schedule, tile_impl)
        tokens = ids.shape[1]
        logits = self.logits(x)
        if not return_cache:
            return logits
        capacity = max(capacity or tokens, tokens)
        return logits, RTCache([_grow(k.detach(), capacity) for k in keys],
                               [_grow(v.detach(), capacity) for v in values], tokens)

    @torch.no_grad()
    def decode_step(self, ids: torch.Tensor, cache: RTCache) -> torch.Tensor:
        """ids [B, 1] at position cache.length -> logits [B, 1, V]; appends one pair per layer to `cache`."""
        p = cache.length
        if p >= cache.capacity:
            raise ValueError(f"the cache holds {cache.capacity} tokens and is full; prefill with a larger capacity")
        position = torch.tensor([p], device=ids.device)
        key_positions = torch.arange(p + 1, device=ids.device)
        x = self.embed(ids)  # [B, 1, D]
        for layer, k_cache, v_cache in zip(self.layers, cache.keys, cache.values):
            q, k_tmp, v_tmp = layer.pre_attention(x, position)
            k_cache[:, :, p] = k_tmp[:, :, 0]  # the temporary pair (a recurrent layer overwrites it below)
            v_cache[:, :, p] = v_tmp[:, :, 0]
            bias = layer.alibi(position, key_positions, x.dtype)  # [H, 1, p + 1]
            a = attend(q, k_cache[:, :, :p + 1], v_cache[:, :, :p + 1], bias)  # [B, H, 1, d]
            z = layer.post_attention(x, a)
            if self.config.block == "recurrent":
                k, v = layer.persistent_kv(z, position)
                k_cache[:, :, p] = k[:, :, 0]
                v_cache[:, :, p] = v[:, :, 0]
            x = z
        cache.length = p + 1
        return self.logits(x)


def _grow(x: torch.Tensor, capacity: int) -> torch.Tensor:
    """[B, Hkv, T, d] -> [B, Hkv, capacity, d] with the first T rows copied."""
    out = x.new_zeros(*x.shape[:2], capacity, x.shape[3])
    out[:, :, :x.shape[2]] = x
    return out


@torch.no_grad()
def greedy_generate(model: RTModel, ids: torch.Tensor, max_new_tokens: int, tile_impl: str = "auto") -> torch.Tensor:
    """Tiled prefill of the prompt ids [B, T], then `max_new_tokens` cached greedy steps -> [B, T + new]."""
    logits, cache = model(ids, tile_impl=tile_impl, return_cache=True, capacity=ids.shape[1] + max_new_tokens)
    out = [ids]
    token = logits[:, -1:].argmax(-1)  # [B, 1]
    for _ in range(max_new_tokens):
        out.append(token)
        if len(out) - 1 == max_new_tokens:
            break
        token = model.decode_step(token, cache)[:, -1:].argmax(-1)
    return torch.cat(out, dim=1)
