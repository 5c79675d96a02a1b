"""Chapter 04's configs (paper 002): the shape of one model (`RTConfig`), the chapter's settings per profile
(`RecurrentConfig`), and the runs they define (`TaskRun`, `LMRun`).

`RTConfig(block="recurrent")` makes the key/value pair that later positions see from the layer's *output* (Sec. 2.2,
Eq. 1-2, App. D); `block="transformer"` makes it from the layer input, as a standard pre-norm layer (Sec. 2.1).
Everything else (norms, MLP, positions, residual scaling) is the same code, so the two differ only where the paper
says.

    tasks   one RT layer vs one Transformer layer per synthetic task and seed (Figs. 5-6)
    lm      Transformer and RT with L layers at width D and L/2 layers at width ~sqrt(2) D (fixed parameters,
            Table 1), a Transformer with 2L layers at width ~D / sqrt(2) (Table 1's 24-layer row), each shape's
            learning rate tuned on its first seed (App. D.1), and the pre-KV-norm ablation of the shallow RT over
            learning rates (Fig. 7, App. E.2)

The cpu profile keeps the chapter within issue 27's 30 minutes on 2 cores; its `cpu-long` preset adds the studies
that do not fit (the loss ablation of the tasks, the pre-KV-norm ablation, the 2L Transformer). The fields that only
add runs are left out of the grids' keys, so cpu-long reads cpu's runs back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rlib.config import Checked, ConfigError, Preset
from rlib.recurrent.tasks import TASKS
from rlib.vocab import ScratchText

__all__ = ["BLOCKS", "LOSS_TARGETS", "POSITIONS", "LMRun", "RTConfig", "RecurrentConfig", "TaskRun", "alibi_reach",
           "alibi_slopes", "lm_config", "lm_runs", "lm_tuning_runs", "table1_shapes", "task_runs"]

BLOCKS = ("recurrent", "transformer")
LOSS_TARGETS = ("all", "scored")  # a task model's loss on every next token (MAD) or on the scored targets only
POSITIONS = ("alibi", "rope", "none")


@dataclass(frozen=True)
class RTConfig(Checked):
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int | None = None  # None = n_heads (no GQA); must divide n_heads
    d_ff: int | None = None  # None = 4 d_model (the paper's GELU MLP)
    block: str = "recurrent"
    position: str = "alibi"  # the paper's choice; RoPE is supported here too (the official code asserts it off)
    alibi_max_bias: float = 8.0  # slopes 2^(-max_bias (h + 1) / H), as in OLMo's ALiBi
    rope_theta: float = 10_000.0
    kv_norm: bool = True  # RMS before the persistent K/V projections (Eq. 1-2); False = the App. E.2 ablation
    residual_scale: bool = True  # x + (1/sqrt(L)) f(x): the paper's depth-wise residual scaling
    norm_eps: float = 1e-6
    tie_embeddings: bool = False

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_layers", "n_heads"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}={getattr(self, name)} must be >= 1")
        if self.d_model % self.n_heads:
            raise ConfigError(f"d_model={self.d_model} must be a multiple of n_heads={self.n_heads}")
        if self.kv_heads < 1 or self.n_heads % self.kv_heads:
            raise ConfigError(f"n_kv_heads={self.n_kv_heads} must divide n_heads={self.n_heads}")
        if self.block not in BLOCKS:
            raise ConfigError(f"block={self.block!r} unknown; choose from {list(BLOCKS)}")
        if self.position not in POSITIONS:
            raise ConfigError(f"position={self.position!r} unknown; choose from {list(POSITIONS)}")
        if self.position == "rope" and self.head_dim % 2:
            raise ConfigError(f"RoPE needs an even head dimension; d_model / n_heads = {self.head_dim}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def ff_dim(self) -> int:
        return self.d_ff or 4 * self.d_model

    @property
    def alpha(self) -> float:
        """The residual branch scale 1/sqrt(L) (1 without depth-wise scaling)."""
        return 1.0 / math.sqrt(self.n_layers) if self.residual_scale else 1.0

    def kv_floats_per_token(self) -> int:
        """Cached floats per token: one key and one value per layer and KV head (Table 1's KV-cache column)."""
        return 2 * self.n_layers * self.kv_heads * self.head_dim


def alibi_slopes(n_heads: int, max_bias: float) -> list[float]:
    """Head h's ALiBi slope 2^(-max_bias (h + 1) / H); the bias of key position i for query j is -slope (j - i)."""
    return [2.0 ** (-max_bias * (h + 1) / n_heads) for h in range(n_heads)]


def alibi_reach(n_heads: int, max_bias: float) -> float:
    """Tokens back over which the flattest head's ALiBi penalty stays within one logit (1 / its slope): 2^max_bias,
    whatever the head count. A layer whose sequences are longer than this has no head that can read position 0 from
    the last position without fighting the bias (max bias 2 reaches 4 tokens; the standard 8 reaches 256)."""
    return 1.0 / min(alibi_slopes(n_heads, max_bias))


@dataclass(frozen=True)
class RecurrentConfig(Preset):
    """Chapter 04's settings per profile."""

    check_lengths: tuple[int, ...]  # N of the live exactness table (naive vs tiled, fp64 and fp32)
    traffic_lengths: tuple[int, ...]  # N of the counted-traffic table
    latency_lengths: tuple[int, ...]  # N of the live per-layer latency (Fig. 4 analog)
    latency_shape: tuple[int, int, int]  # (d_model, heads, batch) of the latency layer
    tasks: tuple[tuple[str, int], ...]  # (task, sequence length)
    task_train: int  # training sequences per task
    task_test: int
    task_width: tuple[int, int]  # (d_model, heads) of the one-layer task models
    task_epochs: int
    task_batch: int
    task_loss: str  # "all" next tokens (MAD) or only the "scored" targets; see rlib.recurrent.synthetic
    loss_ablation_tasks: tuple[str, ...]  # tasks also trained (first seed) with the other loss, both blocks
    task_alibi_max_bias: float  # slopes 2^(-b (h + 1) / H): the standard b = 8 (OLMo's and the official code's
    # default), so the flattest head reaches 2^8 = 256 tokens (checked against every task length below)
    # extra (task, epochs, lr) recipes each block trains under (first seed): the paper tunes each model over a learning
    # rate grid and reports the best run (App. D.2, as MAD does); the tables report the best per task and block
    task_tuning: tuple[tuple[str, int, float], ...]
    task_curve_points: int  # learning-curve evaluations per task run (on the first task_curve_probe test sequences)
    task_curve_probe: int
    task_lr: float
    task_seeds: tuple[int, ...]
    tokenizer: str
    corpus: str
    vocab_size: int  # compact vocabulary (rlib.vocab)
    lm_seq_len: int
    lm_layers: int  # L of the deep models; the shallow ones have L / 2
    lm_width: tuple[int, int]  # (d_model, heads) of the deep models; the shallow ones keep the head dim
    lm_batch: int
    lm_steps: int
    # App. D.1 tunes each model's learning rate ("hyperparameter tuning given by: ..."; the released sweep: 1e-3,
    # 3.16e-3, 1e-2): every Table 1 shape trains its first seed at each rate here, and its other seeds at the rate of
    # the lowest final validation NLL (one rate = no tuning). The cpu profiles add 3.16e-2 (ours: on the released
    # sweep alone every shape of these small models chose its top, 1e-2, so their optimum was not bracketed)
    lm_lrs: tuple[float, ...]
    lm_warmup: float  # linear warm-up as a fraction of the steps, then cosine (the released config: 40 %)
    lm_seeds: tuple[int, ...]
    ablation_lrs: tuple[float, ...]  # learning rates of the pre-KV-norm ablation (shallow RT, with and without)
    lm_transformer_2l: bool  # also a Transformer with 2L layers at width ~D / sqrt(2), every seed (Table 1's 24 x 1024)
    lm_val_windows: int
    lm_test_windows: int
    lm_downstream_items: int  # items of book_nextline and book_cloze each LM run is scored on (0 = not scored)
    # a second batch size for the deep and shallow models of both blocks, every seed, at equal tokens (Figs. 8-9:
    # the paper trains its 150M models at two batch sizes); 0 = none
    lm_batch_alt: int = 0
    # (task, training sequences) where MAD's baseline trains on another number than task_train: memorization on 256
    # (mad-lab configs/tasks/memorization.yml), a map learned in the weights; such a task trains for as many epochs
    # as give it the same optimizer steps as the others, and every task is scored on fresh test sequences (MAD's)
    task_train_sizes: tuple[tuple[str, int], ...] = ()

    PRESETS = {
        "smoke": dict(
            check_lengths=(7,), traffic_lengths=(64, 256, 1024), latency_lengths=(16, 32), latency_shape=(32, 2, 2),
            tasks=(("in_context_recall", 16), ("copy", 16)), task_train=16, task_test=8, task_width=(16, 2),
            task_epochs=1, task_batch=8, task_lr=3e-3, task_loss="scored",
            loss_ablation_tasks=("in_context_recall",), task_alibi_max_bias=8.0, task_tuning=(("copy", 2, 1e-2),),
            task_curve_points=2,
            task_curve_probe=8, task_seeds=(0,), tokenizer="smollm2-135m",
            corpus="shakespeare", vocab_size=256, lm_seq_len=16, lm_layers=2, lm_width=(16, 2), lm_batch=2,
            lm_steps=2, lm_lrs=(3e-3, 1e-2), lm_warmup=0.4, lm_seeds=(0,), ablation_lrs=(3e-3,), lm_transformer_2l=True,
            lm_val_windows=2,
            lm_test_windows=2, lm_downstream_items=4, lm_batch_alt=4),
        "cpu": dict(
            check_lengths=(33, 100), traffic_lengths=(64, 256, 1024, 4096, 16384), latency_lengths=(256, 1024, 4096),
            latency_shape=(256, 4, 4),
            tasks=(("in_context_recall", 64), ("noisy_recall", 64), ("fuzzy_recall", 64),
                   ("selective_copying", 64), ("compression", 32), ("memorization", 32), ("copy", 64)),
            task_train=12_800, task_test=1280, task_width=(64, 4), task_epochs=5, task_batch=64, task_lr=3e-3,
            task_loss="scored", loss_ablation_tasks=(), task_alibi_max_bias=8.0,
            task_tuning=(), task_curve_points=10, task_curve_probe=256, task_seeds=(0,),
            task_train_sizes=(("memorization", 256),),
            tokenizer="smollm2-135m", corpus="gutenberg-poetry", vocab_size=4096,
            lm_seq_len=64,
            lm_layers=4, lm_width=(128, 8), lm_batch=16, lm_steps=300, lm_lrs=(1e-3, 3.16e-3, 1e-2, 3.16e-2),
            lm_warmup=0.4, lm_seeds=(0, 1),
            ablation_lrs=(), lm_transformer_2l=False, lm_val_windows=32, lm_test_windows=64,
            lm_downstream_items=200),
        "gpu": dict(
            check_lengths=(33, 257, 1024), traffic_lengths=(64, 256, 1024, 4096, 16384),
            latency_lengths=(256, 512, 1024, 2048), latency_shape=(1024, 16, 128),
            tasks=(("in_context_recall", 128), ("noisy_recall", 128), ("fuzzy_recall", 128),
                   ("selective_copying", 256), ("compression", 32), ("memorization", 32), ("copy", 128)),
            task_train=12_800, task_test=1280, task_width=(128, 8), task_epochs=50, task_batch=128, task_lr=1e-3,
            task_loss="scored", loss_ablation_tasks=("in_context_recall",), task_alibi_max_bias=8.0,
            task_tuning=(), task_curve_points=20, task_curve_probe=512, task_seeds=(0, 1, 2), tokenizer="smollm2-135m",
            corpus="gutenberg-poetry", vocab_size=0,
            lm_seq_len=256, lm_layers=12, lm_width=(512, 8), lm_batch=64, lm_steps=3000,
            lm_lrs=(1e-3, 3.16e-3, 1e-2), lm_warmup=0.4, lm_seeds=(0, 1, 2), ablation_lrs=(1e-3, 3.16e-3, 1e-2),
            lm_transformer_2l=True, lm_val_windows=128,
            lm_test_windows=512, lm_downstream_items=200, task_train_sizes=(("memorization", 256),)),
    }
    # cpu-long: the cpu grids (read back from cpu's run folders) plus recall with MAD's loss, the pre-KV-norm
    # ablation over the tuning grid's four learning rates (its normed runs are the tuning runs), the 2L Transformer
    # (tuned too), copy tuned over two learning rates at 3x the epochs (the cpu budget ends on the plateau RT leaves
    # near step 1,200; the Transformer needs the higher rate) and the LM grid again at twice the batch and half the
    # steps (Figs. 8-9): 6 task runs and 17 LM runs
    PRESETS["cpu-long"] = {**PRESETS["cpu"], "loss_ablation_tasks": ("in_context_recall",),
                           "ablation_lrs": (1e-3, 3.16e-3, 1e-2, 3.16e-2),
                           "lm_transformer_2l": True, "task_tuning": (("copy", 15, 3e-3), ("copy", 15, 1e-2)),
                           "lm_batch_alt": 32}

    def __post_init__(self) -> None:
        for field in ("check_lengths", "traffic_lengths", "latency_lengths", "task_seeds", "lm_seeds", "ablation_lrs",
                      "loss_ablation_tasks", "lm_lrs"):
            object.__setattr__(self, field, tuple(getattr(self, field)))
        object.__setattr__(self, "tasks", tuple(tuple(t) for t in self.tasks))
        object.__setattr__(self, "task_tuning", tuple((str(t), int(e), float(lr)) for t, e, lr in self.task_tuning))
        object.__setattr__(self, "task_train_sizes", tuple((str(t), int(n)) for t, n in self.task_train_sizes))
        unknown = [name for name, _ in self.tasks if name not in TASKS]
        if unknown:
            raise ConfigError(f"tasks {unknown} unknown; choose from {sorted(TASKS)}")
        missing = [name for name in self.loss_ablation_tasks if name not in dict(self.tasks)]
        if missing:
            raise ConfigError(f"loss_ablation_tasks {missing} are not in tasks {[name for name, _ in self.tasks]}")
        if self.lm_layers < 2 or self.lm_layers % 2:
            raise ConfigError(f"lm_layers={self.lm_layers}: the shallow models need an even L >= 2")
        d, heads = self.lm_width
        if d % heads:
            raise ConfigError(f"lm_width={self.lm_width}: d_model must be a multiple of the heads")
        if self.task_loss not in LOSS_TARGETS:
            raise ConfigError(f"task_loss={self.task_loss!r}: choose from {list(LOSS_TARGETS)}")
        if not self.lm_seeds or not self.task_seeds:
            raise ConfigError("lm_seeds and task_seeds must name at least one seed")
        reach = alibi_reach(self.task_width[1], self.task_alibi_max_bias)
        too_long = [f"{name} ({length})" for name, length in self.tasks if length - 1 > reach]
        if too_long:
            raise ConfigError(f"task_alibi_max_bias={self.task_alibi_max_bias:g}: the flattest ALiBi head reaches "
                              f"{reach:.0f} tokens, shorter than {', '.join(too_long)}; no head could read the start "
                              f"of a sequence; use max bias >= {math.log2(max(t for _, t in self.tasks)):.1f} (the "
                              "standard is 8)")
        bad = [f"{t} ({e} epochs, lr {lr:g})" for t, e, lr in self.task_tuning
               if t not in dict(self.tasks) or e < 1 or not lr > 0]
        if bad:
            raise ConfigError(f"task_tuning {bad}: each recipe names a task of `tasks` "
                              f"({[name for name, _ in self.tasks]}), epochs >= 1 and a learning rate > 0")
        rates = self.lm_lrs + self.ablation_lrs
        if not self.lm_lrs or not all(lr > 0 for lr in rates) or len(set(self.lm_lrs)) < len(self.lm_lrs):
            raise ConfigError(f"lm_lrs={self.lm_lrs}, ablation_lrs={self.ablation_lrs}: name at least one learning "
                              "rate in lm_lrs, each > 0 and none twice (e.g. lm_lrs=(1e-3, 3.16e-3, 1e-2))")
        if not 0.0 <= self.lm_warmup < 1.0:
            raise ConfigError(f"lm_warmup={self.lm_warmup}: the warm-up is a fraction of the steps in [0, 1), e.g. 0.4")
        bad = [f"{t} ({n})" for t, n in self.task_train_sizes if t not in dict(self.tasks) or n < self.task_batch]
        if bad:
            raise ConfigError(f"task_train_sizes {bad}: each names a task of `tasks` and at least task_batch="
                              f"{self.task_batch} training sequences")
        if self.lm_batch_alt < 0 or self.lm_batch_alt == self.lm_batch:
            raise ConfigError(f"lm_batch_alt={self.lm_batch_alt}: 0 (none) or a batch other than lm_batch="
                              f"{self.lm_batch}")
        if self.lm_downstream_items < 0:
            raise ConfigError(f"lm_downstream_items={self.lm_downstream_items} must be >= 0 (0 = no downstream scores)")
        if self.task_curve_points < 0 or self.task_curve_probe < 1:
            raise ConfigError(f"task_curve_points={self.task_curve_points} must be >= 0 and task_curve_probe="
                              f"{self.task_curve_probe} >= 1")

    def train_size(self, task: str) -> int:
        """Training sequences of `task`: task_train unless task_train_sizes names it (MAD's memorization: 256)."""
        return dict(self.task_train_sizes).get(task, self.task_train)

    def task_epochs_for(self, task: str) -> int:
        """Epochs of `task`'s main runs: task_epochs, or as many as give a smaller training set the same optimizer
        steps (memorization at 256 sequences: 5 x 12,800 / 256 = 250 epochs, 1,000 steps at batch 64)."""
        return max(1, round(self.task_epochs * self.task_train / self.train_size(task)))

    def text(self) -> ScratchText:
        """The corpus, tokenizer, compact vocabulary and window length of the language models."""
        return ScratchText(self.corpus, self.tokenizer, self.vocab_size, self.lm_seq_len)

    def shallow_width(self) -> tuple[int, int]:
        """(d_model, heads) of the L/2 models: the largest head-dim multiple <= sqrt(2) D, so parameters stay at or
        just below the deep model's. The paper's Table 1 rounds its L -> L/2 step up instead (12 x 1408 -> 6 x 2048:
        sqrt(2) 1408 = 1991), so its shallow models have slightly more parameters than the deep ones (~6 %) where
        the book's have slightly fewer (cpu: 2 x 176^2 vs 4 x 128^2, -5.5 %); kept, since every trained run of Table 1
        uses it."""
        d, heads = self.lm_width
        head_dim = d // heads
        wide_heads = int(math.sqrt(2) * d) // head_dim
        return wide_heads * head_dim, wide_heads

    def double_width(self) -> tuple[int, int]:
        """(d_model, heads) of the 2L Transformer: the smallest head-dim multiple >= D / sqrt(2), as Table 1's 24-layer
        row (1024 = 1408 / sqrt(2) = 995.6 rounded up to head dim 64), which keeps it at about the deep model's
        parameters. Until 2026-12-05 the book trained it at width D, twice the deep model's parameters."""
        d, heads = self.lm_width
        head_dim = d // heads
        narrow_heads = math.ceil(d / math.sqrt(2) / head_dim)
        return narrow_heads * head_dim, narrow_heads


@dataclass(frozen=True)
class TaskRun:
    task: str
    seq_len: int
    block: str  # "recurrent" | "transformer"
    seed: int
    loss_on: str  # "all" | "scored" (rlib.recurrent.synthetic.FitConfig)
    ablation: bool = False  # trained with the other loss than the preset's (the loss ablation)
    epochs: int = 0  # 0 = the preset's task_epochs; else a run of the tuning grid (task_tuning)
    lr: float = 0.0  # 0 = the preset's task_lr

    @property
    def name(self) -> str:
        loss = f"-loss-{self.loss_on}" if self.ablation else ""
        tuned = f"-e{self.epochs}-lr{self.lr:g}" if self.tuned else ""
        return f"task-{self.task}-{self.block}-s{self.seed}{loss}{tuned}"

    @property
    def tuned(self) -> bool:
        """A run of the tuning grid (its own epochs and learning rate), not of the main comparison."""
        return bool(self.epochs or self.lr)


def task_runs(cfg: RecurrentConfig) -> list[TaskRun]:
    """Every task x seed x block with the preset's loss, then the loss ablation (first seed, the other loss), then
    the tuning grid (first seed, each (task, epochs, lr) of `task_tuning`, both blocks)."""
    runs = [TaskRun(task, seq_len, block, seed, cfg.task_loss) for task, seq_len in cfg.tasks for seed in cfg.task_seeds
            for block in ("recurrent", "transformer")]
    other = next(loss for loss in LOSS_TARGETS if loss != cfg.task_loss)
    lengths = dict(cfg.tasks)
    runs += [TaskRun(task, lengths[task], block, cfg.task_seeds[0], other, ablation=True)
             for task in cfg.loss_ablation_tasks for block in ("recurrent", "transformer")]
    runs += [TaskRun(task, lengths[task], block, cfg.task_seeds[0], cfg.task_loss, epochs=epochs, lr=lr)
             for task, epochs, lr in cfg.task_tuning for block in ("recurrent", "transformer")]
    return runs


@dataclass(frozen=True)
class LMRun:
    block: str  # "recurrent" | "transformer"
    depth: str  # "deep" (L layers, width D) | "shallow" (L / 2, width ~sqrt(2) D) | "double" (2L, width ~D / sqrt(2))
    seed: int
    lr: float = 0.0  # the peak learning rate (0 only for a run that names a shape, not one to train)
    kv_norm: bool = True
    batch: int = 0  # 0 = the config's lm_batch; else Figs. 8-9's second batch size, at equal tokens

    @property
    def name(self) -> str:
        tag = "" if self.kv_norm else "-nonorm"
        batch = f"-batch{self.batch}" if self.batch else ""
        return f"lm-{self.block}-{self.depth}{tag}-lr{self.lr:g}{batch}-s{self.seed}"

    @property
    def shape(self) -> tuple[str, str]:
        return self.block, self.depth

    @property
    def table1(self) -> bool:
        """A run of Table 1's recipe (with the norm, at the config's batch), at any rate of the tuning grid."""
        return self.kv_norm and not self.batch


def table1_shapes(cfg: RecurrentConfig) -> list[tuple[str, str]]:
    """Table 1's (block, depth) rows: both blocks at L and L/2 layers, and the 2L Transformer where the preset has
    it."""
    shapes = [(block, depth) for block in ("transformer", "recurrent") for depth in ("deep", "shallow")]
    return shapes + [("transformer", "double")] * cfg.lm_transformer_2l


def lm_tuning_runs(cfg: RecurrentConfig) -> list[LMRun]:
    """App. D.1's tuning: every Table 1 shape at every rate of `lm_lrs`, on the first seed."""
    first = cfg.lm_seeds[0]
    return [LMRun(block, depth, first, lr) for block, depth in table1_shapes(cfg) for lr in cfg.lm_lrs]


def lm_runs(cfg: RecurrentConfig, rates: dict[tuple[str, str], float]) -> list[LMRun]:
    """Every LM run once each shape's rate is chosen (`rates`, from `rlib.recurrent.tuning.chosen_rates` over
    `lm_tuning_runs`): the tuning runs, the other seeds at the chosen rate, Figs. 8-9's second batch size at it
    (every seed), and the pre-KV-norm ablation of the shallow RT (first seed, with and without the norm)."""
    missing = [shape for shape in table1_shapes(cfg) if shape not in rates]
    if missing:
        raise ValueError(f"no learning rate chosen for {missing}: pass the rates of every Table 1 shape")
    first = cfg.lm_seeds[0]
    runs = lm_tuning_runs(cfg)
    runs += [LMRun(block, depth, seed, rates[block, depth]) for seed in cfg.lm_seeds[1:]
             for block, depth in table1_shapes(cfg)]
    if cfg.lm_batch_alt:
        runs += [LMRun(block, depth, seed, rates[block, depth], batch=cfg.lm_batch_alt) for seed in cfg.lm_seeds
                 for block in ("transformer", "recurrent") for depth in ("deep", "shallow")]
    runs += [LMRun("recurrent", "shallow", first, lr, kv_norm) for lr in cfg.ablation_lrs for kv_norm in (True, False)]
    return list(dict.fromkeys(runs))


def lm_config(run: LMRun, cfg: RecurrentConfig, vocab_size: int) -> RTConfig:
    d, heads = {"shallow": cfg.shallow_width, "double": cfg.double_width}.get(run.depth, lambda: cfg.lm_width)()
    layers = {"deep": cfg.lm_layers, "shallow": cfg.lm_layers // 2, "double": 2 * cfg.lm_layers}[run.depth]
    return RTConfig(vocab_size=vocab_size, d_model=d, n_layers=layers, n_heads=heads, block=run.block,
                    kv_norm=run.kv_norm, tie_embeddings=True)
