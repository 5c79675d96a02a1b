"""Figure 3's budget axis: Vanilla, Recursive and MoR (expert-choice, Nr of the chapter) trained at several isoFLOP
budgets (Mixture-of-Recursions, paper 001, Sec. 3.1, Fig. 3, Table 7).

The main grid (`rlib.mor.experiments`) trains every model at one budget; this sweep retrains the three Figure 3
models at fractions of it, first seed only, with the same code path (`rlib.mor.experiments.run_variant` under
`cfg.override(budget=...)`), each fraction in its own folder `<work>/budget-<fraction>/` so no run of the main grid
is touched. The curves of the main grid show loss against FLOPs *spent* within one schedule; these points are separate
runs whose whole schedule fits each budget, which is what the paper's Figure 3 plots.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlib.experiments import run_grid
from rlib.mor import experiments
from rlib.mor.config import BudgetSweepConfig, MoRConfig, MoRVariant
from rlib.mor.spec import MoRSpec

__all__ = ["run_sweep", "sweep_variants"]


def sweep_variants(cfg: MoRConfig) -> list[MoRVariant]:
    seed, nr = cfg.seeds[0], cfg.n_recursions
    return [MoRVariant(None, "flops", seed), MoRVariant(MoRSpec.recursive(nr), "flops", seed),
            MoRVariant(MoRSpec.expert(nr), "flops", seed)]


def run_sweep(cfg: MoRConfig, sweep: BudgetSweepConfig, work: Path) -> list[dict[str, Any]]:
    """Run (or load) every sweep model at every fraction; each result gains "budget_flops"."""
    held = experiments.windows(cfg)
    results = []
    for fraction in sweep.fractions:
        sub = cfg.override(budget=cfg.budget * fraction)
        runs = run_grid(sweep_variants(cfg), Path(work) / f"budget-{fraction:g}",
                        lambda v, slot, s=sub: experiments.run_variant(v, s, slot, held), context=(sub.grid_context(),),
                        modules=experiments.CODE_MODULES, desc=f"budget sweep x{fraction:g}")
        results += [{**r, "budget_flops": sub.budget} for r in runs]
    return results


