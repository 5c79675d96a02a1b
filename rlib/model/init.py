"""Random initialization of a Decoder: the "Random" looping init and every model trained from scratch.

Relaxed Recursive Transformers (Sec. 3.3, Table F.1) compares pretrained initializations against a model with
no pretrained weights at all, and against a reduced-size model pretrained from scratch; the MoR paper trains
every model from scratch. Both get the scheme transformers uses for Llama and Gemma: every matrix (and the
embedding) ~ N(0, std^2), biases 0, norm scales at identity (w = 1, or w = 0 for Gemma's (1 + w) form).
`std` defaults to 0.02 (transformers' `initializer_range` default). Seeded: the same seed gives the same
weights on any device, because values are drawn on the CPU and copied.
"""

from __future__ import annotations

import torch

from rlib.model.decoder import Decoder
from rlib.model.layers import RMSNorm

__all__ = ["DEFAULT_STD", "init_weights"]

DEFAULT_STD = 0.02


@torch.no_grad()
def init_weights(decoder: Decoder, seed: int = 0, std: float = DEFAULT_STD) -> Decoder:
    """Re-draw every parameter of `decoder` in place (see the module docstring); returns it."""
    generator = torch.Generator().manual_seed(seed)
    norm_weights = {id(m.weight): m.plus_one for m in decoder.modules() if isinstance(m, RMSNorm)}
    for _, param in sorted(decoder.named_parameters(), key=lambda item: item[0]):  # a fixed draw order
        if id(param) in norm_weights:
            param.fill_(0.0 if norm_weights[id(param)] else 1.0)
        elif param.ndim >= 2:
            values = torch.empty(param.shape, dtype=torch.float32).normal_(0.0, std, generator=generator)
            param.copy_(values.to(param.dtype))
        else:
            param.zero_()
    return decoder
