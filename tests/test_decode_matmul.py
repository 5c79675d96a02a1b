"""rlib.model.decode_matmul: every product path equals F.linear to float rounding, `fast_decoding` swaps and restores
the model (also on an error), keeps gradients right, tracks in-place weight changes, and self-speculation inside it
still equals greedy decoding inside it."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from rlib.layerskip.speculative import self_speculative_generate
from rlib.model.decode_matmul import SMALL_M, WIDE_SMALL_M, DecodeProjection, decode_linear, fast_decoding
from rlib.model.layers import Projection
from tests.test_looping import ids, tiny_model


@pytest.mark.parametrize("out_features,in_features", [(40, 24), (24, 40), (32, 32)])
@pytest.mark.parametrize("tokens", [1, 2, 3, SMALL_M, SMALL_M + 1, WIDE_SMALL_M, WIDE_SMALL_M + 1, 13])
@pytest.mark.parametrize("bias", [False, True])
def test_decode_linear_equals_f_linear(out_features, in_features, tokens, bias):
    gen = torch.Generator().manual_seed(tokens)
    weight = torch.randn(out_features, in_features, generator=gen)
    b = torch.randn(out_features, generator=gen) if bias else None
    x = torch.randn(1, tokens, in_features, generator=gen)  # [B, T, in]
    expected = F.linear(x, weight, b)
    got = decode_linear(x, weight, weight.t().contiguous(), b)
    assert got.shape == expected.shape == (1, tokens, out_features)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(decode_linear(x, weight, None, b), expected, rtol=1e-5, atol=1e-5)
    batched = x.reshape(tokens, 1, in_features)  # [B, 1, in]: a batch of single tokens is M = B
    torch.testing.assert_close(decode_linear(batched, weight, weight.t().contiguous(), b),
                               expected.reshape(tokens, 1, out_features), rtol=1e-5, atol=1e-5)


def _projections(model) -> list[str]:
    return [name for name, module in model.named_modules() if isinstance(module, Projection)]


@pytest.mark.parametrize("gemma", [False, True])
def test_fast_decoding_swaps_restores_and_keeps_logits(gemma):
    model = tiny_model(4, gemma=gemma, seed=3)
    model.config = dataclasses.replace(model.config, logit_softcap=3.0 if gemma else None)
    keys = list(model.state_dict())
    names = _projections(model)
    prompt = ids(1, 7, seed=1)
    with torch.no_grad():
        expected = model(prompt)
        step = model(prompt[:, :1])
        with fast_decoding(model) as same:
            assert same is model and "head" in vars(model)
            assert not _projections(model)
            swapped = [m for m in model.modules() if isinstance(m, DecodeProjection)]
            assert len(swapped) == len(names) and list(model.state_dict()) == keys
            torch.testing.assert_close(model(prompt), expected, rtol=1e-5, atol=1e-5)  # 7 tokens
            torch.testing.assert_close(model(prompt[:, :1]), step, rtol=1e-5, atol=1e-5)  # 1 token
    assert _projections(model) == names and "head" not in vars(model) and list(model.state_dict()) == keys


def test_fast_decoding_restores_on_error_and_nests_and_can_be_off():
    model = tiny_model(2)
    names = _projections(model)
    with pytest.raises(RuntimeError, match="boom"), fast_decoding(model):
        raise RuntimeError("boom")
    assert _projections(model) == names and "head" not in vars(model)
    with fast_decoding(model, enabled=False):
        assert _projections(model) == names
    with fast_decoding(model):
        with fast_decoding(model):  # the inner block changes nothing, and leaves the outer one in place
            pass
        assert not _projections(model) and "head" in vars(model)
    assert _projections(model) == names


def test_adapters_keep_f_linear():
    model = tiny_model(2)
    adapted = model.blocks[0].attn.q_proj
    adapted.adapters["0"] = nn.Linear(adapted.in_features, adapted.out_features, bias=False)
    with fast_decoding(model):
        assert any(m is adapted for m in model.modules())
        assert sum(isinstance(m, Projection) for m in model.modules()) == 1
    with pytest.raises(ValueError, match="adapter-free"):
        DecodeProjection(adapted)


def test_gradients_and_in_place_updates():
    model = tiny_model(2, seed=2)
    prompt = ids(1, 1, seed=4)  # one token: the transposed path when grad is off
    model.zero_grad()
    model(prompt).sum().backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    with fast_decoding(model):
        model(prompt).sum().backward()  # grad on: F.linear, so every weight gets its gradient
        got = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        assert got.keys() == expected.keys()
        for name in expected:
            torch.testing.assert_close(got[name], expected[name], rtol=1e-5, atol=1e-6)
        with torch.no_grad():
            before = model(prompt)
            for p in model.parameters():
                p.mul_(0.5)  # in place: the transposed copies must follow
            after = model(prompt)
    with torch.no_grad():
        torch.testing.assert_close(after, model(prompt), rtol=1e-5, atol=1e-5)
        assert not torch.allclose(before, after)


@pytest.mark.parametrize("reuse", ["kvq", "kv", "none"])
def test_self_speculation_inside_fast_decoding_equals_greedy_inside_it(reuse):
    model = tiny_model(4, seed=1)
    prompt = ids(2, 5, seed=7)  # batch 2: M = 2 at every single-token step
    with fast_decoding(model):
        greedy = model.generate(prompt, 9, eos_ids=())
        for exit_layer in (1, 2, 4):
            for n_draft in (1, 3, 8):  # verifying d + 1 = 2, 4, 9 tokens: every path
                out, _ = self_speculative_generate(model, prompt, 9, exit_layer, n_draft, reuse, eos_ids=())
                assert torch.equal(out, greedy), (exit_layer, n_draft)
