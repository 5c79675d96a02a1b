"""Table 2's data-shift pair at the paper's own learning rate (Relaxed Recursive Transformers, paper 000, §3.2,
Table 2, App. E): is the full model's loss on its own uptraining corpus the chapter's rate's?

Table 2's point needs the uptrained full-size model to get *better* on its uptraining corpus (Gemma's SlimPajama
perplexity 11.46 -> 10.76) while its few-shot average falls (61.7 -> 60.1): a distribution shift, not damage. The
paper uptrains every model with one recipe, AdamW at a peak 2e-4 with cosine annealing (App. E). The chapter uses one
rate for every start too, the sweep's choice on the mean over its starts (`rlib.recursive.lr_sweep`: 1e-3 in cpu);
there the full model's held-out perplexity rises on its own corpus, which no shift explains, while the sweep's full
model alone does best at 2e-4, the paper's rate. This study measures the rate directly: the data-shift pair (the full
model uptrained on `train_corpus` and on `shift_corpus`, the grid's first seed) trains again at `PAPER_RATE`,
everything else equal (steps, tokens, batches, warm-up, schedule, seed, evaluation windows and tasks), and
`shift_rate_table` reads both rates' rows against the source model.

Its runs are the chapter's own variants (`rlib.recursive.experiments.variant_in_slot`) under the chapter's config at
the paper's rate, keyed like the grid's runs on that config and the chapter's code, in a folder of their own (`FOLDER`)
beside the grid's; no model is saved (`keep_models` and distillation off: neither changes how a full model trains).
This module's source keys nothing.

    study = ShiftRateConfig.preset(profile)        # every profile whose rate is not already 2e-4
    rated = run(cfg, study, work)
    table = shift_rate_table(chapter_results, rated, cfg, source)

`python -m rlib.recursive.paper_rate --profile cpu` runs it alone (with the chapter's data-shift runs, read back where
the chapter ran) and prints the table and the verdict of the claim that reads it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rlib import experiments as run_cache
from rlib.book.judging import nats
from rlib.config import ConfigError, Preset
from rlib.recursive.config import RecursiveConfig, Variant

__all__ = ["CLAIMS", "FOLDER", "PAPER_RATE", "ShiftRateConfig", "main", "rate_config", "run", "shift_rate_table",
           "shift_runs"]

PAPER_RATE = 2e-4  # App. E: AdamW, peak learning rate 2e-4, cosine annealing, one recipe for every model
FOLDER = f"paper_rate_lr{PAPER_RATE:g}"  # the paper-rate runs, beside the grid's run folders in the chapter's folder
CLAIMS = ("rrt.tab2.uptraining_shift_degrades",)  # the claim whose diagnosis reads shift_rate_table


@dataclass(frozen=True)
class ShiftRateConfig(Preset):
    """Whether the profile trains Table 2's data-shift pair again at the paper's rate."""

    run: bool

    PRESETS = {
        # smoke: its three steps, the pipeline only. cpu (and cpu-long, which reads cpu's runs back): two full-model
        # runs of 48 steps, about 150 s each in one worker, with their task suite. gpu: its 5e-4 against 2e-4. paper:
        # the paper's rate already, nothing to compare
        "smoke": dict(run=True),
        "cpu": dict(run=True),
        "cpu-long": dict(run=True),
        "gpu": dict(run=True),
        "paper": dict(run=False),
    }


def rate_config(cfg: RecursiveConfig) -> RecursiveConfig:
    """`cfg` at the paper's rate, everything that decides how a full model trains equal (`keep_models` and `kd_alpha`
    only decide which models are saved and how distilled runs train: off, so the study saves nothing)."""
    if math.isclose(cfg.lr, PAPER_RATE):
        raise ConfigError(f"the chapter already uptrains at the paper's rate {cfg.lr:g} (lr): nothing to compare")
    return replace(cfg, lr=PAPER_RATE, keep_models=False, kd_alpha=0.0)


def shift_runs(cfg: RecursiveConfig) -> list[Variant]:
    """Table 2's pair as the chapter names it: the full model uptrained on `train_corpus` and on `shift_corpus`, first
    seed."""
    first = cfg.seeds[0]
    return [Variant("full", seed=first), Variant("full", corpus=cfg.shift_corpus, seed=first)]


def run(cfg: RecursiveConfig, study: ShiftRateConfig, work: Path) -> list[dict[str, Any]]:
    """Train (or read back from `work / FOLDER`, `work` the chapter's folder) the pair at the paper's rate, one worker
    per core; [] where the profile does not run the study."""
    if not study.run:
        return []
    from rlib.recursive import experiments

    rated, folder = rate_config(cfg), Path(work) / FOLDER
    return run_cache.run_grid(shift_runs(cfg), folder,
                              functools.partial(experiments.variant_in_slot, cfg=rated, work=folder),
                              context=(rated.grid_context(),), modules=experiments.CODE_MODULES,
                              desc=f"Table 2's pair at the paper's rate {PAPER_RATE:g}", workers="auto")


def shift_rate_table(chapter: list[dict[str, Any]], paper: list[dict[str, Any]], cfg: RecursiveConfig,
                     source: dict[str, float]) -> pd.DataFrame:
    """chapter: the grid's results (its data-shift pair among them, at `cfg.lr`), paper: `run`'s; source: the source
    model's evaluation (`rlib.recursive.experiments.source_result`). One row for the source model (lr NaN) and one
    per (rate, uptraining corpus) of the full model: its perplexities and task scores after uptraining, and
    `own_nll_change` (nats on its own uptraining corpus against the source: below 0 is Table 2's (a)) and
    `task_avg_change` (points against the source: below 0 is Table 2's (b)) with its binomial standard error
    `task_avg_change_se` (ours: `rlib.recursive.tables.task_change_se`)."""
    from rlib.recursive import tables

    if not paper:
        raise ConfigError("shift_rate_table needs the pair's runs at the paper's rate (paper_rate.run)")
    parts = []
    for results, lr, at_paper in ((chapter, cfg.lr, False), (paper, PAPER_RATE, True)):
        shift = tables.shift_table(results, cfg, source)
        parts.append(shift[shift["model"] == "full-size"].assign(lr=lr, paper_rate=at_paper))
        if not at_paper:
            parts.insert(0, shift[shift["model"] == "full-size, not uptrained"].assign(lr=np.nan, paper_rate=False))
    table = pd.concat(parts, ignore_index=True)
    base = table.iloc[0]
    own = [f"after ppl[{corpus}]" for corpus in table["uptraining corpus"]]
    table["own_nll_change"] = [nats(r[c], base[c]) if r["model"] == "full-size" else np.nan
                               for c, (_, r) in zip(own, table.iterrows())]
    table["task_avg_change"] = (table["after task_avg"] - base["after task_avg"] if "after task_avg" in table
                                else np.nan)
    table.loc[0, "task_avg_change"] = np.nan
    table["task_avg_change_se"] = [tables.task_change_se(r, base, cfg.task_limit) if i else np.nan
                                   for i, (_, r) in enumerate(table.iterrows())]
    lead = ["model", "lr", "paper_rate", "uptraining corpus"]
    return table[lead + [c for c in table.columns if c not in lead]]


def main(argv: list[str] | None = None) -> int:
    from rlib.config import runs_profile
    from rlib.recursive import claims, experiments
    from rlib.recursive import tables as recursive_tables
    from rlib.study_cli import run_study

    def written(profile: str) -> dict[str, pd.DataFrame]:
        # the chapter's pair (read back where the chapter ran) and the source model's evaluation, then the pair at the
        # paper's rate
        cfg = RecursiveConfig.preset(profile)
        work = experiments.work_dir(runs_profile(profile), cfg.model)
        source_model = experiments.load_source(cfg)
        grid = experiments.run_grid(cfg, work, source_model, only=[v.name for v in shift_runs(cfg)])
        source = experiments.source_result(cfg, source_model)
        rated = run(cfg, ShiftRateConfig.preset(profile), work)
        return {"data_shift": recursive_tables.shift_table(grid, cfg, source),
                "data_shift_paper_rate": shift_rate_table(grid, rated, cfg, source)}

    def judge(written, profile: str) -> pd.DataFrame:
        return claims.judge(dict(written), RecursiveConfig.preset(profile), profile).finish()

    def has_runs(profile: str) -> bool:  # a profile the study cannot run is refused here, before any training
        study = ShiftRateConfig.preset(profile)
        if study.run:
            rate_config(RecursiveConfig.preset(profile))
        return study.run

    return run_study(argv, "python -m rlib.recursive.paper_rate", __doc__.splitlines()[0], has_runs, written, judge,
                     CLAIMS)


if __name__ == "__main__":
    raise SystemExit(main())
