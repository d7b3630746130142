"""One side of a private record of a k-state chain: pointwise influences per value, the exact side
leakage oracle, and the exact design (docs/k-state-redaction.md §5).

A side is the records left (or right) of p, outward by distance d = 1, 2, …, with redaction rows
r_d(x) = Pr(⊥ | X_{p±d} = x). ``length`` is how many records exist (None: an unbounded stream,
where one record released beyond the last row ends the side exactly, see audit/kstate.py).

Exact design. Releasing more is never safer: raising one r_d(x) is a post-processing of the
output (a released x is redacted with probability (r' − r)/(1 − r)), so the side leakage is
non-increasing in every coordinate. The design

1. takes the smallest window H whose full redaction (rows of ones, then released) meets the side
   budget — the best data-independent window of that side;
2. lowers the coordinates (d, x), d ≤ H, one at a time in order of increasing pointwise influence
   (the regions generalised per value: the values whose release says least about X_p first; states
   of weight 0 are never released — they bring no utility), each to the least value whose exact
   side leakage still meets the budget (bisection on the exact oracle, rounded up).

The result meets the budget exactly (every accepted row was checked by the exact audit) and is
coordinate-wise minimal for that order; it is not claimed to be the global optimum.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numpy.typing import NDArray

from ..audit.kstate import right_pairs
from ..audit.start import left_pairs
from ..model.chain import MarkovChain

#: Largest stream horizon searched for a window that meets a side budget.
MAX_HORIZON = 4096
#: Bisection steps per coordinate: redaction probabilities are rounded *up* to 2^−16.
BISECT_STEPS = 16


@dataclass(frozen=True)
class KSideModel:
    """A side of p for the k-state design. ``law`` is the law of X_p's side anchor: for a stream
    (``length`` None) the stationary law (the left side steps from a released stand-in whose law is
    π); for a finite left side of p records, the law of the first record (X_0)."""

    chain: MarkovChain
    direction: str  # "left" or "right"
    length: int | None
    law: NDArray[np.float64]
    p: int = 0  # the private index of a finite side (its marginals)

    def __post_init__(self) -> None:
        if self.direction not in ("left", "right"):
            raise ValueError("direction must be 'left' or 'right'")

    @property
    def k(self) -> int:
        return self.chain.k

    @cached_property
    def law_at_p(self) -> NDArray[np.float64]:
        """The law of X_p (a finite left side: ``law`` carried over its ``length`` steps)."""
        steps = self.length if self.direction == "left" and self.length is not None else 0
        return self.law @ self.chain.power(steps)

    def stand_in_law(self, m: int) -> NDArray[np.float64]:
        """The law of the released record just beyond ``m`` left rows, index p − m − 1: in a stream
        ``law`` (π); on a finite left side the first record's law carried p − m − 1 steps. (Taking
        the first record's law here was issue 24's bug: a point mass at X_0 stood in at p − m − 1,
        so the design saw Pr(X_p = ·) = μP^{m+1} instead of μP^p and released too much.)"""
        if self.length is None:
            return self.law
        return self.law @ self.chain.power(self.length - m - 1)

    def pairs(self, rows: NDArray[np.float64]) -> NDArray[np.float64]:
        """(k, k) side log-ratio maxima of ``rows`` (distances 1..m; m ≤ length), every ordered pair
        of values of X_p — a value of probability 0 too (docs/initial-law.md, "Values of X_p of
        probability 0": the right side is the chain started from it; the left side leaks without
        bound about it unless it is surely all redacted back to the first record)."""
        m, k = rows.shape
        P = self.chain.matrix
        if self.direction == "right":
            cut = rows if self.length is not None and m == self.length else np.vstack([rows, np.zeros((1, k))])
            return right_pairs(np.broadcast_to(P, (cut.shape[0], k, k)), cut)
        reaches = self.length is not None and m == self.length
        kern = np.broadcast_to(P, (m if reaches else m + 1, k, k))
        law = self.law if reaches else self.stand_in_law(m)
        return left_pairs(kern, rows, law[None], reaches_start=reaches)

    def leakage(self, rows: NDArray[np.float64]) -> float:
        """Exact leakage of the side alone (max over ordered pairs of distinct values)."""
        L = self.pairs(rows)
        return float(L[~np.eye(self.k, dtype=bool)].max())

    def influences(self, count: int) -> NDArray[np.float64]:
        """(count, k) pointwise influence of releasing value x at distance d with nothing else:
        log max_{a,b} Pr(X_{p±d} = x | X_p = a)/Pr(X_{p±d} = x | X_p = b) (∞ when x is impossible
        under some secret but not all, nan-free)."""
        P = self.chain.matrix
        out = np.empty((count, self.k))
        Pd = np.eye(self.k)
        lawp = self.law_at_p
        for d in range(count):
            Pd = Pd @ P
            # right: Pr(x | a) = P^d[a, x]; left: Pr(x | a) ∝ law_{p−d}(x) P^d[x, a] / law_p(a)
            cond = Pd if self.direction == "right" else (Pd / np.where(lawp > 0, lawp, 1.0)[None, :]).T
            cond = cond[lawp > 0]  # (an order only: the values X_p takes)
            with np.errstate(divide="ignore", invalid="ignore"):
                hi, lo = cond.max(axis=0), cond.min(axis=0)
                out[d] = np.where(hi <= 0, 0.0, np.log(hi) - np.log(lo))
        return out

    def marginals(self, count: int) -> NDArray[np.float64]:
        """(count, k) laws of the side's records at distances 1..count (for expected redactions)."""
        if self.length is None:
            return np.broadcast_to(self.law, (count, self.k))
        if self.direction == "left":  # distance d is index p − d
            return self.chain.marginals(self.p)[::-1][:count]
        return self.chain.marginals(self.p + 1 + count)[self.p + 1:]


@dataclass(frozen=True)
class KSidePlan:
    """The redaction of one side: ``red[d−1]`` = row of k probabilities at distance d; records
    beyond are released. ``leakage`` is the exact side leakage of ``red``."""

    budget: float
    red: NDArray[np.float64]
    leakage: float
    window: int  # the data-independent window the design started from

    @property
    def horizon(self) -> int:
        nz = np.flatnonzero(self.red.any(axis=1))
        return int(nz[-1]) + 1 if nz.size else 0

    def regions(self) -> list[str]:
        """Per distance, one letter per value: L (always redacted), M (sometimes), S (released)."""
        return ["".join("L" if r >= 1 else ("S" if r <= 0 else "M") for r in row) for row in self.red]


def window_horizon(model: KSideModel, budget: float) -> int:
    """Smallest H such that redacting distances 1..H fully meets ``budget`` (binary search: the
    leakage is non-increasing in H, a post-processing argument)."""
    k = model.k
    limit = model.length if model.length is not None else MAX_HORIZON

    def ok(H: int) -> bool:
        return model.leakage(np.ones((H, k))) <= budget

    if ok(0):
        return 0
    hi = 1
    while not ok(hi):
        if hi >= limit:
            if model.length is None:
                raise ValueError(f"no window up to {MAX_HORIZON} records meets the side budget "
                                 "(does the chain mix?)")
            return limit  # a finite side redacted to its end leaks nothing
        hi = min(2 * hi, limit)
    lo = hi // 2  # ok(lo) is False (or lo = 0, checked above)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def design_kside(model: KSideModel, budget: float, weights: NDArray[np.float64] | None = None) -> KSidePlan:
    """The exact design of one side for ``budget`` (module docstring)."""
    k = model.k
    if model.length == 0:
        return KSidePlan(budget, np.zeros((0, k)), 0.0, 0)
    w = np.ones(k) if weights is None else np.asarray(weights, dtype=np.float64)
    H = window_horizon(model, budget)
    rows = np.ones((H, k))
    if H == 0:
        return KSidePlan(budget, rows, model.leakage(rows), 0)
    infl = model.influences(H)
    value = model.marginals(H) * w[None, :]
    order = sorted(((float(infl[d, x]), -float(value[d, x]), d, x)
                    for d in range(H) for x in range(k) if w[x] > 0))
    for _, _, d, x in order:
        rows[d, x] = 0.0
        if model.leakage(rows) <= budget:
            continue
        lo, hi = 0.0, 1.0  # infeasible at lo, feasible at hi
        for _ in range(BISECT_STEPS):
            mid = 0.5 * (lo + hi)
            rows[d, x] = mid
            lo, hi = (lo, mid) if model.leakage(rows) <= budget else (mid, hi)
        rows[d, x] = hi
    leak = model.leakage(rows)
    if not leak <= budget:  # pragma: no cover - every accepted coordinate was checked
        raise AssertionError("k-state side design exceeds its budget")
    nz = np.flatnonzero(rows.any(axis=1))
    rows = rows[: int(nz[-1]) + 1] if nz.size else rows[:0]
    return KSidePlan(budget, rows, leak, H)


def window_side(model: KSideModel, budget: float) -> KSidePlan:
    """The best data-independent window of the side for ``budget`` (the baseline)."""
    H = window_horizon(model, budget)
    rows = np.ones((H, model.k))
    return KSidePlan(budget, rows, model.leakage(rows), H)


def expected_redacted(plan: KSidePlan, marg: NDArray[np.float64], weights: NDArray[np.float64] | None) -> float:
    """Σ_d Σ_x Pr(X at distance d = x) · w(x) · r_d(x): the (weighted) expected redactions."""
    w = np.ones(marg.shape[1]) if weights is None else weights
    m = plan.red.shape[0]
    return float(np.sum(marg[:m] * plan.red * w[None, :])) if m else 0.0

