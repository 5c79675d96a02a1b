"""Chapter 05's experiments (paper 004): LayerSkip recipes trained from scratch, read exit by exit.

A run is a recipe and a seed (every recipe with the first seed; `spread_recipes` with the others too). Every recipe
trains the same Llama-style model (untied head, as the paper's Llama models; deep and narrow, so that early exits
have room) on the same tokens and steps:

    baseline     plain next-token training
    ld           layer dropout (p_max, exponential over layers and over training steps: S_exp, Eq. 3-4)
    ee           the early-exit loss (e_scale, the profile's curriculum, rotational by default)
    ld_ee        both (Figs. 8 and 10's "LD+EE")
    ld_const     dropout at the mean rate on every layer (Fig. 12's "Const" against ld's "Exp")
    ee_all       the early-exit loss on every layer at every step (the curriculum ablation of Sec. 4.1.2)
    ee_gradual   the gradual curriculum

Each run records the per-exit held-out NLL and accuracy (Figs. 8, 10), the middle and last exits' NLL during
training (Fig. 11), its training-loss curve (Fig. 12) and its time per step. Runs are cached and resumable
(`rlib.experiments`); text is SmolLM2's tokenizer on the profile's corpus under a compact vocabulary.
"""

from __future__ import annotations

import functools
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from rlib import data, experiments
from rlib.config import ConfigError, Preset
from rlib.layerskip.analysis import exit_metrics
from rlib.layerskip.schedules import CURRICULA, TIME_SCHEDULES
from rlib.layerskip.speculative import REUSE_MODES
from rlib.layerskip.training import ExitProbe, LayerSkipDecoder, LayerSkipLoss
from rlib.model import Decoder, DecoderConfig, convert
from rlib.model.init import init_weights
from rlib.train import TrainConfig, train
from rlib.vocab import CompactVocab, CompactWindows

__all__ = ["RECIPES", "LayerSkipConfig", "LayerSkipRun", "load_model", "run_grid", "runs"]

CODE_MODULES = ("rlib.layerskip.grid", "rlib.layerskip.schedules", "rlib.layerskip.training",
                "rlib.layerskip.analysis", "rlib.train", "rlib.data", "rlib.vocab", "rlib.model.decoder",
                "rlib.model.layers")

# recipe -> (layer dropout on, early-exit loss on, overrides: layer_schedule / curriculum)
RECIPES: dict[str, tuple[bool, bool, dict[str, str]]] = {
    "baseline": (False, False, {}),
    "ld": (True, False, {}),
    "ee": (False, True, {}),
    "ld_ee": (True, True, {}),
    "ld_const": (True, False, {"layer_schedule": "constant"}),
    "ee_all": (False, True, {"curriculum": "all"}),
    "ee_gradual": (False, True, {"curriculum": "gradual"}),
}


@dataclass(frozen=True)
class LayerSkipConfig(Preset):
    """Chapter 05's settings per profile."""

    tokenizer: str
    corpus: str
    vocab_size: int  # compact vocabulary (0 = the tokenizer's own)
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ffn: int
    n_layers: int
    seq_len: int
    steps: int
    batch_size: int
    micro_batch_size: int
    lr: float
    warmup_frac: float
    p_max: float  # layer dropout at the last layer (Table 7: 0.1-0.2)
    time_schedule: str  # "exp" from scratch (Eq. 4), "constant" for continual pretraining / fine-tuning
    e_scale: float  # early-exit loss scale (Table 7: 0.1-1.0)
    curriculum: str  # of the "ee" and "ld_ee" recipes
    rotation: int  # R of the rotational curriculum (0 = L - 1, as most of the paper's runs)
    recipes: tuple[str, ...]
    seeds: tuple[int, ...]  # every recipe runs with the first seed
    spread_recipes: tuple[str, ...]  # these also run with the other seeds (the claims that read a seed spread)
    val_windows: int  # held-out windows of the Fig. 11 probe
    eval_windows: int  # held-out windows of the per-exit tables
    probe_points: int  # Fig. 11 points per run
    precision: str
    decode_exits: tuple[int, ...]  # E of the self-speculation tables (layers that draft)
    decode_drafts: tuple[int, ...]  # d
    decode_reuses: tuple[str, ...]  # cache reuse modes timed (Table 6)
    decode_prompts: int  # held-out windows whose first decode_prompt_len tokens are the prompts
    decode_prompt_len: int
    decode_new_tokens: int
    decode_repeats: int

    PRESETS = {
        "smoke": dict(
            tokenizer="smollm2-135m", corpus="shakespeare", vocab_size=512, d_model=64, n_heads=2, n_kv_heads=1,
            head_dim=32, d_ffn=128, n_layers=4, seq_len=32, steps=4, batch_size=4, micro_batch_size=2, lr=3e-3,
            warmup_frac=0.25, p_max=0.2, time_schedule="exp", e_scale=0.2, curriculum="rotational", rotation=0,
            recipes=("baseline", "ld_ee"), seeds=(0,), spread_recipes=(), val_windows=4, eval_windows=4, probe_points=2,
            precision="no", decode_exits=(2,), decode_drafts=(2,), decode_reuses=("kvq", "none"), decode_prompts=2,
            decode_prompt_len=8, decode_new_tokens=6, decode_repeats=1),
        # code, as Fig. 11's held-out set (The Stack): predictable enough for shallow exits to draft
        "cpu": dict(
            tokenizer="smollm2-135m", corpus="python-stdlib", vocab_size=4096, d_model=128, n_heads=2,
            n_kv_heads=1, head_dim=64, d_ffn=384, n_layers=12, seq_len=128, steps=400, batch_size=16,
            micro_batch_size=16, lr=3e-3, warmup_frac=0.05, p_max=0.2, time_schedule="exp", e_scale=0.2,
            curriculum="rotational", rotation=0, recipes=tuple(RECIPES), seeds=(0, 1),
            spread_recipes=("baseline", "ld", "ld_ee", "ld_const"), val_windows=32,
            eval_windows=64, probe_points=6, precision="bf16", decode_exits=(2, 3, 6), decode_drafts=(2, 4),
            decode_reuses=("kvq", "kv", "none"), decode_prompts=8, decode_prompt_len=32, decode_new_tokens=64,
            decode_repeats=2),
        "gpu": dict(
            tokenizer="smollm2-135m", corpus="gutenberg-poetry", vocab_size=0, d_model=512, n_heads=8, n_kv_heads=4,
            head_dim=64, d_ffn=1536, n_layers=16, seq_len=512, steps=5000, batch_size=64, micro_batch_size=32,
            lr=3e-3, warmup_frac=0.05, p_max=0.2, time_schedule="exp", e_scale=0.2, curriculum="rotational",
            rotation=0, recipes=tuple(RECIPES), seeds=(0, 1, 2), spread_recipes=tuple(RECIPES), val_windows=128,
            eval_windows=256,
            probe_points=10, precision="bf16", decode_exits=(4, 8, 12), decode_drafts=(2, 4, 8),
            decode_reuses=("kvq", "kv", "none"), decode_prompts=32, decode_prompt_len=64, decode_new_tokens=128,
            decode_repeats=3),
    }

    def __post_init__(self) -> None:
        object.__setattr__(self, "recipes", tuple(self.recipes))
        object.__setattr__(self, "seeds", tuple(self.seeds))
        object.__setattr__(self, "spread_recipes", tuple(self.spread_recipes))
        unknown = [r for r in self.recipes if r not in RECIPES]
        if unknown:
            raise ConfigError(f"recipes {unknown} unknown; choose from {list(RECIPES)}")
        stray = [r for r in self.spread_recipes if r not in self.recipes]
        if stray:
            raise ConfigError(f"spread_recipes {stray} are not among recipes {list(self.recipes)}")
        if "baseline" not in self.recipes:
            raise ConfigError("recipes must include 'baseline' (every comparison is against it)")
        if self.time_schedule not in TIME_SCHEDULES:
            raise ConfigError(f"time_schedule={self.time_schedule!r}: choose from {list(TIME_SCHEDULES)}")
        if self.curriculum not in CURRICULA:
            raise ConfigError(f"curriculum={self.curriculum!r}: choose from {list(CURRICULA)}")
        if self.n_layers < 4:
            raise ConfigError(f"n_layers={self.n_layers}: early exits need at least 4 layers")
        if self.d_model != self.n_heads * self.head_dim:
            raise ConfigError(f"d_model={self.d_model} must equal n_heads * head_dim = {self.n_heads * self.head_dim}")
        if not self.seeds:
            raise ConfigError("seeds must name at least one seed")
        if self.precision not in ("no", "bf16"):
            raise ConfigError(f"precision={self.precision!r}: use 'bf16' or 'no'")
        for name in ("decode_exits", "decode_drafts", "decode_reuses"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        bad = [e for e in self.decode_exits if not 1 <= e < self.n_layers]
        if bad:
            raise ConfigError(f"decode_exits {bad} must lie in [1, n_layers={self.n_layers})")
        unknown = [r for r in self.decode_reuses if r not in REUSE_MODES]
        if unknown or "kvq" not in self.decode_reuses:
            raise ConfigError(f"decode_reuses {list(self.decode_reuses)} must include 'kvq' and name only "
                              f"{list(REUSE_MODES)}")
        if self.decode_prompt_len >= self.seq_len:
            raise ConfigError(f"decode_prompt_len={self.decode_prompt_len} must be shorter than seq_len={self.seq_len}")

    def model_config(self, vocab_size: int) -> DecoderConfig:
        return DecoderConfig(
            family="llama", vocab_size=vocab_size, d_model=self.d_model, n_layers=self.n_layers,
            n_heads=self.n_heads, n_kv_heads=self.n_kv_heads, head_dim=self.head_dim, d_ffn=self.d_ffn,
            activation="silu", norm_eps=1e-5, norm_kind="rms", post_norms=False, embed_scale=1.0, qk_norm=False,
            rope_thetas=(1e4,) * self.n_layers, sliding_windows=(None,) * self.n_layers,
            attn_scale=self.head_dim**-0.5, tie_embeddings=False)

    def training_key(self) -> dict[str, Any]:
        """The fields a trained run depends on: everything but the decoding settings, so that changing how the
        models are decoded never retrains them."""
        return {name: value for name, value in self.to_dict().items() if not name.startswith("decode_")}

    @property
    def middle_exit(self) -> int:
        """Table 1's "middle layer": the exit after L/2 layers."""
        return self.n_layers // 2


@dataclass(frozen=True)
class LayerSkipRun:
    recipe: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.recipe}-s{self.seed}"


def runs(cfg: LayerSkipConfig) -> list[LayerSkipRun]:
    """Every recipe with the first seed, then the spread recipes with each further seed."""
    first = [LayerSkipRun(recipe, cfg.seeds[0]) for recipe in cfg.recipes]
    return first + [LayerSkipRun(recipe, seed) for seed in cfg.seeds[1:] for recipe in cfg.spread_recipes]


# ---- data ------------------------------------------------------------------------------------------------------


@functools.cache
def vocabulary(cfg: LayerSkipConfig) -> CompactVocab | None:
    return CompactVocab.from_corpus(cfg.corpus, cfg.tokenizer, cfg.vocab_size) if cfg.vocab_size else None


def train_windows(cfg: LayerSkipConfig, vocab: CompactVocab | None):
    cache = data.token_cache(cfg.corpus, cfg.tokenizer, "train", progress=False)
    windows = data.PackedWindows(cache, cfg.seq_len, bos_id=cache.bos_id)
    return windows if vocab is None else CompactWindows(windows, vocab)


def heldout(cfg: LayerSkipConfig, vocab: CompactVocab | None, split: str, n: int, seed: int = 0) -> torch.Tensor:
    windows = data.heldout_windows(cfg.corpus, cfg.tokenizer, cfg.seq_len, n, split=split, seed=seed)
    return windows if vocab is None else vocab.encode(windows)


# ---- one run ---------------------------------------------------------------------------------------------------


def train_config(cfg: LayerSkipConfig, seed: int) -> TrainConfig:
    return TrainConfig(lr=cfg.lr, schedule="cosine", warmup_steps=max(1, round(cfg.warmup_frac * cfg.steps)),
                       max_steps=cfg.steps, batch_size=cfg.batch_size, micro_batch_size=cfg.micro_batch_size,
                       eval_every=0, checkpoint_every=0, checkpoint_final=False, seed=seed,
                       mixed_precision=cfg.precision)


def build(run: LayerSkipRun, cfg: LayerSkipConfig, vocab_size: int,
          windows: torch.Tensor) -> tuple[LayerSkipDecoder, LayerSkipLoss, ExitProbe, TrainConfig]:
    """The wrapped model, its loss hook and Fig. 11 probe, and the trainer config of one run."""
    dropout, exit_loss, overrides = RECIPES[run.recipe]
    tcfg = train_config(cfg, run.seed)
    decoder = init_weights(Decoder(cfg.model_config(vocab_size)), seed=run.seed)
    model = LayerSkipDecoder(decoder, p_max=cfg.p_max if dropout else 0.0, time_schedule=cfg.time_schedule,
                             total_steps=cfg.steps, accumulation_steps=tcfg.accumulation_steps(1), seed=run.seed,
                             layer_schedule=overrides.get("layer_schedule", "exp"))
    hook = LayerSkipLoss(model, e_scale=cfg.e_scale if exit_loss else 0.0,
                         curriculum=overrides.get("curriculum", cfg.curriculum), rotation=cfg.rotation or None)
    probe = ExitProbe(model, windows, exits=(cfg.middle_exit, cfg.n_layers),
                      every=max(1, cfg.steps // cfg.probe_points))
    return model, hook, probe, tcfg


def run_one(run: LayerSkipRun, cfg: LayerSkipConfig, work: Path, vocab: CompactVocab | None,
            windows: dict[str, torch.Tensor], key: str) -> dict[str, Any]:
    folder = work / run.name
    train_dir = folder / f"train-{key}"
    for stale in folder.glob("train-*"):
        if stale != train_dir:
            shutil.rmtree(stale, ignore_errors=True)
    size = vocab.size if vocab is not None else len(data.load_tokenizer(cfg.tokenizer))
    model, hook, probe, tcfg = build(run, cfg, size, windows["val"])
    result = train(model, train_windows(cfg, vocab), tcfg, train_dir, hooks=[hook, probe])
    log = pd.read_csv(train_dir / "metrics.csv").dropna(subset=["loss"])
    exits = exit_metrics(model.decoder, windows["test"], batch_size=cfg.micro_batch_size)
    convert.save(model.decoder, folder / "model")
    shutil.rmtree(train_dir / "checkpoint", ignore_errors=True)
    return {"name": run.name, "recipe": run.recipe, "seed": run.seed, "seconds": result.seconds,
            "step_seconds": result.seconds / cfg.steps, "exits": exits.to_dict("list"),
            "probe": probe.final(cfg.steps), "train_curve": {"step": log["step"].tolist(),
                                                              "loss": log["loss"].tolist()}}


def run_grid(cfg: LayerSkipConfig, work: Path) -> list[dict[str, Any]]:
    vocab = vocabulary(cfg)
    if vocab is not None:
        vocab.save(work / "vocab.json")
    windows = {"val": heldout(cfg, vocab, "validation", cfg.val_windows, seed=1),
               "test": heldout(cfg, vocab, "test", cfg.eval_windows, seed=0)}
    return experiments.run_cached(runs(cfg), work, (cfg.training_key(),), CODE_MODULES,
                                  lambda run, key: run_one(run, cfg, work, vocab, windows, key))


def load_model(work: Path, run_name: str) -> Decoder:
    folder = Path(work) / run_name / "model"
    if not folder.exists():
        raise FileNotFoundError(f"no trained model at {folder}; run_grid first")
    return convert.load(folder)
