"""The 2-D landscapes of paper Figs. 1-2 (theory.ssi.figures.phase.disk_landscape)."""

import pytest

from theory.ssi.figures.phase import disk_landscape


@pytest.mark.slow  # builds the Chebyshev tables of the student moments (~10-40 s)
@pytest.mark.parametrize("trace_norm", ["sum", "sqrtL"])
def test_disk_landscape_curvature_matches_the_printed_hessian(trace_norm):
    # the landscape (model.risk: Chebyshev tables of the student moments) near 0 against the
    # Hessian printed on the panel (theory.ssi.flatness: direct exact Hermite sums).  R is even
    # in e and in m at 0, so R - R(0) = H/2 x^2 + O(x^4): at x = 0.05 the relative error of
    # the quadratic term is O(x^2) ~ 3e-3; 2 % leaves room for the quartic coefficient.
    land = disk_landscape(
        "He2(z1) + He2(z2)", "opposite", trace_norm, n_r=11, n_theta=5, radius=0.5
    )
    r = 0.05  # the second radial node, theta = 0: the e axis
    assert land.e[1, 0] == pytest.approx(r) and land.m[1, 0] == pytest.approx(0.0, abs=1e-15)
    Hp = land.hessian_pub  # [[H_mm, H_me], [H_em, H_ee]]
    assert land.dR[1, 0] == pytest.approx(0.5 * Hp[1, 1] * r**2, rel=0.02)
    # theta = pi/2 (index 1 of 5 nodes on [0, 2 pi]): the m axis
    assert land.dR[1, 1] == pytest.approx(0.5 * Hp[0, 0] * r**2, rel=0.02)
    assert Hp[0, 1] == pytest.approx(0.0, abs=1e-9)  # R is even in e at m = 0: no cross term


def test_disk_landscape_without_encoding_depends_on_m_only():
    land = disk_landscape("He2(z1) + He2(z2)", "none", "sum", n_r=5, n_theta=9)
    # nodes at theta and pi - theta share m and differ in e: equal risk
    assert land.dR[:, 1] == pytest.approx(land.dR[:, 3], abs=1e-12)
    assert land.hessian_pub[1, 1] == 0.0
