"""A compact vocabulary for small models trained from scratch: the K most frequent token ids of a corpus's train
split under a real tokenizer, every other id folded into one <unk> id.

Mixture-of-Recursions (paper 001) pretrains SmolLM-shaped models with SmolLM's 49,152-token vocabulary. Scaled
down to a few million parameters on a CPU, that vocabulary's embedding and LM head would hold most parameters and
most compute, hiding what the paper measures (the recursion block's FLOPs; the paper's FLOPs exclude the head).
The chapter's small profiles therefore keep SmolLM2's tokenizer but train on its K most frequent ids; `coverage`
reports the share of tokens that keep their own id, and `decode` maps back to the tokenizer's ids (<unk> -> -1).
Counts come from the train split only, so held-out text can only lose coverage, never leak.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from rlib import data
from rlib.config import ConfigError

__all__ = ["CompactVocab", "CompactWindows", "ScratchText"]


class CompactVocab:
    """Source ids -> compact ids 0..K-2 by falling frequency, and K-1 = <unk>."""

    def __init__(self, kept: np.ndarray | list[int], source_size: int, tokenizer: str = "", corpus: str = ""):
        kept = np.asarray(kept, dtype=np.int64)
        if len(set(kept.tolist())) != len(kept) or (len(kept) and (kept.min() < 0 or kept.max() >= source_size)):
            raise ConfigError(f"kept ids must be distinct and inside the source vocabulary of {source_size}")
        self.kept, self.source_size = kept, int(source_size)
        self.tokenizer, self.corpus = tokenizer, corpus
        self.unk_id = len(kept)
        self.size = len(kept) + 1
        self._to_compact = np.full(source_size, self.unk_id, dtype=np.int64)
        self._to_compact[kept] = np.arange(len(kept))

    @classmethod
    def from_counts(cls, counts: np.ndarray, size: int, always: tuple[int, ...] = (), **names) -> CompactVocab:
        """The `size - 1` most frequent ids (ties: lower id first), `always` ids included whatever their count."""
        if size < 2 + len(always):
            raise ConfigError(f"size={size} leaves no room beside <unk> and the special ids {always}")
        order = np.lexsort((np.arange(len(counts)), -counts))  # by count desc, then id
        chosen = [int(i) for i in always]
        for i in order:
            if len(chosen) == size - 1:
                break
            if int(i) not in chosen and counts[i] > 0:
                chosen.append(int(i))
        chosen = sorted(chosen, key=lambda i: (-counts[i], i))
        return cls(chosen, len(counts), **names)

    @classmethod
    def from_corpus(cls, corpus: str, tokenizer: str, size: int) -> CompactVocab:
        cache = data.token_cache(corpus, tokenizer, "train", progress=False)
        source_size = len(data.load_tokenizer(tokenizer))
        counts = np.bincount(np.asarray(cache.tokens), minlength=source_size)
        special = tuple(i for i in (cache.eos_id, cache.bos_id) if i is not None)
        return cls.from_counts(counts, size, always=special, tokenizer=tokenizer, corpus=corpus)

    def encode(self, ids: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(self._to_compact[ids.cpu().numpy()]).to(ids.device)

    def decode(self, ids: torch.Tensor) -> torch.Tensor:
        """Compact ids -> source ids, <unk> -> -1."""
        table = np.append(self.kept, -1)
        return torch.from_numpy(table[ids.cpu().numpy()]).to(ids.device)

    def coverage(self, ids: torch.Tensor | np.ndarray) -> float:
        """Share of the source ids that keep their own compact id."""
        ids = np.asarray(ids.cpu().numpy() if isinstance(ids, torch.Tensor) else ids)
        return float((self._to_compact[ids] != self.unk_id).mean()) if ids.size else 1.0

    def compact_id(self, source_id: int | None) -> int | None:
        return None if source_id is None else int(self._to_compact[source_id])

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(json.dumps({"kept": self.kept.tolist(), "source_size": self.source_size,
                                    "tokenizer": self.tokenizer, "corpus": self.corpus}) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> CompactVocab:
        meta = json.loads(Path(path).read_text())
        return cls(meta["kept"], meta["source_size"], meta.get("tokenizer", ""), meta.get("corpus", ""))

    def __repr__(self) -> str:
        return f"CompactVocab({self.size} ids of {self.source_size}, {self.tokenizer!r} on {self.corpus!r})"


class CompactWindows(Dataset):
    """Windows [T] of another window dataset, in compact ids."""

    def __init__(self, windows: Dataset, vocab: CompactVocab):
        self.windows, self.vocab = windows, vocab

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.vocab.encode(self.windows[index])


@functools.cache
def _vocabulary(corpus: str, tokenizer: str, size: int) -> CompactVocab:
    return CompactVocab.from_corpus(corpus, tokenizer, size)


@dataclass(frozen=True)
class ScratchText:
    """The text a model trained from scratch reads (chapters 03, 04, 05): a corpus under a real tokenizer, in windows
    of `seq_len` tokens, folded into a compact vocabulary of `vocab_size` ids (0 keeps the tokenizer's own)."""

    corpus: str
    tokenizer: str
    vocab_size: int
    seq_len: int

    def vocabulary(self) -> CompactVocab | None:
        """The compact vocabulary (counted once per process), or None for the tokenizer's own."""
        return _vocabulary(self.corpus, self.tokenizer, self.vocab_size) if self.vocab_size else None

    @property
    def size(self) -> int:
        """The model's vocabulary size."""
        vocab = self.vocabulary()
        return vocab.size if vocab is not None else len(data.load_tokenizer(self.tokenizer))

    def train_windows(self) -> Dataset:
        """The train split as packed windows [T] (compact ids)."""
        cache = data.token_cache(self.corpus, self.tokenizer, "train", progress=False)
        windows = data.PackedWindows(cache, self.seq_len, bos_id=cache.bos_id)
        vocab = self.vocabulary()
        return windows if vocab is None else CompactWindows(windows, vocab)

    def heldout(self, split: str, n: int, seed: int = 0) -> torch.Tensor:
        """`n` seeded windows [n, T] of a held-out split (compact ids)."""
        windows = data.heldout_windows(self.corpus, self.tokenizer, self.seq_len, n, split=split, seed=seed)
        vocab = self.vocabulary()
        return windows if vocab is None else vocab.encode(windows)

    def save_vocabulary(self, folder: Path) -> None:
        """Write the compact vocabulary beside a grid's runs (`vocab.json`), so saved models can be read back."""
        vocab = self.vocabulary()
        if vocab is not None:
            vocab.save(Path(folder) / "vocab.json")
