"""3R stream plans robust over a k-state row-wise model set, with a certified worst case
(issue 11; docs/model-sets.md §3b and §4; the binary twin is :mod:`.robust`).

**Region.** A ``rows`` model set (or any k-state set given by entry bounds) is taken as the row-wise
set {P : lo ≤ P ≤ hi entry-wise, rows sum to 1} of its entry bounds — box ∩ simplex per row, a
superset of the calibrated row sets, so a bound over it holds over the confidence region.

**Worst case of given rows.** Branch-and-bound over row-wise sub-sets: every sub-set gets the
rigorous upper bound of :mod:`.kinterval` (kernels that may change from step to step within the
sub-set, rows chosen independently), and the exact leakage (audit/kstate.py) of its centre member
as a lower bound; the sub-set with the largest bound is split at the middle (geometric mean when
the interval is away from 0) of its relatively widest entry interval, until the bound is within
``rel_tol`` of the best member, or, with a target ε, until it is ≤ ε (certified) or a member
exceeds ε (refuted). A set holding a chain that may never leave a state has an infinite bound
(fail closed): :func:`robust_kstream_plan` raises :class:`ModelError` before searching.

**Robust design.** Candidates: the point estimate, the set's stickiest member (each row's largest
self-transition) and the worst member found for the point estimate's own plan; for each, the
largest design budget ε' ≤ ε (ε' = ε; else the smallest budget of the search, ε·2⁻⁸, and when that
certifies, 8 bisection steps) whose k-state plan has certified worst case ≤ ε; the certified plan
with the fewest expected redactions per mark under the point estimate wins.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..audit.kstate import combine
from .chain import MarkovChain, ModelError
from ..redaction.kplan import KStreamPlan, _stream_models, plan_kstream
from ..redaction.plan import check_epsilon
from .box_window import ONE, WindowCase
from .kinterval import MAX_STATES, Vertices, law_ratio_bounds, left_bounds, right_bounds, stationary_vertices
from .modelset import ModelSet
from .robust import REL_TOL, RobustStreamPlan, WorstCase, _largest_certified, branch_and_bound, robust_stream_plan

KWindow = tuple[NDArray[np.float64], NDArray[np.float64]]

#: Sub-sets examined by one branch-and-bound for a reported worst case (k² dimensions: the
#: search is far costlier than over a binary box; the bound is valid at any count).
K_MAX_BOXES = 200
#: Bisection steps of the design budget per candidate (each step is an exact k-state design, seconds).
K_BISECT_DESIGN = 8
#: Sub-sets examined per certification attempt of the robust design (an attempt that cannot
#: certify within this counts as not certified: conservative).
K_DESIGN_BOXES = 24


@dataclass(frozen=True)
class RowBox:
    """The row-wise set {P : lo ≤ P ≤ hi, rows sum to 1}, its bounds tightened to the exact
    projections of box ∩ simplex: lo'_ij = max(lo_ij, 1 − Σ_{l≠j} hi_il), hi' likewise."""

    lo: NDArray[np.float64]
    hi: NDArray[np.float64]

    @staticmethod
    def of(lo: NDArray[np.float64], hi: NDArray[np.float64]) -> RowBox | None:
        """The tightened set, or None when some row set is empty."""
        lo = np.clip(np.asarray(lo, dtype=np.float64), 0.0, 1.0)
        hi = np.clip(np.asarray(hi, dtype=np.float64), 0.0, 1.0)
        if np.any(lo > hi) or np.any(lo.sum(axis=1) > 1.0 + 1e-12) or np.any(hi.sum(axis=1) < 1.0 - 1e-12):
            return None
        slo, shi = lo.sum(axis=1, keepdims=True), hi.sum(axis=1, keepdims=True)
        tlo = np.maximum(lo, 1.0 - (shi - hi))
        thi = np.minimum(hi, 1.0 - (slo - lo))
        return RowBox(np.ascontiguousarray(np.minimum(tlo, thi)), np.ascontiguousarray(thi))

    @property
    def k(self) -> int:
        return int(self.lo.shape[0])

    def centre(self) -> NDArray[np.float64]:
        """A member: each row lo + t (hi − lo) with t making it sum to 1."""
        slo, shi = self.lo.sum(axis=1, keepdims=True), self.hi.sum(axis=1, keepdims=True)
        t = np.where(shi > slo, (1.0 - slo) / np.where(shi > slo, shi - slo, 1.0), 0.0)
        P = self.lo + t * (self.hi - self.lo)
        return P / P.sum(axis=1, keepdims=True)

    def stickiest(self) -> NDArray[np.float64]:
        """The member whose every row has its largest self-transition (the rest at lo, then filled)."""
        P = self.lo.copy()
        for i in range(self.k):
            P[i, i] = self.hi[i, i]
            rem = 1.0 - P[i].sum()
            for j in range(self.k):
                if j != i and rem > 0:
                    add = min(rem, self.hi[i, j] - P[i, j])
                    P[i, j] += add
                    rem -= add
        return P / P.sum(axis=1, keepdims=True)

    def never_left(self) -> int | None:
        """A state that some member never leaves (hi'_ss = 1), or None."""
        for s in range(self.k):
            if self.hi[s, s] >= 1.0:
                return s
        return None

    def split(self) -> tuple[RowBox, ...]:
        """Halve the relatively widest entry interval (geometric mean away from 0)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            width = np.where(self.lo > 0, np.log(self.hi / self.lo), np.where(self.hi > 0, np.inf, 0.0))
        i, j = np.unravel_index(int(np.argmax(width)), width.shape)
        lo, hi = float(self.lo[i, j]), float(self.hi[i, j])
        mid = math.sqrt(lo * hi) if lo > 0 else 0.5 * (lo + hi)
        out = []
        for a, b in ((lo, mid), (mid, hi)):
            nlo, nhi = self.lo.copy(), self.hi.copy()
            nlo[i, j], nhi[i, j] = a, b
            child = RowBox.of(nlo, nhi)
            if child is not None:
                out.append(child)
        return tuple(out)


@dataclass(frozen=True)
class CertifiedTable:
    """A plan's window — its left and right rows outward, a released record beyond each — and
    ``bound``, a certified bound over the whole set of its leakage in a *stationary* stream
    (krobust.worst_over_rows, the robust plan's worst case)."""

    left: NDArray[np.float64]
    right: NDArray[np.float64]
    bound: float

    def covers(self, case: WindowCase) -> bool:
        """Is the case a stream window with no restart inside and rows element-wise ≥ the table's
        (a released record counts as a row of zeros)? More redaction is a post-processing of the
        table's output (notes/000 §4.5), so its stationary leakage is at most the table's."""
        if case.left is None or case.right is None or case.left.reaches:
            return False
        if any(kd != ONE for kd in (*case.left.kinds, *case.right.kinds)):
            return False
        return _dominates(case.left.rows, self.left) and _dominates(case.right.rows, self.right)


def _dominates(rows: NDArray[np.float64], table: NDArray[np.float64]) -> bool:
    n = max(rows.shape[0], table.shape[0])
    pad = np.zeros((n, table.shape[1]))
    a, b = pad.copy(), pad.copy()
    a[: rows.shape[0]], b[: table.shape[0]] = rows, table
    return bool(np.all(a >= b))


def region(model_set: ModelSet) -> RowBox:
    """The row-wise set of a k-state model set's entry bounds (module docstring)."""
    if model_set.kind == "finite" or model_set.bounds is None:
        raise ModelError("model set: a k-state region needs entry bounds (kind 'rows')")
    b = np.asarray(model_set.bounds, dtype=np.float64)
    if b.shape != (model_set.k, model_set.k, 2):
        raise ModelError("model set: entry_bounds must be k×k [lo, hi] pairs")
    box = RowBox.of(b[:, :, 0], b[:, :, 1])
    if box is None:
        raise ModelError("model set: the entry bounds of some row contain no probability vector")
    return box


def windows_bound(box: RowBox, windows: Sequence[KWindow]) -> float:
    """Certified upper bound over ``box`` on the stream leakage of each window (left rows, right
    rows outward; a released record beyond each): L[a,b] + R[a,b] per pair (audit/kstate.py), with
    L[a,b] ≤ left bound + log π_b/π_a bound (:mod:`.kinterval`); for two states the left side is
    bounded like the right one (a stationary binary chain is reversible), as :mod:`.interval` does."""
    k = box.k
    vertices = stationary_vertices(box.lo, box.hi) if k > 2 else None
    law = law_ratio_bounds(box.lo, box.hi, vertices) if k > 2 else None
    rev = None if law is None else reversed_box(box, law, vertices)
    worst = -math.inf
    for left, right in windows:
        R = right_bounds(box.lo, box.hi, _released_beyond(right, k), False)
        if law is None:  # every stationary binary chain is reversible: the left side steps with P too
            L = right_bounds(box.lo, box.hi, _released_beyond(left, k), False)
        else:
            L = left_bounds(box.lo, box.hi, np.ascontiguousarray(left, dtype=np.float64))
            L = np.where(L == -math.inf, -math.inf, L + law)
            if rev is not None:  # both bound the same quantity: keep the smaller, pair by pair
                L = np.minimum(L, right_bounds(rev.lo, rev.hi, _released_beyond(left, k), False))
        worst = max(worst, combine(L, R).total)
    return worst


def reversed_box(box: RowBox, law: NDArray[np.float64], vertices: Vertices) -> RowBox | None:
    """A row-wise set holding every member's time reversal P̃[t, s] = π_s P[s, t] / π_t (the kernel
    of the stationary chain read backwards, so the left side is a right side under P̃), as the
    intersection of two valid boxes, rounded outward:

    - P̃[t, s] ∈ [e^(−law[s,t]) lo[s,t], e^(law[t,s]) hi[s,t]], ``law[a, b]`` ≥ log π_b/π_a;
    - with the vertices of the stationary-law polytope Π (kinterval.stationary_vertices), π_t = Σ_u π_u P[u, t], so
      P̃[t, s] = π_s P[s,t] / (π_s P[s,t] + Σ_{u≠s} π_u P[u,t]), increasing in P[s, t] and
      decreasing in the other rows' entries, each row free within its set: for fixed π its range is
      [π_s lo_st / (π_s lo_st + Σ_{u≠s} π_u hi_ut), π_s hi_st / (π_s hi_st + Σ_{u≠s} π_u lo_ut)],
      linear-fractional in π, so extreme at the vertices of Π.

    None when the bounds hold no stochastic matrix (cannot happen for a non-empty set)."""
    with np.errstate(over="ignore"):
        lo = (np.exp(-law) * box.lo).T * (1.0 - 1e-12)
        hi = (np.exp(law.T) * box.hi).T * (1.0 + 1e-12)
    if vertices is not None:
        pts, slack = vertices
        widen = 2 * slack + 1e-12
        for t in range(box.k):
            for s in range(box.k):
                num_hi, num_lo = pts[:, s] * box.hi[s, t], pts[:, s] * box.lo[s, t]
                rest_lo = pts @ box.lo[:, t] - num_lo
                rest_hi = pts @ box.hi[:, t] - num_hi
                with np.errstate(invalid="ignore", divide="ignore"):
                    h = np.max(np.where(num_hi > 0, num_hi / (num_hi + rest_lo), 0.0)) * (1.0 + widen)
                    lw = np.min(np.where(num_lo > 0, num_lo / (num_lo + rest_hi), 0.0)) * (1.0 - widen)
                hi[t, s], lo[t, s] = min(hi[t, s], h), max(lo[t, s], lw)
    return RowBox.of(lo, np.minimum(1.0, hi))


def _released_beyond(rows: NDArray[np.float64], k: int) -> NDArray[np.float64]:
    return np.ascontiguousarray(np.vstack([rows, np.zeros((1, k))]), dtype=np.float64)


def member_leakage(P: NDArray[np.float64], windows: Sequence[KWindow]) -> float | None:
    """Exact stream leakage of the windows under the chain P (audit/kstate.py via the k-state
    side models); None when P is not an ergodic chain (no stationary stream)."""
    try:
        chain = MarkovChain(P)
        chain.require_ergodic()
    except ModelError:
        return None
    lm, rm = _stream_models(chain)
    return max(combine(lm.pairs(left), rm.pairs(right)).total for left, right in windows)


def worst_over_rows(box: RowBox, windows: Sequence[KWindow], *, target: float | None = None,
                    rel_tol: float = REL_TOL, max_boxes: int = K_MAX_BOXES) -> WorstCase:
    """Certified worst-case stream leakage of ``windows`` over the row-wise set (module docstring)."""
    if box.k > MAX_STATES:
        raise ModelError(f"robust k-state plans: at most {MAX_STATES} states")

    def lower(b: RowBox) -> tuple[float, NDArray[np.float64]] | None:
        P = b.centre()
        v = member_leakage(P, windows)
        return None if v is None else (v, P)

    bound, best, member, count = branch_and_bound(
        box, lambda b: windows_bound(b, windows), lower, RowBox.split, [],
        target=target, rel_tol=rel_tol, max_boxes=max_boxes)
    return WorstCase(bound, best, None, count, "branch-and-bound over the row-wise set (interval bound)",
                     matrix=None if member is None else member)


def kstream_windows(plan: KStreamPlan) -> list[KWindow]:
    """A k-state stream plan's window: its sides' rows outward (a released record beyond each)."""
    return [(plan.left.red[: plan.left.horizon], plan.right.red[: plan.right.horizon])]


def _cost(plan: KStreamPlan, law: NDArray[np.float64]) -> float:
    """Expected redactions per mark (outside p) under the stationary law ``law``."""
    return float(sum(np.sum(sp.red[: sp.horizon] * law[None, :]) for sp in (plan.left, plan.right)))


@dataclass(frozen=True)
class RobustKStreamPlan:
    """A k-state stream plan certified over a row-wise model set (the k-state
    :class:`~streamguard.model.robust.RobustStreamPlan`)."""

    model_set: ModelSet
    worst: WorstCase
    design_member: NDArray[np.float64]
    design_budget: float
    plan: KStreamPlan
    expected_redacted: float
    point_plan: KStreamPlan | None
    point_expected_redacted: float | None
    point_worst: WorstCase | None
    #: The budget ε the plan is certified for (the design budget ε' ≤ ε is ``design_budget``).
    epsilon: float

    def evaluation_plan(self) -> KStreamPlan:
        """The same table with the worst member found as its chain (the privatizer's table; its
        per-mark figures are certified over the whole region: streamguard.model.rows_window, §5)."""
        P = self.worst.matrix if self.worst.matrix is not None else self.design_member
        # ε, not the design budget ε': the marks are held to the certified budget (robust.evaluation_plan)
        return KStreamPlan(MarkovChain(P), self.epsilon, self.plan.design, self.plan.left, self.plan.right,
                           self.plan.weights)

    def certified_table(self) -> CertifiedTable:
        """The plan's window and its certified worst case (the privatizer's on-time marks)."""
        (left, right), = kstream_windows(self.plan)
        return CertifiedTable(left, right, self.worst.bound)

    def utility_cost(self) -> float | None:
        return None if self.point_expected_redacted is None else self.expected_redacted - self.point_expected_redacted

    def status(self) -> dict[str, Any]:
        return {**self.model_set.describe(), "worst_case": self.worst.as_dict(),
                "utility_cost_per_mark": self.utility_cost()}

    def as_dict(self) -> dict[str, Any]:
        return {"model_set": self.model_set.describe(), "worst_case": self.worst.as_dict(),
                "design_member": {"matrix": self.design_member.tolist()}, "design_budget": self.design_budget,
                "horizons": {"left": self.plan.left.horizon, "right": self.plan.right.horizon},
                "expected_redacted_per_mark": self.expected_redacted,
                "point_estimate_plan": None if self.point_plan is None else {
                    "horizons": {"left": self.point_plan.left.horizon, "right": self.point_plan.right.horizon},
                    "expected_redacted_per_mark": self.point_expected_redacted,
                    "worst_case_over_set": None if self.point_worst is None else self.point_worst.as_dict()},
                "utility_cost_per_mark": self.utility_cost()}


def robust_kstream_plan(model_set: ModelSet, epsilon: float, *, split: str | float = "optimize",
                        weights: Any = None) -> RobustKStreamPlan:
    """The k-state stream plan (exact design) with the fewest expected redactions per mark whose
    worst case over the model set's row-wise region is certified ≤ ε (module docstring)."""
    eps = check_epsilon(epsilon)
    box = region(model_set)
    s = box.never_left()
    if s is not None:
        raise ModelError(f"the model set holds a chain that never leaves state {s}: no stream plan bounds the "
                         "leakage; calibrate on more data")
    point = model_set.point
    law = (point if point is not None else MarkovChain(box.centre())).stationary_law

    def worst(plan: KStreamPlan, target: float | None = None) -> WorstCase:
        return worst_over_rows(box, kstream_windows(plan), target=target,
                               max_boxes=K_MAX_BOXES if target is None else K_DESIGN_BOXES)

    def design(P: NDArray[np.float64], e: float) -> KStreamPlan:
        try:
            return plan_kstream(MarkovChain(P), e, design="exact", split=split, weights=weights)
        except ModelError as exc:
            raise ValueError(str(exc)) from None

    point_plan = point_cost = point_worst = None
    cands = [box.stickiest()]
    if point is not None:
        point_plan = plan_kstream(point, eps, design="exact", split=split, weights=weights)
        point_cost = _cost(point_plan, law)
        point_worst = worst(point_plan)
        cands = [point.matrix, *cands] + ([point_worst.matrix] if point_worst.matrix is not None else [])
    best: tuple[KStreamPlan, float, NDArray[np.float64]] | None = None
    for P in cands:
        got = _largest_certified(lambda e, P=P: design(P, e), lambda p: worst(p, eps), eps, steps=K_BISECT_DESIGN,
                                 floor_first=True)
        if got is not None and (best is None or _cost(got[0], law) < _cost(best[0], law) - 1e-12):
            best = (got[0], got[1], np.asarray(P))
    if best is None:
        raise ModelError("no k-state stream plan was certified to meet epsilon over the whole model set (it holds "
                         "chains that mix too slowly, or a transition never seen in the data makes a release "
                         "near-certain evidence); calibrate on more data")
    plan, e_design, P = best
    final = worst(plan)
    if not final.bound <= eps:  # pragma: no cover - the certificate that chose the plan must reproduce
        raise ModelError("internal: the robust plan's certificate did not reproduce")
    return RobustKStreamPlan(model_set, final, P, e_design, plan, _cost(plan, law), point_plan, point_cost,
                             point_worst, eps)


def robust_plan_for(model_set: ModelSet, epsilon: float, *, design: str,
                    split: str | float) -> RobustStreamPlan | RobustKStreamPlan:
    """The daemon's robust table (the model-set twin of ``kplan.stream_plan_for``): the binary robust
    3R plan (``design`` as configured) for two states, the k-state one (exact design) for more."""
    if model_set.is_binary:
        return robust_stream_plan(model_set, epsilon, design=design, split=split)
    return robust_kstream_plan(model_set, epsilon, split=split)
