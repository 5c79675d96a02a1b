"""App. D.1's learning-rate tuning of Table 1's language models: "hyperparameter tuning given by: ..." (the grid is
lost from the text; the released sweep is 1e-3 / 3.16e-3 / 1e-2, and the cpu profiles add 3.16e-2 above it, ours).
Each (block, depth) shape trains its first seed at every rate of `RecurrentConfig.lm_lrs`; the rate with the lowest
final validation NLL is the shape's, its other seeds train at it, and Table 1 reports the test NLL of the runs at the
chosen rates (validation chooses, test reports)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

__all__ = ["RELEASED_LRS", "chosen_rates", "describe_grid", "mark_table1", "tuning_table"]

RELEASED_LRS = (1e-3, 3.16e-3, 1e-2)  # the official code's sweep (the paper's text lost the values)


def describe_grid(grid: tuple[float, ...]) -> str:
    """'a / b / c (the released sweep)' and, where the grid departs from it, which rates are ours and which of the
    released ones it leaves out."""
    def rates(values) -> str:
        return " / ".join(f"{lr:g}" for lr in sorted(values))

    ours = [lr for lr in grid if not any(math.isclose(lr, r) for r in RELEASED_LRS)]
    released = [lr for lr in grid if lr not in ours]
    left_out = [r for r in RELEASED_LRS if not any(math.isclose(lr, r) for lr in grid)]
    text = f"{rates(released)} (the released sweep{', less ' + rates(left_out) if left_out else ''})" if released \
        else f"no rate of the released sweep ({rates(RELEASED_LRS)})"
    return text + (f" and {rates(ours)} (ours)" if ours else "")


def _tuning_rows(results: list[dict[str, Any]], first_seed: int, grid: tuple[float, ...]) -> list[dict[str, Any]]:
    """The first seed's runs with the norm at the default batch and a rate of the grid (not an ablation's other
    rate)."""
    return [r for r in results if r["seed"] == first_seed and r["table1"] and any(math.isclose(r["lr"], lr)
                                                                                 for lr in grid)]


def _val(r: dict[str, Any]) -> float:
    value = r["val_loss"]
    return value if value is not None and math.isfinite(value) else math.inf


def chosen_rates(results: list[dict[str, Any]], first_seed: int,
                 grid: tuple[float, ...]) -> dict[tuple[str, str], float]:
    """Each shape's rate: the lowest final validation NLL among its first-seed runs with the norm at the default batch
    (a diverged run, NaN, never wins; ties go to the lower rate)."""
    best: dict[tuple[str, str], tuple[float, float]] = {}
    for r in _tuning_rows(results, first_seed, grid):
        key, candidate = (r["block"], r["depth"]), (_val(r), r["lr"])
        if key not in best or candidate < best[key]:
            best[key] = candidate
    return {shape: lr for shape, (_, lr) in best.items()}


def mark_table1(results: list[dict[str, Any]], rates: dict[tuple[str, str], float]) -> list[dict[str, Any]]:
    """The results with `main` set: True for Table 1's runs (with the norm, the default batch, the shape's chosen
    rate), False for the other rates of the tuning grid and the ablations."""
    return [{**r, "main": bool(r["table1"] and math.isclose(r["lr"], rates.get((r["block"], r["depth"]), math.nan)))}
            for r in results]


def tuning_table(results: list[dict[str, Any]], first_seed: int, grid: tuple[float, ...]) -> pd.DataFrame:
    """One row per Table 1 shape and rate of the first seed: final validation and test NLL, whether the rate was
    chosen, and whether the chosen rate sits at an edge of the grid (the optimum may lie beyond it)."""
    columns = ["block", "depth", "n_layers", "d_model", "lr", "val_loss", "test_nll", "chosen", "at_edge"]
    rows = _tuning_rows(results, first_seed, grid)
    if not rows:
        return pd.DataFrame(columns=columns)
    rates = chosen_rates(results, first_seed, grid)
    table = pd.DataFrame([{"block": r["block"], "depth": r["depth"], "n_layers": r["n_layers"],
                           "d_model": r["d_model"], "lr": r["lr"], "val_loss": r["val_loss"],
                           "test_nll": r["test_nll"]} for r in rows])
    shapes = list(zip(table["block"], table["depth"]))
    tried = table.groupby(["block", "depth"])["lr"].agg(["min", "max", "count"])  # each shape's rates
    table["chosen"] = [math.isclose(lr, rates[shape]) for shape, lr in zip(shapes, table["lr"])]
    table["at_edge"] = [bool(chosen and tried.loc[shape, "count"] > 1 and any(
                            math.isclose(lr, tried.loc[shape, end]) for end in ("min", "max")))
                        for shape, lr, chosen in zip(shapes, table["lr"], table["chosen"])]
    return table[columns].sort_values(["block", "depth", "lr"]).reset_index(drop=True)
