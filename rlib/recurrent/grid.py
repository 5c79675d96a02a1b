"""Chapter 04's experiments (paper 002): presets, the synthetic-task grid, the language-model grid, and the live
checks (exactness, counted traffic) that read no training run.

    tasks   one RT layer vs one Transformer layer per synthetic task and seed (Figs. 5-6)
    lm      Transformer and RT with L layers at width D and L/2 layers at width ~sqrt(2) D (fixed parameters,
            Table 1), plus the pre-KV-norm ablation of the shallow RT over learning rates (Fig. 7, App. E.2)

Every run is cached under the chapter's work folder, keyed on the run, the config and the source of the modules
it uses, so an interrupted chapter resumes. Language models train with `rlib.train` on the poetry corpus under a
compact vocabulary (`rlib.vocab`), in fp32: the tiled layer's custom backward is exact in the dtype it runs in.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from rlib import data, experiments
from rlib import eval as rl_eval
from rlib.config import ConfigError, Preset
from rlib.progress import progress
from rlib.recurrent.config import RTConfig
from rlib.recurrent.model import RTModel
from rlib.recurrent.naive import naive_layer
from rlib.recurrent.synthetic import LOSS_TARGETS, FitConfig, TaskModel, evaluate, fit
from rlib.recurrent.tasks import TASKS, make_task
from rlib.recurrent.tiled import tiled_layer
from rlib.train import TrainConfig, train
from rlib.vocab import CompactVocab, CompactWindows

__all__ = ["LMRun", "RecurrentConfig", "TaskRun", "decode_table", "exactness_table", "lm_runs", "run_lm_grid",
           "run_task_grid", "task_runs", "traffic_table"]

CODE_MODULES = ("rlib.recurrent.grid", "rlib.recurrent.config", "rlib.recurrent.layer", "rlib.recurrent.model",
                "rlib.recurrent.naive", "rlib.recurrent.tiled", "rlib.recurrent.tasks", "rlib.recurrent.synthetic",
                "kernels.tiled_prefill.reference", "rlib.train", "rlib.data", "rlib.vocab")


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
    task_alibi_max_bias: float  # slopes 2^(-b (h + 1) / H); b = 2 with 4 heads gives MAD's 16-head steepest slopes
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
    lm_lr: float
    lm_seeds: tuple[int, ...]
    ablation_lrs: tuple[float, ...]  # learning rates of the pre-KV-norm ablation (shallow RT, with and without)
    lm_val_windows: int
    lm_test_windows: int

    PRESETS = {
        "smoke": dict(
            check_lengths=(7,), traffic_lengths=(64, 256, 1024), latency_lengths=(16, 32), latency_shape=(32, 2, 2),
            tasks=(("in_context_recall", 16), ("copy", 16)), task_train=16, task_test=8, task_width=(16, 2),
            task_epochs=1, task_batch=8, task_lr=3e-3, task_loss="scored",
            loss_ablation_tasks=("in_context_recall",), task_alibi_max_bias=2.0, task_seeds=(0,),
            tokenizer="smollm2-135m",
            corpus="shakespeare", vocab_size=256, lm_seq_len=16, lm_layers=2, lm_width=(16, 2), lm_batch=2,
            lm_steps=2, lm_lr=3e-3, lm_seeds=(0,), ablation_lrs=(3e-3,), lm_val_windows=2, lm_test_windows=2),
        "cpu": dict(
            check_lengths=(33, 100), traffic_lengths=(64, 256, 1024, 4096, 16384), latency_lengths=(256, 1024, 4096),
            latency_shape=(256, 4, 4),
            tasks=(("in_context_recall", 64), ("noisy_recall", 64), ("fuzzy_recall", 64),
                   ("selective_copying", 64), ("compression", 32), ("memorization", 32), ("copy", 64)),
            task_train=12_800, task_test=1280, task_width=(64, 4), task_epochs=5, task_batch=64, task_lr=3e-3,
            task_loss="scored", loss_ablation_tasks=("in_context_recall",), task_alibi_max_bias=2.0, task_seeds=(0,),
            tokenizer="smollm2-135m", corpus="gutenberg-poetry", vocab_size=4096,
            lm_seq_len=64,
            lm_layers=4, lm_width=(128, 8), lm_batch=16, lm_steps=300, lm_lr=3e-3, lm_seeds=(0, 1),
            ablation_lrs=(1e-3, 3e-3, 1e-2), lm_val_windows=32, lm_test_windows=64),
        "gpu": dict(
            check_lengths=(33, 257, 1024), traffic_lengths=(64, 256, 1024, 4096, 16384),
            latency_lengths=(256, 512, 1024, 2048), latency_shape=(1024, 16, 128),
            tasks=(("in_context_recall", 128), ("noisy_recall", 128), ("fuzzy_recall", 128),
                   ("selective_copying", 256), ("compression", 32), ("memorization", 32), ("copy", 128)),
            task_train=12_800, task_test=1280, task_width=(128, 8), task_epochs=50, task_batch=128, task_lr=1e-3,
            task_loss="scored", loss_ablation_tasks=("in_context_recall",), task_alibi_max_bias=4.0,
            task_seeds=(0, 1, 2), tokenizer="smollm2-135m", corpus="gutenberg-poetry", vocab_size=0,
            lm_seq_len=256, lm_layers=12, lm_width=(512, 8), lm_batch=64, lm_steps=3000, lm_lr=3e-3,
            lm_seeds=(0, 1, 2), ablation_lrs=(1e-3, 3.16e-3, 1e-2), lm_val_windows=128, lm_test_windows=512),
    }

    def __post_init__(self) -> None:
        for field in ("check_lengths", "traffic_lengths", "latency_lengths", "task_seeds", "lm_seeds", "ablation_lrs",
                      "loss_ablation_tasks"):
            object.__setattr__(self, field, tuple(getattr(self, field)))
        object.__setattr__(self, "tasks", tuple(tuple(t) for t in self.tasks))
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

    def shallow_width(self) -> tuple[int, int]:
        """(d_model, heads) of the L/2 models: the largest head-dim multiple <= sqrt(2) D (the paper rounds down
        too: 1024 -> 1408 at head dim 64), so parameters stay at or just below the deep model's."""
        d, heads = self.lm_width
        head_dim = d // heads
        wide_heads = int(math.sqrt(2) * d) // head_dim
        return wide_heads * head_dim, wide_heads


# ---- live checks ----------------------------------------------------------------------------------------------


def _check_layer(dtype: torch.dtype, position: str, kv_heads: int | None, seed: int = 0):
    from rlib.recurrent.layer import RTLayer

    config = RTConfig(vocab_size=8, d_model=64, n_layers=2, n_heads=4, n_kv_heads=kv_heads, position=position)
    layer = RTLayer(config)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in layer.parameters():
            param.copy_(torch.randn(param.shape, generator=gen) * 0.1 + (1.0 if param.dim() == 1 else 0.0))
    return layer.to(dtype)


def exactness_table(cfg: RecurrentConfig, impl: str = "reference") -> pd.DataFrame:
    """Naive loop vs tiled schedule for one layer (d 64, 4 heads): max |dz|, max |dk|, and the worst per-tensor
    gradient error ||g_tiled - g_naive||^2 / ||g_naive||^2 over x and every parameter."""
    rows = []
    for n in cfg.check_lengths:
        for dtype in (torch.float64, torch.float32):
            for position, kv_heads in (("alibi", None), ("rope", 2)):
                layer = _check_layer(dtype, position, kv_heads)
                x = torch.randn(2, n, 64, generator=torch.Generator().manual_seed(n)).to(dtype).requires_grad_(True)
                positions = torch.arange(n)
                z_naive, k_naive, _ = naive_layer(layer, x, positions)
                z_tiled, k_tiled, _ = tiled_layer(layer, x, positions, impl)
                weight = torch.randn(z_naive.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
                inputs = [x, *layer.parameters()]
                g_naive = torch.autograd.grad((z_naive * weight).sum(), inputs)
                g_tiled = torch.autograd.grad((z_tiled * weight).sum(), inputs)
                worst = max(float((a - b).norm() ** 2 / b.norm() ** 2) for a, b in zip(g_tiled, g_naive))
                rows.append({"n": n, "dtype": str(dtype).replace("torch.", ""), "position": position,
                             "gqa": kv_heads is not None, "tiles": impl,
                             "max_abs_dz": float((z_tiled - z_naive).detach().abs().max()),
                             "max_abs_dk": float((k_tiled - k_naive).detach().abs().max()), "grad_rel_sq_err": worst})
    return pd.DataFrame(rows)


def traffic_table(cfg: RecurrentConfig, head_dim: int = 64) -> pd.DataFrame:
    """Counted attention traffic per (sequence, head) of one layer's prefill, naive vs tiled, with the local
    log-log slope between successive lengths (2 = quadratic, ~1 = N log N)."""
    from kernels.tiled_prefill import tile_traffic

    rows = [{"n": n, "naive": tile_traffic(n, head_dim, "naive")["elements"],
             "tiled": tile_traffic(n, head_dim, "tiled")["elements"], "pairs": n * (n - 1) // 2}
            for n in cfg.traffic_lengths]
    table = pd.DataFrame(rows)
    table["naive_over_tiled"] = table["naive"] / table["tiled"]
    for col in ("naive", "tiled"):
        slope = [float("nan")] + [math.log(b / a) / math.log(m / k) for a, b, k, m in zip(
            table[col][:-1], table[col][1:], table["n"][:-1], table["n"][1:])]
        table[f"{col}_slope"] = slope
    return table


@torch.no_grad()
def decode_table(n_prompt: int = 24, n_new: int = 40) -> pd.DataFrame:
    """Cached token-by-token decoding vs the full forward on the same tokens, for both blocks and both position
    schemes (random 4-layer models, fp32): max |logit difference| and the cache bytes per token."""
    rows = []
    for block in ("recurrent", "transformer"):
        for position in ("alibi", "rope"):
            config = RTConfig(vocab_size=64, d_model=64, n_layers=4, n_heads=4, n_kv_heads=2, position=position,
                              block=block)
            model = RTModel(config, seed=0, std=0.1).eval()
            ids = torch.randint(0, 64, (2, n_prompt + n_new), generator=torch.Generator().manual_seed(0))
            full = model(ids)
            logits, cache = model(ids[:, :n_prompt], return_cache=True, capacity=n_prompt + n_new)
            steps = [logits] + [model.decode_step(ids[:, t:t + 1], cache) for t in range(n_prompt, n_prompt + n_new)]
            rows.append({"block": block, "position": position, "prompt": n_prompt, "decoded": n_new,
                         "max_abs_logit_diff": float((torch.cat(steps, dim=1) - full).abs().max()),
                         "cache_bytes_per_token": cache.nbytes() / (2 * cache.length),
                         "predicted_bytes_per_token": config.kv_floats_per_token() * 4})
    return pd.DataFrame(rows)


# ---- synthetic tasks ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskRun:
    task: str
    seq_len: int
    block: str  # "recurrent" | "transformer"
    seed: int
    loss_on: str  # "all" | "scored" (rlib.recurrent.synthetic.FitConfig)
    ablation: bool = False  # trained with the other loss than the preset's (the loss ablation)

    @property
    def name(self) -> str:
        return f"task-{self.task}-{self.block}-s{self.seed}" + (f"-loss-{self.loss_on}" if self.ablation else "")


def task_runs(cfg: RecurrentConfig) -> list[TaskRun]:
    """Every task x seed x block with the preset's loss, then the loss ablation (first seed, the other loss)."""
    runs = [TaskRun(task, seq_len, block, seed, cfg.task_loss) for task, seq_len in cfg.tasks for seed in cfg.task_seeds
            for block in ("recurrent", "transformer")]
    other = next(loss for loss in LOSS_TARGETS if loss != cfg.task_loss)
    lengths = dict(cfg.tasks)
    runs += [TaskRun(task, lengths[task], block, cfg.task_seeds[0], other, ablation=True)
             for task in cfg.loss_ablation_tasks for block in ("recurrent", "transformer")]
    return runs


def run_task(run: TaskRun, cfg: RecurrentConfig) -> dict[str, Any]:
    train_data = make_task(run.task, cfg.task_train, run.seq_len, seed=1000 + run.seed)
    test_data = make_task(run.task, cfg.task_test, run.seq_len, seed=2000 + run.seed)
    if run.task == "memorization":  # a memorised map is scored on the pairs it was trained on (MAD does too)
        test_data = train_data.subset(slice(0, cfg.task_test))
    d, heads = cfg.task_width
    config = RTConfig(vocab_size=train_data.vocab_size, d_model=d, n_layers=1, n_heads=heads, block=run.block,
                      alibi_max_bias=cfg.task_alibi_max_bias)
    torch.manual_seed(run.seed)
    model = TaskModel(config, train_data.head, run.seq_len, seed=run.seed)
    trained = fit(model, train_data, FitConfig(cfg.task_epochs, cfg.task_batch, cfg.task_lr, seed=run.seed,
                                                     loss_on=run.loss_on),
                  desc=run.name)
    return {"name": run.name, **dataclasses.asdict(run), "train": trained, "test": evaluate(model, test_data)}


def run_task_grid(cfg: RecurrentConfig, work: Path) -> list[dict[str, Any]]:
    code = experiments.code_digest(*CODE_MODULES)
    results = []
    for run in progress(task_runs(cfg), desc="task runs", unit="run"):
        key = experiments.digest(run, cfg.tasks, cfg.task_train, cfg.task_test, cfg.task_width, cfg.task_epochs,
                                 cfg.task_batch, cfg.task_lr, cfg.task_alibi_max_bias, code)
        results.append(experiments.cached(Path(work) / run.name, key, lambda r=run: run_task(r, cfg)))
    return results


# ---- language models ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LMRun:
    block: str  # "recurrent" | "transformer"
    depth: str  # "deep" (L layers, width D) | "shallow" (L / 2 layers, width ~sqrt(2) D)
    seed: int
    lr: float = 0.0  # 0 = the config's lm_lr
    kv_norm: bool = True

    @property
    def name(self) -> str:
        tag = "" if self.kv_norm else "-nonorm"
        lr = f"-lr{self.lr:g}" if self.lr else ""
        return f"lm-{self.block}-{self.depth}{tag}{lr}-s{self.seed}"


def lm_runs(cfg: RecurrentConfig) -> list[LMRun]:
    runs = [LMRun(block, depth, seed) for seed in cfg.lm_seeds for block in ("transformer", "recurrent")
            for depth in ("deep", "shallow")]
    first = cfg.lm_seeds[0]
    for lr in cfg.ablation_lrs:
        for kv_norm in (True, False):
            runs.append(LMRun("recurrent", "shallow", first, 0.0 if lr == cfg.lm_lr and kv_norm else lr, kv_norm))
    return list(dict.fromkeys(runs))


def lm_config(run: LMRun, cfg: RecurrentConfig, vocab_size: int) -> RTConfig:
    d, heads = cfg.lm_width if run.depth == "deep" else cfg.shallow_width()
    layers = cfg.lm_layers if run.depth == "deep" else cfg.lm_layers // 2
    return RTConfig(vocab_size=vocab_size, d_model=d, n_layers=layers, n_heads=heads, block=run.block,
                    kv_norm=run.kv_norm, tie_embeddings=True)


@functools.cache
def vocabulary(cfg: RecurrentConfig) -> CompactVocab | None:
    return CompactVocab.from_corpus(cfg.corpus, cfg.tokenizer, cfg.vocab_size) if cfg.vocab_size else None


def _windows(cfg: RecurrentConfig, split: str, n: int, seed: int) -> torch.Tensor:
    win = data.heldout_windows(cfg.corpus, cfg.tokenizer, cfg.lm_seq_len, n, split=split, seed=seed)
    vocab = vocabulary(cfg)
    return win if vocab is None else vocab.encode(win)


def run_lm(run: LMRun, cfg: RecurrentConfig, folder: Path, key: str) -> dict[str, Any]:
    train_dir = folder / f"train-{key}"
    for stale in folder.glob("train-*"):
        if stale != train_dir:
            shutil.rmtree(stale, ignore_errors=True)
    vocab = vocabulary(cfg)
    size = vocab.size if vocab is not None else len(data.load_tokenizer(cfg.tokenizer))
    config = lm_config(run, cfg, size)
    model = RTModel(config, seed=run.seed)
    cache = data.token_cache(cfg.corpus, cfg.tokenizer, "train", progress=False)
    windows = data.PackedWindows(cache, cfg.lm_seq_len, bos_id=cache.bos_id)
    lr = run.lr or cfg.lm_lr
    tcfg = TrainConfig(lr=lr, schedule="cosine", warmup_steps=max(1, cfg.lm_steps // 20), max_steps=cfg.lm_steps,
                       batch_size=cfg.lm_batch, micro_batch_size=cfg.lm_batch, eval_every=max(1, cfg.lm_steps // 6),
                       eval_batches=max(1, cfg.lm_val_windows // cfg.lm_batch), checkpoint_final=False,
                       seed=run.seed, weight_decay=0.0)
    result = train(model, windows if vocab is None else CompactWindows(windows, vocab), tcfg, train_dir,
                   val_windows=_windows(cfg, "validation", cfg.lm_val_windows, seed=1))
    test = rl_eval.perplexity(model, _windows(cfg, "test", cfg.lm_test_windows, seed=0), batch_size=cfg.lm_batch,
                              progress=False)
    log = pd.read_csv(train_dir / "metrics.csv")
    curve = log.dropna(subset=["val_loss"])[["step", "val_loss"]]
    shutil.rmtree(train_dir / "checkpoint", ignore_errors=True)
    non_embedding = sum(p.numel() for p in model.parameters()) - model.embed.weight.numel()
    return {"name": run.name, **dataclasses.asdict(run), "lr": lr, "d_model": config.d_model,
            "n_layers": config.n_layers, "n_heads": config.n_heads, "non_embedding_params": non_embedding,
            "kv_floats_per_token": config.kv_floats_per_token(), "test_nll": test["nll"], "test_nll_se": test["nll_se"],
            "final_train_loss": result.train_loss, "val_loss": result.val_loss, "seconds": result.seconds,
            "tokens": result.tokens, "curve": {"step": curve["step"].tolist(), "val_loss": curve["val_loss"].tolist()}}


def run_lm_grid(cfg: RecurrentConfig, work: Path) -> list[dict[str, Any]]:
    code = experiments.code_digest(*CODE_MODULES)
    lm_fields = {f: getattr(cfg, f) for f in ("tokenizer", "corpus", "vocab_size", "lm_seq_len", "lm_layers",
                                              "lm_width", "lm_batch", "lm_steps", "lm_lr", "lm_val_windows",
                                              "lm_test_windows")}
    results = []
    for run in progress(lm_runs(cfg), desc="LM runs", unit="run"):
        key = experiments.digest(run, lm_fields, code)
        folder = Path(work) / run.name
        results.append(experiments.cached(folder, key, lambda r=run, f=folder, k=key: run_lm(r, cfg, f, k)))
    return results
