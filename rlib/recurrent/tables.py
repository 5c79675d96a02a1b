"""Chapter 04's tables and claims from its run records (paper 002: Figs. 4-7, Table 1).

    task_table       per task and block: token and sequence accuracy, mean over seeds (Figs. 5-6)
    loss_table       the loss ablation: tasks trained on every next token (MAD) and on the scored targets only
    lm_table         Transformer vs RT, deep vs shallow-wide: parameters, KV-cache per token, test NLL (Table 1)
    ablation_table   shallow RT with and without the pre-KV norm over learning rates (Fig. 7)
    lm_curves        validation loss against steps for every run
    claims_table     the issue's claims, held or not, with the numbers
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

__all__ = ["ablation_table", "claims_table", "lm_curves", "lm_table", "loss_table", "task_table"]


def _task_rows(results: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame([{"task": r["task"], "block": r["block"], "seed": r["seed"], "loss_on": r["loss_on"],
                          "ablation": r["ablation"], "token_acc": r["test"]["token_acc"],
                          "seq_acc": r["test"]["seq_acc"], "minutes": r["train"]["seconds"] / 60} for r in results])


def task_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    """The main runs (the preset's loss), mean and s.d. over seeds."""
    df = _task_rows(results)
    df = df[~df["ablation"]]
    return df.groupby(["task", "block"], sort=False).agg(
        token_acc=("token_acc", "mean"), seq_acc=("seq_acc", "mean"), token_acc_sd=("token_acc", "std"),
        seeds=("seed", "count"), minutes=("minutes", "mean")).reset_index()


def loss_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    """For each ablated task, block and loss: the first seed's accuracies (one row per loss)."""
    df = _task_rows(results)
    ablated = set(df.loc[df["ablation"], "task"])
    df = df[df["task"].isin(ablated) & (df["seed"] == df["seed"].min())]
    return df[["task", "block", "loss_on", "token_acc", "seq_acc", "minutes"]].sort_values(
        ["task", "block", "loss_on"]).reset_index(drop=True)


def _lm_frame(results: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame([{k: v for k, v in r.items() if k != "curve"} for r in results])


def lm_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    """Table 1's layout: the main runs (default learning rate, with the pre-KV norm), mean and s.d. over seeds."""
    df = _lm_frame(results)
    main = df[df["kv_norm"] & ~df["name"].str.contains("-lr")]
    table = main.groupby(["block", "depth"], sort=False).agg(
        n_layers=("n_layers", "first"), d_model=("d_model", "first"), params_m=("non_embedding_params", "first"),
        kv_floats_per_token=("kv_floats_per_token", "first"), test_nll=("test_nll", "mean"),
        test_nll_sd=("test_nll", "std"), seeds=("seed", "count"), minutes=("seconds", "mean")).reset_index()
    table["params_m"] = table["params_m"] / 1e6
    table["minutes"] = table["minutes"] / 60
    return table


def ablation_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    df = _lm_frame(results)
    first = df["seed"].min()
    sel = df[(df["block"] == "recurrent") & (df["depth"] == "shallow") & (df["seed"] == first)]
    table = sel[["kv_norm", "lr", "test_nll", "final_train_loss"]].sort_values(["kv_norm", "lr"])
    table["diverged"] = ~np.isfinite(table["test_nll"]) | (table["test_nll"] > table["test_nll"].min() + 2.0)
    return table.reset_index(drop=True)


def lm_curves(results: list[dict[str, Any]]) -> pd.DataFrame:
    rows = []
    for r in results:
        label = f"{r['block']} {r['depth']} (L={r['n_layers']}, D={r['d_model']})"
        if not r["kv_norm"] or "-lr" in r["name"]:
            continue
        for step, loss in zip(r["curve"]["step"], r["curve"]["val_loss"]):
            rows.append({"label": label, "seed": r["seed"], "step": step, "val_loss": loss})
    return pd.DataFrame(rows)


def claims_table(exact: pd.DataFrame, traffic: pd.DataFrame, tasks: pd.DataFrame, lm: pd.DataFrame,
                 latency: pd.DataFrame | None = None) -> pd.DataFrame:
    rows = []

    def add(claim: str, held: bool | None, evidence: str) -> None:
        rows.append({"claim": claim, "held": {True: "held", False: "not held", None: "not measured"}[held],
                     "evidence": evidence})

    fp32 = exact[exact["dtype"] == "float32"]
    fp64 = exact[exact["dtype"] == "float64"]
    add("Tiled equals the naive loop: max abs diff <= 1e-5 in fp32, gradients too",
        bool((fp32["max_abs_dz"] <= 1e-5).all() and (fp32["grad_rel_sq_err"] <= 1e-10).all()),
        f"fp32 max |dz| {fp32['max_abs_dz'].max():.2e}, worst gradient ||dg||^2/||g||^2 "
        f"{fp32['grad_rel_sq_err'].max():.1e}; fp64 max |dz| {fp64['max_abs_dz'].max():.1e} "
        f"(tiles: {', '.join(sorted(set(exact['tiles'])))}; N = {sorted(set(exact['n']))})")
    last = traffic.iloc[-1]
    add("Tile traffic grows as N log N while naive grows as N^2 (counted)",
        bool(abs(last["naive_slope"] - 2) < 0.1 and last["tiled_slope"] < 1.25),
        f"log-log slope between N = {int(traffic['n'].iloc[-2])} and {int(last['n'])}: naive "
        f"{last['naive_slope']:.2f}, tiled {last['tiled_slope']:.2f}; naive/tiled at N = {int(last['n'])}: "
        f"{last['naive_over_tiled']:.0f}x")
    recall_copy = tasks[tasks["task"].isin(["in_context_recall", "noisy_recall", "fuzzy_recall", "selective_copying",
                                            "copy"])]
    if len(recall_copy):
        wide = recall_copy.pivot(index="task", columns="block", values="seq_acc")
        margin = wide["recurrent"] - wide["transformer"]
        add("One RT layer clearly beats one Transformer layer on recall and copy tasks (sequence accuracy, by >= 0.1 "
            "on every task)", bool((margin >= 0.1).all()),
            "; ".join(f"{t}: RT {wide.loc[t, 'recurrent']:.2f} vs T {wide.loc[t, 'transformer']:.2f}"
                      for t in wide.index))
    else:
        add("One RT layer clearly beats one Transformer layer on recall and copy tasks", None, "no such task run")
    if len(lm):
        idx = lm.set_index(["block", "depth"])
        rt, tf = idx.loc[("recurrent", "shallow")], idx.loc[("transformer", "deep")]
        spread = max(float(rt["test_nll_sd"]) if rt["seeds"] > 1 else 0.0,
                     float(tf["test_nll_sd"]) if tf["seeds"] > 1 else 0.0)
        add("At fixed parameters, the shallower-wider RT is no worse than the deeper Transformer (direction; within "
            "one seed s.d.)", bool(rt["test_nll"] <= tf["test_nll"] + spread),
            f"RT L={int(rt['n_layers'])} D={int(rt['d_model'])} ({rt['params_m']:.2f} M): {rt['test_nll']:.4f}; "
            f"Transformer L={int(tf['n_layers'])} D={int(tf['d_model'])} ({tf['params_m']:.2f} M): "
            f"{tf['test_nll']:.4f}; seed s.d. {spread:.4f} ({int(rt['seeds'])} seeds); KV floats per token "
            f"{int(rt['kv_floats_per_token'])} vs {int(tf['kv_floats_per_token'])}")
    if latency is not None and len(latency):
        biggest = latency["n"].max()
        tiled = latency[(latency["n"] == biggest) & (latency["mode"] == "tiled-reference")]
        if len(tiled):
            add(f"CPU: tiled PyTorch vs naive loop at N = {biggest} (goal >= 5x)",
                bool(tiled["speedup_vs_naive"].iloc[0] >= 5), f"{tiled['speedup_vs_naive'].iloc[0]:.2f}x measured in "
                f"one run ({tiled['threads'].iloc[0]} threads)")
    return pd.DataFrame(rows)
