"""`rlib.export` / `python -m rlib.export`: book models as stock transformers checkpoints.

(a) the export's logits equal ours: plain models of every family, looped models (Gemma 3 with its per-depth
    sliding/global pattern), relaxed models with nonzero LoRA and norm deltas (tiny random models, a word-level
    tokenizer of their 97 ids)
(b) the command line on a saved run folder: files, model card, --force, a failed export leaves what was there
(c) refusals before any work: MoR and RT models, KV-sharing plans, prefix relaxation, a tokenizer larger than
    the vocabulary, a source that is nothing
(d) stock tools on an export with SmolLM2's tokenizer: `lm_eval --model hf` (a separate process that imports
    nothing of rlib) gives the per-item results of our adapter `--model rlib`, and
    `transformers.pipeline("text-generation")` gives our greedy output
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

from rlib import looping, relax
from rlib.config import ConfigError
from rlib.export import export, main
from rlib.model import Decoder, DecoderConfig, ExecutionPlan, convert, from_transformers
from tests.test_model_equivalence import TINY, TOL, VOCAB, max_diff, tokens

REPO = Path(__file__).resolve().parents[1]


def word_tokenizer() -> PreTrainedTokenizerFast:
    """A whitespace word-level tokenizer over the tiny models' ids: "t3 t17" -> [3, 17]; 0 pad, 1 BOS, 2 EOS."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"t{i}": i for i in range(3, VOCAB)}}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<s>", eos_token="</s>")


def source(name: str) -> Decoder:
    return from_transformers(TINY[name]())


def relaxed(name: str, n_loops: int, rank: int = 4) -> Decoder:
    """A looped model of `source(name)` relaxed with SVD-initialised LoRA and norm deltas (both nonzero)."""
    plain = source(name)
    looped = looping.convert(plain, looping.Looping(n_loops))
    return relax.relax(looped, plain, relax.Relaxation(rank=rank, init="svd", norms=True))


CASES = {
    **{f"plain-{name}": lambda name=name: source(name) for name in ("llama", "gemma3", "qwen2", "qwen3", "mistral")},
    "looped-llama": lambda: looping.convert(source("llama"), looping.Looping(3)),
    "looped-gemma3": lambda: looping.convert(source("gemma3"), looping.Looping(2)),  # sliding + global per depth
    "looped-qwen2-sequence": lambda: looping.convert(source("qwen2"), looping.Looping(3, sharing="sequence")),
    "relaxed-llama": lambda: relaxed("llama", 3),
    "relaxed-gemma3": lambda: relaxed("gemma3", 2),
    "relaxed-qwen3": lambda: relaxed("qwen3", 3),  # q/k-norm deltas merged too
    "relaxed-mistral": lambda: relaxed("mistral", 3),
}


def reloaded_logits(folder: Path, input_ids: torch.Tensor) -> torch.Tensor:
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(input_ids).logits


# ---- (a) logits ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", list(CASES))
def test_export_logits_equal_ours(case, tmp_path):
    decoder = CASES[case]()
    result = export(decoder, tmp_path / "out", tokenizer=word_tokenizer())
    assert result.max_abs_diff is not None and result.max_abs_diff <= TOL
    assert len(result.unrolled.blocks) == len(decoder.plan)
    input_ids = tokens(2, 20)  # longer than the sliding windows (5, 7)
    with torch.no_grad():
        ours = decoder(input_ids)
    diff = max_diff(reloaded_logits(tmp_path / "out", input_ids), ours)
    print(f"{case}: {result.architecture}, {result.parameters} params, export max |diff| = {diff:.2e}")
    assert diff <= TOL
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["num_hidden_layers"] == len(decoder.plan)


def test_relaxation_is_live_in_the_export(tmp_path):
    """The adapters are nonzero and change the output, so equal logits above mean they were merged."""
    decoder = relaxed("llama", 3)
    lora = decoder.blocks[0].attn.q_proj.adapters["1"]
    delta = decoder.blocks[0].mlp_norm.adapters["2"]
    assert lora.lora_b.abs().max() > 0 and delta.delta.abs().max() > 0
    input_ids = tokens(2, 12)
    with torch.no_grad():
        assert max_diff(relax.strip_adapters(decoder)(input_ids), decoder(input_ids)) > 1e-2
    result = export(decoder, tmp_path / "out", tokenizer=word_tokenizer())
    assert result.unrolled.is_looped and result.unrolled.is_relaxed
    assert result.unrolled.lora_ranks[1]["attn.q_proj"] == 4 and "mlp_norm" in result.unrolled.norm_deltas[2]
    assert result.parameters[1] > sum(p.numel() for p in relax.strip_adapters(decoder).parameters())


# ---- (b) the command line --------------------------------------------------------------------------------------


def saved_run(root: Path) -> Path:
    """A chapter-01-like run folder: <run>/model/ saved by convert.save with its tokenizer recorded."""
    word_tokenizer().save_pretrained(root / "tokenizer")
    run = root / "recursive-B3-stepwise-s0"
    convert.save(relaxed("llama", 3), run / "model", tokenizer=str(root / "tokenizer"))
    return run


def test_command_line_on_a_run_folder(tmp_path, capsys):
    run = saved_run(tmp_path)
    out = tmp_path / "export"
    assert main([str(run), str(out)]) == 0
    assert "LlamaForCausalLM, 3 layers" in capsys.readouterr().out
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json", "README.md"} <= names
    card = (out / "README.md").read_text()
    assert "unrolled" in card and "merged" in card and "| 2 | 0 |" in card  # depth 2 copies block 0
    generation = json.loads((out / "generation_config.json").read_text())
    assert generation["eos_token_id"] == 2 and generation["bos_token_id"] == 1
    # an existing folder is kept unless --force
    assert main([str(run), str(out)]) == 2
    assert "--force" in capsys.readouterr().err
    assert main([str(run), str(out), "--force", "--dtype", "bfloat16"]) == 0
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"


def test_failed_export_keeps_the_old_folder(tmp_path, monkeypatch):
    run = saved_run(tmp_path)
    out = tmp_path / "export"
    assert main([str(run), str(out)]) == 0
    before = (out / "model.safetensors").read_bytes()

    def broken(*args, **kwargs):
        raise RuntimeError("simulated failure after the weights were written")

    monkeypatch.setattr("rlib.export._check", broken)
    with pytest.raises(RuntimeError, match="simulated"):
        main([str(run), str(out), "--force"])
    assert (out / "model.safetensors").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".export")] == []  # no temporary left


# ---- (c) refusals -----------------------------------------------------------------------------------------------


def test_mor_and_rt_models_are_refused(tmp_path):
    from rlib.mor import io as mor_io
    from rlib.mor.model import build
    from rlib.mor.spec import MoRSpec
    from rlib.recurrent.config import RTConfig
    from rlib.recurrent.model import RTModel

    mor = build(source("llama").config, 3, MoRSpec(n_recursions=1, sharing="middle_cycle"))
    mor_io.save(mor, tmp_path / "mor-run" / "model")
    for model in (mor, tmp_path / "mor-run", RTModel(RTConfig(vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=4))):
        with pytest.raises(ConfigError, match=r"cannot be exported.*rlib\.eval"):
            export(model, tmp_path / "out", tokenizer=word_tokenizer())
    assert not (tmp_path / "out").exists()


def test_plans_without_a_transformers_equivalent_are_refused(tmp_path):
    shared = source("llama")
    shared.plan = ExecutionPlan.cycle(1, n_loops=3, share_kv=True)
    with pytest.raises(ConfigError, match=r"recursive KV sharing.*rlib\.eval"):
        export(shared, tmp_path / "out", tokenizer=word_tokenizer())
    prefixed = relax.prefix_relax(looping.convert(source("llama"), looping.Looping(3)), length=2)
    with pytest.raises(ConfigError, match=r"PrefixAdapter \(prefix relaxation\)"):
        export(prefixed, tmp_path / "out", tokenizer=word_tokenizer())
    assert not (tmp_path / "out").exists()


def test_bad_inputs_are_refused_naming_them(tmp_path):
    with pytest.raises(ConfigError, match="'no-such-model' is neither an embedded model"):
        export("no-such-model", tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="holds no model"):
        export(tmp_path / "empty", tmp_path / "out")
    small = DecoderConfig.from_hf(TINY["llama"]().config).replace(vocab_size=50)
    with pytest.raises(ConfigError, match="tokenizer has 97 tokens but the model only 50"):
        export(Decoder(small), tmp_path / "out", tokenizer=word_tokenizer())
    with pytest.raises(ConfigError, match="no tokenizer is recorded with this qwen2 model"):
        export(source("qwen2"), tmp_path / "out")
    assert not (tmp_path / "out").exists()


# ---- (d) stock tools on an export with a real tokenizer -----------------------------------------------------------


@pytest.fixture(scope="module")
def smol_export(tmp_path_factory):
    """A relaxed looped tiny model over SmolLM2's vocabulary, saved in the book's format and exported."""
    from rlib import assets

    if not assets.is_ready("smollm2-135m"):
        pytest.skip("smollm2-135m not cached; run `make assets`")
    tokenizer = assets.load_tokenizer("smollm2-135m")
    config = DecoderConfig.from_hf(TINY["llama"]().config).replace(
        vocab_size=len(tokenizer), bos_id=tokenizer.bos_token_id, eos_ids=(tokenizer.eos_token_id,),
        pad_id=tokenizer.pad_token_id, tie_embeddings=True)
    torch.manual_seed(0)
    plain = Decoder(config).eval()
    with torch.no_grad():
        for param in plain.parameters():
            param.copy_(torch.randn(param.shape) * 0.15)
    looped = looping.convert(plain, looping.Looping(3))
    model = relax.relax(looped, plain, relax.Relaxation(rank=4, init="svd", norms=True)).eval()
    root = tmp_path_factory.mktemp("smol")
    convert.save(model, root / "run" / "model", tokenizer="smollm2-135m")
    assert main([str(root / "run"), str(root / "export")]) == 0
    return model, tokenizer, root


@pytest.mark.assets
def test_stock_lm_eval_matches_our_adapter(smol_export):
    import lm_eval
    from lm_eval.tasks import TaskManager

    from rlib import tasks
    from rlib.eval import RlibLM

    model, tokenizer, root = smol_export
    include = tasks.build()
    task, limit = "book_nextline", 12
    ours = lm_eval.simple_evaluate(model=RlibLM(path=str(root / "run" / "model"), batch_size=4), tasks=[task],
                                   limit=limit, log_samples=True, task_manager=TaskManager(include_path=str(include)))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", OMP_NUM_THREADS="1")
    lm_eval_cli = Path(sys.executable).with_name("lm_eval")
    ran = subprocess.run([str(lm_eval_cli), "--model", "hf", "--model_args",
                          f"pretrained={root / 'export'},dtype=float32", "--tasks", task, "--include_path",
                          str(include), "--limit", str(limit), "--batch_size", "4", "--device", "cpu",
                          "--log_samples", "--output_path", str(root / "lm_eval")],
                         cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    samples_file = next((root / "lm_eval").rglob(f"samples_{task}_*.jsonl"))
    theirs = {s["doc_id"]: s for s in map(json.loads, samples_file.read_text().splitlines())}
    assert len(theirs) == limit
    worst = 0.0
    for sample in ours["samples"][task]:
        other = theirs[sample["doc_id"]]
        assert sample["acc"] == other["acc"] and sample["acc_norm"] == other["acc_norm"]
        ours_ll = [float(r[0]) for r in sample["filtered_resps"]]
        theirs_ll = [float(r[0]) for r in other["filtered_resps"]]
        worst = max(worst, max(abs(a - b) for a, b in zip(ours_ll, theirs_ll, strict=True)))
    print(f"{task}: {limit} items, max |loglikelihood diff| = {worst:.2e}")
    assert worst <= 1e-3


@pytest.mark.assets
def test_pipeline_greedy_output_equals_ours(smol_export):
    from transformers import pipeline

    model, tokenizer, root = smol_export
    prompt = "The quick brown fox"
    generate = pipeline("text-generation", model=str(root / "export"), dtype=torch.float32)
    out = generate(prompt, max_new_tokens=16, do_sample=False, return_tensors=True)[0]["generated_token_ids"]
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    ours = model.generate(ids, max_new_tokens=16)[0].tolist()
    assert list(out) == ours and len(ours) > ids.shape[1]
    text = generate(prompt, max_new_tokens=16, do_sample=False)[0]["generated_text"]
    assert text == tokenizer.decode(ours, skip_special_tokens=True)
