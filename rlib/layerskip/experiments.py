"""Chapter 05's from-scratch grid (LayerSkip, paper 004, Sec. 4): every recipe trained on the same tokens and steps,
read exit by exit.

A run is a recipe and a seed (every recipe with the first seed; `spread_recipes` with the others too). Every recipe
trains the same Llama-style model (untied head, as the paper's Llama models; deep and narrow, so that early exits
have room). Each run records the per-exit held-out NLL and accuracy (Figs. 8, 10), the middle and last exits' NLL
during training (Fig. 11), its training-loss curve (Fig. 12) and its time per step. Runs are cached and resumable
(`rlib.experiments.run_grid`); text is SmolLM2's tokenizer on the profile's corpus under a compact vocabulary.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from rlib import experiments
from rlib.layerskip.analysis import exit_metrics
from rlib.layerskip.config import RECIPES, LayerSkipConfig, LayerSkipRun, scratch_runs
from rlib.layerskip.training import ExitProbe, LayerSkipDecoder, LayerSkipLoss, with_recipe
from rlib.model import Decoder, convert
from rlib.model.init import init_weights
from rlib.train import TrainConfig, train

__all__ = ["CHAPTER", "CODE_MODULES", "build", "grid", "load_model", "run_grid", "run_in_slot", "windows"]

CHAPTER = "05_layerskip"
CODE_MODULES = ("rlib.layerskip.experiments", "rlib.layerskip.config", "rlib.layerskip.schedules",
                "rlib.layerskip.training", "rlib.layerskip.analysis", "rlib.train", "rlib.data", "rlib.vocab",
                "rlib.model.decoder", "rlib.model.layers")


def windows(cfg: LayerSkipConfig) -> dict[str, torch.Tensor]:
    """The validation windows (Fig. 11's probe) and test windows (every exit's reading), compact ids."""
    text = cfg.text()
    return {"val": text.heldout("validation", cfg.val_windows, seed=1),
            "test": text.heldout("test", cfg.eval_windows, seed=0)}


def train_config(cfg: LayerSkipConfig, seed: int) -> TrainConfig:
    return TrainConfig(lr=cfg.lr, schedule="cosine", warmup_steps=max(1, round(cfg.warmup_frac * cfg.steps)),
                       max_steps=cfg.steps, batch_size=cfg.batch_size, micro_batch_size=cfg.micro_batch_size,
                       eval_every=0, checkpoint_every=0, checkpoint_final=False, seed=seed,
                       mixed_precision=cfg.precision)


def build(run: LayerSkipRun, cfg: LayerSkipConfig, vocab_size: int,
          val: torch.Tensor) -> tuple[LayerSkipDecoder, LayerSkipLoss, ExitProbe, TrainConfig]:
    """The wrapped model, its loss hook and Fig. 11 probe, and the trainer config of one run."""
    tcfg = train_config(cfg, run.seed)
    decoder = init_weights(Decoder(cfg.model_config(vocab_size)), seed=run.seed)
    model, hook = with_recipe(decoder, *RECIPES[run.recipe], p_max=cfg.p_max, e_scale=cfg.e_scale,
                              curriculum=cfg.curriculum, rotation=cfg.rotation, time_schedule=cfg.time_schedule,
                              total_steps=cfg.steps, accumulation_steps=tcfg.accumulation_steps(1), seed=run.seed)
    probe = ExitProbe(model, val, exits=(cfg.middle_exit, cfg.n_layers), every=max(1, cfg.steps // cfg.probe_points))
    return model, hook, probe, tcfg


def run_one(run: LayerSkipRun, cfg: LayerSkipConfig, slot: experiments.RunSlot,
            held: dict[str, torch.Tensor]) -> dict[str, Any]:
    text = cfg.text()
    model, hook, probe, tcfg = build(run, cfg, text.size, held["val"])
    train_dir = slot.train_dir
    result = train(model, text.train_windows(), tcfg, train_dir, hooks=[hook, probe])
    log = pd.read_csv(train_dir / "metrics.csv").dropna(subset=["loss"])
    exits = exit_metrics(model.decoder, held["test"], batch_size=cfg.micro_batch_size)
    convert.save(model.decoder, slot.folder / "model")
    slot.drop_checkpoint()
    return {"name": run.name, "recipe": run.recipe, "seed": run.seed, "seconds": result.seconds,
            "step_seconds": result.seconds / cfg.steps, "exits": exits.to_dict("list"),
            "probe": probe.final(cfg.steps), "train_curve": {"step": log["step"].tolist(),
                                                              "loss": log["loss"].tolist()}}


def run_in_slot(run: LayerSkipRun, slot: experiments.RunSlot, cfg: LayerSkipConfig) -> dict[str, Any]:
    """`run_one` for a grid: module level, so that a `functools.partial` of it reaches a worker process, which reads
    the held-out windows once (`_held`)."""
    return run_one(run, cfg, slot, _held(cfg))


@functools.lru_cache(maxsize=4)
def _held(cfg: LayerSkipConfig) -> dict[str, torch.Tensor]:
    return windows(cfg)  # once per process and config


def grid(cfg: LayerSkipConfig, work: Path) -> experiments.Grid:
    """The from-scratch grid (`scratch_runs`), for `run_grid` or another chapter grid's pool (`also=`)."""
    cfg.text().save_vocabulary(work)
    return experiments.Grid(scratch_runs(cfg), work, functools.partial(run_in_slot, cfg=cfg),
                            context=(cfg.training_key(),), modules=CODE_MODULES, desc="from scratch")


def run_grid(cfg: LayerSkipConfig, work: Path, also: tuple[experiments.Grid, ...] = ()) -> list[dict[str, Any]]:
    """Run (or load) every from-scratch run, results in order, the missing ones in one worker per core. The missing
    runs of the grids `also` (e.g. `rlib.layerskip.adapt.grid`, read back later by their own call) share the pool,
    placed first: they are the longer runs, so the short from-scratch ones fill the cores while they finish."""
    return experiments.run_grids([*also, grid(cfg, work)], workers="auto")[-1]


def load_model(work: Path, run_name: str) -> Decoder:
    return experiments.load_model(work, run_name, "run rlib.layerskip.experiments.run_grid first")
