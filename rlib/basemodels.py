"""Chapter 00: the base models and corpora every later chapter starts from.

The papers convert pretrained LMs (Gemma 1B/2B, TinyLlama 1.1B, Pythia 1B in the Relaxed
Recursive Transformers paper, Sec. 4 and Table D.1) and pretrain on web text. The book converts
the two real LMs that load offline here, SmolLM2-135M and Gemma 3 270M, and trains on
Shakespeare, Gutenberg poetry and Python source. This module measures them once, on held-out
documents only, so every later number has a baseline:

    corpus_table       documents, characters and tokens per split and tokenizer
    tokenizer_table    vocabulary, special tokens, fertility (characters per token), a segmentation
    evaluate_models    per model and dtype: held-out perplexity, greedy generations, forward latency
    task_suite_table   per model: the zero-shot task suite through lm-eval (the analog of Table D.1)
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch

from rlib import assets, data
from rlib import eval as rl_eval
from rlib.config import Preset
from rlib.progress import progress

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
PROMPTS = (
    "The capital of France is",
    "ROMEO:\nBut soft, what light",
    "def fibonacci(n):",
    "Once upon a time, there was a little girl who",
)
SAMPLES = {
    "verse": "Shall I compare thee to a summer's day? Thou art more lovely and more temperate.",
    "code": "def mean(xs: list[float]) -> float:\n    return sum(xs) / len(xs)",
}


@dataclass(frozen=True)
class ModelsDataConfig(Preset):
    models: tuple[str, ...]  # embedded asset names, or `hf:ORG/NAME` in the paper profile
    eval_corpora: tuple[str, ...]  # held-out perplexity is measured on these
    stats_corpora: tuple[str, ...]  # corpus statistics (tokenizes every split with every tokenizer)
    dtypes: tuple[str, ...]
    seq_len: int  # tokens per held-out window (BOS included where the tokenizer needs it)
    n_eval_windows: int  # windows per (model, corpus); a seeded sample of the test split
    batch_size: int
    prompts: tuple[str, ...]
    max_new_tokens: int
    latency_seq_len: int
    latency_repeats: int
    task_suite: str  # "local" (rlib.tasks.TASKS) or "standard" (the paper's lm-eval tasks, local where unavailable)
    task_limit: int | None  # items per task; None = all (200 per local task)

    PRESETS = {
        "smoke": dict(models=("smollm2-135m",), eval_corpora=("shakespeare", "humaneval"),
                      stats_corpora=("shakespeare", "humaneval"), dtypes=("float32", "bfloat16"), seq_len=128,
                      n_eval_windows=4, batch_size=4, prompts=PROMPTS[:2], max_new_tokens=8,
                      latency_seq_len=128, latency_repeats=2, task_suite="local", task_limit=4),
        "cpu": dict(models=("smollm2-135m", "gemma3-270m"),
                    eval_corpora=("shakespeare", "gutenberg-poetry", "python-stdlib", "humaneval"),
                    stats_corpora=("shakespeare", "gutenberg-poetry", "python-stdlib", "humaneval"),
                    dtypes=("float32", "bfloat16"), seq_len=256, n_eval_windows=64, batch_size=8, prompts=PROMPTS,
                    max_new_tokens=24, latency_seq_len=256, latency_repeats=10, task_suite="local", task_limit=100),
        "gpu": dict(models=("smollm2-135m", "gemma3-270m"),
                    eval_corpora=("shakespeare", "gutenberg-poetry", "python-stdlib", "humaneval"),
                    stats_corpora=("shakespeare", "gutenberg-poetry", "python-stdlib", "humaneval"),
                    dtypes=("float32", "bfloat16"), seq_len=1024, n_eval_windows=256, batch_size=16,
                    prompts=PROMPTS, max_new_tokens=48, latency_seq_len=1024, latency_repeats=20, task_suite="standard",
                    task_limit=None),
        "paper": dict(models=("hf:google/gemma-2-2b", "hf:TinyLlama/TinyLlama_v1.1", "hf:EleutherAI/pythia-1b"),
                      eval_corpora=("shakespeare", "gutenberg-poetry", "python-stdlib", "humaneval"),
                      stats_corpora=("shakespeare", "gutenberg-poetry", "python-stdlib", "humaneval"),
                      dtypes=("bfloat16",), seq_len=2048, n_eval_windows=512, batch_size=16, prompts=PROMPTS,
                      max_new_tokens=64, latency_seq_len=2048, latency_repeats=20, task_suite="standard",
                      task_limit=None),
    }

    def __post_init__(self) -> None:
        from rlib.config import ConfigError

        bad = [d for d in self.dtypes if d not in DTYPES]
        if bad:
            raise ConfigError(f"dtypes {bad} unknown; choose from {list(DTYPES)}")
        from rlib.tasks import SUITES

        if self.task_suite not in SUITES:
            raise ConfigError(f"task_suite={self.task_suite!r} unknown; choose from {list(SUITES)}")
        if self.task_limit is not None and self.task_limit < 1:
            raise ConfigError(f"task_limit={self.task_limit} must be >= 1, or None for every item")
        if self.seq_len < 2 or self.n_eval_windows < 1:
            raise ConfigError(f"seq_len={self.seq_len} must be >= 2 and n_eval_windows={self.n_eval_windows} >= 1")


def device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def corpus_table(cfg: ModelsDataConfig) -> pd.DataFrame:
    """Documents, characters and tokens per (corpus, split) and tokenizer."""
    return data.corpus_stats(cfg.stats_corpora, cfg.models)


def tokenizer_table(cfg: ModelsDataConfig, stats: pd.DataFrame) -> pd.DataFrame:
    """One row per tokenizer: vocabulary, special tokens, fertility per corpus, a sample segmentation."""
    rows = []
    for name in cfg.models:
        tok = assets.load_tokenizer(name)
        row = {"tokenizer": name, "vocab_size": len(tok), "adds_bos": data.bos_id_for(tok) is not None,
               "bos": tok.bos_token, "eos": tok.eos_token}
        col = f"tokens_{name}"
        for corpus, group in stats.groupby("corpus", sort=False):
            row[f"chars_per_token[{corpus}]"] = round(group["characters"].sum() / max(group[col].sum(), 1), 3)
        for kind, text in SAMPLES.items():
            pieces = tok.convert_ids_to_tokens(tok(text, add_special_tokens=False)["input_ids"])
            row[f"tokens[{kind}]"] = len(pieces)
            row[f"segmentation[{kind}]"] = "·".join(pieces[:16]) + ("·…" if len(pieces) > 16 else "")
        rows.append(row)
    return pd.DataFrame(rows)


def evaluate_models(cfg: ModelsDataConfig, seed: int = 0) -> dict[str, pd.DataFrame]:
    """Held-out perplexity, greedy generations and forward latency, one model load per (model, dtype).

    Returns frames `perplexity` (model, dtype, corpus, ppl, nll, nll_se, n_tokens, ...),
    `generations` (model, dtype, prompt, continuation) and `latency` (model, dtype, median_s, ...).
    """
    dev = device()
    windows = {(m, c): data.heldout_windows(c, m, cfg.seq_len, _n_windows(c, m, cfg), split="test", seed=seed)
               for m in cfg.models for c in cfg.eval_corpora}  # [N, T] each
    ppl_rows, gen_rows, lat_rows = [], [], []
    combos = [(m, d) for m in cfg.models for d in cfg.dtypes]
    for model_name, dtype_name in progress(combos, desc="models x dtypes"):
        model = assets.load_model(model_name, dtype=DTYPES[dtype_name], device=dev)
        tok = assets.load_tokenizer(model_name)
        for corpus in cfg.eval_corpora:
            res = rl_eval.perplexity(model, windows[(model_name, corpus)], batch_size=cfg.batch_size, device=dev,
                                     progress=False)
            ppl_rows.append({"model": model_name, "dtype": dtype_name, "corpus": corpus, **res})
        for prompt, text in zip(cfg.prompts, rl_eval.greedy_generate(model, tok, list(cfg.prompts),
                                                                      cfg.max_new_tokens)):
            gen_rows.append({"model": model_name, "dtype": dtype_name, "prompt": prompt, "continuation": text})
        lat = rl_eval.forward_latency(model, seq_len=cfg.latency_seq_len, repeats=cfg.latency_repeats)
        lat_rows.append({"model": model_name, "dtype": dtype_name, "device": dev, **lat})
        del model
    return {"perplexity": pd.DataFrame(ppl_rows), "generations": pd.DataFrame(gen_rows),
            "latency": pd.DataFrame(lat_rows)}


# What the model cards say about each model's pretraining (the "Dataset" and "N_token" columns of Table D.1).
PRETRAINING = {
    "smollm2-135m": ("SmolLM2 mix: FineWeb-Edu, DCLM, The Stack, math (model card)", "2T"),
    "gemma3-270m": ("Gemma 3 mix: web, code, math, 140+ languages (model card)", "6T"),
}


def task_suite_table(cfg: ModelsDataConfig, dtype: str = "float32") -> tuple[pd.DataFrame, str]:
    """Every base model on the profile's task suite through lm-eval, zero-shot.

    Returns (long table of `rlib.eval.suite_table` with the model's non-embedding parameter count and
    pretraining data added, a note naming the suite that ran and why).
    """
    from rlib import counting, tasks
    from rlib.model import convert

    names, note = tasks.resolve_suite(cfg.task_suite)
    rows = []
    for name in progress(cfg.models, desc="task suite"):
        model = convert.from_transformers(assets.load_model(name, dtype=DTYPES[dtype], device=device()))
        table = rl_eval.suite_table({name: model}, names, limit=cfg.task_limit, batch_size=cfg.batch_size,
                                    tokenizer=assets.load_tokenizer(name), dtype=dtype)
        counts = counting.count_parameters(model)
        data_name, tokens = PRETRAINING.get(name, ("see the model card", "?"))
        rows.append(table.assign(non_embedding_params=counts["non_embedding"], pretraining_data=data_name,
                                 pretraining_tokens=tokens))
        del model
    return pd.concat(rows, ignore_index=True), note


def task_suite_summary(long: pd.DataFrame) -> pd.DataFrame:
    """Table D.1's layout: model, non-embedding parameters, pretraining data and tokens, one column per task, Avg."""
    wide = rl_eval.suite_summary(long)
    meta = long.groupby("model", sort=False)[["non_embedding_params", "pretraining_data", "pretraining_tokens"]].first()
    meta["non_embedding_params"] = (meta["non_embedding_params"] / 1e6).round(1).astype(str) + "M"
    return meta.reset_index().merge(wide, on="model")


def _n_windows(corpus: str, model: str, cfg: ModelsDataConfig) -> int:
    """The preset's window count, capped by what the test split holds (HumanEval is small)."""
    cache = data.token_cache(corpus, model, "test", progress=False)
    available = len(data.PackedWindows(cache, cfg.seq_len, bos_id=cache.bos_id))
    return min(cfg.n_eval_windows, available)


def perplexity_summary(ppl: pd.DataFrame) -> pd.DataFrame:
    """Wide view: one row per (model, corpus), perplexity per dtype and the bf16/fp32 ratio."""
    wide = ppl.pivot_table(index=["model", "corpus"], columns="dtype", values="ppl").reset_index()
    if {"float32", "bfloat16"} <= set(wide.columns):
        wide["bf16_over_fp32"] = wide["bfloat16"] / wide["float32"]
    return wide
