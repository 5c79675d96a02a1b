"""Figure 3's budget axis: Vanilla, Recursive and MoR (expert-choice, Nr of the chapter) trained at several isoFLOP
budgets (Mixture-of-Recursions, paper 001, Sec. 3.1, Fig. 3, Table 7).

The main grid (`rlib.mor.grid`) trains every model at one budget; this sweep retrains the three Figure 3 models
at fractions of it, first seed only, with the same code path (`grid.run_variant` under `cfg.override(budget=...)`),
each fraction in its own folder `<work>/budget-<fraction>/` so no run of the main grid is touched. The curves of
the main grid show loss against FLOPs *spent* within one schedule; these points are separate runs whose whole
schedule fits each budget, which is what the paper's Figure 3 plots.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rlib import experiments
from rlib.config import ConfigError, Preset
from rlib.mor import grid
from rlib.mor.grid import MoRConfig, MoRVariant
from rlib.mor.spec import MoRSpec
from rlib.progress import progress

__all__ = ["BudgetSweepConfig", "budget_table", "run_sweep", "sweep_variants"]


@dataclass(frozen=True)
class BudgetSweepConfig(Preset):
    fractions: tuple[float, ...]  # budgets as fractions of MoRConfig.budget (1.0 is the main grid's)

    PRESETS = {"smoke": dict(fractions=(0.5,)), "cpu": dict(fractions=(0.25, 0.5)), "gpu": dict(fractions=(0.1, 0.3))}

    def __post_init__(self) -> None:
        object.__setattr__(self, "fractions", tuple(self.fractions))
        bad = [f for f in self.fractions if not 0 < f < 1]
        if bad:
            raise ConfigError(f"fractions {bad} must lie in (0, 1): the full budget is the main grid's run")


def sweep_variants(cfg: MoRConfig) -> list[MoRVariant]:
    seed, nr = cfg.seeds[0], cfg.n_recursions
    return [MoRVariant(None, "flops", seed), MoRVariant(MoRSpec.recursive(nr), "flops", seed),
            MoRVariant(MoRSpec.expert(nr), "flops", seed)]


def run_sweep(cfg: MoRConfig, sweep: BudgetSweepConfig, work: Path) -> list[dict[str, Any]]:
    """Run (or load) every sweep model at every fraction; each result gains "budget_flops"."""
    vocab = grid.vocabulary(cfg)
    windows = {"val": grid.heldout(cfg, vocab, "validation", cfg.val_windows, seed=1),
               "test": grid.heldout(cfg, vocab, "test", cfg.eval_windows, seed=0)}
    code = experiments.code_digest(*grid.CODE_MODULES)
    results = []
    todo = [(f, v) for f in sweep.fractions for v in sweep_variants(cfg)]
    for fraction, variant in progress(todo, desc="budget sweep", unit="run"):
        sub = cfg.override(budget=cfg.budget * fraction)
        folder = Path(work) / f"budget-{fraction:g}"
        key = experiments.digest(variant, sub, code)
        result = experiments.cached(folder / variant.name, key, lambda v=variant, s=sub, f=folder, k=key: (
            grid.run_variant(v, s, f, vocab, windows, k)))
        results.append({**result, "budget_flops": sub.budget})
    return results


def budget_table(main_results: list[dict[str, Any]], sweep_results: list[dict[str, Any]],
                 cfg: MoRConfig) -> pd.DataFrame:
    """Test NLL per model and isoFLOP budget: the sweep's runs plus the main grid's runs of the same seed."""
    names = {v.name for v in sweep_variants(cfg)}
    rows = [{"label": r["label"], "budget_flops": cfg.budget, "nll": r["after"]["nll"], "tokens_m": r["tokens"] / 1e6,
             "params_m": r["params"] / 1e6} for r in main_results if r["name"] in names]
    rows += [{"label": r["label"], "budget_flops": r["budget_flops"], "nll": r["after"]["nll"],
              "tokens_m": r["tokens"] / 1e6, "params_m": r["params"] / 1e6} for r in sweep_results]
    return pd.DataFrame(rows).sort_values(["label", "budget_flops"]).reset_index(drop=True)
