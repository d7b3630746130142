"""The true-world evaluator (tests/true_world.py) against brute-force enumeration and hand values.

Seeded numpy loops over the chain families that matter (sticky α, β ≈ 0.01–0.1, anti-correlated
α, β ≈ 0.8–0.99, α > β and α < β), random redaction rows with exact 0, exact 1 and (1, 1) steps,
initial laws including point masses, and every position p. Bounded: well under 10 s.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from true_world import (brute_force_leakage, combine_copies, sampled_over_initial, transition, true_leakage,
                        worst_over_initial)


def _chain(rng: np.random.Generator, family: int) -> np.ndarray:
    if family == 0:  # sticky
        a, b = rng.uniform(0.01, 0.1, 2)
    elif family == 1:  # anti-correlated
        a, b = rng.uniform(0.8, 0.99, 2)
    else:  # α > β (family 2) or α < β (family 3)
        lo, hi = sorted(rng.uniform(0.02, 0.95, 2))
        a, b = (hi, lo) if family == 2 else (lo, hi)
    return transition(float(a), float(b))


def _rows(rng: np.random.Generator, n: int) -> np.ndarray:
    rows = rng.uniform(0.0, 1.0, (n, 2))
    pick = rng.uniform(size=(n, 2))
    rows[pick < 0.2] = 0.0
    rows[pick > 0.8] = 1.0
    rows[rng.uniform(size=n) < 0.2] = 1.0  # whole steps withheld
    return rows


def _law(rng: np.random.Generator) -> np.ndarray:
    u = float(rng.choice([0.0, 1.0, rng.uniform()]))
    return np.array([1.0 - u, u])


def _same(x: float, y: float) -> bool:
    return x == y or abs(x - y) <= 1e-9


def test_exact_evaluator_equals_brute_force_on_random_worlds() -> None:
    rng = np.random.default_rng(20240601)
    checked = infinite = 0
    for i in range(100):
        P, mu = _chain(rng, i % 4), _law(rng)
        n = 8 if i % 50 == 0 else int(rng.integers(1, 7))
        rows = _rows(rng, n)
        for p in range(n):
            exact, brute = true_leakage(P, mu, rows, p).total, brute_force_leakage(P, mu, rows, p)
            assert _same(exact, brute), (i, p, exact, brute, P.tolist(), mu.tolist(), rows.tolist())
            checked += 1
            infinite += math.isinf(brute)
    assert checked > 300 and 0 < infinite < checked  # both finite and infinite cases were exercised


def test_the_initial_law_matters_and_the_evaluator_follows_it() -> None:
    """A chain that boots in a known state: the left neighbour's value says nothing more than
    the known start, so the leakage from the left is 0 for μ = δ_hi — but not for other laws."""
    P = transition(0.1, 0.3)
    rows = np.array([[0.0, 0.0], [1.0, 1.0]])  # step 0 released, step 1 (p) withheld
    assert true_leakage(P, [0.0, 1.0], rows, 1).total == pytest.approx(0.0, abs=1e-12)
    stationary = np.array([0.75, 0.25])
    assert brute_force_leakage(P, stationary, rows, 1) > 0.5
    assert _same(true_leakage(P, stationary, rows, 1).total, brute_force_leakage(P, stationary, rows, 1))


def test_hand_values() -> None:
    """Released right neighbour, p = 0: L = max_x max_(a≠b) log P[a,x]/P[b,x] = log(0.7/0.1);
    a withheld step between them: P² instead of P; the private step itself released: ∞."""
    P = transition(0.1, 0.3)
    assert true_leakage(P, [0.5, 0.5], [[1, 1], [0, 0]], 0).total == pytest.approx(math.log(0.7 / 0.1), abs=1e-12)
    P2 = P @ P  # [[0.84, 0.16], [0.48, 0.52]]
    two = max(math.log(P2[0, 0] / P2[1, 0]), math.log(P2[1, 1] / P2[0, 1]))
    assert true_leakage(P, [0.5, 0.5], [[1, 1], [1, 1], [0, 0]], 0).total == pytest.approx(two, abs=1e-12)
    assert true_leakage(P, [0.5, 0.5], [[0.5, 0.5], [1, 1]], 0).total == math.inf
    assert true_leakage(P, [0.5, 0.5], [[1, 1]] * 4, 2).total == pytest.approx(0.0, abs=1e-12)  # nothing published


def _brute_copies(P: np.ndarray, mu: np.ndarray, copies: list[list[tuple[float, float]]], p: int) -> float:
    """Leakage by enumeration when step t publishes len(copies[t]) independent copies: outputs are
    tuples of per-copy outputs (0, 1 or ⊥ = 2)."""
    n = len(copies)
    per_step = [list(itertools.product((0, 1, 2), repeat=len(c))) for c in copies]

    def emit(t: int, ys: tuple[int, ...], x: int) -> float:
        out = 1.0
        for (r0, r1), y in zip(copies[t], ys):
            r = (r0, r1)[x]
            out *= r if y == 2 else (1.0 - r if y == x else 0.0)
        return out

    mu = np.array([0.5, 0.5]) if p == 0 else mu
    cond: dict[tuple[tuple[int, ...], ...], list[float]] = {}
    for ys in itertools.product(*per_step):
        joint = [0.0, 0.0]
        for xs in itertools.product((0, 1), repeat=n):
            pr = mu[xs[0]] * math.prod(P[xs[t - 1], xs[t]] for t in range(1, n))
            joint[xs[p]] += pr * math.prod(emit(t, ys[t], xs[t]) for t in range(n))
        cond[ys] = joint
    marg = (mu @ np.linalg.matrix_power(P, p))
    best = -math.inf
    for a, b in ((0, 1), (1, 0)):
        for joint in cond.values():
            if joint[a] > 0.0:
                if joint[b] <= 0.0:
                    return math.inf
                best = max(best, math.log(joint[a] / marg[a]) - math.log(joint[b] / marg[b]))
    return best


def test_independent_copies_are_one_emission_with_the_product_row() -> None:
    rng = np.random.default_rng(7)
    for i in range(12):
        P, mu = _chain(rng, i % 4), _law(rng)
        n = int(rng.integers(2, 4))
        copies = [[tuple(r) for r in _rows(rng, int(rng.integers(0, 3)))] if rng.uniform() < 0.6
                  else [tuple(_rows(rng, 1)[0])] for _ in range(n)]
        rows = np.array([combine_copies(c) for c in copies])
        for p in range(n):
            assert _same(true_leakage(P, mu, rows, p).total, _brute_copies(P, mu, copies, p)), (i, p, copies)
    assert combine_copies([]).tolist() == [1.0, 1.0]
    assert combine_copies([(0.5, 1.0), (0.5, 0.2)]).tolist() == [0.25, 0.2]


def test_worst_over_initial_is_the_supremum_over_the_simplex() -> None:
    """≥ the exact leakage (and the brute force) at every law of a grid that includes both point
    masses; within 1e-3 of the grid's maximum (the grid misses the exact maximiser by ≤ 1/200)."""
    rng = np.random.default_rng(11)
    grid = np.concatenate([[0.0, 1e-12, 1.0 - 1e-12, 1.0], np.linspace(0.0, 1.0, 101)])
    for i in range(12):
        P = _chain(rng, i % 4)
        n = int(rng.integers(2, 8))
        rows = _rows(rng, n)
        for p in range(n):
            worst = worst_over_initial(P, rows, p).total
            values = [true_leakage(P, [1.0 - u, u], rows, p).total for u in grid]
            top = max(values)
            assert top <= worst + 1e-9, (i, p, worst, top)
            assert math.isinf(worst) == math.isinf(top), (i, p, worst, top)
            if math.isfinite(worst):
                assert worst - top <= 1e-3, (i, p, worst, top)
            if n <= 6:
                for u in (0.0, 1.0, 0.3):
                    assert brute_force_leakage(P, [1.0 - u, u], rows, p) <= worst + 1e-9


def test_bad_inputs_are_refused() -> None:
    P = transition(0.2, 0.3)
    with pytest.raises(ValueError, match="alpha and beta"):
        transition(0.0, 0.5)
    with pytest.raises(ValueError, match="rows"):
        true_leakage(P, [0.5, 0.5], [[1.2, 0.0]], 0)
    with pytest.raises(ValueError, match="p must"):
        true_leakage(P, [0.5, 0.5], [[1.0, 1.0]], 1)
    with pytest.raises(ValueError, match="mu"):
        true_leakage(P, [0.6, 0.6], [[1.0, 1.0]], 0)
    with pytest.raises(ValueError, match="at most"):
        brute_force_leakage(P, [0.5, 0.5], [[1.0, 1.0]] * 9, 0)


def _k_chain(rng: np.random.Generator, k: int, kind: int) -> np.ndarray:
    if kind == 0:  # random, not reversible
        return rng.dirichlet(np.full(k, 0.6), size=k)
    if kind == 1:  # sticky
        return 0.8 * np.eye(k) + 0.2 * rng.dirichlet(np.ones(k), size=k)
    P = 0.2 * np.eye(k) + 0.8 * np.roll(np.eye(k), 1, axis=1)  # cyclic, zeros
    return P


def test_k_states_against_brute_force_and_the_simplex() -> None:
    """k = 3, 4: exact vs enumeration for random laws; the worst case over laws (edges of the
    simplex) is ≥ the leakage at sampled interior laws and ≥ brute force at them."""
    rng = np.random.default_rng(5)
    for i in range(4):
        k = 3 + i % 2
        P = _k_chain(rng, k, (i + i // 2) % 3)
        n = 5 if k == 3 else 4
        rows = rng.uniform(0, 1, (n, k))
        rows[rng.uniform(size=(n, k)) < 0.3] = 0.0
        rows[rng.uniform(size=(n, k)) < 0.3] = 1.0
        mu = rng.dirichlet(np.ones(k))
        laws = rng.dirichlet(np.full(k, 0.3), size=6)
        for p in range(n):
            assert _same(true_leakage(P, mu, rows, p).total, brute_force_leakage(P, mu, rows, p)), (i, p)
            if p not in (n // 2, n - 1):
                continue
            worst = worst_over_initial(P, rows, p).total
            assert sampled_over_initial(P, rows, p, laws) <= worst + 1e-9
            assert brute_force_leakage(P, laws[0], rows, p) <= worst + 1e-9
    assert combine_copies([(0.5, 1.0, 0.2), (0.5, 0.2, 1.0)], k=3).tolist() == [0.25, 0.2, 0.2]


def test_time_varying_kernels_against_brute_force_and_the_simplex() -> None:
    """A kernel per step (issue 25: binary families mixed step by step, and k = 3 random kernels):
    exact vs enumeration for random laws at every p; the worst case over laws (edges of the
    simplex) ≥ the leakage at sampled laws; a constant sequence gives the homogeneous figure."""
    rng = np.random.default_rng(25)
    checked = 0
    for i in range(40):
        k = 2 if i % 4 else 3
        n = int(rng.integers(2, 8 if k == 2 else 6))
        Ks = np.stack([_chain(rng, int(rng.integers(4))) if k == 2 else _k_chain(rng, 3, int(rng.integers(2)))
                       for _ in range(n - 1)])
        rows = _rows(rng, n) if k == 2 else rng.choice([0.0, 0.4, 1.0], size=(n, k))
        mu = rng.dirichlet(np.ones(k))
        laws = np.concatenate([np.eye(k), rng.dirichlet(np.full(k, 0.3), size=4)])
        for p in range(n):
            exact = true_leakage(Ks, mu, rows, p).total
            assert _same(exact, brute_force_leakage(Ks, mu, rows, p)), (i, p, exact, Ks.tolist(), rows.tolist())
            assert sampled_over_initial(Ks, rows, p, laws) <= worst_over_initial(Ks, rows, p).total + 1e-9
            checked += 1
    assert checked > 150
    P = transition(0.2, 0.4)
    rows = _rows(np.random.default_rng(1), 6)
    assert _same(true_leakage(np.stack([P] * 5), [0.3, 0.7], rows, 3).total, true_leakage(P, [0.3, 0.7], rows, 3).total)
