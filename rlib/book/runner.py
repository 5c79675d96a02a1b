"""The book runner: execute chapters with papermill into `runs/<profile>/<chapter>/`.

Per chapter, in manifest order:
  1. validate parameters against the chapter's parameters cell (before anything runs)
  2. skip it when its fingerprint (chapter source, parameters, library code, manifest entry) matches
     the last complete run and every declared artifact is there
  3. execute it with papermill into a fresh staging folder (`runs/<profile>/.staging/`), its log in
     `run.log`; every cell may take twice the profile's chapter budget times the machine's measured
     speed factor (`rlib.book.speed`), or `--cell-timeout` seconds
  4. check every declared artifact was written, render HTML, write `provenance.json`
  5. swap the staging folder into place with two renames

A run killed at any point leaves the previous complete outputs (or none) in place, never a mix;
the next run cleans the staging area and starts the chapter again. A failed chapter's partial
notebook, its `run.log` and `failure.json` (the reason, the cell, the command that fixes it) are kept
in `runs/<profile>/.failed/<chapter>/`, where the report links them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlib import paths, threads
from rlib.book import manifest as manifest_mod
from rlib.book import params as params_mod
from rlib.book import report
from rlib.book.layout import (
    FAILURE_FILE,
    LOG_FILE,
    STAGING,
    failed_dir,
    missing_artifacts,
    number,
    profile_dir,
    run_command,
)
from rlib.book.manifest import Chapter, Manifest
from rlib.book.session import RUNNER_ENV, write_json
from rlib.config import ConfigError, check_resources, get_profile
from rlib.fsutil import file_lock, sha256_file

log = logging.getLogger("rlib.book")


@dataclass
class Planned:
    chapter: Chapter
    params: dict[str, Any]  # everything but out_dir, which the runner sets per attempt
    key: str


class ChapterFailed(RuntimeError):
    """A chapter did not complete; the message is the reason, then the command that fixes it."""

    def __init__(self, reason: str, fix: str):
        super().__init__(f"{reason}\n[book] fix: {fix}")
        self.reason, self.fix = reason, fix


# ----------------------------------------------------------------------------------------------
# planning: validation happens here, before any chapter runs


def plan(manifest: Manifest, profile: str, only: list[str] | None, cli_params: list[str]) -> list[Planned]:
    get_profile(profile)
    chapters = manifest.select(only, profile)
    overrides = {**{k: ("value", v) for k, v in manifest.params_for(profile).items()},
                 **{k: ("text", v) for k, v in params_mod.split_assignments(cli_params).items()}}
    declared = {ch.id: params_mod.declared(ch.source) for ch in chapters}
    for name in overrides:
        if name in ("profile", "out_dir"):
            raise ConfigError(f"parameter {name!r} is set by the runner; use --profile, not -p {name}=...")
        if not any(name in d for d in declared.values()):
            known = {p for d in declared.values() for p in d}
            raise params_mod.unknown_parameter(name, known, "no selected chapter declares it")
    code = code_fingerprint()
    planned = []
    for ch in chapters:
        where = ch.id
        values = {}
        for name, (kind, raw) in overrides.items():
            if name not in declared[ch.id]:
                continue
            param = declared[ch.id][name]
            value = params_mod.parse_cli_value(param, raw, where) if kind == "text" else raw
            values[name] = params_mod.check_value(param, value, where)
        values["profile"] = profile
        resolved = {p.name: p.default for p in declared[ch.id].values() if p.name != "out_dir"}
        resolved.update(values)
        planned.append(Planned(ch, resolved, chapter_key(ch, resolved, code)))
    return planned


def code_fingerprint() -> str:
    """Hash of the library and kernel sources and the pinned requirements."""
    h = hashlib.sha256()
    files = sorted(paths.ROOT.glob("rlib/**/*.py")) + sorted(paths.ROOT.glob("kernels/**/*.py"))
    files.append(paths.ROOT / "requirements.txt")
    for f in files:
        if f.exists():
            h.update(str(f.relative_to(paths.ROOT)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def chapter_key(ch: Chapter, params: dict, code: str) -> str:
    blob = json.dumps({"source": ch.source.read_text(), "params": params, "code": code,
                       "tables": ch.tables, "figures": ch.figures}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# ----------------------------------------------------------------------------------------------
# folders


def is_up_to_date(item: Planned, profile: str) -> bool:
    final = profile_dir(profile) / item.chapter.id
    prov = final / "provenance.json"
    if not prov.exists():
        return False
    try:
        info = json.loads(prov.read_text())
    except json.JSONDecodeError:
        return False
    return (info.get("key") == item.key and info.get("status") == "complete"
            and not missing_artifacts(item.chapter, final, profile))


def recover(profile: str) -> None:
    """Undo what a killed run left: stale staging folders, a swap cut between its two renames."""
    root = profile_dir(profile)
    shutil.rmtree(root / STAGING, ignore_errors=True)
    for trash in root.glob(".trash-*"):
        final = root / trash.name.removeprefix(".trash-")
        if not final.exists():
            trash.rename(final)  # the old complete outputs come back
        else:
            shutil.rmtree(trash, ignore_errors=True)


def swap_into_place(staging: Path, final: Path) -> None:
    trash = final.with_name(f".trash-{final.name}")
    if final.exists():
        final.rename(trash)
    staging.rename(final)
    shutil.rmtree(trash, ignore_errors=True)


@contextlib.contextmanager
def profile_lock(profile: str) -> Iterator[None]:
    root = profile_dir(profile)
    root.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        try:  # only the acquisition is guarded: errors of the chapters themselves pass through unchanged
            stack.enter_context(file_lock(root / ".lock", blocking=False))
        except BlockingIOError:
            raise ConfigError(f"another book runner is working on {root}; wait for it or stop it") from None
        yield


# ----------------------------------------------------------------------------------------------
# execution


def _kernel_env() -> None:
    """Papermill starts the kernel as a child process: it inherits these."""
    os.environ[RUNNER_ENV] = "1"
    # the kernel sets torch's threads itself (`book.start`); this also sizes numpy's BLAS pool the same way
    os.environ.setdefault("OMP_NUM_THREADS", str(threads.configure()["torch"]))
    os.environ.setdefault("MPLBACKEND", "Agg")
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # the book's own bars are enough in logs
    pp = os.environ.get("PYTHONPATH", "")
    if str(paths.ROOT) not in pp.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(paths.ROOT), pp) if p)


def cell_timeout(profile: str, override_s: float | None) -> tuple[int, float, str]:
    """(seconds, speed factor, how it was chosen) for every cell of the next chapter."""
    if override_s is not None:
        return int(override_s), 1.0, "--cell-timeout"
    from rlib.book.speed import speed_factor

    factor, _ = speed_factor()
    return int(round(2 * get_profile(profile).chapter_budget_s * factor)), factor, "speed factor"


@contextlib.contextmanager
def chapter_log(path: Path) -> Iterator[None]:
    """Everything papermill and the runner log while a chapter runs, also written to `path`."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    loggers = [logging.getLogger("papermill"), log]
    for lg in loggers:
        lg.addHandler(handler)
    try:
        yield
    finally:
        for lg in loggers:
            lg.removeHandler(handler)
        handler.close()


def execute(item: Planned, profile: str, kernel: str, cell_timeout_s: float | None = None) -> dict[str, Any]:
    """Run one chapter into staging, check and render it, then swap it into place."""
    import jupytext
    import papermill

    ch = item.chapter
    root = profile_dir(profile)
    # a fresh folder per attempt: a kernel orphaned by a killed runner can never write into it
    staging = root / STAGING / f"{ch.id}-{os.getpid()}-{int(time.time())}"
    staging.mkdir(parents=True)
    nb = jupytext.read(ch.source)
    nb.metadata["kernelspec"] = {"name": kernel, "display_name": kernel, "language": "python"}
    nb.metadata["jupytext"] = {"formats": "ipynb,py:percent"}
    out_nb = staging / f"{ch.id}.ipynb"
    params = {**item.params, "out_dir": str(staging)}
    started = time.time()
    git = git_state()  # the code that runs: a commit made while the chapter runs must not be credited with it
    with chapter_log(staging / LOG_FILE):
        timeout, factor, how = cell_timeout(profile, cell_timeout_s)
        log.info(f"[book] {ch.id}: cell timeout {timeout} s ({how}"
                 + (f" {factor:.2f} x twice the {get_profile(profile).chapter_budget_s} s chapter budget)"
                    if how == "speed factor" else ")"))
        try:
            papermill.execute_notebook(
                nb, str(out_nb), parameters=params, kernel_name=kernel, cwd=str(paths.NOTEBOOKS),
                log_output=True, progress_bar=False, execution_timeout=timeout,
            )
        except Exception as exc:
            failure = describe_failure(exc, item, profile, out_nb, timeout, factor)
            log.error(f"[book] {ch.id}: FAILED: {failure.reason}\n[book] fix: {failure.fix}")
            keep_failed(staging, item, profile, failure)
            raise failure from exc
        except BaseException:
            keep_failed(staging, item, profile, None)
            raise
    wall = time.time() - started
    missing = missing_artifacts(ch, staging, profile)
    if missing:
        failure = ChapterFailed(f"chapter {ch.id} ran but did not write its declared artifact(s) {missing}",
                                f"make the chapter write them with run.table / run.figure, then "
                                f"`{run_command(profile, ch.id)}`")
        keep_failed(staging, item, profile, failure)
        raise failure
    render_html(out_nb, staging / f"{ch.id}.html")
    provenance = build_provenance(item, profile, out_nb, staging, started, wall, git)
    provenance["cell_timeout_s"], provenance["speed_factor"] = timeout, round(factor, 2)
    write_json(staging / "provenance.json", provenance)
    swap_into_place(staging, root / ch.id)
    shutil.rmtree(failed_dir(profile, ch.id), ignore_errors=True)  # an earlier failure is now history
    return provenance


def _cell_of_failure(out_nb: Path, exc: Exception) -> tuple[int | None, str]:
    """(1-based cell number as papermill's log counts them, the cell's first line) of the failed cell."""
    import nbformat

    index = getattr(exc, "cell_index", None)
    try:
        nb = nbformat.read(out_nb, as_version=4)
    except (OSError, ValueError):
        return (index + 1 if index is not None else None), ""
    if index is None:  # a timeout or a dead kernel: the last cell that started
        started = [i for i, c in enumerate(nb.cells) if (c.metadata.get("papermill") or {}).get("start_time")]
        index = started[-1] if started else None
    if index is None or index >= len(nb.cells):
        return None, ""
    head = next((ln.strip() for ln in nb.cells[index].source.splitlines() if ln.strip()), "")
    return index + 1, head[:80]


def describe_failure(exc: Exception, item: Planned, profile: str, out_nb: Path, timeout: int,
                     factor: float) -> ChapterFailed:
    """The reason a chapter failed, in words, and the full command that fixes it."""
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    ch = item.chapter
    cell, head = _cell_of_failure(out_nb, exc)
    where = f"cell {cell if cell is not None else '?'} of chapter {number(ch.id)}" + (f" (`{head}`)" if head else "")
    rerun = run_command(profile, ch.id)
    if isinstance(exc, CellTimeoutError):
        scaled = f"; the machine ran {factor:.1f}x slower than the reference" if factor > 1 else ""
        return ChapterFailed(f"timed out after {timeout} s in {where}{scaled}",
                             f"give each cell longer: `{rerun} --cell-timeout {2 * timeout}` "
                             "(or run it when the machine is less busy)")
    if isinstance(exc, DeadKernelError):
        return ChapterFailed(f"the kernel died in {where} (out of memory, or killed)",
                             f"free memory or stop other work, then `{rerun}`")
    ename, evalue = getattr(exc, "ename", None), getattr(exc, "evalue", None)
    text = f"{ename}: {evalue}" if ename else _short_error(exc)
    if ename == "ConfigError":
        fix = f"change the value the error names (`python -m rlib.book params` lists them), then `{rerun}`"
    else:
        fix = f"read the log and the partial notebook in {failed_dir(profile, ch.id)}, fix the cause, then `{rerun}`"
    return ChapterFailed(f"{text} in {where}", fix)


def keep_failed(staging: Path, item: Planned, profile: str, failure: ChapterFailed | None) -> None:
    """Move the staging folder to `.failed/<chapter>/`, with `failure.json` and the partial notebook as HTML."""
    failed = failed_dir(profile, item.chapter.id)
    shutil.rmtree(failed, ignore_errors=True)
    failed.parent.mkdir(parents=True, exist_ok=True)
    if not staging.exists():
        return
    staging.rename(failed)
    if failure is None:
        return
    nb = failed / f"{item.chapter.id}.ipynb"
    html = failed / f"{item.chapter.id}.html"
    with contextlib.suppress(Exception):  # best effort: the notebook may be cut anywhere
        render_html(nb, html, depth=2)
    write_json(failed / FAILURE_FILE, {
        "chapter": item.chapter.id, "profile": profile, "reason": failure.reason, "fix": failure.fix,
        "failed_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "log": LOG_FILE,
        "notebook": nb.name if nb.exists() else None, "html": html.name if html.exists() else None,
        "parameters": item.params,
    })


def render_html(notebook: Path, html: Path, depth: int = 1) -> None:
    """The executed notebook as a standalone page that loads nothing from a network (`report.offline_html_options`)."""
    import nbformat
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(**report.offline_html_options(depth))
    body, _ = exporter.from_notebook_node(nbformat.read(notebook, as_version=4))
    html.write_text(body)


def git_state() -> dict[str, Any]:
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=paths.ROOT, capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    return {"sha": git("rev-parse", "HEAD") or None, "dirty": dirty}


def build_provenance(item: Planned, profile: str, out_nb: Path, folder: Path, started: float,
                     wall: float, git: dict[str, Any] | None = None) -> dict[str, Any]:
    import nbformat

    nb = nbformat.read(out_nb, as_version=4)
    cells = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        head = next((ln for ln in cell.source.splitlines() if ln.strip()), "")
        cells.append({"index": i, "source": head[:80],
                      "duration_s": round(cell.metadata.get("papermill", {}).get("duration") or 0.0, 3)})
    env_file = folder / "environment.json"
    env = json.loads(env_file.read_text()) if env_file.exists() else {}
    return {
        "chapter": item.chapter.id,
        "profile": profile,
        "status": "complete",
        "key": item.key,
        "parameters": item.params,
        "git": git if git is not None else git_state(),  # taken when the chapter started
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "wall_s": round(wall, 2),
        "run_cache": env.get("run_cache"),
        "cells": cells,
        "environment": env or None,
        "artifacts": {f: sha256_file(folder / f) for f in item.chapter.artifact_files(item.params.get("profile"))},
        "runner": {"argv": sys.argv, "python": sys.executable},
    }


def _raise_on_sigterm(signum, frame):  # a killed runner still shuts its kernel down cleanly
    raise KeyboardInterrupt(f"signal {signum}")


def run_book(profile: str, only: list[str] | None = None, cli_params: list[str] | None = None,
             keep_going: bool = False, force: bool = False, cell_timeout_s: float | None = None) -> int:
    """Validate, then run the selected chapters; returns a process exit status."""
    if cell_timeout_s is not None and cell_timeout_s <= 0:
        raise ConfigError(f"--cell-timeout {cell_timeout_s:g}: give a positive number of seconds")
    manifest = manifest_mod.load()
    planned = plan(manifest, profile, only, cli_params or [])
    check_resources(get_profile(profile))
    _kernel_env()
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    failures: list[tuple[str, str]] = []
    with profile_lock(profile):
        recover(profile)
        for item in planned:
            ch = item.chapter
            if not force and is_up_to_date(item, profile):
                log.info(f"[book] {ch.id}: up to date (key {item.key}), skipped")
                continue
            log.info(f"[book] {ch.id}: running ({profile} profile) -> {profile_dir(profile) / ch.id}")
            try:
                prov = execute(item, profile, manifest.kernel, cell_timeout_s)
            except KeyboardInterrupt:
                log.error(f"[book] {ch.id}: interrupted; previous outputs left as they were")
                raise
            except Exception as exc:  # noqa: BLE001 - reported, and fatal unless --keep-going
                reason = exc.reason if isinstance(exc, ChapterFailed) else _short_error(exc)
                if not isinstance(exc, ChapterFailed):
                    log.error(f"[book] {ch.id}: FAILED: {reason}")
                log.error(f"[book] log and partial notebook: {failed_dir(profile, ch.id)}")
                failures.append((ch.id, reason))
                if not keep_going:
                    break
                continue
            log.info(f"[book] {ch.id}: done in {prov['wall_s']:.0f} s")
        index = report.write_report(profile, manifest)
        log.info(f"[book] report: {index}")
    if failures:
        log.error("[book] failed chapters: " + ", ".join(c for c, _ in failures))
        return 1
    return 0


def _short_error(exc: Exception) -> str:
    text = str(exc).strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return (type(exc).__name__ + ": " + " | ".join(lines[-3:]))[:600] if lines else type(exc).__name__
