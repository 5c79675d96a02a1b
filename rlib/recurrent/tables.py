"""Chapter 04's tables from its run records (paper 002: Figs. 4-7, Table 1).

    task_table       per task and block: token and sequence accuracy, mean over seeds (Figs. 5-6)
    loss_table       the loss ablation: tasks trained on every next token (MAD) and on the scored targets only
    lm_table         Transformer vs RT, deep vs shallow-wide: parameters, KV-cache per token, test NLL (Table 1)
    ablation_table   shallow RT with and without the pre-KV norm over learning rates (Fig. 7)
    batch_table      the deep and shallow models of both blocks at two batch sizes, equal tokens (Figs. 8-9)
    lm_curves        validation loss against steps for every run
    task_seed_table  the main task runs per seed (the seed spread behind task_table's means; the claims' s.d.)
    lm_validation_table  validation NLL per step of the main LM runs, by block, depth and seed (the claims' curves)
    task_curve_table     token and sequence accuracy on a probe set against training steps, every task run, with
                         the task's chance accuracy (is a run at chance, still learning, or flat?)
    tuning_table         the tuning grid's recipes (epochs, learning rate) beside the main run, best marked (App. D.2)
    downstream_table     zero-shot accuracy and gold-answer CE of the main LM runs on the local tasks (Sec. 7.2,
                         Tables 3-10), RT minus T paired over items
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from rlib.recurrent.synthetic import FitConfig
from rlib.recurrent.tasks import chance_token_acc
from rlib.tasks import CHANCE

__all__ = ["DOWNSTREAM_CHANCE", "MAD_BASELINE", "MAD_STEPS", "ablation_table", "batch_table", "downstream_table",
           "lm_curves", "lm_table", "lm_validation_table", "loss_table", "task_curve_table", "task_seed_table",
           "task_setup_table", "task_table", "tuning_table"]


# MAD's baseline recipe (Poli et al. 2024, mad-lab `configs/tasks/*.yml`, `mad/configs.py`), which the paper follows
# "as in Poli et al." (App. D.2): the sequence length of each task and the training settings shared by all
MAD_BASELINE = {
    "lengths": {"in_context_recall": 128, "noisy_recall": 128, "fuzzy_recall": 128, "selective_copying": 256,
                "compression": 32, "memorization": 32, "copy": None},  # copy is Jelassi et al.'s, without settings
    "train examples": 12_800, "test examples": 1_280, "batch": 128, "epochs": 200,
    "train examples per task": {"memorization": 256},  # configs/tasks/memorization.yml
    "learning rate": "best of {1e-4, 5e-4, 1e-3} x weight decay {0, 0.1}", "schedule": "cosine to 1e-6",
    "width / heads": "128 / 16", "loss": "every next token",
}
MAD_STEPS = MAD_BASELINE["train examples"] // MAD_BASELINE["batch"] * MAD_BASELINE["epochs"]  # 20,000


def task_setup_table(cfg) -> pd.DataFrame:
    """The synthetic suite's recipe in this run beside MAD's baseline (App. D.2: 'as in Poli et al. (2024)'), so a
    reader sees every departure: one row per setting, the sequence length one row per task."""
    width, heads = cfg.task_width
    steps = cfg.task_train // cfg.task_batch * cfg.task_epochs
    loss = {"all": "every next token", "scored": "the scored targets only"}[cfg.task_loss]

    def per_task(sizes: dict[str, int]) -> str:
        named = [f"{task} {n:,}" for task, n in sizes.items() if task in dict(cfg.tasks)]
        return f" ({', '.join(named)} train)" if named else ""

    rows = [("train / test examples", f"{MAD_BASELINE['train examples']:,} / {MAD_BASELINE['test examples']:,}"
             + per_task(MAD_BASELINE["train examples per task"]) + "; test sequences drawn apart from training",
             f"{cfg.task_train:,} / {cfg.task_test:,}" + per_task(dict(cfg.task_train_sizes))
             + "; test sequences drawn apart from training"),
            ("batch x epochs = optimizer steps",
             f"{MAD_BASELINE['batch']} x {MAD_BASELINE['epochs']} = {MAD_STEPS:,} (every task at 200 epochs)",
             f"{cfg.task_batch} x {cfg.task_epochs} = {steps:,}" + "".join(
                 f"; {task} {cfg.task_batch} x {cfg.task_epochs_for(task)} = "
                 f"{n // cfg.task_batch * cfg.task_epochs_for(task):,}" for task, n in cfg.task_train_sizes)),
            ("learning rate", MAD_BASELINE["learning rate"],
             f"{cfg.task_lr:g}" + (" (+ the tuning grid: task_tuning)" if cfg.task_tuning else "")),
            ("schedule", MAD_BASELINE["schedule"],
             f"linear warm-up ({FitConfig.warmup_fraction * 100:g} %), cosine to 0"),
            ("width / heads", MAD_BASELINE["width / heads"], f"{width} / {heads}"),
            ("loss", MAD_BASELINE["loss"], loss + (" (and MAD's on " + ", ".join(cfg.loss_ablation_tasks) + ")"
                                                   if cfg.loss_ablation_tasks else ""))]
    rows += [(f"sequence length: {task}", "-" if MAD_BASELINE["lengths"].get(task) is None else
              str(MAD_BASELINE["lengths"][task]), str(length)) for task, length in cfg.tasks]
    return pd.DataFrame(rows, columns=["setting", "MAD baseline", "this run"])


def _tuned(r: dict[str, Any]) -> bool:
    return bool(r.get("epochs") or r.get("lr"))


def _task_rows(results: list[dict[str, Any]], tuned: bool = False) -> pd.DataFrame:
    """One row per task run: the main comparison and the loss ablation, or (tuned=True) the tuning grid's runs."""
    return pd.DataFrame([{"task": r["task"], "block": r["block"], "seed": r["seed"], "loss_on": r["loss_on"],
                          "ablation": r["ablation"], "epochs": r.get("epochs", 0), "lr": r.get("lr", 0.0),
                          "n_train": r["n_train"], "token_acc": r["test"]["token_acc"],
                          "seq_acc": r["test"]["seq_acc"], "minutes": r["train"]["seconds"] / 60}
                         for r in results if _tuned(r) == tuned],
                        columns=["task", "block", "seed", "loss_on", "ablation", "epochs", "lr", "n_train",
                                 "token_acc", "seq_acc", "minutes"])


def task_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    """The main runs (the preset's loss), mean and s.d. over seeds."""
    df = _task_rows(results)
    df = df[~df["ablation"]]
    return df.groupby(["task", "block"], sort=False).agg(
        token_acc=("token_acc", "mean"), seq_acc=("seq_acc", "mean"), token_acc_sd=("token_acc", "std"),
        seeds=("seed", "count"), minutes=("minutes", "mean"), n_train=("n_train", "first")).reset_index()


def tuning_table(results: list[dict[str, Any]], epochs: int, lr: float) -> pd.DataFrame:
    """The tuning grid (App. D.2: each model tuned over learning rates, the best run reported): for every tuned task
    and block, the first seed's main run (the preset's `epochs` and `lr`) and each tuned recipe, the best by token
    accuracy marked."""
    tuned = _task_rows(results, tuned=True)
    if tuned.empty:
        return pd.DataFrame(columns=["task", "block", "epochs", "lr", "token_acc", "seq_acc", "minutes", "best"])
    main = _task_rows(results)
    main = main[~main["ablation"] & main["task"].isin(set(tuned["task"])) & (main["seed"] == main["seed"].min())]
    table = pd.concat([main.assign(epochs=epochs, lr=lr), tuned], ignore_index=True)
    table = table[["task", "block", "epochs", "lr", "token_acc", "seq_acc", "minutes"]]
    best = table.groupby(["task", "block"])["token_acc"].transform("max")
    return table.assign(best=table["token_acc"] == best).sort_values(["task", "block", "epochs", "lr"]).reset_index(
        drop=True)


def loss_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    """For each ablated task, block and loss: the first seed's accuracies (one row per loss)."""
    df = _task_rows(results)
    ablated = set(df.loc[df["ablation"], "task"])
    df = df[df["task"].isin(ablated) & (df["seed"] == df["seed"].min())]
    return df[["task", "block", "loss_on", "token_acc", "seq_acc", "minutes"]].sort_values(
        ["task", "block", "loss_on"]).reset_index(drop=True)


def _main_lm(r: dict[str, Any]) -> bool:
    """A run of Table 1's grid: the shape's chosen rate and the preset's batch, with the pre-KV norm (`main`, set by
    `rlib.recurrent.tuning.mark_table1`), not an ablation or another rate of the tuning grid."""
    return bool(r["main"])


def _alt_batch(r: dict[str, Any]) -> bool:
    """A run of Figs. 8-9's second batch size (Table 1's grid otherwise: lr, norm)."""
    return "-batch" in r["name"]


def _lm_frame(results: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame([{k: v for k, v in r.items() if k not in ("curve", "downstream")} for r in results])


def lm_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    """Table 1's layout: the main runs (each shape's chosen learning rate, with the pre-KV norm), mean and s.d. over
    seeds."""
    main = _lm_frame([r for r in results if _main_lm(r)])
    table = main.groupby(["block", "depth"], sort=False).agg(lr=("lr", "first"),
        n_layers=("n_layers", "first"), d_model=("d_model", "first"), params_m=("non_embedding_params", "first"),
        kv_floats_per_token=("kv_floats_per_token", "first"), test_nll=("test_nll", "mean"),
        test_nll_sd=("test_nll", "std"), seeds=("seed", "count"), minutes=("seconds", "mean")).reset_index()
    table["params_m"] = table["params_m"] / 1e6
    table["minutes"] = table["minutes"] / 60
    return table


def batch_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    """Figs. 8-9 / Tables 4 and 7: the deep and shallow models of both blocks at each batch size (equal tokens), mean
    and s.d. of the test NLL over seeds."""
    runs = [r for r in results if (_main_lm(r) and r["depth"] != "double") or _alt_batch(r)]
    if not any(_alt_batch(r) for r in runs):
        return pd.DataFrame(columns=["block", "depth", "batch", "steps", "tokens", "test_nll", "test_nll_sd", "seeds"])
    df = _lm_frame(runs)
    return df.groupby(["block", "depth", "batch"], sort=False).agg(
        steps=("steps", "first"), tokens=("tokens", "first"), test_nll=("test_nll", "mean"),
        test_nll_sd=("test_nll", "std"), seeds=("seed", "count")).reset_index().sort_values(
        ["batch", "depth", "block"]).reset_index(drop=True)


def ablation_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    df = _lm_frame([r for r in results if not _alt_batch(r)])
    first = df["seed"].min()
    sel = df[(df["block"] == "recurrent") & (df["depth"] == "shallow") & (df["seed"] == first)]
    table = sel[["kv_norm", "lr", "test_nll", "final_train_loss"]].sort_values(["kv_norm", "lr"])
    table["diverged"] = ~np.isfinite(table["test_nll"]) | (table["test_nll"] > table["test_nll"].min() + 2.0)
    return table.reset_index(drop=True)


def lm_curves(results: list[dict[str, Any]], alt_batch: bool = False) -> pd.DataFrame:
    """Validation NLL against steps of Table 1's runs, or (alt_batch) of the second batch size's (Figs. 8-9)."""
    rows = []
    for r in results:
        label = f"{r['block']} {r['depth']} (L={r['n_layers']}, D={r['d_model']})"
        if not (_alt_batch(r) if alt_batch else _main_lm(r)):
            continue
        for step, loss in zip(r["curve"]["step"], r["curve"]["val_loss"]):
            rows.append({"label": label, "seed": r["seed"], "step": step, "val_loss": loss})
    return pd.DataFrame(rows)


def task_seed_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    """The main runs (the preset's loss), one row per task, block and seed."""
    df = _task_rows(results)
    return df.loc[~df["ablation"], ["task", "block", "seed", "token_acc", "seq_acc"]].reset_index(drop=True)


def lm_validation_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    """Validation NLL at every evaluated step of the main LM runs (the chosen rate, with the pre-KV norm)."""
    main = [r for r in results if _main_lm(r)]
    frames = [pd.DataFrame({"block": r["block"], "depth": r["depth"], "n_layers": r["n_layers"],
                            "d_model": r["d_model"], "seed": r["seed"], "step": r["curve"]["step"],
                            "val_loss": r["curve"]["val_loss"]}) for r in main]
    columns = ["block", "depth", "n_layers", "d_model", "seed", "step", "val_loss"]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)


DOWNSTREAM_CHANCE = CHANCE  # the local tasks' chance accuracies (rlib.tasks)


def downstream_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    """Zero-shot local-task scores of the main LM runs (Sec. 7.2, Tables 3-10 analogs): one row per run and task,
    accuracy with lm-eval's s.e., the mean gold-answer CE (nats, summed over the answer's tokens) and, for a
    recurrent run, its CE minus the Transformer's of the same depth and seed, with the paired s.e. over items."""
    columns = ["block", "depth", "n_layers", "d_model", "seed", "task", "n", "acc", "acc_stderr", "acc_norm", "chance",
               "gold_ce",
               "gold_ce_minus_t", "gold_ce_minus_t_se"]
    main = [r for r in results if _main_lm(r) and r.get("downstream")]
    twins = {(r["depth"], r["seed"]): r for r in main if r["block"] == "transformer"}
    rows = []
    for r in main:
        for task, score in r["downstream"].items():
            diff, diff_se = float("nan"), float("nan")
            twin = twins.get((r["depth"], r["seed"])) if r["block"] == "recurrent" else None
            if twin is not None and task in twin["downstream"]:
                paired = np.asarray(score["gold_ce"]) - np.asarray(twin["downstream"][task]["gold_ce"])
                diff, diff_se = float(paired.mean()), float(paired.std(ddof=1) / np.sqrt(len(paired)))
            rows.append({"block": r["block"], "depth": r["depth"], "n_layers": r["n_layers"], "d_model": r["d_model"],
                         "seed": r["seed"], "task": task, "n": score["n"], "acc": score["acc"],
                         "acc_stderr": score["acc_stderr"], "acc_norm": score.get("acc_norm", float("nan")),
                         "chance": DOWNSTREAM_CHANCE.get(task, float("nan")),
                         "gold_ce": score["gold_ce_mean"], "gold_ce_minus_t": diff, "gold_ce_minus_t_se": diff_se})
    return pd.DataFrame(rows, columns=columns)


def task_curve_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per task run and evaluated step: accuracies on the probe set, the train loss then, and chance."""
    columns = ["task", "block", "seed", "loss_on", "ablation", "tuned", "epochs", "lr", "step", "train_loss",
               "token_acc", "seq_acc", "chance"]
    rows = [{"task": r["task"], "block": r["block"], "seed": r["seed"], "loss_on": r["loss_on"],
             "ablation": r["ablation"], "tuned": _tuned(r), "epochs": r.get("epochs", 0), "lr": r.get("lr", 0.0),
             **point, "chance": chance_token_acc(r["task"], r["seq_len"])}
            for r in results for point in r["train"].get("curve", [])]
    return pd.DataFrame(rows, columns=columns)
