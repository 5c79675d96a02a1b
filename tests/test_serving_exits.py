"""rlib.serving exit rules, memory accounting and workloads (Relaxed Recursive Transformers Sec. 3.8, App. K)."""

from __future__ import annotations

import copy

import pytest
import torch

from rlib import corpora, data, looping
from rlib.config import ConfigError
from rlib.diversity import distinct_2
from rlib.looping import Looping
from rlib.model import ExecutionPlan
from rlib.serving import Request, make_engine, memory
from rlib.serving.exits import (
    ClassifierExit,
    SoftmaxExit,
    TeacherForced,
    calibrate,
    exit_loops,
    exit_report,
    fit_exit_classifier,
    teacher_forced,
)
from rlib.serving.rows import DepthRows
from rlib.serving.workload import length_summary, paragraph_requests
from tests.test_looping import tiny_model
from tests.test_serving import MODELS, greedy, requests


def _synthetic(n=2000, d=8, seed=0) -> TeacherForced:
    """Two loops; loop 1 agrees with the last when feature 0 is positive (a separable rule plus 5% label noise)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(1, n, d, generator=gen)
    agrees = (x[0, :, 0] > 0) ^ (torch.rand(n, generator=gen) < 0.05)
    nll = torch.stack([torch.where(agrees, 1.0, 3.0), torch.full((n,), 1.0)])
    top = torch.sigmoid(3 * x[0, :, 0])[None]
    return TeacherForced(x, top, agrees[None], nll)


def test_classifier_learns_the_agreement_rule_and_calibration_meets_its_precision():
    fit, calib, test = _synthetic(seed=0), _synthetic(seed=1), _synthetic(seed=2)
    rule = fit_exit_classifier(fit)
    for precision in (0.8, 0.9, 0.97):
        tuned = calibrate(rule, calib, precision)
        report = exit_report(tuned, test)
        assert report["exit_agreement"] >= precision - 0.03  # held on other tokens, within sampling noise
        assert report["exit_share_loop1"] + report["exit_share_loop2"] == pytest.approx(1.0)
        assert report["nll_cost"] == pytest.approx(report["nll_with_exits"] - report["nll_last_loop"])
    strict, loose = calibrate(rule, calib, 0.97), calibrate(rule, calib, 0.8)
    assert exit_report(strict, test)["exit_share_loop1"] < exit_report(loose, test)["exit_share_loop1"]
    assert 0.4 < exit_report(loose, test)["exit_share_loop1"] <= 0.7  # the agreeing half, plus what 0.8 allows
    assert exit_report(loose, test)["oracle_mean_exit_loop"] == pytest.approx(2 - float(test.agrees.float().mean()))


def test_softmax_rule_exits_where_the_top_probability_reaches_its_threshold():
    data = _synthetic()
    loops = exit_loops(SoftmaxExit(0.7), data)
    assert torch.equal(loops == 1, data.top_prob[0] >= 0.7)


def test_teacher_forced_reads_every_loop_of_a_real_looped_model():
    model = MODELS["llama-looped"]  # 3 loops
    windows = torch.randint(3, 50, (3, 9), generator=torch.Generator().manual_seed(0))
    data = teacher_forced(model, windows, 3)
    assert data.normed.shape[:2] == (2, 3 * 8) and data.nll.shape == (3, 3 * 8)
    out = model(windows)
    last_nll = torch.nn.functional.cross_entropy(out[:, :-1].flatten(0, 1).float(), windows[:, 1:].flatten(),
                                                 reduction="none")
    torch.testing.assert_close(data.nll[-1], last_nll, rtol=1e-4, atol=1e-4)
    with pytest.raises(ConfigError, match="n_loops=4"):
        teacher_forced(model, windows, 4)


def test_a_classifier_that_always_exits_decodes_like_the_first_loop_alone():
    model = MODELS["gemma3-relaxed"]
    first_loop = copy.copy(model)
    first_loop.plan = ExecutionPlan(model.plan.steps[: len(model.blocks)])
    d = model.config.d_model
    always = ClassifierExit(torch.zeros(2, d), torch.full((2,), 20.0), threshold=0.5)
    reqs = requests(4, seed=7)
    result = make_engine(model, 2, 24, exit_rule=always).run(reqs)
    for req in reqs:
        comp = result.completions[req.id]
        assert set(comp.exit_loops[1:]) <= {1}
        follow = Request(req.id, req.prompt + comp.tokens[:1], req.max_new_tokens - 1)
        if follow.max_new_tokens:
            assert comp.tokens[1:] == greedy(first_loop, follow)
    never = ClassifierExit(torch.zeros(2, d), torch.full((2,), -20.0), threshold=0.5)
    engine = make_engine(model, 2, 24, exit_rule=never)
    result = engine.run(reqs)
    assert all(result.completions[r.id].tokens == greedy(model, r) for r in reqs)
    assert engine.program.seconds["exit_decision"] > 0 and engine.program.seconds["kv_fill"] == 0
    with pytest.raises(ConfigError, match="needs \\[2, "):
        make_engine(model, 2, 24, exit_rule=ClassifierExit(torch.zeros(1, d), torch.zeros(1)))
    with pytest.raises(ConfigError, match="not both"):
        make_engine(model, 2, 24, exit_threshold=0.5, exit_rule=never)


def test_memory_counts_shared_weights_once_and_kv_as_the_engine_allocates_it():
    source = tiny_model(6)
    looped = looping.convert(source, Looping(3, init="average"))
    assert memory.weight_bytes(looped) < memory.weight_bytes(source)
    for model in (source, looped, MODELS["llama-relaxed"]):
        rows = DepthRows(model, 1, 20, "loop")
        allocated = sum(t.numel() * t.element_size() for t in (rows.stores.k_store, rows.stores.v_store,
                                                                rows.stores.pos_store))
        assert memory.kv_bytes_per_sequence(model, 20) == allocated
    budget = memory.budget_for(source, 4, 20)
    assert memory.max_batch_under(budget, source, 20) == 4
    assert memory.max_batch_under(budget, looped, 20) > 4  # the freed weight bytes become sequences
    assert memory.max_batch_under(memory.weight_bytes(source) - 1, source, 20) == 0


def test_static_batching_delays_first_tokens_on_varied_lengths():
    model = MODELS["llama-plain"]
    reqs = requests(9, seed=8, max_new=(1, 14))
    cont = make_engine(model, 3, 32).run(reqs)
    static = make_engine(model, 3, 32, admission="static").run(reqs)
    assert all(c.first_token_s >= 0 and c.first_token_pass >= 0 for c in cont.completions.values())
    assert cont.passes < static.passes
    # in passes, not seconds: a wall-clock comparison of two 0.1 s runs flips with the host's load
    assert static.mean_passes_to_first_token > cont.mean_passes_to_first_token
    first_wave = [r.id for r in reqs[:3]]  # admitted before any pass, under either admission
    assert all(static.completions[i].first_token_pass == 0 == cont.completions[i].first_token_pass for i in first_wave)


def test_paragraph_requests_take_real_prompts_and_varied_reply_lengths():
    reqs = paragraph_requests("shakespeare", "smollm2-135m", n=24, prefix=16, decode=40)
    assert len(reqs) == 24 and all(len(r.prompt) == 16 for r in reqs)
    lengths = [r.max_new_tokens for r in reqs]
    assert max(lengths) <= 40 and len(set(lengths)) > 5
    summary = length_summary(reqs)
    assert summary["reply_p25"] <= summary["reply_median"] <= summary["reply_p75"] <= summary["reply_max"]
    assert reqs == paragraph_requests("shakespeare", "smollm2-135m", n=24, prefix=16, decode=40)  # seeded
    # each carries its paragraph's own tokens, the text App. K's oracle reads as if the model had generated it
    assert all(len(r.reference) == r.max_new_tokens for r in reqs)
    tok = data.load_tokenizer("smollm2-135m")
    corpus = "".join(doc.text for doc in corpora.documents_in("shakespeare", "test"))
    assert all(tok.decode(list(r.reference)).strip() in corpus for r in reqs[:6])
    assert distinct_2(reqs[0].reference) > 0.5  # real text, not a loop
    with pytest.raises(ConfigError, match="lower n or prefix"):
        paragraph_requests("shakespeare", "smollm2-135m", n=10 ** 6, prefix=16, decode=40)
