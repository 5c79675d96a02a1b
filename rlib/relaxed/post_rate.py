"""Table 3's early-exit post-training at the paper's recipe (Relaxed Recursive Transformers, paper 000, §3.7, Table 3,
App. E, App. J): is the final loop's loss the chapter's short, re-warmed post-training's?

Table 3 post-trains the uptrained recursive model with the aggressive exit loss and keeps its final loop (Gemma Step
51.7 -> 52.5), with 'the same batch size, context and learning rate as uptraining' (App. J) on 15B tokens after 15B of
uptraining: AdamW at a peak 2e-4, cosine (App. E). The chapter post-trains for `post_steps` (a third of its
uptraining in cpu) at its own peak rate (1e-3 in cpu), re-warmed after the uptraining's cosine has annealed; there its
CE-only control (post-training with no exit loss) already moves the final loop up, so the ledger could not tell the
exit loss's cost from the recipe's. This study post-trains the same parent (the grid's main recursive model) with the
same three losses (CE only, aggressive, aggressive + self-distillation) under other recipes, each a `(rate, length)`
cell:

    rate     "chapter": the chapter's peak `lr`;   "paper": `PAPER_RATE`, App. E's 2e-4
    length   "chapter": `post_steps`;               "uptraining": as many steps as the uptraining (`steps`), App. J's

everything else the chapter's (batches from the chapter's post-training seed, warm-up, cosine, exit coefficient).
`post_rate_table` sets each cell's runs beside the chapter's own post-training rows of `early_exit` and the parent.

    study = PostRateConfig.preset(profile)        # cpu: the paper's cell; cpu-long: the two one-change cells too
    table = post_rate_table(exit_table, run(cfg, study, work, source, chapter01), cfg)

Runs are cached under `work/post-rate/`, keyed by the chapter's config and code and the function that trains one
(`recipe_source`); the rest of this module keys nothing. `python -m rlib.relaxed.post_rate --profile cpu` runs it
alone and prints the table and the verdict of the claim that reads it.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from rlib import experiments as run_cache
from rlib.config import ConfigError, Preset
from rlib.relaxed.config import RelaxedConfig, RelaxedVariant, main_variants
from rlib.train import TrainConfig

__all__ = ["CLAIMS", "EXITS", "PAPER_RATE", "PostRateConfig", "PostRateRun", "main", "post_rate_table",
           "recipe_source", "run", "study_runs", "train_config"]

MODULE = "rlib.relaxed.post_rate"
PAPER_RATE = 2e-4  # App. E: AdamW, peak 2e-4, cosine; App. J: post-training at the uptraining's rate
EXITS = ("none", "aggressive", "aggressive_kd")  # the CE-only control, Table 3's Agg and Agg + self-distillation
RATES = ("chapter", "paper")
LENGTHS = ("chapter", "uptraining")
CLAIMS = ("rrt.tab3.agg_keeps_final_loop",)  # the claim whose diagnosis reads post_rate


@dataclass(frozen=True)
class PostRateConfig(Preset):
    """Which post-training recipes beside the chapter's own run the three losses."""

    cells: tuple[tuple[str, str], ...]  # (rate, length): rate of RATES, length of LENGTHS; () = no study

    PRESETS = {
        # smoke: the paper's cell, its two steps. cpu: the paper's recipe alone, 3 runs of 48 steps (about 6 min in two
        # workers, within chapters 01 + 02's hour). cpu-long: the two one-change cells too (6 more runs, 3 of them
        # 16 steps)
        "smoke": dict(cells=(("paper", "uptraining"),)),
        "cpu": dict(cells=(("paper", "uptraining"),)),
        "cpu-long": dict(cells=(("paper", "chapter"), ("chapter", "uptraining"), ("paper", "uptraining"))),
        "gpu": dict(cells=(("paper", "chapter"), ("chapter", "uptraining"), ("paper", "uptraining"))),
    }

    def __post_init__(self) -> None:
        object.__setattr__(self, "cells", tuple(tuple(c) for c in self.cells))
        bad = [c for c in self.cells if len(c) != 2 or c[0] not in RATES or c[1] not in LENGTHS]
        if bad:
            raise ConfigError(f"cells {bad}: each a (rate, length) pair, rate from {list(RATES)}, length from "
                              f"{list(LENGTHS)}")
        if ("chapter", "chapter") in self.cells:
            raise ConfigError("cells: ('chapter', 'chapter') is the chapter's own post-training; drop it")
        if len(set(self.cells)) != len(self.cells):
            raise ConfigError(f"cells {list(self.cells)}: each once")


@dataclass(frozen=True)
class PostRateRun:
    """One post-training run of the main recursive model: its loss and its recipe cell."""

    exit: str
    rate: str
    length: str

    @property
    def name(self) -> str:
        return f"post_{self.exit}-{self.rate}_rate-{self.length}_length"


def study_runs(study: PostRateConfig) -> list[PostRateRun]:
    return [PostRateRun(e, rate, length) for rate, length in study.cells for e in EXITS]


def _variant(post: PostRateRun) -> RelaxedVariant:
    """The chapter's post-training variant with this run's loss (its parent is the grid's main recursive model)."""
    return RelaxedVariant("stepwise", 0, exit=post.exit, phase="post")


def train_config(cfg: RelaxedConfig, post: PostRateRun) -> TrainConfig:
    """The chapter's post-training config of this loss with the cell's peak rate and steps (warm-up and evaluation
    interval clipped to the steps as the chapter clips them)."""
    if cfg.lr == PAPER_RATE and post.rate == "paper":
        raise ConfigError(f"the chapter's rate is the paper's {PAPER_RATE:g}: the 'paper' rate cells repeat its own")
    steps = cfg.post_steps if post.length == "chapter" else cfg.steps
    lr = cfg.lr if post.rate == "chapter" else PAPER_RATE
    return replace(cfg.train_config(_variant(post)), lr=lr, max_steps=steps,
                   warmup_steps=min(cfg.warmup_steps, steps - 1), eval_every=min(cfg.eval_every, steps))


def run_in_slot(post: PostRateRun, slot: run_cache.RunSlot, cfg: RelaxedConfig, work: Path) -> dict[str, Any]:
    """Post-train the grid's main recursive model with `post`'s loss and recipe; its held-out static-exit NLL per loop
    on the uptraining corpus (the chapter's `early_exit` metric)."""
    from rlib.recursive import experiments as ch01
    from rlib.relaxed import early_exit, experiments
    from rlib.train import train

    variant = _variant(post)
    model = run_cache.load_model(work, variant.parent.name, "run chapter 02's grid first (its main recursive model)")
    wrapped = early_exit.ExitModel(model, early_exit.loop_exits(model, cfg.n_loops))
    hooks = [] if post.exit == "none" else [early_exit.ExitLoss(wrapped, "aggressive", coef=cfg.exit_coef,
                                                                kd=post.exit == "aggressive_kd")]
    config = train_config(cfg, post)
    result = train(wrapped, ch01.train_windows(cfg, cfg.train_corpus), config, slot.train_dir,
                   val_windows=ch01.val_windows(cfg, cfg.train_corpus), hooks=hooks)
    slot.drop_checkpoint()
    after = experiments.evaluate(model, cfg, {cfg.train_corpus: ch01.held_windows(cfg)[cfg.train_corpus]})
    return {"name": post.name, "exit": post.exit, "rate": post.rate, "length": post.length, "lr": config.lr,
            "steps": config.max_steps, "after": after, "train": {"tokens": result.tokens, "seconds": result.seconds}}


def recipe_source() -> str:
    """What decides a run beside the chapter's code: the functions that train one (part of each run's key)."""
    return inspect.getsource(train_config) + inspect.getsource(run_in_slot)


def run(cfg: RelaxedConfig, study: PostRateConfig, work: Path, source, chapter01) -> list[dict[str, Any]]:
    """Train (or read back) every run of the study in one worker per core, after making sure the grid's main recursive
    model is trained and saved (`chapter01`: as `rlib.relaxed.experiments.run_grid`'s); [] without cells."""
    if not study.cells:
        return []
    from rlib.relaxed import experiments

    for post in study_runs(study):
        train_config(cfg, post)  # a cell the profile cannot run is refused before any training
    parent = main_variants(cfg)[0]
    # the parent and one child of it, so that the grid saves the parent's model where a stored result lacks it
    experiments.run_grid(cfg, work, source, None, runs=[parent, _variant(PostRateRun("none", "chapter", "chapter"))],
                         chapter01=chapter01)
    module = importlib.import_module(MODULE)  # the grid's function must pickle by its module name for the workers
    compute = functools.partial(module.run_in_slot, cfg=cfg, work=Path(work))
    return run_cache.run_grid(study_runs(study), Path(work) / "post-rate", compute,
                              context=(cfg.grid_context(), recipe_source()), modules=experiments.CODE_MODULES,
                              desc="Table 3: post-training recipes", workers="auto")


def post_rate_table(exits: pd.DataFrame, results: list[dict[str, Any]], cfg: RelaxedConfig) -> pd.DataFrame:
    """exits: the chapter's `early_exit` table (its recursive rows: the parent and its post-training at the chapter's
    recipe); results: `run`'s. One row per (rate, length, exit) of the recursive model, the chapter's cell first: the
    peak rate and steps, the static-exit NLL of every loop, `final_vs_before` (the final loop's change against the
    parent: Table 3's Delta) and `final_vs_none` (against the CE-only control of the same recipe)."""
    loops = [f"nll loop {j}" for j in range(1, cfg.n_loops + 1)]
    own = exits[(exits["model"] == "recursive") & ~exits.get("sweep", pd.Series(False, index=exits.index)).astype(bool)]
    parent = own[(own["phase"] == "uptrain") & (own["exit"] == "none")]
    if parent.empty:
        raise ConfigError("post_rate_table needs the early_exit table's uptrained recursive row (the parent)")
    rows = [{"rate": "chapter", "length": "chapter", "lr": cfg.lr, "steps": cfg.post_steps, "exit": r["exit"],
             **{c: r[c] for c in loops}} for _, r in own[own["phase"] == "post"].iterrows() if r["exit"] in EXITS]
    rows += [{"rate": r["rate"], "length": r["length"], "lr": r["lr"], "steps": r["steps"], "exit": r["exit"],
              **{c: r["after"][f"nll_loop{j}"] for j, c in enumerate(loops, 1)}} for r in results]
    table = pd.DataFrame(rows)
    final = loops[-1]
    table["final_vs_before"] = table[final] - float(parent[final].iloc[0])
    control = table[table["exit"] == "none"].set_index(["rate", "length"])[final]
    table["final_vs_none"] = [f - control[k] if k in control.index else float("nan")
                              for k, f in zip(zip(table["rate"], table["length"]), table[final])]
    before = {"rate": "-", "length": "-", "lr": float("nan"), "steps": 0, "exit": "before post-training",
              **{c: float(parent[c].iloc[0]) for c in loops}, "final_vs_before": 0.0, "final_vs_none": float("nan")}
    return pd.concat([pd.DataFrame([before]), table], ignore_index=True)


def main(argv: list[str] | None = None) -> int:
    from rlib.config import runs_profile
    from rlib.recursive import experiments as recursive
    from rlib.recursive.config import RecursiveConfig
    from rlib.relaxed import claims
    from rlib.relaxed import experiments as relaxed
    from rlib.relaxed.config import variants
    from rlib.relaxed.tables import exit_table
    from rlib.study_cli import run_study

    def tables(profile: str) -> dict[str, pd.DataFrame]:
        # the chapter's recursive post-training rows (read back where the chapter ran), then the study's cells
        cfg = RelaxedConfig.preset(profile)
        grids = runs_profile(profile)
        work = recursive.work_dir(grids, cfg.model, relaxed.CHAPTER)
        chapter01 = (RecursiveConfig.preset(profile).override(model=cfg.model), recursive.work_dir(grids, cfg.model))
        source = recursive.load_source(cfg)
        parent = main_variants(cfg)[0]
        own = [v for v in variants(cfg) if v == parent or (v.parent == parent and v.exit in EXITS and v.coef is None
                                                            and not v.freeze_rank)]
        exits = exit_table(relaxed.run_grid(cfg, work, source, None, runs=own, chapter01=chapter01), cfg)
        rated = run(cfg, PostRateConfig.preset(profile), work, source, chapter01)
        return {"early_exit": exits, "post_rate": post_rate_table(exits, rated, cfg)}

    def judge(written, profile: str) -> pd.DataFrame:
        return claims.judge(dict(written), RelaxedConfig.preset(profile), profile).finish()

    def has_runs(profile: str) -> bool:  # a profile the study cannot run is refused here, before any training
        study, cfg = PostRateConfig.preset(profile), RelaxedConfig.preset(profile)
        for post in study_runs(study):
            train_config(cfg, post)
        return bool(study.cells)

    return run_study(argv, "python -m rlib.relaxed.post_rate", __doc__.splitlines()[0], has_runs, tables, judge,
                     CLAIMS)


if __name__ == "__main__":
    raise SystemExit(main())
