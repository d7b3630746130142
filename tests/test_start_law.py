"""The left side of a private record under an unknown initial law (audit/start.py), against brute force.

The reference enumerates every state path and every output sequence of the records left of p and
forms Pr(y | X_p = a) / Pr(y | X_p = b) directly from the joint law, for a given initial law μ. The
worst case over μ is approached on a grid of μ that includes points next to the point masses (a
supremum may be approached there without being attained: a released value that a point mass
makes impossible).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from streamguard.audit.start import laws_at_distance, left_pairs

GRID = np.r_[np.linspace(0.0, 1.0, 401), 1e-9, 1e-6, 1 - 1e-6, 1 - 1e-9]
#: For the one-sided checks (never below any law): the point masses, next to them, and a few inside.
COARSE = np.r_[np.linspace(0.0, 1.0, 11), 1e-9, 1 - 1e-9]


def brute_left(P: np.ndarray, mu: np.ndarray, rows_pos: list[np.ndarray], p: int) -> np.ndarray:
    """L[a, b] = max over left outputs y of log Pr(y | X_p=a)/Pr(y | X_p=b); records 0..p−1 with
    redaction rows ``rows_pos`` (by position), X_0 ~ μ."""
    joint: dict[tuple[int, ...], np.ndarray] = {}
    px = np.zeros(2)
    for xs in itertools.product(range(2), repeat=p + 1):
        pr = mu[xs[0]] * math.prod(P[xs[t - 1], xs[t]] for t in range(1, p + 1))
        px[xs[p]] += pr
        for ys in itertools.product(range(3), repeat=p):  # 0, 1: released value; 2: ⊥
            e = 1.0
            for t in range(p):
                r = rows_pos[t][xs[t]]
                e *= r if ys[t] == 2 else (1 - r) * (ys[t] == xs[t])
            if e > 0:
                joint.setdefault(ys, np.zeros(2))[xs[p]] += pr * e
    out = np.full((2, 2), -math.inf)
    np.fill_diagonal(out, 0.0)
    for d in joint.values():
        c = d / px
        for a, b in ((0, 1), (1, 0)):
            if c[a] > 0:
                out[a, b] = max(out[a, b], math.inf if c[b] == 0 else math.log(c[a] / c[b]))
    return out


def _random_case(rng: np.random.Generator, p: int) -> tuple[np.ndarray, list[np.ndarray]]:
    kind = rng.integers(3)
    lo, hi = [(0.01, 0.2), (0.7, 0.99), (0.05, 0.95)][kind]
    a, b = rng.uniform(lo, hi, 2)
    P = np.array([[1 - a, a], [b, 1 - b]])
    choices = [lambda: np.ones(2), lambda: np.zeros(2), lambda: rng.uniform(0, 1, 2),
               lambda: np.array([1.0, rng.uniform()]), lambda: np.array([0.0, rng.uniform()])]
    rows_pos = [choices[rng.integers(len(choices))]() for _ in range(p)]
    return P, rows_pos


@pytest.mark.parametrize("seed", range(4))
def test_reaching_the_start_with_a_given_law_is_exact(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(25):
        p = int(rng.integers(1, 5))
        P, rows_pos = _random_case(rng, p)
        mu = [np.array([1.0, 0.0]), np.array([0.0, 1.0]), rng.dirichlet([1, 1])][rng.integers(3)]
        rows = np.array(rows_pos[::-1])  # distances 1..p
        kern = np.broadcast_to(P, (p, 2, 2)).copy()
        got = left_pairs(kern, rows, mu[None], reaches_start=True)
        ref = brute_left(P, mu, rows_pos, p)
        assert np.array_equal(np.isinf(got), np.isinf(ref))
        fin = np.isfinite(ref)
        assert got[fin] == pytest.approx(ref[fin], abs=1e-12)
        assert np.allclose(left_pairs(kern, rows, mu[None], reaches_start=True, use_numpy=True), got)


@pytest.mark.parametrize("seed", range(2))
def test_reaching_the_start_with_any_law_is_the_supremum(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    for _ in range(10):
        p = int(rng.integers(1, 4))
        P, rows_pos = _random_case(rng, p)
        rows = np.array(rows_pos[::-1])
        kern = np.broadcast_to(P, (p, 2, 2)).copy()
        got = left_pairs(kern, rows, np.eye(2), reaches_start=True)
        ref = np.max([brute_left(P, np.array([1 - u, u]), rows_pos, p) for u in GRID], axis=0)
        assert np.all(got >= ref - 1e-12)  # never below any law
        assert np.all(got - ref <= 1e-4)  # and the supremum (grid resolution)


@pytest.mark.parametrize("seed", range(3))
def test_a_released_stand_in_far_from_the_start(seed: int) -> None:
    """Records before p−m−1 count as released; the stand-in's law is any μP^d (d ≥ its distance
    from the start, a lost reading included): never below brute force for any μ."""
    rng = np.random.default_rng(200 + seed)
    for _ in range(10):
        p = int(rng.integers(2, 5))
        m = int(rng.integers(0, p - 1))
        P, rows_pos = _random_case(rng, p)
        rows_pos[: p - m] = [np.zeros(2)] * (p - m)  # outside the window: released
        rows = np.array(rows_pos[::-1][:m]).reshape(-1, 2)
        kern = np.broadcast_to(P, (m + 1, 2, 2)).copy()
        d = p - m - 1
        got = left_pairs(kern, rows, laws_at_distance(P, d, None), reaches_start=False)
        for u in COARSE:
            mu = np.array([1 - u, u])
            assert np.all(got >= brute_left(P, mu, rows_pos, p) - 1e-12)
            lost = brute_left(P, mu, [np.ones(2)] + rows_pos, p + 1)  # one reading lost at the start
            assert np.all(got >= lost - 1e-12)
        given = np.array([0.0, 1.0])
        assert np.all(left_pairs(kern, rows, laws_at_distance(P, d, given), reaches_start=False)
                      >= brute_left(P, given, rows_pos, p) - 1e-12)


def test_a_fully_redacted_left_side_leaks_nothing_whatever_the_start() -> None:
    P = np.array([[0.9892, 0.0108], [0.265, 0.735]])
    rows = np.ones((7, 2))
    kern = np.broadcast_to(P, (7, 2, 2)).copy()
    assert np.all(left_pairs(kern, rows, np.eye(2), reaches_start=True) == 0.0)


def test_the_issues_booting_sensor_is_caught() -> None:
    """notes: issue 9 item 9 — the stationary plan placed at 1-based position 8 of 24 leaks 1.704
    nats when the chain starts in state 1; the worst case over laws is at least that."""
    from streamguard import MarkovChain
    from streamguard.redaction.plan import plan_stream

    chain = MarkovChain.binary(0.0108, 0.265)
    plan = plan_stream(chain, 0.42)
    H = plan.left_horizon
    p = 7
    rows = np.array([plan.left.red[d] if d < H else np.zeros(2) for d in range(p)])
    kern = np.broadcast_to(chain.matrix, (p, 2, 2)).copy()
    boot = left_pairs(kern, rows, np.array([[0.0, 1.0]]), reaches_start=True).max()
    worst = left_pairs(kern, rows, np.eye(2), reaches_start=True).max()
    stationary = left_pairs(kern, rows, chain.initial[None], reaches_start=True).max()
    assert stationary <= plan.left.budget * (1 + 1e-9)
    assert boot > 1.0 and worst >= boot


def test_plan_stream_reports_where_the_start_matters() -> None:
    """``plan --stream --json`` → ``start``: below ``redact_to_start`` the plan's left rows placed at
    p exceed the left budget for some initial law; from it on they do not — checked with the tests'
    own evaluator (tests/true_world.py: the exact supremum over initial laws), the right side fully
    redacted so that the total is the left side alone."""
    import json
    import subprocess
    import sys

    from true_world import worst_over_initial

    from streamguard import MarkovChain
    from streamguard.redaction.plan import plan_stream

    alpha, beta, eps = 0.0108, 0.265, 0.42
    out = subprocess.run([sys.executable, "-m", "streamguard.cli", "plan", "--alpha", str(alpha), "--beta", str(beta),
                          "--epsilon", str(eps), "--stream", "--json"], capture_output=True, check=True, timeout=120)
    start = json.loads(out.stdout)["start"]
    sp = plan_stream(MarkovChain.binary(alpha, beta), eps)
    H = sp.left_horizon

    def worst_left(p: int) -> float:
        rows = [sp.left.red[p - t - 1] if p - t <= H else (0.0, 0.0) for t in range(p)] + [(1.0, 1.0)] * 3
        return worst_over_initial(MarkovChain.binary(alpha, beta).matrix, np.array(rows), p).total

    over = [p for p in range(H + 1) if worst_left(p) > sp.left.budget * (1 + 1e-9)]
    assert start["redact_to_start"] == (max(over) + 1 if over else 0)
    assert start["worst_left"] == pytest.approx(max(worst_left(p) for p in range(start["redact_to_start"], H + 2)),
                                                rel=1e-9)
    assert -1e-13 <= worst_left(start["matters_until"]) - worst_left(10**4) < 1e-11
