"""One side of a private record: influences, regions, q design and its exact leakage oracle.

A side is the records left (or right) of the private index p, ordered outward by distance
d = 1, 2, …; ``length`` is how many exist (None for an unbounded stream, which is conservative:
notes/000 §9.3 — assuming the chain continues never weakens the guarantee).

Influences are computed only as far as the first always-released (S) record, since nothing past
it can affect the side's leakage (regions.py); the exact oracle therefore also stops there.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numpy.typing import NDArray

from ..audit.exact import left_kernels, side_range
from ..model.chain import MarkovChain
from ..privacy.channel import redaction_tables, revealing
from ..influence import pointwise_left, pointwise_right
from .design import design_side
from .regions import NAMES, S, classify

#: Side budgets below this are treated as 0 (the whole side is redacted): fail closed instead of
#: comparing with influences that underflow double precision.
MIN_SIDE_BUDGET = 1e-12
_CHUNK = 64
#: With the (slow) exact design, a search over splits or thresholds first ranks the candidates
#: with the optimal relaxation (exact ≥ optimal for each) and runs the exact design on the best few.
EXACT_SHORTLIST = 3


@dataclass(frozen=True)
class SideModel:
    """What a side needs from the model: its influences, its outward kernels and its marginals."""

    chain: MarkovChain
    p: int
    direction: str  # "left" or "right"
    length: int | None

    def __post_init__(self) -> None:
        if self.direction not in ("left", "right"):
            raise ValueError("direction must be 'left' or 'right'")
        if self.length is None and not self.chain.stationary:
            raise ValueError("an unbounded (stream) side needs a stationary chain")
        if self.direction == "left" and self.length is not None and self.length != self.p:
            raise ValueError("the left side of index p has exactly p records")

    def influences(self, count: int) -> NDArray[np.float64]:
        """(count, 2) pointwise influences at distances 1..count."""
        if self.direction == "right" or self.chain.stationary:
            # stationary binary chains are reversible: the left side mirrors the right
            return pointwise_right(self.chain, count)
        return pointwise_left(self.chain, self.p, count)

    @cached_property
    def _left_kernels(self) -> NDArray[np.float64]:
        return left_kernels(self.chain, self.p)

    def kernels(self, count: int) -> NDArray[np.float64]:
        """Outward kernels for the first ``count`` steps (a single one when homogeneous)."""
        if self.direction == "right":
            return self.chain.matrix[None]
        kern = self._left_kernels
        return kern if kern.shape[0] == 1 else kern[:count]

    def marginals(self, count: int) -> NDArray[np.float64]:
        """(count, 2) laws of the records at distances 1..count."""
        if self.chain.stationary:
            return np.broadcast_to(self.chain.initial, (count, self.chain.k))
        if self.direction == "right":
            return np.stack([self.chain.marginal(self.p + d) for d in range(1, count + 1)])
        return self.chain.marginals(self.p)[::-1][:count]

    def exact_leakage(self, red: NDArray[np.float64]) -> float:
        """Exact L(X_p → Y_side) of a (D, 2) redaction table of this side (Y_p = ⊥)."""
        tables = redaction_tables(red)  # one table per record: no de-duplication on this hot path
        return side_range(self.kernels(red.shape[0]), tables, np.arange(red.shape[0]),
                          revealing=revealing(tables)).leakage


@dataclass(frozen=True)
class SidePlan:
    """The redaction of one side: ``red[d−1]`` = (Pr(⊥|0), Pr(⊥|1)) at distance d.

    Records beyond ``red`` (up to ``length``) are always released. ``horizon`` is the last
    distance that is not always released.
    """

    budget: float
    threshold: float
    length: int | None
    influences: NDArray[np.float64]
    regions: NDArray[np.int8]
    red: NDArray[np.float64]
    expected_redacted: float

    @property
    def horizon(self) -> int:
        nz = np.flatnonzero(self.red.any(axis=1))
        return int(nz[-1]) + 1 if nz.size else 0

    def region_string(self) -> str:
        return "".join(NAMES[r] for r in self.regions)


def _classified(model: SideModel, threshold: float) -> tuple[NDArray[np.float64], NDArray[np.int8], NDArray[np.int8]]:
    """Influences and regions up to (and including) the first S record, or the side's end."""
    if threshold <= 0.0 and model.length is None:
        raise ValueError("a side budget of 0 redacts an unbounded side forever; it needs a finite chain")
    count = _CHUNK if model.length is None else min(_CHUNK, model.length)
    while True:
        infl = model.influences(count)
        regions, common = classify(infl, threshold)
        s_hits = np.flatnonzero(regions == S)
        if s_hits.size:
            cut = int(s_hits[0]) + 1
            return infl[:cut], regions[:cut], common[:cut]
        if model.length is not None and count >= model.length:
            return infl, regions, common
        count = count * 2 if model.length is None else min(count * 2, model.length)


def plan_side(model: SideModel, budget: float, design: str, threshold: float | None = None) -> SidePlan:
    """Design one side with budget e and absolute region threshold ε' ≤ e (default ε' = e)."""
    if model.length == 0:
        empty = np.zeros((0, 2))
        return SidePlan(budget, 0.0, 0, empty, np.zeros(0, np.int8), empty, 0.0)
    if budget < MIN_SIDE_BUDGET:
        budget = 0.0
    thr = budget if threshold is None else min(float(threshold), budget)
    if thr < 0:
        raise ValueError("the region threshold must be ≥ 0")
    infl, regions, common = _classified(model, thr)
    red = design_side(infl, regions, common, budget, design, model.exact_leakage, model.kernels(infl.shape[0]))
    redacted = float(np.sum(model.marginals(red.shape[0]) * red))
    return SidePlan(budget, thr, model.length, infl, regions, red, redacted)


def threshold_candidates(model: SideModel, budget: float) -> list[float]:
    """Region thresholds ε' to try for notes/000 §7.8: the budget, and every influence value below
    it (exactly, and one ulp under), over the distances that matter at the full budget."""
    if budget < MIN_SIDE_BUDGET or model.length == 0:
        return [budget]
    infl, _, _ = _classified(model, budget)
    count = infl.shape[0] + 2 if model.length is None else min(infl.shape[0] + 2, model.length)
    vals = np.unique(model.influences(count))
    vals = vals[(vals > 0) & (vals <= budget)]
    cands = {float(budget)}
    for v in vals:
        cands.add(float(v))
        cands.add(float(np.nextafter(v, 0.0)))
    return sorted(c for c in cands if c > 0)


def best_side(model: SideModel, budget: float, design: str, threshold: float | str | None) -> SidePlan:
    """The side's plan for a region threshold given as a fraction θ ∈ (0, 1] of the budget
    (ε' = θ·e), as None (ε' = e), or as 'optimize' (the candidate with fewest expected redactions).
    """
    if threshold is None:
        return plan_side(model, budget, design)
    if threshold == "optimize":
        cands = threshold_candidates(model, budget)
        if design == "exact" and len(cands) > EXACT_SHORTLIST:  # rank with the optimal relaxation
            cands = sorted(cands, key=lambda c: plan_side(model, budget, "optimal", c).expected_redacted)
            cands = cands[:EXACT_SHORTLIST]
        plans = [plan_side(model, budget, design, c) for c in cands]
        return min(plans, key=lambda sp: sp.expected_redacted)
    if isinstance(threshold, str) or not 0.0 < float(threshold) <= 1.0:
        raise ValueError("threshold must be a fraction in (0, 1] of the side budget, or 'optimize'")
    return plan_side(model, budget, design, float(threshold) * budget)
