r"""Tied vs untied gain nu_untied / nu_tied as a function of the sequence length L (spec section 5):
the spec's Hermite prediction, the prediction of the package's own ODE (closed form and numerical
minimisation over the step size), and the finite-d SGD measurement.

Targets may depend on L: pass a family name, a callable ``L -> expression``, or one expression
(then every L must contain its variables).  Families:

* ``"sum_he2"``: sum_l He_2(z_l) / sqrt(2)   (the paper's SIE-2 example, spec section 7)
* ``"sum_z"``:   sum_l z_l / sqrt(L)          (SIE 1)
* ``"sum_he3"``: sum_l He_3(z_l) / sqrt(6)   (SIE 3)

Networks (code normalisation of spec section 1): tied f = sigma(sum_l x_l.w / sqrt(L)); untied
f = sigma(sum_l x_l.w_l / sqrt(L)) with each row on its own sqrt(d)-sphere (``untied_norm=
"rows"``, spec section 8) or the whole W renormalised as ONE vector of R^{L d} to norm sqrt(L d)
(``"flat"``, what the authors' code did; rows keep norm ~ sqrt(d), same network function).
nu = weak-recovery step: tied |m| >= eta; untied m_untied = ||W w*/d|| / sqrt(L) >= eta.

Theory of the gain at the optimal step size (derivation)
--------------------------------------------------------
Write a = (m_1, ..., m_L) / sqrt(L) (tied: a = m 1/sqrt(L), so |a| = m; untied: |a| = m_untied).
The student pre-activation u = sum_l z_l / sqrt(L) has E[u z*_l] = a_l, so the population risk is
ONE function R(a) for both networks and

    R(a) = const - 2 sum_j mu_j <C_j(g), a^(x)j>,     mu_j = E[sigma(u) He_j(u)]

(Parseval, spec section 4).  The ODE of ``theory.ssi.model`` (t = gamma nu / d) reads, near 0,

    tied:     dm/dt   = -dR/dm - (gamma/2) K m,          K   = E sum_l (dl/dz_l)^2,
    untied:   dm_l/dt = -dR/dm_l - (gamma/2) K_l m_l,    K_l = E (dl/dz_l)^2 = K / L at m = 0,

because dl/dz_l = delta / sqrt(L) for every row (delta = dl/du): the untied row sees 1/L of the
squared gradient of the tied vector.  With SIE k, on the best direction,

    dm/dt ~ A m^(k-1) - (gamma/2) K m,   A_tied = 2 k mu_k L^(-k/2) C_k x (1..1),
                                          A_untied = 2 k |mu_k| L^(-k/2) ||C_k||_op   (m-coords),

and the untied state starts at |m_vec| ~ sqrt(L)/sqrt(d) and must reach eta sqrt(L).  For
dm/dt = A m^(k-1) - c m (c = gamma K / 2) the escape step count nu(gamma) = (d/gamma) int dm / (...)
is explicit; minimising over gamma:

    SIE 1:  nu* = f* d K eta^2 / (2 A^2),   f* = min_x -ln(1-x)/x^2 = 2.4554 (x* = 0.7153),
            gamma* = 2 A x* / (K eta)                                      (m0 << eta),
    SIE 2:  nu* = 2 d K ln(eta/m0) / A^2,   gamma* = A / K,
    SIE k:  nu* = (d K / (2 A^2)) m0^(2(2-k)) Psi_k(eta/m0)   (Psi_k: 1-D minimisation).

Hence, at optimal step sizes (``gain_optimal_closed``),

    gain* = (K_row / K_tied) (A_tied / A_untied)^2 L^(2-k)
          = (K_row / K_tied) * [spec gain_optimal]       for k <= 2,

and K_row / K_tied = 1/L for these networks: the spec's formula assumes equal noise constants and
is L times too large; for the families above gain* = L, the same as at equal step sizes.  In the
a-coordinates the untied ODE with a symmetric start is EXACTLY the tied ODE slowed down by L
(drift and noise both 1/L), so for permutation-symmetric targets with isotropic C_k (the
families) nu_untied(gamma) = L nu_tied(gamma) at EVERY gamma.  The flattened normalisation
gives the same ODE near m = 0 (shared renormalisation: the noise term is
gamma^2 ||grad_W||^2 / (2 L d) = gamma^2 delta^2 / (2 L d), the per-row sum), so it does not
bring back L^2 either.  ``gain_optimal_ode`` minimises the full ODE's nu over gamma numerically
(:func:`ode_optimal`) and checks the closed form beyond the linearisation.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numba
import numpy as np
import sympy as sp
from scipy.optimize import minimize_scalar
from scipy.special import digamma

from theory._util import check_positive
from theory.rng import as_rng
from theory.ssi.sgd._kernels import act_deriv, act_value

__all__ = [
    "gain_curve",
    "family_target",
    "drift_constants",
    "linear_escape_steps",
    "linear_optimal",
    "closed_form_gains",
    "ode_escape_steps",
    "ode_optimal",
    "ode_gains",
    "simulate_flat_untied",
    "flat_chunk",
    "flat_chunk_numpy",
    "typical_start",
    "F_STAR",
    "X_STAR",
]

FAMILIES = ("sum_he2", "sum_z", "sum_he3")
UNTIED_NORMS = ("rows", "flat")

# min_x -ln(1-x)/x^2 on (0, 1): the SIE-1 optimal-step constant (root of x/(1-x) = -2 ln(1-x))
X_STAR = 0.7153318629591615
F_STAR = -math.log1p(-X_STAR) / X_STAR**2


def family_target(target, L: int):
    """The sympy expression of ``target`` for sequence length ``L`` (see the module docstring)."""
    from theory.ssi.hermite import parse_target

    L = int(L)
    zs = [sp.Symbol(f"z{i + 1}", real=True) for i in range(L)]
    if isinstance(target, str) and target in FAMILIES:
        if target == "sum_he2":
            return sp.expand(sum(z**2 - 1 for z in zs) / sp.sqrt(2))
        if target == "sum_z":
            return sum(zs) / sp.sqrt(L)
        return sp.expand(sum(z**3 - 3 * z for z in zs) / sp.sqrt(6))
    if callable(target) and not isinstance(target, sp.Basic):
        target = target(L)
    return parse_target(target, L).expr


# =========================================================================== closed form


def drift_constants(expr, L: int, activation: str = "relu") -> dict:
    """Constants of the linearised escape ODE near m = 0 (m-coordinates, see module docstring).

    Returns sie, mu_k = E[sigma(u) He_k(u)], tied_contraction, op_norm, A_tied (signed),
    A_untied (>= 0, best direction), K_tied = K(0) of the tied network, K_row = K_l(0) of one
    untied row (from ``theory.ssi.model``'s noise term), and ``tied_escapes`` (False when the
    tied drift vanishes or, for even SIE, points inwards)."""
    from theory.ssi import model as ssi
    from theory.ssi.hermite import analyze

    L = int(L)
    rep = analyze(expr, L)
    k = rep.sie
    tn = ssi.TiedNetwork(expr, L=L, activation=activation)
    un = ssi.UntiedNetwork(expr, L=L, activation=activation)
    K_t = float(tn.noise_K(None, 0.0))
    K_row = float(np.asarray(un.noise_K(None, np.zeros(L)))[0])
    out = dict(
        sie=k,
        L=L,
        activation=activation,
        tied_contraction=rep.tied_contraction,
        op_norm=rep.op_norm,
        K_tied=K_t,
        K_row=K_row,
        gain_optimal_spec=rep.gain_optimal,
        gain_equal_spec=rep.gain_equal,
    )
    if k is None:
        out.update(mu_k=None, A_tied=0.0, A_untied=0.0, tied_escapes=False)
        return out
    mu = float(tn._ridge_moments(k)[0][k])
    if abs(mu) < 1e-12:  # quadrature zero (e.g. relu has no odd Hermite coefficient >= 3)
        mu = 0.0
    A_t = 2 * k * mu * L ** (-k / 2) * float(rep.tied_contraction)
    A_u = 2 * k * abs(mu) * L ** (-k / 2) * float(rep.op_norm)
    esc = A_t != 0 and (k % 2 == 1 or A_t > 0)
    out.update(mu_k=mu, A_tied=A_t, A_untied=A_u, tied_escapes=bool(esc))
    return out


def linear_escape_steps(A, K, k, lr, d, m0, eta) -> float:
    """SGD steps nu = t d / lr for dm/dt = A m^(k-1) - (lr K / 2) m from m0 to eta (inf if the
    noise term stops it first).  Odd k uses |A| (the sign of m follows the drift)."""
    A = abs(A) if k % 2 == 1 else A
    if A <= 0 or lr <= 0:
        return math.inf
    c = 0.5 * lr * K
    if k == 1:
        if A - c * eta <= 0:
            return math.inf
        t = (eta - m0) / A if c == 0 else -math.log((A - c * eta) / (A - c * m0)) / c
    elif k == 2:
        if A - c <= 0:
            return math.inf
        t = math.log(eta / m0) / (A - c)
    else:
        q0, q1 = c / (A * m0 ** (k - 2)), c / (A * eta ** (k - 2))
        if q0 >= 1:
            return math.inf
        if c == 0:
            t = (m0 ** (2 - k) - eta ** (2 - k)) / ((k - 2) * A)
        else:
            t = (math.log1p(-q1) - math.log1p(-q0)) / ((k - 2) * c)
    return t * d / lr


def linear_optimal(A, K, k, d, m0, eta) -> tuple[float, float]:
    """(nu*, lr*) minimising :func:`linear_escape_steps` over lr: explicit for k = 2
    (lr* = A/K, nu* = 2 d K ln(eta/m0) / A^2), a bounded 1-D minimisation over the admissible
    range (0, lr_max) otherwise (lr_max: where the noise term cancels the drift at the start)."""
    A = abs(A) if k % 2 == 1 else A
    if A <= 0:
        return math.inf, math.nan
    if k == 2:
        return 2 * d * K * math.log(eta / m0) / A**2, A / K
    lr_max = 2 * A / (K * eta) if k == 1 else 2 * A * m0 ** (k - 2) / K
    f = lambda y: math.log(linear_escape_steps(A, K, k, y * lr_max, d, m0, eta))
    r = minimize_scalar(f, bounds=(1e-6, 1 - 1e-9), method="bounded", options=dict(xatol=1e-10))
    return math.exp(r.fun), float(r.x) * lr_max


def closed_form_gains(
    expr, L: int, d: float, eta: float, lr: float, activation: str = "relu", m0: float | None = None
) -> dict:
    """Closed-form (linearised ODE) gains: ``gain_equal_closed`` (both at ``lr``) and
    ``gain_optimal_closed`` (each at its own optimal lr), with nu and lr of each network.
    Tied: from m0 (default 1/sqrt(d)) to eta; untied (m-coordinates, best direction): from
    sqrt(L) m0 to sqrt(L) eta, i.e. the same m_untied.  gain = 0 when the tied network cannot
    escape (spec: tied stuck)."""
    c = drift_constants(expr, L, activation)
    m0 = 1 / math.sqrt(d) if m0 is None else m0
    k = c["sie"]
    out = dict(c)
    if k is None:
        out.update(gain_equal_closed=None, gain_optimal_closed=None)
        return out
    s = math.sqrt(L)
    nt_eq = (
        linear_escape_steps(c["A_tied"], c["K_tied"], k, lr, d, m0, eta)
        if c["tied_escapes"]
        else math.inf
    )
    nu_eq = linear_escape_steps(c["A_untied"], c["K_row"], k, lr, d, s * m0, s * eta)
    nt_opt, lt_opt = (
        linear_optimal(c["A_tied"], c["K_tied"], k, d, m0, eta)
        if c["tied_escapes"]
        else (math.inf, math.nan)
    )
    nu_opt, lu_opt = linear_optimal(c["A_untied"], c["K_row"], k, d, s * m0, s * eta)

    def ratio(a, b):
        if not math.isfinite(b):
            return 0.0 if math.isfinite(a) else None
        return a / b if math.isfinite(a) else math.inf

    out.update(
        nu_equal_tied_closed=nt_eq,
        nu_equal_untied_closed=nu_eq,
        nu_opt_tied_closed=nt_opt,
        nu_opt_untied_closed=nu_opt,
        lr_opt_tied_closed=lt_opt,
        lr_opt_untied_closed=lu_opt,
        gain_equal_closed=ratio(nu_eq, nt_eq),
        gain_optimal_closed=ratio(nu_opt, nt_opt),
    )
    return out


# =========================================================================== numerical ODE


def typical_start(d: float, rows: int) -> float:
    """Per-row m0 whose ODE escape matches a uniformly random start on average: the geometric
    mean of |m_vec| for m_l ~ N(0, 1/d) i.i.d. (|m_vec|^2 d ~ chi^2_rows), divided by
    sqrt(rows): exp((psi(rows/2) + ln 2) / 2) / sqrt(rows d).  (The SIE-2 escape time is linear
    in ln(1/m0), so the mean escape time of random starts is the one from this m0.)"""
    return math.exp(0.5 * (float(digamma(rows / 2)) + math.log(2))) / math.sqrt(rows * d)


def ode_escape_steps(model, lr: float, d: float, eta: float, m0: float | None = None) -> float:
    """Weak-recovery steps nu of the package's ODE (``theory.ssi.model.integrate_ode``) for one
    step size (inf when stuck).  m0: per-row start (default 1/sqrt(d))."""
    from theory.ssi import model as ssi

    res = ssi.integrate_ode(model, lr, d, m0=m0, eta=eta)
    return math.inf if res.steps_escape is None else float(res.steps_escape)


def ode_optimal(
    model,
    d: float,
    eta: float,
    lr_guess: float,
    m0: float | None = None,
    *,
    xatol: float = 0.005,
    span: float = 40.0,
) -> tuple[float, float, int]:
    """(nu*, lr*, n_evals): the step size minimising the ODE's escape steps, by bounded Brent
    minimisation of ln nu over ln lr in [lr_guess / span, 1.9 lr_guess] (stuck step sizes count
    as a large penalty).  ``lr_guess``: the closed-form optimum (the admissible range ends near
    2 lr_guess for SIE 2, ~1.4 lr_guess for SIE 1).  xatol: tolerance in ln lr (nu is flat at
    the optimum: 0.005 in ln lr is ~1e-5 relative in nu)."""
    cache = {}

    def f(x):
        if x not in cache:
            nu = ode_escape_steps(model, math.exp(x), d, eta, m0)
            cache[x] = math.log(nu) if math.isfinite(nu) else 1e3 - x
        return cache[x]

    lo, hi = math.log(lr_guess / span), math.log(1.9 * lr_guess)
    minimize_scalar(f, bounds=(lo, hi), method="bounded", options=dict(xatol=xatol))
    best = min(cache, key=cache.get)
    if cache[best] >= 1e3 - hi:  # stuck at every step size tried
        return math.inf, math.nan, len(cache)
    return math.exp(cache[best]), math.exp(best), len(cache)


def ode_gains(
    expr, L: int, d: float, eta: float, lr: float, activation: str = "relu", start: str = "fixed"
) -> dict:
    """Gains of the full ODE: ``gain_equal_ode`` (both at ``lr``) and ``gain_optimal_ode``
    (each network at its ODE-optimal step size, :func:`ode_optimal`).  start: "fixed" (every row
    at m0 = 1/sqrt(d)) or "typical" (:func:`typical_start`, matching random starts)."""
    from theory.ssi import model as ssi

    if start not in ("fixed", "typical"):
        raise ValueError("start must be 'fixed' or 'typical'")
    c = closed_form_gains(expr, L, d, eta, lr, activation)
    tn = ssi.TiedNetwork(expr, L=L, activation=activation)
    un = ssi.UntiedNetwork(expr, L=L, activation=activation)
    m0t = typical_start(d, 1) if start == "typical" else 1 / math.sqrt(d)
    m0u = typical_start(d, L) if start == "typical" else 1 / math.sqrt(d)
    out = dict(ode_start=start, m0_tied=m0t, m0_untied_row=m0u)
    nt = ode_escape_steps(tn, lr, d, eta, m0t) if c["tied_escapes"] else math.inf
    nu = ode_escape_steps(un, lr, d, eta, m0u)
    out.update(
        nu_equal_tied_ode=nt,
        nu_equal_untied_ode=nu,
        gain_equal_ode=(nu / nt) if math.isfinite(nt) else (0.0 if math.isfinite(nu) else None),
    )
    ok = lambda x: x is not None and math.isfinite(x) and x > 0
    if c["tied_escapes"] and ok(c["lr_opt_tied_closed"]):
        st, lt, _ = ode_optimal(tn, d, eta, c["lr_opt_tied_closed"], m0t)
    else:
        st, lt = math.inf, math.nan
    if ok(c["lr_opt_untied_closed"]):
        su, lu, _ = ode_optimal(un, d, eta, c["lr_opt_untied_closed"], m0u)
    else:
        su, lu = math.inf, math.nan
    out.update(
        nu_opt_tied_ode=st,
        nu_opt_untied_ode=su,
        lr_opt_tied_ode=lt,
        lr_opt_untied_ode=lu,
        gain_optimal_ode=(su / st) if math.isfinite(st) else (0.0 if math.isfinite(su) else None),
    )
    if out["gain_optimal_ode"] is not None and not math.isfinite(out["gain_optimal_ode"]):
        out["gain_optimal_ode"] = None  # untied stuck too
    if out["gain_equal_ode"] is not None and not math.isfinite(out["gain_equal_ode"]):
        out["gain_equal_ode"] = None
    return out


# =========================================================================== flattened untied SGD


@numba.njit(cache=True)
def flat_chunk(c, r, alpha, beta, chi, Y, h, act, eta2):
    """Exact reduced chain of the FLATTENED untied network, ``alpha.shape[0]`` steps in place.

    W in R^{L x d} on one sphere of radius sqrt(L d); c (L,) = coordinates of W/sqrt(L d) along
    the orthonormal directions e_l (x) w*/sqrt(d) (c_l = m_l / sqrt(L), |c| = m_untied), r (1,)
    the norm of the rest.  Per step (same derivation as ``theory.ssi.sgd.reduced`` with the
    frame of the L teacher directions of R^{L d}): z* = alpha (n, L), u = c.alpha + r beta,
    delta = 2 (sigma(u) - y) sigma'(u), c' = c - h delta alpha, r' = r - h delta beta,
    rest^2 = h^2 delta^2 chi, chi ~ chi^2(L d - L - 1), h = gamma / (L d), renormalise.
    Returns (first index with |c|^2 >= eta2 or -1, sum of losses)."""
    n, L = alpha.shape
    cn = np.empty(L)
    hit = -1
    loss_sum = 0.0
    for t in range(n):
        u = r[0] * beta[t]
        for l in range(L):
            u += c[l] * alpha[t, l]
        s = act_value(act, u)
        res = s - Y[t]
        loss_sum += res * res
        dl = 2.0 * res * act_deriv(act, u)
        nrm2 = 0.0
        for l in range(L):
            cn[l] = c[l] - h * dl * alpha[t, l]
            nrm2 += cn[l] * cn[l]
        rp = r[0] - h * dl * beta[t]
        perp2 = rp * rp + h * h * dl * dl * chi[t]
        inv = 1.0 / math.sqrt(nrm2 + perp2)
        q = 0.0
        for l in range(L):
            c[l] = cn[l] * inv
            q += c[l] * c[l]
        r[0] = math.sqrt(perp2) * inv
        if hit < 0 and q >= eta2:
            hit = t
    return hit, loss_sum


def flat_chunk_numpy(c, r, alpha, beta, chi, Y, h, act, eta2):
    """Plain numpy reference of :func:`flat_chunk` (same in-place semantics)."""
    from theory.ssi.sgd._kernels import act_numpy

    hit, loss_sum = -1, 0.0
    for t in range(alpha.shape[0]):
        u = float(c @ alpha[t] + r[0] * beta[t])
        s, ds = act_numpy(act, u)
        res = float(s) - float(Y[t])
        loss_sum += res * res
        dl = 2.0 * res * float(ds)
        cn = c - h * dl * alpha[t]
        rp = r[0] - h * dl * beta[t]
        perp2 = rp**2 + h * h * dl * dl * chi[t]
        nrm = math.sqrt(cn @ cn + perp2)
        c[:] = cn / nrm
        r[0] = math.sqrt(perp2) / nrm
        if hit < 0 and c @ c >= eta2:
            hit = t
    return hit, loss_sum


def simulate_flat_untied(
    expr,
    L: int,
    d: int,
    lr: float,
    seed,
    *,
    eta: float = 0.5,
    max_steps: int = 10**8,
    activation: str = "relu",
    chunk: int = 1 << 14,
):
    """Escape step of the flattened untied network (exact reduced chain, :func:`flat_chunk`)
    from a uniformly random start on the sphere of R^{L d}: returns the first step with
    m_untied = ||W w*/d|| / sqrt(L) >= eta, or None within ``max_steps``."""
    from theory.ssi.sgd._kernels import ACTIVATIONS
    from theory.ssi.sgd.simulate import _target_callable

    L, d = int(L), int(d)
    if d < 3:
        raise ValueError("d must be >= 3")
    check_positive("lr", lr)
    act = ACTIVATIONS.get(str(activation).lower())
    if act is None:
        raise ValueError(
            f"activation {activation!r} is not available; use one of {sorted(ACTIVATIONS)}"
        )
    tfn = _target_callable(("expr", expr), L)
    rng = as_rng(seed)
    D = L * d
    g = rng.standard_normal(L)
    c = g / math.sqrt(g @ g + rng.chisquare(D - L))
    r = np.array([math.sqrt(max(1.0 - c @ c, 0.0))])
    eta2 = eta * eta
    if c @ c >= eta2:
        return 0
    h = lr / D
    pos = 0
    while pos < max_steps:
        n = min(chunk, max_steps - pos)
        alpha = rng.standard_normal((n, L))
        beta = rng.standard_normal(n)
        chi = rng.chisquare(D - L - 1, n)
        Y = np.ascontiguousarray(tfn(alpha)[:, 0])
        hit, _ = flat_chunk(c, r, alpha, beta, chi, Y, h, act, eta2)
        if not np.all(np.isfinite(c)):
            return None
        if hit >= 0:
            return pos + int(hit) + 1
        pos += n
    return None


def _flat_job(args):
    expr, L, d, lr, seed, kw = args
    return seed, simulate_flat_untied(expr, L, d, lr, seed, **kw)


def _cache_path(cache_dir, kind, key: dict):
    import hashlib
    import json

    if cache_dir is None:
        return None
    h = hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return Path(cache_dir) / f"gain-{kind}-{h}.jsonl"


def _flat_seeds(expr, L, d, lr, seeds, workers, out=None, **kw):
    """Escape steps of the flattened untied network for every seed; with ``out`` (JSON lines)
    finished seeds are appended at once and not re-run."""
    import json

    done = {}
    if out is not None and Path(out).exists():
        for line in Path(out).read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:  # torn last line after a kill
                continue
            done[rec["seed"]] = rec["steps_escape"]
    todo = [s for s in seeds if s not in done]

    def store(seed, nu):
        done[seed] = nu
        if out is not None:
            Path(out).parent.mkdir(parents=True, exist_ok=True)
            with open(out, "a") as fh:
                fh.write(json.dumps(dict(seed=seed, steps_escape=nu)) + "\n")
                fh.flush()
                os.fsync(fh.fileno())

    jobs = [(expr, L, d, lr, s, kw) for s in todo]
    if workers is None:
        workers = min(len(jobs), os.cpu_count() or 1)
    if workers <= 1 or len(jobs) <= 1:
        for j in jobs:
            store(*_flat_job(j))
    else:
        with ProcessPoolExecutor(max_workers=workers) as ex:
            for seed, nu in ex.map(_flat_job, jobs):
                store(seed, nu)
    return [done[s] for s in seeds]


# =========================================================================== simulation + rows


def _summarise(nu_list, max_steps):
    nu = np.array([np.nan if v is None else v for v in nu_list], float)
    stuck = int(np.isnan(nu).sum())
    if stuck == len(nu):
        return math.inf, math.nan, stuck
    # censored runs count at max_steps (a lower bound on their escape step)
    nu = np.where(np.isnan(nu), float(max_steps), nu)
    se = float(nu.std(ddof=1) / math.sqrt(len(nu))) if len(nu) > 1 else 0.0
    return float(nu.mean()), se, stuck


def _escape_stats(spec, d, lr, seeds, eta, max_steps, workers, progress, out=None):
    from theory.ssi.sgd.simulate import simulate_seeds

    res = simulate_seeds(
        spec,
        d,
        lr,
        seeds,
        reduced=True,
        workers=workers,
        progress=progress,
        eta=eta,
        max_steps=max_steps,
        margin=0.0,
        t_margin=0.0,
        out=out,
        n_record=2,
    )
    return _summarise([r.steps_escape for r in res], max_steps)


def _scan(run, cand, step_rule):
    """Run ``run(lr, cap)`` -> (mean, se, stuck) over the candidate step sizes (ordered from the
    centre outwards); return the best (mean, se, stuck, lr) and all stats."""
    stats = []
    cap = None
    for g in cand:
        mean, se, stuck = run(float(g), cap)
        stats.append((mean if stuck == 0 else math.inf, mean, se, stuck, float(g)))
        if step_rule == "optimal" and stuck == 0:
            # a step size whose runs take 3x longer than the best so far cannot be the
            # optimum: censor there (bounds the cost of stuck / slow runs)
            cap = int(3 * min(s[0] for s in stats)) + 1
    ok = [s for s in stats if np.isfinite(s[0])] or stats
    best = min(ok, key=lambda s: s[1])
    return best[1:], [dict(lr=s[4], nu=s[1], nu_err=s[2], stuck=s[3]) for s in stats]


def _ratio_err(mu, su, mt, st):
    gain = mu / mt if mt > 0 and math.isfinite(mt) else math.nan
    err = (
        gain * math.hypot(st / mt, su / mu)
        if mt > 0 and mu > 0 and math.isfinite(mu * mt)
        else math.nan
    )
    return gain, err


def gain_curve(
    target,
    Ls,
    *,
    simulate=False,
    d=1000,
    lr=0.05,
    seeds=16,
    step_rule="equal",
    activation="relu",
    eta=0.5,
    lrs=None,
    lr_factors=(0.5, 0.71, 1.0, 1.41),
    max_steps=None,
    workers=None,
    progress=False,
    rng=0,
    ode=True,
    ode_start="typical",
    untied_norms=("rows",),
    cache_dir=None,
) -> list[dict]:
    """Rows (one per L) with the predicted and (optionally) simulated tied/untied gain.

    Row fields: L, target, sie, tied_contraction, op_norm, gain_optimal, gain_equal (the spec's
    formulas, ``theory.ssi.hermite.analyze``), gain_predicted (one of these by ``step_rule``);
    the closed form of the package's ODE (module docstring): gain_optimal_closed,
    gain_equal_closed, A_tied, A_untied, K_tied, K_row, lr_opt_*_closed, nu_*_closed; with
    ``ode=True`` the full ODE: gain_optimal_ode, gain_equal_ode, lr_opt_tied_ode,
    lr_opt_untied_ode, nu_opt_*_ode, nu_equal_*_ode (start ``ode_start``: "typical" matches
    the random starts of the simulation, "fixed" is m0 = 1/sqrt(d)), gain_predicted_ode.
    With ``simulate=True``: gain_sim, gain_sim_err, nu_tied, nu_tied_err, nu_untied,
    nu_untied_err, lr_tied, lr_untied, n_seeds, stuck_tied, stuck_untied (runs without recovery
    within ``max_steps``, counted at max_steps), scan_tied / scan_untied (every step size tried),
    and for ``"flat"`` in ``untied_norms`` the same with suffix ``_flat`` (flattened untied
    normalisation, :func:`simulate_flat_untied`).  Step sizes for ``step_rule="optimal"``:
    ``lrs`` if given (shared by both networks), else each network's ODE-optimal step size times
    ``lr_factors`` (closed-form optimum if ``ode=False``).  seeds: a count or a list of ints.
    cache_dir: if given, every finished SGD run is appended to a JSON-lines file there (keyed by
    all parameters) and not re-run: an interrupted curve resumes.
    """
    from theory.ssi.hermite import analyze
    from theory.ssi.sgd.simulate import SimSpec

    if step_rule not in ("equal", "optimal"):
        raise ValueError(f"step_rule must be 'equal' or 'optimal', got {step_rule!r}")
    bad = [u for u in untied_norms if u not in UNTIED_NORMS]
    if bad or not untied_norms:
        raise ValueError(
            f"untied_norms must be a non-empty subset of {UNTIED_NORMS}, got {untied_norms!r}"
        )
    Ls = [int(L) for L in np.atleast_1d(Ls)]
    if not Ls or min(Ls) < 1:
        raise ValueError("Ls must be positive integers")
    check_positive("d", d)
    check_positive("lr", lr)
    check_positive("eta", eta)
    if isinstance(seeds, (int, np.integer)):
        base = np.random.default_rng(rng).integers(0, 2**62, size=int(seeds))
        seed_list = [int(s) for s in base]
    else:
        seed_list = [int(s) for s in seeds]
    rows = []
    for L in Ls:
        expr = family_target(target, L)
        rep = analyze(expr, L)
        row = dict(
            L=L,
            target=str(expr),
            sie=rep.sie,
            tied_contraction=rep.tied_contraction,
            op_norm=rep.op_norm,
            gain_optimal=rep.gain_optimal,
            gain_equal=rep.gain_equal,
            step_rule=step_rule,
            gain_predicted=rep.gain_optimal if step_rule == "optimal" else rep.gain_equal,
            d=d,
            eta=eta,
            lr=lr,
            activation=activation,
        )
        cf = closed_form_gains(expr, L, d, eta, lr, activation)
        for key in (
            "A_tied",
            "A_untied",
            "K_tied",
            "K_row",
            "mu_k",
            "tied_escapes",
            "gain_equal_closed",
            "gain_optimal_closed",
            "lr_opt_tied_closed",
            "lr_opt_untied_closed",
            "nu_opt_tied_closed",
            "nu_opt_untied_closed",
            "nu_equal_tied_closed",
            "nu_equal_untied_closed",
        ):
            row[key] = cf.get(key)
        lr_centre = dict(tied=cf.get("lr_opt_tied_closed"), untied=cf.get("lr_opt_untied_closed"))
        if ode and rep.sie is not None:
            og = ode_gains(expr, L, d, eta, lr, activation, start=ode_start)
            row.update(og)
            row["gain_predicted_ode"] = og[
                "gain_optimal_ode" if step_rule == "optimal" else "gain_equal_ode"
            ]
            lr_centre = dict(tied=og["lr_opt_tied_ode"], untied=og["lr_opt_untied_ode"])
        if simulate:
            cap0 = int(max_steps) if max_steps is not None else None
            best = {}
            kinds = ["tied"] + [("untied" if u == "rows" else "untied_flat") for u in untied_norms]
            for kind in kinds:
                if step_rule == "equal":
                    cand = [lr]
                elif lrs is not None:
                    cand = sorted(lrs, key=lambda g: abs(math.log(g / lr)))
                else:
                    c0 = lr_centre["tied" if kind == "tied" else "untied"]
                    if c0 is None or not math.isfinite(c0):
                        c0 = lr
                    cand = sorted((c0 * f for f in lr_factors), key=lambda g: abs(math.log(g / c0)))
                if cap0 is None:
                    ref = max(
                        row.get("nu_opt_untied_ode") or 0.0,
                        row.get("nu_equal_untied_ode") or 0.0,
                        1e4,
                    )
                    base_cap = int(
                        min(50 * ref if math.isfinite(ref) else 1e9, 200 * d / min(cand))
                    )
                else:
                    base_cap = cap0

                if kind == "untied_flat":

                    def run(g, cap, _e=expr, _L=L, _b=base_cap):
                        cap = _b if cap is None else min(cap, _b)
                        out = _cache_path(
                            cache_dir,
                            "flat",
                            dict(
                                target=str(_e),
                                L=_L,
                                d=int(d),
                                lr=g,
                                eta=eta,
                                cap=cap,
                                act=activation,
                            ),
                        )
                        nus = _flat_seeds(
                            _e,
                            _L,
                            int(d),
                            g,
                            seed_list,
                            workers,
                            out=out,
                            eta=eta,
                            max_steps=cap,
                            activation=activation,
                        )
                        return _summarise(nus, cap)
                else:
                    spec = SimSpec(kind=kind, L=L, target=("expr", expr), activation=activation)

                    def run(g, cap, _s=spec, _b=base_cap):
                        cap = _b if cap is None else min(cap, _b)
                        out = _cache_path(
                            cache_dir,
                            _s.kind,
                            dict(spec=_s.describe(), d=int(d), lr=g, eta=eta, cap=cap),
                        )
                        return _escape_stats(
                            _s, d, g, seed_list, eta, cap, workers, progress, out=out
                        )

                best[kind], row[f"scan_{kind}"] = _scan(run, cand, step_rule)
            mt, st, kt, gt = best["tied"]
            row.update(
                nu_tied=mt, nu_tied_err=st, lr_tied=gt, stuck_tied=kt, n_seeds=len(seed_list)
            )
            for kind in kinds[1:]:
                mu, su, ku, gu = best[kind]
                sfx = "" if kind == "untied" else "_flat"
                gain, err = _ratio_err(mu, su, mt, st)
                row.update(
                    {
                        f"gain_sim{sfx}": gain,
                        f"gain_sim{sfx}_err": err,
                        f"nu_untied{sfx}": mu,
                        f"nu_untied{sfx}_err": su,
                        f"lr_untied{sfx}": gu,
                        f"stuck_untied{sfx}": ku,
                    }
                )
        rows.append(row)
    return rows
