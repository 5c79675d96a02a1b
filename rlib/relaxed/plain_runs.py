"""The chapter's plainly uptrained runs and the tables its Average-gap claims read (Relaxed Recursive Transformers,
paper 000, Sec. 3.5, Fig. 4, 6), for the stand-alone studies that weigh those claims (`rlib.relaxed.average_rate`,
`rlib.relaxed.budget_study`): both train or read back the same runs and judge the same claims from the same tables.

    runs = load(profile)                  # the chapter's plain uptraining runs, read back where the chapter ran
    tables = average_gap_tables(runs, profile, average_rate_table)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rlib.relaxed.config import RelaxedConfig

__all__ = ["PlainRuns", "average_gap_tables", "load"]


@dataclass(frozen=True)
class PlainRuns:
    """The chapter's config, work folder, source model, chapter 01's full model (Fig. 4's reference) and config, and
    the results of its plainly uptrained runs, distilled or not (no exits, prefix, halved group or other seed)."""

    cfg: RelaxedConfig
    work: Path
    source: Any
    teacher_dir: Path
    chapter01: tuple
    results: list[dict[str, Any]]


def load(profile: str) -> PlainRuns:
    """Train (or read back from the chapter's run cache) the chapter's plainly uptrained runs, its longer and
    distilled ones included."""
    from rlib.config import runs_profile
    from rlib.recursive import experiments as recursive
    from rlib.recursive.config import RecursiveConfig
    from rlib.relaxed import experiments
    from rlib.relaxed.config import variants

    cfg = RelaxedConfig.preset(profile)
    grids = runs_profile(profile)
    work = recursive.work_dir(grids, cfg.model, experiments.CHAPTER)
    teacher_dir = recursive.teacher_dir(grids, cfg.model)
    chapter01 = (RecursiveConfig.preset(profile).override(model=cfg.model), recursive.work_dir(grids, cfg.model))
    source = recursive.load_source(cfg)
    # plain uptraining, with and without distillation (Fig. 4 reads the longer + KD run)
    plain = [v for v in variants(cfg) if v.phase == "uptrain" and not (v.prefix or v.halved or v.seed)]
    results = experiments.run_grid(cfg, work, source, teacher_dir, runs=plain, chapter01=chapter01)
    return PlainRuns(cfg, work, source, teacher_dir, chapter01, results)


def average_gap_tables(runs: PlainRuns, profile: str, average_rate: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The tables the Average-gap claims read: runs, loss_curves, full_reference, chapter 01's lr_sweep, and
    `average_rate` (`rlib.relaxed.average_rate.rate_table`, the relaxed Average at other rates)."""
    from rlib.recursive import lr_sweep
    from rlib.relaxed import tables as relaxed_tables

    cfg, work = runs.cfg, runs.work
    return {"runs": relaxed_tables.flat(runs.results), "loss_curves": relaxed_tables.training_table(work, runs.results),
            "full_reference": relaxed_tables.full_reference_table(cfg, runs.teacher_dir),
            "lr_sweep": lr_sweep.summary(lr_sweep.committed(profile), cfg.lr), "average_rate": average_rate}
