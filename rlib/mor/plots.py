"""Chapter 03's figures (Mixture-of-Recursions, paper 001), in the book style.

    plot_curves          validation loss against training FLOPs spent, per model (Fig. 3's axes, one budget)
    plot_depth_scaling   test NLL against the test-time recursion cap (Fig. 5c)
    plot_load_trace      MaxVio of each training step's tokens against training progress, token-choice runs (App. F.3)
    plot_router_outputs  histograms of router outputs for selected and unselected tokens, per step (Fig. 5b, 9)
    plot_token_depths    text coloured by each token's recursion depth (Table 14, Fig. 1 right)
    plot_kv_geometry     per-depth norms and cross-depth cosine similarity of hidden states, keys, values (Fig. 7, 8)
    plot_throughput      test NLL against measured decode speed-up over vanilla, at B and B = Max (Fig. 4a)
    plot_train_cost      MoR-2's training step time and peak memory over vanilla's, per paired round (Sec. 3.1)
    plot_kv_sharing      test NLL without and with KV sharing per architecture (Fig. 4c, Table 12)
    plot_uptraining      NLL after up-training per initialization and sharing, reduced and full references (Table 9)
    plot_budgets         test NLL against the isoFLOP budget per model (Fig. 3's axes)
    plot_compute_optimal test NLL against model size per budget, fitted optima and their path (Fig. 5a)
"""

from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from rlib.mor.tables import smoothed_maxvio
from rlib.plotting import PALETTE, loop_colours, new_figure, ratio_strip, style

__all__ = ["plot_budgets", "plot_compute_optimal", "plot_curves", "plot_depth_scaling", "plot_kv_geometry",
           "plot_kv_sharing", "plot_load_trace", "plot_router_outputs", "plot_throughput", "plot_token_depths",
           "plot_train_cost", "plot_uptraining"]


def plot_curves(curves: pd.DataFrame, title: str) -> Figure:
    fig, ax = new_figure(6.4, 3.8)
    labels = list(curves["label"].unique())
    colours = dict(zip(labels, sns.color_palette(PALETTE, len(labels))))
    for (label, seed), group in curves.groupby(["label", "seed"], sort=False):
        group = group.sort_values("train_flops")
        ax.plot(group["train_flops"], group["val_loss"], marker="o", markersize=3, color=colours[label],
                alpha=1.0 if seed == curves["seed"].min() else 0.45,
                label=label if seed == curves["seed"].min() else None)
    ax.set_xlabel("training FLOPs spent (forward, paper convention)")
    ax.set_ylabel("validation NLL")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def plot_depth_scaling(table: pd.DataFrame, title: str) -> Figure:
    fig, ax = new_figure(5.6, 3.6)
    labels = list(table["label"].unique())
    colours = dict(zip(labels, sns.color_palette(PALETTE, len(labels))))
    for (label, seed), group in table.groupby(["label", "seed"], sort=False):
        ax.plot(group["depth_cap"], group["nll"], marker="o", color=colours[label],
                label=label if seed == table["seed"].min() else None)
    ax.set_xticks(sorted(table["depth_cap"].unique()))
    ax.set_xlabel("maximum recursion depth at test time")
    ax.set_ylabel("test NLL")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def plot_load_trace(trace: pd.DataFrame, title: str, paper_final: float, paper_random: float) -> Figure:
    """MaxVio per training step (a rolling median over 5% of the steps, the raw steps faint) against the share of
    training done, one line per run; dashed: the paper's end-of-training MaxVio of the final design and of a random
    router (Table 11). The y axis is logarithmic: a balanced step has MaxVio near 0."""
    fig, ax = new_figure(6.4, 3.6)
    labels = list(trace["label"].unique())
    colours = dict(zip(labels, sns.color_palette(PALETTE, len(labels))))
    floor = 1e-3  # a perfectly balanced step (MaxVio 0) is drawn at the axis floor
    styles = ["-", ":", "--", "-."]
    for _, group in trace.groupby("name", sort=False):
        group = group.sort_values("step")
        label, seed, row, budget = group.iloc[0][["label", "seed", "row", "budget"]]
        values = group["maxvio"].clip(lower=floor)
        ax.plot(group["progress"], values, color=colours[label], alpha=0.15, linewidth=0.6)
        ax.plot(group["progress"], smoothed_maxvio(values), color=colours[label],
                linestyle=styles[int(seed) % len(styles)],
                label=f"{label}, {row}, {budget} budget, seed {seed}" if row != "final design" or budget != "flops"
                else f"{label}, seed {seed}")
    for value, text in ((paper_final, f"paper, final design: {paper_final}"),
                        (paper_random, f"paper, random router: {paper_random}")):
        ax.axhline(value, color="0.35", linestyle="--", linewidth=0.8)
        ax.annotate(text, (0.0, value), xytext=(4, -3), textcoords="offset points", ha="left", va="top", fontsize=7,
                    color="0.3")  # at the left, below its line: early steps sit above 0.266
    ax.set_yscale("log")
    ax.set_ylim(bottom=floor)
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of training steps done")
    ax.set_ylabel("MaxVio of the step's tokens")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="lower right")  # MaxVio stays far above a random router's, so the bottom is free
    return fig


def plot_router_outputs(outputs: dict[str, pd.DataFrame], title: str) -> Figure:
    """One row of panels per model, one panel per recursion step; blue = kept by the top-k, orange = not."""
    style()
    names = list(outputs)
    steps = max(int(df["step"].max()) for df in outputs.values())
    fig, axes = plt.subplots(len(names), steps, figsize=(2.4 * steps, 1.9 * len(names)), squeeze=False)
    colours = sns.color_palette(PALETTE, 2)
    for i, name in enumerate(names):
        df = outputs[name]
        for r in range(steps):
            ax = axes[i, r]
            step = df[df["step"] == r + 1]
            bins = np.linspace(float(step["output"].min()), float(step["output"].max()) + 1e-9, 30) if len(step) else 10
            for selected, colour, text in ((True, colours[0], "selected"), (False, colours[1], "unselected")):
                values = step.loc[step["selected"] == selected, "output"]
                if len(values):
                    ax.hist(values, bins=bins, color=colour, alpha=0.7, label=text, density=True)
            ax.set_title(f"{name}, step {r + 1}", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.set_yticks([])
    axes[0, -1].legend(fontsize=7)
    fig.suptitle(title)
    return fig


def plot_token_depths(tokens: list[list[str]], depths: list[list[int]], n_recursions: int, title: str,
                      width: int = 96) -> Figure:
    """Each sample's text, each token on a background coloured by its depth (1 = light .. Nr = dark)."""
    style()
    colours = loop_colours(n_recursions)
    lines: list[list[tuple[str, int]]] = []
    for sample_tokens, sample_depths in zip(tokens, depths):
        line: list[tuple[str, int]] = []
        used = 0
        for text, depth in zip(sample_tokens, sample_depths):
            text = text.replace("\n", "⏎")
            if used + len(text) > width and line:
                lines.append(line)
                line, used = [], 0
            line.append((text, depth))
            used += len(text)
        lines.append(line)
        lines.append([])  # a gap between samples
    fig = plt.figure(figsize=(9.6, 0.26 * len(lines) + 0.8))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.axis("off")
    char_w, line_h = 1.0 / width, 1.0 / (len(lines) + 2)
    for row, line in enumerate(lines):
        x = 0.01
        y = 1 - (row + 1.5) * line_h
        for text, depth in line:
            ax.text(x, y, text, family="monospace", fontsize=8, va="center", ha="left",
                    bbox=dict(boxstyle="square,pad=0.05", fc=colours[depth - 1], ec="none"),
                    color="white" if depth == n_recursions else "black")
            x += len(text) * char_w * 0.98
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[d]) for d in range(n_recursions)]
    ax.legend(handles, [f"depth {d + 1}" for d in range(n_recursions)], loc="upper right", fontsize=7,
              ncol=n_recursions)
    ax.set_title(title, fontsize=10, loc="left")
    return fig


def plot_kv_geometry(geometry: dict[str, pd.DataFrame], title: str) -> Figure:
    style()
    fig, axes = plt.subplots(1, 4, figsize=(13, 3.2))
    norms = geometry["norms"]
    for name, colour in zip(("hidden", "key", "value"), sns.color_palette(PALETTE, 3)):
        axes[0].plot(norms["depth"], norms[name] / norms[name].max(), marker="o", markersize=3, color=colour,
                     label=name)
    axes[0].set_xlabel("unrolled depth")
    axes[0].set_ylabel("mean L2 norm / max")
    axes[0].legend(fontsize=7)
    for ax, name in zip(axes[1:], ("hidden", "key", "value")):
        sns.heatmap(geometry[f"similarity_{name}"], ax=ax, cmap="viridis", vmin=-0.2, vmax=1, cbar=name == "value",
                    square=True, xticklabels=2, yticklabels=2)
        ax.set_title(f"cosine similarity: {name}", fontsize=9)
        ax.set_xlabel("depth")
    fig.suptitle(title)
    return fig


def plot_throughput(table: pd.DataFrame, title: str) -> Figure:
    """Test NLL against the measured decode speed-up over vanilla (Fig. 4a's axes): one colour per model, a circle at
    the fixed batch B and a triangle at B = Max, each with its batch beside it; the horizontal bar spans the paired
    rounds' slowest and fastest ratio where the table has them (`speedup_lo` / `speedup_hi`)."""
    fig, ax = new_figure(7.4, 3.8)
    models = list(table["model"].unique())
    colours = dict(zip(models, sns.color_palette(PALETTE, len(models))))
    markers = {"B": "o", "B = Max": "^"}
    spread = {"speedup_lo", "speedup_hi"} <= set(table.columns)
    for row in table.itertuples():
        x, colour = row.speedup_vs_vanilla, colours[row.model]
        if spread:
            ax.hlines(row.nll, row.speedup_lo, row.speedup_hi, color=colour, linewidth=1.5, alpha=0.6)
        ax.plot(x, row.nll, marker=markers.get(row.setting, "s"), markersize=8, linestyle="none", color=colour)
        ax.annotate(str(row.max_batch), (x, row.nll), textcoords="offset points",
                    xytext=(-4, 6) if row.setting == "B" else (4, -11), fontsize=7, color="0.25")
    ax.axvline(1.0, color="0.5", linestyle="--", linewidth=1)
    model_keys = [Line2D([], [], color=colours[m], marker="s", linestyle="none", markersize=7, label=m) for m in models]
    setting_keys = [Line2D([], [], color="0.35", marker=m, linestyle="none", markersize=7, label=f"batch {s}")
                    for s, m in markers.items() if s in set(table["setting"])]
    ax.legend(handles=model_keys + setting_keys, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              frameon=False)
    ax.set_xlabel("decode throughput relative to vanilla (measured; bars: slowest to fastest round)"
                  if spread else "decode throughput relative to vanilla (measured)")
    ax.set_ylabel("test NLL")
    ax.set_title(title)
    return fig


def plot_train_cost(table: pd.DataFrame, paper: dict[str, float], title: str) -> Figure:
    """Left: MoR / vanilla per paired round for step time and peak memory (`rlib.mor.train_cost` rows), with the
    paper's ratios dashed. Right: each model's median peak split into training state and the rest."""
    style()
    fig, (left, right) = plt.subplots(1, 2, figsize=(8.4, 3.8), gridspec_kw={"width_ratios": [1.2, 1]},
                                      layout="constrained")
    mor = table[table["nr"] > 0]
    colours = sns.color_palette(PALETTE, 2)
    ratio_strip(left, [("step time", mor["step_s / vanilla"].to_numpy()),
                       ("peak memory", mor["peak_mib / vanilla"].to_numpy())], "MoR-2 EC / vanilla (same round)", paper)
    medians = table.groupby("model", sort=False)[["state_mib", "rest_mib"]].median()
    right.bar(medians.index, medians["state_mib"], color=colours[0], label="parameters, gradients, AdamW moments")
    right.bar(medians.index, medians["rest_mib"], bottom=medians["state_mib"], color=colours[1],
              label="activations, workspace")
    right.set_ylabel("peak above baseline (MiB)")
    right.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=1, frameon=False)
    fig.suptitle(title)
    return fig


def plot_kv_sharing(kv: pd.DataFrame | None, vanilla: pd.DataFrame | None, title: str) -> Figure:
    """Fig. 4c: per architecture, the NLL without KV sharing and with it (`kv_table`: Recursive, MoR-E, MoR-T under
    Middle-Cycle; `rlib.mor.vanilla_kv.kv_table`: vanilla per depth, each strategy), joined by a line."""
    rows: list[tuple[str, float, list[tuple[str, float]]]] = []
    for depth, group in ([] if vanilla is None else vanilla.groupby("n_layers", sort=False)):
        none = group[group["kv_sharing"] == "none"]["nll"]
        shared = [(f"{r.kv_sharing} {r.kv_loop}", r.nll) for r in group[group["kv_sharing"] != "none"].itertuples()]
        rows.append((f"Vanilla\nL={depth}", float(none.iloc[0]) if len(none) else np.nan, shared))
    names = {"none": "Recursive", "expert": "MoR-E", "token": "MoR-T"}
    for r in ([] if kv is None else kv.itertuples()):
        if r.routing in names and {"cache", "share"} <= set(kv.columns):
            rows.append((names[r.routing], r.cache, [("M-Cyc", r.share)]))
    fig, ax = new_figure(6.4, 3.8)
    colours = sns.color_palette(PALETTE, 3)
    on, off = colours[0], colours[2]
    for x, (_, none, shared) in enumerate(rows):
        ax.plot([x], [none], "o", color=off, markersize=8, label="KV sharing off" if x == 0 else None)
        for k, (what, nll) in enumerate(shared):
            ax.plot([x, x + 0.18 * (k + 1)], [none, nll], color="0.6", linewidth=0.8)
            ax.plot([x + 0.18 * (k + 1)], [nll], "s", color=on, markersize=7,
                    label="KV sharing on" if x == 0 and k == 0 else None)
            ax.annotate(what, (x + 0.18 * (k + 1), nll), textcoords="offset points", xytext=(4, -3), fontsize=7)
    ax.set_xticks(range(len(rows)), [name for name, _, _ in rows])
    ax.set_xlim(-0.5, len(rows) - 0.2)
    ax.set_ylabel("test NLL (ablation budget)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def plot_uptraining(table: pd.DataFrame, title: str) -> Figure:
    """Table 9 as dots: x = initialization, one offset marker per sharing strategy (error bar = 2 s.e. of the
    test NLL), dashed lines for the reduced (loop 1) baselines and the up-trained full model."""
    fig, ax = new_figure(6.4, 3.8)
    recursive = table[table["loop"] > 1]
    inits = list(dict.fromkeys(recursive["init"]))
    shares = list(dict.fromkeys(recursive["share"]))
    colours = sns.color_palette(PALETTE, len(shares))
    width = 0.6 / max(1, len(shares))
    for j, share in enumerate(shares):
        rows = recursive[recursive["share"] == share].set_index("init").reindex(inits)
        x = np.arange(len(inits)) + (j - (len(shares) - 1) / 2) * width
        ax.errorbar(x, rows["nll"], yerr=2 * rows["nll_se"], fmt="o", color=colours[j], capsize=2, label=share)
    references = table[table["loop"] == 1]
    greys = sns.color_palette("Greys", len(references) + 2)[2:]
    for grey, row in zip(greys, references.itertuples()):
        label = "full (untied)" if row.init == "–" else f"loop 1: {row.share} {row.init}".replace("– ", "")
        ax.axhline(row.nll, color="tab:red" if row.init == "–" else grey, linestyle="--", linewidth=1,
                   label=f"{label} ({row.N_L} layers)")
    ax.set_xticks(np.arange(len(inits)), inits)
    ax.set_xlim(-0.5, len(inits) - 0.5)
    ax.set_xlabel("initialization of the shared layers")
    ax.set_ylabel("test NLL after up-training")
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=2)
    return fig


def plot_budgets(table: pd.DataFrame, title: str) -> Figure:
    """`rlib.mor.budget_sweep.budget_table`: one line per model over budgets, each point a separate run."""
    fig, ax = new_figure(6.0, 3.6)
    labels = list(dict.fromkeys(table["label"]))
    for colour, label in zip(sns.color_palette(PALETTE, len(labels)), labels):
        rows = table[table["label"] == label].sort_values("budget_flops")
        ax.semilogx(rows["budget_flops"], rows["nll"], marker="o", color=colour, label=label)
    ax.set_xlabel("training budget (forward FLOPs, paper convention)")
    ax.set_ylabel("test NLL")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def plot_compute_optimal(table: pd.DataFrame, fits: pd.DataFrame, path: pd.DataFrame, title: str) -> Figure:
    """Fig. 5a: one panel per model (test NLL against base size, one curve per budget, its quadratic fit dashed, the
    fitted optimum a star: filled when the widths bracket it, hollow when it is extrapolated) and a last panel with
    every model's optimal size against the budget and the fitted path's slope."""
    labels = list(dict.fromkeys(table["label"]))
    budgets = sorted(table["budget_flops"].unique())
    shades = sns.color_palette("Blues", len(budgets) + 1)[1:]
    fig, axes = plt.subplots(1, len(labels) + 1, figsize=(3.3 * (len(labels) + 1), 3.4))
    for ax, label in zip(axes, labels):
        for colour, budget in zip(shades, budgets):
            rows = table[(table["label"] == label) & (table["budget_flops"] == budget)].sort_values("base_params_m")
            ax.semilogx(rows["base_params_m"], rows["nll"], marker="o", markersize=4, color=colour,
                        label=f"{budget:.2g}")
            fit = fits[(fits["label"] == label) & (fits["budget_flops"] == budget)]
            if len(fit):
                f = fit.iloc[0]
                grid = np.linspace(np.log(rows["base_params_m"].min()), np.log(rows["base_params_m"].max()), 50)
                ax.plot(np.exp(grid), np.polyval([f.p2, f.p1, f.p0], grid), ls="--", lw=1, color=colour)
                ax.plot(f.n_star_m, f.nll_star, marker="*", markersize=13, color=colour, markeredgecolor="black",
                        markerfacecolor=colour if f.interior else "none")
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("base non-embedding params (M)")
    axes[0].set_ylabel("test NLL")
    axes[0].legend(title="FLOPs", fontsize=7, title_fontsize=7)
    ax = axes[-1]
    for colour, label in zip(sns.color_palette(PALETTE, len(labels)), labels):
        f = fits[fits["label"] == label].sort_values("budget_flops")
        slope = path.set_index("label").loc[label, "slope"] if label in set(path["label"]) else np.nan
        ax.loglog(f["budget_flops"], f["n_star_m"], marker="*", markersize=10, color=colour,
                  label=f"{label} (a = {slope:.2f})")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # only the budgets trained, labelled once
    ax.set_xticks(budgets, [f"{b:.2g}" for b in budgets])
    ax.tick_params(axis="x", labelrotation=30)
    ax.set_xlabel("budget (forward FLOPs)")
    ax.set_ylabel("optimal base size N* (M)")
    ax.set_title("optimal path", fontsize=10)
    ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    return fig
