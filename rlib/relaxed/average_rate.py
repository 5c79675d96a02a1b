"""The relaxed Average model at its own peak rate (Relaxed Recursive Transformers, paper 000, Sec. 3.5, Fig. 4, 6,
G.1; App. E).

App. E uptrains every model with one recipe: "AdamW ... with a learning rate of 2e-4, utilizing a cosine annealing
learning rate scheduler". The book's chapters 01 and 02 do too, at the rate chapter 01's validation sweep chose for
the mean of its starts (`rlib.recursive.lr_sweep`). That sweep finds the recursive Average init's own best rate above
the chosen one, and at the chosen rate the relaxed Average model's training loss climbs (Fig. G.1's curves), so the
chapter's Average claims (Sec. 3.5's Average over Stepwise, Fig. 4, Fig. 6, Fig. G.1) could not tell the rate from the
init as the cause of the Average's deficit. This study trains the main relaxed model (Average, SVD LoRA at the
largest rank) again at multiples of the chapter's rate, everything else equal (same weights, batches, steps, warm-up
and cosine schedule). The claims set the Average at the rate of lowest *validation* loss among its runs (the chapter's
included; never the held-out windows they read) against its rivals at the chapter's rate, which chapter 01's sweep
finds best for the Stepwise and Lower inits (`rlib.relaxed.claims._own_rate_cause`).

    study = AverageRateConfig.preset(profile)   # cpu: none; cpu-long: 0.2x, 3x and 10x (2e-4, 3e-3, 1e-2)
    results = run(cfg, study, work)             # the runs at each multiple (the 1x run is the chapter's own)
    rate_table(results, chapter_results, cfg, work)

A run at multiple m is the chapter's run (`rlib.relaxed.experiments.variant_in_slot`) with `lr` scaled, kept under
`work/lr-x<m>/` and keyed like the chapter's runs (its config and code), so this module's source keys nothing.
`python -m rlib.relaxed.average_rate --profile cpu-long` runs it alone and prints the table and the verdicts.
"""

from __future__ import annotations

import functools
import importlib
import math
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from rlib import experiments as run_cache
from rlib.config import ConfigError, Preset
from rlib.relaxed import experiments
from rlib.relaxed.config import RelaxedConfig, RelaxedVariant, main_variants

__all__ = ["CLAIMS", "AverageRateConfig", "at_multiple", "main", "rate_table", "run", "study_variant",
           "variant_in_slot"]

MODULE = "rlib.relaxed.average_rate"

# the claims whose diagnosis reads the study (rlib.relaxed.claims._average_gap_cause)
CLAIMS = ("rrt.s3_5.relaxed_avg_beats_recursive_step", "rrt.fig4.relaxed_interpolates_to_full",
          "rrt.fig6.average_best_with_lora")


@dataclass(frozen=True)
class AverageRateConfig(Preset):
    """At which multiples of the chapter's peak rate the main relaxed model trains again."""

    multipliers: tuple[float, ...]  # of RelaxedConfig.lr; 1 (the chapter's own run) is always read back

    PRESETS = {
        "smoke": dict(multipliers=(3.0,)),
        # cpu: none (chapters 01 + 02 fit issue 23's hour). cpu-long: 3x, the rate chapter 01's sweep finds best for
        # the recursive Average init (3e-3; 1e-2 is worse there), 10x, and 0.2x, the paper's own 2e-4: the relaxed
        # model's best of 1x / 3x / 10x was the chapter's own rate (2026-12-07), so the grid brackets it from below;
        # three runs of 48 steps, about 2.5 min each
        "cpu": dict(multipliers=()),
        "cpu-long": dict(multipliers=(0.2, 3.0, 10.0)),
        "gpu": dict(multipliers=(0.4, 3.0)),
        "paper": dict(multipliers=()),
    }

    def __post_init__(self) -> None:
        object.__setattr__(self, "multipliers", tuple(self.multipliers))
        bad = [m for m in self.multipliers if not (math.isfinite(m) and m > 0 and m != 1)]
        if bad or len(set(self.multipliers)) != len(self.multipliers):
            raise ConfigError(f"multipliers {list(self.multipliers)} must be distinct, positive and not 1 (1x is the "
                              "chapter's own run)")


def study_variant(cfg: RelaxedConfig) -> RelaxedVariant:
    """The run the study trains at each rate: the chapter's main relaxed model (Average, SVD at the largest rank)."""
    return main_variants(cfg)[1]


def at_multiple(cfg: RelaxedConfig, multiple: float) -> RelaxedConfig:
    """The chapter's config with its peak learning rate scaled (warm-up, schedule and everything else the same)."""
    return replace(cfg, lr=cfg.lr * multiple)


def _folder(work: Path, multiple: float) -> Path:
    return Path(work) / f"lr-x{multiple:g}"


def variant_in_slot(variant: RelaxedVariant, slot: run_cache.RunSlot, cfg: RelaxedConfig, work: Path
                    ) -> dict[str, Any]:
    """The chapter's run (`rlib.relaxed.experiments.variant_in_slot`) without its saved model: the chapter keeps the
    main relaxed model for its post-training runs, which the study does not train (a model per rate saved for
    nothing)."""
    result = experiments.variant_in_slot(variant, slot, cfg, work, teacher_dir=None, chapter01=None)
    shutil.rmtree(slot.folder / "model", ignore_errors=True)
    return result


def _grid(cfg: RelaxedConfig, work: Path, multiple: float) -> run_cache.Grid:
    scaled, folder = at_multiple(cfg, multiple), _folder(work, multiple)
    # the function by its module's name, so that it pickles for the workers when this module runs as __main__
    compute = functools.partial(importlib.import_module(MODULE).variant_in_slot, cfg=scaled, work=folder)
    return run_cache.Grid([study_variant(cfg)], folder, compute, context=(scaled.grid_context(),),
                          modules=experiments.CODE_MODULES, desc=f"Average at lr x{multiple:g}")


def run(cfg: RelaxedConfig, study: AverageRateConfig, work: Path) -> list[dict[str, Any]]:
    """Train (or read back) the main relaxed model at each multiple, one worker per core; each result gains `lr`,
    `multiple` and `folder` (where its training curve lies)."""
    if not study.multipliers:
        return []
    out = run_cache.run_grids([_grid(cfg, work, m) for m in study.multipliers], workers="auto")
    return [{**result, "lr": cfg.lr * m, "multiple": m, "folder": str(_folder(work, m))}
            for m, results in zip(study.multipliers, out) for result in results]


def _curve_row(folder: Path, result: dict[str, Any]) -> dict[str, float]:
    """The run's first logged training loss, its peak and the peak's step, and its last validation loss."""
    curve = run_cache.training_curves(folder, [result])
    if curve.empty:
        return {}
    loss = curve.dropna(subset=["loss"]).sort_values("step")
    val = curve.dropna(subset=["val_loss"]).sort_values("step")
    peak = loss.loc[loss["loss"].idxmax()]
    return {"first_loss": float(loss["loss"].iloc[0]), "peak_loss": float(peak["loss"]),
            "peak_step": int(peak["step"]), "climbs": bool(peak["loss"] > loss["loss"].iloc[0]),
            "last_val_loss": float(val["val_loss"].iloc[-1]) if len(val) else math.nan}


def rate_table(results: list[dict[str, Any]], chapter_results: list[dict[str, Any]], cfg: RelaxedConfig,
               work: Path) -> pd.DataFrame:
    """One row per rate of the main relaxed model: the chapter's own run (multiple 1) and the study's. Columns: lr,
    multiple, the held-out NLL after uptraining on each evaluation corpus, the last validation loss (what a rate would
    be chosen on), and the training curve's first and peak loss (`climbs`: the peak lies above the first). Empty
    without a study."""
    if not results:
        return pd.DataFrame()
    name = study_variant(cfg).name
    own = [r for r in chapter_results if r["name"] == name]
    if not own:
        raise ConfigError(f"the chapter's results have no {name} run; run the chapter's grid (run_grid) first")
    rows = [(own[0], 1.0, cfg.lr, Path(work))] + [(r, r["multiple"], r["lr"], Path(r["folder"])) for r in results]
    out = []
    for result, multiple, lr, folder in rows:
        nll = {f"after {k}": v for k, v in result["after"].items() if k.startswith("nll[")}
        out.append({"variant": name, "lr": lr, "multiple": multiple, **nll, **_curve_row(folder, result)})
    return pd.DataFrame(out).sort_values("lr").reset_index(drop=True)


def main(argv: list[str] | None = None) -> int:
    from rlib.relaxed import claims, plain_runs
    from rlib.study_cli import run_study

    def tables(profile: str) -> dict[str, pd.DataFrame]:
        # the chapter's plainly uptrained runs (the claims' rivals; cached where the chapter ran), then the study's
        runs = plain_runs.load(profile)
        cfg, work = runs.cfg, runs.work
        rates = rate_table(run(cfg, AverageRateConfig.preset(profile), work), runs.results, cfg, work)
        return plain_runs.average_gap_tables(runs, profile, rates)

    def judge(written, profile: str) -> pd.DataFrame:
        return claims.judge(dict(written), RelaxedConfig.preset(profile), profile).finish()

    return run_study(argv, "python -m rlib.relaxed.average_rate", __doc__.splitlines()[0],
                     lambda profile: bool(AverageRateConfig.preset(profile).multipliers), tables, judge, CLAIMS)


if __name__ == "__main__":
    raise SystemExit(main())
