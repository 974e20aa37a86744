"""Small statistics of the SGD figures: binomial intervals for a fraction of runs, a logistic fit
of a fraction against a control parameter, and the quantile bands of a set of trajectories.

* :func:`wilson_interval` - the Wilson score interval of k successes in n trials (never outside
  [0, 1], never of zero width at k = 0 or n, unlike the normal-approximation standard error);
* :func:`logistic_fit` - maximum-likelihood fit of p(x) = 1 / (1 + exp(-(x - x0) / s)) to counts
  k_i of n_i at x_i, with standard errors from the Fisher information;
* :func:`quantile_band` - pointwise quantiles of trajectories sampled on a common grid.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special, stats

__all__ = ["wilson_interval", "logistic_fit", "quantile_band"]


def wilson_interval(k, n, conf: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval (lo, hi) of the success probability for k successes in n trials
    (arrays broadcast), at confidence ``conf``:

        (k + z^2/2 +- z sqrt(k (n - k) / n + z^2 / 4)) / (n + z^2),   z = Phi^{-1}((1 + conf)/2).
    """
    if not 0 < conf < 1:
        raise ValueError(f"conf must lie in (0, 1), got {conf}")
    k = np.asarray(k, float)
    n = np.asarray(n, float)
    if np.any(n <= 0) or np.any(k < 0) or np.any(k > n):
        raise ValueError("need 0 <= k <= n and n > 0")
    z = stats.norm.ppf(0.5 + conf / 2)
    centre = k + z * z / 2
    half = z * np.sqrt(k * (n - k) / n + z * z / 4)
    return (centre - half) / (n + z * z), (centre + half) / (n + z * z)


def logistic_fit(x, k, n) -> dict:
    """Maximum-likelihood fit of k_i ~ Binomial(n_i, p(x_i)), p(x) = 1 / (1 + exp(-(x - x0)/s)).

    Returns dict(x0, s, x0_err, s_err, ok): the standard errors from the inverse Fisher
    information at the optimum; ``ok`` False (values NaN) when the data do not pin a
    crossing (all points on one side, or fewer than 2 points strictly inside (0, 1) and no
    change of side)."""
    x, k, n = (np.asarray(a, float) for a in (x, k, n))
    if not (x.shape == k.shape == n.shape) or x.ndim != 1:
        raise ValueError("x, k, n must be 1-D arrays of the same length")
    nan = dict(x0=math.nan, s=math.nan, x0_err=math.nan, s_err=math.nan, ok=False)
    f = k / n
    if np.all(f <= 0.5) or np.all(f >= 0.5):
        return nan
    span = float(x.max() - x.min())

    def nll(th):
        x0, ls = th
        u = (x - x0) / math.exp(ls)
        # log p = -log(1 + e^-u), log(1 - p) = -log(1 + e^u)
        return float(np.sum(k * np.logaddexp(0, -u) + (n - k) * np.logaddexp(0, u)))

    i = int(np.argmin(np.abs(f - 0.5)))
    res = optimize.minimize(
        nll,
        [x[i], math.log(span / 10)],
        method="Nelder-Mead",
        options=dict(xatol=1e-10, fatol=1e-12),
    )
    x0, ls = res.x
    s = math.exp(ls)
    # Fisher information in (x0, s): sum_i n_i p_i (1 - p_i) grad u_i grad u_i^T
    u = (x - x0) / s
    p = special.expit(u)
    w = n * p * (1 - p)
    du = np.stack([-np.ones_like(u) / s, -u / s])  # d u / d(x0, s)
    info = (du * w) @ du.T  # Fisher information (expected), 2 x 2
    try:
        cov = np.linalg.inv(info)
    except np.linalg.LinAlgError:
        return nan
    if not res.success or not np.all(np.isfinite(cov)) or s > 10 * span:
        return nan
    return dict(
        x0=float(x0),
        s=float(s),
        x0_err=float(math.sqrt(cov[0, 0])),
        s_err=float(math.sqrt(cov[1, 1])),
        ok=True,
    )


def quantile_band(rows, qs=(0.1, 0.5, 0.9)) -> np.ndarray:
    """Pointwise quantiles (len(qs), T) of trajectories ``rows`` (n, T) on a common grid
    (NaN entries ignored)."""
    A = np.asarray(rows, float)
    if A.ndim != 2:
        raise ValueError("rows must be a 2-D array (runs x grid points)")
    return np.nanquantile(A, list(qs), axis=0)
