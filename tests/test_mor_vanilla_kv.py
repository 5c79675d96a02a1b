"""rlib.mor.vanilla_kv: Table 12's vanilla models with keys/values shared across depth (plans, pairing, claim)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from rlib.config import ConfigError
from rlib.experiments import RunSlot
from rlib.mor import claims, vanilla_kv
from rlib.mor.config import MoRConfig
from rlib.mor.vanilla_kv import VanillaKVConfig, VanillaKVRun, kv_plan


def _slots(plan):
    return [(s.block, s.slot, s.reuse_kv) for s in plan.steps]


def test_kv_groups_follow_the_sharing_orders():
    assert _slots(kv_plan(6, "sequence", 2)) == [(0, 0, False), (1, 0, True), (2, 2, False), (3, 2, True),
                                                 (4, 4, False), (5, 4, True)]
    assert _slots(kv_plan(6, "cycle", 2)) == [(0, 0, False), (1, 1, False), (2, 2, False), (3, 0, True),
                                              (4, 1, True), (5, 2, True)]
    assert _slots(kv_plan(6, "cycle", 3))[2:4] == [(2, 0, True), (3, 1, True)]
    assert _slots(kv_plan(6, "sequence", 3))[2:4] == [(2, 0, True), (3, 3, False)]
    assert _slots(kv_plan(4)) == [(d, d, False) for d in range(4)]
    with pytest.raises(ConfigError, match="n_loops=3 does not divide"):
        VanillaKVRun(14, "cycle", 3)
    with pytest.raises(ConfigError, match="use '' with loop 1"):
        VanillaKVRun(14, "", 2)
    with pytest.raises(ConfigError, match="strategies"):
        VanillaKVConfig(loops=(2,), strategies=("middle_cycle",), seeds=(0,))


def test_the_cpu_long_study_pairs_every_shared_model_with_a_reference_of_its_depth():
    cfg = MoRConfig.preset("cpu-long")
    runs = vanilla_kv.study_runs(cfg, VanillaKVConfig.preset("cpu-long"))
    assert len(runs) == 12 and len({r.name for r in runs}) == 12
    assert {r.n_layers for r in runs if r.loop == 2} == {14} and {r.n_layers for r in runs if r.loop == 3} == {15}
    for r in runs:  # each shared run has its unshared reference at the same depth and seed
        assert VanillaKVRun(r.n_layers, seed=r.seed) in runs
    assert VanillaKVConfig.preset("cpu").loops == () and vanilla_kv.grids(cfg, VanillaKVConfig.preset("cpu"), ".") == ()


def test_a_shared_model_starts_from_its_references_weights_and_reads_earlier_keys():
    cfg = MoRConfig.preset("smoke")
    ref, shared = (vanilla_kv.build(cfg, VanillaKVRun(8, s, k, seed=3), 64) for s, k in (("", 1), ("cycle", 2)))
    a, b = ref.state_dict(), shared.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    ids = torch.randint(0, 64, (2, 12))
    assert not torch.allclose(ref(ids), shared(ids))  # sharing changes what the later depths attend over
    shared(ids).float().pow(2).mean().backward()
    reader = shared.blocks[5]  # depth 5 reads depth 1's keys and values: its own K/V projections get no gradient
    grads = {n: p.grad for n, p in reader.named_parameters() if "k_proj" in n or "v_proj" in n}
    assert grads and all(g is None or float(g.abs().max()) == 0.0 for g in grads.values())
    assert shared.blocks[1].attn.k_proj.weight.grad is not None  # the writer's projections do


@torch.no_grad()
def test_token_by_token_decoding_equals_the_full_forward():
    cfg = MoRConfig.preset("smoke")
    model = vanilla_kv.build(cfg, VanillaKVRun(8, "sequence", 2, seed=1), 64).eval()
    ids = torch.randint(0, 64, (1, 9))
    full = model(ids)
    cache = model.new_cache()
    steps = torch.cat([model(ids[:, t:t + 1], cache=cache) for t in range(ids.shape[1])], dim=1)
    torch.testing.assert_close(steps, full, rtol=1e-4, atol=1e-4)


def _results(nlls: dict[tuple[int, str, int, int], float]) -> list[dict]:
    return [{"label": VanillaKVRun(depth, strategy, loop, seed).label, "n_layers": depth, "strategy": strategy,
             "loop": loop, "seed": seed, "params": 2e6, "tokens": 1.6e5, "nll": nll}
            for (depth, strategy, loop, seed), nll in nlls.items()]


def test_the_table_pairs_by_seed_and_the_claim_reads_its_direction():
    nlls = {(14, "", 1, 0): 6.50, (14, "cycle", 2, 0): 6.45, (14, "", 1, 1): 6.60, (14, "cycle", 2, 1): 6.58,
            (15, "", 1, 0): 6.40, (15, "sequence", 3, 0): 6.41}
    table = vanilla_kv.kv_table(_results(nlls))
    row = table.set_index(["n_layers", "kv_sharing"]).loc[(14, "Cyc")]
    assert row["seeds"] == 2 and row["d_vs_none"] == pytest.approx(-0.035)
    assert (row["d_lo"], row["d_hi"]) == pytest.approx((-0.05, -0.02))
    assert np.isnan(table.set_index(["n_layers", "kv_sharing"]).loc[(14, "none"), "d_vs_none"])
    cfg = MoRConfig.preset("cpu-long")
    claim = "mor.tab12.kv_share_helps_vanilla"
    failed = claims.judge({"kv_sharing_vanilla": table}, cfg, "cpu-long").finish().set_index("id").loc[claim]
    assert failed["verdict"] == "not held" and "1 of 2 shared rows" in failed["evidence"]
    assert "Vanilla L=15, KV Seq 3: +0.0100" in failed["measured"]
    nlls[(15, "sequence", 3, 0)] = 6.39
    held = claims.judge({"kv_sharing_vanilla": vanilla_kv.kv_table(_results(nlls))}, cfg, "cpu-long")
    assert held.finish().set_index("id").loc[claim, "verdict"] == "held"
    missing = claims.judge({}, MoRConfig.preset("cpu"), "cpu").finish().set_index("id").loc[claim]
    assert missing["verdict"] == "not measured" and "kv_sharing_vanilla" in missing["measured"]


def test_one_smoke_run_trains_scores_and_saves(tmp_path):
    cfg = MoRConfig.preset("smoke")
    run = VanillaKVRun(8, "cycle", 2, seed=0)
    result = vanilla_kv._train_and_score(run, RunSlot(tmp_path / run.name, "key"), cfg)
    assert result["name"] == "vanilla-L8-kvcycle2-ablation-s0" and result["label"] == "Vanilla L=8, KV Cyc 2"
    assert result["steps"] == 2 and np.isfinite(result["nll"]) and result["curve"]["val_loss"]
    from rlib.model import convert
    loaded = convert.load(tmp_path / run.name / "model")
    assert [s.reuse_kv for s in loaded.plan.steps] == [False] * 4 + [True] * 4
    table = vanilla_kv.kv_table([result])
    assert isinstance(table, pd.DataFrame) and table["kv_sharing"].tolist() == ["Cyc"]


def test_the_command_line_refuses_a_profile_without_runs(capsys):
    with pytest.raises(SystemExit):
        vanilla_kv.main(["--profile", "cpu"])
    assert "the cpu preset has no runs for this study" in capsys.readouterr().err
