"""The last exit's cost against the token budget (paper 004, Sec. 6.1 and Table 1; issue 25 item 3).

After 52B tokens of continual pretraining the paper's LayerSkip Llama2 has a last layer almost as good as the
original's (perplexity +0.5 %, tasks within 2.9 points). At our budget (160 steps of 512 tokens) the LD+EE model's
last exit is 30 % worse than plain training on the same tokens. Does that gap close with more tokens? This module
trains a pretrained-model study again at whole multiples of its steps (`BudgetConfig.factors`; the study itself is
the 1x point and is read back from its own run) and tabulates the last and middle exits of both recipes per budget.

Each budget is a study of its own (`<study>_x<factor>`, every other setting the same: recipes, learning rate and its
cosine schedule stretched over the longer run, LayerSkip settings), trained and cached by `rlib.layerskip.adapt`, so
the runs are keyed like the chapter's other runs of the pretrained model.

    BudgetConfig   which study is swept and at which multiples, per profile (cpu: none; cpu-long: 3x)
    budget_config  the AdaptConfig whose studies are the swept budgets
    run_sweep      train (or read back) every budget's runs
    budget_table   one row per (budget, recipe): tokens, last and middle exit perplexity on the study's corpus and
                   the LD+EE / plain ratio of the last exit's perplexity
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from rlib.config import ConfigError, Preset
from rlib.layerskip.config import AdaptConfig, AdaptRun, Study

__all__ = ["BudgetConfig", "budget_config", "budget_table", "run_sweep"]


@dataclass(frozen=True)
class BudgetConfig(Preset):
    """The token-budget sweep per profile: the swept study and its step multiples (1x is the study's own run)."""

    study: str  # a study of the profile's AdaptConfig
    factors: tuple[int, ...]  # multiples of its steps trained beyond 1x; () = no sweep in this profile

    PRESETS = {
        "smoke": dict(study="continual", factors=(2,)),
        "cpu": dict(study="continual", factors=()),  # 3x alone takes about 40 min: cpu-long
        "cpu-long": dict(study="continual", factors=(3,)),
        "gpu": dict(study="continual", factors=(4, 16)),
    }

    def __post_init__(self) -> None:
        object.__setattr__(self, "factors", tuple(self.factors))
        bad = [f for f in self.factors if f < 2]
        if bad or len(set(self.factors)) != len(self.factors):
            raise ConfigError(f"factors {list(self.factors)} must be distinct whole multiples >= 2 (1x is the study's "
                              "own run)")


def _swept(study: Study, factor: int) -> Study:
    return replace(study, name=f"{study.name}_x{factor}", steps=study.steps * factor)


def budget_config(acfg: AdaptConfig, bcfg: BudgetConfig) -> AdaptConfig:
    """`acfg` with the swept budgets as its studies (decoded greedily; the sweep reads exits, it does not decode).

    A swept run is read only where `budget_table` looks: per-exit perplexity on the study's own corpus, no local
    tasks and no other corpus (at 3x on 2 cores those readings cost about 3 min per run and no table used them)."""
    base = acfg.study(bcfg.study)
    if not bcfg.factors:
        raise ConfigError(f"the budget sweep of {bcfg.study!r} has no factors in this profile")
    return replace(acfg, studies=tuple(_swept(base, f) for f in bcfg.factors), decode_sampled_studies=(),
                   eval_corpora=(base.corpus,), tasks=())


def run_sweep(acfg: AdaptConfig, bcfg: BudgetConfig, work: Path, source=None) -> list[dict[str, Any]]:
    """Train (or read back from `work`, the pretrained-model studies' folder) every recipe at every factor."""
    from rlib.layerskip import adapt

    swept = budget_config(acfg, bcfg)
    runs = [AdaptRun(s.name, r) for s in swept.studies for r in s.recipes]
    return adapt.run_grid(swept, work, source=source, runs=runs)


def budget_table(results: list[dict[str, Any]], acfg: AdaptConfig, bcfg: BudgetConfig, n_layers: int
                 ) -> pd.DataFrame:
    """results: the chapter's pretrained-model runs plus `run_sweep`'s. One row per (budget, recipe) of the swept
    study: factor, tokens, last and middle exit perplexity on its corpus, and `last_vs_plain` (the last exit's
    perplexity over plain training's at the same budget, minus 1)."""
    base = acfg.study(bcfg.study)
    names = {base.name: 1, **{_swept(base, f).name: f for f in bcfg.factors}}
    rows = []
    for result in results:
        factor = names.get(result["study"])
        if factor is None:
            continue
        exits = pd.DataFrame(result["exits"])
        exits = exits[exits["corpus"] == base.corpus].set_index("exit_layer")["ppl"]
        rows.append({"study": base.name, "factor": factor, "tokens": result["tokens"], "recipe": result["recipe"],
                     "ppl_last": float(exits[n_layers]), "ppl_middle": float(exits[n_layers // 2])})
    if not rows:
        raise ConfigError(f"no runs of study {base.name!r} or its budgets among the results")
    table = pd.DataFrame(rows).sort_values(["factor", "recipe"]).reset_index(drop=True)
    plain = table[table["recipe"] == "baseline"].set_index("factor")["ppl_last"]
    table["last_vs_plain"] = table["ppl_last"] / table["factor"].map(plain) - 1
    return table
