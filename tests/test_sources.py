"""`rlib.sources`: a source model by asset name or folder (a user's transformers checkpoint, a book folder, a run
folder), its config read before any weights, unsupported checkpoints refused naming the field; the data layer
accepts the checkpoint's folder as a tokenizer."""

from __future__ import annotations

import json

import pytest
import torch

from rlib import data, sources
from rlib.config import ConfigError
from rlib.model import convert
from tests.test_export import word_tokenizer
from tests.test_model_equivalence import TINY, max_diff, tokens


@pytest.mark.parametrize("name", ["llama", "qwen2", "qwen3", "mistral", "gemma3"])
def test_a_users_transformers_folder_loads_exactly(name, tmp_path):
    hf_model = TINY[name]()
    hf_model.save_pretrained(tmp_path / "ckpt")
    assert sources.locate(tmp_path / "ckpt").kind == "transformers"
    assert sources.source_config(str(tmp_path / "ckpt")).family == name
    decoder = sources.load_source(str(tmp_path / "ckpt"))
    input_ids = tokens(2, 12)
    with torch.no_grad():
        assert max_diff(decoder(input_ids), hf_model(input_ids).logits) <= 1e-4


def test_book_and_run_folders_and_their_tokenizer(tmp_path):
    decoder = convert.from_transformers(TINY["llama"]())
    convert.save(decoder, tmp_path / "run" / "model", tokenizer="smollm2-135m")
    for path in (tmp_path / "run", tmp_path / "run" / "model"):
        source = sources.locate(path)
        assert source.kind == "book" and source.tokenizer == "smollm2-135m"
        loaded = sources.load_source(path)
        assert all(torch.equal(loaded.state_dict()[k], v) for k, v in decoder.state_dict().items())
    assert sources.locate("smollm2-135m") == sources.Source("asset", "smollm2-135m", "smollm2-135m")


def test_unsupported_checkpoints_are_refused_before_loading(tmp_path):
    hf_model = TINY["qwen2"]()
    hf_model.save_pretrained(tmp_path / "ckpt")
    config_file = tmp_path / "ckpt" / "config.json"
    config = json.loads(config_file.read_text())
    config["rope_parameters"] = {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0,
                                 "original_max_position_embeddings": 64}
    config_file.write_text(json.dumps(config))
    (tmp_path / "ckpt" / "model.safetensors").write_bytes(b"not weights")  # never read
    with pytest.raises(ConfigError, match=r"rope_parameters\['rope_type'\]='yarn'"):
        sources.load_source(tmp_path / "ckpt")
    config["model_type"] = "falcon"
    config_file.write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="model_type='falcon' is not supported"):
        sources.load_source(tmp_path / "ckpt")
    with pytest.raises(ConfigError, match="neither an embedded model"):
        sources.load_source(tmp_path / "missing")


def test_the_data_layer_takes_a_checkpoint_folder_as_tokenizer(tmp_path):
    word_tokenizer().save_pretrained(tmp_path / "my-model")
    folder = str(tmp_path / "my-model")
    assert data.check_tokenizer(folder) == folder
    assert data.tokenizer_key(folder).startswith("my-model-")
    assert data.load_tokenizer(folder)("t5 t9")["input_ids"] == [5, 9]
    with pytest.raises(ValueError, match="a folder with tokenizer files"):
        data.check_tokenizer(str(tmp_path))


def test_the_conversion_chapters_take_a_users_checkpoint_by_path(tmp_path, monkeypatch):
    """Chapter 01's config and source loading (and chapter 02's, which share them) on a Qwen2 folder: its config is
    read before the weights, the loop counts are checked against its layers, the runs get their own work folder."""
    from rlib import paths
    from rlib.recursive import config as recursive_config
    from rlib.recursive import experiments as recursive
    from rlib.relaxed.config import RelaxedConfig

    monkeypatch.setattr(paths, "RUNS", tmp_path / "runs")
    hf_model = TINY["qwen2"]()
    folder = tmp_path / "my-qwen2"
    hf_model.save_pretrained(folder)
    word_tokenizer().save_pretrained(folder)
    cfg = recursive_config.RecursiveConfig.preset("smoke").override(model=str(folder), loops=(3,), init_loops=3)
    assert recursive_config.source_config(cfg.model).family == "qwen2" and cfg.tokenizer == str(folder.resolve())
    source = recursive.load_source(cfg)
    input_ids = tokens(2, 12)
    with torch.no_grad():
        assert max_diff(source(input_ids), hf_model(input_ids).logits) <= 1e-4
    looped = recursive_config.Variant("recursive", 3).build(source)
    assert looped.config.n_layers == 1 and len(looped.plan) == 3
    with pytest.raises(ConfigError, match=r"loops \[2\] do not divide the 3 layers.*valid: \[1, 3\]"):
        recursive.load_source(cfg.override(loops=(2,), init_loops=2))
    own = recursive.work_dir("smoke", cfg.model)
    assert own.parent == recursive.work_dir("smoke") and own.name.startswith("source-my-qwen2-")
    assert recursive.teacher_dir("smoke", cfg.model).parent.parent == own
    assert RelaxedConfig.preset("smoke").override(model=str(folder), n_loops=3).tokenizer == str(folder.resolve())
    with pytest.raises(ConfigError, match="'nowhere/at-all' is neither an embedded model"):
        recursive_config.RecursiveConfig.preset("smoke").override(model="nowhere/at-all")


def test_a_process_loads_a_source_once_and_holds_one_at_a_time(monkeypatch):
    loads = []
    monkeypatch.setattr(sources, "load_source", lambda name: loads.append(name) or object())
    monkeypatch.setattr(sources, "_PROCESS_SOURCES", {})
    first = sources.process_source("a")
    assert sources.process_source("a") is first and loads == ["a"]  # loaded once, then reused
    held = object()
    sources.share_source("b", held)  # the chapter's own model, handed over
    assert sources.process_source("b") is held and loads == ["a"]
    assert sources.process_source("a") is not first and loads == ["a", "a"]  # "b" replaced it: loaded again
