"""Chapter 02's figures (Relaxed Recursive Transformers, Fig. 6, 7, G.1-G.3, Table 3, Fig. 8), in the book style.

    plot_step0          held-out perplexity against LoRA rank before any training, per init, with the source line
    plot_relaxation     held-out perplexity after uptraining against non-embedding parameters, per init and LoRA init
    plot_rank_sweep     held-out perplexity after uptraining against LoRA rank (log axis, full rank marked), per init
    plot_training_loss  training loss of the recursive (r=0) and relaxed (high rank) models per init (Fig. G.1)
    plot_budget         held-out NLL against uptraining tokens (1x ... 8x the steps), per model, the paper's 4x marked
    plot_exits          static-exit NLL of each loop after each early-exit schedule
    plot_post_seeds     App. J's seed-paired changes (KD, overlapped tokens) with their intervals and the paper's values
    plot_throughput     measured (engine) and simulated (paper's model) tokens per second
    plot_step_time      where the engine's step time goes (blocks / exit decision / head / KV filling)
    plot_pass_times     ms per pass against batch, short and long context (Tables K.1 / K.3 analog)
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from rlib import looping
from rlib.plotting import PALETTE, grouped_bars, loop_colours, new_figure, plot_training_curves
from rlib.relaxed.throughput import OWN_OUTPUT_ORACLE

__all__ = ["plot_budget", "plot_exits", "plot_pass_times", "plot_post_seeds", "plot_rank_sweep", "plot_relaxation",
           "plot_step0", "plot_step_time", "plot_throughput", "plot_training_loss"]


def _init_colours(inits) -> dict[str, tuple]:
    """One colour per looping init, the same in every figure of the chapter (the order of `rlib.looping.INITS`)."""
    order = list(dict.fromkeys([*looping.INITS, *inits]))
    return dict(zip(order, sns.color_palette(PALETTE, len(order))))


def _finish_log_y(fig: Figure, xlabel: str, ylabel: str, title: str) -> Figure:
    """Log y axis with plain numbers, labels, title and a small legend on the figure's one Axes."""
    ax = fig.axes[0]
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def plot_step0(table: pd.DataFrame, title: str) -> Figure:
    """`rlib.relaxed.step0_table`: one line per init over ranks (tied norms); stars = full rank with norm deltas."""
    fig, ax = new_figure(6.4, 3.8)
    inits = [i for i in table["init"].unique() if i != "source"]
    colours = _init_colours(inits)
    for init in inits:
        rows = table[(table["init"] == init) & (table["norms"] != True)].sort_values("rank")  # noqa: E712
        ax.plot(rows["rank"], rows["ppl"], marker="o", color=colours[init], label=init)
        exact = table[(table["init"] == init) & (table["norms"] == True)]  # noqa: E712
        ax.plot(exact["rank"], exact["ppl"], marker="*", markersize=13, linestyle="none", color=colours[init],
                markeredgecolor="white", alpha=0.8)
    source = float(table.loc[table["init"] == "source", "ppl"].iloc[0])
    ax.axhline(source, color="0.3", linestyle="--", linewidth=1, label="source model")
    _rank_axis(ax, sorted(int(r) for r in table["rank"].dropna().unique()), int(table["rank"].max()))
    return _finish_log_y(fig, "LoRA rank per map (0 = recursive; ★ = full rank + per-depth norm deltas)",
                         "held-out perplexity at step 0 (log)", title)


def _rank_axis(ax, ranks: list[int], full_rank: int) -> None:
    """LoRA rank on a log axis that still shows rank 0 (symlog, linear below 1), ticks at the ranks run, and full
    rank marked by a dotted line."""
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xlim(-0.4, max(max(ranks), full_rank) * 1.6)
    ax.set_xticks(ranks, [str(r) for r in ranks])
    ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.axvline(full_rank, color="0.5", linestyle=":", linewidth=1)
    ax.annotate(f"full rank {full_rank}", (full_rank, 1.0), xycoords=("data", "axes fraction"), xytext=(-3, -3),
                textcoords="offset points", ha="right", va="top", fontsize=7, color="0.4")


def plot_rank_sweep(table: pd.DataFrame, metric: str, full_rank: int, source: float | None, title: str) -> Figure:
    """Fig. 7(a) / G.3 analog from `rlib.relaxed.relax_table`: `metric` (after uptraining) of the SVD-initialized
    models against LoRA rank, one line per init, rank 0 = the recursive model; the source model as a line."""
    fig, ax = new_figure(6.4, 3.8)
    plain = table[(table["prefix"] == 0) & ((table["lora_init"] == "svd") | (table["rank"] == 0))]
    inits = list(dict.fromkeys(plain["init"]))
    colours = _init_colours(inits)
    for init in inits:
        rows = plain[plain["init"] == init].sort_values("rank")
        ax.plot(rows["rank"], rows[metric], marker="o", color=colours[init], label=init)
    if source is not None:
        ax.axhline(source, color="0.3", linestyle="--", linewidth=1, label="source model (not uptrained)")
    _rank_axis(ax, sorted(int(r) for r in plain["rank"].unique()), full_rank)
    return _finish_log_y(fig, "LoRA rank per map (0 = recursive; SVD init)", "held-out perplexity after uptraining "
                         "(log)", title)


def plot_training_loss(curves: pd.DataFrame, rank: int | None, title: str) -> Figure:
    """Fig. G.1 analog from `rlib.relaxed.training_table`: training loss of each init's recursive model (r=0,
    dashed) and relaxed model at `rank` (solid, same colour)."""
    labels, colour_of, dashed = {}, {}, []
    for init in dict.fromkeys(curves["init"]):
        for r in (0,) if rank is None else (0, rank):
            names = curves.loc[(curves["init"] == init) & (curves["rank"] == r), "variant"].unique()
            label = f"{init}, recursive" if r == 0 else f"{init}, relaxed r={r}"
            labels.update({n: label for n in names})
            colour_of[label] = init
            if r == 0:
                dashed.append(label)
    colours = _init_colours(list(colour_of.values()))
    return plot_training_curves(curves, labels, title, colour_of={k: colours[v] for k, v in colour_of.items()},
                                dashed=dashed, log_y=True)


def plot_budget(table: pd.DataFrame, metric: str, title: str) -> Figure:
    """`rlib.relaxed.budget_study.budget_table`: `metric` (held-out NLL after uptraining) against the tokens seen,
    one line per (init, rank) through the mean over the seeds at each budget (each seed a small hollow marker where
    there are several), recursive models dashed; the paper's own longer step (Table I.1: 4x the 1x budget) marked, so
    the gap at 4x is read where it was measured."""
    fig, ax = new_figure(6.4, 3.8)
    colours = _init_colours(list(dict.fromkeys(table["init"])))
    for (init, rank), rows in table.sort_values("tokens").groupby(["init", "rank"], sort=False):
        label = f"{init}, recursive" if rank == 0 else f"{init}, relaxed r={rank}"
        means = rows.groupby("tokens", sort=True)[metric].agg(["mean", "count"])
        ax.plot(means.index, means["mean"], marker="o", color=colours[init], label=label,
                linestyle="--" if rank == 0 else "-")
        seeded = rows[rows["tokens"].map(means["count"]) > 1]
        ax.plot(seeded["tokens"], seeded[metric], marker="o", markersize=3.5, markerfacecolor="white",
                linestyle="none", color=colours[init], label=None)
    base = float(table.loc[table["steps_factor"] == 1, "tokens"].min())
    ax.set_xscale("log", base=2)
    factors = sorted(int(f) for f in table["steps_factor"].unique())
    ax.set_xticks([base * f for f in factors], [f"{f}x\n{base * f / 1e3:.0f}k tokens" for f in factors])
    ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.axvline(base * 4, color="0.5", linestyle=":", linewidth=1)
    ax.annotate("the paper's 4x (15B -> 60B)", (base * 4, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -3),
                textcoords="offset points", ha="left", va="top", fontsize=7, color="0.4")
    ax.set_xlabel("uptraining steps (x the chapter's)")
    ax.set_ylabel("held-out NLL after uptraining (nats)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def plot_relaxation(table: pd.DataFrame, metric: str, title: str) -> Figure:
    """`rlib.relaxed.relax_table`: `metric` against non-embedding parameters; solid = SVD init, hollow = zero init."""
    fig, ax = new_figure(6.4, 3.8)
    inits = list(table["init"].unique())
    colours = _init_colours(inits)
    plain = table["prefix"] == 0 if "prefix" in table else True
    for init in inits:
        svd = table[plain & (table["init"] == init) & ((table["lora_init"] == "svd") | (table["rank"] == 0))]
        svd = svd.sort_values("non_embedding_params")
        ax.plot(svd["non_embedding_params"] / 1e6, svd[metric], marker="o", color=colours[init], label=f"{init}, SVD")
        for rank, x, y in zip(svd["rank"], svd["non_embedding_params"] / 1e6, svd[metric]):
            ax.annotate(f"r={rank}", (x, y), textcoords="offset points", xytext=(3, 3), fontsize=7)
        zero = table[(table["init"] == init) & (table["lora_init"] == "zero") & (table["rank"] > 0)]
        ax.plot(zero["non_embedding_params"] / 1e6, zero[metric], marker="o", markerfacecolor="white",
                linestyle="none", color=colours[init], label=f"{init}, zero init" if len(zero) else None)
        if "prefix" in table:
            prefixed = table[(table["init"] == init) & (table["prefix"] > 0)]
            ax.plot(prefixed["non_embedding_params"] / 1e6, prefixed[metric], marker="^", linestyle="none",
                    color=colours[init], label=f"{init}, prefix (App. H)" if len(prefixed) else None)
            for p, x, y in zip(prefixed["prefix"], prefixed["non_embedding_params"] / 1e6, prefixed[metric]):
                ax.annotate(f"P={p}", (x, y), textcoords="offset points", xytext=(3, -9), fontsize=7)
    return _finish_log_y(fig, "non-embedding parameters incl. LoRA (millions)", "held-out perplexity (log)", title)


def plot_exits(table: pd.DataFrame, n_loops: int, title: str) -> Figure:
    """`rlib.relaxed.exit_table`: NLL of each loop's exit, grouped by model and schedule."""
    table = table.copy()
    table["run"] = table["model"] + " · " + table["phase"] + " " + table["exit"]
    sweep = table["sweep"].astype(bool) if "sweep" in table else pd.Series(False, index=table.index)
    if sweep.any():  # Table J.1's coefficient sweep (cpu-long and larger profiles): name each run's c
        table.loc[sweep, "run"] += table.loc[sweep, "coef"].map(lambda c: f" c={c:g}")
    long = table.melt(id_vars=["run"], value_vars=[f"nll loop {j}" for j in range(1, n_loops + 1)],
                      var_name="exit at", value_name="nll")
    fig = grouped_bars(long, "run", "nll", "exit at", log=False, fmt="{:.2f}", title=title, xlabel="",
                       ylabel="held-out NLL (nats / token)", colours=loop_colours(n_loops))
    return _slanted(fig, 8, 4.2)


def plot_post_seeds(changes: pd.DataFrame, runs: pd.DataFrame, n_loops: int, title: str) -> Figure:
    """`rlib.relaxed.post_seeds.changes_table` as a forest plot: each comparison's per-seed changes (dots), their mean
    and 95 % interval (bar), the paper's value (diamond) and no change (line)."""
    from rlib.relaxed.tables import comparisons, paired

    fig, ax = new_figure(8, 0.55 * len(changes) + 1.6)
    colours = sns.color_palette(PALETTE, 3)
    spec = {c[0]: c for c in comparisons(n_loops)}
    paper_label = "paper (Table J.1)"
    for y, row in enumerate(changes.itertuples()):
        _, column, vary, base, other, fixed, _ = spec[row.comparison]
        seeds = paired(runs, column, vary, base, other, **fixed)
        ax.scatter(seeds, [y] * len(seeds), s=14, color=colours[0], alpha=0.45, zorder=2,
                   label="one seed" if y == 0 else None)
        ax.errorbar(row.mean, y, xerr=[[row.mean - row.lo], [row.hi - row.mean]], fmt="o", color=colours[0],
                    capsize=3, zorder=3, label="mean, 95 % interval" if y == 0 else None)
        if pd.notna(row.paper):
            ax.scatter([row.paper], [y], marker="D", s=36, color=colours[1], zorder=4, label=paper_label)
            paper_label = None  # one legend entry
    ax.axvline(0, color="0.5", lw=0.8, zorder=1)
    ax.set_yticks(range(len(changes)), changes["comparison"])
    ax.invert_yaxis()
    ax.set_xlabel("change in held-out NLL (nats / token)")
    ax.set_title(title)
    ax.legend(frameon=False, fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def _setting(r) -> str:
    """One engine or simulation setting as a label: model · scheduler · exits · batch."""
    rule = r.exit_rule if hasattr(r, "exit_rule") else r.exits
    exits = "no exit" if rule == "none" else f"{rule} exit"
    return f"{r.model} · {r.scheduler} · {exits} · batch {int(r.batch)}"


def plot_throughput(measured: pd.DataFrame, simulated: pd.DataFrame, title: str) -> Figure:
    """Decode tokens/s per model, scheduler, exit rule and batch: the engine's measurement (prefill time excluded, as
    in the simulation) and the paper's simulation over the same exit loops. The oracle read on the model's own
    output (ours, `OWN_OUTPUT_ORACLE`) stands beside the paper's oracle in the same group, in its own colour."""
    rows = [{"setting": _setting(r), "source": "measured (engine)", "tokens_per_s": r.decode_tokens_per_s}
            for r in measured.itertuples()]
    for r in simulated.itertuples():
        own = r.exits == OWN_OUTPUT_ORACLE
        setting = _setting(r._replace(exits="oracle")) if own else _setting(r)
        source = "simulated, oracle on its own greedy output (ours)" if own else "simulated (paper's model)"
        rows.append({"setting": setting, "source": source, "tokens_per_s": r.tokens_per_s})
    fig = grouped_bars(pd.DataFrame(rows), "setting", "tokens_per_s", "source", log=False, fmt="{:.0f}", title=title,
                       xlabel="", ylabel="decode tokens / s")
    return _slanted(fig, 10, 4.6)


def plot_step_time(measured: pd.DataFrame, title: str) -> Figure:
    """Where each engine setting's step time goes: blocks, exit decision, head, KV filling (stacked shares)."""
    parts = ["blocks_s", "exit_decision_s", "head_s", "kv_fill_s"]
    table = measured.assign(setting=[_setting(r) for r in measured.itertuples()]).set_index("setting")[parts]
    shares = table.div(table.sum(axis=1), axis=0)  # [settings, parts]
    fig, ax = new_figure(9, 4.2)
    bottom = pd.Series(0.0, index=shares.index)
    colours = sns.color_palette(PALETTE, len(parts))
    for colour, part in zip(colours, parts):
        ax.bar(range(len(shares)), shares[part], bottom=bottom, color=colour, label=part.removesuffix("_s"))
        bottom += shares[part]
    for i, share in enumerate(shares["exit_decision_s"]):
        if share > 0:
            ax.annotate(f"{share:.1%}", (i, 1.0), textcoords="offset points", xytext=(0, 2), ha="center", fontsize=7)
    ax.set_xticks(range(len(shares)), shares.index)
    ax.set_ylim(0, 1.08)
    ax.set_ylabel("share of step time")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _slanted(fig, 9, 4.4)


def plot_pass_times(passes: pd.DataFrame, title: str) -> Figure:
    """Tables K.1 / K.3 analog: milliseconds per pass of the blocks against batch, per model, short and long context."""
    fig, ax = new_figure(6.4, 3.8)
    models = list(dict.fromkeys(passes["model"]))
    colours = dict(zip(models, sns.color_palette(PALETTE, len(models))))
    for (model, context), group in passes.groupby(["model", "context"], sort=False):
        group = group.sort_values("batch")
        ax.plot(group["batch"], group["ms_per_pass"], marker="o", color=colours[model],
                linestyle="-" if context == "short" else "--",
                label=f"{model}, position {int(group['position'].iloc[0])}")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("batch (busy slots)")
    ax.set_ylabel("ms per pass of the blocks")
    ax.set_title(title)
    ax.legend(fontsize=7)
    return fig


def _slanted(fig: Figure, width: float, height: float) -> Figure:
    """Long category labels at 35 degrees, right-aligned under their bars."""
    ax = fig.axes[0]
    ax.tick_params(axis="x", rotation=35)
    for label in ax.get_xticklabels():
        label.set_horizontalalignment("right")
    fig.set_size_inches(width, height)
    return fig
