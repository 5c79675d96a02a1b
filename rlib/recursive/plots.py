"""Chapter 01's figures (Relaxed Recursive Transformers, Fig. 2 / B.1, Fig. 4, Fig. 5 / F.1 / F.2), in the book style.

    plot_layer_mapping   which unique block runs at each depth and which source layers initialize it
    plot_loss_curves     training loss (smoothed) and validation loss against uptraining tokens, one line per run
                         (`rlib.plotting.plot_training_curves`, shared with chapter 02's Fig. G.1)
    plot_size_quality    held-out perplexity against unique non-embedding parameters: full, recursive, baselines
    plot_shift_rates     Table 2's data-shift pair at the chapter's rate and the paper's: the own-corpus NLL change and
                         the task-average change against the source model
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from rlib.plotting import PALETTE, new_figure, style
from rlib.plotting import plot_training_curves as plot_loss_curves

__all__ = ["plot_layer_mapping", "plot_loss_curves", "plot_shift_rates", "plot_size_quality"]


def plot_layer_mapping(mappings: dict[str, pd.DataFrame], title: str | None = None) -> Figure:
    """One row of cells per recipe (`rlib.looping.layer_mapping` frames): colour = block, text = source layers.

    Where a model mixes sliding-window and global layers (Gemma 3), global depths are hatched, so the figure shows
    where one block serves both kinds.
    """
    style()
    n_rows = len(mappings)
    n_depths = max(len(m) for m in mappings.values())
    fig, ax = plt.subplots(figsize=(max(6.4, 0.3 * n_depths + 2.2), 0.55 * n_rows + 1.0))
    n_blocks = max(int(m["block"].max()) + 1 for m in mappings.values())
    colours = sns.color_palette("husl", n_blocks)
    for row, table in enumerate(mappings.values()):
        y = n_rows - 1 - row
        mixed = table["attention"].nunique() > 1  # hatch global depths only where both kinds occur
        for r in table.itertuples():
            hatch = "///" if mixed and r.attention == "global" else None
            ax.add_patch(plt.Rectangle((r.depth, y + 0.1), 0.92, 0.8, facecolor=colours[r.block], edgecolor="white",
                                       hatch=hatch, linewidth=0.5))
            text = r.source_layers if len(r.source_layers) <= 5 else "avg"
            ax.text(r.depth + 0.46, y + 0.5, text, ha="center", va="center", fontsize=6, rotation=90)
    ax.set_xlim(0, n_depths)
    ax.set_ylim(0, n_rows)
    ax.set_yticks(np.arange(n_rows) + 0.5, list(reversed(list(mappings))))
    ax.set_xticks(np.arange(0, n_depths, 5) + 0.46, [str(d) for d in range(0, n_depths, 5)])
    ax.set_xlabel("depth (cell colour = the unique block that runs there; text = source layers it starts from)")
    ax.grid(False)
    for side in ("left", "bottom"):
        ax.spines[side].set_visible(False)
    if any(m["attention"].nunique() > 1 for m in mappings.values()):
        ax.legend(handles=[Patch(facecolor="white", edgecolor="grey", hatch="///", label="global attention")],
                  loc="upper right", bbox_to_anchor=(1, 1.25), fontsize=8)
    if title:
        ax.set_title(title)
    return fig


MARKERS = {"full": ("*", "full-size"), "recursive": ("o", "recursive (stepwise)"),
           "truncated": ("s", "truncated (first K layers)"), "scratch": ("X", "reduced-size, from scratch")}


def plot_size_quality(table: pd.DataFrame, metric: str, ylabel: str, title: str, log_y: bool = True) -> Figure:
    """Figure 4: `metric` against unique non-embedding parameters (millions), one marker per model kind."""
    fig, ax = new_figure(6.4, 3.8)
    colours = dict(zip(MARKERS, sns.color_palette(PALETTE, len(MARKERS))))
    for kind, (marker, label) in MARKERS.items():
        rows = table[table["kind"] == kind].sort_values("non_embedding_params")
        if rows.empty:
            continue
        x, y = rows["non_embedding_params"] / 1e6, rows[metric]
        ax.plot(x, y, marker=marker, linestyle="-" if len(rows) > 1 else "none", color=colours[kind], label=label,
                markersize=9 if marker == "*" else 6)
        if kind != "full":
            for xi, yi, b in zip(x, y, rows["n_loops"]):
                ax.annotate(f"B={b}", (xi, yi), textcoords="offset points", xytext=(4, 4), fontsize=7)
    if log_y:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}" if str(v)[0] in "25" else ""))
    ax.set_xlabel("unique non-embedding parameters (millions)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def plot_shift_rates(table: pd.DataFrame, paper_nll: float, paper_task: float, title: str) -> Figure:
    """`table` from `rlib.recursive.paper_rate.shift_rate_table`. Left: the full model's NLL change on its own
    uptraining corpus against the source, one bar per (corpus, rate); right: its task-average change with the binomial
    standard error; Table 2's own changes (`paper_nll` nats, `paper_task` points: Gemma at 15B) dotted."""
    style()
    uptrained = table[table["model"] == "full-size"]
    corpora = list(dict.fromkeys(uptrained["uptraining corpus"]))
    rates = list(dict.fromkeys(zip(uptrained["lr"], uptrained["paper_rate"].astype(str) == "True")))
    colours = sns.color_palette(PALETTE, len(rates))
    width = 0.8 / len(rates)
    fig, axes = plt.subplots(1, 2, figsize=(9.6, 3.6))
    panels = ((axes[0], "own_nll_change", None, paper_nll, "NLL change on its own corpus (nats)"),
              (axes[1], "task_avg_change", "task_avg_change_se", paper_task, "task-average change (points, ±1 s.e.)"))
    for ax, column, error, paper, ylabel in panels:
        for j, (lr, at_paper) in enumerate(rates):
            part = uptrained[(uptrained["lr"] == lr)].set_index("uptraining corpus").reindex(corpora)
            pos = np.arange(len(corpora)) + (j - (len(rates) - 1) / 2) * width
            errors = part[error].to_numpy(dtype=float) if error and error in part else None
            label = f"lr {lr:g}" + (" (the paper's, App. E)" if at_paper else " (the chapter's)")
            bars = ax.bar(pos, part[column].to_numpy(dtype=float), width * 0.92, color=colours[j], yerr=errors,
                          capsize=3, label=label)
            ax.bar_label(bars, fmt="%+.2f" if error is None else "%+.1f", padding=2, fontsize=7)
        ax.axhline(paper, linestyle=":", color="0.3", label="Table 2 (Gemma, 15B)")
        ax.axhline(0, color="0.6", linewidth=0.6)
        ax.set_xticks(np.arange(len(corpora)), [f"uptrained on\n{c}" for c in corpora], fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=7, frameon=False)
    return fig
