"""Figure 5a: compute-optimal model size per isoFLOP budget, for Vanilla, Recursive and MoR (Mixture-of-Recursions,
paper 001, Sec. 5.1, Fig. 5a; the data of Sec. 3.2 / App. C / Table 7).

The paper trains each architecture at four sizes and three forward-FLOPs budgets, fits a polynomial in model size to
each (architecture, budget) curve of validation NLL, and marks the fitted optimum N*(C) with a star; the claim is
that MoR's path of stars has the flattest slope (its optimum moves to larger models faster as compute grows).

    runs = run_grid(cfg, ComputeOptimalConfig.preset(profile), work)   # every width x budget, first seed
    fits = fit_optima(table)         # one quadratic in log N per (model, budget): N*, and whether it is bracketed
    path = optimal_path(fits)        # log N* = a log C + b per model

The paper slices its smaller budgets from one trapezoid run's plateau checkpoints (App. C); each point here is a
separate run whose whole warm-up / stable / 20 % cool-down schedule fits its budget (the shape of the paper's
sliced runs, with the warm-up scaled to each run). N is the vanilla model's non-embedding parameter count at that
width (Table 7's "Base" size) for all three models: Recursive and MoR keep a fixed fraction of it at every width, so
the slope `a` does not depend on that choice.

The study's settings live here rather than in `rlib.mor.config`: that module's source keys every run of the chapter's
cache (`experiments.CODE_MODULES`), and the widths only choose which runs exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rlib.config import ConfigError, Preset
from rlib.mor import budget_sweep
from rlib.mor.config import MoRConfig

__all__ = ["ComputeOptimalConfig", "fit_optima", "folder", "optimal_path", "run_grid"]


@dataclass(frozen=True)
class ComputeOptimalConfig(Preset):
    """Fig. 5a's grid (Sec. 5.1, App. C): Vanilla, Recursive and MoR-EC at every width x budget, first seed.

    A width keeps the chapter's head size, query-per-KV-head ratio, FFN ratio and depth (the paper's sizes change
    width and depth together; here depth is held fixed so one axis moves). Budgets are fractions of
    `MoRConfig.budget`; the chapter's own width at fraction 1 is the main grid's run and at the budget sweep's
    fractions the sweep's, read back from their folders."""

    widths: tuple[int, ...]  # d_model values (each a multiple of the chapter's head_dim)
    fractions: tuple[float, ...]  # budgets as fractions of MoRConfig.budget, in (0, 1]

    PRESETS = {
        "smoke": dict(widths=(32, 64, 96), fractions=(0.5, 1.0)),
        # cpu: no runs. cpu-long: three budgets in the paper's ratios (Table 7: 2, 5 and 16.5 EB, 0.121 : 0.303 : 1)
        # below the main budget, and three widths: 24 runs of its own (the 256-wide ones at 0.5 are the budget
        # sweep's), about 39 min on 2026-11-28's slower Xeon by the per-run times of the grid it replaced. That grid
        # (widths 64-384 x 0.25 / 0.5 / 1) took 93 min, over the 150 min of a cpu-long chapter: its 64-wide runs at
        # budget 1 alone cost 31 min, every fitted optimum lay at or below the narrowest width (the optimum is not
        # bracketed either way), and at width 384 the models took 5-31 optimizer steps.
        "cpu": dict(widths=(), fractions=()),
        "cpu-long": dict(widths=(64, 128, 256), fractions=(0.06, 0.15, 0.5)),
        "gpu": dict(widths=(256, 512, 768), fractions=(0.1, 0.3, 1.0)),
    }

    def __post_init__(self) -> None:
        object.__setattr__(self, "widths", tuple(self.widths))
        object.__setattr__(self, "fractions", tuple(self.fractions))
        bad = [f for f in self.fractions if not 0 < f <= 1]
        if bad:
            raise ConfigError(f"fractions {bad} must lie in (0, 1]: 1 is the main grid's budget")
        if bool(self.widths) != bool(self.fractions):
            raise ConfigError(f"widths={self.widths} and fractions={self.fractions}: give both (a grid) or neither")
        if self.widths and (len(set(self.widths)) < 3 or len(set(self.fractions)) < 2):
            raise ConfigError(f"widths={self.widths}, fractions={self.fractions}: the quadratic fit per budget needs "
                              ">= 3 distinct widths and the optimal path >= 2 budgets")

    def model_config(self, cfg: MoRConfig, width: int) -> MoRConfig:
        """The chapter's config at `width`: heads of the same size, the same query-per-KV-head ratio and FFN ratio."""
        heads = width // cfg.head_dim
        if width % cfg.head_dim or heads < 1:
            raise ConfigError(f"width {width} is not a positive multiple of head_dim={cfg.head_dim}; choose widths "
                              f"like {[cfg.head_dim * k for k in (2, 4, 6)]}")
        kv_heads = max(1, heads // (cfg.n_heads // cfg.n_kv_heads))
        if heads % kv_heads:
            raise ConfigError(f"width {width}: {heads} heads do not split into {kv_heads} KV groups; choose a width "
                              f"whose head count is a multiple of {cfg.n_heads // cfg.n_kv_heads}")
        return cfg.override(d_model=width, n_heads=heads, n_kv_heads=kv_heads,
                            d_ffn=round(cfg.d_ffn * width / cfg.d_model))


def folder(work: Path, cfg: MoRConfig, width: int, fraction: float) -> Path:
    """Where a (width, fraction) cell trains: the chapter's own width reads the main grid (fraction 1) and the budget
    sweep's folders; other widths get their own. The run cache's key holds the whole config, so a folder is only
    where a run lives, never what it is."""
    return budget_sweep.folder(Path(work) if width == cfg.d_model else Path(work) / f"width-{width}", fraction)


def run_grid(cfg: MoRConfig, study: ComputeOptimalConfig, work: Path) -> list[dict[str, Any]]:
    """Run (or read back) Vanilla, Recursive and MoR-EC at every width x budget; each result gains "width" and
    "budget_flops". Bad widths fail before any training."""
    cells = [(width, fraction, study.model_config(cfg, width).override(budget=cfg.budget * fraction))
             for width in study.widths for fraction in study.fractions]
    runs = budget_sweep.run_cells([(sub, folder(work, cfg, width, fraction),
                                    f"Fig. 5a: width {width}, budget x{fraction:g}") for width, fraction, sub in cells])
    return [{**r, "width": width} for (width, _, _), cell_runs in zip(cells, runs) for r in cell_runs]


def fit_optima(table: pd.DataFrame) -> pd.DataFrame:
    """One quadratic nll = p2 (ln N)^2 + p1 ln N + p0 per (label, budget_flops) over `base_params_m` (N, millions).

    Columns: n_star_m (the fitted optimum; the best sampled size when the fit has no minimum) and its log
    log_n_star, nll_star, convex (p2 > 0), interior (convex and N* within the sampled sizes: the widths bracket the
    optimum), best_width (the sampled width with the lowest NLL) and the coefficients."""
    rows = []
    for (label, budget), group in table.groupby(["label", "budget_flops"], sort=False):
        group = group.sort_values("base_params_m")
        log_n, nll = np.log(group["base_params_m"].to_numpy()), group["nll"].to_numpy()
        if len(group) < 3:
            raise ValueError(f"{label} at {budget:.3g} FLOPs has {len(group)} sizes; the quadratic fit needs >= 3")
        p2, p1, p0 = np.polyfit(log_n, nll, 2)
        best = int(np.argmin(nll))
        convex = bool(p2 > 0)
        log_star = -p1 / (2 * p2) if convex else log_n[best]
        interior = convex and bool(log_n.min() <= log_star <= log_n.max())
        rows.append({"label": label, "budget_flops": budget, "n_star_m": float(np.exp(log_star)),
                     "log_n_star": float(log_star),
                     "nll_star": float(np.polyval([p2, p1, p0], log_star)), "convex": convex, "interior": interior,
                     "best_width": int(group["width"].iloc[best]), "best_nll": float(nll[best]),
                     "p2": float(p2), "p1": float(p1), "p0": float(p0)})
    return pd.DataFrame(rows)


def optimal_path(fits: pd.DataFrame) -> pd.DataFrame:
    """Least squares log N* = a log C + b per label (Fig. 5a's line through the stars); `interior` counts the budgets
    whose star the widths bracket."""
    rows = []
    for label, group in fits.groupby("label", sort=False):
        if group["budget_flops"].nunique() < 2:
            raise ValueError(f"{label}: the optimal path needs >= 2 budgets, got {group['budget_flops'].nunique()}")
        # in log space as fitted: a refit under noise can put a barely convex optimum so far out that exp underflows
        a, b = np.polyfit(np.log(group["budget_flops"]), group["log_n_star"], 1)
        rows.append({"label": label, "slope": float(a), "intercept": float(b), "budgets": len(group),
                     "interior": int(group["interior"].sum())})
    return pd.DataFrame(rows)
