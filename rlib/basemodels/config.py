"""Chapter 00's settings: the base models, corpora and evaluation sizes per profile.

The papers convert pretrained LMs (Gemma 1B/2B, TinyLlama 1.1B, Pythia 1B in the Relaxed Recursive Transformers paper,
Sec. 4 and Table D.1). The book converts the two real LMs that load offline here, SmolLM2-135M and Gemma 3 270M.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlib.config import ConfigError, Preset
from rlib.precision import PRECISIONS
from rlib.tasks import SUITES

__all__ = ["DTYPES", "PRETRAINING", "PROMPTS", "SAMPLES", "ModelsDataConfig"]


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


PRETRAINING = {
    "smollm2-135m": ("SmolLM2 mix: FineWeb-Edu, DCLM, The Stack, math (model card)", "2T"),
    "gemma3-270m": ("Gemma 3 mix: web, code, math, 140+ languages (model card)", "6T"),
}


@dataclass(frozen=True)
class ModelsDataConfig(Preset):
    models: tuple[str, ...]  # embedded asset names, or `hf:ORG/NAME` in the paper profile
    eval_corpora: tuple[str, ...]  # held-out perplexity is measured on these
    stats_corpora: tuple[str, ...]  # corpus statistics (tokenizes every split with every tokenizer)
    dtypes: tuple[str, ...]
    seq_len: int  # tokens per held-out window (BOS included where the tokenizer needs it)
    n_eval_windows: int  # windows per (model, corpus); a seeded sample of the test split
    fp32_windows: int | None  # windows the fp32 reference scores: the first ones of that sample, so that the bf16 /
    # fp32 check is paired on them (`precision_check`); None = all n_eval_windows
    batch_size: int
    prompts: tuple[str, ...]
    max_new_tokens: int
    latency_seq_len: int
    latency_repeats: int
    task_suite: str  # "local" (rlib.tasks.TASKS) or "standard" (the paper's lm-eval tasks, local where unavailable)
    task_limit: int | None  # items per task; None = all (200 per local task)
    task_precision: str  # the task suite's dtype: "auto" (bf16 where the CPU/GPU computes it natively, else fp32, as
    # later chapters score their models: rlib.precision), "bf16" or "no" (fp32)

    PRESETS = {
        "smoke": dict(models=("smollm2-135m",), eval_corpora=("shakespeare", "humaneval"),
                      stats_corpora=("shakespeare", "humaneval"), dtypes=("float32", "bfloat16"), seq_len=128,
                      n_eval_windows=4, fp32_windows=None, batch_size=4, prompts=PROMPTS[:2], max_new_tokens=8,
                      latency_seq_len=128, latency_repeats=2, task_suite="local", task_limit=4,
                      task_precision="auto"),
        "cpu": dict(models=("smollm2-135m", "gemma3-270m"),
                    eval_corpora=("shakespeare", "gutenberg-poetry", "python-stdlib", "humaneval"),
                    stats_corpora=("shakespeare", "gutenberg-poetry", "python-stdlib", "humaneval"),
                    dtypes=("float32", "bfloat16"), seq_len=256, n_eval_windows=32, fp32_windows=6, batch_size=8,
                    prompts=PROMPTS, max_new_tokens=24, latency_seq_len=256, latency_repeats=5, task_suite="local",
                    task_limit=50,
                    task_precision="auto"),
        "gpu": dict(models=("smollm2-135m", "gemma3-270m"),
                    eval_corpora=("shakespeare", "gutenberg-poetry", "python-stdlib", "humaneval"),
                    stats_corpora=("shakespeare", "gutenberg-poetry", "python-stdlib", "humaneval"),
                    dtypes=("float32", "bfloat16"), seq_len=1024, n_eval_windows=256, fp32_windows=None, batch_size=16,
                    prompts=PROMPTS, max_new_tokens=48, latency_seq_len=1024, latency_repeats=20, task_suite="standard",
                    task_limit=None, task_precision="auto"),
        "paper": dict(models=("hf:google/gemma-2-2b", "hf:TinyLlama/TinyLlama_v1.1", "hf:EleutherAI/pythia-1b"),
                      eval_corpora=("shakespeare", "gutenberg-poetry", "python-stdlib", "humaneval"),
                      stats_corpora=("shakespeare", "gutenberg-poetry", "python-stdlib", "humaneval"),
                      dtypes=("bfloat16",), seq_len=2048, n_eval_windows=512, fp32_windows=None, batch_size=16,
                      prompts=PROMPTS, max_new_tokens=64, latency_seq_len=2048, latency_repeats=20,
                      task_suite="standard", task_limit=None, task_precision="auto"),
    }

    def __post_init__(self) -> None:

        bad = [d for d in self.dtypes if d not in DTYPES]
        if bad:
            raise ConfigError(f"dtypes {bad} unknown; choose from {list(DTYPES)}")

        if self.task_suite not in SUITES:
            raise ConfigError(f"task_suite={self.task_suite!r} unknown; choose from {list(SUITES)}")
        if self.task_precision not in PRECISIONS:
            raise ConfigError(f"task_precision={self.task_precision!r} unknown; choose from {list(PRECISIONS)} "
                              "('auto': bf16 where the device computes it natively, else fp32)")
        if self.task_limit is not None and self.task_limit < 1:
            raise ConfigError(f"task_limit={self.task_limit} must be >= 1, or None for every item")
        if self.seq_len < 2 or self.n_eval_windows < 1:
            raise ConfigError(f"seq_len={self.seq_len} must be >= 2 and n_eval_windows={self.n_eval_windows} >= 1")
        if self.fp32_windows is not None and self.fp32_windows < 2:
            raise ConfigError(f"fp32_windows={self.fp32_windows} must be >= 2 (a paired standard error needs two "
                              "windows), or None for all n_eval_windows")

    def reference_windows(self, available: int) -> int:
        """How many of `available` windows the fp32 reference scores (the first ones, paired with every dtype)."""
        return available if self.fp32_windows is None else min(self.fp32_windows, available)
