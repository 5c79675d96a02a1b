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
config, the run and the source of the modules they depend on, so an interrupted chapter resumes. The full model and
the Cycle-shared models of the inits chapter 01 also runs are chapter 01's runs when the two recipes agree
(`recipe_differences`): they start from chapter 01's kept models, and only the scoring is this chapter's.
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
from rlib.recursive import experiments as ch01
from rlib.recursive.config import RecursiveConfig, Variant
from rlib.train import train

__all__ = ["CODE_MODULES", "chapter01_twin", "load_source", "recipe_differences", "run_grid"]

CODE_MODULES = ("rlib.mor.uptrain", "rlib.mor.config", "rlib.looping", "rlib.train", "rlib.eval", "rlib.data",
                "rlib.model.decoder", "rlib.model.layers", "rlib.model.convert")


def _nll(model: Decoder, windows: torch.Tensor, cfg: UptrainConfig) -> dict[str, float]:
    dtype = torch.bfloat16 if cfg.precision == "bf16" else None
    res = rl_eval.perplexity(model, windows, batch_size=cfg.micro_batch_size, dtype=dtype, progress=False)
    return {"nll": res["nll"], "nll_se": res["nll_se"]}


def chapter01_twin(run: UptrainRun, cfg: UptrainConfig, ch01_cfg: RecursiveConfig) -> Variant | None:
    """Chapter 01's run that up-trains `run` the same way, if one can: the full model, and a Cycle-shared recursive
    model (chapter 01's converter shares in Cycle order) of an init chapter 01 also runs. The reduced runs have none."""
    if run.kind == "full":
        return Variant("full", seed=cfg.seed)
    if run.kind == "recursive" and run.sharing == "cycle" and run.init in ch01_cfg.inits:
        return Variant("recursive", cfg.n_loops, run.init, seed=cfg.seed)
    return None


def recipe_differences(run: UptrainRun, cfg: UptrainConfig, ch01_cfg: RecursiveConfig) -> list[str]:
    """What differs between this up-training of `run` and chapter 01's of its twin (`chapter01_twin`;
    `rlib.recursive.experiments.twin_differences`). Empty: the run may start from chapter 01's model."""
    twin = chapter01_twin(run, cfg, ch01_cfg)
    if twin is None:
        return ["no chapter 01 run up-trains this model"]
    return ch01.twin_differences(ch01_cfg, twin, cfg.train_config(), model=cfg.model, train_corpus=cfg.corpus,
                                 seq_len=cfg.seq_len, val_windows=cfg.val_windows, n_loops=twin.n_loops)


def run_one(run: UptrainRun, cfg: UptrainConfig, source: Decoder, slot: RunSlot, test: torch.Tensor,
            chapter01: tuple[RecursiveConfig, Path] | None = None) -> dict[str, Any]:
    """Build, score, up-train (or start from chapter 01's model of the same training), score again; training logs go
    to the slot's `train-<key>/metrics.csv`."""
    model = run.build(source, cfg.n_loops, cfg.seed)
    before = _nll(model, test, cfg)
    found = None
    if chapter01 is not None and not recipe_differences(run, cfg, chapter01[0]):
        twin = chapter01_twin(run, cfg, chapter01[0])
        found = ch01.shared_run(*chapter01, twin)
    extra = {}
    if found is not None:
        model, trained = ch01.adopt(found, slot)
        extra = {"trained_by": f"chapter 01's {twin.name} (the same recipe; rlib.recursive.experiments.shared_run)"}
    else:
        cache = data.token_cache(cfg.corpus, cfg.model, "train", progress=False)
        val = data.heldout_windows(cfg.corpus, cfg.model, cfg.seq_len, cfg.val_windows, split="validation", seed=1)
        result = train(model, data.PackedWindows(cache, cfg.seq_len, bos_id=cache.bos_id), cfg.train_config(),
                       slot.train_dir, val_windows=val)
        trained = {"tokens": result.tokens, "seconds": result.seconds, "final_loss": result.train_loss,
                   "val_loss": result.val_loss}
    after = _nll(model, test, cfg)
    slot.drop_checkpoint()
    return {"name": run.name, "run": dataclasses.asdict(run), "params": counting.count_parameters(model),
            "n_blocks": len(model.blocks), "loops": cfg.n_loops if run.kind == "recursive" else 1,
            "before": before, "after": after,
            "train": {k: trained[k] for k in ("tokens", "seconds", "final_loss", "val_loss")}, **extra}


def load_source(cfg: UptrainConfig) -> Decoder:
    """The source checkpoint as a Decoder, checked against the config (load once per chapter)."""
    source = convert.from_transformers(assets.load_model(cfg.model))
    cfg.check_model(source.config.n_layers)
    return source


def run_grid(cfg: UptrainConfig, work: Path, source: Decoder | None = None,
             chapter01: tuple[RecursiveConfig, Path] | None = None) -> list[dict[str, Any]]:
    """Run (or load from `work/<run>/result.json`) every run of `uptrain_runs(cfg)`, in that order.

    `chapter01` = (chapter 01's config, its work folder): a run that chapter 01 up-trained the same way
    (`recipe_differences` empty) and kept starts from chapter 01's model; the result is the same (training is
    deterministic: tests/test_mor_uptrain.py), so the run's key does not depend on it."""
    source = source if source is not None else load_source(cfg)
    cfg.check_model(source.config.n_layers)
    test = data.heldout_windows(cfg.corpus, cfg.model, cfg.seq_len, cfg.n_eval_windows, split="test", seed=0)
    return run_grid_of(uptrain_runs(cfg), work, lambda r, slot: run_one(r, cfg, source, slot, test, chapter01),
                       context=(cfg.grid_context(),),
                       modules=CODE_MODULES, desc="up-training")
