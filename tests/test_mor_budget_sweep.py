"""rlib.mor.budget_sweep: the Figure 3 sweep's settings, runs and table (the runs train in the smoke book)."""

from __future__ import annotations

import pytest

from rlib.config import ConfigError
from rlib.mor import budget_sweep, tables
from rlib.mor.config import BudgetSweepConfig, MoRConfig


def test_fractions_must_lie_below_the_main_budget():
    assert BudgetSweepConfig.preset("cpu").fractions == (0.25,)
    assert BudgetSweepConfig.preset("cpu-long").fractions == (0.25, 0.5)  # cpu's run read back, the middle one added
    with pytest.raises(ConfigError, match=r"fractions \[1.0\] must lie in \(0, 1\)"):
        BudgetSweepConfig(fractions=(0.5, 1.0))


def test_sweep_runs_are_figure_3s_models_and_the_table_joins_the_main_grid():
    cfg = MoRConfig.preset("cpu")
    runs = budget_sweep.sweep_variants(cfg)
    assert [v.label for v in runs] == ["Vanilla", "Recursive-3 (middle_cycle)", "MoR-3 EC"]
    main = [{"name": v.name, "label": v.label, "after": {"nll": 5.0 + i}, "tokens": 1e6, "params": 2e6}
            for i, v in enumerate(runs)]
    main.append({"name": "tc3-middlecycle-flops-s0", "label": "MoR-3 TC", "after": {"nll": 9.0}, "tokens": 1e6,
                 "params": 2e6})
    sweep = [{**r, "budget_flops": cfg.budget / 2, "after": {"nll": r["after"]["nll"] + 0.5}} for r in main[:3]]
    table = tables.budget_sweep_table(main, sweep, cfg)
    assert len(table) == 6 and "MoR-3 TC" not in set(table["label"])
    mor = table[table["label"] == "MoR-3 EC"].set_index("budget_flops")["nll"]
    assert mor[cfg.budget] == 7.0 and mor[cfg.budget / 2] == 7.5
