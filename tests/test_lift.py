"""Lift tables, lift-based / lift-inverse measures and the claim checks of paper 003 (notes/003 §1, §2, §5.1, E1)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _lift_oracles import channels, joints, posterior_lifts
from hypothesis import given
from hypothesis import strategies as st

from streamguard.perturbation.lift import (
    alip_leakage,
    alpha_lift,
    alpha_lift_inverse,
    channel_lifts,
    check_alip,
    check_claim,
    check_ldp_s,
    check_lip,
    chi2_lift,
    chi2_lift_inverse,
    group_lifts,
    l1_lift,
    l1_lift_inverse,
    lift_ratio,
    max_lift,
    min_lift,
    symbol_lifts,
)
from streamguard.perturbation.model import Claim, Joint

CASE_A = Joint([[0.20, 0.15, 0.10, 0.05], [0.05, 0.10, 0.15, 0.20]])

#: A 2×2 joint whose identity release is (0.6, 0.05)-ALIP but breaks Props. 3.1–3.2 (notes/003 E1):
#: P_S = (0.9, 0.1); column 0 has lifts (1.05, 0.55), column 1 has (0.995, 1.045).
E1_JOINT = Joint(np.array([[0.945, 8.955], [0.055, 1.045]]) / 11.0)


# ------------------------------------------------------------------------------------ reference case A


def test_case_a_symbol_lifts():
    lifts = symbol_lifts(CASE_A)
    np.testing.assert_allclose(lifts, [[1.6, 1.2, 0.8, 0.4], [0.4, 0.8, 1.2, 1.6]], rtol=1e-12)
    np.testing.assert_allclose(max_lift(lifts), [1.6, 1.2, 1.2, 1.6], rtol=1e-12)
    np.testing.assert_allclose(min_lift(lifts), [0.4, 0.8, 0.8, 0.4], rtol=1e-12)
    np.testing.assert_allclose(lift_ratio(lifts), [4, 1.5, 1.5, 4], rtol=1e-12)


def test_case_a_merged_extremes_have_lift_one():
    np.testing.assert_allclose(group_lifts(CASE_A, [(0, 3), (1, 2)]), np.ones((2, 2)), rtol=1e-12)
    np.testing.assert_allclose(group_lifts(CASE_A, [(0, 1)]), [[1.4], [0.6]], rtol=1e-12)


def test_checks_report_the_worst_violation():
    identity = np.eye(4)
    v = check_alip(CASE_A, identity, 0.5, 0.5)
    # min-lift 0.4 (|log| 0.916) is worse than max-lift 1.6 (log 0.470 < 0.5); outputs 0 and 3 tie → 0
    assert (v.notion, v.constraint, v.output) == ("alip", "min-lift", 0)
    assert v.realised == pytest.approx(-math.log(0.4), rel=1e-12) and v.allowed == 0.5
    v = check_alip(CASE_A, identity, 1.0, 0.4)
    assert (v.constraint, v.output) == ("max-lift", 0) and v.realised == pytest.approx(math.log(1.6))
    assert check_alip(CASE_A, identity, 1.0, 0.5) is None
    assert check_lip(CASE_A, identity, 0.9).constraint == "min-lift"
    assert check_lip(CASE_A, identity, 0.92) is None
    v = check_ldp_s(CASE_A, identity, 1.0)
    assert (v.constraint, v.output) == ("lift ratio", 0) and v.realised == pytest.approx(math.log(4))
    assert check_ldp_s(CASE_A, identity, math.log(4) * (1 + 1e-12)) is None
    assert "min-lift at output 0" in str(check_alip(CASE_A, identity, 0.5, 0.5))


def test_channel_lifts_drop_outputs_that_never_occur():
    w = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    lifts, used = channel_lifts(CASE_A, w)
    assert used.tolist() == [0, 2]
    np.testing.assert_allclose(lifts, 1.0, rtol=1e-12)  # {0,3} and {1,2} merged: lift ≡ 1
    v = check_alip(CASE_A, np.array([[1, 0], [0, 1], [0, 1], [0, 1.0]]), 0.1, 0.1)
    assert v.output == 0  # {0}: lifts (1.6, 0.4)


def test_unknown_notion_and_missing_parameter_are_refused():
    with pytest.raises(ValueError, match="unknown lift claim notion"):
        check_claim(CASE_A, np.eye(4), Claim("ldp_x", {"epsilon": 1.0}))
    with pytest.raises(ValueError, match="lacks parameter 'eps_u'"):
        check_claim(CASE_A, np.eye(4), Claim("alip", {"eps_l": 1.0}))
    with pytest.raises(ValueError, match="4 rows"):
        channel_lifts(CASE_A, np.eye(3))


# ------------------------------------------------------------------------------------------ measures


def test_measures_on_case_a_by_hand():
    lifts, p_s = symbol_lifts(CASE_A), CASE_A.p_s
    np.testing.assert_allclose(l1_lift(lifts, p_s), [0.6, 0.2, 0.2, 0.6], rtol=1e-12)
    np.testing.assert_allclose(chi2_lift(lifts, p_s), [0.36, 0.04, 0.04, 0.36], rtol=1e-12)
    # Ψ_ℓ1(x0) = ½|1/1.6 − 1| + ½|1/0.4 − 1| = ½(0.375 + 1.5)
    np.testing.assert_allclose(l1_lift_inverse(lifts, p_s)[0], 0.9375, rtol=1e-12)
    np.testing.assert_allclose(chi2_lift_inverse(lifts, p_s)[0], 0.5 * (0.375**2 + 1.5**2), rtol=1e-12)
    np.testing.assert_allclose(alpha_lift(lifts, p_s, 2.0)[0], math.sqrt(0.5 * (1.6**2 + 0.4**2)), rtol=1e-12)
    np.testing.assert_allclose(alpha_lift_inverse(lifts, p_s, 2.0)[0], math.sqrt(0.5 * (1.6**-2 + 0.4**-2)),
                               rtol=1e-12)


def test_alpha_100_does_not_overflow_and_matches_the_scaled_form():
    p_s = np.array([0.999, 0.001])
    lifts = np.array([[1e-9, 1.0005], [999.0, 0.5]])
    for fn, ext, power in ((alpha_lift, max_lift(lifts), 100.0), (alpha_lift_inverse, 1 / min_lift(lifts), -100.0)):
        got = fn(lifts, p_s, 100.0)
        assert np.all(np.isfinite(got))
        # scaled form: ext · (Σ P_S (l/ext)^±α)^{1/α}, computed without logs
        base = lifts ** np.sign(power) / ext[None, :]
        expect = ext * (p_s @ base**100.0) ** 0.01
        np.testing.assert_allclose(got, expect, rtol=1e-12)
    # a zero lift makes the inverse infinite and the lift-based value finite
    zero = np.array([[0.0], [2.0]])
    assert math.isinf(alpha_lift_inverse(zero, np.array([0.5, 0.5]), 100.0)[0])
    assert alpha_lift(zero, np.array([0.5, 0.5]), 100.0)[0] == pytest.approx(2 * 0.5**0.01)


@given(joints(), st.data())
def test_lift_identities_on_random_channels(joint, data):
    w = data.draw(channels(joint.n_x))
    lifts, used = channel_lifts(joint, w)
    np.testing.assert_allclose(lifts, posterior_lifts(joint, w), rtol=1e-9)
    psi, lam = min_lift(lifts), max_lift(lifts)
    assert np.all(psi <= 1 + 1e-12) and np.all(lam >= 1 - 1e-12)          # Ψ ≤ 1 ≤ Λ
    np.testing.assert_allclose(joint.p_s @ lifts, 1.0, rtol=1e-12)         # Σ_s P_S l = 1
    p_s = joint.p_s
    p_sy = joint.p @ w[:, used]
    p_y = p_sy.sum(axis=0)
    indep = p_s[:, None] * p_y[None, :]
    # T(S;Y) = ½ E_Y[Λ_ℓ1(Y)] and χ²(S;Y) = E_Y[Λ_χ²(Y)] against their direct definitions
    assert 0.5 * p_y @ l1_lift(lifts, p_s) == pytest.approx(0.5 * np.abs(p_sy - indep).sum(), rel=1e-9, abs=1e-15)
    assert p_y @ chi2_lift(lifts, p_s) == pytest.approx(((p_sy - indep) ** 2 / indep).sum(), rel=1e-9, abs=1e-15)
    # Sibson's I_α: (α/(α−1))·log E_Y[Λ_α(Y)] = (α/(α−1))·log Σ_y (Σ_s P_S(s)·P(y|s)^α)^{1/α}
    alpha = data.draw(st.sampled_from([1.5, 2.0, 10.0]))
    y_given_s = p_sy / p_s[:, None]
    direct = np.sum((p_s @ y_given_s**alpha) ** (1 / alpha))
    assert p_y @ alpha_lift(lifts, p_s, alpha) == pytest.approx(direct, rel=1e-9)
    # Props. 3.3 and 5.3 (true): Λ_α ≤ Λ and Ψ_α ≤ 1/Ψ
    assert np.all(alpha_lift(lifts, p_s, alpha) <= lam * (1 + 1e-12))
    assert np.all(alpha_lift_inverse(lifts, p_s, alpha) <= (1 / psi) * (1 + 1e-12))


@given(joints(), st.data())
def test_corrected_e1_bounds_and_props_4_and_6(joint, data):
    """notes/003 E1 corrected bounds (Bhatia–Davis) per output, and Props. 4.1 / 6.1 with ε the realised value."""
    lifts, _ = channel_lifts(joint, data.draw(channels(joint.n_x)))
    p_s = joint.p_s
    psi, lam = min_lift(lifts), max_lift(lifts)
    tol = 1e-9
    assert np.all(chi2_lift(lifts, p_s) <= (lam - 1) * (1 - psi) + tol)
    spread = np.where(lam > psi, lam - psi, 1.0)
    assert np.all(l1_lift(lifts, p_s) <= 2 * (lam - 1) * (1 - psi) / spread + tol)
    # Prop. 4.1: max Λ ≤ ε/P_S(s_ŷ) + 1 with ε = max_y Λ_ℓ1(y), ŷ = argmax Λ, s_ŷ = argmax_s l(s, ŷ)
    y_hat = int(np.argmax(lam))
    p_hat = p_s[int(np.argmax(lifts[:, y_hat]))]
    assert lam.max() <= l1_lift(lifts, p_s).max() / p_hat + 1 + tol
    # Prop. 6.1: min Ψ ≥ P_S(s_ŷ)/(ε + P_S(s_ŷ)) with ε = max_y Ψ_ℓ1(y), ŷ = argmin Ψ, s_ŷ = argmin_s l(s, ŷ)
    y_hat = int(np.argmin(psi))
    p_hat = p_s[int(np.argmin(lifts[:, y_hat]))]
    eps = l1_lift_inverse(lifts, p_s).max()
    assert psi.min() >= p_hat / (eps + p_hat) - tol


def test_erratum_e1_props_3_1_and_3_2_fail_on_an_alip_release():
    """The identity release of E1_JOINT is (0.6, 0.05)-ALIP, yet Λ_ℓ1 and Λ_χ² exceed the printed bounds
    e^{ε_u} − 1 and (e^{ε_u} − 1)²; the corrected bounds of E1 hold (with equality at output 0)."""
    eps_l, eps_u = 0.6, 0.05
    identity = np.eye(2)
    assert check_alip(E1_JOINT, identity, eps_l, eps_u) is None
    lifts = symbol_lifts(E1_JOINT)
    np.testing.assert_allclose(lifts, [[1.05, 0.995], [0.55, 1.045]], rtol=1e-12)
    v = check_claim(E1_JOINT, identity, Claim("l1_lift", {"threshold": math.expm1(eps_u)}))
    assert v is not None and v.output == 0 and v.realised == pytest.approx(0.09, rel=1e-12)
    v = check_claim(E1_JOINT, identity, Claim("chi2_lift", {"threshold": math.expm1(eps_u) ** 2}))
    assert v is not None and v.realised == pytest.approx(0.0225, rel=1e-12)
    # corrected: Λ_χ² ≤ (Λ−1)(1−Ψ) = 0.05·0.45, Λ_ℓ1 ≤ 2(Λ−1)(1−Ψ)/(Λ−Ψ) = 0.09 (tight)
    assert chi2_lift(lifts, E1_JOINT.p_s)[0] == pytest.approx(0.05 * 0.45, rel=1e-12)
    assert l1_lift(lifts, E1_JOINT.p_s)[0] == pytest.approx(2 * 0.05 * 0.45 / 0.5, rel=1e-12)
    # the α-lift statement (Prop. 3.3) is true here: Λ_α ≤ e^{ε_u}
    assert check_claim(E1_JOINT, identity, Claim("alpha_lift", {"alpha": 2.0, "threshold": math.exp(eps_u)})) is None


def test_alip_leakage_of_case_a_identity():
    eps_l, eps_u = alip_leakage(symbol_lifts(CASE_A))
    assert eps_l == pytest.approx(-math.log(0.4)) and eps_u == pytest.approx(math.log(1.6))
