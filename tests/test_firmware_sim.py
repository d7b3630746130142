"""Simulated Markov sources (firmware_sim.sources.MarkovSource)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from firmware_sim import MarkovSource
from streamguard import MarkovChain

P3 = np.array([[0.2, 0.7, 0.1], [0.1, 0.3, 0.6], [0.5, 0.0, 0.5]])


@given(
    alpha=st.floats(0.01, 0.99),
    beta=st.floats(0.01, 0.99),
    seed=st.integers(0, 2**63),
    n=st.integers(0, 400),
)
def test_reproducible_and_numba_equals_numpy(alpha, beta, seed, n):
    chain = MarkovChain.binary(alpha, beta)
    a = MarkovSource(chain, seed).states(n)
    b = MarkovSource(chain, seed).states(n)
    c = MarkovSource(chain, seed).states(n, use_numpy=True)
    assert a.dtype == np.int8 and a.shape == (n,)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    assert np.all((a == 0) | (a == 1))


def test_three_state_numba_equals_numpy_and_respects_zero_transitions():
    chain = MarkovChain(P3)
    a = MarkovSource(chain, 11).states(20_000)
    b = MarkovSource(chain, 11).states(20_000, use_numpy=True)
    np.testing.assert_array_equal(a, b)
    # P[2, 1] = 0: the transition 2 → 1 never happens
    assert not np.any((a[:-1] == 2) & (a[1:] == 1))
    assert set(np.unique(a)) == {0, 1, 2}


def test_successive_calls_continue_the_same_path():
    chain = MarkovChain(P3)
    whole = MarkovSource(chain, 99).states(1000)
    src = MarkovSource(chain, 99)
    parts = np.concatenate([src.states(1), src.states(0), src.states(300), src.states(699)])
    np.testing.assert_array_equal(parts, whole)


def test_different_seeds_give_different_paths():
    chain = MarkovChain.binary(0.3, 0.4)
    a = MarkovSource(chain, 1).states(500)
    b = MarkovSource(chain, 2).states(500)
    assert np.mean(a == b) < 0.8


def test_deterministic_initial_law_is_respected():
    chain = MarkovChain(P3, initial=[0.0, 0.0, 1.0])
    for seed in range(20):
        assert MarkovSource(chain, seed).states(1)[0] == 2


N_STEPS = 300_000


@pytest.mark.parametrize(
    "matrix",
    [[[0.99, 0.01], [0.8, 0.2]], [[0.4, 0.6], [0.9, 0.1]], P3.tolist()],
    ids=["fig3", "lambda<0", "three-state"],
)
def test_empirical_transition_frequencies_match_the_matrix(matrix):
    """Transition counts from state i are Multinomial(n_i, P[i]) given n_i (Markov property).

    Each cell must satisfy |z| < 5 with z = (c_ij − n_i P_ij)/√(n_i P_ij (1 − P_ij)): a false
    failure has probability ≈ 5.7e-7 per cell (≤ 9 cells). The seed is fixed, so the test is
    deterministic; the bound says the seed is not special. Cells with P_ij = 0 must be empty.
    """
    P = np.array(matrix)
    chain = MarkovChain(P)
    x = MarkovSource(chain, 2024).states(N_STEPS).astype(np.int64)
    k = P.shape[0]
    counts = np.zeros((k, k), dtype=np.int64)
    np.add.at(counts, (x[:-1], x[1:]), 1)
    for i in range(k):
        n_i = counts[i].sum()
        assert n_i > 0
        for j in range(k):
            if P[i, j] == 0.0:
                assert counts[i, j] == 0
                continue
            z = (counts[i, j] - n_i * P[i, j]) / math.sqrt(n_i * P[i, j] * (1 - P[i, j]))
            assert abs(z) < 5.0, (i, j, counts[i, j], n_i, z)
    # the visit frequencies approach the stationary law (loose: the chain mixes fast here)
    visits = np.bincount(x, minlength=k) / N_STEPS
    np.testing.assert_allclose(visits, chain.initial, atol=0.01)


def test_initial_state_frequencies_match_the_initial_law():
    """X_0 over 4000 seeds: Binomial(4000, 0.3); |z| < 5 (false failure ≈ 5.7e-7)."""
    chain = MarkovChain.binary(0.2, 0.3, initial=[0.7, 0.3])
    firsts = np.array([MarkovSource(chain, s).states(1)[0] for s in range(4000)])
    k = int(np.count_nonzero(firsts == 1))
    z = (k - 4000 * 0.3) / math.sqrt(4000 * 0.3 * 0.7)
    assert abs(z) < 5.0
