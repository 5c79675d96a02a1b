"""rlib.rounds: the median of paired rounds and its order-statistic interval."""

from __future__ import annotations

import random
from math import comb

import pytest

from rlib.rounds import DECIDING_ROUNDS, coverage, decides, median_interval, too_few


def test_nine_rounds_drop_one_round_at_each_end():
    ratios = [1.51, 1.14, 1.30, 1.27, 1.22, 1.25, 1.33, 1.29, 1.21]
    median, lo, hi = median_interval(ratios)
    assert (median, lo, hi) == (1.27, 1.21, 1.33)  # 2nd smallest and 2nd largest of 9: 96.1 %
    assert coverage(9) == pytest.approx(1 - 2 * (1 + 9) / 2**9)


def test_few_rounds_fall_back_to_the_extremes_and_say_how_sure_that_is():
    assert median_interval([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0)
    assert coverage(5) == pytest.approx(1 - 2 / 2**5) and coverage(4) == pytest.approx(0.875)


@pytest.mark.parametrize("n", [6, 9, 15, 20, 40])
def test_the_interval_is_the_widest_rank_that_keeps_the_confidence(n):
    assert coverage(n) >= 0.95
    k = next(k for k in range(1, n + 1) if 1 - 2 * sum(comb(n, i) for i in range(k)) / 2**n < 0.95)  # one too far
    values = list(range(n))
    _, lo, hi = median_interval(values)
    assert (lo, hi) == (values[k - 2], values[n - k + 1])


def test_coverage_is_what_the_interval_achieves_on_noise():
    rng = random.Random(0)
    n, trials = 9, 4000
    hits = 0
    for _ in range(trials):
        _, lo, hi = median_interval([rng.lognormvariate(0.0, 0.3) for _ in range(n)])  # true median 1.0
        hits += lo <= 1.0 <= hi
    assert abs(hits / trials - coverage(n)) < 0.015


@pytest.mark.parametrize("kwargs", [dict(values=[]), dict(values=[1.0], confidence=1.0),
                                    dict(values=[1.0], confidence=0.0)])
def test_bad_input_is_refused(kwargs):
    with pytest.raises(ValueError):
        median_interval(**kwargs)


def test_rounds_decide_from_five():
    assert [decides(n) for n in range(1, 8)] == [False] * 4 + [True] * 3
    assert coverage(DECIDING_ROUNDS) >= 0.9 > coverage(DECIDING_ROUNDS - 1)
    assert too_few(3) == ("3 round(s) hold the median with 75.0% only: the rounds decide from 5 (93.8%); needs more "
                          "rounds")
