"""The longer budget, measured: the main models and Fig. 6's rival uptrained 4x and 8x longer (Relaxed Recursive
Transformers, paper 000, Sec. 3.5, 3.6, Fig. 4, 6, App. E, I, Table I.1).

The paper uptrains every model on 15B tokens (App. E) and its longer run on 60B, four times as many (Table I.1). The
chapter's `cpu-long` grid trains the main recursive (Stepwise, r = 0) and relaxed (Average, SVD at the largest rank)
models `long_factor` (2) times longer, and where the relaxed Average trails a rival, the claims judged the budget on
that one doubling, extrapolated to the paper's 4x and beyond. This study measures the further doublings instead:

- the two main models at each of `factors` times the chapter's steps (cpu-long: 4x, the paper's own step, and 8x);
- Fig. 6's rival, the init other than Average whose relaxed model (same rank) ends lowest after the chapter's 1x
  uptraining, at each of `rival_factors` (cpu-long: 2x, 4x and 8x), so that it is no longer held at its 1x NLL;
- the two main models again at other `seeds` at each of `seed_factors` (cpu-long: seeds 1 and 2 at 4x), so that the
  gap at the paper's 4x is a mean over seeds and its noise is measured where the claims read it.

Each run is the chapter's run with `steps_factor` set (the same recipe: warm-up, cosine schedule over the longer run,
batches continuing the same stream), trained through the chapter's run cache (`rlib.relaxed.experiments.run_grid`:
same keys, so this module's source keys nothing and a later chapter with a larger `long_factor` reads them back).

    study = BudgetStudyConfig.preset(profile)          # cpu: none; cpu-long: (4, 8) and the rival at (2, 4, 8)
    results = run(cfg, study, work, source, chapter_results, chapter01)
    budget_table(results + chapter_results, cfg, work) # one row per (model, steps factor): tokens, NLL, validation

`python -m rlib.relaxed.budget_study --profile cpu-long` runs it alone and prints the table and the verdicts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rlib import experiments as run_cache
from rlib.config import ConfigError, Preset
from rlib.relaxed import experiments
from rlib.relaxed.config import RelaxedConfig, RelaxedVariant, main_variants

__all__ = ["CLAIMS", "BudgetStudyConfig", "budget_table", "fig6_rival", "main", "run", "study_runs"]

# the claims whose verdict or diagnosis reads the study's table (rlib.relaxed.claims)
CLAIMS = ("rrt.s3_5.relaxed_avg_beats_recursive_step", "rrt.fig4.relaxed_interpolates_to_full",
          "rrt.fig6.average_best_with_lora", "rrt.tabI1.longer_uptraining_helps")


@dataclass(frozen=True)
class BudgetStudyConfig(Preset):
    """At which multiples of the chapter's steps the main models and Fig. 6's rival train again."""

    factors: tuple[int, ...]  # the main recursive and relaxed models (the chapter's 1x and long_factor are read back)
    rival_factors: tuple[int, ...]  # Fig. 6's rival: the best relaxed init other than Average, at the largest rank
    # the main models again at other seeds (the chapter's runs are seed 0) at these of `factors`: the seed noise at
    # the longer budgets, where the claims read the gap, instead of the 1x noise of Table G.1's seed study
    seeds: tuple[int, ...] = ()
    seed_factors: tuple[int, ...] = ()

    PRESETS = {
        "smoke": dict(factors=(2,), rival_factors=(2,), seeds=(1,), seed_factors=(2,)),
        # cpu: none (chapters 01 + 02 fit issue 23's hour). cpu-long: 4x is the paper's own longer step (Table I.1,
        # 15B -> 60B), 8x one doubling past it; the rival at the same factors and 2x (the chapter's long_factor, which
        # the rival's own grid lacks). Seven runs of 96-384 steps, about 70 min in two workers on 2 cores; the two
        # main models at 4x at seeds 1 and 2, four runs of 192 steps, about 40 min more
        "cpu": dict(factors=(), rival_factors=()),
        "cpu-long": dict(factors=(4, 8), rival_factors=(2, 4, 8), seeds=(1, 2), seed_factors=(4,)),
        "gpu": dict(factors=(4,), rival_factors=(2,), seeds=(1, 2), seed_factors=(4,)),
        "paper": dict(factors=(), rival_factors=()),  # its long_factor is the paper's 4x already
    }

    def __post_init__(self) -> None:
        for name in ("factors", "rival_factors", "seed_factors"):
            values = tuple(getattr(self, name))
            object.__setattr__(self, name, values)
            bad = [f for f in values if not (isinstance(f, int) and not isinstance(f, bool) and f >= 2)]
            if bad or len(set(values)) != len(values):
                raise ConfigError(f"{name} {list(values)} must be distinct whole multiples of the steps, each >= 2 "
                                  "(1x is the chapter's own run)")
        seeds = tuple(self.seeds)
        object.__setattr__(self, "seeds", seeds)
        if any(not (isinstance(s, int) and not isinstance(s, bool) and s >= 1) for s in seeds) or \
                len(set(seeds)) != len(seeds):
            raise ConfigError(f"seeds {list(seeds)} must be distinct whole numbers >= 1 (seed 0 is the chapter's run)")
        if bool(seeds) != bool(self.seed_factors) or not set(self.seed_factors) <= set(self.factors):
            raise ConfigError(f"seeds {list(seeds)} at seed_factors {list(self.seed_factors)}: give both or neither, "
                              f"the factors among factors {list(self.factors)}")

    @property
    def empty(self) -> bool:
        return not (self.factors or self.rival_factors)


def fig6_rival(chapter_results: list[dict[str, Any]], cfg: RelaxedConfig) -> str | None:
    """The init other than Average whose relaxed model (SVD LoRA at the largest rank, uptrained plainly at 1x) has
    the lowest after NLL on the training corpus among the chapter's results: the rival Fig. 6's claim sets the
    Average against. None where no such run is among the results."""
    top, key = max(cfg.ranks), f"nll[{cfg.train_corpus}]"
    plain = {r["variant"]["init"]: r["after"][key] for r in chapter_results
             if _is_plain(r["variant"]) and r["variant"]["rank"] == top and r["variant"]["lora_init"] == "svd"
             and r["variant"]["steps_factor"] == 1 and r["variant"]["init"] != "average"}
    return min(plain, key=plain.get) if plain else None


def _is_plain(variant: dict[str, Any], any_seed: bool = False) -> bool:
    """Uptrained with no exit loss, distillation, prefix or halved group, at the chapter's seed (any with
    `any_seed`)."""
    return (variant["phase"] == "uptrain" and not variant["kd"] and not variant["prefix"] and not variant["halved"]
            and (any_seed or not variant["seed"]))


def study_runs(cfg: RelaxedConfig, study: BudgetStudyConfig, rival: str | None) -> list[RelaxedVariant]:
    """The runs to train: the main models at each of `factors`, then the rival at each of `rival_factors` (none
    without a rival), then the main models at each of `seeds` at each of `seed_factors`."""
    runs = [RelaxedVariant(v.init, v.rank, steps_factor=f) for f in study.factors for v in main_variants(cfg)]
    if rival is not None:
        runs += [RelaxedVariant(rival, max(cfg.ranks), steps_factor=f) for f in study.rival_factors]
    runs += [RelaxedVariant(v.init, v.rank, steps_factor=f, seed=s) for f in study.seed_factors for s in study.seeds
             for v in main_variants(cfg)]
    return runs


def run(cfg: RelaxedConfig, study: BudgetStudyConfig, work: Path, source, chapter_results: list[dict[str, Any]],
        chapter01=None) -> list[dict[str, Any]]:
    """Train (or read back) `study_runs` in the chapter's work folder, one worker per core, against the rival the
    chapter's 1x results name (`fig6_rival`). `source` is the chapter's source model, `chapter01` as in
    `rlib.relaxed.experiments.run_grid`."""
    runs = study_runs(cfg, study, fig6_rival(chapter_results, cfg))
    if not runs:
        return []
    return experiments.run_grid(cfg, work, source, None, runs=runs, chapter01=chapter01)


def budget_table(results: list[dict[str, Any]], cfg: RelaxedConfig, work: Path) -> pd.DataFrame:
    """One row per (init, rank, steps_factor, seed) of the plainly uptrained SVD runs among `results` whose model the
    study trains longer (any of them at a factor above 1): steps, tokens, the held-out NLL after uptraining on each
    corpus and the last validation loss. Pass the study's results with the chapter's (its 1x and `long_factor` runs).
    Empty where no longer run is among them. The chapter's other seeds at 1x (Table G.1's seed study) stay out: the
    claims read 1x's seed noise from that study's own table."""
    plain = [r for r in results if _is_plain(r["variant"], any_seed=True) and r["variant"]["lora_init"] == "svd"
             and (r["variant"]["steps_factor"] > 1 or not r["variant"]["seed"])]
    longer = {(r["variant"]["init"], r["variant"]["rank"]) for r in plain if r["variant"]["steps_factor"] > 1}
    rows, seen = [], set()
    for r in plain:
        v = r["variant"]
        model = (v["init"], v["rank"], v["steps_factor"], v["seed"])
        if model[:2] not in longer or model in seen:
            continue
        seen.add(model)
        steps = cfg.steps * v["steps_factor"]
        curve = run_cache.training_curves(work, [r])
        val = curve.dropna(subset=["val_loss"]).sort_values("step")["val_loss"] if not curve.empty else []
        rows.append({"init": v["init"], "rank": v["rank"], "steps_factor": v["steps_factor"], "seed": v["seed"],
                     "steps": steps, "tokens": steps * cfg.batch_size * cfg.seq_len,
                     **{f"after {k}": x for k, x in r["after"].items() if k.startswith("nll[")},
                     "last_val_loss": float(val.iloc[-1]) if len(val) else float("nan")})
    if not rows:
        return pd.DataFrame()
    return pd.DataFrame(rows).sort_values(["init", "rank", "steps_factor", "seed"]).reset_index(drop=True)


def main(argv: list[str] | None = None) -> int:
    from rlib.relaxed import average_rate, claims, plain_runs
    from rlib.study_cli import run_study

    def tables(profile: str) -> dict[str, pd.DataFrame]:
        # the chapter's plainly uptrained runs, its longer ones included (cached where the chapter ran), then the study
        runs = plain_runs.load(profile)
        cfg, work = runs.cfg, runs.work
        longer = run(cfg, BudgetStudyConfig.preset(profile), work, runs.source, runs.results, runs.chapter01)
        rates = average_rate.run(cfg, average_rate.AverageRateConfig.preset(profile), work)
        return {**plain_runs.average_gap_tables(runs, profile, average_rate.rate_table(rates, runs.results, cfg, work)),
                "longer_budget": budget_table(runs.results + longer, cfg, work)}

    def judge(written, profile: str) -> pd.DataFrame:
        return claims.judge(dict(written), RelaxedConfig.preset(profile), profile).finish()

    return run_study(argv, "python -m rlib.relaxed.budget_study", __doc__.splitlines()[0],
                     lambda profile: not BudgetStudyConfig.preset(profile).empty, tables, judge, CLAIMS)


if __name__ == "__main__":
    raise SystemExit(main())
