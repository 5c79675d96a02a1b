"""Self-speculative decoding (rlib.layerskip.speculative) equals greedy decoding, for every exit layer, draft length,
cache-reuse mode, batch size and EOS case; the KV cache crop it relies on."""

from __future__ import annotations

import itertools

import pytest
import torch

from rlib.config import ConfigError
from rlib.layerskip.speculative import early_exit_generate, self_speculative_generate
from rlib.model import KVCache
from tests.test_looping import ids, tiny_model

N_LAYERS = 4


@pytest.fixture(scope="module")
def model():
    return tiny_model(N_LAYERS, seed=1)


@pytest.mark.parametrize("reuse", ["kvq", "kv", "none"])
def test_equals_greedy_for_every_exit_and_draft_length(model, reuse):
    prompt = ids(1, 5, seed=7)
    greedy = model.generate(prompt, 12, eos_ids=())
    for exit_layer, n_draft in itertools.product(range(1, N_LAYERS + 1), (0, 1, 2, 4, 7)):
        out, stats = self_speculative_generate(model, prompt, 12, exit_layer, n_draft, reuse=reuse, eos_ids=())
        assert torch.equal(out, greedy), (exit_layer, n_draft)
        assert stats.new_tokens == 12 and stats.rounds <= 12 and stats.accepted <= stats.drafted
        if exit_layer == N_LAYERS and n_draft:
            assert stats.acceptance == 1.0  # drafting with every layer is the verifier itself


@pytest.mark.parametrize("reuse", ["kvq", "none"])
def test_batches_and_eos_stop_like_greedy(model, reuse):
    prompts = ids(3, 6, seed=11)
    free = model.generate(prompts, 10, eos_ids=())
    eos = (int(free[0, 8]), int(free[2, 10]))  # tokens greedy emits mid-way: rows stop at different steps
    greedy = model.generate(prompts, 10, eos_ids=eos)
    assert greedy.shape[1] <= free.shape[1]
    for exit_layer, n_draft in itertools.product((1, 2, 3), (1, 3, 5)):
        out, _ = self_speculative_generate(model, prompts, 10, exit_layer, n_draft, reuse=reuse, eos_ids=eos)
        assert torch.equal(out, greedy), (exit_layer, n_draft)


def test_one_new_token_and_early_exit_decoding(model):
    prompt = ids(2, 4, seed=3)
    out, stats = self_speculative_generate(model, prompt, 1, 2, 4, eos_ids=())
    assert torch.equal(out, model.generate(prompt, 1, eos_ids=())) and stats.drafted == 0
    full = early_exit_generate(model, prompt, 6, N_LAYERS, eos_ids=())
    assert torch.equal(full, model.generate(prompt, 6, eos_ids=()))
    shallow = early_exit_generate(model, prompt, 6, 1, eos_ids=())
    with torch.no_grad():
        first = model.head(model(prompt, return_hidden=True, n_steps=1).hidden_states[0][:, -1]).argmax(-1)
    assert torch.equal(shallow[:, 4], first)


def test_bad_arguments_name_the_value(model):
    prompt = ids(1, 3)
    with pytest.raises(ConfigError, match="exit_layer=5"):
        self_speculative_generate(model, prompt, 4, 5, 2)
    with pytest.raises(ConfigError, match="reuse='all'"):
        self_speculative_generate(model, prompt, 4, 2, 2, reuse="all")
    with pytest.raises(ConfigError, match="max_new_tokens=0"):
        early_exit_generate(model, prompt, 0, 2)


def test_cache_crop_keeps_the_first_entries_of_the_chosen_slots():
    cache = KVCache(2)
    for slot in range(2):
        cache.append(slot, torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4), torch.arange(5)[None])
    cache.crop(3, [0])
    assert (cache.length(0), cache.length(1)) == (3, 5)
    assert cache.read(0)[2].tolist() == [[0, 1, 2]]
    cache.crop(0)
    assert (cache.length(0), cache.length(1)) == (0, 0)
    with pytest.raises(ValueError, match="length=-1"):
        cache.crop(-1)


@pytest.mark.parametrize("reuse", ["kvq", "kv", "none"])
def test_long_accepted_runs_with_occasional_rejections_stay_exact(reuse):
    model = tiny_model(N_LAYERS, seed=2)
    with torch.no_grad():  # the last two blocks barely move the residual stream: drafts from layer 2 mostly agree
        for block in model.blocks[2:]:
            for name, param in block.named_parameters():
                if "o_proj" in name or "down" in name:
                    param.mul_(0.15)
    prompts = ids(2, 5, seed=5)
    greedy = model.generate(prompts, 24, eos_ids=())
    out, stats = self_speculative_generate(model, prompts, 24, 2, 6, reuse=reuse, eos_ids=())
    assert torch.equal(out, greedy)
    assert 0.3 < stats.acceptance < 1.0 and stats.tokens_per_round > 1.5, stats


def test_transformers_early_exit_assistance_gives_the_same_tokens(model):
    from rlib.layerskip.peer import hf_early_exit_generate, hf_greedy_generate
    from rlib.model.convert import to_transformers

    hf_model = to_transformers(model)  # its config names EOS id 2, which greedy emits from seed 0's prompt
    for seed in (0, 7):
        prompt = ids(1, 5, seed=seed)
        greedy = model.generate(prompt, 10, eos_ids=())
        assert torch.equal(hf_greedy_generate(hf_model, prompt, 10), greedy)
        for exit_layer, n_draft in ((1, 2), (3, 4)):
            assert torch.equal(hf_early_exit_generate(hf_model, prompt, 10, exit_layer, n_draft), greedy)
    with pytest.raises(ConfigError, match="exit_layer=4"):
        hf_early_exit_generate(hf_model, prompt, 10, 4, 2)


# ---- drafting over a vocabulary subset (beyond the paper) ---------------------------------------------------------


@pytest.mark.parametrize("reuse", ["kvq", "kv", "none"])
def test_a_restricted_draft_vocabulary_keeps_the_output_exact(model, reuse):
    prompts = ids(2, 5, seed=5)
    greedy = model.generate(prompts, 10, eos_ids=())
    generated = greedy[:, 5:]
    used = torch.unique(generated)  # [k]: every token greedy emits
    unused = torch.tensor(sorted(set(range(model.config.vocab_size)) - set(used.tolist())))
    for exit_layer, n_draft in itertools.product(range(1, N_LAYERS + 1), (1, 3, 6)):
        for vocab in (used, unused, used[:1]):
            out, stats = self_speculative_generate(model, prompts, 10, exit_layer, n_draft, reuse=reuse, eos_ids=(),
                                                   draft_vocab=vocab)
            assert torch.equal(out, greedy), (exit_layer, n_draft, len(vocab))
            if vocab is unused:  # every draft lies outside what greedy emits: none can be accepted
                assert stats.accepted == 0 and stats.drafted > 0
    # drafting with every layer over a vocabulary holding every greedy token is the verifier itself
    _, stats = self_speculative_generate(model, prompts, 10, N_LAYERS, 4, reuse=reuse, eos_ids=(), draft_vocab=used)
    assert stats.acceptance == 1.0


def test_the_whole_vocabulary_as_draft_vocabulary_drafts_as_the_shared_head(model):
    prompt = ids(1, 6, seed=9)
    everything = torch.arange(model.config.vocab_size)
    for exit_layer in (1, 2, 3):
        _, plain = self_speculative_generate(model, prompt, 12, exit_layer, 3, eos_ids=())
        _, listed = self_speculative_generate(model, prompt, 12, exit_layer, 3, eos_ids=(), draft_vocab=everything)
        assert (plain.drafted, plain.accepted, plain.rounds) == (listed.drafted, listed.accepted, listed.rounds)


def test_a_bad_draft_vocabulary_names_the_range(model):
    prompt = ids(1, 3)
    size = model.config.vocab_size
    with pytest.raises(ConfigError, match=rf"each in \[0, {size}\); got 2 ids in \[3, {size}\]"):
        self_speculative_generate(model, prompt, 4, 2, 2, draft_vocab=torch.tensor([3, size]))
    with pytest.raises(ConfigError, match="got 0 ids$"):
        self_speculative_generate(model, prompt, 4, 2, 2, draft_vocab=torch.tensor([], dtype=torch.long))
