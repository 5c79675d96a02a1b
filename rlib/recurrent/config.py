"""The shape and options of a Recurrent Transformer (paper 002, Sec. 2.2 and App. D) or its Transformer twin.

`block="recurrent"` makes the key/value pair that later positions see from the layer's *output* (Eq. 1-2);
`block="transformer"` makes it from the layer input, as a standard pre-norm layer (Sec. 2.1). Everything else
(norms, MLP, positions, residual scaling) is the same code, so the two differ only where the paper says.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rlib.config import ConfigError

__all__ = ["BLOCKS", "POSITIONS", "RTConfig", "alibi_slopes"]

BLOCKS = ("recurrent", "transformer")
POSITIONS = ("alibi", "rope", "none")


@dataclass(frozen=True)
class RTConfig:
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int | None = None  # None = n_heads (no GQA); must divide n_heads
    d_ff: int | None = None  # None = 4 d_model (the paper's GELU MLP)
    block: str = "recurrent"
    position: str = "alibi"  # the paper's choice; RoPE is supported here too (the official code asserts it off)
    alibi_max_bias: float = 8.0  # slopes 2^(-max_bias (h + 1) / H), as in OLMo's ALiBi
    rope_theta: float = 10_000.0
    kv_norm: bool = True  # RMS before the persistent K/V projections (Eq. 1-2); False = the App. E.2 ablation
    residual_scale: bool = True  # x + (1/sqrt(L)) f(x): the paper's depth-wise residual scaling
    norm_eps: float = 1e-6
    tie_embeddings: bool = False

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_layers", "n_heads"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}={getattr(self, name)} must be >= 1")
        if self.d_model % self.n_heads:
            raise ConfigError(f"d_model={self.d_model} must be a multiple of n_heads={self.n_heads}")
        if self.kv_heads < 1 or self.n_heads % self.kv_heads:
            raise ConfigError(f"n_kv_heads={self.n_kv_heads} must divide n_heads={self.n_heads}")
        if self.block not in BLOCKS:
            raise ConfigError(f"block={self.block!r} unknown; choose from {list(BLOCKS)}")
        if self.position not in POSITIONS:
            raise ConfigError(f"position={self.position!r} unknown; choose from {list(POSITIONS)}")
        if self.position == "rope" and self.head_dim % 2:
            raise ConfigError(f"RoPE needs an even head dimension; d_model / n_heads = {self.head_dim}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def ff_dim(self) -> int:
        return self.d_ff or 4 * self.d_model

    @property
    def alpha(self) -> float:
        """The residual branch scale 1/sqrt(L) (1 without depth-wise scaling)."""
        return 1.0 / math.sqrt(self.n_layers) if self.residual_scale else 1.0

    def kv_floats_per_token(self) -> int:
        """Cached floats per token: one key and one value per layer and KV head (Table 1's KV-cache column)."""
        return 2 * self.n_layers * self.kv_heads * self.head_dim


def alibi_slopes(n_heads: int, max_bias: float) -> list[float]:
    """Head h's ALiBi slope 2^(-max_bias (h + 1) / H); the bias of key position i for query j is -slope (j - i)."""
    return [2.0 ** (-max_bias * (h + 1) / n_heads) for h in range(n_heads)]
