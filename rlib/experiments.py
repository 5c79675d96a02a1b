"""Resumable experiment grids: one folder per run, results cached by a key of everything that decides them.

A chapter that trains many models (chapter 01 uptrains about twenty) must survive an interruption without
redoing finished work, and must never reuse a result that a changed config or changed library code would
make different. Each run gets a folder under the chapter's *work directory* (outside the runner's staging
folder, so a failed or killed chapter keeps it), and writes `result.json` last, atomically, with its key:

    key = sha256(run spec, chapter config, source of the library modules that compute it)

`cached(folder, key, compute)` returns the stored result when the key matches and otherwise runs `compute`
(which may itself resume, e.g. `rlib.train.train` from its last checkpoint) and stores what it returns.
Delete `runs/.work/<profile>/<chapter>/` to recompute everything.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlib import paths
from rlib.fsutil import atomic_path

__all__ = ["RESULT_FILE", "cached", "code_digest", "digest", "work_dir"]

RESULT_FILE = "result.json"


def work_dir(profile: str, chapter: str) -> Path:
    """The persistent work folder of a chapter under a profile: `runs/.work/<profile>/<chapter>/`."""
    folder = paths.RUNS / ".work" / profile / chapter
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def digest(*parts: Any) -> str:
    """A short stable hash of JSON-able parts (dataclasses via their dict, anything else via str)."""
    import dataclasses

    def plain(obj: Any) -> Any:
        return dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) and not isinstance(obj, type) else str(obj)

    blob = json.dumps(parts, sort_keys=True, default=plain).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def code_digest(*modules: str) -> str:
    """A hash of the source of the named modules (e.g. "rlib.train"): results go stale when the code changes."""
    sources = [inspect.getsource(importlib.import_module(name)) for name in sorted(modules)]
    return hashlib.sha256("\n".join(sources).encode()).hexdigest()[:16]


def cached(folder: Path, key: str, compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The result stored in `folder/result.json` under `key`, or `compute()`'s, stored atomically."""
    folder = Path(folder)
    path = folder / RESULT_FILE
    if path.exists():
        stored = json.loads(path.read_text())
        if stored.get("key") == key:
            return stored["result"]
    folder.mkdir(parents=True, exist_ok=True)
    result = compute()
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps({"key": key, "result": result}, indent=1, default=float) + "\n")
    return result


def run_cached(items: list, work: Path, context: tuple, modules: tuple[str, ...],
               compute: Callable[[Any, str], dict[str, Any]], desc: str = "runs") -> list[dict[str, Any]]:
    """Every item (with a `.name`) through `cached` under work/<name>, keyed on the item, `context` (the settings)
    and the source of `modules`; `compute(item, key)` runs one that is missing or stale."""
    from rlib.progress import progress

    code = code_digest(*modules)
    results = []
    for item in progress(items, desc=desc, unit="run"):
        key = digest(item, *context, code)
        results.append(cached(Path(work) / item.name, key, lambda i=item, k=key: compute(i, k)))
    return results
