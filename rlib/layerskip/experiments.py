"""Chapter 05's from-scratch grid (LayerSkip, paper 004, Sec. 4): every recipe trained on the same tokens and steps,
read exit by exit.

A run is a recipe and a seed (every recipe with the first seed; `spread_recipes` with the others too). Every recipe
trains the same Llama-style model (untied head, as the paper's Llama models; deep and narrow, so that early exits
have room). Each run records the per-exit held-out NLL and accuracy (Figs. 8, 10), the middle and last exits' NLL
during training (Fig. 11), its training-loss curve (Fig. 12) and its time per step. Runs are cached and resumable
(`rlib.experiments.run_grid`); text is SmolLM2's tokenizer on the profile's corpus under a compact vocabulary.
"""

from __future__ import annotations

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

__all__ = ["CHAPTER", "CODE_MODULES", "build", "load_model", "run_grid", "windows"]

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


def run_grid(cfg: LayerSkipConfig, work: Path) -> list[dict[str, Any]]:
    cfg.text().save_vocabulary(work)
    held = windows(cfg)
    return experiments.run_grid(scratch_runs(cfg), work, lambda run, slot: run_one(run, cfg, slot, held),
                                context=(cfg.training_key(),), modules=CODE_MODULES, desc="from scratch")


def load_model(work: Path, run_name: str) -> Decoder:
    return experiments.load_model(work, run_name, "run rlib.layerskip.experiments.run_grid first")
