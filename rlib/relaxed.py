"""Chapter 02's experiments: relaxed recursion (depth-wise LoRA), early-exit training, and what they buy in
throughput (Relaxed Recursive Transformers, Sec. 2.3-2.4, 3.5-3.8, Appendices G, I, J, K).

Every training run is a `RelaxedVariant` of the source model converted with B = `n_loops` (cycle sharing):
an initialization (Stepwise / Average / Lower), a LoRA rank (0 = the plain recursive model) and LoRA init
(SVD of the residual or standard "zero"), optionally distillation from chapter 01's uptrained full model, and an
early-exit schedule applied either during uptraining ("co") or afterwards on fresh tokens ("post", starting from
the uptrained model of the same variant without exits). Runs are cached like chapter 01's (`rlib.experiments`).

Step-0 analysis needs no training: `step0_table` relaxes the converted model at a sweep of ranks and measures
held-out perplexity right away (the interpolation between the recursive model and the source, Sec. 2.3).

Throughput runs the real engine (`rlib.cdb`) on held-out prompts: the source model with static and continuous
batching, the recursive and relaxed models with continuous depth-wise batching with and without early exit; and
the paper's simulation (`rlib.throughput`) with this machine's measured pass times and the models' exit loops.
"""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from rlib import counting, data, early_exit, experiments, looping, recursive, relax, throughput
from rlib.cdb import DepthBatchEngine, Request
from rlib.config import ConfigError, Preset
from rlib.early_exit import ExitLoss, ExitModel
from rlib.looping import Looping
from rlib.model import Decoder, convert
from rlib.progress import progress
from rlib.relax import Relaxation
from rlib.train import TrainConfig, train

__all__ = ["EXITS", "RelaxedConfig", "RelaxedVariant", "claims_table", "exit_table", "relax_table", "run_grid",
           "step0_table", "throughput_tables", "variants"]

EXITS = ("none", "weighted", "aggressive", "aggressive_kd")
PHASES = ("uptrain", "co", "post")
CODE_MODULES = ("rlib.relaxed", "rlib.relax", "rlib.early_exit", "rlib.looping", "rlib.train", "rlib.eval", "rlib.data",
                "rlib.model.decoder", "rlib.model.layers", "rlib.model.lora", "rlib.recursive")


@dataclass(frozen=True)
class RelaxedConfig(Preset):
    """Chapter 02's settings per profile (fields shared with chapter 01's config keep their meaning)."""

    model: str
    train_corpus: str
    eval_corpora: tuple[str, ...]
    n_loops: int  # B of every model of the chapter (the paper: 2, and 3 for some ablations)
    seq_len: int
    batch_size: int
    micro_batch_size: int
    steps: int  # uptraining steps of every run
    post_steps: int  # early-exit post-training steps (on tokens the uptraining did not see)
    lr: float  # one peak rate for every run (chapter 01's sweep)
    warmup_steps: int
    eval_every: int
    val_windows: int
    n_eval_windows: int
    step0_ranks: tuple[int, ...]  # ranks of the step-0 curve (0 = recursive; the full rank is added)
    inits: tuple[str, ...]  # looping inits compared with and without LoRA
    ranks: tuple[int, ...]  # LoRA ranks uptrained with SVD init for the inits in `rank_inits`
    rank_inits: tuple[str, ...]  # inits swept over every rank; the other inits get the largest rank only
    extra_ranks: tuple[int, ...]  # further ranks for the Average init only (the rank sweep, Fig. 7)
    zero_inits: tuple[str, ...]  # inits also uptrained with standard ("zero") LoRA init at the largest of `ranks`
    prefix_lengths: tuple[int, ...]  # prefix relaxation (App. H) of the Average init, per prompt length
    exit_schedules: tuple[str, ...]  # post-training schedules (EXITS) on the main recursive and relaxed models
    exit_coef: float  # the aggressive coefficient c (the paper: 0.1)
    co_training: bool  # also co-train the main recursive model with aggressive+kd exits (the paper: worse final loop)
    kd_alpha: float  # distillation weight for the KD row of Table I.1 (0 = no KD row)
    long_factor: int  # the "longer uptraining" row: this many times the steps (1 = none)
    precision: str
    throughput_requests: int
    prompt_len: int
    new_tokens: int
    max_batch: int
    exit_thresholds: tuple[float, ...]  # confidence thresholds of the engine's early exit
    throughput_repeats: int = 1  # engine runs per setting; the table keeps the median run (timing noise)
    tasks: tuple[str, ...] = ()  # chapter 02 judges quality by perplexity; tasks are optional
    task_limit: int = 0

    PRESETS = {
        "smoke": dict(
            model="smollm2-135m", train_corpus="shakespeare", eval_corpora=("shakespeare",), n_loops=2, seq_len=64,
            batch_size=2, micro_batch_size=2, steps=2, post_steps=2, lr=1e-3, warmup_steps=1, eval_every=2,
            val_windows=2, n_eval_windows=2, step0_ranks=(0, 8), inits=("stepwise", "average"), ranks=(8,),
            rank_inits=("stepwise", "average"),
            extra_ranks=(), zero_inits=("average",), prefix_lengths=(4,), exit_schedules=("none", "aggressive_kd"),
            exit_coef=0.1,
            co_training=False, kd_alpha=0.0, long_factor=1, precision="bf16", throughput_requests=3,
            prompt_len=8, new_tokens=4, max_batch=2, exit_thresholds=(0.5,)),
        # ~45 min on 2 cores: 15 uptraining runs of 48 steps x 4 x 128 tokens, 6 post-training runs of 24 steps
        "cpu": dict(
            model="smollm2-135m", train_corpus="gutenberg-poetry", eval_corpora=("gutenberg-poetry", "python-stdlib"),
            n_loops=2, seq_len=128, batch_size=4, micro_batch_size=4, steps=48, post_steps=16, lr=1e-3,
            warmup_steps=5, eval_every=16, val_windows=16, n_eval_windows=24, step0_ranks=(0, 4, 16, 64, 192),
            inits=("stepwise", "average", "lower"), ranks=(16, 64), rank_inits=("stepwise", "average"), extra_ranks=(),
            zero_inits=("average", "lower"), prefix_lengths=(64,),
            exit_schedules=("none", "weighted", "aggressive", "aggressive_kd"),
            exit_coef=0.1, co_training=True, kd_alpha=1.0, long_factor=2, precision="bf16",
            throughput_requests=24, prompt_len=32, new_tokens=32, max_batch=8, exit_thresholds=(0.9, 0.6),
            throughput_repeats=3),
        "gpu": dict(
            model="gemma3-270m", train_corpus="gutenberg-poetry", eval_corpora=("gutenberg-poetry", "python-stdlib"),
            n_loops=2, seq_len=512, batch_size=32, micro_batch_size=16, steps=2000, post_steps=500, lr=5e-4,
            warmup_steps=100, eval_every=100, val_windows=64, n_eval_windows=256, step0_ranks=(0, 8, 32, 128, 256),
            inits=("stepwise", "average", "lower"), ranks=(32, 128), rank_inits=("stepwise", "average", "lower"),
            extra_ranks=(256, 512),
            zero_inits=("average", "lower"), prefix_lengths=(64, 256),
            exit_schedules=("none", "weighted", "aggressive", "aggressive_kd"),
            exit_coef=0.1, co_training=True, kd_alpha=1.0, long_factor=2, precision="bf16",
            throughput_requests=256, prompt_len=128, new_tokens=256, max_batch=64, exit_thresholds=(0.9, 0.7, 0.5),
            throughput_repeats=3),
        "paper": dict(
            model="hf:google/gemma-2-2b", train_corpus="hf:cerebras/SlimPajama-627B",
            eval_corpora=("hf:cerebras/SlimPajama-627B",), n_loops=2, seq_len=2048, batch_size=1024,
            micro_batch_size=8, steps=7500, post_steps=7500, lr=2e-4, warmup_steps=200, eval_every=500,
            val_windows=256, n_eval_windows=1024, step0_ranks=(0, 64, 128, 256, 512), inits=("stepwise", "average",
                                                                                              "lower"),
            ranks=(64, 512), rank_inits=("stepwise", "average", "lower"), extra_ranks=(128, 256),
            zero_inits=("average", "lower"),
            prefix_lengths=(256, 512, 1024, 2048),
            exit_schedules=("none", "weighted", "aggressive", "aggressive_kd"), exit_coef=0.1, co_training=True,
            kd_alpha=1.0, long_factor=4, precision="bf16", throughput_requests=20000, prompt_len=512,
            new_tokens=2048, max_batch=43, exit_thresholds=(0.9,)),
    }

    def __post_init__(self) -> None:
        bad = [i for i in self.inits + self.zero_inits if i not in looping.INITS]
        if bad:
            raise ConfigError(f"inits {bad} unknown; choose from {list(looping.INITS)}")
        bad = [s for s in self.exit_schedules if s not in EXITS]
        if bad:
            raise ConfigError(f"exit_schedules {bad} unknown; choose from {EXITS}")
        missing = [i for i in ("stepwise", "average", *self.rank_inits) if i not in self.inits]
        if missing:
            raise ConfigError(f"inits {self.inits} must include {missing} (the main models and rank_inits)")
        if self.n_loops < 2:
            raise ConfigError(f"n_loops={self.n_loops}: a relaxed recursive model loops at least twice")
        if any(r < 1 for r in self.ranks + self.extra_ranks):
            raise ConfigError(f"ranks {self.ranks + self.extra_ranks} must be >= 1 (rank 0 is the recursive model)")
        if self.precision not in ("no", "bf16"):
            raise ConfigError(f"precision={self.precision!r}: use 'bf16' or 'no'")
        if self.throughput_repeats < 1:
            raise ConfigError(f"throughput_repeats={self.throughput_repeats} must be >= 1")

    def check_model(self, n_layers: int) -> None:
        """n_loops must divide the source's layers; raised before any training."""
        valid = looping.valid_loops(n_layers)
        if self.n_loops not in valid:
            raise ConfigError(f"n_loops={self.n_loops} does not divide the {n_layers} layers of {self.model}; "
                              f"valid: {valid}")

    def train_config(self, variant: RelaxedVariant) -> TrainConfig:
        post = variant.phase == "post"
        steps = self.post_steps if post else self.steps * variant.steps_factor
        return TrainConfig(lr=self.lr, schedule="cosine", warmup_steps=min(self.warmup_steps, steps - 1),
                           max_steps=steps, batch_size=self.batch_size, micro_batch_size=self.micro_batch_size,
                           eval_every=min(self.eval_every, steps),
                           eval_batches=max(1, self.val_windows // self.batch_size),
                           checkpoint_every=0, seed=variant.seed + (1000 if post else 0),  # post: fresh batches
                           kd_alpha=self.kd_alpha if variant.kd else 0.0, mixed_precision=self.precision,
                           checkpoint_final=False)


@dataclass(frozen=True)
class RelaxedVariant:
    init: str = "stepwise"
    rank: int = 0  # 0 = plain recursive
    lora_init: str = "svd"
    exit: str = "none"
    phase: str = "uptrain"  # "uptrain" (no exit loss), "co" (exit loss during uptraining), "post" (after)
    kd: bool = False
    steps_factor: int = 1
    seed: int = 0
    prefix: int = 0  # prefix relaxation length (App. H) instead of LoRA; needs rank 0

    def __post_init__(self) -> None:
        if self.prefix and self.rank:
            raise ConfigError(f"prefix={self.prefix} and rank={self.rank}: a run relaxes with LoRA or a prefix")
        if self.phase not in PHASES:
            raise ConfigError(f"phase {self.phase!r} unknown; choose from {PHASES}")
        if self.exit not in EXITS:
            raise ConfigError(f"exit {self.exit!r} unknown; choose from {EXITS}")
        if (self.phase == "uptrain") != (self.exit == "none") and self.phase != "post":
            raise ConfigError(f"phase {self.phase!r} with exit {self.exit!r}: 'uptrain' has no exit loss, 'co' has one")

    @property
    def name(self) -> str:
        base = f"{self.init}-p{self.prefix}" if self.prefix else \
            f"{self.init}-r{self.rank}" + (f"-{self.lora_init}" if self.rank else "")
        if self.kd:
            base += "-kd"
        if self.steps_factor != 1:
            base += f"-x{self.steps_factor}"
        if self.phase != "uptrain":
            base += f"-{self.phase}_{self.exit}"
        return f"{base}-s{self.seed}"

    @property
    def parent(self) -> RelaxedVariant | None:
        """The uptrained model a post-training run starts from."""
        return dataclasses.replace(self, exit="none", phase="uptrain") if self.phase == "post" else None


def main_variants(cfg: RelaxedConfig) -> tuple[RelaxedVariant, RelaxedVariant]:
    """The main recursive (Stepwise, r = 0) and relaxed (Average, SVD at the largest of `ranks`) models."""
    return RelaxedVariant("stepwise", 0), RelaxedVariant("average", max(cfg.ranks))


def variants(cfg: RelaxedConfig) -> list[RelaxedVariant]:
    """Every training run in dependency order (parents of post-training runs first)."""
    runs = [RelaxedVariant(init, 0) for init in cfg.inits]
    runs += [RelaxedVariant(init, r) for init in cfg.inits for r in cfg.ranks
             if init in cfg.rank_inits or r == max(cfg.ranks)]
    runs += [RelaxedVariant("average", r) for r in cfg.extra_ranks]
    runs += [RelaxedVariant(init, max(cfg.ranks), "zero") for init in cfg.zero_inits]
    runs += [RelaxedVariant("average", prefix=p) for p in cfg.prefix_lengths]
    if cfg.kd_alpha > 0:
        runs.append(dataclasses.replace(main_variants(cfg)[1], kd=True))
    if cfg.long_factor > 1:
        runs.append(dataclasses.replace(main_variants(cfg)[1], steps_factor=cfg.long_factor))
    for main in main_variants(cfg):
        runs += [dataclasses.replace(main, exit=s, phase="post") for s in cfg.exit_schedules]
    if cfg.co_training:
        runs.append(dataclasses.replace(main_variants(cfg)[0], exit="aggressive_kd", phase="co"))
    names = [v.name for v in runs]
    return [v for i, v in enumerate(runs) if v.name not in names[:i]]


# ---- building and running -------------------------------------------------------------------------------------


def build(variant: RelaxedVariant, cfg: RelaxedConfig, source: Decoder) -> Decoder:
    looped = looping.convert(source, Looping(cfg.n_loops, init=variant.init))
    if variant.prefix:
        return relax.prefix_relax(looped, variant.prefix, seed=variant.seed)
    if variant.rank == 0:
        return looped
    return relax.relax(looped, source, Relaxation(variant.rank, init=variant.lora_init))


def _exit_loss(variant: RelaxedVariant, wrapped: ExitModel, cfg: RelaxedConfig) -> list[ExitLoss]:
    if variant.exit == "none":
        return []
    schedule = "weighted" if variant.exit == "weighted" else "aggressive"
    return [ExitLoss(wrapped, schedule, coef=cfg.exit_coef, kd=variant.exit == "aggressive_kd")]


def evaluate(model: Decoder, cfg: RelaxedConfig, windows: dict[str, torch.Tensor]) -> dict[str, float]:
    """Perplexity on every corpus (final exit) and the static-exit NLL of every loop on the uptraining corpus."""
    out = recursive.evaluate_model(model, cfg, windows, tasks=False)
    dtype = torch.bfloat16 if cfg.precision == "bf16" else None
    exits = early_exit.loop_exits(model, cfg.n_loops)
    losses = early_exit.static_exit_losses(model, windows[cfg.train_corpus], exits, cfg.micro_batch_size, dtype)
    for j, depth in enumerate(exits, start=1):
        out[f"nll_loop{j}"] = losses[depth]
    return out


def run_variant(variant: RelaxedVariant, cfg: RelaxedConfig, source: Decoder, work: Path,
                windows: dict[str, torch.Tensor], teacher_dir: Path | None, key: str) -> dict[str, Any]:
    folder = work / variant.name
    train_dir = folder / f"train-{key}"
    for stale in folder.glob("train-*"):
        if stale != train_dir:
            shutil.rmtree(stale, ignore_errors=True)
    if variant.parent is not None:
        parent_model = work / variant.parent.name / "model"
        if not (parent_model / convert.CONFIG_FILE).exists():
            raise ConfigError(f"{variant.name} post-trains {variant.parent.name}, whose model is not saved yet")
        model = convert.load(parent_model)
    else:
        model = build(variant, cfg, source)
    # a post-training run starts from its parent, whose "after" is this run's "before"
    before = {} if variant.parent else evaluate(model, cfg, {cfg.train_corpus: windows[cfg.train_corpus]})
    teacher = None
    if variant.kd:
        if teacher_dir is None or not (teacher_dir / convert.CONFIG_FILE).exists():
            raise ConfigError(f"{variant.name} distills from chapter 01's uptrained full model ({teacher_dir}); "
                              "run chapter 01 with the same profile first")
        teacher = convert.load(teacher_dir)
    wrapped = ExitModel(model, early_exit.loop_exits(model, cfg.n_loops))
    result = train(wrapped, recursive._train_windows(cfg, cfg.train_corpus), cfg.train_config(variant), train_dir,
                   val_windows=recursive._val_windows(cfg, cfg.train_corpus), teacher=teacher,
                   hooks=_exit_loss(variant, wrapped, cfg))
    after = evaluate(model, cfg, windows)
    if any(v.parent == variant for v in variants(cfg)) or _keeps(variant, cfg):
        convert.save(model, folder / "model")
    shutil.rmtree(train_dir / "checkpoint", ignore_errors=True)
    counts = counting.count_parameters(model)
    return {"name": variant.name, "train_dir": train_dir.name, "variant": dataclasses.asdict(variant),
            "params": counts, "before": before, "after": after,
            "train": {"tokens": result.tokens, "seconds": result.seconds,
                      "tokens_per_s": result.tokens / result.seconds}}


def _keeps(variant: RelaxedVariant, cfg: RelaxedConfig) -> bool:
    """The exit-trained main models are kept for the throughput section."""
    return variant.phase == "post" and variant.exit == "aggressive_kd"


def run_grid(cfg: RelaxedConfig, work: Path, source: Decoder, teacher_dir: Path | None) -> list[dict[str, Any]]:
    cfg.check_model(source.config.n_layers)
    windows = recursive.eval_windows(cfg)
    code = experiments.code_digest(*CODE_MODULES)
    results = []
    for variant in progress(variants(cfg), desc="variants", unit="run"):
        key = experiments.digest(variant, cfg, code)
        results.append(experiments.cached(work / variant.name, key, lambda v=variant, k=key: run_variant(
            v, cfg, source, work, windows, teacher_dir, k)))
    return results




# ---- step 0 -------------------------------------------------------------------------------------------------


def step0_table(cfg: RelaxedConfig, source: Decoder) -> pd.DataFrame:
    """Held-out perplexity before any training: each init relaxed at each rank (SVD), plus full rank with the norm
    deltas (which reproduces the source), and the source itself. One row per (init, rank, norms)."""
    windows = {cfg.train_corpus: recursive.eval_windows(cfg)[cfg.train_corpus]}
    key = f"ppl[{cfg.train_corpus}]"
    cfg = cfg.override(precision="no")  # fp32: a full-rank model must land on the source, not within bf16 rounding
    rows = [{"init": "source", "rank": None, "norms": None, "lora_params": 0,
             "ppl": recursive.evaluate_model(source, cfg, windows, tasks=False)[key]}]
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
        ppl = recursive.evaluate_model(model, cfg, windows, tasks=False)[key]
        rows.append({"init": init, "rank": rank, "norms": norms, "lora_params": lora, "ppl": ppl})
    return pd.DataFrame(rows)


# ---- tables ---------------------------------------------------------------------------------------------------


def flat(results: list[dict[str, Any]]) -> pd.DataFrame:
    rows = []
    for r in results:
        row = {"name": r["name"], **r["variant"], "unique_params": r["params"]["unique"],
               "non_embedding_params": r["params"]["non_embedding"], "tokens_per_s": r["train"]["tokens_per_s"]}
        row.update({f"before {k}": v for k, v in r["before"].items()})
        row.update({f"after {k}": v for k, v in r["after"].items()})
        rows.append(row)
    return pd.DataFrame(rows)


def relax_table(results: list[dict[str, Any]], cfg: RelaxedConfig) -> pd.DataFrame:
    """Fig. 6 / 7 / G.1-G.3 and Table G.2: every uptrained model without exits, before and after uptraining."""
    df = flat(results)
    sel = df[(df["phase"] == "uptrain") & ~df["kd"] & (df["steps_factor"] == 1)]
    cols = ["init", "rank", "lora_init", "prefix", "non_embedding_params", f"before ppl[{cfg.train_corpus}]",
            *[f"after ppl[{c}]" for c in cfg.eval_corpora]]
    return sel[cols].sort_values(["init", "prefix", "lora_init", "rank"]).reset_index(drop=True)


def exit_table(results: list[dict[str, Any]], cfg: RelaxedConfig) -> pd.DataFrame:
    """Tables 3 / J.1: static-exit NLL of every loop after each early-exit schedule, for both main models."""
    df = flat(results)
    mains = {m.name.rsplit("-s", 1)[0]: m for m in main_variants(cfg)}
    rows = []
    for r in df.itertuples():
        v = RelaxedVariant(r.init, r.rank, r.lora_init, r.exit, r.phase, r.kd, r.steps_factor, r.seed, r.prefix)
        base = dataclasses.replace(v, exit="none", phase="uptrain")
        if base.name.rsplit("-s", 1)[0] not in mains or v.kd or v.steps_factor != 1:
            continue
        row = {"model": "recursive" if v.rank == 0 else f"relaxed r={v.rank}", "phase": v.phase, "exit": v.exit}
        row.update({f"nll loop {j}": df.loc[r.Index, f"after nll_loop{j}"] for j in range(1, cfg.n_loops + 1)})
        rows.append(row)
    return pd.DataFrame(rows)


def kd_long_table(results: list[dict[str, Any]], cfg: RelaxedConfig) -> pd.DataFrame:
    """Table I.1's rows: the main relaxed model plain, with distillation, and with longer uptraining."""
    df = flat(results)
    main = main_variants(cfg)[1]
    sel = df[(df["init"] == main.init) & (df["rank"] == main.rank) & (df["lora_init"] == "svd")
             & (df["phase"] == "uptrain") & (df["prefix"] == 0)]
    cols = ["kd", "steps_factor", *[f"after ppl[{c}]" for c in cfg.eval_corpora]]
    return sel[cols].reset_index(drop=True)


# ---- throughput ---------------------------------------------------------------------------------------------------


def prompts(cfg: RelaxedConfig) -> list[Request]:
    """Held-out prompts: the first `prompt_len` tokens of test windows of the uptraining corpus."""
    n = cfg.throughput_requests
    windows = data.heldout_windows(cfg.train_corpus, cfg.model, max(cfg.prompt_len, 2), n, split="test", seed=7)
    return [Request(i, windows[i, :cfg.prompt_len].tolist(), cfg.new_tokens) for i in range(n)]


def throughput_tables(cfg: RelaxedConfig, source: Decoder, work: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(measured, simulated): the engine's tokens/s per model and scheduler, and the paper's simulation with this
    machine's pass times and each model's exit loops on the same prompts."""
    reqs = prompts(cfg)
    max_len = cfg.prompt_len + cfg.new_tokens + 1
    models = {"vanilla (source)": source}
    for main in main_variants(cfg):
        post = dataclasses.replace(main, exit="aggressive_kd", phase="post")
        folder = work / post.name / "model"
        if (folder / convert.CONFIG_FILE).exists():
            label = "recursive" if main.rank == 0 else f"relaxed r={main.rank}"
            models[label] = convert.load(folder).to(next(source.parameters()).dtype)
    measured, simulated = [], []
    for label, model in models.items():
        vanilla = label.startswith("vanilla")
        settings = [("static", None), ("continuous", None)] if vanilla else \
            [("continuous", None), *[("continuous", t) for t in cfg.exit_thresholds]]
        for admission, threshold in settings:
            engine = DepthBatchEngine(model, cfg.max_batch, max_len, exit_threshold=threshold, admission=admission)
            runs = sorted((engine.run(reqs) for _ in range(cfg.throughput_repeats)), key=lambda r: r.tokens_per_s)
            res = runs[len(runs) // 2]  # the median run
            scheduler = "static" if admission == "static" else ("csb" if vanilla else "cdb")
            measured.append({"model": label, "scheduler": scheduler, "exit_threshold": threshold,
                             "tokens": res.tokens, "seconds": res.seconds, "prefill_s": res.prefill_seconds,
                             "tokens_per_s": res.tokens_per_s,
                             "decode_tokens_per_s": (res.tokens - len(reqs)) / (res.seconds - res.prefill_seconds),
                             "mean_exit_loop": res.mean_exit_loop, "mean_busy": res.mean_busy,
                             "passes": res.passes,
                             "tokens_per_s_spread": runs[-1].tokens_per_s - runs[0].tokens_per_s})
            if threshold is None and admission == "continuous":
                batches = sorted({1, max(1, cfg.max_batch // 2), cfg.max_batch})
                pos = cfg.prompt_len + cfg.new_tokens // 2
                timing = throughput.per_batch_timing(batches, [engine.pass_seconds(b, pos) for b in batches])
                loops = _exit_loops(res, vanilla)
                for sched in (["static", "csb"] if vanilla else ["cdb"]):
                    sim = throughput.simulate(loops, cfg.max_batch, timing, sched, n_loops=engine.n_loops)
                    simulated.append({"model": label, "scheduler": sched, "exits": "none",
                                      "tokens_per_s": sim.tokens_per_s, "mean_busy": sim.mean_busy})
                if not vanilla:
                    for name, exit_loops in _exit_variants(model, cfg, res, reqs).items():
                        sim = throughput.simulate(exit_loops, cfg.max_batch, timing, "cdb", n_loops=engine.n_loops)
                        simulated.append({"model": label, "scheduler": "cdb", "exits": name,
                                          "tokens_per_s": sim.tokens_per_s, "mean_busy": sim.mean_busy,
                                          "mean_exit_loop": float(np.mean([j for r in exit_loops for j in r]))})
    return pd.DataFrame(measured), pd.DataFrame(simulated)


def _exit_loops(res, vanilla: bool) -> list[list[int]]:
    """Per request, the decode tokens' exit loops as the engine ran them (all B without early exit)."""
    return [c.exit_loops[1:] or [res.n_loops] for c in res.completions.values()] if not vanilla else \
        [[1] * max(1, len(c.tokens) - 1) for c in res.completions.values()]


def _exit_variants(model: Decoder, cfg: RelaxedConfig, res, reqs: list[Request]) -> dict[str, list[list[int]]]:
    """Oracle and confidence exit loops, teacher-forced on each request's prompt + generated text (as the paper
    records them on held-out text), one list per request."""
    exits = early_exit.loop_exits(model, cfg.n_loops)
    out: dict[str, list[list[int]]] = {"oracle": []}
    out.update({f"confidence {t:g}": [] for t in cfg.exit_thresholds})
    for req in reqs:
        c = res.completions[req.id]
        text = torch.tensor([req.prompt + c.tokens])
        top, prob = early_exit.exit_predictions(model, text, exits)
        span = slice(len(req.prompt), text.shape[1] - 1)  # positions that predict generated tokens 2..n
        out["oracle"].append(early_exit.oracle_exit_loops(top)[0, span].tolist() or [cfg.n_loops])
        for t in cfg.exit_thresholds:
            out[f"confidence {t:g}"].append(early_exit.confidence_exit_loops(prob, t)[0, span].tolist()
                                            or [cfg.n_loops])
    return out


# ---- claims ---------------------------------------------------------------------------------------------------


def claims_table(results: list[dict[str, Any]], step0: pd.DataFrame, measured: pd.DataFrame,
                 cfg: RelaxedConfig) -> pd.DataFrame:
    rows = []

    def add(claim: str, held: bool | None, evidence: str) -> None:
        rows.append({"claim": claim, "held": {True: "held", False: "not held", None: "not measured"}[held],
                     "evidence": evidence})

    source_ppl = float(step0.loc[step0["init"] == "source", "ppl"].iloc[0])
    parts, monotone, exact = [], True, True
    for init in cfg.inits:
        curve = step0[(step0["init"] == init) & (step0["norms"] != True)].sort_values("rank")  # noqa: E712
        values = curve["ppl"].tolist()
        monotone &= all(a > b for a, b in zip(values, values[1:]))
        with_norms = float(step0[(step0["init"] == init) & (step0["norms"] == True)]["ppl"].iloc[0])  # noqa: E712
        exact &= abs(with_norms / source_ppl - 1) < 1e-2
        parts.append(f"{init}: " + " > ".join(f"{v:.4g}" for v in values)
                     + f"; full rank + norm deltas {with_norms:.4g}")
    add("SVD-LoRA at step 0 lowers held-out perplexity monotonically with rank; full rank equals the source",
        monotone and exact, "; ".join(parts) + f"; source {source_ppl:.4g} (full rank with the paper's tied norms "
        "stays above it)")

    df = flat(results)
    home = df[(df["phase"] == "uptrain") & ~df["kd"] & (df["steps_factor"] == 1) & (df["prefix"] == 0)]
    col = f"after nll[{cfg.train_corpus}]"
    nll = {(r.init, r.rank, r.lora_init): df.loc[r.Index, col] for r in home.itertuples()}
    top = max(cfg.ranks)
    improves = all(nll[(i, r, "svd")] < nll[(i, 0, "svd")] for (i, r, li) in nll if r and li == "svd")
    more = all(nll[(i, top, "svd")] <= nll[(i, min(cfg.ranks), "svd")] for i in cfg.rank_inits)
    svd_wins = all(nll[(i, top, "svd")] < nll[(i, top, "zero")] for i in cfg.zero_inits if (i, top, "zero") in nll)
    add("Relaxation improves quality, more with higher rank; SVD beats zero init for Average and Lower",
        improves and more and svd_wins,
        "; ".join(f"{i}: r0 {nll[(i, 0, 'svd')]:.3f}, "
                  + ", ".join(f"r{r} {nll[(i, r, 'svd')]:.3f}" for r in cfg.ranks if (i, r, "svd") in nll)
                  + (f", zero r{top} {nll[(i, top, 'zero')]:.3f}" if (i, top, "zero") in nll else "")
                  for i in cfg.inits))
    if {"stepwise", "average"} <= set(cfg.inits):
        plain = nll[("stepwise", 0, "svd")] < nll[("average", 0, "svd")]
        lora = nll[("average", top, "svd")] < nll[("stepwise", top, "svd")]
        add("With LoRA the best initialization moves from Stepwise to Average", plain and lora,
            f"r=0: stepwise {nll[('stepwise', 0, 'svd')]:.3f} vs average {nll[('average', 0, 'svd')]:.3f}; "
            f"r={top}: stepwise {nll[('stepwise', top, 'svd')]:.3f} vs average {nll[('average', top, 'svd')]:.3f}")

    exits = exit_table(results, cfg)
    last = f"nll loop {cfg.n_loops}"
    verdicts, evidence = [], []
    for model, group in exits[exits["phase"] == "post"].groupby("model", sort=False):
        by = group.set_index("exit")
        for schedule in ("aggressive", "aggressive_kd"):
            if "none" not in by.index or schedule not in by.index:
                continue
            keeps = by.loc[schedule, last] <= by.loc["none", last] + 0.05
            lifts = by.loc[schedule, "nll loop 1"] < by.loc["none", "nll loop 1"] - 0.05
            verdicts.append(keeps and lifts)
            evidence.append(f"{model}, {schedule} vs none: loop 1 {by.loc['none', 'nll loop 1']:.3f} -> "
                            f"{by.loc[schedule, 'nll loop 1']:.3f}, final {by.loc['none', last]:.3f} -> "
                            f"{by.loc[schedule, last]:.3f}")
    add("The aggressive early-exit schedule (with or without self-distillation) keeps final-loop quality (within "
        "0.05 nats) while lifting first-loop quality (by > 0.05 nats), against post-training without exit losses",
        all(verdicts) if verdicts else None, "; ".join(evidence) or "no exit runs")

    if len(measured):
        best = lambda frame: float(frame["decode_tokens_per_s"].max()) if len(frame) else float("nan")  # noqa: E731
        vanilla = best(measured[measured["model"].str.startswith("vanilla")])
        rec = measured[measured["model"] == "recursive"]
        with_exit, without = best(rec[rec["exit_threshold"].notna()]), best(rec[rec["exit_threshold"].isna()])
        add("Measured throughput: continuous depth-wise batching with early exit > without > vanilla",
            with_exit > without > vanilla, f"decode tokens/s (prefill excluded): recursive CDB with exit (best "
            f"threshold) {with_exit:.1f}, without {without:.1f}, vanilla (best of static/CSB) {vanilla:.1f}")
    return pd.DataFrame(rows)
