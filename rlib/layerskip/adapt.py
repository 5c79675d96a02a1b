"""LayerSkip on a pretrained model: continual pretraining and fine-tuning (paper 004, Sec. 5.1 with Table 1 and
Fig. 6; Sec. 5.3 with Fig. 10a).

The paper continually pretrains Llama2 7B and 13B on 52B tokens with LD+EE and reads every exit against the original
Llama2 (Table 1's baseline: not trained further). It fine-tunes Llama1 7B on 5.2B code tokens with LD, EE and LD+EE
against plain fine-tuning on the same data (Fig. 10a). Here the pretrained model is the book's embedded SmolLM2-135M
(30 layers; its embedding and head are tied, where the paper's Llamas are untied), and a *study* is one adaptation:

    continual   continual pretraining on natural-language text (the paper's 7B recipe: p_max 0.1, e_scale 0.2,
                rotational curriculum with R = 8)
    code        fine-tuning on the Python standard library (the paper's code recipe: p_max 0.1, e_scale 1.0, R = 16)

Every recipe of a study (`rlib.layerskip.config.RECIPES`; "baseline" = plain training on the same windows, steps and
learning rate) starts from the same pretrained weights; "source" is the pretrained model untouched. Dropout has no
time curriculum here (S(t) = 1, Eq. 4: not from scratch). Each model is read at chosen exits: held-out perplexity
and top-1 accuracy on every evaluation corpus (Table 1's PPL rows: Wikipedia, Books and The Stack become the book's
corpora) and accuracy on the book's local tasks (`rlib.layerskip.exit_tasks`). Runs are cached and resumable under
the chapter's work folder, one folder per run, keyed on the run's own study, the shared settings and the code.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from rlib import data, sources
from rlib.config import ConfigError
from rlib.experiments import Grid, RunSlot, run_grids
from rlib.experiments import load_model as load_trained
from rlib.layerskip.analysis import exit_metrics
from rlib.layerskip.config import RECIPES, SOURCE, AdaptConfig, AdaptRun, adapt_runs
from rlib.layerskip.exit_tasks import exit_task_accuracy
from rlib.layerskip.training import LayerSkipDecoder, LayerSkipLoss, with_recipe
from rlib.model import Decoder, convert
from rlib.train import TrainConfig, train

__all__ = ["CODE_MODULES", "build", "grid", "load_model", "load_source", "read_exits", "run_grid", "run_in_slot"]

CODE_MODULES = ("rlib.layerskip.adapt", "rlib.layerskip.config", "rlib.layerskip.training", "rlib.layerskip.schedules",
                "rlib.layerskip.analysis", "rlib.layerskip.exit_tasks", "rlib.eval", "rlib.tasks", "rlib.train",
                "rlib.data", "rlib.model.decoder", "rlib.model.layers", "rlib.model.convert")


# ---- one run ---------------------------------------------------------------------------------------------------


@functools.cache
def _heldout(corpus: str, tokenizer: str, seq_len: int, n: int) -> torch.Tensor:
    return data.heldout_windows(corpus, tokenizer, seq_len, n, split="test", seed=0)


def read_exits(model: Decoder, cfg: AdaptConfig, tokenizer) -> dict[str, list[dict[str, Any]]]:
    """Per-exit held-out perplexity on every evaluation corpus and per-exit task accuracy (long records)."""
    exits = cfg.exits(len(model.plan))
    frames = []
    for corpus in cfg.eval_corpora:
        windows = _heldout(corpus, cfg.model, cfg.seq_len, cfg.eval_windows)
        frame = exit_metrics(model, windows, batch_size=cfg.micro_batch_size, exits=exits)
        frame.insert(0, "corpus", corpus)
        frames.append(frame)
    tasks = exit_task_accuracy(model, tokenizer, cfg.task_exits(len(model.plan)), cfg.tasks, cfg.task_items,
                               batch_size=cfg.micro_batch_size)
    return {"exits": pd.concat(frames, ignore_index=True).to_dict("records"), "tasks": tasks.to_dict("records")}


def build(run: AdaptRun, cfg: AdaptConfig, source: Decoder) -> tuple[LayerSkipDecoder, LayerSkipLoss, TrainConfig]:
    """A fresh copy of the pretrained model wrapped for the run's recipe, its loss hook and trainer config."""
    study = cfg.study(run.study)
    tcfg = cfg.train_config(study)
    model, hook = with_recipe(copy.deepcopy(source).train(), *RECIPES[run.recipe], p_max=study.p_max,
                              e_scale=study.e_scale, curriculum=study.curriculum, rotation=study.rotation,
                              time_schedule="constant", total_steps=study.steps,
                              accumulation_steps=tcfg.accumulation_steps(1), seed=cfg.seed)
    return model, hook, tcfg


def run_one(run: AdaptRun, cfg: AdaptConfig, source: Decoder, tokenizer, slot: RunSlot) -> dict[str, Any]:
    if run.study == SOURCE:
        return {"name": run.name, "study": SOURCE, "recipe": SOURCE, **read_exits(source, cfg, tokenizer)}
    study = cfg.study(run.study)
    model, hook, tcfg = build(run, cfg, source)
    cache = data.token_cache(study.corpus, cfg.model, "train", progress=False)
    windows = data.PackedWindows(cache, cfg.seq_len, bos_id=cache.bos_id)
    train_dir = slot.train_dir
    result = train(model, windows, tcfg, train_dir, hooks=[hook])
    log = pd.read_csv(train_dir / "metrics.csv").dropna(subset=["loss"])
    decoder = model.decoder.eval()
    convert.save(decoder, slot.folder / "model")
    slot.drop_checkpoint()
    return {"name": run.name, "study": run.study, "recipe": run.recipe, "corpus": study.corpus,
            "tokens": result.tokens, "seconds": result.seconds, "step_seconds": result.seconds / study.steps,
            "train_curve": {"step": log["step"].tolist(), "loss": log["loss"].tolist()},
            **read_exits(decoder, cfg, tokenizer)}


def load_source(cfg: AdaptConfig) -> Decoder:
    return sources.load_source(cfg.model).eval()


def _key(run: AdaptRun, cfg: AdaptConfig) -> tuple:
    """What a run depends on: its own study's settings (not the other study's) and the shared ones."""
    study = {} if run.study == SOURCE else dataclasses.asdict(cfg.study(run.study))
    shared = cfg.eval_key() if run.study == SOURCE else {**cfg.eval_key(), "warmup_steps": cfg.warmup_steps,
                                                        "batch_size": cfg.batch_size}
    return study, shared


def run_in_slot(run: AdaptRun, slot: RunSlot, cfg: AdaptConfig, source: Decoder | None = None) -> dict[str, Any]:
    """`run_one` for a grid: module level, so that a `functools.partial` of it reaches a worker process, which loads
    the pretrained model (`rlib.sources.process_source`) and its tokenizer once; with `source`, from that model."""
    model = sources.process_source(cfg.model).eval() if source is None else source
    return run_one(run, cfg, model, data.load_tokenizer(cfg.model), slot)


def grid(cfg: AdaptConfig, work: Path, runs: list[AdaptRun] | None = None, source: Decoder | None = None) -> Grid:
    """The runs (default `adapt_runs(cfg)`) as a grid, for `run_grid` or another chapter grid's pool (`also=`):
    each run loads `cfg.model` in its process, or starts from `source` (a model the caller holds: not for workers)."""
    return Grid(adapt_runs(cfg) if runs is None else runs, work,
                functools.partial(run_in_slot, cfg=cfg, source=source),
                context=functools.partial(_key, cfg=cfg), modules=CODE_MODULES,
                desc="LayerSkip on the pretrained model", cost=functools.partial(run_cost, cfg=cfg))


def run_cost(run: AdaptRun, cfg: AdaptConfig) -> float:
    """A run's expected compute in training steps, for the pool's order (`rlib.experiments.Grid.cost`): its study's
    steps, half again with the early-exit loss (a head and its backward on the exits it trains: measured on the cpu
    profile's continual study, 1597 s with LD + EE against 1068 s without), and the pretrained model's read of its
    exits (no training) as a quarter of the shortest study: these runs are the pool's longest, so they start first."""
    if run.study == SOURCE:
        return 0.25 * min((s.steps for s in cfg.studies), default=1)
    study = cfg.study(run.study)
    return study.steps * (1.5 if RECIPES[run.recipe][1] else 1.0)


def run_grid(cfg: AdaptConfig, work: Path, source: Decoder | None = None,
             runs: list[AdaptRun] | None = None) -> list[dict[str, Any]]:
    """Run (or load from `work/<run>/result.json`) every run of `runs` (default `adapt_runs(cfg)`), in that order:
    with `source` (the pretrained model the caller holds) the missing runs start from it in this process; without,
    they run in one worker per core, each loading `cfg.model`. Chapter 05 trains them in the from-scratch grid's pool
    (`rlib.layerskip.experiments.run_grid(..., also=(grid(...),))`) and reads them back here."""
    return run_grids([grid(cfg, work, runs, source)], workers="auto" if source is None else 1)[0]


def load_model(work: Path, run_name: str, cfg: AdaptConfig | None = None) -> Decoder:
    """A trained run's model, or the pretrained model itself for SOURCE (needs `cfg`)."""
    if run_name == SOURCE:
        if cfg is None:
            raise ConfigError("loading the source model needs the config (its `model` field)")
        return load_source(cfg)
    return load_trained(work, run_name, "run rlib.layerskip.adapt.run_grid first")
