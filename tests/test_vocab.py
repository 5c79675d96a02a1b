"""rlib.vocab: the compact vocabulary keeps the most frequent ids and the special ones, maps everything else to
<unk>, round-trips kept ids, and on real Shakespeare under SmolLM2's tokenizer covers most held-out tokens."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlib import data
from rlib.config import ConfigError
from rlib.vocab import CompactVocab, CompactWindows


def test_most_frequent_ids_and_specials_are_kept_in_frequency_order():
    counts = np.array([0, 5, 9, 9, 1, 0, 3])
    vocab = CompactVocab.from_counts(counts, size=4, always=(5,))
    assert vocab.kept.tolist() == [2, 3, 5]  # 9, 9 (lower id first), then the special id with count 0
    assert vocab.unk_id == 3 and vocab.size == 4
    ids = torch.tensor([[2, 3, 5, 1, 6, 0]])
    assert vocab.encode(ids).tolist() == [[0, 1, 2, 3, 3, 3]]
    assert vocab.decode(vocab.encode(ids)).tolist() == [[2, 3, 5, -1, -1, -1]]
    assert vocab.coverage(ids) == pytest.approx(0.5)


def test_bad_sizes_fail():
    with pytest.raises(ConfigError, match="size=2"):
        CompactVocab.from_counts(np.ones(10), size=2, always=(1,))


def test_save_load_round_trip(tmp_path):
    vocab = CompactVocab.from_counts(np.arange(20), size=6)
    again = CompactVocab.load(vocab.save(tmp_path / "v.json"))
    assert again.kept.tolist() == vocab.kept.tolist() and again.source_size == 20


def test_shakespeare_coverage_with_smollm2(needs_assets):
    needs_assets("shakespeare", "smollm2-135m")
    vocab = CompactVocab.from_corpus("shakespeare", "smollm2-135m", 4096)
    test = data.heldout_windows("shakespeare", "smollm2-135m", 128, 16, split="test")
    assert vocab.coverage(test) > 0.9
    windows = CompactWindows(test, vocab)
    assert int(windows[0].max()) < vocab.size
    eos = data.token_cache("shakespeare", "smollm2-135m", "train", progress=False).eos_id
    assert vocab.compact_id(eos) != vocab.unk_id
