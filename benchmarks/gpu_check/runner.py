"""The `make gpu-check` runner: sections under per-section time caps, one results folder, a summary (issue 26).

    python -m benchmarks.gpu_check                 # on a GPU: writes benchmarks/results/gpu/<device>-<date>-<sha>/
    python -m benchmarks.gpu_check --dry-run       # on CPU, tiny shapes, Triton interpreted: the same code, < 2 min
    python -m benchmarks.gpu_check --only prefill lora --budget-scale 0.5

On the lent GPU machine (10 minutes a command, 15 minutes of device time a session with its start, no .git in its
copy of the checkout, at most 8 files back from $OUT): two calls, one right after the other while the machine is warm,
each running one part of the sections at the lent machine's caps, naming the commit sent and packing its folder into
one file; then, here, an unpack of both (which merges the parts into one folder):

    python -m benchmarks.gpu_check.carry                     # here, first: chapter 05's trained model travels
    make gpu-check ARGS="--part 1 --commit <sha> --archive $OUT/check1.tgz"   # tests, prefill, prefill_batch, ~8 min
    make gpu-check ARGS="--part 2 --commit <sha> --archive $OUT/check2.tgz"   # lora, end_to_end (carry gpu_carry), ~5
    python -m benchmarks.gpu_check --unpack <files_at>/check1.tgz <files_at>/check2.tgz

The folder is built under `<name>.partial/` and renamed into place at the end, so an interrupted run never leaves
a folder that looks complete (the partial one keeps whatever sections finished, each written as soon as it ends).
A dry run never writes under benchmarks/results/gpu (default `runs/gpu-check-dry/`), and `meta.json` says what
ran where (`device_type`, `dry_run`), which is what `rlib.gpu_results` checks before it shows a number as a GPU's.

Imports only what the lent GPU machine has (torch, triton, transformers, pandas, pytest): nothing from papermill,
jupytext or lm-eval, here or in the rlib modules the sections use (a test checks this).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "gpu"
DRY_RESULTS = ROOT / "runs" / "gpu-check-dry"
# seconds per section on a GPU: 19.5 min at most, the 20 (measured on an H200 at e58c2bf: tests 105 s, prefill
# 217 s up to N = 4096, lora 40 s, end_to_end 204 s with the random-weight studies)
BUDGETS = {"tests": 200, "prefill": 400, "prefill_batch": 100, "lora": 70, "end_to_end": 400}
DRY_BUDGETS = {"tests": 45, "prefill": 15, "prefill_batch": 10, "lora": 10, "end_to_end": 30}
# the lent machine's two commands (each under its 10-minute limit: 490 s and 330 s of caps at LENT_SCALE), together
# inside its 15 minutes of device time when the sections end before their caps, as they did on the H200
PARTS = {1: ("tests", "prefill", "prefill_batch"), 2: ("lora", "end_to_end")}
LENT_SCALE = 0.7


@dataclass
class Context:
    """What a section sees: where it runs, how long it may take, where it logs."""

    device: str  # "cuda" | "cpu"
    dry_run: bool
    budget_s: float
    folder: Path
    triton: bool = True  # whether the Triton kernels can run here (CUDA, or an interpreter that runs them)
    started: float = field(default_factory=time.perf_counter)
    notes: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # what makes the section fail although it ran to the end

    def time_left(self) -> float:
        return self.budget_s - (time.perf_counter() - self.started)

    def log(self, line: str) -> None:
        print(f"[gpu-check {time.perf_counter() - self.started:6.1f} s] {line}", file=sys.stderr, flush=True)


def interpreter_runs_the_kernels() -> bool:
    """Triton's interpreter runs the book's kernels from 3.7 on; 3.6's (the lent GPU machine's) fails on a `range`
    over run-time integers ("only 0-dimensional arrays can be converted to Python scalars")."""
    import triton

    major, minor = (int(part) for part in triton.__version__.split(".")[:2])
    return (major, minor) >= (3, 7)


def git_sha() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             timeout=10)
        sha = out.stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return (sha + ("-dirty" if dirty else "")) if sha else "nogit"
    except (OSError, subprocess.SubprocessError):
        return "nogit"


def device_name(device: str) -> str:
    import torch

    return torch.cuda.get_device_name() if device == "cuda" else "cpu"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "device"


def folder_name(device: str, date: str, sha: str) -> str:
    """`<device>-<date>-<sha>`, e.g. nvidia-h100-80gb-hbm3-2026-11-25-1e4dcc3."""
    return f"{slug(device)}-{date}-{sha}"


def environment(device: str, dry_run: bool, sha: str, date: str) -> dict:
    import torch
    import triton

    meta = {"device": device_name(device), "device_type": device, "dry_run": dry_run, "date": date, "commit": sha,
            "python": sys.version.split()[0], "torch": torch.__version__, "triton": triton.__version__,
            "triton_interpret": os.environ.get("TRITON_INTERPRET", "0")}
    try:
        import transformers

        meta["transformers"] = transformers.__version__
    except ImportError:
        meta["transformers"] = "missing"
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        meta.update(cuda=torch.version.cuda, sm=f"{props.major}{props.minor}", sms=props.multi_processor_count,
                    memory_gib=round(props.total_memory / 2**30, 1))
    return meta


def _write_csv(table: pd.DataFrame, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    table.to_csv(tmp, index=False)
    os.replace(tmp, path)


def run_section(name: str, fn, ctx: Context) -> dict:
    """Run one section; its tables go to `<name>.csv` (or `<name>_<part>.csv`) as soon as it ends."""
    ctx.log(f"section {name}: budget {ctx.budget_s:.0f} s")
    status, tables = "ok", {}
    try:
        tables = fn(ctx)
        if ctx.failures:
            status = "failed: " + "; ".join(ctx.failures)
    except Exception as error:  # noqa: BLE001 - a failed section is a result; the others still run
        status = f"failed: {type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}"
        ctx.log(traceback.format_exc())
    for part, table in tables.items():
        _write_csv(table, ctx.folder / (f"{name}.csv" if part == "" else f"{name}_{part}.csv"))
    seconds = time.perf_counter() - ctx.started
    if ctx.time_left() < 0:
        ctx.notes.append(f"{name} ran {seconds:.0f} s, over its {ctx.budget_s:.0f} s cap (the case in flight ends)")
    ctx.log(f"section {name}: {status} in {seconds:.0f} s")
    return {"section": name, "status": status, "seconds": round(seconds, 1), "budget_s": ctx.budget_s,
            "tables": sorted(f"{name}_{p}" if p else name for p in tables), "notes": list(ctx.notes)}


def main(argv: list[str] | None = None) -> int:
    from benchmarks.gpu_check import folders, sections

    parser = argparse.ArgumentParser(description="The GPU half in one command (issue 26).")
    parser.add_argument("--dry-run", action="store_true",
                        help="CPU, tiny shapes, Triton under TRITON_INTERPRET=1: checks the command end to end")
    parser.add_argument("--only", nargs="+", default=None, help="sections to run (default: all)")
    parser.add_argument("--part", type=int, choices=sorted(PARTS), default=None,
                        help=f"the lent GPU machine's command N: the sections {PARTS} with every cap times "
                             f"{LENT_SCALE} (unless --budget-scale says otherwise)")
    parser.add_argument("--budget-scale", type=float, default=None,
                        help=f"multiply every section's time cap (default 1, or {LENT_SCALE} with --part)")
    parser.add_argument("--commit", default=None,
                        help="the commit measured, where the checkout has no .git (the lent GPU machine's copy)")
    parser.add_argument("--archive", type=Path, default=None,
                        help="also pack the results folder into this .tgz (to carry it off the lent machine)")
    parser.add_argument("--out", type=Path, default=None,
                        help="parent folder of the results folder (default benchmarks/results/gpu; dry run: "
                             "runs/gpu-check-dry)")
    parser.add_argument("--unpack", nargs="+", type=Path, default=None, metavar="ARCHIVE",
                        help="instead of running: unpack archives of `--only` runs into --out (merged per folder)")
    args = parser.parse_args(argv)
    if args.unpack:
        for archive in args.unpack:
            print(f"unpacked {folders.unpack(archive, args.out or RESULTS, list(sections.SECTIONS))}")
        return 0
    if args.part is not None:
        if args.only is not None:
            parser.error(f"--part {args.part} picks the sections {PARTS[args.part]}: drop --only")
        args.only = list(PARTS[args.part])
    elif args.only is None:
        args.only = list(sections.SECTIONS)
    if args.budget_scale is None:
        args.budget_scale = LENT_SCALE if args.part is not None else 1.0
    unknown = [s for s in args.only if s not in sections.SECTIONS]
    if unknown:
        parser.error(f"--only {unknown}: choose from {list(sections.SECTIONS)}")
    if args.commit is not None and not re.fullmatch(r"[0-9a-f]{7,40}(-dirty)?", args.commit):
        parser.error(f"--commit {args.commit!r}: give the sha of the checkout (7 to 40 hex digits)")
    if args.budget_scale <= 0:
        parser.error(f"--budget-scale {args.budget_scale}: must be > 0")
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"  # before any kernel module is imported
        os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    import torch

    device = "cpu" if args.dry_run else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("gpu-check needs a CUDA device (torch.cuda.is_available() is False); on a machine without one run "
              "`make gpu-check-dry` (python -m benchmarks.gpu_check --dry-run)", file=sys.stderr)
        return 2
    date, sha = datetime.date.today().isoformat(), args.commit or git_sha()
    parent = args.out or (DRY_RESULTS if args.dry_run else RESULTS)
    final = parent / folder_name(device_name(device), date, sha)
    staging = parent / f"{final.name}.partial"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    meta = environment(device, args.dry_run, sha, date)
    budgets = DRY_BUDGETS if args.dry_run else BUDGETS
    kernels_run = device == "cuda" or interpreter_runs_the_kernels()
    if not kernels_run:
        meta["triton_note"] = (f"triton {meta['triton']}'s interpreter cannot run the kernels: the Triton cases are "
                               "skipped in this dry run; `python -m kernels.aot --targets sm_90` compiles them with "
                               "this triton instead")
        print(meta["triton_note"], file=sys.stderr)
    started = time.perf_counter()
    results = []
    for name in args.only:
        ctx = Context(device, args.dry_run, budgets[name] * args.budget_scale, staging, triton=kernels_run)
        results.append(run_section(name, sections.SECTIONS[name], ctx))
        meta["sections"] = results
        (staging / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    meta["seconds"] = round(time.perf_counter() - started, 1)
    (staging / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    folders.place(staging, final, list(sections.SECTIONS))
    print(f"wrote {final} ({time.perf_counter() - started:.0f} s)")
    if args.archive:
        args.archive.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(args.archive, "w:gz") as tar:
            tar.add(final, arcname=final.name)
        print(f"packed {args.archive}")
    print((final / "summary.md").read_text())
    return 0 if all(r["status"] == "ok" for r in results) else 1
