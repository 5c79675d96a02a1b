"""Tests of rlib.eval, rlib.plotting and rlib.progress on tiny random models (no assets needed).

One test, marked `assets`, scores the real SmolLM2-135M on an English paragraph; it is skipped
when that model is not in the cache.
"""

from __future__ import annotations

import copy
import math

import matplotlib.pyplot as plt
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from rlib import eval as rev
from rlib import plotting
from rlib.basemodels import plots
from rlib.progress import progress

VOCAB = 40


@pytest.fixture(scope="module")
def tiny_llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         bos_token_id=0, eos_token_id=1, pad_token_id=2)
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def windows() -> torch.Tensor:
    gen = torch.Generator().manual_seed(1)
    return torch.randint(3, VOCAB, (6, 17), generator=gen)  # [N, T]


@pytest.fixture(scope="module")
def char_tokenizer() -> PreTrainedTokenizerFast:
    """A character-level tokenizer over a-z and space whose ids fit the tiny model's vocabulary."""
    vocab = {"<unk>": 0, "<eos>": 1, "<pad>": 2, **{c: i + 3 for i, c in enumerate("abcdefghijklmnopqrstuvwxyz ")}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>", pad_token="<pad>")


# ----------------------------------------------------------------------------------------------
# perplexity


def test_perplexity_matches_hand_computed_cross_entropy(tiny_llama, windows):
    with torch.no_grad():
        logits = tiny_llama(windows).logits  # [N, T, V]
    expected = F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), windows[:, 1:].reshape(-1))
    got = rev.perplexity(tiny_llama, windows, batch_size=4, progress=False)
    assert got["n_tokens"] == windows.shape[0] * (windows.shape[1] - 1)
    assert got["nll"] == pytest.approx(expected.item(), rel=1e-5)
    assert got["ppl"] == pytest.approx(math.exp(expected.item()), rel=1e-5)
    assert got["tokens_per_s"] > 0 and got["dtype"] == "float32"


def test_skip_first_counts_only_later_tokens(tiny_llama, windows):
    with torch.no_grad():
        logits = tiny_llama(windows).logits  # [N, T, V]
    expected = F.cross_entropy(logits[:, 3:-1].reshape(-1, VOCAB), windows[:, 4:].reshape(-1))
    got = rev.perplexity(tiny_llama, windows, skip_first=4, progress=False)
    assert got["nll"] == pytest.approx(expected.item(), rel=1e-5)


def test_oracle_model_has_perplexity_one(windows):
    def oracle(ids: torch.Tensor) -> torch.Tensor:
        logits = torch.zeros(*ids.shape, VOCAB)  # [B, T, V]
        logits[:, :-1].scatter_(-1, ids[:, 1:, None], 100.0)
        return logits

    got = rev.perplexity(oracle, windows, batch_size=2, progress=False)
    assert got["ppl"] == pytest.approx(1.0, abs=1e-6)


def test_batch_size_does_not_change_the_result(tiny_llama, windows):
    results = [rev.perplexity(tiny_llama, windows, batch_size=bs, progress=False)["nll"] for bs in (1, 4, 6, 32)]
    assert max(results) - min(results) < 1e-5


def test_bf16_is_close_to_fp32(tiny_llama, windows):
    fp32 = rev.perplexity(tiny_llama, windows, progress=False)
    autocast = rev.perplexity(tiny_llama, windows, dtype=torch.bfloat16, progress=False)
    native = rev.perplexity(copy.deepcopy(tiny_llama).to(torch.bfloat16), windows, progress=False)
    assert autocast["dtype"] == native["dtype"] == "bfloat16"
    for got in (autocast, native):
        assert math.isfinite(got["nll"])
        assert got["nll"] == pytest.approx(fp32["nll"], rel=0.02)


def test_perplexity_restores_training_mode(tiny_llama, windows):
    tiny_llama.train()
    try:
        rev.perplexity(tiny_llama, windows[:2], progress=False)
        assert tiny_llama.training
    finally:
        tiny_llama.eval()


def test_perplexity_rejects_bad_shapes(tiny_llama):
    with pytest.raises(ValueError):
        rev.perplexity(tiny_llama, torch.zeros(5, dtype=torch.long), progress=False)


# ----------------------------------------------------------------------------------------------
# generation and latency


def test_greedy_generate_is_deterministic_continuation(tiny_llama, char_tokenizer):
    prompts = ["the cat sat", "to be or not"]
    first = rev.greedy_generate(tiny_llama, char_tokenizer, prompts, max_new_tokens=8)
    second = rev.greedy_generate(tiny_llama, char_tokenizer, prompts, max_new_tokens=8)
    assert first == second
    assert len(first) == len(prompts) and all(isinstance(s, str) for s in first)
    assert all(len(s) <= 8 for s in first)  # one character per new token: the prompt is not echoed


def test_forward_latency_reports_positive_numbers(tiny_llama):
    got = rev.forward_latency(tiny_llama, seq_len=16, batch_size=2, repeats=3, warmup=1)
    assert 0 < got["min_s"] <= got["median_s"]
    assert got["tokens_per_s"] == pytest.approx(32 / got["median_s"])
    with pytest.raises(ValueError):
        rev.forward_latency(lambda ids: ids, seq_len=4)  # an opaque callable needs vocab_size


# ----------------------------------------------------------------------------------------------
# plotting


def _ppl_frame() -> pd.DataFrame:
    rows = [
        {"corpus": c, "model": m, "dtype": d, "ppl": p * (1.01 if d == "bfloat16" else 1.0)}
        for c, base in (("shakespeare", 30.0), ("poetry", 300.0))
        for m, p in (("smollm2-135m", base), ("gemma3-270m", base / 2))
        for d in ("float32", "bfloat16")
    ]
    return pd.DataFrame(rows)


def test_plot_perplexity_draws_one_bar_per_row():
    df = _ppl_frame()
    fig = plots.plot_perplexity(df)
    ax = fig.axes[0]
    assert len(ax.patches) == len(df) == 8
    assert ax.get_yscale() == "log"  # 15 .. 303 spans more than 10x
    assert ax.get_title() and ax.get_ylabel() and len(fig.legends[0].get_texts()) == 4
    plt.close(fig)


def test_plots_accept_a_single_group():
    one = pd.DataFrame([{"corpus": "shakespeare", "model": "smollm2-135m", "dtype": "float32", "ppl": 21.0}])
    fig = plots.plot_perplexity(one)
    assert len(fig.axes[0].patches) == 1 and fig.axes[0].get_yscale() == "linear"
    plt.close(fig)
    lat = pd.DataFrame([{"model": "smollm2-135m", "dtype": "float32", "median_s": 0.05,
                         "seq_len": 256, "batch_size": 1, "threads": 2}])
    fig = plots.plot_latency(lat)
    assert len(fig.axes[0].patches) == 1 and "1 x 256" in fig.axes[0].get_title()
    plt.close(fig)


def test_plot_latency_and_missing_combinations():
    df = pd.DataFrame([
        {"model": "smollm2-135m", "dtype": "float32", "median_s": 0.05},
        {"model": "smollm2-135m", "dtype": "bfloat16", "median_s": 0.04},
        {"model": "gemma3-270m", "dtype": "float32", "median_s": 0.12},
    ])
    fig = plots.plot_latency(df)
    ax = fig.axes[0]
    assert len(ax.patches) == 3
    assert "ms" in ax.get_ylabel()
    assert max(p.get_height() for p in ax.patches) == pytest.approx(120.0)
    plt.close(fig)


def test_style_is_idempotent():
    plotting.style()
    first = dict(plt.rcParams)
    plotting.style()
    assert dict(plt.rcParams) == first


# ----------------------------------------------------------------------------------------------
# progress


def test_progress_in_book_runner_writes_plain_lines(monkeypatch, capsys):
    monkeypatch.setenv("RLIB_BOOK_RUNNER", "1")
    assert list(progress(range(5), desc="work")) == list(range(5))
    err = capsys.readouterr().err
    assert "work" in err and "\r" not in err and err.endswith("\n")


def test_progress_interactive(monkeypatch):
    monkeypatch.delenv("RLIB_BOOK_RUNNER", raising=False)
    assert list(progress(range(5), desc="work", disable=True)) == list(range(5))
    with progress(total=3) as bar:
        bar.update(3)
    assert bar.n == 3


# ----------------------------------------------------------------------------------------------
# a real model


PARAGRAPH = (
    "The history of the English language is usually divided into three periods. Old English was "
    "spoken from the middle of the fifth century until the Norman Conquest of 1066. Middle English "
    "followed, and by the end of the fifteenth century the language had become recognisably modern. "
    "Many words that we use every day came into English from French and Latin during this time."
)


@pytest.mark.assets
def test_smollm2_perplexity_on_english_is_low():
    from rlib import assets

    if not assets.is_ready("smollm2-135m"):
        pytest.skip("smollm2-135m is not in the cache; fetch it with `python -m rlib.assets fetch smollm2-135m`")
    tok = assets.load_tokenizer("smollm2-135m")
    model = assets.load_model("smollm2-135m")
    ids = tok(PARAGRAPH, return_tensors="pt")["input_ids"]  # [1, T]; SmolLM2 adds no BOS
    got = rev.perplexity(model, ids, progress=False)
    assert math.isfinite(got["ppl"]) and got["ppl"] < 100, got
