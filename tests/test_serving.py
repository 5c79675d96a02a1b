"""rlib.serving with LoopedProgram: continuous depth-wise batching equals sequential greedy decoding when nothing
exits early, for plain, looped and relaxed (per-depth LoRA + norm deltas) models, Llama- and Gemma-3-like."""

from __future__ import annotations

import copy

import pytest
import torch

from rlib import looping, relax
from rlib.config import ConfigError
from rlib.looping import Looping
from rlib.model import Decoder, ExecutionPlan
from rlib.relax import Relaxation
from rlib.serving import LoopedProgram, Request, ServingEngine, make_engine
from rlib.serving.exits import ClassifierExit
from tests.test_looping import VOCAB, tiny_model


def requests(n=7, seed=0, max_new=(3, 9)):
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        length = int(torch.randint(1, 9, (1,), generator=gen))
        new = int(torch.randint(max_new[0], max_new[1] + 1, (1,), generator=gen))
        out.append(Request(i, torch.randint(3, VOCAB, (length,), generator=gen).tolist(), new))
    return out


def greedy(model: Decoder, req: Request) -> list[int]:
    prompt = torch.tensor([req.prompt])
    out = model.generate(prompt, req.max_new_tokens, eos_ids=())
    return out[0, len(req.prompt):].tolist()


def models():
    for gemma in (False, True):
        source = tiny_model(6, gemma=gemma)
        looped = looping.convert(source, Looping(3, init="average"))
        name = "gemma3" if gemma else "llama"
        yield f"{name}-plain", source
        yield f"{name}-looped", looped
        yield f"{name}-relaxed", relax.relax(looped, source, Relaxation(3, norms=True))


MODELS = dict(models())


@pytest.mark.parametrize("admission", ["continuous", "static"])
@pytest.mark.parametrize("name", list(MODELS))
def test_engine_without_early_exit_equals_sequential_greedy_decoding(name, admission):
    model = MODELS[name]
    reqs = requests()
    result = make_engine(model, max_batch=3, max_len=24, admission=admission).run(reqs)
    for req in reqs:
        assert result.completions[req.id].tokens == greedy(model, req), (name, req.id)
    n_loops = len(model.plan.steps) // len(model.blocks)
    assert result.mean_exit_loop == n_loops
    assert result.tokens == sum(r.max_new_tokens for r in reqs)
    assert result.mean_busy <= 3


def test_continuous_admission_keeps_slots_busier_than_static():
    model = MODELS["llama-looped"]
    reqs = requests(12, seed=1, max_new=(1, 12))
    cont = make_engine(model, 4, 32, admission="continuous").run(reqs)
    static = make_engine(model, 4, 32, admission="static").run(reqs)
    assert cont.mean_busy > static.mean_busy
    assert cont.passes < static.passes


def test_everything_exiting_after_loop_one_decodes_like_the_first_loop_alone():
    """Threshold ~0: every decode token leaves after loop 1, so it only ever reads loop-1 keys/values, which the
    full prefill wrote exactly as a first-loop-only model would: the outputs must match that model's greedy run."""
    model = MODELS["gemma3-relaxed"]
    first_loop = copy.copy(model)
    first_loop.plan = ExecutionPlan(model.plan.steps[: len(model.blocks)])
    reqs = requests(5, seed=2)
    result = make_engine(model, 2, 24, exit_threshold=1e-9).run(reqs)
    for req in reqs:
        comp = result.completions[req.id]
        assert comp.exit_loops[0] == 3 and set(comp.exit_loops[1:]) <= {1}
        follow = Request(req.id, req.prompt + comp.tokens[:1], req.max_new_tokens - 1)
        if follow.max_new_tokens:
            assert comp.tokens[1:] == greedy(first_loop, follow)
    assert result.exit_histogram()[1] == result.tokens - len(reqs)


def test_confidence_threshold_trades_depth_for_passes():
    model = MODELS["llama-relaxed"]
    reqs = requests(6, seed=3, max_new=(8, 12))
    full = make_engine(model, 3, 32).run(reqs)
    probs = []
    for threshold in (0.99, 0.2, 0.05):
        res = make_engine(model, 3, 32, exit_threshold=threshold).run(reqs)
        probs.append((res.mean_exit_loop, res.passes))
    assert full.mean_exit_loop == 3
    assert probs[0][0] >= probs[1][0] >= probs[2][0]
    assert probs[2][1] < full.passes


def test_classifier_exit_runs_the_head_only_on_rows_that_emit(monkeypatch):
    """With the classifier rule the [V, D] head runs once per emitted token (plus the prefills' calls), never on a
    row that stays for another loop; the softmax rule pays the head on those rows too."""
    model = copy.deepcopy(MODELS["llama-looped"])
    rows = []
    head = model.head
    monkeypatch.setattr(model, "head", lambda x: rows.append(x.shape[0] if x.ndim == 2 else 0) or head(x))
    reqs = requests(6, seed=4, max_new=(6, 10))
    d = model.config.d_model
    for bias in (0.0, -0.5, 0.5, -1.0, 1.0, -2.0, 2.0):  # a classifier under which some tokens exit and some stay
        rule = ClassifierExit(torch.linspace(-3, 3, d).repeat(2, 1), torch.tensor([bias, bias]), threshold=0.5)
        rows.clear()
        res = make_engine(model, 3, 32, exit_rule=rule).run(reqs)
        if 1 < res.mean_exit_loop < 3:
            break
    assert 1 < res.mean_exit_loop < 3, "no bias gave partial exits"
    assert sum(rows) == res.tokens - len(reqs)  # decode tokens only: prefills call the head on [1, 1, D]
    rows.clear()
    soft = make_engine(model, 3, 32, exit_threshold=0.1).run(reqs)
    assert sum(rows) > soft.tokens - len(reqs)


def test_bad_settings_fail_before_any_work():
    model = MODELS["llama-looped"]
    with pytest.raises(ConfigError, match="admission='fifo'"):
        make_engine(model, 2, 16, admission="fifo")
    with pytest.raises(ConfigError, match="exit_threshold=1.5"):
        make_engine(model, 2, 16, exit_threshold=1.5)
    with pytest.raises(ConfigError, match="exceeds max_len=16; raise max_len"):
        make_engine(model, 2, 16).run([Request(0, [5] * 10, 7)])
    seq = looping.convert(tiny_model(6), Looping(2, sharing="sequence"))
    with pytest.raises(ConfigError, match="needs a cycle plan"):
        make_engine(seq, 2, 16)


@pytest.mark.parametrize("impl", ["triton", "stacked", "reference"])
def test_relaxed_rows_through_the_lora_batch_kernel_give_the_same_tokens(impl):
    """Row-wise LoRA through kernels.lora_batch (the Triton kernel runs in the interpreter on CPU)."""
    model = MODELS["llama-relaxed"]
    reqs = requests(3, seed=4, max_new=(2, 4))
    engine = make_engine(model, 2, 16, lora_impl=impl)
    assert bool(engine.program.rows.adapters.stacked) == (impl == "stacked")  # the stacked GEMM path really ran
    result = engine.run(reqs)
    for req in reqs:
        assert result.completions[req.id].tokens == greedy(model, req)


def test_pass_timing_is_positive_and_checks_its_arguments():
    engine = make_engine(MODELS["llama-looped"], 4, 16).program
    assert engine.pass_seconds(2, 5, repeats=2) > 0
    with pytest.raises(ConfigError, match="batch=5 must be in 1..4"):
        engine.pass_seconds(5, 0)


@pytest.mark.parametrize("family", ["vanilla", "recursive", "relaxed", "mor-expert", "mor-token"])
def test_one_engine_gives_plain_greedy_decoding_for_every_model_family(family):
    """The book's one serving engine, through `make_engine`, on the same requests: every family's tokens equal its
    own plain cached greedy decoding (early exit off)."""
    from rlib.mor import MoRSpec
    from rlib.mor.serving import greedy_generate
    from tests.test_mor import model as mor_model

    reqs = requests(6, seed=5)
    if family.startswith("mor"):
        m = mor_model(MoRSpec.expert(3) if family == "mor-expert" else MoRSpec.token(3))
        reference = {r.id: greedy_generate(m, r.prompt, r.max_new_tokens) for r in reqs}
    else:
        m = MODELS[{"vanilla": "llama-plain", "recursive": "llama-looped", "relaxed": "llama-relaxed"}[family]]
        reference = {r.id: greedy(m, r) for r in reqs}
    engine = make_engine(m, max_batch=3, max_len=24)
    assert isinstance(engine, ServingEngine)
    result = engine.run(reqs)
    assert {i: c.tokens for i, c in result.completions.items()} == reference
    assert isinstance(engine.program, LoopedProgram) != family.startswith("mor")


def test_pass_rounds_time_every_model_batch_and_context_in_alternating_order(monkeypatch):
    import dataclasses

    from rlib.relaxed import throughput
    from rlib.relaxed.config import RelaxedConfig

    cfg = dataclasses.replace(RelaxedConfig.preset("smoke"), long_context=24, pass_repeats=1, max_batch=2)
    models = {throughput.VANILLA: MODELS["llama-plain"], "recursive": MODELS["llama-looped"],
              "relaxed r=3": MODELS["llama-relaxed"]}
    batch_of = {throughput.VANILLA: 2, "recursive": 3, "relaxed r=3": 2}
    order = []
    real = throughput._pass_ms

    def spy(engine, batch, position, repeats):
        order.append((id(engine.program.model), batch, position))
        return real(engine, batch, position, repeats)

    monkeypatch.setattr(throughput, "_pass_ms", spy)
    table = throughput._pass_rounds(models, cfg, batch_of, position=5, max_len=12)
    per_round = 2 * (2 + 3 + 2)  # two contexts x the batches {1, vanilla batch 2, own cap} of each model
    assert len(table) == throughput.PASS_ROUNDS * per_round and (table["ms_per_pass"] > 0).all()
    assert set(table["model"]) == set(models)
    assert set(zip(table["context"], table["position"])) == {("short", 5), ("long", 24)}
    assert set(table.loc[table.model == "recursive", "batch"]) == {1, 2, 3}
    first, second = order[:per_round], order[per_round:2 * per_round]
    assert second == first[::-1]  # every other round reversed: a drift of the host's speed falls on all alike
    assert sorted(first) == sorted(order[2 * per_round:3 * per_round])  # every round visits every setting once
