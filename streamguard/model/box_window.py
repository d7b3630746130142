"""Certified figures of the daemon's marks over a binary box of chains (issue 11; docs/model-sets.md §5).

The daemon's privatizer reports, for every private mark, the leakage of the rows actually used
around it — late marks (some left neighbours already decided), marks near the stream's start (any
law of the first reading, DESIGN.md §3) and windows across a restart (an unknown gap of G unseen
readings, or a sensor that restarted too). Over a box (α, β) ∈ [α_lo, α_hi] × [β_lo, β_hi] this
module gives a **certified upper bound** of that leakage over every chain of the box, by interval
propagation and branch-and-bound; it generalises :mod:`.interval` (stationary windows) to the
forward left side with a set of initial laws and to per-step kernels P^n.

**Quantities** (the privatizer's exact code, audit/start.py and audit/kstate.py, for two states).
Right of p, a release first at distance d with value x has likelihood ratio F_d(0, x)/F_d(1, x),
the column c = K_1 D_1 K_2 … D_{d−1} K_d e_x (D_j = diag(r_j), K_j the kernel of step j). Left of p
(forward), a release first at distance j with value x has ratio σ · κ, σ = v(x, 0)/v(x, 1) for the
row v = e_x K_j D_{j−1} K_{j−1} … D_1 K_1, and κ = sup over the laws μ of the first record (or the
released stand-in) of (μQ)_1/(μQ)_0 (or its inverse), Q the product of all left kernels. A window
that reaches the first record also has the output "all redacted", ratio Pr(⊥…⊥ | X_p = a)/
Pr(⊥…⊥ | X_p = b).

**Interval steps (the lemma).** Write a ratio as t = c_0/(c_0 + c_1) ∈ [0, 1]. One step maps

    forward (rows):    t' = (w_0 (1 − α) + w_1 β)/(w_0 + w_1),            w = (r_0 t, r_1 (1 − t)),
    backward (columns): t' = N/(N + M),  N = (1 − α) u_0 + α u_1,  M = β u_0 + (1 − β) u_1,  u = w.

For fixed t both are linear-fractional in (α, β) with a positive denominator, hence quasi-linear:
their extremes over a box of (α, β) are at its four corners. For a fixed kernel both are Möbius maps
of t with non-negative coefficients, hence monotone, so their extremes over an interval of t are at
its ends. So the image of [t_lo, t_hi] under *every* kernel of the box is exactly the hull of the
4 × 2 corner values; propagating hulls (and taking the hull with each distance's release seeds)
gives a set that contains every output's ratio for every sequence of kernels within the box —
a superset of the fixed-chain members, so every bound below is rigorous.

**Kernels P^n (restart gaps).** P^n = [[1 − π_1 h, π_1 h], [π_0 h, 1 − π_0 h]] with h = 1 − λ^n,
λ = 1 − α − β, π_1 = α/(α + β). Over a sub-box, π_1 ∈ [α_lo/(α_lo + β_hi), α_hi/(α_hi + β_lo)]
(monotone), likewise π_0, and λ^n over λ ∈ [λ_lo, λ_hi] by interval powers; for every n ≥ n_0 at
once (the tail of gaps, G = ∞ included) |λ^n| ≤ max|λ|^{n_0}. The step's kernel then lies in the
box α' ∈ [π_1lo h_lo, π_1hi h_hi], β' ∈ [π_0lo h_lo, π_0hi h_hi], to which the lemma applies. Gaps
G < ``EXPLICIT_GAPS`` are evaluated one by one, every larger gap by that one tail enclosure — so,
unlike the per-member code (which stops at a mixing horizon), *every* gap is covered.

**Laws.** Any law of the first record: t_Q starts at [0, 1]; a stated law μ: at μ_0. A released
stand-in at distance ≥ d after a start with any law has its law in conv(rows of P^d)
(audit/start.py): [0, 1] propagated through d box steps (in closed form when every kernel of the box
has λ ≥ 0, :func:`_law_interval`); stopping after ``LAW_STEPS`` steps only widens the set (the sets
are nested: S_{n+1} = F(S_n) ⊂ F(S_{n−1}) = S_n).

**All redacted to the first record.** With g(x, a) = Pr(all ⊥ | X_first = x, X_p = a),
Pr(all ⊥ | X_p = a) = Σ_x Pr(X_first = x | X_p = a) g(x, a) lies between min_x and max_x of g(·, a),
so the ratio is ≤ max_{x, x'} g(x, a)/g(x', b) (x, x' possible values of the first record), and
g(x, a)/g(x', b) = [g(x, a)/g(x, b)] · [g(x, b)/g(x', b)]: a row ratio of W = D_m v over the row
ratio of Q, times a column ratio of W over that of Q — each an interval propagation. A window
redacted surely to the first record gives 1 (nothing leaks; the privatizer's start fallback). A
first record that some possible value leaves never redacted while another may be (r_m(x) = 0 <
r_m(x')) gives +∞ here: such a mark fails closed.

**The certificate.** The bound of a sub-box is the largest over the window's cases (one per gap
hypothesis) of max(L_01 + R_01, L_10 + R_10). Branch-and-bound splits the sub-box with the largest
bound (robust._split); it stops when that bound is ≤ the caller's target (certified), when a
single chain's bound (at a sub-box's centre) is already above the target (out of reach), within
``REL_TOL`` of such a centre's bound (no further split can help much), or after ``MAX_BOXES``
sub-boxes (bounded work). Every stop is a valid bound; the rules only trade tightness for work. The figure returned is the largest bound over a
partition of the whole box: never below any member's leakage. When it exceeds ε the privatizer
fails closed (the mark is not honoured and the rest of its window is fully redacted). Floating
point is not rounded outward (as in :mod:`.interval`); the privatizer compares with ε·(1 + 1e−12).
"""

from __future__ import annotations

import heapq
import math
from functools import lru_cache
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ..audit.exact import Leakage

Box = tuple[tuple[float, float], tuple[float, float]]
#: A step's kernel is P^n for some n in [n_lo, n_hi] (n_hi = inf: every larger gap too).
Kind = tuple[int, float]
ONE: Kind = (1, 1)
#: Restart gaps evaluated one by one; every larger gap (and G = ∞) by one tail enclosure.
EXPLICIT_GAPS = 8
#: Box steps the law of a released stand-in is propagated from "any law" at most (nested sets: fewer
#: only widen; the propagation also stops at its fixed point).
LAW_STEPS = 4096
#: Branch-and-bound: stop within this relative gap of a centre's bound, or after this many sub-boxes.
REL_TOL = 1e-4
MAX_BOXES = 400

Interval = tuple[float, float]
KBox = tuple[float, float, float, float]  # α_lo, α_hi, β_lo, β_hi of one step's kernel


@dataclass(frozen=True)
class LeftCase:
    """The left side under one hypothesis: rows at distances 1..m, one kernel kind per step (m when
    the window reaches the first record, else m + 1: the last from the released stand-in)."""

    rows: NDArray[np.float64]
    kinds: tuple[Kind, ...]
    reaches: bool
    initial: tuple[float, ...] | None  # law of the first record when reaching (None: any; k entries)
    distance: int  # not reaching: the stand-in lies ≥ this many steps after a start with any law


@dataclass(frozen=True)
class RightCase:
    """The right side under one hypothesis: rows at distances 1..m (ending with a released stand-in)."""

    rows: NDArray[np.float64]
    kinds: tuple[Kind, ...]


@dataclass(frozen=True)
class WindowCase:
    left: LeftCase | None  # None: the left side is not needed (the right side alone)
    right: RightCase | None


def gap_kind(G: int | None) -> Kind:
    """The kernel across a restart gap of G unseen readings (P^{G+1}); None (G = ∞, or a sensor that
    restarted) and every G ≥ EXPLICIT_GAPS are in the tail enclosure."""
    if G is None or G >= EXPLICIT_GAPS:
        return (EXPLICIT_GAPS + 1, math.inf)
    return (G + 1, G + 1)


def _power_range(lo: float, hi: float, n_lo: int, n_hi: float) -> Interval:
    """Range of λ^n over λ ∈ [lo, hi] ⊂ [−1, 1] and integers n ∈ [n_lo, n_hi] (n_hi = inf: the limit 0 too)."""
    if n_lo == n_hi:
        n = n_lo
        a, b = lo**n, hi**n
        if n % 2 == 1 or lo >= 0:
            return a, b
        if hi <= 0:
            return b, a
        return 0.0, max(a, b)
    if lo >= 0:
        return 0.0, hi**n_lo
    big = max(abs(lo), abs(hi)) ** n_lo
    return -big, big


def kernel_box(box: Box, kind: Kind) -> KBox:
    """Enclosure (α', β') of the kernels P^n, n in ``kind``, over the chains of ``box`` (module docstring)."""
    (a0, a1), (b0, b1) = box
    if kind == ONE:
        return a0, a1, b0, b1
    if a0 + b1 <= 0 or a1 + b0 <= 0:
        return 0.0, 1.0, 0.0, 1.0  # a chain that never moves: anything (fails closed downstream)
    p1 = (a0 / (a0 + b1), a1 / (a1 + b0))
    p0 = (b0 / (b0 + a1), b1 / (b1 + a0))
    pw_lo, pw_hi = _power_range(1.0 - a1 - b1, 1.0 - a0 - b0, kind[0], kind[1])
    h_lo, h_hi = max(0.0, 1.0 - pw_hi), 1.0 - pw_lo
    return p1[0] * h_lo, min(1.0, p1[1] * h_hi), p0[0] * h_lo, min(1.0, p0[1] * h_hi)


def _ends(t: Interval, r: tuple[float, float]) -> list[float]:
    """The ends of ``t`` at which a step with row ``r`` must be evaluated ([] when no output passes):
    with r_0 = 0 only the 1-component passes and every t < 1 gives the same image (t = 0 stands in)."""
    r0, r1 = r
    if r0 <= 0.0 and r1 <= 0.0:
        return []
    if r0 <= 0.0:
        return [0.0] if t[0] < 1.0 else []
    if r1 <= 0.0:
        return [1.0] if t[1] > 0.0 else []
    return [t[0], t[1]] if t[0] != t[1] else [t[0]]


def forward(t: Interval, r: tuple[float, float], k: KBox) -> Interval | None:
    """Rows: the hull of t' = (w_0(1−α) + w_1 β)/(w_0 + w_1) over the box and t ∈ ``t`` (decreasing
    in α, increasing in β, monotone in t). None: no output passes."""
    ends = _ends(t, r)
    if not ends:
        return None
    a0, a1, b0, b1 = k
    lo, hi = math.inf, -math.inf
    for x in ends:
        w0, w1 = r[0] * x, r[1] * (1.0 - x)
        s = w0 + w1
        if s <= 0.0:
            continue
        hi = max(hi, (w0 * (1.0 - a0) + w1 * b1) / s)
        lo = min(lo, (w0 * (1.0 - a1) + w1 * b0) / s)
    return None if lo > hi else (max(0.0, lo), min(1.0, hi))


def backward(t: Interval, r: tuple[float, float], k: KBox) -> Interval | None:
    """Columns: the hull of t' = N/(N + M) over the box's corners and the ends of ``t`` (lemma)."""
    ends = _ends(t, r)
    if not ends:
        return None
    a0, a1, b0, b1 = k
    lo, hi = math.inf, -math.inf
    for x in ends:
        u0, u1 = r[0] * x, r[1] * (1.0 - x)
        for a in (a0, a1):
            n = (1.0 - a) * u0 + a * u1
            for b in (b0, b1):
                s = n + b * u0 + (1.0 - b) * u1
                if s > 0.0:
                    v = n / s
                    lo, hi = min(lo, v), max(hi, v)
    return None if lo > hi else (max(0.0, lo), min(1.0, hi))


def _hull(a: Interval | None, b: Interval | None) -> Interval | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a[0], b[0]), max(a[1], b[1])


def _logit(t: float) -> float:
    """log(t/(1 − t)) with the infinite ends."""
    if t <= 0.0:
        return -math.inf
    if t >= 1.0:
        return math.inf
    return math.log(t) - math.log1p(-t)


def _add(*xs: float) -> float:
    """A sum of log terms where +∞ wins (an impossible output on one side cannot rescue an unbounded one)."""
    return math.inf if any(x == math.inf for x in xs) else sum(xs)


def _row(rows: NDArray[np.float64], i: int) -> tuple[float, float]:
    return float(rows[i, 0]), float(rows[i, 1])


_ONES = (1.0, 1.0)
_SEED = {0: (1.0, 1.0), 1: (0.0, 0.0)}  # t of e_x


def right_bound(box: Box, case: RightCase) -> tuple[float, float]:
    """(R_01, R_10): bounds on max log Pr(y | X_p = a)/Pr(y | X_p = b) over the right outputs."""
    rows, m = case.rows, case.rows.shape[0]
    if m == 0:
        return 0.0, 0.0
    kb = [kernel_box(box, kd) for kd in case.kinds]
    S: Interval | None = None
    for d in range(m, 0, -1):
        r = _row(rows, d - 1)
        if S is not None:
            S = backward(S, r, kb[d - 1])
        if d == m and (r[0] > 0 or r[1] > 0):  # all redacted to the end: K_m r_m
            S = _hull(S, backward((0.5, 0.5), r, kb[d - 1]))
        for x in (0, 1):
            if r[x] < 1.0:
                S = _hull(S, backward(_SEED[x], _ONES, kb[d - 1]))
    if S is None:
        return -math.inf, -math.inf
    return _logit(S[1]), -_logit(S[0])


def _propagate_rows(t: Interval | None, rows: Sequence[tuple[float, float]], kb: Sequence[KBox]) -> Interval | None:
    """Forward through (D_j K_j) for the given (row, kernel) pairs in order."""
    for r, k in zip(rows, kb):
        if t is None:
            return None
        t = forward(t, r, k)
    return t


@lru_cache(maxsize=1024)
def _law_interval(box: Box, d: int) -> Interval:
    """t of the law of a record ≥ d box steps after a start with any law: [0, 1] through d forward
    steps (the sets are nested, so the interval only shrinks). When both extreme corner maps are
    increasing in t (1 − α_lo − β_hi ≥ 0 and 1 − α_hi − β_lo ≥ 0: every kernel of the box has
    λ ≥ 0) the upper end follows t ← β_hi + (1 − α_lo − β_hi) t and the lower end
    t ← β_lo + (1 − α_hi − β_lo) t, so d steps have the closed form π* + (t_0 − π*) c^d; otherwise
    the steps are iterated (at most LAW_STEPS, stopping at the fixed point)."""
    (a0, a1), (b0, b1) = box
    c_hi, c_lo = 1.0 - a0 - b1, 1.0 - a1 - b0
    if c_hi >= 0.0 and c_lo >= 0.0 and a0 + b1 > 0.0 and a1 + b0 > 0.0:
        p_hi, p_lo = b1 / (a0 + b1), b0 / (a1 + b0)
        return max(0.0, p_lo * (1.0 - c_lo**d)), min(1.0, p_hi + (1.0 - p_hi) * c_hi**d)
    t: Interval = (0.0, 1.0)
    k = kernel_box(box, ONE)
    for _ in range(min(d, LAW_STEPS)):
        nxt = forward(t, _ONES, k)
        assert nxt is not None
        if nxt == t:
            break
        t = nxt
    return t


def left_bound(box: Box, case: LeftCase) -> tuple[float, float]:
    """(L_01, L_10): bounds on max log Pr(y_left | X_p = a)/Pr(y_left | X_p = b) (module docstring)."""
    rows, m = case.rows, case.rows.shape[0]
    steps = len(case.kinds)
    if case.reaches and m == 0:
        return 0.0, 0.0
    kb = [kernel_box(box, kd) for kd in case.kinds]
    first = (True, True)
    if case.reaches and case.initial is not None:
        first = (case.initial[0] > 0, case.initial[1] > 0)
    # release terms: the hull of σ over outputs that release first at some distance
    S: Interval | None = None
    for j in range(steps, 0, -1):
        if S is not None:
            S = forward(S, _row(rows, j - 1), kb[j - 1])
        for x in (0, 1):
            can = j > m or rows[j - 1, x] < 1.0
            if j == steps and not first[x]:
                can = False
            if can:
                S = _hull(S, forward(_SEED[x], _ONES, kb[j - 1]))
    # the law factor: t of μQ over the laws of the first record / stand-in
    if case.reaches and case.initial is not None:
        tq: Interval | None = (case.initial[0], case.initial[0])
    else:
        tq = (0.0, 1.0)
        if not case.reaches:
            tq = _law_interval(box, case.distance)
    tq = _propagate_rows(tq, [_ONES] * steps, kb[::-1])
    assert tq is not None  # rows of ones always pass
    if S is None:
        rel01 = rel10 = -math.inf
    else:
        rel01 = _add(_logit(S[1]), -_logit(tq[0]))
        rel10 = _add(-_logit(S[0]), _logit(tq[1]))
    if not case.reaches:
        return rel01, rel10
    red01, red10 = _all_redacted(rows, kb, first)
    return max(rel01, red01), max(rel10, red10)


def _all_redacted(rows: NDArray[np.float64], kb: Sequence[KBox], first: tuple[bool, bool]) -> tuple[float, float]:
    """Bounds on log Pr(all ⊥ | X_p = a)/Pr(all ⊥ | X_p = b) for a window reaching the first record
    (module docstring: max over possible first values x, x' of g(x, a)/g(x', b))."""
    m = rows.shape[0]
    rm = _row(rows, m - 1)
    xs = [x for x in (0, 1) if first[x]]
    if all(rm[x] <= 0.0 for x in xs):
        return -math.inf, -math.inf  # the output is impossible
    if any(rm[x] <= 0.0 for x in xs):
        return math.inf, math.inf  # a mixture with g = 0: not bounded here (fails closed)
    if np.all(rows == 1.0):
        return 0.0, 0.0  # redacted surely to the first record: the output says nothing
    if np.any(np.all(rows <= 0.0, axis=1)):
        return -math.inf, -math.inf  # a record released surely: the output is impossible
    inner = [_row(rows, j) for j in range(m - 2, -1, -1)]  # rows r_{m−1} … r_1 (forward order)
    lg: dict[tuple[int, int, int], float] = {}  # (x, a, b) → bound of log g(x, a)/g(x, b)
    for x in xs:
        if np.all(rows[: m - 1] == 1.0):
            lg[(x, 0, 1)] = lg[(x, 1, 0)] = 0.0  # g(x, ·) = r_m(x): independent of X_p
            continue
        seed = forward(_SEED[x], _ONES, kb[m - 1])
        w = _propagate_rows(seed, inner, kb[m - 2 :: -1] if m >= 2 else [])
        q = _propagate_rows(seed, [_ONES] * (m - 1), kb[m - 2 :: -1] if m >= 2 else [])
        if w is None or q is None:
            return math.inf, math.inf
        lg[(x, 0, 1)] = _add(_logit(w[1]), -_logit(q[0]))
        lg[(x, 1, 0)] = _add(-_logit(w[0]), _logit(q[1]))
    lc: dict[tuple[int, int, int], float] = {}  # (b, x, x') → bound of log g(x, b)/g(x', b)
    if len(xs) == 2:
        for b in (0, 1):
            cw: Interval | None = backward(_SEED[b], _ONES, kb[0])
            cq: Interval | None = cw
            for j in range(1, m):
                cw = None if cw is None else backward(cw, _row(rows, j - 1), kb[j])
                cq = None if cq is None else backward(cq, _ONES, kb[j])
            if cw is None or cq is None:
                return math.inf, math.inf
            r0, r1 = rm  # the first record's own row: t ← r_0 t/(r_0 t + r_1 (1 − t)), monotone
            tw = tuple(r0 * v / (r0 * v + r1 * (1.0 - v)) for v in cw)
            lc[(b, 0, 1)] = _add(_logit(tw[1]), -_logit(cq[0]))
            lc[(b, 1, 0)] = _add(-_logit(tw[0]), _logit(cq[1]))
    out = []
    for a, b in ((0, 1), (1, 0)):
        out.append(max(_add(lg[(x, a, b)], 0.0 if x == y else lc[(b, x, y)]) for x in xs for y in xs))
    return out[0], out[1]


def window_bound(box: Box, cases: Sequence[WindowCase]) -> Leakage:
    """The bound over one (sub-)box: the largest over the cases, per pair the two sides added."""
    total = left = right = -math.inf
    for c in cases:
        l01, l10 = left_bound(box, c.left) if c.left is not None else (0.0, 0.0)
        r01, r10 = right_bound(box, c.right) if c.right is not None else (0.0, 0.0)
        total = max(total, _add(l01, r01), _add(l10, r10))
        left, right = max(left, l01, l10), max(right, r01, r10)
    return Leakage(max(total, 0.0), max(left, 0.0), max(right, 0.0))


def _point(box: Box) -> Box:
    from .robust import _centre

    a, b = _centre(box)
    return (a, a), (b, b)


def certify(box: Box, cases: Sequence[WindowCase], *, key: str = "total", target: float | None = None,
            give_up_above: float | None = None, rel_tol: float = REL_TOL, max_boxes: int = MAX_BOXES) -> Leakage:
    """Certified bound over ``box`` of the window's leakage (``key``: which figure the search
    tightens — "total" or "left"); branch-and-bound as in the module docstring (``give_up_above``: stop
    tightening once a single chain's bound exceeds it, as for ``target``, without stopping at a
    certified target). The returned figures are each the largest over the final partition."""
    cap = target if give_up_above is None else give_up_above
    from .robust import _split

    def val(lk: Leakage) -> float:
        return lk.total if key == "total" else lk.left

    first = window_bound(box, cases)
    heap = [(-val(first), 0, box, first)]
    best = val(window_bound(_point(box), cases))
    count = uid = 1
    while True:
        upper = -heap[0][0]
        if (target is not None and upper <= target) or (cap is not None and best > cap):
            break  # certified, or (a single chain's bound is already above it) out of reach
        if upper <= best + rel_tol * max(1.0, abs(best)) or count >= max_boxes:
            break
        if not math.isfinite(best):
            break  # a member with an unbounded figure: nothing to tighten
        _, _, cur, _ = heapq.heappop(heap)
        for child in _split(cur):
            lk = window_bound(child, cases)
            best = max(best, val(window_bound(_point(child), cases)))
            heapq.heappush(heap, (-val(lk), uid, child, lk))
            uid += 1
            count += 1
    return Leakage(max(e[3].total for e in heap), max(e[3].left for e in heap), max(e[3].right for e in heap))
