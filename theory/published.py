"""The numbers the two papers publish, in one immutable table (docs/published-vs-computed.md).

Each :class:`Published` record says where the number comes from: the paper (``"cui2024"``:
Cui, Behrens, Krzakala, Zdeborová, positional vs semantic ERM; ``"arnaboldi2025"``: Arnaboldi,
Loureiro, Stephan, Krzakala, Zdeborová, SGD in sequence single-index models), the figure, table
or file of the authors' public code (``ref``), and how it was obtained (``how``: ``"text"``
printed in the paper, ``"code"`` stored or hard-coded in the authors' public code, ``"read"``
read off a figure, with ``uncertainty`` the reading precision when known).  Data only: the
recomputations and the reasons for the differences are in docs/published-vs-computed.md.

>>> published("cui2024/alpha_c/omega=0.3").value
1.2410177405149914
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["PUBLISHED", "Published", "published", "published_values"]

#: The two papers, by the key used throughout the package, with their citation.
PAPERS = {
    "cui2024": "Cui, Behrens, Krzakala, Zdeborová, positional vs semantic learning "
    "(arXiv:2402.03902v2)",
    "arnaboldi2025": "Arnaboldi, Loureiro, Stephan, Krzakala, Zdeborová, SGD in sequence "
    "single-index models",
}
HOW = ("text", "code", "read")


@dataclass(frozen=True)
class Published:
    """One published number: ``key`` (unique, "<paper>/<quantity>/<parameters>"), ``paper``,
    ``ref`` (figure / table / file), ``quantity`` (this package's name for it), ``params``
    (read-only mapping), ``value``, ``uncertainty`` (None: not stated), ``how``, ``note``."""

    key: str
    paper: str
    ref: str
    quantity: str
    value: float
    params: Mapping = field(default_factory=dict, hash=False)
    uncertainty: float | None = None
    how: str = "code"
    note: str = ""

    def __post_init__(self):
        if self.paper not in PAPERS:
            raise ValueError(f"paper must be one of {tuple(PAPERS)}, got {self.paper!r}")
        if self.how not in HOW:
            raise ValueError(f"how must be one of {HOW}, got {self.how!r}")
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))


_CUI_CODE = "code: 02-toy_model_plots.ipynb"
_CUI_FP = "code: theory/repl_softmax_Mixed_sig0.5_lamb0.01_omega0.3{}.csv, alpha = 2"
_CUI_GD = "code: empirics/results_mean_standardA.csv (GD, d = 1000, 24 runs)"
_CUI_SCALING = "code: empirics/results_scaling.csv (GD, alpha = 1.5)"
_HIST = "paper, histogram task (text)"
_CUI_RANK2 = "code: the authors' rank-2 student results (appendix; GD, random init, 10 runs)"


def _c(key, ref, quantity, value, params=None, **kw) -> Published:
    return Published(f"cui2024/{key}", "cui2024", ref, quantity, value, params or {}, **kw)


def _a(key, ref, quantity, value, params=None, **kw) -> Published:
    return Published(
        f"arnaboldi2025/{key}", "arnaboldi2025", ref, quantity, value, params or {}, **kw
    )


# the authors' hard-coded threshold lists, drawn as lines on the phase diagram (stored there as
# theory['sigma-0.5']['spinodal']['alpha_cross'] and ['att-linear']['alpha_cross'])
_ALPHA_C = {
    0.0: 0.5480511155124588,
    0.1: 0.7071599112677189,
    0.15: 0.8180015676221762,
    0.2: 0.9277860822926854,
    0.25: 1.06,
    0.3: 1.2410177405149914,
    0.35: 1.4541109691229464,
    0.4: 1.7505718608649372,
    0.425: 1.93929723421423,
}
_ALPHA_L = {
    0.0: 0.7224524901475151,
    0.05: 0.7652803696599021,
    0.075: 0.8076328324972342,
    0.1: 0.8505675450846425,
    0.15: 0.941534866004223,
    0.2: 1.0714067387463304,
    0.25: 1.2254411566145098,
    0.275: 1.32705219011143,
    0.3: 1.4505799369795134,
    0.325: 1.5843728192149278,
    0.35: 1.749529526524848,
    0.38: 1.9932320281583897,
}

_RECORDS = [
    *(
        _c(f"alpha_c/omega={w:g}", _CUI_CODE + " (list 'spinodal')", "alpha_c", v, {"omega": w})
        for w, v in _ALPHA_C.items()
    ),
    *(
        _c(f"alpha_l/omega={w:g}", _CUI_CODE + " (list 'att-linear')", "alpha_l", v, {"omega": w})
        for w, v in _ALPHA_L.items()
    ),
    _c(
        "alpha_c_stored_phi/omega=0.3",
        "code: theory/repl_softmax_*_omega0.3{,_para}.csv",
        "alpha_c",
        1.262,
        {"omega": 0.3},
        note="linear interpolation of the stored Phi of the two branches (shared spec)",
    ),
    _c(
        "eps_g_lin/omega=0.3",
        "code: theory/theory.ipynb ('MSE of purely attentional model')",
        "eps_g_lin",
        0.00398091773693432 / 2,
        {"omega": 0.3},
        note="printed mse = 0.00398091773693432; eps_g = mse/2",
    ),
    # stored fixed points at alpha = 2 (eps_g = mse/2, eps_t = -Phi)
    *(
        _c(f"fp/{b}/{k}", _CUI_FP.format(suffix), k, v, {"alpha": 2.0})
        for b, suffix, vals in (
            (
                "semantic",
                "",
                dict(
                    q=0.11415017990617564,
                    V=12.327885683844869,
                    theta=0.15856055220203275,
                    eps_g=0.0027930868446673918 / 2,
                    eps_t=0.003599352337970492,
                ),
            ),
            (
                "positional",
                "_para",
                dict(
                    q=0.050012313500147836,
                    m=0.25856717789921435,
                    V=11.036146049061081,
                    eps_g=0.006980917367439443 / 2,
                    eps_t=0.004515268863535892,
                ),
            ),
        )
        for k, v in vals.items()
    ),
    # gradient descent at d = 1000, alpha = 2 (means of 24 runs)
    _c("gd/semantic/eps_g", _CUI_GD, "eps_g", 0.001443, {"alpha": 2.0, "d": 1000}),
    _c("gd/positional/eps_g", _CUI_GD, "eps_g", 0.003492, {"alpha": 2.0, "d": 1000}),
    _c(
        "gd/alpha_c",
        _CUI_GD,
        "alpha_c",
        1.38,
        {"omega": 0.3, "d": 1000},
        uncertainty=0.04,
        how="read",
        note="training-loss crossing between alpha = 1.34 and 1.42 (the GD grid)",
    ),
    # the whole GD table at d = 1000, omega = 0.3 (means of 24 runs; train/d is eps_t)
    *(
        _c(f"gd_table/{init}/alpha={a}/{q}", _CUI_GD, q, v, {"alpha": a, "d": 1000, "init": init})
        for a, init, *vals in (
            (0.5075, "positional", 0.003221, 0.001162, 0.2247, 0.0130),
            (0.5075, "semantic", 0.003567, 0.001382, 0.0242, 0.2311),
            (1.005, "positional", 0.003277, 0.002200, 0.2521, 0.0186),
            (1.005, "semantic", 0.002717, 0.002336, 0.0151, 0.4008),
            (1.2538, "positional", 0.003348, 0.002723, 0.2540, 0.0203),
            (1.2538, "semantic", 0.002343, 0.002732, 0.0113, 0.4714),
            (1.4196, "positional", 0.003392, 0.003136, 0.2574, 0.0201),
            (1.4196, "semantic", 0.002090, 0.002930, 0.0098, 0.5074),
            (2.0, "positional", 0.003492, 0.004585, 0.2618, 0.0325),
            (2.0, "semantic", 0.001443, 0.003652, 0.0065, 0.6340),
        )
        for q, v in zip(("eps_g", "eps_t", "m", "theta_over_sigma2"), vals, strict=True)
    ),
    # the alternative A = [[0.3, 0.7], [0.8, 0.2]]: the authors' stored eps_t crossings
    *(
        _c(
            f"alpha_c_otherA/omega={om}",
            "code: stored eps_t crossings, A = [[0.3, 0.7], [0.8, 0.2]]",
            "alpha_c",
            a,
            {"omega": om, "A": "0.3,0.7,0.8,0.2"},
            how="code",
        )
        for om, a in ((0.14, 0.57), (0.15, 0.84))
    ),
    # the rank-2 student (r = 2, r_t = 1), random init, GD, 10 runs, omega = 0.3
    *(
        _c(
            f"rank2/eps_g/alpha={a:g}",
            _CUI_RANK2,
            "eps_g",
            v,
            {"alpha": a, "omega": 0.3, "r": 2, "init": "random", "runs": 10},
        )
        for a, v in (
            (0.01, 0.00443),
            (1.0, 0.00302),
            (2.0, 0.00254),
            (2.33, 0.00137),
            (3.0, 0.00098),
            (3.67, 0.00058),
            (4.0, 0.00089),
        )
    ),
    # finite-size concentration, alpha = 1.5: theory lines and the largest d
    *(
        _c(f"scaling/{b}/theory", "d-scaling figure (theory line)", "eps_g", v, {"alpha": 1.5})
        for b, v in (("semantic", 0.00191), ("positional", 0.00346))
    ),
    _c("scaling/semantic/d500", _CUI_SCALING, "eps_g", 0.00202, {"alpha": 1.5, "d": 500}),
    _c("scaling/positional/d500", _CUI_SCALING, "eps_g", 0.00347, {"alpha": 1.5, "d": 500}),
    # the histogram task (10 runs each)
    *(
        _c(f"histogram/{k}/{b}", _HIST, q, v, {"runs": 10}, uncertainty=u, how="text")
        for k, q, b, v, u in (
            ("val_accuracy", "val_accuracy", "positional", 0.99885, 0.00045),
            ("val_accuracy", "val_accuracy", "semantic", 0.99894, 0.00117),
            ("dist_retrained", "distance frozen -> retrained", "positional", 0.612, 0.126),
            ("dist_retrained", "distance frozen -> retrained", "semantic", 0.465, 0.237),
            ("dist_init", "distance init -> frozen", "positional", 158.9, 4.4),
            ("dist_init", "distance init -> frozen", "semantic", 163.7, 8.9),
        )
    ),
    # ---------------------------------------------------------------- Arnaboldi et al.
    # Hessians at the origin printed on the panels ('trace' reduction, L = 2, P1 = -P2)
    *(
        _a(f"hessian/{t}/pe/{k}", ref, q, v, {"L": 2, "pe": "opposite"}, how="text", note=n)
        for t, k, ref, q, v, n in (
            ("he2+he2", "H_mm", "Fig. 1 (panel)", "d2R/dm2 at 0", -2.2, ""),
            ("he2+he2", "H_ee", "Fig. 1 (panel)", "d2R/de2 at 0", 2.7, "'positive curvature in e'"),
            ("he4", "H_ee", "Fig. 2 (panel)", "d2R/de2 at 0", -1.1, "4/3 + He4(z1) + 2 He4(z2)"),
        )
    ),
    _a("flatness/he4/no_pe", "Fig. 2", "kappa", 4, {"pe": "none"}, how="text"),
    _a("flatness/he4/pe", "Fig. 2", "kappa", 2, {"pe": "opposite"}, how="text"),
    # the (a, omega) phase diagram at a = 1 (only omega_trans = 0.64 is in the text)
    *(
        _a(f"boundary/a=1/{k}", ref, q, v, {"a": 1.0}, how=how)
        for k, ref, q, v, how in (
            ("unique_semantic", "Fig. 4", "omega_positional_min_appears", 0.475, "read"),
            ("steepest_switch", "Fig. 4 and text", "omega_steepest_switch", 0.64, "text"),
            ("global_switch", "Fig. 4", "omega_global_switch", 0.735, "read"),
            ("semantic_min_disappears", "Fig. 4", "omega_semantic_min_disappears", 0.84, "read"),
        )
    ),
    # single figure readings
    *(
        _a(k, ref, q, v, params, how="read")
        for k, ref, q, v, params in (
            *(
                (
                    f"gain/fig3/L={L}",
                    "Fig. 3",
                    "nu_untied/nu_tied",
                    g,
                    {"L": L, "gamma_tied": "2e-4 sqrt(L)", "gamma_untied": 2e-4, "d": 1000},
                )
                for L, g in zip(range(1, 8), (1, 2.5, 4.8, 6.6, 9.6, 13.6, 19.6), strict=True)
            ),
            *(
                (f"gain/fig7/L={L}", "Fig. 7", "nu_untied/nu_tied", g, {"L": L, "d": 3000})
                for L, g in ((2, 1.9), (5, 5.3), (10, 8.3), (15, 11.5), (20, 14))
            ),
            *(
                (f"crossing/fig10/{net}/L={L}", "Fig. 10", "crossing steps", t, {"L": L, "d": 1000})
                for net, L, t in (
                    ("square", 3, 3.5e6),
                    ("square", 9, 1.8e7),
                    ("attention", 3, 8e6),
                    ("attention", 9, 1.05e7),
                )
            ),
            (
                "gain/fig8/L=32",
                "Fig. 8",
                "nu_untied/nu_tied",
                33.8,
                {"L": 32, "target": "sum z/sqrt(L)", "gamma": 1.5e-2, "d": 1000},
            ),
            (
                "gain/fig9/L=180",
                "Fig. 9",
                "nu_untied/nu_tied",
                4.7,
                {"L": 180, "gamma_tied": 0.05, "gamma_untied": "0.05 L", "d": 3000},
            ),
            (
                "fraction_positional/a=1/omega=0.64",
                "Fig. 5 right",
                "fraction ending positional",
                0.47,
                {"a": 1.0, "d": 1000, "gamma": 0.05, "runs": 64},
            ),
            (
                "pathological/tied_m",
                "Fig. 11",
                "final abs(m) of the tied network",
                0.03,
                {"target": "z1 - z2", "gamma": 5e-3, "d": 1000},
            ),
        )
    ),
]

#: every published number, in the order of docs/published-vs-computed.md
PUBLISHED: tuple[Published, ...] = tuple(_RECORDS)
_BY_KEY = {r.key: r for r in PUBLISHED}
if len(_BY_KEY) != len(PUBLISHED):  # pragma: no cover - a typo in the table above
    raise RuntimeError("duplicate keys in theory.published")


def published(key: str) -> Published:
    """The record of ``key`` (see :data:`PUBLISHED`); ValueError naming close keys if unknown."""
    try:
        return _BY_KEY[key]
    except KeyError:
        import difflib

        near = difflib.get_close_matches(key, _BY_KEY, n=3)
        raise ValueError(
            f"no published number with key {key!r}" + (f"; did you mean {near}?" if near else "")
        ) from None


def published_values(
    paper: str | None = None, prefix: str = "", quantity: str | None = None
) -> tuple[Published, ...]:
    """The records of ``paper`` (None: both) whose key starts with ``paper/prefix`` and whose
    quantity is ``quantity`` (None: any)."""
    if paper is not None and paper not in PAPERS:
        raise ValueError(f"paper must be one of {tuple(PAPERS)} or None, got {paper!r}")
    return tuple(
        r
        for r in PUBLISHED
        if (paper is None or r.paper == paper)
        and r.key.split("/", 1)[1].startswith(prefix)
        and (quantity is None or r.quantity == quantity)
    )
