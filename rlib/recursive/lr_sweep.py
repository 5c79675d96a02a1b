"""How chapter 01 picks its learning rate: a short sweep on the *validation* split, before any claim is measured.

The paper (Relaxed Recursive Transformers, Sec. 3.1 and Appendix E) uptrains every model, recursive or reduced-size
from scratch, with one recipe and one peak learning rate. A profile that uptrains for a few dozen steps instead of
15B tokens cannot take the paper's value on faith, so the book chooses it the usual way: uptrain the main recursive
model (Stepwise, B = init_loops) and the same-size model from scratch at a few peak rates, with everything else as
in the chapter, and read the loss on the uptraining corpus's validation windows (never the test windows that the
chapter's tables and claims use). The rate with the lowest mean validation loss over both starts is written into
the profile's preset (`RecursiveConfig.lr`), and this module's CSV is committed beside the data folder (`data/tuning/`).

    python -m rlib.recursive.lr_sweep --profile cpu --lrs 2e-4 1e-3 3e-3     # ~9 min on 2 cores for the cpu profile

Each run is cached like the chapter's own (`rlib.experiments.run_grid`), so an interrupted sweep resumes.
"""

from __future__ import annotations

import argparse
import dataclasses
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
    """The two starts the rate is chosen on: the main recursive model and the same-size model from scratch."""
    return [Variant("recursive", cfg.init_loops, "stepwise", seed=cfg.seeds[0]),
            Variant("scratch", cfg.init_loops, seed=cfg.seeds[0])]


def _run(point: SweepPoint, cfg: RecursiveConfig, source, slot: experiments.RunSlot) -> dict:
    variant = point.variant
    model = variant.build(source)
    config = dataclasses.replace(cfg.train_config(variant), lr=point.lr)
    result = train(model, rx.train_windows(cfg, cfg.train_corpus), config, slot.train_dir,
                   val_windows=rx.val_windows(cfg, cfg.train_corpus))
    slot.drop_checkpoint()
    return {"variant": variant.name, "kind": variant.kind, "lr": point.lr, "val_loss": result.val_loss,
            "train_loss": result.train_loss, "tokens": result.tokens, "seconds": result.seconds}


def sweep(cfg: RecursiveConfig, lrs: list[float], work: Path) -> pd.DataFrame:
    """Validation loss after `cfg.steps` steps for each start and peak rate; one row per run."""
    if not lrs or any(lr <= 0 for lr in lrs):
        raise ValueError(f"lrs={lrs}: give one or more positive learning rates")
    source = rx.load_source(cfg)
    points = [SweepPoint(v, lr) for v in sweep_variants(cfg) for lr in lrs]
    rows = experiments.run_grid(points, work, lambda p, slot: _run(p, cfg, source, slot), context=(cfg,),
                                modules=(*rx.CODE_MODULES, __name__), desc="lr sweep")
    return pd.DataFrame(rows)


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


def summary(table: pd.DataFrame | None, used_lr: float) -> pd.DataFrame:
    """Validation loss per rate (rows) and start (columns), the mean, and which rate the profile uses."""
    if table is None:
        return pd.DataFrame([{"lr": used_lr, "note": "no sweep committed for this profile"}])
    wide = table.pivot_table(index="lr", columns="kind", values="val_loss")
    wide.columns = [f"val_loss[{c}]" for c in wide.columns]
    wide["mean"] = wide.mean(axis=1)
    wide["chosen"] = ["<- best" if lr == best_lr(table) else "" for lr in wide.index]
    wide["used"] = ["<- used" if abs(lr - used_lr) < 1e-12 else "" for lr in wide.index]
    return wide.reset_index()


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--lrs", type=float, nargs="+", default=[2e-4, 1e-3, 3e-3])
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
