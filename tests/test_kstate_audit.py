"""Exact k-state redaction audit (audit/kstate.py) against brute-force enumeration (audit/brute.py,
which shares no code with it), against today's binary O(n) audit, and its numba kernel against the
numpy twin. Chains: random (non-reversible), sticky, cyclic with zeros, near-reducible; random
initial laws; rows with 0, 1 and fractional entries."""

from __future__ import annotations

import math

import numpy as np
import pytest

from streamguard.audit.brute import brute_force_leakage
from streamguard.audit.exact import exact_leakage
from streamguard.audit.kstate import RowsError, check_rows, redaction_leakage, right_pairs
from streamguard.model.chain import MarkovChain
from streamguard.privacy.channel import ChannelSequence


def chain_of(kind: str, k: int, rng: np.random.Generator) -> np.ndarray:
    """Transition matrices of the issue's families."""
    if kind == "random":
        return rng.dirichlet(np.full(k, 0.7), size=k)
    if kind == "sticky":
        return 0.85 * np.eye(k) + 0.15 * rng.dirichlet(np.ones(k), size=k)
    if kind == "cyclic":  # mostly i → i+1, some zeros: not reversible, periodic-ish
        P = 0.1 * np.eye(k) + 0.9 * np.roll(np.eye(k), 1, axis=1)
        return P
    if kind == "near-reducible":  # two blocks joined by a 1e-3 leak
        P = np.eye(k) * 0.5 + 0.5 / k
        P[: k // 2, k // 2:] *= 1e-3
        P[k // 2:, : k // 2] *= 1e-3
        return P / P.sum(axis=1, keepdims=True)
    raise AssertionError(kind)


def random_rows(rng: np.random.Generator, n: int, k: int, p: int) -> np.ndarray:
    rows = rng.uniform(0, 1, (n, k))
    rows[rng.uniform(size=(n, k)) < 0.3] = 0.0
    rows[rng.uniform(size=(n, k)) < 0.25] = 1.0
    rows[p] = 1.0
    return rows


def _close(a: float, b: float) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= 1e-9 * max(1.0, abs(b))


@pytest.mark.parametrize("kind", ["random", "sticky", "cyclic", "near-reducible"])
def test_matches_brute_force_with_given_initial_law(kind: str) -> None:
    rng = np.random.default_rng(abs(hash(kind)) % 2**32)
    checked = 0
    for _ in range(40):
        k = int(rng.integers(2, 5))
        n = int(rng.integers(1, {2: 9, 3: 7, 4: 6}[k]))
        if k**n * 3**n > 2_000_000:
            continue
        P = chain_of(kind, k, rng)
        mu = rng.dirichlet(np.ones(k))
        p = int(rng.integers(0, n))
        rows = random_rows(rng, n, k, p)
        brute = brute_force_leakage(MarkovChain(P, mu), ChannelSequence.from_redaction(rows), p)
        fast = redaction_leakage(P, mu, rows, p)
        ref = redaction_leakage(P, mu, rows, p, use_numpy=True)
        assert _close(fast.total, brute), (k, n, p, fast.total, brute)
        assert _close(ref.total, brute)
        assert fast.total <= fast.left + fast.right + 1e-12  # the sides compose
        checked += 1
    assert checked >= 25


def test_agrees_with_binary_audit() -> None:
    rng = np.random.default_rng(7)
    worst = 0.0
    for _ in range(200):
        a, b = rng.uniform(0.01, 0.99, 2)  # any α, β: α > β and λ < 0 included
        chain = MarkovChain.binary(a, b)
        n = int(rng.integers(1, 30))
        p = int(rng.integers(0, n))
        rows = random_rows(rng, n, 2, p)
        binary = exact_leakage(chain, ChannelSequence.from_redaction(rows), p).total
        kst = redaction_leakage(chain.matrix, chain.initial, rows, p).total
        if math.isinf(binary) or math.isinf(kst):
            assert binary == kst
            continue
        worst = max(worst, abs(binary - kst))
    assert worst <= 1e-12


def test_any_initial_law_is_the_supremum_over_laws() -> None:
    """None (every initial law): never below a law sampled on the simplex, and equal (to the grid's
    resolution) to the best law on the simplex's edges, where docs §4 says the supremum lies."""
    rng = np.random.default_rng(11)
    k = 3
    us = np.r_[np.linspace(0.0, 1.0, 41), 1e-7, 1 - 1e-7]
    for _ in range(4):
        P = chain_of("random", k, rng)
        n = int(rng.integers(2, 4))
        p = n - 1
        rows = random_rows(rng, n, k, p)
        worst = redaction_leakage(P, None, rows, p).total
        sampled = -math.inf
        for i in range(k):
            for j in range(i + 1, k):
                for u in us:
                    mu = np.zeros(k)
                    mu[i], mu[j] = 1 - u, u
                    val = brute_force_leakage(MarkovChain(P, mu), ChannelSequence.from_redaction(rows), p)
                    sampled = max(sampled, val)
        for mu in rng.dirichlet(np.ones(k), size=10):
            inner = brute_force_leakage(MarkovChain(P, mu), ChannelSequence.from_redaction(rows), p)
            assert inner <= worst + 1e-9
        assert sampled <= worst + 1e-9
        assert worst - sampled <= 2e-2 * max(1.0, worst)


def test_kernel_matches_numpy_twin_on_long_windows() -> None:
    rng = np.random.default_rng(3)
    for k in (3, 5, 8):
        P = chain_of("sticky", k, rng)
        rows = random_rows(rng, 400, k, 0)[1:]
        rows[:300] = 1.0  # a long redacted run: the scaled rows must not underflow
        kern = np.broadcast_to(P, (rows.shape[0], k, k))
        a, b = right_pairs(kern, rows), right_pairs(kern, rows, use_numpy=True)
        assert np.all(np.isfinite(a[~np.eye(k, dtype=bool)]))
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_rows_are_checked_and_impossible_secrets_follow_the_convention() -> None:
    with pytest.raises(RowsError):
        check_rows([[0.5, 1.2, 0.0]], 3)
    with pytest.raises(RowsError):
        check_rows([[0.5, 0.5]], 3)
    P = chain_of("cyclic", 3, np.random.default_rng(0))
    # X_1 cannot be state 2 when X_0 = 0 surely (docs/initial-law.md): everything redacted leaves one
    # output (no leakage, where this raised before) ...
    rows = np.ones((3, 3))
    assert redaction_leakage(P, [1.0, 0.0, 0.0], rows, 1).total == 0.0
    # ... so does X_0 = 0 released surely (one output again); but X_0 released half of the time has
    # two outputs, and leaks without bound about the impossible value (the worst version of the
    # undefined conditional), like the brute force
    chain = MarkovChain(P, [1.0, 0.0, 0.0])
    for r0, expected in ((0.0, 0.0), (0.5, math.inf)):
        rows[0] = r0
        assert redaction_leakage(P, [1.0, 0.0, 0.0], rows, 1).total == expected
        assert brute_force_leakage(chain, ChannelSequence.from_redaction(rows), 1) == expected
