"""Chapter 05's figures (LayerSkip, paper 004), in the book style.

    plot_exit_curves  held-out perplexity after every layer, one line per recipe, log scale (Figs. 6, 8, 10)
    plot_probe        the middle and last exits' held-out NLL during training, per recipe (Fig. 11)
    plot_train_loss   training loss against steps for chosen recipes (Fig. 12: exponential vs constant dropout)
"""

from __future__ import annotations

import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from rlib.layerskip.tables import RECIPE_LABELS
from rlib.plotting import PALETTE, finish, new_figure

__all__ = ["plot_exit_curves", "plot_probe", "plot_train_loss"]


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
