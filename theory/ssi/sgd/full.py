"""Online spherical SGD with the full d-dimensional weights (numba; cost O(L d) per step).

Implementation note (exact, not an approximation): the target is evaluated outside the numba
kernel on a chunk of z* ~ N(0, I_L); the token row is then built as x_l = g_l / sqrt(d) with the
component of g_l along w*/sqrt(d) replaced by z*_l / sqrt(d).  This has exactly the law of a
fresh N(0, I/d) row with x_l . w* = z*_l, so any numpy-vectorised target works inside the kernel.
The d-dimensional Gaussian rows are drawn inside the numba kernel, seeded from the run's
generator: for d >= :data:`FAST_MIN_D` by the SIMD block generator of
``theory.ssi.sgd._blocknormal`` (64 xoshiro256** lanes + a 2048-layer ziggurat, exact N(0, 1);
kernel ``full_chunk_fast``), below by the scalar xoshiro256** + ziggurat of ``theory.rng``;
``_FullState.kernel_rng = False`` feeds numpy-drawn chunks instead.  Results are reproducible per
seed (same seed -> same trajectory, in any process).
"""

from __future__ import annotations

import math

import numpy as np

from theory.rng import seed_int, xoshiro_state
from theory.ssi.risk import SSIModel
from theory.ssi.sgd import _blocknormal as BN
from theory.ssi.sgd import _kernels as K
from theory.ssi.sgd.driver import DOC_COMMON, SGDResult, is_flat, run

__all__ = ["simulate_sgd", "FAST_MIN_D"]

#: from this d on the full simulator draws its token rows with the SIMD block generator
#: (``theory.ssi.sgd._blocknormal``; rows padded to a multiple of 128 draws); below, with the
#: scalar generator of ``theory.rng`` (per-step cost measured in BENCHMARKS.md, "SGD simulation").
FAST_MIN_D = 32
_EPS = 2.0**-20  # scale of the extra frame direction of an injected encoding (see _FullState)


class _FullState:
    """Full d-dimensional weights + the frame (random teacher and encoding directions)."""

    kernel_rng = True  # token rows drawn inside numba (block xoshiro256** + ziggurat)

    def __init__(self, model, d, rng, C0, rr0):
        self.model, self.d = model, d
        self.untied = model.untied
        self.state = None
        self.fast = d >= FAST_MIN_D  # fixed for the trajectory (one generator stream)
        B = model.B
        self.B = np.ascontiguousarray(B)
        k = B.shape[1]
        # random orthonormal frame: ustar, Qp (k), and per-row complements
        R = model.n_rows
        M = np.linalg.qr(rng.standard_normal((d, 1 + k + R)))[0]
        self.ustar = np.ascontiguousarray(M[:, 0])
        self.Qp = np.ascontiguousarray(M[:, 1 : 1 + k].T)
        W = np.empty((R, d))
        for r in range(R):
            v = rng.standard_normal(d)
            v -= M[:, : 1 + k] @ (M[:, : 1 + k].T @ v)
            v /= np.linalg.norm(v)
            W[r] = math.sqrt(d) * (C0[r, 0] * self.ustar + C0[r, 1:] @ self.Qp + rr0[r] * v)
        self.W = W
        self.C = C0.copy()
        self._resync()
        if np.any(model.a_pe):
            # injected encoding P_l = a_l w*/sqrt(d) + P~_l (docs/ssi.md section 4b): the kernels
            # see one more encoding direction EPS u* with coefficients a_l / EPS, so that
            # P_l . w / sqrt(d) gains a_l m and the gradient gains a_l u* / sqrt(d) exactly
            # (EPS a power of two: both scalings are exact); its frame coordinate EPS m adds
            # EPS^2 m^2 (~1e-12 m^2) to the recovery norm.  coords() drops it.
            self.Qp = np.ascontiguousarray(np.vstack([self.Qp, _EPS * self.ustar]))
            self.B = np.ascontiguousarray(np.hstack([self.B, model.a_pe[:, None] / _EPS]))
            self.C = np.hstack([self.C, _EPS * self.C[:, :1]])

    def _resync(self):
        sd = math.sqrt(self.d)
        self.W *= sd / np.linalg.norm(self.W, axis=1, keepdims=True)
        self.C[:, 0] = self.W @ self.ustar / sd
        if self.Qp.shape[0]:
            self.C[:, 1:] = self.W @ self.Qp.T / sd

    def run(self, n, rng, tfn, lr, head, Rm, act, eta2):
        L, d = self.model.L, self.d
        zs = rng.standard_normal((n, L))
        Y = np.ascontiguousarray(tfn(zs))
        untied = self.untied
        if self.kernel_rng:
            if self.fast:
                # SIMD block generator + fused passes (rows padded to 128 draws)
                if self.state is None:
                    self.state = BN.seed_block_state(seed_int(rng))
                S, s = self.state
                return K.full_chunk_fast(
                    self.W,
                    self.ustar,
                    self.Qp,
                    self.B,
                    S,
                    s,
                    zs,
                    Y,
                    lr,
                    head,
                    Rm,
                    *act,
                    untied,
                    eta2,
                    self.C,
                )
            # small d: the padding would dominate; scalar xoshiro256** + ziggurat per draw
            if self.state is None:
                self.state = xoshiro_state(seed_int(rng))
            return K.full_chunk_rng(
                self.W,
                self.ustar,
                self.Qp,
                self.B,
                self.state,
                zs,
                Y,
                lr,
                head,
                Rm,
                *act,
                untied,
                eta2,
                self.C,
            )
        G = rng.standard_normal((n, L, d))
        return K.full_chunk(
            self.W, self.ustar, self.Qp, self.B, G, zs, Y, lr, head, Rm, *act, untied, eta2, self.C
        )

    def chunk_max(self):
        if self.kernel_rng:
            return 1 << 14
        return max(1, (1 << 19) // (self.model.L * self.d))

    def coords(self):
        return self.C[:, : 1 + self.model.r].copy()


def simulate_sgd(
    model: SSIModel,
    d: int,
    lr: float,
    rng: int | np.random.Generator,
    *,
    steps: int | None = None,
    m0: float | None = None,
    e0: float | np.ndarray | None = None,
    start: str = "random",
    eta: float | None = None,
    n_record: int = 200,
    max_steps: int = 10**8,
    margin: float = 1.0,
    t_margin: float = 10.0,
) -> SGDResult:
    if is_flat(model):
        raise ValueError(
            "the flattened untied network is simulated by the exact reduced chain only: use "
            "simulate_reduced (or simulate_seeds(..., reduced=True))"
        )
    return run(
        model,
        d,
        lr,
        rng,
        _FullState,
        steps=steps,
        m0=m0,
        e0=e0,
        start=start,
        eta=eta,
        n_record=n_record,
        max_steps=max_steps,
        margin=margin,
        t_margin=t_margin,
        backend="full",
    )


simulate_sgd.__doc__ = (
    "Online spherical SGD with the full d-dimensional weights (numba, cost O(L d) per step; "
    "docs/ssi.md eq. 16).\n" + DOC_COMMON
)
