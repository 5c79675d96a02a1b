"""Chapter 02's runs: build each relaxed (or plain recursive) model, uptrain or post-train it with its early-exit
schedule, evaluate every loop; and the step-0 curve, which needs no training (Relaxed Recursive Transformers Sec. 2.3:
the SVD-initialized relaxation interpolates between the recursive model and the source).

Runs are cached like chapter 01's (`rlib.experiments.run_grid`). The windows, the evaluation and the distillation
teacher come from chapter 01's public helpers, and a plain recursive run (rank 0) that chapter 01 already trained with
the same recipe starts from chapter 01's kept model instead of training again (`recipe_differences`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from rlib import counting, experiments, looping, relax, sources
from rlib.config import ConfigError
from rlib.looping import Looping
from rlib.model import Decoder, convert
from rlib.progress import progress
from rlib.recursive import experiments as ch01
from rlib.recursive.config import RecursiveConfig, Variant
from rlib.relax import Relaxation
from rlib.relaxed import early_exit
from rlib.relaxed.config import HALVINGS, RelaxedConfig, RelaxedVariant, variants
from rlib.relaxed.early_exit import ExitLoss, ExitModel
from rlib.train import train

__all__ = ["CHAPTER", "CODE_MODULES", "build", "chapter01_twin", "evaluate", "recipe_differences", "run_grid",
           "step0_table", "variant_in_slot"]

CHAPTER = "02_relaxed_recursion"


CODE_MODULES = ("rlib.relaxed.config", "rlib.relaxed.experiments", "rlib.relax", "rlib.relaxed.early_exit",
                "rlib.looping", "rlib.train", "rlib.eval", "rlib.data", "rlib.model.decoder", "rlib.model.layers",
                "rlib.model.lora", "rlib.recursive.experiments")


def build(variant: RelaxedVariant, cfg: RelaxedConfig, source: Decoder) -> Decoder:
    looped = looping.convert(source, Looping(cfg.n_loops, init=variant.init))
    if variant.prefix:
        return relax.prefix_relax(looped, variant.prefix, seed=variant.seed)
    if variant.rank == 0:
        return looped
    ranks = {group: variant.rank // 2 for group in HALVINGS.get(variant.halved, ())}  # Table G.1's row
    return relax.relax(looped, source, Relaxation(variant.rank, init=variant.lora_init, ranks=ranks))


def _exit_loss(variant: RelaxedVariant, wrapped: ExitModel, cfg: RelaxedConfig) -> list[ExitLoss]:
    if variant.exit == "none":
        return []
    schedule = "weighted" if variant.exit == "weighted" else "aggressive"
    coef = cfg.exit_coef if variant.coef is None else variant.coef
    return [ExitLoss(wrapped, schedule, coef=coef, kd=variant.exit == "aggressive_kd")]


def evaluate(model: Decoder, cfg: RelaxedConfig, windows: dict[str, torch.Tensor],
             exit_head: early_exit.ExitHead | None = None) -> dict[str, float]:
    """Perplexity on every corpus (final exit) and the static-exit NLL of every loop on the uptraining corpus (the
    loops before the last through `exit_head` when the run trained one). One forward over the uptraining corpus's
    windows gives both: its last loop's NLL is the perplexity's."""
    dtype = torch.bfloat16 if cfg.precision == "bf16" else None
    exits = early_exit.loop_exits(model, cfg.n_loops)
    per_window = early_exit.static_exit_nll(model, windows[cfg.train_corpus], exits, cfg.micro_batch_size, dtype,
                                            exit_head)  # exit depth -> [N]
    others = ch01.evaluate_model(model, cfg, {c: w for c, w in windows.items() if c != cfg.train_corpus}, tasks=False)
    out: dict[str, float] = {}
    for corpus in windows:
        if corpus == cfg.train_corpus:
            final = per_window[exits[-1]]
            nll = float(final.mean())
            out.update({f"nll[{corpus}]": nll, f"ppl[{corpus}]": math.exp(nll),
                        f"nll_se[{corpus}]": float(final.std() / math.sqrt(len(final))) if len(final) > 1
                        else float("nan")})  # as rlib.eval.perplexity's
        else:
            out.update({k: v for k, v in others.items() if k.endswith(f"[{corpus}]")})
    for j, depth in enumerate(exits, start=1):
        out[f"nll_loop{j}"] = float(per_window[depth].mean())
    return out


def chapter01_twin(variant: RelaxedVariant, ch01_cfg: RecursiveConfig) -> Variant | None:
    """Chapter 01's run that trains `variant` the same way, if one can: a plain recursive uptraining (rank 0, no prefix,
    no exit loss, no KD, the base number of steps) is chapter 01's recursive run of the same init and seed at its
    B = init_loops."""
    if variant != RelaxedVariant(init=variant.init, seed=variant.seed):
        return None
    return Variant("recursive", ch01_cfg.init_loops, variant.init, seed=variant.seed)


def recipe_differences(cfg: RelaxedConfig, ch01_cfg: RecursiveConfig, variant: RelaxedVariant) -> list[str]:
    """What differs between this chapter's training of `variant` and chapter 01's of its twin (`chapter01_twin`;
    `rlib.recursive.experiments.twin_differences`). Empty: this chapter may start from chapter 01's model."""
    twin = chapter01_twin(variant, ch01_cfg)
    if twin is None:
        return ["not a plain recursive uptraining"]
    return ch01.twin_differences(ch01_cfg, twin, cfg.train_config(variant), model=cfg.model,
                                 train_corpus=cfg.train_corpus, seq_len=cfg.seq_len, val_windows=cfg.val_windows,
                                 n_loops=cfg.n_loops)


def _shared(variant: RelaxedVariant, cfg: RelaxedConfig, chapter01: tuple[RecursiveConfig, Path] | None
            ) -> tuple[dict[str, Any], Path, Variant] | None:
    """Chapter 01's finished run this run may start from: (its result, its model folder, its variant), or None."""
    if chapter01 is None or recipe_differences(cfg, chapter01[0], variant):
        return None
    ch01_cfg, ch01_work = chapter01
    twin = chapter01_twin(variant, ch01_cfg)
    found = ch01.shared_run(ch01_cfg, ch01_work, twin)
    return None if found is None else (*found, twin)


def run_variant(variant: RelaxedVariant, cfg: RelaxedConfig, source: Decoder, work: Path, slot: experiments.RunSlot,
                windows: dict[str, torch.Tensor], teacher_dir: Path | None,
                chapter01: tuple[RecursiveConfig, Path] | None = None) -> dict[str, Any]:
    if variant.parent is not None:
        how = f"{variant.name} post-trains {variant.parent.name}, whose model is not saved yet"
        model = experiments.load_model(work, variant.parent.name, how)
    else:
        model = build(variant, cfg, source)
    # a post-training run starts from its parent, whose "after" is this run's "before"
    before = {} if variant.parent else evaluate(model, cfg, {cfg.train_corpus: windows[cfg.train_corpus]})
    shared = _shared(variant, cfg, chapter01)
    if shared is not None:
        return _from_chapter01(variant, cfg, slot, windows, before, *shared)
    teacher = None
    if variant.kd:
        if teacher_dir is None or not (teacher_dir / convert.CONFIG_FILE).exists():
            raise ConfigError(f"{variant.name} distills from chapter 01's uptrained full model ({teacher_dir}); "
                              "run chapter 01 with the same profile first")
        teacher = convert.load(teacher_dir)
    exit_head = None
    if variant.freeze_rank:  # Table J.1's Freeze row: no weight of the model trains, only the exit head's LoRA
        model.requires_grad_(False)
        exit_head = early_exit.ExitHead(model, variant.freeze_rank, seed=variant.seed)
    wrapped = ExitModel(model, early_exit.loop_exits(model, cfg.n_loops), exit_head)
    train_dir = slot.train_dir
    result = train(wrapped, ch01.train_windows(cfg, cfg.train_corpus), cfg.train_config(variant), train_dir,
                   val_windows=ch01.val_windows(cfg, cfg.train_corpus), teacher=teacher,
                   hooks=_exit_loss(variant, wrapped, cfg))
    after = evaluate(model, cfg, windows, exit_head)
    if any(v.parent == variant for v in variants(cfg)) or _keeps(variant, cfg):
        convert.save(model, slot.folder / "model", tokenizer=cfg.tokenizer)
    slot.drop_checkpoint()
    counts = counting.count_parameters(model)
    return {"name": variant.name, "train_dir": train_dir.name, "variant": dataclasses.asdict(variant),
            "params": counts, "before": before, "after": after,
            "train": {"tokens": result.tokens, "seconds": result.seconds,
                      "tokens_per_s": result.tokens / result.seconds}}


def _from_chapter01(variant: RelaxedVariant, cfg: RelaxedConfig, slot: experiments.RunSlot,
                    windows: dict[str, torch.Tensor], before: dict[str, float], twin_result: dict[str, Any],
                    model_dir: Path, twin: Variant) -> dict[str, Any]:
    """`variant`'s result from chapter 01's model of the same training (`recipe_differences` empty): its loss curve and
    training time are chapter 01's, the evaluation this chapter's own windows."""
    model, trained = ch01.adopt((twin_result, model_dir), slot)
    after = evaluate(model, cfg, windows)
    if any(v.parent == variant for v in variants(cfg)) or _keeps(variant, cfg):
        convert.save(model, slot.folder / "model", tokenizer=cfg.tokenizer)
    counts = counting.count_parameters(model)
    return {"name": variant.name, "train_dir": slot.train_dir.name, "variant": dataclasses.asdict(variant),
            "params": counts, "before": before, "after": after,
            "train": {k: trained[k] for k in ("tokens", "seconds", "tokens_per_s")},
            "trained_by": f"chapter 01's {twin.name} (the same recipe; rlib.recursive.experiments.shared_run)"}


def _keeps(variant: RelaxedVariant, cfg: RelaxedConfig) -> bool:
    """The exit-trained main models are kept for the throughput section."""
    return variant.phase == "post" and variant.exit == "aggressive_kd"


def run_grid(cfg: RelaxedConfig, work: Path, source: Decoder, teacher_dir: Path | None,
             runs: list[RelaxedVariant] | None = None,
             chapter01: tuple[RecursiveConfig, Path] | None = None) -> list[dict[str, Any]]:
    """Run (or load) `runs` (default: every variant in `variants(cfg)` order); `teacher_dir` is chapter 01's
    uptrained full model (`rlib.recursive.experiments.teacher_dir(profile)`), needed by the distillation run.

    `chapter01` = (chapter 01's config, its work folder): a plain recursive run that chapter 01 trained the same way
    (`recipe_differences` empty) and kept starts from chapter 01's model instead of training again; its result is
    the same (training is deterministic: tests/test_relaxed_sharing.py), so the run's key does not depend on it."""
    cfg.check_model(source.config.n_layers)
    sources.share_source(cfg.model, source)
    compute = functools.partial(variant_in_slot, cfg=cfg, work=Path(work), teacher_dir=teacher_dir,
                                chapter01=chapter01)
    return experiments.run_grid(variants(cfg) if runs is None else runs, work, compute,
                                context=(cfg.grid_context(),), modules=CODE_MODULES, desc="variants", workers="auto")


def variant_in_slot(variant: RelaxedVariant, slot: experiments.RunSlot, cfg: RelaxedConfig, work: Path,
                    teacher_dir: Path | None, chapter01: tuple[RecursiveConfig, Path] | None) -> dict[str, Any]:
    """`run_variant` for a grid: a module-level function, so that a `functools.partial` of it reaches a worker
    process, which loads the source and the windows itself (`rlib.sources.process_source`)."""
    return run_variant(variant, cfg, sources.process_source(cfg.model), work, slot, ch01.held_windows(cfg), teacher_dir,
                       chapter01)


def step0_table(cfg: RelaxedConfig, source: Decoder) -> pd.DataFrame:
    """Held-out perplexity before any training: each init relaxed at each rank (SVD), plus full rank with the norm
    deltas (which reproduces the source), and the source itself, on the first `cfg.step0_windows` evaluation windows.
    One row per (init, rank, norms)."""
    windows = ch01.eval_windows(cfg)[cfg.train_corpus]  # [N, T]
    windows = {cfg.train_corpus: windows[: cfg.step0_windows or len(windows)]}  # the first step0_windows
    key = f"ppl[{cfg.train_corpus}]"
    cfg = cfg.override(precision="no")  # fp32: a full-rank model must land on the source, not within bf16 rounding
    rows = [{"init": "source", "rank": None, "norms": None, "lora_params": 0,
             "ppl": ch01.evaluate_model(source, cfg, windows, tasks=False)[key]}]
    todo = [(init, r, False) for init in cfg.inits for r in cfg.step0_ranks]
    for init in cfg.inits:
        full = relax.full_rank(source)
        todo += [(init, full, False), (init, full, True)]
    looped_of = {init: looping.convert(source, Looping(cfg.n_loops, init=init)) for init in cfg.inits}
    svd_caches: dict[str, dict] = {init: {} for init in cfg.inits}  # one SVD per residual for all ranks
    for init, rank, norms in progress(todo, desc="step-0 ranks", unit="model"):
        looped = looped_of[init]
        model = looped if rank == 0 else relax.relax(looped, source, Relaxation(rank, norms=norms), svd_caches[init])
        lora = 0 if rank == 0 else relax.lora_parameters(looped, Relaxation(rank))
        ppl = ch01.evaluate_model(model, cfg, windows, tasks=False)[key]
        error = 1.0 if rank == 0 else relax.svd_relative_error(svd_caches[init], rank)  # App. G's reconstruction
        rows.append({"init": init, "rank": rank, "norms": norms, "lora_params": lora, "ppl": ppl,
                     "svd_rel_error": error})
    return pd.DataFrame(rows)
