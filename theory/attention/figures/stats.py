"""Small statistics of the ERM figures: the spread of finite-d runs and its scaling with d."""

from __future__ import annotations

import numpy as np


def spread(values) -> tuple[float, float]:
    """Sample standard deviation of ``values`` (ddof 1) and its standard error
    ``s / sqrt(2 (n - 1))`` (exact to leading order for Gaussian samples)."""
    v = np.asarray(values, float)
    if v.size < 2:
        raise ValueError(f"a spread needs at least 2 values, got {v.size}")
    s = float(v.std(ddof=1))
    return s, s / np.sqrt(2.0 * (v.size - 1))


def power_law_fit(x, y, y_err=None) -> dict:
    """Fit ``y = c x^b`` by weighted least squares of ``log y`` on ``log x`` (weights
    ``(y / y_err)^2``, the inverse variance of ``log y``; uniform without ``y_err``).

    Returns ``b``, ``b_err``, ``c`` and ``chi2_dof`` (``b_err`` is the fit's standard error,
    scaled by sqrt(chi2/dof) when that exceeds 1)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if x.size < 3 or np.any(x <= 0) or np.any(y <= 0):
        raise ValueError("power_law_fit needs >= 3 points with x > 0 and y > 0")
    w = np.ones_like(y) if y_err is None else (y / np.asarray(y_err, float)) ** 2
    X = np.column_stack([np.ones_like(x), np.log(x)])
    WX = X * w[:, None]
    cov = np.linalg.inv(X.T @ WX)
    coef = cov @ (WX.T @ np.log(y))
    res = np.log(y) - X @ coef
    chi2_dof = float((w * res**2).sum() / (x.size - 2))
    scale = max(chi2_dof, 1.0) if y_err is not None else chi2_dof
    return dict(
        b=float(coef[1]),
        b_err=float(np.sqrt(cov[1, 1] * scale)),
        c=float(np.exp(coef[0])),
        chi2_dof=chi2_dof,
    )
