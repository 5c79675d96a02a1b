"""Table 12's vanilla rows: a plain Transformer whose layers share keys and values across depth (Mixture-of-Recursions,
paper 001, Sec. 4.3, Fig. 4c, App. G.2, Table 12).

The paper pretrains its 360M vanilla model with KV sharing between layers, the "Cycle or Sequence strategies that
share the same concepts as parameter sharing" (App. G.2): every layer keeps its own weights, but within a group of
`loop` depths only the first computes keys and values and the others attend over them. With the KV groups of
`rlib.looping.block_order(strategy, L, loop)`:

    L = 6, loop 2   sequence   KV groups 0 0 1 1 2 2    depths 1, 3, 5 read the keys/values of depths 0, 2, 4
                    cycle      KV groups 0 1 2 0 1 2    depths 3, 4, 5 read those of depths 0, 1, 2

Table 12 has loop 2 at 32 layers and loop 3 at 30 layers (the nearest depth loop 3 divides), each beside a vanilla
model of the same depth without sharing; all four shared rows have a lower NLL ("KV cache sharing even improves the
performance of vanilla models, where sharing acts as a regularization technique"). Here each loop trains at the
multiple of it nearest the chapter's depth L, beside an unshared vanilla of that depth, at the chapter's ablation
budget (Table 12's 10B tokens) and recipe. A shared model is built from the same seed as its reference, so the two
start from the same weights and read the same batches: the pair differs only in the sharing.

    study = VanillaKVConfig.preset(profile)
    results = run_grid(cfg, study, work)       # every (depth, strategy, seed), cached under work/vanilla-kv/
    table = kv_table(results)                  # per row: NLL, and the paired difference to its reference

The study's settings live here, not in `rlib.mor.config`, whose source keys every run of the chapter's cache
(`experiments.CODE_MODULES`); for the same reason a run trains through `rlib.mor.experiments`' helpers rather than a
change to its `run_variant`. `python -m rlib.mor.vanilla_kv --profile cpu-long` runs the study alone and prints its
table and the ledger's verdict.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rlib import experiments as run_cache
from rlib import looping
from rlib.config import ConfigError, Preset
from rlib.model import Decoder, ExecutionPlan
from rlib.model.convert import save as save_decoder
from rlib.model.decoder import Step
from rlib.model.init import init_weights
from rlib.mor import experiments
from rlib.mor.config import MoRConfig
from rlib.mor.flops import paper_flops_per_token
from rlib.mor.model import _uniform
from rlib.train import train

__all__ = ["CHAPTER", "STRATEGIES", "VanillaKVConfig", "VanillaKVRun", "build", "grids", "kv_plan", "kv_table",
           "main", "nearest_depth", "run_grid", "study_runs"]

CHAPTER = "03_mixture_of_recursions"
MODULE = "rlib.mor.vanilla_kv"  # its source keys the study's runs (also when it runs as __main__)
STRATEGIES = ("sequence", "cycle")
SHORT = {"": "none", "sequence": "Seq", "cycle": "Cyc"}


@dataclass(frozen=True)
class VanillaKVConfig(Preset):
    """Which vanilla models with and without KV sharing train (App. G.2, Table 12)."""

    loops: tuple[int, ...]  # depths per KV group (Table 12: 2 and 3); each trains at the multiple of it nearest L
    strategies: tuple[str, ...]  # KV groups of consecutive ("sequence") or cyclic ("cycle") depths
    seeds: tuple[int, ...]  # every row and its reference at each seed (paired)

    PRESETS = {
        "smoke": dict(loops=(2,), strategies=STRATEGIES, seeds=(0,)),
        # cpu: none (its 40 minutes hold no run at the ablation budget). cpu-long: Table 12's four shared rows and their
        # two references at two seeds, 12 runs of about 5.5 min each at one thread (the AVX2 EPYC, fp32): ~33 min in two
        # workers
        "cpu": dict(loops=(), strategies=(), seeds=()),
        "cpu-long": dict(loops=(2, 3), strategies=STRATEGIES, seeds=(0, 1)),
        "gpu": dict(loops=(2, 3), strategies=STRATEGIES, seeds=(0, 1, 2)),
    }

    def __post_init__(self) -> None:
        for name in ("loops", "strategies", "seeds"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        bad = [s for s in self.strategies if s not in STRATEGIES]
        if bad:
            raise ConfigError(f"strategies {bad} unknown; choose from {list(STRATEGIES)}")
        if any(k < 2 for k in self.loops):
            raise ConfigError(f"loops={self.loops}: a KV group needs >= 2 depths (1 is the unshared reference)")
        if bool(self.loops) != bool(self.strategies) or bool(self.loops) != bool(self.seeds):
            raise ConfigError(f"loops={self.loops}, strategies={self.strategies}, seeds={self.seeds}: give all "
                              "three (a study) or none")


@dataclass(frozen=True)
class VanillaKVRun:
    """One vanilla model: `n_layers` depths, KV groups of `loop` depths under `strategy` ("" and 1: no sharing)."""

    n_layers: int
    strategy: str = ""
    loop: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        if (self.strategy == "") != (self.loop == 1) or (self.strategy and self.strategy not in STRATEGIES):
            raise ConfigError(f"strategy={self.strategy!r}, loop={self.loop}: use '' with loop 1 (no sharing) or one "
                              f"of {list(STRATEGIES)} with loop >= 2")
        kv_plan(self.n_layers, self.strategy, self.loop)  # the loop must divide the depth

    @property
    def name(self) -> str:
        kv = f"-kv{self.strategy}{self.loop}" if self.strategy else ""
        return f"vanilla-L{self.n_layers}{kv}-ablation-s{self.seed}"

    @property
    def label(self) -> str:
        return f"Vanilla L={self.n_layers}" + (f", KV {SHORT[self.strategy]} {self.loop}" if self.strategy else "")


def kv_plan(n_layers: int, strategy: str = "", loop: int = 1) -> ExecutionPlan:
    """Block d at every depth d; the first depth of each KV group writes its cache slot, the others read it."""
    if not strategy:
        return ExecutionPlan.identity(n_layers)
    groups = looping.block_order(strategy, n_layers, loop)  # KV group of each depth
    writer: dict[int, int] = {}  # KV group -> the depth that computes its keys and values
    steps = []
    for depth, group in enumerate(groups):
        reads = group in writer
        writer.setdefault(group, depth)
        steps.append(Step(block=depth, slot=writer[group], reuse_kv=reads))
    return ExecutionPlan(tuple(steps))


def build(cfg: MoRConfig, run: VanillaKVRun, vocab_size: int) -> Decoder:
    """The run's model with the chapter's widths; the same seed gives the same weights with or without sharing."""
    base = _uniform(cfg.base_config(vocab_size), run.n_layers)
    return init_weights(Decoder(base, kv_plan(run.n_layers, run.strategy, run.loop)), seed=run.seed)


def nearest_depth(n_layers: int, loop: int) -> int:
    """The multiple of `loop` nearest `n_layers` (Table 12: loop 3 beside a 32-layer model trains 30 layers)."""
    return loop * max(1, round(n_layers / loop))


def study_runs(cfg: MoRConfig, study: VanillaKVConfig) -> list[VanillaKVRun]:
    """Every run: per loop, the unshared reference at its depth, then each strategy; seed by seed."""
    runs = []
    for loop in study.loops:
        depth = nearest_depth(cfg.n_layers, loop)
        for seed in study.seeds:
            runs.append(VanillaKVRun(depth, seed=seed))
            runs += [VanillaKVRun(depth, strategy, loop, seed) for strategy in study.strategies]
    return list(dict.fromkeys(runs))


@functools.lru_cache(maxsize=2)
def _held(cfg: MoRConfig) -> dict[str, Any]:
    return experiments.windows(cfg)  # once per worker process: every run scores the same windows


def _train_and_score(run: VanillaKVRun, slot: run_cache.RunSlot, cfg: MoRConfig) -> dict[str, Any]:
    """Train one run at the ablation budget with the chapter's recipe and score it on the chapter's test windows."""
    text = cfg.text()
    held = _held(cfg)
    model = build(cfg, run, text.size)
    steps = max(2, round(cfg.ablation_tokens / cfg.tokens_per_step()))
    result = train(model, text.train_windows(), experiments.train_config(cfg, steps, run.seed), slot.train_dir,
                   val_windows=held["val"])
    log = pd.read_csv(slot.train_dir / "metrics.csv").dropna(subset=["val_loss"])
    save_decoder(model, slot.folder / "model")
    slot.drop_checkpoint()
    per_token = paper_flops_per_token(cfg.d_model, cfg.d_ffn, cfg.seq_len, run.n_layers)
    return {"name": run.name, "label": run.label, "n_layers": run.n_layers, "strategy": run.strategy,
            "loop": run.loop, "seed": run.seed, "params": experiments.non_embedding_params(model), "steps": steps,
            "tokens": result.tokens, "flops_per_token": per_token, "seconds": result.seconds,
            "nll": experiments.test_nll(model, held["test"], cfg),
            "curve": {"tokens": log["tokens"].tolist(), "val_loss": log["val_loss"].tolist()}}


def grid(cfg: MoRConfig, study: VanillaKVConfig, work: Path) -> run_cache.Grid:
    """The study's runs under `work/vanilla-kv/`, keyed on the chapter's config and training code and this module."""
    return run_cache.Grid(study_runs(cfg, study), Path(work) / "vanilla-kv",
                          functools.partial(_train_and_score, cfg=cfg), context=(cfg.grid_context(),),
                          modules=(*experiments.CODE_MODULES, MODULE), desc="Table 12: vanilla KV sharing")


def grids(cfg: MoRConfig, study: VanillaKVConfig, work: Path) -> tuple[run_cache.Grid, ...]:
    """The study's grid (none without runs), for `rlib.mor.experiments.run_grid(..., also=)`: its runs train in the
    chapter's pool, and `run_grid` below reads them back."""
    return (grid(cfg, study, work),) if study.loops else ()


def run_grid(cfg: MoRConfig, study: VanillaKVConfig, work: Path) -> list[dict[str, Any]]:
    """Run (or read back) every run of the study, the missing ones in one worker per core."""
    if not study.loops:
        return []
    cfg.text().save_vocabulary(work)
    return run_cache.run_grids([grid(cfg, study, work)], workers="auto")[0]


def kv_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per (depth, strategy, loop): mean test NLL over seeds and, for a shared row, the paired difference to the
    unshared reference of the same depth and seed (`d_vs_none`: its mean, smallest and largest over seeds)."""
    df = pd.DataFrame([{k: r[k] for k in ("label", "n_layers", "strategy", "loop", "seed", "params", "tokens", "nll")}
                       for r in results])
    if df.empty:
        return df
    reference = df[df["strategy"] == ""].set_index(["n_layers", "seed"])["nll"]
    rows = []
    for (depth, strategy, loop), group in df.groupby(["n_layers", "strategy", "loop"], sort=False):
        row = {"label": group["label"].iloc[0], "n_layers": depth, "kv_sharing": SHORT[strategy], "kv_loop": loop,
               "seeds": len(group), "params_m": group["params"].iloc[0] / 1e6,
               "tokens_m": group["tokens"].iloc[0] / 1e6,
               "nll": group["nll"].mean(), "nll_std": group["nll"].std() if len(group) > 1 else np.nan}
        if strategy:
            d = np.array([nll - reference.get((depth, seed), np.nan) for seed, nll in zip(group["seed"], group["nll"])])
            row.update(d_vs_none=float(np.mean(d)), d_lo=float(np.min(d)), d_hi=float(np.max(d)))
        rows.append(row)
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    from rlib.mor.study_cli import run_study

    def table(cfg: MoRConfig, profile: str) -> pd.DataFrame:
        study = importlib.import_module(MODULE)  # the grid's function must pickle by its module name for the workers
        return kv_table(study.run_grid(cfg, VanillaKVConfig.preset(profile), run_cache.work_dir(profile, CHAPTER)))

    return run_study(argv, "python -m rlib.mor.vanilla_kv", __doc__.splitlines()[0],
                     lambda profile: bool(VanillaKVConfig.preset(profile).loops), table, "kv_sharing_vanilla",
                     "mor.tab12.kv_share_helps_vanilla")


if __name__ == "__main__":
    raise SystemExit(main())
