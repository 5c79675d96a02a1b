"""Chapter 01's tables from the grid's results (Relaxed Recursive Transformers Table F.1, Fig. 4, Table I.1, Table 2,
Fig. 5 / F.1 / F.2's curves).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from rlib.experiments import training_curves as loss_curves
from rlib.recursive.config import RecursiveConfig, Variant

__all__ = ["curve_labels", "flat", "headline", "init_table", "kd_table", "loss_curves", "shift_table", "size_table",
           "speed_table", "task_change_se"]


def flat(results: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per variant: its fields, unique/non-embedding parameters, and before/after metrics as columns."""
    rows = []
    for r in results:
        row = {"name": r["name"], **r["variant"], "corpus": r["corpus"],
               "unique_params": r["params"]["unique"], "non_embedding_params": r["params"]["non_embedding"],
               "tokens": r["train"]["tokens"], "tokens_per_s": r["train"]["tokens_per_s"]}
        row.update({f"before {k}": v for k, v in r["before"].items()})
        row.update({f"after {k}": v for k, v in r["after"].items()})
        rows.append(row)
    return pd.DataFrame(rows)


def _mean_std(df: pd.DataFrame, by: list[str], columns: list[str]) -> pd.DataFrame:
    grouped = df.groupby(by, sort=False)
    out = grouped[columns].mean()
    out["n_seeds"] = grouped.size()
    for col in columns:
        out[f"{col} sd"] = grouped[col].std(ddof=1)
    return out.reset_index()


def _metric_columns(df: pd.DataFrame, cfg: RecursiveConfig, when: str = "after") -> list[str]:
    cols = [f"{when} ppl[{c}]" for c in cfg.eval_corpora]
    return cols + [c for c in df.columns if c.startswith(f"{when} task")]


def init_table(results: list[dict[str, Any]], cfg: RecursiveConfig, n_loops: int | None = None) -> pd.DataFrame:
    """Table F.1: each initialization (B = n_loops, default init_loops) before and after uptraining, mean over seeds,
    and Δ vs Random.

    Rows also give the uptrained full model and the reduced-size model trained from scratch, as in the paper.
    """
    b = n_loops or cfg.init_loops
    df = flat(results)
    home = df[(df["corpus"] == cfg.train_corpus) & ~df["kd"]]
    rec = home[(home["kind"] == "recursive") & (home["n_loops"] == b)].copy()
    rec["init"] = np.where(rec["norm_init"] != "average", rec["init"] + " (norm " + rec["norm_init"] + ")",
                           rec["init"])
    refs = home[(home["kind"] == "full") | ((home["kind"] == "scratch") & (home["n_loops"] == b))].copy()
    refs["init"] = refs["kind"].map({"full": "full-size (uptrained)", "scratch": "reduced-size (from scratch)"})
    cols = [f"before ppl[{cfg.train_corpus}]", *[c for c in df.columns if c.startswith("before task")],
            *_metric_columns(df, cfg)]
    table = _mean_std(pd.concat([refs, rec]), ["init", "non_embedding_params"], cols)
    main = f"after ppl[{cfg.train_corpus}]"
    if "random" in set(rec["init"]):
        rand = table.loc[table["init"] == "random", main].iloc[0]
        table["Δppl vs random"] = table[main] - rand
        if "after task_avg" in table:
            table["Δtask_avg vs random"] = table["after task_avg"] - table.loc[table["init"] == "random",
                                                                               "after task_avg"].iloc[0]
    return table


def size_table(results: list[dict[str, Any]], cfg: RecursiveConfig) -> pd.DataFrame:
    """Figure 4's points: full, recursive (stepwise, each B), truncated and scratch models, after equal uptraining."""
    df = flat(results)
    home = df[(df["corpus"] == cfg.train_corpus) & ~df["kd"] & (df["seed"] == cfg.seeds[0])]
    keep = (home["kind"] == "full") | home["kind"].isin(["truncated", "scratch"]) | (
        (home["kind"] == "recursive") & (home["init"] == "stepwise") & (home["norm_init"] == "average"))
    table = home[keep][["kind", "n_loops", "non_embedding_params", "unique_params", *_metric_columns(df, cfg)]]
    return table.sort_values(["kind", "n_loops"]).reset_index(drop=True)


def kd_table(results: list[dict[str, Any]], cfg: RecursiveConfig) -> pd.DataFrame:
    """Distillation at equal tokens: the main recursive model with and without forward KL, per seed and mean."""
    df = flat(results)
    sel = df[(df["kind"] == "recursive") & (df["init"] == "stepwise") & (df["n_loops"] == cfg.init_loops)
             & (df["corpus"] == cfg.train_corpus) & (df["norm_init"] == "average")]
    sel = sel[sel["seed"].isin(cfg.seeds)]
    return _mean_std(sel, ["kd"], _metric_columns(df, cfg))


def shift_table(results: list[dict[str, Any]], cfg: RecursiveConfig, source: dict[str, float]) -> pd.DataFrame:
    """Table 2's point: the full and the main recursive model uptrained on each corpus, evaluated on all."""
    df = flat(results)
    sel = df[((df["kind"] == "full") | ((df["kind"] == "recursive") & (df["init"] == "stepwise")
                                        & (df["n_loops"] == cfg.init_loops) & (df["norm_init"] == "average")))
             & ~df["kd"] & (df["seed"] == cfg.seeds[0])]
    cols = _metric_columns(df, cfg)
    rows = [{"model": "full-size, not uptrained", "uptraining corpus": "-",
             **{c: source.get(c.removeprefix("after "), np.nan) for c in cols}}]
    for _, r in sel.iterrows():
        model = "full-size" if r["kind"] == "full" else f"recursive B={r['n_loops']}"
        rows.append({"model": model, "uptraining corpus": r["corpus"], **{c: r[c] for c in cols}})
    return pd.DataFrame(rows)


def task_change_se(row: pd.Series, source: pd.Series, task_limit: int) -> float:
    """The standard error (points) of a data-shift row's `after task_avg` minus the source's (ours): binomial over
    at most `task_limit` items per task (every `after task[...]` column of the row), the two models taken as
    independent; NaN without tasks."""
    tasks = [c for c in row.index if c.startswith("after task[")]
    if not tasks or task_limit < 1:
        return float("nan")
    variance = sum(p / 100 * (1 - p / 100) / task_limit for t in tasks for p in (row[t], source[t]))
    return 100 * float(np.sqrt(variance)) / len(tasks)


def curve_labels(runs: list[Variant], cfg: RecursiveConfig, group: str) -> dict[str, str]:
    """Variant name -> legend label for one loss-curve figure: "inits" (Fig. 5 / F.2) or "ablations" (Fig. F.1)."""
    labels = {}
    for v in runs:
        home = not v.corpus and not v.kd
        if not home:
            continue
        if group == "inits":
            if v.kind == "full":
                labels[v.name] = "full-size"
            elif v.kind == "scratch" and v.n_loops == cfg.init_loops:
                labels[v.name] = "reduced-size, scratch"
            elif (v.kind == "recursive" and v.n_loops == cfg.init_loops and v.norm_init == "average"
                  and v.init != "stepwise_fixed_start"):
                labels[v.name] = v.init
        elif group == "ablations" and v.kind == "recursive" and v.n_loops == cfg.init_loops:
            if v.init in ("stepwise", "stepwise_fixed_start") and v.seed == cfg.seeds[0]:
                labels[v.name] = {"stepwise": "stepwise, fixed ends", "stepwise_fixed_start": "stepwise, fixed start"}[
                    v.init]
            elif v.init == "average" and v.seed == cfg.seeds[0]:
                labels[v.name] = f"average, norm {v.norm_init}"
    if group not in ("inits", "ablations"):
        raise ValueError(f"group={group!r}: use 'inits' or 'ablations'")
    return labels


def speed_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    """Uptraining tokens per second per model kind and loop count (mean over runs; distillation runs apart)."""
    df = flat(results)
    df["wall_s"] = df["tokens"] / df["tokens_per_s"]
    return df.groupby(["kind", "n_loops", "kd"], sort=False).agg(
        runs=("name", "count"), tokens_per_s=("tokens_per_s", "mean"), wall_s=("wall_s", "mean")).reset_index()


def headline(results: list[dict[str, Any]], cfg: RecursiveConfig) -> dict[str, float]:
    """metrics.json entries: held-out perplexity on the uptraining corpus after uptraining, per run."""
    key = f"ppl[{cfg.train_corpus}]"
    return {f"ppl_after/{r['name']}": round(r["after"][key], 4) for r in results}
