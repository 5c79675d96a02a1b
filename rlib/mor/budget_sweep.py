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

from rlib.experiments import Grid, run_grids
from rlib.mor import experiments
from rlib.mor.config import BudgetSweepConfig, MoRConfig, MoRVariant
from rlib.mor.spec import MoRSpec

__all__ = ["cell_grid", "folder", "grids", "run_cells", "run_sweep", "sweep_variants"]


def sweep_variants(cfg: MoRConfig) -> list[MoRVariant]:
    seed, nr = cfg.seeds[0], cfg.n_recursions
    return [MoRVariant(None, "flops", seed), MoRVariant(MoRSpec.recursive(nr), "flops", seed),
            MoRVariant(MoRSpec.expert(nr), "flops", seed)]


def folder(work: Path, fraction: float) -> Path:
    """Where the sweep's runs at `fraction` of the budget live (1: the main grid's own folder)."""
    return Path(work) if fraction == 1 else Path(work) / f"budget-{fraction:g}"


def cell_grid(cfg: MoRConfig, where: Path, desc: str) -> Grid:
    """The sweep's three models under `cfg` (its budget, its widths) in `where`, as a grid."""
    return experiments.grid(cfg, where, sweep_variants(cfg), desc=desc)


def run_cells(cells: list[tuple[MoRConfig, Path, str]]) -> list[list[dict[str, Any]]]:
    """Run (or load) each (cfg, where, desc) cell's three models, the missing ones of every cell in one pool of workers
    (`rlib.experiments.run_grids`); each result gains "budget_flops". Shared with Fig. 5a's width x budget grid
    (`rlib.mor.compute_optimal`)."""
    runs = run_grids([cell_grid(*cell) for cell in cells], workers="auto")
    return [[{**r, "budget_flops": cfg.budget} for r in cell_runs] for (cfg, _, _), cell_runs in zip(cells, runs)]


def _cells(cfg: MoRConfig, sweep: BudgetSweepConfig, work: Path) -> list[tuple[MoRConfig, Path, str]]:
    return [(cfg.override(budget=cfg.budget * fraction), folder(work, fraction), f"budget sweep x{fraction:g}")
            for fraction in sweep.fractions]


def grids(cfg: MoRConfig, sweep: BudgetSweepConfig, work: Path) -> tuple[Grid, ...]:
    """The sweep's grids, one per fraction, for `rlib.mor.experiments.run_grid(..., also=)`."""
    return tuple(cell_grid(*cell) for cell in _cells(cfg, sweep, work))


def run_sweep(cfg: MoRConfig, sweep: BudgetSweepConfig, work: Path) -> list[dict[str, Any]]:
    """Run (or load) every sweep model at every fraction; each result gains "budget_flops"."""
    return [r for cell_runs in run_cells(_cells(cfg, sweep, work)) for r in cell_runs]
