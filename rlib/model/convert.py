"""Weights in and out of the book's `Decoder`:

    from_transformers(hf_model)  LlamaForCausalLM / Gemma3ForCausalLM -> Decoder (weights copied exactly)
    to_transformers(decoder)     a plain decoder (identity plan) -> the transformers model of its family
    save(decoder, folder)        the book's format: model.safetensors + decoder.json (config and plan)
    load(folder)                 -> Decoder

Parameter names map one to one; only the norms are named differently (Llama's "post_attention_layernorm"
is the *pre*-MLP norm, Gemma 3's is the norm of the attention output).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from rlib.config import ConfigError
from rlib.model.config import HF_FIELDS, DecoderConfig
from rlib.model.decoder import Decoder, ExecutionPlan
from rlib.model.lora import adapter_spec, build_adapter

FORMAT = "rlib.decoder"
FORMAT_VERSION = 1
WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "decoder.json"

_NORM_NAMES = {  # ours -> transformers, per family
    "llama": {"attn_norm": "input_layernorm", "mlp_norm": "post_attention_layernorm"},
    "gemma3": {
        "attn_norm": "input_layernorm",
        "attn_out_norm": "post_attention_layernorm",
        "mlp_norm": "pre_feedforward_layernorm",
        "mlp_out_norm": "post_feedforward_layernorm",
    },
}


def _hf_name(name: str, family: str) -> str:
    """Our state-dict name -> the transformers one (blocks.3.attn.q_proj.weight -> model.layers.3.self_attn...)."""
    if name == "embed.weight":
        return "model.embed_tokens.weight"
    if name == "final_norm.weight":
        return "model.norm.weight"
    if name == "lm_head.weight":
        return name
    _, layer, rest = name.split(".", 2)
    module, param = rest.rsplit(".", 1)
    if module.startswith("attn."):
        module = "self_attn." + module.removeprefix("attn.")
    module = _NORM_NAMES[family].get(module, module)
    return f"model.layers.{layer}.{module}.{param}"


def from_transformers(hf_model, plan: ExecutionPlan | None = None) -> Decoder:
    """A Decoder with `hf_model`'s exact weights (copied, same dtype); `plan` defaults to the identity."""
    config = DecoderConfig.from_hf(hf_model.config)
    hf_state = hf_model.state_dict()
    embed = hf_state["model.embed_tokens.weight"]
    decoder = empty_decoder(config, plan, embed.dtype, embed.device)
    ours = decoder.state_dict()
    missing = [name for name in ours if _hf_name(name, config.family) not in hf_state]
    if missing:
        raise ConfigError(f"transformers model lacks weights for {missing[:5]} (and {max(0, len(missing) - 5)} more)")
    with torch.no_grad():
        for name, tensor in ours.items():
            tensor.copy_(hf_state[_hf_name(name, config.family)])
    return decoder.eval() if not hf_model.training else decoder


def empty_decoder(
    config: DecoderConfig, plan: ExecutionPlan | None, dtype: torch.dtype, device: str | torch.device
) -> Decoder:
    """A Decoder with uninitialised weights (built on the meta device: no seconds spent on random init)."""
    with torch.device("meta"):
        decoder = Decoder(config, plan)
    return decoder.to_empty(device=device).to(dtype)


def hf_config(config: DecoderConfig):
    """The transformers config that describes the same model as `config` (raises ConfigError if none does)."""
    if config.family == "llama":
        return _llama_config(config)
    return _gemma3_config(config)


def _shared_fields(config: DecoderConfig) -> dict:
    return dict(
        **{theirs: getattr(config, ours) for ours, theirs in HF_FIELDS.items()},
        head_dim=config.head_dim,
        tie_word_embeddings=config.tie_embeddings,
        attention_bias=config.attn_bias,
        eos_token_id=list(config.eos_ids) if len(config.eos_ids) > 1 else (config.eos_ids or (None,))[0],
    )


def _require(condition: bool, family: str, what: str) -> None:
    if not condition:
        raise ConfigError(f"no transformers {family} model has {what}")


def _llama_config(config: DecoderConfig):
    from transformers import LlamaConfig

    _require(config.norm_kind == "rms" and not config.post_norms and not config.qk_norm, "llama", "these norms")
    _require(config.embed_scale == 1.0 and config.logit_softcap is None and config.attn_softcap is None,
             "llama", "an embedding scale or soft-capping")
    _require(len(set(config.rope_thetas)) == 1 and set(config.sliding_windows) == {None},
             "llama", "per-layer rope thetas or sliding windows")
    _require(abs(config.attn_scale - config.head_dim**-0.5) < 1e-12, "llama", "a custom attention scale")
    return LlamaConfig(
        hidden_act=config.activation,
        mlp_bias=config.mlp_bias,
        rope_parameters={"rope_type": "default", "rope_theta": config.rope_thetas[0]},
        **_shared_fields(config),
    )


def _gemma3_config(config: DecoderConfig):
    from transformers import Gemma3TextConfig

    _require(config.norm_kind == "rms_plus_one" and config.post_norms and config.qk_norm, "gemma3", "these norms")
    _require(config.activation == "gelu_tanh" and not config.mlp_bias, "gemma3", "this MLP")
    _require(config.attn_softcap is None, "gemma3", "attention soft-capping (its config field is ignored)")
    _require(abs(config.embed_scale - config.d_model**0.5) < 1e-9, "gemma3", "this embedding scale")
    layer_types = ["full_attention" if w is None else "sliding_attention" for w in config.sliding_windows]
    windows = {w for w in config.sliding_windows if w is not None}
    _require(len(windows) <= 1, "gemma3", "several sliding-window sizes")
    thetas = {}
    for layer_type, theta in zip(layer_types, config.rope_thetas):
        _require(thetas.setdefault(layer_type, theta) == theta, "gemma3", "several rope thetas per layer type")
    scalar = config.attn_scale**-2
    return Gemma3TextConfig(
        hidden_activation="gelu_pytorch_tanh",
        layer_types=layer_types,
        sliding_window=windows.pop() if windows else 4096,
        rope_parameters={t: {"rope_type": "default", "rope_theta": theta} for t, theta in thetas.items()},
        query_pre_attn_scalar=round(scalar) if abs(scalar - round(scalar)) < 1e-6 else scalar,
        final_logit_softcapping=config.logit_softcap,
        **_shared_fields(config),
    )


def to_transformers(decoder: Decoder):
    """The transformers model (LlamaForCausalLM / Gemma3ForCausalLM) with the decoder's weights, same dtype.

    Only a plain decoder exports: identity plan, no per-depth adapters.
    """
    from transformers import Gemma3ForCausalLM, LlamaForCausalLM
    from transformers.initialization import no_init_weights

    config = decoder.config
    if not decoder.plan.is_identity(config.n_layers):
        raise ConfigError("only a decoder with the identity execution plan maps onto a transformers model")
    state = decoder.state_dict()
    adapters = [name for name in state if ".adapters." in name]
    if adapters:
        raise ConfigError(f"merge or drop the per-depth adapters before export (e.g. {adapters[0]})")
    hf_cfg = hf_config(config)
    model_class = LlamaForCausalLM if config.family == "llama" else Gemma3ForCausalLM
    with no_init_weights():  # every weight is overwritten below; buffers (rope, embed scale) are set in __init__
        model = model_class(hf_cfg)
    model.to(device=decoder.embed.weight.device, dtype=decoder.embed.weight.dtype)
    hf_state = {_hf_name(name, config.family): tensor for name, tensor in state.items()}
    result = model.load_state_dict(hf_state, strict=False)
    unexpected_missing = [n for n in result.missing_keys if not (config.tie_embeddings and n == "lm_head.weight")]
    if unexpected_missing or result.unexpected_keys:
        raise ConfigError(f"export mismatch: missing {unexpected_missing}, unexpected {result.unexpected_keys}")
    if config.tie_embeddings:
        model.tie_weights()
    return model.eval() if not decoder.training else model


def adapter_specs(decoder: Decoder) -> dict[str, dict[str, dict]]:
    """{module path: {depth: spec}} of every per-depth adapter (LoRA, norm delta) in the decoder."""
    specs: dict[str, dict[str, dict]] = {}
    for path, module in decoder.named_modules():
        adapters = getattr(module, "adapters", None)
        if isinstance(adapters, torch.nn.ModuleDict) and len(adapters):
            specs[path] = {depth: adapter_spec(a) for depth, a in adapters.items()}
    return specs


def save(decoder: Decoder, folder: str | Path) -> Path:
    """Write model.safetensors (the state dict) and decoder.json (format, config, plan) into `folder`."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {name: tensor.detach().contiguous() for name, tensor in decoder.state_dict().items()}
    save_file(state, str(folder / WEIGHTS_FILE), metadata={"format": FORMAT})
    meta = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "config": decoder.config.to_dict(),
        "plan": decoder.plan.to_list(),
    }
    adapters = adapter_specs(decoder)
    if adapters:
        meta["adapters"] = adapters
    (folder / CONFIG_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    return folder


def load(folder: str | Path, device: str | torch.device = "cpu") -> Decoder:
    """A Decoder from a folder written by `save` (dtype as saved)."""
    folder = Path(folder)
    meta = json.loads((folder / CONFIG_FILE).read_text())
    if meta.get("format") != FORMAT or meta.get("version") != FORMAT_VERSION:
        raise ConfigError(f"{folder / CONFIG_FILE} is not a {FORMAT} v{FORMAT_VERSION} file")
    config = DecoderConfig.from_dict(meta["config"])
    state = load_file(str(folder / WEIGHTS_FILE), device=str(device))
    dtype = state["embed.weight"].dtype
    decoder = empty_decoder(config, ExecutionPlan.from_list(meta["plan"]), dtype, device)
    for path, by_depth in meta.get("adapters", {}).items():
        owner = decoder.get_submodule(path)
        for depth, spec in by_depth.items():
            owner.adapters[depth] = build_adapter(spec).to(device=device, dtype=dtype)
    decoder.load_state_dict(state, strict=True)
    return decoder.eval()
