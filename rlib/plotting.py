"""One figure style for the whole book, and the plots of each chapter.

`style()` sets a seaborn whitegrid theme with the colourblind palette and fonts sized for a
6.4 x 3.6 in figure read at 100 % in the HTML report; `new_figure()` applies it once and opens
a figure. Chapter plots are thin wrappers over generic helpers (`grouped_bars`) and return the
matplotlib Figure, so a notebook can show it, save it under `figures/` or test it.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure

__all__ = ["grouped_bars", "new_figure", "plot_latency", "plot_perplexity", "style"]

PALETTE = "colorblind"
_RC = {
    "figure.dpi": 100,
    "savefig.dpi": 150,
    "savefig.bbox": "tight",
    "figure.constrained_layout.use": True,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.titleweight": "bold",
    "legend.frameon": False,
    "grid.linewidth": 0.6,
}
_styled = False


def style() -> None:
    """Apply the book style; calling it again gives the same state (seaborn resets then applies)."""
    global _styled
    sns.set_theme(context="notebook", style="whitegrid", palette=PALETTE, font_scale=0.9, rc=_RC)
    _styled = True


def new_figure(width: float = 6.4, height: float = 3.6) -> tuple[Figure, Axes]:
    """A styled figure with one Axes, `width` x `height` inches (640 x 360 px at 100 %)."""
    if not _styled:
        style()
    fig, ax = plt.subplots(figsize=(width, height))
    return fig, ax


# ----------------------------------------------------------------------------------------------
# generic helpers


def _hue_column(df: pd.DataFrame, hue: str | Sequence[str] | None) -> tuple[pd.DataFrame, str | None]:
    """Join several hue columns into one label column ("model · dtype"); returns (df, its name)."""
    if hue is None or isinstance(hue, str):
        return df, hue
    name = " · ".join(hue)
    df = df.assign(**{name: df[list(hue)].astype(str).agg(" · ".join, axis=1)})
    return df, name


def _wants_log(values: np.ndarray, log: bool | str) -> bool:
    if log != "auto":
        return bool(log)
    positive = values[values > 0]
    return len(positive) > 0 and bool(values.min() > 0) and positive.max() / positive.min() > 10


def grouped_bars(
    df: pd.DataFrame,
    x: str,
    y: str,
    hue: str | Sequence[str] | None = None,
    *,
    ax: Axes | None = None,
    log: bool | str = "auto",
    annotate: bool = True,
    fmt: str = "{:.3g}",
    title: str | None = None,
    xlabel: str | None = None,
    ylabel: str | None = None,
) -> Figure:
    """Bars of `y` per `x` category, one bar per `hue` level side by side; one bar per (x, hue) row.

    Duplicate (x, hue) rows are averaged; missing combinations leave a gap. Categories keep their
    order of first appearance. `log="auto"` uses a log y axis when the values span more than 10x.
    """
    if ax is None:
        _, ax = new_figure()
    data, hue_col = _hue_column(df, hue)
    keys = [x] if hue_col is None else [x, hue_col]
    table = data.groupby(keys, sort=False)[y].mean()
    table = table.unstack(hue_col) if hue_col is not None else table.to_frame(y)  # [n_x, n_hue]
    n_x, n_hue = table.shape
    width = 0.8 / n_hue
    colours = sns.color_palette(PALETTE, n_hue)
    for j, level in enumerate(table.columns):
        values = table[level].to_numpy(dtype=float)  # [n_x]
        keep = ~np.isnan(values)
        pos = np.arange(n_x)[keep] + (j - (n_hue - 1) / 2) * width
        bars = ax.bar(pos, values[keep], width * 0.92, color=colours[j], label=str(level))
        if annotate:
            ax.bar_label(bars, labels=[fmt.format(v) for v in values[keep]], padding=2, fontsize=8,
                         rotation=90 if n_x * n_hue > 12 else 0)
    _finish_axes(ax, table, log, annotate)
    ax.set_xticks(np.arange(n_x), [str(v) for v in table.index])
    ax.set_xlabel(xlabel if xlabel is not None else x)
    ax.set_ylabel(ylabel if ylabel is not None else y)
    if title:
        ax.set_title(title)
    if hue_col is not None:
        ax.legend(title=hue_col, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9, title_fontsize=9)
    return ax.figure


def _finish_axes(ax: Axes, table: pd.DataFrame, log: bool | str, annotate: bool) -> None:
    """Log or linear y, with headroom above the tallest bar for its label."""
    values = table.to_numpy(dtype=float)
    values = values[~np.isnan(values)]
    if len(values) == 0:
        return
    top = float(values.max())
    if _wants_log(values, log):
        ax.set_yscale("log")
        ax.set_ylim(float(values.min()) / 2, top * (4 if annotate else 1.5))
    elif top > 0:
        ax.set_ylim(0, top * (1.15 if annotate else 1.05))


# ----------------------------------------------------------------------------------------------
# chapter 00: base models


def plot_perplexity(
    df: pd.DataFrame,
    x: str = "corpus",
    y: str = "ppl",
    hue: str | Sequence[str] = ("model", "dtype"),
    title: str = "Held-out perplexity of the base models",
) -> Figure:
    """Grouped bars of held-out perplexity per corpus, one bar per model and dtype (lower is better)."""
    fig = grouped_bars(df, x, y, hue, title=title, xlabel="held-out corpus",
                       ylabel="perplexity (exp nats/token, lower is better)")
    return fig


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
                        xlabel="model", ylabel="forward latency (ms, median)")


def _latency_title(df: pd.DataFrame) -> str:
    title = "Forward latency"
    if {"batch_size", "seq_len"} <= set(df.columns) and df[["batch_size", "seq_len"]].nunique().max() == 1:
        title += f", {df['batch_size'].iloc[0]} x {df['seq_len'].iloc[0]} tokens"
    if "threads" in df.columns and df["threads"].nunique() == 1:
        title += f", {df['threads'].iloc[0]} threads"
    return title
