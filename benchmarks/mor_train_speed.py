"""Training step time and peak memory of Mixture-of-Recursions against vanilla at equal tokens (paper 001,
Sec. 3.1: MoR-2 trains in 19% less time with 25% less peak memory than vanilla at 360M, 2K context).

Each model (vanilla, Recursive, MoR-2/3 expert-choice, MoR-3 token-choice, MoR-3 with KV sharing; chapter 03's
shapes of the chosen profile) trains for a few AdamW steps on the same random batch in its own subprocess, so
that the peak resident set (VmHWM) belongs to that model alone; on a GPU the peak allocated CUDA memory is read
instead. The ratios against vanilla come from one invocation of this script.

    python benchmarks/mor_train_speed.py                         # chapter 03's cpu shapes, bf16 autocast
    python benchmarks/mor_train_speed.py --profile gpu --steps 20 --out benchmarks/results/mor_train_<gpu>.csv
    python benchmarks/mor_train_speed.py --side-by-side 2        # grid layouts on a CPU (below)

`--side-by-side W` asks instead how a grid of these runs should share a CPU's W cores: the steps per second of one
process with W torch threads against W one-thread processes stepping at once (`rlib.grid_workers`' layout), for
vanilla and MoR-3 EC, measured in this invocation.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

MODELS = {
    "vanilla": None,
    "recursive-3": ("recursive", 3),
    "mor-2-ec": ("expert", 2),
    "mor-3-ec": ("expert", 3),
    "mor-3-tc": ("token", 3),
    "mor-3-ec-kvshare": ("expert-share", 3),
}


def _peak_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child(profile: str, name: str, steps: int, vocab: int | None) -> dict:
    import torch
    import torch.nn.functional as F

    from rlib.mor import MoRSpec, build, vanilla
    from rlib.mor.config import MoRConfig, unrolled_layers

    cfg = MoRConfig.preset(profile)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    base = cfg.base_config(vocab or cfg.vocab_size or 49152)
    kind = MODELS[name]
    if kind is None:
        model = vanilla(base, cfg.n_layers)
    else:
        routing, nr = kind
        spec = {"recursive": MoRSpec.recursive, "expert": MoRSpec.expert, "token": MoRSpec.token,
                "expert-share": lambda n: MoRSpec.expert(n, kv="share")}[routing](nr)
        model = build(base, unrolled_layers(spec, cfg.n_layers), spec)
    model = model.to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    shape = (cfg.micro_batch_size, cfg.seq_len)
    x = torch.randint(0, base.vocab_size, shape, generator=torch.Generator().manual_seed(0)).to(device)
    baseline = _peak_mib()
    times = []
    for _ in range(steps + 1):  # the first step warms up
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=cfg.precision == "bf16"):
            logits = model(x)
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), x[:, 1:].flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else _peak_mib() - baseline
    return {"model": name, "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
            "step_s": statistics.median(times[1:]), "tokens_per_step": cfg.micro_batch_size * cfg.seq_len,
            "peak_mib": peak, "params_m": sum(p.numel() for p in model.parameters()) / 1e6}


def _step_seconds(steps: int, profile: str, name: str) -> float:
    """Seconds per training step of model `name` (in this process's torch threads)."""
    return child(profile, name, steps, None)["step_s"]


def side_by_side(profile: str, steps: int, workers: int) -> None:
    """Steps per second of one `workers`-thread process against `workers` one-thread processes at once."""
    import functools

    from rlib.grid_workers import layout_throughput

    for name in ("vanilla", "mor-3-ec"):
        row = layout_throughput(functools.partial(_step_seconds, profile=profile, name=name), steps, workers)
        print(f"{name}: one {workers}-thread process {row['threaded_steps_per_s']:.3f} steps/s "
              f"({row['threaded_s']:.3f} s/step); {workers} one-thread processes at once "
              f"{row['workers_steps_per_s']:.3f} steps/s (each {statistics.median(row['worker_s']):.3f} s/step): "
              f"{row['ratio']:.2f}x the throughput", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--vocab", type=int, default=None, help="vocabulary size (default: the preset's)")
    parser.add_argument("--out", default=None, help="also write the table as CSV here")
    parser.add_argument("--side-by-side", type=int, default=0, metavar="WORKERS",
                        help="compare one WORKERS-thread process with WORKERS one-thread processes at once")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.profile, args.child, args.steps, args.vocab)))
        return
    if args.side_by_side:
        side_by_side(args.profile, args.steps, args.side_by_side)
        return
    import pandas as pd

    rows = []
    for name in MODELS:
        cmd = [sys.executable, __file__, "--profile", args.profile, "--steps", str(args.steps), "--child", name]
        if args.vocab:
            cmd += ["--vocab", str(args.vocab)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"{name}: {rows[-1]['step_s']:.3f} s/step, peak {rows[-1]['peak_mib']:.0f} MiB", flush=True)
    table = pd.DataFrame(rows)
    base = table.set_index("model").loc["vanilla"]
    table["time_vs_vanilla"] = table["step_s"] / base["step_s"]
    table["memory_vs_vanilla"] = table["peak_mib"] / base["peak_mib"]
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.out, index=False)


if __name__ == "__main__":
    main()
