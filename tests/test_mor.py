"""rlib.mor: Mixture-of-Recursions routing, KV strategies and decoding (paper 001).

The backbone: capacity 1 at every step is the fixed-depth Recursive model; cached token-by-token decoding equals
the full causal forward for both KV strategies and both routers; in causal mode no position depends on later
tokens, while the training-time top-k does (the leakage the paper's aux loss fixes)."""

from __future__ import annotations

import pytest
import torch

from rlib.config import ConfigError
from rlib.mor import MoRSpec, build
from rlib.mor.ablations import ROUTER_ABLATIONS
from rlib.mor.model import MoRLoss, mor_plan
from tests.test_looping import VOCAB, tiny_config

L = 8  # Middle-Cycle with Nr = 3: 1 + 2 + 1 unique blocks


def ids(batch=2, tokens=12, seed=0):
    return torch.randint(3, VOCAB, (batch, tokens), generator=torch.Generator().manual_seed(seed))


def model(spec: MoRSpec, gemma=False, seed=0, n_layers=L):
    m = build(tiny_config(4, gemma), n_layers, spec, seed=seed, std=0.2).eval()
    with torch.no_grad():  # routers strong enough that decisions differ between tokens
        for router in list(m.routers) + list(m.aux_routers):
            for p in router.parameters():
                p.mul_(20)
    return m


SPECS = {
    "expert-cache": MoRSpec.expert(3),
    "expert-share": MoRSpec.expert(3, kv="share"),
    "token-cache": MoRSpec.token(3),
    "token-share": MoRSpec.token(3, kv="share"),
    "expert-auxrouter": MoRSpec.expert(3, aux="router"),
    "expert-widemlp": MoRSpec.expert(3, router_arch="wide_mlp"),  # Table 10's W-MLP row (ec_wide_mlp)
    "token-sigmoid": MoRSpec.token(3, **ROUTER_ABLATIONS["tc_sigmoid"][1]),  # Table 11's loss-free sigmoid router
    "recursive-cache": MoRSpec.recursive(3),
    "recursive-share": MoRSpec.recursive(3, kv="share"),
}


def test_plan_layout_for_middle_cycle_and_kv_sharing():
    plan, prefix, recursions, suffix = mor_plan("middle_cycle", 8, 3, "cache")
    assert [s.block for s in plan.steps] == [0, 1, 2, 1, 2, 1, 2, 3]
    assert (prefix, recursions, suffix) == ([0], [[1, 2], [3, 4], [5, 6]], [7])
    shared, *_ = mor_plan("middle_cycle", 8, 3, "share")
    assert [(s.slot, s.reuse_kv) for s in shared.steps] == [(0, False), (1, False), (2, False), (1, True), (2, True),
                                                            (1, True), (2, True), (7, False)]
    seq, prefix, recursions, _ = mor_plan("sequence", 6, 2, "share")
    assert [(s.block, s.slot, s.reuse_kv) for s in seq.steps][:2] == [(0, 0, False), (0, 0, True)]
    assert recursions == []


@pytest.mark.parametrize("kv", ["cache", "share"])
def test_capacity_one_everywhere_is_the_recursive_model(kv):
    x = ids()
    recursive = model(MoRSpec.recursive(3, kv=kv))
    full = model(MoRSpec.expert(3, kv=kv, capacities=(1.0, 1.0, 1.0), gating="replace"))
    assert torch.equal(recursive.decoder.embed.weight, full.decoder.embed.weight)
    torch.testing.assert_close(full(x), recursive(x), rtol=0, atol=0)
    assert bool((full.last_routing.depth == 3).all())


def test_expert_choice_keeps_nested_top_k_sets_of_the_capacity_sizes():
    m = model(MoRSpec.expert(3))
    x = ids(3, 12)
    m(x)
    kept = m.last_routing.kept
    for r, size in enumerate([12, 8, 4]):
        assert kept[r].sum(1).tolist() == [size] * 3
        if r:
            assert bool((kept[r] <= kept[r - 1]).all())
    assert m.last_routing.depth.sum().item() == 3 * (12 + 8 + 4)


@pytest.mark.parametrize("gemma", [False, True])
@pytest.mark.parametrize("name", list(SPECS))
def test_cached_decoding_equals_the_full_causal_forward(name, gemma):
    m = model(SPECS[name], gemma=gemma)
    x = ids(2, 11, seed=3)
    with torch.no_grad():
        full = m(x, mode="causal")
        depths = m.last_routing.depth
        cache = m.new_cache()
        steps = [m(x[:, :4], cache=cache, mode="causal")]
        for t in range(4, x.shape[1]):
            steps.append(m(x[:, t:t + 1], cache=cache, mode="causal"))
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-4, atol=1e-4)
    if SPECS[name].routed:
        assert len(set(depths.flatten().tolist())) > 1, "routing should vary, or the test proves little"


@pytest.mark.parametrize("name", ["expert-cache", "expert-share", "token-cache", "recursive-cache"])
def test_causal_mode_never_looks_at_later_tokens(name):
    m = model(SPECS[name])
    x = ids(2, 12, seed=5)
    y = x.clone()
    y[:, 7:] = ids(2, 5, seed=9)
    with torch.no_grad():
        a, b = m(x, mode="causal"), m(y, mode="causal")
    torch.testing.assert_close(a[:, :7], b[:, :7], rtol=1e-5, atol=1e-5)


def test_training_top_k_leaks_the_future_which_is_why_decoding_is_causal():
    m = model(MoRSpec.expert(3))
    x = ids(2, 12, seed=5)
    y = x.clone()
    y[:, 7:] = ids(2, 5, seed=9)
    with torch.no_grad():
        a, b = m(x, mode="topk"), m(y, mode="topk")
    assert not torch.allclose(a[:, :7], b[:, :7], atol=1e-4)


def test_recursion_wise_cache_holds_only_the_active_tokens_keys():
    m = model(MoRSpec.expert(3))
    cache = m.new_cache()
    with torch.no_grad():
        m(ids(1, 12), cache=cache, mode="topk")
    lengths = [cache.length(slot) for slot in range(8)]
    assert lengths == [12, 12, 12, 8, 8, 4, 4, 12]  # first, 3 recursions x 2 layers at k = 12, 8, 4, last
    shared = model(MoRSpec.expert(3, kv="share"))
    cache = shared.new_cache()
    with torch.no_grad():
        shared(ids(1, 12), cache=cache)
    assert [cache.length(s) for s in range(8)] == [12, 12, 12, 0, 0, 0, 0, 12]


@pytest.mark.parametrize("name", ["expert-cache", "expert-auxrouter", "token-cache"])
def test_training_losses_reach_the_routers(name):
    m = model(SPECS[name]).train()
    x = ids(2, 12)
    logits = m(x)
    terms = MoRLoss().loss(0, x, logits, m)
    expected = {"expert-cache": {"router_aux"}, "expert-auxrouter": {"router_aux"},
                "token-cache": {"router_balance", "router_z"}}[name]
    assert set(terms) == expected
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), x[:, 1:].flatten()) + sum(terms.values())
    loss.backward()
    for router in m.routers:
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in router.parameters())
    for router in m.aux_routers:  # trained by its own BCE only (it reads detached states)
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in router.parameters())


def test_loss_free_balancing_moves_the_bias_toward_the_underloaded_depths():
    m = model(MoRSpec.token(3, balance="loss_free", bias_rate=0.01)).train()
    m(ids(4, 12))
    depth = m.last_routing.depth
    load = torch.bincount(depth.flatten() - 1, minlength=3).float()
    bias = m.balance_bias
    assert bool(((bias > 0) == (load < load.mean())).all())


@pytest.mark.parametrize("sharing", ["sequence", "middle_sequence"])
def test_sequence_orders_run_as_plain_recursive_stacks(sharing):
    m = build(tiny_config(4), 8 if sharing == "middle_sequence" else 9, MoRSpec.recursive(3, sharing=sharing)).eval()
    assert m.recursions == []
    x = ids(2, 10)
    with torch.no_grad():
        full = m(x)
        cache = m.new_cache()
        steps = [m(x[:, :3], cache=cache)] + [m(x[:, t:t + 1], cache=cache) for t in range(3, 10)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-4, atol=1e-4)
    assert torch.equal(full, m.decoder(x))  # the plain decoder over the same plan
    with pytest.raises(ConfigError, match="no recursions to cap"):
        m(x, depth_cap=1)


def test_depth_cap_limits_recursions():
    m = model(MoRSpec.expert(3))
    x = ids(2, 12)
    with torch.no_grad():
        for cap in (1, 2, 3):
            m(x, depth_cap=cap)
            assert int(m.last_routing.depth.max()) == cap


def test_bad_specs_fail_with_the_fix():
    with pytest.raises(ConfigError, match="routing='bogus'"):
        MoRSpec(routing="bogus")
    with pytest.raises(ConfigError, match="router_func='softmax'.*expert-choice"):
        MoRSpec.expert(3, router_func="softmax")
    with pytest.raises(ConfigError, match="capacities"):
        MoRSpec.expert(3, capacities=(1.0, 0.2, 0.5))
    with pytest.raises(ConfigError, match="sharing='sequence'"):
        MoRSpec.expert(3, sharing="sequence")
    with pytest.raises(ConfigError, match="KV sharing needs every token"):
        build(tiny_config(4), L, MoRSpec.expert(3, kv="share", capacities=(0.9, 0.5, 0.2)))
    with pytest.raises(ConfigError, match="depth_cap"):
        model(MoRSpec.expert(3))(ids(), depth_cap=4)
