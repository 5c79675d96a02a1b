"""Tests of rlib.corpora (documents and split rules) and rlib.data (token caches, windows, sampler).

They use the small corpora (Shakespeare, HumanEval, the stdlib) and the real tokenizers; the
poetry corpus is only checked through its split rule on document ids, which needs no data.
Token caches built here go to a temporary folder, so the tests never touch the book's caches.
"""

from __future__ import annotations

import os
import pickle

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from rlib import assets, corpora, data, paths  # noqa: E402

SMOL = "smollm2-135m"
GEMMA = "gemma3-270m"
SMALL_CORPORA = ("shakespeare", "python-stdlib", "humaneval")
TRAIN_CORPORA = ("shakespeare", "python-stdlib")
POETRY_LINES = 3_085_117  # pinned by the asset's sha256

pytestmark = pytest.mark.assets


@pytest.fixture(autouse=True)
def _assets_ready(needs_assets):
    needs_assets("shakespeare", "humaneval", SMOL)


@pytest.fixture
def token_dir(tmp_path, monkeypatch):
    """Token caches of one test go to a fresh temporary folder."""
    monkeypatch.setattr(paths, "TOKENS", tmp_path / "tokens")
    return tmp_path / "tokens"


@pytest.fixture(scope="module")
def humaneval_smol(tmp_path_factory) -> data.TokenCache:
    """A small real cache (HumanEval, SmolLM2) shared by the window tests."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(paths, "TOKENS", tmp_path_factory.mktemp("tokens"))
        return data.token_cache("humaneval", SMOL, "test", progress=False)


# ----------------------------------------------------------------------------------------------
# corpora and splits


@pytest.mark.parametrize("corpus", SMALL_CORPORA)
def test_every_document_is_in_exactly_one_split(corpus):
    docs = corpora.documents(corpus)
    by_split = corpora.split_documents(corpus)
    ids_by_split = {split: {d.doc_id for d in split_docs} for split, split_docs in by_split.items()}
    all_ids = [d.doc_id for d in docs]
    assert len(set(all_ids)) == len(all_ids), "document ids are unique"
    assert sum(len(ids) for ids in ids_by_split.values()) == len(all_ids)
    assert set().union(*ids_by_split.values()) == set(all_ids)
    for a in corpora.SPLITS:
        for b in corpora.SPLITS:
            if a < b:
                assert not ids_by_split[a] & ids_by_split[b], f"{corpus}: {a} and {b} share documents"


@pytest.mark.parametrize("corpus", TRAIN_CORPORA)
def test_training_corpora_have_three_non_empty_splits(corpus):
    sizes = {split: len(docs) for split, docs in corpora.split_documents(corpus).items()}
    assert all(n > 0 for n in sizes.values()), sizes
    assert sizes["train"] > 5 * (sizes["validation"] + sizes["test"])


def test_humaneval_is_all_test():
    by_split = corpora.split_documents("humaneval")
    assert len(by_split["test"]) == 164 and not by_split["train"] and not by_split["validation"]
    assert by_split["test"][0].text.startswith("from typing import List")


def test_shakespeare_holds_out_one_play_per_genre():
    by_split = corpora.split_documents("shakespeare")
    assert [len(by_split[s]) for s in corpora.SPLITS] == [32, 3, 3]
    held_out_genres = [d.doc_id.split("/")[0] for s in ("validation", "test") for d in by_split[s]]
    assert len(set(held_out_genres)) == 6


def test_shakespeare_text_is_clean():
    hamlet = next(d for d in corpora.documents("shakespeare") if d.doc_id == "tragedies/hamlet")
    assert hamlet.text.startswith("Hamlet\n\nACT I\n\nSCENE I. Elsinore.")
    assert "BERNARDO:\nWho's there?" in hamlet.text
    all_text = "".join(d.text for d in corpora.documents("shakespeare"))
    for markup in ("**", "_", "#", "\\", "  \n"):
        assert markup not in all_text, f"markdown {markup!r} left in the text"


def test_splits_are_deterministic():
    first = {c: {s: [d.doc_id for d in docs] for s, docs in corpora.split_documents(c).items()} for c in SMALL_CORPORA}
    corpora._cached_documents.cache_clear()
    second = {c: {s: [d.doc_id for d in docs] for s, docs in corpora.split_documents(c).items()} for c in SMALL_CORPORA}
    assert first == second
    assert corpora.split_of("python-stdlib", "os.py") == corpora.split_of("python-stdlib", "os.py")


def test_stdlib_leaves_out_tests_and_generated_files():
    ids = [d.doc_id for d in corpora.documents("python-stdlib")]
    assert "os.py" in ids and "json/decoder.py" in ids and "encodings/utf_8.py" in ids  # idlelib: not in every distro
    assert not any(part in ("test", "tests", "idle_test", "site-packages") for i in ids for part in i.split("/")[:-1])
    assert "encodings/cp1252.py" not in ids and "pydoc_data/topics.py" not in ids
    assert all(i.endswith(".py") for i in ids)


def test_poetry_split_rule_gives_few_contiguous_held_out_regions():
    """Only the id rule: blocks of 1000 lines, about 90/5/5, and at most 8 split changes in the stream."""
    ids = [f"lines-{start:07d}" for start in range(0, POETRY_LINES, corpora.POETRY_BLOCK_LINES)]
    splits = [corpora.split_of("gutenberg-poetry", i) for i in ids]
    fractions = {s: splits.count(s) / len(splits) for s in corpora.SPLITS}
    assert fractions["train"] == pytest.approx(0.90, abs=0.01)
    assert fractions["validation"] == pytest.approx(0.05, abs=0.01)
    assert fractions["test"] == pytest.approx(0.05, abs=0.01)
    changes = sum(a != b for a, b in zip(splits, splits[1:]))
    assert changes <= 8


def test_as_hf_dataset_has_doc_id_and_text():
    ds = corpora.as_hf_dataset("shakespeare", "validation")
    assert ds.column_names == ["doc_id", "text"]
    assert len(ds) == 3 and ds[0]["doc_id"] in corpora.SHAKESPEARE_HELDOUT


@pytest.mark.parametrize(
    ("call", "bad"),
    [
        (lambda: corpora.documents("wikitext"), "wikitext"),
        (lambda: corpora.split_of("wikitext", "x"), "wikitext"),
        (lambda: corpora.as_hf_dataset("shakespeare", "dev"), "dev"),
        (lambda: corpora.split_of("gutenberg-poetry", "book-7"), "book-7"),
        (lambda: corpora.split_of("humaneval", "MBPP/3"), "MBPP/3"),
    ],
)
def test_corpora_bad_inputs_name_the_value(call, bad):
    with pytest.raises(ValueError, match=bad) as info:
        call()
    assert "valid" in str(info.value) or "expected" in str(info.value)


# ----------------------------------------------------------------------------------------------
# token caches


def test_stream_has_one_eos_after_every_document(humaneval_smol):
    cache = humaneval_smol
    tokens = np.asarray(cache.tokens)  # [n_tokens]
    eos = data.eos_id_for(SMOL)
    assert cache.eos_id == eos == 0  # <|endoftext|>, not the chat end <|im_end|>
    assert cache.n_documents == 164 and len(cache) == cache.n_tokens == len(tokens)
    ends = np.append(cache.doc_starts[1:], cache.n_tokens) - 1  # [n_documents]
    assert (tokens[ends] == eos).all()
    assert (tokens == eos).sum() == cache.n_documents, "EOS only between documents"
    assert cache.doc_starts[0] == 0 and (np.diff(cache.doc_starts) > 1).all()


def test_stream_matches_tokenizing_each_document(humaneval_smol):
    tok = data.load_tokenizer(SMOL)
    docs = corpora.documents("humaneval")
    for i in (0, 17, 163):
        expected = tok(docs[i].text, add_special_tokens=False)["input_ids"]
        assert humaneval_smol.document_tokens(i).tolist() == expected


def test_cache_is_reused_and_not_retokenized(token_dir, monkeypatch):
    builds = []
    real_build = data._build
    monkeypatch.setattr(data, "_build", lambda *a, **k: builds.append(a[:3]) or real_build(*a, **k))
    first = data.token_cache("humaneval", SMOL, "test", progress=False)
    mtime = first.path.stat().st_mtime_ns
    second = data.token_cache("humaneval", SMOL, "test", progress=False)
    assert builds == [("humaneval", SMOL, "test")]
    assert second.path == first.path and second.path.stat().st_mtime_ns == mtime
    assert np.array_equal(first.tokens, second.tokens)
    assert first.path.parent.parent == token_dir / "humaneval"
    assert first.path.name == "test.bin" and first.path.with_suffix(".json").exists()


def test_changed_tokenizer_gets_a_new_cache(token_dir, monkeypatch):
    original = data.token_cache("humaneval", SMOL, "test", progress=False)
    monkeypatch.setattr(data, "fingerprint_tokenizer_files", lambda folder: "0123456789ab")
    changed = data.token_cache("humaneval", SMOL, "test", progress=False)
    assert changed.path != original.path
    assert changed.path.parent.name == f"{SMOL}-0123456789ab"


def test_tokenizer_fingerprint_follows_the_vocabulary(tmp_path):

    source = assets.checkpoint_dir(SMOL)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_bytes((source / name).read_bytes())
    before = data.fingerprint_tokenizer_files(tmp_path)
    assert before == data.fingerprint_tokenizer_files(source)
    text = (tmp_path / "tokenizer.json").read_text()
    (tmp_path / "tokenizer.json").write_text(text.replace('"hello":', '"hellO_":', 1))
    assert data.fingerprint_tokenizer_files(tmp_path) != before
    assert data.tokenizer_key(SMOL).startswith(f"{SMOL}-") and data.tokenizer_key(SMOL) == f"{SMOL}-{before}"


def test_interrupted_build_leaves_no_cache(token_dir, monkeypatch):
    def explode(tokenizer, texts):
        raise KeyboardInterrupt

    monkeypatch.setattr(data, "encode_texts", explode)
    with pytest.raises(KeyboardInterrupt):
        data.token_cache("humaneval", SMOL, "test", progress=False)
    leftovers = [p.name for p in token_dir.rglob("*") if p.is_file()]
    assert leftovers == []


def test_empty_split_gives_an_empty_cache(token_dir):
    cache = data.token_cache("humaneval", SMOL, "train", progress=False)
    assert cache.n_tokens == 0 and cache.n_documents == 0
    assert len(data.PackedWindows(cache, 16)) == 0


def test_cache_pickles_by_path(humaneval_smol):
    blob = pickle.dumps(humaneval_smol)
    assert len(blob) < humaneval_smol.n_tokens  # the stream itself is not in the pickle
    assert np.array_equal(pickle.loads(blob).tokens, humaneval_smol.tokens)


# ----------------------------------------------------------------------------------------------
# windows


def test_windows_without_bos_tile_the_stream(humaneval_smol):
    seq_len = 128
    windows = data.PackedWindows(humaneval_smol, seq_len)
    assert len(windows) == humaneval_smol.n_tokens // seq_len
    stacked = torch.stack([windows[i] for i in range(len(windows))])  # [N, T]
    assert stacked.dtype == torch.long and stacked.shape == (len(windows), seq_len)
    expected = np.asarray(humaneval_smol.tokens[: len(windows) * seq_len], dtype=np.int64).reshape(-1, seq_len)
    assert torch.equal(stacked, torch.from_numpy(expected))
    with pytest.raises(IndexError):
        windows[len(windows)]


def test_bos_is_at_position_zero_of_every_window_and_nowhere_else(humaneval_smol):
    seq_len, bos = 64, 1  # <|im_start|> never occurs in the stream, so any extra copy would show
    windows = data.PackedWindows(humaneval_smol, seq_len, bos_id=bos)
    assert len(windows) == humaneval_smol.n_tokens // (seq_len - 1)
    stacked = torch.stack([windows[i] for i in range(len(windows))])  # [N, T]
    assert (stacked[:, 0] == bos).all()
    assert not (stacked[:, 1:] == bos).any()
    stream = np.asarray(humaneval_smol.tokens[: len(windows) * (seq_len - 1)], dtype=np.int64)
    assert torch.equal(stacked[:, 1:].reshape(-1), torch.from_numpy(stream)), "windows are consecutive, no gaps"


def test_gemma_caches_know_their_bos(token_dir, needs_assets):
    needs_assets(GEMMA)
    assert data.bos_id_for(GEMMA) == 2 and data.bos_id_for(SMOL) is None
    cache = data.token_cache("humaneval", GEMMA, "test", progress=False)
    assert cache.bos_id == 2 and cache.eos_id == 1
    assert not (np.asarray(cache.tokens) == 2).any(), "the stream itself holds no BOS"
    windows = data.heldout_windows("humaneval", GEMMA, seq_len=32, n_windows=20)
    assert windows.shape == (20, 32) and (windows[:, 0] == 2).all() and not (windows[:, 1:] == 2).any()


def test_heldout_windows_are_deterministic(token_dir):
    a = data.heldout_windows("humaneval", SMOL, seq_len=64, n_windows=12, seed=3)
    b = data.heldout_windows("humaneval", SMOL, seq_len=64, n_windows=12, seed=3)
    assert a.shape == (12, 64) and torch.equal(a, b)
    assert not torch.equal(a, data.heldout_windows("humaneval", SMOL, seq_len=64, n_windows=12, seed=4))
    spaced = data.heldout_windows("humaneval", SMOL, seq_len=64, n_windows=5, seed=None)
    every = data.heldout_windows("humaneval", SMOL, seq_len=64, n_windows=None)
    first, last = every[0], every[-1]
    assert torch.equal(spaced[0], first) and torch.equal(spaced[-1], last)


def test_heldout_continuations_are_the_tokens_after_each_window(token_dir, needs_assets):
    needs_assets(GEMMA)
    for tokenizer, step in ((SMOL, 32), (GEMMA, 31)):  # stream tokens per window: without BOS, and after one
        stream = torch.from_numpy(np.asarray(data.token_cache("humaneval", tokenizer, "test", progress=False).tokens,
                                             dtype=np.int64))
        picked = data.heldout_windows("humaneval", tokenizer, seq_len=32, n_windows=6, seed=5)
        after = data.heldout_continuations("humaneval", tokenizer, seq_len=32, n_windows=6, n_tokens=40, seed=5)
        assert len(after) == 6
        for window, following in zip(picked, after):
            own = window[32 - step:]  # the window's stream tokens
            starts = [s for s in range(0, len(stream) - step + 1, step) if torch.equal(stream[s:s + step], own)]
            assert starts, "every window is a slice of the stream at a window boundary"
            assert torch.equal(following, stream[starts[0] + step:starts[0] + step + 40])
        ends = data.heldout_continuations("humaneval", tokenizer, seq_len=32, n_windows=2, n_tokens=10 ** 6,
                                          seed=None)  # the first and the last window
        assert len(ends[1]) == len(stream) % step  # only what the stream still holds after the last window
        assert torch.equal(ends[0], stream[step:])
    with pytest.raises(ValueError, match="n_tokens"):
        data.heldout_continuations("humaneval", SMOL, seq_len=32, n_windows=1, n_tokens=0)


def test_corpus_stats_counts_documents_characters_and_tokens(token_dir):
    stats = data.corpus_stats("humaneval", [SMOL])
    assert list(stats["split"]) == ["test"]
    row = stats.iloc[0]
    assert row["documents"] == 164
    assert row["characters"] == sum(len(d.text) for d in corpora.documents("humaneval"))
    cache = data.token_cache("humaneval", SMOL, "test", progress=False)
    assert row[f"tokens_{SMOL}"] == cache.n_tokens - 164
    assert row[f"chars_per_token_{SMOL}"] == pytest.approx(row["characters"] / row[f"tokens_{SMOL}"], rel=1e-3)


# ----------------------------------------------------------------------------------------------
# sampler


def _take(iterator, n):
    return [next(iterator) for _ in range(n)]


def test_sampler_epochs_are_seeded_permutations():
    sampler = data.WindowSampler(n_windows=50, batch_size=8, seed=7)
    assert len(sampler) == 6
    epoch0 = list(sampler)
    epoch1 = list(sampler)
    assert all(len(b) == 8 for b in epoch0)
    assert len(set(sum(epoch0, []))) == 48
    assert epoch0 != epoch1
    assert list(data.WindowSampler(50, 8, seed=7)) == epoch0
    assert list(data.WindowSampler(50, 8, seed=8)) != epoch0
    last = list(data.WindowSampler(50, 8, seed=7, drop_last=False))
    assert len(last) == 7 and len(last[-1]) == 2 and sorted(sum(last, [])) == list(range(50))


@pytest.mark.parametrize("stop_after", [0, 1, 5, 6, 7, 13])
def test_resumed_sampler_continues_exactly(stop_after):
    uninterrupted = _take(data.WindowSampler(50, 8, seed=11).infinite(), 20)
    first = data.WindowSampler(50, 8, seed=11)
    head = _take(first.infinite(), stop_after)
    state = first.state_dict()
    resumed = data.WindowSampler(50, 8, seed=11)
    resumed.load_state_dict(state)
    tail = _take(resumed.infinite(), 20 - stop_after)
    assert head + tail == uninterrupted


def test_sampler_refuses_a_state_from_another_set_up():
    state = data.WindowSampler(50, 8, seed=11).state_dict()
    with pytest.raises(ValueError, match="batch_size"):
        data.WindowSampler(50, 4, seed=11).load_state_dict(state)


# ----------------------------------------------------------------------------------------------
# bad inputs


@pytest.mark.parametrize(
    ("call", "bad"),
    [
        (lambda: data.token_cache("humaneval", SMOL, "dev"), "dev"),
        (lambda: data.token_cache("humaneval", "gpt2", "test"), "gpt2"),
        (lambda: data.token_cache("tinystories", SMOL, "test"), "tinystories"),
        (lambda: data.heldout_windows("humaneval", SMOL, seq_len=1, n_windows=4), "seq_len"),
        (lambda: data.heldout_windows("humaneval", SMOL, seq_len=64, n_windows=10**6), "1000000"),
        (lambda: data.corpus_stats(["shakespeare"], ["bert-base"]), "bert-base"),
        (lambda: data.WindowSampler(3, 8, seed=0), "3"),
    ],
)
def test_data_bad_inputs_name_the_value(call, bad, token_dir):
    with pytest.raises(ValueError, match=bad):
        call()


def test_seq_len_below_two_is_rejected(humaneval_smol):
    with pytest.raises(ValueError, match="got 1"):
        data.PackedWindows(humaneval_smol, 1)
