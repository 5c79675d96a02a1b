"""Profiles and typed presets: where every scientific value of the book lives.

A *profile* says where and how big the book runs (`smoke`, `cpu`, `cpu-long`, `gpu`, `paper`). A chapter's
*config* is a frozen dataclass derived from `Preset`, with one preset per profile written side by
side so a reader can diff `smoke` against `cpu` on one screen:

    cfg = ModelsDataConfig.preset("cpu").override(n_eval_windows=None)   # None keeps the preset

Notebook parameters stay literals (papermill); everything derived is computed from the preset.

Every config (a `Preset`, and any frozen dataclass deriving from `Checked`, e.g. `rlib.looping.Looping`)
checks its field values against the field annotations when it is built, overridden or replaced, so a
wrong type is a `ConfigError` naming the field, the expected type and the value, before any work.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import json
import numbers
import os
import sys
import types
import typing
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
    chapter_budget_s: int  # the target for one chapter; a cell's timeout is twice this, times the speed factor
    book_budget_s: int
    min_gpus: int = 0
    needs_hub: bool = False
    figure_note: str = ""  # shown under every figure of this profile in the report
    runs_of: str = ""  # its run grids live in this profile's work folders (same runs, same keys: trained once)


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile("smoke", "plumbing only: every chapter end to end in minutes on 2 CPU cores (CI)", "cpu", 180, 900,
                figure_note="smoke profile: tiny models, few steps and few repetitions, so these numbers (timings "
                            "above all) are noise; the cpu profile's results are in figures/"),
        Profile("cpu", "the main job: real models and corpora, big enough for the claims to show, on 2 CPU cores",
                "cpu", 40 * 60, 3 * 3600),
        Profile("cpu-long", "the studies that need more than the cpu profile (longer training, more seeds, higher "
                "ranks) on 2 CPU cores; each chapter fits one sitting. A chapter's cpu-long preset extends its cpu "
                "preset and shares its run grid, so only the added runs train", "cpu", 150 * 60, 6 * 150 * 60,
                runs_of="cpu"),
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


def runs_profile(name: str) -> str:
    """The profile whose work folders hold `name`'s run grids: `name` itself unless it extends another
    (`cpu-long` trains in `cpu`'s folders, so a run both profiles define, under the same key, trains once)."""
    return get_profile(name).runs_of or name


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


# ----------------------------------------------------------------------------------------------
# field types, checked when a config is built


def _type_text(hint: Any) -> str:
    return hint if isinstance(hint, str) else getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def matches(value: Any, hint: Any) -> bool:
    """Whether `value` fits the annotation `hint` (ints fit floats, bools fit neither ints nor floats)."""
    if hint is Any or isinstance(hint, (TypeVar, typing.ForwardRef, str)):
        return True
    if hint is None or hint is type(None):
        return value is None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(matches(value, a) for a in args)
    if origin is typing.Literal:
        return value in args
    if origin is typing.ClassVar:
        return True
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(matches(v, args[0]) for v in value)
        return not args or (len(args) == len(value) and all(matches(v, a) for v, a in zip(value, args)))
    if origin in (list, set, frozenset):
        return isinstance(value, origin) and (not args or all(matches(v, args[0]) for v in value))
    if origin is dict:
        return isinstance(value, dict) and (not args or all(matches(k, args[0]) and matches(v, args[1])
                                                             for k, v in value.items()))
    if origin is not None:  # Callable, Iterable, ...: not checked
        return True
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    return isinstance(value, hint) if isinstance(hint, type) else True


@functools.cache
def _field_hints(cls: type) -> dict[str, tuple[Any, str]]:
    """Each init field's resolved annotation and its source text; a field whose annotation cannot be
    resolved (a name imported only for type checking) is left unchecked."""
    module = vars(sys.modules.get(cls.__module__, object()))
    out = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        try:
            hint = eval(f.type, dict(module)) if isinstance(f.type, str) else f.type
        except Exception:  # noqa: BLE001 - unresolvable annotation: not checked
            hint = Any
        out[f.name] = (hint, _type_text(f.type))
    return out


@functools.cache
def _init_signature(cls: type) -> inspect.Signature:
    return inspect.signature(cls.__init__)


def _type_errors(cls: type, values: dict[str, Any]) -> list[str]:
    hints = _field_hints(cls)
    return [f"{cls.__name__}.{name} must be {hints[name][1]}, got {value!r} ({type(value).__name__})"
            for name, value in values.items() if name in hints and not matches(value, hints[name][0])]


class _CheckedMeta(type):
    """Checks every construction of a dataclass against its field annotations.

    The built object's fields are checked (after the class's own `__post_init__` normalized them, e.g. dicts
    into nested configs); when the construction itself fails with a TypeError or ValueError (a wrong type
    reaching a comparison), the raw arguments are checked and a wrong type is reported instead.
    """

    def __call__(cls, *args: Any, **kwargs: Any):
        if not dataclasses.is_dataclass(cls):
            return super().__call__(*args, **kwargs)
        try:
            bound = _init_signature(cls).bind(None, *args, **kwargs)
        except TypeError as exc:
            raise ConfigError(f"{cls.__name__}: {exc}; fields: {', '.join(_field_hints(cls))}") from None
        try:
            obj = super().__call__(*args, **kwargs)
        except (TypeError, ValueError) as exc:
            if isinstance(exc, ConfigError):
                raise
            errors = _type_errors(cls, dict(list(bound.arguments.items())[1:]))
            if errors:
                raise ConfigError("; ".join(errors)) from None
            raise
        errors = _type_errors(cls, {name: getattr(obj, name) for name in _field_hints(cls)})
        if errors:
            raise ConfigError("; ".join(errors))
        return obj


class Checked(metaclass=_CheckedMeta):
    """Base of a (frozen) dataclass whose field types are checked on every construction, `dataclasses.replace`
    included: a wrong type is a `ConfigError`, not a TypeError from deep inside."""

    __slots__ = ()


# ----------------------------------------------------------------------------------------------
# presets


@dataclass(frozen=True)
class Preset(Checked):
    """Base of every chapter config: `preset(profile)`, `override(**kw)`, `to_dict()`, `digest()`."""

    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {}
    # fields that decide no run's training: they only add runs to a grid (each run carrying its own value) or set up a
    # study over trained models. `grid_context` leaves them out of the run cache's key, so a longer profile's preset
    # that extends them (cpu-long over cpu) reads the shorter one's runs back and trains only the added ones
    UNKEYED_FIELDS: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def preset(cls: type[P], profile: str) -> P:
        get_profile(profile)
        if profile not in cls.PRESETS:
            raise ConfigError(
                f"{cls.__name__} has no preset for profile {profile!r} (it has {', '.join(cls.PRESETS)}); "
                f"this chapter does not run in the {profile} profile yet: add a {profile!r} entry to "
                f"{cls.__module__}.{cls.__name__}.PRESETS, or run another profile"
            )
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

    def grid_context(self) -> dict[str, Any]:
        """The settings that decide how a run trains (a run grid's cache key): every field but `UNKEYED_FIELDS`."""
        return {k: v for k, v in self.to_dict().items() if k not in self.UNKEYED_FIELDS}

    def digest(self) -> str:
        blob = json.dumps(self.to_dict(), sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:12]

    def _repr_markdown_(self) -> str:  # a readable table when a notebook cell ends with `cfg`
        rows = "\n".join(f"| `{k}` | `{v!r}` |" for k, v in self.to_dict().items())
        return f"**{type(self).__name__}**\n\n| field | value |\n|---|---|\n{rows}"
