"""Integrity on every load: one flipped byte in a weight file or a corpus is caught before it is used.

Every test works on a temporary cache (a copy, or a small checkpoint written here), never the real one.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from rlib import assets, corpora, paths


@pytest.fixture
def real_assets() -> Path:
    """The real cache's extracted assets (read only: copied from, never written)."""
    return paths.ASSETS


@pytest.fixture
def temp_cache(real_assets, tmp_path, monkeypatch):
    """An empty cache in tmp_path: assets/, models/ and wheels/ all point there."""
    monkeypatch.setattr(paths, "CACHE", tmp_path)
    monkeypatch.setattr(paths, "ASSETS", tmp_path / "assets")
    monkeypatch.setattr(paths, "MODELS", tmp_path / "models")
    monkeypatch.setattr(paths, "WHEELS", tmp_path / "assets" / "wheels")
    corpora._cached_documents.cache_clear()
    yield tmp_path
    corpora._cached_documents.cache_clear()


def _age(folder: Path, seconds: float = 60.0) -> None:
    """Back-date every file, as if written a minute ago (a file modified just now is never stamped)."""
    past = time.time() - seconds
    for p in folder.rglob("*"):
        if p.is_file():
            os.utime(p, (past, past))


def _flip_byte(path: Path, offset: int) -> None:
    """Same size, one byte different: only the sha256 can see it."""
    blob = bytearray(path.read_bytes())
    blob[offset] ^= 0x01
    path.write_bytes(bytes(blob))


def _tiny_checkpoint(folder: Path) -> Path:
    """A real (tiny) Llama checkpoint saved by transformers with its manifest, as `fetch` leaves one."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)
    folder.mkdir(parents=True)
    LlamaForCausalLM(cfg).save_pretrained(folder)
    assets._write_manifest(folder, {"asset": "smollm2-135m", "architecture": "LlamaForCausalLM"})
    _age(folder)
    return folder / "model.safetensors"


def test_one_flipped_byte_in_a_weight_file_fails_the_load(temp_cache):
    weights = _tiny_checkpoint(temp_cache / "models" / "smollm2-135m")
    assets.load_model("smollm2-135m")  # intact: loads
    _flip_byte(weights, weights.stat().st_size - 3)  # inside the last tensor's data, not the header
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(weights.parent)  # transformers alone would load it silently
    with pytest.raises(assets.AssetError) as err:
        assets.load_model("smollm2-135m")
    message = str(err.value)
    assert str(weights) in message and "corrupt" in message and "sha256" in message
    assert "python -m rlib.assets fetch smollm2-135m --force" in message


@pytest.mark.assets
def test_one_flipped_byte_in_a_corpus_fails_the_load(real_assets, temp_cache):
    if not (real_assets / "shakespeare" / assets.MANIFEST).exists():
        pytest.skip("asset shakespeare not cached; run `make assets`")
    shutil.copytree(real_assets / "shakespeare", temp_cache / "assets" / "shakespeare")
    docs = corpora.documents("shakespeare")  # intact: loads
    assert len(docs) == 38
    corpora._cached_documents.cache_clear()
    play = sorted((temp_cache / "assets" / "shakespeare" / "plays").rglob("*.md"))[5]
    _flip_byte(play, 1000)
    with pytest.raises(assets.AssetError, match=rf"{play}.*corrupt.*python -m rlib.assets fetch shakespeare --force"):
        corpora.documents("shakespeare")
    with pytest.raises(assets.AssetError, match="corrupt"):
        corpora.fingerprint("shakespeare")  # what keys the token caches: no cached tokens of a bad corpus


def test_an_unchanged_file_is_hashed_once_and_a_touched_one_again(temp_cache, monkeypatch):
    weights = _tiny_checkpoint(temp_cache / "models" / "smollm2-135m")
    hashed: list[Path] = []
    real_sha = assets.sha256_file
    monkeypatch.setattr(assets, "sha256_file", lambda p: hashed.append(Path(p)) or real_sha(p))
    assets.model_dir("smollm2-135m")
    n_files = len(hashed)
    assert n_files >= 2 and weights in hashed  # first load: every file hashed, stamps written
    assets.model_dir("smollm2-135m")
    assert len(hashed) == n_files  # unchanged: stamps vouch, nothing rehashed
    os.utime(weights, (time.time() - 30, time.time() - 30))  # touched (same content): rehashed once, then stamped
    assets.model_dir("smollm2-135m")
    assert hashed[n_files:] == [weights]
    assets.model_dir("smollm2-135m")
    assert len(hashed) == n_files + 1
    assets.model_dir("smollm2-135m", full_check=True)
    assert len(hashed) == 2 * n_files + 1  # a full check ignores the stamps


def test_a_file_modified_just_now_is_rehashed_until_it_settles(temp_cache, monkeypatch):
    weights = _tiny_checkpoint(temp_cache / "models" / "smollm2-135m")
    os.utime(weights)  # now: within the mtime tick a second write could go unseen, so no stamp yet
    hashed: list[Path] = []
    real_sha = assets.sha256_file
    monkeypatch.setattr(assets, "sha256_file", lambda p: hashed.append(Path(p)) or real_sha(p))
    assets.model_dir("smollm2-135m")
    assets.model_dir("smollm2-135m")
    assert hashed.count(weights) == 2


def test_verify_lists_every_bad_asset_and_the_repair_command(temp_cache, capsys):
    weights = _tiny_checkpoint(temp_cache / "models" / "smollm2-135m")
    extracted = temp_cache / "assets" / "smollm2-135m"
    extracted.mkdir(parents=True)
    (extracted / "x.gguf").write_bytes(b"gguf" * 100)
    assets._write_manifest(extracted, {"asset": "smollm2-135m"})
    corpus = temp_cache / "assets" / "humaneval"
    corpus.mkdir(parents=True)
    (corpus / "HumanEval.jsonl.gz").write_bytes(b"\x1f\x8b" + b"0" * 200)
    (corpus / "other.txt").write_text("fine")
    assets._write_manifest(corpus, {"asset": "humaneval"})
    _age(temp_cache)
    assert assets.main(["verify", "smollm2-135m", "humaneval"]) == 0
    _flip_byte(weights, weights.stat().st_size - 1)
    _flip_byte(corpus / "HumanEval.jsonl.gz", 50)
    (corpus / "other.txt").unlink()
    capsys.readouterr()
    assert assets.main(["verify", "smollm2-135m", "humaneval", "shakespeare"]) == 1
    err = capsys.readouterr().err
    for expected in (str(weights), str(corpus / "HumanEval.jsonl.gz"), f"{corpus / 'other.txt'} is missing",
                     "shakespeare' is not in the cache",
                     "3 of 3 asset(s) failed verification",
                     "python -m rlib.assets fetch smollm2-135m humaneval shakespeare --force"):
        assert expected in err, (expected, err)


def test_a_corrupt_manifest_names_the_repair(temp_cache):
    folder = temp_cache / "assets" / "humaneval"
    folder.mkdir(parents=True)
    (folder / assets.MANIFEST).write_text("{not json")
    with pytest.raises(assets.AssetError, match=r"manifest .*asset.json is corrupt.*fetch humaneval --force"):
        assets.path("humaneval")
