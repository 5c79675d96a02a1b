"""The token-budget sweep (rlib.layerskip.budget): derived studies keep every setting but the steps, the table reads
each budget's last and middle exits, and the ledger's budget claim follows the gaps."""

from __future__ import annotations

import pandas as pd
import pytest

from rlib.config import ConfigError
from rlib.layerskip import budget, claims, config
from rlib.layerskip.adapt import _key


def test_presets_and_derived_studies_change_only_the_steps():
    acfg = config.AdaptConfig.preset("cpu-long")
    bcfg = budget.BudgetConfig.preset("cpu-long")
    assert budget.BudgetConfig.preset("cpu").factors == () and bcfg.factors == (3,)
    swept = budget.budget_config(acfg, bcfg)
    (study,) = swept.studies
    base = acfg.study("continual")
    assert study.name == "continual_x3" and study.steps == 3 * base.steps
    assert {k: v for k, v in vars(study).items() if k not in ("name", "steps")} == \
        {k: v for k, v in vars(base).items() if k not in ("name", "steps")}
    run = config.AdaptRun("continual_x3", "ld_ee")
    shared, base_shared = _key(run, swept)[1], _key(config.AdaptRun("continual", "ld_ee"), acfg)[1]
    readings = ("eval_corpora", "tasks")  # a swept run is read where budget_table looks: its corpus, no tasks
    assert (swept.eval_corpora, swept.tasks) == ((base.corpus,), ()) and base.corpus in acfg.eval_corpora
    assert {k: v for k, v in shared.items() if k not in readings} == \
        {k: v for k, v in base_shared.items() if k not in readings}  # every setting that shapes the numbers
    with pytest.raises(ConfigError, match="multiples >= 2"):
        budget.BudgetConfig(study="continual", factors=(1,))
    with pytest.raises(ConfigError, match="no factors"):
        budget.budget_config(acfg, budget.BudgetConfig.preset("cpu"))
    with pytest.raises(ConfigError, match="no study 'chat'"):
        budget.budget_config(acfg, budget.BudgetConfig(study="chat", factors=(2,)))


def _result(study: str, recipe: str, tokens: int, last: float, corpus: str = "gutenberg-poetry") -> dict:
    exits = [{"corpus": c, "exit_layer": e, "ppl": p} for c in (corpus, "shakespeare")
             for e, p in ((15, 1000.0), (30, last if c == corpus else 99.0))]
    return {"study": study, "recipe": recipe, "tokens": tokens, "exits": exits}


def _sweep(gaps: tuple[float, ...]) -> list[dict]:
    results = [{"study": config.SOURCE, "recipe": config.SOURCE, "tokens": 0, "exits": []}]
    for factor, gap in zip((1, 3), gaps):
        study = "continual" if factor == 1 else f"continual_x{factor}"
        results += [_result(study, "baseline", 81920 * factor, 60.0), _result(study, "ld_ee", 81920 * factor,
                                                                              60.0 * (1 + gap))]
    return results + [_result("code", "ld_ee", 51200, 5.0, corpus="python-stdlib")]


def test_the_table_reads_every_budgets_exits_of_the_swept_study_only():
    acfg, bcfg = config.AdaptConfig.preset("cpu-long"), budget.BudgetConfig.preset("cpu-long")
    table = budget.budget_table(_sweep((0.30, 0.10)), acfg, bcfg, 30)
    assert table[["factor", "recipe"]].values.tolist() == [[1, "baseline"], [1, "ld_ee"], [3, "baseline"],
                                                            [3, "ld_ee"]]
    assert table["tokens"].tolist() == [81920, 81920, 245760, 245760] and (table["ppl_middle"] == 1000).all()
    assert table["last_vs_plain"].round(6).tolist() == [0.0, 0.3, 0.0, 0.1]
    with pytest.raises(ConfigError, match="no runs of study 'continual'"):
        budget.budget_table(_sweep(())[-1:], acfg, bcfg, 30)


@pytest.mark.parametrize("gaps, verdict", [((0.30, 0.10), "held"), ((0.30, 0.35), "not held")])
def test_the_budget_claim_follows_the_gaps(gaps, verdict):
    acfg, bcfg = config.AdaptConfig.preset("cpu-long"), budget.BudgetConfig.preset("cpu-long")
    table = budget.budget_table(_sweep(gaps), acfg, bcfg, 30)
    ledger = claims.judge({"last_exit_budget": table}, config.LayerSkipConfig.preset("cpu-long"), acfg,
                          config.ParseConfig.preset("cpu-long"), "cpu-long").finish().set_index("id")
    row = ledger.loc["ls.ours.last_exit_cost_vs_budget"]
    assert row["verdict"] == verdict and f"{gaps[0]:+.1%} after 81,920 tokens" in row["measured"]
    if verdict == "not held":
        assert row["diagnosis"] == "budget" and "orders of magnitude below the paper's 52B" in row["evidence"]
    unswept = claims.judge({}, *(c.preset("cpu") for c in (config.LayerSkipConfig, config.AdaptConfig,
                                                           config.ParseConfig)), "cpu").finish().set_index("id")
    assert unswept.loc["ls.ours.last_exit_cost_vs_budget", "measured"].startswith(
        "the cpu profile leaves 'last_exit_budget' to cpu-long")


def test_the_last_exit_cost_diagnosis_reads_the_sweep():
    from rlib.layerskip.claims.adapt import _budget_gaps
    from rlib.layerskip.claims.base import Context

    acfg, bcfg = config.AdaptConfig.preset("cpu-long"), budget.BudgetConfig.preset("cpu-long")
    found = {"last_exit_budget": budget.budget_table(_sweep((0.30, 0.10)), acfg, bcfg, 30)}
    context = Context(found, config.LayerSkipConfig.preset("cpu-long"), acfg, config.ParseConfig.preset("cpu-long"))
    gaps = _budget_gaps(context, "continual")
    assert isinstance(gaps, pd.Series) and gaps.index.tolist() == [81920, 245760]
    assert gaps.round(6).tolist() == [0.3, 0.1]
    assert _budget_gaps(Context({}, context.cfg, acfg, context.pcfg), "continual") is None


def test_the_figure_draws_without_a_plain_run():
    import matplotlib

    matplotlib.use("Agg")
    from rlib.layerskip.plots import plot_last_exit_budget

    acfg = config.AdaptConfig.preset("cpu-long")
    only = [r for r in _sweep((0.3, 0.1)) if r["recipe"] != "baseline"]
    table = budget.budget_table(only, acfg, budget.BudgetConfig.preset("cpu-long"), 30)
    assert table["last_vs_plain"].isna().all()
    figure = plot_last_exit_budget(table, {"ld_ee": "LD+EE"}, "LD+EE only")
    assert "no plain run" in "".join(t.get_text() for t in figure.axes[1].texts)
