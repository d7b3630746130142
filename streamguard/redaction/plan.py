"""3R redaction plans: for a finite chain of n records, and for streams by signed distance to p.

Composition of the two sides (notes/000 §4.1, derived): given X_p the sides are independent and
Y_p = ⊥, so L(X_p → Y) ≤ L_left + L_right. Each side is therefore designed alone with its share of
the budget, ε_ℓ + ε_r ≤ ε:

- ``even``: ε/2 each (paper 000 Thm 1); a side with no records gives its share to the other (as
  the paper does for p = 1).
- a number ε_ℓ ∈ [0, ε]: ε_r = ε − ε_ℓ (same rule for an empty side).
- ``optimize``: the split with the fewest expected redactions among ε_ℓ ∈ {0, ε}, a grid, and the
  breakpoints {i_left(Δ)} ∪ {ε − i_right(Δ)} where regions change (notes/000 §4.4).

Several private records combine by the element-wise maximum of their redaction tables
(notes/000 §4.5, paper 000 footnote 1): a larger redaction probability is a post-processing of a
smaller one, so no private record loses protection. The plan reports the exact leakage about each
private record of the *combined* plan.

Indices are 0-based here; the CLI prints the papers' 1-based positions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol, TypeVar

import numpy as np
from numpy.typing import NDArray

from ..audit.exact import Leakage, exact_leakage
from ..privacy.budget import check_budget
from ..model.chain import MarkovChain
from ..privacy.channel import ChannelSequence
from ..sampling import BitSource, apply_redaction, compact_index, thresholds
from .regions import L, NAMES, S
from .side import EXACT_SHORTLIST, SideModel, SidePlan, best_side, plan_side

SPLITS = ("even", "optimize")
_SPLIT_GRID = 16
#: Relative slack when an exact leakage is compared with ε: the audits add and subtract
#: logarithms, so a design that meets ε exactly can come out a few ulps above it.
ROUNDOFF = 1e-12


def check_epsilon(epsilon: float) -> float:
    """The budget of a plan: 0 < ε ≤ 1000 nats, as everywhere (:mod:`streamguard.privacy.budget`)."""
    return check_budget(epsilon)


def within(leakage: float, epsilon: float) -> bool:
    """Does an exact leakage meet ε (up to :data:`ROUNDOFF`)? NaN and +∞ never do."""
    return leakage <= epsilon * (1 + ROUNDOFF)


def relation(leakage: float, epsilon: float) -> str:
    """'≤' or '>': what a printed leakage is to ε, computed (:func:`within`), never literal text."""
    return "≤" if within(leakage, epsilon) else ">"


class OverBudget(ValueError):
    """A plan whose exact leakage exceeds its ε: refused, never returned as a plan."""


class _Total(Protocol):
    total: float


_L = TypeVar("_L", bound=_Total)


def enforce_budget(red: NDArray[np.float64], private: Sequence[int], epsilon: float,
                   audit: Callable[[NDArray[np.float64], int], _L]) -> dict[int, _L]:
    """The final exact check of every finite plan (binary and k-state), on the combined rows
    ``red`` (n × k, changed in place): ``audit(red, p)`` is the exact leakage about record p.

    A design is checked, never trusted. A private record above ε gets more redaction — first its
    left side back to the first record, then its right side to the last — until it holds: both
    sides fully redacted leave one output, which leaks nothing, and more redaction never raises
    another record's leakage (a post-processing). Raises :class:`OverBudget` if the audit still
    says more than ε (it cannot, by that argument). Returns the exact leakage of the final rows."""
    for p in private:
        for widen in (slice(0, p), slice(p + 1, None)):
            if within(audit(red, p).total, epsilon):
                break
            red[widen] = 1.0
    leaks = {p: audit(red, p) for p in private}
    for p, lk in leaks.items():
        if not within(lk.total, epsilon):  # pragma: no cover - full redaction leaks nothing
            raise OverBudget(f"private {p + 1}: exact leakage {lk.total:.9g} nats > ε = {epsilon:g} "
                             "even fully redacted")
    return leaks


def require_within(leakage: float, epsilon: float) -> None:
    """The final exact check of a stream plan (a table by distance has no 'redact to the start' to
    fall back on): :class:`OverBudget`, with a one-line reason, when its exact leakage exceeds ε."""
    if not within(leakage, epsilon):
        raise OverBudget(f"the stream plan's exact leakage {leakage:.9g} nats > ε = {epsilon:g}")


def _split_candidates(
    split: str | float, epsilon: float, left: SideModel, right: SideModel
) -> list[tuple[float, float]]:
    left_empty, right_empty = left.length == 0, right.length == 0

    def donate(el: float, er: float) -> tuple[float, float]:
        if left_empty and right_empty:
            return 0.0, 0.0
        if left_empty:
            return 0.0, epsilon
        if right_empty:
            return epsilon, 0.0
        return el, er

    if split == "even":
        return [donate(epsilon / 2, epsilon / 2)]
    if split == "optimize":
        if left_empty or right_empty:
            return [donate(0.0, 0.0)]
        cands: set[float] = set(np.linspace(0.0, epsilon, _SPLIT_GRID + 1).tolist())
        for model, mirror in ((left, False), (right, True)):
            count = 4 if model.length is None else min(model.length, 4)
            infl = model.influences(count)
            while infl.max(axis=1)[-1] > epsilon and (model.length is None or count < model.length):
                count = count * 2 if model.length is None else min(count * 2, model.length)
                infl = model.influences(count)
            for v in np.unique(infl):
                if 0 < v <= epsilon:
                    cands.add(float(epsilon - v) if mirror else float(v))
        pairs = []
        for el in sorted(cands):
            if left.length is None and el < 1e-12:
                continue  # a stream cannot redact its whole past
            if right.length is None and epsilon - el < 1e-12:
                continue
            er = epsilon - el
            if el + er > epsilon:  # round-off: never exceed the budget
                er = float(np.nextafter(er, 0.0))
            pairs.append((el, er))
        return pairs
    try:
        el = float(split)
    except (TypeError, ValueError):
        raise ValueError(f"split must be 'even', 'optimize' or a number in [0, ε], got {split!r}") from None
    if not (math.isfinite(el) and 0.0 <= el <= epsilon):
        raise ValueError("split: the left budget must lie in [0, ε]")
    er = epsilon - el
    if el + er > epsilon:
        er = float(np.nextafter(er, 0.0))
    return [donate(el, er)]


def plan_sides(
    left: SideModel,
    right: SideModel,
    epsilon: float,
    design: str,
    split: str | float = "even",
    threshold: float | str | None = None,
) -> tuple[SidePlan, SidePlan]:
    """Both sides of one private record under the split rule (module docstring)."""
    cache: dict[tuple[str, str, float], SidePlan] = {}

    def side(name: str, model: SideModel, budget: float, how: str) -> SidePlan:
        key = (name, how, budget)
        if key not in cache:
            cache[key] = best_side(model, budget, how, threshold)
        return cache[key]

    def cost(pair: tuple[SidePlan, SidePlan]) -> float:
        return pair[0].expected_redacted + pair[1].expected_redacted

    candidates = _split_candidates(split, epsilon, left, right)
    if design == "exact" and len(candidates) > EXACT_SHORTLIST:
        ranked = sorted(candidates, key=lambda c: cost((side("left", left, c[0], "optimal"),
                                                        side("right", right, c[1], "optimal"))))
        candidates = ranked[:EXACT_SHORTLIST]
    best: tuple[SidePlan, SidePlan] | None = None
    for el, er in candidates:
        pair = (side("left", left, el, design), side("right", right, er, design))
        if best is None or cost(pair) < cost(best) - 1e-12:
            best = pair
    assert best is not None
    return best


@dataclass(frozen=True)
class RedactionPlan:
    """Per-record redaction probabilities for a finite chain of ``n`` records.

    ``red[t] = (Pr(Y_t=⊥ | X_t=0), Pr(Y_t=⊥ | X_t=1))``; ``regions[t]`` ∈ {S, M, L} codes (the
    most protective over the private records); ``splits[p] = (ε_ℓ, ε_r)``; ``leakage[p]`` is the
    exact leakage about record p of the whole plan.
    """

    chain: MarkovChain
    n: int
    private: tuple[int, ...]
    epsilon: float
    design: str
    red: NDArray[np.float64]
    regions: NDArray[np.int8]
    splits: dict[int, tuple[float, float]] = field(default_factory=dict)
    leakage: dict[int, Leakage] = field(default_factory=dict)

    @property
    def utility(self) -> float:
        """ν = (1/n) E[#released] (paper 000 Def. 2, Eq. 3)."""
        if self.chain.stationary:
            return float((self.n - self.red.sum(axis=0)) @ self.chain.initial) / self.n
        return float(np.sum(self.chain.marginals(self.n) * (1.0 - self.red))) / self.n

    @cached_property
    def _channels(self) -> ChannelSequence:
        return ChannelSequence.from_redaction(self.red)

    @cached_property
    def _thresholds(self) -> NDArray[np.uint64]:
        return thresholds(self._channels.tables[:, :, -1])

    @cached_property
    def _row_index(self) -> NDArray[np.unsignedinteger]:
        """The channel index in its narrowest unsigned dtype (what :meth:`privatize` reads)."""
        return compact_index(self._channels.index, self._channels.tables.shape[0])

    def channels(self) -> ChannelSequence:
        """The plan as local channels (outputs 0, 1, ⊥), for the audit and the sampler."""
        return self._channels

    def privatize(self, states: NDArray[np.int8], source: BitSource) -> NDArray[np.int8]:
        """Apply the plan to one realisation x_0..x_{n−1}: REDACTED (−1) or the true state."""
        return apply_redaction(states, self._thresholds, self._row_index, source)

    def region_names(self) -> list[str]:
        return [NAMES[r] for r in self.regions]

    def max_leakage(self) -> float:
        return max((lk.total for lk in self.leakage.values()), default=0.0)


def _check_private(n: int, private: Sequence[int]) -> tuple[int, ...]:
    if n < 1:
        raise ValueError("n must be ≥ 1")
    ps = tuple(sorted({int(p) for p in private}))
    if not ps:
        raise ValueError("at least one private position is needed")
    for p in ps:
        if not 0 <= p < n:
            raise ValueError(f"private position {p + 1} is outside 1..{n}")
    return ps


def place_side(red: NDArray[np.float64], regions: NDArray[np.int8], p: int, sp: SidePlan, direction: str) -> None:
    """Write a side plan into a chain-wide table by element-wise maximum."""
    D = sp.red.shape[0]
    n = red.shape[0]
    if direction == "right":
        lo, hi = p + 1, min(n, p + 1 + D)
        sl = slice(lo, hi)
        src = slice(0, hi - lo)
    else:
        lo = max(0, p - D)
        sl = slice(lo, p)
        src = slice(p - lo - 1, None, -1) if p - lo > 0 else slice(0, 0)
    np.maximum(red[sl], sp.red[src], out=red[sl])
    np.maximum(regions[sl], sp.regions[src], out=regions[sl])


def finalize(chain: MarkovChain, n: int, private: tuple[int, ...], epsilon: float, design: str,
             red: NDArray[np.float64], regions: NDArray[np.int8],
             splits: dict[int, tuple[float, float]]) -> RedactionPlan:
    """Mark the private records L, audit every private record exactly (:func:`enforce_budget`:
    more redaction where a record is above ε), and build the plan."""
    for p in private:
        red[p] = 1.0
    leaks = enforce_budget(red, private, epsilon,
                           lambda rows, p: exact_leakage(chain, ChannelSequence.from_redaction(rows), p))
    regions[np.all(red >= 1.0, axis=1)] = L
    red.setflags(write=False)
    regions.setflags(write=False)
    return RedactionPlan(chain, n, private, epsilon, design, red, regions, splits, leaks)


def plan_redaction(
    chain: MarkovChain,
    n: int,
    private: Sequence[int],
    epsilon: float,
    *,
    design: str = "optimal",
    split: str | float = "even",
    threshold: float | str | None = None,
) -> RedactionPlan:
    """3R plan for a binary chain of n records protecting each index in ``private`` at ε.

    ``design`` ∈ {paper, optimal, exact}; ``split`` ∈ {even, optimize} or ε_ℓ; ``threshold`` is
    None (ε' = side budget), a fraction in (0, 1], or 'optimize' (notes/000 §7.8).
    """
    eps = check_epsilon(epsilon)
    ps = _check_private(n, private)
    if not chain.is_binary:
        raise ValueError("3R planning needs a binary chain")
    red = np.zeros((n, 2))
    regions = np.full(n, S, dtype=np.int8)
    splits = {}
    for p in ps:
        left = SideModel(chain, p, "left", p)
        right = SideModel(chain, p, "right", n - 1 - p)
        lp, rp = plan_sides(left, right, eps, design, split, threshold)
        place_side(red, regions, p, lp, "left")
        place_side(red, regions, p, rp, "right")
        splits[p] = (lp.budget, rp.budget)
    return finalize(chain, n, ps, eps, design, red, regions, splits)


class SignedTable:
    """A table by signed distance d = t − p built from a plan's two sides (``left``, ``right``:
    ``red[d−1]`` is the row at distance d, ``horizon`` the last redacting distance) and its
    ``chain``: shared by the binary and the k-state stream plans."""

    chain: MarkovChain
    left: Any
    right: Any

    @property
    def left_horizon(self) -> int:
        return int(self.left.horizon)

    @property
    def right_horizon(self) -> int:
        return int(self.right.horizon)

    def offsets(self) -> NDArray[np.int64]:
        return np.arange(-self.left_horizon, self.right_horizon + 1)

    def table(self) -> NDArray[np.float64]:
        """(left_horizon + right_horizon + 1, k) redaction rows for offsets −H_ℓ..H_r (p: all ones)."""
        rows = [self.left.red[: self.left_horizon][::-1], np.ones((1, self.chain.k)),
                self.right.red[: self.right_horizon]]
        return np.vstack(rows)


@dataclass(frozen=True)
class StreamPlan(SignedTable):
    """A 3R plan for an unbounded stationary stream, as a table by signed distance d = t − p.

    ``left.red[d−1]`` applies at t = p − d, ``right.red[d−1]`` at t = p + d, and p itself is
    redacted. Records farther than the horizons are released. A publisher must hold each record
    for ``left_horizon`` later records so that a mark at p still protects its left neighbours.
    """

    chain: MarkovChain
    epsilon: float
    design: str
    left: SidePlan
    right: SidePlan

    def leakage(self) -> Leakage:
        """Exact leakage about p of the table in an unbounded stationary stream.

        One released record beyond each horizon ends each side exactly (regions.py), so a window
        of H_ℓ + H_r + 3 records gives the infinite-stream value.
        """
        window = np.vstack([np.zeros((1, 2)), self.table(), np.zeros((1, 2))])
        return exact_leakage(self.chain, ChannelSequence.from_redaction(window), self.left_horizon + 1)

    def right_rows(self, budget: float) -> NDArray[np.float64]:
        """Right rows re-planned for a smaller ``budget`` (late marks), same design."""
        right = plan_side(SideModel(self.chain, 0, "right", None), budget, self.design)
        return right.red[: right.horizon]

    def apply(self, n: int, private: Sequence[int]) -> RedactionPlan:
        """The plan for records 0..n−1 with the table placed at each private index (element-wise
        max). Truncating a side at the stream's start only removes records, which is safe."""
        ps = _check_private(n, private)
        red = np.zeros((n, 2))
        regions = np.full(n, S, dtype=np.int8)
        for p in ps:
            place_side(red, regions, p, self.left, "left")
            place_side(red, regions, p, self.right, "right")
        splits = {p: (self.left.budget, self.right.budget) for p in ps}
        return finalize(self.chain, n, ps, self.epsilon, self.design, red, regions, splits)


def plan_stream(
    chain: MarkovChain,
    epsilon: float,
    *,
    design: str = "optimal",
    split: str | float = "even",
    threshold: float | str | None = None,
) -> StreamPlan:
    """3R plan by signed distance for an unbounded stream of a stationary binary chain."""
    eps = check_epsilon(epsilon)
    if not (chain.is_binary and chain.stationary):
        raise ValueError("stream plans need a stationary binary chain")
    left = SideModel(chain, 0, "left", None)
    right = SideModel(chain, 0, "right", None)
    lp, rp = plan_sides(left, right, eps, design, split, threshold)
    plan = StreamPlan(chain, eps, design, lp, rp)
    require_within(plan.leakage().total, eps)
    return plan
