"""MarkovChain: validation, stationary law, powers, time reversal, marginals (streamguard.model.chain)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from streamguard import MarkovChain, ModelError
from streamguard.model.chain import as_chain

# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("matrix", "message"),
    [
        ([[0.5, 0.6], [0.5, 0.5]], r"not row-stochastic \(row 0 sums to 1\.1\)"),
        ([[0.5, 0.5], [0.3, 0.3]], r"not row-stochastic \(row 1 sums to 0\.6\)"),
        ([[1.2, -0.2], [0.5, 0.5]], r"negative entries"),
        ([[math.nan, 1.0], [0.5, 0.5]], r"NaN or infinity"),
        ([[math.inf, 0.0], [0.5, 0.5]], r"NaN or infinity"),
        ([[0.5, 0.5]], r"square k×k with k ≥ 2, got shape \(1, 2\)"),
        ([[1.0]], r"square k×k with k ≥ 2, got shape \(1, 1\)"),
        ([0.5, 0.5], r"square k×k with k ≥ 2, got shape \(2,\)"),
        (np.full((2, 2, 2), 0.5), r"square k×k with k ≥ 2, got shape \(2, 2, 2\)"),
        ([["a", "b"], ["c", "d"]], r"not a numeric matrix"),
        ([[1.0, 0.0], [0.0, 1.0]], r"reducible"),
        ([[1.0, 0.0], [0.5, 0.5]], r"reducible"),
        ([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]], r"reducible"),
        ([[0.0, 1.0], [1.0, 0.0]], r"periodic with period 2"),
        ([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]], r"periodic with period 3"),
        # bipartite 4-cycle with random weights: period 2
        ([[0, 0.3, 0, 0.7], [0.6, 0, 0.4, 0], [0, 0.5, 0, 0.5], [0.2, 0, 0.8, 0]], r"periodic with period 2"),
    ],
)
def test_invalid_matrix_is_rejected_with_a_clear_message(matrix, message):
    with pytest.raises(ModelError, match=message):
        MarkovChain(matrix)


def test_model_error_is_a_value_error():
    assert issubclass(ModelError, ValueError)
    with pytest.raises(ValueError):
        MarkovChain([[0.2, 0.2], [0.5, 0.5]])


def test_aperiodic_chain_with_a_zero_diagonal_is_accepted():
    # cycles of length 2 (0→1→0) and 3 (0→1→2→0): gcd 1, so aperiodic
    P = [[0.0, 1.0, 0.0], [0.5, 0.0, 0.5], [1.0, 0.0, 0.0]]
    chain = MarkovChain(P)
    assert chain.period == 1
    pi = chain.initial
    np.testing.assert_allclose(pi @ np.array(P), pi, atol=1e-14)


def test_periodic_chain_is_fine_with_an_explicit_initial_law_but_has_no_stationary_law():
    chain = MarkovChain([[0.0, 1.0], [1.0, 0.0]], initial=[1.0, 0.0])
    assert not chain.stationary
    np.testing.assert_array_equal(chain.marginal(3), [0.0, 1.0])
    np.testing.assert_array_equal(chain.marginal(4), [1.0, 0.0])
    with pytest.raises(ModelError, match="periodic with period 2"):
        _ = chain.stationary_law
    with pytest.raises(ModelError, match="periodic"):
        chain.time_reversal()


@pytest.mark.parametrize(
    ("initial", "message"),
    [
        ([0.5, 0.25, 0.25], r"initial distribution: must have 2 entries, got shape \(3,\)"),
        ([[0.5, 0.5]], r"initial distribution: must have 2 entries"),
        ([1.5, -0.5], r"initial distribution: has negative entries"),
        ([0.5, 0.6], r"initial distribution: does not sum to 1 \(sums to 1\.1\)"),
        ([math.nan, 1.0], r"initial distribution: contains NaN"),
        (["x", "y"], r"initial distribution: not a numeric vector"),
    ],
)
def test_invalid_initial_law_is_rejected(initial, message):
    with pytest.raises(ModelError, match=message):
        MarkovChain([[0.9, 0.1], [0.2, 0.8]], initial=initial)


@pytest.mark.parametrize("name", ["alpha", "beta"])
@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1, 1.5, math.nan, math.inf, -math.inf])
def test_binary_parameters_must_lie_strictly_inside_the_unit_interval(name, bad):
    kwargs = {"alpha": 0.3, "beta": 0.4, name: bad}
    with pytest.raises(ModelError, match=f"{name} must lie strictly between 0 and 1"):
        MarkovChain.binary(**kwargs)


def test_matrix_is_read_only_and_copied():
    P = np.array([[0.9, 0.1], [0.2, 0.8]])
    chain = MarkovChain(P)
    P[0, 0] = 0.0  # mutating the caller's array must not change the chain
    assert chain.matrix[0, 0] == 0.9
    with pytest.raises(ValueError):
        chain.matrix[0, 0] = 0.5
    with pytest.raises(ValueError):
        chain.initial[0] = 0.5


def test_binary_accessors():
    chain = MarkovChain.binary(0.01, 0.8)
    assert chain.alpha == 0.01 and chain.beta == 0.8
    assert chain.lam == pytest.approx(0.19, abs=1e-15)
    assert chain.k == 2 and chain.is_binary
    three = MarkovChain(np.full((3, 3), 1 / 3))
    with pytest.raises(ModelError, match="binary chain, got k = 3"):
        _ = three.alpha


# ---------------------------------------------------------------------------------------------
# Stationary law
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("alpha", "beta"), [(0.01, 0.8), (0.25, 0.5), (0.6, 0.9), (0.7, 0.2), (0.3, 0.7)])
def test_binary_stationary_law_is_beta_alpha_over_sum(alpha, beta):
    chain = MarkovChain.binary(alpha, beta)
    np.testing.assert_allclose(chain.initial, [beta / (alpha + beta), alpha / (alpha + beta)], rtol=1e-15)
    assert chain.stationary


def test_fig3_stationary_common_probability():
    # notes/000 §6: π0 = 0.987654 for α = .01, β = .8
    assert MarkovChain.binary(0.01, 0.8).initial[0] == pytest.approx(0.987654, abs=5e-7)


def test_doubly_stochastic_chain_has_uniform_stationary_law():
    P = [[0.1, 0.6, 0.3], [0.5, 0.2, 0.3], [0.4, 0.2, 0.4]]
    np.testing.assert_allclose(MarkovChain(P).initial, [1 / 3] * 3, atol=1e-14)


def test_birth_death_chain_stationary_law_from_detailed_balance():
    # 4-state birth–death chain: π_{i+1}/π_i = P[i,i+1]/P[i+1,i] (detailed balance)
    P = np.array([
        [0.7, 0.3, 0.0, 0.0],
        [0.1, 0.5, 0.4, 0.0],
        [0.0, 0.2, 0.6, 0.2],
        [0.0, 0.0, 0.5, 0.5],
    ])
    w = [1.0]
    for i in range(3):
        w.append(w[-1] * P[i, i + 1] / P[i + 1, i])
    expected = np.array(w) / sum(w)
    np.testing.assert_allclose(MarkovChain(P).stationary_law, expected, atol=1e-13)


def test_explicit_stationary_initial_is_recognised_as_stationary():
    chain = MarkovChain([[0.9, 0.1], [0.2, 0.8]], initial=[2 / 3, 1 / 3])
    assert chain.stationary
    chain = MarkovChain([[0.9, 0.1], [0.2, 0.8]], initial=[0.5, 0.5])
    assert not chain.stationary


# ---------------------------------------------------------------------------------------------
# Powers
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("alpha", "beta"), [(0.01, 0.8), (0.25, 0.5), (0.6, 0.9), (0.3, 0.7), (0.8, 0.1)])
@pytest.mark.parametrize("delta", [0, 1, 2, 3, 7, 20])
def test_binary_power_matches_the_prop1_closed_form(alpha, beta, delta):
    # notes/000 §3: P^Δ = [[1−α_Δ, α_Δ], [β_Δ, 1−β_Δ]], α_Δ = α/(α+β)(1−λ^Δ), β_Δ = β/(α+β)(1−λ^Δ)
    lam = 1 - alpha - beta
    a_d = alpha / (alpha + beta) * (1 - lam**delta)
    b_d = beta / (alpha + beta) * (1 - lam**delta)
    expected = np.array([[1 - a_d, a_d], [b_d, 1 - b_d]])
    np.testing.assert_allclose(MarkovChain.binary(alpha, beta).power(delta), expected, atol=1e-14)


def test_power_of_three_state_chain_equals_repeated_products():
    P = np.array([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.25, 0.25, 0.5]])
    chain = MarkovChain(P)
    cur = np.eye(3)
    for steps in range(0, 12):
        np.testing.assert_allclose(chain.power(steps), cur, atol=1e-14)
        cur = cur @ P
    with pytest.raises(ValueError, match="steps must be ≥ 0"):
        chain.power(-1)


# ---------------------------------------------------------------------------------------------
# Time reversal
# ---------------------------------------------------------------------------------------------

# A 3-state chain with a rotational drift: not reversible, not doubly stochastic.
P3 = np.array([[0.2, 0.7, 0.1], [0.1, 0.3, 0.6], [0.5, 0.1, 0.4]])


def test_time_reversal_of_three_state_chain_has_transposed_stationary_joint():
    chain = MarkovChain(P3)
    rev = chain.time_reversal()
    pi = chain.stationary_law
    joint = pi[:, None] * P3  # Pr(X_t = i, X_{t+1} = j)
    joint_rev = rev.stationary_law[:, None] * rev.matrix
    np.testing.assert_allclose(joint_rev, joint.T, atol=1e-14)
    # the reversal has the same stationary law and is itself a proper (row-stochastic) chain
    np.testing.assert_allclose(rev.stationary_law, pi, atol=1e-14)
    np.testing.assert_allclose(rev.matrix.sum(axis=1), 1.0, atol=1e-14)
    # the chain is genuinely non-reversible, so the reversal differs from P
    assert np.abs(rev.matrix - P3).max() > 0.1
    # reversing twice gives the chain back
    np.testing.assert_allclose(rev.time_reversal().matrix, P3, atol=1e-13)


def test_time_reversal_matches_bayes_on_enumerated_pairs():
    # Pr(X_t = i | X_{t+1} = j) by summing the stationary joint of (X_t, X_{t+1})
    chain = MarkovChain(P3)
    pi = chain.stationary_law
    rev = chain.time_reversal().matrix
    for j in range(3):
        col = [pi[i] * P3[i, j] for i in range(3)]
        for i in range(3):
            assert rev[j, i] == pytest.approx(col[i] / sum(col), abs=1e-14)


@pytest.mark.parametrize(("alpha", "beta"), [(0.01, 0.8), (0.6, 0.9), (0.7, 0.2)])
def test_binary_stationary_chain_is_reversible(alpha, beta):
    chain = MarkovChain.binary(alpha, beta)
    np.testing.assert_allclose(chain.time_reversal().matrix, chain.matrix, atol=1e-15)


# ---------------------------------------------------------------------------------------------
# Marginals
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("P", "init"),
    [
        ([[0.9, 0.1], [0.2, 0.8]], [1.0, 0.0]),
        ([[0.4, 0.6], [0.9, 0.1]], [0.3, 0.7]),
        (P3.tolist(), [0.0, 0.0, 1.0]),
    ],
)
def test_marginals_of_non_stationary_initial_law(P, init):
    P = np.array(P)
    chain = MarkovChain(P, initial=init)
    assert not chain.stationary
    n = 15
    M = chain.marginals(n)
    law = np.array(init, dtype=float)
    for t in range(n):
        np.testing.assert_allclose(M[t], law, atol=1e-14)
        np.testing.assert_allclose(chain.marginal(t), law, atol=1e-14)
        law = law @ P
    # they converge to the stationary law
    np.testing.assert_allclose(chain.marginal(400), MarkovChain(P).initial, atol=1e-10)
    with pytest.raises(ValueError, match="0-based"):
        chain.marginal(-1)


def test_binary_marginal_closed_form():
    # Pr(X_t = 1 | X_0 = 0) = α_t = α/(α+β)(1 − λ^t)
    a, b = 0.1, 0.3
    chain = MarkovChain.binary(a, b, initial=[1.0, 0.0])
    for t in range(10):
        assert chain.marginal(t)[1] == pytest.approx(a / (a + b) * (1 - (1 - a - b) ** t), abs=1e-15)


def test_stationary_marginals_are_constant():
    chain = MarkovChain.binary(0.25, 0.5)
    np.testing.assert_array_equal(chain.marginals(5), np.tile([2 / 3, 1 / 3], (5, 1)))


def test_as_chain_accepts_chain_or_matrix():
    chain = MarkovChain.binary(0.2, 0.3)
    assert as_chain(chain) is chain
    np.testing.assert_array_equal(as_chain([[0.8, 0.2], [0.3, 0.7]]).matrix, chain.matrix)
