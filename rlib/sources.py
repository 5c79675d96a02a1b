"""Source models for the conversion chapters (Relaxed Recursive Transformers, Sec. 2: a pretrained decoder is
looped and uptrained): any checkpoint of a model type the book's decoder reads, by asset name or folder.

    load_source("smollm2-135m")                     an embedded asset (rlib.assets)
    load_source("hf:Qwen/Qwen2.5-0.5B")             a model in the local Hugging Face cache
    load_source("/path/to/checkpoint")              a transformers folder (config.json + weights) of model type
                                                    llama, qwen2, qwen3, mistral or gemma3_text
    load_source("runs/.work/cpu/01_.../<run>")      a folder saved by rlib.model.convert.save, or the run folder
                                                    that holds one in model/

`process_source(name)` loads a source once per process (a grid's worker loads its own; the chapter's process hands over
the one it holds with `share_source`).

`source_config(name_or_path)` reads the config alone, so an unsupported checkpoint (a rope scaling, a model type,
a layer type) is refused with a ConfigError naming the field in well under a second, before any weights load.
`locate` says what a name or path is and where its tokenizer comes from (`Source.tokenizer`; `tokenizer_of` raises
where none is known). A relative folder is looked up from the working directory, then from the repository root
(chapters run with notebooks/ as their working directory).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from rlib import assets, paths
from rlib.config import ConfigError
from rlib.data import TOKENIZER_FILES
from rlib.model import Decoder, DecoderConfig, convert
from rlib.model.config import SUPPORTED_MODEL_TYPES

__all__ = ["FAMILY_TOKENIZERS", "Source", "load_source", "locate", "process_source", "share_source", "source_config",
           "tokenizer_of"]

# the embedded tokenizer of each family whose book models have one (chapters train on these)
FAMILY_TOKENIZERS = {"llama": "smollm2-135m", "gemma3": "gemma3-270m"}
MOR_FILE = "mor.json"  # rlib.mor.io.SPEC_FILE, named here so that locating a folder imports nothing of rlib.mor


@dataclass(frozen=True)
class Source:
    """What a name or path is: kind "asset" (embedded or hub), "transformers" (a folder with config.json), "book"
    (a folder with decoder.json) or "mor" (a Mixture-of-Recursions folder); `tokenizer` loads its tokenizer
    (asset name or folder; None when nothing is recorded)."""

    kind: str
    location: str  # the asset name, or the resolved folder
    tokenizer: str | None


def _has_tokenizer(folder: Path) -> bool:
    return any((folder / name).is_file() for name in TOKENIZER_FILES)


def locate(name_or_path: str | Path) -> Source:
    """Resolve an asset name or a folder (see the module docstring); ConfigError naming the value otherwise."""
    name = str(name_or_path)
    if name in assets.MODELS or (name.startswith(assets.HUB_PREFIX) and len(name) > len(assets.HUB_PREFIX)):
        return Source("asset", name, name)
    folder = Path(name).expanduser()
    if not folder.is_dir() and not folder.is_absolute() and (paths.ROOT / folder).is_dir():
        folder = paths.ROOT / folder
    if not folder.is_dir():
        raise ConfigError(f"source {name!r} is neither an embedded model ({', '.join(assets.MODELS)}), nor "
                          f"hf:ORG/NAME, nor an existing folder")
    folder = folder.resolve()
    own_tokenizer = str(folder) if _has_tokenizer(folder) else None
    if (folder / MOR_FILE).is_file():
        return Source("mor", str(folder), own_tokenizer)
    if (folder / convert.CONFIG_FILE).is_file():
        recorded = json.loads((folder / convert.CONFIG_FILE).read_text()).get("tokenizer")
        return Source("book", str(folder), own_tokenizer or recorded)
    if (folder / "config.json").is_file():
        return Source("transformers", str(folder), own_tokenizer)
    if (folder / "model").is_dir():
        return locate(folder / "model")  # a chapter's run folder: runs/.work/<profile>/<chapter>/<run>/model
    raise ConfigError(f"folder {folder} holds no model: expected config.json (a transformers checkpoint), "
                      f"{convert.CONFIG_FILE} (rlib.model.convert.save) or a model/ folder with either")


def tokenizer_of(name_or_path: str | Path) -> str:
    """The tokenizer a source's text is tokenized with (asset name or folder); ConfigError where none is known."""
    source = locate(name_or_path)
    if source.tokenizer is not None:
        return source.tokenizer
    if source.kind == "book":
        family = source_config(source.location).family
        if family in FAMILY_TOKENIZERS:
            return FAMILY_TOKENIZERS[family]
    raise ConfigError(f"{source.location} has no tokenizer files ({', '.join(TOKENIZER_FILES)}) and records none; "
                      "save the tokenizer beside the weights (tokenizer.save_pretrained(folder))")


def _transformers_config(folder: Path):
    from transformers import AutoConfig

    model_type = json.loads((folder / "config.json").read_text()).get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES and model_type != "gemma3":  # gemma3 wraps a gemma3_text config
        raise ConfigError(f"{folder / 'config.json'}: model_type={model_type!r} is not supported; "
                          f"supported: {', '.join(SUPPORTED_MODEL_TYPES)}")
    return AutoConfig.from_pretrained(folder)


def source_config(name_or_path: str | Path) -> DecoderConfig:
    """The DecoderConfig of a source, from its config alone (no weights are read)."""
    source = locate(name_or_path)
    if source.kind == "book":
        return DecoderConfig.from_dict(json.loads((Path(source.location) / convert.CONFIG_FILE).read_text())["config"])
    if source.kind == "mor":
        raise ConfigError(f"{source.location} is a Mixture-of-Recursions model (routers over a looped decoder), "
                          "not a plain source decoder")
    return DecoderConfig.from_hf(_transformers_config(assets.checkpoint_dir(source.location)))


def load_source(name_or_path: str | Path, dtype: torch.dtype | None = None, device: str = "cpu") -> Decoder:
    """The source as the book's Decoder (weights exact; fp32 unless `dtype`), its config checked first."""
    source = locate(name_or_path)
    source_config(name_or_path)  # refuses an unsupported checkpoint before its weights load
    if source.kind == "book":
        decoder = convert.load(source.location, device=device)
        return decoder.to(dtype) if dtype is not None else decoder
    return convert.from_transformers(assets.load_model(source.location, dtype=dtype, device=device))


_PROCESS_SOURCES: dict[str, Decoder] = {}


def share_source(name_or_path: str | Path, source: Decoder) -> None:
    """Make `source` this process's loaded `name_or_path` (`process_source`), e.g. the one a chapter loaded; one
    source at a time, so that a chapter's second architecture replaces its first in memory."""
    _PROCESS_SOURCES.clear()
    _PROCESS_SOURCES[str(name_or_path)] = source


def process_source(name_or_path: str | Path) -> Decoder:
    """`load_source(name_or_path)` once per process: a grid's worker loads its own, the chapter's process reuses the
    one it handed over (`share_source`). Runs build copies of it and never change it."""
    if str(name_or_path) not in _PROCESS_SOURCES:
        share_source(name_or_path, load_source(name_or_path))
    return _PROCESS_SOURCES[str(name_or_path)]
