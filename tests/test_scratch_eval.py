"""lm-eval scoring of compact-vocabulary models (rlib.scratch_eval): a continuation's log-likelihood is the sum of
the model's own log-probabilities at the right positions, text is mapped through the compact vocabulary, a long
context is cut from the left, and the gold answer's CE is read from lm-eval's logged sample."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlib import assets
from rlib.recurrent.config import RTConfig
from rlib.recurrent.model import RTModel
from rlib.scratch_eval import ScratchLM, _gold_ce
from rlib.vocab import CompactVocab


@pytest.fixture(scope="module")
def tokenizer():
    return assets.load_tokenizer("smollm2-135m")


def _lm(tokenizer, max_length: int = 64) -> ScratchLM:
    ids = tokenizer("the rose is red and the violet blue, the sun is bright", add_special_tokens=False)["input_ids"]
    counts = np.bincount(np.asarray(ids), minlength=len(tokenizer))
    vocab = CompactVocab.from_counts(counts, size=12, always=(tokenizer.eos_token_id,))
    model = RTModel(RTConfig(vocab_size=vocab.size, d_model=16, n_layers=2, n_heads=2, tie_embeddings=True)).eval()
    return ScratchLM(model, tokenizer, vocab, max_length=max_length, batch_size=3)


@torch.no_grad()
def _manual(lm: ScratchLM, context: list[int], continuation: list[int]) -> float:
    ids = torch.tensor([(context + continuation)[:-1]])
    logprobs = torch.log_softmax(lm.model(ids).float(), dim=-1)[0]
    n = len(continuation)
    return float(logprobs[-n:].gather(1, torch.tensor(continuation)[:, None]).sum())


def test_text_goes_through_the_compact_vocabulary(tokenizer):
    lm = _lm(tokenizer)
    ids = lm._encode(" the rose zebra")
    assert max(ids) < lm.vocab.size
    assert lm.vocab.unk_id in ids  # "zebra" is not among the kept ids


def test_scores_equal_the_models_own_log_probabilities(tokenizer):
    lm = _lm(tokenizer)
    pairs = [lm._encode_pair("the rose is", " red"), lm._encode_pair("the sun", " is bright and blue"),
             lm._encode_pair("violet", " the"), lm._encode_pair("the rose is red and", " the sun")]
    scores = lm._score(pairs)
    for (context, continuation), ((total, _greedy),) in zip(pairs, scores):
        assert total == pytest.approx(_manual(lm, context, continuation), abs=1e-4)


def test_a_long_context_is_cut_from_the_left_and_keeps_the_answer(tokenizer):
    lm = _lm(tokenizer, max_length=4)
    context, continuation = lm._encode_pair("the rose is red and the violet blue the sun", " is bright")
    [[(total, _)]] = lm._score([(context, continuation)])
    kept = (context + continuation)[:-1][-4:]
    with torch.no_grad():
        logprobs = torch.log_softmax(lm.model(torch.tensor([kept])).float(), dim=-1)[0]
    assert len(context) + len(continuation) - 1 > 4  # the context really was cut
    expected = float(logprobs[-len(continuation):].gather(1, torch.tensor(continuation)[:, None]).sum())
    assert total == pytest.approx(expected, abs=1e-4)


def test_gold_ce_reads_the_targets_choice():
    sample = {"target": 2, "filtered_resps": [(-3.0, False), (-1.0, True), (-7.5, False)]}
    assert _gold_ce(sample) == 7.5
    assert _gold_ce({"target": " rose", "filtered_resps": [(-2.25, False)]}) == 2.25


def test_generation_is_refused(tokenizer):
    with pytest.raises(NotImplementedError, match="log-likelihoods only"):
        _lm(tokenizer).generate_until([])
    with pytest.raises(ValueError, match="max_length=1"):
        _lm(tokenizer, max_length=1)
