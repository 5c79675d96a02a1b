"""Saving and loading MoR models: the decoder in our usual format (`rlib.model.convert`) plus the routers and the
spec, so a chapter's trained models reload for decoding and analysis without retraining."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from rlib.config import ConfigError
from rlib.model import convert
from rlib.mor.model import MoRDecoder
from rlib.mor.spec import MoRSpec

__all__ = ["load", "save"]

SPEC_FILE = "mor.json"
ROUTERS_FILE = "routers.safetensors"
FORMAT = "rlib-mor"


def save(model: MoRDecoder, folder: str | Path) -> Path:
    folder = Path(folder)
    convert.save(model.decoder, folder / "decoder")
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items() if not k.startswith("decoder.")}
    if state:
        save_file(state, str(folder / ROUTERS_FILE))
    meta = {"format": FORMAT, "spec": dataclasses.asdict(model.spec), "n_layers": model.n_layers}
    (folder / SPEC_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    return folder


def load(folder: str | Path, device: str | torch.device = "cpu") -> MoRDecoder:
    folder = Path(folder)
    meta = json.loads((folder / SPEC_FILE).read_text())
    if meta.get("format") != FORMAT:
        raise ConfigError(f"{folder / SPEC_FILE} is not an {FORMAT} file")
    spec = MoRSpec(**meta["spec"])
    decoder = convert.load(folder / "decoder", device=device)
    model = MoRDecoder(decoder, spec, meta["n_layers"]).to(device=device, dtype=decoder.embed.weight.dtype)
    if (folder / ROUTERS_FILE).exists():
        missing, unexpected = model.load_state_dict(load_file(str(folder / ROUTERS_FILE), device=str(device)),
                                                    strict=False)
        if unexpected or any(not k.startswith("decoder.") for k in missing):
            raise ConfigError(f"{folder / ROUTERS_FILE} does not match the spec: missing {missing}, extra {unexpected}")
    return model.eval()
