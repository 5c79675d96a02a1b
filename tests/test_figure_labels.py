"""Every figure function of the book, drawn on committed `figures/<chapter>/*.csv` data (the cpu profile's real
tables, so real label lengths) or on small synthetic data of the same shape, has no overlapping labels: tick labels,
axis labels, titles and suptitles never share pixels (`rlib.book.figcheck.overlapping_labels`).

A new `plot_*` function in a chapter's `plots` module fails `test_every_figure_function_has_a_case` until it gets a
case here.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable

import matplotlib
import numpy as np
import pandas as pd
import pytest

from rlib import paths
from rlib.book.figcheck import overlapping_labels

matplotlib.use("Agg")

PLOT_MODULES = ("rlib.plotting", "rlib.basemodels.plots", "rlib.recursive.plots", "rlib.relaxed.plots",
                "rlib.mor.plots", "rlib.recurrent.plots", "rlib.layerskip.plots")
rng = np.random.default_rng(0)


FIXTURES = paths.ROOT / "tests" / "fixtures" / "figures"  # tables a profile no longer promotes (chapter 05's parsing
# study moved to cpu-long: the 2026-11-24 cpu run's tables; chapter 03's ablation-budget and up-training tables: the
# 2026-11-26 cpu run's)


def _vanilla_kv() -> pd.DataFrame:
    """A `rlib.mor.vanilla_kv.kv_table` of the cpu-long study's shape (two depths, two strategies each)."""
    rows = [(14, "none", 1, 6.52), (14, "Seq", 2, 6.50), (14, "Cyc", 2, 6.55), (15, "none", 1, 6.49),
            (15, "Seq", 3, 6.47), (15, "Cyc", 3, 6.51)]
    return pd.DataFrame([{"label": f"Vanilla L={d}" + ("" if s == "none" else f", KV {s} {k}"), "n_layers": d,
                          "kv_sharing": s, "kv_loop": k, "nll": nll} for d, s, k, nll in rows])


def _token_recurrence() -> pd.DataFrame:
    """A `rlib.recurrent.simulation.recurrence_table` of its default shape (distances falling with the gap)."""
    gaps = [0.0, 2.0, 4.0, 8.0, 16.0, 32.0]
    return pd.DataFrame([{"position": p, "gap": g, "rel_diff": 0.15 * np.exp(-0.9 * g) + 1e-16}
                         for p in ("alibi", "rope") for g in gaps])


def csv(chapter: str, name: str) -> pd.DataFrame:
    for root in (paths.FIGURES, paths.FIGURES / "cpu-long", FIXTURES):
        found = [f / f"{name}.csv" for f in root.glob(f"{chapter}_*") if (f / f"{name}.csv").is_file()]
        if found:
            return pd.read_csv(found[0])
    raise FileNotFoundError(f"no {chapter}_*/{name}.csv under figures/, figures/cpu-long/ or {FIXTURES}")



def _compute_optimal() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Fig. 5a's grid at the cpu-long widths' sizes, an optimum moving to larger models with the budget."""
    from rlib.mor.compute_optimal import fit_optima, optimal_path

    sizes = {64: 0.74, 128: 2.75, 256: 10.5, 384: 24.8}
    rows = [{"label": label, "width": w, "budget_flops": c, "base_params_m": n,
             "nll": 6 + 0.2 * np.log(n / (2 * (c / 2.5e12) ** a)) ** 2 - 0.1 * np.log(c / 1e12)}
            for label, a in (("Vanilla", 0.3), ("Recursive-3 (middle_cycle)", 0.5), ("MoR-3 EC", 0.8))
            for c in (1.25e12, 2.5e12, 5e12) for w, n in sizes.items()]
    grid = pd.DataFrame(rows)
    fits = fit_optima(grid)
    return grid, fits, optimal_path(fits)

def _last_exit_budget() -> pd.DataFrame:
    rows = [{"study": "continual", "factor": f, "tokens": 81920 * f, "recipe": r, "ppl_last": p, "ppl_middle": 1e3}
            for f, plain, layerskip in ((1, 72.3, 94.8), (3, 60.1, 70.2)) for r, p in (("baseline", plain),
                                                                                     ("ld_ee", layerskip))]
    table = pd.DataFrame(rows)
    plain = table[table["recipe"] == "baseline"].set_index("factor")["ppl_last"]
    return table.assign(last_vs_plain=table["ppl_last"] / table["factor"].map(plain) - 1)


def _lr_sensitivity() -> pd.DataFrame:
    """A `rlib.layerskip.lr_study.lr_table` of the cpu-long study's shape (three recipes at 1x and 2x, two seeds)."""
    from rlib.layerskip.lr_study import lr_table

    acc = {"baseline": (0.512, 0.505), "ld": (0.507, 0.515), "ld_ee": (0.498, 0.503)}
    results = [{"recipe": r, "seed": seed, "multiple": m, "lr": 3e-3 * m,
                "exits": {"exit_layer": [12], "nll": [2.1 - a], "top1_acc": [a + (0.004 * seed if m == 2 else 0)]}}
               for r, (one, two) in acc.items() for m, a in ((1.0, one), (2.0, two)) for seed in (0, 1)]
    return lr_table(results, 12)


# --------------------------------------------------------------------------- synthetic inputs of the real shapes


def _layer_mappings() -> dict[str, pd.DataFrame]:
    from rlib.looping import Looping, layer_mapping
    from tests.test_looping import tiny_config

    gemma = tiny_config(18, gemma=True)  # Gemma 3's 18 layers with sliding and global attention: hatched cells
    return {f"{init}, B={loops}": layer_mapping(gemma, Looping(n_loops=loops, init=init))
            for init in ("stepwise", "average", "lower") for loops in (2, 3)}


def _loss_curves() -> tuple[pd.DataFrame, dict[str, str]]:
    rows = []
    labels = {}
    for v, name in enumerate(("stepwise", "average", "lower", "random", "stepwise-seed1")):
        labels[name] = name.split("-")[0] + " init"
        for step in range(60):
            rows.append({"variant": name, "tokens": step * 4096, "loss": 6 - np.log1p(step) * 0.3 + 0.05 * v,
                         "val_loss": (6.2 - np.log1p(step) * 0.3) if step % 20 == 19 else np.nan})
    return pd.DataFrame(rows), labels


def _relaxed_curves() -> pd.DataFrame:
    """`rlib.relaxed.training_table`'s shape: three inits at rank 0 and 144, 48 logged steps each."""
    rows = []
    for i, init in enumerate(("stepwise", "average", "lower")):
        for rank in (0, 144):
            for step in range(1, 49):
                rows.append({"init": init, "rank": rank, "step": step, "tokens": step * 512,
                             "loss": 14 - 7 * np.log1p(step) / np.log(49) + 0.2 * i - rank / 720,
                             "val_loss": 7.0 + 0.2 * i if step % 16 == 0 else np.nan,
                             "variant": f"{init}-r{rank}-svd-s0"})
    return pd.DataFrame(rows)


def _budget() -> pd.DataFrame:
    """A longer_budget table (rlib.relaxed.budget_study): three models at up to four steps factors, the main two at
    two more seeds at 4x."""
    nll = {("stepwise", 0): (6.39, 5.97, 5.6, 5.3), ("average", 64): (7.21, 6.61, 6.2, 5.9),
           ("lower", 64): (6.42, 6.0, 5.7)}
    rows = [(i, r, f, 0, v) for (i, r), values in nll.items() for f, v in zip((1, 2, 4, 8), values)]
    rows += [(i, r, 4, s, nll[i, r][2] + 0.05 * (s - 1.5)) for i, r in (("stepwise", 0), ("average", 64))
             for s in (1, 2)]
    return pd.DataFrame([{"init": i, "rank": r, "steps_factor": f, "seed": s, "tokens": 24576 * f,
                          "after nll[gutenberg-poetry]": v} for i, r, f, s, v in rows])


def _paper_rate() -> pd.DataFrame:
    """`rlib.layerskip.paper_rate.rate_table`'s shape: the continual study's two recipes at 3e-4 and 3e-5, three
    corpora."""
    rows = []
    for lr, paper, shift in ((3e-4, False, 1.0), (3e-5, True, 0.1)):
        for recipe, cost, gain in (("baseline", -0.1, 3.0), ("ld_ee", 0.3, 7e6)):
            for k, corpus in enumerate(("gutenberg-poetry", "python-stdlib", "shakespeare")):
                rows.append({"study": "continual", "lr": lr, "paper_rate": paper, "recipe": recipe,
                             "corpus": corpus, "last_vs_source": shift * cost * (1 + k / 2),
                             "middle_ratio": gain ** shift / (1 + k)})
    return pd.DataFrame(rows)


def _parse_rate() -> pd.DataFrame:
    """`rlib.layerskip.paper_rate.parse_rate_table`'s shape: both recipes at 3e-4 and 1e-4, every other exit of 30."""
    rows = []
    for lr, paper in ((3e-4, False), (1e-4, True)):
        for recipe, depth in (("baseline", 28.0), ("ld_ee", 18.0)):
            for exit_layer in range(2, 31, 2):
                em = 1 / (1 + np.exp(-(exit_layer - depth) / (2 if paper else 1.5))) * (0.95 if paper else 0.9)
                rows.append({"lr": lr, "paper_rate": paper, "recipe": recipe, "exit_layer": exit_layer, "em": em,
                             "token_acc": 0.5 + em / 2})
    table = pd.DataFrame(rows)
    plain = table[table["recipe"] == "baseline"].set_index(["lr", "exit_layer"])["em"]
    return table.assign(em_vs_plain=[em - plain[lr, e] for lr, e, em in zip(table["lr"], table["exit_layer"],
                                                                              table["em"])])


def _post_seeds() -> pd.DataFrame:
    """`rlib.relaxed.post_seeds.seeds_table`'s shape: Agg and Agg+KD on new and overlapped tokens, five seeds."""
    rng = np.random.default_rng(0)
    return pd.DataFrame([{"exit": e, "data": d, "seed": s, "nll loop 1": 6.5 + rng.normal(0, 0.02) - 0.03 * k,
                          "nll loop 2": 6.4 + rng.normal(0, 0.02)}
                         for s in range(5) for d in ("new", "overlapped")
                         for k, e in enumerate(("aggressive", "aggressive_kd"))])


def _rt_task_curves() -> pd.DataFrame:
    tasks = ("in_context_recall", "noisy_recall", "fuzzy_recall", "selective_copying", "compression", "memorization",
             "copy")
    return pd.DataFrame([{"task": task, "block": block, "seed": 0, "loss_on": "scored", "ablation": False,
                          "step": step, "train_loss": 2.0, "token_acc": min(1.0, 0.1 + step / 1000 * (b + 1) / 3),
                          "seq_acc": 0.0, "chance": 0.07} for task in tasks for b, block in
                         enumerate(("recurrent", "transformer")) for step in range(100, 1001, 100)])


def _rt_tuning_curves() -> pd.DataFrame:
    """Copy's main runs (5 epochs, 1,000 steps) beside two tuned recipes (15 epochs, 3,000 steps), both blocks."""
    main = _rt_task_curves().assign(tuned=False, epochs=0, lr=0.0)
    tuned = pd.DataFrame([{"task": "copy", "block": block, "seed": 0, "loss_on": "scored", "ablation": False,
                           "tuned": True, "epochs": 15, "lr": lr, "step": step, "train_loss": 2.0,
                           "token_acc": min(0.9, 0.07 + step / 3000 * (0.8 if block == "recurrent" else 0.2) * k),
                           "seq_acc": 0.0, "chance": 0.0685}
                          for block in ("recurrent", "transformer") for k, lr in ((1.0, 3e-3), (0.4, 1e-2))
                          for step in range(100, 3001, 100)])
    return pd.concat([main, tuned], ignore_index=True)


def _mor_curves() -> pd.DataFrame:
    return pd.DataFrame([{"label": label, "seed": seed, "train_flops": step * 1e11, "val_loss": 7 - 0.1 * step - k / 10}
                         for k, label in enumerate(("Vanilla", "Recursive-3 (middle_cycle)", "MoR-3 EC", "MoR-3 TC"))
                         for seed in (0, 1) for step in range(1, 12)])


def _router_outputs() -> dict[str, pd.DataFrame]:
    out = {}
    for name in ("MoR-3 expert-choice", "MoR-3 token-choice"):
        rows = [{"step": step, "output": float(v), "selected": bool(v > 0.5)}
                for step in (1, 2, 3) for v in rng.uniform(0, 1, 200)]
        out[name] = pd.DataFrame(rows)
    return out


def _token_depths() -> tuple[list[list[str]], list[list[int]]]:
    words = ["Shall", "I", "compare", "thee", "to", "a", "summer's", "day", "?", "Thou", "art", "more", "lovely",
             "and", "more", "temperate", ":\n"] * 4
    tokens = [[w + " " for w in words] for _ in range(3)]
    return tokens, [[int(d) for d in rng.integers(1, 4, len(t))] for t in tokens]


def _kv_geometry() -> dict[str, pd.DataFrame]:
    depth = np.arange(12)
    geometry = {"norms": pd.DataFrame({"depth": depth, "hidden": 1 + depth, "key": 2 + depth, "value": 3 + depth})}
    for name in ("hidden", "key", "value"):
        geometry[f"similarity_{name}"] = pd.DataFrame(rng.uniform(-0.2, 1, (12, 12)))
    return geometry


def _rt_lm_curves() -> pd.DataFrame:
    return pd.DataFrame([{"label": label, "seed": seed, "step": step, "val_loss": 6 - 0.05 * step}
                         for label in ("transformer, deep (4 x 128)", "recurrent, shallow-wide (1 x 256)",
                                       "recurrent, deep (4 x 128)", "transformer, shallow-wide (1 x 256)")
                         for seed in (0, 1) for step in range(0, 400, 50)])


def _probe_curves() -> pd.DataFrame:
    return pd.DataFrame([{"recipe": r, "seed": s, "exit_layer": e, "step": step, "nll": 6 - step / 500 + (e == 4)}
                         for r in ("baseline", "ld", "ee", "ld_ee") for s in (0, 1) for e in (4, 8)
                         for step in range(0, 1000, 100)])


def _head_cost() -> pd.DataFrame:
    rows = []
    for curriculum in ("rotational", "all"):
        for r in range(3):
            for model, ratio in (("shared", 1.0), ("dedicated", 1.02 + 0.01 * r)):
                rows.append({"round": r, "model": model, "curriculum": curriculum, "step_s": 0.2 * ratio,
                             "peak_mib": 300 * ratio, "state_mib": 60 * ratio, "rest_mib": 240.0, "params": 3e6 * ratio,
                             "step_s / shared": ratio, "peak_mib / shared": ratio, "params / shared": 2.5 * ratio})
    return pd.DataFrame(rows)


def _train_curves() -> pd.DataFrame:
    return pd.DataFrame([{"recipe": r, "seed": s, "step": step, "loss": 6 - step / 400}
                         for r in ("ld", "ld_const") for s in (0, 1) for step in range(0, 800, 10)])


def _layer_grid() -> tuple[np.ndarray, list[str]]:
    tokens = ["def", " has", "_close", "_elements", "(", "numbers", ":", " List", "[", "float", "],", "\n   "] * 4
    return rng.uniform(0, 1, (30, len(tokens))) > 0.4, tokens


def _predicted() -> tuple[pd.DataFrame, pd.DataFrame]:
    from rlib.layerskip import decode_costs

    costs = csv("05", "decoding_costs")
    decoding = csv("05", "decoding_parse")
    return decode_costs.predict(decoding[decoding["recipe"] == "ld_ee"], costs, 8), costs


def _study_exits() -> tuple[pd.DataFrame, pd.DataFrame, dict[str, str]]:
    exits, tasks = csv("05", "pretrained_exits"), csv("05", "pretrained_tasks")
    study = exits["study"].iloc[0]
    exits, tasks = exits[exits["study"] == study], tasks[tasks["study"] == study]
    return exits, tasks, {r: r for r in dict.fromkeys(exits["recipe"])}


# --------------------------------------------------------------------------- one case per figure function


def _cases() -> dict[str, Callable[[], object]]:
    from rlib import plotting
    from rlib.basemodels import plots as p00
    from rlib.layerskip import plots as p05
    from rlib.mor import plots as p03
    from rlib.recurrent import plots as p04
    from rlib.recursive import plots as p01
    from rlib.relaxed import plots as p02
    from rlib.relaxed.tables import changes_table

    return {
        "rlib.plotting.grouped_bars": lambda: plotting.grouped_bars(
            csv("00", "heldout_perplexity"), "corpus", "ppl", ("model", "dtype"), title="grouped bars"),
        "rlib.basemodels.plots.plot_perplexity": lambda: p00.plot_perplexity(csv("00", "heldout_perplexity")),
        "rlib.basemodels.plots.plot_latency": lambda: p00.plot_latency(csv("00", "forward_latency")),
        "rlib.basemodels.plots.plot_task_suite": lambda: p00.plot_task_suite(
            csv("00", "task_suite"), chance={"book_cloze": 25.0, "book_nextline": 50.0}),
        "rlib.recursive.plots.plot_layer_mapping": lambda: p01.plot_layer_mapping(
            _layer_mappings(), "Which block runs where, and where it starts from"),
        "rlib.recursive.plots.plot_loss_curves": lambda: p01.plot_loss_curves(
            *_loss_curves(), "Uptraining loss per initialization (B=2)", log_y=True),
        "rlib.recursive.plots.plot_size_quality": lambda: p01.plot_size_quality(
            csv("01", "size_quality"), "after ppl[gutenberg-poetry]", "held-out perplexity, gutenberg-poetry (log)",
            "Perplexity against unique parameters (Fig. 4)"),
        "rlib.recursive.plots.plot_shift_rates": lambda: p01.plot_shift_rates(
            csv("01", "data_shift_paper_rate"), -0.063, -1.6,
            "Table 2's data-shift pair at the chapter's rate and the paper's"),
        "rlib.relaxed.plots.plot_step0": lambda: p02.plot_step0(
            csv("02", "step0"), "Step 0: relaxed B=2 models vs LoRA rank (gutenberg-poetry)"),
        "rlib.relaxed.plots.plot_relaxation": lambda: p02.plot_relaxation(
            csv("02", "relaxation"), "after ppl[gutenberg-poetry]", "Relaxation: perplexity against parameters"),
        "rlib.relaxed.plots.plot_rank_sweep": lambda: p02.plot_rank_sweep(
            csv("02", "relaxation"), "after ppl[gutenberg-poetry]", 576, 99.83,
            "Quality against LoRA rank after uptraining (B=2)"),
        "rlib.relaxed.plots.plot_training_loss": lambda: p02.plot_training_loss(
            _relaxed_curves(), 144, "Training loss, recursive vs relaxed r=144 (Fig. G.1)"),
        "rlib.relaxed.plots.plot_budget": lambda: p02.plot_budget(
            _budget(), "after nll[gutenberg-poetry]", "Held-out NLL against the uptraining budget (Table I.1)"),
        "rlib.relaxed.plots.plot_exits": lambda: p02.plot_exits(
            csv("02", "early_exit"), 2, "Static-exit NLL per loop after each schedule"),
        "rlib.relaxed.plots.plot_post_seeds": lambda: p02.plot_post_seeds(
            changes_table(_post_seeds(), 2), _post_seeds(), 2, "App. J: post-training changes, paired by seed"),
        "rlib.relaxed.plots.plot_throughput": lambda: p02.plot_throughput(
            csv("02", "throughput_measured"), csv("02", "throughput_simulated"), "Generation throughput"),
        "rlib.relaxed.plots.plot_step_time": lambda: p02.plot_step_time(
            csv("02", "throughput_measured"), "Where the engine's step time goes"),
        "rlib.relaxed.plots.plot_pass_times": lambda: p02.plot_pass_times(
            csv("02", "pass_times"), "Per-pass time against batch (Tables K.1 / K.3 analog)"),
        "rlib.mor.plots.plot_curves": lambda: p03.plot_curves(
            _mor_curves(), "Validation NLL vs training FLOPs (isoFLOP budget 5e+12)"),
        "rlib.mor.plots.plot_depth_scaling": lambda: p03.plot_depth_scaling(
            csv("03", "depth_scaling"), "Test NLL vs the recursion cap"),
        "rlib.mor.plots.plot_load_trace": lambda: p03.plot_load_trace(
            csv("03", "load_trace"), "Token-choice MaxVio per training step", 0.266, 0.007),
        "rlib.mor.plots.plot_router_outputs": lambda: p03.plot_router_outputs(
            _router_outputs(), "Router outputs: kept by the top-k vs not"),
        "rlib.mor.plots.plot_token_depths": lambda: p03.plot_token_depths(
            *_token_depths(), 3, "Recursion depth per token (causal routing)"),
        "rlib.mor.plots.plot_kv_geometry": lambda: p03.plot_kv_geometry(
            _kv_geometry(), "Recursive model: norms and cross-depth similarity"),
        "rlib.mor.plots.plot_throughput": lambda: p03.plot_throughput(
            csv("03", "throughput"), "Quality vs measured decode throughput"),
        "rlib.mor.plots.plot_train_cost": lambda: p03.plot_train_cost(
            csv("03", "train_cost"), {"step time": 0.81, "peak memory": 0.75},
            "MoR-2 EC vs vanilla, 4,096 tokens a step"),
        "rlib.mor.plots.plot_kv_sharing": lambda: p03.plot_kv_sharing(
            csv("03", "kv_sharing"), _vanilla_kv(), "Fig. 4c: NLL without and with KV sharing"),
        "rlib.mor.plots.plot_uptraining": lambda: p03.plot_uptraining(
            csv("03", "uptraining"), "smollm2-135m up-trained with each sharing strategy"),
        "rlib.mor.plots.plot_budgets": lambda: p03.plot_budgets(
            csv("03", "budget_sweep"), "Test NLL against the isoFLOP budget"),
        "rlib.mor.plots.plot_compute_optimal": lambda: p03.plot_compute_optimal(
            *_compute_optimal(), "Test NLL against model size per budget; stars: fitted optima"),
        "rlib.recurrent.plots.plot_tile_schedule": lambda: p04.plot_tile_schedule(32, "Dyadic tiles for N = 32"),
        "rlib.recurrent.plots.plot_token_recurrence": lambda: p04.plot_token_recurrence(
            _token_recurrence(), "Sec. 3.2: the layer against its RNN form"),
        "rlib.recurrent.plots.plot_traffic": lambda: p04.plot_traffic(
            csv("04", "traffic"), "Attention traffic of one layer's prefill"),
        "rlib.recurrent.plots.plot_latency": lambda: p04.plot_latency(
            csv("04", "latency"), "One layer, D = 256, batch 4"),
        "rlib.recurrent.plots.plot_tasks": lambda: p04.plot_tasks(
            csv("04", "tasks"), "One RT layer vs one Transformer layer"),
        "rlib.recurrent.plots.plot_task_curves": lambda: p04.plot_task_curves(
            _rt_task_curves(), "Learning curves: token accuracy on 256 test sequences"),
        "rlib.recurrent.plots.plot_tuning_curves": lambda: p04.plot_tuning_curves(
            _rt_tuning_curves(), 5, 3e-3, "Tuning grid: token accuracy on the probe sequences"),
        "rlib.recurrent.plots.plot_lm_curves": lambda: p04.plot_lm_curves(
            _rt_lm_curves(), "Validation NLL during training"),
        "rlib.recurrent.plots.plot_lm_tuning": lambda: p04.plot_lm_tuning(
            csv("04", "lm_tuning"), "Learning-rate tuning (seed 0, App. D.1)"),
        "rlib.recurrent.plots.plot_ablation": lambda: p04.plot_ablation(
            csv("04", "norm_ablation"), "Shallow RT: the norm before the persistent K/V"),
        "rlib.recurrent.plots.plot_gradient_paths": lambda: p04.plot_gradient_paths(
            csv("04", "theorem_4_1"), "Theorem 4.1: gradient from x_1 to z_t"),
        "rlib.layerskip.plots.plot_exit_curves": lambda: p05.plot_exit_curves(
            csv("05", "exits"), "From scratch: held-out perplexity at every exit"),
        "rlib.layerskip.plots.plot_probe": lambda: p05.plot_probe(
            _probe_curves(), "Middle (dashed) and last (solid) exit during training"),
        "rlib.layerskip.plots.plot_train_loss": lambda: p05.plot_train_loss(
            _train_curves(), "Training loss: dropout schedules"),
        "rlib.layerskip.plots.plot_head_cost": lambda: p05.plot_head_cost(
            _head_cost(), "A head per early exit vs one shared head, 12 layers"),
        "rlib.layerskip.plots.plot_study_exits": lambda: p05.plot_study_exits(
            *_study_exits(), "Continual pretraining: every exit on every corpus and task"),
        "rlib.layerskip.plots.plot_last_exit_budget": lambda: p05.plot_last_exit_budget(
            _last_exit_budget(), {"baseline": "plain", "ld_ee": "LD+EE"}, "continual: last exit against the budget"),
        "rlib.layerskip.plots.plot_paper_rate": lambda: p05.plot_paper_rate(
            _paper_rate(), {"baseline": "plain", "ld_ee": "LD+EE"}, "continual: the chapter's rate and Table 8's"),
        "rlib.layerskip.plots.plot_parse_rate": lambda: p05.plot_parse_rate(
            _parse_rate(), {"baseline": "plain", "ld_ee": "LD+EE"}, "parsing: the chapter's rate and Table 8's"),
        "rlib.layerskip.plots.plot_lr_sensitivity": lambda: p05.plot_lr_sensitivity(
            _lr_sensitivity(), "From scratch: the last exit against the peak learning rate"),
        "rlib.layerskip.plots.plot_parse_exits": lambda: p05.plot_parse_exits(
            csv("05", "parse_exits"), {r: r for r in ("baseline", "ld", "ee", "ld_ee")}, "Parsing: exit by exit"),
        "rlib.layerskip.plots.plot_self_speculation": lambda: p05.plot_self_speculation(
            csv("05", "decoding_parse"), "ld_ee", "Parsing, LD+EE model: self-speculation vs autoregressive"),
        "rlib.layerskip.plots.plot_cost_model": lambda: p05.plot_cost_model(
            *_predicted(), 8, "Parsing, LD+EE model: measured vs predicted speedup"),
        "rlib.layerskip.plots.plot_layer_grid": lambda: p05.plot_layer_grid(
            *_layer_grid(), "SmolLM2-135M on HumanEval/0: which exits already predict the final token"),
    }


def _figure_functions() -> list[str]:
    names = ["rlib.plotting.grouped_bars"]
    for module_name in PLOT_MODULES[1:]:
        module = importlib.import_module(module_name)
        names += [f"{module_name}.{n}" for n in module.__all__
                  if n.startswith("plot_") and inspect.isfunction(getattr(module, n))]
    return names


def test_every_figure_function_has_a_case():
    missing = sorted(set(_figure_functions()) - set(_cases()))
    assert missing == [], f"figure functions without a label-overlap case in this file: {missing}"


@pytest.mark.parametrize("name", sorted(_figure_functions()))
def test_figure_labels_do_not_overlap(name):
    import matplotlib.pyplot as plt

    fig = _cases()[name]()
    try:
        overlaps = overlapping_labels(fig)
        assert overlaps == [], f"{name}: overlapping labels {overlaps[:8]}"
    finally:
        plt.close(fig)


def test_the_check_sees_an_overlap():
    """The check itself: long labels forced onto one spot are reported, level or slanted; slanted labels whose
    bounding boxes touch but whose glyphs do not are not."""
    import matplotlib.pyplot as plt

    names = ["a very long tick label number one", "a very long tick label number two"]
    fig, ax = plt.subplots(figsize=(4, 3))
    try:
        ax.set_xticks([0.0, 0.01], names)
        assert overlapping_labels(fig)
        ax.tick_params(axis="x", rotation=35)
        assert overlapping_labels(fig)  # slanted, still on one spot
        ax.set_xlim(-0.5, 1.5)
        ax.set_xticks([0.0, 1.0], names)
        for label in ax.get_xticklabels():
            label.set_horizontalalignment("right")
        fig.draw_without_rendering()
        boxes = [t.get_window_extent() for t in ax.get_xticklabels()]
        assert boxes[0].x1 > boxes[1].x0  # the bounding boxes overlap...
        assert overlapping_labels(fig) == []  # ...the slanted text does not
    finally:
        plt.close(fig)
