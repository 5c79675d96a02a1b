"""Chapter 04's figures (Recurrent Transformer, paper 002), in the book style.

    plot_tile_schedule  the dyadic tiles over the (query, key) plane, coloured by the step that folds them (Fig. 3)
    plot_traffic        counted attention traffic per layer against N, naive vs tiled, log-log (Sec. 5)
    plot_latency        measured one-layer prefill time against N per implementation (Fig. 4)
    plot_tasks          token and sequence accuracy per synthetic task, RT vs Transformer (Figs. 5-6)
    plot_task_curves    token accuracy on a probe set against training steps, one panel per task, chance dashed
    plot_lm_curves      validation loss against training steps, deep vs shallow-wide (Table 1's runs)
    plot_tuning_curves  the tuning grid's learning curves beside the main run's (App. D.2)
    plot_ablation       test NLL against learning rate with and without the pre-KV norm (Fig. 7)
    plot_gradient_paths ||dz_t/dx_1|| against t for several spectral radii of alpha V (Theorem 4.1)
    plot_token_recurrence  the layer's distance to its RNN form against the logit gap on the previous pair (Sec. 3.2)
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from kernels.tiled_prefill import tiles
from rlib.plotting import PALETTE, new_figure

__all__ = ["plot_ablation", "plot_gradient_paths", "plot_latency", "plot_lm_curves", "plot_lm_tuning",
           "plot_task_curves", "plot_tasks", "plot_tile_schedule", "plot_token_recurrence", "plot_traffic",
           "plot_tuning_curves"]


def _label(fig: Figure, xlabel: str, ylabel: str, title: str) -> Figure:
    ax = fig.axes[0]
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def plot_tile_schedule(n: int, title: str) -> Figure:
    """Each cell (query j, key i < j) coloured by log2 of its tile's size; the diagonal is the temporary pair."""
    grid = np.full((n, n), np.nan)
    for q0, q1, k0, k1 in tiles(n):
        grid[q0:q1, k0:k1] = np.log2(k1 - k0)
    fig, ax = new_figure(4.8, 4.4)
    image = ax.imshow(grid, cmap="viridis", interpolation="nearest")
    for q0, q1, k0, k1 in tiles(n):  # outline each tile: neighbours of one size share a colour
        ax.add_patch(Rectangle((k0 - 0.5, q0 - 0.5), k1 - k0, q1 - q0, fill=False, edgecolor="white", linewidth=0.8))
    ax.plot(range(n), range(n), "s", color="lightgrey", markersize=max(1.0, 100 / n))
    ax.set_xlabel("key position i (persistent pairs)")
    ax.set_ylabel("query position j")
    ax.set_title(title)
    ax.grid(False)
    fig.colorbar(image, ax=ax, label="log2 tile size T = lowbit(s)")
    return fig


def plot_traffic(table: pd.DataFrame, title: str) -> Figure:
    fig, ax = new_figure(6.0, 3.6)
    colours = sns.color_palette(PALETTE, 3)
    ax.loglog(table["n"], table["naive"], marker="o", color=colours[0], label="naive loop (reads t keys at step t)")
    ax.loglog(table["n"], table["tiled"], marker="o", color=colours[1], label="dyadic tiles")
    ax.loglog(table["n"], table["pairs"], linestyle="--", color="grey", label="(query, key) pairs scored")
    return _label(fig, "sequence length N", "elements moved per (sequence, head)", title)


def plot_latency(table: pd.DataFrame, title: str) -> Figure:
    fig, ax = new_figure(6.0, 3.6)
    modes = list(dict.fromkeys(table["mode"]))
    for colour, mode in zip(sns.color_palette(PALETTE, len(modes)), modes):
        rows = table[table["mode"] == mode].sort_values("n")
        ax.loglog(rows["n"], rows["seconds"] * 1e3, marker="o", color=colour, label=mode)
    lengths = sorted(table["n"].unique())
    ax.set_xticks(lengths, [f"{n:g}" for n in lengths])  # the measured N only: log minor labels collide
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_minor_formatter(plt.NullFormatter())
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
    return _label(fig, "sequence length N", "one-layer prefill (ms)", title)


def plot_tasks(table: pd.DataFrame, title: str) -> Figure:
    fig, axes = plt.subplots(1, 2, figsize=(9.6, 3.6), sharey=True, layout="constrained")
    tasks = list(dict.fromkeys(table["task"]))
    blocks = ["recurrent", "transformer"]
    colours = sns.color_palette(PALETTE, 2)
    x = np.arange(len(tasks))
    for ax, metric, label in zip(axes, ("token_acc", "seq_acc"), ("token accuracy", "sequence accuracy")):
        for j, block in enumerate(blocks):
            values = table[table["block"] == block].set_index("task").reindex(tasks)[metric]
            ax.bar(x + (j - 0.5) * 0.38, values, 0.36, color=colours[j], label=f"1 {block} layer")
        ax.set_xticks(x, [t.replace("_", " ") for t in tasks], fontsize=7, rotation=90)  # whole names, no overlap
        ax.set_ylim(0, 1.05)
        ax.set_ylabel(label)
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    return fig


def plot_task_curves(curves: pd.DataFrame, title: str) -> Figure:
    """`tables.task_curve_table`'s main runs: token accuracy against optimizer steps per task (one panel each), one
    line per block and seed (later seeds fainter), and the task's chance accuracy as a dashed line."""
    main = curves[~curves["ablation"].astype(bool) & ~_tuned(curves)]
    tasks = list(dict.fromkeys(main["task"]))
    cols = min(4, max(1, len(tasks)))
    rows_n = -(-len(tasks) // cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(2.6 * cols, 2.3 * rows_n), sharex=True, squeeze=False,
                             layout="constrained")
    colours = dict(zip(("recurrent", "transformer"), sns.color_palette(PALETTE, 2)))
    first = main["seed"].min() if len(main) else 0
    for ax, task in zip(axes.flat, tasks):
        rows = main[main["task"] == task]
        for (block, seed), run in rows.groupby(["block", "seed"], sort=False):
            ax.plot(run["step"], run["token_acc"], marker="o", markersize=2.5, color=colours.get(block, "black"),
                    alpha=1.0 if seed == first else 0.45, label=f"1 {block} layer" if seed == first else None)
        ax.axhline(rows["chance"].iloc[0], linestyle="--", color="grey", linewidth=1, label="chance")
        ax.set_title(task.replace("_", " "), fontsize=9)
        ax.set_ylim(0, 1.02)
        ax.tick_params(labelsize=7)
    for ax in axes.flat[len(tasks):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("token accuracy", fontsize=8)
    for ax in axes[-1, :]:
        ax.set_xlabel("optimizer step", fontsize=8)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=3, fontsize=8)
    fig.suptitle(title)
    return fig


def _tuned(curves: pd.DataFrame) -> pd.Series:
    """The rows of tuning-grid runs (a table written before the grid existed has none)."""
    return curves["tuned"].astype(bool) if "tuned" in curves else pd.Series(False, index=curves.index)


def plot_tuning_curves(curves: pd.DataFrame, main_epochs: int, main_lr: float, title: str) -> Figure:
    """The tuning grid's learning curves (`tables.task_curve_table` rows with `tuned`) beside the first seed's main
    run: one panel per tuned task, colour = block, line style = recipe, chance dashed."""
    tuned = curves[_tuned(curves)]
    tasks = list(dict.fromkeys(tuned["task"]))
    main = curves[~curves["ablation"].astype(bool) & ~_tuned(curves) & curves["task"].isin(tasks)]
    main = main[main["seed"] == main["seed"].min()].assign(epochs=main_epochs, lr=main_lr)
    both = pd.concat([main, tuned], ignore_index=True)
    recipes = sorted(set(zip(both["epochs"], both["lr"])))
    styles = dict(zip(recipes, ("-", "--", ":", "-.")))
    colours = dict(zip(("recurrent", "transformer"), sns.color_palette(PALETTE, 2)))
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.8 * len(tasks), 3.4), squeeze=False, layout="constrained")
    for ax, task in zip(axes.flat, tasks):
        rows = both[both["task"] == task]
        for (block, epochs, lr), run in rows.groupby(["block", "epochs", "lr"], sort=False):
            ax.plot(run["step"], run["token_acc"], linestyle=styles.get((epochs, lr), "-"),
                    color=colours.get(block, "black"), label=f"{block}, {epochs} epochs, lr {lr:g}")
        ax.axhline(rows["chance"].iloc[0], linestyle="--", color="grey", linewidth=1, label="chance")
        ax.axhline(3 * rows["chance"].iloc[0], linestyle=":", color="grey", linewidth=1, label="3x chance")
        ax.set_title(task.replace("_", " "), fontsize=9)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("optimizer step", fontsize=8)
        ax.set_ylabel("token accuracy", fontsize=8)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    return fig


def plot_lm_curves(curves: pd.DataFrame, title: str) -> Figure:
    fig, ax = new_figure(6.4, 3.8)
    labels = list(dict.fromkeys(curves["label"]))
    colours = dict(zip(labels, sns.color_palette(PALETTE, len(labels))))
    first = curves["seed"].min()
    for (label, seed), rows in curves.groupby(["label", "seed"], sort=False):
        ax.plot(rows["step"], rows["val_loss"], marker="o", markersize=3, color=colours[label],
                alpha=1.0 if seed == first else 0.45, label=label if seed == first else None)
    return _label(fig, "optimizer step", "validation NLL", title)


def plot_lm_tuning(table: pd.DataFrame, title: str) -> Figure:
    """`rlib.recurrent.tuning.tuning_table`: each Table 1 shape's final validation NLL over the tuning grid (first
    seed), the chosen rate ringed."""
    fig, ax = new_figure(5.8, 3.6)
    shapes = list(dict.fromkeys(zip(table["block"], table["depth"])))
    for colour, (block, depth) in zip(sns.color_palette(PALETTE, len(shapes)), shapes):
        rows = table[(table["block"] == block) & (table["depth"] == depth)].sort_values("lr")
        first = rows.iloc[0]
        ax.semilogx(rows["lr"], rows["val_loss"], marker="o", color=colour,
                    linestyle="-" if block == "recurrent" else "--",  # the block by line, the shape by colour too
                    label=f"{block} {depth} (L={int(first['n_layers'])}, D={int(first['d_model'])})")
        chosen = rows[rows["chosen"]]
        ax.scatter(chosen["lr"], chosen["val_loss"], s=120, facecolors="none", edgecolors=colour, linewidths=1.5)
    return _label(fig, "peak learning rate", "final validation NLL", title)


def plot_ablation(table: pd.DataFrame, title: str) -> Figure:
    """`rlib.recurrent.tables.ablation_table`: test NLL against the peak rate with and without the pre-KV norm; a
    diverged run (no finite NLL) is a cross on the top edge, in its variant's colour."""
    fig, ax = new_figure(5.6, 3.6)
    colours = sns.color_palette(PALETTE, 2)
    crosses = []
    for colour, (kv_norm, rows) in zip(colours, table.groupby("kv_norm", sort=False)):
        rows = rows.sort_values("lr")
        name = "with the pre-KV norm (Eq. 1-2)" if str(kv_norm) == "True" else "without (App. E.2)"
        ax.semilogx(rows["lr"], rows["test_nll"], marker="o", color=colour, label=name)
        diverged = rows[rows["diverged"].astype(str) == "True"] if "diverged" in rows else rows.iloc[:0]
        if not diverged.empty:
            crosses.append((diverged["lr"], colour, f"{name}: diverged"))
    top = ax.get_ylim()[1]
    for lrs, colour, label in crosses:
        ax.plot(lrs, [top] * len(lrs), linestyle="none", marker="x", markersize=10, markeredgewidth=2,
                color=colour, clip_on=False, label=label)
    return _label(fig, "peak learning rate", "test NLL", title)


def plot_gradient_paths(table: pd.DataFrame, title: str) -> Figure:
    """`rlib.recurrent.theory.jacobian_table`: the gradient from x_1 to z_t, and its one-hop (Transformer) part."""
    fig, ax = new_figure(6.0, 3.6)
    radii = list(dict.fromkeys(table["radius"]))
    for colour, radius in zip(sns.color_palette(PALETTE, len(radii)), radii):
        rows = table[table["radius"] == radius]
        ax.semilogy(rows["t"], rows["grad_norm"], marker="o", color=colour, label=f"all paths, radius {radius:g}")
        ax.semilogy(rows["t"], rows["one_hop_norm"], linestyle=":", color=colour, label=f"one hop, radius {radius:g}")
    _label(fig, "position t", "||dz_t / dx_1|| (Frobenius)", title)
    ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.2))
    return fig


def plot_token_recurrence(table: pd.DataFrame, title: str) -> Figure:
    """`rlib.recurrent.simulation.recurrence_table`: max |z_layer - z_rnn| / max |z| against the logit gap G."""
    fig, ax = new_figure(5.6, 3.4)
    positions = list(dict.fromkeys(table["position"]))
    for colour, marker, position in zip(sns.color_palette(PALETTE, len(positions)), "os^", positions):
        rows = table[table["position"] == position]
        ax.semilogy(rows["gap"], rows["rel_diff"], marker=marker, color=colour, label=position)
    _label(fig, "logit gap G on the previous persistent pair", "max |z - z_RNN| / max |z|", title)
    ax.legend(fontsize=8)
    return fig
