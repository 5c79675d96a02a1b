"""LayerSkip on a pretrained model (rlib.layerskip.adapt, adapt_tables, decode_study): configs fail early, recipes
wire the paper's settings without touching the source, a study runs end to end and is cached, Table 1 and the claims
read the right numbers, and decoding the trained models stays exact."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from rlib import experiments
from rlib.config import ConfigError
from rlib.layerskip import adapt, config, decode_study, tables
from rlib.model import Decoder, DecoderConfig


def _source(vocab_size: int, n_layers: int = 4) -> Decoder:
    torch.manual_seed(0)
    config = DecoderConfig(
        family="llama", vocab_size=vocab_size, d_model=32, n_layers=n_layers, n_heads=4, n_kv_heads=2, head_dim=8,
        d_ffn=64, activation="silu", norm_eps=1e-5, norm_kind="rms", post_norms=False, embed_scale=1.0,
        qk_norm=False, rope_thetas=(1e4,) * n_layers, sliding_windows=(None,) * n_layers, attn_scale=8**-0.5,
        tie_embeddings=True, bos_id=1, eos_ids=(2,), pad_id=2, max_positions=512)
    return Decoder(config).eval()


def test_presets_build_and_bad_settings_fail_early():
    for profile in ("smoke", "cpu", "cpu-long", "gpu"):
        cfg = config.AdaptConfig.preset(profile)
        assert all(isinstance(s, config.Study) for s in cfg.studies)
    short = config.AdaptConfig.preset("cpu")
    assert [r.name for r in config.adapt_runs(short)] == ["source", "continual-baseline", "continual-ld_ee"]
    cfg = config.AdaptConfig.preset("cpu-long")  # cpu's runs under the same keys, plus code fine-tuning
    assert all(adapt._key(run, cfg) == adapt._key(run, short) for run in config.adapt_runs(short))
    assert cfg.exits(30) == (3, 6, 9, 12, 15, 18, 21, 24, 27, 30) and cfg.exits(8) == (3, 4, 6, 8)
    assert cfg.task_exits(30) == (6, 12, 15, 18, 24, 30)
    assert [r.name for r in config.adapt_runs(cfg)] == ["source", "continual-baseline", "continual-ld_ee",
                                                        "code-baseline", "code-ld_ee"]
    study = dict(name="x", corpus="shakespeare", steps=2, lr=1e-4, recipes=("ld_ee",), p_max=0.1, e_scale=0.2,
                 curriculum="rotational", rotation=0)
    with pytest.raises(ConfigError, match=r"recipes \['dropout'\] must name some of"):
        config.Study(**{**study, "recipes": ("dropout",)})
    with pytest.raises(ConfigError, match="unknown corpus 'wiki'"):
        config.Study(**{**study, "corpus": "wiki"})
    with pytest.raises(ConfigError, match="p_max=2"):
        config.Study(**{**study, "p_max": 2})
    with pytest.raises(ConfigError, match="distinct names"):
        cfg.override(studies=(study, study))
    with pytest.raises(ConfigError, match=r"tasks \['book_ppl'\] cannot be read per exit"):
        cfg.override(tasks=("book_ppl",))
    with pytest.raises(ConfigError, match="must include 'kvq'"):
        cfg.override(decode_reuses=("none",))
    with pytest.raises(ConfigError, match="no study 'chat'"):
        cfg.study("chat")


def test_recipes_wire_the_papers_settings_and_leave_the_source_alone():
    cfg = config.AdaptConfig.preset("cpu-long")
    source = _source(64, n_layers=16)
    before = {k: v.clone() for k, v in source.state_dict().items()}
    seen = {}
    for run in config.adapt_runs(cfg)[1:]:
        model, hook, tcfg = adapt.build(run, cfg, source)
        study = cfg.study(run.study)
        seen[run.name] = (model.p_max, model.time_schedule, hook.e_scale, hook.rotation, tcfg.max_steps, tcfg.lr)
        assert model.decoder is not source
        for parameter in model.decoder.parameters():
            parameter.data.add_(1.0)  # training the copy must not reach the source
        assert tcfg.max_steps == study.steps
    assert seen["continual-baseline"][:3] == (0.0, "constant", 0.0)
    assert seen["continual-ld_ee"][:4] == (0.1, "constant", 0.2, 8)  # the paper's Llama2 7B continual recipe
    assert seen["code-ld_ee"][:4] == (0.1, "constant", 1.0, 16)  # its code fine-tuning recipe
    assert all(torch.equal(before[k], v) for k, v in source.state_dict().items())


@pytest.mark.assets
def test_a_study_runs_end_to_end_and_is_cached(tmp_path, needs_assets, monkeypatch):
    needs_assets("smollm2-135m", "shakespeare", "gutenberg-poetry", "python-stdlib", "humaneval")
    from rlib import assets

    smoke = config.AdaptConfig.preset("smoke")
    ld_ee_only = tuple(dataclasses.replace(study, recipes=("ld_ee",)) for study in smoke.studies)
    cfg = smoke.override(decode_exits=(2,), studies=ld_ee_only)  # LD+EE only: the fastest grid with both studies
    source = _source(len(assets.load_tokenizer(cfg.model)))
    results = adapt.run_grid(cfg, tmp_path, source=source)
    assert [r["name"] for r in results] == ["source", "continual-ld_ee", "code-ld_ee"]
    for r in results:
        assert {row["exit_layer"] for row in r["exits"]} == {2, 4} == {row["exit_layer"] for row in r["tasks"]}
        assert all(math.isfinite(row["nll"]) for row in r["exits"])
    assert results[1]["tokens"] == cfg.studies[0].steps * cfg.batch_size * cfg.seq_len
    trained = adapt.load_model(tmp_path, "continual-ld_ee")
    assert not torch.equal(trained.embed.weight, source.embed.weight)

    calls = []
    monkeypatch.setattr(adapt, "run_one", lambda *a, **k: calls.append(a) or {})
    assert adapt.run_grid(cfg, tmp_path, source=source) == results and not calls  # cached: nothing reruns

    long = tables.exit_long(results)
    assert set(long["recipe"]) == {"source", "ld_ee"} and set(long["study"]) == {"continual", "code"}
    table = tables.table_1(results, "continual", middle=2, last=4)
    assert list(table.columns) == ["metric", "last pretrained", "last LD+EE", "middle pretrained", "middle LD+EE"]
    assert table["metric"].tolist() == ["PPL shakespeare", "book_cloze acc (%)"]

    monkeypatch.undo()
    decoding = decode_study.adapt_decoding(cfg, tmp_path, "continual", ("source", "ld_ee"), source=source)
    assert set(decoding["recipe"]) == {"source", "ld_ee"}
    assert set(decoding["method"]) == {"autoregressive", "early_exit", "self_speculative"}
    assert bool(decoding[decoding["method"] == "self_speculative"]["identical_to_greedy"].all())


def test_probe_summary():
    import pandas as pd

    probes = {"pretrained": pd.DataFrame({"first": [20, 30], "stable": [28, 30]}),
              "LayerSkip": pd.DataFrame({"first": [10, 20], "stable": [20, 26]})}
    summary = tables.probe_summary(probes, n_layers=30)
    assert summary["mean_first"].tolist() == [25, 15] and summary["saving_bound_stable"].iloc[0] == pytest.approx(
        1 - 29 / 30)


def test_cached_results_survive_an_unrelated_decoding_change(tmp_path):
    cfg = config.AdaptConfig.preset("cpu")
    assert cfg.eval_key() == cfg.override(decode_exits=(4,), decode_repeats=9).eval_key()
    assert experiments.digest(cfg.eval_key()) != experiments.digest(cfg.override(task_items=7).eval_key())


@pytest.mark.assets
def test_probe_models_reads_humaneval_first_prompt(needs_assets):
    needs_assets("smollm2-135m", "humaneval")
    from rlib import assets

    tokenizer = assets.load_tokenizer("smollm2-135m")
    (prompt,) = decode_study.humaneval_prompts(tokenizer, 1)
    assert tokenizer.decode(prompt[0]).startswith("from typing import List")  # HumanEval/0: has_close_elements
    source = _source(len(tokenizer))
    probes = decode_study.probe_models({"tiny": source}, tokenizer, new_tokens=5)
    probe = probes["tiny"]
    assert probe["agree"].shape == (4, 5) and len(probe["tokens"]) == 5 == len(probe["table"])
    greedy = source.generate(prompt, 5, eos_ids=())[0, prompt.shape[1]:].tolist()
    assert probe["table"]["token"].tolist() == greedy and probe["text"] == tokenizer.decode(greedy)
