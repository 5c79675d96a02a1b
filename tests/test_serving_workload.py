"""rlib.serving.workload.normal_lengths: MoR App. D's generation lengths, drawn from a normal distribution with a given
mean (the paper's 256) and a spread the paper does not give."""

from __future__ import annotations

import numpy as np
import pytest

from rlib.config import ConfigError
from rlib.serving.workload import normal_lengths


def test_lengths_are_seeded_and_spread_about_their_mean():
    lengths = normal_lengths(4000, 256, 64.0, seed=3)
    assert lengths == normal_lengths(4000, 256, 64.0, seed=3) != normal_lengths(4000, 256, 64.0, seed=4)
    assert all(isinstance(x, int) for x in lengths)
    assert abs(np.mean(lengths) - 256) < 4 * 64 / np.sqrt(4000)  # the mean within 4 standard errors
    assert np.std(lengths) == pytest.approx(64, rel=0.05)


def test_clipping_keeps_every_length_in_range_and_the_mean():
    lengths = normal_lengths(2000, 8, 20.0, seed=0)  # a spread far wider than the range: many draws clip
    assert min(lengths) == 1 and max(lengths) == 15
    assert abs(np.mean(lengths) - 8) < 0.5  # the clip range is symmetric about the mean
    assert normal_lengths(5, 7, 0.0) == [7] * 5


@pytest.mark.parametrize("n, mean, sd", [(0, 8, 1.0), (4, 0, 1.0), (4, 8, -1.0), (4, 8, float("nan"))])
def test_bad_settings_name_the_value(n, mean, sd):
    with pytest.raises(ConfigError, match=f"n={n}, mean={mean}"):
        normal_lengths(n, mean, sd)
