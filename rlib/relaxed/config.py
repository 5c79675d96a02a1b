"""Chapter 02's settings: the typed config per profile and the grid of training runs (`RelaxedVariant`).

Relaxed Recursive Transformers (paper 000) Sec. 2.3-2.4, 3.5-3.8, Appendices G, H, I, J, K. Every training run is a
`RelaxedVariant` of the source model converted with B = `n_loops` (cycle sharing): an initialization (Stepwise /
Average / Lower), a LoRA rank (0 = the plain recursive model) and LoRA init (SVD of the residual or standard
"zero"), or a prefix length (App. H); optionally distillation from chapter 01's uptrained full model, longer
uptraining, and an early-exit schedule applied either during uptraining ("co") or afterwards on fresh tokens
("post", starting from the uptrained model of the same variant without exits).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from rlib import looping, sources
from rlib.config import ConfigError, Preset
from rlib.precision import resolve as resolve_precision
from rlib.train import TrainConfig

__all__ = ["EXITS", "EXTENSION_FIELDS", "HALVINGS", "PHASES", "SERVING_FIELDS", "RelaxedConfig", "RelaxedVariant",
           "main_variants", "second_architecture", "second_variants", "variants"]


EXITS = ("none", "weighted", "aggressive", "aggressive_kd")


PHASES = ("uptrain", "co", "post")

# RelaxedConfig fields of the throughput study only (`rlib.relaxed.throughput`): not part of the training runs' key
SERVING_FIELDS = ("throughput_requests", "prompt_len", "new_tokens", "max_batch", "exit_precision",
                  "throughput_repeats", "workload_corpus", "max_batch_cap", "exit_fit_windows", "long_context",
                  "pass_repeats")


# RelaxedConfig fields that only add runs to the grid, each run carrying its own value in its `RelaxedVariant` (rank,
# lora_init, coef, steps_factor, prefix, phase): not part of any run's key, so the cpu-long profile's extension of the
# cpu grid reads cpu's runs back and trains only the added ones
EXTENSION_FIELDS = ("high_ranks", "zero_inits", "exit_coefs", "long_factor", "prefix_lengths", "co_training",
                    "served_ranks", "freeze_head_rank", "halved_groups", "halved_seeds", "second_model", "kd_row")

# Table G.1's rows: the module groups (`rlib.relax.RANK_GROUPS`) whose LoRA rank is halved together, the others kept
HALVINGS = {"q_o": ("q", "o"), "kv": ("kv",), "ffn": ("ffn",), "attn": ("q", "kv", "o")}


@dataclass(frozen=True)
class RelaxedConfig(Preset):
    """Chapter 02's settings per profile (fields shared with chapter 01's config keep their meaning)."""

    model: str  # the source checkpoint: asset name, hf:ORG/NAME or folder (as chapter 01's; rlib.sources)
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
    kd_alpha: float  # distillation weight of Table I.1's KD rows (with kd_row; 0 = no KD rows)
    long_factor: int  # the "longer uptraining" row: this many times the steps (1 = none)
    precision: str  # "auto" (bf16 where the machine computes it natively, else fp32), "bf16" or "no" (rlib.precision)
    throughput_requests: int  # paragraphs of `workload_corpus` served (`rlib.serving.workload`)
    prompt_len: int  # the tokens before each paragraph (the paper's prefix 64 in Tables K.3 / K.4)
    new_tokens: int  # the reply cap (the paper's decode 256)
    max_batch: int  # the vanilla model's batch; it sets the memory budget every model is served under (Table K.3)
    exit_precision: float  # exit rules are calibrated to this agreement with the last loop on held-out text
    throughput_repeats: int = 1  # engine runs per setting; the table keeps the median run (timing noise)
    exit_coefs: tuple[float, ...] = ()  # Table J.1's sweep: further c for the recursive model's Agg post-training
    served_ranks: tuple[int, ...] = ()  # further relaxed (Average, SVD) ranks post-trained with Agg + KD and served
    workload_corpus: str = "shakespeare"  # paragraphs = speakers' turns: real reply-length spread
    max_batch_cap: int = 64  # the most slots any model gets, whatever the budget allows
    exit_fit_windows: int = 32  # teacher-forced windows to fit (train split) and calibrate (validation) exit rules
    long_context: int = 0  # also time passes at this position (0: none), for the short- vs long-context LoRA share
    pass_repeats: int = 5  # timed passes per batch (median)
    high_ranks: tuple[int, ...] = ()  # further SVD ranks uptrained for every init: Fig. G.1's high rank and Fig.
    # G.3's right arm up to full rank (a quarter of full rank is the paper's 512 of 2048; capped per map)
    freeze_head_rank: int = 0  # Table J.1's Freeze row: the recursive model frozen, a LoRA of this rank on the exit
    # head trained on the loop-1 exit (0: no such run; the paper: 128)
    halved_groups: tuple[str, ...] = ()  # Table G.1: one run of the main relaxed model per HALVINGS key named here,
    # with those groups' LoRA rank halved
    halved_seeds: tuple[int, ...] = (0,)  # seeds of Table G.1's runs (the all-equal reference too)
    second_model: str = ""  # Table J.3: the main models' uptraining and early-exit post-training again on this source
    # (the book's second architecture; "" = none)
    kd_row: bool = True  # Table I.1's distilled relaxed model (and with long_factor > 1, Fig. 7(b)'s KD + longer run)
    tasks: tuple[str, ...] = ()  # chapter 02 judges quality by perplexity; tasks are optional
    task_limit: int = 0
    step0_windows: int = 0  # held-out windows of the step-0 curve, the first of the evaluation's (0 = all
    # n_eval_windows): its claims compare perplexities that differ by orders of magnitude, and full rank against the
    # source on the same windows, exactly

    # left out of the run cache's key (Preset.grid_context): changing the workload or the exit rules re-serves the kept
    # models without retraining any, and cpu-long's added runs leave cpu's keys as they are
    UNKEYED_FIELDS = SERVING_FIELDS + EXTENSION_FIELDS + ("step0_windows",)  # the step-0 curve trains nothing

    PRESETS = {
        "smoke": dict(
            model="smollm2-135m", train_corpus="shakespeare", eval_corpora=("shakespeare",), n_loops=2, seq_len=64,
            batch_size=2, micro_batch_size=2, steps=2, post_steps=2, lr=1e-3, warmup_steps=1, eval_every=2,
            val_windows=2, n_eval_windows=2, step0_ranks=(0, 8), inits=("stepwise", "average"), ranks=(8,),
            rank_inits=("stepwise", "average"),
            extra_ranks=(), zero_inits=("average",), prefix_lengths=(4,), exit_schedules=("none", "aggressive_kd"),
            exit_coef=0.1,
            co_training=False, kd_alpha=0.0, long_factor=1, precision="auto", exit_coefs=(0.3,), throughput_requests=4,
            prompt_len=8, new_tokens=6, max_batch=2, exit_precision=0.5, max_batch_cap=4, exit_fit_windows=2,
            pass_repeats=1, freeze_head_rank=4, halved_groups=("ffn",), second_model="gemma3-270m"),
        # 8 uptraining runs of 48 steps x 4 x 128 tokens (3 of them chapter 01's models), 8 post-training runs of 16
        # steps, the throughput study on 64 requests (1936 reply tokens, reply mean 30; 96 requests gave 2810 and 29,
        # and each throughput claim held at 1.36x its threshold or more); Fig. 6(c) / G.2's zero LoRA inits, Table
        # I.1's distilled row, Table J.1's coefficient sweep and co-training, longer uptraining, prefix relaxation and
        # the second served rank are cpu-long's (below), so that chapters 01 + 02 fit issue 23's hour
        "cpu": dict(
            model="smollm2-135m", train_corpus="gutenberg-poetry", eval_corpora=("gutenberg-poetry", "python-stdlib"),
            n_loops=2, seq_len=128, batch_size=4, micro_batch_size=4, steps=48, post_steps=16, lr=1e-3,
            warmup_steps=5, eval_every=16, val_windows=16, n_eval_windows=24, step0_ranks=(0, 4, 16, 64, 192),
            inits=("stepwise", "average", "lower"), ranks=(16, 64), rank_inits=("stepwise", "average"), extra_ranks=(),
            zero_inits=(), prefix_lengths=(),
            exit_schedules=("none", "weighted", "aggressive", "aggressive_kd"),
            exit_coef=0.1, co_training=False, kd_alpha=1.0, long_factor=1, precision="auto",
            exit_coefs=(), served_ranks=(), throughput_requests=64, prompt_len=64, new_tokens=256,
            max_batch=8, exit_precision=0.9, throughput_repeats=1, exit_fit_windows=32, long_context=1024,
            kd_row=False, step0_windows=8),
        "gpu": dict(
            model="gemma3-270m", train_corpus="gutenberg-poetry", eval_corpora=("gutenberg-poetry", "python-stdlib"),
            n_loops=2, seq_len=512, batch_size=32, micro_batch_size=16, steps=2000, post_steps=500, lr=5e-4,
            warmup_steps=100, eval_every=100, val_windows=64, n_eval_windows=256, step0_ranks=(0, 8, 32, 128, 256),
            inits=("stepwise", "average", "lower"), ranks=(32, 128), rank_inits=("stepwise", "average", "lower"),
            extra_ranks=(256, 512),
            zero_inits=("average", "lower"), prefix_lengths=(64, 256),
            exit_schedules=("none", "weighted", "aggressive", "aggressive_kd"),
            exit_coef=0.1, co_training=True, kd_alpha=1.0, long_factor=2, precision="auto",
            throughput_requests=1024, prompt_len=64, new_tokens=256, max_batch=64, exit_precision=0.9,
            throughput_repeats=3, max_batch_cap=512, exit_fit_windows=128, long_context=2048, freeze_head_rank=128,
            halved_groups=tuple(HALVINGS), halved_seeds=(0, 1, 2), second_model="smollm2-135m"),
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
            kd_alpha=1.0, long_factor=4, precision="auto", throughput_requests=20000, prompt_len=64,
            new_tokens=256, max_batch=111, exit_precision=0.9, max_batch_cap=1024, exit_fit_windows=256,
            long_context=2560, workload_corpus="hf:cerebras/SlimPajama-627B"),
    }
    # cpu-long: the cpu grid (read back from cpu's run folders) plus every init uptrained at a quarter of full rank
    # (SmolLM2's d = 576: 144, the paper's 512 of 2048) and at full rank, for Fig. G.1 and Fig. G.3's U; Stepwise
    # with zero LoRA init (Fig. G.2), prefix relaxation (Table H.1), 2x longer uptraining of the recursive Stepwise
    # model (Table I.1's row) and of the relaxed one, alone and with KD (Fig. 7(b)), Table J.1's coefficient sweep,
    # co-training and Freeze rows, and a second relaxed rank post-trained and served (Tables K.1 / K.2)
    PRESETS["cpu-long"] = {**PRESETS["cpu"], "high_ranks": (144, 576), "zero_inits": ("stepwise", "average", "lower"),
                           "freeze_head_rank": 128, "halved_groups": tuple(HALVINGS), "halved_seeds": (0, 1, 2),
                           "second_model": "gemma3-270m",
                           "prefix_lengths": (64,), "long_factor": 2, "exit_coefs": (0.3, 0.05, 0.01),
                           "co_training": True, "served_ranks": (16,), "kd_row": True}

    def __post_init__(self) -> None:
        sources.locate(self.model)  # a name that is nothing fails here, naming it
        if self.step0_windows < 0:
            raise ConfigError(f"step0_windows={self.step0_windows} must be >= 1, or 0 for every evaluation window")
        if self.second_model:
            sources.locate(self.second_model)
            if self.second_model == self.model:
                raise ConfigError(f"second_model={self.second_model!r} is the main model; Table J.3 needs another "
                                  "architecture (or \"\" for none)")
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
        if any(r < 1 for r in self.ranks + self.extra_ranks + self.high_ranks):
            raise ConfigError(f"ranks {self.ranks + self.extra_ranks + self.high_ranks} must be >= 1 (rank 0 is the "
                              "recursive model)")
        object.__setattr__(self, "precision", resolve_precision(self.precision))  # "auto" -> bf16 or fp32 here
        bad = [c for c in self.exit_coefs if not 0 < c <= 1]
        if bad:
            raise ConfigError(f"exit_coefs {bad} must lie in (0, 1] (the paper: 0.3, 0.1, 0.05, 0.01)")
        bad = [r for r in self.served_ranks if r not in self.ranks + self.extra_ranks]
        if bad:
            raise ConfigError(f"served_ranks {bad} must be uptrained ranks (ranks or extra_ranks: "
                              f"{self.ranks + self.extra_ranks})")
        bad = [g for g in self.halved_groups if g not in HALVINGS]
        if bad:
            raise ConfigError(f"halved_groups {bad} unknown; choose from {list(HALVINGS)} (Table G.1's rows)")
        if self.halved_groups and (not self.halved_seeds or max(self.ranks) < 2):
            raise ConfigError(f"halved_groups need seeds (halved_seeds={self.halved_seeds}) and a largest rank >= 2 "
                              f"to halve (ranks={self.ranks})")
        if self.freeze_head_rank < 0:
            raise ConfigError(f"freeze_head_rank={self.freeze_head_rank} must be >= 0 (0: no Freeze run; the paper: "
                              "128)")
        if self.throughput_repeats < 1 or self.pass_repeats < 1:
            raise ConfigError(f"throughput_repeats={self.throughput_repeats} and pass_repeats={self.pass_repeats} "
                              "must be >= 1")
        if not 0 < self.exit_precision <= 1:
            raise ConfigError(f"exit_precision={self.exit_precision} must lie in (0, 1] (the paper's oracle: 1)")
        if self.max_batch < 1 or self.max_batch_cap < self.max_batch:
            raise ConfigError(f"max_batch={self.max_batch} must be >= 1 and max_batch_cap={self.max_batch_cap} "
                              ">= max_batch")

    @property
    def tokenizer(self) -> str:
        """The source's tokenizer (asset name or folder; `rlib.sources`)."""
        return sources.tokenizer_of(self.model)

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
    coef: float | None = None  # the aggressive coefficient of this run's exit loss (None: the config's exit_coef)
    freeze_rank: int = 0  # post-training with every weight frozen and a LoRA of this rank on the exit head (J.1)
    halved: str = ""  # a HALVINGS key: those groups' LoRA rank is rank // 2 (Table G.1); "" = every group at rank

    def __post_init__(self) -> None:
        if self.halved and (self.halved not in HALVINGS or self.rank < 2):
            raise ConfigError(f"halved={self.halved!r} with rank {self.rank}: halve one of {list(HALVINGS)} of a "
                              "LoRA of rank >= 2")
        if self.freeze_rank and (self.phase != "post" or self.exit == "none"):
            raise ConfigError(f"freeze_rank={self.freeze_rank} with phase {self.phase!r} and exit {self.exit!r}: the "
                              "frozen model's head LoRA is trained in post-training, on an exit loss")
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
        if self.halved:
            base += f"-half{self.halved}"
        if self.kd:
            base += "-kd"
        if self.steps_factor != 1:
            base += f"-x{self.steps_factor}"
        if self.phase != "uptrain":
            base += f"-{self.phase}_{self.exit}" + (f"{self.coef:g}" if self.coef is not None else "")
        if self.freeze_rank:
            base += f"-freeze{self.freeze_rank}"
        return f"{base}-s{self.seed}"

    @property
    def parent(self) -> RelaxedVariant | None:
        """The uptrained model a post-training run starts from."""
        return (dataclasses.replace(self, exit="none", phase="uptrain", coef=None, freeze_rank=0)
                if self.phase == "post" else None)


def second_architecture(cfg: RelaxedConfig) -> RelaxedConfig | None:
    """Table J.3's config: the same recipe on `second_model` (None when there is none), with only what the table
    needs: the main recursive and relaxed models and their early-exit post-training (`second_variants`)."""
    if not cfg.second_model:
        return None
    return cfg.override(model=cfg.second_model, second_model="", ranks=(max(cfg.ranks),), rank_inits=(),
                        extra_ranks=(), high_ranks=(), zero_inits=(), prefix_lengths=(), kd_alpha=0.0, long_factor=1,
                        exit_coefs=(), served_ranks=(), co_training=False, freeze_head_rank=0, halved_groups=())


def second_variants(cfg: RelaxedConfig) -> list[RelaxedVariant]:
    """Table J.3's runs (under `second_architecture(cfg)`): the two main models uptrained, then each post-trained with
    every exit schedule of the config, parents first."""
    mains = main_variants(cfg)
    return [*mains, *[dataclasses.replace(m, exit=s, phase="post") for m in mains for s in cfg.exit_schedules]]


def main_variants(cfg: RelaxedConfig) -> tuple[RelaxedVariant, RelaxedVariant]:
    """The main recursive (Stepwise, r = 0) and relaxed (Average, SVD at the largest of `ranks`) models."""
    return RelaxedVariant("stepwise", 0), RelaxedVariant("average", max(cfg.ranks))


def variants(cfg: RelaxedConfig) -> list[RelaxedVariant]:
    """Every training run in dependency order (parents of post-training runs first)."""
    runs = [RelaxedVariant(init, 0) for init in cfg.inits]
    runs += [RelaxedVariant(init, r) for init in cfg.inits for r in cfg.ranks
             if init in cfg.rank_inits or r == max(cfg.ranks)]
    runs += [RelaxedVariant("average", r) for r in cfg.extra_ranks]
    runs += [RelaxedVariant(init, r) for init in cfg.inits for r in cfg.high_ranks]
    runs += [RelaxedVariant(init, max(cfg.ranks), "zero") for init in cfg.zero_inits]
    runs += [RelaxedVariant("average", prefix=p) for p in cfg.prefix_lengths]
    if cfg.kd_alpha > 0 and cfg.kd_row:
        runs.append(dataclasses.replace(main_variants(cfg)[1], kd=True))
    if cfg.long_factor > 1:  # Table I.1's longer uptraining: the paper's recursive Stepwise row, and the relaxed one
        runs += [dataclasses.replace(main, steps_factor=cfg.long_factor) for main in main_variants(cfg)]
    if cfg.kd_alpha > 0 and cfg.kd_row and cfg.long_factor > 1:  # Fig. 7(b): distillation and longer uptraining
        runs.append(dataclasses.replace(main_variants(cfg)[1], kd=True, steps_factor=cfg.long_factor))
    for main in main_variants(cfg):
        runs += [dataclasses.replace(main, exit=s, phase="post") for s in cfg.exit_schedules]
    recursive = main_variants(cfg)[0]
    runs += [dataclasses.replace(recursive, exit="aggressive", phase="post", coef=c) for c in cfg.exit_coefs
             if c != cfg.exit_coef]
    runs += [RelaxedVariant("average", r, exit="aggressive_kd", phase="post") for r in cfg.served_ranks]
    if cfg.co_training:
        runs.append(dataclasses.replace(main_variants(cfg)[0], exit="aggressive_kd", phase="co"))
    main_relaxed = main_variants(cfg)[1]  # Table G.1: one group at half the rank, beside the all-equal model, per seed
    for seed in cfg.halved_seeds if cfg.halved_groups else ():
        runs.append(dataclasses.replace(main_relaxed, seed=seed))
        runs += [dataclasses.replace(main_relaxed, seed=seed, halved=group) for group in cfg.halved_groups]
    if cfg.freeze_head_rank:  # Table J.1's Freeze row: only a head LoRA learns the loop-1 exit, with Agg(c)'s loss
        runs.append(dataclasses.replace(recursive, exit="aggressive", phase="post", freeze_rank=cfg.freeze_head_rank))
    names = [v.name for v in runs]
    return [v for i, v in enumerate(runs) if v.name not in names[:i]]
