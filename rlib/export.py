"""`python -m rlib.export <run folder | model folder | asset> <out folder>`: a book model as a stock transformers
checkpoint, loadable without this library (Relaxed Recursive Transformers, Sec. 2.1-2.3: looped and relaxed
models are written out depth by depth).

    python -m rlib.export runs/.work/cpu/01_recursive_conversion/recursive-B2-stepwise-s0 exports/smollm2-B2
    lm_eval --model hf --model_args pretrained=exports/smollm2-B2 --tasks book_cloze --include_path .cache/tasks
    transformers.pipeline("text-generation", model="exports/smollm2-B2")

The folder holds config.json, model.safetensors, generation_config.json, the tokenizer's files, the source's
licence/ where it has one, and README.md (a model card that says what was done):

    plain or converted decoder   its own architecture (LlamaForCausalLM, Qwen2/Qwen3/Mistral/Gemma3ForCausalLM)
    looped (rlib.looping)        unrolled: each depth's shared block written out as its own layer
    relaxed (rlib.relax)         unrolled, each depth's LoRA merged (W' + B_l A_l) and its norm deltas added
    MoR (rlib.mor), RT (rlib.recurrent), KV-sharing plans, prefix relaxation: refused (no transformers class
                                 computes them); they are evaluated with the book's own code, `rlib.eval`

Before the folder is moved into place, transformers loads it and its logits on a fixed token sequence are
compared with the book model's (fp32: within 1e-4 of the logits' scale, else the export fails; the max |diff| is
in the model card). The folder is written under a temporary name and renamed, so a failed export leaves nothing
behind, and an existing OUT is replaced only with --force.
"""

from __future__ import annotations

import argparse
import copy
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlib import sources
from rlib.config import ConfigError
from rlib.fsutil import atomic_folder
from rlib.model import Decoder, convert
from rlib.model.unroll import Unrolled, describe, unroll

__all__ = ["CHECK_TOKENS", "ExportResult", "export", "main"]

CHECK_TOKENS = 32  # length of the token sequence the export's logits are checked on
CHECK_RTOL = 1e-4  # fp32: max |diff| <= CHECK_RTOL * max(1, max |logit|)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
EVAL_HINT = ("evaluate it with the book's own code instead: rlib.eval.perplexity(model, windows) and "
             "rlib.eval.greedy_generate run any book model, and `python -m rlib.eval --model rlib --model_args "
             "path=FOLDER` runs lm-eval tasks on rlib.model.convert folders")


@dataclass(frozen=True)
class ExportResult:
    folder: Path
    architecture: str  # the transformers class written, e.g. "LlamaForCausalLM"
    unrolled: Unrolled
    tokenizer: str
    max_abs_diff: float | None  # export vs book model on CHECK_TOKENS tokens (None: not checked)
    parameters: tuple[int, int]  # (the book model's, the export's)


# ---- what is exported ----------------------------------------------------------------------------------------


def _refuse(what: str, name: str) -> ConfigError:
    return ConfigError(f"{name} is a {what}, which no transformers class computes, so it cannot be exported; "
                       + EVAL_HINT)


def _book_model(model: Any) -> tuple[Decoder, str, str | None]:
    """(Decoder, a description of the source, where its tokenizer is recorded) for any accepted input."""
    if isinstance(model, Decoder):
        return model, "a Decoder object", None
    if isinstance(model, str | Path):
        source = sources.locate(model)
        if source.kind == "mor":
            raise _refuse("Mixture-of-Recursions model (routers choose each token's recursion depth)", str(model))
        return sources.load_source(model), source.location, source.tokenizer
    from rlib.mor.model import MoRDecoder
    from rlib.recurrent.model import RTModel

    if isinstance(model, MoRDecoder):
        raise _refuse("Mixture-of-Recursions model (routers choose each token's recursion depth)", "the model")
    if isinstance(model, RTModel):
        raise _refuse("Recurrent Transformer (each layer attends to its own outputs)", "the model")
    if isinstance(model, torch.nn.Module) and hasattr(getattr(model, "config", None), "model_type"):
        return convert.from_transformers(model), f"a transformers {type(model).__name__}", None
    raise ConfigError(f"cannot export a {type(model).__name__}: give a run or model folder, an asset name, a "
                      "rlib Decoder or a transformers causal LM")


def _tokenizer(given: Any, recorded: str | None, decoder: Decoder) -> tuple[Any, str]:
    """(tokenizer, its name): the one given, the one recorded with the model, or the family's embedded one."""
    from rlib import assets

    if given is not None and not isinstance(given, str | Path):
        return given, getattr(given, "name_or_path", "") or type(given).__name__
    name = str(given) if given is not None else recorded
    if name is None:
        name = sources.FAMILY_TOKENIZERS.get(decoder.config.family)
        if name is None:
            raise ConfigError(f"no tokenizer is recorded with this {decoder.config.family} model; pass --tokenizer "
                              "<asset name | hf:ORG/NAME | folder with tokenizer files>")
        print(f"[export] no tokenizer recorded with the model: using {name}, the {decoder.config.family} "
              "family's embedded tokenizer (pass --tokenizer to choose another)")
    try:
        return assets.load_tokenizer(name), name
    except (OSError, ValueError, assets.AssetError) as error:
        raise ConfigError(f"tokenizer {name!r} cannot be loaded ({error}); pass --tokenizer <asset name | "
                          "hf:ORG/NAME | folder with tokenizer files>") from None


def _check_vocab(tokenizer: Any, decoder: Decoder) -> None:
    if len(tokenizer) > decoder.config.vocab_size:
        raise ConfigError(f"the tokenizer has {len(tokenizer)} tokens but the model only {decoder.config.vocab_size} "
                          "embeddings (a compact vocabulary, rlib.vocab, or the wrong tokenizer): ids past the "
                          "embedding table would fail in stock tools; pass the model's own --tokenizer")


# ---- writing and checking -------------------------------------------------------------------------------------


def _generation_config(decoder: Decoder):
    from transformers import GenerationConfig

    config = decoder.config
    eos = list(config.eos_ids) if len(config.eos_ids) > 1 else (config.eos_ids or (None,))[0]
    pad = config.pad_id if config.pad_id is not None else (config.eos_ids or (None,))[0]
    return GenerationConfig(bos_token_id=config.bos_id, eos_token_id=eos, pad_token_id=pad)


def _check_tokens(vocab_size: int) -> torch.Tensor:
    return (torch.arange(CHECK_TOKENS) * 7919 % vocab_size)[None]  # [1, T], fixed and spread over the vocabulary


@torch.no_grad()
def _check(folder: Path, decoder: Decoder, dtype: torch.dtype) -> float:
    """Max |diff| of the export's logits (loaded by transformers from `folder`, fp32) and the book model's (fp32)."""
    from transformers import AutoModelForCausalLM

    reference = decoder if decoder.embed.weight.dtype == torch.float32 else copy.deepcopy(decoder).float()
    loaded = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ids = _check_tokens(decoder.config.vocab_size).to(decoder.embed.weight.device)
    ours = reference.eval()(ids).float()
    theirs = loaded(ids.to(loaded.device)).logits.float().to(ours.device)
    diff = float((ours - theirs).abs().max())
    allowed = CHECK_RTOL * max(1.0, float(ours.abs().max()))
    if dtype == torch.float32 and not diff <= allowed:
        raise RuntimeError(f"the export's logits differ from the model's by {diff:.3g} (allowed {allowed:.3g}); "
                           "nothing was written")
    return diff


def _copy_licence(tokenizer_name: str, out: Path) -> None:
    """The licence/ folder beside the embedded asset the model comes from (Gemma's terms travel with Gemma)."""
    from rlib import assets

    if tokenizer_name in assets.MODELS and (assets.model_dir(tokenizer_name) / "licence").is_dir():
        shutil.copytree(assets.model_dir(tokenizer_name) / "licence", out / "licence")


def export(model: Any, out: str | Path, tokenizer: Any = None, dtype: str | torch.dtype | None = None,
           force: bool = False, check: bool = True) -> ExportResult:
    """Write `model` (see the module docstring for what is accepted) as a transformers checkpoint in `out`."""
    from rlib.model_card import model_card

    out = Path(out)
    if out.exists() and any(out.iterdir()) and not force:
        raise ConfigError(f"{out} exists and is not empty; choose another folder or pass --force to replace it")
    if isinstance(dtype, str) and dtype not in DTYPES:
        raise ConfigError(f"dtype={dtype!r}: choose from {list(DTYPES)}")
    decoder, source_name, recorded = _book_model(model)
    record = describe(decoder)  # refuses KV sharing and prefix relaxation before any work
    tok, tokenizer_name = _tokenizer(tokenizer, recorded, decoder)
    _check_vocab(tok, decoder)
    target = DTYPES[dtype] if isinstance(dtype, str) else (dtype or decoder.embed.weight.dtype)
    hf_model = convert.to_transformers(unroll(decoder)).to(target).eval()
    hf_model.generation_config = _generation_config(decoder)
    parameters = (sum(p.numel() for p in decoder.parameters()), sum(p.numel() for p in hf_model.parameters()))
    with atomic_folder(out) as tmp:
        hf_model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        _copy_licence(tokenizer_name, tmp)
        diff = _check(tmp, decoder, target) if check else None
        result = ExportResult(out, type(hf_model).__name__, record, tokenizer_name, diff, parameters)
        (tmp / "README.md").write_text(model_card(result, source_name, decoder.config))
    return result


# ---- command line ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlib.export", description=__doc__.split("\n")[0])
    parser.add_argument("source", help="a run folder (holding model/), a folder saved by rlib.model.convert.save, "
                                       "a transformers folder, or an asset name")
    parser.add_argument("out", help="the folder to write (must be new or empty unless --force)")
    parser.add_argument("--tokenizer", help="asset name, hf:ORG/NAME or folder (default: the one recorded with the "
                                            "model, else the family's embedded one)")
    parser.add_argument("--dtype", choices=list(DTYPES), help="weights' dtype (default: the model's)")
    parser.add_argument("--force", action="store_true", help="replace an existing OUT")
    parser.add_argument("--no-check", action="store_true", help="skip reloading the export to compare logits")
    args = parser.parse_args(argv)
    try:
        result = export(args.source, args.out, tokenizer=args.tokenizer, dtype=args.dtype, force=args.force,
                        check=not args.no_check)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    checked = "" if result.max_abs_diff is None else f"; logits checked, max |diff| {result.max_abs_diff:.2e}"
    print(f"[export] {result.folder}: {result.architecture}, {len(result.unrolled.blocks)} layers, "
          f"tokenizer {result.tokenizer}{checked}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
