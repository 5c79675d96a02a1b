"""Fig. 4a's decode speed-ups under two workloads on the same trained models (Mixture-of-Recursions, paper 001,
Sec. 3.3, App. D): every request generating the same number of tokens (chapter 03's workload before 2026-12-06)
against App. D's lengths drawn from a normal distribution (`rlib.mor.throughput.LENGTH_SD` x the mean).

Chapter 03's `throughput_table` runs once per workload in alternating rounds (equal, App. D, equal, ...), each round
timing every model back to back, so each speed-up is a ratio to vanilla within one round; the table gives each
workload's median [min, max] over its rounds and the MoR models' mean recursion depth. It reads the chapter's trained
runs from its cache (`runs/.work/<profile>/03_mixture_of_recursions/`) and trains nothing new when they are there.

    python benchmarks/mor_decode_lengths.py --profile cpu --rounds 3 --out benchmarks/results/mor_decode_lengths_cpu.md
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import pandas as pd  # noqa: E402

from rlib import experiments as grid  # noqa: E402
from rlib.mor import budget_sweep, config, experiments, throughput, vanilla_kv  # noqa: E402

WORKLOADS = {"equal lengths": 0.0, "App. D normal lengths": throughput.LENGTH_SD}


def measure(profile: str, rounds: int) -> pd.DataFrame:
    """One row per model and batch setting: each workload's speed-up over vanilla, median [min, max] over rounds."""
    cfg = config.MoRConfig.preset(profile)
    work = grid.work_dir(profile, "03_mixture_of_recursions")
    sweep_cfg = config.BudgetSweepConfig.preset(profile)
    results = experiments.run_grid(cfg, work, also=(*budget_sweep.grids(cfg, sweep_cfg, work),
                                                    *vanilla_kv.grids(cfg, vanilla_kv.VanillaKVConfig.preset(profile),
                                                                      work)))
    frames = []
    for i in range(rounds):
        for workload, sd in WORKLOADS.items():
            frame = throughput.throughput_table(cfg, work, results, repeats=1, length_sd=sd)
            frames.append(frame.assign(workload=workload, round=i))
            print(f"round {i + 1}/{rounds}, {workload}: done", flush=True)
    table = pd.concat(frames)
    rows = []
    for (model, setting), group in table.groupby(["model", "setting"], sort=False):
        row = {"model": model, "setting": setting, "max_batch": int(group["max_batch"].iloc[0])}
        for workload in WORKLOADS:
            part = group[group["workload"] == workload]
            s = part["speedup_vs_vanilla"]
            row[f"{workload}: speed-up"] = f"{s.median():.3f} [{s.min():.3f}, {s.max():.3f}]"
            row[f"{workload}: depth"] = round(float(part["mean_depth"].median()), 3)
            row[f"{workload}: new tokens mean / sd"] = (f"{part['new_tokens_mean'].iloc[0]:.1f} / "
                                                      f"{part['new_tokens_sd'].iloc[0]:.1f}")
        rows.append(row)
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="cpu", choices=sorted(config.MoRConfig.PRESETS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="write the table as Markdown here")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds} must be >= 1")
    table = measure(args.profile, args.rounds)
    text = table.to_markdown(index=False)
    print(text)
    if args.out is not None:
        args.out.write_text(f"# Fig. 4a speed-ups, equal vs App. D lengths ({args.profile}, {args.rounds} alternating "
                            f"rounds)\n\n{text}\n")


if __name__ == "__main__":
    main()
