"""Qwen2, Qwen3 and Mistral in the book's Decoder, beyond what test_model_equivalence.py checks for every tiny model
(full forward, KV-cached decoding in two chunkings, export back to the same class, all against transformers):

each family's feature is read and live (Qwen2's Q/K/V biases and upper-layer sliding window, Qwen3's per-head
QK-norm, Mistral's window shorter than the sequence), greedy generation past the window equals transformers', and
unsupported checkpoints (rope scaling, unknown layer or model types) and configs a transformers class cannot
express are refused with errors that name the field.
"""

import pytest
import torch

from rlib.config import ConfigError
from rlib.model import Decoder, DecoderConfig, from_transformers, to_transformers
from tests.test_model_equivalence import (
    TINY,
    TOL,
    WINDOW,
    max_diff,
    tiny_mistral,
    tiny_qwen2,
    tiny_qwen3,
    tokens,
)

FAMILIES = {name: make for name, make in TINY.items() if name.startswith(("qwen", "mistral"))}


def test_each_family_feature_is_read():
    qwen2 = DecoderConfig.from_hf(tiny_qwen2().config)
    assert qwen2.family == "qwen2" and qwen2.qkv_bias and not qwen2.attn_bias
    assert qwen2.sliding_windows == (None, WINDOW, WINDOW)  # layers >= max_window_layers slide
    qwen3 = DecoderConfig.from_hf(tiny_qwen3().config)
    assert qwen3.qk_norm and qwen3.norm_kind == "rms" and qwen3.head_dim == 24 and qwen3.tie_embeddings
    assert DecoderConfig.from_hf(tiny_mistral().config).sliding_windows == (WINDOW,) * 3
    decoder = from_transformers(tiny_qwen2())
    assert decoder.blocks[0].attn.q_proj.bias is not None and decoder.blocks[0].attn.o_proj.bias is None


@pytest.mark.parametrize("name", ["qwen2", "mistral"])
def test_the_window_is_live(name):
    """The same weights with global attention differ beyond the window: the equality below tests the window."""
    decoder = from_transformers(FAMILIES[name]())
    windowless = _decoder(decoder.config.replace(sliding_windows=(None,) * decoder.config.n_layers))
    windowless.load_state_dict(decoder.state_dict())
    input_ids = tokens(2, 20)
    with torch.no_grad():
        ours, other = decoder(input_ids), windowless(input_ids)
    assert max_diff(ours[:, :WINDOW], other[:, :WINDOW]) <= TOL and max_diff(ours, other) > 1e-2


@pytest.mark.parametrize("name", ["qwen2", "qwen3", "mistral"])
def test_greedy_generation_beyond_the_window_matches_transformers(name):
    hf_model = FAMILIES[name]()
    decoder = from_transformers(hf_model)
    prompt = tokens(2, 4, seed=7)
    ours = decoder.generate(prompt, max_new_tokens=12, eos_ids=())
    theirs = hf_model.generate(prompt, max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize("make", [tiny_qwen2, tiny_qwen3, tiny_mistral])
@pytest.mark.parametrize("rope_type, extra", [("yarn", {"factor": 4.0, "original_max_position_embeddings": 64}),
                                              ("linear", {"factor": 2.0})])
def test_rope_scaling_is_refused_naming_the_field(make, rope_type, extra):
    config = make().config
    config.rope_parameters = {"rope_type": rope_type, "rope_theta": 10000.0, **extra}
    with pytest.raises(ConfigError, match=rf"rope_parameters\['rope_type'\]='{rope_type}'"):
        DecoderConfig.from_hf(config)


def test_partial_rotary_factor_is_refused_naming_the_field():
    config = tiny_qwen3().config
    config.rope_parameters = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}
    with pytest.raises(ConfigError, match=r"rope_parameters\['partial_rotary_factor'\]=0.5"):
        DecoderConfig.from_hf(config)


def test_unsupported_layer_type_and_model_type_are_refused():
    config = tiny_qwen3().config
    config.layer_types = ["full_attention", "chunked_attention", "full_attention"]
    with pytest.raises(ConfigError, match=r"layer_types\[1\]='chunked_attention'"):
        DecoderConfig.from_hf(config)
    config = tiny_qwen2().config
    config.model_type = "qwen2_moe"
    with pytest.raises(ConfigError, match="'qwen2_moe'.*supported: llama, qwen2, qwen3, mistral, gemma3_text"):
        DecoderConfig.from_hf(config)


def test_export_refuses_what_the_class_cannot_express():
    mistral = DecoderConfig.from_hf(tiny_mistral().config)
    with pytest.raises(ConfigError, match="mistral model has different attention windows per layer"):
        to_transformers(_decoder(mistral.replace(sliding_windows=(WINDOW, None, WINDOW))))
    qwen2 = DecoderConfig.from_hf(tiny_qwen2().config)
    with pytest.raises(ConfigError, match="qwen2 model has several sliding-window sizes"):
        to_transformers(_decoder(qwen2.replace(sliding_windows=(None, 4, 6))))
    with pytest.raises(ConfigError, match="llama model has biases on Q, K, V without one on O"):
        to_transformers(_decoder(qwen2.replace(family="llama", sliding_windows=(None,) * 3)))


def _decoder(config: DecoderConfig) -> Decoder:
    return Decoder(config).eval()
