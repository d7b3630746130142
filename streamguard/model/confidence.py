"""Simultaneous confidence sets for a transition matrix from one observed (dependent) path.

Method (docs/model-sets.md §2): for each row i, a *mixture-martingale* confidence set with a
Dirichlet(½, …, ½) mixing law, at level δ/k; a union bound over the k rows makes the k row sets
hold simultaneously with probability ≥ 1 − δ.

Why it is valid for Markov (dependent) data. Let the transitions out of state i be observed at times
t_1 < t_2 < …, a random number N_i of them. Given everything up to t_m (the whole past of the
chain, observed or not), the next state is drawn from the row P[i, ·] (Markov property), provided
that whether a transition is *observed* does not depend on where it goes (missing readings are not
informative). So for any fixed θ in the simplex, Z_m(θ) = Π_{l ≤ m} θ[x_l] / P[i, x_l] has
E[Z_m | past] = Z_{m−1}: a non-negative martingale with Z_0 = 1, and so is its mixture
M_m = ∫ Z_m(θ) dDir(θ; ½) = B(½ + n) / (B(½) · Π_j P[i, j]^{n_j}) (n = the counts after m steps).
Ville's inequality gives Pr(∃ m: M_m ≥ 1/δ_i) ≤ δ_i — at *every* m at once, hence at the random,
path-dependent N_i: no "conditional on the visit counts" approximation is needed. The set

    C_i = { p in the simplex : Σ_j n_j log p_j > log B(½ + n) − log B(½) − log(1/δ_i) }

therefore contains the true row with probability ≥ 1 − δ_i. It is convex (a super-level set of a
concave function), never empty (it holds the MLE n/N), and with no data it is the whole simplex:
little data gives a wide set, never a refusal.

The per-entry bounds [lo_j, hi_j] are the projections of C_i (so they hold simultaneously with it):
for p_j = x the best the other entries can do is p_l = (1 − x) n_l / N_{−j}, so
x ∈ C_i's projection iff f(x) = n_j log x + N_{−j} log(1 − x) + Σ_{l≠j} n_l log(n_l / N_{−j}) > c,
and f is concave in x: two bisections from the MLE.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

#: The Dirichlet mixing weight of every entry (Jeffreys / Krichevsky–Trofimov).
MIX = 0.5
_BISECT = 200


def _log_beta(a: NDArray[np.float64]) -> float:
    from scipy.special import gammaln  # (calibration only: the daemon's import path stays free of scipy)

    return float(np.sum(gammaln(a)) - gammaln(np.sum(a)))


def row_threshold(counts: NDArray[np.int64], delta: float) -> float:
    """c: the row set is {p : Σ_j n_j log p_j > c} at level 1 − δ (module docstring)."""
    n = np.asarray(counts, dtype=np.float64)
    mix = np.full(n.shape, MIX)
    return _log_beta(mix + n) - _log_beta(mix) - math.log(1.0 / delta)


def row_log_likelihood(counts: NDArray[np.int64], row: NDArray[np.float64]) -> float:
    """Σ_j n_j log p_j (0·log 0 = 0; −inf when a seen transition has probability 0)."""
    total = 0.0
    for n_j, p_j in zip(np.asarray(counts), np.asarray(row, dtype=np.float64)):
        if n_j == 0:
            continue
        if p_j <= 0.0:
            return -math.inf
        total += float(n_j) * math.log(p_j)
    return total


def in_row_set(counts: NDArray[np.int64], row: NDArray[np.float64], threshold: float) -> bool:
    """Is the row ``row`` inside the confidence set {Σ n_j log p_j > threshold}?"""
    return row_log_likelihood(counts, row) > threshold


def _profile(n_j: float, big: float, const: float, x: float) -> float:
    """f(x) of the module docstring: the best log-likelihood with p_j = x (``big`` = N_{−j},
    ``const`` = Σ_{l≠j} n_l log(n_l / N_{−j}))."""
    val = const
    if n_j > 0:
        if x <= 0.0:
            return -math.inf
        val += n_j * math.log(x)
    if big > 0:
        if x >= 1.0:
            return -math.inf
        val += big * math.log1p(-x)
    return val


def entry_bounds(counts: NDArray[np.int64], threshold: float) -> NDArray[np.float64]:
    """(k, 2) array of [lo_j, hi_j]: the projections of the row set on each entry (outward-rounded:
    the bisection keeps the last point *outside* the set, so the interval contains the projection)."""
    n = np.asarray(counts, dtype=np.float64)
    N = float(n.sum())
    out = np.zeros((n.shape[0], 2))
    for j in range(n.shape[0]):
        rest = np.delete(n, j)
        big = float(rest.sum())
        const = float(np.sum(rest[rest > 0] * np.log(rest[rest > 0] / big))) if big > 0 else 0.0
        n_j = float(n[j])

        def f(x: float) -> float:
            return _profile(n_j, big, const, x)

        inside = n_j / N if N > 0 else 0.5  # the MLE (always inside), or any point with no data
        bounds = []
        for edge in (0.0, 1.0):
            if f(edge) > threshold:
                bounds.append(edge)
                continue
            a, b = inside, edge  # a inside, b outside
            for _ in range(_BISECT):
                mid = 0.5 * (a + b)
                if mid == a or mid == b:
                    break
                if f(mid) > threshold:
                    a = mid
                else:
                    b = mid
            bounds.append(b)
        out[j] = bounds
    return out


def excludes_range(counts: NDArray[np.int64], threshold: float, j: int, lo: float, hi: float) -> bool:
    """Is the row set's projection on entry j disjoint from [lo, hi]? f (module docstring) is
    concave with its maximum at the MLE, so its maximum over [lo, hi] is at the MLE clamped into
    [lo, hi]: one evaluation, exact."""
    n = np.asarray(counts, dtype=np.float64)
    N = float(n.sum())
    if N == 0:
        return False
    rest = np.delete(n, j)
    big = float(rest.sum())
    const = float(np.sum(rest[rest > 0] * np.log(rest[rest > 0] / big))) if big > 0 else 0.0
    x = min(max(n[j] / N, lo), hi)
    return not _profile(float(n[j]), big, const, x) > threshold
