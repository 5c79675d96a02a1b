"""Chapter 01's experiments: uptraining Recursive Transformers converted from a pretrained LM, and baselines.

Relaxed Recursive Transformers (paper 000) Sec. 3.1-3.4 and 3.6, Appendices D and F. Every run of the chapter
is a `Variant`: what model is built from the source checkpoint, what it is uptrained on, with or without
distillation, with which seed. `run_grid` builds, evaluates (step 0), uptrains with `rlib.train`, evaluates
again and stores one result per variant under the chapter's work directory (`rlib.experiments`), so an
interrupted chapter resumes where it stopped. The tables and claims below read those results.

    full        the source model itself, uptrained the same way (the paper's "full-size" reference and KD teacher)
    recursive   `rlib.looping.convert` with B loops, an initialization, cycle sharing
    truncated   the first K = L/B layers of the source, no looping (same unique size as a B-loop model)
    scratch     K = L/B layers, every weight random: the paper's "reduced-size model pretrained from scratch"

Quality is held-out next-token NLL / perplexity on the test split of each evaluation corpus (the uptraining
corpus first) and accuracy on the book's local task suite (`rlib.tasks`), as in Table F.1.
"""

from __future__ import annotations

import copy
import dataclasses
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from rlib import assets, counting, data, experiments, looping
from rlib import eval as rl_eval
from rlib.config import ConfigError, Preset
from rlib.looping import Looping
from rlib.model import Decoder, convert
from rlib.progress import progress
from rlib.train import TrainConfig, train

__all__ = ["KINDS", "RecursiveConfig", "Variant", "claims_table", "curve_labels", "evaluate_model", "headline",
           "init_table", "kd_table", "load_source", "loss_curves", "memory_table", "run_grid", "shift_table",
           "size_table", "source_config", "speed_table", "variants"]

KINDS = ("full", "recursive", "truncated", "scratch")
PRETRAINED_INITS = ("stepwise", "stepwise_fixed_start", "average", "lower", "upper", "random_layers")
CODE_MODULES = ("rlib.recursive", "rlib.looping", "rlib.train", "rlib.eval", "rlib.data", "rlib.model.decoder",
                "rlib.model.layers", "rlib.model.init", "rlib.tasks")


@dataclass(frozen=True)
class RecursiveConfig(Preset):
    model: str  # the source checkpoint (an embedded asset)
    train_corpus: str  # uptraining data (the paper: SlimPajama)
    shift_corpus: str  # a second uptraining corpus for the data-shift comparison (Table 2's point)
    shift_recursive: bool  # uptrain the main recursive model on shift_corpus too (the paper shifts the full model)
    eval_corpora: tuple[str, ...]  # held-out perplexity on each; the uptraining corpora should be among them
    seq_len: int
    batch_size: int  # windows per optimizer step
    micro_batch_size: int
    steps: int  # optimizer steps of uptraining, the same for every variant (equal tokens)
    lr: float  # peak learning rate of every run, pretrained or random start (the paper: one recipe for all; cosine).
    # The cpu value comes from `python -m rlib.lr_sweep` (validation loss, figures/01_*/lr_sweep.csv)
    warmup_steps: int
    eval_every: int  # steps between validation-loss points of the loss curves
    val_windows: int  # validation windows (validation split of the uptraining corpus) per evaluation
    n_eval_windows: int  # test windows per evaluation corpus for the tables
    init_loops: int  # B of the initialization ablation (the paper: 2)
    inits: tuple[str, ...]  # rlib.looping.INITS to compare
    norm_inits: tuple[str, ...]  # extra norm-weight variants of the average init ("choice", "zero")
    seeded_inits: tuple[str, ...]  # inits run with every seed in `seeds` (small differences need a spread)
    seeds: tuple[int, ...]
    loops: tuple[int, ...]  # loop counts of the size sweep (Figure 4); each also gets truncated and scratch models
    kd_alpha: float  # weight of forward KL to the uptrained full model (0 = no distillation variants)
    tasks: tuple[str, ...]  # local task suite evaluated after uptraining
    task_limit: int  # items per task
    precision: str  # "bf16" (autocast in training and perplexity; 2.4x faster on the book's CPU) or "no" (fp32)
    keep_models: bool  # save the uptrained full and main recursive models (for chapter 02 and lm-eval)
    checkpoint_every: int  # steps between training checkpoints (resume mid-run after a kill); 0 = none (a killed
    # run restarts; finished runs are cached either way)

    PRESETS = {
        "smoke": dict(
            model="smollm2-135m", train_corpus="shakespeare", shift_corpus="python-stdlib", shift_recursive=False,
            eval_corpora=("shakespeare", "python-stdlib"), seq_len=64, batch_size=2, micro_batch_size=2, steps=3,
            lr=1e-3, warmup_steps=1, eval_every=3, val_windows=2, n_eval_windows=2, init_loops=2,
            inits=("stepwise", "random"), norm_inits=(), seeded_inits=(), seeds=(0,), loops=(2,), kd_alpha=1.0,
            tasks=("book_nextline",), task_limit=2, precision="bf16", keep_models=False, checkpoint_every=0),
        # about 45 min on 2 cores: 18 runs of 48 steps x 4 x 128 tokens (24.6k tokens each) at ~270 tokens/s
        "cpu": dict(
            model="smollm2-135m", train_corpus="gutenberg-poetry", shift_corpus="python-stdlib", shift_recursive=False,
            eval_corpora=("gutenberg-poetry", "shakespeare", "python-stdlib"), seq_len=128, batch_size=4,
            micro_batch_size=4, steps=48, lr=1e-3, warmup_steps=5, eval_every=16, val_windows=16,
            n_eval_windows=32, init_loops=2, inits=("stepwise", "stepwise_fixed_start", "average", "lower", "random"),
            norm_inits=("choice", "zero"), seeded_inits=("stepwise",), seeds=(0, 1), loops=(2, 3, 5), kd_alpha=1.0,
            tasks=("book_cloze", "book_nextline", "book_code"), task_limit=40, precision="bf16", keep_models=True,
            checkpoint_every=0),
        "gpu": dict(
            model="gemma3-270m", train_corpus="gutenberg-poetry", shift_corpus="python-stdlib", shift_recursive=True,
            eval_corpora=("gutenberg-poetry", "shakespeare", "python-stdlib", "humaneval"), seq_len=512,
            batch_size=32, micro_batch_size=16, steps=2000, lr=5e-4, warmup_steps=100,
            eval_every=100, val_windows=64, n_eval_windows=256, init_loops=2,
            inits=("stepwise", "stepwise_fixed_start", "average", "lower", "random"), norm_inits=("choice", "zero"),
            seeded_inits=("stepwise", "average", "lower"), seeds=(0, 1, 2), loops=(2, 3), kd_alpha=1.0,
            tasks=("book_cloze", "book_nextline", "book_code"), task_limit=200, precision="bf16", keep_models=True,
            checkpoint_every=250),
        "paper": dict(
            model="hf:google/gemma-2-2b", train_corpus="hf:cerebras/SlimPajama-627B",
            shift_corpus="hf:HuggingFaceFW/fineweb-edu", shift_recursive=True,
            eval_corpora=("hf:cerebras/SlimPajama-627B",), seq_len=2048, batch_size=1024, micro_batch_size=8,
            steps=7500, lr=2e-4, warmup_steps=200, eval_every=500, val_windows=256,
            n_eval_windows=1024, init_loops=2, inits=("stepwise", "average", "lower", "random"),
            norm_inits=("choice", "zero"), seeded_inits=(), seeds=(0,), loops=(2, 3), kd_alpha=1.0,
            tasks=("lambada_openai", "hellaswag", "piqa", "winogrande", "arc_easy", "arc_challenge", "openbookqa"),
            task_limit=100000, precision="bf16", keep_models=True, checkpoint_every=500),
    }

    def __post_init__(self) -> None:
        bad = [i for i in self.inits if i not in looping.INITS]
        if bad:
            raise ConfigError(f"inits {bad} unknown; choose from {list(looping.INITS)}")
        bad = [n for n in self.norm_inits if n not in looping.NORM_INITS]
        if bad:
            raise ConfigError(f"norm_inits {bad} unknown; choose from {list(looping.NORM_INITS)}")
        if not self.seeds:
            raise ConfigError("seeds must name at least one seed")
        if self.steps < 1 or self.eval_every < 1:
            raise ConfigError(f"steps={self.steps} and eval_every={self.eval_every} must be >= 1")
        if self.precision not in ("no", "bf16"):
            raise ConfigError(f"precision={self.precision!r}: use 'bf16' or 'no'")
        if self.train_corpus not in self.eval_corpora:
            raise ConfigError(f"eval_corpora {self.eval_corpora} must include train_corpus {self.train_corpus!r}")

    def check_model(self, n_layers: int) -> None:
        """Every loop count must divide the source's layers; raised before any training."""
        valid = looping.valid_loops(n_layers)
        bad = [b for b in {self.init_loops, *self.loops} if b not in valid]
        if bad:
            raise ConfigError(f"loops {bad} do not divide the {n_layers} layers of {self.model}; valid: {valid}")

    def train_config(self, variant: Variant) -> TrainConfig:
        return TrainConfig(lr=self.lr, schedule="cosine",
                           warmup_steps=self.warmup_steps, max_steps=self.steps, batch_size=self.batch_size,
                           micro_batch_size=self.micro_batch_size, eval_every=self.eval_every,
                           eval_batches=max(1, self.val_windows // self.batch_size),
                           checkpoint_every=self.checkpoint_every, seed=variant.seed,
                           kd_alpha=self.kd_alpha if variant.kd else 0.0, mixed_precision=self.precision,
                           checkpoint_final=False)


@dataclass(frozen=True)
class Variant:
    """One uptraining run (see the module docstring); `n_loops` sizes truncated/scratch models as K = L / B."""

    kind: str
    n_loops: int = 1
    init: str = "stepwise"
    norm_init: str = "average"
    corpus: str = ""  # "" = the config's train_corpus
    kd: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"variant kind {self.kind!r} unknown; choose from {list(KINDS)}")

    @property
    def name(self) -> str:
        base = {"full": "full", "truncated": f"truncated-B{self.n_loops}", "scratch": f"scratch-B{self.n_loops}",
                "recursive": f"recursive-B{self.n_loops}-{self.init}"}[self.kind]
        if self.norm_init != "average":
            base += f"-norm_{self.norm_init}"
        if self.kd:
            base += "-kd"
        if self.corpus:
            base += f"@{self.corpus}"
        return f"{base}-s{self.seed}"

    def build(self, source: Decoder) -> Decoder:
        n_layers = source.config.n_layers
        if self.kind == "full":
            return looping.convert(source, Looping(1))
        if self.kind == "recursive":
            return looping.convert(source, Looping(self.n_loops, init=self.init, norm_init=self.norm_init,
                                                   seed=self.seed))
        if self.kind == "truncated":
            return looping.truncated(source, n_layers // self.n_loops)
        return looping.from_scratch(source, n_layers // self.n_loops, seed=self.seed)


def variants(cfg: RecursiveConfig) -> list[Variant]:
    """Every run of the chapter, in dependency order (the full model first: it is the distillation teacher)."""
    first = cfg.seeds[0]
    runs = [Variant("full", seed=first)]
    for init in cfg.inits:
        for seed in cfg.seeds if init in cfg.seeded_inits else (first,):
            runs.append(Variant("recursive", cfg.init_loops, init, seed=seed))
    runs += [Variant("recursive", cfg.init_loops, "average", norm_init=n, seed=first) for n in cfg.norm_inits]
    runs += [Variant("recursive", b, "stepwise", seed=first) for b in cfg.loops if b != cfg.init_loops]
    for b in cfg.loops:
        runs += [Variant("truncated", b, seed=first), Variant("scratch", b, seed=first)]
    if cfg.kd_alpha > 0:
        runs += [Variant("recursive", cfg.init_loops, "stepwise", kd=True, seed=s) for s in cfg.seeds]
    runs.append(Variant("full", corpus=cfg.shift_corpus, seed=first))
    if cfg.shift_recursive:
        runs.append(Variant("recursive", cfg.init_loops, "stepwise", corpus=cfg.shift_corpus, seed=first))
    names = [v.name for v in runs]
    return [v for i, v in enumerate(runs) if v.name not in names[:i]]


def source_config(model: str):
    """The DecoderConfig of an embedded checkpoint, read from its config.json (no weights loaded)."""
    from transformers import AutoConfig

    from rlib.model import DecoderConfig

    return DecoderConfig.from_hf(AutoConfig.from_pretrained(assets.checkpoint_dir(model)))


# ---- evaluation ---------------------------------------------------------------------------------------------


def eval_windows(cfg: RecursiveConfig) -> dict[str, torch.Tensor]:
    """The fixed test windows [N, T] of every evaluation corpus (the same for every variant)."""
    return {c: data.heldout_windows(c, cfg.model, cfg.seq_len, cfg.n_eval_windows, split="test", seed=0)
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
                                    tokenizer=tokenizer or assets.load_tokenizer(cfg.model), dtype="auto")
        del scored
        primary = table[table["primary"]]
        for row in primary.itertuples():
            out[f"task[{row.task}]"] = 100 * row.value
        out["task_avg"] = float(np.mean([100 * v for v in primary["value"]]))
    return out


# ---- running the grid -----------------------------------------------------------------------------------------


def _train_windows(cfg: RecursiveConfig, corpus: str) -> data.PackedWindows:
    cache = data.token_cache(corpus, cfg.model, "train", progress=False)
    return data.PackedWindows(cache, cfg.seq_len, bos_id=cache.bos_id)


def _val_windows(cfg: RecursiveConfig, corpus: str) -> torch.Tensor:
    return data.heldout_windows(corpus, cfg.model, cfg.seq_len, cfg.val_windows, split="validation", seed=1)


def _keeps(variant: Variant, cfg: RecursiveConfig) -> bool:
    """Which uptrained models are saved: the full model (always, when it is the distillation teacher) and, with
    `keep_models`, the main recursive model."""
    teacher = variant == Variant("full", seed=cfg.seeds[0])
    main = Variant("recursive", cfg.init_loops, "stepwise", seed=cfg.seeds[0])
    return (teacher and (cfg.kd_alpha > 0 or cfg.keep_models)) or (variant == main and cfg.keep_models)


def _scored_before(variant: Variant, cfg: RecursiveConfig) -> bool:
    """Whether the task suite also scores the model before uptraining: the rows of Table F.1 (full-size, each
    initialization at B = init_loops, reduced-size from scratch), first seed only (the inits are deterministic
    except Random, whose other seeds would add little); the norm-weight variants are judged on loss alone."""
    home = not variant.corpus and not variant.kd and variant.seed == cfg.seeds[0] and variant.norm_init == "average"
    f1_row = variant.kind == "full" or (variant.n_loops == cfg.init_loops and variant.kind in ("recursive", "scratch"))
    return home and f1_row


def run_variant(variant: Variant, cfg: RecursiveConfig, source: Decoder, folder: Path,
                windows: dict[str, torch.Tensor], teacher_dir: Path | None, key: str = "") -> dict[str, Any]:
    """Build, evaluate at step 0, uptrain, evaluate again; returns the result dict (see `run_grid`).

    Training writes into `folder/train-<key>/`, so a checkpoint left by a killed run resumes only under the
    same key; folders of other keys (stale configs or code) are removed first.
    """
    train_dir = folder / f"train-{key}"
    for stale in folder.glob("train-*"):
        if stale != train_dir:
            shutil.rmtree(stale, ignore_errors=True)
    model = variant.build(source)
    counts = counting.count_parameters(model)
    before = evaluate_model(model, cfg, {cfg.train_corpus: windows[cfg.train_corpus]},
                            tasks=_scored_before(variant, cfg))
    teacher = None
    if variant.kd:
        if teacher_dir is None or not (teacher_dir / convert.CONFIG_FILE).exists():
            raise ConfigError(f"{variant.name} distills from the uptrained full model, which is not saved yet")
        teacher = convert.load(teacher_dir)
    corpus = variant.corpus or cfg.train_corpus
    result = train(model, _train_windows(cfg, corpus), cfg.train_config(variant), train_dir,
                   val_windows=_val_windows(cfg, corpus), teacher=teacher)
    after = evaluate_model(model, cfg, windows, tasks=True)
    if _keeps(variant, cfg):
        convert.save(model, folder / "model")
    shutil.rmtree(train_dir / "checkpoint", ignore_errors=True)  # optimizer states: GBs, no longer needed
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
    """The source checkpoint as a Decoder, checked against the config's loop counts (load it once per chapter)."""
    source = convert.from_transformers(assets.load_model(cfg.model))
    cfg.check_model(source.config.n_layers)
    return source


def run_grid(cfg: RecursiveConfig, work: Path, source: Decoder, only: list[str] | None = None) -> list[dict[str, Any]]:
    """Run (or load) every variant; returns their results in `variants(cfg)` order.

    Each variant's folder `work/<name>/` holds `train-<key>/metrics.csv` (loss curves), `result.json` (written last,
    keyed by the variant, the config and the library source) and, for kept models, `model/`.
    """
    cfg.check_model(source.config.n_layers)
    windows = eval_windows(cfg)
    code = experiments.code_digest(*CODE_MODULES)
    teacher_dir = work / Variant("full", seed=cfg.seeds[0]).name / "model"
    results = []
    todo = [v for v in variants(cfg) if only is None or v.name in only]
    for variant in progress(todo, desc="variants", unit="run"):
        key = experiments.digest(variant, cfg, code)
        folder = work / variant.name
        results.append(experiments.cached(folder, key, lambda v=variant, f=folder, k=key: run_variant(
            v, cfg, source, f, windows, teacher_dir, k)))
    return results


def source_result(cfg: RecursiveConfig, source: Decoder) -> dict[str, float]:
    """The untouched source model on the same windows and tasks (the "before uptraining" full-size row)."""
    return evaluate_model(source, cfg, eval_windows(cfg), tasks=True)


# ---- tables ---------------------------------------------------------------------------------------------------


def flat(results: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per variant: its fields, unique/non-embedding parameters, and before/after metrics as columns."""
    rows = []
    for r in results:
        row = {"name": r["name"], **r["variant"], "corpus": r["corpus"],
               "unique_params": r["params"]["unique"], "non_embedding_params": r["params"]["non_embedding"],
               "tokens": r["train"]["tokens"], "tokens_per_s": r["train"]["tokens_per_s"]}
        row.update({f"before {k}": v for k, v in r["before"].items()})
        row.update({f"after {k}": v for k, v in r["after"].items()})
        rows.append(row)
    return pd.DataFrame(rows)


def _mean_std(df: pd.DataFrame, by: list[str], columns: list[str]) -> pd.DataFrame:
    grouped = df.groupby(by, sort=False)
    out = grouped[columns].mean()
    out["n_seeds"] = grouped.size()
    for col in columns:
        out[f"{col} sd"] = grouped[col].std(ddof=1)
    return out.reset_index()


def _metric_columns(df: pd.DataFrame, cfg: RecursiveConfig, when: str = "after") -> list[str]:
    cols = [f"{when} ppl[{c}]" for c in cfg.eval_corpora]
    return cols + [c for c in df.columns if c.startswith(f"{when} task")]


def init_table(results: list[dict[str, Any]], cfg: RecursiveConfig) -> pd.DataFrame:
    """Table F.1: each initialization (B = init_loops) before and after uptraining, mean over seeds, and Δ vs Random.

    Rows also give the uptrained full model and the reduced-size model trained from scratch, as in the paper.
    """
    df = flat(results)
    home = df[(df["corpus"] == cfg.train_corpus) & ~df["kd"]]
    rec = home[(home["kind"] == "recursive") & (home["n_loops"] == cfg.init_loops)].copy()
    rec["init"] = np.where(rec["norm_init"] != "average", rec["init"] + " (norm " + rec["norm_init"] + ")",
                           rec["init"])
    refs = home[(home["kind"] == "full") | ((home["kind"] == "scratch") & (home["n_loops"] == cfg.init_loops))].copy()
    refs["init"] = refs["kind"].map({"full": "full-size (uptrained)", "scratch": "reduced-size (from scratch)"})
    cols = [f"before ppl[{cfg.train_corpus}]", *[c for c in df.columns if c.startswith("before task")],
            *_metric_columns(df, cfg)]
    table = _mean_std(pd.concat([refs, rec]), ["init", "non_embedding_params"], cols)
    main = f"after ppl[{cfg.train_corpus}]"
    if "random" in set(rec["init"]):
        rand = table.loc[table["init"] == "random", main].iloc[0]
        table["Δppl vs random"] = table[main] - rand
        if "after task_avg" in table:
            table["Δtask_avg vs random"] = table["after task_avg"] - table.loc[table["init"] == "random",
                                                                               "after task_avg"].iloc[0]
    return table


def size_table(results: list[dict[str, Any]], cfg: RecursiveConfig) -> pd.DataFrame:
    """Figure 4's points: full, recursive (stepwise, each B), truncated and scratch models, after equal uptraining."""
    df = flat(results)
    home = df[(df["corpus"] == cfg.train_corpus) & ~df["kd"] & (df["seed"] == cfg.seeds[0])]
    keep = (home["kind"] == "full") | home["kind"].isin(["truncated", "scratch"]) | (
        (home["kind"] == "recursive") & (home["init"] == "stepwise") & (home["norm_init"] == "average"))
    table = home[keep][["kind", "n_loops", "non_embedding_params", "unique_params", *_metric_columns(df, cfg)]]
    return table.sort_values(["kind", "n_loops"]).reset_index(drop=True)


def kd_table(results: list[dict[str, Any]], cfg: RecursiveConfig) -> pd.DataFrame:
    """Distillation at equal tokens: the main recursive model with and without forward KL, per seed and mean."""
    df = flat(results)
    sel = df[(df["kind"] == "recursive") & (df["init"] == "stepwise") & (df["n_loops"] == cfg.init_loops)
             & (df["corpus"] == cfg.train_corpus) & (df["norm_init"] == "average")]
    sel = sel[sel["seed"].isin(cfg.seeds)]
    return _mean_std(sel, ["kd"], _metric_columns(df, cfg))


def shift_table(results: list[dict[str, Any]], cfg: RecursiveConfig, source: dict[str, float]) -> pd.DataFrame:
    """Table 2's point: the full and the main recursive model uptrained on each corpus, evaluated on all."""
    df = flat(results)
    sel = df[((df["kind"] == "full") | ((df["kind"] == "recursive") & (df["init"] == "stepwise")
                                        & (df["n_loops"] == cfg.init_loops) & (df["norm_init"] == "average")))
             & ~df["kd"] & (df["seed"] == cfg.seeds[0])]
    cols = _metric_columns(df, cfg)
    rows = [{"model": "full-size, not uptrained", "uptraining corpus": "-",
             **{c: source.get(c.removeprefix("after "), np.nan) for c in cols}}]
    for _, r in sel.iterrows():
        model = "full-size" if r["kind"] == "full" else f"recursive B={r['n_loops']}"
        rows.append({"model": model, "uptraining corpus": r["corpus"], **{c: r[c] for c in cols}})
    return pd.DataFrame(rows)


def curve_labels(runs: list[Variant], cfg: RecursiveConfig, group: str) -> dict[str, str]:
    """Variant name -> legend label for one loss-curve figure: "inits" (Fig. 5 / F.2) or "ablations" (Fig. F.1)."""
    labels = {}
    for v in runs:
        home = not v.corpus and not v.kd
        if not home:
            continue
        if group == "inits":
            if v.kind == "full":
                labels[v.name] = "full-size"
            elif v.kind == "scratch" and v.n_loops == cfg.init_loops:
                labels[v.name] = "reduced-size, scratch"
            elif (v.kind == "recursive" and v.n_loops == cfg.init_loops and v.norm_init == "average"
                  and v.init != "stepwise_fixed_start"):
                labels[v.name] = v.init
        elif group == "ablations" and v.kind == "recursive" and v.n_loops == cfg.init_loops:
            if v.init in ("stepwise", "stepwise_fixed_start") and v.seed == cfg.seeds[0]:
                labels[v.name] = {"stepwise": "stepwise, fixed ends", "stepwise_fixed_start": "stepwise, fixed start"}[
                    v.init]
            elif v.init == "average" and v.seed == cfg.seeds[0]:
                labels[v.name] = f"average, norm {v.norm_init}"
    if group not in ("inits", "ablations"):
        raise ValueError(f"group={group!r}: use 'inits' or 'ablations'")
    return labels


def loss_curves(work: Path, results: list[dict[str, Any]]) -> pd.DataFrame:
    """step, tokens, loss (training, logged every step), val_loss (every eval_every) per variant name."""
    frames = []
    for r in results:
        path = work / r["name"] / r["train_dir"] / "metrics.csv"
        if path.exists():
            frames.append(pd.read_csv(path).assign(variant=r["name"]))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def memory_table(cfg: RecursiveConfig, source: Decoder, batch: int = 1) -> pd.DataFrame:
    """Parameter MiB and fresh-process peak RSS at inference of the source model and its stepwise B-loop models."""
    from rlib import memory

    models = {"full-size (B=1)": source}
    for b in sorted(set(cfg.loops) | {cfg.init_loops}):
        models[f"recursive B={b}"] = looping.convert(source, Looping(b))
    table = memory.measure(models, batch=batch, seq_len=cfg.seq_len)
    counts = [counting.count_parameters(m)["unique"] for m in models.values()]
    return table.assign(unique_params=counts)


def speed_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    """Uptraining tokens per second per model kind and loop count (mean over runs; distillation runs apart)."""
    df = flat(results)
    df["wall_s"] = df["tokens"] / df["tokens_per_s"]
    return df.groupby(["kind", "n_loops", "kd"], sort=False).agg(
        runs=("name", "count"), tokens_per_s=("tokens_per_s", "mean"), wall_s=("wall_s", "mean")).reset_index()


def headline(results: list[dict[str, Any]], cfg: RecursiveConfig) -> dict[str, float]:
    """metrics.json entries: held-out perplexity on the uptraining corpus after uptraining, per run."""
    key = f"ppl[{cfg.train_corpus}]"
    return {f"ppl_after/{r['name']}": round(r["after"][key], 4) for r in results}


# ---- claims ---------------------------------------------------------------------------------------------------


def claims_table(results: list[dict[str, Any]], cfg: RecursiveConfig, wide_margin: float = 0.1) -> pd.DataFrame:
    """The chapter's claims (issue 4), each with the numbers measured here and whether it held.

    Quality is held-out NLL (nats/token) on the uptraining corpus's test split after equal uptraining; seeds are
    averaged where a variant has several, and the spread (max - min over seeds) is reported beside the margin.
    """
    df = flat(results)
    col = f"after nll[{cfg.train_corpus}]"
    home = df[(df["corpus"] == cfg.train_corpus) & (df["norm_init"] == "average")]
    rec = home[(home["kind"] == "recursive") & (home["n_loops"] == cfg.init_loops) & ~home["kd"]]
    by_init = rec.groupby("init")[col].agg(["mean", "min", "max", "count"])
    rows = []

    def add(claim: str, held: bool | None, evidence: str) -> None:
        rows.append({"claim": claim, "held": {True: "held", False: "not held", None: "not measured"}[held],
                     "evidence": evidence})

    pretrained = [i for i in by_init.index if i in PRETRAINED_INITS]
    if "random" in by_init.index and pretrained:
        rand = by_init.loc["random", "mean"]
        gaps = {i: rand - by_init.loc[i, "mean"] for i in pretrained}
        add(f"Every pretrained initialization beats Random by a wide margin (> {wide_margin} nats)",
            all(g > wide_margin for g in gaps.values()),
            "; ".join(f"{i}: {by_init.loc[i, 'mean']:.3f} ({gaps[i]:+.3f} vs random {rand:.3f})" for i in pretrained))
    else:
        add("Every pretrained initialization beats Random by a wide margin", None, "random or pretrained inits missing")

    if "stepwise" in by_init.index and len(pretrained) > 1:
        others = {i: by_init.loc[i, "mean"] for i in pretrained if i != "stepwise"}
        best_other = min(others, key=others.get)
        step = by_init.loc["stepwise"]
        spread = max(float(by_init.loc[i, "max"] - by_init.loc[i, "min"]) for i in ["stepwise", best_other])
        add("Stepwise reaches the lowest loss among the initializations (no LoRA)",
            bool(step["mean"] < others[best_other]),
            f"stepwise {step['mean']:.4f} (n={int(step['count'])}) vs best other {best_other} "
            f"{others[best_other]:.4f}; margin {others[best_other] - step['mean']:+.4f}, seed spread {spread:.4f}; "
            + ", ".join(f"{i} {v:.4f}" for i, v in sorted(others.items(), key=lambda kv: kv[1])))

    first = home[home["seed"] == cfg.seeds[0]]
    pick = lambda kind, b, init="stepwise": first[(first["kind"] == kind) & (first["n_loops"] == b) & ~first["kd"]  # noqa: E731
                                                  & ((first["init"] == init) if kind == "recursive" else True)]
    rec_main, trunc, scratch = (pick("recursive", cfg.init_loops), pick("truncated", cfg.init_loops),
                                pick("scratch", cfg.init_loops))
    if len(rec_main) and len(trunc) and len(scratch):
        r, t, s = (float(x[col].iloc[0]) for x in (rec_main, trunc, scratch))
        add(f"The recursive model (B={cfg.init_loops}) beats the same-size truncated and from-scratch models",
            r < t and r < s, f"recursive {r:.4f} vs truncated {t:.4f} vs scratch {s:.4f}")

    full = first[(first["kind"] == "full") & ~first["kd"]]
    chain = [(1, float(full[col].iloc[0]))] if len(full) else []
    for b in sorted(set(cfg.loops) | {cfg.init_loops}):
        sel = pick("recursive", b)
        if len(sel):
            chain.append((b, float(sel[col].iloc[0])))
    if len(chain) >= 3:
        monotone = all(a[1] < b[1] for a, b in zip(chain, chain[1:]))
        add("More loops (fewer unique parameters) cost quality monotonically", monotone,
            " < ".join(f"B={b}: {v:.4f}" for b, v in chain))

    kd = home[(home["kind"] == "recursive") & (home["init"] == "stepwise") & (home["n_loops"] == cfg.init_loops)]
    with_kd, without = kd[kd["kd"]][col], kd[~kd["kd"] & kd["seed"].isin(cfg.seeds)][col]
    if len(with_kd) and len(without):
        add("Distillation from the uptrained full model helps at equal tokens", bool(with_kd.mean() < without.mean()),
            f"with KD {with_kd.mean():.4f} (seeds {', '.join(f'{v:.4f}' for v in with_kd)}) vs without "
            f"{without.mean():.4f} (seeds {', '.join(f'{v:.4f}' for v in without)})")
    return pd.DataFrame(rows)
