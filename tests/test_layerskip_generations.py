"""Figs. 7 and 9's analog (rlib.layerskip.generations): early-exit tokens are marked wrong exactly where the full model
would have chosen another token, self-speculation's output is greedy's, and the figure renders the marks."""

from __future__ import annotations

import pytest
import torch

from rlib.config import ConfigError
from rlib.layerskip import generations
from rlib.layerskip.speculative import early_exit_generate
from rlib.vocab import CompactVocab
from tests.test_looping import ids, tiny_model

N_LAYERS = 4


@pytest.fixture(scope="module")
def model():
    return tiny_model(N_LAYERS, seed=1).eval()


def spell(token_ids: list[int]) -> str:
    """A stand-in tokenizer's decode: one visible piece per id."""
    return "".join(f"<{i}>" if i % 5 else f"&{i}" for i in token_ids)


def test_greedy_output_has_no_wrong_token_and_a_changed_token_is_wrong(model):
    prompt = ids(1, 5, seed=3)
    greedy = model.generate(prompt, 8, eos_ids=())
    assert not generations.wrong_tokens(model, greedy, 5).any()
    changed = greedy.clone()
    changed[0, 5 + 3] = (changed[0, 5 + 3] + 1) % model.config.vocab_size
    wrong = generations.wrong_tokens(model, changed, 5)
    assert bool(wrong[3]) and not wrong[:3].any()  # tokens after it are judged on the changed prefix


def test_examples_mark_the_early_exit_tokens_and_check_self_speculation(model):
    prompts = [ids(1, 5, seed=s) for s in (4, 5, 6)]
    summary, tokens = generations.generation_examples(model, spell, prompts, 1, 3, 10, label="tiny")
    assert list(summary["prompt"]) == [0, 1, 2] and summary["self_speculative_equals_greedy"].all()
    assert (summary["passes_gate"] == (summary["greedy_distinct_2"] >= generations.GATE)).all()
    assert (summary["new_tokens"] == 10).all() and len(tokens) == 30
    for index, prompt in enumerate(prompts):
        early = early_exit_generate(model, prompt, 10, 1, eos_ids=())
        expect = generations.wrong_tokens(model, early, 5)
        mine = tokens[tokens["prompt"] == index]
        assert list(mine["wrong"]) == expect.tolist()
        assert summary.loc[index, "wrong_tokens"] == int(expect.sum())
        marked = summary.loc[index, "early_exit_text"]
        assert marked.count("[[") == int(expect.sum())
        assert marked.replace("[[", "").replace("]]", "") == spell(early[0, 5:].tolist())
    assert summary["wrong_tokens"].sum() > 0, "exit 1 of 4 agreed with the full model everywhere: nothing is tested"
    with pytest.raises(ConfigError, match="exit_layer=4 must be in 1..3"):
        generations.generation_examples(model, spell, prompts, 4, 3, 10)


def test_the_figure_marks_wrong_tokens_in_red_and_escapes_text(model):
    summary, tokens = generations.generation_examples(model, spell, [ids(1, 5, seed=4)], 1, 2, 8, label="a<b>")
    page = generations.generations_html(summary, tokens)
    assert page.count('color:#c0392b') == int(tokens["wrong"].sum()) > 0
    assert "a&lt;b&gt;" in page and "&amp;" in page and "&lt;" in page  # the label's and the tokens' text escaped


def test_figure_exit_and_text_decoder():
    assert generations.figure_exit(30) == 19  # SmolLM2's 30 layers at Fig. 7's 20 of 32
    assert generations.figure_exit(12, generations.PAPER_FIG9_DEPTH) == 9  # Fig. 9's 24 of 32
    assert generations.figure_exit(2, 0.99) == 1 and generations.figure_exit(4, 0.01) == 1
    with pytest.raises(ConfigError, match="n_layers=1"):
        generations.figure_exit(1)

    class Tokenizer:
        @staticmethod
        def decode(source_ids):
            return spell(source_ids)

    vocab = CompactVocab([7, 3, 9], source_size=12)
    decode = generations.text_decoder(Tokenizer(), vocab)
    assert decode([0, 1, vocab.unk_id]) == "<7><3><unk>"
    assert generations.text_decoder(Tokenizer())([7, 10]) == "<7>&10"
    assert torch.equal(vocab.decode(torch.tensor([2])), torch.tensor([9]))
