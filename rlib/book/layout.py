"""Where the book's outputs live: `runs/<profile>/` and its hidden folders (no logic, no imports of the runner).

    runs/<profile>/<chapter>/             the last complete run of a chapter (swapped in whole)
    runs/<profile>/.staging/<attempt>/    a chapter being run
    runs/<profile>/.failed/<chapter>/     the partial notebook, `run.log` and `failure.json` of a failed run
    runs/<profile>/_static/               files the report needs offline (MathJax), copied at report time
    runs/.work/<profile>/<chapter>/<run>/ the run grids' cached results (`result.json`)

Both the runner and the report import this module; neither imports the other's internals through it.
"""

from __future__ import annotations

from pathlib import Path

from rlib import paths
from rlib.book.manifest import Chapter
from rlib.config import get_profile, runs_profile

FAILED = ".failed"
STAGING = ".staging"
STATIC = "_static"
LOG_FILE = "run.log"
FAILURE_FILE = "failure.json"


def profile_dir(profile: str) -> Path:
    return paths.RUNS / profile


def chapter_dir(profile: str, chapter_id: str) -> Path:
    return profile_dir(profile) / chapter_id


def failed_dir(profile: str, chapter_id: str) -> Path:
    return profile_dir(profile) / FAILED / chapter_id


MAIN_PROFILE = "cpu"  # promoted into figures/ itself; every other profile into figures/<profile>/


def promoted_dir(profile: str) -> Path:
    """Where `profile`'s results are promoted: `figures/` for the cpu profile, `figures/<profile>/` otherwise."""
    get_profile(profile)
    return paths.FIGURES if profile == MAIN_PROFILE else paths.FIGURES / profile


def work_root(profile: str, chapter_id: str) -> Path:
    """The chapter's run-grid folder (see `rlib.experiments.work_dir`), without creating it."""
    return paths.RUNS / ".work" / runs_profile(profile) / chapter_id


def missing_artifacts(ch: Chapter, folder: Path, profile: str | None = None) -> list[str]:
    return [f for f in ch.artifact_files(profile) if not (folder / f).is_file()]


def number(chapter_id: str) -> str:
    """`03_mixture_of_recursions` -> `03`, what `--only` takes."""
    return chapter_id.split("_", 1)[0]


def run_command(profile: str, chapter_id: str | None = None, extra: str = "") -> str:
    """The full command that (re-)runs a chapter of a profile, for fix hints."""
    only = f" --only {number(chapter_id)}" if chapter_id else ""
    return f"python -m rlib.book run --profile {profile}{only}{extra}"
