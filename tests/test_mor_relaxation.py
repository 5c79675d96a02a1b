"""MoR Table 13 (App. G.2): relaxing the Recursive baseline. Every relaxation starts as the plain Recursive model
(equal logits at init), trains its own parameters, survives save/load, and the ledger judges the table."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from rlib.config import ConfigError
from rlib.mor import MoRSpec, build, io, tables
from rlib.mor.claims import judge
from rlib.mor.config import RELAXATIONS, MoRConfig, variants
from tests.test_looping import tiny_config
from tests.test_mor import L, ids

RELAXED = {"enc": dict(relax="enc"), "lora": dict(relax="lora", relax_rank=2),
           "adapt_prompt": dict(relax="adapt_prompt", relax_len=3),
           "adapt_prompt-share": dict(kv="share", relax="adapt_prompt", relax_len=3)}


@pytest.mark.parametrize("name", list(RELAXED))
def test_a_relaxed_model_starts_as_the_recursive_one_and_trains_its_own_parameters(name, tmp_path):
    changes = RELAXED[name]
    plain = build(tiny_config(4), L, MoRSpec.recursive(3, kv=changes.get("kv", "cache")), seed=1, std=0.2)
    relaxed = build(tiny_config(4), L, MoRSpec.recursive(3, **changes), seed=1, std=0.2)
    x = ids()
    torch.testing.assert_close(relaxed(x), plain(x), rtol=0, atol=1e-6)
    added = {n for n, _ in relaxed.named_parameters()} - {n for n, _ in plain.named_parameters()}
    assert added  # the relaxation's own parameters, and only those are new
    relaxed(x).float().logsumexp(-1).mean().backward()
    grads = {n: p.grad for n, p in relaxed.named_parameters() if n in added}
    assert any(g is not None and bool(g.abs().sum() > 0) for g in grads.values()), name
    with torch.no_grad():  # moved away from init, the model differs, and save/load keeps it
        for n, p in relaxed.named_parameters():
            if n in added:
                p.add_(0.1 * torch.randn_like(p))
    assert not torch.allclose(relaxed(x), plain(x))
    again = io.load(io.save(relaxed, tmp_path / name))
    torch.testing.assert_close(again(x), relaxed(x))


def test_lora_and_prompts_sit_on_the_recursion_depths_only():
    relaxed = build(tiny_config(4), L, MoRSpec.recursive(3, relax="lora", relax_rank=2))
    depths = sorted({int(n.split(".adapters.")[1].split(".")[0]) for n, _ in relaxed.named_parameters()
                     if ".adapters." in n})
    assert depths == sorted(d for rec in relaxed.recursions for d in rec)
    names = {n.split(".adapters.")[0].rsplit(".", 1)[-1] for n, _ in relaxed.named_parameters() if ".adapters." in n}
    assert names == {"q_proj", "v_proj"}  # Table 13: "on the query and value matrices"


def test_bad_relaxations_fail_before_any_work():
    with pytest.raises(ConfigError, match="relax"):
        MoRSpec.expert(3, relax="enc")  # Table 13 relaxes the Recursive baseline only
    with pytest.raises(ConfigError, match="relax_rank"):
        MoRSpec.recursive(3, relax="lora")
    with pytest.raises(ConfigError, match="relaxations"):
        MoRConfig.preset("smoke").override(relaxations=("dora",))


def test_cpu_long_trains_table_13_and_the_sharing_table_leaves_it_out():
    long = MoRConfig.preset("cpu-long")
    relaxed = [v for v in variants(long) if v.tag in RELAXATIONS]
    assert {v.tag for v in relaxed} == set(RELAXATIONS) and {v.budget for v in relaxed} == {"ablation"}
    assert {v.spec.relax_rank for v in relaxed if v.spec.relax == "lora"} == {long.relax_rank}
    assert not [v for v in variants(MoRConfig.preset("cpu")) if v.tag in RELAXATIONS]

    def result(spec: MoRSpec, tag: str, nll: float) -> dict:
        return {"name": f"{tag}-{spec.kv}", "label": spec.label(), "tag": tag, "budget": "ablation", "seed": 0,
                "spec": spec.__dict__ | {"capacities": None}, "n_layers": 14, "params": 4.7e6, "flops_per_token": 1.0,
                "train_flops": 1.0, "tokens": 1.0, "tokens_per_s": 1.0, "seconds": 1.0, "after": {"nll": nll}}

    base, share = MoRSpec.recursive(3), MoRSpec.recursive(3, kv="share")
    results = [result(base, "", 6.48), result(share, "", 6.50),
               result(MoRSpec.recursive(3, relax="enc"), "enc", 6.47),
               result(MoRSpec.recursive(3, relax="lora", relax_rank=16), "lora", 6.46),
               result(MoRSpec.recursive(3, kv="share", relax="adapt_prompt", relax_len=32), "adapt_p_share", 6.52)]
    assert len(tables.sharing_table(results)) == 1  # the plain Recursive row only: relaxed rows are Table 13's
    table = tables.relaxation_table(results)
    assert table["delta"].round(4).tolist() == [0.0, -0.01, -0.02, 0.0, 0.02]

    def verdict(frame: pd.DataFrame) -> pd.Series:
        return judge({"relaxation": frame}, long, "cpu-long").finish().set_index("id").loc["mor.tab13.relaxation"]

    assert verdict(table)["verdict"] == "held"  # gains 0.01 / 0.02 <= 0.0255 and KV share + Adapt-P worse
    big = table.assign(delta=table["delta"].where(table["relax"] != "lora", -0.05))
    row = verdict(big)
    assert row["verdict"] == "not held" and row["diagnosis"] == "disagrees with the paper" and "lora" in row["evidence"]
    assert verdict(table[table["relax"] == "none"])["verdict"] == "not measured"
    # the KV-share + Adapt-P row is half the claim: without it the claim is not measured; a gain there within the
    # paper's 'not substantial' bound holds, a larger one does not (the paper hoped prefixes would help KV sharing)
    assert verdict(table[table["kv"] == "cache"])["verdict"] == "not measured"
    share = table["kv"] == "share"
    assert verdict(table.assign(delta=table["delta"].mask(share & (table["relax"] != "none"), -0.01)))[
        "verdict"] == "held"
    assert verdict(table.assign(delta=table["delta"].mask(share & (table["relax"] != "none"), -0.04)))[
        "verdict"] == "not held"
