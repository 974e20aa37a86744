"""Online spherical SGD at finite d for sequence single-index models (spec
sequence-single-index.md, sections 1 and 3), many seeds in parallel.

Normalisation ("code normalisation", stated once): token rows x_l ~ N(0, I_d / d), teacher
||w*||^2 = d, student rows ||w||^2 = d, positional rows P_l of unit Euclidean norm orthogonal to
w*, z* = X w* (so z* ~ N(0, I_L)), y = g(z*), loss l = ||y - f||^2 (no 1/2), one fresh sample
per step and

    w <- sqrt(d) (w - gamma grad_w l) / ||w - gamma grad_w l||            (untied: per row).

Order parameters: m = w . w* / d, e_l = P_l . w / sqrt(d).  With the frame (w*/sqrt(d),
orthonormal basis q_j of span(P)) the student's frame coordinates are c = (m, q_j . w / sqrt(d));
for the reference encoding P_1 = -P_2 = p the scalar e of the spec is c_1.  Time t = gamma nu / d
(nu = step count), the ODE time of ``theory.ssi.model``.  Weak recovery: nu_eta = first step
with ||c|| >= eta (= sqrt(m^2 + e^2) for the scalar e; |m| without encoding), or, for the untied
network, m_untied = ||W w* / d|| / sqrt(L) >= eta.  Default eta = 2 / sqrt(d).

Students (``model_spec``): the model objects of ``theory.ssi.model`` (``AttentionModel``,
``TiedNetwork``, ``UntiedNetwork``) or a :class:`SimSpec`.

* attention: z = (X + P / sqrt(d)) w, f = Pi[softmax_row(z z^T)], Pi = identity (matrix target,
  squared Frobenius loss), trace (f = trace_scale * Tr; ``trace_scale`` is explicit, default 1;
  the authors' code used 1/sqrt(L)) or projection (f = a^T S b).
* tied network: f = sigma(sum_l x_l . w / sqrt(L)).
* untied network: f = sigma(sum_l x_l . w_l / sqrt(L)), each row on its own sqrt(d)-sphere.

Two simulators with the same interface and result type :class:`SGDResult`:
:func:`simulate_sgd` (the full d-dimensional weights, numba) and
``theory.ssi.sgd.reduced.simulate_reduced`` (the exact d-independent chain of the frame
coordinates).  :func:`simulate_seeds` runs either over many seeds in processes.

Implementation note (exact, not an approximation): the target is evaluated outside the numba
kernel on a chunk of z* ~ N(0, I_L); the token row is then built as x_l = g_l / sqrt(d) with the
component of g_l along w*/sqrt(d) replaced by z*_l / sqrt(d).  This has exactly the law of a fresh
N(0, I/d) row with x_l . w* = z*_l, so any numpy-vectorised target works inside the kernel.
The d-dimensional Gaussian rows are drawn inside the numba kernel, seeded from ``seed``: for
d >= ``FAST_MIN_D`` (32) by the SIMD block generator of ``theory.ssi.sgd._blocknormal`` (64
xoshiro256** lanes + a 2048-layer ziggurat, exact N(0, 1); kernel ``full_chunk_fast``), below by
the scalar xoshiro256** + ziggurat of ``theory.gauss``; ``_FullState.kernel_rng = False`` feeds
numpy-drawn chunks instead.
Results are reproducible per seed (same seed -> same trajectory, in any process).
"""

from __future__ import annotations

import json
import math
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from theory._util import check_positive, to_jsonable
from theory.results import Result
from theory.rng import as_rng, seed_int, xoshiro_state
from theory.ssi.sgd import _blocknormal as BN
from theory.ssi.sgd import _kernels as K

__all__ = [
    "SimSpec",
    "SGDResult",
    "as_spec",
    "simulate_sgd",
    "simulate_seeds",
    "classify_minimum",
    "load_results",
]


# =========================================================================== model description


@dataclass(frozen=True)
class SimSpec:
    """Picklable description of a student + target for the simulators.

    kind: "attention" | "tied" | "untied".  target: ("expr", sympy expression in z1..zL) or
    ("ps", omega, a) (the positional-semantic matrix target of spec section 6, L = 2).
    pe: "none" | "opposite" | an L x L Gram matrix (tuple of tuples) of the encoding rows.
    reduction (attention): "identity" | "trace" | "projection" (f = proj_a^T S proj_b).
    activation (networks): a name of ``theory.ssi.sgd._kernels.ACTIVATIONS``.
    """

    kind: str
    L: int
    target: tuple
    pe: Any = "none"
    reduction: str = "identity"
    activation: str = "relu"
    trace_scale: float = 1.0
    proj_a: tuple | None = None
    proj_b: tuple | None = None

    # ------------------------------------------------------------------ derived quantities
    def head(self) -> tuple[int, np.ndarray, int]:
        """(head code, reduction matrix Rm (L, L), activation code)."""
        L = self.L
        if self.kind in ("tied", "untied"):
            act = str(self.activation).lower()
            if act not in K.ACTIVATIONS:
                raise ValueError(
                    f"activation {self.activation!r} is not available in the simulator; use one "
                    f"of {sorted(K.ACTIVATIONS)}"
                )
            return K.HEAD_NETWORK, np.zeros((L, L)), K.ACTIVATIONS[act]
        if self.kind != "attention":
            raise ValueError(f"kind must be attention, tied or untied, got {self.kind!r}")
        if self.reduction == "identity":
            if self.target[0] not in ("ps", "psA"):
                raise ValueError(
                    "the identity reduction needs a matrix target: use the "
                    "positional-semantic target (omega, a) or reduction='trace'"
                )
            return K.HEAD_MATRIX, np.zeros((L, L)), 0
        if self.target[0] in ("ps", "psA"):
            raise ValueError("the positional-semantic target is a matrix: use reduction='identity'")
        if self.reduction == "trace":
            return K.HEAD_FUNCTIONAL, float(self.trace_scale) * np.eye(L), 0
        if self.reduction == "projection":
            a = np.asarray(self.proj_a if self.proj_a is not None else np.eye(L)[0], float)
            b = np.asarray(self.proj_b if self.proj_b is not None else a, float)
            if a.shape != (L,) or b.shape != (L,):
                raise ValueError(f"projection vectors must have length L = {L}")
            return K.HEAD_FUNCTIONAL, np.outer(a, b), 0
        raise ValueError(f"reduction must be identity, trace or projection, got {self.reduction!r}")

    def pe_root(self) -> np.ndarray:
        """B (L, k) with B B^T = Gram matrix of the encoding (k = its rank; k = 0 without)."""
        L = self.L
        if (
            self.kind == "untied"
            or self.pe is None
            or (isinstance(self.pe, str) and self.pe == "none")
        ):
            return np.zeros((L, 0))
        if isinstance(self.pe, str):
            if self.pe != "opposite":
                raise ValueError(f"pe must be 'none', 'opposite' or a Gram matrix, got {self.pe!r}")
            if L != 2:
                raise ValueError("pe='opposite' (P_1 = -P_2) needs L = 2")
            return np.array([[1.0], [-1.0]])
        Gm = np.asarray(self.pe, dtype=float)
        if Gm.shape != (L, L) or not np.allclose(Gm, Gm.T) or not np.allclose(np.diag(Gm), 1.0):
            raise ValueError(
                "a Gram matrix of the encoding must be symmetric L x L with unit "
                "diagonal (rows of unit norm)"
            )
        lam, V = np.linalg.eigh(Gm)
        if lam.min() < -1e-9:
            raise ValueError("the encoding Gram matrix must be positive semi-definite")
        keep = lam > 1e-10 * max(lam.max(), 1.0)
        return V[:, keep] * np.sqrt(lam[keep])

    def n_rows(self) -> int:
        return self.L if self.kind == "untied" else 1

    def target_fn(self):
        """Vectorised target: zstar (N, L) -> Y (N, k_out)."""
        return _target_callable(self.target, self.L)

    def describe(self) -> dict:
        t = self.target
        tgt = (
            str(t[1])
            if t[0] == "expr"
            else ({"omega": t[1], "a": t[2]} if t[0] == "ps" else {"omega": t[1], "A": list(t[2])})
        )
        pe = self.pe if isinstance(self.pe, str) or self.pe is None else np.asarray(self.pe)
        return to_jsonable(
            dict(
                kind=self.kind,
                L=self.L,
                target=tgt,
                pe=pe,
                reduction=self.reduction,
                activation=self.activation,
                trace_scale=self.trace_scale,
            )
        )


_TARGET_CACHE: dict = {}


def _target_callable(target: tuple, L: int):
    key = (target, L)
    fn = _TARGET_CACHE.get(key)
    if fn is not None:
        return fn
    if target[0] == "ps":
        omega, a = float(target[1]), float(target[2])
        A = ps_matrix(a)

        def fn(zs):
            S = _softmax_rows(zs[:, :, None] * zs[:, None, :])
            return ((1.0 - omega) * S + omega * A).reshape(zs.shape[0], -1)
    elif target[0] == "psA":
        omega = float(target[1])
        A = np.asarray(target[2], dtype=float).reshape(L, L)

        def fn(zs):
            S = _softmax_rows(zs[:, :, None] * zs[:, None, :])
            return ((1.0 - omega) * S + omega * A).reshape(zs.shape[0], -1)
    elif target[0] == "expr":
        from theory.ssi.hermite import Target

        tg = Target(expr=target[1], L=L)

        def fn(zs):
            return tg.func(zs)[:, None]
    elif target[0] == "callable":
        f = target[1]

        def fn(zs):
            return np.asarray(f(zs), dtype=float).reshape(zs.shape[0], -1)
    else:
        raise ValueError(f"unknown target kind {target[0]!r}")
    _TARGET_CACHE[key] = fn
    return fn


def ps_matrix(a: float) -> np.ndarray:
    """A_a = softmax_row([[a^2, -a^2], [-a^2, a^2]])."""
    return _softmax_rows(np.array([[a * a, -a * a], [-a * a, a * a]]))


def _softmax_rows(A):
    A = np.asarray(A, dtype=float)
    E = np.exp(A - A.max(axis=-1, keepdims=True))
    return E / E.sum(axis=-1, keepdims=True)


def _target_tuple(target, L):
    """Normalise a target given as a hermite Target, a string/sympy expression or (omega, a)."""
    if hasattr(target, "omega") and hasattr(target, "a"):
        return ("ps", float(target.omega), float(target.a))
    if isinstance(target, tuple) and target and target[0] in ("ps", "psA", "expr", "callable"):
        return target
    from theory.ssi.hermite import parse_target

    t = parse_target(target, L)
    return ("expr", t.expr)


def as_spec(model) -> SimSpec:
    """Read a ``theory.ssi.model`` model object (or a SimSpec) into a :class:`SimSpec`."""
    if isinstance(model, SimSpec):
        return model
    kind = getattr(model, "kind", None)
    if kind not in ("attention", "tied", "untied"):
        raise ValueError(
            f"cannot simulate a {type(model).__name__}: pass an AttentionModel, "
            "TiedNetwork, UntiedNetwork or a SimSpec"
        )
    L = int(model.L)
    tg = model.target
    if hasattr(tg, "omega") and hasattr(tg, "A"):
        if getattr(tg, "a", None) is not None:
            target = ("ps", float(tg.omega), float(tg.a))
        else:
            target = ("psA", float(tg.omega), tuple(np.asarray(tg.A, float).ravel()))
    elif hasattr(tg, "expr"):
        target = ("expr", tg.expr)
    else:
        target = _target_tuple(tg, L)
    if kind == "attention":
        if getattr(model, "r", 0):
            pe = (
                model.pe
                if model.pe == "opposite"
                else tuple(map(tuple, np.asarray(model.G, dtype=float)))
            )
        else:
            pe = "none"
        red = model.reduction
        scale = 1.0 if getattr(model, "trace_norm", "sum") == "sum" else 1.0 / math.sqrt(L)
        proj = getattr(model, "proj", None)
        return SimSpec(
            kind=kind,
            L=L,
            target=target,
            pe=pe,
            reduction=red,
            trace_scale=scale,
            proj_a=None if proj is None else tuple(proj[0]),
            proj_b=None if proj is None else tuple(proj[1]),
        )
    return SimSpec(kind=kind, L=L, target=target, activation=str(model.activation))


# =========================================================================== result


@dataclass(frozen=True, kw_only=True)
class SGDResult(Result):
    """A finite-d SGD trajectory (same field names as the ODE result of ``theory.ssi.model``).

    t (n_rec,) ODE time gamma nu / d; steps (n_rec,) step counts nu; m (n_rec,) overlap (untied:
    m_untied = ||W w*/d|| / sqrt(L)); e: the encoding overlap in reduced coordinates c (e_l =
    sum_j B_lj c_j, B B^T = P P^T, as in ``theory.ssi.model``): (n_rec,) when the encoding has
    rank <= 1 (zeros without encoding), else (n_rec, rank); risk: mean sample loss
    over the steps since the previous record (a noisy risk estimate, NaN at step 0);
    steps_escape / t_escape: weak-recovery step / time (None if not reached); final_e, final_m:
    last values; minimum: "semantic" | "positional" | "other" (:func:`classify_minimum`).
    history: dict(m_rows (n_rec, L) for the untied network, c (n_rec, R, 1 + k) frame coords).
    """

    t: np.ndarray = field(default=None, repr=False)
    steps: np.ndarray = field(default=None, repr=False)
    e: np.ndarray = field(default=None, repr=False)
    m: np.ndarray = field(default=None, repr=False)
    risk: np.ndarray | None = field(default=None, repr=False)
    steps_escape: int | None = None
    t_escape: float | None = None
    final_e: Any = None
    final_m: float | None = None
    minimum: str = "other"
    seed: Any = None

    def row(self) -> dict:
        out = dict(self.params)
        out.update(
            status=self.status,
            steps_escape=self.steps_escape,
            t_escape=self.t_escape,
            final_e=self.final_e,
            final_m=self.final_m,
            minimum=self.minimum,
            seed=self.seed,
        )
        return to_jsonable(out)


def classify_minimum(e, m) -> str:
    """The ODE's rule (``theory.ssi.model.classify_minimum``): "semantic" within 15 degrees of
    the m axis with norm > 0.5, "positional" within 15 degrees of the e axis, else "other"."""
    en = float(np.linalg.norm(np.atleast_1d(np.asarray(e, dtype=float))))
    mm = abs(float(m))
    if not np.isfinite(en + mm) or math.hypot(en, mm) < 0.5:
        return "other"
    ang = math.degrees(math.atan2(en, mm))
    return "semantic" if ang < 15 else ("positional" if ang > 75 else "other")


# =========================================================================== the driver


def _record_grid(horizon: int, n_record: int) -> np.ndarray:
    horizon = max(int(horizon), 1)
    n = max(int(n_record), int(20 * math.log10(horizon + 1)) + 2)
    g = np.unique(np.round(np.geomspace(1, horizon, n)).astype(np.int64))
    return np.concatenate([[0], g])


def _validate(d, lr, eta, m0, start, n_rows_frame):
    d = int(d)
    if d < n_rows_frame + 2:
        raise ValueError(
            f"d = {d} is too small: need d >= {n_rows_frame + 2} (teacher, "
            "encoding directions and the student must fit)"
        )
    check_positive("lr", lr)
    if start not in ("random", "origin"):
        raise ValueError(f"start must be 'random' or 'origin', got {start!r}")
    eta = 2.0 / math.sqrt(d) if eta is None else check_positive("eta", eta)
    if m0 is not None and not (-1.0 <= float(m0) <= 1.0):
        raise ValueError(f"m0 must lie in [-1, 1], got {m0}")
    return d, float(lr), float(eta)


def _init_coords(spec, d, rng, m0, e0, start):
    """Initial frame coordinates C (R, 1 + k) and rest norms rr (R,)."""
    k = spec.pe_root().shape[1]
    R = spec.n_rows()
    C = np.zeros((R, 1 + k))
    if m0 is not None or e0 is not None:
        C[:, 0] = 0.0 if m0 is None else float(m0)
        if e0 is not None:
            e0 = np.atleast_1d(np.asarray(e0, dtype=float))
            if e0.shape != (k,):
                raise ValueError(f"e0 must have {k} component(s) (one per encoding direction)")
            C[:, 1:] = e0
    elif start == "random":
        for r in range(R):
            g = rng.standard_normal(1 + k)
            C[r] = g / math.sqrt(g @ g + rng.chisquare(d - 1 - k))
    rr2 = 1.0 - (C**2).sum(axis=1)
    if np.any(rr2 < -1e-12):
        raise ValueError("initial overlaps must satisfy m0^2 + ||e0||^2 <= 1")
    return C, np.sqrt(np.maximum(rr2, 0.0))


def _recovery_q(spec, C):
    if spec.kind == "untied":
        return float((C[:, 0] ** 2).mean())
    return float((C[0] ** 2).sum())


#: from this d on the full simulator draws its token rows with the SIMD block generator
#: (``theory.ssi.sgd._blocknormal``; rows padded to a multiple of 128 draws); below, with the
#: scalar generator of ``theory.gauss``.  Measured (attention, L = 2, per step): d = 16: 528 vs
#: 413 ns, d = 32: 517 vs 539 ns, d = 64: 518 vs 816 ns, d = 200: 759 vs 3980 ns.
FAST_MIN_D = 32


class _FullState:
    """Full d-dimensional weights + the frame (random teacher and encoding directions)."""

    kernel_rng = True  # token rows drawn inside numba (block xoshiro256** + ziggurat)

    def __init__(self, spec, d, rng, C0, rr0):
        self.spec, self.d = spec, d
        self.state = None
        self.fast = d >= FAST_MIN_D  # fixed for the trajectory (one generator stream)
        B = spec.pe_root()
        self.B = np.ascontiguousarray(B)
        k = B.shape[1]
        # random orthonormal frame: ustar, Qp (k), and per-row complements
        R = spec.n_rows()
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

    def _resync(self):
        sd = math.sqrt(self.d)
        self.W *= sd / np.linalg.norm(self.W, axis=1, keepdims=True)
        self.C[:, 0] = self.W @ self.ustar / sd
        if self.Qp.shape[0]:
            self.C[:, 1:] = self.W @ self.Qp.T / sd

    def run(self, n, rng, tfn, lr, head, Rm, act, eta2):
        L, d = self.spec.L, self.d
        zs = rng.standard_normal((n, L))
        Y = np.ascontiguousarray(tfn(zs))
        untied = self.spec.kind == "untied"
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
                    act,
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
                act,
                untied,
                eta2,
                self.C,
            )
        G = rng.standard_normal((n, L, d))
        return K.full_chunk(
            self.W, self.ustar, self.Qp, self.B, G, zs, Y, lr, head, Rm, act, untied, eta2, self.C
        )

    def chunk_max(self):
        if self.kernel_rng:
            return 1 << 14
        return max(1, (1 << 19) // (self.spec.L * self.d))

    def coords(self):
        return self.C.copy()


class _ReducedState:
    """The exact reduced chain (see ``theory.ssi.sgd.reduced``)."""

    def __init__(self, spec, d, rng, C0, rr0):
        self.spec, self.d = spec, d
        self.B = np.ascontiguousarray(spec.pe_root())
        self.C = C0.copy()
        self.rr = rr0.copy()
        k1 = self.C.shape[1]
        # chi-square degrees of freedom of the part orthogonal to (frame, current student row)
        self.dof = d - k1 - 1

    def run(self, n, rng, tfn, lr, head, Rm, act, eta2):
        L = self.spec.L
        k1 = self.C.shape[1]
        R = self.C.shape[0]
        alpha = rng.standard_normal((n, L, k1))
        beta = rng.standard_normal((n, L))
        chi = rng.chisquare(self.dof, (n, R))
        Y = np.ascontiguousarray(tfn(np.ascontiguousarray(alpha[:, :, 0])))
        return K.reduced_chunk(
            self.C,
            self.rr,
            self.B,
            alpha,
            beta,
            chi,
            Y,
            lr / self.d,
            head,
            Rm,
            act,
            self.spec.kind == "untied",
            eta2,
        )

    def chunk_max(self):
        return 1 << 14

    def coords(self):
        return self.C.copy()


def _run(
    model_spec,
    d,
    lr,
    seed,
    *,
    steps,
    m0,
    e0,
    start,
    eta,
    n_record,
    max_steps,
    margin,
    t_margin,
    backend,
) -> SGDResult:
    spec = as_spec(model_spec)
    k = spec.pe_root().shape[1]
    d, lr, eta = _validate(d, lr, eta, m0, start, 1 + k)
    head, Rm, act = spec.head()
    tfn = spec.target_fn()
    rng = as_rng(seed)
    C0, rr0 = _init_coords(spec, d, rng, m0, e0, start)
    state = (_FullState if backend == "full" else _ReducedState)(spec, d, rng, C0, rr0)
    if steps is not None:
        steps = int(steps)
        if steps < 0:
            raise ValueError("steps must be >= 0")
        horizon = end = steps
    else:
        horizon = end = int(max_steps)
    grid = _record_grid(horizon, n_record)
    eta2 = eta * eta
    rec_steps, rec_c, rec_loss = [0], [state.coords()], [np.nan]
    esc = 0 if _recovery_q(spec, C0) >= eta2 else None
    if esc is not None and steps is None:
        end = min(int(max_steps), int(math.ceil(t_margin * d / lr)))
    pos, gi, loss_acc, loss_n = 0, 1, 0.0, 0
    status = "ok"
    cmax = state.chunk_max()
    while pos < end:
        while gi < len(grid) and grid[gi] <= pos:
            gi += 1
        target = min(end, pos + cmax, int(grid[gi]) if gi < len(grid) else end)
        n = target - pos
        hit, ls = state.run(n, rng, tfn, lr, head, Rm, act, eta2 if esc is None else np.inf)
        loss_acc += ls
        loss_n += n
        if esc is None and hit >= 0:
            esc = pos + int(hit) + 1
            if steps is None:
                end = min(int(max_steps), esc + int(math.ceil(margin * esc + t_margin * d / lr)))
        pos = target
        C = state.coords()
        if not np.all(np.isfinite(C)):
            status = "nan"
            rec_steps.append(pos)
            rec_c.append(C)
            rec_loss.append(np.nan)
            break
        if (gi < len(grid) and pos == grid[gi]) or pos == end:
            rec_steps.append(pos)
            rec_c.append(C)
            rec_loss.append(loss_acc / max(loss_n, 1))
            loss_acc, loss_n = 0.0, 0
    if status != "nan":
        if steps is None:
            status = "converged" if esc is not None else "max_iter"
    c = np.array(rec_c)  # (n_rec, R, 1 + k)
    st = np.array(rec_steps, dtype=np.int64)
    if spec.kind == "untied":
        m_rows = c[:, :, 0]
        m = np.sqrt((m_rows**2).mean(axis=1))
        e = np.zeros(len(st))
    else:
        m_rows = None
        m = c[:, 0, 0]
        if k == 0:
            e = np.zeros(len(st))
        elif k == 1:
            e = c[:, 0, 1]
        else:
            e = c[:, 0, 1:]
    final_e = e[-1] if np.ndim(e[-1]) == 0 else np.asarray(e[-1])
    final_e_frame = c[-1, 0, 1:] if spec.kind != "untied" else np.zeros(0)
    minimum = classify_minimum(final_e_frame, m[-1])
    msg = {
        "ok": f"ran {int(st[-1])} steps",
        "converged": f"weak recovery at step {esc}; ran {int(st[-1])} steps",
        "max_iter": f"no weak recovery (eta = {eta:.3g}) within max_steps = {max_steps}",
        "nan": "the trajectory produced NaN (learning rate too large?)",
    }[status]
    params = dict(
        d=d,
        lr=lr,
        eta=eta,
        start=start,
        m0=m0,
        backend=backend,
        model=spec.describe(),
        steps=steps,
        max_steps=int(max_steps),
    )
    return SGDResult(
        status=status,
        message=msg,
        params=params,
        metadata=dict(method=f"online spherical SGD ({backend})"),
        history=dict(c=c, m_rows=m_rows),
        t=st * lr / d,
        steps=st,
        e=e,
        m=m,
        risk=np.array(rec_loss),
        steps_escape=esc,
        t_escape=None if esc is None else esc * lr / d,
        final_e=final_e if np.ndim(final_e) == 0 else final_e.tolist(),
        final_m=float(m[-1]),
        minimum=minimum,
        seed=_seed_repr(seed),
    )


def _seed_repr(seed):
    return int(seed) if isinstance(seed, (int, np.integer)) else None


_DOC_COMMON = """
    model_spec: an ``AttentionModel`` / ``TiedNetwork`` / ``UntiedNetwork`` of
    ``theory.ssi.model`` or a :class:`SimSpec`.  d: dimension; lr: gamma; seed: int or Generator.
    steps: number of SGD steps; None runs until weak recovery, then ``margin * nu_eta +
    t_margin * d / lr`` more steps (or ``max_steps``).  m0, e0: initial overlaps (the rest of the
    student is a uniformly random direction orthogonal to the frame); otherwise ``start`` =
    "random" (uniform on the sphere) or "origin" (w orthogonal to w* and to P).  eta: weak
    recovery threshold (default 2 / sqrt(d)).  n_record: log-spaced record points (at least 20
    per decade).  Returns an :class:`SGDResult`.
"""


def simulate_sgd(
    model_spec,
    d,
    lr,
    seed,
    *,
    steps=None,
    m0=None,
    e0=None,
    start="random",
    eta=None,
    n_record=200,
    max_steps=10**8,
    margin=1.0,
    t_margin=10.0,
) -> SGDResult:
    return _run(
        model_spec,
        d,
        lr,
        seed,
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
    "Online spherical SGD with the full d-dimensional weights (numba, cost "
    "O(L d) per step).\n" + _DOC_COMMON
)


# =========================================================================== many seeds


def _job(args):
    spec, d, lr, seed, reduced, kw = args
    if reduced:
        from theory.ssi.sgd.reduced import simulate_reduced as f
    else:
        f = simulate_sgd
    return seed, f(spec, d, lr, seed, **kw)


def _result_from_dict(dct) -> SGDResult:
    dct = dict(dct)
    for key in ("t", "steps", "e", "m", "risk"):
        if dct.get(key) is not None:
            dct[key] = np.array(
                [np.nan if v is None else v for v in dct[key]]
                if np.ndim(dct[key]) == 1
                else dct[key],
                dtype=float,
            )
    if dct.get("steps") is not None:
        dct["steps"] = dct["steps"].astype(np.int64)
    dct.pop("history", None)
    return SGDResult(**dct)


def load_results(path) -> dict:
    """Read a JSON-lines file written by :func:`simulate_seeds` -> {seed: SGDResult}."""
    out = {}
    p = Path(path)
    if not p.exists():
        return out
    for line in p.read_text().splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            dct = json.loads(line)
        except json.JSONDecodeError:  # a torn last line after a kill: ignore it
            continue
        out[dct["seed"]] = _result_from_dict(dct)
    return out


def simulate_seeds(
    model_spec, d, lr, seeds, *, reduced=False, workers=None, progress=True, out=None, **kwargs
) -> list[SGDResult]:
    """Run :func:`simulate_sgd` (or the reduced chain with ``reduced=True``) for every seed.

    seeds: iterable of ints.  workers: processes (None -> number of CPUs, capped by the number
    of seeds; 0 or 1 -> in this process).  progress: tqdm bar.  out: JSON-lines file; each
    finished seed is appended (and fsync'd) at once, seeds already in the file are not re-run,
    so an interrupted run loses nothing.  Other keyword arguments go to the simulator.  Returns
    the results in the order of ``seeds``.
    """
    from tqdm.auto import tqdm

    spec = as_spec(model_spec)
    seeds = [int(s) for s in seeds]
    done = load_results(out) if out is not None else {}
    todo = [s for s in seeds if s not in done]
    results = dict(done)
    if workers is None:
        workers = min(len(todo), os.cpu_count() or 1)
    bar = tqdm(
        total=len(seeds),
        initial=len(seeds) - len(todo),
        disable=not progress,
        desc=f"SGD seeds (d={d})",
        leave=False,
    )

    def _store(seed, res):
        results[seed] = res
        if out is not None:
            line = json.dumps(to_jsonable(res.to_dict()), allow_nan=False)
            Path(out).parent.mkdir(parents=True, exist_ok=True)
            with open(out, "a") as fh:
                fh.write(line + "\n")
                fh.flush()
                os.fsync(fh.fileno())
        bar.update(1)

    try:
        if workers <= 1 or len(todo) <= 1:
            for s in todo:
                _store(*_job((spec, d, lr, s, reduced, kwargs)))
        else:
            with ProcessPoolExecutor(max_workers=workers) as ex:
                futs = [ex.submit(_job, (spec, d, lr, s, reduced, kwargs)) for s in todo]
                for f in as_completed(futs):
                    _store(*f.result())
    finally:
        bar.close()
    return [results[s] for s in seeds]


def seeds_from(rng, n: int) -> list[int]:
    """n independent integer seeds drawn from ``rng``."""
    g = as_rng(rng)
    return [seed_int(g) for _ in range(int(n))]
