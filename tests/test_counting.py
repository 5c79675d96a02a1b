"""rlib.counting: unique vs effective parameters, FLOPs scaling with plan length and context, KV-cache bytes."""

from __future__ import annotations

import pytest
import torch

from rlib.config import ConfigError
from rlib.counting import (
    count_parameters,
    decode_flops_per_token,
    forward_flops_per_token,
    kv_cache_bytes_per_token,
    training_flops_per_token,
)
from rlib.model import Decoder, DecoderConfig, ExecutionPlan


def tiny_config(n_layers: int = 4, tied: bool = True, window: int | None = None) -> DecoderConfig:
    return DecoderConfig(
        family="llama", vocab_size=100, d_model=32, n_layers=n_layers, n_heads=4, n_kv_heads=2, head_dim=8, d_ffn=48,
        activation="silu", norm_eps=1e-5, norm_kind="rms", post_norms=False, embed_scale=1.0, qk_norm=False,
        rope_thetas=(1e4,) * n_layers, sliding_windows=(window,) * n_layers, attn_scale=8**-0.5,
        tie_embeddings=tied,
    )


def block_params(config: DecoderConfig) -> int:
    d, f, kv = config.d_model, config.d_ffn, config.n_kv_heads * config.head_dim
    q = config.n_heads * config.head_dim
    return d * q + 2 * d * kv + q * d + 3 * d * f + 2 * d  # q, k, v, o, gate/up/down, two norms


@pytest.mark.parametrize("tied", [True, False])
def test_identity_plan_effective_equals_unique(tied):
    decoder = Decoder(tiny_config(tied=tied))
    counts = count_parameters(decoder)
    assert counts["unique"] == sum(p.numel() for p in decoder.parameters())
    assert counts["effective"] == counts["unique"]
    embedding = 100 * 32 * (1 if tied else 2)
    assert counts["embedding"] == embedding and counts["non_embedding"] == counts["unique"] - embedding


def test_cycle_plan_counts_each_block_again():
    config = tiny_config(n_layers=3)
    for n_loops in (1, 2, 4):
        counts = count_parameters(config, ExecutionPlan.cycle(3, n_loops))
        assert counts["effective"] == counts["unique"] + (n_loops - 1) * 3 * block_params(config)
    shared = count_parameters(config, ExecutionPlan.cycle(3, 2, share_kv=True))
    assert shared == count_parameters(config, ExecutionPlan.cycle(3, 2))  # sharing K/V changes no weights


def test_config_and_decoder_give_the_same_counts():
    config = tiny_config()
    assert count_parameters(config) == count_parameters(Decoder(config))
    with pytest.raises(ConfigError):
        count_parameters(Decoder(config), ExecutionPlan.cycle(2, 2))


@pytest.mark.parametrize("convention", ["mor", "exact"])
def test_flops_scale_with_plan_length_and_context(convention):
    config = tiny_config(n_layers=2)
    one = forward_flops_per_token(config, ExecutionPlan.cycle(2, 1), seq_len=64, convention=convention)
    three = forward_flops_per_token(config, ExecutionPlan.cycle(2, 3), seq_len=64, convention=convention)
    head = 0 if convention == "mor" else 2 * 32 * 100
    assert three - head == pytest.approx(3 * (one - head))
    short = forward_flops_per_token(config, ExecutionPlan.cycle(2, 1), seq_len=32, convention=convention)
    assert one > short  # the attention term grows linearly with context
    assert (one - short) == pytest.approx(2 * (
        forward_flops_per_token(config, ExecutionPlan.cycle(2, 1), seq_len=48, convention=convention) - short))
    assert training_flops_per_token(config, seq_len=64, convention=convention) == pytest.approx(3 * one)


def test_mor_formula_matches_the_paper_numbers():
    # paper-mor.md 4.1, model "S": d 256, f 768, L 14, T 512 -> vanilla about 27.5M forward FLOPs per token
    config = DecoderConfig(
        family="llama", vocab_size=49152, d_model=256, n_layers=14, n_heads=4, n_kv_heads=2, head_dim=64,
        d_ffn=768, activation="silu", norm_eps=1e-5, norm_kind="rms", post_norms=False, embed_scale=1.0,
        qk_norm=False, rope_thetas=(1e4,) * 14, sliding_windows=(None,) * 14, attn_scale=0.125,
    )
    flops = forward_flops_per_token(config, seq_len=512)
    assert flops == 14 * (2 * (4 * 256**2 + 3 * 256 * 768) + 2 * 512 * 256)
    assert flops == pytest.approx(27.5e6, rel=0.01)


def test_shared_kv_saves_kv_projection_flops_and_decode_sees_whole_context():
    config = tiny_config(n_layers=2)
    cached = forward_flops_per_token(config, ExecutionPlan.cycle(2, 2), seq_len=64, convention="exact")
    shared = forward_flops_per_token(config, ExecutionPlan.cycle(2, 2, share_kv=True), seq_len=64, convention="exact")
    assert cached - shared == 2 * 2 * (2 * 32 * 16)  # 2 reusing steps x 2 FLOPs x (K + V weights)
    mor = decode_flops_per_token(config, context=100)
    assert mor == 2 * (2 * (4 * 32**2 + 3 * 32 * 48) + 4 * 100 * 32)
    windowed = tiny_config(n_layers=2, window=16)
    assert decode_flops_per_token(windowed, context=100, convention="exact") == pytest.approx(
        decode_flops_per_token(windowed, context=16, convention="exact"))


def test_kv_bytes_per_depth_vs_shared():
    config = tiny_config(n_layers=3)
    per_slot = 2 * 2 * 8 * 2  # K and V x kv heads x head dim x bf16 bytes
    assert kv_cache_bytes_per_token(config) == 3 * per_slot
    assert kv_cache_bytes_per_token(config, ExecutionPlan.cycle(3, 4)) == 12 * per_slot
    assert kv_cache_bytes_per_token(config, ExecutionPlan.cycle(3, 4, share_kv=True)) == 3 * per_slot
    assert kv_cache_bytes_per_token(config, dtype=torch.float32) == 6 * per_slot


def test_measured_cache_matches_kv_bytes():
    config = tiny_config(n_layers=2)
    for plan in (ExecutionPlan.cycle(2, 3), ExecutionPlan.cycle(2, 3, share_kv=True)):
        decoder = Decoder(config, plan).eval()
        cache = decoder.new_cache()
        with torch.no_grad():
            decoder(torch.zeros(1, 10, dtype=torch.long), cache=cache)
        assert cache.memory_bytes() == 10 * kv_cache_bytes_per_token(config, plan, torch.float32)


def test_smollm2_unique_parameters_match_transformers(needs_assets):
    needs_assets("smollm2-135m")
    from transformers import AutoConfig, AutoModelForCausalLM

    from rlib import assets

    hf_config = AutoConfig.from_pretrained(assets.checkpoint_dir("smollm2-135m"))
    with torch.device("meta"):
        hf_model = AutoModelForCausalLM.from_config(hf_config)
    counts = count_parameters(DecoderConfig.from_hf(hf_config))
    assert counts["unique"] == hf_model.num_parameters()
    assert counts["non_embedding"] == hf_model.num_parameters(exclude_embeddings=True)


def test_executed_flops_count_every_matmul_and_the_attention_rectangle():
    from rlib.counting import executed_flops

    q, k = torch.randn(2, 4, 10, 16), torch.randn(2, 2, 30, 16)  # GQA: 4 query heads over 2 key heads
    weight = torch.randn(16, 8)

    def work():
        out = torch.nn.functional.scaled_dot_product_attention(q, k, k, is_causal=False, enable_gqa=True)
        return out @ weight

    out, flops = executed_flops(work)
    assert out.shape == (2, 4, 10, 8)
    assert flops["attention"] == 2 * 2 * 4 * 10 * 30 * (16 + 16)
    assert flops["other"] == 2 * (2 * 4 * 10) * 16 * 8
    assert flops["total"] == flops["attention"] + flops["other"]
