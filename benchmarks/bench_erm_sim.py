"""Speed of the finite-d ERM side: risk+gradient per GD step, the minimisers, GAMP, prox, and
(with --tracking) GAMP against its two-time state evolution as d grows.

    python benchmarks/bench_erm_sim.py [--d 1000] [--alpha 2.0] [--tracking]

Baselines (what a researcher would write first):
* risk+gradient: the full forward/backward pass on the tokens, f = softmax(XQ(XQ)^T/d) X,
  residual R = f - Y (n, 2, d), dL/dS = R X^T / d, softmax backward, X^T dL/dh — numpy/einsum;
  ours uses the exact per-sample reduction in one numba pass over the tokens (against the
  same reduction as two gemv with the (2n, d) token matrix, ``risk_reference``);
* prox: scipy.optimize.minimize (BFGS) per sample from the best of w and the zero-loss points.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from theory.attention.params import ERMParams

P03 = ERMParams(omega=0.3)


def naive_risk_grad(Q, X, Y, lam):
    n, L, d = X.shape
    XQ = X @ Q / np.sqrt(d)  # (n, 2) = h
    M = XQ[:, :, None] * XQ[:, None, :]
    M = M - M.max(-1, keepdims=True)
    S = np.exp(M)
    S /= S.sum(-1, keepdims=True)
    R = np.einsum("nlk,nkd->nld", S, X) - Y
    loss = (R**2).sum() / (2 * d) + 0.5 * lam * Q @ Q
    dS = np.einsum("nld,nkd->nlk", R, X) / d
    dM = S * (dS - (S * dS).sum(-1, keepdims=True))
    dh = np.einsum("nlk,nk->nl", dM, XQ) + np.einsum("nlk,nl->nk", dM, XQ)
    return loss, np.einsum("nld,nl->d", X, dh) / np.sqrt(d) + lam * Q


def best_of(f, reps=5):
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return min(ts)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, default=1000)
    ap.add_argument("--alpha", type=float, default=2.0)
    ap.add_argument(
        "--tracking",
        action="store_true",
        help="also the GAMP-vs-state-evolution d-scaling (several minutes)",
    )
    args = ap.parse_args(argv)
    from theory import attention as A
    from theory.attention.channel import sample_loss
    from theory.attention.finite_d.problem import make_problem, risk, risk_reference
    from theory.attention.proximal import prox_rows as prox

    d, alpha = args.d, args.alpha
    pb = make_problem(alpha, P03, d, 0, keep_targets=True, n_test=10_000)
    Q = pb.teacher.qstar.copy()
    n = pb.train.n
    L1, g1 = risk(Q, pb.train, 0.01)
    L2, g2 = naive_risk_grad(Q, pb.train.X, pb.train.Y, 0.01)
    assert abs(L1 - L2) < 1e-9 * abs(L1) and np.abs(g1 - g2).max() < 1e-9 * np.abs(g1).max()
    risk(Q, pb.train, 0.01)  # compile
    t_ours = best_of(lambda: risk(Q, pb.train, 0.01), reps=20)
    t_ref = best_of(lambda: risk_reference(Q, pb.train, 0.01), reps=20)
    t_naive = best_of(lambda: naive_risk_grad(Q, pb.train.X, pb.train.Y, 0.01), reps=3)
    print(
        f"risk+gradient, d={d}, n={n}: ours (one numba pass) {t_ours * 1e3:.2f} ms, the "
        f"two-gemv reduction {t_ref * 1e3:.2f} ms ({t_ref / t_ours:.1f}x), naive full-token "
        f"{t_naive * 1e3:.2f} ms ({t_naive / t_ours:.1f}x) (same value to 1e-9)"
    )
    # minimisers, same risk, same start, stop at RMS gradient 1e-7 (or max_iter)
    for init in ("semantic", "positional"):
        for method, steps in (("nesterov", 3000), ("bb", 3000), ("lbfgs", 3000), ("gd", 3000)):
            t = time.perf_counter()
            r = A.simulate_gd(alpha, init=init, method=method, steps=steps, tol=1e-7, problem=pb)
            print(
                f"{init:>10} {method:>8}: {time.perf_counter() - t:6.2f} s  {r.status:>9} "
                f"{r.iterations:5d} it  RMS grad {r.grad_rms:.1e}  eps_t {r.eps_t:.8f}  "
                f"m {r.m:.5f} theta/s2 {r.theta_over_sigma2:.5f}  (incl. eps_g on 1e4 test "
                f"samples)",
                flush=True,
            )
    t = time.perf_counter()
    r = A.run_gamp(alpha, init="semantic", problem=pb, mixing=0.5, V0=10.0, tol=1e-7)
    dt = time.perf_counter() - t
    print(
        f"GAMP (exact channel): {dt:.2f} s, {r.iterations} iterations "
        f"({dt / max(r.iterations, 1) * 1e3:.0f} ms/iteration), {r.status}, "
        f"eps_t {r.eps_t:.6f}"
    )
    # prox vs scipy per sample
    from scipy.optimize import minimize

    rng = np.random.default_rng(0)
    m = 400
    w = rng.standard_normal((m, 2))
    V = np.full(m, 10.0)
    kap = np.full(m, 0.25)
    a, b = rng.uniform(0.3, 0.9, m), rng.uniform(0.3, 0.9, m)
    for _ in range(3):  # compile, and start numba's thread pool
        prox(w, V, kap, a, b)
    t_p = best_of(lambda: prox(w, V, kap, a, b), reps=5)
    ours = prox(w, V, kap, a, b)

    def scipy_all():
        out = np.empty(m)
        for i in range(m):
            f = lambda x, i=i: (
                ((x - w[i]) ** 2).sum() / (2 * V[i]) + sample_loss(x[None], kap[i], a[i], b[i])[0]
            )
            out[i] = min(minimize(f, x0, method="BFGS").fun for x0 in (w[i], np.zeros(2)))
        return out

    t = time.perf_counter()
    ref = scipy_all()
    t_s = time.perf_counter() - t
    print(
        f"prox of {m} samples: ours {t_p * 1e3:.1f} ms, scipy BFGS loop (2 starts) "
        f"{t_s * 1e3:.0f} ms, ratio {t_s / t_p:.0f}x; ours lower or equal on "
        f"{np.mean(ours.value <= ref + 1e-10) * 100:.1f} % of samples"
    )
    bench_state_evolution()
    if args.tracking:
        tracking_table("semantic", "jacobian", (250, 1000, 2000, 4000), 12)
        for mixing, T in ((0.3, 30), (0.15, 40)):
            for div in ("stein", "jacobian"):
                tracking_table(
                    "positional", div, (500, 1000, 2000), 4, m0=0.26, V0=11.0, mixing=mixing, T=T
                )


def bench_state_evolution():
    from theory.attention.finite_d.state_evolution import large_d_gram, state_evolution

    t = time.perf_counter()
    state_evolution(2.0, P03, 10, gram=large_d_gram("semantic"), n_pop=100_000)
    dt = time.perf_counter() - t
    print(
        f"two-time state evolution, n_pop = 1e5, 10 iterations: {dt:.1f} s "
        f"({dt / 10:.2f} s/iteration)"
    )


def tracking_table(
    init, divergence, ds, seeds, *, m0=0.2, V0=10.0, T=30, n_pop=200_000, mixing=0.3
):
    """RMS over seeds of GAMP - SE per iteration; print the worst iteration per d."""
    from theory.attention.finite_d.gamp import run_gamp
    from theory.attention.finite_d.problem import make_problem
    from theory.attention.finite_d.state_evolution import large_d_gram, state_evolution

    t = time.perf_counter()
    se = state_evolution(
        2.0,
        P03,
        T,
        gram=large_d_gram(init, m0=m0),
        V0=V0,
        mixing=mixing,
        n_pop=n_pop,
        rng=123,
        divergence=divergence,
    ).history
    dt = time.perf_counter() - t
    print(
        f"\n{init} start (m0={m0 if init == 'positional' else '-'}, V0={V0}), divergence="
        f"{divergence}, mixing {mixing}, {T} iterations, SE n_pop {n_pop} ({dt:.0f} s); "
        f"SE end q {se['q'][-1]:.5f} m {se['m'][-1]:.5f} theta {se['theta'][-1]:.5f} "
        f"V {se['V'][-1]:.4f}"
    )
    print(
        f"{'d':>6} {'seeds':>5}  max_t RMS|GAMP-SE|: {'q':>8} {'m':>8} {'theta':>8} "
        f"{'V (rel)':>8}   x sqrt(d): q, m, theta, V"
    )
    for d in ds:
        dev = []
        for seed in range(seeds):
            pb = make_problem(2.0, P03, d, seed, n_test=2)
            Q0 = np.full(d, m0) if init == "positional" else None
            h = run_gamp(
                2.0,
                init=init,
                problem=pb,
                mixing=mixing,
                max_iter=T,
                tol=0.0,
                V0=V0,
                channel="effective",
                prox_mode="global",
                divergence=divergence,
                Q0=Q0,
                restarts=0,
            ).history
            dev.append(
                [h["q"] - se["q"], h["m"] - se["m"], h["theta"] - se["theta"], h["V"] / se["V"] - 1]
            )
        rms = np.sqrt((np.array(dev)[:, :, 1:] ** 2).mean(0)).max(1)
        print(
            f"{d:6d} {seeds:5d}  {'':20} {rms[0]:8.5f} {rms[1]:8.5f} {rms[2]:8.5f} "
            f"{rms[3]:8.5f}   " + " ".join(f"{v * np.sqrt(d):.3f}" for v in rms),
            flush=True,
        )


# ------------------------------------------------------------------ positional branch, issue 3

POS = dict(alpha=2.0, omega=0.3, m0=0.26, V0=11.0, mixing=0.15)
P_POS = ERMParams(omega=POS["omega"])


def divergence_table(
    n_big=300_000, ns=(500, 1000, 2000, 4000), deltas=(0.05, 0.1, 0.2, 0.3, 0.4), reps=6
):
    """V-hat estimators against the replica value at the positional fixed point (alpha = 2,
    omega = 0.3): a synthetic population of the large-d channel (w = s m + sqrt(q) xi, h* =
    sigma eta, theta = 0 on this branch).  Bias from one population of n_big, relative error
    at GAMP's sample sizes n from `reps` independent populations."""
    from theory import attention as A
    from theory.attention.finite_d.gamp import fd_divergence, stein_hats
    from theory.attention.proximal import prox_rows as prox

    p = A.ERMParams(omega=POS["omega"])
    t = time.perf_counter()
    fp = A.fixed_point(POS["alpha"], p, branch="positional", diagnostics=True, tol=1e-8)
    q, m, V, alpha = fp.q, fp.m, fp.V, POS["alpha"]
    vh, vj = fp.Vhat, fp.metadata["Vhat_jac"]
    print(
        f"\nreplica positional fixed point ({time.perf_counter() - t:.0f} s): q {q:.6f} m "
        f"{m:.6f} V {V:.4f}; Vhat (Stein form, jumps included) {vh:.6f}, mean per-sample "
        f"Jacobian {vj:.6f} ({vj / vh - 1:+.2%}): jump part {vh - vj:.6f}"
    )

    def population(n, rng):
        w = np.sqrt(q) * rng.standard_normal((n, 2)) + np.array([1.0, -1.0]) * m
        hs = p.sigma * rng.standard_normal((n, 2))
        tt = A.teacher_diag(hs, p)
        return w, hs, np.full(n, p.s2), tt[:, 0], tt[:, 1]

    def estimates(n, rng, deltas):
        w, hs, k, a, b = population(n, rng)
        px = prox(w, V, k, a, b)
        jac = (np.trace(px.jac, axis1=1, axis2=2) - 2) / V
        g = (px.x - w) / V
        st, _ = stein_hats(
            w - np.array([1.0, -1.0]) * m, hs, g, q, 0.0, p.rho, alpha, -alpha * jac.mean()
        )
        out = dict(jacobian=-alpha * jac, stein=st)
        for dl in deltas:
            out[dl] = -alpha * fd_divergence(w, V, k, a, b, dl, px=px)[0]
        return out, jac

    t = time.perf_counter()
    e, jac = estimates(n_big, np.random.default_rng(1), deltas)
    print(
        f"bias, one population of {n_big} ({time.perf_counter() - t:.0f} s): jacobian "
        f"{e['jacobian'].mean() / vh - 1:+.4f} rel., stein {e['stein'] / vh - 1:+.4f}"
    )
    print(
        f"{'delta':>6} {'Vhat_fd/Vhat - 1':>18} {'(jump part: fd - jac)/(replica jump) - 1':>42}"
        f" {'s.e.':>7}  per-sample sd of fd-jac"
    )
    for dl in deltas:
        j = e[dl] + alpha * jac
        print(
            f"{dl:6.3f} {e[dl].mean() / vh - 1:+18.4f} {j.mean() / (vh - vj) - 1:+42.3f} "
            f"{j.std() / np.sqrt(n_big) / abs(vh - vj):7.3f}  {j.std():.4f}",
            flush=True,
        )
    print(
        f"\nrelative error of Vhat at sample size n, RMS over {reps} populations (seeds "
        f"10..), against the replica Vhat; 'jacobian' is biased by {vj / vh - 1:+.2%}"
    )
    print(
        f"{'n':>6} {'jacobian':>9} {'stein':>9} "
        + " ".join(f"fd {dl:<5}" for dl in deltas)
        + "  fd default"
    )
    from theory.attention.finite_d.gamp import default_fd_delta

    for n in ns:
        errs = {key: [] for key in ["jacobian", "stein", *deltas, "default"]}
        for r in range(reps):
            dd = default_fd_delta(n)
            e, _ = estimates(n, np.random.default_rng(10 + r), (*deltas, dd))
            for key in ("jacobian", "stein", *deltas):
                errs[key].append(np.mean(e[key]) / vh - 1)
            errs["default"].append(np.mean(e[dd]) / vh - 1)
        rms = {key: np.sqrt(np.mean(np.square(v))) for key, v in errs.items()}
        print(
            f"{n:6d} {rms['jacobian']:9.4f} {rms['stein']:9.4f} "
            + " ".join(f"{rms[dl]:8.4f}" for dl in deltas)
            + f"  {rms['default']:.4f} (delta {default_fd_delta(n):.3f})",
            flush=True,
        )


def se_linearisation(h=1e-4):
    """Eigenvalues of the Jacobian of the undamped replica map (q, m, theta, V) -> F at the
    positional fixed point (alpha = 2, omega = 0.3; central differences, split rule), and the
    multipliers 1 - mu (1 - lambda) of the damped map at mixing mu."""
    from theory import attention as A
    from theory.attention.finite_d.state_evolution import state_evolution_onetime

    p = A.ERMParams(omega=POS["omega"])
    fp = A.fixed_point(POS["alpha"], p, branch="positional", tol=1e-9)
    x0 = dict(q=fp.q, m=fp.m, theta=0.0, V=fp.V)
    names = ("q", "m", "theta", "V")
    rule = A.make_rule("split")

    def F(x):
        out = state_evolution_onetime(x, POS["alpha"], p, 1, mixing=1.0, rule=rule).history
        return np.array([out[k][1] for k in names])

    f0 = F(x0)
    print(
        f"\nundamped replica map at the positional fixed point: |F(x*) - x*| = "
        f"{np.abs(f0 - np.array([x0[k] for k in names])).max():.1e}"
    )
    J = np.zeros((4, 4))
    for j, k in enumerate(names):
        step = h * max(abs(x0[k]), 1.0 if k == "theta" else 1e-3)
        xp, xm = dict(x0), dict(x0)
        xp[k] += step
        xm[k] -= step
        if k == "theta":  # F is even in theta: the theta-row/column comes from one side
            J[:, j] = (F(xp) - f0) / step
        else:
            J[:, j] = (F(xp) - F(xm)) / (2 * step)
    J[2, [0, 1, 3]] = 0.0  # theta = 0 is invariant (exact), theta -> (q, m, V) is second order
    J[[0, 1, 3], 2] = 0.0
    lam = np.linalg.eigvals(J)
    print("Jacobian (rows F_q, F_m, F_theta, F_V; columns q, m, theta, V):")
    print(np.array2string(J, precision=4))
    print("eigenvalues of the undamped map:", np.array2string(np.sort_complex(lam), precision=4))
    for mu in (0.15, 0.2, 0.3):
        lm = 1 - mu * (1 - lam)
        print(
            f"damped map, mixing {mu}: multipliers "
            f"{np.array2string(np.sort_complex(lm), precision=4)}; slowest 1/(1 - |lambda|) = "
            f"{1 / (1 - np.abs(lm).max()):.1f} iterations"
        )
    print(
        f"fixed point (mixing-independent): 1/(1 - lambda) = "
        f"{np.array2string(1 / (1 - np.sort_complex(lam)), precision=3)}"
    )
    return J, lam


def _store(path):
    """The runs of the positional study: a :class:`theory.store.Store` (``.jsonl``), one row per
    run keyed by its identifying fields (which the row repeats, for the reports)."""
    from theory.store import Store

    return Store(path)


def _positional_gamp(d, seed, problem, **kw):
    """GAMP (effective channel) on ``problem`` from the positional start Q0 = m0 1_d, V0."""
    from theory.attention.finite_d.gamp import run_gamp

    a, m0, V0 = (POS[k] for k in ("alpha", "m0", "V0"))
    return run_gamp(
        a,
        init="positional",
        problem=problem,
        V0=V0,
        channel="effective",
        Q0=np.full(d, m0),
        **kw,
    )


def _global_prox_runs(store, kind, d_seeds, divergences, keys, *, T, mixing):
    """T iterations of global-prox GAMP (restarts off) per (d, seed, divergence), each kept in
    ``store`` as it finishes (a rerun skips what is there)."""
    from theory.attention.finite_d.problem import make_problem

    for d, S in d_seeds:
        for seed in range(S):
            pb = None
            for div in divergences:
                key = dict(kind=kind, div=div, d=d, seed=seed, T=T, mixing=mixing)
                if key in store:
                    continue
                pb = pb or make_problem(POS["alpha"], P_POS, d, seed, n_test=2)
                t = time.perf_counter()
                r = _positional_gamp(
                    d,
                    seed,
                    pb,
                    mixing=mixing,
                    max_iter=T,
                    tol=0.0,
                    prox_mode="global",
                    divergence=div,
                    restarts=0,
                )
                store.put(key, dict(key, **{k: r.history[k] for k in keys}))
                print(f"{key}: {time.perf_counter() - t:.0f} s", flush=True)


def positional_runs(
    path,
    ds=(250, 500, 1000, 2000),
    seeds=8,
    T=60,
    divergences=("fd", "jacobian"),
    n_pop=200_000,
    se_rngs=(123, 124),
):
    """GAMP (effective channel, global prox, restarts off) from Q0 = m0 1_d on the positional
    side, and its two-time state evolution from the large-d Gram (two SE populations, to see
    the SE's own Monte Carlo error), T iterations at fixed mixing.  Every run is kept in the
    store ``path`` (``.jsonl``) as it finishes (a rerun skips what is there)."""
    from theory.attention.finite_d.state_evolution import large_d_gram, state_evolution

    keys = ("q", "m", "theta", "V", "Vhat")
    store = _store(path)
    a, m0, V0, mix = (POS[k] for k in ("alpha", "m0", "V0", "mixing"))
    for r in se_rngs:
        for div in ("stein", "jacobian"):
            key = dict(kind="se", div=div, n_pop=n_pop, rng=r, T=T)
            if key in store:
                continue
            t = time.perf_counter()
            h = state_evolution(
                a,
                P_POS,
                T,
                gram=large_d_gram("positional", m0=m0),
                V0=V0,
                mixing=mix,
                n_pop=n_pop,
                rng=r,
                divergence=div,
            ).history
            store.put(key, dict(key, **{k: h[k] for k in keys}))
            print(f"{key}: {time.perf_counter() - t:.0f} s", flush=True)
    _global_prox_runs(store, "gamp", [(d, seeds) for d in ds], divergences, keys, T=T, mixing=mix)


def positional_fp_runs(
    path,
    ds=(250, 500, 1000, 2000, 4000),
    seeds=(8, 8, 8, 8, 4),
    T=150,
    mixing=0.25,
    divergences=("fd", "jacobian"),
):
    """GAMP (effective channel, global prox, restarts off) from the positional start run to
    its fixed point (mixing 0.25: damped multipliers -0.61 and 0.85 from the SE linearisation,
    0.85^150 ~ 1e-11), kept in the store ``path`` as each run finishes."""
    _global_prox_runs(
        _store(path),
        "fp",
        list(zip(ds, seeds)),
        divergences,
        ("q", "m", "theta", "V", "Vhat", "residual"),
        T=T,
        mixing=mixing,
    )


def positional_auto_runs(path, ds=(250, 500, 1000, 2000), seeds=6, mixing=0.2, tol=1e-7):
    """GAMP to convergence in its default prox mode ("auto": global prox for 30 iterations,
    then warm, which converges), effective channel, per-sample Jacobian, restarts on, from the
    positional start Q0 = m0 1_d, V0 = 11; kept under kind "auto" in the store ``path`` (the
    same report as :func:`positional_fp_report`)."""
    from theory.attention.finite_d.problem import make_problem

    keys = ("q", "m", "theta", "V", "Vhat", "residual")
    store = _store(path)
    for d in ds:
        for seed in range(seeds):
            key = dict(kind="auto", div="jacobian", d=d, seed=seed, mixing=mixing)
            if key in store:
                continue
            pb = make_problem(POS["alpha"], P_POS, d, seed, n_test=2)
            t = time.perf_counter()
            r = _positional_gamp(d, seed, pb, mixing=mixing, tol=tol, divergence="jacobian")
            row = dict(key, status=r.status, restarts=r.metadata["restarts"])
            store.put(key, dict(row, **{k: r.history[k] for k in keys}))
            print(
                f"{key}: {r.status} {r.iterations} it, restarts {r.metadata['restarts']}, "
                f"{time.perf_counter() - t:.0f} s",
                flush=True,
            )


def positional_fp_report(path, T=150, mixing=0.25, t_end=20, prefix="fp"):
    """GAMP's end state (mean of the last ``t_end`` iterations) against the replica fixed
    point (the replica quadrature: no SE Monte Carlo error): RMS over seeds, x sqrt(d), mean +-
    s.e., log-log slope in d.  Reference V: the replica V for "fd" (full divergence), and
    sigma^2/(lam + sigma^2 Vhat_jac) for "jacobian" (GAMP's V with the per-sample Jacobian)."""
    from theory import attention as A

    rows_db = _store(path).rows()
    p = P_POS
    fp = A.fixed_point(POS["alpha"], p, branch="positional", diagnostics=True, tol=1e-8)
    V_jac = p.s2 / (p.lam + p.s2 * fp.metadata["Vhat_jac"])
    keys = ("q", "m", "theta", "V")
    print(
        f"\nreplica positional fixed point: q {fp.q:.6f} m {fp.m:.6f} theta 0 V {fp.V:.4f} "
        f"(with the Jacobian Vhat: V {V_jac:.4f})"
    )
    out = {}
    for div in ("fd", "jacobian"):
        ref = np.array([fp.q, fp.m, 0.0, fp.V if div == "fd" else V_jac])
        mine = [h for h in rows_db if h["kind"] == prefix and h["div"] == div]
        if prefix == "fp":
            mine = [h for h in mine if h["T"] == T and h["mixing"] == mixing]
        ds = sorted({h["d"] for h in mine})
        if not ds:
            continue
        how = (
            f"mixing {mixing}, {T} iterations"
            if prefix == "fp"
            else "default prox mode, mixing 0.2 with restarts, to tol 1e-7"
        )
        print(
            f"GAMP divergence={div}, {how}, end = mean of the last {t_end}; deviation from "
            f"the replica fixed point (V relative)"
        )
        print(
            f"{'d':>5} {'S':>3} | RMS: q        m        theta    V(rel)  | x sqrt(d)"
            f"                   | mean +- s.e.: q, m, theta, V | end residual"
        )
        rows = []
        for d in ds:
            runs = [h for h in mine if h["d"] == d]
            E = np.array([[np.mean(np.asarray(h[k], float)[-t_end:]) for k in keys] for h in runs])
            D = E - ref
            D[:, 3] = E[:, 3] / ref[3] - 1
            rms = np.sqrt((D**2).mean(0))
            mean, sem = D.mean(0), D.std(0, ddof=1) / np.sqrt(len(runs))
            res = np.median([np.asarray(h["residual"], float)[-1] for h in runs])
            rows.append((d, rms))
            print(
                f"{d:5d} {len(runs):3d} | "
                + " ".join(f"{x:8.5f}" for x in rms)
                + " | "
                + " ".join(f"{x * np.sqrt(d):6.3f}" for x in rms)
                + " | "
                + " ".join(f"{mu:+.4f}+-{se:.4f}" for mu, se in zip(mean, sem))
                + f" | {res:.1e}",
                flush=True,
            )
        if len(rows) > 1:
            ld = np.log([r[0] for r in rows])
            sl = [np.polyfit(ld, np.log([r[1][i] for r in rows]), 1)[0] for i in range(4)]
            print("  log-log slope in d: " + ", ".join(f"{k} {v:+.2f}" for k, v in zip(keys, sl)))
        out[div] = rows
    return out


def positional_report(path, T=60, n_pop=200_000, se_rngs=(123, 124), t_end=10):
    """Tables from :func:`positional_runs`: per d and divergence, RMS over seeds of the worst
    iteration's |GAMP - SE| and of the mean over the last ``t_end`` iterations (near the fixed
    point), times sqrt(d); the mean (signed) deviation there with its standard error; the
    log-log slope of the RMS in d; the SE's own Monte Carlo error (two populations)."""
    store = _store(path)
    keys = ("q", "m", "theta", "V")

    def dev(h, s):
        return np.array(
            [
                np.asarray(h[k]) - np.asarray(s[k])
                if k != "V"
                else np.asarray(h[k]) / np.asarray(s[k]) - 1
                for k in keys
            ]
        )[:, 1:]

    out = {}
    for div, se_div in (("fd", "stein"), ("jacobian", "jacobian")):
        ses = [store.get(dict(kind="se", div=se_div, n_pop=n_pop, rng=r, T=T)) for r in se_rngs]
        if any(s is None for s in ses):
            continue
        se = {k: np.mean([s[k] for s in ses], axis=0) for k in keys}
        dse = dev(ses[0], ses[1]) / 2  # error of the average of two populations ~ half diff
        print(
            f"\nGAMP divergence={div} vs SE divergence={se_div} (mean of {len(ses)} "
            f"populations of {n_pop}); positional start m0 {POS['m0']}, V0 {POS['V0']}, "
            f"mixing {POS['mixing']}, {T} iterations.  SE Monte Carlo error (half the "
            f"difference of the two populations): worst iteration "
            + ", ".join(f"{k} {np.abs(dse[i]).max():.1e}" for i, k in enumerate(keys))
            + "; last iterations "
            + ", ".join(f"{k} {np.abs(dse[i, -t_end:]).mean():.1e}" for i, k in enumerate(keys))
        )
        print(
            f"{'d':>5} {'S':>3} | worst-t RMS:  q        m        theta    V(rel)  | x sqrt(d)"
            f"                   | end RMS: q        m        theta    V(rel)  | x sqrt(d)"
            f"                   | end mean +- s.e. (m, V)"
        )
        mine = [h for h in store.rows() if h["kind"] == "gamp" and h["div"] == div and h["T"] == T]
        ds = sorted({h["d"] for h in mine})
        rows = []
        for d in ds:
            runs = [h for h in mine if h["d"] == d]
            D = np.array([dev(h, se) for h in runs])  # (S, 4, T)
            worst = np.sqrt((D**2).mean(0)).max(-1)
            endv = D[:, :, -t_end:].mean(-1)  # (S, 4)
            end = np.sqrt((endv**2).mean(0))
            mean, sem = endv.mean(0), endv.std(0, ddof=1) / np.sqrt(len(runs))
            rows.append((d, worst, end))

            def f(v):
                return " ".join(f"{x:8.5f}" for x in v)

            def g(v, d=d):
                return " ".join(f"{x * np.sqrt(d):6.3f}" for x in v)

            print(
                f"{d:5d} {len(runs):3d} | {f(worst)} | {g(worst)} | {f(end)} | {g(end)} | "
                f"{mean[1]:+.4f}+-{sem[1]:.4f} {mean[3]:+.4f}+-{sem[3]:.4f}",
                flush=True,
            )
        if len(rows) > 1:
            ld = np.log([r[0] for r in rows])
            for name, j in (("worst-t", 1), ("end", 2)):
                sl = [np.polyfit(ld, np.log([r[j][i] for r in rows]), 1)[0] for i in range(4)]
                print(
                    f"  log-log slope in d, {name}: "
                    + ", ".join(f"{k} {s_:+.2f}" for k, s_ in zip(keys, sl))
                )
        out[div] = rows
    return out


if __name__ == "__main__":
    main()
