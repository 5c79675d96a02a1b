"""`python -m rlib.uptrain`: chapter 01's recipe as one command, on one process and under `accelerate launch` with
Accelerate's FSDP plugin (2 gloo processes), from a user's source folder to an exported transformers checkpoint.

The source is a tiny random 4-layer decoder over SmolLM2's vocabulary saved in the book's format with SmolLM2's
tokenizer recorded, so the corpus windows come from the token caches the chapters already use.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from rlib.model import Decoder, DecoderConfig, convert
from rlib.uptrain import main
from tests.test_model_equivalence import TINY
from tests.test_train import FSDP_LAUNCH, losses, run_subprocess

# fp32: in bf16 FSDP casts the parameters while one process autocasts the ops, so the two differ by rounding
ARGS = ["--profile", "smoke", "--loops", "2", "--rank", "4", "--steps", "3", "--batch-size", "4",
        "--micro-batch-size", "2", "--seq-len", "32", "--precision", "no"]


@pytest.fixture(scope="module")
def source_folder(tmp_path_factory) -> Path:
    from rlib import assets

    for name in ("smollm2-135m", "shakespeare"):
        if not assets.is_ready(name):
            pytest.skip(f"{name} not cached; run `make assets`")
    tokenizer = assets.load_tokenizer("smollm2-135m")
    config = DecoderConfig.from_hf(TINY["llama"]().config).replace(
        vocab_size=len(tokenizer), n_layers=4, rope_thetas=(1e4,) * 4, sliding_windows=(None,) * 4,
        bos_id=tokenizer.bos_token_id, eos_ids=(tokenizer.eos_token_id,), pad_id=tokenizer.pad_token_id,
        tie_embeddings=True)
    torch.manual_seed(0)
    decoder = Decoder(config)
    torch.nn.init.normal_(decoder.embed.weight, std=0.02)
    folder = tmp_path_factory.mktemp("source") / "my-model"
    convert.save(decoder, folder, tokenizer="smollm2-135m")
    return folder


def test_bad_arguments_fail_before_any_weights(tmp_path, capsys):
    assert main([str(tmp_path / "missing"), str(tmp_path / "out")]) == 2
    assert "neither an embedded model" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.assets
def test_one_process_and_fsdp_give_the_same_run_and_an_exportable_model(source_folder, tmp_path):
    from rlib.export import main as export_main

    assert main([str(source_folder), str(tmp_path / "one"), *ARGS]) == 0
    model = convert.load(tmp_path / "one" / "model")
    assert model.config.n_layers == 2 and len(model.plan) == 4 and convert.adapter_specs(model)  # relaxed B=2
    assert json.loads((tmp_path / "one" / "model" / convert.CONFIG_FILE).read_text())["tokenizer"] == "smollm2-135m"
    accelerate_cli = Path(sys.executable).with_name("accelerate")
    if not accelerate_cli.exists():
        pytest.skip("accelerate's launcher is not installed next to this Python")
    ran = run_subprocess([str(accelerate_cli), "launch", *FSDP_LAUNCH, "-m", "rlib.uptrain", str(source_folder),
                          str(tmp_path / "two"), *ARGS], timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert json.loads((tmp_path / "two" / "train" / "summary.json").read_text())["world_size"] == 2
    one, two = losses(tmp_path / "one" / "train"), losses(tmp_path / "two" / "train")
    assert one.keys() == two.keys() == {1, 2, 3} and all(abs(one[s] - two[s]) < 1e-5 for s in one), (one, two)
    gathered = convert.load(tmp_path / "two" / "model").state_dict()
    worst = max(float((gathered[k] - v).abs().max()) for k, v in model.state_dict().items())
    print(f"FSDP uptrain: max |weight diff| vs 1 process = {worst:.2e}")
    assert worst < 1e-5
    assert export_main([str(tmp_path / "two"), str(tmp_path / "hf")]) == 0  # logits checked by the export itself
    assert (tmp_path / "hf" / "config.json").is_file() and (tmp_path / "hf" / "README.md").is_file()

