"""3R redaction plans for k-state chains: finite chains of n records, and streams by signed distance
(docs/k-state-redaction.md §5–6). The binary plans (plan.py) are unchanged; these accept any k ≥ 2.

Each side is designed alone (kside.py) with its share of ε: given X_p the sides are independent,
so per secret pair the log ratios add and L ≤ L_left + L_right (docs §2). The split is ``even``, a
left share ε_ℓ ∈ [0, ε], or ``optimize``: the fewest (weighted) expected redactions over a grid of
left shares, refined around the best. Several private records combine by the element-wise maximum
(a post-processing of each one alone, notes/000 §4.5); every reported figure is the exact leakage of
the *combined* rows (audit/kstate.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..audit.kstate import PairLeakage, combine, redaction_leakage
from ..model.chain import MarkovChain
from .kside import KSideModel, KSidePlan, design_kside, expected_redacted, window_side
from .plan import SignedTable, StreamPlan, check_epsilon, enforce_budget, plan_stream, require_within

KSPLITS = ("even", "optimize")
DESIGNS = ("exact", "window")
_GRID = 6
_REFINE = 2


def check_weights(weights: ArrayLike | None, k: int) -> NDArray[np.float64] | None:
    """Per-state utility weights (≥ 0, one per state, not all 0), or None for equal weights."""
    if weights is None:
        return None
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (k,) or not np.all(np.isfinite(w)) or np.any(w < 0) or not w.any():
        raise ValueError(f"weights: {k} finite numbers ≥ 0, not all 0")
    return w


def _side(model: KSideModel, budget: float, design: str, weights: NDArray[np.float64] | None) -> KSidePlan:
    if design == "window":
        return window_side(model, budget)
    if design == "exact":
        return design_kside(model, budget, weights)
    raise ValueError(f"design must be one of {', '.join(DESIGNS)}")


def plan_sides(left: KSideModel, right: KSideModel, epsilon: float, design: str, split: str | float,
               weights: NDArray[np.float64] | None) -> tuple[KSidePlan, KSidePlan]:
    """Both sides of one private record with the split rule of the module docstring."""
    cache: dict[float, tuple[KSidePlan, KSidePlan, float]] = {}

    def at(el: float) -> tuple[KSidePlan, KSidePlan, float]:
        el = min(max(el, 0.0), epsilon)
        if left.length == 0:
            el = 0.0
        elif right.length == 0:
            el = epsilon
        if el not in cache:
            lp, rp = _side(left, el, design, weights), _side(right, epsilon - el, design, weights)
            cost = sum(expected_redacted(sp, m.marginals(sp.red.shape[0]), weights) for sp, m in ((lp, left), (rp, right)))
            cache[el] = (lp, rp, cost)
        return cache[el]

    if split == "even":
        lp, rp, _ = at(epsilon / 2)
        return lp, rp
    if split != "optimize":
        el = float(split)
        if not (math.isfinite(el) and 0.0 <= el <= epsilon):
            raise ValueError("split: 'even', 'optimize' or a left share in [0, ε]")
        lp, rp, _ = at(el)
        return lp, rp
    grid = [epsilon * i / _GRID for i in range(1, _GRID)]
    best = min(grid, key=lambda el: at(el)[2])
    step = epsilon / _GRID
    for _ in range(_REFINE):  # refine around the best grid point
        step /= 2
        best = min((best - step, best, best + step), key=lambda el: at(el)[2])
    lp, rp, _ = at(best)
    return lp, rp


def _stream_models(chain: MarkovChain) -> tuple[KSideModel, KSideModel]:
    law = chain.stationary_law
    return KSideModel(chain, "left", None, law), KSideModel(chain, "right", None, law)


@dataclass(frozen=True)
class KStreamPlan(SignedTable):
    """A k-state 3R plan for an unbounded stationary stream, by signed distance d = t − p:
    ``left.red[d−1]`` applies at t = p − d, ``right.red[d−1]`` at p + d, p itself is redacted, and
    records beyond the horizons are released. Same interface as the binary :class:`StreamPlan`."""

    chain: MarkovChain
    epsilon: float
    design: str
    left: KSidePlan
    right: KSidePlan
    weights: NDArray[np.float64] | None = field(default=None, compare=False)

    @property
    def k(self) -> int:
        return self.chain.k

    def leakage(self) -> PairLeakage:
        """Exact leakage about p of the table in an unbounded stationary stream (a released record
        beyond each horizon ends each side exactly; the left side steps from a stand-in of law π)."""
        lm, rm = _stream_models(self.chain)
        return combine(lm.pairs(self.left.red), rm.pairs(self.right.red))

    def right_rows(self, budget: float) -> NDArray[np.float64]:
        """Right rows re-planned for a smaller ``budget`` (late marks): same design and weights."""
        sp = _side(_stream_models(self.chain)[1], budget, self.design, self.weights)
        return sp.red[: sp.horizon]

    def expected_redacted(self) -> float:
        law = self.chain.stationary_law
        return sum(expected_redacted(sp, np.broadcast_to(law, (sp.red.shape[0], self.k)), self.weights)
                   for sp in (self.left, self.right))


def plan_kstream(chain: MarkovChain, epsilon: float, *, design: str = "exact", split: str | float = "optimize",
                 weights: ArrayLike | None = None) -> KStreamPlan:
    """k-state 3R table by signed distance for an unbounded stream of a stationary ergodic chain."""
    eps = check_epsilon(epsilon)
    chain.require_ergodic()
    w = check_weights(weights, chain.k)
    left, right = _stream_models(chain)
    lp, rp = plan_sides(left, right, eps, design, split, w)
    plan = KStreamPlan(chain, eps, design, lp, rp, w)
    require_within(plan.leakage().total, eps)
    return plan


@dataclass(frozen=True)
class KRedactionPlan:
    """Redaction rows for records 0..n−1 of a finite k-state chain and the exact leakage about each
    private record of the combined rows."""

    chain: MarkovChain
    epsilon: float
    design: str
    private: tuple[int, ...]
    red: NDArray[np.float64]
    leakages: dict[int, PairLeakage]
    splits: dict[int, tuple[float, float]]

    @property
    def utility(self) -> float:
        """Expected fraction of records released."""
        marg = self.chain.marginals(self.red.shape[0])
        return float(np.sum(marg * (1.0 - self.red))) / self.red.shape[0]

    def max_leakage(self) -> float:
        return max(lk.total for lk in self.leakages.values())


def plan_kredaction(chain: MarkovChain, n: int, private: Sequence[int], epsilon: float, *,
                    design: str = "exact", split: str | float = "optimize",
                    weights: ArrayLike | None = None) -> KRedactionPlan:
    """k-state 3R for records 0..n−1 (0-based private indices) of ``chain`` with its initial law;
    every private record's exact leakage is checked at the end (:func:`.plan.enforce_budget`)."""
    eps = check_epsilon(epsilon)
    if n < 1:
        raise ValueError("n must be ≥ 1")
    ps = tuple(sorted({int(p) for p in private}))
    if not ps or ps[0] < 0 or ps[-1] >= n:
        raise ValueError(f"private indices must be in 0..{n - 1}")
    w = check_weights(weights, chain.k)
    red = np.zeros((n, chain.k))
    splits: dict[int, tuple[float, float]] = {}
    for p in ps:
        left = KSideModel(chain, "left", p, chain.initial, p)
        right = KSideModel(chain, "right", n - 1 - p, chain.marginal(p), p)
        lp, rp = plan_sides(left, right, eps, design, split, w)
        red[p] = 1.0
        for d in range(lp.horizon):
            np.maximum(red[p - 1 - d], lp.red[d], out=red[p - 1 - d])
        for d in range(rp.horizon):
            np.maximum(red[p + 1 + d], rp.red[d], out=red[p + 1 + d])
        splits[p] = (lp.budget, rp.budget)
    leaks = enforce_budget(red, ps, eps, lambda rows, p: redaction_leakage(chain.matrix, chain.initial, rows, p))
    return KRedactionPlan(chain, eps, design, ps, red, leaks, splits)


def stream_plan_for(chain: MarkovChain, epsilon: float, *, design: str, split: str | float) -> StreamPlan | KStreamPlan:
    """The daemon's table by signed distance: the binary 3R plan (plan.py, ``design`` as configured)
    for two states, the k-state exact design (``design`` names binary q designs; it does not apply)
    for more."""
    if chain.is_binary:
        return plan_stream(chain, epsilon, design=design, split=split)
    return plan_kstream(chain, epsilon, design="exact", split=split)
