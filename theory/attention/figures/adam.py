"""Adam on the attention model's empirical risk: the authors' second optimiser (their
src/empirics_mixed_teacher_softmax.py: torch Adam, lr 0.01, 2500 full-batch steps, weight
decay lam, from the random init 0.1 N(0, I_d)).

The risk and its gradient are the model's (:func:`theory.attention.finite_d.problem.risk`,
ridge included, as torch's weight decay adds lam Q to the gradient); the reported fields are
those of every finite-d run (:func:`~theory.attention.finite_d.problem.evaluate`).
"""

from __future__ import annotations

import numpy as np

from theory.attention.finite_d.problem import evaluate, initial_weights, risk


def adam(Q0, data, lam, *, lr=0.01, steps=2500, beta1=0.9, beta2=0.999, eps=1e-8):
    """``steps`` Adam steps (Kingma & Ba, with bias correction, torch's defaults) on L(Q)."""
    Q = np.array(Q0, dtype=float)
    m, v = np.zeros_like(Q), np.zeros_like(Q)
    for t in range(1, int(steps) + 1):
        _, g = risk(Q, data, lam)
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        Q -= lr * (m / (1 - beta1**t)) / (np.sqrt(v / (1 - beta2**t)) + eps)
    return Q


def simulate_adam(problem, *, init="random", lr=0.01, steps=2500) -> dict:
    """One Adam run on ``problem`` from ``init``: the fields of
    :func:`~theory.attention.finite_d.problem.evaluate` and ``method="adam"``."""
    Q0 = initial_weights(init, problem.teacher, problem.seed)
    Q = adam(Q0, problem.train, problem.params.lam, lr=lr, steps=steps)
    return dict(evaluate(Q, problem, init=init), method="adam", status="finished", steps=steps)
