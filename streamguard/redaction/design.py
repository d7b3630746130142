"""Choosing the M-region redaction probabilities q of one side (paper 000 §IV-B, notes/000 §4.2–4.3).

Relaxed leakage bound, completed (notes/000 §4.2 erratum: Eq. 4 alone omits case (a)). Order the
M records of a side outward, m_1 … m_K. For m_k let δ_k be the influence of the value the *next
non-L record* would release (its common value if it is in M, its larger influence if it is in S;
δ_k = 0 if the chain ends first). Every output is bounded by one of

    (a) i of the first non-L record            ≤ ε'  ≤ e   (by the region rule)
    (b) δ_k − Σ_{j ≤ k} log q_{m_j}            ≤ e   for k = 1..K,

so the side is e-private whenever b_k := e − δ_k ≥ U_k := Σ_{j≤k} u_j with u_j = −log q_{m_j}.
(The "next non-L record" form equals the paper's δ_t for contiguous L|M|S bands and stays valid
when the bands are not contiguous.)

Designs:
- ``paper``: the paper's common q = max_k exp(−b_k / k).
- ``optimal``: the exact optimum of min Σ q s.t. the constraints: U is the greatest convex minorant
  (lower convex hull) of (0, 0), (1, b_1), …, (K, b_K) and u_k its slopes (notes/000 §4.2, derived).
- ``exact``: the smallest q whose *exact* side leakage meets the budget: bisection on a common q,
  and per-position refinement (pairwise exchange, then coordinate bisection) started from the
  better of that and ``optimal`` (notes/000 §4.3). Every accepted point is checked with the exact
  leakage, so privacy does not rest on monotonicity; the refinement runs compiled on the forward
  form of the exact leakage (:mod:`.exact_search`, incremental in the changed record) and its
  result is re-checked with the backward audit; the start point is feasible by the relaxed bound,
  so ``exact`` ≥ ``optimal``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from .exact_search import refine_exact
from .regions import L, M, side_redaction

DESIGNS = ("paper", "optimal", "exact")

#: Relative slack kept below the budget when the exact design accepts a point (audit round-off).
EXACT_SLACK = 1e-12
_BISECT_COMMON = 60
_BISECT_EACH = 40
_EXCHANGE_STEPS = (0.2, 0.05, 0.01, 0.002)
_EXCHANGE_ROUNDS = 20


def relaxation_slacks(
    influences: NDArray[np.float64], regions: NDArray[np.int8], common: NDArray[np.int8], budget: float
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """M positions (0-based distances − 1, outward) and their b_k = budget − δ_k."""
    m_pos = np.flatnonzero(regions == M)
    non_l = np.flatnonzero(regions != L)
    b = np.empty(m_pos.shape[0])
    for k, j in enumerate(m_pos):
        after = non_l[non_l > j]
        if after.size == 0:
            delta = 0.0  # the chain ends: the all-⊥ output (case (c) of notes/000 §4.2)
        else:
            s = int(after[0])
            delta = influences[s, common[s]] if regions[s] == M else influences[s].max()
        b[k] = budget - delta
    return m_pos, np.maximum(b, 0.0)


def _round_q_up(u: NDArray[np.float64]) -> NDArray[np.float64]:
    """q = exp(−u), rounded up by one ulp so that round-off never loosens the bound."""
    return np.minimum(np.nextafter(np.exp(-u), 2.0), 1.0)


def q_paper(b: NDArray[np.float64]) -> NDArray[np.float64]:
    """Common q = max_k exp(−b_k / k) for every M record (paper 000 §IV-B)."""
    if b.size == 0:
        return b.copy()
    k = np.arange(1, b.size + 1)
    u = float(np.min(b / k))
    return _round_q_up(np.full(b.size, u))


def q_optimal(b: NDArray[np.float64]) -> NDArray[np.float64]:
    """Exact optimum of the convex relaxation: slopes of the lower convex hull of (k, b_k)."""
    K = b.size
    if K == 0:
        return b.copy()
    xs = np.arange(K + 1, dtype=np.float64)
    ys = np.concatenate([[0.0], b])
    hull = [0]
    for i in range(1, K + 1):
        while len(hull) >= 2:
            i0, i1 = hull[-2], hull[-1]
            # drop i1 if it lies on or above the segment i0 → i
            if (ys[i1] - ys[i0]) * (xs[i] - xs[i0]) >= (ys[i] - ys[i0]) * (xs[i1] - xs[i0]):
                hull.pop()
            else:
                break
        hull.append(i)
    u = np.empty(K)
    for a, c in zip(hull[:-1], hull[1:]):
        u[a:c] = (ys[c] - ys[a]) / (c - a)
    return _round_q_up(np.maximum(u, 0.0))


SideOracle = Callable[[NDArray[np.float64]], float]


def _feasibility(
    regions: NDArray[np.int8], common: NDArray[np.int8], budget: float, leakage_of: SideOracle
) -> Callable[[NDArray[np.float64] | float], bool]:
    """Predicate on the M records' q (a vector, or one common value): exact leakage within budget."""
    m_pos = np.flatnonzero(regions == M)
    limit = budget * (1.0 - EXACT_SLACK)
    q_full = np.zeros(regions.shape[0])

    def feasible(q: NDArray[np.float64] | float) -> bool:
        q_full[m_pos] = q
        return leakage_of(side_redaction(regions, common, q_full)) <= limit

    return feasible


def _bisect_down(ok: Callable[[float], bool], hi: float, iterations: int) -> float:
    """Smallest v in [0, hi] accepted by ``ok`` to within hi·2^−iterations; returns an accepted
    value (hi itself is assumed accepted), never relying on ``ok`` being monotone."""
    lo = 0.0
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def common_q_exact(
    regions: NDArray[np.int8], common: NDArray[np.int8], budget: float, leakage_of: SideOracle
) -> float | None:
    """The paper's "3R (numerical)" design: the smallest common q with exact leakage ≤ budget
    (None when the side has no M record, or when even q = 1 fails, which a valid layout excludes)."""
    feasible = _feasibility(regions, common, budget, leakage_of)
    if not np.any(regions == M) or not feasible(1.0):
        return None
    return _bisect_down(feasible, 1.0, _BISECT_COMMON)


def q_exact(
    regions: NDArray[np.int8],
    common: NDArray[np.int8],
    start: NDArray[np.float64],
    budget: float,
    leakage_of: SideOracle,
    kernels: NDArray[np.float64],
) -> NDArray[np.float64]:
    """Smallest q of the M records whose exact side leakage ≤ budget·(1 − EXACT_SLACK).

    ``start`` (one q per M record, outward) must be feasible; the ``optimal`` design is, by the
    relaxed bound. ``leakage_of`` maps a side's (D, 2) redaction table to its exact leakage (the
    backward audit); ``kernels`` are the side's outward kernels, for the compiled search
    (:mod:`.exact_search`: pairwise exchange, then coordinate bisection, on the forward form of
    the same exact leakage). The search's result is accepted only if the audit confirms it.
    """
    K = start.size
    if K == 0:
        return start.copy()
    feasible = _feasibility(regions, common, budget, leakage_of)
    candidates = [start.copy()] if feasible(start) else []
    cq = common_q_exact(regions, common, budget, leakage_of)
    if cq is not None:
        candidates.append(np.full(K, cq))
    if not candidates:  # cannot happen for a valid region layout; fail closed
        return np.ones(K)
    q = min(candidates, key=lambda c: float(c.sum())).copy()
    m_pos = np.flatnonzero(regions == M)
    q_full = np.zeros(regions.shape[0])
    q_full[m_pos] = q
    refined = refine_exact(kernels, side_redaction(regions, common, q_full), m_pos, common, q,
                           budget * (1.0 - EXACT_SLACK), _EXCHANGE_STEPS, _EXCHANGE_ROUNDS, _BISECT_EACH)
    return refined if feasible(refined) else q  # the audit disagrees (round-off): keep the checked start


def design_side(
    influences: NDArray[np.float64],
    regions: NDArray[np.int8],
    common: NDArray[np.int8],
    budget: float,
    design: str,
    leakage_of: SideOracle | None = None,
    kernels: NDArray[np.float64] | None = None,
) -> NDArray[np.float64]:
    """The (D, 2) redaction table of a side for the given ``design`` (see module docstring); the
    exact design needs the side's exact leakage oracle and its outward kernels."""
    if design not in DESIGNS:
        raise ValueError(f"unknown design {design!r}; expected one of {', '.join(DESIGNS)}")
    m_pos, b = relaxation_slacks(influences, regions, common, budget)
    qm = q_paper(b) if design == "paper" else q_optimal(b)
    if design == "exact" and m_pos.size:
        if leakage_of is None or kernels is None:
            raise ValueError("the exact design needs an exact leakage oracle and the side's kernels")
        qm = q_exact(regions, common, qm, budget, leakage_of, kernels)
    q = np.zeros(regions.shape[0])
    q[m_pos] = qm
    return side_redaction(regions, common, q)


def expected_released(red: NDArray[np.float64], marginals: NDArray[np.float64]) -> float:
    """Σ_t Σ_x Pr(X_t = x) (1 − r_t(x)): expected number of released records (paper 000 Eq. 3)."""
    return float(np.sum(marginals * (1.0 - red)))
