"""rlib.relax: depth-wise LoRA on looped models (Relaxed Recursive Transformers, Sec. 2.3, Eq. 4, App. C)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rlib import counting, looping, relax
from rlib.config import ConfigError
from rlib.looping import Looping
from rlib.model import Decoder, load, save
from rlib.relax import Relaxation
from tests.test_looping import ids, tiny_config, tiny_model


def logits(model, tokens):
    with torch.no_grad():
        return model(tokens)


@pytest.mark.parametrize("gemma", [False, True], ids=["llama", "gemma3"])
@pytest.mark.parametrize("init", ["stepwise", "average", "lower"])
def test_full_rank_svd_lora_with_norm_deltas_reproduces_the_source(init, gemma):
    source = tiny_model(6, gemma=gemma)
    looped = looping.convert(source, Looping(2, init=init))
    rank = relax.full_rank(looped)
    relaxed = relax.relax(looped, source, Relaxation(rank, init="svd", norms=True))
    tokens = ids()
    torch.testing.assert_close(logits(relaxed, tokens), logits(source, tokens), atol=2e-4, rtol=1e-4)
    # the paper's relaxation (norms tied) gets every linear map right but not the norms: not the source yet
    tied = relax.relax(looped, source, Relaxation(rank, init="svd"))
    assert (logits(tied, tokens) - logits(source, tokens)).abs().max() > 1e-2


def test_each_depths_lora_is_the_best_rank_r_approximation_of_its_residual():
    source = tiny_model(6)
    looped = looping.convert(source, Looping(2, init="average"))
    relaxed = relax.relax(looped, source, Relaxation(3))
    for depth, step in enumerate(relaxed.plan.steps):
        proj = relaxed.blocks[step.block].attn.q_proj
        lora = proj.adapters[str(depth)]
        residual = source.blocks[depth].attn.q_proj.weight - proj.weight
        u, s, vh = torch.linalg.svd(residual.detach())
        best = (u[:, :3] * s[:3]) @ vh[:3]
        torch.testing.assert_close((lora.lora_b @ lora.lora_a).detach(), best, atol=1e-5, rtol=1e-4)
        assert lora.rank == 3


def test_stepwise_depths_with_zero_residual_get_the_standard_init():
    """App. C: where the shared weight is the original layer's, the SVD is empty; A random, B = 0."""
    source = tiny_model(6)
    looped = looping.convert(source, Looping(2, init="stepwise"))
    kept = looping.source_layers("stepwise", "cycle", 6, 2)  # block k starts from these source layers
    relaxed = relax.relax(looped, source, Relaxation(2))
    for depth, step in enumerate(relaxed.plan.steps):
        lora = relaxed.blocks[step.block].mlp.up_proj.adapters[str(depth)]
        is_kept = depth in kept[step.block]
        assert bool((lora.lora_b == 0).all()) == is_kept, depth
        assert lora.lora_a.abs().sum() > 0


def test_zero_init_starts_exactly_at_the_recursive_model_and_ranks_are_capped():
    source = tiny_model(6)
    looped = looping.convert(source, Looping(3))
    relaxed = relax.relax(looped, source, Relaxation(1000, init="zero"))
    tokens = ids()
    torch.testing.assert_close(logits(relaxed, tokens), logits(looped, tokens), atol=0, rtol=0)
    q = relaxed.blocks[0].attn.q_proj
    assert q.adapters["0"].rank == min(q.weight.shape)  # capped at min(d_in, d_out)
    lora = relax.lora_parameters(looped, Relaxation(1000))
    counts = counting.count_parameters(relaxed)
    assert counts["unique"] == counting.count_parameters(looped)["unique"] + lora


def test_per_group_ranks_and_bad_settings():
    source = tiny_model(4)
    looped = looping.convert(source, Looping(2))
    relaxed = relax.relax(looped, source, Relaxation(2, ranks={"ffn": 4, "kv": 1}))
    block = relaxed.blocks[0]
    assert (block.attn.q_proj.adapters["0"].rank, block.attn.k_proj.adapters["0"].rank,
            block.mlp.down_proj.adapters["2"].rank) == (2, 1, 4)
    with pytest.raises(ConfigError, match="init 'pca' unknown"):
        Relaxation(2, init="pca")
    with pytest.raises(ConfigError, match=r"ranks \['mlp'\] name no module group"):
        Relaxation(2, ranks={"mlp": 3})
    with pytest.raises(ConfigError, match="already relaxed"):
        relax.relax(relaxed, source, Relaxation(2))
    with pytest.raises(ConfigError, match="has 4 depths but the source 6 layers"):
        relax.relax(looped, tiny_model(6), Relaxation(2))


def test_relaxed_model_save_reload_round_trip_and_strip(tmp_path):
    source = tiny_model(6, gemma=True)
    looped = looping.convert(source, Looping(2, init="average"))
    relaxed = relax.relax(looped, source, Relaxation(3, norms=True))
    tokens = ids()
    reloaded = load(save(relaxed, tmp_path / "relaxed"))
    torch.testing.assert_close(logits(reloaded, tokens), logits(relaxed, tokens), atol=0, rtol=0)
    torch.testing.assert_close(logits(relax.strip_adapters(relaxed), tokens), logits(looped, tokens),
                               atol=0, rtol=0)


def test_relaxed_model_trains_lora_and_shared_weights():
    source = tiny_model(4)
    relaxed = relax.relax(looping.convert(source, Looping(2)), source, Relaxation(2, init="zero"))
    tokens = ids()
    loss = relaxed(tokens).logsumexp(-1).mean()
    loss.backward()
    lora = relaxed.blocks[0].attn.o_proj.adapters["2"]
    assert lora.lora_b.grad is not None and lora.lora_b.grad.abs().sum() > 0  # B = 0 still gets a gradient
    assert relaxed.blocks[0].attn.o_proj.weight.grad.abs().sum() > 0  # all parameters train (Sec. 2.3)


def test_prefix_relaxation_starts_as_the_recursive_model_trains_and_round_trips(tmp_path):
    source = tiny_model(6, gemma=True)
    looped = looping.convert(source, Looping(2, init="average"))
    prefixed = relax.prefix_relax(looped, 5)
    tokens = ids()
    torch.testing.assert_close(logits(prefixed, tokens), logits(looped, tokens), atol=0, rtol=0)  # gates at 0
    counts = counting.count_parameters(prefixed)
    per_depth = 5 * 32 + 4  # P x d_model prompt + one gate per head
    assert counts["unique"] == counting.count_parameters(looped)["unique"] + 6 * per_depth
    with torch.no_grad():
        for block in prefixed.blocks:
            for prefix in block.attn.adapters.values():
                prefix.gate.fill_(0.5)
    changed = logits(prefixed, tokens)
    assert (changed - logits(looped, tokens)).abs().max() > 1e-3
    reloaded = load(save(prefixed, tmp_path / "prefixed"))
    torch.testing.assert_close(logits(reloaded, tokens), changed, atol=0, rtol=0)
    # decoding with the KV cache sees the prefix at every step
    full = prefixed(tokens)
    cache = prefixed.new_cache()
    with torch.no_grad():
        prefixed(tokens[:, :7], cache=cache)
        step = prefixed(tokens[:, 7:8], cache=cache)
    torch.testing.assert_close(step[:, 0], full[:, 7].detach(), atol=1e-5, rtol=1e-4)
    loss = prefixed(tokens).logsumexp(-1).mean()
    loss.backward()
    assert prefixed.blocks[0].attn.adapters["0"].prompt.grad.abs().sum() > 0


def test_svd_cache_reuses_factors_without_changing_the_result():
    source = tiny_model(6)
    looped = looping.convert(source, Looping(2, init="average"))
    cache: dict = {}
    tokens = ids()
    for rank in (2, 5):
        cached = relax.relax(looped, source, Relaxation(rank), svd_cache=cache)
        fresh = relax.relax(looped, source, Relaxation(rank))
        torch.testing.assert_close(logits(cached, tokens), logits(fresh, tokens), atol=0, rtol=0)
    assert len(cache) == 6 * len(relax.PROJECTIONS)


def test_svd_relative_error_is_the_frobenius_share_the_lora_leaves_out():
    source = tiny_model(4)
    looped = looping.convert(source, Looping(2, init="average"))
    cache: dict = {}
    model = relax.relax(looped, source, Relaxation(3), cache)
    errors = [relax.svd_relative_error(cache, r) for r in range(0, 40)]
    assert errors[0] == pytest.approx(1.0) and errors[-1] == pytest.approx(0.0, abs=1e-9)
    assert all(a >= b for a, b in zip(errors, errors[1:]))
    # measured directly on the weights of the rank-3 model: the same share
    left = total = 0.0
    for depth, step in enumerate(model.plan.steps):
        for path in relax.PROJECTIONS:
            proj = model.blocks[step.block].get_submodule(path)
            lora = proj.adapters[str(depth)]
            residual = (source.blocks[depth].get_submodule(path).weight.double() - proj.weight.double()).detach()
            approx = (lora.lora_b.double() @ lora.lora_a.double()).detach()
            total += float(residual.square().sum())
            left += float((residual - approx).square().sum())
    assert errors[3] == pytest.approx((left / total) ** 0.5, rel=1e-4)


def pre_norm_gemma(n_layers: int = 6) -> Decoder:
    """The paper's Gemma 2B's block form: (1 + w) RMSNorm pre-norms only (no output or query/key norms)."""
    return tiny_model(config=dataclasses.replace(tiny_config(n_layers, gemma=True), post_norms=False, qk_norm=False))


@pytest.mark.parametrize("family", ["llama", "gemma_pre_norm"])
@pytest.mark.parametrize("init", ["stepwise", "average", "lower"])
def test_full_rank_svd_lora_against_the_norm_folded_source_reproduces_it_with_norms_tied(init, family):
    """Sec. 3.5's 'at full rank, relaxed models can perfectly match': the paper's set-up (norms tied, LoRA on the
    linear maps only) holds the source once the pre-norm gain ratio is folded into the maps the norms feed."""
    from rlib.relaxed.norm_folding import fold_tied_norms

    source = tiny_model(6) if family == "llama" else pre_norm_gemma(6)
    looped = looping.convert(source, Looping(2, init=init))
    folded = fold_tied_norms(source, looped)
    tokens = ids()
    torch.testing.assert_close(logits(folded, tokens), logits(source, tokens), atol=2e-5, rtol=1e-5)
    for depth, step in enumerate(looped.plan.steps):  # the folded model's norms are the looped model's tied ones
        for norm in ("attn_norm", "mlp_norm"):
            assert torch.equal(folded.blocks[depth].get_submodule(norm).weight,
                               looped.blocks[step.block].get_submodule(norm).weight)
    relaxed = relax.relax(looped, folded, Relaxation(relax.full_rank(looped)))
    assert not any(".adapters." in n and "norm" in n for n, _ in relaxed.named_parameters())  # no norm deltas
    torch.testing.assert_close(logits(relaxed, tokens), logits(source, tokens), atol=2e-4, rtol=1e-4)
    # Eq. 4's residual against the source itself restores the maps but not the gains: not the source
    assert (logits(relax.relax(looped, source, Relaxation(relax.full_rank(looped))), tokens)
            - logits(source, tokens)).abs().max() > 1e-2


def test_norm_folding_refuses_what_it_cannot_absorb():
    """Gemma 3's output and query/key norms sit after a map: a fold cannot reproduce them, so it says which."""
    from rlib.relaxed.norm_folding import fold_tied_norms

    source = tiny_model(6, gemma=True)
    with pytest.raises(ConfigError, match="attn_out_norm"):
        fold_tied_norms(source, looping.convert(source, Looping(2, init="average")))
    llama = tiny_model(6)
    looped = looping.convert(llama, Looping(2, init="average"))
    with torch.no_grad():
        looped.blocks[0].attn_norm.weight[3] = 0.0
    with pytest.raises(ConfigError, match="gain is 0"):
        fold_tied_norms(llama, looped)
    with pytest.raises(ConfigError, match="depths but the source"):
        fold_tied_norms(tiny_model(4), looped)


def test_norm_scale_reads_gemmas_plus_one_form():
    from rlib.model.layers import RMSNorm
    from rlib.relaxed.norm_folding import norm_scale

    llama, gemma = RMSNorm(4, 1e-6), RMSNorm(4, 1e-6, plus_one=True)
    with torch.no_grad():
        llama.weight.copy_(torch.tensor([0.5, 1.0, 2.0, -1.0]))
        gemma.weight.copy_(torch.tensor([0.5, 1.0, 2.0, -1.0]))
    x = torch.randn(3, 4)
    normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(llama(x), norm_scale(llama) * normed)
    torch.testing.assert_close(gemma(x), norm_scale(gemma) * normed)
