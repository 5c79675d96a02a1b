"""Chapter 05's tables (LayerSkip, paper 004), from the three studies' run records and the decoding studies.

From scratch (Sec. 4; Figs. 8, 11, 12; Table 1):
    exit_table        per recipe and exit layer: held-out NLL, perplexity, top-1 accuracy, mean (and s.d.) over seeds
    mid_last_table    Table 1's layout: each recipe's perplexity at the middle and the last exit, against the baseline
    probe_curves      the middle and last exits' held-out NLL during training, long format (Fig. 11)
    train_curves      training loss against steps, long format (Fig. 12)
    curriculum_table  the early-exit curricula side by side: exits' perplexity and seconds per step (Sec. 4.1.2)
    step_times        seconds per training step of every run, per recipe and seed (Sec. 9: layer dropout's speed)
    schedule_table    the per-layer dropout rates and exit-loss weights of a config (Eq. 3-6)

On the pretrained model (Sec. 5.1-5.3; Table 1, Figs. 2, 6 and 10a):
    exit_long         per study, recipe, corpus and exit: held-out NLL, perplexity and top-1 accuracy (the source
                      model is repeated in every study, as the comparison every study starts from)
    task_long         per study, recipe, task and exit: the task's primary metric (`rlib.tasks.PRIMARY_METRIC`)
    table_1           Table 1's layout for one study: rows = perplexity per corpus and accuracy per task, columns =
                      the last and the middle exit of every model
    probe_summary     Fig. 2's number per model: mean layers a generated token needs, both readings (first / stable)
    runs_table        one row per trained run: tokens, epochs, time

Parsing (Sec. 5.3; Fig. 10b, Tables 5, 6, 10):
    parse_exits       per recipe and exit: teacher-forced exact match and token accuracy (Fig. 10b's data)
    parse_pairs       per exit, plain fine-tuning against another recipe utterance by utterance: how many parses
                      both, only one or neither give (the paired counts of Fig. 10b's differences; ours)
    table_10          Table 10's layout from a `decode_study.parse_decoding` table: per method and E the exact match
                      of the generated parses, acceptance, ms/token and speedup
    parse_examples    a few training examples as prompt and target

Beyond the paper, the measured cost model (`rlib.layerskip.decode_costs`):
    cost_table        our decoders' rows of one model: measured ms/token and speedup beside the cost model's and the
                      layer-count model's (`decoding.predicted_speedup`, which leaves out the head)
    best_whole_head   the best whole-head (E, d) setting by measured speedup
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from rlib.diversity import distinct_2
from rlib.layerskip import parse_data, schedules
from rlib.layerskip.config import SOURCE, LayerSkipConfig
from rlib.layerskip.decoding import vocab_rows
from rlib.tasks import PRIMARY_METRIC

__all__ = ["COLUMNS", "RECIPE_LABELS", "best_whole_head", "cost_table", "curriculum_table", "exit_long", "exit_table",
           "label", "mid_last_table", "parse_examples", "parse_exits", "parse_pairs", "probe_curves", "probe_summary",
           "runs_table", "schedule_table", "step_times", "table_1", "table_10", "task_long", "train_curves"]

RECIPE_LABELS = {"baseline": "baseline", "ld": "LD", "ee": "EE", "ld_ee": "LD+EE", "ld_const": "LD const",
                 "ld_tconst": "LD S=1", "ee_all": "EE all layers", "ee_gradual": "EE gradual"}


def _exits_long(results: list[dict[str, Any]]) -> pd.DataFrame:
    frames = []
    for r in results:
        frame = pd.DataFrame(r["exits"])
        frame["recipe"], frame["seed"] = r["recipe"], r["seed"]
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def exit_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    long = _exits_long(results)
    table = long.groupby(["recipe", "exit_layer"], sort=False).agg(
        nll=("nll", "mean"), nll_sd=("nll", "std"), top1_acc=("top1_acc", "mean"), agree_last=("agree_last", "mean"),
        seeds=("seed", "count"))
    table = table.reset_index()
    table["ppl"] = table["nll"].map(math.exp)  # perplexity of the seed-mean NLL
    return table[["recipe", "exit_layer", "nll", "nll_sd", "ppl", "top1_acc", "agree_last", "seeds"]]


def mid_last_table(results: list[dict[str, Any]], middle: int, last: int) -> pd.DataFrame:
    table = exit_table(results)
    rows = []
    base = table[table["recipe"] == "baseline"].set_index("exit_layer")
    for recipe, part in table.groupby("recipe", sort=False):
        part = part.set_index("exit_layer")
        rows.append({"recipe": recipe, "label": RECIPE_LABELS.get(recipe, recipe),
                     "ppl_middle": part.loc[middle, "ppl"], "ppl_last": part.loc[last, "ppl"],
                     "acc_middle": part.loc[middle, "top1_acc"], "acc_last": part.loc[last, "top1_acc"],
                     "agree_middle": part.loc[middle, "agree_last"],
                     "middle_vs_baseline": base.loc[middle, "ppl"] / part.loc[middle, "ppl"],
                     "last_vs_baseline": part.loc[last, "ppl"] / base.loc[last, "ppl"]})
    return pd.DataFrame(rows)


def probe_curves(results: list[dict[str, Any]]) -> pd.DataFrame:
    rows = []
    for r in results:
        for record in r["probe"]:
            for name, value in record.items():
                if name.startswith("nll_exit_"):
                    rows.append({"recipe": r["recipe"], "seed": r["seed"], "step": record["step"],
                                 "exit_layer": int(name.removeprefix("nll_exit_")), "nll": value})
    return pd.DataFrame(rows)


def train_curves(results: list[dict[str, Any]], recipes: tuple[str, ...] | None = None) -> pd.DataFrame:
    rows = [{"recipe": r["recipe"], "seed": r["seed"], "step": step, "loss": loss}
            for r in results if recipes is None or r["recipe"] in recipes
            for step, loss in zip(r["train_curve"]["step"], r["train_curve"]["loss"])]
    return pd.DataFrame(rows)


def curriculum_table(results: list[dict[str, Any]], middle: int, last: int) -> pd.DataFrame:
    wanted = [r for r in results if r["recipe"] in ("baseline", "ee", "ee_all", "ee_gradual")]
    table = mid_last_table(wanted, middle, last)
    seconds = pd.DataFrame([{"recipe": r["recipe"], "step_seconds": r["step_seconds"]} for r in wanted])
    return table.merge(seconds.groupby("recipe", sort=False).mean().reset_index(), on="recipe")


def step_times(results: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per from-scratch run: recipe, seed and seconds per training step (the seed spread is the timing's)."""
    return pd.DataFrame([{"recipe": r["recipe"], "seed": r["seed"], "step_seconds": r["step_seconds"]}
                         for r in results], columns=["recipe", "seed", "step_seconds"])


def label(recipe: str) -> str:
    """A recipe's name in a study on the pretrained model: "baseline" is plain training on the same tokens."""
    return {SOURCE: "pretrained", "baseline": "plain"}.get(recipe) or RECIPE_LABELS.get(recipe, recipe)


def _studies(results: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(r["study"] for r in results if r["study"] != SOURCE))


def _long(results: list[dict[str, Any]], field: str) -> pd.DataFrame:
    source = [r for r in results if r["study"] == SOURCE]
    frames = []
    for study in _studies(results):
        for r in source + [r for r in results if r["study"] == study]:
            frame = pd.DataFrame(r[field])
            frame.insert(0, "recipe", r["recipe"])
            frame.insert(0, "study", study)
            frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def exit_long(results: list[dict[str, Any]]) -> pd.DataFrame:
    return _long(results, "exits")[["study", "recipe", "corpus", "exit_layer", "nll", "ppl", "top1_acc",
                                     "agree_last"]]


def task_long(results: list[dict[str, Any]]) -> pd.DataFrame:
    tasks = _long(results, "tasks")
    primary = tasks["metric"] == tasks["task"].map(PRIMARY_METRIC)
    return tasks[primary].reset_index(drop=True)[["study", "recipe", "task", "metric", "exit_layer", "value", "n"]]


def table_1(results: list[dict[str, Any]], study: str, middle: int, last: int) -> pd.DataFrame:
    """Rows "PPL <corpus>" and "<task> <metric> (%)"; a column per (exit, model), last exits first."""
    exits = exit_long(results)
    exits = exits[exits["study"] == study]
    tasks = task_long(results)
    tasks = tasks[tasks["study"] == study]
    recipes = list(dict.fromkeys(exits["recipe"]))
    rows = []
    for corpus, part in exits.groupby("corpus", sort=False):
        row = {"metric": f"PPL {corpus}"}
        for where, layer in (("last", last), ("middle", middle)):
            for recipe in recipes:
                row[f"{where} {label(recipe)}"] = float(
                    part[(part["recipe"] == recipe) & (part["exit_layer"] == layer)]["ppl"].iloc[0])
        rows.append(row)
    for (task, metric), part in tasks.groupby(["task", "metric"], sort=False):
        row = {"metric": f"{task} {metric} (%)"}
        for where, layer in (("last", last), ("middle", middle)):
            for recipe in recipes:
                row[f"{where} {label(recipe)}"] = 100 * float(
                    part[(part["recipe"] == recipe) & (part["exit_layer"] == layer)]["value"].iloc[0])
        rows.append(row)
    return pd.DataFrame(rows)


def probe_summary(probes: dict[str, pd.DataFrame], n_layers: int) -> pd.DataFrame:
    """probes: {model label: `rlib.layerskip.analysis.layers_needed` table} -> mean layers needed, both readings, the
    oracle's saving bound 1 - mean / L (the paper: 23.45 of 32 layers, at most 26 % saved) and, where the table has
    the generated tokens, their distinct-2 (`rlib.diversity`): on a looping continuation early layers agree with the
    last one more easily, so the bound reads high there."""
    rows = []
    for name, table in probes.items():
        first, stable = table["first"].mean(), table["stable"].mean()
        rows.append({"model": name, "tokens": len(table), "mean_first": first, "mean_stable": stable,
                     "saving_bound_first": 1 - first / n_layers, "saving_bound_stable": 1 - stable / n_layers,
                     "distinct_2": distinct_2(table["token"].tolist()) if "token" in table else float("nan")})
    return pd.DataFrame(rows)


def parse_exits(results: list[dict[str, Any]]) -> pd.DataFrame:
    frames = [pd.DataFrame(r["exits"]).assign(recipe=r["recipe"]) for r in results]
    table = pd.concat(frames, ignore_index=True)
    return table[["recipe", "exit_layer", "em", "token_acc"]]


def parse_pairs(results: list[dict[str, Any]], plain: str = "baseline") -> pd.DataFrame:
    """Per other recipe and exit read by both: `n` test utterances, `both` / `plain_only` / `other_only` / `neither`
    the counts of utterances whose whole parse both models, only the plain one, only the other one or neither give
    (from the runs' `item_exact`, `rlib.layerskip.parse_study.run_one`); no rows without a plain run."""
    runs = {r["recipe"]: r["item_exact"] for r in results}
    rows = []
    for recipe, exact in runs.items():
        if recipe == plain or plain not in runs:
            continue
        for exit_key in sorted(set(exact) & set(runs[plain]), key=int):
            a, b = runs[plain][exit_key], exact[exit_key]
            if len(a) != len(b):
                raise ValueError(f"{plain} and {recipe} read {len(a)} and {len(b)} utterances at exit {exit_key}")
            pairs = list(zip(a, b))
            rows.append({"recipe": recipe, "exit_layer": int(exit_key), "n": len(pairs),
                         "both": pairs.count(("1", "1")), "plain_only": pairs.count(("1", "0")),
                         "other_only": pairs.count(("0", "1")), "neither": pairs.count(("0", "0"))})
    return pd.DataFrame(rows, columns=["recipe", "exit_layer", "n", "both", "plain_only", "other_only", "neither"])


def table_10(decoding: pd.DataFrame) -> pd.DataFrame:
    """Rows: autoregressive, early exit per E and self-speculation per E and d ("kvq"), per recipe; column `draft`
    says which head drafts: "head" (the whole shared head, the paper's) or "vocab" (the task vocabulary only)."""
    keep = decoding[(decoding["method"].isin(["autoregressive", "early_exit"]))
                    | ((decoding["method"] == "self_speculative") & (decoding["reuse"] == "kvq"))]
    keep = keep.assign(draft=pd.Series("head", keep.index).where(~vocab_rows(keep), "vocab")
                       .where(keep["method"] == "self_speculative", ""))
    table = keep[["recipe", "method", "exit_layer", "n_draft", "draft", "score", "acceptance", "ms_per_token",
                  "speedup", "identical_to_greedy"]].rename(columns={"score": "em"})
    return table.assign(recipe=table["recipe"].map(label)).reset_index(drop=True)


COLUMNS = ["label", "acceptance", "tokens_per_round", "drafts_per_round", "ms_per_token", "predicted_ms", "speedup",
           "cost_model_speedup", "measured_over_cost", "predicted_speedup"]


def cost_table(predicted: pd.DataFrame) -> pd.DataFrame:
    """`decode_costs.predict`'s output, our decoders only; `predicted_speedup` renamed `layer_count_speedup`."""
    ours = predicted[predicted["predicted_ms"].notna()]
    return ours[COLUMNS].rename(columns={"predicted_speedup": "layer_count_speedup"}).reset_index(drop=True)


def best_whole_head(predicted: pd.DataFrame) -> tuple[pd.Series, int]:
    """(the fastest whole-head "kvq" self-speculative row, the autoregressive row's new tokens) of a predicted table."""
    spec = predicted[predicted["method"] == "self_speculative"]
    whole = spec[~vocab_rows(spec) & (spec["reuse"] == "kvq")]
    tokens = int(predicted.loc[predicted["method"] == "autoregressive", "new_tokens"].iloc[0])
    return whole.loc[whole["speedup"].idxmax()], tokens


def schedule_table(cfg: LayerSkipConfig) -> pd.DataFrame:
    """Per layer: the dropout rate at the end of training (exponential and constant, Eq. 3) and the early-exit loss
    weights with every layer on and, mid-training, under the rotational curriculum (Eq. 5-6)."""
    layers = cfg.n_layers
    step = layers // 2
    return pd.DataFrame({
        "layer": range(layers),
        "dropout_rate": schedules.dropout_rates(layers, cfg.p_max),
        "dropout_rate_const": schedules.dropout_rates(layers, cfg.p_max, layer_schedule="constant"),
        "exit_weight_all": schedules.exit_loss_weights(layers, cfg.e_scale, "all"),
        f"exit_weight_rotational_step_{step}": schedules.exit_loss_weights(
            layers, cfg.e_scale, "rotational", step=step, total_steps=cfg.steps, rotation=cfg.rotation or layers - 1),
    })


def runs_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per trained run of a study on the pretrained model: its corpus and tokens, or (for the parsing study,
    which records epochs) tokens, epochs and seconds per step; then its minutes."""
    rows = []
    for r in results:
        if "epochs" in r:
            row = {"run": r["name"], "tokens": r["tokens"], "epochs": r["epochs"], "s/step": r["step_seconds"]}
        else:
            row = {"run": r["name"], "corpus": r.get("corpus", ""), "tokens": r.get("tokens", 0)}
        rows.append({**row, "minutes": r.get("seconds", 0) / 60})
    return pd.DataFrame(rows)


def parse_examples(n: int, seed: int) -> pd.DataFrame:
    """The first `n` training examples of the parsing task: prompt and target."""
    return pd.DataFrame([{"prompt": ex.prompt, "target": ex.target} for ex in parse_data.examples("train", n, seed)])
