"""Table 8's learning rates: does layer dropout want a higher one? (LayerSkip, paper 004, Sec. 5 / 10.1, Table 8;
Sec. 8, Limitations).

The paper pretrains from scratch at a higher peak learning rate when layer dropout is on: "Following Srivastava et al.
(2014) we use higher learning rates when layer dropout is greater than 0.0", and "when pretraining from scratch,
layer dropout leads to higher accuracy when trained on higher learning rate" (Table 8: Llama 1.5B 4e-4 without,
8e-4 with layer dropout; Llama2 7B 3e-4 vs 8e-4). Sec. 8 adds that tuning it "could be tricky and time consuming".

Every recipe of the chapter's from-scratch grid trains at one peak rate (`LayerSkipConfig.lr`). This study trains
some of those recipes again at multiples of it (Table 8's ratios are 2x and 2.7x), everything else equal: same
model, seed, tokens and cosine schedule, so each run at another rate has a twin at the chapter's rate that starts
from the same weights and reads the same batches. The baseline runs at every rate too: Table 8's rates without layer
dropout are the paper's tuned ones, so the claim (`rlib.layerskip.claims.training`) compares each layer-dropout
recipe at the baseline's best rate of the study and at the next higher one; and if the baseline gains as much from
a higher rate, the rate was low for every recipe, not for layer dropout (the book's own claim).

    study = LRStudyConfig.preset(profile)       # cpu: none; cpu-long: 0.5x, 2x for baseline, LD, LD+EE, 2 seeds
    grids(cfg, study, work)                     # the runs at the other rates, for the chapter grid's pool (also=)
    results = run(cfg, study, work)             # every run at 1x (the chapter's own) and at each multiple
    lr_table(results, cfg.n_layers)             # per (recipe, multiple): the last exit, and the paired change

A run at multiple m is the chapter's run (`rlib.layerskip.experiments.run_in_slot`) with `lr` scaled, kept under
`work/lr-x<m>/` and keyed like the chapter's runs (its config and code), so the study's 1x runs are the chapter's
own cached runs and this module's source keys nothing. `python -m rlib.layerskip.lr_study --profile cpu-long` runs it
alone and prints the table and the ledger's verdicts.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rlib import experiments as run_cache
from rlib.config import ConfigError, Preset
from rlib.layerskip import experiments
from rlib.layerskip.config import RECIPES, LayerSkipConfig, LayerSkipRun

__all__ = ["CHAPTER", "LRStudyConfig", "at_multiple", "grids", "has_layer_dropout", "lr_table", "main", "run",
           "study_runs"]

CHAPTER = experiments.CHAPTER
MODULE = "rlib.layerskip.lr_study"


@dataclass(frozen=True)
class LRStudyConfig(Preset):
    """Which from-scratch recipes train again at which multiples of the chapter's peak learning rate (Table 8)."""

    multipliers: tuple[float, ...]  # of LayerSkipConfig.lr; 1 is the chapter's own run
    recipes: tuple[str, ...]  # from the chapter's recipes; "baseline" is the control
    seeds: tuple[int, ...]  # each run and its 1x twin at every seed (paired)

    PRESETS = {
        "smoke": dict(multipliers=(2.0,), recipes=("baseline", "ld_ee"), seeds=(0,)),
        # cpu: none (the chapter trains two recipes in its 40 minutes). cpu-long: the baseline, LD and LD+EE at the
        # three seeds the chapter's cpu-long grid also trains at 1x, at 0.5x and 2x. The 2026-12-05 study at the
        # chapter's former 3e-3 (benchmarks/results/ls_lr_cpu_long.md) found every recipe best at 0.5x of 0.5 / 1 / 2x,
        # so the chapter now trains at 1.5e-3 and this grid brackets it (0.75e-3, 1.5e-3, 3e-3): Table 8's claim
        # compares the LD recipes at the baseline's best rate and at twice it. Two seeds left LD's drop at 2x just
        # above their s.d. (ls_lr_cpu_long_2.md), so a third joined (ls_lr_cpu_long_3.md). 18 runs of 2.3 min each on
        # the AVX512-BF16 EPYC, about 21 min in two workers; on the AVX2 one (fp32) a seed's 6 runs and its 3 1x twins
        # took 29 min
        "cpu": dict(multipliers=(), recipes=(), seeds=()),
        "cpu-long": dict(multipliers=(0.5, 2.0), recipes=("baseline", "ld", "ld_ee"), seeds=(0, 1, 2)),
        "gpu": dict(multipliers=(0.25, 0.5, 2.0), recipes=("baseline", "ld", "ld_ee"), seeds=(0, 1, 2)),
    }

    def __post_init__(self) -> None:
        for name in ("multipliers", "recipes", "seeds"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if bool(self.multipliers) != bool(self.recipes) or bool(self.multipliers) != bool(self.seeds):
            raise ConfigError(f"multipliers={self.multipliers}, recipes={self.recipes}, seeds={self.seeds}: give all "
                              "three (a study) or none")
        bad = [m for m in self.multipliers if not (np.isfinite(m) and m > 0 and m != 1)]
        if bad or len(set(self.multipliers)) != len(self.multipliers):
            raise ConfigError(f"multipliers {list(self.multipliers)} must be distinct, positive and not 1 (1x is the "
                              "chapter's own run)")
        unknown = [r for r in self.recipes if r not in RECIPES]
        if unknown:
            raise ConfigError(f"recipes {unknown} unknown; choose from {list(RECIPES)}")
        if self.recipes and "baseline" not in self.recipes:
            raise ConfigError("recipes must include 'baseline': without it no control says whether a higher rate "
                              "helps layer dropout or every recipe")
        if self.recipes and not any(has_layer_dropout(r) for r in self.recipes):
            raise ConfigError(f"recipes {list(self.recipes)} have no layer dropout recipe: Table 8's claim is about "
                              "those (e.g. 'ld', 'ld_ee')")


def has_layer_dropout(recipe: str) -> bool:
    return RECIPES[recipe][0]


def study_runs(study: LRStudyConfig) -> list[LayerSkipRun]:
    """The study's runs at one rate: every recipe at every seed."""
    return [LayerSkipRun(recipe, seed) for seed in study.seeds for recipe in study.recipes]


def at_multiple(cfg: LayerSkipConfig, multiple: float) -> LayerSkipConfig:
    """The chapter's config with its peak learning rate scaled (everything else, warm-up and schedule, the same)."""
    return replace(cfg, lr=cfg.lr * multiple)


def _folder(work: Path, multiple: float) -> Path:
    return Path(work) / f"lr-x{multiple:g}"


def _grid(cfg: LayerSkipConfig, study: LRStudyConfig, work: Path, multiple: float) -> run_cache.Grid:
    """The study's runs at `multiple` (1: the chapter's own folder and keys, so its cached runs are read back)."""
    scaled = at_multiple(cfg, multiple) if multiple != 1 else cfg
    folder = _folder(work, multiple) if multiple != 1 else Path(work)
    return run_cache.Grid(study_runs(study), folder, functools.partial(experiments.run_in_slot, cfg=scaled),
                          context=(scaled.training_key(),), modules=experiments.CODE_MODULES,
                          desc=f"Table 8: lr x{multiple:g}")


def grids(cfg: LayerSkipConfig, study: LRStudyConfig, work: Path) -> tuple[run_cache.Grid, ...]:
    """The runs at each multiple (none without a study), for `experiments.run_grid(..., also=)`: they train in the
    chapter's pool, and `run` reads them back."""
    return tuple(_grid(cfg, study, work, m) for m in study.multipliers)


def run(cfg: LayerSkipConfig, study: LRStudyConfig, work: Path) -> list[dict[str, Any]]:
    """Train (or read back) every run of the study, at 1x and each multiple, in one worker per core; each result
    gains `lr` and `multiple`."""
    if not study.multipliers:
        return []
    cfg.text().save_vocabulary(work)
    multiples = (1.0, *study.multipliers)
    out = run_cache.run_grids([_grid(cfg, study, work, m) for m in multiples], workers="auto")
    return [{**result, "lr": cfg.lr * m, "multiple": m} for m, results in zip(multiples, out) for result in results]


def lr_table(results: list[dict[str, Any]], last: int) -> pd.DataFrame:
    """One row per (recipe, multiple): the last exit's seed-mean NLL, perplexity and top-1 accuracy, and for a
    multiple other than 1 the paired change against the same recipe and seed at 1x (`d_acc`, `d_nll`: mean over
    seeds, with the smallest and largest seed's change)."""
    rows = []
    for r in results:
        exits = pd.DataFrame(r["exits"]).set_index("exit_layer")
        rows.append({"recipe": r["recipe"], "seed": r["seed"], "multiple": r["multiple"], "lr": r["lr"],
                     "nll": float(exits.loc[last, "nll"]), "acc": float(exits.loc[last, "top1_acc"])})
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    twin = df[df["multiple"] == 1].set_index(["recipe", "seed"])
    out = []
    for (recipe, multiple), group in df.groupby(["recipe", "multiple"], sort=False):
        row = {"recipe": recipe, "layer_dropout": has_layer_dropout(recipe), "multiple": multiple,
               "lr": group["lr"].iloc[0], "seeds": len(group), "nll_last": group["nll"].mean(),
               "ppl_last": float(np.exp(group["nll"].mean())), "acc_last": group["acc"].mean(),
               "acc_sd": group["acc"].std() if len(group) > 1 else np.nan}
        if multiple != 1:
            keys = list(zip(group["recipe"], group["seed"]))
            d_acc = group["acc"].to_numpy() - twin.loc[keys, "acc"].to_numpy()
            d_nll = group["nll"].to_numpy() - twin.loc[keys, "nll"].to_numpy()
            row.update(d_acc=float(d_acc.mean()), d_acc_lo=float(d_acc.min()), d_acc_hi=float(d_acc.max()),
                       d_nll=float(d_nll.mean()), d_nll_lo=float(d_nll.min()), d_nll_hi=float(d_nll.max()))
        out.append(row)
    return pd.DataFrame(out).sort_values(["recipe", "multiple"], key=_recipe_order).reset_index(drop=True)


def _recipe_order(column: pd.Series) -> pd.Series:
    return column.map(list(RECIPES).index) if column.name == "recipe" else column


def main(argv: list[str] | None = None) -> int:
    from rlib.layerskip import claims
    from rlib.layerskip.config import AdaptConfig, ParseConfig
    from rlib.study_cli import run_study

    def table(profile: str) -> dict[str, pd.DataFrame]:
        cfg = LayerSkipConfig.preset(profile)
        study = importlib.import_module(MODULE)  # the grid's function must pickle by its module name for the workers
        results = study.run(cfg, LRStudyConfig.preset(profile), run_cache.work_dir(profile, CHAPTER))
        return {"lr_sensitivity": lr_table(results, cfg.n_layers)}

    def judge(tables: dict[str, pd.DataFrame], profile: str) -> pd.DataFrame:
        configs = (LayerSkipConfig.preset(profile), AdaptConfig.preset(profile), ParseConfig.preset(profile))
        return claims.judge(tables, *configs, profile).finish()

    return run_study(argv, "python -m rlib.layerskip.lr_study", __doc__.splitlines()[0],
                     lambda profile: bool(LRStudyConfig.preset(profile).multipliers), table, judge,
                     ("ls.tab8.ld_needs_higher_lr", "ls.ours.tab8_lr_gain_is_ld_own"))


if __name__ == "__main__":
    raise SystemExit(main())
