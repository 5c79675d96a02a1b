"""Chapter 01's runs: build each variant from the source, evaluate it (step 0), uptrain it, evaluate it again.

Relaxed Recursive Transformers Sec. 3.1-3.4. `run_grid` stores one result per variant under the chapter's work
directory (`rlib.experiments.run_grid`), so an interrupted chapter resumes where it stopped. Quality is held-out
next-token NLL / perplexity on the test split of each evaluation corpus (the uptraining corpus first) and accuracy on
the book's local task suite (`rlib.tasks`), as in Table F.1. Chapter 02 reuses the public helpers here (the windows,
the evaluation, the uptrained full model as its distillation teacher, the source loaded once per process).

The missing runs train in one worker process per core, one torch thread each (`rlib.grid_workers`); a distilled run
starts once the grid's teacher has finished and saved its model.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from rlib import counting, data, experiments, looping, sources
from rlib import eval as rl_eval
from rlib.config import ConfigError
from rlib.looping import Looping
from rlib.model import Decoder, convert
from rlib.recursive.config import RecursiveConfig, Variant, source_config, variants
from rlib.train import TrainConfig, train

__all__ = ["CHAPTER", "CHECKPOINTING", "CODE_MODULES", "adopt", "eval_windows", "evaluate_model", "held_windows",
           "load_source", "memory_table", "run_grid", "shared_run", "source_result",
           "teacher_dir", "teacher_variant", "train_windows", "twin_differences", "val_windows", "variant_in_slot",
           "work_dir"]

CHAPTER = "01_recursive_conversion"


CODE_MODULES = ("rlib.recursive.config", "rlib.recursive.experiments", "rlib.looping", "rlib.train", "rlib.eval",
                "rlib.data", "rlib.model.decoder", "rlib.model.layers", "rlib.model.init", "rlib.tasks")


def eval_windows(cfg: RecursiveConfig) -> dict[str, torch.Tensor]:
    """The fixed test windows [N, T] of every evaluation corpus (the same for every variant)."""
    return {c: data.heldout_windows(c, cfg.tokenizer, cfg.seq_len, cfg.n_eval_windows, split="test", seed=0)
            for c in cfg.eval_corpora}


def evaluate_model(model: Decoder, cfg: RecursiveConfig, windows: dict[str, torch.Tensor], tasks: bool,
                   tokenizer: Any = None) -> dict[str, float]:
    """{"nll[corpus]", "ppl[corpus]"} per evaluation corpus, plus each task's primary metric and "task_avg".

    With `precision="bf16"` perplexity runs under bf16 autocast and the tasks score a bf16 copy of the model
    (chapter 00 measures the effect on these models: under 0.1 % in perplexity).
    """
    device = next(model.parameters()).device
    out: dict[str, float] = {}
    for corpus, win in windows.items():
        dtype = torch.bfloat16 if cfg.precision == "bf16" else None
        res = rl_eval.perplexity(model, win, batch_size=cfg.micro_batch_size, dtype=dtype, device=device,
                                 progress=False)
        out[f"nll[{corpus}]"], out[f"ppl[{corpus}]"], out[f"nll_se[{corpus}]"] = res["nll"], res["ppl"], res["nll_se"]
    if tasks and cfg.tasks:
        scored = copy.deepcopy(model).to(torch.bfloat16) if cfg.precision == "bf16" else model  # RlibLM casts in place
        table = rl_eval.suite_table({"m": scored}, cfg.tasks, limit=cfg.task_limit, batch_size=cfg.micro_batch_size,
                                    tokenizer=tokenizer or data.load_tokenizer(cfg.tokenizer), dtype="auto")
        del scored
        primary = table[table["primary"]]
        for row in primary.itertuples():
            out[f"task[{row.task}]"] = 100 * row.value
        out["task_avg"] = float(np.mean([100 * v for v in primary["value"]]))
    return out


def train_windows(cfg: RecursiveConfig, corpus: str) -> data.PackedWindows:
    cache = data.token_cache(corpus, cfg.tokenizer, "train", progress=False)
    return data.PackedWindows(cache, cfg.seq_len, bos_id=cache.bos_id)


def val_windows(cfg: RecursiveConfig, corpus: str) -> torch.Tensor:
    return data.heldout_windows(corpus, cfg.tokenizer, cfg.seq_len, cfg.val_windows, split="validation", seed=1)


def _keeps(variant: Variant, cfg: RecursiveConfig) -> bool:
    """Which uptrained models are saved: the full model (always, when it is the distillation teacher) and, with
    `keep_models`, every recursive model at B = init_loops of the first seed (the main one, Stepwise, among them):
    chapter 02's rank-0 runs start from these instead of training them again (`shared_run`)."""
    teacher = variant == teacher_variant(cfg)
    shared = dataclasses.replace(variant, init="stepwise") == Variant("recursive", cfg.init_loops, seed=cfg.seeds[0])
    return (teacher and (cfg.kd_alpha > 0 or cfg.keep_models)) or (shared and cfg.keep_models)


CHECKPOINTING = ("checkpoint_every", "checkpoint_final")  # TrainConfig fields that do not change what a run learns


def twin_differences(cfg: RecursiveConfig, twin: Variant, train_config: TrainConfig, *, model: str,
                     train_corpus: str, seq_len: int, val_windows: int, n_loops: int) -> list[str]:
    """What differs between another chapter's training (its source `model`, data, windows, loops and `train_config`)
    and this chapter's run `twin` under `cfg`, every optimizer setting but checkpointing compared. Empty: the two
    train the same model step for step, so the other chapter may start from this one's (`shared_run`, `adopt`)."""
    ours = {"model": cfg.model, "train_corpus": cfg.train_corpus, "seq_len": cfg.seq_len,
            "val_windows": cfg.val_windows, "n_loops": twin.n_loops}
    theirs = {"model": model, "train_corpus": train_corpus, "seq_len": seq_len, "val_windows": val_windows,
              "n_loops": n_loops}
    pairs = {k: (theirs[k], ours[k]) for k in ours}
    mine = dataclasses.asdict(cfg.train_config(twin))
    pairs |= {k: (v, mine.get(k)) for k, v in dataclasses.asdict(train_config).items() if k not in CHECKPOINTING}
    return [f"{name}: {a!r} here, {b!r} in chapter 01" for name, (a, b) in pairs.items() if a != b]


def adopt(found: tuple[dict[str, Any], Path], slot: experiments.RunSlot) -> tuple[Decoder, dict[str, Any]]:
    """Another chapter's run that starts from this chapter's (`found` from `shared_run`): the trained model, its loss
    curve copied into `slot`'s training folder (`rlib.experiments.training_curves` reads it there), and its training
    record (tokens, seconds, tokens_per_s, final_loss, val_loss)."""
    result, model_dir = found
    train_dir = slot.train_dir
    train_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy2(model_dir.parent / result["train_dir"] / "metrics.csv", train_dir / "metrics.csv")
    return convert.load(model_dir), dict(result["train"])


def shared_run(cfg: RecursiveConfig, work: Path, variant: Variant) -> tuple[dict[str, Any], Path] | None:
    """This chapter's finished run of `variant` under `cfg` in `work`, for another chapter to start from: (its result,
    the folder of its saved model) when the result is current (stored under the key `run_grid` gives it now: the same
    config, variant and library source) and the model was kept; else None (the other chapter trains it itself)."""
    folder = Path(work) / variant.name
    result = experiments.stored_result(folder, experiments.run_key(variant, (cfg.grid_context(),), CODE_MODULES))
    model = folder / "model"
    if result is None or not (model / convert.CONFIG_FILE).exists():
        return None
    return result, model


def _table_f1_row(variant: Variant, cfg: RecursiveConfig) -> bool:
    """Whether a run is one of Table F.1's rows (full-size, each initialization at B = init_loops, reduced-size from
    scratch), first seed only (the inits are deterministic except Random, whose other seeds would add little); the
    norm-weight variants are judged on loss alone."""
    home = not variant.corpus and not variant.kd and variant.seed == cfg.seeds[0] and variant.norm_init == "average"
    f1_row = variant.kind == "full" or (variant.n_loops == cfg.init_loops and variant.kind in ("recursive", "scratch"))
    return home and f1_row


def _scored_after(variant: Variant, cfg: RecursiveConfig) -> bool:
    """Whether the task suite scores the uptrained model: Table F.1's rows and the models uptrained on the shift
    corpus (Table 2's claim reads their task_avg). The other runs are judged on held-out NLL alone: at the cpu
    preset's 40 items per task an accuracy has a standard error of about 7 points, too wide for the gaps between
    them."""
    return _table_f1_row(variant, cfg) or bool(variant.corpus)


def run_variant(variant: Variant, cfg: RecursiveConfig, source: Decoder, slot: experiments.RunSlot,
                windows: dict[str, torch.Tensor], teacher: Path | None) -> dict[str, Any]:
    """Build, evaluate at step 0, uptrain, evaluate again; returns the result dict (see `run_grid`).

    Training writes into the slot's `train-<key>/`, so a checkpoint left by a killed run resumes only under the
    same key.
    """
    model = variant.build(source)
    counts = counting.count_parameters(model)
    before = evaluate_model(model, cfg, {cfg.train_corpus: windows[cfg.train_corpus]},
                            tasks=cfg.step0_tasks and _table_f1_row(variant, cfg))
    teacher_model = None
    if variant.kd:
        if teacher is None or not (teacher / convert.CONFIG_FILE).exists():
            raise ConfigError(f"{variant.name} distills from the uptrained full model, which is not saved yet")
        teacher_model = convert.load(teacher)
    corpus = variant.corpus or cfg.train_corpus
    train_dir = slot.train_dir
    result = train(model, train_windows(cfg, corpus), cfg.train_config(variant), train_dir,
                   val_windows=val_windows(cfg, corpus), teacher=teacher_model)
    after = evaluate_model(model, cfg, windows, tasks=_scored_after(variant, cfg))
    if _keeps(variant, cfg):
        convert.save(model, slot.folder / "model", tokenizer=cfg.tokenizer)
    slot.drop_checkpoint()
    return {
        "name": variant.name,
        "train_dir": train_dir.name,
        "variant": dataclasses.asdict(variant),
        "corpus": corpus,
        "params": counts,
        "before": before,
        "after": after,
        "train": {"tokens": result.tokens, "seconds": result.seconds, "tokens_per_s": result.tokens / result.seconds,
                  "final_loss": result.train_loss, "val_loss": result.val_loss},
    }


def load_source(cfg: RecursiveConfig) -> Decoder:
    """The source checkpoint (asset name, hf:ORG/NAME or folder; `rlib.sources`) as a Decoder, its config and the
    config's loop counts checked before any weights load (load it once per chapter)."""
    cfg.check_model(source_config(cfg.model).n_layers)
    return sources.load_source(cfg.model)


def teacher_variant(cfg: RecursiveConfig) -> Variant:
    """The uptrained full-size model: the distillation teacher of chapters 01 and 02."""
    return Variant("full", seed=cfg.seeds[0])


def work_dir(profile: str, model: str | None = None, chapter: str = CHAPTER) -> Path:
    """A conversion chapter's work folder (chapter 01's by default): `runs/.work/<profile>/<chapter>/`, or for a
    source other than the preset's (a user's checkpoint) its own `source-<name>-<hash>/` inside it, so its runs
    never replace the preset's (chapters 01 and 02 convert the same source)."""
    folder = experiments.work_dir(profile, chapter)
    if model is None or model == RecursiveConfig.preset(profile).model:
        return folder
    location = sources.locate(model).location
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(location).name or location)
    own = folder / f"source-{readable}-{experiments.digest(location)[:8]}"
    own.mkdir(parents=True, exist_ok=True)
    return own


def teacher_dir(profile: str, model: str | None = None) -> Path:
    """Where chapter 01 saves its uptrained full-size model of `model` (default: the preset's) under `profile`
    (chapter 02 distills from it)."""
    return work_dir(profile, model) / teacher_variant(RecursiveConfig.preset(profile)).name / "model"


@functools.lru_cache(maxsize=4)
def held_windows(cfg) -> dict[str, torch.Tensor]:
    """`eval_windows(cfg)` once per process and config (chapter 02's configs too)."""
    return eval_windows(cfg)


def variant_in_slot(variant: Variant, slot: experiments.RunSlot, cfg: RecursiveConfig, work: Path) -> dict[str, Any]:
    """`run_variant` for a grid: a module-level function, so that `functools.partial(variant_in_slot, cfg=cfg,
    work=work)` reaches a worker process, which loads the source and the windows itself."""
    teacher = Path(work) / teacher_variant(cfg).name / "model"
    return run_variant(variant, cfg, sources.process_source(cfg.model), slot, held_windows(cfg), teacher)


def run_grid(cfg: RecursiveConfig, work: Path, source: Decoder, only: list[str] | None = None) -> list[dict[str, Any]]:
    """Run (or load) every variant; returns their results in `variants(cfg)` order. `source` is `cfg.model` loaded
    (`load_source`); the missing runs train in one worker per core, a distilled one after the teacher.

    Each variant's folder `work/<name>/` holds `train-<key>/metrics.csv` (loss curves), `result.json` (written last,
    keyed by the variant, the config and the library source) and, for kept models, `model/`.
    """
    cfg.check_model(source.config.n_layers)
    sources.share_source(cfg.model, source)
    teacher = teacher_variant(cfg).name
    todo = [v for v in variants(cfg) if only is None or v.name in only]
    return experiments.run_grid(todo, work, functools.partial(variant_in_slot, cfg=cfg, work=Path(work)),
                                context=(cfg.grid_context(),), modules=CODE_MODULES, desc="variants", workers="auto",
                                needs=lambda v: [teacher] if v.kd else [])


def source_result(cfg: RecursiveConfig, source: Decoder) -> dict[str, float]:
    """The untouched source model on the same windows and tasks (the "before uptraining" full-size row)."""
    return evaluate_model(source, cfg, eval_windows(cfg), tasks=True)


def memory_table(cfg: RecursiveConfig, source: Decoder, batch: int = 1) -> pd.DataFrame:
    """Parameter MiB and fresh-process peak RSS at inference of the source model and its stepwise B-loop models."""
    from rlib import memory

    models = {"full-size (B=1)": source}
    for b in sorted(set(cfg.loops) | {cfg.init_loops}):
        models[f"recursive B={b}"] = looping.convert(source, Looping(b))
    table = memory.measure(models, batch=batch, seq_len=cfg.seq_len)
    counts = [counting.count_parameters(m)["unique"] for m in models.values()]
    return table.assign(unique_params=counts)
