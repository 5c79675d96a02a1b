"""Tests of rlib.looping: sharing orders, initializations against their formulas, exactness of B = 1, the
Gemma sliding/global geometry per depth, save/reload, KV-cached decoding, and counting of unique parameters."""

from __future__ import annotations

import zlib

import pytest
import torch

from rlib import counting, looping
from rlib.config import ConfigError
from rlib.looping import Looping
from rlib.model import Decoder, DecoderConfig, convert, load, save
from rlib.model.init import init_weights

VOCAB = 97


def tiny_config(n_layers: int = 6, gemma: bool = False) -> DecoderConfig:
    """A small Llama-like (or Gemma-3-like: (1 + w) norms, post-norms, QK-norm, 5:1 sliding/global) config."""
    windows = tuple(None if gemma and (i + 1) % 3 == 0 else (5 if gemma else None) for i in range(n_layers))
    thetas = tuple(1e6 if gemma and w is None else 1e4 for w in windows)
    return DecoderConfig(
        family="gemma3" if gemma else "llama", vocab_size=VOCAB, d_model=32, n_layers=n_layers, n_heads=4,
        n_kv_heads=2, head_dim=8, d_ffn=48, activation="gelu_tanh" if gemma else "silu", norm_eps=1e-6,
        norm_kind="rms_plus_one" if gemma else "rms", post_norms=gemma, embed_scale=32**0.5 if gemma else 1.0,
        qk_norm=gemma, rope_thetas=thetas, sliding_windows=windows, attn_scale=8**-0.5, tie_embeddings=gemma,
        bos_id=1, eos_ids=(2,),
    )


def tiny_model(n_layers: int = 6, gemma: bool = False, seed: int = 0, config: DecoderConfig | None = None) -> Decoder:
    """`tiny_config`'s model (or `config`'s), its norm weights moved away from identity so that copying the wrong
    one shows."""
    model = init_weights(Decoder(config or tiny_config(n_layers, gemma)), seed=seed, std=0.2).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                seed = zlib.crc32(name.encode()) % 1000  # not hash(): string hashes change per process
                param.add_(torch.randn(param.shape, generator=torch.Generator().manual_seed(seed)) * 0.3)
    return model


def ids(batch: int = 2, tokens: int = 13, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, VOCAB, (batch, tokens), generator=torch.Generator().manual_seed(seed))


# ---- orders and source layers -------------------------------------------------------------------------------


def test_sharing_orders_match_the_papers_tables():
    assert looping.block_order("cycle", 9, 3) == (0, 1, 2, 0, 1, 2, 0, 1, 2)
    assert looping.block_order("sequence", 9, 3) == (0, 0, 0, 1, 1, 1, 2, 2, 2)
    assert looping.block_order("middle_cycle", 8, 3) == (0, 1, 2, 1, 2, 1, 2, 3)
    assert looping.block_order("middle_sequence", 8, 3) == (0, 1, 1, 1, 2, 2, 2, 3)
    assert looping.block_order("cycle", 30, 1) == tuple(range(30))


def test_bad_loop_counts_name_the_valid_ones():
    with pytest.raises(ConfigError, match=r"n_loops=4 .* 30-layer .*\[1, 2, 3, 5, 6, 10, 15, 30\]"):
        looping.block_order("cycle", 30, 4)
    with pytest.raises(ConfigError, match=r"n_loops=3 does not divide L - 2 .*\[1, 2, 4, 7, 14, 28\]"):
        looping.block_order("middle_cycle", 30, 3)
    with pytest.raises(ConfigError, match="sharing='zigzag'"):
        looping.block_order("zigzag", 30, 2)
    with pytest.raises(ConfigError, match="norm_init='zero' applies to init='average' only"):
        Looping(2, init="stepwise", norm_init="zero")


def test_stepwise_picks_match_the_inventory():
    picks = lambda L, B, init="stepwise": [s[0] for s in looping.source_layers(init, "cycle", L, B)]  # noqa: E731
    assert picks(18, 2) == [0, 2, 4, 6, 8, 11, 13, 15, 17]  # 1-indexed {1,3,5,7,9*,12,14,16,18}, half to even
    assert picks(18, 3) == [0, 3, 7, 10, 14, 17]  # {1,4,8,11,15,18}
    assert picks(16, 2) == [0, 2, 4, 6, 9, 11, 13, 15]  # Pythia {1,3,5,7,10,12,14,16}
    assert picks(18, 3, "stepwise_fixed_start") == [0, 3, 6, 9, 12, 15]  # {1,4,7,10,13,16}
    assert picks(6, 2, "lower") == [0, 1, 2] and picks(6, 2, "upper") == [3, 4, 5]
    assert looping.source_layers("average", "cycle", 6, 2) == [(0, 3), (1, 4), (2, 5)]
    assert looping.source_layers("average", "sequence", 6, 2) == [(0, 1), (2, 3), (4, 5)]
    assert looping.source_layers("stepwise", "middle_cycle", 8, 3) == [(0,), (1,), (6,), (7,)]
    assert looping.source_layers("random", "cycle", 6, 2) == [(), (), ()]
    subset = looping.source_layers("random_layers", "cycle", 30, 3, seed=5)
    assert len(subset) == 10 and [s[0] for s in subset] == sorted(s[0] for s in subset)
    assert subset == looping.source_layers("random_layers", "cycle", 30, 3, seed=5)


# ---- weights follow their formulas ---------------------------------------------------------------------------


@pytest.mark.parametrize("init", ["stepwise", "stepwise_fixed_start", "average", "lower", "upper", "random_layers"])
@pytest.mark.parametrize("sharing", ["cycle", "sequence"])
def test_each_initialization_matches_its_formula(init, sharing):
    source = tiny_model(6)
    recipe = Looping(n_loops=2, sharing=sharing, init=init, seed=3)
    looped = looping.convert(source, recipe)
    sources = looping.source_layers(init, sharing, 6, 2, seed=3)
    theirs = source.state_dict()
    assert looped.config.n_layers == 3
    for name, tensor in looped.state_dict().items():
        if not name.startswith("blocks."):
            assert torch.equal(tensor, theirs[name]), name
            continue
        _, block, rest = name.split(".", 2)
        expected = torch.stack([theirs[f"blocks.{i}.{rest}"] for i in sources[int(block)]]).mean(0)
        torch.testing.assert_close(tensor, expected, rtol=0, atol=1e-7, msg=name)
    assert [s.block for s in looped.plan.steps] == list(looping.block_order(sharing, 6, 2))


@pytest.mark.parametrize("gemma", [False, True])
def test_norm_ablation_of_average(gemma):
    source = tiny_model(6, gemma)
    choice = looping.convert(source, Looping(2, init="average", norm_init="choice"))
    zero = looping.convert(source, Looping(2, init="average", norm_init="zero"))
    avg = looping.convert(source, Looping(2, init="average"))
    for name, tensor in choice.state_dict().items():
        if name.startswith("blocks.") and "norm" in name:
            _, block, rest = name.split(".", 2)
            assert torch.equal(tensor, source.state_dict()[f"blocks.{block}.{rest}"])  # first tied layer: k
            assert (zero.state_dict()[name] == 0).all()
        elif name.startswith("blocks."):
            assert torch.equal(tensor, avg.state_dict()[name]) and torch.equal(tensor, zero.state_dict()[name])
    # zero norms are the identity under Gemma's (1 + w) and kill every sublayer under Llama's w
    x = ids()
    if not gemma:
        hidden = zero(x, return_hidden=True).hidden_states
        embedded = zero.embed_tokens(x)
        assert all(torch.equal(h, embedded) for h in hidden)
    else:
        assert torch.isfinite(zero(x)).all()


def test_random_init_is_seeded_and_shares_nothing_with_the_source():
    source = tiny_model(6)
    a = looping.convert(source, Looping(2, init="random", seed=1))
    b = looping.convert(source, Looping(2, init="random", seed=1))
    c = looping.convert(source, Looping(2, init="random", seed=2))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert not torch.equal(a.embed.weight, c.embed.weight)
    assert not torch.equal(a.embed.weight, source.embed.weight)
    assert a.embed.weight.std().item() == pytest.approx(0.02, rel=0.05)


# ---- exactness, geometry, decoding, saving -----------------------------------------------------------------


@pytest.mark.parametrize("gemma", [False, True])
@pytest.mark.parametrize("init", ["stepwise", "average", "lower"])
def test_one_loop_reproduces_the_source_exactly(gemma, init):
    source = tiny_model(6, gemma)
    copy = looping.convert(source, Looping(1, init=init))
    assert copy.plan.is_identity(6)
    x = ids(tokens=17)  # longer than the sliding window of 5
    assert torch.equal(copy(x), source(x))


def test_truncated_equals_an_early_stop_of_the_source():
    source = tiny_model(6)
    short = looping.truncated(source, 3)
    x = ids()
    assert torch.equal(short(x), source(x, n_steps=3))
    with pytest.raises(ConfigError, match="n_layers=7"):
        looping.truncated(source, 7)


def test_gemma_geometry_follows_the_depth_or_the_block():
    source = tiny_model(6, gemma=True)  # windows: s s g s s g
    by_depth = looping.convert(source, Looping(2, init="stepwise"))  # blocks from layers 0, 2 (g), 5 (g)
    assert by_depth.config.sliding_windows == (5, None, None)
    windows = [by_depth.blocks[s.block].attn.window if s.window == "block" else s.window for s in by_depth.plan.steps]
    assert windows == list(source.config.sliding_windows)
    thetas = [s.rope_theta or by_depth.config.rope_thetas[s.block] for s in by_depth.plan.steps]
    assert thetas == list(source.config.rope_thetas)
    by_block = looping.convert(source, Looping(2, init="stepwise", geometry="block"))
    assert all(s.window == "block" and s.rope_theta is None for s in by_block.plan.steps)
    x = ids(tokens=17)
    assert not torch.allclose(by_depth(x), by_block(x))
    table = looping.layer_mapping(source.config, Looping(2, init="stepwise"))
    assert list(table["attention"]) == ["sliding 5", "sliding 5", "global"] * 2
    assert list(table["loop"]) == [1, 1, 1, 2, 2, 2] and list(table["source_layers"][:3]) == ["0", "2", "5"]


@pytest.mark.parametrize("gemma", [False, True])
def test_looped_model_decodes_with_its_cache_and_survives_save_and_load(tmp_path, gemma):
    looped = looping.convert(tiny_model(6, gemma), Looping(3, init="average"))
    x = ids(tokens=15)
    full = looped(x)  # [B, T, V]
    cache = looped.new_cache()
    steps = [looped(x[:, :9], cache=cache)]
    steps += [looped(x[:, t : t + 1], cache=cache) for t in range(9, 15)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)
    assert cache.n_slots == 6  # one cache per depth
    again = load(save(looped, tmp_path / "looped"))
    assert again.plan == looped.plan
    assert torch.equal(again(x), full)


def test_unique_parameters_are_k_layers_plus_embeddings():
    source = tiny_model(6)
    per_layer = sum(p.numel() for p in source.blocks[0].parameters())
    outside = sum(p.numel() for n, p in source.named_parameters() if not n.startswith("blocks."))
    for n_loops in (1, 2, 3, 6):
        looped = looping.convert(source, Looping(n_loops))
        counts = counting.count_parameters(looped)
        assert counts["unique"] == outside + (6 // n_loops) * per_layer
        assert counts["effective"] == counting.count_parameters(source)["unique"]


def test_from_scratch_has_the_width_and_none_of_the_weights():
    source = tiny_model(6)
    scratch = looping.from_scratch(source, 3, seed=0)
    assert scratch.config.n_layers == 3 and scratch.config.d_model == source.config.d_model
    assert not torch.equal(scratch.embed.weight, source.embed.weight)


def test_converting_a_looped_model_again_is_refused():
    looped = looping.convert(tiny_model(6), Looping(2))
    with pytest.raises(ConfigError, match="plain decoder"):
        looping.convert(looped, Looping(2))


# ---- the real models ------------------------------------------------------------------------------------------


@pytest.mark.assets
@pytest.mark.parametrize(("asset", "loops"), [("smollm2-135m", (1, 2, 3, 5)), ("gemma3-270m", (1, 2, 3))])
def test_real_models_convert_for_every_paper_loop_count(needs_assets, asset, loops):
    from rlib import assets

    needs_assets(asset)
    source = convert.from_transformers(assets.load_model(asset))
    x = torch.tensor([[source.config.bos_id or 1] + list(range(1000, 1040))])
    reference = source(x)
    for n_loops in loops:
        looped = looping.convert(source, Looping(n_loops, init="stepwise"))
        assert looped.config.n_layers == source.config.n_layers // n_loops
        logits = looped(x)
        assert torch.isfinite(logits).all()
        if n_loops == 1:
            assert torch.equal(logits, reference)


def test_exact_flops_follow_the_per_depth_windows():
    source = tiny_model(6, gemma=True)
    looped = looping.convert(source, Looping(2, init="stepwise"))  # blocks: one sliding, two global
    by_block = looping.convert(source, Looping(2, init="stepwise", geometry="block"))
    flops = lambda m: counting.forward_flops_per_token(m, seq_len=64, convention="exact")  # noqa: E731
    assert flops(looped) == flops(source)  # the source's pattern, depth by depth
    assert flops(by_block) > flops(source)  # 4 global depths instead of 2
