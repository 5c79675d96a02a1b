"""`python -m rlib.book plan --profile P`: what a run would cost now, from the last run and the caches.

Per chapter, in book order:
  - whether it is up to date (the runner would skip it: same source, parameters and library code);
  - its last complete run: wall time, when, with how many torch threads (`runs/<profile>/<chapter>/
    provenance.json` and its `environment.json`), or else the promoted run of that profile
    (`figures/MANIFEST.json`, `figures/<profile>/MANIFEST.json`), so a fresh clone gets numbers too;
  - what its run grid has cached (`runs/.work/<profile>/<chapter>/*/result.json`): those runs are read,
    not trained, so the chapter will take less than its last uncached time;
  - the expected time now: 0 when up to date, else the last run's wall time; when that run read grid results from
    its run cache that this machine's cache does not hold, those runs will be computed here, so their recorded
    compute seconds (spread over one grid worker per torch thread) are added and the estimate is marked "est.",
and the total against the profile's book budget, then the machine those times were measured on beside this one
(its CPU, whether it computes bf16 natively, its speed factor): the budgets hold on the reference machine, and a
machine without native bf16 trains the presets' "auto" precision in fp32 and takes about 2-3x longer. Nothing is
written.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from rlib.book import manifest as manifest_mod
from rlib.book.layout import failed_dir, profile_dir, promoted_dir, work_root
from rlib.config import get_profile


@dataclass
class ChapterEstimate:
    chapter: str
    state: str  # "up to date" | "stale" | "never run" | "failed"
    last_wall_s: float | None
    last_source: str  # where last_wall_s comes from
    threads: int | None
    cached_runs: int
    cached_newest: float | None  # mtime of the newest result.json
    expected_s: float | None
    device: str | None = None  # the processor the last wall time was measured on
    uncached_extra_s: float = 0.0  # compute seconds added to the last wall time for cached runs missing here


def missing_compute_s(tally: dict | None, cached_here: int, workers: int) -> float:
    """Seconds that the runs a last run read from its run cache will take here when this machine's cache lacks them:
    their recorded compute seconds, in proportion to the runs missing, spread over `workers` grid workers."""
    read = int((tally or {}).get("read") or 0)
    computed = int((tally or {}).get("computed") or 0)
    if not read:
        return 0.0
    missing = min(read, max(0, read + computed - cached_here))  # the runs it computed are in its wall time already
    return float(tally.get("read_compute_s") or 0.0) * missing / read / max(1, workers)


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def estimate(profile: str, only: list[str] | None = None, cli_params: list[str] | None = None
             ) -> list[ChapterEstimate]:
    import torch

    from rlib.book.runner import is_up_to_date, plan

    get_profile(profile)
    workers = max(1, torch.get_num_threads())  # run_grid(workers="auto") on a CPU: one worker per torch thread
    manifest = manifest_mod.load()
    promoted = _read(promoted_dir(profile) / "MANIFEST.json") or {}
    rows = []
    for item in plan(manifest, profile, only, cli_params or []):
        ch = item.chapter
        prov = _read(profile_dir(profile) / ch.id / "provenance.json")
        wall, source, threads, device, tally = None, "no run", None, None, None
        if prov:
            env = prov.get("environment") or {}
            device = (env.get("device") or {}).get("name")
            wall, source = prov.get("wall_s"), f"last run {prov.get('started', '?')[:16]}"
            threads = (env.get("threads") or {}).get("torch") or env.get("torch_threads")
            tally = prov.get("run_cache") or {}
        elif ch.id in promoted and promoted[ch.id].get("profile") == profile:
            wall, source = promoted[ch.id].get("wall_s"), f"promoted run {promoted[ch.id].get('started', '?')[:16]}"
            device = (promoted[ch.id].get("device") or {}).get("name")
            tally = promoted[ch.id].get("run_cache") or {}
        if tally and tally.get("read"):  # that wall time is not an uncached one
            source += (f" ({tally['read']} of {tally['read'] + tally['computed']} grid results read from cache, "
                       f"{(tally.get('read_compute_s') or 0) / 60:.1f} min of compute)")
        up_to_date = bool(prov) and is_up_to_date(item, profile)
        state = ("up to date" if up_to_date else "failed" if failed_dir(profile, ch.id).exists()
                 else "stale" if prov else "never run")
        results = sorted(work_root(profile, ch.id).glob("*/result.json"))
        newest = max((r.stat().st_mtime for r in results), default=None)
        extra = 0.0 if up_to_date or wall is None else missing_compute_s(tally, len(results), workers)
        expected = 0.0 if up_to_date else None if wall is None else wall + extra
        rows.append(ChapterEstimate(ch.id, state, wall, source, threads, len(results), newest, expected, device,
                                    extra))
    return rows


def _minutes(seconds: float | None) -> str:
    return "?" if seconds is None else f"{seconds / 60:.1f} min"


def format_estimate(profile: str, rows: list[ChapterEstimate]) -> str:
    prof = get_profile(profile)
    manifest = manifest_mod.load()
    outside = [c.id for c in manifest.chapters if c not in manifest.runs_in(profile)]
    lines = [f"plan for the {profile} profile (chapter budget {prof.chapter_budget_s / 60:.0f} min, "
             f"book budget {prof.book_budget_s / 60:.0f} min)",
             f"{'chapter':28s} {'state':10s} {'expected':>14s} {'last':>10s}  cached runs  source"]
    for r in rows:
        cached = f"{r.cached_runs:4d}" + (f" (newest {time.strftime('%m-%d %H:%M', time.localtime(r.cached_newest))})"
                                           if r.cached_newest else "")
        threads = f", {r.threads} threads" if r.threads else ""
        expected = ("est. " if r.uncached_extra_s else "") + _minutes(r.expected_s)
        lines.append(f"{r.chapter:28s} {r.state:10s} {expected:>14s} {_minutes(r.last_wall_s):>10s}  "
                     f"{cached:24s} {r.last_source}{threads}")
    known = [r.expected_s for r in rows if r.expected_s is not None]
    unknown = [r.chapter for r in rows if r.expected_s is None]
    total = f"total expected: {_minutes(sum(known))}"
    if unknown:
        total += f" + unknown for {', '.join(unknown)} (never run in this profile)"
    lines.append(total)
    if outside:
        lines.append(f"not run in this profile (no {profile} preset): {', '.join(outside)}")
    lines.append("expected = 0 for an up-to-date chapter (skipped), else its last wall time; cached runs of a stale "
                 "chapter are read back, not retrained, so it takes less when they are still valid")
    if any(r.uncached_extra_s for r in rows):
        lines.append("est. = that last run read grid results from its run cache which this machine's cache lacks: "
                     "their recorded compute time, over one grid worker per torch thread, is added")
    lines += machine_lines(rows)
    return "\n".join(lines)


def machine_lines(rows: list[ChapterEstimate]) -> list[str]:
    """Where the times were measured against this machine: its CPU, native bf16 and speed factor."""
    from rlib import precision
    from rlib.book.session import _cpu_name
    from rlib.book.speed import speed_factor

    info = precision.describe()
    factor, _ = speed_factor()
    here = _cpu_name()
    lines = [f"this machine: {here} ({info['cpu_capability']}), bf16 native: {'yes' if info['bf16_native'] else 'no'} "
             f"(precision 'auto' trains in {'bf16' if info['bf16_native'] else 'fp32'}), speed factor {factor:.2f} "
             "against the reference machine's fp32 matmuls"]
    measured = sorted({r.device for r in rows if r.device})
    if measured:
        lines.append(f"the times above were measured on: {'; '.join(measured)}")
    if any(d != here for d in measured) or not info["bf16_native"] or factor > 1.2:
        lines.append("on another machine expect other times: a CPU without native bf16 takes about 2-3x the "
                     "reference's (README, 'Machines and precision')")
    return lines
