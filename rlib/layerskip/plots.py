"""Chapter 05's figures (LayerSkip, paper 004), in the book style.

    plot_exit_curves  held-out perplexity after every layer, one line per recipe, log scale (Figs. 6, 8, 10)
    plot_probe        the middle and last exits' held-out NLL during training, per recipe (Fig. 11)
    plot_train_loss   training loss against steps for chosen recipes (Fig. 12: exponential vs constant dropout)
    plot_study_exits  one panel per evaluation corpus (perplexity) and per task (accuracy), exit by exit, one line per
                      model of a study on the pretrained model (Figs. 6 and 10a)
    plot_parse_exits  exact match (solid) and token accuracy (dashed) of the parsing study exit by exit (Fig. 10b)
    plot_self_speculation  speedup (left) and acceptance (right) of self-speculation against the exit layer E, one line
                      per draft length d and drafting head (whole head / task vocabulary), with the 1.0x and goal lines
    plot_cost_model   the measured cost model (`rlib.layerskip.decode_costs`): measured against predicted speedup per
                      setting (left), and speedup against acceptance at the best whole-head (E, d) for the whole head,
                      the task-vocabulary head and the layer-count model, with the measured points (right)
    plot_layer_grid   Fig. 2(b): for each generated token, which layers' exits already predict the final token
    plot_head_cost    Sec. 2.1: a head per early exit over the shared head, per paired round, for step time, peak
                      memory and served weights, one panel per curriculum; and each head's median peak split into
                      training state and the rest (right)
    plot_lr_sensitivity  Table 8: the last exit's accuracy against the peak learning rate per recipe (left) and each
                      recipe's paired change at the higher rate, with the range over seeds (right)
    plot_paper_rate   the pretrained-model studies at the chapter's rate and at Table 8's, a row per study: the last
                      exit's perplexity over the pretrained model's per corpus (left, Table 1's +0.5 % dotted) and the
                      middle exit's gain over it (right, Table 1's smallest 17.7x dotted), one bar per (recipe, rate)
    plot_parse_rate   the parsing study at the chapter's rate and at Table 8's: exact match exit by exit per recipe
                      (left) and LD+EE's exact match minus plain fine-tuning's per exit (right, Fig. 10b's -3 points
                      dotted), solid at the chapter's rate, dashed at Table 8's
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from rlib.layerskip.decode_costs import n_layers_of, speedup_at
from rlib.layerskip.decoding import predicted_speedup, vocab_rows
from rlib.layerskip.tables import RECIPE_LABELS, best_whole_head
from rlib.plotting import PALETTE, finish, new_figure, ratio_strip, style

__all__ = ["plot_cost_model", "plot_exit_curves", "plot_head_cost", "plot_last_exit_budget", "plot_layer_grid",
           "plot_lr_sensitivity", "plot_paper_rate", "plot_parse_exits", "plot_parse_rate", "plot_probe",
           "plot_self_speculation", "plot_study_exits", "plot_train_loss"]

PAPER_LAST_EXIT_COST = 0.005  # Table 1: LayerSkip Llama2 7B's last-layer perplexity +0.5 % after 52B tokens
PAPER_MIDDLE_GAIN = 65.8 / 3.71  # Table 1's smallest middle-layer perplexity gain (13B The Stack): 17.7x


def _colours(recipes: list[str]) -> dict[str, tuple]:
    return dict(zip(recipes, sns.color_palette(PALETTE, len(recipes))))


def plot_exit_curves(table: pd.DataFrame, title: str) -> Figure:
    """`table` from `rlib.layerskip.tables.exit_table`."""
    fig, ax = new_figure(6.4, 3.8)
    recipes = list(dict.fromkeys(table["recipe"]))
    colours = _colours(recipes)
    for recipe in recipes:
        part = table[table["recipe"] == recipe]
        ax.plot(part["exit_layer"], part["ppl"], marker="o", markersize=3, color=colours[recipe],
                label=RECIPE_LABELS.get(recipe, recipe))
    ax.set_yscale("log")
    return finish(fig, "exit after layer", "held-out perplexity (log)", title, fontsize=8, ncols=2)


def plot_probe(curves: pd.DataFrame, title: str) -> Figure:
    """`curves` from `rlib.layerskip.tables.probe_curves`: solid = last exit, dashed = middle exit; seed means."""
    fig, ax = new_figure(6.4, 3.8)
    recipes = list(dict.fromkeys(curves["recipe"]))
    colours = _colours(recipes)
    last = curves["exit_layer"].max()
    mean = curves.groupby(["recipe", "exit_layer", "step"], sort=False)["nll"].mean().reset_index()
    for recipe in recipes:
        for exit_layer, part in mean[mean["recipe"] == recipe].groupby("exit_layer"):
            ax.plot(part["step"], part["nll"], color=colours[recipe], linestyle="-" if exit_layer == last else "--",
                    label=f"{RECIPE_LABELS.get(recipe, recipe)}, exit {exit_layer}")
    return finish(fig, "training step", "held-out NLL (nats/token)", title, fontsize=7, ncols=2)


def plot_train_loss(curves: pd.DataFrame, title: str, smooth: int = 10) -> Figure:
    """`curves` from `rlib.layerskip.tables.train_curves`; a rolling mean over `smooth` logged steps, seed means."""
    fig, ax = new_figure(6.4, 3.6)
    recipes = list(dict.fromkeys(curves["recipe"]))
    colours = _colours(recipes)
    mean = curves.groupby(["recipe", "step"], sort=False)["loss"].mean().reset_index()
    for recipe in recipes:
        part = mean[mean["recipe"] == recipe]
        ax.plot(part["step"], part["loss"].rolling(smooth, min_periods=1).mean(), color=colours[recipe],
                label=RECIPE_LABELS.get(recipe, recipe))
    return finish(fig, "training step", "training loss (last layer)", title, fontsize=8)


def plot_last_exit_budget(table: pd.DataFrame, labels: dict[str, str], title: str) -> Figure:
    """`table` from `rlib.layerskip.budget.budget_table`: left, every recipe's last-exit perplexity against the
    training tokens; right, LD+EE's gap to plain training (%) with the paper's +0.5 % dotted."""
    style()
    fig, (left, right) = plt.subplots(1, 2, figsize=(8.4, 3.4))
    colours = _colours(list(labels))
    for recipe, name in labels.items():
        part = table[table["recipe"] == recipe].sort_values("tokens")
        left.plot(part["tokens"], part["ppl_last"], marker="o", color=colours[recipe], label=name)
    layerskip = table[table["recipe"] == "ld_ee"].sort_values("tokens").dropna(subset=["last_vs_plain"])
    right.plot(layerskip["tokens"], 100 * layerskip["last_vs_plain"], marker="o", color=colours.get("ld_ee", "C1"))
    right.axhline(100 * PAPER_LAST_EXIT_COST, linestyle=":", color="0.4", label="paper, 52B tokens (+0.5 %)")
    if layerskip.empty:  # no plain run to compare with (a profile that trains LD+EE only)
        right.text(0.5, 0.5, "no plain run at these budgets", ha="center", va="center", transform=right.transAxes,
                   fontsize=8)
    for ax in (left, right) if len(layerskip) else (left,):
        ax.set_xscale("log")
    for ax in (left, right):
        ax.set_xlabel("training tokens (log)", fontsize=8)
        ax.tick_params(labelsize=7)
    left.set_ylabel("last-exit perplexity", fontsize=8)
    right.set_ylabel("LD+EE vs plain, last exit (%)", fontsize=8)
    left.legend(fontsize=7)
    right.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_paper_rate(table: pd.DataFrame, labels: dict[str, str], title: str) -> Figure:
    """`table` from `rlib.layerskip.paper_rate.rate_table`: a row of two panels per study, per corpus one bar per
    (recipe, rate) of the last exit's perplexity over the pretrained model's (left, %, Table 1's +0.5 % dotted) and of
    the pretrained model's middle-exit perplexity over the model's (right, log scale, Table 1's smallest gain dotted);
    labels: recipe -> legend name. The paper's rate hatched."""
    style()
    studies = list(dict.fromkeys(table["study"]))
    fig, axes = plt.subplots(len(studies), 2, figsize=(8.8, 3.4 * len(studies)), squeeze=False)
    colours = _colours(list(labels))
    for (left, right), study in zip(axes, studies):
        part = table[table["study"] == study]
        corpora = list(dict.fromkeys(part["corpus"]))
        bars = list(dict.fromkeys(zip(part["recipe"], part["lr"], part["paper_rate"].astype(str) == "True")))
        bars = [b for b in bars if b[0] in labels]
        width = 0.8 / max(1, len(bars))
        for k, (recipe, lr, paper) in enumerate(bars):
            rows = part[(part["recipe"] == recipe) & (part["lr"] == lr)].set_index("corpus").reindex(corpora)
            where = np.arange(len(corpora)) + (k - (len(bars) - 1) / 2) * width
            label = f"{labels[recipe]}, lr {lr:g}" + (" (Table 8)" if paper else "")
            for ax, values in ((left, 100 * rows["last_vs_source"]), (right, rows["middle_ratio"])):
                ax.bar(where, values, width, color=colours[recipe], label=label, hatch="//" if paper else None,
                       edgecolor="0.2" if paper else "white", linewidth=0.5)
        left.axhline(100 * PAPER_LAST_EXIT_COST, linestyle=":", color="0.4", label="Table 1: +0.5 %")
        left.axhline(0, color="0.6", linewidth=0.6)
        paper_gain = right.axhline(PAPER_MIDDLE_GAIN, linestyle=":", color="0.4",
                                   label=f"Table 1: {PAPER_MIDDLE_GAIN:.1f}x")
        right.set_yscale("log")
        for ax in (left, right):
            ax.set_xticks(np.arange(len(corpora)), corpora, fontsize=7)
            ax.tick_params(labelsize=7)
        left.set_ylabel(f"{study}: last exit vs pretrained (%)", fontsize=8)
        right.set_ylabel("middle-exit gain over pretrained (x, log)", fontsize=8)
        left.legend(fontsize=6.5)
        right.legend(handles=[paper_gain], fontsize=6.5)  # the bars' legend is the left panel's
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_parse_rate(table: pd.DataFrame, labels: dict[str, str], title: str) -> Figure:
    """`table` from `rlib.layerskip.paper_rate.parse_rate_table`; labels: recipe -> legend name, in drawing order.
    Left: exact match against the exit, one line per (recipe, rate); right: each non-plain recipe's exact match minus
    plain fine-tuning's at the same rate and exit, with Fig. 10b / Table 5's last-layer cost of -3 points dotted."""
    style()
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 3.6))
    colours = _colours(list(labels))
    for (lr, paper), part in table.groupby(["lr", table["paper_rate"].astype(str) == "True"], sort=False):
        dash = "--" if paper else "-"
        rate = f"lr {lr:g}" + (" (Table 8)" if paper else "")
        for recipe, name in labels.items():
            rows = part[part["recipe"] == recipe].sort_values("exit_layer")
            if rows.empty:
                continue
            kw = dict(color=colours[recipe], linestyle=dash, marker="o", markersize=3, label=f"{name}, {rate}")
            left.plot(rows["exit_layer"], 100 * rows["em"], **kw)
            if recipe != "baseline" and rows["em_vs_plain"].notna().any():
                right.plot(rows["exit_layer"], 100 * rows["em_vs_plain"], **kw)
    right.axhline(-3, linestyle=":", color="0.4", label="Fig. 10b / Table 5: -3 pts at the last layer")
    right.axhline(0, color="0.6", linewidth=0.6)
    left.set_ylim(-2, 102)
    for ax, ylabel in ((left, "exact match (%)"), (right, "minus plain fine-tuning (pts)")):
        ax.set_xlabel("exit after layer", fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=6.5)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_study_exits(exits: pd.DataFrame, tasks: pd.DataFrame, labels: dict[str, str], title: str) -> Figure:
    """`exits` and `tasks` of one study (`rlib.layerskip.tables.exit_long` / `task_long`); labels: recipe ->
    legend name, in drawing order."""
    style()
    corpora = list(dict.fromkeys(exits["corpus"]))
    task_names = list(dict.fromkeys(tasks["task"]))
    panels = len(corpora) + len(task_names)
    columns = min(3, panels)
    rows = -(-panels // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.2 * columns, 2.6 * rows), squeeze=False)
    colours = _colours(list(labels))
    for ax, corpus in zip(axes.flat, corpora):
        for recipe, name in labels.items():
            part = exits[(exits["corpus"] == corpus) & (exits["recipe"] == recipe)]
            ax.plot(part["exit_layer"], part["ppl"], marker="o", markersize=3, color=colours[recipe], label=name)
        ax.set_yscale("log")
        ax.set_title(f"perplexity: {corpus}", fontsize=9)
    for ax, task in zip(axes.flat[len(corpora):], task_names):
        for recipe, name in labels.items():
            part = tasks[(tasks["task"] == task) & (tasks["recipe"] == recipe)]
            ax.plot(part["exit_layer"], 100 * part["value"], marker="o", markersize=3, color=colours[recipe],
                    label=name)
        metric = tasks.loc[tasks["task"] == task, "metric"].iloc[0]
        ax.set_title(f"{task} ({metric}, %)", fontsize=9)
    for ax in axes.flat[panels:]:
        ax.set_visible(False)
    for ax in axes.flat[:panels]:
        ax.set_xlabel("exit after layer", fontsize=8)
        ax.tick_params(labelsize=7)
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_parse_exits(exits: pd.DataFrame, labels: dict[str, str], title: str) -> Figure:
    """`exits` from `rlib.layerskip.tables.parse_exits`; labels: recipe -> legend name, in drawing order."""
    fig, ax = new_figure(6.4, 3.8)
    colours = _colours(list(labels))
    for recipe, name in labels.items():
        part = exits[exits["recipe"] == recipe]
        ax.plot(part["exit_layer"], 100 * part["em"], marker="o", markersize=3, color=colours[recipe],
                label=f"{name}: exact match")
        ax.plot(part["exit_layer"], 100 * part["token_acc"], linestyle="--", color=colours[recipe],
                label=f"{name}: token accuracy")
    ax.set_ylim(-2, 102)
    return finish(fig, "exit after layer", "test parses (%)", title, fontsize=8)


def plot_self_speculation(decoding: pd.DataFrame, recipe: str, title: str, goal: float = 1.5) -> Figure:
    """`decoding` from `rlib.layerskip.decode_study` (the "kvq" self-speculative rows of `recipe` are drawn): speedup
    over autoregressive decoding and acceptance against E, solid for the whole head drafting (the paper's), dashed
    for the task vocabulary drafting."""
    rows = decoding[(decoding["recipe"] == recipe) & (decoding["method"] == "self_speculative")
                    & (decoding["reuse"] == "kvq")]
    if rows.empty:
        raise ValueError(f"no kvq self-speculative rows of recipe {recipe!r} to plot")
    narrow = vocab_rows(rows)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 3.6))
    drafts = sorted(rows["n_draft"].unique())
    colours = dict(zip(drafts, sns.color_palette(PALETTE, len(drafts))))
    for (n_draft, vocab), part in rows.groupby([rows["n_draft"], narrow]):
        part = part.sort_values("exit_layer")
        style_kw = dict(color=colours[n_draft], marker="o", markersize=3, linestyle="--" if vocab else "-",
                        label=f"d={n_draft}, {'task vocabulary' if vocab else 'whole head'}")
        left.plot(part["exit_layer"], part["speedup"], **style_kw)
        right.plot(part["exit_layer"], part["acceptance"], **style_kw)
    left.axhline(1.0, color="0.5", linewidth=0.8)
    left.axhline(goal, color="0.3", linewidth=0.8, linestyle=":", label=f"goal {goal}x")
    left.set(xlabel="exit layer E (drafting layers)", ylabel="speedup over autoregressive (x)")
    right.set(xlabel="exit layer E (drafting layers)", ylabel="acceptance", ylim=(0, 1.02))
    for ax in (left, right):
        ax.set_xticks(sorted(rows["exit_layer"].unique()))
    left.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    return fig


def plot_cost_model(predicted: pd.DataFrame, costs: pd.DataFrame, prompts: int, title: str,
                    goal: float = 1.5) -> Figure:
    """`predicted` from `decode_costs.predict` (one model, `prompts` generations), `costs` from `measure_costs`."""
    spec = predicted[predicted["method"] == "self_speculative"]
    if spec.empty:
        raise ValueError("no self-speculative rows to plot")
    narrow = vocab_rows(spec)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 3.8))
    colours = sns.color_palette(PALETTE, 3)
    kinds = {"whole head, kvq": ~narrow & (spec["reuse"] == "kvq"), "whole head, kv / none": spec["reuse"] != "kvq",
             "task vocabulary, kvq": narrow}
    for colour, (name, rows) in zip(colours, kinds.items()):
        part = spec[rows]
        left.scatter(part["cost_model_speedup"], part["speedup"], color=colour, s=18, label=name)
        left.scatter(part["predicted_speedup"], part["speedup"], facecolors="none", edgecolors=colour, s=18,
                     linewidths=0.8)
    low = min(spec[["speedup", "cost_model_speedup", "predicted_speedup"]].min().min(), 0.8) * 0.95
    high = max(spec[["speedup", "cost_model_speedup", "predicted_speedup"]].max().max(), goal) * 1.05
    left.plot([low, high], [low, high], color="0.5", linewidth=0.8)
    left.scatter([], [], facecolors="none", edgecolors="0.4", s=18, label="hollow: layer-count model")
    left.set(xlabel="predicted speedup (x)", ylabel="measured speedup (x)", xlim=(low, high), ylim=(low, high))
    left.legend(fontsize=7)
    best, tokens = best_whole_head(predicted)
    exit_layer, n_draft = int(best["exit_layer"]), int(best["n_draft"])
    n_layers = n_layers_of(costs)
    grid = np.linspace(0, 1, 51)
    curves = {"whole head": [speedup_at(costs, a, exit_layer, n_draft, tokens, prompts) for a in grid],
              "task vocabulary": [speedup_at(costs, a, exit_layer, n_draft, tokens, prompts, vocab=True)
                                  for a in grid]}
    for colour, (name, curve) in zip((colours[0], colours[2]), curves.items()):
        right.plot(grid, curve, color=colour, label=f"cost model, {name}")
        points = spec[(spec["exit_layer"] == exit_layer) & (spec["n_draft"] == n_draft) & (spec["reuse"] == "kvq")
                      & (narrow == (name == "task vocabulary"))]
        right.scatter(points["acceptance"], points["speedup"], color=colour, s=24, zorder=3)
    right.plot(grid, [predicted_speedup(a, n_draft, exit_layer, n_layers) for a in grid], color="0.5",
               linestyle="--", linewidth=0.9, label="layer-count model (no head)")
    right.axhline(goal, color="0.3", linewidth=0.8, linestyle=":", label=f"goal {goal}x")
    right.axhline(1.0, color="0.5", linewidth=0.8)
    right.set(xlabel=f"acceptance (E={exit_layer}, d={n_draft})", ylabel="speedup over autoregressive (x)",
              xlim=(0, 1))
    right.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    return fig


def plot_layer_grid(agree: np.ndarray, tokens: list[str], title: str) -> Figure:
    """agree [L, n]: whether the exit after layer l (row l, 1-based) predicts generated token j's final choice; one
    column per generated token, labelled with its text (Fig. 2b's layout, read as agreement with the last layer)."""
    n_layers, n_tokens = agree.shape
    fig, ax = new_figure(max(6.4, 0.22 * n_tokens + 1.5), 4.2)
    ax.imshow(agree.astype(float), aspect="auto", origin="lower", cmap="Blues", vmin=0, vmax=1.25,
              extent=(-0.5, n_tokens - 0.5, 0.5, n_layers + 0.5), interpolation="nearest")
    ax.set_xticks(range(n_tokens), [repr(t)[1:-1] for t in tokens], rotation=90, fontsize=6, family="monospace")
    ax.set_yticks(range(1, n_layers + 1, max(1, n_layers // 10)))
    ax.set_ylabel("exit after layer")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


def plot_lr_sensitivity(table: pd.DataFrame, title: str) -> Figure:
    """`table` from `rlib.layerskip.lr_study.lr_table`: left, each recipe's last-exit top-1 accuracy (seed mean)
    against the peak learning rate; right, its paired change at each higher rate (points: seed mean, bars: the range
    over seeds), layer-dropout recipes in colour, the baseline in grey, 0 dotted."""
    style()
    fig, (left, right) = plt.subplots(1, 2, figsize=(8.4, 3.4))
    recipes = list(dict.fromkeys(table["recipe"]))
    colours = _colours(recipes)
    for recipe in recipes:
        part = table[table["recipe"] == recipe].sort_values("lr")
        left.plot(part["lr"], 100 * part["acc_last"], marker="o", color=colours[recipe],
                  label=RECIPE_LABELS.get(recipe, recipe))
    left.set_xscale("log", base=2)
    rates = table.drop_duplicates("lr").sort_values("lr")
    left.set_xticks(rates["lr"], [f"{r.lr:g} (x{r.multiple:g})" for r in rates.itertuples()])
    left.minorticks_off()
    left.set_xlabel("peak learning rate (log scale)", fontsize=8)
    left.set_ylabel("last-exit top-1 accuracy (%)", fontsize=8)
    left.legend(fontsize=7)
    higher = table[table["multiple"] != 1].reset_index(drop=True)
    for i, row in higher.iterrows():
        colour = colours[row["recipe"]] if row["layer_dropout"] else "0.5"
        right.errorbar([i], [100 * row["d_acc"]], yerr=[[100 * (row["d_acc"] - row["d_acc_lo"])],
                                                        [100 * (row["d_acc_hi"] - row["d_acc"])]],
                       fmt="o", color=colour, capsize=3)
    right.axhline(0, linestyle=":", color="0.4")
    right.set_xticks(range(len(higher)))
    right.set_xticklabels([f"{RECIPE_LABELS.get(r.recipe, r.recipe)}\nx{r.multiple:g}" for r in higher.itertuples()],
                          fontsize=7)
    right.set_ylabel("paired change vs x1 (pts)", fontsize=8)
    for ax in (left, right):
        ax.tick_params(labelsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_head_cost(table: pd.DataFrame, title: str) -> Figure:
    """Sec. 2.1: per curriculum, the dedicated heads' step time, peak memory and served weights over the same round's
    shared head (`rlib.layerskip.exit_heads.head_cost_table` rows); right: each (curriculum, head)'s median peak
    split into training state (parameters, gradients, AdamW moments) and the rest."""
    style()
    curricula = list(dict.fromkeys(table["curriculum"]))
    fig, axes = plt.subplots(1, len(curricula) + 1, figsize=(3.2 * len(curricula) + 3.4, 3.8), layout="constrained",
                             gridspec_kw={"width_ratios": [1] * len(curricula) + [1.1]})
    for ax, curriculum in zip(axes, curricula):
        dedicated = table[(table["curriculum"] == curriculum) & (table["model"] == "dedicated")]
        ratio_strip(ax, [("step\ntime", dedicated["step_s / shared"].to_numpy()),
                         ("peak\nmemory", dedicated["peak_mib / shared"].to_numpy()),
                         ("served\nweights", dedicated["params / shared"].to_numpy())],
                    "a head per exit / shared head" if ax is axes[0] else "")
        ax.set_title(f"{curriculum} curriculum", fontsize=9)
    bars = axes[-1]
    medians = table.groupby(["curriculum", "model"], sort=False)[["state_mib", "rest_mib"]].median()
    names = [f"{model}\n{curriculum}" for curriculum, model in medians.index]
    colours = sns.color_palette(PALETTE, 2)
    bars.bar(names, medians["state_mib"], color=colours[0], label="parameters, gradients, AdamW moments")
    bars.bar(names, medians["rest_mib"], bottom=medians["state_mib"], color=colours[1], label="activations, workspace")
    bars.tick_params(axis="x", labelsize=7)
    bars.set_ylabel("peak above baseline (MiB)")
    bars.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1, frameon=False)
    fig.suptitle(title)
    return fig
