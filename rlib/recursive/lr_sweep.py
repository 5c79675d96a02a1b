"""How chapter 01 picks its learning rate: a short sweep on the *validation* split, before any claim is measured.

The paper (Relaxed Recursive Transformers, Sec. 3.1 and Appendix E) uptrains every model, recursive or reduced-size
from scratch, with one recipe and one peak learning rate. A profile that uptrains for a few dozen steps instead of
15B tokens cannot take the paper's value on faith, so the book chooses it the usual way: uptrain the recursive model
of every pretrained initialization the chapter compares (Stepwise, Average, Lower at B = init_loops), the same-size
model from scratch and the full-size model at a few peak rates, with everything else as in the chapter, and read the
loss on the uptraining corpus's validation windows (never the test windows that the chapter's tables and claims use).
The rate with the lowest mean validation loss over the starts is written into the profile's preset
(`RecursiveConfig.lr`), and this module's CSV is committed beside the data folder (`data/tuning/`). Until 2026-12-07
the sweep read the Stepwise and scratch starts only; at the rate they chose the Average init's loss climbed (chapters
01-02) and the full model got worse on its own uptraining corpus (Table 2).

    python -m rlib.recursive.lr_sweep --profile cpu --lrs 2e-4 1e-3 3e-3 1e-2    # ~22 min, 20 runs, on 2 cores (cpu)

The committed sweep (2026-12-07) tried 1e-2 too, so that each start's own best rate lies inside the grid (the
Average init's, 3e-3, had been its edge); its other 15 runs, trained again, gave the same losses to the last digit.

Each run is cached like the chapter's own (`rlib.experiments.run_grid`, keyed on the chapter's code and on the one
function here that trains a point, `recipe_source`), so an interrupted sweep resumes.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from rlib import experiments, paths
from rlib.config import runs_profile
from rlib.recursive import experiments as rx
from rlib.recursive.config import RecursiveConfig, Variant
from rlib.train import train

DEFAULT_OUT = paths.DATA / "tuning" / "01_lr_sweep.csv"  # committed: an input of the chapter, like its presets


@dataclass(frozen=True)
class SweepPoint:
    """One run of the sweep: a start and a peak learning rate."""

    variant: Variant
    lr: float

    @property
    def name(self) -> str:
        return f"{self.variant.name}-lr{self.lr:g}"


def sweep_variants(cfg: RecursiveConfig) -> list[Variant]:
    """The starts the rate is chosen on: the recursive model of each pretrained init of `cfg.inits` (Stepwise first,
    the main model), the same-size model from scratch (which stands for the random starts) and the full-size model,
    which the paper uptrains with the same recipe (Table 2)."""
    pretrained = sorted((i for i in cfg.inits if i != "random"), key=lambda i: i != "stepwise")
    return [*(Variant("recursive", cfg.init_loops, init, seed=cfg.seeds[0]) for init in pretrained),
            Variant("scratch", cfg.init_loops, seed=cfg.seeds[0]), Variant("full")]


def start_name(variant: Variant) -> str:
    """The sweep's column name of a start: the init of a recursive model, else its kind ("scratch")."""
    return variant.init if variant.kind == "recursive" else variant.kind


def _run(point: SweepPoint, cfg: RecursiveConfig, source, slot: experiments.RunSlot) -> dict:
    variant = point.variant
    model = variant.build(source)
    config = dataclasses.replace(cfg.train_config(variant), lr=point.lr)
    result = train(model, rx.train_windows(cfg, cfg.train_corpus), config, slot.train_dir,
                   val_windows=rx.val_windows(cfg, cfg.train_corpus))
    slot.drop_checkpoint()
    return {"variant": variant.name, "kind": variant.kind, "start": start_name(variant), "lr": point.lr,
            "val_loss": result.val_loss,
            "train_loss": result.train_loss, "tokens": result.tokens, "seconds": result.seconds}


def sweep(cfg: RecursiveConfig, lrs: list[float], work: Path) -> pd.DataFrame:
    """Validation loss after `cfg.steps` steps for each start and peak rate; one row per run."""
    if not lrs or any(lr <= 0 for lr in lrs):
        raise ValueError(f"lrs={lrs}: give one or more positive learning rates")
    source = rx.load_source(cfg)
    points = [SweepPoint(v, lr) for v in sweep_variants(cfg) for lr in lrs]
    rows = experiments.run_grid(points, work, lambda p, slot: _run(p, cfg, source, slot),
                                context=(cfg, recipe_source()), modules=rx.CODE_MODULES, desc="lr sweep")
    return pd.DataFrame(rows)


def recipe_source() -> str:
    """The source of the function that trains a sweep point (`_run`), part of each run's cache key beside the
    chapter's code (`rlib.recursive.experiments.CODE_MODULES`): what decides a run, while the rest of this module
    (its summaries and docstrings) keys nothing. Until 2026-12-07 the whole module did, so a docstring edit
    retrained all 20 runs."""
    return inspect.getsource(_run)


def best_lr(table: pd.DataFrame) -> float:
    """The rate with the lowest validation loss averaged over the starts."""
    return float(table.groupby("lr")["val_loss"].mean().idxmin())


def committed(profile: str, path: Path = DEFAULT_OUT) -> pd.DataFrame | None:
    """The committed sweep of `profile` (of the profile whose runs it shares: cpu-long uses cpu's rate), or None
    when that profile was never swept."""
    if not path.exists():
        return None
    table = pd.read_csv(path)
    table = table[table["profile"] == runs_profile(profile)]
    return table.reset_index(drop=True) if len(table) else None


def _start_column(table: pd.DataFrame) -> str:
    """The column naming each row's start ("kind" in a sweep written before 2026-12-07, which has no "start")."""
    return "start" if "start" in table.columns and table["start"].notna().all() else "kind"


def starts(table: pd.DataFrame) -> list[str]:
    """The sweep's starts in its order."""
    return list(dict.fromkeys(table[_start_column(table)]))


def summary(table: pd.DataFrame | None, used_lr: float) -> pd.DataFrame:
    """Validation loss per rate (rows) and start (columns), the mean, which starts reach their own lowest loss at the
    rate (`best_for`), and which rate the profile uses."""
    if table is None:
        return pd.DataFrame([{"lr": used_lr, "note": "no sweep committed for this profile"}])
    wide = table.pivot_table(index="lr", columns=_start_column(table), values="val_loss")[starts(table)]
    own_best = wide.idxmin()  # start -> its own best rate
    wide.columns = [f"val_loss[{c}]" for c in wide.columns]
    wide["mean"] = wide.mean(axis=1)
    wide["best_for"] = [", ".join(s for s, lr_s in own_best.items() if lr_s == lr) for lr in wide.index]
    wide["chosen"] = ["<- best" if lr == best_lr(table) else "" for lr in wide.index]
    wide["used"] = ["<- used" if abs(lr - used_lr) < 1e-12 else "" for lr in wide.index]
    return wide.reset_index()


def start_losses(summary_table: pd.DataFrame | None, start: str) -> dict[float, float]:
    """{rate: validation loss} of `start` in a `summary` table (its column val_loss[<start>]); {} where there is no
    table or the sweep did not try that start."""
    column = f"val_loss[{start}]"
    if summary_table is None or column not in summary_table.columns:
        return {}
    return {float(lr): float(v) for lr, v in zip(summary_table["lr"], summary_table[column]) if pd.notna(v)}


def own_best(summary_table: pd.DataFrame | None, start: str) -> float | None:
    """The rate at which `start` reaches its lowest validation loss in a `summary` table; None where it has none."""
    losses = start_losses(summary_table, start)
    return min(losses, key=losses.get) if losses else None


def summary_starts(summary_table: pd.DataFrame | None) -> list[str]:
    """The starts a `summary` table has columns for, in its order."""
    if summary_table is None:
        return []
    return [c.removeprefix("val_loss[").removesuffix("]") for c in summary_table.columns if c.startswith("val_loss[")]


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--lrs", type=float, nargs="+", default=[2e-4, 1e-3, 3e-3, 1e-2])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    cfg = RecursiveConfig.preset(args.profile)
    table = sweep(cfg, args.lrs, experiments.work_dir(args.profile, "01_lr_sweep"))
    table.insert(0, "profile", args.profile)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.out.exists():  # keep the other profiles' sweeps
        others = pd.read_csv(args.out)
        table = pd.concat([others[others["profile"] != args.profile], table], ignore_index=True)
    table.to_csv(args.out, index=False)
    table = table[table["profile"] == args.profile]
    print(table.to_markdown(index=False, floatfmt=".4g"))
    print(f"best lr (mean validation loss over starts): {best_lr(table):g}; the preset uses {cfg.lr:g}")


if __name__ == "__main__":
    main()
