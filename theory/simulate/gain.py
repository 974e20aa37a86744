"""Tied vs untied gain nu_untied / nu_tied as a function of the sequence length L (spec section 5),
predicted from the Hermite data of ``theory.hermite`` and measured with the SGD simulators.

Targets may depend on L: pass a family name, a callable ``L -> expression``, or one expression
(then every L must contain its variables).  Families:

* ``"sum_he2"``: sum_l He_2(z_l) / sqrt(2)   (the paper's SIE-2 example, spec section 7)
* ``"sum_z"``:   sum_l z_l / sqrt(L)          (SIE 1)
* ``"sum_he3"``: sum_l He_3(z_l) / sqrt(6)   (SIE 3)

Measured gain: the tied network sigma(sum_l x_l.w/sqrt(L)) and the untied network
sigma(sum_l x_l.w_l/sqrt(L)) (rows on their own spheres) are run from a uniformly random start
with the same activation; nu = weak-recovery step (tied: |m| >= eta; untied: m_untied =
||W w*/d|| / sqrt(L) >= eta, i.e. ||W w*/d|| >= eta sqrt(L)).  gain = mean nu_untied / mean
nu_tied, error by the delta method from the standard errors of the two means.  ``step_rule``:
"equal" runs both networks at ``lr``; "optimal" scans ``lrs`` (default a geometric grid around
``lr``) and takes for each network the step size with the smallest mean nu (step sizes are
tried from ``lr`` outwards; once one has escaped in every run, later ones are censored at 3x
the best mean, and a step size with censored runs is never chosen).

Observation (simulation vs the spec's optimal-step prediction).  With per-row spheres (spec
section 8) the untied row l has drift and noise term both 1/L times the tied ones near m = 0
(delta_l = dl/dz_l carries the 1/sqrt(L) of the readout, K_l = E delta_l^2 = K_tied / L), so the
largest admissible step size is the same for both networks and the measured gain at the best
step size of a grid stays ~ gain_equal (~ L for the two families above), not ratio^2 (~ L^2).
The figure ``sgd-gain`` shows both predictions against the simulation.
"""

from __future__ import annotations

import math

import numpy as np
import sympy as sp

from theory.simulate.sgd import SimSpec, simulate_seeds

__all__ = ["gain_curve", "family_target"]

FAMILIES = ("sum_he2", "sum_z", "sum_he3")


def family_target(target, L: int):
    """The sympy expression of ``target`` for sequence length ``L`` (see the module docstring)."""
    from theory.hermite import parse_target

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


def _escape_stats(spec, d, lr, seeds, eta, max_steps, workers, progress):
    res = simulate_seeds(spec, d, lr, seeds, reduced=True, workers=workers, progress=progress,
                         eta=eta, max_steps=max_steps, margin=0.0, t_margin=0.0)
    nu = np.array([np.nan if r.steps_escape is None else r.steps_escape for r in res], float)
    stuck = int(np.isnan(nu).sum())
    if stuck == len(nu):
        return math.inf, math.nan, stuck
    # censored runs count at max_steps (a lower bound on their escape step)
    nu = np.where(np.isnan(nu), float(max_steps), nu)
    return float(nu.mean()), float(nu.std(ddof=1) / math.sqrt(len(nu))) if len(nu) > 1 else 0.0, \
        stuck


def gain_curve(target, Ls, *, simulate=False, d=1000, lr=0.05, seeds=16, step_rule="equal",
               activation="relu", eta=0.5, lrs=None, max_steps=None, workers=None,
               progress=False, rng=0) -> list[dict]:
    """Rows (one per L) with the predicted and (optionally) simulated tied/untied gain.

    Row fields: L, sie, tied_contraction, op_norm, gain_predicted (gain_optimal or gain_equal of
    ``theory.hermite.analyze`` according to ``step_rule``), gain_optimal, gain_equal, and with
    ``simulate=True``: gain_sim, gain_sim_err, nu_tied, nu_tied_err, nu_untied, nu_untied_err,
    lr_tied, lr_untied, n_seeds, stuck_tied, stuck_untied (runs without recovery within
    ``max_steps``, counted at max_steps).  seeds: a count or a list of ints.
    """
    from theory.hermite import analyze

    if step_rule not in ("equal", "optimal"):
        raise ValueError(f"step_rule must be 'equal' or 'optimal', got {step_rule!r}")
    Ls = [int(L) for L in np.atleast_1d(Ls)]
    if not Ls or min(Ls) < 1:
        raise ValueError("Ls must be positive integers")
    if isinstance(seeds, (int, np.integer)):
        base = np.random.default_rng(rng).integers(0, 2**62, size=int(seeds))
        seed_list = [int(s) for s in base]
    else:
        seed_list = [int(s) for s in seeds]
    if max_steps is None:
        max_steps = int(200 * d / lr)
    if lrs is None:
        lrs = lr * np.geomspace(0.125, 4.0, 6)
    rows = []
    for L in Ls:
        expr = family_target(target, L)
        rep = analyze(expr, L)
        row = dict(L=L, target=str(expr), sie=rep.sie, tied_contraction=rep.tied_contraction,
                   op_norm=rep.op_norm, gain_optimal=rep.gain_optimal,
                   gain_equal=rep.gain_equal, step_rule=step_rule,
                   gain_predicted=rep.gain_optimal if step_rule == "optimal" else rep.gain_equal)
        if simulate:
            best = {}
            for kind in ("tied", "untied"):
                spec = SimSpec(kind=kind, L=L, target=("expr", expr), activation=activation)
                cand = [lr] if step_rule == "equal" else sorted(lrs, key=lambda g: abs(
                    math.log(g / lr)))
                stats = []
                cap = int(max_steps)
                for g in cand:
                    mean, se, stuck = _escape_stats(spec, d, float(g), seed_list, eta, cap,
                                                    workers, progress)
                    stats.append((mean if stuck == 0 else math.inf, mean, se, stuck, float(g)))
                    if step_rule == "optimal" and stuck == 0:
                        # a step size whose runs take 3x longer than the best so far cannot be
                        # the optimum: censor there (bounds the cost of stuck / slow runs)
                        cap = min(cap, int(3 * min(s[0] for s in stats)) + 1)
                ok = [s for s in stats if np.isfinite(s[0])] or stats
                best[kind] = min(ok, key=lambda s: s[1])
            _, mt, st, kt, gt = best["tied"]
            _, mu, su, ku, gu = best["untied"]
            gain = mu / mt if mt > 0 else math.nan
            err = gain * math.hypot(st / mt, su / mu) if mt > 0 and mu > 0 else math.nan
            row.update(gain_sim=gain, gain_sim_err=err, nu_tied=mt, nu_tied_err=st,
                       nu_untied=mu, nu_untied_err=su, lr_tied=gt, lr_untied=gu,
                       n_seeds=len(seed_list), stuck_tied=kt, stuck_untied=ku, d=d, eta=eta,
                       activation=activation)
        rows.append(row)
    return rows
