"""The peer side by side (paper 004's self-speculation vs transformers' own): early-exit assisted generation.

transformers implements LayerSkip-style drafting as `generate(..., assistant_early_exit=E)`: the model itself,
truncated to its first E layers, drafts `num_assistant_tokens` tokens with its own KV cache, and the full model
verifies them. That is our `reuse="none"` (no shared cache, no exit-query cache). A `Decoder` exports to the
transformers class with `rlib.model.convert.to_transformers`; the same weights then run both implementations.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from rlib.config import ConfigError

__all__ = ["hf_early_exit_generate", "hf_greedy_generate"]


def _generation_config(hf_model, max_new_tokens: int, eos_ids: tuple[int, ...], **extra):
    from transformers import GenerationConfig

    pad = eos_ids[0] if eos_ids else 0
    return GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=list(eos_ids) or None,
                            pad_token_id=pad, use_cache=True, **extra)


@contextmanager
def _only(hf_model, config):
    """Make `config` the model's own generation config for one call: transformers fills every field left at its
    default from the model's config, which would bring back an EOS that the caller switched off."""
    saved = hf_model.generation_config
    hf_model.generation_config = config
    try:
        yield config
    finally:
        hf_model.generation_config = saved


@torch.no_grad()
def hf_greedy_generate(hf_model, input_ids: torch.Tensor, max_new_tokens: int,
                       eos_ids: tuple[int, ...] = ()) -> torch.Tensor:
    """transformers' greedy decoding: [B, T] -> [B, T + n] (no padding in the prompt)."""
    with _only(hf_model, _generation_config(hf_model, max_new_tokens, eos_ids)) as config:
        return hf_model.generate(input_ids, attention_mask=torch.ones_like(input_ids), generation_config=config)


@torch.no_grad()
def hf_early_exit_generate(hf_model, input_ids: torch.Tensor, max_new_tokens: int, exit_layer: int, n_draft: int,
                           eos_ids: tuple[int, ...] = ()) -> torch.Tensor:
    """transformers' early-exit assisted generation with a constant draft length: prompt [1, T] -> [1, T + n]."""
    n_layers = hf_model.config.num_hidden_layers
    if not 1 <= exit_layer < n_layers:
        raise ConfigError(f"exit_layer={exit_layer} must lie in [1, {n_layers - 1}] for assisted generation")
    if n_draft < 1:
        raise ConfigError(f"n_draft={n_draft} must be >= 1 for assisted generation")
    if input_ids.shape[0] != 1:
        raise ConfigError(f"transformers' assisted generation takes batch 1, got {input_ids.shape[0]}")
    config = _generation_config(hf_model, max_new_tokens, eos_ids, assistant_early_exit=exit_layer,
                                num_assistant_tokens=n_draft, num_assistant_tokens_schedule="constant")
    with _only(hf_model, config):
        return hf_model.generate(input_ids, attention_mask=torch.ones_like(input_ids), generation_config=config)
