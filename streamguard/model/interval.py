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

import numpy as np
from numpy.typing import NDArray

from ..audit.exact import side_range
from ..privacy.channel import redaction_tables, revealing


def corner_kernels(alpha: tuple[float, float], beta: tuple[float, float]) -> NDArray[np.float64]:
    """The (4, 2, 2) corner kernels of a box (fewer when a range is a single point)."""
    ks = [[[1.0 - a, a], [b, 1.0 - b]] for a in sorted(set(alpha)) for b in sorted(set(beta))]
    return np.ascontiguousarray(np.array(ks, dtype=np.float64))


def box_side_range(corners: NDArray[np.float64], red: NDArray[np.float64]) -> tuple[float, float]:
    """(lo, hi) of log ρ over the side's outputs and every kernel sequence within the corners' box
    (module docstring): the exact audit's kernel with the corners as candidates at every step.
    ``red`` is ordered outward and should end with the record that stands for whatever lies
    beyond (a released row (0, 0) for a stream; nothing for a finite chain's end)."""
    if red.shape[0] == 0:
        return 0.0, 0.0
    tables = redaction_tables(np.ascontiguousarray(red, dtype=np.float64))
    r = side_range(corners[None], tables, np.arange(red.shape[0]), revealing=revealing(tables))
    return r.lo, r.hi


def box_leakage_bound(corners: NDArray[np.float64], left: NDArray[np.float64], right: NDArray[np.float64]) -> float:
    """Upper bound on L(X_p → Y) over the box for rows ``left``/``right`` outward from p, with
    Y_p = ⊥: max(hi_ℓ + hi_r, −(lo_ℓ + lo_r)) (audit/exact.py), each side bounded over the box."""
    lo_l, hi_l = box_side_range(corners, left)
    lo_r, hi_r = box_side_range(corners, right)
    return max(hi_l + hi_r, -(lo_l + lo_r))
