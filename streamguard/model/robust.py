"""3R plans robust over a model set, with a certified worst-case leakage (issue 11; docs/model-sets.md §3).

**Worst case of given rows.** A plan is described by its *windows*: for each private record, its
redaction rows outward on the left and on the right (Y_p = ⊥). Over a finite set the worst case
is exact: the largest exact leakage of a member. Over a binary box [α_lo, α_hi] × [β_lo, β_hi] it
is *certified* by branch-and-bound: every sub-box gets the rigorous upper bound of
:mod:`.interval` (exact range over kernels that may vary within the sub-box), and the exact
leakage of its centre member as a lower bound; the sub-box with the largest upper bound is split
(at the geometric mean of its relatively widest range) until the largest upper bound is within
``rel_tol`` of the best member, or — when a target ε is given — until it is ≤ ε (certified) or a
member exceeds ε (refuted). The reported ``bound`` is the largest upper bound over a partition of
the whole box: never a grid maximum alone. ``member`` is the best member found, attaining
``attained`` ≤ true worst ≤ ``bound``.

The worst corner is not always the same one ((α_lo, β_lo) for sticky chains, (α_hi, β_hi) when
λ = 1 − α − β < 0), and no monotonicity of the exact leakage in (α, β) is proved here, so the
corners alone are never taken as the answer: the branch-and-bound certifies. (In practice the
interval bound of the whole box often equals a corner's exact value already, and the certificate
then needs a single box; docs/model-sets.md §3.)

**Robust design.** The least redaction that meets ε at the worst case: for each design candidate —
the point estimate and the box's corners (the finite members) — find the largest design budget
ε' ≤ ε whose plan (designed on that candidate with the usual 3R designer) has certified worst case
≤ ε (ε' = ε first, then bisection); keep the certified plan with the fewest expected redactions per
mark under the point estimate. If no candidate certifies (e.g. the set holds a chain that never
leaves a state), there is no plan for an unbounded stream: :class:`ModelError`.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from .chain import MarkovChain, ModelError
from ..redaction.plan import RedactionPlan, StreamPlan, check_epsilon, plan_redaction, plan_stream
from .interval import box_leakage_bound, corner_kernels
from .modelset import ModelSet
from .scenarios import tod_leakage

Window = tuple[NDArray[np.float64], NDArray[np.float64]]
Box = tuple[tuple[float, float], tuple[float, float]]
R = TypeVar("R")  # a region of a branch-and-bound
M = TypeVar("M")  # a member of a region

#: Default relative gap between the certified bound and the best member when no target is given.
REL_TOL = 1e-3
#: Sub-boxes examined at most by one branch-and-bound (bounded work; the bound stays valid).
MAX_BOXES = 20_000
_BISECT_DESIGN = 12


@dataclass(frozen=True)
class WorstCase:
    """The worst-case leakage of a plan over a model set (module docstring)."""

    bound: float  # certified: no member leaks more
    attained: float  # exact leakage of ``member``
    member: tuple[float, float] | None  # (α, β) of the best member found (binary sets)
    boxes: int  # sub-boxes in the certificate's partition (0 for a finite set: exact)
    method: str
    matrix: NDArray[np.float64] | None = None  # transition matrix of the best member (k-state sets)

    def as_dict(self) -> dict[str, Any]:
        member: dict[str, Any] | None = None
        if self.member is not None:
            member = {"alpha": self.member[0], "beta": self.member[1]}
        elif self.matrix is not None:
            member = {"matrix": self.matrix.tolist()}
        return {"bound": self.bound, "attained": self.attained, "member": member,
                "boxes": self.boxes, "method": self.method}


def _windows_bound(corners: NDArray[np.float64], windows: Sequence[Window]) -> float:
    return max(box_leakage_bound(corners, left, right) for left, right in windows)


def _member_leakage(a: float, b: float, windows: Sequence[Window]) -> float:
    return _windows_bound(corner_kernels((a, a), (b, b)), windows)


def _split(box: Box) -> tuple[Box, Box]:
    def width(lo: float, hi: float) -> float:
        return math.inf if lo <= 0.0 and hi > 0.0 else (math.log(hi / lo) if lo > 0 else 0.0)

    (a0, a1), (b0, b1) = box
    if width(a0, a1) >= width(b0, b1):
        m = math.sqrt(a0 * a1) if a0 > 0 else 0.5 * (a0 + a1)
        return ((a0, m), (b0, b1)), ((m, a1), (b0, b1))
    m = math.sqrt(b0 * b1) if b0 > 0 else 0.5 * (b0 + b1)
    return ((a0, a1), (b0, m)), ((a0, a1), (m, b1))


def _centre(box: Box) -> tuple[float, float]:
    (a0, a1), (b0, b1) = box
    a = math.sqrt(a0 * a1) if a0 > 0 else 0.5 * (a0 + a1)
    b = math.sqrt(b0 * b1) if b0 > 0 else 0.5 * (b0 + b1)
    return a, b


def branch_and_bound(root: R, upper: Callable[[R], float], lower: Callable[[R], tuple[float, M] | None],
                     split: Callable[[R], tuple[R, ...]], seeds: Sequence[tuple[float, M]], *,
                     target: float | None, rel_tol: float, max_boxes: int) -> tuple[float, float, M | None, int]:
    """Best-first branch-and-bound for the worst case over a region (module docstring):
    ``upper(region)`` a certified upper bound, ``lower(region)`` the exact value of one member of
    it (None: no member evaluated), ``split`` a partition into sub-regions, ``seeds`` exact values
    of members known beforehand. Returns (bound, attained, member, regions examined); ``bound`` is
    the largest upper bound over a partition of ``root`` (never below ``attained``)."""
    best, member = -math.inf, None
    for v, m in seeds:
        if v > best:
            best, member = v, m
    got = lower(root)
    if got is not None and got[0] > best:
        best, member = got
    heap: list[tuple[float, int, R]] = [(-upper(root), 0, root)]
    count, uid = 1, 1
    while heap:
        top = -heap[0][0]
        if target is not None and (top <= target or best > target or not math.isfinite(top)):
            break  # certified, refuted, or uncertifiable (an infinite bound stays infinite on the sub-region
            # that holds its zero entries, so the partition's maximum never becomes finite)
        if top <= best + rel_tol * max(abs(best), 1e-12) or count >= max_boxes or not math.isfinite(top) and count > 64:
            break
        _, _, cur = heapq.heappop(heap)
        for child in split(cur):
            ub = min(top, upper(child))
            got = lower(child)
            if got is not None and got[0] > best:
                best, member = got
            heapq.heappush(heap, (-ub, uid, child))
            uid += 1
            count += 1
    bound = -heap[0][0] if heap else best
    return max(bound, best), best, member, count


def worst_over_box(box: Box, windows: Sequence[Window], *, target: float | None = None,
                   rel_tol: float = REL_TOL, max_boxes: int = MAX_BOXES) -> WorstCase:
    """Certified worst-case leakage of ``windows`` over the binary box (module docstring)."""
    def lower(b: Box) -> tuple[float, tuple[float, float]] | None:
        a, c = _centre(b)
        return (_member_leakage(a, c, windows), (a, c)) if 0 < a < 1 and 0 < c < 1 else None

    (a0, a1), (b0, b1) = box
    seeds = [(_member_leakage(a, b, windows), (a, b)) for a, b in [(a0, b0), (a0, b1), (a1, b0), (a1, b1)]
             if 0 < a < 1 and 0 < b < 1]
    bound, best, member, count = branch_and_bound(
        box, lambda b: _windows_bound(corner_kernels(*b), windows), lower, _split, seeds,
        target=target, rel_tol=rel_tol, max_boxes=max_boxes)
    return WorstCase(bound, best, member, count, "branch-and-bound over the box (interval bound)")


def worst_leakage(model_set: ModelSet, windows: Sequence[Window], *, target: float | None = None,
                  rel_tol: float = REL_TOL, max_boxes: int = MAX_BOXES) -> WorstCase:
    """The worst case over a binary model set of the leakage of ``windows`` (each a private
    record's left and right rows outward, Y_p = ⊥): exact for a finite set, certified for a box."""
    if not model_set.is_binary:
        raise ModelError("worst_leakage: binary model sets (k-state row-wise sets: streamguard.model.krobust)")
    if model_set.kind == "finite":
        vals = [(_member_leakage(m.alpha, m.beta, windows), (m.alpha, m.beta)) for m in model_set.members]
        v, member = max(vals, key=lambda t: t[0])
        if model_set.setchain is not None:  # a set-chain's scenarios: the time-of-day one too (scenarios.py)
            sc = model_set.setchain
            assert sc.scenarios is not None
            tod = max(tod_leakage(sc.scenarios, sc.sample_period, left, right) for left, right in windows)
            if tod > v:
                return WorstCase(tod, v, member, 0, "exact: the time-of-day scenario at its worst position of the "
                                                    "day (bound) above the worst finite member (attained)")
        return WorstCase(v, v, member, 0, "exact, worst finite member")
    return worst_over_box(model_set._ranges(), windows, target=target, rel_tol=rel_tol, max_boxes=max_boxes)


def stream_windows(plan: StreamPlan) -> list[Window]:
    """A stream plan's window: the table's sides outward, each ended by one released record (it
    stands for whatever lies beyond, which only over-states the leakage; regions.py)."""
    stop = np.zeros((1, 2))
    return [(np.vstack([plan.left.red[: plan.left_horizon], stop]),
             np.vstack([plan.right.red[: plan.right_horizon], stop]))]


def chain_windows(red: NDArray[np.float64], private: Sequence[int]) -> list[Window]:
    """A finite chain's windows: for each private record (0-based) of the (n, 2) redaction rows
    ``red``, the rows outward to each end."""
    return [(red[p - 1 :: -1] if p else red[:0], red[p + 1 :]) for p in private]


def _redactions(red_rows: NDArray[np.float64], law: NDArray[np.float64]) -> float:
    return float(np.sum(red_rows * law[None, :]))


def _law(model_set: ModelSet) -> NDArray[np.float64]:
    """The law used for utility figures: the point estimate's stationary law (the box centre's
    when there is no point estimate)."""
    if model_set.point is not None:
        return model_set.point.initial
    a, b = _centre(model_set._ranges())
    return MarkovChain.binary(a, b).initial


def _candidates(model_set: ModelSet) -> list[MarkovChain]:
    out = [] if model_set.point is None or not model_set.point.is_binary else [model_set.point]
    return out + model_set.corners()


@dataclass(frozen=True)
class _Certified:
    """What every robust plan carries: the set, the certified worst case, and how it was designed."""

    model_set: ModelSet
    worst: WorstCase
    design_member: tuple[float, float]
    design_budget: float  # ε' the plan was designed with on ``design_member``


@dataclass(frozen=True)
class RobustStreamPlan(_Certified):
    """A stream plan (table by signed distance) certified over a model set."""

    plan: StreamPlan
    expected_redacted: float  # per mark, under the point estimate (outside p itself)
    point_plan: StreamPlan | None  # the plan designed on the point estimate alone, for comparison
    point_expected_redacted: float | None
    point_worst: WorstCase | None  # that plan's worst case over the set
    epsilon: float  # the budget certified over the set (``plan.epsilon`` is the design budget ε' ≤ ε)

    def evaluation_plan(self) -> StreamPlan:
        """The same table with the worst member found as its chain (the status's plan leakage). The
        daemon's privatizer certifies its per-mark figures (late marks, the stream's start, restarts)
        over the whole box (model/box_window.py), or exactly over every finite member
        (docs/model-sets.md §5)."""
        member = self.worst.member or self.design_member
        # ε, not the design budget ε': the privatizer's marks are held to the certified budget (a
        # plan designed with ε' < ε and the marks checked against ε' were all reported not honoured)
        return StreamPlan(MarkovChain.binary(*member), self.epsilon, self.plan.design, self.plan.left,
                          self.plan.right)

    def status(self) -> dict[str, Any]:
        """What the privacy status says about the model set and the plan's worst case."""
        return {**self.model_set.describe(), "worst_case": self.worst.as_dict(),
                "utility_cost_per_mark": None if self.point_expected_redacted is None
                else self.expected_redacted - self.point_expected_redacted}

    def as_dict(self) -> dict[str, Any]:
        return {"model_set": self.model_set.describe(), "worst_case": self.worst.as_dict(),
                "design_member": {"alpha": self.design_member[0], "beta": self.design_member[1]},
                "design_budget": self.design_budget,
                "horizons": {"left": self.plan.left_horizon, "right": self.plan.right_horizon},
                "expected_redacted_per_mark": self.expected_redacted,
                "point_estimate_plan": None if self.point_plan is None else {
                    "horizons": {"left": self.point_plan.left_horizon, "right": self.point_plan.right_horizon},
                    "expected_redacted_per_mark": self.point_expected_redacted,
                    "worst_case_over_set": None if self.point_worst is None else self.point_worst.as_dict()},
                "utility_cost_per_mark": None if self.point_expected_redacted is None
                else self.expected_redacted - self.point_expected_redacted}


def _stream_cost(plan: StreamPlan, law: NDArray[np.float64]) -> float:
    return _redactions(plan.table(), law) - 1.0  # p itself is always redacted


def _largest_certified(build: Any, worst: Any, epsilon: float, *, steps: int = _BISECT_DESIGN,
                       floor_first: bool = False) -> tuple[Any, float, WorstCase] | None:
    """The plan ``build(ε')`` for the largest ε' ≤ ε (ε' = ε, else ``steps`` bisection steps) whose
    certified worst case ``worst(plan)`` is ≤ ε; None if none of the budgets tried certifies.
    ``floor_first``: after ε fails, try the smallest budget of the search (ε·2^−steps) next and
    give up when it fails too (saves the bisection when designs are costly; it can only miss a
    plan, never accept an uncertified one)."""
    def attempt(e: float) -> tuple[Any, WorstCase] | None:
        try:
            plan = build(e)
        except ValueError:
            return None
        wc = worst(plan)
        return (plan, wc) if wc.bound <= epsilon else None

    got = attempt(epsilon)
    if got is not None:
        return got[0], epsilon, got[1]
    lo, hi, found = 0.0, epsilon, None
    if floor_first:
        floor = epsilon * 2.0**-steps
        got = attempt(floor)
        if got is None:
            return None
        lo, found = floor, (got[0], floor, got[1])
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        got = attempt(mid)
        if got is None:
            hi = mid
        else:
            lo, found = mid, (got[0], mid, got[1])
    return found


def robust_stream_plan(model_set: ModelSet, epsilon: float, *, design: str = "optimal",
                       split: str | float = "even", threshold: float | str | None = None,
                       point_planner: Any = None) -> RobustStreamPlan:
    """The stream plan with the fewest expected redactions whose worst case over ``model_set`` is
    certified ≤ ε (module docstring). ``point_planner(chain, ε)``: how the point estimate's plan
    (for comparison) is designed — default :func:`plan_stream` with the same settings (the daemon
    passes its plan cache)."""
    eps = check_epsilon(epsilon)
    law = _law(model_set)
    best: tuple[StreamPlan, float, MarkovChain] | None = None
    for cand in _candidates(model_set):
        got = _largest_certified(
            lambda e, c=cand: plan_stream(c, e, design=design, split=split, threshold=threshold),
            lambda p: worst_leakage(model_set, stream_windows(p), target=eps), eps)
        if got is not None and (best is None or _stream_cost(got[0], law) < _stream_cost(best[0], law) - 1e-12):
            best = (got[0], got[1], cand)
    if best is None:
        raise ModelError("no 3R stream plan meets epsilon over the whole model set (it holds chains too "
                         "persistent to protect); calibrate on more data")
    plan, e_design, cand = best
    got = certified_stream_plan(model_set, eps, plan, (cand.alpha, cand.beta), e_design,
                                point_planner or (lambda c, e: plan_stream(c, e, design=design, split=split,
                                                                           threshold=threshold)))
    if got is None:  # the tighter run must agree with the certificate that chose the plan
        raise ModelError("internal: the robust plan's certificate did not reproduce")  # pragma: no cover
    return got


def certified_stream_plan(model_set: ModelSet, epsilon: float, plan: StreamPlan, design_member: tuple[float, float],
                          design_budget: float, point_planner: Any) -> RobustStreamPlan | None:
    """``plan`` (designed on ``design_member`` with budget ``design_budget``) as a robust plan: its
    worst case over the set certified again from scratch, None when it is not ≤ ε; the point
    estimate's plan (``point_planner(chain, ε)``) beside it. Also how a cached robust plan is
    re-checked before use (model/robust_cache.py)."""
    final = worst_leakage(model_set, stream_windows(plan))
    if not final.bound <= epsilon:
        return None
    law = _law(model_set)
    point_plan = point_cost = point_worst = None
    if model_set.point is not None:
        point_plan = point_planner(model_set.point, epsilon)
        point_cost = _stream_cost(point_plan, law)
        point_worst = worst_leakage(model_set, stream_windows(point_plan))
    return RobustStreamPlan(model_set, final, design_member, design_budget, plan, _stream_cost(plan, law),
                            point_plan, point_cost, point_worst, epsilon)


@dataclass(frozen=True)
class RobustChainPlan(_Certified):
    """A finite-chain plan certified over a model set (``utility`` under the point estimate)."""

    plan: RedactionPlan
    utility: float
    point_utility: float | None


def robust_redaction_plan(model_set: ModelSet, n: int, private: Sequence[int], epsilon: float, *,
                          design: str = "optimal", split: str | float = "even",
                          threshold: float | str | None = None) -> RobustChainPlan:
    """The finite plan (n records, 0-based ``private``) with the highest utility under the point
    estimate whose worst case over ``model_set`` is certified ≤ ε. Full redaction of every record
    always certifies (it releases nothing), so a plan always exists."""
    eps = check_epsilon(epsilon)
    law = _law(model_set)

    def utility(plan: RedactionPlan) -> float:
        return 1.0 - _redactions(plan.red, law) / plan.n

    best: tuple[RedactionPlan, float, tuple[float, float]] | None = None
    for cand in _candidates(model_set):
        got = _largest_certified(
            lambda e, c=cand: plan_redaction(c, n, private, e, design=design, split=split, threshold=threshold),
            lambda p: worst_leakage(model_set, chain_windows(p.red, p.private), target=eps), eps)
        if got is not None and (best is None or utility(got[0]) > utility(best[0]) + 1e-12):
            best = (got[0], got[1], (cand.alpha, cand.beta))
    if best is None:  # nothing certified: redact every record (a plan that releases nothing leaks 0)
        cand = _candidates(model_set)[0] if _candidates(model_set) else MarkovChain.binary(*_centre(model_set._ranges()))
        full = plan_redaction(cand, n, private, eps)
        red = np.ones((n, 2))
        plan = RedactionPlan(cand, n, full.private, eps, "full", red, np.full(n, 2, dtype=np.int8), full.splits, {})
        best = (plan, 0.0, (cand.alpha, cand.beta))
    plan, e_design, member = best
    point_u = None
    if model_set.point is not None:
        point_u = utility(plan_redaction(model_set.point, n, private, eps, design=design, split=split,
                                         threshold=threshold))
    return RobustChainPlan(model_set, worst_leakage(model_set, chain_windows(plan.red, plan.private)), member, e_design,
                           plan, utility(plan), point_u)
