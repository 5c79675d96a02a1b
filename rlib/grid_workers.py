"""A grid's missing runs in worker processes that share the cores, one torch thread each (`run_grid(..., workers=)`).

Some runs are bound by Python and op dispatch, not by arithmetic: chapter 04 steps its small Recurrent Transformers
position by position, and one task-training step issues about 29,000 ATen calls of a few microseconds each. One core
does that work; a second torch thread only adds synchronisation (`benchmarks/rt_step_ops.py --threads 2` against
`--threads 1`). Two such runs side by side, one thread each, take about the time of one, so a grid of them finishes
in about half the time on two cores.

Each worker is a fresh `spawn`ed process (safe under Jupyter and papermill kernels), sets its torch threads to the
parent's count divided by the workers, and runs `rlib.experiments.cached` itself: a finished run's `result.json` is
written atomically as in a sequential grid, so an interrupted or failed grid keeps every run that finished and
resumes from there. A run that fails stops the grid with its name and the worker's traceback: runs not yet started
are cancelled, runs in progress finish and are stored first. Several grids can share one pool
(`rlib.experiments.run_grids`), so that a small grid's runs fill the cores while a large grid's last runs finish, and
a run can wait for the runs it needs (`Job.needs`: a parent, a teacher).

A run in a worker computes on one thread: where a kernel splits a reduction across threads, its rounding may differ
from the same run in a two-thread process, so a grid resumed with a single missing run (which runs in the parent) may
differ from an uninterrupted one in the last digits.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["PROGRESS_ENV", "Job", "layout_throughput", "resolve_workers", "run_in_workers"]

PROGRESS_ENV = "RLIB_PROGRESS"  # "off" silences rlib.progress bars (set in workers: the parent's bar counts runs)


def resolve_workers(workers: int | str) -> int:
    """`workers` as a count: "auto" = one per torch thread on a machine without CUDA (each worker then runs one
    thread), 1 with CUDA (runs share one device); an int >= 1 as given."""
    if workers == "auto":
        import torch

        return 1 if torch.cuda.is_available() else max(1, torch.get_num_threads())
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers={workers!r}: give a count >= 1 or 'auto'")
    return workers


def _start_worker(threads: int) -> None:
    import torch

    os.environ[PROGRESS_ENV] = "off"
    os.environ["TQDM_DISABLE"] = "1"  # bars made by tqdm directly (lm-eval, evaluation loops) default to off as well
    os.environ["RLIB_THREADS"] = str(threads)
    torch.set_num_threads(threads)


@dataclass(frozen=True)
class Job:
    """One run for `run_in_workers`: `cached(slot.folder, slot.key, lambda: compute(item, slot), refresh=refresh)`,
    started only once the jobs at the indices `needs` have finished (a run that loads another's saved model)."""

    item: Any
    slot: Any
    compute: Callable[[Any, Any], dict[str, Any]]
    refresh: bool = False
    needs: tuple[int, ...] = ()


def _run_one(index: int, job: Job, cached: Callable) -> tuple[int, dict[str, Any]]:
    try:
        return index, cached(job.slot.folder, job.slot.key, lambda: job.compute(job.item, job.slot),
                             refresh=job.refresh)
    except Exception as err:
        raise RuntimeError(f"run {getattr(job.item, 'name', job.item)!r}: {type(err).__name__}: {err}") from err


def _check_needs(jobs: Sequence[Job]) -> None:
    """Every `needs` index names a job, and some order runs them all (no cycle); before any run starts."""
    bad = sorted({n for job in jobs for n in job.needs if not 0 <= n < len(jobs)})
    if bad:
        raise ValueError(f"jobs need indices {bad} outside the {len(jobs)} jobs")
    finished: set[int] = set()
    while len(finished) < len(jobs):
        ready = {i for i, job in enumerate(jobs) if i not in finished and set(job.needs) <= finished}
        if not ready:
            stuck = [getattr(jobs[i].item, "name", i) for i in range(len(jobs)) if i not in finished]
            raise ValueError(f"runs {stuck} wait on each other: their needs form a cycle")
        finished |= ready


def run_in_workers(jobs: Sequence[Job], workers: int, on_done: Callable[[int, dict[str, Any]], None],
                   cached: Callable[..., dict[str, Any]]) -> None:
    """Run every job of `jobs` in `workers` processes and call `on_done(index, result)` in this process as each
    finishes (any order). A free worker takes the first job in `jobs` order whose `needs` have finished, so put the
    longest first: the last runs then overlap short ones. Jobs may come from several grids, each with its own compute.
    `cached` is `rlib.experiments.cached`, passed in (a worker unpickles it by name) so that this module imports
    nothing of `rlib.experiments`, which imports it."""
    _check_needs(jobs)
    for compute in {id(job.compute): job.compute for job in jobs}.values():
        try:
            pickle.dumps(compute)
        except Exception as err:  # a lambda or a closure cannot reach a spawned process
            raise ValueError(f"workers={workers} needs a compute function a worker process can import (a module-level "
                             f"function or a functools.partial of one); got {compute!r} ({err})") from err
    import torch

    threads = max(1, torch.get_num_threads() // workers)
    # concurrent.futures' workers are not daemonic (multiprocessing.Pool's are), so a run may start processes itself
    pool = ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=multiprocessing.get_context("spawn"),
                               initializer=_start_worker, initargs=(threads,))
    pending, finished, running = list(range(len(jobs))), set(), set()
    with pool:
        try:
            while pending or running:
                ready = [i for i in pending if set(jobs[i].needs) <= finished]
                for i in ready[:workers - len(running)]:
                    pending.remove(i)
                    running.add(pool.submit(_run_one, i, jobs[i], cached))
                done, running = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    index, result = future.result()
                    finished.add(index)
                    on_done(index, result)
        except BaseException as err:
            pool.shutdown(wait=False, cancel_futures=True)  # queued runs never start; running ones finish and are kept
            if isinstance(err, Exception):
                folders = sorted({str(Path(job.slot.folder).parent) for job in jobs})
                raise RuntimeError(f"a run of the grid failed in a worker process (the runs that finished are kept in "
                                   f"their folders under {', '.join(folders)}): {err}") from err
            raise


def _one_thread_seconds(timed: Callable[[int], float], steps: int) -> float:
    return timed(steps)


def layout_throughput(timed: Callable[[int], float], steps: int, workers: int) -> dict[str, Any]:
    """Whether a grid of some run should use this module's layout, measured: `timed(steps)` (seconds per step after
    its own warm-up; a module-level function or a functools.partial of one) in this process with `workers` torch
    threads, then in `workers` one-thread worker processes at once (set up as a grid's workers). Returns
    "threaded_s", "worker_s" (each worker's), their steps per second ("threaded_steps_per_s", "workers_steps_per_s",
    the workers' summed) and "ratio", the workers' throughput over the threaded process's (the benchmarks'
    `--side-by-side`)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(workers)
    try:
        threaded = timed(steps)
    finally:
        torch.set_num_threads(before)
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                             initializer=_start_worker, initargs=(1,)) as pool:
        each = list(pool.map(_one_thread_seconds, [timed] * workers, [steps] * workers))
    together = sum(1 / s for s in each)
    return {"threaded_s": threaded, "worker_s": each, "threaded_steps_per_s": 1 / threaded,
            "workers_steps_per_s": together, "ratio": together * threaded}
