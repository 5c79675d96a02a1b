"""Up-training a pretrained checkpoint into Recursive Transformers with each sharing strategy (MoR Table 9).

Mixture-of-Recursions (paper 001), Sec. 3.2 "Parameter-sharing strategy" and App. D.2 / Table 9: the paper
up-trains SmolLM-360M checkpoints for 5B tokens after tying their layers with Cycle, Sequence, Middle-Cycle or
Middle-Sequence sharing, initialised Step, Avg, Lower, Upper or Rand (which source layers seed the shared ones),
and compares them with "Loop 1" reduced models: the same K unique layers, initialised the same way, run once.
Here the source is the book's embedded SmolLM2-135M (30 layers; the paper's 360M cannot be fetched offline), and
the conversion is chapter 1's `rlib.looping.convert`, so every strategy and initialization is the same code.

    full       the source model itself, up-trained the same way (the paper's first row, an upper reference)
    recursive  `looping.convert` with `n_loops` loops, a sharing order and an initialization
    reduced    the K blocks of that conversion run once each, in order (Table 9's "Loop 1" rows)

Every run trains on the same windows with the same recipe and is scored by held-out NLL on the corpus's test
split before and after. Runs are cached under the chapter's work folder (`rlib.experiments`), keyed on the
config, the run and the source of the modules they depend on, so an interrupted chapter resumes.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from rlib import assets, counting, data
from rlib import eval as rl_eval
from rlib.experiments import RunSlot
from rlib.experiments import run_grid as run_grid_of
from rlib.model import Decoder, convert
from rlib.mor.config import UptrainConfig, UptrainRun, uptrain_runs
from rlib.train import train

__all__ = ["CODE_MODULES", "load_source", "run_grid"]

CODE_MODULES = ("rlib.mor.uptrain", "rlib.mor.config", "rlib.looping", "rlib.train", "rlib.eval", "rlib.data",
                "rlib.model.decoder", "rlib.model.layers", "rlib.model.convert")


def _nll(model: Decoder, windows: torch.Tensor, cfg: UptrainConfig) -> dict[str, float]:
    dtype = torch.bfloat16 if cfg.precision == "bf16" else None
    res = rl_eval.perplexity(model, windows, batch_size=cfg.micro_batch_size, dtype=dtype, progress=False)
    return {"nll": res["nll"], "nll_se": res["nll_se"]}


def run_one(run: UptrainRun, cfg: UptrainConfig, source: Decoder, slot: RunSlot, test: torch.Tensor) -> dict[str, Any]:
    """Build, score, up-train, score again; training logs go to the slot's `train-<key>/metrics.csv`."""
    model = run.build(source, cfg.n_loops, cfg.seed)
    before = _nll(model, test, cfg)
    cache = data.token_cache(cfg.corpus, cfg.model, "train", progress=False)
    val = data.heldout_windows(cfg.corpus, cfg.model, cfg.seq_len, cfg.val_windows, split="validation", seed=1)
    result = train(model, data.PackedWindows(cache, cfg.seq_len, bos_id=cache.bos_id), cfg.train_config(),
                   slot.train_dir, val_windows=val)
    after = _nll(model, test, cfg)
    slot.drop_checkpoint()
    return {"name": run.name, "run": dataclasses.asdict(run), "params": counting.count_parameters(model),
            "n_blocks": len(model.blocks), "loops": cfg.n_loops if run.kind == "recursive" else 1,
            "before": before, "after": after,
            "train": {"tokens": result.tokens, "seconds": result.seconds, "final_loss": result.train_loss,
                      "val_loss": result.val_loss}}


def load_source(cfg: UptrainConfig) -> Decoder:
    """The source checkpoint as a Decoder, checked against the config (load once per chapter)."""
    source = convert.from_transformers(assets.load_model(cfg.model))
    cfg.check_model(source.config.n_layers)
    return source


def run_grid(cfg: UptrainConfig, work: Path, source: Decoder | None = None) -> list[dict[str, Any]]:
    """Run (or load from `work/<run>/result.json`) every run of `uptrain_runs(cfg)`, in that order."""
    source = source if source is not None else load_source(cfg)
    cfg.check_model(source.config.n_layers)
    test = data.heldout_windows(cfg.corpus, cfg.model, cfg.seq_len, cfg.n_eval_windows, split="test", seed=0)
    return run_grid_of(uptrain_runs(cfg), work, lambda r, slot: run_one(r, cfg, source, slot, test),
                       context=(cfg.grid_context(),),
                       modules=CODE_MODULES, desc="up-training")
