"""Weights in and out of the book's `Decoder`:

    from_transformers(hf_model)  Llama / Qwen2 / Qwen3 / Mistral / Gemma3 ForCausalLM -> Decoder (weights copied
                                 exactly)
    to_transformers(decoder)     a plain decoder (identity plan) -> the transformers model of its family
                                 (configs: `rlib.model.hf_configs`; looped and relaxed models: `rlib.model.unroll`)
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
from rlib.model.config import DecoderConfig
from rlib.model.decoder import Decoder, ExecutionPlan
from rlib.model.hf_configs import hf_config, model_class
from rlib.model.lora import adapter_spec, build_adapter

FORMAT = "rlib.decoder"
FORMAT_VERSION = 1
WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "decoder.json"

_LLAMA_NORMS = {"attn_norm": "input_layernorm", "mlp_norm": "post_attention_layernorm"}
_NORM_NAMES = {  # ours -> transformers, per family
    "llama": _LLAMA_NORMS, "qwen2": _LLAMA_NORMS, "qwen3": _LLAMA_NORMS, "mistral": _LLAMA_NORMS,
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


def to_transformers(decoder: Decoder):
    """The transformers model of the decoder's family (LlamaForCausalLM, Qwen2ForCausalLM, ...) with its weights,
    same dtype.

    Only a plain decoder exports: identity plan, no per-depth adapters (`rlib.model.unroll` makes one of a looped
    or relaxed model).
    """
    from transformers.initialization import no_init_weights

    config = decoder.config
    if not decoder.plan.is_identity(config.n_layers):
        raise ConfigError("only a decoder with the identity execution plan maps onto a transformers model; "
                          "rlib.model.unroll.unroll(decoder) writes a looped one out depth by depth")
    state = decoder.state_dict()
    adapters = [name for name in state if ".adapters." in name]
    if adapters:
        raise ConfigError(f"merge or drop the per-depth adapters before export (e.g. {adapters[0]}); "
                          "rlib.model.unroll.unroll(decoder) merges LoRA and norm deltas")
    hf_cfg = hf_config(config)
    with no_init_weights():  # every weight is overwritten below; buffers (rope, embed scale) are set in __init__
        model = model_class(config.family)(hf_cfg)
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


def save(decoder: Decoder, folder: str | Path, tokenizer: str | None = None) -> Path:
    """Write model.safetensors (the state dict) and decoder.json (format, config, plan) into `folder`.

    `tokenizer` (an asset name or folder) is recorded in decoder.json for the tools that need one (rlib.eval,
    rlib.export)."""
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
    if tokenizer is not None:
        meta["tokenizer"] = str(tokenizer)
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
