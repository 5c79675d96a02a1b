"""Chapter 05's tables and training claims from the grid's run records (paper 004, Figs. 8, 11, 12; Table 1).

    exit_table        per recipe and exit layer: held-out NLL, perplexity, top-1 accuracy, mean (and s.d.) over seeds
    mid_last_table    Table 1's layout: each recipe's perplexity at the middle and the last exit, against the baseline
    probe_curves      the middle and last exits' held-out NLL during training, long format (Fig. 11)
    train_curves      training loss against steps, long format (Fig. 12)
    curriculum_table  the early-exit curricula side by side: exits' perplexity and seconds per step (Sec. 4.1.2)
    decoding_claims   self-speculation: exact, acceptance vs E, the baseline's (lack of) speedup, cache reuse, the peer
    matmul_claims     beyond the paper: what `fast_decoding`'s few-token products do to the baseline and to the speedup
    training_claims   the claims a small run can test, held or not, with the numbers; thresholds fixed up front:
                      "far better" = the middle exit's perplexity at least 3x lower (the inventory's small-scale
                      expectation), "small cost" = the last exit's perplexity within 5 %
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from rlib.layerskip.decoding import vocab_rows

__all__ = ["curriculum_table", "decoding_claims", "exit_table", "matmul_claims", "mid_last_table", "probe_curves",
           "train_curves", "training_claims"]

RECIPE_LABELS = {"baseline": "baseline", "ld": "LD", "ee": "EE", "ld_ee": "LD+EE", "ld_const": "LD const",
                 "ee_all": "EE all layers", "ee_gradual": "EE gradual"}


def _exits_long(results: list[dict[str, Any]]) -> pd.DataFrame:
    frames = []
    for r in results:
        frame = pd.DataFrame(r["exits"])
        frame["recipe"], frame["seed"] = r["recipe"], r["seed"]
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def exit_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    long = _exits_long(results)
    table = long.groupby(["recipe", "exit_layer"], sort=False).agg(
        nll=("nll", "mean"), nll_sd=("nll", "std"), top1_acc=("top1_acc", "mean"), agree_last=("agree_last", "mean"),
        seeds=("seed", "count"))
    table = table.reset_index()
    table["ppl"] = table["nll"].map(math.exp)  # perplexity of the seed-mean NLL
    return table[["recipe", "exit_layer", "nll", "nll_sd", "ppl", "top1_acc", "agree_last", "seeds"]]


def mid_last_table(results: list[dict[str, Any]], middle: int, last: int) -> pd.DataFrame:
    table = exit_table(results)
    rows = []
    base = table[table["recipe"] == "baseline"].set_index("exit_layer")
    for recipe, part in table.groupby("recipe", sort=False):
        part = part.set_index("exit_layer")
        rows.append({"recipe": recipe, "label": RECIPE_LABELS.get(recipe, recipe),
                     "ppl_middle": part.loc[middle, "ppl"], "ppl_last": part.loc[last, "ppl"],
                     "acc_middle": part.loc[middle, "top1_acc"], "acc_last": part.loc[last, "top1_acc"],
                     "agree_middle": part.loc[middle, "agree_last"],
                     "middle_vs_baseline": base.loc[middle, "ppl"] / part.loc[middle, "ppl"],
                     "last_vs_baseline": part.loc[last, "ppl"] / base.loc[last, "ppl"]})
    return pd.DataFrame(rows)


def probe_curves(results: list[dict[str, Any]]) -> pd.DataFrame:
    rows = []
    for r in results:
        for record in r["probe"]:
            for name, value in record.items():
                if name.startswith("nll_exit_"):
                    rows.append({"recipe": r["recipe"], "seed": r["seed"], "step": record["step"],
                                 "exit_layer": int(name.removeprefix("nll_exit_")), "nll": value})
    return pd.DataFrame(rows)


def train_curves(results: list[dict[str, Any]], recipes: tuple[str, ...] | None = None) -> pd.DataFrame:
    rows = [{"recipe": r["recipe"], "seed": r["seed"], "step": step, "loss": loss}
            for r in results if recipes is None or r["recipe"] in recipes
            for step, loss in zip(r["train_curve"]["step"], r["train_curve"]["loss"])]
    return pd.DataFrame(rows)


def curriculum_table(results: list[dict[str, Any]], middle: int, last: int) -> pd.DataFrame:
    wanted = [r for r in results if r["recipe"] in ("baseline", "ee", "ee_all", "ee_gradual")]
    table = mid_last_table(wanted, middle, last)
    seconds = pd.DataFrame([{"recipe": r["recipe"], "step_seconds": r["step_seconds"]} for r in wanted])
    return table.merge(seconds.groupby("recipe", sort=False).mean().reset_index(), on="recipe")


def _final_loss(results: list[dict[str, Any]], recipe: str, tail: float = 0.1) -> list[float]:
    """Per seed: the mean training loss over the last `tail` of the run (one step's loss is noisy)."""
    out = []
    for r in results:
        if r["recipe"] == recipe:
            losses = r["train_curve"]["loss"]
            out.append(sum(losses[-max(1, int(tail * len(losses))):]) / max(1, int(tail * len(losses))))
    return out


def training_claims(results: list[dict[str, Any]], middle: int, last: int) -> pd.DataFrame:
    rows = []

    def add(claim: str, held: bool | None, evidence: str) -> None:
        rows.append({"claim": claim, "held": {True: "held", False: "not held", None: "not measured"}[held],
                     "evidence": evidence})

    recipes = {r["recipe"] for r in results}
    table = mid_last_table(results, middle, last).set_index("recipe")
    if "ld_ee" in recipes:
        row = table.loc["ld_ee"]
        base = table.loc["baseline"]
        held = bool(row["middle_vs_baseline"] >= 3 and row["last_vs_baseline"] <= 1.05)
        add("LayerSkip (LD+EE) makes middle-layer exits far better than the baseline's (>= 3x lower perplexity) at "
            "a small last-layer cost (<= 5 %)", held,
            f"middle exit (layer {middle}) perplexity {base['ppl_middle']:.1f} -> {row['ppl_middle']:.1f} "
            f"({row['middle_vs_baseline']:.1f}x lower); last exit {base['ppl_last']:.2f} -> {row['ppl_last']:.2f} "
            f"({100 * (row['last_vs_baseline'] - 1):+.1f} %)")
    else:
        add("LayerSkip (LD+EE) makes middle-layer exits far better than the baseline's", None, "no ld_ee run")
    if "ld_ee" in recipes:
        ls, base = table.loc["ld_ee", "agree_middle"], table.loc["baseline", "agree_middle"]
        add("On held-out text the middle exit's greedy token matches the last exit's more often with LayerSkip (a "
            "teacher-forced acceptance rate, free of generation loops)", bool(ls > base),
            f"middle exit agrees with the last on {100 * base:.1f} % of positions (baseline) vs {100 * ls:.1f} % "
            "(LD+EE)")
    if {"ee", "ld"} <= recipes:
        ee, ld = table.loc["ee", "middle_vs_baseline"], table.loc["ld", "middle_vs_baseline"]
        add("The early-exit loss, not layer dropout, drives middle-exit quality (EE's middle-exit gain over the "
            "baseline exceeds LD's)", bool(ee > ld), f"middle-exit perplexity gain over the baseline: EE {ee:.2f}x, "
            f"LD {ld:.2f}x")
    if {"ld", "ld_const"} <= recipes:
        exp, const = _final_loss(results, "ld"), _final_loss(results, "ld_const")
        spread = max(pd.Series(exp).std() if len(exp) > 1 else 0.0, pd.Series(const).std() if len(const) > 1 else 0.0)
        mean_exp, mean_const = sum(exp) / len(exp), sum(const) / len(const)
        gap = mean_const - mean_exp
        add("Exponential per-layer dropout trains to a lower loss than constant dropout of equal mean (by more than "
            "the seed s.d.)", bool(gap > spread), f"final training loss (last 10 % of steps): Exp {mean_exp:.4f}, "
            f"Const {mean_const:.4f}, gap {gap:+.4f}, seed s.d. {spread:.4f} ({len(exp)} seeds)")
    if {"ee", "ee_all"} <= recipes:
        seconds = {r: pd.Series([x["step_seconds"] for x in results if x["recipe"] == r]).mean()
                   for r in ("ee", "ee_all")}
        add("Early-exit loss on every layer at every step hurts the last layer and costs time (vs the rotational "
            "curriculum)", bool(table.loc["ee_all", "ppl_last"] > table.loc["ee", "ppl_last"]
                                and seconds["ee_all"] > seconds["ee"]),
            f"last-exit perplexity: all {table.loc['ee_all', 'ppl_last']:.2f} vs rotational "
            f"{table.loc['ee', 'ppl_last']:.2f}; seconds per step {seconds['ee_all']:.3f} vs {seconds['ee']:.3f} "
            "(mean over seeds)")
    curves = probe_curves(results)
    if len(curves) and {"baseline", "ee"} <= recipes:
        mid = curves[curves["exit_layer"] == middle].groupby(["recipe", "step"])["nll"].mean()
        rise = {r: float(mid.loc[r].iloc[-1] - mid.loc[r].min()) for r in ("baseline", "ee")}
        add("The baseline's middle-exit NLL rises (or stalls) during training while EE's keeps falling (Fig. 11)",
            bool(rise["baseline"] > 0.05 and rise["ee"] <= 0.05),
            f"final minus best middle-exit NLL: baseline {rise['baseline']:+.3f}, EE {rise['ee']:+.3f} nats")
    return pd.DataFrame(rows)


def decoding_claims(table: pd.DataFrame, layerskip: str = "ld_ee", goal: float = 1.5, scope: str = "",
                    min_distinct: float = 0.5) -> pd.DataFrame:
    """Claims from a `rlib.layerskip.decode_study` table (rows per recipe and decoder); `scope` prefixes each claim
    (which models they are about). The speedup goal counts only on greedy output with distinct-2 >= `min_distinct`:
    a model stuck in a repetition loop is easy for any exit to draft, so its speedup says nothing about LayerSkip
    (a condition added after the first cpu run showed such loops; it can only turn a claim from held to not held)."""
    rows = []

    def add(claim: str, held: bool | None, evidence: str) -> None:
        rows.append({"claim": f"{scope}: {claim}" if scope else claim,
                     "held": {True: "held", False: "not held", None: "not measured"}[held], "evidence": evidence})

    exact = table[table["method"].isin(["self_speculative", "hf_early_exit", "hf_greedy"])]
    add("Self-speculative output equals greedy output token for token (every E, d and cache mode tried)",
        bool(exact["identical_to_greedy"].all()),
        f"{int(exact['identical_to_greedy'].sum())} of {len(exact)} decoder settings identical on every prompt")
    vocab = vocab_rows(table)
    paper = table[~vocab]  # the paper's drafting: the whole shared head
    spec = paper[(paper["method"] == "self_speculative") & (paper["reuse"] == "kvq")]
    ours = spec[spec["recipe"] == layerskip]
    by_exit = ours.groupby("exit_layer")["acceptance"].mean()
    add("Acceptance rises with the exit layer E (LayerSkip model, mean over d)", bool(by_exit.is_monotonic_increasing),
        "; ".join(f"E={e}: {a:.2f}" for e, a in by_exit.items()))
    best = spec.groupby("recipe")["speedup"].max()
    loops = table[table["method"] == "autoregressive"].set_index("recipe")["distinct_2"]
    if "baseline" in best.index:
        add("The baseline model gets little or no speedup from self-speculation (best <= 1.1x, and below "
            "LayerSkip's best)", bool(best["baseline"] <= 1.1 and best["baseline"] < best[layerskip]),
            f"best speedup over (E, d): baseline {best['baseline']:.2f}x, LayerSkip {best[layerskip]:.2f}x; greedy "
            f"output distinct-2 (1 = no repeated bigram): baseline {loops.get('baseline', float('nan')):.2f}, "
            f"LayerSkip {loops.get(layerskip, float('nan')):.2f} (a looping output is easy for any exit to draft)")
    modes = paper[(paper["method"] == "self_speculative") & (paper["recipe"] == layerskip)]
    wide = modes.pivot_table(index=["exit_layer", "n_draft"], columns="reuse", values="ms_per_token")
    others = [c for c in wide.columns if c != "kvq"]
    if others:
        wins = {c: int((wide["kvq"] < wide[c]).sum()) for c in others}
        add("Cache reuse lowers time per token (kvq faster than each other mode at most (E, d))",
            all(w > len(wide) / 2 for w in wins.values()),
            "; ".join(f"kvq faster than {c} at {w} of {len(wide)} settings, mean ms/token {wide['kvq'].mean():.2f} "
                      f"vs {wide[c].mean():.2f}" for c, w in wins.items()))
    top = ours.loc[ours["speedup"].idxmax()]
    fluent = loops.get(layerskip, float("nan"))
    add(f"Self-speculation vs autoregressive on the same LayerSkip model, batch 1 (goal >= {goal}x at the best E, "
        f"on greedy output that is not a loop: distinct-2 >= {min_distinct})",
        bool(top["speedup"] >= goal and fluent >= min_distinct), f"best {top['speedup']:.2f}x at "
        f"E={int(top['exit_layer'])}, d={int(top['n_draft'])} (acceptance {top['acceptance']:.2f}, layer-count "
        f"model {top['predicted_speedup']:.2f}x); greedy output distinct-2 {fluent:.2f}")
    narrow = table[vocab & (table["method"] == "self_speculative") & (table["recipe"] == layerskip)]
    if len(narrow):
        best_narrow = narrow.loc[narrow["speedup"].idxmax()]
        add(f"Beyond the paper: drafting over the task vocabulary only (the whole head verifies) reaches >= {goal}x "
            f"at the best (E, d), output still exact and not a loop", bool(best_narrow["speedup"] >= goal
                                                                          and fluent >= min_distinct
                                                                          and narrow["identical_to_greedy"].all()),
            f"best {best_narrow['speedup']:.2f}x at E={int(best_narrow['exit_layer'])}, "
            f"d={int(best_narrow['n_draft'])} (acceptance {best_narrow['acceptance']:.2f}) vs {top['speedup']:.2f}x "
            f"drafting with the whole head; identical to greedy at {int(narrow['identical_to_greedy'].sum())} of "
            f"{len(narrow)} settings")
    peer = table[(table["method"] == "hf_early_exit") & (table["recipe"] == layerskip)].set_index(
        ["exit_layer", "n_draft"])["ms_per_token"]
    mine = ours.set_index(["exit_layer", "n_draft"])["ms_per_token"].reindex(peer.index)
    if len(peer):
        add("Ours is faster than transformers' assistant_early_exit at the same (E, d)", bool((mine < peer).all()),
            f"mean ms/token ours {mine.mean():.2f} vs transformers {peer.mean():.2f}; faster at "
            f"{int((mine < peer).sum())} of {len(peer)} settings")
    return pd.DataFrame(rows)


def matmul_claims(ablation: pd.DataFrame, scope: str = "") -> pd.DataFrame:
    """One claim from `decode_study.parse_matmul_ablation`'s table: with `fast_decoding` on, the autoregressive
    baseline is faster and every self-speculative output is still the greedy output; the evidence gives both halves'
    baseline ms/token and exact match and each self-speculation row's speedup over its own half's baseline."""
    half = {fast: ablation[ablation["fast_matmul"] == fast] for fast in (False, True)}
    base = {fast: frame[frame["method"] == "autoregressive"].iloc[0] for fast, frame in half.items()}
    spec = ablation[ablation["method"] == "self_speculative"]
    fast_speedup = half[True].set_index("label")["speedup"]
    speedups = "; ".join(f"{row.label}: {row.speedup:.2f}x off, {fast_speedup[row.label]:.2f}x on"
                         for row in half[False][half[False]["method"] == "self_speculative"].itertuples())
    score = f", exact match {base[False]['score']:.2f} vs {base[True]['score']:.2f}" if "score" in ablation else ""
    held = bool(base[True]["ms_per_token"] < base[False]["ms_per_token"] and spec["identical_to_greedy"].all())
    claim = ("Beyond the paper: few-token products (fast_decoding) make the autoregressive baseline faster, and every "
             "self-speculative output stays the greedy output")
    return pd.DataFrame([{"claim": f"{scope}: {claim}" if scope else claim, "held": "held" if held else "not held",
                          "evidence": f"baseline {base[False]['ms_per_token']:.1f} ms/token off vs "
                                      f"{base[True]['ms_per_token']:.1f} on{score}; speedup over each half's own "
                                      f"baseline: {speedups}; identical to greedy at "
                                      f"{int(spec['identical_to_greedy'].sum())} of {len(spec)} settings"}])
