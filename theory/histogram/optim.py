"""Optimisers of the histogram model; each updates the flat parameter vector in place."""

from __future__ import annotations

import numpy as np


class Adam:
    """Adam with bias correction (PyTorch convention): lr 1e-3, betas (0.9, 0.98), eps 1e-9."""

    def __init__(self, n, lr=1e-3, betas=(0.9, 0.98), eps=1e-9, dtype=np.float32):
        self.lr, self.b1, self.b2, self.eps = float(lr), float(betas[0]), float(betas[1]), eps
        self.m = np.zeros(n, dtype=dtype)
        self.v = np.zeros(n, dtype=dtype)
        self.t = 0
        self._tmp = np.zeros(n, dtype=dtype)

    def step(self, theta, grad):
        self.t += 1
        m, v, tmp = self.m, self.v, self._tmp
        m *= self.b1
        m += (1 - self.b1) * grad
        v *= self.b2
        np.multiply(grad, grad, out=tmp)
        tmp *= 1 - self.b2
        v += tmp
        c1 = 1 - self.b1**self.t
        c2 = 1 - self.b2**self.t
        # theta -= lr * (m / c1) / (sqrt(v / c2) + eps)
        np.sqrt(v, out=tmp)
        tmp *= 1 / np.sqrt(c2)
        tmp += self.eps
        np.divide(m, tmp, out=tmp)
        tmp *= self.lr / c1
        theta -= tmp

    def state(self) -> dict:
        return dict(m=self.m, v=self.v, t=np.int64(self.t))

    def load(self, state):
        self.m[:] = state["m"]
        self.v[:] = state["v"]
        self.t = int(state["t"])


class SGD:
    """Plain SGD: theta -= lr * grad."""

    def __init__(self, n, lr=1e-3, dtype=np.float32):
        self.lr = float(lr)
        self.t = 0

    def step(self, theta, grad):
        self.t += 1
        theta -= self.lr * grad

    def state(self) -> dict:
        return dict(t=np.int64(self.t))

    def load(self, state):
        self.t = int(state["t"])
