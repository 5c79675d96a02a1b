"""Held-out evaluation of causal language models: perplexity, greedy samples and forward latency.

Everything here takes tensors, models and tokenizers as inputs and knows nothing about corpora
or caches (those live in `rlib.data`), so the same functions score a pretrained model, a
recursive-depth conversion or a toy model in a test. The lm-eval adapter `RlibLM` (model "rlib")
scores the book's `Decoder` on the local task suite (`rlib.tasks`) or any lm-eval task:

    evaluate("smollm2-135m", ["book_cloze", "book_nextline"], limit=20)          # from Python
    python -m rlib.eval --model rlib --model_args path=FOLDER --tasks book_cloze --limit 20

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

import pandas as pd
import torch
import torch.nn.functional as F

try:  # lm-eval is optional: perplexity, generation and latency work without it (e.g. on a bare GPU machine)
    from lm_eval.api.model import LM as _LM
except ImportError:  # pragma: no cover - exercised only where lm-eval is not installed
    _LM = object

from rlib.progress import progress as _progress

__all__ = ["RlibLM", "evaluate", "forward_latency", "greedy_generate", "main", "perplexity", "register",
           "suite_summary", "suite_table"]

# logits of one forward are at most this many elements (512 MiB in fp32); Gemma 3 (V = 262,144) at
# T = 256 fits 2 windows per forward, SmolLM2 (V = 49,152) fits 10; larger batches are no faster on CPU
MAX_LOGIT_ELEMENTS = 2**27
# the loss upcasts at most this many logits to fp32 at a time (16 MiB): 16 positions for Gemma
LOSS_CHUNK_ELEMENTS = 2**22


# ----------------------------------------------------------------------------------------------
# helpers


def _logits(model: Callable, ids: torch.Tensor) -> torch.Tensor:
    """Logits [B, T, V] of `ids` [B, T] from a Hugging Face model or a plain callable."""
    is_hf = hasattr(getattr(model, "config", None), "model_type")  # a transformers model, not our Decoder
    out = model(input_ids=ids, use_cache=False) if is_hf else model(ids)
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


def length_groups(lengths: list[int], slack: float = 1.25) -> list[list[int]]:
    """Indices of `lengths` in groups to run as one padded batch each, longest first: a group takes the next longest
    while its padded size (longest x members) stays within `slack` x its real tokens, so padding wastes at most a
    quarter of a group's work by default. Every index lands in exactly one group."""
    if slack < 1:
        raise ValueError(f"slack={slack} must be >= 1 (1 groups only equal lengths)")
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    groups: list[list[int]] = []
    for i in order:
        group = groups[-1] if groups else None
        if group is not None and lengths[group[0]] * (len(group) + 1) <= slack * (
                sum(lengths[j] for j in group) + lengths[i]):
            group.append(i)
        else:
            groups.append([i])
    return groups


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
    per_window: bool = False,
) -> dict[str, float | int | str | list[float]]:
    """Mean next-token NLL and perplexity of `model` over held-out `windows` [N, T].

    Each window is scored independently: tokens 0..skip_first-1 are context only and tokens
    skip_first..T-1 are predicted, so N * (T - skip_first) tokens count. `dtype` (bf16, fp16)
    runs the forward under autocast; None (or fp32) keeps the model's own dtype. The model must
    already be on `device`. `batch_size` is capped so one forward's logits stay under
    `MAX_LOGIT_ELEMENTS` when the model reports its vocabulary size.

    Returns nll (nats per predicted token), nll_se (standard error over windows), ppl = exp(nll),
    n_tokens (predicted), n_windows, seconds, tokens_per_s (input tokens through the model per
    second, loss included), batch_size (as used) and dtype (as run); with `per_window`, also
    per_window: each window's mean NLL per predicted token (for paired comparisons of two models or settings
    on the same windows).
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
    window_nll = nll / (t - skip_first)  # [N] mean NLL per token of each window
    mean = float(nll.sum()) / (n * (t - skip_first))
    extra = {"per_window": window_nll.tolist()} if per_window else {}
    return {**extra,
        "nll": mean,
        "nll_se": float(window_nll.std() / math.sqrt(n)) if n > 1 else float("nan"),
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


# ----------------------------------------------------------------------------------------------
# lm-eval adapter: the book's Decoder under lm-eval 0.4.13 (`--model rlib`)

DEFAULT_MAX_LENGTH = 2048  # tokens per forward, whatever longer context the model was trained on
GENERATE_CHUNK = 32  # new tokens per Decoder.generate call before the stop strings are checked
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "fp32": torch.float32, "bf16": torch.bfloat16}


def _load_tokenizer(name_or_path: Any):
    """A tokenizer object as given, an embedded asset's by name, or one saved in a folder."""
    if not isinstance(name_or_path, str):
        return name_or_path
    from rlib import assets

    if name_or_path in assets.MODELS or name_or_path.startswith(assets.HUB_PREFIX):
        return assets.load_tokenizer(name_or_path)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name_or_path)


def _default_tokenizer(path: str | None, model: Any, decoder: Any) -> Any:
    """The tokenizer saved with the model: in its folder, named in decoder.json, the asset's, or the family's."""
    import json
    from pathlib import Path

    if isinstance(model, str):
        from rlib import sources

        return sources.tokenizer_of(model)
    if path is not None:
        folder = Path(path)
        if (folder / "tokenizer.json").exists() or (folder / "tokenizer_config.json").exists():
            return str(folder)
        meta = json.loads((folder / "decoder.json").read_text())
        if meta.get("tokenizer"):
            return meta["tokenizer"]
    from rlib.sources import FAMILY_TOKENIZERS

    if decoder.config.family not in FAMILY_TOKENIZERS:
        raise ValueError(f"no tokenizer is recorded for this {decoder.config.family} model; pass "
                         "tokenizer=<asset name or folder> in --model_args")
    return FAMILY_TOKENIZERS[decoder.config.family]


def _load_decoder(path: str | None, model: Any, device: str):
    """The Decoder from a saved folder (`path`), a source name or folder (`model`: `rlib.sources`), or a Decoder."""
    from rlib.model import Decoder, convert

    if path is not None:
        return convert.load(path, device=device)
    if isinstance(model, Decoder):
        return model
    if isinstance(model, str):  # an asset name, hf:ORG/NAME or a checkpoint folder, its config checked first
        from rlib import sources

        return sources.load_source(model, device=device)
    if isinstance(model, torch.nn.Module) and hasattr(getattr(model, "config", None), "model_type"):
        return convert.from_transformers(model)  # a transformers LlamaForCausalLM / Gemma3ForCausalLM
    raise ValueError("RlibLM needs path=<folder saved by rlib.model.convert.save> or "
                     f"model=<asset name | Decoder | transformers causal LM>, got {type(model).__name__}")


def _available_device(device: Any) -> torch.device:
    """The device asked for; a CUDA request (lm-eval's CLI default) falls back to the CPU without CUDA."""
    device = torch.device(device or "cpu")
    return torch.device("cpu") if device.type == "cuda" and not torch.cuda.is_available() else device


def _batch_size(value: Any) -> int:
    """lm-eval passes batch sizes as strings ("8", "auto"); auto means the default 8."""
    if value is None or str(value).startswith("auto"):
        return 8
    return max(1, int(value))


class RlibLM(_LM):
    """lm-eval model "rlib": the book's `Decoder` (any execution plan) scored in-process.

    model_args: path=<folder from convert.save> | model=<asset name or Decoder>, tokenizer=<asset name, folder
    or tokenizer>, dtype=float32|bfloat16, batch_size, device, max_length (default min(model's, 2048)),
    exit_layer=E (score with the first E plan steps and the shared head: LayerSkip's early-exit inference;
    default the whole plan). `score_exits` scores several exits from one pass (no lm-eval in between).
    BOS convention: when the tokenizer adds a BOS (Gemma) every scored window starts with it; otherwise
    (SmolLM2) only an empty context gets the BOS/EOS token as a prefix, as lm-eval's HFLM does.
    """

    def __init__(self, path=None, model=None, tokenizer=None, dtype="float32", batch_size=8, device="cpu",
                 max_length=None, exit_layer=None, **_ignored):
        super().__init__()
        self._device = _available_device(device)
        self.decoder = _load_decoder(path, model, str(self._device)).to(self._device)
        if str(dtype) not in ("auto", "None"):
            self.decoder = self.decoder.to(_DTYPES[str(dtype)] if isinstance(dtype, str) else dtype)
        self.decoder.eval()
        self.exits = self._check_exits([len(self.decoder.plan) if exit_layer in (None, "", "None") else exit_layer])
        self.tokenizer = _load_tokenizer(tokenizer or _default_tokenizer(path, model, self.decoder))
        self.batch_size = _batch_size(batch_size)
        self.max_length = int(max_length or min(self.decoder.config.max_positions, DEFAULT_MAX_LENGTH))
        probe = self.tokenizer("a")["input_ids"]
        self.add_bos = self.tokenizer.bos_token_id is not None and probe[:1] == [self.tokenizer.bos_token_id]
        bos, eos = self.tokenizer.bos_token_id, self.tokenizer.eos_token_id
        self.prefix_id = bos if bos is not None else eos
        self.bos_id = bos  # the model's id of the BOS token (a compact-vocabulary model maps it: rlib.scratch_eval)

    def _check_exits(self, exits) -> tuple[int, ...]:
        depth = len(self.decoder.plan)
        try:
            chosen = tuple(sorted({int(e) for e in exits}))
        except (TypeError, ValueError):
            chosen = ()
        if not chosen or not all(1 <= e <= depth for e in chosen):
            raise ValueError(f"exit_layer {list(exits)} must be whole numbers in [1, {depth}] (the plan steps run "
                             "before the shared head)")
        return chosen

    # ---- tokens ----------------------------------------------------------------------------------------
    def _encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """Context and continuation tokens; trailing blanks of the context move to the continuation (as HFLM)."""
        n_blank = len(context) - len(context.rstrip())
        if n_blank:
            context, continuation = context[:-n_blank], context[-n_blank:] + continuation
        whole = self._encode(context + continuation)
        context_ids = self._encode(context)
        return self._with_prefix(whole[: len(context_ids)]), whole[len(context_ids) :]

    def _with_prefix(self, context_ids: list[int]) -> list[int]:
        if self.add_bos and context_ids[:1] != [self.bos_id]:
            return [self.bos_id, *context_ids]
        return context_ids if context_ids else [self.prefix_id]

    def _fit(self, context_ids: list[int], continuation_ids: list[int]) -> list[int]:
        """Model input (context + continuation minus the last token), cut from the left to max_length (BOS kept)."""
        ids = (context_ids + continuation_ids)[:-1]
        if len(ids) <= self.max_length:
            return ids
        if self.add_bos:
            return [self.bos_id, *ids[len(ids) - self.max_length + 1 :]]
        return ids[len(ids) - self.max_length :]

    # ---- scoring ---------------------------------------------------------------------------------------
    def _exit_hidden(self, ids: torch.Tensor, start: int = 0, cache: Any = None) -> list[torch.Tensor]:
        """Hidden states [B, T, D] after each of `self.exits` plan steps (the whole plan by default) for tokens at
        positions start..start+T-1 (no head: logits are computed only where scored). With start 0 the attention
        is plain causal (right padding is harmless); otherwise the tokens attend to `cache` (the shared context)
        and to each other."""
        decoder = self.decoder
        b, t = ids.shape
        positions = torch.arange(start, start + t, device=ids.device).expand(b, t)
        if cache is None and any(s.reuse_kv for s in decoder.plan.steps):
            cache = decoder.new_cache()
        x = decoder.embed_tokens(ids)
        ctx = decoder.context(positions, x.dtype, cache, plain_causal=start == 0)
        states = []
        for depth in range(self.exits[-1]):
            x = decoder.run_step(depth, x, ctx)
            if depth + 1 in self.exits:
                states.append(x)
        return states

    def _score_segments(self, segments: list[tuple[torch.Tensor, list[int]]]) -> list[tuple[float, bool]]:
        """Per segment (hidden states [n, D], the n target ids they predict): summed log-probability of the targets
        and whether every one is the argmax. All segments (every exit of every row of a job) go through the head
        together, in chunks of rows: one [rows, D] x [D, V] product reads the head's weights once for hundreds of
        rows, where one product per segment of a few rows is bound by reading them (4x slower at 9 rows)."""
        if not segments:
            return []
        hidden = torch.cat([h for h, _ in segments])  # [N, D]
        targets = torch.tensor([t for _, ts in segments for t in ts], device=hidden.device)  # [N]
        rows = max(1, MAX_LOGIT_ELEMENTS // 8 // self.decoder.config.vocab_size)
        logprob, hit = [], []
        for i in range(0, len(targets), rows):
            logprobs = torch.log_softmax(self.decoder.head(hidden[i : i + rows]).float(), dim=-1)  # [n, V]
            target = targets[i : i + rows]
            logprob.append(logprobs.gather(1, target[:, None])[:, 0])
            hit.append(logprobs.argmax(-1) == target)
        per_row, per_hit = torch.cat(logprob).tolist(), torch.cat(hit).tolist()
        out, start = [], 0
        for _, ts in segments:
            out.append((float(sum(per_row[start : start + len(ts)])), all(per_hit[start : start + len(ts)])))
            start += len(ts)
        return out

    def _score_many(self, hidden: list[torch.Tensor], spans: list[tuple[int, int, int]],
                    targets: list[list[int]]) -> list[list[tuple[float, bool]]]:
        """Per (batch row, first position, end) span and its targets: per exit (sum logprob, is_greedy), from
        hidden states per exit [B, T, D], all through one `_score_segments` call."""
        segments = [(h[row, first:end], t) for (row, first, end), t in zip(spans, targets) for h in hidden]
        flat = self._score_segments(segments)
        n = len(hidden)
        return [flat[i * n : (i + 1) * n] for i in range(len(spans))]

    def _padded(self, rows: list[list[int]]) -> torch.Tensor:
        ids = torch.zeros(len(rows), max(len(r) for r in rows), dtype=torch.long)  # [B, T], right padded
        for i, row in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row)
        return ids.to(self._device)

    def _score_batch(self, pairs: list[tuple[list[int], list[int]]]) -> list[list[tuple[float, bool]]]:
        """Independent (context, continuation) pairs, one row each."""
        inputs = [self._fit(c, t) for c, t in pairs]
        hidden = self._exit_hidden(self._padded(inputs))  # per exit [B, T, D]
        # the hidden states at the last len(target) input positions predict the continuation
        spans = [(row, len(seq) - len(t), len(seq)) for row, (seq, (_, t)) in enumerate(zip(inputs, pairs))]
        return self._score_many(hidden, spans, [t for _, t in pairs])

    def _score_shared(self, context: list[int], targets: list[list[int]]) -> list[list[tuple[float, bool]]]:
        """Several continuations of one context: the context (but its last token) runs once into a KV cache, then
        the continuations run over it in groups of similar length (`length_groups`), each group padded only to its
        own longest member: a 6-token choice no longer pays for a 120-token one."""
        cache = self.decoder.new_cache()
        self._exit_hidden(self._padded([context[:-1]]), cache=cache)
        shared = [(cache.keys[s], cache.values[s], cache.positions[s]) for s in range(cache.n_slots)]
        scored: list[list[tuple[float, bool]] | None] = [None] * len(targets)
        for group in length_groups([len(t) for t in targets]):
            for slot, (keys, values, positions) in enumerate(shared):  # the context alone, one row per member
                if keys is not None:
                    cache.keys[slot] = keys.expand(len(group), -1, -1, -1)
                    cache.values[slot] = values.expand(len(group), -1, -1, -1)
                    cache.positions[slot] = positions.expand(len(group), -1)
            rows = [[context[-1], *targets[i][:-1]] for i in group]
            hidden = self._exit_hidden(self._padded(rows), start=len(context) - 1, cache=cache)  # per exit [n, T, D]
            spans = [(row, 0, len(targets[i])) for row, i in enumerate(group)]
            for i, result in zip(group, self._score_many(hidden, spans, [targets[i] for i in group])):
                scored[i] = result
        return scored  # type: ignore[return-value]

    def _jobs(self, pairs: list[tuple[list[int], list[int]]]) -> list[tuple[str, list[int]]]:
        """Shared-context groups (2+ continuations, fitting max_length) and batches of the rest, longest first."""
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, (context, _) in enumerate(pairs):
            groups.setdefault(tuple(context), []).append(i)
        jobs, rest = [], []
        for context, members in groups.items():
            longest = len(context) + max(len(pairs[i][1]) for i in members) - 1
            if len(members) > 1 and len(context) > 1 and longest <= self.max_length:
                jobs.append(("shared", members))
            else:
                rest += members
        rest.sort(key=lambda i: -len(pairs[i][0]) - len(pairs[i][1]))
        jobs += [("batch", rest[i : i + self.batch_size]) for i in range(0, len(rest), self.batch_size)]
        return jobs

    def _score(self, pairs: list[tuple[list[int], list[int]]], desc: str = "rlib") -> list[list[tuple[float, bool]]]:
        """Per (context ids, continuation ids), per exit of `self.exits`: (sum logprob, is_greedy)."""
        results: list[list[tuple[float, bool]] | None] = [None] * len(pairs)
        jobs = self._jobs(pairs)
        with torch.inference_mode():
            for kind, members in _progress(jobs, desc=desc, unit="job", disable=len(jobs) < 2):
                if kind == "shared":
                    scored = self._score_shared(pairs[members[0]][0], [pairs[i][1] for i in members])
                else:
                    scored = self._score_batch([pairs[i] for i in members])
                for i, result in zip(members, scored):
                    results[i] = result
        return results  # type: ignore[return-value]

    def score_exits(self, requests: list[tuple[str, str]], exits) -> list[list[tuple[float, bool]]]:
        """(context, continuation) strings -> per request, per exit in ascending order: (sum logprob, is_greedy),
        exactly what `loglikelihood` gives with `exit_layer` set to that exit, from one pass per request."""
        chosen, saved = self._check_exits(exits), self.exits
        self.exits = chosen
        try:
            return self._score([self._encode_pair(c, t) for c, t in requests], desc="score exits")
        finally:
            self.exits = saved

    # ---- the lm-eval interface ---------------------------------------------------------------------------
    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        pairs = [self._encode_pair(*req.args) for req in requests]
        return [scores[0] for scores in self._score(pairs, desc="loglikelihood")]

    def _rolling_windows(self, text: str) -> list[tuple[list[int], list[int]]]:
        from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

        length = self.max_length - 1 if self.add_bos else self.max_length  # room for the BOS of later windows
        windows = get_rolling_token_windows(self._encode(text), self.prefix_id, length, context_len=1)
        return [(self._with_prefix(c), t) for c, t in map(make_disjoint_window, windows)]

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        windows = [self._rolling_windows(req.args[0]) for req in requests]
        flat = self._score([w for doc in windows for w in doc], desc="rolling")
        totals, start = [], 0
        for doc in windows:
            totals.append(sum(scores[0][0] for scores in flat[start : start + len(doc)]))
            start += len(doc)
        return totals

    def _greedy(self, ids: list[int], steps: int, eos: tuple[int, ...]) -> list[int]:
        """ids + up to `steps` greedy tokens (stopping after an EOS), exiting after `exit_layer` plan steps."""
        prompt = torch.tensor([ids], device=self._device)
        exit_layer = self.exits[0]
        if exit_layer == len(self.decoder.plan):
            return self.decoder.generate(prompt, steps, eos_ids=eos)[0].tolist()
        cache, out = self.decoder.new_cache(), list(ids)
        logits = self.decoder(prompt, cache=cache, n_steps=exit_layer, last_only=True)  # [1, 1, V]
        for i in range(steps):
            token = int(logits[0, -1].argmax())
            out.append(token)
            if token in eos or i == steps - 1:
                break
            logits = self.decoder(torch.tensor([[token]], device=self._device), cache=cache, n_steps=exit_layer,
                                  last_only=True)
        return out

    def _generate_one(self, context: str, until: list[str], max_new: int) -> str:
        """Greedy continuation via Decoder.generate, GENERATE_CHUNK tokens at a time, cut at the first stop string."""
        ids = self._with_prefix(self._encode(context))[-max(1, self.max_length - max_new) :]
        prompt_len, text = len(ids), ""
        eos = tuple(self.decoder.config.eos_ids) or (self.tokenizer.eos_token_id,)
        while len(ids) - prompt_len < max_new:
            step = min(GENERATE_CHUNK, max_new - (len(ids) - prompt_len))
            out = self._greedy(ids, step, eos)
            new, ids = out[len(ids) :], out
            text = self.tokenizer.decode(ids[prompt_len:], skip_special_tokens=True)
            if any(s in text for s in until) or any(t in eos for t in new) or len(new) < step:
                break
        cuts = [text.index(s) for s in until if s in text]
        return text[: min(cuts)] if cuts else text

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        outputs = []
        with torch.inference_mode():
            for req in requests:
                context, kwargs = req.args
                until = kwargs.get("until") or [self.tokenizer.decode([self.tokenizer.eos_token_id])]
                until = [until] if isinstance(until, str) else list(until)
                outputs.append(self._generate_one(context, until, int(kwargs.get("max_gen_toks", 256))))
        return outputs

    @property
    def tokenizer_name(self) -> str:
        return getattr(self.tokenizer, "name_or_path", "rlib").replace("/", "__")


def register() -> None:
    """Register RlibLM as lm-eval model "rlib" (idempotent; `python -m rlib.eval` runs this module twice)."""
    try:
        from lm_eval.api.registry import model_registry, register_model
    except ImportError:
        return
    if model_registry.get("rlib", None) is None:
        register_model("rlib")(RlibLM)


register()


def _clean_results(results: dict) -> dict[str, dict[str, float]]:
    """lm-eval's {"task": {"acc,none": x, "alias": ...}} -> {"task": {"acc": x}}."""
    cleaned = {}
    for task, metrics in results.items():
        cleaned[task] = {key.split(",")[0]: value for key, value in metrics.items() if key != "alias"}
    return cleaned


def evaluate(model_or_path: Any, tasks: list[str] | str, limit: int | None = None, num_fewshot: int = 0,
             batch_size: int = 8, tokenizer: Any = None, dtype: str = "float32", **lm_kwargs) -> dict:
    """lm-eval `simple_evaluate` of a Decoder, a saved folder or an asset name on local (and stock) tasks.

    Returns {task: {metric: value}} (stderr entries as "<metric>_stderr"); the book's tasks are built
    (rlib.tasks.build) if missing.
    """
    import os

    try:
        import lm_eval
        from lm_eval.tasks import TaskManager
    except ImportError as exc:
        raise ImportError("rlib.eval.evaluate needs lm-eval: pip install lm_eval==0.4.13 (pinned in requirements.txt)"
                          ) from exc

    from rlib import tasks as book_tasks

    if isinstance(model_or_path, RlibLM):
        lm = model_or_path
    else:
        is_folder = isinstance(model_or_path, str | os.PathLike) and os.path.isdir(model_or_path)
        source = {"path": str(model_or_path)} if is_folder else {"model": model_or_path}
        lm = RlibLM(**source, tokenizer=tokenizer, dtype=dtype, batch_size=batch_size, **lm_kwargs)
    manager = TaskManager(include_path=str(book_tasks.build()))
    task_list = tasks.split(",") if isinstance(tasks, str) else list(tasks)
    out = lm_eval.simple_evaluate(model=lm, tasks=task_list, num_fewshot=num_fewshot, limit=limit,
                                  task_manager=manager, batch_size=batch_size)
    return _clean_results(out["results"])


def suite_table(models: dict[str, Any], tasks: list[str] | tuple[str, ...], limit: int | None = None,
                num_fewshot: int = 0, batch_size: int = 8, **lm_kwargs) -> pd.DataFrame:
    """Evaluate each {label: Decoder | asset name | saved folder} on `tasks`; one row per (model, task, metric).

    Columns: model, task, metric, value, stderr (NaN where lm-eval gives none), n (items scored), primary
    (whether it is the task's summary metric, `rlib.tasks.PRIMARY_METRIC`).
    """
    from rlib import tasks as book_tasks

    rows = []
    for label, model in models.items():
        results = evaluate(model, list(tasks), limit=limit, num_fewshot=num_fewshot, batch_size=batch_size,
                           **lm_kwargs)
        for task, metrics in results.items():
            for metric, value in metrics.items():
                if metric in ("name", "sample_len") or metric.endswith("_stderr"):
                    continue
                stderr = metrics.get(f"{metric}_stderr")
                rows.append({"model": label, "task": task, "metric": metric, "value": float(value),
                             "stderr": float(stderr) if isinstance(stderr, int | float) else float("nan"),
                             "n": int(metrics.get("sample_len", 0)),
                             "primary": book_tasks.PRIMARY_METRIC.get(task) == metric})
    return pd.DataFrame(rows)


def suite_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Wide view of `suite_table`: one row per model, each task's primary metric, accuracies in percent.

    `avg_acc` is the mean of the accuracy tasks (the paper's "Avg" column); bits-per-byte tasks stay as
    they are and are left out of the average.
    """
    primary = table[table["primary"]].copy()
    is_acc = primary["metric"].str.startswith("acc")
    primary.loc[is_acc, "value"] *= 100
    wide = primary.pivot_table(index="model", columns="task", values="value", sort=False)
    acc_tasks = list(dict.fromkeys(primary.loc[is_acc, "task"]))
    wide = wide.rename(columns={t: f"{t} ({primary.loc[primary.task == t, 'metric'].iloc[0]})" for t in wide.columns})
    if acc_tasks:
        wide["avg_acc"] = primary[is_acc].groupby("model", sort=False)["value"].mean()
    return wide.round(2).reset_index()


def main(argv: list[str] | None = None) -> int:
    """`python -m rlib.eval <lm_eval arguments>`: lm-eval's own CLI with model "rlib" and the book's tasks."""
    import sys

    from lm_eval.__main__ import cli_evaluate

    from rlib import tasks as book_tasks

    register()
    args = list(sys.argv[1:] if argv is None else argv)
    if "--include_path" not in args and not any(a.startswith("--include_path=") for a in args):
        args += ["--include_path", str(book_tasks.build())]
    saved, sys.argv = sys.argv, ["lm_eval", *args]
    try:
        cli_evaluate()
    finally:
        sys.argv = saved
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
