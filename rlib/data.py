"""Tokenized corpora as memory-mapped token streams, packed into fixed-length training windows.

A token cache holds one (corpus, tokenizer, split): every document of the split, tokenized without
special tokens and followed by one end-of-document id, concatenated into a single uint32 stream.

    paths.TOKENS / <corpus> / <tokenizer key> / <split>.bin    the stream, raw little-endian uint32
    paths.TOKENS / <corpus> / <tokenizer key> / <split>.json   n_tokens, document ids and start offsets,
                                                               eos / bos ids, fingerprints, build time

The tokenizer key is the tokenizer's name plus a short sha256 of its tokenizer files (vocabulary,
merges, normalizer, special tokens), so a changed tokenizer never reuses stale tokens; the json
also records the corpus fingerprint (`corpora.fingerprint`) and the cache is rebuilt when either
differs. Both files are written under temporary names and renamed into place when complete, the
json last, so a killed build never leaves a cache that is used.

End of document: `<|endoftext|>` when the vocabulary has it (SmolLM2: id 0, the separator of its
pretraining data; its tokenizer's own `eos_token` is the chat turn end `<|im_end|>`), otherwise the
tokenizer's `eos_token_id` (Gemma: `<eos>`, id 1).

Beginning of sequence: the stream never contains BOS. Gemma needs `<bos>` at position 0 of every
sequence (perplexity 69 with it, 268 without), so `PackedWindows(cache, T, bos_id=cache.bos_id)`
puts it at the start of every window; `cache.bos_id` is None for tokenizers that add no BOS.

`WindowSampler` shuffles window indices per epoch with a generator seeded by (seed, epoch) and can
be saved and resumed mid-epoch; `heldout_windows` gives fixed evaluation batches.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

from rlib import assets, paths
from rlib import corpora as corpus_lib
from rlib.fsutil import atomic_path, file_lock
from rlib.progress import progress as progress_bar

if TYPE_CHECKING:
    import pandas as pd
    from transformers import PreTrainedTokenizerBase

    TokenizerLike = str | PreTrainedTokenizerBase

FORMAT_VERSION = 1
TOKEN_DTYPE = np.uint32
DOCUMENT_SEPARATOR_TOKEN = "<|endoftext|>"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
)
BATCH_CHARS = 2_000_000  # characters handed to the fast tokenizer per call (it encodes a batch in parallel)


# ----------------------------------------------------------------------------------------------
# tokenizers


def check_tokenizer(tokenizer: str) -> str:
    """A model asset name, `hf:ORG/NAME` or a folder with tokenizer files (a user's checkpoint); anything else
    raises ValueError."""
    valid = f"valid tokenizers: {', '.join(assets.MODELS)}, hf:ORG/NAME or a folder with tokenizer files"
    if not isinstance(tokenizer, str):
        raise ValueError(f"tokenizer must be a name, got {tokenizer!r}; {valid}")
    is_hub_name = tokenizer.startswith(assets.HUB_PREFIX) and len(tokenizer) > len(assets.HUB_PREFIX)
    folder = Path(tokenizer).expanduser()
    is_folder = tokenizer not in assets.MODELS and any((folder / name).is_file() for name in TOKENIZER_FILES)
    if tokenizer not in assets.MODELS and not is_hub_name and not is_folder:
        raise ValueError(f"unknown tokenizer {tokenizer!r}; {valid}")
    return tokenizer


@functools.cache
def load_tokenizer(tokenizer: str) -> PreTrainedTokenizerBase:
    """The tokenizer of a model asset (or hub model), loaded once per process."""
    return assets.load_tokenizer(check_tokenizer(tokenizer))


def fingerprint_tokenizer_files(folder: Path) -> str:
    """Short sha256 of the tokenizer files in a checkpoint folder (names and contents).

    Memoized on the files' (name, size, mtime), so a cache hit does not re-read Gemma's 33 MB
    tokenizer.json, while an edited file is hashed again.
    """
    found = [folder / name for name in TOKENIZER_FILES if (folder / name).is_file()]
    if not found:
        raise ValueError(f"no tokenizer files ({', '.join(TOKENIZER_FILES)}) in {folder}")
    return _hash_files(tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in found))


@functools.lru_cache(maxsize=64)
def _hash_files(signature: tuple[tuple[str, int, int], ...]) -> str:
    digest = hashlib.sha256()
    for path, _size, _mtime in signature:
        digest.update(Path(path).name.encode() + b"\0" + Path(path).read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def tokenizer_key(tokenizer: str) -> str:
    """Folder name of a tokenizer's caches: its name and its files' fingerprint."""
    folder = assets.checkpoint_dir(check_tokenizer(tokenizer))
    name = tokenizer if tokenizer in assets.MODELS or tokenizer.startswith(assets.HUB_PREFIX) else folder.name
    readable_name = re.sub(r"[^A-Za-z0-9._-]+", "_", name)
    return f"{readable_name}-{fingerprint_tokenizer_files(folder)}"


def _as_tokenizer(tokenizer: TokenizerLike) -> PreTrainedTokenizerBase:
    return load_tokenizer(tokenizer) if isinstance(tokenizer, str) else tokenizer


def bos_id_for(tokenizer: TokenizerLike) -> int | None:
    """The BOS id if the tokenizer adds BOS when encoding normally (Gemma), else None (SmolLM2).

    `tokenizer` is a name (see `check_tokenizer`) or a loaded tokenizer.
    """
    tok = _as_tokenizer(tokenizer)
    bos = tok.bos_token_id
    if bos is None:
        return None
    ids = tok("a")["input_ids"]
    return int(bos) if ids and ids[0] == bos else None


def eos_id_for(tokenizer: TokenizerLike) -> int:
    """The id that ends every document: `<|endoftext|>` if in the vocabulary, else `eos_token_id`."""
    tok = _as_tokenizer(tokenizer)
    separator = tok.get_vocab().get(DOCUMENT_SEPARATOR_TOKEN)
    if separator is not None:
        return int(separator)
    if tok.eos_token_id is None:
        raise ValueError(f"tokenizer {getattr(tok, 'name_or_path', tok)!r} has no EOS token")
    return int(tok.eos_token_id)


def encode_texts(tokenizer: PreTrainedTokenizerBase, texts: list[str]) -> list[list[int]]:
    """Token ids of each text, without special tokens added and with none parsed out of the text.

    A literal `<|endoftext|>` or `<eos>` inside a document is tokenized as ordinary text, so the
    separator id appears in a stream only between documents. Fast tokenizers go through the Rust
    `encode_batch_fast` (parallel, no offsets: about twice as fast as `tokenizer(texts)`, same ids).
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not hasattr(backend, "encode_batch_fast"):
        return tokenizer(texts, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    saved = backend.encode_special_tokens
    backend.encode_special_tokens = True
    try:
        return [encoding.ids for encoding in backend.encode_batch_fast(texts, add_special_tokens=False)]
    finally:
        backend.encode_special_tokens = saved


# ----------------------------------------------------------------------------------------------
# token caches


class TokenCache:
    """One tokenized split: a memory-mapped uint32 stream plus document offsets.

    `tokens[doc_starts[i] : doc_starts[i + 1]]` is document i followed by `eos_id`.
    """

    def __init__(self, bin_path: Path, meta: dict):
        self.path = Path(bin_path)
        self.meta = meta
        self.corpus: str = meta["corpus"]
        self.split: str = meta["split"]
        self.tokenizer: str = meta["tokenizer"]
        self.eos_id: int = meta["eos_id"]
        self.bos_id: int | None = meta["bos_id"]
        self.doc_ids: tuple[str, ...] = tuple(meta["doc_ids"])
        self.doc_starts = np.asarray(meta["doc_starts"], dtype=np.int64)  # [n_documents]
        self.tokens = self._open()  # [n_tokens]

    def _open(self) -> np.ndarray:
        if self.meta["n_tokens"] == 0:  # an empty file cannot be memory-mapped
            return np.zeros(0, dtype=TOKEN_DTYPE)
        return np.memmap(self.path, dtype=TOKEN_DTYPE, mode="r", shape=(self.meta["n_tokens"],))

    # DataLoader workers started by spawn get the path, not a pickled copy of the whole stream
    def __getstate__(self) -> dict:
        return {"bin_path": self.path, "meta": self.meta}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["bin_path"], state["meta"])

    @property
    def n_tokens(self) -> int:
        return int(self.meta["n_tokens"])

    @property
    def n_documents(self) -> int:
        return len(self.doc_starts)

    def __len__(self) -> int:
        return self.n_tokens

    def document_tokens(self, index: int) -> np.ndarray:
        """Tokens of one document without its trailing EOS."""  # [doc_len]
        end = self.doc_starts[index + 1] if index + 1 < self.n_documents else self.n_tokens
        return np.asarray(self.tokens[self.doc_starts[index] : end - 1])

    def __repr__(self) -> str:
        return (
            f"TokenCache({self.corpus!r}, {self.tokenizer!r}, {self.split!r}: "
            f"{self.n_tokens:,} tokens in {self.n_documents:,} documents)"
        )


def cache_paths(corpus: str, tokenizer_key: str, split: str) -> tuple[Path, Path]:
    """(stream .bin, metadata .json) of one cache."""
    folder = paths.TOKENS / corpus_lib.check_corpus(corpus) / tokenizer_key
    return folder / f"{corpus_lib.check_split(split)}.bin", folder / f"{split}.json"


def token_cache(corpus: str, tokenizer: str, split: str, *, progress: bool = True) -> TokenCache:
    """The token cache of one split, built on first use (a tqdm bar shows the tokenization)."""
    corpus_lib.check_corpus(corpus)
    corpus_lib.check_split(split)
    key = tokenizer_key(tokenizer)
    bin_path, meta_path = cache_paths(corpus, key, split)
    expected = {"format": FORMAT_VERSION, "tokenizer_key": key, "corpus_fingerprint": corpus_lib.fingerprint(corpus)}
    cache = _load_if_valid(bin_path, meta_path, expected)
    if cache is not None:
        return cache
    with file_lock(paths.CACHE / "locks" / f"tokens-{corpus}-{key}-{split}.lock"):
        cache = _load_if_valid(bin_path, meta_path, expected)  # another process may have built it meanwhile
        if cache is None:
            _build(corpus, tokenizer, split, bin_path, meta_path, expected, progress)
            cache = _load_if_valid(bin_path, meta_path, expected)
    if cache is None:
        raise RuntimeError(f"token cache {bin_path} was built but does not validate")
    return cache


def _load_if_valid(bin_path: Path, meta_path: Path, expected: dict) -> TokenCache | None:
    if not (meta_path.exists() and bin_path.exists()):
        return None
    try:
        meta = json.loads(meta_path.read_text())
    except json.JSONDecodeError:
        return None
    if any(meta.get(k) != v for k, v in expected.items()):
        return None
    if bin_path.stat().st_size != meta["n_tokens"] * np.dtype(TOKEN_DTYPE).itemsize:
        return None
    return TokenCache(bin_path, meta)


def _build(corpus: str, tokenizer: str, split: str, bin_path: Path, meta_path: Path, expected: dict,
           progress: bool) -> None:
    """Tokenize a split into `bin_path` and write its metadata, each atomically, the json last."""
    tok = load_tokenizer(tokenizer)
    eos_id = eos_id_for(tok)
    docs = corpus_lib.documents_in(corpus, split)
    n_characters = sum(len(d.text) for d in docs)
    t0 = time.perf_counter()
    bin_path.parent.mkdir(parents=True, exist_ok=True)
    meta_path.unlink(missing_ok=True)  # an old json must never describe the new stream
    with (
        progress_bar(total=n_characters, unit="char", unit_scale=True, disable=not progress,
                     desc=f"tokenize {corpus}/{split} [{tokenizer}]") as bar,
        atomic_path(bin_path) as tmp,
        open(tmp, "wb") as out,
    ):
        doc_starts = _write_stream(tok, docs, eos_id, out, bar)
    n_tokens = bin_path.stat().st_size // np.dtype(TOKEN_DTYPE).itemsize
    meta = {
        **expected,
        "corpus": corpus,
        "split": split,
        "tokenizer": tokenizer,
        "eos_id": eos_id,
        "bos_id": bos_id_for(tok),
        "vocab_size": len(tok),
        "n_tokens": n_tokens,
        "n_documents": len(docs),
        "n_characters": n_characters,
        "tokenize_seconds": round(time.perf_counter() - t0, 2),
        "doc_ids": [d.doc_id for d in docs],
        "doc_starts": doc_starts,
    }
    with atomic_path(meta_path) as tmp:
        tmp.write_text(json.dumps(meta))


def _write_stream(tok: PreTrainedTokenizerBase, docs: Sequence[corpus_lib.Document], eos_id: int, out,
                  bar) -> list[int]:
    """Write every document's ids and one EOS to `out`; return where each document starts."""
    doc_starts: list[int] = []
    n_tokens = 0
    for batch in _batches_by_chars(docs, BATCH_CHARS):
        for ids in encode_texts(tok, [d.text for d in batch]):
            doc_starts.append(n_tokens)
            stream_piece = np.asarray([*ids, eos_id], dtype=TOKEN_DTYPE)  # [doc_len + 1]
            out.write(stream_piece.tobytes())
            n_tokens += len(stream_piece)
        bar.update(sum(len(d.text) for d in batch))
    return doc_starts


def _batches_by_chars(docs: Sequence[corpus_lib.Document], max_chars: int) -> Iterator[list[corpus_lib.Document]]:
    batch: list[corpus_lib.Document] = []
    size = 0
    for doc in docs:
        if batch and size + len(doc.text) > max_chars:
            yield batch
            batch, size = [], 0
        batch.append(doc)
        size += len(doc.text)
    if batch:
        yield batch


# ----------------------------------------------------------------------------------------------
# packing and sampling


def check_seq_len(seq_len: int) -> int:
    if not isinstance(seq_len, (int, np.integer)) or seq_len < 2:
        raise ValueError(f"seq_len must be an integer >= 2, got {seq_len!r}")
    return int(seq_len)


class PackedWindows(Dataset):
    """Non-overlapping fixed-length windows of a token stream, as LongTensors [seq_len].

    Without `bos_id`, window i is `tokens[i*T : (i+1)*T]`. With `bos_id`, it is `[bos_id]` followed
    by the next T-1 stream tokens, so BOS sits at position 0 of every window and nowhere else.
    Pass `bos_id=cache.bos_id` to get BOS exactly when the tokenizer uses it (Gemma). Only full
    windows count; the tail of the stream shorter than one window is dropped.
    """

    def __init__(self, cache: TokenCache, seq_len: int, bos_id: int | None = None):
        self.cache = cache
        self.seq_len = check_seq_len(seq_len)
        self.bos_id = None if bos_id is None else int(bos_id)
        self.stream_tokens_per_window = self.seq_len - (self.bos_id is not None)
        self.n_windows = cache.n_tokens // self.stream_tokens_per_window

    def __len__(self) -> int:
        return self.n_windows

    def stream_offset(self, index: int) -> int:
        """Where window `index` starts in the token stream (after its BOS, if any)."""
        return index * self.stream_tokens_per_window

    def __getitem__(self, index: int) -> torch.Tensor:
        if not -self.n_windows <= index < self.n_windows:
            raise IndexError(f"window {index} out of range for {self.n_windows} windows")
        index %= self.n_windows
        start = self.stream_offset(index)
        window = np.empty(self.seq_len, dtype=np.int64)  # [T]
        if self.bos_id is None:
            window[:] = self.cache.tokens[start : start + self.seq_len]
        else:
            window[0] = self.bos_id
            window[1:] = self.cache.tokens[start : start + self.stream_tokens_per_window]
        return torch.from_numpy(window)


def _epoch_seed(seed: int, epoch: int) -> int:
    """A 63-bit generator seed mixed from (seed, epoch): nearby pairs give unrelated permutations."""
    return int(np.random.SeedSequence([seed, epoch]).generate_state(1, dtype=np.uint64)[0] >> 1)


class WindowSampler(Sampler[list[int]]):
    """Shuffled batches of window indices; seeded per epoch and resumable mid-epoch.

    Epoch e uses `torch.randperm(n_windows)` from a generator seeded with (seed, e). Iterating
    yields the remaining batches of the current epoch, then moves to the next epoch, so it works
    as a DataLoader `batch_sampler` (one epoch per `iter()`), and `infinite()` never stops.
    `state_dict()` is (epoch, position = batches already handed out in the epoch); a sampler
    loaded from it yields exactly what the original would have yielded next. With DataLoader
    workers, batches are fetched ahead of use: save the state from the number of batches the
    training loop consumed, or use num_workers=0.
    """

    def __init__(self, n_windows: int, batch_size: int, seed: int, drop_last: bool = True):
        if n_windows < 1 or batch_size < 1:
            raise ValueError(f"n_windows and batch_size must be >= 1, got {n_windows!r} and {batch_size!r}")
        self.n_windows = int(n_windows)
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.drop_last = bool(drop_last)
        if len(self) == 0:
            raise ValueError(f"{n_windows} windows make no full batch of {batch_size} (drop_last=True)")
        self.epoch = 0
        self.position = 0

    def __len__(self) -> int:
        """Batches per epoch."""
        full, rest = divmod(self.n_windows, self.batch_size)
        return full + (rest > 0 and not self.drop_last)

    def permutation(self, epoch: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(_epoch_seed(self.seed, epoch))
        return torch.randperm(self.n_windows, generator=generator)  # [n_windows]

    def __iter__(self) -> Iterator[list[int]]:
        if self.position >= len(self):  # a consumer stopped right after the last batch of an epoch
            self.epoch, self.position = self.epoch + 1, 0
        order = self.permutation(self.epoch)
        while self.position < len(self):
            start = self.position * self.batch_size
            self.position += 1
            yield order[start : start + self.batch_size].tolist()
        self.epoch, self.position = self.epoch + 1, 0

    def infinite(self) -> Iterator[list[int]]:
        while True:
            yield from self

    def _config(self) -> dict:
        return {"n_windows": self.n_windows, "batch_size": self.batch_size, "seed": self.seed,
                "drop_last": self.drop_last}

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position, **self._config()}

    def load_state_dict(self, state: dict) -> None:
        mismatched = {k: (state.get(k), v) for k, v in self._config().items() if state.get(k, v) != v}
        if mismatched:
            raise ValueError(f"sampler state is for a different set-up (saved, current): {mismatched}")
        self.epoch = int(state["epoch"])
        self.position = int(state["position"])


# ----------------------------------------------------------------------------------------------
# evaluation windows and statistics


def heldout_windows(corpus: str, tokenizer: str, seq_len: int, n_windows: int | None, split: str = "test",
                    seed: int | None = 0) -> torch.Tensor:
    """Fixed evaluation windows [N, seq_len] of a split, with BOS when the tokenizer needs it.

    `seed` picks a sorted sample of N windows without replacement; `seed=None` takes N evenly
    spaced windows; `n_windows=None` takes all. Deterministic for given arguments.
    """
    windows, indices = _heldout_indices(corpus, tokenizer, seq_len, n_windows, split, seed)
    return torch.stack([windows[int(i)] for i in indices])  # [N, T]


def heldout_continuations(corpus: str, tokenizer: str, seq_len: int, n_windows: int | None, n_tokens: int,
                          split: str = "test", seed: int | None = 0) -> list[torch.Tensor]:
    """The `n_tokens` stream tokens that follow each of `heldout_windows(...)`'s windows (same arguments, same
    windows): the corpus's own continuation of a prompt, a reference for its generations. Fewer where the split's
    stream ends first (empty after its last token)."""
    if n_tokens < 1:
        raise ValueError(f"n_tokens={n_tokens!r} must be >= 1")
    windows, indices = _heldout_indices(corpus, tokenizer, seq_len, n_windows, split, seed)
    step = windows.stream_tokens_per_window
    return [torch.from_numpy(np.asarray(windows.cache.tokens[start:start + n_tokens], dtype=np.int64))
            for start in (windows.stream_offset(int(i)) + step for i in indices)]  # each [<= n_tokens]


def _heldout_indices(corpus: str, tokenizer: str, seq_len: int, n_windows: int | None, split: str,
                     seed: int | None) -> tuple[PackedWindows, np.ndarray]:
    check_seq_len(seq_len)
    cache = token_cache(corpus, tokenizer, split)
    windows = PackedWindows(cache, seq_len, bos_id=cache.bos_id)
    available = len(windows)
    if n_windows is None:
        n_windows = available
    if not 1 <= n_windows <= available:
        raise ValueError(
            f"n_windows={n_windows!r}, but {corpus}/{split} has {available} windows of {seq_len} tokens "
            f"with {tokenizer}; valid: 1..{available} or None for all"
        )
    if seed is None:
        return windows, np.linspace(0, available - 1, n_windows).round().astype(np.int64)
    generator = torch.Generator().manual_seed(int(seed))
    return windows, torch.randperm(available, generator=generator)[:n_windows].sort().values.numpy()


def _as_names(names: str | Iterable[str]) -> list[str]:
    return [names] if isinstance(names, str) else list(names)


def corpus_stats(corpora: str | Iterable[str], tokenizers: str | Iterable[str]) -> pd.DataFrame:
    """One row per (corpus, non-empty split): documents, characters, tokens and chars/token per tokenizer.

    `tokens_<tokenizer>` counts text tokens, without the one EOS the cache adds per document.
    """
    import pandas as pd

    corpus_names = [corpus_lib.check_corpus(c) for c in _as_names(corpora)]
    tokenizer_names = [check_tokenizer(t) for t in _as_names(tokenizers)]
    rows = []
    for corpus in corpus_names:
        for split, docs in corpus_lib.split_documents(corpus).items():
            if not docs:
                continue
            row = {"corpus": corpus, "split": split, "documents": len(docs),
                   "characters": sum(len(d.text) for d in docs)}
            for tokenizer in tokenizer_names:
                cache = token_cache(corpus, tokenizer, split)
                text_tokens = cache.n_tokens - cache.n_documents
                row[f"tokens_{tokenizer}"] = text_tokens
                row[f"chars_per_token_{tokenizer}"] = round(row["characters"] / max(text_tokens, 1), 3)
            rows.append(row)
    return pd.DataFrame(rows)
