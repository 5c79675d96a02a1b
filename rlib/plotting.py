"""One figure style for the whole book, and the generic plot helpers every chapter's `plots` module builds on.

`style()` sets a seaborn whitegrid theme with the colourblind palette and fonts sized for a
6.4 x 3.6 in figure read at 100 % in the HTML report; `new_figure()` applies it once and opens
a figure. Chapter plots (`rlib/<chapter>/plots.py`) are thin wrappers over generic helpers (`grouped_bars`,
`finish`) and return the matplotlib Figure, so a notebook can show it, save it under `figures/` or test it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

__all__ = ["PALETTE", "finish", "grouped_bars", "loop_colours", "new_figure", "plot_training_curves", "ratio_strip",
           "smooth", "style"]

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


def ratio_strip(ax: Axes, groups: Sequence[tuple[str, np.ndarray]], ylabel: str,
                paper: dict[str, float] | None = None) -> None:
    """Paired-round ratios, one column per group (name, the per-round ratios): every round a dot, the median a bar,
    1.0 a grey line and, where `paper` names the group, the paper's ratio dashed and labelled."""
    colours = sns.color_palette(PALETTE, max(2, len(groups)))
    for i, (name, ratios) in enumerate(groups):
        ratios = np.asarray(ratios, dtype=float)
        jitter = np.linspace(-0.12, 0.12, len(ratios)) if len(ratios) > 1 else np.zeros(1)
        ax.plot(i + jitter, ratios, "o", color=colours[i], label=f"{name} (rounds)")
        ax.hlines(np.median(ratios), i - 0.25, i + 0.25, color=colours[i], linewidth=2)
        if paper and name in paper:
            ax.hlines(paper[name], i - 0.3, i + 0.3, color="0.3", linestyle="--", linewidth=1)
            ax.annotate(f"paper {paper[name]:.2f}", (i + 0.3, paper[name]), fontsize=7, va="center")
    ax.axhline(1.0, color="0.6", linewidth=0.8)
    ax.set_xticks(range(len(groups)), [name for name, _ in groups])
    ax.set_xlim(-0.5, len(groups) - 0.2)
    ax.set_ylabel(ylabel)


def loop_colours(n_loops: int) -> list[tuple[float, float, float]]:
    """One colour per loop (recursion depth) 1..n_loops, light to dark blue: the same depth has the same colour in
    every figure of the book (early exits of chapter 02, token depths of chapter 03)."""
    return sns.color_palette("Blues", n_loops + 1)[1:]


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
    colours: Sequence | None = None,
) -> Figure:
    """Bars of `y` per `x` category, one bar per `hue` level side by side; one bar per (x, hue) row.

    Duplicate (x, hue) rows are averaged; missing combinations leave a gap. Categories keep their
    order of first appearance. `log="auto"` uses a log y axis when the values span more than 10x.
    `colours` gives one colour per hue level in order (default: the book palette), e.g. `loop_colours`.
    """
    own_figure = ax is None
    if ax is None:
        _, ax = new_figure()
    data, hue_col = _hue_column(df, hue)
    keys = [x] if hue_col is None else [x, hue_col]
    table = data.groupby(keys, sort=False)[y].mean()
    table = table.unstack(hue_col) if hue_col is not None else table.to_frame(y)  # [n_x, n_hue]
    n_x, n_hue = table.shape
    width = 0.8 / n_hue
    rotate = n_x * n_hue > 12  # narrow bars: vertical value labels
    colours = list(colours) if colours is not None else sns.color_palette(PALETTE, n_hue)
    for j, level in enumerate(table.columns):
        values = table[level].to_numpy(dtype=float)  # [n_x]
        keep = ~np.isnan(values)
        pos = np.arange(n_x)[keep] + (j - (n_hue - 1) / 2) * width
        bars = ax.bar(pos, values[keep], width * 0.92, color=colours[j], label=str(level))
        if annotate:
            ax.bar_label(bars, labels=[fmt.format(v) for v in values[keep]], padding=2, fontsize=8,
                         rotation=90 if rotate else 0)
    is_log = _finish_axes(ax, table, log, headroom=(1.3 if rotate else 1.12) if annotate else 1.05)
    ax.set_xticks(np.arange(n_x), [str(v) for v in table.index])
    ax.set_xlabel(xlabel if xlabel is not None else x)
    ax.set_ylabel((ylabel if ylabel is not None else y) + (" (log scale)" if is_log else ""))
    if title:
        ax.set_title(title)
    if hue_col is not None:
        _legend(ax, hue_col, n_hue, below=own_figure)
    return ax.figure


def _legend(ax: Axes, title: str, n: int, below: bool) -> None:
    """Below the axes on a figure of our own (the axes keep their width), as many columns as fit."""
    if below:
        longest = max(len(t) for t in ax.get_legend_handles_labels()[1])
        ncol = max(1, min(n, 85 // (longest + 6)))  # about 85 legend characters fit across 6.4 in
        ax.figure.legend(title=title, loc="outside lower center", ncol=ncol, fontsize=9, title_fontsize=9)
    else:
        ax.legend(title=title, fontsize=9, title_fontsize=9)


def _finish_axes(ax: Axes, table: pd.DataFrame, log: bool | str, headroom: float) -> bool:
    """Log or linear y with `headroom` (a factor; a larger one on a log axis) above the tallest bar.

    A log axis gets plain-number ticks at 1, 2, 5 x 10^k. Returns whether the axis is log.
    """
    values = table.to_numpy(dtype=float)
    values = values[~np.isnan(values)]
    if len(values) == 0:
        return False
    top = float(values.max())
    if _wants_log(values, log):
        ax.set_yscale("log")
        ax.set_ylim(float(values.min()) / 2, top * headroom**4)
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        return True
    if top > 0:
        ax.set_ylim(0, top * headroom)
    return False


def finish(fig: Figure, xlabel: str, ylabel: str, title: str, **legend) -> Figure:
    """Label the first axes of `fig`, title it and draw its legend (keyword arguments go to `legend`)."""
    ax = fig.axes[0]
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(**legend)
    return fig


def smooth(values: np.ndarray, window: int) -> np.ndarray:
    """Rolling mean over `window` steps (the first points average what exists); unchanged when too short."""
    if window <= 1 or len(values) < window:
        return values
    return pd.Series(values).rolling(window, min_periods=1).mean().to_numpy()


def plot_training_curves(curves: pd.DataFrame, labels: dict[str, str], title: str, smooth_steps: int = 10,
                         validation: bool = True, log_y: bool = False, colour_of: dict[str, Any] | None = None,
                         dashed: Sequence[str] = ()) -> Figure:
    """Training loss (rolling mean over `smooth_steps`, thin) and validation loss (markers) against tokens.

    `curves` has one row per logged step (`rlib.experiments.training_curves`: variant, tokens, loss, val_loss);
    `labels` maps variant name -> legend label, and runs with the same label (seeds) share a colour, so their spread
    is visible. `colour_of` maps a label to its colour (default: one palette colour per label; e.g. a recursive run and
    its relaxed counterpart can share one) and labels in `dashed` are drawn dashed.
    """
    fig, ax = new_figure(6.4, 3.8)
    unique_labels = list(dict.fromkeys(labels.values()))
    if colour_of is None:
        colour_of = dict(zip(unique_labels, sns.color_palette(PALETTE, len(unique_labels))))
    seen: set[str] = set()
    for name, label in labels.items():
        run = curves[curves["variant"] == name]
        if run.empty:
            continue
        colour = colour_of[label]
        train_rows = run.dropna(subset=["loss"])
        ax.plot(train_rows["tokens"], smooth(train_rows["loss"].to_numpy(), smooth_steps), color=colour,
                linewidth=1.1, alpha=0.85, linestyle="--" if label in dashed else "-",
                label=None if label in seen else label)
        if validation and "val_loss" in run:
            val = run.dropna(subset=["val_loss"])
            ax.plot(val["tokens"].ffill(), val["val_loss"], "o", color=colour, markersize=3.5,
                    markerfacecolor="white" if label in dashed else colour)
        seen.add(label)
    ax.set_xlabel("uptraining tokens")
    ax.set_ylabel("loss (nats/token; lines: train, dots: validation)")
    if log_y:
        ax.set_yscale("log")
        plain = plt.FuncFormatter(lambda v, _: f"{v:g}")
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(plain)
    ax.set_title(title)
    ax.legend(fontsize=8, ncol=2)
    return fig
