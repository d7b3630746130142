"""The ``exact`` q design as one compiled search (notes/000 §4.3), with an incremental exact oracle.

Exact side leakage of a redaction table, forward form. Order a side outward, d = 1 … D, with
redaction rows r_d = (Pr(⊥|X=0), Pr(⊥|X=1)) and outward kernels K_d. Every output of the side is
classified by its first released record: "first release at d with value x" (possible when
r_d(x) < 1), or "nothing released" (only when the side ends without a revealing record). Given
X_d = x is released, everything farther out is independent of X_p (Markov), and the factor
1 − r_d(x) is common to both values of X_p, so that class's likelihood ratio is exactly

    Pr(Y_1..Y_{d−1} = ⊥, X_d = x | X_p = a),   u_0 = I,  u_d = u_{d−1} K_d diag(r_d),
    (u_{d−1} K_d)[a, x],

and L(X_p → Y_side) = max over supported classes of |log ratio(0 vs 1)|: the same number as the
backward recursion of :func:`streamguard.audit.exact.side_range` (tests compare the two).

Because class d depends on r_1 … r_{d−1} only, changing one row d₀ leaves the forward states and
the running maximum before d₀ unchanged: the search keeps them and recomputes from d₀ outward, and
stops at the first class over the limit (a failed trial costs only the distance to it). The
search is the one of :func:`streamguard.redaction.design.q_exact`; its result is re-checked with
the backward audit before it is used.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from ..support.jit import kernel


@kernel
def _class_leakage(v0, v1):  # pragma: no cover - compiled
    """|log(v0 / v1)| of one output class; −1 when the class is impossible (both 0)."""
    if v0 <= 0.0 and v1 <= 0.0:
        return -1.0
    if v0 <= 0.0 or v1 <= 0.0:
        return math.inf
    return abs(math.log(v0) - math.log(v1))


@kernel
def _leakage_from(kernels, red, cut, ends_open, U, best, valid, limit):  # pragma: no cover - compiled
    """Side leakage of ``red`` (rows 0..cut−1) given that U[d], best[d] are valid for d < valid[0].

    U[d] is the normalised forward state u_d (U[0] = I); best[d] the largest class leakage among
    first releases at distances ≤ d. Recomputes from valid[0]; returns the leakage, or inf as soon
    as it exceeds ``limit`` (the states from that distance on are then marked invalid).
    """
    start = max(valid[0], 1)
    K = kernels.shape[0]
    for d in range(start, cut + 1):
        kk = 0 if K == 1 else d - 1
        a00 = U[d - 1, 0, 0] * kernels[kk, 0, 0] + U[d - 1, 0, 1] * kernels[kk, 1, 0]
        a01 = U[d - 1, 0, 0] * kernels[kk, 0, 1] + U[d - 1, 0, 1] * kernels[kk, 1, 1]
        a10 = U[d - 1, 1, 0] * kernels[kk, 0, 0] + U[d - 1, 1, 1] * kernels[kk, 1, 0]
        a11 = U[d - 1, 1, 0] * kernels[kk, 0, 1] + U[d - 1, 1, 1] * kernels[kk, 1, 1]
        r0 = red[d - 1, 0]
        r1 = red[d - 1, 1]
        worst = best[d - 1]
        if r0 < 1.0:
            worst = max(worst, _class_leakage(a00, a10))
        if r1 < 1.0:
            worst = max(worst, _class_leakage(a01, a11))
        best[d] = worst
        if worst > limit:
            valid[0] = d  # best[d] and U[d] are not kept
            return math.inf
        b00 = a00 * r0
        b01 = a01 * r1
        b10 = a10 * r0
        b11 = a11 * r1
        s = b00 + b01 + b10 + b11
        if s > 0.0:
            b00 /= s
            b01 /= s
            b10 /= s
            b11 /= s
        U[d, 0, 0] = b00
        U[d, 0, 1] = b01
        U[d, 1, 0] = b10
        U[d, 1, 1] = b11
    valid[0] = cut + 1
    worst = best[cut]
    if ends_open:  # nothing released on the whole side
        worst = max(worst, _class_leakage(U[cut, 0, 0] + U[cut, 0, 1], U[cut, 1, 0] + U[cut, 1, 1]))
    if worst > limit:
        return math.inf
    return worst


@kernel
def _write(red, m_pos, common, q, valid):  # pragma: no cover - compiled
    """Put q (one value per M record) into ``red``; forget the states from the first change on."""
    for j in range(m_pos.shape[0]):
        m = m_pos[j]
        if red[m, common[m]] != q[j]:
            red[m, common[m]] = q[j]
            valid[0] = min(valid[0], m + 1)


@kernel
def _feasible(kernels, red, cut, ends_open, U, best, valid, m_pos, common, q, limit):  # pragma: no cover
    """Is the exact side leakage of q (M records only) within ``limit``?"""
    _write(red, m_pos, common, q, valid)
    return _leakage_from(kernels, red, cut, ends_open, U, best, valid, limit) <= limit


@kernel
def _lowest(kernels, red, cut, ends_open, U, best, valid, m_pos, common, q, j, limit, iterations):  # pragma: no cover
    """Lower q[j] by bisection on [0, q[j]] as far as the exact leakage allows, in place (q itself
    is taken as accepted; no monotonicity is assumed: the value kept is always an accepted one)."""
    lo = 0.0
    hi = q[j]
    for _ in range(iterations):
        q[j] = 0.5 * (lo + hi)
        if _feasible(kernels, red, cut, ends_open, U, best, valid, m_pos, common, q, limit):
            hi = q[j]
        else:
            lo = q[j]
    q[j] = hi


@kernel
def _search(kernels, red, cut, ends_open, m_pos, common, q, limit, steps, rounds, bisect_each):  # pragma: no cover
    """Pairwise exchange, then coordinate bisection outward-in, from a feasible q (design.q_exact).

    Exchange: raise q_i by up to h (by r), and lower q_j below q_j − r, as far as feasible; keep
    the move (Σq drops). A move is tried only when its break-even point q_j − r is itself feasible,
    so a pair that cannot pay costs one evaluation of the leakage instead of a whole bisection.
    """
    D = red.shape[0]
    U = np.zeros((D + 1, 2, 2))
    U[0, 0, 0] = 1.0
    U[0, 1, 1] = 1.0
    best = np.zeros(D + 1)
    valid = np.ones(1, dtype=np.int64)
    K = q.shape[0]
    trial = q.copy()
    for h in steps:
        for _ in range(rounds):
            improved = False
            for i in range(K):
                for j in range(K):
                    if i == j or q[i] >= 1.0:
                        continue
                    trial[:] = q
                    trial[i] = min(1.0, q[i] + h)
                    trial[j] = q[j] - (trial[i] - q[i]) - 1e-12
                    if trial[j] < 0.0 or not _feasible(kernels, red, cut, ends_open, U, best, valid,
                                                       m_pos, common, trial, limit):
                        continue
                    _lowest(kernels, red, cut, ends_open, U, best, valid, m_pos, common, trial, j, limit,
                            bisect_each)
                    q[:] = trial
                    improved = True
            if not improved:
                break
    for j in range(K - 1, -1, -1):
        _lowest(kernels, red, cut, ends_open, U, best, valid, m_pos, common, q, j, limit, bisect_each)
    return q


def side_leakage_forward(kernels: NDArray[np.float64], red: NDArray[np.float64]) -> float:
    """Exact L(X_p → Y_side) of a (D, 2) redaction table by the forward classes (module docstring)."""
    red = np.ascontiguousarray(red, dtype=np.float64)
    kernels = np.ascontiguousarray(kernels, dtype=np.float64)
    cut, ends_open = side_cut(red)
    D = red.shape[0]
    U = np.zeros((D + 1, 2, 2))
    U[0] = np.eye(2)
    best = np.zeros(D + 1)
    valid = np.ones(1, dtype=np.int64)
    return float(_leakage_from(kernels, red, cut, ends_open, U, best, valid, math.inf))


def side_cut(red: NDArray[np.float64]) -> tuple[int, bool]:
    """Distance of the first revealing row (the side ends there), or (D, True) if there is none."""
    hits = np.flatnonzero((red[:, 0] == 0.0) & (red[:, 1] == 0.0))
    return (int(hits[0]) + 1, False) if hits.size else (int(red.shape[0]), True)


def refine_exact(
    kernels: NDArray[np.float64],
    red: NDArray[np.float64],
    m_pos: NDArray[np.int64],
    common: NDArray[np.int8],
    start: NDArray[np.float64],
    limit: float,
    steps: tuple[float, ...],
    rounds: int,
    bisect_each: int,
) -> NDArray[np.float64]:
    """Run the compiled exchange + coordinate search from a feasible ``start`` (one q per M record)."""
    work = np.ascontiguousarray(red, dtype=np.float64).copy()
    cut, ends_open = side_cut(work)
    q = np.ascontiguousarray(start, dtype=np.float64).copy()
    return _search(np.ascontiguousarray(kernels, dtype=np.float64), work, cut, ends_open,
                   np.ascontiguousarray(m_pos, dtype=np.int64), np.ascontiguousarray(common, dtype=np.int64),
                   q, float(limit), np.asarray(steps, dtype=np.float64), int(rounds), int(bisect_each))
