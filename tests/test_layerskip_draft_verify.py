"""Draft & Verify (rlib.layerskip.draft_verify): its output equals greedy decoding (and coupled sampling) for any skip
set, batch and EOS; the skipping drafter is the model with those sublayers removed; the adaptive stop threshold and the
search's encoding and bookkeeping."""

from __future__ import annotations

import pytest
import torch

from rlib.config import ConfigError
from rlib.layerskip.draft_verify import (
    DraftExit,
    SkipSet,
    _skipping_run,
    _Threshold,
    draft_verify_generate,
    middle_probes,
    search_skip_set,
)
from rlib.layerskip.sampling import Sampling, sampled_generate
from tests.test_looping import ids, tiny_model

N_LAYERS = 4
SKIPS = [SkipSet(), SkipSet((1,)), SkipSet((), (2,)), SkipSet((1, 2), (2,)), SkipSet((0, 1, 2, 3), (0, 1, 2, 3))]


@pytest.fixture(scope="module")
def model():
    return tiny_model(N_LAYERS, seed=1)


@pytest.mark.parametrize("skip", SKIPS, ids=lambda s: s.label)
def test_equals_greedy_for_any_skip_set_and_draft_length(model, skip):
    prompt = ids(1, 5, seed=7)
    greedy = model.generate(prompt, 12, eos_ids=())
    for drafting in (DraftExit(1, 0.0), DraftExit(3, 0.0), DraftExit(8, 0.5), DraftExit(8, 1.0, adaptive=False)):
        out, stats = draft_verify_generate(model, prompt, 12, skip, drafting, eos_ids=())
        assert torch.equal(out, greedy), (skip, drafting)
        assert stats.new_tokens == 12 and stats.accepted <= stats.drafted
    out, stats = draft_verify_generate(model, prompt, 12, SkipSet(), DraftExit(4, 0.0), eos_ids=())
    assert stats.acceptance == 1.0  # skipping nothing drafts with the verifier itself


def test_batches_eos_and_sampling_match_their_references(model):
    prompts = ids(3, 6, seed=11)
    free = model.generate(prompts, 10, eos_ids=())
    eos = (int(free[0, 8]), int(free[2, 10]))
    greedy = model.generate(prompts, 10, eos_ids=eos)
    out, _ = draft_verify_generate(model, prompts, 10, SkipSet((1,), (2,)), DraftExit(4, 0.0), eos_ids=eos)
    assert torch.equal(out, greedy)
    sampling = Sampling(1.0, seed=5)
    reference = sampled_generate(model, prompts, 9, sampling)
    out, stats = draft_verify_generate(model, prompts, 9, SkipSet((2,)), DraftExit(3, 0.0), eos_ids=(),
                                       sampling=sampling)
    assert torch.equal(out, reference) and stats.drafted > 0


def test_the_drafter_is_the_model_without_the_skipped_sublayers(model):
    prompt = ids(1, 6, seed=3)
    x = model.embed_tokens(prompt)
    with torch.no_grad():
        whole = _skipping_run(model, SkipSet(), x, 0, None)
        assert torch.allclose(whole, model(prompt, return_hidden=True).hidden_states[-1], atol=1e-6)
        skipped = _skipping_run(model, SkipSet((1,), (1, 3)), x, 0, None)
        expected = x
        ctx = model.context(torch.arange(6)[None], x.dtype)
        for layer, block in enumerate(model.blocks):
            ctx.depth = layer
            if layer != 1:
                expected = block.attention_residual(expected, ctx)
            if layer not in (1, 3):
                expected = block.mlp_residual(expected, layer)
        assert torch.allclose(skipped, expected, atol=1e-6)
        assert not torch.allclose(skipped, whole, atol=1e-3)


def test_adaptive_threshold_follows_the_official_rule():
    rule = DraftExit(max_drafts=4, threshold=0.8)
    state = _Threshold(rule)
    state.update(1, 4)  # m = 0.125 < 0.9: aim 0.01 higher, move a tenth of the way
    assert state.matchness == pytest.approx(0.125) and state.value == pytest.approx(0.801)
    state.matchness = 0.95
    state.update(2, 2)  # m = 0.975 >= 0.9 and the round stopped early: aim lower
    assert state.value == pytest.approx(0.801 - 0.001)
    before = state.value
    state.update(4, 4)  # a full round at high acceptance: unchanged
    assert state.value == pytest.approx(before)
    fixed = _Threshold(DraftExit(threshold=0.3, adaptive=False))
    fixed.update(0, 5)
    assert fixed.value == 0.3


def test_skip_set_encoding_and_checks(model):
    skip = SkipSet((0, 3), (2,))
    assert SkipSet.from_values(skip.values(N_LAYERS), N_LAYERS) == skip
    assert SkipSet.from_values([0.51, 0.5, 0.2, 0.9, 0.0, 0.0, 1.0, 0.4], 4) == SkipSet((0, 3), (2,))
    assert 0 < skip.kept_share(model) < 1 and SkipSet().kept_share(model) == 1.0
    with pytest.raises(ConfigError, match=r"SkipSet.attention=\[4\]"):
        draft_verify_generate(model, ids(1, 3, seed=1), 3, SkipSet((4,)))
    with pytest.raises(ConfigError, match="max_drafts=0"):
        DraftExit(0)
    assert all(p.attention or p.mlp for p in middle_probes(30)) and len(middle_probes(30)) == 3


def test_search_returns_the_fastest_evaluated_set_and_its_trace(model):
    prompts = [ids(1, 5, seed=s) for s in (1, 2)]
    search = search_skip_set(model, prompts, 4, n_iter=2, probes=[SkipSet((1,)), SkipSet((), (2,))],
                             drafting=DraftExit(3, 0.0))
    trace = search.trace
    assert list(trace["source"]) == ["probe", "probe", "suggested", "suggested"]
    assert int(trace["best"].sum()) == 1
    best = trace[trace["best"]].iloc[0]
    assert best["tokens_per_s"] == trace["tokens_per_s"].max() and best["skip"] == search.best.text()
    assert trace["acceptance"].between(0, 1).all()
    with pytest.raises(ConfigError, match="n_iter=-1"):
        search_skip_set(model, prompts, 4, n_iter=-1)
