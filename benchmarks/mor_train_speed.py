"""Training step time and peak memory of Mixture-of-Recursions against vanilla at equal tokens (paper 001,
Sec. 3.1: MoR-2 trains in 19% less time with 25% less peak memory than vanilla at 360M, 2K context).

Chapter 03 measures the paper's pair (vanilla, MoR-2 expert-choice) with `rlib.mor.train_cost`; this script runs the
same measurement over more models (vanilla, Recursive-3, MoR-2/3 expert-choice, MoR-3 token-choice, MoR-3 with KV
sharing) at chapter 03's shapes of the chosen profile. Each model trains the chapter's own step (`rlib.train.train`
with the chapter's recipe and precision) in a fresh process per round, which also reads its peak memory (VmHWM on a
CPU, the peak allocated CUDA memory on a GPU); the models alternate within a round, and the ratios to vanilla are per
round, summarised as median [min, max], all from this one invocation.

    python benchmarks/mor_train_speed.py                         # chapter 03's cpu shapes, 3 rounds
    python benchmarks/mor_train_speed.py --profile gpu --steps 20 --out benchmarks/results/mor_train_<gpu>.csv
    python benchmarks/mor_train_speed.py --side-by-side 2        # grid layouts on a CPU (below)

`--side-by-side W` asks instead how a grid of these runs should share a CPU's W cores: the steps per second of one
process with W torch threads against W one-thread processes stepping at once (`rlib.grid_workers`' layout), for
vanilla and MoR-3 EC, measured in this invocation.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

from rlib.mor import MoRSpec  # noqa: E402
from rlib.mor.config import MoRConfig  # noqa: E402

MODELS: dict[str, MoRSpec | None] = {
    "vanilla": None,
    "recursive-3": MoRSpec.recursive(3),
    "mor-2-ec": MoRSpec.expert(2),
    "mor-3-ec": MoRSpec.expert(3),
    "mor-3-tc": MoRSpec.token(3),
    "mor-3-ec-kvshare": MoRSpec.expert(3, kv="share"),
}


def side_by_side(cfg: MoRConfig, steps: int, workers: int) -> None:
    """Steps per second of one `workers`-thread process against `workers` one-thread processes at once."""
    from rlib.grid_workers import layout_throughput
    from rlib.mor.train_cost import step_seconds

    for name in ("vanilla", "mor-3-ec"):
        row = layout_throughput(functools.partial(step_seconds, cfg=cfg, spec=MODELS[name]), steps, workers)
        print(f"{name}: one {workers}-thread process {row['threaded_steps_per_s']:.3f} steps/s "
              f"({row['threaded_s']:.3f} s/step); {workers} one-thread processes at once "
              f"{row['workers_steps_per_s']:.3f} steps/s (each {statistics.median(row['worker_s']):.3f} s/step): "
              f"{row['ratio']:.2f}x the throughput", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--steps", type=int, default=4, help="timed steps per process, after --warmup untimed ones")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="paired rounds (every model once per round)")
    parser.add_argument("--out", default=None, help="also write the per-round table as CSV here")
    parser.add_argument("--side-by-side", type=int, default=0, metavar="WORKERS",
                        help="compare one WORKERS-thread process with WORKERS one-thread processes at once")
    args = parser.parse_args()
    cfg = MoRConfig.preset(args.profile)
    if args.side_by_side:
        side_by_side(cfg, args.steps, args.side_by_side)
        return
    from rlib.mor.train_cost import cost_summary, train_cost_table

    table = train_cost_table(cfg, rounds=args.rounds, warmup=args.warmup, steps=args.steps, models=MODELS)
    summary = cost_summary(table)
    columns = ["model", "rounds", "step_s", "peak_mib", "state_mib", "step_s ratio", "step_s ratio lo",
               "step_s ratio hi", "peak_mib ratio", "peak_mib ratio lo", "peak_mib ratio hi"]
    print(f"{cfg.tokens_per_step():,} tokens a step on {table['device'].iloc[0]} ({table['threads'].iloc[0]} "
          f"threads), precision {cfg.precision}; ratios: median [min, max] over {args.rounds} paired rounds")
    print(summary[columns].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.out, index=False)


if __name__ == "__main__":
    main()
