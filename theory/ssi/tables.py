"""The Mehler/Chebyshev tables of the positional-semantic model (the ``ps`` risk engine of
``theory.ssi.risk``; docs/ssi.md eq. 15 and section 8).

With S(z) = softmax_row(z z^T) (L = 2, P_1 = -P_2, identity reduction) the risk is

    R(e, m) = E||g||^2 + F2(e) - 2 (1 - omega) X(e, m) - 2 omega <A, F1(e)>,

and every piece is tabulated once, independently of (a, omega): X as a Mehler series in m whose
coefficients are Chebyshev interpolants in e, F1 and F2 as Chebyshev interpolants.  The tables
are kept on disk under :func:`theory.store.cache_dir` (an :class:`theory.store.ArrayStore`
keyed by every parameter and a hash of the table code), so they are built once per machine.
"""

from __future__ import annotations

import hashlib
import inspect
import math
from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike

from theory.gauss import gh_rule
from theory.ssi._kernels import attention_jac, attention_scores, he_multi, multi_indices
from theory.store import ArrayStore, cache_dir

__all__ = ["PSTables", "ps_tables"]

PS_KMAX_K = 16  # Mehler order of the K tables (K only enters through gamma K / 2)
PS_KMAX = 40  # Mehler truncation order (Parseval tail of S beyond 40: 9e-7)
PS_NCHEB = 40  # Chebyshev nodes in e on [-1, 1]
PS_NODES = 100  # 2-D GH nodes per dimension for the tables


class PSTables:
    """Exact-to-truncation tables of the positional-semantic risk along e in [-1, 1] (a- and
    omega-independent; docs/ssi.md eq. 15).

    X(e, m) = E<S(xi), S(z)> = sum_j m^j c_j(e),  c_j(e) = sum_{|k| = j} <S_k, F_k(e)> / k!
    (Mehler; S_k = E[S(xi) He_k(xi)], F_k(e) = E[S(v(e) + zeta) He_k(zeta)], v = (e, -e)),
    truncated at j <= kmax (error <= sqrt(tail_S tail_F) <= ~1e-6 at |m| = 1 for kmax = 40, the
    Parseval tails being computed in ``tail``).  c_j(e), F1(e) = E S(v + zeta) and
    F2(e) = E||S(v + zeta)||^2 are stored as Chebyshev interpolants on ``ncheb`` nodes (smooth,
    Gaussian-smoothed functions: spectral accuracy); e-derivatives are those of the interpolants.
    """

    def __init__(self, kmax=PS_KMAX, ncheb=PS_NCHEB, n=PS_NODES):
        from numpy.polynomial import chebyshev as C

        x, w = gh_rule(n)
        Z = np.stack(np.meshgrid(x, x, indexing="ij"), -1).reshape(-1, 2)
        W = np.outer(w, w).ravel()
        ks = multi_indices(2, kmax)
        deg = np.array([sum(k) for k in ks])
        kfac = np.array([math.factorial(k[0]) * math.factorial(k[1]) for k in ks], float)
        H = he_multi(Z, ks) * W[:, None]  # (N, nk)
        S0 = attention_scores(Z).reshape(-1, 4)
        Shat = np.einsum("na,nk->ka", S0, H)  # (nk, 4)
        self.ES = Shat[0].reshape(2, 2)
        self.ESS = float(W @ np.sum(S0**2, axis=1))
        tail_S = self.ESS - float(np.sum(np.sum(Shat**2, axis=1) / kfac))
        nodes = np.cos(np.pi * (np.arange(ncheb) + 0.5) / ncheb)
        cvals = np.zeros((ncheb, kmax + 1))
        F1 = np.zeros((ncheb, 4))
        F2 = np.zeros(ncheb)
        tails = []
        for i, e in enumerate(nodes):
            Se = attention_scores(Z + np.array([e, -e])[None]).reshape(-1, 4)
            Fhat = np.einsum("na,nk->ka", Se, H)
            contrib = np.sum(Shat * Fhat, axis=1) / kfac
            cvals[i] = np.bincount(deg, weights=contrib, minlength=kmax + 1)
            F1[i] = Fhat[0]
            F2[i] = W @ np.sum(Se**2, axis=1)
            tails.append(F2[i] - float(np.sum(np.sum(Fhat**2, axis=1) / kfac)))
        # ---- K tables (Mehler to order kmax_k): see K()
        kk = PS_KMAX_K
        nkk = (kk + 1) * (kk + 2) // 2  # multi_indices is ordered by total degree
        Hk = H[:, :nkk]
        degk = deg[:nkk]
        kfk = kfac[:nkk]
        SS = (S0[:, :, None] * S0[:, None, :]).reshape(-1, 16)
        GSS = np.einsum("na,nk->ka", SS, Hk)  # (nkk, 16)
        Sk = Shat[:nkk]
        kvals = []
        for e in nodes:
            Ae, dAe = attention_jac(Z + np.array([e, -e])[None])
            f = Ae.reshape(-1, 4)
            D = np.moveaxis(dAe, 3, 1).reshape(-1, 2, 4)  # (N, l, a)
            Q = np.einsum("nla,nlb->nab", D, D).reshape(-1, 16)
            fD = np.einsum("na,nla->nl", f, D)
            T = np.einsum("nla,nl->na", D, fD)
            V = np.sum(fD**2, axis=1)
            Qh = np.einsum("na,nk->ka", Q, Hk)  # (nkk, 16)
            Th = np.einsum("na,nk->ka", T, Hk)  # (nkk, 4)
            K1 = np.bincount(degk, np.sum(GSS * Qh, axis=1) / kfk, minlength=kk + 1)
            Q4 = Qh.reshape(-1, 4, 4)
            K2 = np.stack(
                [
                    np.bincount(
                        degk, np.einsum("ka,ka->k", Sk, Q4[:, :, b]) / kfk, minlength=kk + 1
                    )
                    for b in range(4)
                ],
                axis=1,
            )
            K3 = np.bincount(degk, np.sum(Sk * Th, axis=1) / kfk, minlength=kk + 1)
            kvals.append(np.concatenate([K1, K2.ravel(), K3, Qh[0], Th[0], [W @ V]]))
        self.kk = kk
        fit = lambda y: C.chebfit(nodes, y, ncheb - 1)
        self.Ktab = fit(np.array(kvals))
        self.c = fit(cvals)  # (ncheb, kmax+1) Chebyshev coefficients per power j
        self.F1 = fit(F1)
        self.F2 = fit(F2)
        self.C = C
        self.kmax = kmax
        self.tail = math.sqrt(max(tail_S, 0.0) * max(max(tails), 0.0))
        self.params = dict(kmax=kmax, ncheb=ncheb, n=n, truncation_bound=self.tail)

    def _ev(self, coef, e, der=0):
        C = self.C
        if der:
            key = (id(coef), der)
            cache = self.__dict__.setdefault("_der", {})
            if key not in cache:
                cache[key] = C.chebder(coef, der, axis=0)
            coef = cache[key]
        return C.chebval(e, coef)

    def X(self, e: ArrayLike, m: ArrayLike, de: int = 0, dm: int = 0) -> np.ndarray:
        """d_e^de d_m^dm X(e, m) (e, m scalars or broadcastable arrays)."""
        e = np.asarray(e, float)
        m = np.asarray(m, float)
        cj = self._ev(self.c, e, de)  # (kmax+1, *shape)
        j = np.arange(self.kmax + 1).reshape((-1,) + (1,) * e.ndim)
        if dm == 0:
            pw = m[None] ** j
        elif dm == 1:
            pw = j * m[None] ** np.clip(j - 1, 0, None) * (j >= 1)
        else:
            pw = j * (j - 1) * m[None] ** np.clip(j - 2, 0, None) * (j >= 2)
        return np.sum(cj * pw, axis=0)

    def fast_point(
        self, e: float, m: float, omega: float, A: np.ndarray
    ) -> tuple[float, float, float, float]:
        """(R, dR/de, dR/dm, K) at one scalar point: one Chebyshev basis evaluation shared by
        every table (same numbers as :meth:`eval` and :meth:`K`; used by the ODE)."""
        C = self.C
        st = self.__dict__.get("_stack")
        if st is None:
            dc = C.chebder(self.c, 1, axis=0)
            dF1 = C.chebder(self.F1, 1, axis=0)
            dF2 = C.chebder(self.F2, 1, axis=0)
            cols = [self.c, dc, self.F1, dF1, self.F2[:, None], dF2[:, None], self.Ktab]
            # pad derivative tables to the same number of rows
            nr = self.c.shape[0]
            cols = [np.vstack([x, np.zeros((nr - x.shape[0], x.shape[1]))]) for x in cols]
            st = np.hstack(cols)
            self._stack = st
        nr = st.shape[0]
        v = C.chebvander(float(e), nr - 1)[0] @ st
        k1 = self.kmax + 1
        c, dc = v[:k1], v[k1 : 2 * k1]
        F1, dF1 = v[2 * k1 : 2 * k1 + 4], v[2 * k1 + 4 : 2 * k1 + 8]
        F2, dF2 = v[2 * k1 + 8], v[2 * k1 + 9]
        kt = v[2 * k1 + 10 :]
        A4 = np.asarray(A, float).ravel()
        j = np.arange(k1)
        mp = float(m) ** j
        mp1 = j * float(m) ** np.clip(j - 1, 0, None)
        w1 = 2 * (1 - omega)
        egg = (
            (1 - omega) ** 2 * self.ESS
            + 2 * omega * (1 - omega) * float(self.ES.ravel() @ A4)
            + omega**2 * float(A4 @ A4)
        )
        R = egg + F2 - w1 * (c @ mp) - 2 * omega * (A4 @ F1)
        Re = dF2 - w1 * (dc @ mp) - 2 * omega * (A4 @ dF1)
        Rm = -w1 * (c @ mp1)
        return float(R), float(Re), float(Rm), self._K_from(kt, m, omega, A4)

    def _K_from(self, v, m, omega, A4):
        kk = self.kk
        K1, K2, K3 = (
            v[: kk + 1],
            v[kk + 1 : 5 * (kk + 1)].reshape(kk + 1, 4),
            v[5 * (kk + 1) : 6 * (kk + 1)],
        )
        rest = v[6 * (kk + 1) :]
        EQ, ET, EV = rest[:16].reshape(4, 4), rest[16:20], rest[20]
        pw = float(m) ** np.arange(kk + 1)
        w = omega
        val = (
            (1 - w) ** 2 * (pw @ K1)
            + 2 * (1 - w) * (w * (pw @ K2 @ A4) - pw @ K3)
            + w**2 * A4 @ EQ @ A4
            - 2 * w * (A4 @ ET)
            + EV
        )
        return 4.0 * float(val)

    def K(self, e: float, m: float, omega: float, A: np.ndarray) -> float:
        """K(e, m) = E sum_l (dl/dz_l)^2 of the positional-semantic model by Mehler's formula (order
        PS_KMAX_K): with D_l = df/dz_l, Q_ab = sum_l D_la D_lb, T_a = sum_l D_la (f.D_l),
        V = sum_l (f.D_l)^2,
        K/4 = (1-w)^2 E[S_a S_b(xi) Q_ab(z)] + 2 (1-w) (w A_b E[S_a(xi) Q_ab(z)] - E[S_a T_a])
              + w^2 A.E[Q].A - 2 w A.E[T] + E[V]."""
        return self._K_from(
            self.C.chebval(float(e), self.Ktab), m, omega, np.asarray(A, float).ravel()
        )

    def eval(
        self, e: ArrayLike, m: ArrayLike, omega: float, A: np.ndarray, second: bool = True
    ) -> dict[str, np.ndarray]:
        """R, dR/de (reduced e), dR/dm and (``second``) the second derivatives of the
        positional-semantic risk (a dict of arrays shaped like the broadcast of e and m)."""
        A4 = np.asarray(A, float).ravel()
        F1 = lambda d: np.tensordot(A4, self._ev(self.F1, e, d), axes=(0, 0))
        F2 = lambda d: self._ev(self.F2, e, d)
        egg = (
            (1 - omega) ** 2 * self.ESS
            + 2 * omega * (1 - omega) * float(self.ES.ravel() @ A4)
            + omega**2 * float(A4 @ A4)
        )
        w1 = 2 * (1 - omega)
        out = dict(
            R=egg + F2(0) - w1 * self.X(e, m) - 2 * omega * F1(0),
            Re=F2(1) - w1 * self.X(e, m, de=1) - 2 * omega * F1(1),
            Rm=-w1 * self.X(e, m, dm=1),
        )
        if second:
            out.update(
                Ree=F2(2) - w1 * self.X(e, m, de=2) - 2 * omega * F1(2),
                Rem=-w1 * self.X(e, m, de=1, dm=1),
                Rmm=-w1 * self.X(e, m, dm=2),
            )
        return out


_PS_FIELDS = ("c", "F1", "F2", "Ktab", "ES", "ESS", "kmax", "kk", "tail")


@lru_cache(maxsize=4)
def ps_tables(kmax: int = PS_KMAX, ncheb: int = PS_NCHEB, n: int = PS_NODES) -> PSTables:
    """Cached :class:`PSTables`: in memory, and on disk in an :class:`theory.store.ArrayStore`
    under :func:`theory.store.cache_dir` (keyed by every parameter, the package version and a
    hash of the table code; rebuilt if missing or unreadable, not stored if the folder is not
    writable).  Building takes ~5-10 s."""
    from numpy.polynomial import chebyshev as C

    from theory import __version__

    src = hashlib.sha1((inspect.getsource(PSTables) + inspect.getsource(attention_jac)).encode())
    key = dict(
        kmax=int(kmax),
        kmax_k=PS_KMAX_K,
        ncheb=int(ncheb),
        nodes=int(n),
        version=__version__,
        code=src.hexdigest()[:12],
    )
    store = ArrayStore(cache_dir(), "ps_tables")
    arrays = store.load(key)
    if arrays is not None and all(f in arrays for f in _PS_FIELDS):
        tb = PSTables.__new__(PSTables)
        for f in _PS_FIELDS:
            v = arrays[f]
            setattr(tb, f, v if v.ndim else v.item())
        tb.kmax, tb.kk = int(tb.kmax), int(tb.kk)
        tb.C = C
        tb.params = dict(
            kmax=kmax, ncheb=ncheb, n=n, truncation_bound=float(tb.tail), cache=str(store.path(key))
        )
        return tb
    tb = PSTables(kmax, ncheb, n)
    try:
        store.save(key, **{f: np.asarray(getattr(tb, f)) for f in _PS_FIELDS})
    except OSError:
        pass  # a read-only cache folder: the tables stay in memory
    return tb
