"""The book manifest (`book.toml`): chapters in order, their declared artifacts, profile settings."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from rlib import paths
from rlib.config import ConfigError, get_profile


@dataclass(frozen=True)
class Chapter:
    id: str
    source: Path
    title: str
    tables: tuple[str, ...] = ()
    figures: tuple[str, ...] = ()
    skip: dict[str, tuple[str, ...]] = field(default_factory=dict)  # profile -> artifacts its presets do not make

    def artifact_files(self, profile: str | None = None) -> list[str]:
        """Every file the chapter must leave in its output folder (under `profile`, less what it skips there)."""
        left_out = set(self.skipped(profile)) if profile else set()
        files = ["metrics.json"]
        files += [f"{t}.{ext}" for t in self.tables if t not in left_out for ext in ("csv", "md")]
        files += [f"{f}.{ext}" for f in self.figures if f not in left_out for ext in ("png", "svg")]
        return files

    def skipped(self, profile: str) -> tuple[str, ...]:
        """The artifacts `profile` does not make (its presets leave their studies to a longer profile)."""
        return tuple(self.skip.get(profile, ()))


@dataclass(frozen=True)
class Manifest:
    title: str
    kernel: str
    chapters: tuple[Chapter, ...]
    profile_params: dict[str, dict] = field(default_factory=dict)
    profile_chapters: dict[str, tuple[str, ...]] = field(default_factory=dict)  # profile -> the chapters it runs

    def runs_in(self, profile: str | None) -> list[Chapter]:
        """The chapters `profile` runs (all, unless its book.toml entry lists `chapters`: those with its presets)."""
        listed = self.profile_chapters.get(profile) if profile else None
        return [c for c in self.chapters if listed is None or c.id in listed]

    def select(self, only: list[str] | None, profile: str | None = None) -> list[Chapter]:
        """Chapters matching `--only` items (a full id or its number prefix, e.g. `00`), in book order; with
        `profile`, only the chapters it runs (naming another one is an error that says which it runs)."""
        if profile is not None:
            runs, chosen = self.runs_in(profile), self.select(only)
            outside = [c.id for c in chosen if c not in runs]
            if only and outside:
                raise ConfigError(f"{', '.join(outside)} has no {profile} preset; the {profile} profile runs "
                                  f"{', '.join(c.id for c in runs)}")
            return [c for c in chosen if c in runs]
        if not only:
            return list(self.chapters)
        chosen = []
        for key in only:
            hits = [c for c in self.chapters if c.id == key or c.id.split("_", 1)[0] == key]
            if not hits:
                ids = ", ".join(c.id for c in self.chapters)
                raise ConfigError(f"--only {key!r} matches no chapter; chapters: {ids}")
            chosen += hits
        return [c for c in self.chapters if c in chosen]

    def params_for(self, profile: str) -> dict:
        get_profile(profile)
        return dict(self.profile_params.get(profile, {}))


def load(path: Path | None = None) -> Manifest:
    """The book's manifest: `path`, else `paths.BOOK_MANIFEST` read at call time (`RLIB_BOOK` or book.toml)."""
    path = paths.BOOK_MANIFEST if path is None else path
    data = tomllib.loads(path.read_text())
    chapters = []
    for raw in data.get("chapter", []):
        ch = Chapter(
            id=raw["id"],
            source=paths.ROOT / raw["source"],
            title=raw.get("title", raw["id"]),
            tables=tuple(raw.get("tables", ())),
            figures=tuple(raw.get("figures", ())),
            skip={profile: tuple(names) for profile, names in raw.get("skip", {}).items()},
        )
        if not ch.source.exists():
            raise ConfigError(f"book.toml: chapter {ch.id!r} names {raw['source']}, which does not exist")
        for profile, names in ch.skip.items():
            get_profile(profile)
            stray = [n for n in names if n not in ch.tables + ch.figures]
            if stray:
                raise ConfigError(f"book.toml: chapter {ch.id!r} skips {stray} under {profile!r}, which it does not "
                                  "declare as tables or figures")
        chapters.append(ch)
    ids = [c.id for c in chapters]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"book.toml: duplicate chapter ids in {ids}")
    profiles = {name: dict(p.get("params", {})) for name, p in data.get("profile", {}).items()}
    runs = {name: tuple(p["chapters"]) for name, p in data.get("profile", {}).items() if "chapters" in p}
    for name in profiles:
        get_profile(name)
    for name, listed in runs.items():
        stray = [c for c in listed if c not in ids]
        if stray:
            raise ConfigError(f"book.toml: profile {name!r} lists chapters {stray}, which the book does not have")
    book = data.get("book", {})
    return Manifest(book.get("title", "book"), book.get("kernel", "python3"), tuple(chapters), profiles, runs)
