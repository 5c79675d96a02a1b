"""Chapter 04's experiments (paper 002): the live checks that read no training run (exactness of the tiled schedule,
counted traffic, cached decoding), the synthetic-task grid (Figs. 5-6) and the language-model grid (Table 1, Fig. 7).

Every run is cached under the chapter's work folder (`rlib.experiments.run_grid`), keyed on the run, the settings that
decide it and the source of the modules it uses, so an interrupted chapter resumes. Language models train with
`rlib.train` on the poetry corpus under a compact vocabulary (`rlib.vocab`), in fp32: the tiled layer's custom
backward is exact in the dtype it runs in.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from rlib import eval as rl_eval
from rlib.experiments import Grid, RunSlot, run_grid, run_grids
from rlib.recurrent.config import (
    LMRun,
    RecurrentConfig,
    RTConfig,
    TaskRun,
    lm_config,
    lm_runs,
    lm_tuning_runs,
    task_runs,
)
from rlib.recurrent.model import RTModel
from rlib.recurrent.naive import naive_layer
from rlib.recurrent.synthetic import FitConfig, TaskModel, evaluate, fit
from rlib.recurrent.tasks import make_task
from rlib.recurrent.tiled import tiled_layer
from rlib.recurrent.tuning import chosen_rates, mark_table1
from rlib.train import TrainConfig, train

__all__ = ["CHAPTER", "CODE_MODULES", "decode_cost", "decode_table", "exactness_table", "lm_grid_key", "run_lm_grid",
           "run_task_grid", "task_grid_key", "traffic_table"]

CHAPTER = "04_recurrent_transformer"
CODE_MODULES = ("rlib.recurrent.experiments", "rlib.recurrent.config", "rlib.recurrent.layer", "rlib.recurrent.model",
                "rlib.recurrent.naive", "rlib.recurrent.tiled", "rlib.recurrent.token_maps",
                "rlib.recurrent.tasks", "rlib.recurrent.synthetic",
                "kernels.tiled_prefill.reference", "rlib.train", "rlib.data", "rlib.vocab", "rlib.scratch_eval",
                "rlib.tasks")


# ---- live checks ----------------------------------------------------------------------------------------------


def _check_layer(dtype: torch.dtype, position: str, kv_heads: int | None, seed: int = 0):
    from rlib.recurrent.layer import RTLayer

    config = RTConfig(vocab_size=8, d_model=64, n_layers=2, n_heads=4, n_kv_heads=kv_heads, position=position)
    layer = RTLayer(config)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in layer.parameters():
            param.copy_(torch.randn(param.shape, generator=gen) * 0.1 + (1.0 if param.dim() == 1 else 0.0))
    return layer.to(dtype)


def exactness_table(cfg: RecurrentConfig, impl: str = "reference") -> pd.DataFrame:
    """Naive loop vs tiled schedule for one layer (d 64, 4 heads): max |dz|, max |dk|, and the worst per-tensor
    gradient error ||g_tiled - g_naive||^2 / ||g_naive||^2 over x and every parameter."""
    rows = []
    for n in cfg.check_lengths:
        for dtype in (torch.float64, torch.float32):
            for position, kv_heads in (("alibi", None), ("rope", 2)):
                layer = _check_layer(dtype, position, kv_heads)
                x = torch.randn(2, n, 64, generator=torch.Generator().manual_seed(n)).to(dtype).requires_grad_(True)
                positions = torch.arange(n)
                z_naive, k_naive, _ = naive_layer(layer, x, positions)
                z_tiled, k_tiled, _ = tiled_layer(layer, x, positions, impl)
                weight = torch.randn(z_naive.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
                inputs = [x, *layer.parameters()]
                g_naive = torch.autograd.grad((z_naive * weight).sum(), inputs)
                g_tiled = torch.autograd.grad((z_tiled * weight).sum(), inputs)
                worst = max(float((a - b).norm() ** 2 / b.norm() ** 2) for a, b in zip(g_tiled, g_naive))
                rows.append({"n": n, "dtype": str(dtype).replace("torch.", ""), "position": position,
                             "gqa": kv_heads is not None, "tiles": impl,
                             "max_abs_dz": float((z_tiled - z_naive).detach().abs().max()),
                             "max_abs_dk": float((k_tiled - k_naive).detach().abs().max()), "grad_rel_sq_err": worst})
    return pd.DataFrame(rows)


def traffic_table(cfg: RecurrentConfig, head_dim: int = 64) -> pd.DataFrame:
    """Counted attention traffic per (sequence, head) of one layer's prefill, naive vs tiled, with the local
    log-log slope between successive lengths (2 = quadratic, ~1 = N log N); the (query, key) pairs each schedule
    scores (Sec. 5: the FLOPs stay Theta(N^2)) and the mean / largest key-value slice a tiled step reads (Sec. 6.3:
    O(log N) positions on average), all counted from the schedules' own steps."""
    from kernels.tiled_prefill import tile_traffic

    rows = []
    for n in cfg.traffic_lengths:
        naive, tiled = tile_traffic(n, head_dim, "naive"), tile_traffic(n, head_dim, "tiled")
        rows.append({"n": n, "naive": naive["elements"], "tiled": tiled["elements"], "pairs": tiled["pairs"],
                     "pairs_naive": naive["pairs"], "kv_slice_mean": tiled["kv_slice_mean"],
                     "kv_slice_max": tiled["kv_slice_max"], "kv_slice_mean_naive": naive["kv_slice_mean"]})
    table = pd.DataFrame(rows)
    table["naive_over_tiled"] = table["naive"] / table["tiled"]
    table["kv_slice_over_log2n"] = table["kv_slice_mean"] / table["n"].map(math.log2)
    for col in ("naive", "tiled", "pairs"):
        slope = [float("nan")] + [math.log(b / a) / math.log(m / k) for a, b, k, m in zip(
            table[col][:-1], table[col][1:], table["n"][:-1], table["n"][1:])]
        table[f"{col}_slope"] = slope
    return table


@torch.no_grad()
def decode_table(n_prompt: int = 24, n_new: int = 40) -> pd.DataFrame:
    """Cached token-by-token decoding vs the full forward on the same tokens, for both blocks and both position
    schemes (random 4-layer models, fp32): max |logit difference| and the cache bytes per token."""
    rows = []
    for block in ("recurrent", "transformer"):
        for position in ("alibi", "rope"):
            config = RTConfig(vocab_size=64, d_model=64, n_layers=4, n_heads=4, n_kv_heads=2, position=position,
                              block=block)
            model = RTModel(config, seed=0, std=0.1).eval()
            ids = torch.randint(0, 64, (2, n_prompt + n_new), generator=torch.Generator().manual_seed(0))
            full = model(ids)
            logits, cache = model(ids[:, :n_prompt], return_cache=True, capacity=n_prompt + n_new)
            steps = [logits] + [model.decode_step(ids[:, t:t + 1], cache) for t in range(n_prompt, n_prompt + n_new)]
            rows.append({"block": block, "position": position, "prompt": n_prompt, "decoded": n_new,
                         "max_abs_logit_diff": float((torch.cat(steps, dim=1) - full).abs().max()),
                         "cache_bytes_per_token": cache.nbytes() / (2 * cache.length),
                         "predicted_bytes_per_token": config.kv_floats_per_token() * 4})
    return pd.DataFrame(rows)


def decode_cost(cfg: RecurrentConfig, repeats: int = 5) -> pd.DataFrame:
    """Per-token decode time and counted MACs of RT vs its Transformer twin at the language models' deep and
    shallow-wide shapes, batch 1 and the LM batch, after a context of one training window
    (`rlib.recurrent.decode_cost`)."""
    from rlib.recurrent.decode_cost import decode_cost_table

    vocab = cfg.text().size
    shapes = {depth: lm_config(LMRun("recurrent", depth, cfg.lm_seeds[0]), cfg, vocab) for depth in ("deep", "shallow")}
    batches = tuple(sorted({1, cfg.lm_batch}))
    return decode_cost_table(shapes, batches, context=cfg.lm_seq_len, steps=cfg.lm_seq_len, repeats=repeats)


# ---- synthetic tasks ------------------------------------------------------------------------------------------


def run_task(run: TaskRun, cfg: RecurrentConfig) -> dict[str, Any]:
    """One task run: train on `cfg.train_size(task)` sequences, score on `task_test` fresh ones (MAD generates its
    test set apart from the training set; memorization's share the fixed key -> value map)."""
    n_train = cfg.train_size(run.task)
    train_data = make_task(run.task, n_train, run.seq_len, seed=1000 + run.seed)
    test_data = make_task(run.task, cfg.task_test, run.seq_len, seed=2000 + run.seed, split="test")
    d, heads = cfg.task_width
    config = RTConfig(vocab_size=train_data.vocab_size, d_model=d, n_layers=1, n_heads=heads, block=run.block,
                      alibi_max_bias=cfg.task_alibi_max_bias)
    torch.manual_seed(run.seed)
    model = TaskModel(config, train_data.head, run.seq_len, seed=run.seed)
    epochs = run.epochs or cfg.task_epochs_for(run.task)
    # the main runs' curve spacing: a run with more optimizer steps (the tuning grid) gets more points
    points = cfg.task_curve_points * max(1, round(epochs * n_train / (cfg.task_epochs * cfg.task_train)))
    fit_cfg = FitConfig(epochs, cfg.task_batch, run.lr or cfg.task_lr, seed=run.seed, loss_on=run.loss_on,
                        curve_points=points)
    trained = fit(model, train_data, fit_cfg, desc=run.name, probe=test_data.subset(slice(0, cfg.task_curve_probe)))
    return {"name": run.name, **dataclasses.asdict(run), "n_train": n_train, "epochs_run": epochs, "train": trained,
            "test": evaluate(model, test_data)}


def task_grid_key(cfg: RecurrentConfig) -> tuple:
    """The settings every task run trains under (the task grid's cache key); the seeds, the loss ablation and the
    tuning grid only add runs, each carrying its own, so cpu-long reads cpu's task runs back."""
    return (cfg.tasks, cfg.task_train, cfg.task_test, cfg.task_width, cfg.task_epochs, cfg.task_batch,
            cfg.task_lr, cfg.task_alibi_max_bias, cfg.task_curve_points, cfg.task_curve_probe, cfg.task_train_sizes)


def _task_in_slot(run: TaskRun, slot: RunSlot, cfg: RecurrentConfig) -> dict[str, Any]:
    return run_task(run, cfg)


def run_task_grid(cfg: RecurrentConfig, work: Path) -> list[dict[str, Any]]:
    """Every task run, the missing ones in one worker process per core (`rlib.grid_workers`: a task step is bound by
    op dispatch, so two one-thread runs side by side take about the time of one two-thread run)."""
    return run_grid(task_runs(cfg), work, functools.partial(_task_in_slot, cfg=cfg), context=task_grid_key(cfg),
                    modules=CODE_MODULES, desc="task runs", workers="auto")


# ---- language models ------------------------------------------------------------------------------------------


def run_lm(run: LMRun, cfg: RecurrentConfig, slot: RunSlot) -> dict[str, Any]:
    """Train and score one language model (Table 1, Figs. 7-9). A run whose training loss goes non-finite is a result,
    not a failure: NaN losses and `divergence` saying where (Fig. 7's norm-free ablation diverges at high rates)."""
    text = cfg.text()
    config = lm_config(run, cfg, text.size)
    if not run.lr > 0:
        raise ValueError(f"{run.name}: an LM run to train needs its learning rate (lr={run.lr}); see lm_runs")
    model = RTModel(config, seed=run.seed)
    lr = run.lr
    batch = run.batch or cfg.lm_batch
    steps = max(1, cfg.lm_steps * cfg.lm_batch // batch)  # another batch size trains on the same tokens
    warmup = min(max(1, round(cfg.lm_warmup * steps)), steps - 1)
    tcfg = TrainConfig(lr=lr, schedule="cosine", warmup_steps=warmup, max_steps=steps,
                       batch_size=batch, micro_batch_size=batch, eval_every=max(1, steps // 6),
                       eval_batches=max(1, cfg.lm_val_windows // batch), checkpoint_final=False,
                       seed=run.seed, weight_decay=0.0)
    train_dir = slot.train_dir
    started = time.perf_counter()
    try:
        result = train(model, text.train_windows(), tcfg, train_dir,
                       val_windows=text.heldout("validation", cfg.lm_val_windows, seed=1))
    except FloatingPointError as err:  # the loss went non-finite: a diverged run is a result (Fig. 7's ablation)
        result, diverged = None, str(err)
    else:
        diverged = ""
    nan = float("nan")
    test = {"nll": nan, "nll_se": nan} if diverged else rl_eval.perplexity(
        model, text.heldout("test", cfg.lm_test_windows, seed=0), batch_size=cfg.lm_batch, progress=False)
    downstream = _downstream(model, cfg) if cfg.lm_downstream_items and run.table1 and not diverged else {}
    log = pd.read_csv(train_dir / "metrics.csv") if (train_dir / "metrics.csv").exists() else pd.DataFrame(
        columns=["step", "val_loss"])
    curve = log.dropna(subset=["val_loss"])[["step", "val_loss"]]
    slot.drop_checkpoint()
    non_embedding = sum(p.numel() for p in model.parameters()) - model.embed.weight.numel()
    return {"name": run.name, **dataclasses.asdict(run), "table1": run.table1, "lr": lr, "batch": batch, "steps": steps,
            "warmup": warmup,
            "d_model": config.d_model, "n_layers": config.n_layers, "n_heads": config.n_heads,
            "non_embedding_params": non_embedding,
            "kv_floats_per_token": config.kv_floats_per_token(), "test_nll": test["nll"], "test_nll_se": test["nll_se"],
            "final_train_loss": nan if diverged else result.train_loss,
            "val_loss": nan if diverged else result.val_loss,
            "seconds": time.perf_counter() - started if diverged else result.seconds,
            "tokens": nan if diverged else result.tokens, "divergence": diverged,
            "curve": {"step": curve["step"].tolist(), "val_loss": curve["val_loss"].tolist()}, "downstream": downstream}


def _downstream(model: RTModel, cfg: RecurrentConfig) -> dict[str, dict[str, Any]]:
    """Zero-shot scores on the local tasks (Sec. 7.2, Tables 3-10 analogs): accuracy and per-item gold-answer CE,
    contexts cut from the left to the training window."""
    from rlib import data
    from rlib.scratch_eval import ScratchLM, downstream_scores

    lm = ScratchLM(model.eval(), data.load_tokenizer(cfg.tokenizer), cfg.text().vocabulary(),
                   max_length=cfg.lm_seq_len, batch_size=cfg.lm_batch)
    return downstream_scores(lm, limit=cfg.lm_downstream_items)


def lm_grid_key(cfg: RecurrentConfig) -> dict[str, Any]:
    """The settings every LM run trains under (the LM grid's cache key); seeds, learning rates (each run carries its
    own) and the 2L Transformer only add runs, so cpu-long reads cpu's LM runs back."""
    return {f: getattr(cfg, f) for f in ("tokenizer", "corpus", "vocab_size", "lm_seq_len", "lm_layers", "lm_width",
                                         "lm_batch", "lm_steps", "lm_warmup", "lm_val_windows", "lm_test_windows",
                                         "lm_downstream_items")}


def _lm_in_slot(run: LMRun, slot: RunSlot, cfg: RecurrentConfig) -> dict[str, Any]:
    return run_lm(run, cfg, slot)


def _lm_cost(run: LMRun) -> float:
    """A run's expected compute, relative: an RT step is dispatch-bound (one token at a time) at about 2.3x its
    Transformer twin's time; the deep shape about 1.25x the shallow one (cpu runs of 2026-12-06)."""
    return (2.3 if run.block == "recurrent" else 1.0) * (1.0 if run.depth == "shallow" else 1.25)


def run_lm_grid(cfg: RecurrentConfig, work: Path) -> list[dict[str, Any]]:
    """Every language-model run, the missing ones in one worker process per core (as `run_task_grid`), costliest
    first, in two stages: App. D.1's tuning runs (every Table 1 shape on its first seed at every rate of `lm_lrs`),
    then, at each shape's chosen rate (`rlib.recurrent.tuning`), the other seeds and the studies (the tuning runs are
    read back). Each result's `main` says whether it is one of Table 1's runs."""
    def grid(runs: list[LMRun], desc: str) -> list[dict[str, Any]]:
        return run_grids([Grid(runs, work, functools.partial(_lm_in_slot, cfg=cfg), (lm_grid_key(cfg),),
                               CODE_MODULES, desc, cost=_lm_cost)], workers="auto")[0]

    rates = chosen_rates(grid(lm_tuning_runs(cfg), "LM tuning runs"), cfg.lm_seeds[0], cfg.lm_lrs)
    return mark_table1(grid(lm_runs(cfg, rates), "LM runs"), rates)
