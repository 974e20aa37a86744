"""The statistics helpers of the SGD figures against independent computations."""

import numpy as np
import pytest
from scipy.stats import binomtest

from theory.ssi.figures.stats import logistic_fit, quantile_band, wilson_interval


@pytest.mark.parametrize("k,n", [(0, 10), (3, 10), (10, 10), (31, 64), (1, 64), (64, 64)])
def test_wilson_interval_matches_scipy(k, n):
    lo, hi = wilson_interval(k, n)
    ci = binomtest(k, n).proportion_ci(0.95, "wilson")
    # the same closed form evaluated two ways: agreement to rounding
    assert lo == pytest.approx(ci.low, abs=1e-12)
    assert hi == pytest.approx(ci.high, abs=1e-12)


def test_wilson_interval_rejects_bad_counts():
    with pytest.raises(ValueError, match="0 <= k <= n"):
        wilson_interval(5, 4)


def test_logistic_fit_recovers_the_crossing_within_its_error():
    rng = np.random.default_rng(12)
    x = np.linspace(0.4, 0.9, 21)
    x0, s, n = 0.64, 0.03, 64
    k = rng.binomial(n, 1 / (1 + np.exp(-(x - x0) / s)))
    fit = logistic_fit(x, k, np.full(len(x), n))
    assert fit["ok"]
    # a Fisher standard error: the truth lies within 3 of them (fails with probability < 0.3 %)
    assert abs(fit["x0"] - x0) < 3 * fit["x0_err"]
    assert abs(fit["s"] - s) < 3 * fit["s_err"]
    # and the error itself is of the size binomial noise gives: ~ s / sqrt(n * points in ramp)
    assert 1e-3 < fit["x0_err"] < 2e-2


def test_logistic_fit_without_a_crossing_says_so():
    fit = logistic_fit([0.1, 0.2, 0.3], [0, 1, 2], [10, 10, 10])
    assert not fit["ok"] and np.isnan(fit["x0"])


def test_quantile_band_is_numpy_quantile_per_column():
    rows = np.arange(20.0).reshape(5, 4)
    band = quantile_band(rows, (0.0, 0.5, 1.0))
    assert np.array_equal(band[0], rows[0]) and np.array_equal(band[2], rows[-1])
    assert np.array_equal(band[1], rows[2])
