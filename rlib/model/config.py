"""`DecoderConfig`: one frozen description of a Llama-family or Gemma-3-style decoder, and its reading from
transformers (model types llama, qwen2, qwen3, mistral, gemma3_text).

The families differ only in values, never in code paths chosen by name:

    Llama (SmolLM2)          Gemma 3 (270M)
    norm_kind "rms"          norm_kind "rms_plus_one"        RMSNorm scales by w, or by (1 + w)
    post_norms False         post_norms True                 Gemma also normalises each sublayer's output
    embed_scale 1            embed_scale sqrt(D_model)       the token embedding is multiplied by this
    qk_norm False            qk_norm True                    RMSNorm over each head's queries and keys
    activation "silu"        activation "gelu_tanh"          SwiGLU or GeGLU (tanh-approximated GELU)
    one rope theta           theta 1e4 (sliding) / 1e6       per layer, with a sliding window or None
    attn_scale D**-0.5       query_pre_attn_scalar**-0.5

    Qwen2    = Llama + biases on the Q, K and V projections (`qkv_bias`; none on O), sliding windows per `layer_types`
    Qwen3    = Llama + QK-norm (plain RMSNorm over each head), sliding windows per `layer_types`
    Mistral  = Llama + one sliding window on every layer (or none)

Anything a reader does not implement (a scaled rope type, an unknown layer type, an activation) is refused with a
`ConfigError` naming the transformers field and its value.

Per-layer fields (`rope_thetas`, `sliding_windows`) have one entry per *unique block*: by default a looped
model runs each block with its own theta and window. A plan step may override both per depth
(`Step.window`, `Step.rope_theta`), which is how a looped Gemma 3 keeps its source model's sliding/global pattern.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlib.config import Checked, ConfigError

ACTIVATIONS = ("silu", "gelu_tanh")
NORM_KINDS = ("rms", "rms_plus_one")
FAMILIES = ("llama", "gemma3", "qwen2", "qwen3", "mistral")
_HF_ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_tanh": "gelu_tanh"}


@dataclass(frozen=True)
class DecoderConfig(Checked):
    family: str  # one of FAMILIES: which transformers class `to_transformers` builds
    vocab_size: int
    d_model: int
    n_layers: int  # unique blocks (the execution plan may run them more than once)
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ffn: int
    activation: str  # "silu" (SwiGLU) | "gelu_tanh" (GeGLU)
    norm_eps: float
    norm_kind: str  # "rms" (x * w) | "rms_plus_one" (x * (1 + w))
    post_norms: bool  # Gemma: also a norm after attention and after the MLP, before each residual add
    embed_scale: float  # token embeddings are multiplied by this (Gemma: sqrt(d_model))
    qk_norm: bool
    rope_thetas: tuple[float, ...]  # one per block
    sliding_windows: tuple[int | None, ...]  # one per block; None = global attention
    attn_scale: float  # softmax(q k^T * attn_scale)
    logit_softcap: float | None = None  # logits = c * tanh(logits / c)
    attn_softcap: float | None = None  # scores = c * tanh(scores / c), before the mask
    tie_embeddings: bool = True
    attn_bias: bool = False  # biases on Q, K, V and O (Llama's and Qwen3's `attention_bias`)
    mlp_bias: bool = False
    qkv_bias: bool = False  # biases on Q, K and V only (Qwen2)
    bos_id: int | None = None
    eos_ids: tuple[int, ...] = ()
    pad_id: int | None = None
    max_positions: int = 8192  # carried for export; positions are not limited here

    def __post_init__(self) -> None:
        object.__setattr__(self, "rope_thetas", tuple(float(t) for t in self.rope_thetas))
        object.__setattr__(self, "sliding_windows", tuple(None if w is None else int(w) for w in self.sliding_windows))
        object.__setattr__(self, "eos_ids", tuple(int(e) for e in self.eos_ids))
        self.validate()

    def validate(self) -> None:
        problems = []
        if self.family not in FAMILIES:
            problems.append(f"family {self.family!r} not in {FAMILIES}")
        if self.activation not in ACTIVATIONS:
            problems.append(f"activation {self.activation!r} not in {ACTIVATIONS}")
        if self.norm_kind not in NORM_KINDS:
            problems.append(f"norm_kind {self.norm_kind!r} not in {NORM_KINDS}")
        if self.n_heads % self.n_kv_heads:
            problems.append(f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}")
        for name in ("rope_thetas", "sliding_windows"):
            if len(getattr(self, name)) != self.n_layers:
                problems.append(f"{name} has {len(getattr(self, name))} entries for {self.n_layers} layers")
        if any(w is not None and w < 1 for w in self.sliding_windows):
            problems.append("sliding windows must be >= 1 (or None for global attention)")
        if problems:
            raise ConfigError("DecoderConfig: " + "; ".join(problems))

    @property
    def kv_groups(self) -> int:
        """Query heads per key/value head (1 = MHA, n_heads = MQA)."""
        return self.n_heads // self.n_kv_heads

    def replace(self, **changes: Any) -> DecoderConfig:
        return dataclasses.replace(self, **changes)

    def with_layers(self, layers: Sequence[int]) -> DecoderConfig:
        """The config of a decoder whose block i takes the attention type (theta, window) of layer layers[i]."""
        return self.replace(
            n_layers=len(layers),
            rope_thetas=tuple(self.rope_thetas[i] for i in layers),
            sliding_windows=tuple(self.sliding_windows[i] for i in layers),
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> DecoderConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ConfigError(f"DecoderConfig has no field(s) {unknown}")
        return cls(**values)

    @classmethod
    def from_hf(cls, hf_config) -> DecoderConfig:
        """Read a transformers config of a supported model type (the text config of a Gemma3Config too)."""
        hf_config = getattr(hf_config, "text_config", None) or hf_config
        reader = _READERS.get(hf_config.model_type)
        if reader is None:
            raise ConfigError(f"no decoder for transformers model_type {hf_config.model_type!r}; "
                              f"supported: {', '.join(_READERS)}")
        return reader(hf_config)


def _activation(name: str) -> str:
    if name not in _HF_ACTIVATIONS:
        raise ConfigError(f"activation {name!r} is not supported; supported: {sorted(_HF_ACTIVATIONS)}")
    return _HF_ACTIVATIONS[name]


def _default_rope_theta(rope_parameters: dict | None, where: str) -> float:
    """The theta of a plain RoPE; scaled variants (llama3, yarn, linear...) would change the frequencies."""
    rope_parameters = rope_parameters or {}
    rope_type = rope_parameters.get("rope_type", "default")
    if rope_type != "default":
        raise ConfigError(f"{where}: rope_parameters['rope_type']={rope_type!r} (rope scaling) is not supported; "
                          "only 'default' RoPE is implemented")
    partial = rope_parameters.get("partial_rotary_factor", 1.0)
    if partial != 1.0:
        raise ConfigError(f"{where}: rope_parameters['partial_rotary_factor']={partial!r} is not supported; RoPE "
                          "rotates the whole head here")
    return float(rope_parameters["rope_theta"])


def _eos_ids(eos) -> tuple[int, ...]:
    if eos is None:
        return ()
    return tuple(eos) if isinstance(eos, list | tuple) else (int(eos),)


def _head_dim(hf_config) -> int:
    return getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads


# our field -> the transformers config attribute with the same meaning (both directions use this table)
HF_FIELDS = {
    "vocab_size": "vocab_size", "d_model": "hidden_size", "n_layers": "num_hidden_layers",
    "n_heads": "num_attention_heads", "n_kv_heads": "num_key_value_heads", "d_ffn": "intermediate_size",
    "norm_eps": "rms_norm_eps", "bos_id": "bos_token_id", "pad_id": "pad_token_id",
    "max_positions": "max_position_embeddings",
}


def _common(hf_config) -> dict[str, Any]:
    return dict(
        **{ours: getattr(hf_config, theirs) for ours, theirs in HF_FIELDS.items()},
        head_dim=_head_dim(hf_config),
        tie_embeddings=bool(getattr(hf_config, "tie_word_embeddings", False)),
        attn_bias=bool(getattr(hf_config, "attention_bias", False)),
        eos_ids=_eos_ids(hf_config.eos_token_id),
    ) | {"norm_eps": float(hf_config.rms_norm_eps)}


def _llama_like(hf_config, family: str, sliding_windows: tuple[int | None, ...], qk_norm: bool = False,
                **biases: bool) -> DecoderConfig:
    """Llama's structure (pre-norms, w-scaled RMSNorm, gated MLP, one rope theta) with family-specific values."""
    theta = _default_rope_theta(hf_config.rope_parameters, family)
    common = _common(hf_config)
    return DecoderConfig(
        family=family,
        activation=_activation(hf_config.hidden_act),
        norm_kind="rms",
        post_norms=False,
        embed_scale=1.0,
        qk_norm=qk_norm,
        rope_thetas=(theta,) * hf_config.num_hidden_layers,
        sliding_windows=sliding_windows,
        attn_scale=common["head_dim"] ** -0.5,
        **biases,
        **common,
    )


def _from_llama(hf_config) -> DecoderConfig:
    return _llama_like(hf_config, "llama", (None,) * hf_config.num_hidden_layers,
                       mlp_bias=bool(getattr(hf_config, "mlp_bias", False)))


def _typed_windows(hf_config, family: str) -> tuple[int | None, ...]:
    """Per layer: `sliding_window` on "sliding_attention" layers, None on "full_attention" ones (Qwen2, Qwen3)."""
    windows = []
    for i, layer_type in enumerate(hf_config.layer_types[: hf_config.num_hidden_layers]):
        if layer_type not in ("sliding_attention", "full_attention"):
            raise ConfigError(f"{family}: layer_types[{i}]={layer_type!r} is not supported "
                              "(only 'sliding_attention' and 'full_attention')")
        if layer_type == "sliding_attention" and not hf_config.sliding_window:
            raise ConfigError(f"{family}: layer_types[{i}]='sliding_attention' but sliding_window="
                              f"{hf_config.sliding_window!r} (use_sliding_window={hf_config.use_sliding_window})")
        windows.append(hf_config.sliding_window if layer_type == "sliding_attention" else None)
    return tuple(windows)


def _from_qwen2(hf_config) -> DecoderConfig:
    return _llama_like(hf_config, "qwen2", _typed_windows(hf_config, "qwen2"), qkv_bias=True)


def _from_qwen3(hf_config) -> DecoderConfig:
    return _llama_like(hf_config, "qwen3", _typed_windows(hf_config, "qwen3"), qk_norm=True)


def _from_mistral(hf_config) -> DecoderConfig:
    return _llama_like(hf_config, "mistral", (hf_config.sliding_window,) * hf_config.num_hidden_layers)


def _from_gemma3(hf_config) -> DecoderConfig:
    if getattr(hf_config, "use_bidirectional_attention", False):
        raise ConfigError("gemma3: use_bidirectional_attention=True is not supported (causal decoders only)")
    thetas, windows = [], []
    for i, layer_type in enumerate(hf_config.layer_types[: hf_config.num_hidden_layers]):
        if layer_type not in ("sliding_attention", "full_attention"):
            raise ConfigError(f"gemma3: layer_types[{i}]={layer_type!r} is not supported "
                              "(only 'sliding_attention' and 'full_attention')")
        thetas.append(_default_rope_theta(hf_config.rope_parameters[layer_type], f"gemma3 {layer_type}"))
        windows.append(hf_config.sliding_window if layer_type == "sliding_attention" else None)
    return DecoderConfig(
        family="gemma3",
        activation=_activation(hf_config.hidden_activation),
        norm_kind="rms_plus_one",
        post_norms=True,
        embed_scale=math.sqrt(hf_config.hidden_size),
        qk_norm=True,
        rope_thetas=tuple(thetas),
        sliding_windows=tuple(windows),
        attn_scale=hf_config.query_pre_attn_scalar**-0.5,
        logit_softcap=hf_config.final_logit_softcapping,
        attn_softcap=None,  # transformers' Gemma 3 keeps `attn_logit_softcapping` in its config but never applies it
        **_common(hf_config),
    )


_READERS = {"llama": _from_llama, "qwen2": _from_qwen2, "qwen3": _from_qwen3, "mistral": _from_mistral,
            "gemma3_text": _from_gemma3}
SUPPORTED_MODEL_TYPES = tuple(_READERS)
