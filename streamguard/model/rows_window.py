"""Certified figures of the daemon's marks over a k-state row-wise region (issue 24 item 4;
docs/model-sets.md §5; the binary twin is :mod:`.box_window`).

The privatizer reports, for every private mark, the leakage of the rows actually used around it —
on-time marks, late marks (some left neighbours already decided), marks near the stream's start
(any law of the first reading, or the stated ``initial``) and windows across a restart (an unknown
gap of G unseen readings, or a sensor that restarted too). Over a row-wise set S = S_1 × … × S_k
(:class:`~.krobust.RowBox`, a superset of the calibrated confidence region) this module gives a
**certified upper bound** of that figure over every chain of S. It takes the window's hypotheses
exactly as the binary box does (:class:`~.box_window.WindowCase`, built by the privatizer).

**Sides.** For one hypothesis and one ordered pair (a, b) the figure is L[a, b] + R[a, b]
(audit/kstate.py, audit/start.py); a bound of each side bounds the pair's total, and the figure is
the largest total.

- **Right**: :func:`.kinterval.right_bounds_steps` — events (first release at distance d with
  value x) propagated with kernels that may change from step to step inside a row-wise set per
  step (a superset of the members), exact LPs over box ∩ simplex, vertices of the normalised
  likelihood box (docs/model-sets.md §3b).
- **Left, release terms**: :func:`.kinterval.left_bounds_steps` bounds max over events of
  log v_j(x, a)/v_j(x, b) (forward from e_x at X_{p−j}). The left figure adds the *law factor*
  log sup (νQ)_b/(νQ)_a, ν the law of the first record (reaching windows) or of the released
  stand-in, νQ the law of X_p (audit/start.py).
- **Left, all redacted to the first record** (reaching windows): the ratio is
  (μW_a)(μQ_b)/((μW_b)(μQ_a)) ≤ sup_μ μW_a/μW_b · sup_μ μQ_b/μQ_a, and a ratio of two linear
  functions of μ is largest at a vertex: max_u W(u, a)/W(u, b) — the ratio of the event "release
  at distance m with value u", whose likelihood row is W(u, ·) up to the factor r_m(u) — plus the
  same law factor. So the left bound of a reaching window is the release bound with the first
  record's row set to 0 (every u an event) plus the law factor. A left side redacted surely back
  to the first record releases nothing and leaks nothing (0).

**Law of X_p.** It is νP^n for a law ν of the latest possible start and n ≥ D (D: the distance of
X_p from it; gaps only add steps). Two bounds, the smaller taken:

- *interval powers*: rows of P^n lie in an enclosure E_n (:func:`power_box`): E_1 = S, E_{j+1} =
  the LP range of S_s · E_j column by column (each row of P^{j+1} is a row of S times P^j), and for
  every n ≥ N at once the column hull of E_N (each row of P^n is a mixture of the rows of P^N);
  then νP^n ∈ conv(rows of E), or μ·E for a stated μ;
- *mixing*: Dobrushin's coefficient δ(P) = 1 − min_{u,u'} Σ_t min(P_ut, P_u't) ≤ δ̄ over S (the
  rows' lower bounds), so |νP^n − π|_t ≤ δ̄^n, and log (νP^n)_b/(νP^n)_a ≤ log sup π_b/π_a +
  log(1 + η/π_b) − log(1 − η/π_a) with η = δ̄^D and π's range over S (kinterval: tree theorem
  and stationary polytope). Each E_j is intersected with [π_lo − δ̄^j, π_hi + δ̄^j].

**Restart gaps.** A step across a gap uses the enclosure of P^{G+1} (G < EXPLICIT_GAPS one by one;
every larger gap, G = ∞ and a sensor that restarted too — kernels whose rows are a stationary law —
in the tail enclosure for n ≥ EXPLICIT_GAPS + 1), as :mod:`.box_window` does.

**Certificate.** Branch-and-bound over row-wise sub-sets (RowBox.split), as box_window.certify: the
sub-set with the largest bound is split until its bound is ≤ the caller's target, a single chain's
bound (at a sub-set's centre) exceeds the target, it is within ``REL_TOL`` of that, or after
``MAX_SETS`` sub-sets. Every stop is a valid bound: the figure is the largest over a partition of S.

**Rounding.** The propagated boxes are widened outward (kinterval.WIDEN per step); the power
enclosures, the law bounds and the mixing terms outward by ``ROUND`` (relative); each reported
figure is raised by ``ROUND`` · (1 + |figure|). The figure is never below the real-number value.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import NDArray

from ..support.jit import kernel
from ..audit.exact import Leakage
from .box_window import ONE, Kind, LeftCase, RightCase, WindowCase
from .kinterval import (_lp, law_ratio_bounds, left_bounds_steps, right_bounds, right_bounds_steps, stationary_vertices,
                        tree_weights)
from .krobust import CertifiedTable, RowBox, reversed_box

#: Outward relative rounding of the enclosures and of each reported figure (far above float error).
ROUND = 1e-12
#: Branch-and-bound: stop within this relative gap of a centre's bound, or after this many sub-sets.
REL_TOL = 1e-4
MAX_SETS = 64
#: Interval powers are iterated exactly up to this many steps; beyond it the column hull holds all.
POWER_STEPS = 64
#: A law whose drift from π (log-ratio terms) is at most this is bounded by the mixing term alone.
MIXED = 1e-3

Box2 = tuple[NDArray[np.float64], NDArray[np.float64]]


@kernel
def _power_step(blo, blh, lo_j, hi_j, eta, pi_lo, pi_hi, lo, hi):  # pragma: no cover - compiled
    """E_{j+1} from E_j = (lo_j, hi_j) into (lo, hi): entry (s, t) over [LP min of p·lo_j[:, t], LP max
    of p·hi_j[:, t]] for p in row s's set (kinterval._lp, exact), widened by ROUND, intersected with
    the mixing band [π_lo − η, π_hi + η]."""
    k = blo.shape[0]
    col = np.empty(k)
    for t in range(k):
        for s in range(k):
            for u in range(k):
                col[u] = lo_j[u, t]
            a = _lp(blo[s], blh[s], col, np.argsort(col), False) * (1.0 - ROUND)
            for u in range(k):
                col[u] = hi_j[u, t]
            b = _lp(blo[s], blh[s], col, np.argsort(col), True) * (1.0 + ROUND)
            a = max(a, pi_lo[t] - eta)
            b = min(b, pi_hi[t] + eta)
            lo[s, t] = min(max(a, 0.0), 1.0)
            hi[s, t] = min(max(b, a, 0.0), 1.0)


class _Region:
    """One (sub-)set's derived bounds: the stationary law's range, its ratios, Dobrushin's δ̄ and the
    power enclosures (cached per kind)."""

    def __init__(self, box: RowBox) -> None:
        self.box = box
        k = box.k
        vertices = stationary_vertices(box.lo, box.hi)
        #: law[a, b] ≥ log π_b/π_a over the set
        self.law = law_ratio_bounds(box.lo, box.hi, vertices)
        #: a row-wise set holding every member's time reversal (None: not bounded)
        self.reversed = reversed_box(box, self.law, vertices)
        t_lo, t_hi = tree_weights(box.lo) * (1 - ROUND), tree_weights(box.hi) * (1 + ROUND)
        with np.errstate(divide="ignore", invalid="ignore"):
            pi_lo = np.array([t_lo[t] / (t_lo[t] + t_hi.sum() - t_hi[t]) for t in range(k)])
            pi_hi = np.array([t_hi[t] / (t_hi[t] + t_lo.sum() - t_lo[t]) for t in range(k)])
        pi_lo, pi_hi = np.nan_to_num(pi_lo, nan=0.0), np.nan_to_num(pi_hi, nan=1.0)
        if vertices is not None:
            pts, slack = vertices
            pi_lo = np.maximum(pi_lo, pts.min(axis=0) * (1 - 2 * slack - ROUND))
            pi_hi = np.minimum(pi_hi, pts.max(axis=0) * (1 + 2 * slack + ROUND))
        self.pi_lo, self.pi_hi = np.clip(pi_lo, 0.0, 1.0), np.clip(pi_hi, 0.0, 1.0)
        overlap = min((float(np.minimum(box.lo[u], box.lo[v]).sum()) for u in range(k) for v in range(u + 1, k)),
                      default=1.0)
        #: δ̄ ≥ Dobrushin's coefficient of every member
        self.dobrushin = min(1.0, (1.0 - overlap) * (1 + ROUND) + ROUND)
        self._powers: list[Box2] = [(box.lo, box.hi)]  # E_1, E_2, …
        self._kinds: dict[Kind, Box2] = {}

    def _eta(self, n: int) -> float:
        return min(1.0, self.dobrushin ** n * (1 + ROUND))

    def _power(self, n: int) -> Box2:
        """E_n (module docstring), n ≤ POWER_STEPS."""
        k = self.box.k
        while len(self._powers) < n:
            lo, hi = np.empty((k, k)), np.empty((k, k))
            _power_step(self.box.lo, self.box.hi, *self._powers[-1], self._eta(len(self._powers) + 1),
                        self.pi_lo, self.pi_hi, lo, hi)
            self._powers.append((lo, hi))
        return self._powers[n - 1]

    def kernel(self, kind: Kind) -> Box2:
        """A row-wise enclosure of P^n for every n in ``kind`` = (n_lo, n_hi) (n_hi = inf: all n ≥ n_lo)."""
        got = self._kinds.get(kind)
        if got is not None:
            return got
        n_lo, n_hi = kind
        if kind == ONE:
            out = (self.box.lo, self.box.hi)
        elif n_lo == n_hi and n_lo <= POWER_STEPS:
            out = self._power(int(n_lo))
        else:  # every n ≥ N: the column hull of E_N, and the mixing band at N
            N = int(min(n_lo, POWER_STEPS))
            lo, hi = self._power(N)
            eta = self._eta(int(n_lo))
            clo = np.maximum(lo.min(axis=0), self.pi_lo - eta)
            chi = np.minimum(hi.max(axis=0), self.pi_hi + eta)
            out = (np.broadcast_to(np.clip(clo, 0.0, 1.0), (self.box.k, self.box.k)).copy(),
                   np.broadcast_to(np.clip(np.maximum(chi, clo), 0.0, 1.0), (self.box.k, self.box.k)).copy())
        tight = RowBox.of(*out)
        out = (tight.lo, tight.hi) if tight is not None else (np.zeros_like(out[0]), np.ones_like(out[1]))
        self._kinds[kind] = out
        return out

    def steps(self, kinds: Sequence[Kind]) -> Box2:
        """(steps, k, k) row-wise sets per step, as the ``*_steps`` kernels take them."""
        boxes = [self.kernel(kd) for kd in kinds] or [(self.box.lo, self.box.hi)]
        return (np.ascontiguousarray(np.stack([b[0] for b in boxes])),
                np.ascontiguousarray(np.stack([b[1] for b in boxes])))

    def drift(self, n: int) -> NDArray[np.float64]:
        """(k, k) bounds on log (νP^n)_b/(νP^n)_a − log π_b/π_a (entry [a, b]) over every law ν: the
        mixing term of the module docstring (+∞ when δ̄^n does not bound the law away from 0)."""
        k = self.box.k
        eta = self._eta(max(n, 1))
        out = np.zeros((k, k))
        for a in range(k):
            for b in range(k):
                if a != b:
                    out[a, b] = (math.log1p(eta / self.pi_lo[b]) - math.log1p(-eta / self.pi_lo[a])
                                 if eta < self.pi_lo[a] else math.inf) * (1 + ROUND) + ROUND
        return out

    def law_factor(self, n_lo: int, initial: NDArray[np.float64] | None) -> NDArray[np.float64]:
        """(k, k) bounds on log (νP^n)_b/(νP^n)_a (entry [a, b]) over every n ≥ n_lo and every law ν
        (or ν = ``initial``), the smaller of the interval-power and mixing bounds (the powers are not
        computed when the law has mixed to within ``MIXED`` of π: the mixing bound is then used alone)."""
        k = self.box.k
        mixing = self.law + self.drift(n_lo)
        off = ~np.eye(k, dtype=bool)
        if initial is None and bool(np.all(self.drift(n_lo)[off] <= MIXED)) and bool(np.all(np.isfinite(mixing[off]))):
            return mixing
        lo, hi = self.kernel((max(n_lo, 1), math.inf))
        if initial is not None:  # ν·E, coordinate by coordinate
            mu = np.asarray(initial, dtype=np.float64)
            lo, hi = (mu @ lo)[None, :] * (1 - ROUND), (mu @ hi)[None, :] * (1 + ROUND)
        out = np.zeros((k, k))
        for a in range(k):
            for b in range(k):
                if a != b:
                    with np.errstate(divide="ignore"):
                        power = float(np.max(np.log(hi[:, b]) - np.log(lo[:, a]))) * (1 + ROUND) + ROUND
                    out[a, b] = min(power, mixing[a, b])
        return out


def _left(reg: _Region, case: LeftCase) -> NDArray[np.float64]:
    """(k, k) bounds on L[a, b] for one hypothesis (module docstring)."""
    k = reg.box.k
    rows, m = case.rows, case.rows.shape[0]
    if case.reaches and (m == 0 or bool(np.all(rows == 1.0))):
        return np.zeros((k, k))  # nothing to the left, or a side that releases nothing
    rr = np.array(rows, dtype=np.float64)
    if case.reaches:
        rr[m - 1] = 0.0  # every value of the first record is an event: the all-redacted term (docstring)
    klo, khi = reg.steps(case.kinds)
    rel = left_bounds_steps(klo, khi, np.ascontiguousarray(rr), not case.reaches)
    n_lo = sum(int(kd[0]) for kd in case.kinds) + (0 if case.reaches else case.distance)
    initial = None if case.initial is None or not case.reaches else np.asarray(case.initial, dtype=np.float64)
    law = reg.law_factor(n_lo, initial)
    out = np.where(rel == -math.inf, -math.inf, rel + law)
    if not case.reaches and reg.reversed is not None and all(kd == ONE for kd in case.kinds):
        # the stationary chain read backwards, as a right side (krobust.windows_bound), plus the
        # drift of the stand-in's law from π (module docstring)
        rev = right_bounds(reg.reversed.lo, reg.reversed.hi, np.ascontiguousarray(np.vstack([rows, np.zeros((1, k))])),
                           False)
        out = np.minimum(out, np.where(rev == -math.inf, -math.inf, rev + reg.drift(n_lo)))
    return out


def _right(reg: _Region, case: RightCase) -> NDArray[np.float64]:
    k = reg.box.k
    if case.rows.shape[0] == 0:
        return np.zeros((k, k))
    klo, khi = reg.steps(case.kinds)
    return right_bounds_steps(klo, khi, np.ascontiguousarray(case.rows, dtype=np.float64), False)


def _up(v: float) -> float:
    return v + ROUND * (1.0 + abs(v)) if math.isfinite(v) else v


def _unbounded(box: RowBox) -> bool:
    """Does the set hold a chain that may never leave a state, or never reach one (no spanning tree
    into it: its stationary probability may be 0)? Its figures are then not bounded (fail closed)."""
    return box.never_left() is not None or bool(np.any(tree_weights(box.hi) <= 0.0))


def window_bound(box: RowBox, cases: Sequence[WindowCase]) -> Leakage:
    """The certified bound over one (sub-)set: the largest over the cases, per pair the sides added;
    unbounded (fail closed) when some member may never leave a state or never reach one."""
    if _unbounded(box):
        return Leakage(math.inf, math.inf, math.inf)
    reg = _Region(box)
    k = box.k
    off = ~np.eye(k, dtype=bool)
    total = left = right = 0.0
    for c in cases:
        L = _left(reg, c.left) if c.left is not None else np.zeros((k, k))
        R = _right(reg, c.right) if c.right is not None else np.zeros((k, k))
        with np.errstate(invalid="ignore"):
            tot = L + R
        tot = np.where(np.isnan(tot), math.inf, tot)  # +∞ on one side and −∞ (impossible) cannot meet
        total = max(total, float(tot[off].max()))
        left, right = max(left, float(L[off].max())), max(right, float(R[off].max()))
    return Leakage(_up(total), _up(left), _up(right))


def _point(box: RowBox) -> RowBox:
    c = box.centre()
    return RowBox(c, c.copy())


def _from_table(box: RowBox, cases: Sequence[WindowCase], table: CertifiedTable | None) -> float:
    """The table's certificate for the case plus the drift of the stand-in's law from π (module
    docstring: L under a law ν ≤ L under π + the drift, pair by pair); +∞ when it does not apply."""
    if table is None or len(cases) != 1 or not table.covers(cases[0]) or _unbounded(box):
        return math.inf
    left = cases[0].left
    assert left is not None
    n = len(left.kinds) + left.distance
    off = ~np.eye(box.k, dtype=bool)
    return _up(table.bound + float(_Region(box).drift(n)[off].max()))


def certify_rows(box: RowBox, cases: Sequence[WindowCase], *, key: str = "total", target: float | None = None,
                 give_up_above: float | None = None, rel_tol: float = REL_TOL,
                 max_boxes: int = MAX_SETS, table: CertifiedTable | None = None) -> Leakage:
    """Certified bound over the row-wise set ``box`` of the window's leakage (``key``: which figure
    the search tightens, "total" or "left"); branch-and-bound as box_window.certify. The returned
    figures are each the largest over the final partition. ``table``: the plan's certificate — a
    window it covers (:meth:`CertifiedTable.covers`) gets at most its bound plus the law's drift as
    the total, without a search when that meets the target."""
    shortcut = _from_table(box, cases, table) if key == "total" else math.inf
    if shortcut < math.inf and (target is None or shortcut <= target):
        lk = window_bound(box, cases)  # (the sides' own figures: one bound, no search)
        return Leakage(min(lk.total, shortcut), lk.left, lk.right)
    cap = target if give_up_above is None else give_up_above

    def val(lk: Leakage) -> float:
        return lk.total if key == "total" else lk.left

    first = window_bound(box, cases)
    heap = [(-val(first), 0, box, first)]
    best = val(window_bound(_point(box), cases))
    count = uid = 1
    while True:
        upper = -heap[0][0]
        if (target is not None and upper <= target) or (cap is not None and best > cap):
            break
        if upper <= best + rel_tol * max(1.0, abs(best)) or count >= max_boxes or not math.isfinite(best):
            break
        _, _, cur, _ = heapq.heappop(heap)
        for child in cur.split():
            lk = window_bound(child, cases)
            best = max(best, val(window_bound(_point(child), cases)))
            heapq.heappush(heap, (-val(lk), uid, child, lk))
            uid += 1
            count += 1
    return Leakage(min(shortcut, max(e[3].total for e in heap)), max(e[3].left for e in heap),
                   max(e[3].right for e in heap))


def left_worst(box: RowBox, left_rows: NDArray[np.float64],
               initial: NDArray[np.float64] | None) -> Callable[[int], float]:
    """p ↦ a certified bound over the whole set (one interval bound, no search) of the left figure
    of the plan's ``left_rows`` for a mark p records after a first record (any law, or ``initial``):
    what audit/start.py ``start_hold`` decides the records held at a stream's start with."""
    if _unbounded(box):
        return lambda p: math.inf
    reg = _Region(box)
    H = left_rows.shape[0]
    off = ~np.eye(box.k, dtype=bool)

    def worst(p: int) -> float:
        m = min(H, p)
        reaches = m == p
        case = LeftCase(np.ascontiguousarray(left_rows[:m], dtype=np.float64), (ONE,) * (m if reaches else m + 1),
                        reaches, None if initial is None or not reaches else tuple(float(v) for v in initial),
                        0 if reaches else p - m - 1)
        return _up(max(0.0, float(_left(reg, case)[off].max())))

    return worst
