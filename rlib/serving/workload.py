"""Serving workloads with the length spread of real text (Relaxed Recursive Transformers App. K: the simulation
generates the SlimPajama, RedPajama and PG19 test sets "as if the models generated them", so each request is as long
as its document, at prefix 64 / decode 256 in Tables K.3 / K.4).

A request here is one paragraph of a held-out document (text between blank lines: a speaker's turn in a play, a
block of code), prompted with the `prefix` tokens before it and asked for as many new tokens as the paragraph has,
capped at `decode`. The requests are greedy-decoded by the model under test; only their prompts and lengths come from
the corpus. Varied lengths are what make static batching waste slots (a batch runs until its longest request ends)
and what continuous batching recovers (Fig. 3).

    reqs = paragraph_requests("shakespeare", "smollm2-135m", n=64, prefix=64, decode=256)
    length_summary(reqs)
"""

from __future__ import annotations

import numpy as np

from rlib import corpora, data
from rlib.config import ConfigError
from rlib.serving.engine import Request

__all__ = ["length_summary", "paragraph_requests"]


def paragraph_requests(corpus: str, tokenizer: str, n: int, prefix: int, decode: int, split: str = "test",
                       seed: int = 0, min_reply: int = 2) -> list[Request]:
    """`n` requests, one per randomly chosen paragraph (seeded) that has `prefix` tokens of its document before it and
    at least `min_reply` tokens: prompt = those `prefix` tokens, max_new_tokens = min(paragraph tokens, `decode`)."""
    if n < 1 or prefix < 1 or decode < 1:
        raise ConfigError(f"n={n}, prefix={prefix} and decode={decode} must all be >= 1")
    tok = data.load_tokenizer(tokenizer)
    bos = data.bos_id_for(tok)
    candidates: list[tuple[list[int], int]] = []  # (prompt, reply length)
    for doc in corpora.documents_in(corpus, split):
        paragraphs = [p + "\n\n" for p in doc.text.split("\n\n") if p.strip()]
        ids = data.encode_texts(tok, paragraphs)
        stream: list[int] = []
        for para in ids:
            if len(stream) >= prefix and len(para) >= min_reply:
                candidates.append((stream[-prefix:], min(len(para), decode)))
            stream.extend(para)
    if len(candidates) < n:
        raise ConfigError(f"{corpus}/{split} has {len(candidates)} paragraphs with {prefix} tokens before them and "
                          f">= {min_reply} tokens; asked for n={n}: lower n or prefix")
    pick = np.random.default_rng(seed).choice(len(candidates), size=n, replace=False)
    return [Request(i, ([bos] if bos is not None else []) + candidates[j][0], candidates[j][1])
            for i, j in enumerate(sorted(pick))]


def length_summary(requests: list[Request]) -> dict[str, float]:
    """Prompt and reply length statistics of a workload (mean, and the reply quartiles and maximum)."""
    reply = np.array([r.max_new_tokens for r in requests])
    return {"requests": len(requests), "prompt_mean": float(np.mean([len(r.prompt) for r in requests])),
            "reply_mean": float(reply.mean()), "reply_p25": float(np.percentile(reply, 25)),
            "reply_median": float(np.median(reply)), "reply_p75": float(np.percentile(reply, 75)),
            "reply_max": int(reply.max())}
