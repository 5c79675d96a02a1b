"""Fig. F.1(b)'s norm weights of the Average init, over seeds (Relaxed Recursive Transformers, paper 000, App. F,
Fig. F.1(b)).

App. F initializes the tied norm weights of an Average-initialized recursive model three ways: averaging the
layers' weights (Norm-avg, the default), copying one layer's (Norm-choice), or zeros (Norm-zero). Zero
"resulted in a huge performance drop in certain architectures like TinyLlama and Pythia", and "no big difference"
separated averaging from copying. The chapter's cpu-long grid trains each variant once (`norm_inits`), so the
ledger's test of the sentence (`rrt.figF1b.norm_zero_collapses`, thresholds ours: the Stepwise model's seed spread)
weighs single draws.

This study uptrains the three variants at every seed of its preset through the chapter's own runs and keys
(`rlib.recursive.experiments.variant_in_slot`; seed 0 is the grid's, read back), so each seed's three runs read the
same batches and differ only in the norm weights: the gaps are paired by seed. `norm_seeds_table` gives one row per
run with its held-out NLL before and after uptraining.

    study = NormSeedsConfig.preset(profile)        # cpu: none; cpu-long: seeds 0, 1, 2
    table = norm_seeds_table(run(cfg, study, work), cfg)

`python -m rlib.recursive.norm_seeds --profile cpu-long` runs it alone and prints the table and the verdict.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rlib import experiments as run_cache
from rlib.config import ConfigError, Preset
from rlib.recursive.config import RecursiveConfig, Variant

__all__ = ["NORMS", "NormSeedsConfig", "main", "norm_seeds_table", "run", "study_runs"]

NORMS = ("average", "choice", "zero")  # Fig. F.1(b)'s Norm-avg, Norm-choice, Norm-zero


@dataclass(frozen=True)
class NormSeedsConfig(Preset):
    """At which seeds the Average init trains with each of Fig. F.1(b)'s norm weights."""

    seeds: tuple[int, ...]  # the grid's first seed is its own run (read back)

    PRESETS = {
        "smoke": dict(seeds=(0, 1)),
        # cpu: none (the norm variants are cpu-long's). cpu-long: three seeds, 6 runs beyond the grid's, 48 steps each,
        # about 4 min per run in one worker on the AVX512-BF16 EPYC
        "cpu": dict(seeds=()),
        "cpu-long": dict(seeds=(0, 1, 2)),
        "gpu": dict(seeds=(0, 1, 2)),
    }

    def __post_init__(self) -> None:
        object.__setattr__(self, "seeds", tuple(self.seeds))
        if len(self.seeds) == 1 or len(set(self.seeds)) != len(self.seeds) or any(s < 0 for s in self.seeds):
            raise ConfigError(f"seeds={self.seeds}: give none, or >= 2 distinct seeds >= 0 (the claim judges a "
                              "paired interval)")


def study_runs(cfg: RecursiveConfig, study: NormSeedsConfig) -> list[Variant]:
    """The Average init at B = init_loops with every norm variant at every seed (the chapter's variants and names)."""
    return [Variant("recursive", cfg.init_loops, "average", norm_init=n, seed=s) for s in study.seeds for n in NORMS]


def run(cfg: RecursiveConfig, study: NormSeedsConfig, work: Path) -> list[dict[str, Any]]:
    """Train (or read back) the study's runs in one worker per core, keyed as the chapter's grid keys them."""
    if not study.seeds:
        return []
    from rlib.recursive import experiments

    return run_cache.run_grid(study_runs(cfg, study), Path(work),
                              functools.partial(experiments.variant_in_slot, cfg=cfg, work=Path(work)),
                              context=(cfg.grid_context(),), modules=experiments.CODE_MODULES,
                              desc="Fig. F.1(b): norm weights over seeds", workers="auto")


def norm_seeds_table(results: list[dict[str, Any]], cfg: RecursiveConfig) -> pd.DataFrame:
    """One row per run: norm weights, seed, held-out NLL on the uptraining corpus before and after uptraining."""
    key = f"nll[{cfg.train_corpus}]"
    return pd.DataFrame([{"norm_init": r["variant"]["norm_init"], "seed": r["variant"]["seed"],
                          f"before {key}": r["before"][key], f"after {key}": r["after"][key]} for r in results])


def main(argv: list[str] | None = None) -> int:
    from rlib.config import runs_profile
    from rlib.recursive import claims, experiments
    from rlib.recursive import tables as recursive_tables
    from rlib.study_cli import run_study

    def tables(profile: str) -> dict[str, pd.DataFrame]:
        cfg = RecursiveConfig.preset(profile)
        work = experiments.work_dir(runs_profile(profile), cfg.model)
        grid = experiments.run_grid(cfg, work, experiments.load_source(cfg), only=_grid_runs(cfg))
        return {"runs": recursive_tables.flat(grid),
                "norm_seeds": norm_seeds_table(run(cfg, NormSeedsConfig.preset(profile), work), cfg)}

    def judge(written, profile: str) -> pd.DataFrame:
        return claims.judge(dict(written), RecursiveConfig.preset(profile), profile).finish()

    return run_study(argv, "python -m rlib.recursive.norm_seeds", __doc__.splitlines()[0],
                     lambda profile: bool(NormSeedsConfig.preset(profile).seeds), tables, judge,
                     ("rrt.figF1b.norm_zero_collapses",))


def _grid_runs(cfg: RecursiveConfig) -> list[str]:
    """Names of the grid's runs the claim reads beside the study: the Average init's norm variants at the first seed,
    and the seeded Stepwise groups (plain and distilled, with the distillation teacher) whose spread is its
    threshold."""
    from rlib.recursive.config import variants
    from rlib.recursive.experiments import teacher_variant

    first = cfg.seeds[0]
    norms = {Variant("recursive", cfg.init_loops, "average", norm_init=n, seed=first) for n in NORMS}
    return [teacher_variant(cfg).name] + [
        v.name for v in variants(cfg) if v in norms or (v.kind == "recursive" and v.init == "stepwise"
                                                        and v.n_loops == cfg.init_loops and not v.corpus)]


if __name__ == "__main__":
    raise SystemExit(main())
