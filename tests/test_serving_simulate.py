"""rlib.serving.simulate: the paper's throughput model (App. K) against its own tables and against the simulator."""

from __future__ import annotations

import numpy as np
import pytest

from rlib.serving import simulate


def test_closed_form_reproduces_the_papers_csb_throughputs_on_slimpajama():
    check = simulate.paper_check()
    csb = check[(check.batching == "csb") & (check.dataset == "SlimPajama")]
    assert len(csb) == 3
    assert (csb.relative_error.abs() < 0.002).all(), csb  # 1623 vs 1622, 1227 vs 1227, 829 vs 829


def test_implied_mean_exit_loops_are_valid_and_match_the_inventory():
    check = simulate.paper_check()
    cdb = check[check.batching == "cdb"]
    assert (cdb.implied_mean_exit_loop >= 1).all()
    assert (cdb.implied_mean_exit_loop <= cdb.blocks).all()
    gemma = cdb[(cdb.family == "Gemma") & (cdb.blocks == 2) & (cdb["rank"] == 0) & (cdb.dataset == "SlimPajama")]
    assert gemma.implied_mean_exit_loop.iloc[0] == pytest.approx(1.19, abs=0.01)  # 3774 / 3159


def _requests(n, length, n_loops, p_first, seed=0):
    rng = np.random.default_rng(seed)
    return [list(np.where(rng.random(length) < p_first, 1, n_loops)) for _ in range(n)]


def test_simulated_cdb_with_full_slots_equals_the_closed_form():
    reqs = _requests(400, 200, 2, p_first=0.8)
    mean_loops = float(np.mean([j for r in reqs for j in r]))
    ms = 0.265e-3
    res = simulate.simulate(reqs, 43, lambda b: ms * b, "cdb", n_loops=2)
    assert res.tokens == 400 * 200
    assert res.tokens_per_s == pytest.approx(simulate.closed_form(ms * 1e3, mean_loops), rel=0.01)


def test_schedulers_order_and_degenerate_cases():
    rng = np.random.default_rng(1)
    reqs = [[2] * int(n) for n in rng.integers(10, 300, size=200)]  # varied lengths, no early exit
    step = lambda b: 1e-3  # noqa: E731  one full step costs the same at any batch
    static = simulate.simulate(reqs, 16, step, "static")
    csb = simulate.simulate(reqs, 16, step, "csb")
    cdb = simulate.simulate(reqs, 16, lambda b: 0.5e-3, "cdb", n_loops=2)  # block = half the model
    assert static.tokens == csb.tokens == cdb.tokens
    assert static.tokens_per_s < csb.tokens_per_s
    assert cdb.tokens_per_s == pytest.approx(csb.tokens_per_s, rel=1e-9)  # no exits: the same work, finer grain
    early = simulate.simulate([[1] * len(r) for r in reqs], 16, lambda b: 0.5e-3, "cdb", n_loops=2)
    assert early.tokens_per_s == pytest.approx(2 * csb.tokens_per_s, rel=1e-9)


def test_bad_inputs():
    with pytest.raises(ValueError, match="scheduler='orca'"):
        simulate.simulate([[1]], 4, lambda b: 1.0, "orca")
    with pytest.raises(ValueError, match="exit loops must lie in 1..n_loops=2"):
        simulate.simulate([[3]], 4, lambda b: 1.0, "cdb", n_loops=2)
    timing = simulate.per_batch_timing([1, 8, 4], [1.0, 2.0, 1.5])
    assert (timing(1), timing(6), timing(100)) == (1.0, 1.75, 2.0)
