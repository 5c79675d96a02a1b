"""Chapter 00's figures: held-out perplexity per corpus and dtype, forward latency, the zero-shot task suite."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from rlib.plotting import grouped_bars

__all__ = ["plot_latency", "plot_perplexity", "plot_task_suite"]


def plot_perplexity(
    df: pd.DataFrame,
    x: str = "corpus",
    y: str = "ppl",
    hue: str | Sequence[str] = ("model", "dtype"),
    title: str = "Held-out perplexity of the base models (lower is better)",
) -> Figure:
    """Grouped bars of held-out perplexity per corpus, one bar per model and dtype. Where the dtypes scored different
    numbers of windows (the fp32 reference scores the first few: `ModelsDataConfig.fp32_windows`), each dtype's
    label says how many."""
    if "n_windows" in df.columns and "dtype" in df.columns and df.groupby("dtype")["n_windows"].max().nunique() > 1:
        most = df.groupby("dtype")["n_windows"].transform("max")
        df = df.assign(dtype=df["dtype"] + " (" + most.astype(str) + " windows)")
    return grouped_bars(df, x, y, hue, fmt="{:.1f}", title=title, xlabel="held-out corpus", ylabel="perplexity")


def plot_latency(
    df: pd.DataFrame,
    x: str = "model",
    y: str = "median_s",
    hue: str | Sequence[str] = "dtype",
    title: str | None = None,
) -> Figure:
    """Median forward latency in milliseconds per model, one bar per dtype (lower is better).

    `y` is in seconds (as `rlib.eval.forward_latency` reports it); the title names the input
    shape and thread count when the frame has `batch_size`, `seq_len` and `threads` columns.
    """
    data = df.assign(latency_ms=df[y] * 1e3)
    return grouped_bars(data, x, "latency_ms", hue, fmt="{:.0f}", title=title or _latency_title(df),
                        xlabel="model", ylabel="forward latency (ms)")


def _latency_title(df: pd.DataFrame) -> str:
    title = "Median forward latency"
    if {"batch_size", "seq_len"} <= set(df.columns) and df[["batch_size", "seq_len"]].nunique().max() == 1:
        title += f", {df['batch_size'].iloc[0]} x {df['seq_len'].iloc[0]} tokens"
    if "threads" in df.columns and df["threads"].nunique() == 1:
        title += f", {df['threads'].iloc[0]} threads"
    return title


def plot_task_suite(
    df: pd.DataFrame,
    chance: dict[str, float] | None = None,
    title: str = "Zero-shot task accuracy of the base models (higher is better)",
) -> Figure:
    """Bars of each accuracy task's primary metric (in %) per model, with +-1 standard error and chance levels.

    `df` is `rlib.eval.suite_table`'s long frame; rows whose primary metric is not an accuracy (bits per byte)
    are left out. `chance` maps task -> chance accuracy in %, drawn as a dashed tick over that task.
    """
    acc = df[df["primary"] & df["metric"].str.startswith("acc")].assign(
        percent=lambda d: 100 * d["value"], err=lambda d: 100 * d["stderr"])
    fig = grouped_bars(acc, "task", "percent", "model", title=title, xlabel="task", ylabel="accuracy (%)", log=False,
                       annotate=False)
    ax = fig.axes[0]
    for bars in ax.containers:  # values inside the bars, clear of the error bars above them
        ax.bar_label(bars, labels=[f"{b.get_height():.0f}" for b in bars], label_type="center", fontsize=8,
                     color="white")
    models = list(dict.fromkeys(acc["model"]))
    width = 0.8 / len(models)
    for j, model in enumerate(models):
        part = acc[acc["model"] == model].set_index("task")
        for i, task in enumerate(dict.fromkeys(acc["task"])):
            if task in part.index and np.isfinite(part.at[task, "err"]):
                ax.errorbar(i + (j - (len(models) - 1) / 2) * width, part.at[task, "percent"],
                            yerr=part.at[task, "err"], color="black", capsize=2, linewidth=0.8)
    for i, task in enumerate(dict.fromkeys(acc["task"])):
        if chance and task in chance:
            ax.hlines(chance[task], i - 0.45, i + 0.45, colors="grey", linestyles="--", linewidth=1)
    ax.set_ylim(0, max(100.0, ax.get_ylim()[1]))
    return fig
