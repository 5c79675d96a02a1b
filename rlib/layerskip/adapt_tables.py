"""Tables and claims of LayerSkip on the pretrained model (paper 004: Table 1, Figs. 2, 6 and 10a).

    exit_long      per study, recipe, corpus and exit: held-out NLL, perplexity and top-1 accuracy (the source model
                   is repeated in every study, as the comparison every study starts from)
    task_long      per study, recipe, task and exit: the task's primary metric (`rlib.tasks.PRIMARY_METRIC`)
    table_1        Table 1's layout for one study: rows = perplexity per corpus and accuracy per task, columns =
                   the last and the middle exit of every model
    probe_summary  Fig. 2's number per model: mean layers a generated token needs, both readings (first / stable)
    adapt_claims   the claims, held or not, with thresholds fixed up front: "far better" = at least 3x lower
                   middle-exit perplexity; "small cost" = the last exit's perplexity within 5 % of plain training on
                   the same tokens (the fair control; against the untouched source it is reported, not judged)
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from rlib.layerskip.adapt import SOURCE
from rlib.layerskip.tables import RECIPE_LABELS
from rlib.tasks import PRIMARY_METRIC

__all__ = ["adapt_claims", "exit_long", "label", "probe_summary", "table_1", "task_long"]


def label(recipe: str) -> str:
    """A recipe's name in a study on the pretrained model: "baseline" is plain training on the same tokens."""
    return {SOURCE: "pretrained", "baseline": "plain"}.get(recipe) or RECIPE_LABELS.get(recipe, recipe)


def _studies(results: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(r["study"] for r in results if r["study"] != SOURCE))


def _long(results: list[dict[str, Any]], field: str) -> pd.DataFrame:
    source = [r for r in results if r["study"] == SOURCE]
    frames = []
    for study in _studies(results):
        for r in source + [r for r in results if r["study"] == study]:
            frame = pd.DataFrame(r[field])
            frame.insert(0, "recipe", r["recipe"])
            frame.insert(0, "study", study)
            frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def exit_long(results: list[dict[str, Any]]) -> pd.DataFrame:
    return _long(results, "exits")[["study", "recipe", "corpus", "exit_layer", "nll", "ppl", "top1_acc",
                                     "agree_last"]]


def task_long(results: list[dict[str, Any]]) -> pd.DataFrame:
    tasks = _long(results, "tasks")
    primary = tasks["metric"] == tasks["task"].map(PRIMARY_METRIC)
    return tasks[primary].reset_index(drop=True)[["study", "recipe", "task", "metric", "exit_layer", "value", "n"]]


def table_1(results: list[dict[str, Any]], study: str, middle: int, last: int) -> pd.DataFrame:
    """Rows "PPL <corpus>" and "<task> <metric> (%)"; a column per (exit, model), last exits first."""
    exits = exit_long(results)
    exits = exits[exits["study"] == study]
    tasks = task_long(results)
    tasks = tasks[tasks["study"] == study]
    recipes = list(dict.fromkeys(exits["recipe"]))
    rows = []
    for corpus, part in exits.groupby("corpus", sort=False):
        row = {"metric": f"PPL {corpus}"}
        for where, layer in (("last", last), ("middle", middle)):
            for recipe in recipes:
                row[f"{where} {label(recipe)}"] = float(
                    part[(part["recipe"] == recipe) & (part["exit_layer"] == layer)]["ppl"].iloc[0])
        rows.append(row)
    for (task, metric), part in tasks.groupby(["task", "metric"], sort=False):
        row = {"metric": f"{task} {metric} (%)"}
        for where, layer in (("last", last), ("middle", middle)):
            for recipe in recipes:
                row[f"{where} {label(recipe)}"] = 100 * float(
                    part[(part["recipe"] == recipe) & (part["exit_layer"] == layer)]["value"].iloc[0])
        rows.append(row)
    return pd.DataFrame(rows)


def probe_summary(probes: dict[str, pd.DataFrame], n_layers: int) -> pd.DataFrame:
    """probes: {model label: `rlib.layerskip.analysis.layers_needed` table} -> mean layers needed, both readings, and
    the oracle's saving bound 1 - mean / L (the paper: 23.45 of 32 layers, at most 26 % saved)."""
    rows = []
    for name, table in probes.items():
        first, stable = table["first"].mean(), table["stable"].mean()
        rows.append({"model": name, "tokens": len(table), "mean_first": first, "mean_stable": stable,
                     "saving_bound_first": 1 - first / n_layers, "saving_bound_stable": 1 - stable / n_layers})
    return pd.DataFrame(rows)


def _ppl(exits: pd.DataFrame, study: str, recipe: str, corpus: str, layer: int) -> float:
    part = exits[(exits["study"] == study) & (exits["recipe"] == recipe) & (exits["corpus"] == corpus)
                 & (exits["exit_layer"] == layer)]
    return float(part["ppl"].iloc[0])


def adapt_claims(results: list[dict[str, Any]], corpora: dict[str, str], middle: int, last: int,
                 probe: pd.DataFrame | None = None, layerskip: str = "ld_ee") -> pd.DataFrame:
    """corpora: {study: the corpus its claims read (its own training corpus)}."""
    rows = []

    def add(claim: str, held: bool | None, evidence: str) -> None:
        rows.append({"claim": claim, "held": {True: "held", False: "not held", None: "not measured"}[held],
                     "evidence": evidence})

    studies = _studies(results)
    exits = exit_long(results) if studies else None
    tasks = task_long(results) if studies else None
    for study in studies:
        recipes = set(exits[exits["study"] == study]["recipe"])
        corpus = corpora[study]
        if not {layerskip, "baseline"} <= recipes:
            add(f"{study}: LayerSkip vs plain training on the same tokens", None,
                f"needs {layerskip} and baseline runs")
            continue
        ppl = {(r, where): _ppl(exits, study, r, corpus, layer)
               for r in (SOURCE, "baseline", layerskip) for where, layer in (("middle", middle), ("last", last))}
        vs_source = ppl[SOURCE, "middle"] / ppl[layerskip, "middle"]
        vs_plain = ppl["baseline", "middle"] / ppl[layerskip, "middle"]
        add(f"{study}: LayerSkip makes the middle exit (layer {middle}) far better than the pretrained model's and "
            f"than plain training on the same tokens (>= 3x lower perplexity on {corpus})",
            bool(vs_source >= 3 and vs_plain >= 3),
            f"middle-exit perplexity: pretrained {ppl[SOURCE, 'middle']:.3g}, plain {ppl['baseline', 'middle']:.3g}, "
            f"LayerSkip {ppl[layerskip, 'middle']:.3g} ({vs_source:.3g}x and {vs_plain:.3g}x lower)")
        cost = ppl[layerskip, "last"] / ppl["baseline", "last"] - 1
        add(f"{study}: at a small last-exit cost (perplexity within 5 % of plain training on the same tokens)",
            bool(cost <= 0.05),
            f"last-exit perplexity on {corpus}: plain {ppl['baseline', 'last']:.2f}, LayerSkip "
            f"{ppl[layerskip, 'last']:.2f} ({100 * cost:+.1f} %); the pretrained model {ppl[SOURCE, 'last']:.2f}")
        part = tasks[(tasks["study"] == study) & (tasks["exit_layer"] == middle)].set_index(["recipe", "task"])
        better = [t for t in dict.fromkeys(part.index.get_level_values("task"))
                  if part.loc[(layerskip, t), "value"] > part.loc[("baseline", t), "value"]]
        n_tasks = len(set(part.index.get_level_values("task")))
        add(f"{study}: the middle exit's task accuracy is higher with LayerSkip than with plain training on every "
            "local task", bool(n_tasks and len(better) == n_tasks),
            "; ".join(f"{t}: plain {100 * part.loc[('baseline', t), 'value']:.0f} %, LayerSkip "
                      f"{100 * part.loc[(layerskip, t), 'value']:.0f} %"
                      for t in dict.fromkeys(part.index.get_level_values("task"))))
    if probe is not None and len(probe) > 1:
        base = probe.iloc[0]
        lower = [r for r in probe.iloc[1:].itertuples() if r.mean_first < base["mean_first"]
                 and r.mean_stable < base["mean_stable"]]
        add("Fig. 2: LayerSkip training lowers the mean number of layers a generated token needs (both readings)",
            len(lower) == len(probe) - 1,
            "; ".join(f"{r.model}: first {r.mean_first:.1f}, stable {r.mean_stable:.1f} of {last}"
                      for r in probe.itertuples()))
    return pd.DataFrame(rows)
