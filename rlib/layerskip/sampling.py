"""Sampled decoding that self-speculation reproduces exactly: Gumbel-max sampling with the noise fixed per position
(ours; paper 004 decodes greedily, Sec. 4.3 and App. 10.4).

Why: the chapter's small from-scratch models fall into loops under greedy decoding, so their acceptance rates and
speedups measure how easily an exit drafts a loop (issue 25). Sampling gives output that is not a loop, and this
way of sampling keeps the book's equivalence test: self-speculative output equals the autoregressive output.

Drawing token i from softmax(z / T) is the same as taking argmax(z / T + g_i), g_i [V] standard Gumbel noise (the
Gumbel-max trick). Fix g_i for every position i of the sequence from a seed, and sampling becomes greedy decoding of
perturbed logits. Self-speculation over it drafts with the exit's perturbed argmax and verifies with the full
model's perturbed argmax, both with the g_i of the drafted position. Every committed token is then the full model's
sample, so the output equals autoregressive sampling with the same noise token for token, and it is a true sample
of the model at temperature T. Acceptance becomes the chance that the exit's perturbed argmax equals the full
model's: a coupling of the two distributions, at most the 1 - TV(p_E, p_L) of speculative sampling's rejection rule.

    Sampling          temperature and seed; `noise` draws g for [B, positions, V]
    TokenChooser      argmax of logits (greedy) or of logits / T + the noise of their positions (sampling)
    sampled_generate  the reference: full forward passes, no cache, one token at a time (or over the cache)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rlib.config import ConfigError
from rlib.model import Decoder

__all__ = ["Sampling", "TokenChooser", "sampled_generate"]


@dataclass(frozen=True)
class Sampling:
    """Sampling at `temperature` with Gumbel noise drawn from `seed` (one noise vector per sequence position)."""

    temperature: float
    seed: int = 0

    def __post_init__(self) -> None:
        if not (isinstance(self.temperature, (int, float)) and math.isfinite(self.temperature)
                and self.temperature > 0):
            raise ConfigError(f"temperature={self.temperature!r} must be a finite number > 0 (0 means greedy: pass "
                              "sampling=None instead)")

    def noise(self, batch: int, positions: int, vocab: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """Standard Gumbel noise [batch, positions, vocab], the same for the same seed and shape."""
        generator = torch.Generator().manual_seed(self.seed)
        uniform = torch.rand(batch, positions, vocab, generator=generator, dtype=torch.float32)
        tiny = torch.finfo(torch.float32).tiny
        exponential = (-torch.log(uniform.clamp_min(tiny))).clamp_min(tiny)  # -log U > 0
        return (-torch.log(exponential)).to(device)


class TokenChooser:
    """Chooses the tokens of positions first..first + n - 1 from their logits [B, n, V'] -> [B, n].

    Greedy (sampling None): the argmax. Sampling: the argmax of logits / T + the noise of those positions, over the
    whole vocabulary or over the ids `vocab` [V'] whose logits were computed (a draft over a task vocabulary)."""

    def __init__(self, sampling: Sampling | None, batch: int, positions: int, vocab_size: int,
                 device: torch.device | str = "cpu") -> None:
        self.sampling = sampling
        self.positions = positions
        self.noise = None if sampling is None else sampling.noise(batch, positions, vocab_size, device)

    def __call__(self, logits: torch.Tensor, first: int, vocab: torch.Tensor | None = None) -> torch.Tensor:
        if self.noise is None:
            return logits.argmax(-1)
        n = logits.shape[1]
        if first < 0 or first + n > self.positions:
            raise ConfigError(f"positions {first}..{first + n - 1} lie outside the {self.positions} drawn noise rows")
        noise = self.noise[:, first:first + n]  # [B, n, V]
        if vocab is not None:
            noise = noise[..., vocab]  # [B, n, V']
        return (logits.float() / self.sampling.temperature + noise).argmax(-1)


@torch.no_grad()
def sampled_generate(model: Decoder, input_ids: torch.Tensor, max_new_tokens: int,
                     sampling: Sampling | None, use_cache: bool = False) -> torch.Tensor:
    """The reference decoder: one full forward pass (no cache) per new token, each token chosen by a
    `TokenChooser`: prompt [B, T] -> [B, T + max_new_tokens] (EOS ignored). use_cache: the same choices over the
    decoder's KV cache (one prefill, then one token per forward), about twice as fast at 70 positions and tested
    to give the same tokens; the uncached loop stays the reference the self-speculative decoder is tested against."""
    if max_new_tokens < 1:
        raise ConfigError(f"max_new_tokens={max_new_tokens} must be >= 1")
    batch, prompt_len = input_ids.shape
    choose = TokenChooser(sampling, batch, prompt_len + max_new_tokens, model.config.vocab_size, input_ids.device)
    cache = model.new_cache() if use_cache else None
    seq, fed = input_ids, input_ids
    for _ in range(max_new_tokens):
        logits = model(fed if use_cache else seq, cache=cache, last_only=True)  # [B, 1, V]
        chosen = choose(logits, seq.shape[1])  # [B, 1]
        seq = torch.cat([seq, chosen], dim=1)
        fed = chosen
    return seq
