"""Tables and claims of the measured cost model (`rlib.layerskip.decode_costs`; paper 004, Table 10; inventory
Sec. 5.2-5.3). Beyond the paper: why the paper's drafting reaches less at SmolLM2's scale than at the paper's.

    cost_table   our decoders' rows of one model: measured ms/token and speedup beside the cost model's and the
                 layer-count model's (`decoding.predicted_speedup`, which leaves out the head)
    cost_claims  two claims, thresholds fixed before the first run:
                 "explains"  every self-speculative row's measured speedup lies within `tolerance` (15 %) of the
                             cost model's
                 "the head"  at the best whole-head setting (E, d), the measured acceptance is below what the cost
                             model needs for the goal with the whole head drafting, and at or above what it needs with
                             the task-vocabulary head: the head's cost, not the exits, is what keeps it from the goal
"""

from __future__ import annotations

import pandas as pd

from rlib.layerskip.decode_costs import head_in_layers, required_acceptance, speedup_at
from rlib.layerskip.decoding import vocab_rows

__all__ = ["best_whole_head", "cost_claims", "cost_table"]

COLUMNS = ["label", "acceptance", "tokens_per_round", "drafts_per_round", "ms_per_token", "predicted_ms", "speedup",
           "cost_model_speedup", "measured_over_cost", "predicted_speedup"]


def cost_table(predicted: pd.DataFrame) -> pd.DataFrame:
    """`decode_costs.predict`'s output, our decoders only; `predicted_speedup` renamed `layer_count_speedup`."""
    ours = predicted[predicted["predicted_ms"].notna()]
    return ours[COLUMNS].rename(columns={"predicted_speedup": "layer_count_speedup"}).reset_index(drop=True)


def best_whole_head(predicted: pd.DataFrame) -> tuple[pd.Series, int]:
    """(the fastest whole-head "kvq" self-speculative row, the autoregressive row's new tokens) of a predicted table."""
    spec = predicted[predicted["method"] == "self_speculative"]
    whole = spec[~vocab_rows(spec) & (spec["reuse"] == "kvq")]
    tokens = int(predicted.loc[predicted["method"] == "autoregressive", "new_tokens"].iloc[0])
    return whole.loc[whole["speedup"].idxmax()], tokens


def _fmt(acceptance: float) -> str:
    return "out of reach (> 1)" if acceptance > 1 else f"{acceptance:.2f}"


def cost_claims(predicted: pd.DataFrame, costs: pd.DataFrame, prompts: int, goal: float = 1.5,
                tolerance: float = 0.15, scope: str = "") -> pd.DataFrame:
    """The two claims of the module docstring from `decode_costs.predict`'s output for one model and its cost table;
    `prompts` generations made the table's rows."""
    rows = []

    def add(claim: str, held: bool, evidence: str) -> None:
        rows.append({"claim": f"{scope}: {claim}" if scope else claim, "held": "held" if held else "not held",
                     "evidence": evidence})

    spec = predicted[predicted["method"] == "self_speculative"]
    ratio = spec["measured_over_cost"]
    count = spec["speedup"] / spec["predicted_speedup"]
    inside = int(((ratio - 1).abs() <= tolerance).sum())
    add(f"Beyond the paper: a cost model of measured component times predicts every self-speculative speedup within "
        f"{tolerance:.0%}", inside == len(spec),
        f"measured / predicted {ratio.min():.2f} to {ratio.max():.2f}, within {tolerance:.0%} at {inside} of "
        f"{len(spec)} settings (the layer-count model, without the head: {count.min():.2f} to {count.max():.2f}); "
        f"the head costs {head_in_layers(costs):.1f} layers on one token")
    if not (~vocab_rows(spec) & (spec["reuse"] == "kvq")).any():
        return pd.DataFrame(rows)
    best, tokens = best_whole_head(predicted)
    need = {vocab: required_acceptance(costs, int(best["exit_layer"]), int(best["n_draft"]), goal, tokens, prompts,
                                       vocab=vocab) for vocab in (False, True)}
    measured = float(best["acceptance"])
    ceiling = speedup_at(costs, 1.0, int(best["exit_layer"]), int(best["n_draft"]), tokens, prompts)
    add(f"Beyond the paper: the whole head's cost is what keeps the paper's drafting from {goal}x here (at its best "
        f"E and d the acceptance is below what the whole head needs, and at or above what a task-vocabulary head "
        f"needs)", need[True] <= measured < need[False],
        f"E={int(best['exit_layer'])}, d={int(best['n_draft'])}: measured acceptance {measured:.2f} "
        f"({best['speedup']:.2f}x); "
        f"the cost model needs {_fmt(need[False])} drafting with the whole head, {_fmt(need[True])} with the task "
        f"vocabulary's; at acceptance 1 it gives {ceiling:.2f}x with the whole head")
    return pd.DataFrame(rows)
