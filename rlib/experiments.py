"""Resumable experiment grids: one folder per run, results cached by a key of everything that decides them.

Every chapter that trains (chapter 01 uptrains about twenty models) runs its grid through `run_grid`, which
must survive an interruption without redoing finished work, and must never reuse a result that a changed config
or changed library code would make different. Each run gets a folder under the chapter's *work directory*
(outside the runner's staging folder, so a failed or killed chapter keeps it), and writes `result.json` last,
atomically, with its key:

    key = sha256(run spec, the settings that decide it, source of the library modules that compute it)

A run's `RunSlot` hands it a training folder `train-<key>/` (stale ones of an older key are removed first, so a
resumed run never continues another config's checkpoint) and drops the optimizer checkpoint once training is
done. `rlib.train.train` resumes from the checkpoint of an interrupted run. Delete
`runs/.work/<profile>/<chapter>/` to recompute everything.

`cached` also stores how long a result took to compute and keeps a tally of this process's hits and misses
(`cache_tally()`): a chapter records it in its environment, so a run that read most of its grid back says so
instead of passing for an uncached wall time.

    results = run_grid(variants(cfg), work, lambda v, slot: run_variant(v, cfg, slot),
                       context=(cfg,), modules=CODE_MODULES, desc="variants")
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import inspect
import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

from rlib import paths
from rlib.config import runs_profile
from rlib.fsutil import atomic_path
from rlib.grid_workers import Job, resolve_workers, run_in_workers

__all__ = ["RESULT_FILE", "Grid", "RunSlot", "cache_tally", "cached", "code_digest", "digest", "load_model",
           "pool_order", "run_grid", "run_grids", "run_key", "stored_result", "training_curves", "work_dir"]

RESULT_FILE = "result.json"
_TALLY = {"read": 0, "computed": 0, "read_compute_s": 0.0, "read_without_time": 0, "computed_s": 0.0}


def cache_tally() -> dict[str, float]:
    """This process's `cached` calls so far: results read back (`read`, with the seconds they once took to compute,
    `read_compute_s`, where stored; `read_without_time` predate that record) and computed (`computed`,
    `computed_s`)."""
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in _TALLY.items()}


def work_dir(profile: str, chapter: str) -> Path:
    """The persistent work folder of a chapter under a profile: `runs/.work/<profile>/<chapter>/`, where `profile`
    is the one whose runs it shares (`rlib.config.runs_profile`: cpu-long's grids live in cpu's folders)."""
    folder = paths.RUNS / ".work" / runs_profile(profile) / chapter
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def digest(*parts: Any) -> str:
    """A short stable hash of JSON-able parts (dataclasses via their dict, anything else via str)."""

    def plain(obj: Any) -> Any:
        return dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) and not isinstance(obj, type) else str(obj)

    blob = json.dumps(parts, sort_keys=True, default=plain).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def code_digest(*modules: str) -> str:
    """A hash of the source of the named modules (e.g. "rlib.train"): results go stale when the code changes."""
    sources = [inspect.getsource(importlib.import_module(name)) for name in sorted(modules)]
    return hashlib.sha256("\n".join(sources).encode()).hexdigest()[:16]


def run_key(item: Any, context: tuple = (), modules: Sequence[str] = ()) -> str:
    """The key `run_grid` gives `item` under `context` and the source of `modules` (see the module docstring)."""
    return digest(item, *context, code_digest(*modules))


def stored_result(folder: Path, key: str) -> dict[str, Any] | None:
    """The result stored in `folder/result.json` if it was stored under `key` (current), else None; reads only (another
    chapter asking whether a run it could share is done, without counting as this chapter's cache hit)."""
    path = Path(folder) / RESULT_FILE
    if not path.exists():
        return None
    stored = json.loads(path.read_text())
    return stored["result"] if stored.get("key") == key else None


def cached(folder: Path, key: str, compute: Callable[[], dict[str, Any]], refresh: bool = False) -> dict[str, Any]:
    """The result stored in `folder/result.json` under `key`, or `compute()`'s, stored atomically; `refresh` computes
    again even when a current result is stored (a run whose by-product, e.g. its saved model, is missing)."""
    folder = Path(folder)
    path = folder / RESULT_FILE
    if path.exists() and not refresh:
        stored = json.loads(path.read_text())
        if stored.get("key") == key:
            _TALLY["read"] += 1
            if "seconds" in stored:
                _TALLY["read_compute_s"] += float(stored["seconds"])
            else:
                _TALLY["read_without_time"] += 1
            return stored["result"]
    folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    result = compute()
    seconds = time.perf_counter() - start
    _TALLY["computed"] += 1
    _TALLY["computed_s"] += seconds
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps({"key": key, "seconds": round(seconds, 2), "result": result}, indent=1,
                                  default=float) + "\n")
    return result


@dataclass(frozen=True)
class RunSlot:
    """Where one run of a grid works: its folder and its key."""

    folder: Path
    key: str

    @property
    def train_dir(self) -> Path:
        """`folder/train-<key>/`, for `rlib.train.train` (metrics.csv, resumable checkpoints); training folders of
        other keys are removed on first use, so a changed config never resumes an old checkpoint."""
        current = self.folder / f"train-{self.key}"
        for stale in self.folder.glob("train-*"):
            if stale != current:
                shutil.rmtree(stale, ignore_errors=True)
        return current

    def drop_checkpoint(self) -> None:
        """Remove the optimizer checkpoint of a finished run (GBs no longer needed; the metrics stay)."""
        shutil.rmtree(self.folder / f"train-{self.key}" / "checkpoint", ignore_errors=True)


def run_grid(items: Sequence[Any], work: Path, compute: Callable[[Any, RunSlot], dict[str, Any]],
             context: tuple | Callable[[Any], tuple] = (), modules: Sequence[str] = (), desc: str = "runs",
             unit: str = "run", workers: int | str = 1,
             needs: Callable[[Any], Sequence[str]] | None = None) -> list[dict[str, Any]]:
    """Every item (with a `.name`) through `cached` under `work/<name>/`, with a progress bar.

    The key of an item is `digest(item, *context, code)` where `context` is a tuple of the settings that decide
    the runs (or a function of the item giving them) and `code` the source digest of `modules`.
    `compute(item, slot)` runs an item whose result is missing or stale; its results come back in `items` order.

    An item whose `.parent` is another item of the grid post-trains that item's saved model (`load_model`): a parent
    whose current result is stored without its `model/` folder (kept only where a grid needed it, e.g. the cpu
    profile's grid has no child of it but cpu-long's has) is computed again, which saves the model; its result is the
    stored one again, training being deterministic.

    `workers` > 1 (or "auto", `rlib.grid_workers.resolve_workers`) computes the missing runs in that many worker
    processes, one torch thread each, for runs bound by op dispatch rather than arithmetic; `compute` must then be
    importable by a worker (a module-level function or a functools.partial of one); a child item starts once its
    parent has finished, and an item `needs(item)` names (a run that loads another run's saved model, e.g. a
    distillation teacher) once those have. `run_grids` runs several grids' missing runs in one pool.
    """
    return run_grids([Grid(items, work, compute, context, modules, desc, unit, needs)], workers=workers)[0]


@dataclass(frozen=True)
class Grid:
    """One grid of `run_grids`: the arguments of `run_grid` but `workers`."""

    items: Sequence[Any]
    work: Path
    compute: Callable[[Any, RunSlot], dict[str, Any]]
    context: tuple | Callable[[Any], tuple] = ()
    modules: Sequence[str] = ()
    desc: str = "runs"
    unit: str = "run"
    needs: Callable[[Any], Sequence[str]] | None = None  # names of this grid's items a run loads (e.g. a teacher)
    cost: Callable[[Any], float] | None = None  # a run's expected compute, in any unit shared by the pool's grids:
    # a pool starts its costliest missing runs first (`run_grids`)

    def slots(self) -> list[RunSlot]:
        """Each item's folder and key; repeated names are refused before anything runs."""
        names = [item.name for item in self.items]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"run names must be unique in a grid; repeated: {repeated}")
        code = code_digest(*self.modules)  # once per grid: an edit during a long grid does not re-key its later runs
        out = []
        for item in self.items:
            extra = self.context(item) if callable(self.context) else self.context
            out.append(RunSlot(Path(self.work) / item.name, digest(item, *extra, code)))  # = run_key(item, extra, ...)
        return out

    def parents(self) -> set[str]:
        """Names of the items another item of this grid post-trains."""
        return {parent.name for item in self.items if (parent := getattr(item, "parent", None)) is not None} & \
            {item.name for item in self.items}

    def needed(self, item: Any) -> list[str]:
        """The names of this grid's items that must finish before `item` starts: its parent and `needs(item)` (names
        outside the grid are left to the run itself, which checks that what it loads exists)."""
        parent = getattr(item, "parent", None)
        names = ([parent.name] if parent is not None else []) + list(self.needs(item) if self.needs else [])
        known = {i.name for i in self.items}
        return [n for n in dict.fromkeys(names) if n in known and n != item.name]


def run_grids(grids: Sequence[Grid], workers: int | str = 1) -> list[list[dict[str, Any]]]:
    """`run_grid` of every grid, each grid's results in its items' order. With `workers` > 1 the missing runs of all
    the grids are computed in one pool, in the order given (longest grids first keeps the cores busy to the end: a
    short grid's runs fill the second core while a long grid's last run finishes); a run starts once the runs it
    needs (`Grid.needed`: its parent, a teacher it loads) have finished. Where grids give a `cost`, their runs start
    costliest first (the longest-processing-time rule), before the runs of grids without one, which keep their order:
    a long run that starts last would otherwise run alone on one core while the other cores idle."""
    from rlib.progress import progress

    plans = [(grid, grid.slots(), grid.parents()) for grid in grids]  # every key before any run starts
    n_workers = resolve_workers(workers)
    todo = [(g, i, unsaved) for g, (grid, slots, parents) in enumerate(plans) for i, slot in enumerate(slots)
            if (unsaved := _unsaved_parent(grid.items[i], slot, parents))
            or stored_result(slot.folder, slot.key) is None]
    todo = pool_order(plans, todo)
    in_workers = _compute_in_workers(plans, todo, n_workers) if n_workers > 1 and len(todo) > 1 else {}
    results = []
    for g, (grid, slots, parents) in enumerate(plans):
        out = []
        for i, (item, slot) in enumerate(zip(progress(grid.items, desc=grid.desc, unit=grid.unit), slots)):
            if (g, i) in in_workers:  # computed (and counted) by a worker just now
                out.append(in_workers[g, i])
                continue
            out.append(cached(slot.folder, slot.key, lambda i=item, s=slot, c=grid.compute: c(i, s),
                              refresh=_unsaved_parent(item, slot, parents)))
        results.append(out)
    return results


def pool_order(plans: Sequence[tuple[Grid, Any, Any]], todo: list[tuple[int, int, bool]]
               ) -> list[tuple[int, int, bool]]:
    """`todo` (grid, item, refresh) in the order a pool starts them: the runs of grids with a `cost`, costliest
    first, then the others in their given order (a stable sort; needs are honoured by the pool itself)."""
    def rank(entry: tuple[int, int, bool]) -> tuple[int, float]:
        grid = plans[entry[0]][0]
        return (0, -float(grid.cost(grid.items[entry[1]]))) if grid.cost is not None else (1, 0.0)

    return sorted(todo, key=rank)


def _unsaved_parent(item: Any, slot: RunSlot, parents: set[str]) -> bool:
    """A parent item whose model folder is missing: computed again (`run_grid`'s docstring)."""
    from rlib.model import convert

    return item.name in parents and not (slot.folder / "model" / convert.CONFIG_FILE).exists()


def _compute_in_workers(plans: list[tuple[Grid, list[RunSlot], set[str]]], todo: list[tuple[int, int, bool]],
                        workers: int) -> dict[tuple[int, int], dict[str, Any]]:
    """The `todo` (grid, item, refresh) runs computed by `rlib.grid_workers` and stored in their folders, by (grid,
    item); a run starts once the runs it needs (its parent, `Grid.needs`) that are also computed here have finished.
    Counted in this process's tally as computed, with the seconds each worker stored."""
    from rlib.progress import progress

    position = {(g, i): n for n, (g, i, _) in enumerate(todo)}
    indexes = [{item.name: k for k, item in enumerate(grid.items)} for grid, _, _ in plans]  # name -> item, per grid
    jobs = []
    for g, i, refresh in todo:
        grid, slots = plans[g][0], plans[g][1]
        needs = tuple(position[g, indexes[g][name]] for name in grid.needed(grid.items[i])
                      if (g, indexes[g][name]) in position)
        jobs.append(Job(grid.items[i], slots[i], grid.compute, refresh, needs))
    descs = ", ".join(dict.fromkeys(plans[g][0].desc for g, _, _ in todo))
    bar = progress(total=len(todo), desc=f"{descs} ({workers} workers)", unit=plans[todo[0][0]][0].unit)
    results: dict[tuple[int, int], dict[str, Any]] = {}

    def done(n: int, result: dict[str, Any]) -> None:
        stored = json.loads((jobs[n].slot.folder / RESULT_FILE).read_text())
        _TALLY["computed"] += 1
        _TALLY["computed_s"] += float(stored.get("seconds", 0.0))
        results[todo[n][:2]] = result
        bar.update(1)

    try:
        run_in_workers(jobs, workers, done, cached)
    finally:
        bar.close()
    return results


def training_curves(work: Path, results: list[dict[str, Any]]) -> pd.DataFrame:
    """step, tokens, loss (training, logged every step), val_loss (every eval_every) per variant name, read from each
    run's `train-<key>/metrics.csv` (`result["train_dir"]`); runs without one are left out."""
    import pandas as pd

    frames = []
    for r in results:
        path = Path(work) / r["name"] / r.get("train_dir", "") / "metrics.csv"
        if r.get("train_dir") and path.exists():
            frames.append(pd.read_csv(path).assign(variant=r["name"]))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def load_model(work: Path, run_name: str, how: str = "run the chapter's grid first"):
    """The model a grid run saved under `work/<run_name>/model/` (`rlib.model.convert.save`), or a clear error."""
    from rlib.model import convert

    folder = Path(work) / run_name / "model"
    if not (folder / convert.CONFIG_FILE).exists():
        raise FileNotFoundError(f"no trained model at {folder}; {how}")
    return convert.load(folder)
