"""The consumer's posterior (streamguard.consumer.posterior) against brute-force enumeration of
every hidden sequence, on small binary and 3-state chains (issue 14)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from streamguard.consumer.posterior import REDACTED, UNKNOWN, PosteriorError, posterior


def _brute(P, mu, obs, rows, counted):
    """Posterior marginals, count means/variances and expected transitions by enumeration."""
    n, k = len(obs), P.shape[0]
    weights, seqs = [], []
    for xs in itertools.product(range(k), repeat=n):
        w = mu[xs[0]]
        for t in range(1, n):
            w *= P[xs[t - 1], xs[t]]
        for t, x in enumerate(xs):
            if obs[t] == UNKNOWN:
                continue
            w *= rows[t][x] if obs[t] == REDACTED else (1 - rows[t][x]) * (x == obs[t])
        weights.append(w)
        seqs.append(xs)
    w = np.array(weights) / sum(weights)
    X = np.array(seqs)
    marg = np.stack([(w[:, None] * (X == s)).sum(axis=0) for s in range(k)], axis=1)
    counts = np.stack([((X == s) & counted).sum(axis=1) for s in range(k)], axis=1)
    mean = w @ counts
    var = w @ counts**2 - mean**2
    trans = np.zeros((k, k))
    for x, y in itertools.product(range(k), repeat=2):
        trans[x, y] = w @ ((X[:, :-1] == x) & (X[:, 1:] == y)).sum(axis=1)
    return marg, mean, var, trans


CASES = [
    (np.array([[0.8, 0.2], [0.3, 0.7]]), 2),
    (np.array([[0.1, 0.9], [0.6, 0.4]]), 2),  # negative correlation
    (np.array([[0.5, 0.3, 0.2], [0.1, 0.7, 0.2], [0.25, 0.25, 0.5]]), 3),
]


@pytest.mark.parametrize("P,k", CASES)
def test_posterior_matches_brute_force(P, k):
    rng = np.random.default_rng(14 + k)
    n = 7 if k == 2 else 5
    checked = 0
    for trial in range(40):
        rows = rng.uniform(0, 1, size=(n, k))
        rows[rng.uniform(size=n) < 0.2] = 1.0  # some positions always redacted
        obs = rng.integers(-2, k, size=n)
        obs[obs == UNKNOWN] = UNKNOWN if trial % 2 else REDACTED
        counted = rng.uniform(size=n) < 0.8
        mu = rng.dirichlet(np.ones(k))
        for t in np.flatnonzero(obs >= 0):  # a released value was possible under its row
            rows[t, obs[t]] = min(rows[t, obs[t]], 0.9)
        post = posterior(P, mu, obs, rows, counted)
        marg, mean, var, trans = _brute(P, mu, obs, rows, counted)
        np.testing.assert_allclose(post.marginals, marg, atol=1e-12)
        np.testing.assert_allclose(post.count_mean, mean, atol=1e-10)
        np.testing.assert_allclose(post.count_var, var, atol=1e-10)
        np.testing.assert_allclose(post.transitions, trans, atol=1e-10)
        checked += 1
    assert checked == 40


def test_released_positions_are_certain_and_impossible_releases_fail():
    P = np.array([[1.0, 0.0], [0.0, 1.0]])  # a chain that never changes state
    post = posterior(P, np.array([0.5, 0.5]), [0, REDACTED, 0], np.array([[0.0, 0], [0.5, 0.5], [0, 0]]))
    np.testing.assert_allclose(post.marginals, [[1, 0], [1, 0], [1, 0]])
    assert post.count_var.tolist() == [0.0, 0.0]
    with pytest.raises(PosteriorError, match="impossible"):
        posterior(P, np.array([0.5, 0.5]), [0, REDACTED, 1], np.array([[0.0, 0], [0.5, 0.5], [0, 0]]))


def test_sampled_paths_follow_the_posterior():
    """Forward filtering, backward sampling: the draws' marginals and transition counts match the
    exact posterior within 5 standard errors (false-failure rate < 1e-4 per compared number)."""
    from streamguard.consumer.posterior import sample_paths

    P = CASES[2][0]
    rng = np.random.default_rng(3)
    n, draws = 30, 4000
    obs = rng.integers(0, 3, size=n)
    obs[5:12] = REDACTED
    obs[20:24] = UNKNOWN
    obs[28:] = REDACTED
    rows = rng.uniform(0.2, 0.9, size=(n, 3))
    mu = np.array([0.2, 0.5, 0.3])
    post = posterior(P, mu, obs, rows)
    paths = sample_paths(P, mu, obs, rows, draws, np.random.default_rng(4))
    assert np.all(paths[:, obs >= 0] == obs[obs >= 0])
    freq = np.stack([(paths == s).mean(axis=0) for s in range(3)], axis=1)
    se = np.sqrt(post.marginals * (1 - post.marginals) / draws) + 1e-12
    assert np.all(np.abs(freq - post.marginals) <= 5 * se + 1e-9)
    counts = np.array([[((paths[:, :-1] == x) & (paths[:, 1:] == y)).sum(axis=1) for y in range(3)]
                       for x in range(3)])  # (3, 3, draws)
    sd = counts.std(axis=2) / np.sqrt(draws) + 1e-12
    assert np.all(np.abs(counts.mean(axis=2) - post.transitions) <= 5 * sd + 1e-9)
