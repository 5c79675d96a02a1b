"""Table I.1's longer uptraining, on its own (Relaxed Recursive Transformers, paper 000, Sec. 3.6, App. I, Table I.1).

The paper uptrains its recursive Gemma Stepwise model on 60B instead of 15B tokens and gains 1.7 points of few-shot
accuracy (53.4 vs 51.7; SlimPajama perplexity 12.00 vs 12.85). The chapter's `cpu-long` grid trains the main
recursive model (Stepwise, r = 0) and the main relaxed model (Average, SVD LoRA at the largest rank)
`long_factor` times longer beside their 1x runs (`rlib.relaxed.config.variants`). This module trains just those four
runs, through the chapter's own run cache (`rlib.relaxed.experiments.run_grid`: same keys, so the chapter reads them
back later and this module's source keys nothing), and judges the two claims from the `runs` table alone:

    python -m rlib.relaxed.longer_study --profile cpu-long

The 1x recursive run trains here too when chapter 01's kept twin is absent (`trained_by`); its result is the same.
"""

from __future__ import annotations

import dataclasses

import pandas as pd

from rlib.config import runs_profile
from rlib.relaxed.config import RelaxedConfig, RelaxedVariant, main_variants

__all__ = ["CLAIMS", "main", "study_runs", "tables"]

CLAIMS = ("rrt.tabI1.longer_uptraining_helps", "rrt.tabI1.longer_uptraining_helps.ours")


def study_runs(cfg: RelaxedConfig) -> list[RelaxedVariant]:
    """Each main model at 1x and at `long_factor` x the steps (empty when the profile has no longer runs)."""
    if cfg.long_factor <= 1:
        return []
    return [v for main in main_variants(cfg) for v in (main, dataclasses.replace(main, steps_factor=cfg.long_factor))]


def tables(profile: str) -> dict[str, pd.DataFrame]:
    """Train (or read back) `study_runs` in the chapter's work folder; the `runs` and `kd_and_longer` tables."""
    from rlib.recursive import experiments as recursive
    from rlib.recursive.config import RecursiveConfig
    from rlib.relaxed import experiments
    from rlib.relaxed import tables as relaxed_tables

    cfg = RelaxedConfig.preset(profile)
    grids = runs_profile(profile)
    work = recursive.work_dir(grids, cfg.model, experiments.CHAPTER)
    chapter01 = (RecursiveConfig.preset(profile).override(model=cfg.model), recursive.work_dir(grids, cfg.model))
    results = experiments.run_grid(cfg, work, recursive.load_source(cfg), None, runs=study_runs(cfg),
                                   chapter01=chapter01)
    return {"runs": relaxed_tables.flat(results), "kd_and_longer": relaxed_tables.kd_long_table(results, cfg)}


def main(argv: list[str] | None = None) -> int:
    from rlib.relaxed import claims
    from rlib.study_cli import run_study

    def judge(written, profile: str) -> pd.DataFrame:
        return claims.judge(dict(written), RelaxedConfig.preset(profile), profile).finish()

    return run_study(argv, "python -m rlib.relaxed.longer_study", __doc__.splitlines()[0],
                     lambda profile: bool(study_runs(RelaxedConfig.preset(profile))), tables, judge, CLAIMS)


if __name__ == "__main__":
    raise SystemExit(main())
