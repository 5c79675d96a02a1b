"""Tables and claims of the TOPv2-like parsing study (paper 004: Fig. 10b, Tables 5, 6 and 10).

    parse_exits    per recipe and exit: teacher-forced exact match and token accuracy (Fig. 10b's data)
    table_10       Table 10's layout from a `rlib.layerskip.decode_study.parse_decoding` table: per method and E the
                   exact match of the generated parses, acceptance, ms/token and speedup
    parse_claims   the exit-quality claims, held or not, with thresholds fixed before the run:
                   "far better"   the LayerSkip middle exit's EM is at least 0.2 above plain fine-tuning's
                   "small cost"   the LayerSkip last exit's EM within 0.05 of plain fine-tuning's (the paper: 3 %)
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from rlib.layerskip.adapt_tables import label  # "plain" fine-tuning for the baseline, as the paper's Fig. 10 says
from rlib.layerskip.decoding import vocab_rows

__all__ = ["label", "parse_claims", "parse_exits", "table_10"]


def parse_exits(results: list[dict[str, Any]]) -> pd.DataFrame:
    frames = [pd.DataFrame(r["exits"]).assign(recipe=r["recipe"]) for r in results]
    table = pd.concat(frames, ignore_index=True)
    return table[["recipe", "exit_layer", "em", "token_acc"]]


def table_10(decoding: pd.DataFrame) -> pd.DataFrame:
    """Rows: autoregressive, early exit per E and self-speculation per E and d ("kvq"), per recipe; column `draft`
    says which head drafts: "head" (the whole shared head, the paper's) or "vocab" (the task vocabulary only)."""
    keep = decoding[(decoding["method"].isin(["autoregressive", "early_exit"]))
                    | ((decoding["method"] == "self_speculative") & (decoding["reuse"] == "kvq"))]
    keep = keep.assign(draft=pd.Series("head", keep.index).where(~vocab_rows(keep), "vocab")
                       .where(keep["method"] == "self_speculative", ""))
    table = keep[["recipe", "method", "exit_layer", "n_draft", "draft", "score", "acceptance", "ms_per_token",
                  "speedup", "identical_to_greedy"]].rename(columns={"score": "em"})
    return table.assign(recipe=table["recipe"].map(label)).reset_index(drop=True)


def _at(exits: pd.DataFrame, recipe: str, layer: int) -> float:
    return float(exits[(exits["recipe"] == recipe) & (exits["exit_layer"] == layer)]["em"].iloc[0])


def parse_claims(results: list[dict[str, Any]], middle: int, last: int, layerskip: str = "ld_ee") -> pd.DataFrame:
    """The exit-quality claims; the decoding claims come from `rlib.layerskip.tables.decoding_claims`."""
    rows = []

    def add(claim: str, held: bool | None, evidence: str) -> None:
        rows.append({"claim": f"parsing: {claim}", "held": {True: "held", False: "not held", None: "not measured"}[
            held], "evidence": evidence})

    exits = parse_exits(results)
    recipes = set(exits["recipe"])
    if {layerskip, "baseline"} <= recipes:
        em = {(r, w): _at(exits, r, layer) for r in ("baseline", layerskip)
              for w, layer in (("middle", middle), ("last", last))}
        add(f"LayerSkip fine-tuning makes the middle exit (layer {middle}) far better than plain fine-tuning's "
            "(exact match >= 0.2 higher; Fig. 10b: 0 vs 77 %)",
            em[layerskip, "middle"] - em["baseline", "middle"] >= 0.2,
            f"middle-exit EM: plain {em['baseline', 'middle']:.3f}, LayerSkip {em[layerskip, 'middle']:.3f}")
        add("at a small last-exit cost (EM within 0.05 of plain fine-tuning's; the paper: 3 %)",
            em[layerskip, "last"] >= em["baseline", "last"] - 0.05,
            f"last-exit EM: plain {em['baseline', 'last']:.3f}, LayerSkip {em[layerskip, 'last']:.3f}")
    else:
        add("LayerSkip vs plain fine-tuning", None, f"needs {layerskip} and baseline runs")
    return pd.DataFrame(rows)
