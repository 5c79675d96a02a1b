"""Profiles and typed presets: where every scientific value of the book lives.

A *profile* says where and how big the book runs (`smoke`, `cpu`, `gpu`, `paper`). A chapter's
*config* is a frozen dataclass derived from `Preset`, with one preset per profile written side by
side so a reader can diff `smoke` against `cpu` on one screen:

    cfg = ModelsDataConfig.preset("cpu").override(n_eval_windows=None)   # None keeps the preset

Notebook parameters stay literals (papermill); everything derived is computed from the preset.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

P = TypeVar("P", bound="Preset")


class ConfigError(ValueError):
    """A profile, preset or override that cannot be built; raised before any work starts."""


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    device: str  # "cpu" or "cuda"
    chapter_budget_s: int  # the target for one chapter; the runner's timeout is twice this
    book_budget_s: int
    min_gpus: int = 0
    needs_hub: bool = False


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile("smoke", "plumbing only: every chapter end to end in minutes on 2 CPU cores (CI)", "cpu", 180, 900),
        Profile("cpu", "the main job: real models and corpora, big enough for the claims to show, on 2 CPU cores",
                "cpu", 40 * 60, 3 * 3600),
        Profile("gpu", "one H100: longer training, Triton kernels", "cuda", 3600, 5 * 3600, min_gpus=1),
        Profile("paper", "the papers' own scale and data: multi-GPU and the Hugging Face hub", "cuda",
                48 * 3600, 10 * 24 * 3600, min_gpus=8, needs_hub=True),
    )
}


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ConfigError(f"unknown profile {name!r}; choose one of: {', '.join(PROFILES)}") from None


def check_resources(profile: Profile) -> None:
    """Fail clearly when this machine cannot run `profile` (no GPU, too few GPUs, hub offline)."""
    if profile.min_gpus:
        import torch

        have = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if have < profile.min_gpus:
            raise ConfigError(
                f"profile {profile.name!r} needs {profile.min_gpus} GPU(s), this machine has {have}; "
                "run the `cpu` profile here (`make book`), or this profile on a GPU machine"
            )
    if profile.needs_hub and os.environ.get("HF_HUB_OFFLINE") == "1":
        raise ConfigError(
            f"profile {profile.name!r} loads models and datasets from the Hugging Face hub, "
            "but HF_HUB_OFFLINE=1; run it where the hub is reachable with HF_HUB_OFFLINE=0"
        )


@dataclass(frozen=True)
class Preset:
    """Base of every chapter config: `preset(profile)`, `override(**kw)`, `to_dict()`, `digest()`."""

    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {}

    @classmethod
    def preset(cls: type[P], profile: str) -> P:
        get_profile(profile)
        if profile not in cls.PRESETS:
            raise ConfigError(f"{cls.__name__} has no preset for profile {profile!r}; it has {list(cls.PRESETS)}")
        return cls(**cls.PRESETS[profile])

    def override(self: P, **changes: Any) -> P:
        """Replace fields whose new value is not None; unknown names are an error."""
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise ConfigError(f"{type(self).__name__} has no field(s) {unknown}; fields: {sorted(names)}")
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def digest(self) -> str:
        blob = json.dumps(self.to_dict(), sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:12]

    def _repr_markdown_(self) -> str:  # a readable table when a notebook cell ends with `cfg`
        rows = "\n".join(f"| `{k}` | `{v!r}` |" for k, v in self.to_dict().items())
        return f"**{type(self).__name__}**\n\n| field | value |\n|---|---|\n{rows}"
