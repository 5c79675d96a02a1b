"""`DecoderConfig` -> the transformers config and causal-LM class of its family (the export direction).

    hf_config(config)      LlamaConfig | Qwen2Config | Qwen3Config | MistralConfig | Gemma3TextConfig
    model_class(family)    LlamaForCausalLM | Qwen2ForCausalLM | ...

A transformers class computes exactly one structure; a config whose values that class cannot express (a
per-layer window on a Llama, a bias on Mistral, several window sizes) is refused with a `ConfigError` naming
what is missing, never exported approximately. The reading direction is `DecoderConfig.from_hf`.
"""

from __future__ import annotations

from rlib.config import ConfigError
from rlib.model.config import HF_FIELDS, DecoderConfig

__all__ = ["hf_config", "model_class"]

_CLASSES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
            "mistral": "MistralForCausalLM", "gemma3": "Gemma3ForCausalLM"}
_HF_ACTIVATION = {"silu": "silu", "gelu_tanh": "gelu_pytorch_tanh"}


def model_class(family: str):
    """The transformers causal-LM class that `to_transformers` builds for `family`."""
    import transformers

    return getattr(transformers, _CLASSES[family])


def hf_config(config: DecoderConfig):
    """The transformers config that describes the same model as `config` (raises ConfigError if none does)."""
    return _WRITERS[config.family](config)


def _shared_fields(config: DecoderConfig) -> dict:
    return dict(
        **{theirs: getattr(config, ours) for ours, theirs in HF_FIELDS.items()},
        head_dim=config.head_dim,
        tie_word_embeddings=config.tie_embeddings,
        eos_token_id=list(config.eos_ids) if len(config.eos_ids) > 1 else (config.eos_ids or (None,))[0],
    )


def _require(condition: bool, family: str, what: str) -> None:
    if not condition:
        raise ConfigError(f"no transformers {family} model has {what}")


def _check_llama_like(config: DecoderConfig, qk_norm: bool) -> None:
    """What every Llama-structured family shares: pre-norms only, w-scaled RMSNorm, one theta, D^-0.5 scale."""
    family = config.family
    _require(config.norm_kind == "rms" and not config.post_norms and config.qk_norm == qk_norm, family, "these norms")
    _require(config.embed_scale == 1.0 and config.logit_softcap is None and config.attn_softcap is None,
             family, "an embedding scale or soft-capping")
    _require(len(set(config.rope_thetas)) == 1, family, "per-layer rope thetas")
    _require(abs(config.attn_scale - config.head_dim**-0.5) < 1e-12, family, "a custom attention scale")


def _rope(config: DecoderConfig) -> dict:
    return {"rope_type": "default", "rope_theta": config.rope_thetas[0]}


def _one_window(config: DecoderConfig) -> int | None:
    windows = {w for w in config.sliding_windows if w is not None}
    _require(len(windows) <= 1, config.family, f"several sliding-window sizes ({sorted(windows)})")
    return windows.pop() if windows else None


def _layer_types(config: DecoderConfig) -> list[str]:
    return ["full_attention" if w is None else "sliding_attention" for w in config.sliding_windows]


def _llama_config(config: DecoderConfig):
    from transformers import LlamaConfig

    _check_llama_like(config, qk_norm=False)
    _require(set(config.sliding_windows) == {None}, "llama", "sliding windows")
    _require(not config.qkv_bias, "llama", "biases on Q, K, V without one on O")
    return LlamaConfig(hidden_act=_HF_ACTIVATION[config.activation], mlp_bias=config.mlp_bias,
                       attention_bias=config.attn_bias, rope_parameters=_rope(config), **_shared_fields(config))


def _qwen_windows(config: DecoderConfig) -> dict:
    window = _one_window(config)
    return dict(use_sliding_window=window is not None, sliding_window=window, layer_types=_layer_types(config),
                max_window_layers=config.n_layers)


def _qwen2_config(config: DecoderConfig):
    from transformers import Qwen2Config

    _check_llama_like(config, qk_norm=False)
    _require(config.qkv_bias and not config.attn_bias and not config.mlp_bias, "qwen2",
             "other biases than on Q, K and V")
    _require(config.head_dim * config.n_heads == config.d_model, "qwen2", "head_dim != d_model / n_heads")
    fields = _shared_fields(config)
    del fields["head_dim"]
    return Qwen2Config(hidden_act=_HF_ACTIVATION[config.activation], rope_parameters=_rope(config),
                       **_qwen_windows(config), **fields)


def _qwen3_config(config: DecoderConfig):
    from transformers import Qwen3Config

    _check_llama_like(config, qk_norm=True)
    _require(not config.qkv_bias and not config.mlp_bias, "qwen3", "biases on Q, K, V only or on the MLP")
    return Qwen3Config(hidden_act=_HF_ACTIVATION[config.activation], attention_bias=config.attn_bias,
                       rope_parameters=_rope(config), **_qwen_windows(config), **_shared_fields(config))


def _mistral_config(config: DecoderConfig):
    from transformers import MistralConfig

    _check_llama_like(config, qk_norm=False)
    _require(len(set(config.sliding_windows)) == 1, "mistral", "different attention windows per layer")
    _require(not (config.attn_bias or config.qkv_bias or config.mlp_bias), "mistral", "biases")
    return MistralConfig(hidden_act=_HF_ACTIVATION[config.activation], sliding_window=config.sliding_windows[0],
                         rope_parameters=_rope(config), **_shared_fields(config))


def _gemma3_config(config: DecoderConfig):
    from transformers import Gemma3TextConfig

    _require(config.norm_kind == "rms_plus_one" and config.post_norms and config.qk_norm, "gemma3", "these norms")
    _require(config.activation == "gelu_tanh" and not config.mlp_bias, "gemma3", "this MLP")
    _require(not config.qkv_bias, "gemma3", "biases on Q, K, V without one on O")
    _require(config.attn_softcap is None, "gemma3", "attention soft-capping (its config field is ignored)")
    _require(abs(config.embed_scale - config.d_model**0.5) < 1e-9, "gemma3", "this embedding scale")
    layer_types = _layer_types(config)
    window = _one_window(config)
    thetas = {}
    for layer_type, theta in zip(layer_types, config.rope_thetas):
        _require(thetas.setdefault(layer_type, theta) == theta, "gemma3", "several rope thetas per layer type")
    scalar = config.attn_scale**-2
    return Gemma3TextConfig(
        hidden_activation="gelu_pytorch_tanh",
        layer_types=layer_types,
        sliding_window=window or 4096,
        rope_parameters={t: {"rope_type": "default", "rope_theta": theta} for t, theta in thetas.items()},
        query_pre_attn_scalar=round(scalar) if abs(scalar - round(scalar)) < 1e-6 else scalar,
        final_logit_softcapping=config.logit_softcap,
        attention_bias=config.attn_bias,
        **_shared_fields(config),
    )


_WRITERS = {"llama": _llama_config, "qwen2": _qwen2_config, "qwen3": _qwen3_config, "mistral": _mistral_config,
            "gemma3": _gemma3_config}
