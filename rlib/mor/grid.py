"""Chapter 03's experiments: Mixture-of-Recursions pretrained from scratch (paper 001, Sec. 3-4, App. C, F).

Every model has the same widths (SmolLM-like, scaled down by the profile) and a vanilla depth L. A run is a
`MoRVariant`: a vanilla model, or a `MoRSpec` (MoR expert- or token-choice, or the fixed-depth Recursive
baseline) with its sharing strategy and KV strategy, trained for one of three budgets:

    "flops"     the isoFLOP budget `cfg.budget` in the paper's forward-FLOPs convention (`rlib.mor.flops`): a
                model that spends fewer FLOPs per token trains on more tokens (Table 3's isoFLOP rows, Fig. 3)
    "tokens"    as many tokens as vanilla gets at that budget (Table 3's fixed-token rows)
    "ablation"  `cfg.ablation_tokens` tokens, the same for every model (Tables 4/8/10/11/12 train on 10B tokens)

Runs are cached and resumable like the other chapters' (`rlib.experiments`). Text is SmolLM2's tokenizer on the
poetry corpus with the compact vocabulary of `rlib.vocab` (the profile's `vocab_size`; 0 keeps all 49,152 ids).
"""

from __future__ import annotations

import dataclasses
import functools
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from rlib import data, experiments
from rlib import eval as rl_eval
from rlib.config import ConfigError, Preset
from rlib.model import Decoder, DecoderConfig, convert
from rlib.mor import analysis, io
from rlib.mor.flops import paper_flops_per_token
from rlib.mor.model import MoRDecoder, MoRLoss, build, vanilla
from rlib.mor.spec import MoRSpec
from rlib.progress import progress
from rlib.train import TrainConfig, train
from rlib.vocab import CompactVocab, CompactWindows

__all__ = ["BUDGETS", "MoRConfig", "MoRVariant", "ROUTER_ABLATIONS", "run_grid", "variants"]

BUDGETS = ("flops", "tokens", "ablation")
CODE_MODULES = ("rlib.mor.grid", "rlib.mor.model", "rlib.mor.routers", "rlib.mor.spec", "rlib.mor.flops",
                "rlib.mor.analysis", "rlib.train", "rlib.data", "rlib.vocab", "rlib.model.decoder",
                "rlib.model.layers")

# Table 10 / 11 rows beyond the final designs (which are the main runs): name -> spec changes
ROUTER_ABLATIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "ec_aux_router": ("expert", dict(aux="router")),
    "ec_tanh": ("expert", dict(router_func="tanh")),
    "ec_mlp": ("expert", dict(router_arch="mlp")),
    "ec_alpha1": ("expert", dict(alpha=1.0)),
    "ec_zloss": ("expert", dict(z_coef=1e-3)),
    "ec_no_aux": ("expert", dict(aux="none", aux_coef=0.0)),
    "tc_loss_free": ("token", dict(balance="loss_free", bias_rate=1e-3)),
    "tc_mlp": ("token", dict(router_arch="mlp")),
    "tc_no_z": ("token", dict(z_coef=0.0)),
}


@dataclass(frozen=True)
class MoRConfig(Preset):
    """Chapter 03's settings per profile."""

    tokenizer: str  # the model asset whose tokenizer reads the corpus
    corpus: str
    vocab_size: int  # compact vocabulary size (0 = the tokenizer's own)
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_ffn: int
    n_layers: int  # vanilla depth L (Middle-Cycle with Nr recursions: 1 + (L - 2) / Nr + 1 unique layers)
    seq_len: int
    n_recursions: int  # Nr of the main comparison (the paper: 3)
    extra_recursions: tuple[int, ...]  # further Nr for MoR-EC and Recursive at the isoFLOP budget (Table 3)
    budget: float  # forward FLOPs of the isoFLOP runs (paper convention)
    ablation_tokens: int  # tokens of every ablation run
    batch_size: int
    micro_batch_size: int
    lr: float
    warmup_frac: float
    seeds: tuple[int, ...]  # seeds of the main isoFLOP comparison
    router_ablations: tuple[str, ...]  # names in ROUTER_ABLATIONS
    sharings: tuple[str, ...]  # Recursive-Nr sharing strategies compared at the ablation budget (Table 8)
    kv_share_rows: bool  # Table 12: Recursive and MoR-TC with recursive KV sharing at the ablation budget
    val_windows: int
    eval_windows: int
    evals_per_run: int  # validation points per run (the loss-vs-compute curves of Fig. 3)
    decode_windows: int  # windows decoded token by token for the causal-routing agreement
    precision: str
    head_dim: int = 64

    PRESETS = {
        "smoke": dict(
            tokenizer="smollm2-135m", corpus="shakespeare", vocab_size=512, d_model=64, n_heads=2, n_kv_heads=1,
            d_ffn=128, n_layers=8, seq_len=32, n_recursions=3, extra_recursions=(), budget=4e8, ablation_tokens=256,
            batch_size=4, micro_batch_size=4, lr=3e-3, warmup_frac=0.1, seeds=(0,), router_ablations=("ec_aux_router",),
            sharings=("cycle", "sequence"), kv_share_rows=False, val_windows=4, eval_windows=4, evals_per_run=2,
            decode_windows=1, precision="bf16", head_dim=32),
        # ~40 min on 2 cores: d 256, L 14, 8192-id vocabulary, ~0.2-0.3 M tokens per run
        "cpu": dict(
            tokenizer="smollm2-135m", corpus="gutenberg-poetry", vocab_size=8192, d_model=256, n_heads=4,
            n_kv_heads=2, d_ffn=768, n_layers=14, seq_len=256, n_recursions=3, extra_recursions=(2,), budget=5e12,
            ablation_tokens=160_000, batch_size=16, micro_batch_size=16, lr=3e-3, warmup_frac=0.05, seeds=(0, 1),
            router_ablations=("ec_aux_router", "ec_tanh", "ec_alpha1", "tc_loss_free"),
            sharings=("cycle", "sequence", "middle_cycle", "middle_sequence"), kv_share_rows=True, val_windows=32,
            eval_windows=64, evals_per_run=6, decode_windows=8, precision="bf16"),
        "gpu": dict(
            tokenizer="smollm2-135m", corpus="gutenberg-poetry", vocab_size=0, d_model=512, n_heads=8, n_kv_heads=4,
            d_ffn=1536, n_layers=14, seq_len=512, n_recursions=3, extra_recursions=(2, 4), budget=2e15,
            ablation_tokens=50_000_000, batch_size=64, micro_batch_size=32, lr=3e-3, warmup_frac=0.05,
            seeds=(0, 1, 2), router_ablations=tuple(ROUTER_ABLATIONS),
            sharings=("cycle", "sequence", "middle_cycle", "middle_sequence"), kv_share_rows=True, val_windows=128,
            eval_windows=256, evals_per_run=10, decode_windows=32, precision="bf16"),
    }

    def __post_init__(self) -> None:
        unknown = [a for a in self.router_ablations if a not in ROUTER_ABLATIONS]
        if unknown:
            raise ConfigError(f"router_ablations {unknown} unknown; choose from {list(ROUTER_ABLATIONS)}")
        for nr in (self.n_recursions, *self.extra_recursions):
            if (self.n_layers - 2) % nr:
                raise ConfigError(f"n_layers={self.n_layers}: Middle-Cycle needs (L - 2) divisible by Nr={nr}")
        if self.d_model != self.n_heads * self.head_dim:
            raise ConfigError(f"d_model={self.d_model} must equal n_heads * head_dim = {self.n_heads * self.head_dim}")
        if self.precision not in ("no", "bf16"):
            raise ConfigError(f"precision={self.precision!r}: use 'bf16' or 'no'")

    def base_config(self, vocab_size: int) -> DecoderConfig:
        return DecoderConfig(
            family="llama", vocab_size=vocab_size, d_model=self.d_model, n_layers=1, n_heads=self.n_heads,
            n_kv_heads=self.n_kv_heads, head_dim=self.head_dim, d_ffn=self.d_ffn, activation="silu", norm_eps=1e-5,
            norm_kind="rms", post_norms=False, embed_scale=1.0, qk_norm=False, rope_thetas=(1e4,),
            sliding_windows=(None,), attn_scale=self.head_dim**-0.5, tie_embeddings=True)

    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len


@dataclass(frozen=True)
class MoRVariant:
    spec: MoRSpec | None = None  # None = vanilla
    budget: str = "flops"
    seed: int = 0
    tag: str = ""  # the ablation's name, if any

    def __post_init__(self) -> None:
        if self.budget not in BUDGETS:
            raise ConfigError(f"budget={self.budget!r}: choose from {BUDGETS}")

    @property
    def name(self) -> str:
        s = self.spec
        if s is None:
            base = "vanilla"
        else:
            kind = {"expert": "ec", "token": "tc", "none": "rec"}[s.routing]
            base = f"{kind}{s.n_recursions}-{s.sharing.replace('_', '')}" + ("-share" if s.kv == "share" else "")
        tag = f"-{self.tag}" if self.tag else ""
        return f"{base}{tag}-{self.budget}-s{self.seed}"

    @property
    def label(self) -> str:
        return "Vanilla" if self.spec is None else self.spec.label() + (f" [{self.tag}]" if self.tag else "")


def unrolled_layers(spec: MoRSpec | None, n_layers: int) -> int:
    """The unrolled depth closest to L that the spec's sharing divides (as the paper adds or drops layers)."""
    if spec is None:
        return n_layers
    nr = spec.n_recursions
    if spec.sharing.startswith("middle"):
        return 2 + nr * max(1, round((n_layers - 2) / nr))
    return nr * max(1, round(n_layers / nr))


def variants(cfg: MoRConfig) -> list[MoRVariant]:
    """Every training run of the chapter, main comparison first."""
    nr = cfg.n_recursions
    runs = []
    for seed in cfg.seeds:
        runs += [MoRVariant(None, "flops", seed), MoRVariant(MoRSpec.recursive(nr), "flops", seed),
                 MoRVariant(MoRSpec.expert(nr), "flops", seed), MoRVariant(MoRSpec.token(nr), "flops", seed)]
    first = cfg.seeds[0]
    runs.append(MoRVariant(MoRSpec.expert(nr, kv="share"), "flops", first))
    runs.append(MoRVariant(MoRSpec.expert(nr), "tokens", first))
    for extra in cfg.extra_recursions:
        runs += [MoRVariant(MoRSpec.recursive(extra), "flops", first),
                 MoRVariant(MoRSpec.expert(extra), "flops", first), MoRVariant(MoRSpec.expert(extra), "tokens", first)]
    runs.append(MoRVariant(MoRSpec.expert(nr), "ablation", first))  # the reference row of the ablation tables
    runs.append(MoRVariant(MoRSpec.token(nr), "ablation", first))
    for name in cfg.router_ablations:
        routing, changes = ROUTER_ABLATIONS[name]
        spec = (MoRSpec.expert if routing == "expert" else MoRSpec.token)(nr, **changes)
        runs.append(MoRVariant(spec, "ablation", first, tag=name))
    runs.append(MoRVariant(None, "ablation", first))
    for sharing in cfg.sharings:
        runs.append(MoRVariant(MoRSpec.recursive(nr, sharing=sharing), "ablation", first))
    if cfg.kv_share_rows:
        runs += [MoRVariant(MoRSpec.recursive(nr, kv="share"), "ablation", first),
                 MoRVariant(MoRSpec.expert(nr, kv="share"), "ablation", first),
                 MoRVariant(MoRSpec.token(nr, kv="share"), "ablation", first)]
    names = [v.name for v in runs]
    return [v for i, v in enumerate(runs) if v.name not in names[:i]]


# ---- data ------------------------------------------------------------------------------------------------------


@functools.cache
def vocabulary(cfg: MoRConfig) -> CompactVocab | None:
    """The compact vocabulary of the profile (counted once per process; None keeps the tokenizer's own)."""
    return CompactVocab.from_corpus(cfg.corpus, cfg.tokenizer, cfg.vocab_size) if cfg.vocab_size else None


def _encode(windows: torch.Tensor, vocab: CompactVocab | None) -> torch.Tensor:
    return windows if vocab is None else vocab.encode(windows)


def train_windows(cfg: MoRConfig, vocab: CompactVocab | None):
    cache = data.token_cache(cfg.corpus, cfg.tokenizer, "train", progress=False)
    windows = data.PackedWindows(cache, cfg.seq_len, bos_id=cache.bos_id)
    return windows if vocab is None else CompactWindows(windows, vocab)


def heldout(cfg: MoRConfig, vocab: CompactVocab | None, split: str, n: int, seed: int = 0) -> torch.Tensor:
    return _encode(data.heldout_windows(cfg.corpus, cfg.tokenizer, cfg.seq_len, n, split=split, seed=seed), vocab)


# ---- one run ---------------------------------------------------------------------------------------------------


def make_model(variant: MoRVariant, cfg: MoRConfig, vocab_size: int) -> MoRDecoder | Decoder:
    base = cfg.base_config(vocab_size)
    layers = unrolled_layers(variant.spec, cfg.n_layers)
    if variant.spec is None:
        return vanilla(base, layers, seed=variant.seed)
    return build(base, layers, variant.spec, seed=variant.seed)


def run_steps(variant: MoRVariant, cfg: MoRConfig) -> tuple[int, float]:
    """(optimizer steps, forward FLOPs per token) of a run under its budget."""
    per_token = paper_flops_per_token(cfg.d_model, cfg.d_ffn, cfg.seq_len,
                                      unrolled_layers(variant.spec, cfg.n_layers), variant.spec)
    if variant.budget == "flops":
        tokens = cfg.budget / per_token
    elif variant.budget == "tokens":
        tokens = cfg.budget / paper_flops_per_token(cfg.d_model, cfg.d_ffn, cfg.seq_len, cfg.n_layers)
    else:
        tokens = cfg.ablation_tokens
    return max(2, round(tokens / cfg.tokens_per_step())), per_token


def budget_table(cfg: MoRConfig) -> pd.DataFrame:
    """Per run: unrolled depth, forward FLOPs per token, optimizer steps and tokens under its budget."""
    rows = []
    for v in variants(cfg):
        if v.seed != cfg.seeds[0]:
            continue
        steps, per_token = run_steps(v, cfg)
        rows.append({"run": v.name, "model": v.label, "budget": v.budget,
                     "unrolled_layers": unrolled_layers(v.spec, cfg.n_layers), "mflops_per_token": per_token / 1e6,
                     "steps": steps, "tokens_m": steps * cfg.tokens_per_step() / 1e6})
    return pd.DataFrame(rows)


def train_config(cfg: MoRConfig, steps: int, seed: int) -> TrainConfig:
    return TrainConfig(lr=cfg.lr, schedule="wsd", warmup_steps=max(1, round(cfg.warmup_frac * steps)),
                       max_steps=steps, batch_size=cfg.batch_size, micro_batch_size=cfg.micro_batch_size,
                       eval_every=max(1, steps // cfg.evals_per_run),
                       eval_batches=max(1, cfg.val_windows // cfg.batch_size),
                       checkpoint_every=0, checkpoint_final=False, seed=seed, mixed_precision=cfg.precision)


def test_nll(model, windows: torch.Tensor, cfg: MoRConfig, **kwargs) -> float:
    """Mean next-token NLL over `windows` (rlib.eval.perplexity); kwargs go to the MoR forward (e.g. mode)."""
    model.eval()
    dtype = torch.bfloat16 if cfg.precision == "bf16" else None
    scored = (lambda ids: model(ids, **kwargs)) if kwargs else model
    return rl_eval.perplexity(scored, windows, batch_size=cfg.micro_batch_size, dtype=dtype, progress=False)["nll"]


def non_embedding_params(model) -> int:
    inner = model.decoder if isinstance(model, MoRDecoder) else model
    total = sum(p.numel() for p in model.parameters())
    return total - inner.embed.weight.numel()


def run_variant(variant: MoRVariant, cfg: MoRConfig, work: Path, vocab: CompactVocab | None,
                windows: dict[str, torch.Tensor], key: str) -> dict[str, Any]:
    folder = work / variant.name
    train_dir = folder / f"train-{key}"
    for stale in folder.glob("train-*"):
        if stale != train_dir:
            shutil.rmtree(stale, ignore_errors=True)
    size = vocab.size if vocab is not None else len(data.load_tokenizer(cfg.tokenizer))
    model = make_model(variant, cfg, size)
    steps, per_token = run_steps(variant, cfg)
    routed = isinstance(model, MoRDecoder)
    result = train(model, train_windows(cfg, vocab), train_config(cfg, steps, variant.seed), train_dir,
                   val_windows=windows["val"], hooks=[MoRLoss()] if routed else [])
    log = pd.read_csv(train_dir / "metrics.csv")
    curve = log.dropna(subset=["val_loss"])[["step", "tokens", "val_loss"]]
    after: dict[str, Any] = {"nll": test_nll(model, windows["test"], cfg)}
    if routed and model.recursions:  # sequence orders have no recursion to route or cap
        after["nll_causal"] = test_nll(model, windows["test"], cfg, mode="causal")
        after["routing"] = analysis.routing_metrics(model, windows["test"], cfg.micro_batch_size)
        after["depth_scaling"] = analysis.depth_scaling(model, windows["test"], cfg.micro_batch_size)["nll"].tolist()
    (io.save if routed else convert.save)(model, folder / "model")
    shutil.rmtree(train_dir / "checkpoint", ignore_errors=True)
    return {"name": variant.name, "label": variant.label, "tag": variant.tag, "budget": variant.budget,
            "seed": variant.seed, "spec": None if variant.spec is None else dataclasses.asdict(variant.spec),
            "n_layers": unrolled_layers(variant.spec, cfg.n_layers), "params": non_embedding_params(model),
            "steps": steps, "tokens": result.tokens, "flops_per_token": per_token,
            "train_flops": per_token * result.tokens, "seconds": result.seconds,
            "tokens_per_s": result.tokens / result.seconds, "after": after,
            "curve": {"tokens": curve["tokens"].tolist(), "val_loss": curve["val_loss"].tolist()}}


def run_grid(cfg: MoRConfig, work: Path) -> list[dict[str, Any]]:
    vocab = vocabulary(cfg)
    if vocab is not None:
        vocab.save(work / "vocab.json")
    windows = {"val": heldout(cfg, vocab, "validation", cfg.val_windows, seed=1),
               "test": heldout(cfg, vocab, "test", cfg.eval_windows, seed=0)}
    code = experiments.code_digest(*CODE_MODULES)
    results = []
    for variant in progress(variants(cfg), desc="runs", unit="run"):
        key = experiments.digest(variant, cfg, code)
        results.append(experiments.cached(work / variant.name, key, lambda v=variant, k=key: run_variant(
            v, cfg, work, vocab, windows, k)))
    return results


def load_model(work: Path, variant_name: str) -> MoRDecoder | Decoder:
    folder = work / variant_name / "model"
    if (folder / io.SPEC_FILE).exists():
        return io.load(folder)
    return convert.load(folder)
