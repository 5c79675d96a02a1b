"""Synthetic diagnostics for one Recurrent Transformer layer vs one Transformer layer (paper 002, Sec. 7.1,
Figs. 5-6; App. D.2): the MAD suite of Poli et al. (2024) and the copy task of Jelassi et al. (2024).

Generators written here from the task definitions (token layout follows MAD's `instances.py`; see
`shared/research/paper-recurrent-transformer.md` Sec. 4.2). Each returns `TaskData(inputs, targets)`, both
[n, T] int64, with IGNORE (-100) where no prediction is scored. `train_targets` are what the loss sees; the
accuracy is measured on `targets` (for the recall tasks: the values of keys seen before, not the unpredictable
rest, which MAD still trains on).

    in_context_recall   key-value pairs (keys 0..7, values 8..15, each key's value drawn on its own once per sequence,
                        as MAD draws it, so two keys may share one); predict the value after every key that appeared
                        before
    noisy_recall        the same with noise tokens (16..31) inserted in 20 % of the pair slots
    fuzzy_recall        keys and values are motifs of 1-3 tokens; a key seen before brings its value back, which is
                        scored, and a probe pair is asked again at the end (test keys: 3 tokens, as MAD's)
    selective_copying   16 content tokens scattered among blanks; after the copy token, emit them in order
    compression         31 tokens and a compression token; reconstruct all 32 from the last position's state
    memorization        a fixed key -> value map (the same in every sequence), learned in the weights
    copy                BOS s COPY s EOS: reproduce a random string after the copy token
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from rlib.config import ConfigError

__all__ = ["IGNORE", "SPLITS", "TASKS", "TaskData", "chance_token_acc", "copy_counting_ceiling", "make_task"]

IGNORE = -100
SPLITS = ("train", "test")


@dataclass
class TaskData:
    inputs: torch.Tensor  # [n, T] int64
    train_targets: torch.Tensor  # [n, T] int64, IGNORE = no loss
    targets: torch.Tensor  # [n, T] int64, IGNORE = not scored
    vocab_size: int
    head: str = "lm"  # "lm" (per-position logits) or "compress" (reconstruct from the last position)

    def __len__(self) -> int:
        return self.inputs.shape[0]

    def subset(self, index: slice | torch.Tensor) -> TaskData:
        return TaskData(self.inputs[index], self.train_targets[index], self.targets[index], self.vocab_size,
                        self.head)


def _shifted(seqs: np.ndarray, scored: np.ndarray, vocab: int) -> TaskData:
    """Next-token data from full sequences [n, T + 1]: train on every next token, score where `scored` [n, T + 1]."""
    inputs = torch.from_numpy(seqs[:, :-1].copy())
    nxt = torch.from_numpy(seqs[:, 1:].copy())
    targets = torch.where(torch.from_numpy(scored[:, 1:].copy()), nxt, torch.full_like(nxt, IGNORE))
    return TaskData(inputs, nxt, targets, vocab)


def in_context_recall(n: int, seq_len: int, rng: np.random.Generator, noise_vocab: int = 0,
                      frac_noise: float = 0.0) -> TaskData:
    """Keys 0..7, values 8..15 (noise tokens 16..16 + noise_vocab - 1 when noisy); T = seq_len."""
    n_keys, values_start, vocab = 8, 8, 16 + noise_vocab
    total = seq_len + 1
    n_pairs = (total + 1) // 2  # an odd total drops the first token
    seqs = np.zeros((n, total), dtype=np.int64)
    scored = np.zeros((n, total), dtype=bool)
    for row in range(n):
        mapping = rng.integers(values_start, values_start + n_keys, size=n_keys)  # key -> value (MAD: one draw each)
        tokens: list[int] = []
        flags: list[bool] = []
        seen: set[int] = set()
        for i in range(n_pairs):
            last = i == n_pairs - 1
            if noise_vocab and not last and rng.random() < frac_noise:
                tokens += [int(t) for t in rng.integers(16, vocab, size=2)]
                flags += [False, False]
                continue
            key = int(rng.choice(sorted(seen))) if last and seen else int(rng.integers(0, n_keys))  # last: a probe
            tokens += [key, int(mapping[key])]
            flags += [False, key in seen]
            seen.add(key)
        seqs[row], scored[row] = tokens[-total:], flags[-total:]
    return _shifted(seqs, scored, vocab)


def fuzzy_recall(n: int, seq_len: int, rng: np.random.Generator, max_motif: int = 3,
                 split: str = "train") -> TaskData:
    """MAD's fuzzy in-context recall (baseline: vocabulary 16, motifs up to 3, multi-query). Keys are ordered tuples of
    distinct tokens from 0..6, values from 7..14, pad 15 on the left. Each pair draws its key and value lengths
    uniformly in 1..max_motif; a key seen before (same tuple) brings back its value, which is then scored. A probe
    pair is placed at a random point of the sequence and asked again at the end. Test sequences (`split="test"`) use
    keys of the full motif length only, as MAD prompts at the maximum key size."""
    if split not in SPLITS:
        raise ConfigError(f"split={split!r}: use one of {SPLITS}")
    pad, vocab, key_tokens, value_tokens = 15, 16, np.arange(0, 7), np.arange(7, 15)
    sizes = range(1, max_motif + 1)
    key_sizes = list(sizes) if split == "train" else [max_motif]

    def motif(tokens: np.ndarray, size: int) -> tuple[int, ...]:
        return tuple(int(t) for t in rng.choice(tokens, size=size, replace=False))

    seqs = np.full((n, seq_len + 1), pad, dtype=np.int64)
    scored = np.zeros((n, seq_len + 1), dtype=bool)
    for row in range(n):
        probe_key = motif(key_tokens, int(rng.choice(key_sizes)))
        probe_value = motif(value_tokens, int(rng.choice(sizes)))
        probe_len = len(probe_key) + len(probe_value)
        body = seq_len - probe_len - 2 * max_motif  # pairs are drawn while the sequence is shorter
        probe_at = int(rng.integers(0, max(1, body)))  # MAD draws below seq_len - 2 probe_len, which can miss the body
        values: dict[tuple[int, ...], tuple[int, ...]] = {}
        tokens: list[int] = []
        flags: list[bool] = []
        while len(tokens) < body:
            if probe_key not in values and len(tokens) >= probe_at:  # the probe pair, not yet scored
                key, value, seen = probe_key, probe_value, False
            else:
                key = motif(key_tokens, int(rng.choice(key_sizes)))
                seen = key in values
                value = probe_value if key == probe_key else values.get(key) or motif(value_tokens,
                                                                                      int(rng.choice(sizes)))
            values[key] = value
            tokens += [*key, *value]
            flags += [False] * len(key) + [seen] * len(value)
        tokens += [*probe_key, *probe_value]  # asked again at the end: its value is scored
        flags += [False] * len(probe_key) + [True] * len(probe_value)
        tokens, flags = tokens[-(seq_len + 1):], flags[-(seq_len + 1):]
        seqs[row, seq_len + 1 - len(tokens):] = tokens
        scored[row, seq_len + 1 - len(tokens):] = flags
    return _shifted(seqs, scored, vocab)


def selective_copying(n: int, seq_len: int, rng: np.random.Generator, n_copy: int = 16) -> TaskData:
    """Content 0..13, blank 14, copy 15: n_copy tokens among blanks, the copy token, n_copy blanks to fill."""
    blank, copy, vocab = 14, 15, 16
    body = seq_len - n_copy - 1
    if body < n_copy:
        raise ConfigError(f"selective copying needs seq_len >= {3 * n_copy + 1} for n_copy={n_copy} (got {seq_len})")
    inputs = np.full((n, seq_len), blank, dtype=np.int64)
    targets = np.full((n, seq_len), IGNORE, dtype=np.int64)
    for row in range(n):
        content = rng.integers(0, 14, size=n_copy)
        slots = np.sort(rng.choice(body, size=n_copy, replace=False))
        inputs[row, slots] = content
        inputs[row, body] = copy
        targets[row, body + 1:] = content
    tensor = torch.from_numpy(targets)
    return TaskData(torch.from_numpy(inputs), tensor, tensor.clone(), vocab)


def compression(n: int, seq_len: int, rng: np.random.Generator) -> TaskData:
    """seq_len - 1 tokens from 0..14 then the compression token 15; reconstruct all seq_len tokens."""
    seqs = rng.integers(0, 15, size=(n, seq_len)).astype(np.int64)
    seqs[:, -1] = 15
    inputs = torch.from_numpy(seqs)
    return TaskData(inputs, inputs.clone(), inputs.clone(), 16, head="compress")


def memorization(n: int, seq_len: int, rng: np.random.Generator, map_seed: int = 12345) -> TaskData:
    """Keys 0..126 -> values 127..253 by a fixed map (seeded by `map_seed`, not `rng`); insert token 255."""
    insert, vocab = 255, 256
    mapping = np.random.default_rng(map_seed).permutation(np.arange(127, 254))
    pairs = seq_len // 2
    keys = rng.integers(0, 127, size=(n, pairs))
    inputs = np.full((n, seq_len), insert, dtype=np.int64)
    targets = np.full((n, seq_len), IGNORE, dtype=np.int64)
    inputs[:, 0:2 * pairs:2] = keys
    targets[:, 1:2 * pairs:2] = mapping[keys]
    tensor = torch.from_numpy(targets)
    return TaskData(torch.from_numpy(inputs), tensor, tensor.clone(), vocab)


def copy_task(n: int, seq_len: int, rng: np.random.Generator, alphabet: int = 26) -> TaskData:
    """BOS s COPY s EOS with |s| = (seq_len - 2) // 2 letters; the loss and the score cover the copy and EOS."""
    bos, copy, eos, vocab = alphabet, alphabet + 1, alphabet + 2, alphabet + 3
    length = (seq_len - 2) // 2
    strings = rng.integers(0, alphabet, size=(n, length))
    seqs = np.concatenate([np.full((n, 1), bos), strings, np.full((n, 1), copy), strings, np.full((n, 1), eos)],
                          axis=1).astype(np.int64)
    scored = np.zeros_like(seqs, dtype=bool)
    scored[:, length + 2:] = True  # the second copy and EOS
    data = _shifted(seqs, scored, vocab)
    data.train_targets = data.targets.clone()
    return data


TASKS = {
    "in_context_recall": lambda n, t, rng: in_context_recall(n, t, rng),
    "noisy_recall": lambda n, t, rng: in_context_recall(n, t, rng, noise_vocab=16, frac_noise=0.2),
    "fuzzy_recall": fuzzy_recall,
    "selective_copying": selective_copying,
    "compression": compression,
    "memorization": memorization,
    "copy": copy_task,
}


def chance_token_acc(task: str, seq_len: int) -> float:
    """Token accuracy of a uniform guess over the task's answer alphabet (rlib.recurrent.tasks' generators)."""
    if task in ("in_context_recall", "noisy_recall", "fuzzy_recall"):
        return 1 / 8  # values 8..15 (recall, noisy recall) or value motifs from 7..14 (fuzzy recall)
    if task == "selective_copying":
        return 1 / 14  # content tokens 0..13
    if task == "compression":
        return ((seq_len - 1) / 15 + 1) / seq_len  # seq_len - 1 tokens from 15, the compression token is fixed
    if task == "memorization":
        return 1 / 127  # values 127..253
    if task == "copy":
        letters = (seq_len - 2) // 2
        return (letters / 26 + 1) / (letters + 1)  # 26 letters; the EOS after the copy is fixed
    raise KeyError(f"chance accuracy of task {task!r}")


def copy_counting_ceiling(seq_len: int, n: int = 2000, seed: int = 0, alphabet: int = 26) -> float:
    """Token accuracy on `copy` of the best reader that only knows which letters are still to be copied (the first
    copy's letter counts minus those already copied) and guesses the most frequent of them, EOS always right.

    A reference level for one attention layer without recurrence: its keys and values at position i come from token
    i alone and ALiBi's bias is monotone in distance, so no query can single out the letter one copy-length back;
    what it can read is a distance-weighted mix of the tokens seen (paper 002, Sec. 7.1's argument for why a 1-layer
    Transformer cannot copy). It is not a strict bound: the distance weighting also carries some order, and a tuned
    layer has measured slightly above it (0.246 vs 0.240 at T = 64, 15 epochs, lr 1e-2; session note of
    2026-11-27). An exact simulation over `n` random strings."""
    rng = np.random.default_rng(seed)
    letters = (seq_len - 2) // 2
    hits = 0.0
    for _ in range(n):
        string = rng.integers(0, alphabet, size=letters)
        left = np.bincount(string, minlength=alphabet).astype(float)
        for letter in string:
            best = left.max()
            hits += float(left[letter] == best) / float((left == best).sum())  # a tie is broken uniformly
            left[letter] -= 1
    return (hits / n + 1) / (letters + 1)


def make_task(name: str, n: int, seq_len: int, seed: int, split: str = "train") -> TaskData:
    """`n` sequences of task `name` (TASKS) with T = seq_len tokens each, from a seeded generator; `split` "test"
    draws what MAD's test instances are (only fuzzy recall differs: keys of the full motif length)."""
    if name not in TASKS:
        raise ConfigError(f"task {name!r} unknown; choose from {sorted(TASKS)}")
    if n < 1 or seq_len < 4:
        raise ConfigError(f"task {name!r} needs n >= 1 and seq_len >= 4 (got n={n}, seq_len={seq_len})")
    if split not in SPLITS:
        raise ConfigError(f"split={split!r}: use one of {SPLITS}")
    rng = np.random.default_rng(seed)
    return fuzzy_recall(n, seq_len, rng, split=split) if name == "fuzzy_recall" else TASKS[name](n, seq_len, rng)
