"""Chapter 01's settings: the typed config per profile and the grid of uptraining runs (`Variant`).

Relaxed Recursive Transformers (paper 000) Sec. 3.1-3.4 and 3.6, Appendices D and F. Every run of the chapter is a
`Variant`: what model is built from the source checkpoint, what it is uptrained on, with or without distillation,
with which seed:

    full        the source model itself, uptrained the same way (the paper's "full-size" reference and KD teacher)
    recursive   `rlib.looping.convert` with B loops, an initialization, cycle sharing
    truncated   the first K = L/B layers of the source, no looping (same unique size as a B-loop model)
    scratch     K = L/B layers, every weight random: the paper's "reduced-size model pretrained from scratch"
"""

from __future__ import annotations

from dataclasses import dataclass

from rlib import looping, sources
from rlib.config import ConfigError, Preset
from rlib.looping import Looping
from rlib.model import Decoder
from rlib.precision import resolve as resolve_precision
from rlib.train import TrainConfig

__all__ = ["EXTENSION_FIELDS", "KINDS", "PRETRAINED_INITS", "RecursiveConfig", "Variant", "source_config", "variants"]


KINDS = ("full", "recursive", "truncated", "scratch")


PRETRAINED_INITS = ("stepwise", "stepwise_fixed_start", "average", "lower", "upper", "random_layers")


# RecursiveConfig fields that only add runs to the grid, each run carrying its own value in its `Variant` (n_loops,
# init, norm_init, kd, seed): not part of any run's key, so the cpu-long profile's extension of the cpu grid (B = 3
# and 5, Fig. F.1's ablations, Table I.1's distillation) reads cpu's runs back and trains only the added ones
EXTENSION_FIELDS = ("loops", "norm_inits", "b3_inits", "extra_inits", "kd_seeds")


@dataclass(frozen=True)
class RecursiveConfig(Preset):
    model: str  # the source checkpoint: an asset name, hf:ORG/NAME or a folder (rlib.sources: llama, qwen2, qwen3,
    # mistral or gemma3_text transformers checkpoints, or a book model folder)
    train_corpus: str  # uptraining data (the paper: SlimPajama)
    shift_corpus: str  # a second uptraining corpus for the data-shift comparison (Table 2's point)
    shift_recursive: bool  # uptrain the main recursive model on shift_corpus too (the paper shifts the full model)
    eval_corpora: tuple[str, ...]  # held-out perplexity on each; the uptraining corpora should be among them
    seq_len: int
    batch_size: int  # windows per optimizer step
    micro_batch_size: int
    steps: int  # optimizer steps of uptraining, the same for every variant (equal tokens)
    lr: float  # peak learning rate of every run, pretrained or random start (the paper: one recipe for all; cosine).
    # The cpu value comes from `python -m rlib.recursive.lr_sweep` (validation loss, figures/01_*/lr_sweep.csv)
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
    tasks: tuple[str, ...]  # local task suite, scored before and after uptraining on the rows a table or claim reads
    # (Table F.1's: the full-size model, each init at B = init_loops, scratch; and the data-shift pair)
    task_limit: int  # items per task
    precision: str  # "auto" (bf16 where the machine computes it natively, else fp32), "bf16" or "no" (rlib.precision)
    keep_models: bool  # save the uptrained full and main recursive models (for chapter 02 and lm-eval)
    checkpoint_every: int  # steps between training checkpoints (resume mid-run after a kill); 0 = none (a killed
    # run restarts; finished runs are cached either way)
    step0_tasks: bool = True  # also score the task suite at step 0 (Table F.1's rows; the paper reports only the
    # uptrained models, so this column is the book's own)
    b3_inits: tuple[str, ...] = ()  # Table F.1's B = 3 rows: these inits also uptrained at B = 3, first seed; run only
    # when 3 is in `loops` (Stepwise B = 3 is their reference), so overriding `loops` drops them with it
    extra_inits: tuple[str, ...] = ()  # inits uptrained at B = init_loops beside `inits`, first seed, as an extension
    # (Fig. F.1(a)'s Fixed-start Stepwise in cpu-long)
    kd_seeds: tuple[int, ...] = ()  # seeds of Table I.1's distilled Stepwise model (kd_alpha > 0), each among `seeds`

    UNKEYED_FIELDS = EXTENSION_FIELDS  # left out of the run cache's key (Preset.grid_context)

    PRESETS = {
        "smoke": dict(
            model="smollm2-135m", train_corpus="shakespeare", shift_corpus="python-stdlib", shift_recursive=False,
            eval_corpora=("shakespeare", "python-stdlib"), seq_len=64, batch_size=2, micro_batch_size=2, steps=3,
            lr=1e-3, warmup_steps=1, eval_every=3, val_windows=2, n_eval_windows=2, init_loops=2,
            inits=("stepwise", "random"), norm_inits=(), seeded_inits=(), seeds=(0,), loops=(2, 3), kd_alpha=1.0,
            tasks=("book_nextline",), task_limit=2, precision="auto", keep_models=False, checkpoint_every=0,
            b3_inits=("random",), kd_seeds=(0,)),
        # 9 runs of 48 steps x 4 x 128 tokens (24.6k tokens each) at ~200 tokens/s; B = 3 and 5, Fig. F.1's
        # ablations (Fixed-start, the norm variants) and Table I.1's distillation pair are cpu-long's (below), so that
        # chapters 01 + 02 fit issue 23's hour (the five runs moved took 15.2 min on 2026-12-01's EPYC)
        "cpu": dict(
            model="smollm2-135m", train_corpus="gutenberg-poetry", shift_corpus="python-stdlib", shift_recursive=False,
            eval_corpora=("gutenberg-poetry", "shakespeare", "python-stdlib"), seq_len=128, batch_size=4,
            micro_batch_size=4, steps=48, lr=1e-3, warmup_steps=5, eval_every=16, val_windows=16,
            n_eval_windows=32, init_loops=2, inits=("stepwise", "average", "lower", "random"),
            norm_inits=(), seeded_inits=("stepwise",), seeds=(0, 1), loops=(2,), kd_alpha=1.0,
            tasks=("book_cloze", "book_nextline", "book_code"), task_limit=40, precision="auto", keep_models=True,
            checkpoint_every=0, step0_tasks=False),
        "gpu": dict(
            model="gemma3-270m", train_corpus="gutenberg-poetry", shift_corpus="python-stdlib", shift_recursive=True,
            eval_corpora=("gutenberg-poetry", "shakespeare", "python-stdlib", "humaneval"), seq_len=512,
            batch_size=32, micro_batch_size=16, steps=2000, lr=5e-4, warmup_steps=100,
            eval_every=100, val_windows=64, n_eval_windows=256, init_loops=2,
            inits=("stepwise", "stepwise_fixed_start", "average", "lower", "random"), norm_inits=("choice", "zero"),
            seeded_inits=("stepwise", "average", "lower"), seeds=(0, 1, 2), loops=(2, 3), kd_alpha=1.0,
            tasks=("book_cloze", "book_nextline", "book_code"), task_limit=200, precision="auto", keep_models=True,
            checkpoint_every=250, kd_seeds=(0, 1, 2)),
        "paper": dict(
            model="hf:google/gemma-2-2b", train_corpus="hf:cerebras/SlimPajama-627B",
            shift_corpus="hf:HuggingFaceFW/fineweb-edu", shift_recursive=True,
            eval_corpora=("hf:cerebras/SlimPajama-627B",), seq_len=2048, batch_size=1024, micro_batch_size=8,
            steps=7500, lr=2e-4, warmup_steps=200, eval_every=500, val_windows=256,
            n_eval_windows=1024, init_loops=2, inits=("stepwise", "average", "lower", "random"),
            norm_inits=("choice", "zero"), seeded_inits=(), seeds=(0,), loops=(2, 3), kd_alpha=1.0,
            tasks=("lambada_openai", "hellaswag", "piqa", "winogrande", "arc_easy", "arc_challenge", "openbookqa"),
            task_limit=100000, precision="auto", keep_models=True, checkpoint_every=500, kd_seeds=(0,)),
    }
    # cpu-long: the cpu grid (read back from cpu's run folders) plus B = 3 and 5 (Fig. 4's size sweep, Table F.1's B = 3
    # rows of every init, each B with its truncated and scratch models), Fig. F.1(a)'s Fixed-start Stepwise, Fig.
    # F.1(b)'s norm variants of the Average init and Table I.1's distilled Stepwise pair
    PRESETS["cpu-long"] = {**PRESETS["cpu"], "loops": (2, 3, 5), "norm_inits": ("choice", "zero"),
                           "b3_inits": ("average", "lower", "random"), "extra_inits": ("stepwise_fixed_start",),
                           "kd_seeds": (0, 1)}

    @property
    def b3_rows(self) -> tuple[str, ...]:
        """The inits of Table F.1's B = 3 rows that run: `b3_inits` when 3 is in `loops` (Stepwise B = 3, their
        reference, comes from the size sweep), else none."""
        return self.b3_inits if 3 in self.loops else ()

    def __post_init__(self) -> None:
        sources.locate(self.model)  # a name that is nothing fails here, naming it
        bad = [i for i in self.inits if i not in looping.INITS]
        if bad:
            raise ConfigError(f"inits {bad} unknown; choose from {list(looping.INITS)}")
        bad = [i for i in self.b3_inits if i not in looping.INITS]
        if bad:
            raise ConfigError(f"b3_inits {bad} unknown; choose from {list(looping.INITS)}")
        bad = [i for i in self.extra_inits if i not in looping.INITS]
        if bad:
            raise ConfigError(f"extra_inits {bad} unknown; choose from {list(looping.INITS)}")
        bad = [s for s in self.kd_seeds if s not in self.seeds]
        if bad:
            raise ConfigError(f"kd_seeds {bad} are not among seeds {list(self.seeds)}: a distilled model is compared "
                              f"with the plain one of its seed; add them to seeds or drop them")
        bad = [n for n in self.norm_inits if n not in looping.NORM_INITS]
        if bad:
            raise ConfigError(f"norm_inits {bad} unknown; choose from {list(looping.NORM_INITS)}")
        if not self.seeds:
            raise ConfigError("seeds must name at least one seed")
        if self.steps < 1 or self.eval_every < 1:
            raise ConfigError(f"steps={self.steps} and eval_every={self.eval_every} must be >= 1")
        object.__setattr__(self, "precision", resolve_precision(self.precision))  # "auto" -> bf16 or fp32 here
        if self.train_corpus not in self.eval_corpora:
            raise ConfigError(f"eval_corpora {self.eval_corpora} must include train_corpus {self.train_corpus!r}")

    @property
    def tokenizer(self) -> str:
        """The source's tokenizer (asset name or folder): every corpus of the chapter is tokenized with it."""
        return sources.tokenizer_of(self.model)

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
    for init in cfg.extra_inits:
        for seed in cfg.seeds if init in cfg.seeded_inits else (first,):
            runs.append(Variant("recursive", cfg.init_loops, init, seed=seed))
    runs += [Variant("recursive", cfg.init_loops, "average", norm_init=n, seed=first) for n in cfg.norm_inits]
    runs += [Variant("recursive", b, "stepwise", seed=first) for b in cfg.loops if b != cfg.init_loops]
    runs += [Variant("recursive", 3, init, seed=first) for init in cfg.b3_rows]  # Table F.1's B = 3 rows
    for b in cfg.loops:
        runs += [Variant("truncated", b, seed=first), Variant("scratch", b, seed=first)]
    if cfg.kd_alpha > 0:
        runs += [Variant("recursive", cfg.init_loops, "stepwise", kd=True, seed=s) for s in cfg.kd_seeds]
    runs.append(Variant("full", corpus=cfg.shift_corpus, seed=first))
    if cfg.shift_recursive:
        runs.append(Variant("recursive", cfg.init_loops, "stepwise", corpus=cfg.shift_corpus, seed=first))
    names = [v.name for v in runs]
    return [v for i, v in enumerate(runs) if v.name not in names[:i]]


def source_config(model: str):
    """The DecoderConfig of a source checkpoint (asset name, hf:ORG/NAME or folder), from its config alone: an
    unsupported model type, rope scaling or layer type is refused here naming the field (`rlib.sources`)."""
    return sources.source_config(model)
