"""A certified upper bound on the leakage of redaction rows over a box of binary chains.

Setting (notes/000 §9.2, audit/exact.py): one side of the private record, rows r_d = (Pr(⊥|0),
Pr(⊥|1)) at distances d = 1..D outward, is summarised by the range of the likelihood ratio
ρ = Pr(y_side | X_p=0)/Pr(y_side | X_p=1) over supported outputs; stepping one record inward maps
ρ through

    ρ' = (K00 e0 ρ + K01 e1) / (K10 e0 ρ + K11 e1),   (e0, e1) = emission of y at that record,

with K = P = [[1−α, α], [β, 1−β]] (right side; on the left the time-reversed kernel, which is P
itself for every stationary binary chain).

**One step over the box is exact at its corners.** For a fixed ρ the numerator depends on α only
and the denominator on β only, both linearly, so the extremes over (α, β) ∈ [α_lo, α_hi] ×
[β_lo, β_hi] are at α ∈ {α_lo, α_hi} and β ∈ {β_lo, β_hi}; for each of these four corner kernels
the map is a Möbius map of ρ with non-negative coefficients, monotone, so its extremes over
ρ ∈ [ρ_lo, ρ_hi] are at ρ_lo or ρ_hi. Propagating [ρ_lo, ρ_hi] step by step with the extremes of
these 4 × 2 candidates (per output) therefore gives the exact range over all chains whose kernel
may *change from step to step* within the box — a superset of the fixed-chain members, so the
result is a certified upper bound for every member of the box. It shrinks to the exact value as
the box shrinks to a point (every candidate then is the member's own map), which is what the
branch-and-bound of :mod:`.robust` uses: split the box until the bound and the best member meet.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from .._jit import kernel


@kernel
def _box_side_kernel(corners, red, out):  # pragma: no cover - compiled
    """corners: (C,2,2) kernels; red: (D,2) rows outward. out[0] = argmin-ratio vector, out[1] =
    argmax (normalised). Returns 0, or the distance (1-based) with no possible output."""
    lo0 = 0.5
    lo1 = 0.5
    hi0 = 0.5
    hi1 = 0.5
    C = corners.shape[0]
    for d in range(red.shape[0] - 1, -1, -1):
        q0 = red[d, 0]
        q1 = red[d, 1]
        have = False
        nlo0 = 0.0
        nlo1 = 0.0
        nhi0 = 0.0
        nhi1 = 0.0
        for y in range(3):
            if y == 0:
                e0 = 1.0 - q0
                e1 = 0.0
            elif y == 1:
                e0 = 0.0
                e1 = 1.0 - q1
            else:
                e0 = q0
                e1 = q1
            if e0 == 0.0 and e1 == 0.0:
                continue
            for c in range(C):
                k00 = corners[c, 0, 0]
                k01 = corners[c, 0, 1]
                k10 = corners[c, 1, 0]
                k11 = corners[c, 1, 1]
                for s in range(2):
                    if s == 0:
                        w0 = e0 * lo0
                        w1 = e1 * lo1
                    else:
                        w0 = e0 * hi0
                        w1 = e1 * hi1
                    g0 = k00 * w0 + k01 * w1
                    g1 = k10 * w0 + k11 * w1
                    t = g0 + g1
                    if t <= 0.0:
                        continue
                    g0 /= t
                    g1 /= t
                    if not have:
                        nlo0 = g0
                        nlo1 = g1
                        nhi0 = g0
                        nhi1 = g1
                        have = True
                    else:
                        if g0 * nlo1 < nlo0 * g1:
                            nlo0 = g0
                            nlo1 = g1
                        if g0 * nhi1 > nhi0 * g1:
                            nhi0 = g0
                            nhi1 = g1
        if not have:
            return d + 1
        lo0 = nlo0
        lo1 = nlo1
        hi0 = nhi0
        hi1 = nhi1
    out[0, 0] = lo0
    out[0, 1] = lo1
    out[1, 0] = hi0
    out[1, 1] = hi1
    return 0


def _log_ratio(v: NDArray[np.float64]) -> float:
    if v[1] == 0.0:
        return math.inf
    if v[0] == 0.0:
        return -math.inf
    return math.log(v[0]) - math.log(v[1])


def corner_kernels(alpha: tuple[float, float], beta: tuple[float, float]) -> NDArray[np.float64]:
    """The (4, 2, 2) corner kernels of a box (fewer when a range is a single point)."""
    ks = [[[1.0 - a, a], [b, 1.0 - b]] for a in sorted(set(alpha)) for b in sorted(set(beta))]
    return np.ascontiguousarray(np.array(ks, dtype=np.float64))


def box_side_range(corners: NDArray[np.float64], red: NDArray[np.float64]) -> tuple[float, float]:
    """(lo, hi) of log ρ over the side's outputs and every kernel sequence within the corners' box
    (module docstring); ``red`` is ordered outward and should end with the record that stands for
    whatever lies beyond (a released row (0, 0) for a stream; nothing for a finite chain's end)."""
    if red.shape[0] == 0:
        return 0.0, 0.0
    out = np.empty((2, 2))
    bad = _box_side_kernel(corners, np.ascontiguousarray(red, dtype=np.float64), out)
    if bad:
        raise ValueError(f"no output is possible at distance {bad} from the private record")
    return _log_ratio(out[0]), _log_ratio(out[1])


def box_leakage_bound(corners: NDArray[np.float64], left: NDArray[np.float64], right: NDArray[np.float64]) -> float:
    """Upper bound on L(X_p → Y) over the box for rows ``left``/``right`` outward from p, with
    Y_p = ⊥: max(hi_ℓ + hi_r, −(lo_ℓ + lo_r)) (audit/exact.py), each side bounded over the box."""
    lo_l, hi_l = box_side_range(corners, left)
    lo_r, hi_r = box_side_range(corners, right)
    return max(hi_l + hi_r, -(lo_l + lo_r))
