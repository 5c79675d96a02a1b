"""Held-out evaluation of causal language models: perplexity, greedy samples and forward latency.

Everything here takes tensors, models and tokenizers as inputs and knows nothing about corpora
or caches (those live in `rlib.data`), so the same functions score a pretrained model, a
recursive-depth conversion or a toy model in a test. Later chapters add their benchmark
adapters (lm-eval) to this module.

Conventions:
    * a model is any callable mapping input ids [B, T] to an object with `.logits` or to a
      logits tensor [B, T, V]; Hugging Face models are called with `use_cache=False`;
    * position 0 of every window is context only (the BOS token where the tokenizer uses one),
      so a window of T tokens yields T - 1 predictions;
    * losses are computed in fp32 whatever dtype the model runs in.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from rlib.progress import progress as _progress

__all__ = ["forward_latency", "greedy_generate", "perplexity"]

# logits of one forward are at most this many elements (512 MiB in fp32); Gemma 3 (V = 262,144) at
# T = 256 fits 2 windows per forward, SmolLM2 (V = 49,152) fits 10; larger batches are no faster on CPU
MAX_LOGIT_ELEMENTS = 2**27
# the loss upcasts at most this many logits to fp32 at a time (16 MiB): 16 positions for Gemma
LOSS_CHUNK_ELEMENTS = 2**22


# ----------------------------------------------------------------------------------------------
# helpers


def _logits(model: Callable, ids: torch.Tensor) -> torch.Tensor:
    """Logits [B, T, V] of `ids` [B, T] from a Hugging Face model or a plain callable."""
    out = model(input_ids=ids, use_cache=False) if hasattr(model, "config") else model(ids)
    return out.logits if hasattr(out, "logits") else out


def _vocab_size(model: Any) -> int | None:
    """The output vocabulary V when the model tells it; None for opaque callables."""
    config = getattr(model, "config", None)
    size = getattr(config, "vocab_size", None)
    if size is None and hasattr(model, "get_output_embeddings"):
        head = model.get_output_embeddings()
        size = getattr(head, "out_features", None)
    return int(size) if size else None


def _device_of(model: Any, default: str = "cpu") -> torch.device:
    if isinstance(model, torch.nn.Module):
        with contextlib.suppress(StopIteration):
            return next(model.parameters()).device
    return torch.device(default)


def _dtype_of(model: Any) -> torch.dtype | None:
    if isinstance(model, torch.nn.Module):
        with contextlib.suppress(StopIteration):
            return next(model.parameters()).dtype
    return None


def _autocast(device: torch.device, dtype: torch.dtype | None) -> contextlib.AbstractContextManager:
    """Autocast to `dtype` (bf16/fp16); a no-op for None or fp32, where the model's own dtype rules."""
    if dtype is None or dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


@contextlib.contextmanager
def _eval_mode(model: Any):
    """Dropout off for the duration; the caller's train/eval state is restored afterwards."""
    was_training = isinstance(model, torch.nn.Module) and model.training
    if was_training:
        model.eval()
    try:
        yield
    finally:
        if was_training:
            model.train()


def _token_nll(logits: torch.Tensor, ids: torch.Tensor, skip_first: int) -> torch.Tensor:
    """NLL [B, T - skip_first] (fp32) of tokens skip_first..T-1 given logits [B, T, V] of any dtype.

    Each window's logits are sliced as a view (flattening [B, T - skip_first, V] would copy them
    all) and upcast a few positions at a time (LOSS_CHUNK_ELEMENTS): the small fp32 temporaries
    are reused by the allocator, 3x faster on CPU than upcasting Gemma's 262k-way logits at once.
    """
    b, t, v = logits.shape
    nll = torch.empty(b, t - skip_first, dtype=torch.float32, device=logits.device)
    rows = max(1, LOSS_CHUNK_ELEMENTS // v)
    for w in range(b):
        pred = logits[w, skip_first - 1 : -1]  # [T - skip_first, V], a view
        target = ids[w, skip_first:]  # [T - skip_first]
        for i in range(0, t - skip_first, rows):
            chunk = pred[i : i + rows].float()  # [rows, V]
            nll[w, i : i + rows] = F.cross_entropy(chunk, target[i : i + rows], reduction="none")
    return nll


# ----------------------------------------------------------------------------------------------
# perplexity


def perplexity(
    model: Callable,
    windows: torch.Tensor,
    batch_size: int = 8,
    dtype: torch.dtype | None = None,
    device: str | torch.device = "cpu",
    skip_first: int = 1,
    progress: bool = True,
) -> dict[str, float | int | str]:
    """Mean next-token NLL and perplexity of `model` over held-out `windows` [N, T].

    Each window is scored independently: tokens 0..skip_first-1 are context only and tokens
    skip_first..T-1 are predicted, so N * (T - skip_first) tokens count. `dtype` (bf16, fp16)
    runs the forward under autocast; None (or fp32) keeps the model's own dtype. The model must
    already be on `device`. `batch_size` is capped so one forward's logits stay under
    `MAX_LOGIT_ELEMENTS` when the model reports its vocabulary size.

    Returns nll (nats per predicted token), nll_se (standard error over windows), ppl = exp(nll),
    n_tokens (predicted), n_windows, seconds, tokens_per_s (input tokens through the model per
    second, loss included), batch_size (as used) and dtype (as run).
    """
    if windows.ndim != 2 or windows.shape[1] <= skip_first or skip_first < 1:
        raise ValueError(f"windows must be [N, T] with T > skip_first >= 1; got {tuple(windows.shape)}")
    n, t = windows.shape
    device = torch.device(device)
    vocab = _vocab_size(model)
    if vocab:
        batch_size = max(1, min(batch_size, MAX_LOGIT_ELEMENTS // (t * vocab)))
    starts = range(0, n, batch_size)
    nll = torch.empty(n, dtype=torch.float64)  # [N] summed NLL per window
    t0 = time.perf_counter()
    with _eval_mode(model), torch.inference_mode(), _autocast(device, dtype):
        for start in _progress(starts, desc="perplexity", unit="batch", disable=not progress):
            ids = windows[start : start + batch_size].to(device)  # [B, T]
            logits = _logits(model, ids)  # [B, T, V]
            nll[start : start + len(ids)] = _token_nll(logits, ids, skip_first).cpu().double().sum(1)
            del logits
    seconds = time.perf_counter() - t0
    per_window = nll / (t - skip_first)  # [N] mean NLL per token of each window
    mean = float(nll.sum()) / (n * (t - skip_first))
    return {
        "nll": mean,
        "nll_se": float(per_window.std() / math.sqrt(n)) if n > 1 else float("nan"),
        "ppl": math.exp(mean),
        "n_tokens": n * (t - skip_first),
        "n_windows": n,
        "seconds": seconds,
        "tokens_per_s": n * t / seconds,
        "batch_size": batch_size,
        "dtype": str(dtype or _dtype_of(model) or "unknown").removeprefix("torch."),
    }


# ----------------------------------------------------------------------------------------------
# greedy samples


def greedy_generate(model: Any, tokenizer: Any, prompts: list[str], max_new_tokens: int = 24) -> list[str]:
    """Greedy continuations of `prompts`, one prompt at a time (no padding), continuation text only.

    The tokenizer adds its own special tokens (Gemma's `<bos>`; nothing for SmolLM2), exactly as
    the model saw them in training.
    """
    device = _device_of(model)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    outputs = []
    with _eval_mode(model), torch.inference_mode():
        for prompt in prompts:
            enc = tokenizer(prompt, return_tensors="pt").to(device)  # input_ids [1, T]
            out = model.generate(
                **enc, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad_id
            )  # [1, T + new]
            new = out[0, enc["input_ids"].shape[1] :]
            outputs.append(tokenizer.decode(new, skip_special_tokens=True))
    return outputs


# ----------------------------------------------------------------------------------------------
# latency


def forward_latency(
    model: Callable,
    seq_len: int = 256,
    batch_size: int = 1,
    repeats: int = 5,
    warmup: int = 1,
    vocab_size: int | None = None,
) -> dict[str, float | int | str]:
    """Wall time of one no-grad forward on random token ids [batch_size, seq_len].

    Only the forward is timed (under `torch.inference_mode`); ids are drawn once beforehand.
    Returns median_s, min_s, tokens_per_s (batch_size * seq_len / median_s), seq_len,
    batch_size, repeats, dtype and torch's intra-op thread count.
    """
    vocab = vocab_size or _vocab_size(model)
    if vocab is None:
        raise ValueError("forward_latency needs vocab_size for a model without config.vocab_size")
    device = _device_of(model)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(vocab, (batch_size, seq_len), generator=gen).to(device)  # [B, T]
    times = []
    with _eval_mode(model), torch.inference_mode():
        for i in range(warmup + repeats):
            _sync(device)
            t0 = time.perf_counter()
            _logits(model, ids)  # [B, T, V]
            _sync(device)
            if i >= warmup:
                times.append(time.perf_counter() - t0)
    median = statistics.median(times)
    return {
        "median_s": median,
        "min_s": min(times),
        "tokens_per_s": batch_size * seq_len / median,
        "seq_len": seq_len,
        "batch_size": batch_size,
        "repeats": repeats,
        "dtype": str(_dtype_of(model) or "unknown").removeprefix("torch."),
        "threads": torch.get_num_threads(),
    }


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
