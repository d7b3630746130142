"""Pointwise influences, Prop. 1 closed form and Δ*(ε) (streamguard.influence; notes/000 §3, §8)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from _reference import delta_star_scan, influences_exact, influences_float
from streamguard import MarkovChain
from streamguard.influence import (
    binary_closed_form,
    delta_star,
    max_influence_binary,
    pointwise_left,
    pointwise_right,
)

# (α, β) with λ = 1 − α − β ∈ {+0.6, +0.25, +0.19, 0, −0.25, −0.5}
LAMBDA_CASES = {
    +0.6: (0.1, 0.3),
    +0.25: (0.25, 0.5),
    +0.19: (0.01, 0.8),
    0.0: (0.3, 0.7),
    -0.25: (0.5, 0.75),
    -0.5: (0.6, 0.9),
}


@pytest.mark.parametrize("lam", list(LAMBDA_CASES))
def test_prop1_closed_form_equals_exact_matrix_powers(lam):
    alpha, beta = LAMBDA_CASES[lam]
    assert 1 - alpha - beta == pytest.approx(lam, abs=1e-15)
    D = 25
    # Def. 3 on exact P^Δ. The reference uses the exact binary values of the double parameters,
    # except for λ = 0, where 1 − 0.3 − 0.7 is 0 in floating point but 5.6e-17 in exact binary
    # arithmetic: there the intended decimal parameters are used.
    if lam == 0.0:
        ref = influences_exact(Fraction(str(alpha)), Fraction(str(beta)), D)
        assert np.all(ref == 0.0)
    else:
        ref = influences_exact(Fraction(alpha), Fraction(beta), D)
    got = binary_closed_form(alpha, beta, np.arange(1, D + 1))
    # relative precision, so that the tiny far influences are checked too
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("lam", list(LAMBDA_CASES))
def test_pointwise_right_of_binary_chain_equals_float_matrix_powers(lam):
    alpha, beta = LAMBDA_CASES[lam]
    chain = MarkovChain.binary(alpha, beta)
    ref = influences_float(chain.matrix, 12)
    np.testing.assert_allclose(pointwise_right(chain, 12), ref, rtol=1e-9, atol=1e-15)


def test_lambda_zero_gives_zero_influence_everywhere():
    for alpha in (0.3, 0.5, 0.9):
        infl = binary_closed_form(alpha, 1 - alpha, np.arange(1, 50))
        assert np.all(infl == 0.0)
        assert delta_star(alpha, 1 - alpha, 0.0) == 1
        assert delta_star(alpha, 1 - alpha, 1e-9) == 1


# ---------------------------------------------------------------------------------------------
# Reference numbers of notes/000 §3 and §8
# ---------------------------------------------------------------------------------------------


def test_example1_chain_exact_logs():
    infl = binary_closed_form(0.25, 0.5, [1, 2])
    assert infl[0, 0] == pytest.approx(math.log(1.5), abs=1e-15)
    assert infl[0, 1] == pytest.approx(math.log(2.0), abs=1e-15)
    assert infl[1, 0] == pytest.approx(math.log(1.1), abs=1e-15)
    assert infl[1, 1] == pytest.approx(math.log(1.2), abs=1e-15)


# notes/000 §3 table, α = .25, β = .5 (6 decimals)
TABLE_EX1 = {3: (0.023530, 0.046520), 4: (0.005865, 0.011696), 5: (0.001465, 0.002928)}

# notes/000 §3 table, α = .01, β = .8 (7 significant digits)
TABLE_FIG3 = {
    1: (2.130932e-1, 2.995732),
    2: (3.721887e-2, 1.394663),
    3: (6.968365e-3, 4.443114e-1),
    4: (1.320350e-3, 1.004766e-1),
    5: (2.507357e-4, 1.986279e-2),
    6: (4.763506e-5, 3.803653e-3),
    7: (9.050491e-6, 7.237806e-4),
    8: (1.719587e-6, 1.375576e-4),
    9: (3.267213e-7, 2.613737e-5),
}


@pytest.mark.parametrize("delta", sorted(TABLE_EX1))
def test_notes_table_example1_chain(delta):
    lo, hi = binary_closed_form(0.25, 0.5, [delta])[0]
    assert lo == pytest.approx(TABLE_EX1[delta][0], abs=6e-7)
    assert hi == pytest.approx(TABLE_EX1[delta][1], abs=6e-7)


@pytest.mark.parametrize("delta", sorted(TABLE_FIG3))
def test_notes_table_fig3_chain(delta):
    lo, hi = binary_closed_form(0.01, 0.8, [delta])[0]
    assert lo == pytest.approx(TABLE_FIG3[delta][0], rel=5e-7)
    assert hi == pytest.approx(TABLE_FIG3[delta][1], rel=5e-7)


def test_fig3_hat_i1_is_log20():
    assert max_influence_binary(0.01, 0.8, 1) == pytest.approx(math.log(20), abs=1e-14)


def test_max_influence_at_distance_zero_is_infinite():
    assert max_influence_binary(0.01, 0.8, 0) == math.inf


def test_log1p_precision_far_influence():
    # notes/000 §9.4: λ = 0.25, Δ = 40 gives î ≈ 2.48e-24, not 0 (the naive quotient underflows)
    lo, hi = binary_closed_form(0.25, 0.5, [40])[0]
    assert hi == pytest.approx(2.48e-24, rel=2e-3)
    # first-order expansion: î ≈ (1 + β/α) λ^Δ, ǐ ≈ (1 + α/β) λ^Δ (second order ~ λ^{2Δ})
    x = 0.25**40
    assert hi == pytest.approx(3.0 * x, rel=1e-12)
    assert lo == pytest.approx(1.5 * x, rel=1e-12)
    naive = abs(math.log((1 + 2 * x) / (1 - x)))
    assert naive == 0.0  # the pitfall really exists in double precision
    ref = influences_exact(Fraction(1, 4), Fraction(1, 2), 40)[-1]
    np.testing.assert_allclose([lo, hi], ref, rtol=1e-12)


@pytest.mark.parametrize("lam", [0.6, 0.25, 0.19, -0.25, -0.5])
def test_influences_strictly_decrease(lam):
    alpha, beta = LAMBDA_CASES[lam]
    infl = binary_closed_form(alpha, beta, np.arange(1, 301))
    assert np.all(infl > 0)
    assert np.all(np.diff(infl[:, 0]) < 0)
    assert np.all(np.diff(infl[:, 1]) < 0)


def test_strict_decrease_for_nearly_periodic_and_nearly_frozen_chains():
    for alpha, beta in [(0.02, 0.03), (0.97, 0.98), (0.05, 0.9)]:
        infl = binary_closed_form(alpha, beta, np.arange(1, 201))
        infl = infl[infl.max(axis=1) > 0]
        assert np.all(np.diff(infl, axis=0) < 0)


@given(
    alpha=st.floats(0.01, 0.99),
    beta=st.floats(0.01, 0.99),
)
def test_check_is_at_most_hat_iff_alpha_le_beta(alpha, beta):
    infl = binary_closed_form(alpha, beta, np.arange(1, 30))
    nz = infl.max(axis=1) > 0
    if alpha <= beta:
        assert np.all(infl[:, 0] <= infl[:, 1])
    elif alpha - beta > 1e-9:
        assert np.all(infl[nz, 0] > infl[nz, 1])
    else:  # α > β by a few ulps: the two influences agree to rounding (found by hypothesis: 0.99 vs 0.99 − 1e-16)
        assert np.allclose(infl[:, 0], infl[:, 1], rtol=1e-9, atol=0)


def test_alpha_greater_than_beta_swaps_the_columns():
    D = np.arange(1, 20)
    fwd = binary_closed_form(0.01, 0.8, D)
    rev = binary_closed_form(0.8, 0.01, D)
    np.testing.assert_allclose(rev, fwd[:, ::-1], rtol=1e-13)
    assert np.all(rev[:, 0] > rev[:, 1])  # ǐ > î when α > β
    for d in (1, 2, 5):
        assert max_influence_binary(0.8, 0.01, d) == pytest.approx(max_influence_binary(0.01, 0.8, d), rel=1e-13)


def test_bad_distances_are_rejected():
    with pytest.raises(ValueError, match="≥ 1"):
        binary_closed_form(0.1, 0.2, [0, 1])
    with pytest.raises(ValueError, match="max_delta"):
        pointwise_right(MarkovChain.binary(0.1, 0.2), -1)


# ---------------------------------------------------------------------------------------------
# Δ*(ε)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("eps", "expected"), [(1.0, 3), (0.1, 5), (0.5, 3), (2.0, 2), (3.0, 1)])
def test_delta_star_reference_values(eps, expected):
    assert delta_star(0.01, 0.8, eps) == expected


# notes/000 §3 Δ* table: breakpoints î(Δ) for α=.01, β=.8; just below and at each breakpoint
@pytest.mark.parametrize(
    ("breakpoint", "at"),
    [(1.986279e-2, 5), (0.1004766, 4), (0.4443114, 3), (1.394663, 2), (2.995732, 1)],
)
def test_delta_star_steps_at_the_notes_breakpoints(breakpoint, at):
    exact_bp = max_influence_binary(0.01, 0.8, at)
    assert exact_bp == pytest.approx(breakpoint, rel=5e-7)
    assert delta_star(0.01, 0.8, exact_bp) == at  # î(Δ) ≤ ε is non-strict
    assert delta_star(0.01, 0.8, math.nextafter(exact_bp, 0.0)) == at + 1
    assert delta_star(0.01, 0.8, breakpoint * (1 + 1e-5)) == at
    assert delta_star(0.01, 0.8, breakpoint * (1 - 1e-5)) == at + 1


@given(
    alpha=st.floats(0.02, 0.98),
    beta=st.floats(0.02, 0.98),
    eps=st.floats(0.02, 6.0),
)
def test_delta_star_equals_linear_scan_of_exact_influences(alpha, beta, eps):
    d = delta_star(alpha, beta, eps)
    ref = delta_star_scan(alpha, beta, eps)
    if d != ref:  # only tolerable when ε sits on a breakpoint up to round-off
        assert max_influence_binary(alpha, beta, min(d, ref)) == pytest.approx(eps, rel=1e-12)
    assert max_influence_binary(alpha, beta, d) <= eps
    assert d == 1 or max_influence_binary(alpha, beta, d - 1) > eps


def test_delta_star_rejects_bad_epsilon():
    for bad in (-0.1, math.nan, math.inf):
        with pytest.raises(ValueError, match="epsilon"):
            delta_star(0.01, 0.8, bad)


def test_delta_star_small_epsilon_is_large_but_finite():
    # î(Δ) ≈ (1 + β/α)|λ|^Δ for small ε: Δ* ≈ log(ε/(1+β/α))/log|λ|
    alpha, beta, eps = 0.25, 0.5, 1e-30
    d = delta_star(alpha, beta, eps)
    approx = math.log(eps / 3.0) / math.log(0.25)
    assert abs(d - approx) <= 1.0
    assert max_influence_binary(alpha, beta, d) <= eps < max_influence_binary(alpha, beta, d - 1)


# ---------------------------------------------------------------------------------------------
# General chains and non-stationary left sides
# ---------------------------------------------------------------------------------------------


def test_pointwise_right_three_state_by_definition():
    P = np.array([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.25, 0.25, 0.5]])
    chain = MarkovChain(P)
    np.testing.assert_allclose(pointwise_right(chain, 8), influences_float(P, 8), rtol=1e-12, atol=1e-15)


def test_pointwise_influence_infinite_when_a_value_is_impossible_under_one_past():
    # from state 0 the chain can never be in state 2 one step later
    P = np.array([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5], [0.3, 0.3, 0.4]])
    infl = pointwise_right(MarkovChain(P), 1)
    assert infl[0, 2] == math.inf
    assert np.isfinite(infl[0, :2]).all()


def _left_reference(P, init, p, max_delta):
    """i(X_p ⇝ X_{p−Δ} = x) from Bayes: Pr(X_{p−Δ}=x | X_p=a) = μ_{p−Δ}(x) P^Δ[x,a] / μ_p(a)."""
    k = P.shape[0]
    margs = [np.array(init, dtype=float)]
    for _ in range(p):
        margs.append(margs[-1] @ P)
    out = np.empty((min(max_delta, p), k))
    Pd = np.eye(k)
    for d in range(1, min(max_delta, p) + 1):
        Pd = Pd @ P
        mu_far, mu_p = margs[p - d], margs[p]
        for x in range(k):
            cond = np.array([mu_far[x] * Pd[x, a] / mu_p[a] for a in range(k)])
            out[d - 1, x] = 0.0 if mu_far[x] == 0 else math.log(cond.max() / cond.min())
    return out


@pytest.mark.parametrize(
    ("P", "init", "p"),
    [
        ([[0.9, 0.1], [0.3, 0.7]], [0.1, 0.9], 6),
        ([[0.2, 0.8], [0.6, 0.4]], [1.0, 0.0], 5),
        ([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.25, 0.25, 0.5]], [0.0, 0.3, 0.7], 5),
    ],
)
def test_pointwise_left_non_stationary_matches_bayes(P, init, p):
    P = np.array(P)
    chain = MarkovChain(P, initial=init)
    got = pointwise_left(chain, p, 10)
    assert got.shape == (p, P.shape[0])  # distances past the start are not returned
    np.testing.assert_allclose(got, _left_reference(P, init, p, 10), rtol=1e-10, atol=1e-14)


def test_pointwise_left_of_stationary_binary_chain_mirrors_the_right():
    chain = MarkovChain.binary(0.3, 0.6)
    np.testing.assert_allclose(pointwise_left(chain, 7, 7), pointwise_right(chain, 7), rtol=1e-14)
