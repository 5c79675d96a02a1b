"""Sec. 3.1's fixed-token efficiency (Mixture-of-Recursions, paper 001): training time and peak memory of MoR-2
expert-choice against vanilla at equal tokens.

The paper, on its 360M models trained on 20B tokens at 2K context: "compared to the vanilla baseline, our model
reduces training time by 19% and cuts peak memory usage by 25%" (Table 3's fixed-token MoR-2 row). At equal tokens
both models take the same optimizer steps on batches of the same shape, so the ratio of training times is the ratio
of step times, and the peak is that of one training step: parameters, gradients, AdamW state and activations.

Each measurement is one fresh process (`python -m rlib.mor.train_cost`), because a peak can only grow within a
process. It builds the model as the chapter's runs do (`experiments.make_model`), then trains it for `warmup + steps`
optimizer steps through `rlib.train.train` on the chapter's training windows with the chapter's recipe (precision,
micro batches, the MoR router-loss hook). It reports:
- the median time of the timed steps, from the trainer's per-step log;
- the peak over a baseline read after imports and data, before the model is built. On CPU this is the process's
  resident high-water mark (VmHWM, `rlib.memory`), lowered to the baseline first so that reading the data leaves no
  transient in it; on CUDA it is `torch.cuda.max_memory_allocated`;
- the bytes of the training state: parameters, their gradients and AdamW's two moments, 4 x the parameter bytes
  (parameters stay fp32 under bf16 autocast), so that the peak splits into state and the rest (activations,
  workspace, allocator slack).

Rounds alternate the models (vanilla, MoR, vanilla, MoR, ...), so that a slow spell of a shared machine hits both
models of a round. The ratios are per round (MoR over the same round's vanilla) and are summarised as median, min
and max (`benchmarks/mor_train_speed.py` runs the same measurement over more models):

    table = train_cost_table(cfg)            # one row per model and round, and the ratio columns
    summary = cost_summary(table)            # one row per model: medians and the per-round ratio spread
"""

from __future__ import annotations

import argparse
import json
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from rlib.mor.config import MoRConfig, MoRVariant
from rlib.mor.spec import MoRSpec
from rlib.progress import progress

__all__ = ["MODELS", "PAPER_MEMORY_RATIO", "PAPER_TIME_RATIO", "cost_summary", "measure_one", "step_seconds",
           "train_cost_table"]

# Sec. 3.1: "reduces training time by 19% and cuts peak memory usage by 25%"
PAPER_TIME_RATIO = 0.81
PAPER_MEMORY_RATIO = 0.75
MODELS: dict[str, MoRSpec | None] = {"Vanilla": None, "MoR-2 EC": MoRSpec.expert(2)}  # the paper's pair; vanilla first


def _child(cfg: MoRConfig, spec: MoRSpec | None, warmup: int, steps: int) -> dict[str, float]:
    """In a fresh process: train one model `warmup + steps` steps with the chapter's recipe; time and peak memory."""
    import torch

    from rlib import memory
    from rlib.mor.experiments import make_model, train_config
    from rlib.mor.model import MoRDecoder, MoRLoss
    from rlib.train import train

    text = cfg.text()
    windows = text.train_windows()
    variant = MoRVariant(spec, "tokens")
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        baseline = torch.cuda.memory_allocated() / 2**20
    else:
        baseline = memory.reset_peak_rss()  # interpreter, torch, rlib and the windows
    model = make_model(variant, cfg, text.size)
    recipe = train_config(cfg, warmup + steps, variant.seed).override(
        log_every=1, eval_every=warmup + steps, checkpoint_every=0, checkpoint_final=False)
    with tempfile.TemporaryDirectory(prefix="rlib-train-cost-") as out:
        hooks = [MoRLoss()] if isinstance(model, MoRDecoder) else []
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


def step_seconds(steps: int, cfg: MoRConfig, spec: MoRSpec | None) -> float:
    """Median seconds of `steps` training steps after one untimed step, in this process and its torch threads (for
    `rlib.grid_workers.layout_throughput`, which asks how a grid should share a CPU's cores)."""
    return _child(cfg, spec, 1, steps)["step_s"]


def measure_one(cfg: MoRConfig, spec: MoRSpec | None, warmup: int, steps: int,
                timeout_s: int = 1800) -> dict[str, float]:
    """Run `_child` in a fresh interpreter (`python -m rlib.mor.train_cost`) and return its JSON line."""
    if warmup < 1 or steps < 1:
        raise ValueError(f"warmup={warmup} and steps={steps} must be >= 1 (the first step allocates the optimizer "
                         "state and is never timed)")
    with tempfile.TemporaryDirectory(prefix="rlib-train-cost-cfg-") as tmp:
        blob = Path(tmp) / "job.pkl"
        blob.write_bytes(pickle.dumps((cfg, spec)))
        command = [sys.executable, "-m", "rlib.mor.train_cost", str(blob), "--warmup", str(warmup),
                   "--steps", str(steps)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        what = "vanilla" if spec is None else spec.label()
        raise RuntimeError(f"train-cost measurement of {what} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def train_cost_table(cfg: MoRConfig, rounds: int | None = None, warmup: int | None = None,
                     steps: int | None = None, models: dict[str, MoRSpec | None] | None = None) -> pd.DataFrame:
    """One row per model and round (the preset's `cost_rounds` rounds of `cost_warmup` untimed and `cost_steps`
    timed training steps, each in its own process, models alternating within a round): step time, peak memory over
    the baseline, state memory, and each model's ratios to the same round's first model (`models`: label -> spec,
    None for vanilla; default `MODELS`, vanilla first)."""
    models = MODELS if models is None else models
    rounds = cfg.cost_rounds if rounds is None else rounds
    warmup = cfg.cost_warmup if warmup is None else warmup
    steps = cfg.cost_steps if steps is None else steps
    if rounds < 1:
        raise ValueError(f"rounds={rounds} must be >= 1")
    rows = []
    with progress(total=rounds * len(models), desc="train cost") as bar:
        for r in range(rounds):
            first = None
            for label, spec in models.items():
                t0 = time.perf_counter()
                got = measure_one(cfg, spec, warmup, steps)
                row = {"round": r, "model": label, "nr": 0 if spec is None else spec.n_recursions,
                       "batch_size": cfg.batch_size,
                       "seq_len": cfg.seq_len, "tokens_per_step": cfg.tokens_per_step(), "warmup": warmup,
                       "steps": steps, "step_s": got["step_s"], "step_s_min": min(got["step_s_all"]),
                       "step_s_max": max(got["step_s_all"]), "peak_mib": got["peak_mib"],
                       "state_mib": got["state_mib"], "rest_mib": got["peak_mib"] - got["state_mib"],
                       "params": got["params"], "device": got["device"], "threads": got["threads"],
                       "process_s": time.perf_counter() - t0}
                first = first or row
                for key in ("step_s", "peak_mib", "state_mib", "rest_mib"):
                    row[f"{key} / vanilla"] = row[key] / first[key] if first[key] > 0 else float("nan")
                rows.append(row)
                bar.update(1)
    return pd.DataFrame(rows)


def cost_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per model: median step time and memory over rounds, and the median, min and max of its per-round ratios."""
    rows = []
    for label, part in table.groupby("model", sort=False):
        row = {"model": label, "rounds": len(part), "step_s": part["step_s"].median(),
               "peak_mib": part["peak_mib"].median(), "state_mib": part["state_mib"].median(),
               "rest_mib": part["rest_mib"].median()}
        for key in ("step_s", "peak_mib", "state_mib", "rest_mib"):
            ratios = part[f"{key} / vanilla"]
            row[f"{key} ratio"], row[f"{key} ratio lo"], row[f"{key} ratio hi"] = \
                ratios.median(), ratios.min(), ratios.max()
        rows.append(row)
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlib.mor.train_cost", description=__doc__.splitlines()[0])
    parser.add_argument("job", help="a pickled (MoRConfig, MoRSpec or None for vanilla), written by measure_one")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args(argv)
    cfg, spec = pickle.loads(Path(args.job).read_bytes())
    from rlib import threads

    threads.configure()  # the machine's cores, as a chapter's process takes them
    print(json.dumps(_child(cfg, spec, args.warmup, args.steps)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
