"""Linear reduction (paper 004): reference cases of notes/004 §6 and §4, and the invariants of the
note as properties over random joints (|S| ≤ 4, |X| ≤ 8).

The reference numbers come from the notes (computed there independently with throwaway scripts);
the exact-arithmetic claim check below (``_exact_holds``) shares no code with the library.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from streamguard.perturbation import DesignError, Joint
from streamguard.perturbation.linear_reduction import (
    alpha_for, alpha_for_both, alpha_for_ldp, alpha_for_loglift, direct_eps_lp, ldp_leakage, leakage, lemma1_kernel,
    linear_markov_channel, linear_nonmarkov_channel, linear_optimal_markov_channel, log_lift_leakage, target)
from streamguard.perturbation.linear_reduction_lp import (
    TARGET_RTOL, cost_matrix, expected_cost, markov_lp_kernel, northwest_corner, transport_kernel)

TOL = 1e-6
#: Comparing optimal values of different LPs: HiGHS's feasibility/optimality tolerances are ~1e−7.
LP_TOL = 1e-6
DESIGNERS = (linear_markov_channel, linear_optimal_markov_channel, linear_nonmarkov_channel, direct_eps_lp)


def make_joint(p_s, x_given_s) -> Joint:
    return Joint(np.asarray(p_s, dtype=float)[:, None] * np.asarray(x_given_s, dtype=float))


EX1 = make_joint([0.3, 0.7], [[0.2, 0.1, 0.5, 0.2], [0.5, 0.3, 0.1, 0.1]])   # paper Example 1 (case A)
CASE_B = make_joint([0.5, 0.5], [[0.6, 0.3, 0.1], [0.2, 0.3, 0.5]])
CASE_D = make_joint([0.5, 0.5], [[0.5, 0.3, 0.2], [0.1, 0.3, 0.6]])


def mutual_information_bits(p_x: np.ndarray, kernel: np.ndarray) -> float:
    """I(X;Y) in bits of the joint P_X(x')·K[x',x] (reference, 0·log 0 = 0)."""
    pxy = p_x[:, None] * kernel
    py = pxy.sum(axis=0)
    nz = pxy > 0
    return float(np.sum(pxy[nz] * np.log2(pxy[nz] / (p_x[:, None] * py[None, :])[nz])))


def effective_kernel(joint: Joint, sx_kernel: np.ndarray) -> np.ndarray:
    """notes/004 eq. (9): P_{Y|X}(x|x') = Σ_s P_{Y|S,X}(x|s,x')·P_{S|X}(s|x')."""
    q = sx_kernel.reshape(joint.n_s, joint.n_x, joint.n_x)
    return np.einsum("sxy,xs->xy", q, joint.s_given_x)


def taylor_alpha(joint: Joint, epsilon: float, measure: str) -> float:
    """The paper's approximate rule α ≈ 1 − ε/L(S→X) from eq. (6) (deliberately not in the library)."""
    return 1.0 - epsilon / leakage(joint, joint.x_given_s, measure)


# ------------------------------------------------------------------------------------------------
# Reference case A — paper Example 1
# ------------------------------------------------------------------------------------------------


def test_case_a_target_and_leakages() -> None:
    np.testing.assert_allclose(EX1.p_x, [0.41, 0.24, 0.22, 0.13], atol=1e-12)
    t = target(EX1, 0.5)
    np.testing.assert_allclose(t, [[0.305, 0.17, 0.36, 0.165], [0.455, 0.27, 0.16, 0.115]], atol=1e-12)
    assert ldp_leakage(EX1.x_given_s) == pytest.approx(1.609438, abs=TOL)
    assert log_lift_leakage(EX1.p_s, EX1.x_given_s) == pytest.approx(0.875469, abs=TOL)
    assert ldp_leakage(t) == pytest.approx(math.log(2.25), abs=TOL)
    assert log_lift_leakage(EX1.p_s, t) == pytest.approx(math.log(0.36 / 0.22), abs=TOL)


def test_case_a_fig1_curves() -> None:
    """notes/004 §4, Fig. 1: exact leakages of the target against α (4 decimals in the note)."""
    alphas = [0.1, 0.2, 0.3, 0.5, 0.7, 0.9]
    ldp = [1.4385, 1.2755, 1.1180, 0.8109, 0.5021, 0.1759]
    ll = [0.7634, 0.7022, 0.6371, 0.4925, 0.3234, 0.1198]
    for a, want_ldp, want_ll in zip(alphas, ldp, ll, strict=True):
        t = target(EX1, a)
        assert ldp_leakage(t) == pytest.approx(want_ldp, abs=6e-5)
        assert log_lift_leakage(EX1.p_s, t) == pytest.approx(want_ll, abs=6e-5)


def test_case_a_lemma1() -> None:
    k = lemma1_kernel(EX1, 0.5)
    np.testing.assert_allclose(k[0], [0.705, 0.12, 0.11, 0.065], atol=1e-12)
    np.testing.assert_allclose(k[1], [0.205, 0.62, 0.11, 0.065], atol=1e-12)
    np.testing.assert_allclose(EX1.x_given_s @ k, target(EX1, 0.5), atol=1e-15)
    assert expected_cost(EX1, k, "tv") == pytest.approx(0.3545, abs=TOL)
    assert expected_cost(EX1, k, "abs") == pytest.approx(0.5825, abs=TOL)
    assert mutual_information_bits(EX1.p_x, k) == pytest.approx(0.428423, abs=TOL)
    assert ldp_leakage(k) == pytest.approx(2.162438, abs=TOL)   # input LDP of K


def test_case_a_nonmarkov_tv_reproduces_paper_example() -> None:
    q = transport_kernel(EX1, target(EX1, 0.5), "tv").reshape(2, 4, 4)
    np.testing.assert_allclose(np.diag(q[0]), [1, 1, 0.72, 0.825], atol=1e-12)
    np.testing.assert_allclose(np.diag(q[1]), [0.91, 0.9, 1, 1], atol=1e-12)
    # the paper's s = 1 solution of (11d–e): P(a|1,c) = .21, P(b|1,c) = .07, P(a|1,d) = 0, P(b|1,d) = .175
    np.testing.assert_allclose(q[0, 2], [0.21, 0.07, 0.72, 0], atol=1e-12)
    np.testing.assert_allclose(q[0, 3], [0, 0.175, 0, 0.825], atol=1e-12)
    np.testing.assert_allclose(q[0, :2], np.eye(4)[:2], atol=0)   # (11c): nothing leaves a deficit symbol
    assert expected_cost(EX1, q.reshape(8, 4), "tv") == pytest.approx(0.105, abs=TOL)


def test_case_a_optimal_costs() -> None:
    t = target(EX1, 0.5)
    for method in ("quantile", "lp"):
        q = transport_kernel(EX1, t, "abs", method=method)
        assert expected_cost(EX1, q, "abs") == pytest.approx(0.189, abs=TOL)
    assert expected_cost(EX1, markov_lp_kernel(EX1, t, "tv"), "tv") == pytest.approx(0.217766, abs=TOL)
    assert expected_cost(EX1, markov_lp_kernel(EX1, t, "abs"), "abs") == pytest.approx(0.368624, abs=TOL)


def test_case_a_fig4_utilities_linear_in_alpha() -> None:
    """notes/004 §4, Fig. 4 table: D_TV and E|i−j| for Markov (Lemma 1) and non-Markov."""
    rows = {0.1: (0.0709, 0.0210, 0.1165, 0.0378), 0.3: (0.2127, 0.0630, 0.3495, 0.1134),
            0.5: (0.3545, 0.1050, 0.5825, 0.1890), 0.7: (0.4963, 0.1470, 0.8155, 0.2646),
            1.0: (0.7090, 0.2100, 1.1650, 0.3780)}
    for a, (tv_mk, tv_nm, abs_mk, abs_nm) in rows.items():
        t, k = target(EX1, a), lemma1_kernel(EX1, a)
        assert expected_cost(EX1, k, "tv") == pytest.approx(tv_mk, abs=6e-5)
        assert expected_cost(EX1, k, "abs") == pytest.approx(abs_mk, abs=6e-5)
        assert expected_cost(EX1, transport_kernel(EX1, t, "tv"), "tv") == pytest.approx(tv_nm, abs=6e-5)
        assert expected_cost(EX1, transport_kernel(EX1, t, "abs"), "abs") == pytest.approx(abs_nm, abs=6e-5)


def test_case_a_exact_alpha() -> None:
    for eps, want in ((0.5, 0.701329), (1.0, 0.376401), (0.25, 0.856052)):
        assert alpha_for_ldp(EX1, eps) == pytest.approx(want, abs=TOL)
    for eps, want in ((0.5, 0.490290), (0.25, 0.776837), (0.1, 0.917366)):
        assert alpha_for_loglift(EX1, eps) == pytest.approx(want, abs=TOL)
    assert alpha_for_both(EX1, 0.5, 0.25) == pytest.approx(0.776837, abs=TOL)
    assert alpha_for_both(EX1, 0.25, 0.5) == pytest.approx(0.856052, abs=TOL)


def test_taylor_rule_under_protects_where_exact_alpha_does_not() -> None:
    """The paper's α ≈ 1 − ε/L(S→X) exceeds the budget on Example 1 (notes/004 §3.6); exact α is tight."""
    a = taylor_alpha(EX1, 0.25, "log_lift")
    assert a == pytest.approx(0.7144, abs=1e-4)
    assert log_lift_leakage(EX1.p_s, target(EX1, a)) == pytest.approx(0.3100, abs=1e-4)   # 24% over 0.25
    assert ldp_leakage(target(EX1, taylor_alpha(EX1, 0.5, "ldp"))) == pytest.approx(0.5189, abs=1e-4)
    # and at ε_LDP = 1 it happens to over-protect (α 0.378665 → 0.996522)
    assert taylor_alpha(EX1, 1.0, "ldp") == pytest.approx(0.378665, abs=TOL)
    assert ldp_leakage(target(EX1, taylor_alpha(EX1, 1.0, "ldp"))) == pytest.approx(0.996522, abs=TOL)
    assert log_lift_leakage(EX1.p_s, target(EX1, alpha_for_loglift(EX1, 0.25))) == pytest.approx(0.25, abs=1e-12)
    assert ldp_leakage(target(EX1, alpha_for_ldp(EX1, 0.5))) == pytest.approx(0.5, abs=1e-12)


def test_case_a_channels_direct_eps_values() -> None:
    """notes/004 §7 gen. 4 table, 'linear reduction' row: non-Markov D_TV at exact ε_LDP."""
    for eps, want in ((1.0, 0.0790), (0.5, 0.1473), (0.25, 0.1798), (0.1, 0.1982)):
        ch = linear_nonmarkov_channel(EX1, eps, measure="ldp")
        assert expected_cost(EX1, ch.matrix, "tv") == pytest.approx(want, abs=6e-5)


def test_case_a_direct_eps_lp() -> None:
    """notes/004 §7 gen. 4 table: D_TV of the direct ε-LP at exact ε_LDP, with and without P_Y = P_X."""
    for eps, with_marginal, without in ((1.0, 0.0632, 0.0588), (0.5, 0.1302, 0.1111),
                                        (0.25, 0.1715, 0.1330), (0.1, 0.1950, 0.1437)):
        kept = direct_eps_lp(EX1, eps)
        free = direct_eps_lp(EX1, eps, preserve_marginal=False)
        assert kept.kind == "direct-eps" and kept.inputs == "sx"
        assert expected_cost(EX1, kept.matrix, "tv") == pytest.approx(with_marginal, abs=6e-5)
        assert expected_cost(EX1, free.matrix, "tv") == pytest.approx(without, abs=6e-5)
        np.testing.assert_allclose(EX1.p_s @ kept.effective(EX1), EX1.p_x, atol=1e-9)
        for ch in (kept, free):
            assert ldp_leakage(ch.effective(EX1)) == pytest.approx(eps, abs=TOL)
            assert ldp_leakage(ch.effective(EX1)) <= eps


# ------------------------------------------------------------------------------------------------
# Reference cases B and D
# ------------------------------------------------------------------------------------------------


def test_case_b() -> None:
    np.testing.assert_allclose(CASE_B.p_x, [0.4, 0.3, 0.3], atol=1e-15)
    t = target(CASE_B, 0.5)
    np.testing.assert_allclose(t, [[0.5, 0.3, 0.2], [0.3, 0.3, 0.4]], atol=1e-12)
    assert ldp_leakage(CASE_B.x_given_s) == pytest.approx(math.log(5), abs=TOL)
    assert ldp_leakage(t) == pytest.approx(math.log(2), abs=TOL)
    assert log_lift_leakage(CASE_B.p_s, CASE_B.x_given_s) == pytest.approx(math.log(3), abs=TOL)
    assert log_lift_leakage(CASE_B.p_s, t) == pytest.approx(math.log(1.5), abs=TOL)
    q = transport_kernel(CASE_B, t, "tv").reshape(2, 3, 3)
    np.testing.assert_allclose(q[0], [[5 / 6, 0, 1 / 6], [0, 1, 0], [0, 0, 1]], atol=1e-12)
    np.testing.assert_allclose(q[1], [[1, 0, 0], [0, 1, 0], [0.2, 0, 0.8]], atol=1e-12)
    assert expected_cost(CASE_B, q.reshape(6, 3), "tv") == pytest.approx(0.1, abs=TOL)
    k = lemma1_kernel(CASE_B, 0.5)
    assert expected_cost(CASE_B, k, "tv") == pytest.approx(0.33, abs=TOL)
    assert expected_cost(CASE_B, k, "abs") == pytest.approx(0.45, abs=TOL)
    assert expected_cost(CASE_B, transport_kernel(CASE_B, t, "abs"), "abs") == pytest.approx(0.2, abs=TOL)
    km = markov_lp_kernel(CASE_B, t, "tv")
    assert expected_cost(CASE_B, km, "tv") == pytest.approx(6 / 35, abs=TOL)
    one_optimum = np.array([[11 / 14, 0, 3 / 14], [0, 1, 0], [2 / 7, 0, 5 / 7]])   # the note's optimal K
    assert expected_cost(CASE_B, one_optimum, "tv") == pytest.approx(6 / 35, abs=1e-12)
    np.testing.assert_allclose(CASE_B.x_given_s @ one_optimum, t, atol=1e-12)
    assert alpha_for_ldp(CASE_B, 0.5) == pytest.approx(0.632622, abs=TOL)
    assert alpha_for_loglift(CASE_B, 0.25) == pytest.approx(0.668201, abs=TOL)


def test_case_d_nonmetric_cost_needs_full_transport() -> None:
    """Prop. 2's reduced LP is wrong for d = (i−j)² (notes/004 §2 errata): the full optimum is half."""
    for a, full, reduced in ((1.0, 0.4, 0.8), (0.5, 0.2, 0.4)):
        t = target(CASE_D, a)
        for method in ("lp", "quantile"):
            assert expected_cost(CASE_D, transport_kernel(CASE_D, t, "squared", method=method), "squared") \
                == pytest.approx(full, abs=TOL)
        # Prop. 1's maximal coupling satisfies (11a–c), so it costs at least the reduced optimum
        assert expected_cost(CASE_D, transport_kernel(CASE_D, t, "squared", method="closed"), "squared") \
            >= reduced - TOL
    q = transport_kernel(CASE_D, target(CASE_D, 1.0), "squared").reshape(2, 3, 3)
    np.testing.assert_allclose(q[0], [[0.6, 0.4, 0], [0, 1 / 3, 2 / 3], [0, 0, 1]], atol=1e-12)


# ------------------------------------------------------------------------------------------------
# Channels: claims, parameters, fallbacks, bad input
# ------------------------------------------------------------------------------------------------


def test_lemma1_channel_claims_on_example1() -> None:
    ch = linear_markov_channel(EX1, 0.5, measure="ldp")
    assert ch.kind == "linear" and ch.inputs == "x"
    assert ch.params["alpha"] == pytest.approx(0.701329, abs=TOL)
    claims = {c.notion: c.params["epsilon"] for c in ch.claims}
    assert claims["ldp_s"] == 0.5
    a = ch.params["alpha"]
    assert claims["ldp_x"] == pytest.approx(math.log1p((1 - a) / (a * 0.13)), abs=1e-9)
    assert claims["ldp_x"] >= ldp_leakage(ch.matrix)
    assert ldp_leakage(ch.effective(EX1)) == pytest.approx(0.5, abs=TOL)


def test_zero_budget_gives_independent_output() -> None:
    for design in DESIGNERS:
        for measure in ("ldp", "log_lift"):
            ch = design(EX1, 0.0, measure=measure)
            assert np.all(ch.matrix == ch.matrix[0])   # Y ⊥ (S, X): leakage exactly 0
            assert ch.params["alpha"] == 1.0 and ch.params["method"] == "independent"


def test_loose_budget_releases_x_unchanged() -> None:
    ch = linear_markov_channel(EX1, 2.0, measure="ldp")   # L^LDP(S→X) = log 5 < 2
    assert ch.params["alpha"] == 0.0
    np.testing.assert_array_equal(ch.matrix, np.eye(4))
    assert [c.notion for c in ch.claims] == ["ldp_s"]    # no input-LDP promise for the identity


def test_zero_conditional_rows_get_the_target_row() -> None:
    joint = make_joint([0.5, 0.5], [[0.0, 0.5, 0.5], [0.6, 0.4, 0.0]])
    t = target(joint, 0.3)
    for cost, method in (("tv", "closed"), ("abs", "quantile"), ("abs", "lp")):
        q = transport_kernel(joint, t, cost, method=method).reshape(2, 3, 3)
        np.testing.assert_allclose(q[0, 0], t[0], atol=0)
        np.testing.assert_allclose(q[1, 2], t[1], atol=0)
    # the zero rows make L(S→X) infinite; every α > 0 makes it finite
    assert ldp_leakage(joint.x_given_s) == math.inf
    assert math.isfinite(ldp_leakage(t))
    assert alpha_for_loglift(joint, 0.5) >= math.exp(-0.5) - 1e-12   # notes/004 §3.6


def test_params_and_cost_matrix_recorded() -> None:
    d = cost_matrix("squared", 4)
    ch = linear_nonmarkov_channel(EX1, 0.5, measure="log_lift", cost=d)
    assert ch.kind == "linear-nonmarkov" and ch.inputs == "sx" and ch.matrix.shape == (8, 4)
    assert ch.params["cost"] == "matrix" and ch.params["cost_matrix"] == d.tolist()
    assert ch.params["measure"] == "log_lift"
    ch2 = linear_nonmarkov_channel(EX1, 0.5, measure="log_lift", cost="squared")
    assert expected_cost(EX1, ch.matrix, d) == pytest.approx(expected_cost(EX1, ch2.matrix, d), abs=1e-9)


@pytest.mark.parametrize("bad", [-0.1, math.nan, math.inf])
def test_bad_budget_refused(bad: float) -> None:
    for design in DESIGNERS:
        with pytest.raises(DesignError, match="epsilon"):
            design(EX1, bad)


def test_bad_inputs_refused() -> None:
    with pytest.raises(DesignError, match="alpha"):
        target(EX1, 1.5)
    with pytest.raises(DesignError, match="measure"):
        linear_markov_channel(EX1, 0.5, measure="lip")  # type: ignore[arg-type]
    with pytest.raises(DesignError, match="cost"):
        linear_nonmarkov_channel(EX1, 0.5, cost="hamming")  # type: ignore[arg-type]
    with pytest.raises(DesignError, match="zero diagonal"):
        linear_optimal_markov_channel(EX1, 0.5, cost=np.ones((4, 4)))
    with pytest.raises(DesignError, match="4×4"):
        cost_matrix(np.zeros((3, 3)), 4)
    with pytest.raises(DesignError, match="target"):
        markov_lp_kernel(EX1, np.ones((2, 4)))
    with pytest.raises(DesignError, match="method"):
        transport_kernel(EX1, target(EX1, 0.5), method="simplex")  # type: ignore[arg-type]


#: A badly scaled joint hypothesis found (P_X(4) ≈ 4e−10, P_{X|S}(4|0) ≈ 7e−21): HiGHS's absolute
#: feasibility tolerance met the target column 4 (entries ~6e−11 and ~1e−9) by realising it as 0, so
#: the optimal-Markov channel never emitted symbol 4, P_Y ≠ P_X, and its LDP was 2.22 at ε = 3.
TINY_COLUMN = Joint(np.array([
    [0.006158533410602706, 0.002305784378706339, 0.6898871451747177, 1.0695189614123904e-07, 4.856484716794091e-21],
    [3.2810579556495466e-15, 1.3461280532377223e-13, 0.3016484296729693, 1.4158394097498242e-12,
     4.095541255964554e-10]]))


def test_optimal_markov_is_the_linear_reduction_on_a_tiny_column() -> None:
    ch = linear_optimal_markov_channel(TINY_COLUMN, 3.0, measure="ldp")
    p_y_given_s = ch.effective(TINY_COLUMN)
    t = target(TINY_COLUMN, ch.params["alpha"])
    assert np.all(np.abs(p_y_given_s - t) <= 1e-6 * t)            # every symbol, tiny ones too, as T says
    assert 3.0 - 1e-6 <= ldp_leakage(p_y_given_s) <= 3.0           # tight at the exact α, and within ε


#: Another one: at small α the surplus p − T of column 0 (entries near 1) is a multiple of their ulp,
#: while the deficit of column 1 (entries ~1e−13) is exact. The maximal coupling moved the rounded
#: surplus — 0 — so column 1 of s = 1 kept P_{X|S} instead of T, and the non-Markov designer met ε
#: only 3.5e−4·ε below it (at margin 1e−4).
TINY_DEFICIT = Joint(np.array([[0.5997439227071253, 5.963348228299864e-13],
                               [0.4002560772922013, 7.696549240934503e-14]]))


def test_maximal_coupling_fills_a_tiny_deficit() -> None:
    for alpha in (1e-9, 1e-6, 1e-4):
        t = target(TINY_DEFICIT, alpha)
        q = transport_kernel(TINY_DEFICIT, t, "tv").reshape(2, 2, 2)
        realised = np.einsum("sx,sxy->sy", TINY_DEFICIT.x_given_s, q)
        np.testing.assert_allclose(realised[:, 1], t[:, 1], rtol=1e-12, atol=0)
    eps = ldp_leakage(target(TINY_DEFICIT, 1e-9))
    ch = linear_nonmarkov_channel(TINY_DEFICIT, eps, measure="ldp")
    assert eps - 1e-4 * eps <= ldp_leakage(ch.effective(TINY_DEFICIT)) <= eps


def test_northwest_corner_marginals() -> None:
    f = northwest_corner(np.array([0.5, 0.0, 0.5]), np.array([0.2, 0.3, 0.0, 0.5]))
    np.testing.assert_allclose(f.sum(axis=1), [0.5, 0.0, 0.5], atol=1e-15)
    np.testing.assert_allclose(f.sum(axis=0), [0.2, 0.3, 0.0, 0.5], atol=1e-15)
    assert np.count_nonzero(f) <= 3 + 4 - 1


# ------------------------------------------------------------------------------------------------
# Properties over random joints
# ------------------------------------------------------------------------------------------------


@st.composite
def joints(draw: st.DrawFn, extreme: bool = True) -> Joint:
    """|S| ∈ 1..4, |X| ∈ 2..8, Dirichlet rows (concentration 0.8 or 3; with ``extreme`` also 0.05,
    which gives probabilities down to 1e−30 and below), sometimes with zeros in P_{X|S} (P_X > 0)."""
    n_s, n_x = draw(st.integers(1, 4)), draw(st.integers(2, 8))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    rows = rng.dirichlet(np.full(n_x, draw(st.sampled_from([0.8, 3.0, 0.05] if extreme else [0.8, 3.0]))),
                         size=n_s)
    if draw(st.booleans()):
        rows[rng.random(rows.shape) < 0.2] = 0.0
        rows[:, rng.integers(n_x)] += 1e-3   # every row keeps some mass
        rows[0] += 1e-3                      # every column too (P_X > 0)
        rows /= rows.sum(axis=1, keepdims=True)
    p_s = rng.dirichlet(np.ones(n_s))
    p = p_s[:, None] * rows
    assume(np.all(p.sum(axis=0) > 0))
    return Joint(p / p.sum())


def stored_rows(matrix: np.ndarray) -> list[list[Fraction]]:
    """The stored channel as exact rationals, each row divided by its exact sum."""
    rows = [[Fraction(float(v)) for v in row] for row in matrix]
    return [[v / sum(row) for v in row] for row in rows]


def quantised_rows(matrix: np.ndarray, bits: int = 63) -> list[list[Fraction]]:
    """An independent model of the sampler's quantisation (perturbation/sampler.py docstring): per
    row, counts ⌊p·2⁶³⌋ plus one for the largest remainders until the row sums to 2⁶³, and a
    positive entry that got no count raised to one count taken from the row's largest entry."""
    one = 1 << bits
    out = []
    for row in stored_rows(matrix):
        counts = [math.floor(v * one) for v in row]
        by_remainder = sorted(range(len(row)), key=lambda j: (-(row[j] * one - counts[j]), j))
        for j in by_remainder[:one - sum(counts)]:
            counts[j] += 1
        for j, v in enumerate(row):
            if v > 0 and counts[j] == 0:
                counts[j] = 1
                counts[max(range(len(row)), key=lambda i: (counts[i], -i))] -= 1
        out.append([Fraction(c, one) for c in counts])
    return out


def _exact_holds(joint: Joint, rows: list[list[Fraction]], inputs: str, measure: str, epsilon: float) -> bool:
    """The claim in exact arithmetic on a rational channel: with exact P_{Y|S} (the joint normalised:
    a Joint sums to 1 only within model.SUM_TOL), every ratio R must satisfy R ≤ e^ε; checked as
    R ≤ max(1 + ε, fl(e^ε)·(1 − 2⁻⁵⁰)), which implies it (e^ε ≥ 1 + ε, and fl(e^ε) is within 2⁻⁵²
    of e^ε relatively)."""
    n_s, n_x = joint.n_s, joint.n_x
    p = [[Fraction(float(v)) for v in row] for row in joint.p]
    total = sum(sum(row) for row in p)
    p_s = [sum(row) / total for row in p]
    pys = [[sum(p[s][x] / (p_s[s] * total) * rows[x if inputs == "x" else s * n_x + x][y] for x in range(n_x))
            for y in range(len(rows[0]))] for s in range(n_s)]
    bound = max(1 + Fraction(epsilon), Fraction(math.exp(epsilon)) * (1 - Fraction(1, 2**50)))
    cols = range(len(pys[0]))
    if measure == "ldp":
        pairs = [(max(c), min(c)) for c in ([row[y] for row in pys] for y in cols) if max(c) > 0]
    else:
        p_y = [sum(p_s[s] * pys[s][y] for s in range(n_s)) for y in cols]
        pairs = [pr for y in cols if p_y[y] > 0 for s in range(n_s)
                 for pr in ((pys[s][y], p_y[y]), (p_y[y], pys[s][y]))]
    return all(lo > 0 and hi <= bound * lo for hi, lo in pairs)


def _exact_input_ldp_holds(rows: list[list[Fraction]], epsilon: float) -> bool:
    bound = Fraction(math.exp(epsilon)) * (1 - Fraction(1, 2**50))
    return all(min(col) > 0 and max(col) <= bound * min(col) for col in zip(*rows, strict=True))


@given(joints(), st.floats(0.0, 1.0))
def test_target_is_an_exact_linear_reduction(joint: Joint, alpha: float) -> None:
    t = target(joint, alpha)
    np.testing.assert_allclose(t.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(joint.p_s @ t, joint.p_x, atol=1e-12)             # P_Y = P_X (eq. 4)
    np.testing.assert_allclose(np.abs(t - joint.p_x), (1 - alpha) * np.abs(joint.x_given_s - joint.p_x),
                               atol=1e-12)                                         # (1−α) reduction
    var = lambda m: joint.p_s @ (m - joint.p_x) ** 2                               # noqa: E731 (App. A)
    np.testing.assert_allclose(var(t), (1 - alpha) ** 2 * var(joint.x_given_s), atol=1e-12)


@given(joints())
def test_leakage_monotone_in_alpha_and_bracketed(joint: Joint) -> None:
    for measure in ("ldp", "log_lift"):
        curve = [leakage(joint, target(joint, a), measure) for a in np.linspace(0, 1, 21)[1:]]
        assert all(b <= a + 1e-12 for a, b in zip(curve, curve[1:], strict=False))
        assert curve[-1] <= 1e-12
    for a in (0.05, 0.3, 0.7):
        t = target(joint, a)
        ll, ldp = log_lift_leakage(joint.p_s, t), ldp_leakage(t)
        assert ll <= ldp + 1e-12 and ldp <= 2 * ll + 1e-12


@given(joints(), st.floats(0.0, 1.0), st.sampled_from(["ldp", "log_lift"]))
def test_exact_alpha_is_tight_and_minimal(joint: Joint, frac: float, measure: str) -> None:
    base = leakage(joint, target(joint, 1e-9), measure)   # finite even with zeros in P_{X|S}
    assume(base > 1e-6)
    eps = max(frac * base, 1e-6)
    alpha = alpha_for(joint, eps, measure)
    assert 0.0 < alpha <= 1.0
    assert leakage(joint, target(joint, alpha), measure) == pytest.approx(eps, rel=1e-8, abs=1e-10)
    if alpha > 1e-6:
        assert leakage(joint, target(joint, alpha - 1e-6), measure) > eps    # smallest α meeting ε
    x_leak = leakage(joint, joint.x_given_s, measure)
    if math.isfinite(x_leak):
        assert alpha_for(joint, x_leak * 1.000001, measure) <= 1e-12   # no reduction needed (up to rounding)


@given(joints(), st.floats(0.0, 1.0))
def test_lp_kernels_realise_the_target_relatively_or_refuse(joint: Joint, alpha: float) -> None:
    """The LP kernels meet T entrywise to relative accuracy — HiGHS's tolerances are absolute, and a
    target entry met only in absolute terms (e.g. as 0) is not the linear reduction and not tight at
    the exact α — or raise DesignError, on which the designers fall back to a closed form. Bound:
    the LP's equalities within TARGET_RTOL relative, the rows' renormalisation by sums within as much
    again, plus float rounding of the products."""
    t = target(joint, alpha)
    realised = []
    try:
        realised.append(joint.x_given_s @ markov_lp_kernel(joint, t, "tv"))
    except DesignError:
        pass
    try:
        q = transport_kernel(joint, t, "squared", method="lp").reshape(joint.n_s, joint.n_x, joint.n_x)
        realised.append(np.einsum("sx,sxy->sy", joint.x_given_s, q))
    except DesignError:
        pass
    for r in realised:
        assert np.all(np.abs(r - t) <= (2 * TARGET_RTOL + 1e-14) * t)


@given(joints(), st.floats(0.0, 3.0), st.floats(0.0, 3.0))
def test_alpha_for_both_meets_both(joint: Joint, e1: float, e2: float) -> None:
    a = alpha_for_both(joint, e1, e2)
    t = target(joint, a)
    assert ldp_leakage(t) <= e1 + 1e-9 and log_lift_leakage(joint.p_s, t) <= e2 + 1e-9


@given(joints(extreme=False), st.floats(0.0, 1.0))
def test_optimal_kernels_realise_the_target_and_order(joint: Joint, alpha: float) -> None:
    """D_TV(non-Markov) ≤ D_TV(optimal Markov) ≤ D_TV(Lemma 1); Prop. 1 closed form == LP ==
    α·Σ_s P_S·TV(P_{X|S=s}, P_X); quantile == LP for |i−j| and (i−j)². (The raw LPs on joints with
    probabilities near 1e−30 are not this accurate; the designers re-check and fall back, which
    the next property covers on such joints. Nor are they on a well-conditioned joint's target when
    a tiny α puts α·P_X(x) ~1e−16 where P_{X|S}(x|s) = 0: the LPs then meet T relatively or refuse,
    which test_lp_kernels_realise_the_target_relatively_or_refuse covers.)"""
    t = target(joint, alpha)
    assume(np.all((t == 0) | (t >= 1e-6)))   # the same well-conditioning as the joints', on T
    k1 = lemma1_kernel(joint, alpha)
    km = markov_lp_kernel(joint, t, "tv")
    q = transport_kernel(joint, t, "tv")
    np.testing.assert_allclose(joint.x_given_s @ k1, t, atol=1e-14)
    np.testing.assert_allclose(joint.x_given_s @ km, t, atol=1e-8)
    np.testing.assert_allclose(np.einsum("sx,sxy->sy", joint.x_given_s, q.reshape(joint.n_s, joint.n_x, -1)), t,
                               atol=1e-14)
    for k in (k1, km, q):
        assert np.all(k >= 0)
        np.testing.assert_allclose(k.sum(axis=1), 1.0, atol=1e-12)
    tv1, tvm, tvq = (expected_cost(joint, k, "tv") for k in (k1, km, q))
    assert tvq <= tvm + 1e-9 and tvm <= tv1 + 1e-9
    assert tv1 == pytest.approx(alpha * (1 - np.sum(joint.p_x ** 2)), abs=1e-12)
    closed = alpha * joint.p_s @ (0.5 * np.abs(joint.x_given_s - joint.p_x).sum(axis=1))
    assert tvq == pytest.approx(closed, abs=1e-12)
    assert expected_cost(joint, transport_kernel(joint, t, "tv", method="lp"), "tv") == pytest.approx(closed, abs=1e-8)
    for cost in ("abs", "squared"):
        quant = expected_cost(joint, transport_kernel(joint, t, cost), cost)
        lp = expected_cost(joint, transport_kernel(joint, t, cost, method="lp"), cost)
        assert quant == pytest.approx(lp, abs=1e-8)
        assert quant <= expected_cost(joint, markov_lp_kernel(joint, t, cost), cost) + 1e-8
        assert expected_cost(joint, markov_lp_kernel(joint, t, cost), cost) <= expected_cost(joint, k1, cost) + 1e-8
    # the effective Markov channel of the non-Markov kernel preserves P_Y = P_X too (eq. 9)
    np.testing.assert_allclose(joint.p_x @ effective_kernel(joint, q), joint.p_x, atol=1e-12)


@given(joints(), st.floats(0.0, 1.0), st.sampled_from(["ldp", "log_lift"]))
def test_channels_meet_their_claims_exactly_and_tightly(joint: Joint, frac: float, measure: str) -> None:
    """Every designer's claims hold in exact arithmetic on the stored and on the sampled (quantised)
    channel; the linear-reduction kinds are tight; relaxations are at least as good."""
    base = leakage(joint, target(joint, 1e-9), measure)
    eps = frac * min(base, 3.0)
    well_conditioned = bool(joint.p[joint.p > 0].min() >= 1e-6)
    for design in DESIGNERS:
        ch = design(joint, eps, measure=measure)
        notion = "ldp_s" if measure == "ldp" else "log_lift"
        assert [c.params["epsilon"] for c in ch.claims if c.notion == notion] == [eps]
        realised = leakage(joint, ch.effective(joint), measure)
        independent = bool(np.all(ch.matrix == ch.matrix[0]))   # then exactly 0, whatever the rounding
        assert realised <= eps or independent
        for rows in (stored_rows(ch.matrix), quantised_rows(ch.matrix)):   # as stored, as sampled
            assert _exact_holds(joint, rows, ch.inputs, measure, eps)
            for claim in ch.claims:
                if claim.notion == "ldp_x":
                    assert _exact_input_ldp_holds(rows, claim.params["epsilon"])
        # the linear-reduction kinds: exact α is tight (unless α = 0 does). The designer meets
        # ε − margin exactly, with margin ≤ 1e−4·max(1, ε) (linear_reduction._MARGINS, reached on badly
        # scaled joints by the float and quantisation slacks), up to its kernel's relative accuracy:
        # ≤ 4·TARGET_RTOL in the leakage (linear_reduction_lp.TARGET_RTOL), which also covers the
        # float rounding of ε − margin.
        alpha = ch.params.get("alpha")
        if alpha is not None and 1e-6 < eps and alpha not in (0.0, 1.0):
            assert realised >= eps - (TOL if well_conditioned else 1e-4) * max(1.0, eps) - 4 * TARGET_RTOL
        if design is linear_markov_channel and alpha > 0:
            bonus = next((c.params["epsilon"] for c in ch.claims if c.notion == "ldp_x"), None)
            if bonus is None:   # omitted only when an entry is below the sampler's grain
                assert alpha * joint.p_x.min() <= 2 * joint.n_x * 2.0 ** -63
                continue
            assert bonus >= ldp_leakage(ch.matrix)
            formula = math.log1p((1 - alpha) / (alpha * joint.p_x.min()))
            assert bonus >= formula   # rounded up for float and quantisation error only:
            if joint.p_x.min() * alpha > 1e-6:
                assert bonus == pytest.approx(formula, abs=1e-9)
    # at one budget the utilities are ordered: each relaxation is at least as good. (With probabilities
    # below 1e−6 an LP may fail or lose accuracy and its designer falls back to the closed form,
    # recorded in params["method"]: only the claims above are promised there.)
    if not well_conditioned:
        return
    lemma1, optimal, nonmarkov, direct = (expected_cost(joint, design(joint, eps, measure=measure).matrix, "tv")
                                          for design in DESIGNERS)
    direct_markov = expected_cost(joint, direct_eps_lp(joint, eps, measure=measure, markov=True).matrix, "tv")
    direct_free = expected_cost(joint, direct_eps_lp(joint, eps, measure=measure, preserve_marginal=False).matrix,
                                "tv")
    assert nonmarkov <= optimal + LP_TOL and optimal <= lemma1 + LP_TOL
    assert direct_markov <= optimal + LP_TOL and direct <= nonmarkov + LP_TOL and direct <= direct_markov + LP_TOL
    assert direct_free <= direct + LP_TOL
