"""Training step time and peak memory of models compared in paired rounds, each step measured in a fresh process.

Two chapters ask what a design costs to train at equal work: MoR's Sec. 3.1 (MoR-2 against vanilla at equal tokens,
`rlib.mor.train_cost`) and LayerSkip's Sec. 2.1 (one shared exit head against a head per layer,
`rlib.layerskip.exit_heads`). Both measure the same way, here:

- a *job* is a picklable object: `windows()` returns its training windows and `build(max_steps)` the model, the
  trainer config (`rlib.train.TrainConfig` for `max_steps` optimizer steps) and the trainer hooks, exactly as the
  chapter trains it;
- `measure_one(job, warmup, steps)` runs `python -m rlib.train_cost JOB` in a fresh interpreter, because a peak can
  only grow within a process. The child trains `warmup + steps` steps through `rlib.train.train` and reports the
  median time of the timed steps (from the trainer's per-step log), the peak over a baseline read after imports and
  the windows, before the model is built (on CPU the process's resident high-water mark, VmHWM, lowered to the
  baseline first, `rlib.memory`; on CUDA `torch.cuda.max_memory_allocated`), and the bytes of the training state:
  parameters, their gradients and AdamW's two moments, 4 x the parameter bytes (parameters stay fp32 under bf16
  autocast), so that the peak splits into state and the rest (activations, workspace, allocator slack);
- `paired_rounds(jobs, rounds, ...)` measures every job once per round, so a slow spell of a shared machine hits
  all of them, and alternates their order from round to round (A B, B A, A B, ...), so that an order effect falls
  on each job equally often; each row is divided by its own round's reference job (`"<key> / <reference>"`);
  `cost_summary` gives per job the medians and the median, min and max of the per-round ratios.
"""

from __future__ import annotations

import argparse
import json
import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from rlib.progress import progress

__all__ = ["RATIO_KEYS", "CostJob", "cost_summary", "measure_in_process", "measure_one", "paired_rounds"]

RATIO_KEYS = ("step_s", "peak_mib", "state_mib", "rest_mib", "params")  # each gets a per-round ratio column


class CostJob(Protocol):
    """What one measurement trains: `windows()` -> [N, T] ids; `build(max_steps)` -> (model, TrainConfig, hooks)."""

    def windows(self) -> Any: ...

    def build(self, max_steps: int) -> tuple[Any, Any, list]: ...


def measure_in_process(job: CostJob, warmup: int, steps: int) -> dict[str, Any]:
    """In this process: train the job `warmup + steps` steps; the timed steps' median and the peak memory (module
    docstring). Call it in a fresh process (`measure_one`): a peak read after other work means nothing."""
    import torch

    from rlib import memory
    from rlib.train import train

    windows = job.windows()
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        baseline = torch.cuda.memory_allocated() / 2**20
    else:
        baseline = memory.reset_peak_rss()  # interpreter, torch, rlib and the windows
    model, recipe, hooks = job.build(warmup + steps)
    recipe = recipe.override(log_every=1, eval_every=warmup + steps, checkpoint_every=0, checkpoint_final=False)
    with tempfile.TemporaryDirectory(prefix="rlib-train-cost-") as out:
        train(model, windows, recipe, out, hooks=hooks, resume=False)
        log = pd.read_csv(Path(out) / "metrics.csv").dropna(subset=["loss"])
    if cuda:
        peak = torch.cuda.max_memory_allocated() / 2**20 - baseline
    else:
        peak = memory.process_peak_mib() - baseline
    seconds = log["seconds"].to_numpy()  # cumulative at the end of each step
    step_s = np.diff(seconds)[warmup - 1:]  # steps warmup + 1 ... warmup + steps
    unique = {id(p): p for p in model.parameters()}
    param_bytes = sum(p.numel() * p.element_size() for p in unique.values())
    return {"step_s": float(np.median(step_s)), "step_s_all": [float(s) for s in step_s],
            "peak_mib": float(peak), "state_mib": 4 * param_bytes / 2**20,
            "params": int(sum(p.numel() for p in unique.values())), "device": "cuda" if cuda else "cpu",
            "threads": int(torch.get_num_threads())}


def measure_one(job: CostJob, warmup: int, steps: int, what: str = "a model", timeout_s: int = 1800) -> dict[str, Any]:
    """`measure_in_process` in a fresh interpreter (`python -m rlib.train_cost`); its JSON line as a dict."""
    if warmup < 1 or steps < 1:
        raise ValueError(f"warmup={warmup} and steps={steps} must be >= 1 (the first step allocates the optimizer "
                         "state and is never timed)")
    with tempfile.TemporaryDirectory(prefix="rlib-train-cost-job-") as tmp:
        blob = Path(tmp) / "job.pkl"
        blob.write_bytes(pickle.dumps(job))
        command = [sys.executable, "-m", "rlib.train_cost", str(blob), "--warmup", str(warmup), "--steps", str(steps)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        raise RuntimeError(f"train-cost measurement of {what} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def paired_rounds(labels: list[str], measure: Callable[[str], dict[str, Any]], rounds: int, reference: str,
                  columns: Mapping[str, Any] | Callable[[str], Mapping[str, Any]] = (),
                  desc: str = "train cost") -> pd.DataFrame:
    """One row per label and round: `measure(label)` once per label per round, and each row's
    `"<key> / <reference>"` ratios to its own round's first label, `labels[0]` (RATIO_KEYS). The order within a round
    alternates: even rounds run `labels` as given, odd rounds reversed, so that whatever favours the first (or the
    second) process of a pair falls on each label equally often. Rows come in `labels` order within each round, with
    `position`, the place the row's process ran in its round. `columns` adds fixed columns (a mapping, or a function
    of the label) before the measured ones."""
    if rounds < 1:
        raise ValueError(f"rounds={rounds} must be >= 1")
    if not labels:
        raise ValueError("no models to measure")
    rows = []
    with progress(total=rounds * len(labels), desc=desc) as bar:
        for r in range(rounds):
            order = list(labels) if r % 2 == 0 else list(reversed(labels))
            measured = {}
            for position, label in enumerate(order):
                t0 = time.perf_counter()
                got = measure(label)
                fixed = columns(label) if callable(columns) else dict(columns)
                measured[label] = {
                    "round": r, "model": label, **fixed, "position": position, "step_s": got["step_s"],
                    "step_s_min": min(got["step_s_all"]), "step_s_max": max(got["step_s_all"]),
                    "peak_mib": got["peak_mib"], "state_mib": got["state_mib"],
                    "rest_mib": got["peak_mib"] - got["state_mib"], "params": got["params"],
                    "device": got["device"], "threads": got["threads"], "process_s": time.perf_counter() - t0}
                bar.update(1)
            first = measured[labels[0]]
            for label in labels:
                row = measured[label]
                for key in RATIO_KEYS:
                    row[f"{key} / {reference}"] = row[key] / first[key] if first[key] > 0 else float("nan")
                rows.append(row)
    return pd.DataFrame(rows)


def cost_summary(table: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Per model: median step time and memory over rounds, and the median, min and max of its per-round ratios to
    the `reference` columns `paired_rounds` wrote."""
    rows = []
    for label, part in table.groupby("model", sort=False):
        row = {"model": label, "rounds": len(part), "step_s": part["step_s"].median(),
               "peak_mib": part["peak_mib"].median(), "state_mib": part["state_mib"].median(),
               "rest_mib": part["rest_mib"].median()}
        for key in RATIO_KEYS:
            ratios = part[f"{key} / {reference}"]
            row[f"{key} ratio"], row[f"{key} ratio lo"], row[f"{key} ratio hi"] = \
                ratios.median(), ratios.min(), ratios.max()
        rows.append(row)
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlib.train_cost", description=__doc__.splitlines()[0])
    parser.add_argument("job", help="a pickled job (windows() and build(max_steps)), written by measure_one")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args(argv)
    job = pickle.loads(Path(args.job).read_bytes())
    from rlib import threads

    threads.configure()  # the machine's cores, as a chapter's process takes them
    print(json.dumps(measure_in_process(job, args.warmup, args.steps)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
