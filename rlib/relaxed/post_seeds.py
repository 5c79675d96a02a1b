"""App. J's early-exit post-training over seeds, on new and on overlapped tokens (Relaxed Recursive Transformers,
paper 000, Sec. 3.7, App. J, Table J.1).

App. J's findings compare post-training runs a few hundredths of a nat apart: self-distillation from the detached
final output "further enhanced intermediate performance" (Table J.1, Agg(0.1) loop 1 14.55 -> 14.11 SlimPajama
perplexity, ln = 0.031 nats), and "no significant performance differences were observed when using the overlapped
uptraining dataset versus new SlimPajama tokens for post-training" (Agg(0.1): Ovlp 12.37 / 14.55, New 12.34 / 14.49).
Every Table J.1 ablation row post-trains on overlapped tokens ("Ovlp"); the final recipe (Table 3) on new ones. The
chapter's grid post-trains each schedule once, on new tokens, so its pairs are single draws of unknown noise.

This study post-trains the chapter's main recursive model (Stepwise, r = 0: its uptrained parent is the grid's) with
each of `exits` on each of two data set-ups, at every seed:

    new          fresh windows of the uptraining corpus, the chapter's own (its post-training seed + `seed`: seed 0 is
                 the grid's run, step for step)
    overlapped   the windows the uptraining itself read (its first steps x batch windows, in a `seed`-shuffled order)

so that every comparison is paired by seed: same parent, and within a data set-up the same batches, only the exit
loss differing; across set-ups the same loss. Each run records how many of its windows the uptraining had read (all
for overlapped, none or nearly for new), its training loss at the first step and over the last quarter (how well the
parent already fits what it reads), and the held-out static-exit NLL per loop on the uptraining corpus (Table J.1's
metric is SlimPajama perplexity). `rlib.relaxed.tables.paired` gives the per-seed changes the claims judge
(`rlib.relaxed.claims`, `rrt.tabJ1.self_kd_lifts_loop1` and `rrt.appJ.overlapped_matches_new`).

    study = PostSeedsConfig.preset(profile)      # cpu: none; cpu-long: 5 seeds x {Agg, Agg+KD} x {new, overlapped}
    table = tables.seeds_table(run(cfg, study, work, source, chapter01))  # rlib.relaxed.tables

Runs are cached under `work/post-seeds/` keyed by the chapter's config and code and this module's source.
`python -m rlib.relaxed.post_seeds --profile cpu-long` runs it alone and prints the table and the verdicts.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch.utils.data import Subset

from rlib import experiments as run_cache
from rlib.config import ConfigError, Preset
from rlib.data import WindowSampler
from rlib.relaxed.config import RelaxedConfig, RelaxedVariant, main_variants

__all__ = ["DATA", "EXITS", "PostRun", "PostSeedsConfig", "main", "run", "study_runs", "uptraining_indices"]

MODULE = "rlib.relaxed.post_seeds"
DATA = ("new", "overlapped")
EXITS = ("aggressive", "aggressive_kd")  # Table J.1's Agg(c) and Agg(c) + KD rows


@dataclass(frozen=True)
class PostSeedsConfig(Preset):
    """Which post-training runs of the main recursive model repeat at which seeds (App. J, Table J.1)."""

    seeds: tuple[int, ...]  # 0 is the chapter's own post-training batches (new tokens)
    exits: tuple[str, ...]  # of EXITS, each post-trained on every one of `data`
    data: tuple[str, ...]  # of DATA

    PRESETS = {
        "smoke": dict(seeds=(0, 1), exits=EXITS, data=DATA),
        # cpu: none (chapters 01 + 02 fill their hour). cpu-long: 5 seeds x 2 exits x 2 data = 20 post-training runs of
        # 16 steps, about 1.5 min each in one worker (the KD runs a little slower), 15 min in two. Five seeds give a
        # 95 % t-interval of 1.24 s.d. each side of the mean paired change
        "cpu": dict(seeds=(), exits=(), data=()),
        "cpu-long": dict(seeds=(0, 1, 2, 3, 4), exits=EXITS, data=DATA),
        "gpu": dict(seeds=(0, 1, 2, 3, 4), exits=EXITS, data=DATA),
    }

    def __post_init__(self) -> None:
        for name in ("seeds", "exits", "data"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if bool(self.seeds) != bool(self.exits) or bool(self.seeds) != bool(self.data):
            raise ConfigError(f"seeds={self.seeds}, exits={self.exits}, data={self.data}: give all three (a study) or "
                              "none")
        if self.seeds and len(self.seeds) < 2:
            raise ConfigError(f"seeds={self.seeds}: a seed study needs >= 2 seeds (the claims judge a paired "
                              "interval)")
        for name, allowed in (("exits", EXITS), ("data", DATA)):
            bad = [v for v in getattr(self, name) if v not in allowed]
            if bad:
                raise ConfigError(f"{name} {bad} unknown; choose from {list(allowed)}")
        if len(set(self.seeds)) != len(self.seeds) or any(s < 0 for s in self.seeds):
            raise ConfigError(f"seeds={self.seeds} must be distinct and >= 0")


@dataclass(frozen=True)
class PostRun:
    """One post-training run of the main recursive model: its exit loss, its data and its seed."""

    exit: str
    data: str
    seed: int

    @property
    def name(self) -> str:
        return f"post_{self.exit}-{self.data}-s{self.seed}"


def study_runs(study: PostSeedsConfig) -> list[PostRun]:
    return [PostRun(e, d, s) for s in study.seeds for d in study.data for e in study.exits]


def _variant(post: PostRun) -> RelaxedVariant:
    """The chapter's variant with this run's loss (its parent is the grid's main recursive model)."""
    return RelaxedVariant("stepwise", 0, exit=post.exit, phase="post")


def uptraining_indices(cfg: RelaxedConfig, n_windows: int) -> torch.Tensor:
    """The training windows the main recursive model's uptraining read, in its order: `steps` batches of the sampler
    `rlib.train.train` builds from its train config (epoch 0 of a seeded permutation; a second epoch where the
    steps outrun one)."""
    train_cfg = cfg.train_config(main_variants(cfg)[0])
    return _windows_read(n_windows, train_cfg.batch_size, train_cfg.max_steps, train_cfg.seed)  # [steps * batch]


def _train_seed(cfg: RelaxedConfig, post: PostRun) -> int:
    """new: the chapter's post-training seed + `seed` (seed 0 is the grid's own run); overlapped: `seed` itself (it
    only orders the uptraining's windows)."""
    return cfg.train_config(_variant(post)).seed + post.seed if post.data == "new" else post.seed


def _windows_read(n_windows: int, batch_size: int, steps: int, seed: int) -> torch.Tensor:
    """The window indices `steps` batches of `rlib.train.train`'s sampler hand out, in order."""
    batches = iter(WindowSampler(n_windows, batch_size, seed=seed).infinite())
    return torch.tensor([i for _ in range(steps) for i in next(batches)])


def run_in_slot(post: PostRun, slot: run_cache.RunSlot, cfg: RelaxedConfig, work: Path) -> dict[str, Any]:
    """Post-train the grid's main recursive model as `post` says; its held-out NLL per loop on the uptraining corpus
    and how many of its windows the uptraining read."""
    from rlib.recursive import experiments as ch01
    from rlib.relaxed import early_exit, experiments
    from rlib.train import train

    variant = _variant(post)
    model = run_cache.load_model(work, variant.parent.name, "run chapter 02's grid first (its main recursive model)")
    wrapped = early_exit.ExitModel(model, early_exit.loop_exits(model, cfg.n_loops))
    corpus = ch01.train_windows(cfg, cfg.train_corpus)
    uptrained = uptraining_indices(cfg, len(corpus))
    windows = Subset(corpus, uptrained.tolist()) if post.data == "overlapped" else corpus
    train_cfg = replace(cfg.train_config(variant), seed=_train_seed(cfg, post))
    read = _windows_read(len(windows), train_cfg.batch_size, train_cfg.max_steps, train_cfg.seed)
    if post.data == "overlapped":
        read = uptrained[read]  # subset positions -> corpus windows
    exit_loss = early_exit.ExitLoss(wrapped, "aggressive", coef=cfg.exit_coef, kd=post.exit == "aggressive_kd")
    result = train(wrapped, windows, train_cfg, slot.train_dir, val_windows=ch01.val_windows(cfg, cfg.train_corpus),
                   hooks=[exit_loss])
    slot.drop_checkpoint()
    held = ch01.held_windows(cfg)
    after = experiments.evaluate(model, cfg, {cfg.train_corpus: held[cfg.train_corpus]})
    seen = int(torch.isin(read, uptrained).sum())
    loss = pd.read_csv(slot.train_dir / "metrics.csv")["loss"]  # how well the parent already fits what it reads
    return {"name": post.name, "exit": post.exit, "data": post.data, "seed": post.seed, "train_seed": train_cfg.seed,
            "coef": cfg.exit_coef, "windows": len(read), "seen_in_uptraining": seen, "after": after,
            "train": {"tokens": result.tokens, "seconds": result.seconds, "loss_first": float(loss.iloc[0]),
                      "loss_last": float(loss.tail(max(1, len(loss) // 4)).mean())}}


def run(cfg: RelaxedConfig, study: PostSeedsConfig, work: Path, source, chapter01) -> list[dict[str, Any]]:
    """Train (or read back) every run of the study in one worker per core, after making sure the grid's main recursive
    model is trained and saved (`chapter01`: as `rlib.relaxed.experiments.run_grid`'s)."""
    if not study.seeds:
        return []
    from rlib.relaxed import experiments

    parent = main_variants(cfg)[0]
    # the parent and one child of it, so that the grid saves the parent's model where a stored result lacks it
    experiments.run_grid(cfg, work, source, None, runs=[parent, _variant(PostRun(study.exits[0], "new", 0))],
                         chapter01=chapter01)
    module = importlib.import_module(MODULE)  # the grid's function must pickle by its module name for the workers
    compute = functools.partial(module.run_in_slot, cfg=cfg, work=Path(work))
    return run_cache.run_grid(study_runs(study), Path(work) / "post-seeds", compute, context=(cfg.grid_context(),),
                              modules=(*experiments.CODE_MODULES, MODULE), desc="App. J: post-training seeds",
                              workers="auto")


def main(argv: list[str] | None = None) -> int:
    from rlib.config import runs_profile
    from rlib.recursive import experiments as recursive
    from rlib.recursive.config import RecursiveConfig
    from rlib.relaxed import claims
    from rlib.relaxed import experiments as relaxed
    from rlib.relaxed.tables import changes_table, seeds_table
    from rlib.study_cli import run_study

    def tables(profile: str) -> dict[str, pd.DataFrame]:
        cfg = RelaxedConfig.preset(profile)
        grids = runs_profile(profile)
        work = recursive.work_dir(grids, cfg.model, relaxed.CHAPTER)
        chapter01 = (RecursiveConfig.preset(profile).override(model=cfg.model), recursive.work_dir(grids, cfg.model))
        table = seeds_table(run(cfg, PostSeedsConfig.preset(profile), work, recursive.load_source(cfg), chapter01))
        return {"post_seeds": table, "post_seeds_changes": changes_table(table, cfg.n_loops)}

    def judge(written, profile: str) -> pd.DataFrame:
        return claims.judge(dict(written), RelaxedConfig.preset(profile), profile).finish()

    return run_study(argv, "python -m rlib.relaxed.post_seeds", __doc__.splitlines()[0],
                     lambda profile: bool(PostSeedsConfig.preset(profile).seeds), tables, judge,
                     ("rrt.tabJ1.self_kd_lifts_loop1", "rrt.appJ.overlapped_matches_new"))


if __name__ == "__main__":
    raise SystemExit(main())
