"""Fig. 5a's compute-optimal grid for chapter 03 (rlib.mor.compute_optimal and its ComputeOptimalConfig,
tables.compute_optimal_table, plots.plot_compute_optimal, claim mor.fig5a.compute_optimal): widths keep the head size
and ratios, the chapter's own width reads the main grid's and the sweep's folders, the fits recover a known optimum and
slope, and the claim needs bracketed optima with MoR's path the steepest in ln N* against ln C."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rlib.config import ConfigError
from rlib.mor import compute_optimal, plots, tables
from rlib.mor.claims import judge
from rlib.mor.compute_optimal import ComputeOptimalConfig
from rlib.mor.config import BudgetSweepConfig, MoRConfig
from rlib.mor.spec import MoRSpec

CPU = MoRConfig.preset("cpu")
LABELS = {"vanilla": "Vanilla", "rec": MoRSpec.recursive(3).label(), "mor": MoRSpec.expert(3).label()}


def test_presets_put_the_grid_in_cpu_long_and_reject_grids_that_cannot_be_fitted():
    assert ComputeOptimalConfig.preset("cpu").widths == ()
    long = ComputeOptimalConfig.preset("cpu-long")
    assert CPU.d_model in long.widths and len(long.widths) >= 3 and len(long.fractions) >= 2
    low, mid, top = sorted(long.fractions)  # the paper's budgets, 2 : 5 : 16.5 EB (Table 7), in the same ratios
    assert (low / top, mid / top) == pytest.approx((2 / 16.5, 5 / 16.5), abs=0.005)
    sweep = BudgetSweepConfig.preset("cpu-long").fractions
    assert top in sweep  # the chapter's own width at the top budget is the budget sweep's run, read back
    with pytest.raises(ConfigError, match=r"fractions \[1.5\] must lie in \(0, 1\]"):
        ComputeOptimalConfig(widths=(64, 128, 256), fractions=(0.5, 1.5))
    with pytest.raises(ConfigError, match="needs >= 3 distinct widths"):
        ComputeOptimalConfig(widths=(128, 256), fractions=(0.5, 1.0))
    with pytest.raises(ConfigError, match="give both"):
        ComputeOptimalConfig(widths=(64, 128, 256), fractions=())


def test_a_width_keeps_head_size_kv_ratio_and_ffn_ratio():
    study = ComputeOptimalConfig.preset("cpu-long")
    same = study.model_config(CPU, CPU.d_model)
    assert same.grid_context() == CPU.grid_context()  # the chapter's width is the main grid's run, same cache key
    wide = study.model_config(CPU, 384)
    assert (wide.d_model, wide.n_heads, wide.n_kv_heads, wide.d_ffn) == (384, 6, 3, 1152)
    narrow = study.model_config(CPU, 64)
    assert (narrow.n_heads, narrow.n_kv_heads, narrow.d_ffn) == (1, 1, 192)
    with pytest.raises(ConfigError, match="width 100 is not a positive multiple of head_dim=64"):
        study.model_config(CPU, 100)
    with pytest.raises(ConfigError, match="heads do not split"):
        study.model_config(CPU, 5 * 64)


def test_the_chapters_own_width_reads_the_main_grid_and_the_sweep(tmp_path: Path):
    assert compute_optimal.folder(tmp_path, CPU, CPU.d_model, 1.0) == tmp_path
    assert compute_optimal.folder(tmp_path, CPU, CPU.d_model, 0.25) == tmp_path / "budget-0.25"  # the sweep's folder
    assert compute_optimal.folder(tmp_path, CPU, 128, 1.0) == tmp_path / "width-128"
    assert compute_optimal.folder(tmp_path, CPU, 128, 0.5) == tmp_path / "width-128" / "budget-0.5"


SIZES = {128: 1.0, 256: 2.0, 384: 4.0}  # base non-embedding params (M) per width
BUDGETS = (1e12, 2e12, 4e12)


def _grid(slopes: dict[str, float], centre: float = 2.0) -> pd.DataFrame:
    """NLL = 3 + 0.3 (ln N - ln N*)^2 - 0.1 ln(C / 1e12), with N*(C) = centre (C / 2e12)^a per model."""
    rows = []
    for key, a in slopes.items():
        for budget in BUDGETS:
            star = centre * (budget / 2e12) ** a
            for width, size in SIZES.items():
                rows.append({"label": LABELS[key], "width": width, "budget_flops": budget, "params_m": size,
                             "base_params_m": size, "tokens_m": budget / 1e12, "tokens_per_param": 0.1 * budget / 1e12,
                             "nll": 3 + 0.3 * np.log(size / star) ** 2 - 0.1 * np.log(budget / 1e12)})
    return pd.DataFrame(rows)


def test_the_fits_recover_a_known_optimum_and_the_paths_slope():
    grid = _grid({"vanilla": 0.2, "rec": 0.4, "mor": 0.8})
    fits = compute_optimal.fit_optima(grid)
    assert fits["interior"].all() and fits["convex"].all()
    mor = fits[fits["label"] == LABELS["mor"]].set_index("budget_flops")
    assert mor.loc[2e12, "n_star_m"] == pytest.approx(2.0)
    assert mor.loc[4e12, "n_star_m"] == pytest.approx(2.0 * 2**0.8)
    path = compute_optimal.optimal_path(fits).set_index("label")["slope"]
    assert path[LABELS["mor"]] == pytest.approx(0.8) and path["Vanilla"] == pytest.approx(0.2)
    monotone = grid.assign(nll=-np.log(grid["base_params_m"]))  # larger is always better: no bracketed optimum
    edge = compute_optimal.fit_optima(monotone)
    assert not edge["interior"].any()
    with pytest.raises(ValueError, match="needs >= 3"):
        compute_optimal.fit_optima(grid[grid["width"] != 384])


def test_the_path_is_fitted_in_log_space_where_a_far_optimum_underflows():
    fits = compute_optimal.fit_optima(_grid({"vanilla": 0.2, "rec": 0.4, "mor": 0.8}))
    far = fits.assign(log_n_star=np.where(fits["label"] == "Vanilla", fits["log_n_star"] - 800, fits["log_n_star"]))
    far["n_star_m"] = np.exp(far["log_n_star"])  # 0.0 for Vanilla: its log is -inf
    assert (far.loc[far["label"] == "Vanilla", "n_star_m"] == 0).all()
    with np.errstate(divide="raise"):  # no log of 0 on the way
        path = compute_optimal.optimal_path(far).set_index("label")["slope"]
    assert path["Vanilla"] == pytest.approx(0.2) and np.isfinite(path).all()


def test_the_table_measures_every_model_against_its_widths_vanilla_size():
    def result(spec, width, params):
        label = "Vanilla" if spec is None else spec.label()
        return {"label": label, "spec": None if spec is None else {"routing": spec.routing}, "width": width,
                "budget_flops": 1e12, "params": params, "tokens": 4e6, "after": {"nll": 5.0}}

    results = [result(None, 128, 2e6), result(MoRSpec.expert(3), 128, 1e6), result(None, 256, 8e6)]
    table = tables.compute_optimal_table(results)
    mor = table[table["label"] == LABELS["mor"]].iloc[0]
    assert mor["params_m"] == 1.0 and mor["base_params_m"] == 2.0 and mor["tokens_per_param"] == 2.0
    with pytest.raises(ValueError, match=r"widths \[384\] have no Vanilla run"):
        tables.compute_optimal_table([*results, result(MoRSpec.expert(3), 384, 3e6)])


def _verdict(grid: pd.DataFrame, seed_std: float | None = 0.001) -> pd.Series:
    found = {"compute_optimal": grid}
    if seed_std is not None:
        found["main"] = pd.DataFrame({"label": list(LABELS.values()), "budget": "flops", "nll_std": seed_std})
    return judge(found, CPU, "cpu-long").finish().set_index("id").loc["mor.fig5a.compute_optimal"]


def test_claim_needs_bracketed_optima_and_mors_path_the_steepest():
    held = _verdict(_grid({"vanilla": 0.2, "rec": 0.4, "mor": 0.8}))
    assert held["verdict"] == "held" and "repeats in 100%" in held["measured"]
    flat = _verdict(_grid({"vanilla": 0.8, "rec": 0.4, "mor": 0.2}))
    assert flat["verdict"] == "not held" and flat["diagnosis"] == "disagrees with the paper"
    noisy = _verdict(_grid({"vanilla": 0.45, "rec": 0.4, "mor": 0.42}), seed_std=0.05)
    assert noisy["verdict"] == "not held" and noisy["diagnosis"] == "budget"
    edge = _verdict(_grid({"vanilla": 0.2, "rec": 0.4, "mor": 0.8}, centre=0.3))  # every optimum below the widths
    assert edge["verdict"] == "not held" and edge["diagnosis"] == "scale" and "not bracketed" in edge["evidence"]
    missing = judge({}, CPU, "cpu").finish().set_index("id").loc["mor.fig5a.compute_optimal"]
    assert missing["verdict"] == "not measured" and "compute_optimal" in missing["measured"]


def test_the_figure_has_a_panel_per_model_and_the_path():
    grid = _grid({"vanilla": 0.2, "rec": 0.4, "mor": 0.8})
    fits = compute_optimal.fit_optima(grid)
    fig = plots.plot_compute_optimal(grid, fits, compute_optimal.optimal_path(fits), "Fig. 5a")
    assert len(fig.axes) == 4 and fig.axes[-1].get_title() == "optimal path"
    assert all(ax.get_xlabel() for ax in fig.axes)
