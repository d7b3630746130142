"""Scenario plans: window plans per hour of the day that hold exactly under every chain the
calibration days showed (issue 25 items 1–3; docs/time-varying.md §7).

Why. The certified set-chain plans (:mod:`.tv_plan`) need every per-step set to bound leaving a
state away from 0; on real homes the confidence sets do not (a quiet night has no departure), and
every block is refused. Today's robust homogeneous plans hold on the held-out halves of the shared
traces with a margin of 100–300× (leakage 0.003–0.2 ε) and cost 9.7 h to 3.2 days per mark. This
module plans against a *finite scenario set* read off the calibration recording instead:

- **time of day**: the 24 hourly kernels (the step from a record uses the kernel of its local hour);
- **each calendar day** d of the recording: that day's kernel, held for the whole window;
- **pooled**: the kernel of the whole recording.

Every kernel is the Dirichlet-½ posterior mean of its counts, (n_ab + ½) / (n_a + k/2): never 0, so
every scenario forgets and every mark has a finite window.

The figure. For one fixed kernel sequence and a window [p − L, p + R] redacted surely (records at
p − L − 1 and p + R + 1 released, and what lies beyond them independent of X_p given them), the
leakage about the pair (a, b) is, with U = K_{p−L−1}⋯K_{p−1} and T = K_p⋯K_{p+R},

    left_ab(L)  = max_x g(x) − min_x g(x),   g(x) = log U(x, a) − log U(x, b)
    right_ab(R) = max_x log T(a, x) − log T(b, x)

and L(X_p → Y) = max over ordered pairs of left_ab + right_ab. The left term is the worst case over
every law of X_{p−L−1} (the ratio π_p(b)/π_p(a) of π_p = νU is largest at a vertex ν = e_x;
docs/initial-law.md's conservative reading): nothing is assumed about the chain before the window.
Both terms are exact for the sequence. A plan must also hold when another mark's window lengthens
this one (union of windows), so each term is replaced by its running maximum over longer sides; a
released record that another plan hides only garbles the output (data processing).

The design, per hour h of the local day: the smallest L + R (then the smallest max(L, R)) such that
for every scenario and every position of a mark in the hour (on a grid of ``step`` seconds from
local midnight, at most 60 positions) the figure is ≤ ε − ``SLACK``. Day and pooled scenarios do not
depend on the position. A mark at 03:00 and one at 18:00 get the windows of their hours.

What this is, said plainly: an exact guarantee under each scenario (the chains the calibration
data showed), not a confidence statement — a day unlike every calibration day is not covered, which
is what the per-block drift guard (:mod:`.block_drift`) watches. On the three shared traces the
plans hold under the chains fitted to the held-out halves (benchmarks/real_homes.py).
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from ..audit.kstate import _right_kernel
from ..audit.start import _all_redacted, _release_kernel
from .chain import ModelError

if TYPE_CHECKING:
    from .modelset import ModelSet

DAY, HOUR = 86400.0, 3600.0
#: Longest side searched, in records.
MAX_RECORDS = 2880
#: Kept below ε on every figure (float rounding of the kernel products).
SLACK = 1e-9
#: Most mark positions per hour tried for the time-of-day scenario.
MAX_POSITIONS = 60

Arr = NDArray[np.float64]


def smoothed(counts: NDArray[np.int64]) -> Arr:
    """Dirichlet-½ posterior mean of transition counts (..., k, k): never 0, rows sum to 1."""
    c = np.asarray(counts, dtype=np.float64) + 0.5
    return c / c.sum(axis=-1, keepdims=True)


@dataclass(frozen=True, eq=False)
class Scenarios:
    """Transition counts of a calibration recording: per local hour (24, k, k) and per local
    calendar day (D, k, k) (``days``: the day numbers, epoch days of the local clock)."""

    hourly: NDArray[np.int64]
    daily: NDArray[np.int64]
    days: tuple[int, ...]

    def __post_init__(self) -> None:
        h = np.asarray(self.hourly, dtype=np.int64)
        d = np.asarray(self.daily, dtype=np.int64).reshape(-1, *h.shape[1:])
        object.__setattr__(self, "hourly", h)
        object.__setattr__(self, "daily", d)
        object.__setattr__(self, "days", tuple(int(x) for x in self.days))
        if h.ndim != 3 or h.shape[0] != 24 or h.shape[1] != h.shape[2] or h.shape[1] < 2:
            raise ModelError("scenarios: hourly counts must be 24 × k × k")
        if np.any(h < 0) or np.any(d < 0) or d.shape[0] != len(self.days):
            raise ModelError("scenarios: counts must be ≥ 0, one k × k table per day")

    @property
    def k(self) -> int:
        return int(self.hourly.shape[1])

    @classmethod
    def from_transitions(cls, ts: NDArray[np.float64], src: NDArray[np.int64], dst: NDArray[np.int64], k: int,
                         utc_offset: float) -> "Scenarios":
        """Counts of the transitions src → dst whose source record is at epoch ``ts``."""
        local = np.asarray(ts, dtype=np.float64) + utc_offset
        hours = (np.mod(local, DAY) // HOUR).astype(np.int64)
        day = np.floor(local / DAY).astype(np.int64)
        hourly = np.zeros((24, k, k), dtype=np.int64)
        np.add.at(hourly, (hours, src, dst), 1)
        days, inv = np.unique(day, return_inverse=True)
        daily = np.zeros((days.size, k, k), dtype=np.int64)
        np.add.at(daily, (inv, src, dst), 1)
        return cls(hourly, daily, tuple(days.tolist()))

    def to_dict(self) -> dict[str, Any]:
        return {"hourly": self.hourly.tolist(), "daily": self.daily.tolist(), "days": list(self.days)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Scenarios":
        try:
            return cls(np.array(d["hourly"], dtype=np.int64), np.array(d["daily"], dtype=np.int64), tuple(d["days"]))
        except (KeyError, TypeError, ValueError) as e:
            raise ModelError(f"scenarios: malformed ({e.__class__.__name__})") from None

    def constant_kernels(self) -> list[tuple[str, Arr]]:
        """The scenarios whose kernel does not change over a window: each day's, and the pooled one."""
        out = [(f"day {dt_text(d)}", kern) for d, kern in zip(self.days, smoothed(self.daily))]
        return out + [("pooled", smoothed(self.hourly.sum(axis=0)))]


    def model_set(self, labels: tuple[str, ...] | None = None) -> "ModelSet":
        """The constant-kernel scenarios as a ``finite`` model set (point: the pooled chain): the
        daemon plans and accounts every mark over it (worst member exact, docs/model-sets.md)."""
        from .chain import MarkovChain
        from .modelset import ModelSet

        kerns = [MarkovChain(kern) for _, kern in self.constant_kernels()]
        return ModelSet(kind="finite", k=self.k, point=kerns[-1], members=tuple(kerns), labels=labels,
                        calibration={"scenarios": [name for name, _ in self.constant_kernels()]})


def dt_text(epoch_day: int) -> str:
    """An epoch day number as YYYY-MM-DD."""
    return (dt.date(1970, 1, 1) + dt.timedelta(days=int(epoch_day))).isoformat()


# ----------------------------------------------------------------------------------- the figure
def _pairs(k: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    a, b = np.nonzero(~np.eye(k, dtype=bool))
    return a, b


def side_terms(left_k: Arr, right_k: Arr) -> tuple[Arr, Arr]:
    """Exact one-side terms for positions m (module docstring), shaped (n_steps, M, n_pairs):
    ``left_k[m, j]`` is the kernel of the step from X_{p−j−1} (j = 0, 1, …), ``right_k[m, o]`` that
    of the step from X_{p+o}. Row L of the left result is left_ab(L), row R of the right right_ab(R)."""
    M, _, k, _ = left_k.shape
    a, b = _pairs(k)
    lft = np.empty((left_k.shape[1], M, a.size))
    rgt = np.empty((right_k.shape[1], M, a.size))
    U = np.broadcast_to(np.eye(k), (M, k, k)).copy()
    for w in range(left_k.shape[1]):
        U = np.einsum("mij,mjk->mik", left_k[:, w], U)   # X_{p−w−1} → X_p
        logU = np.log(U)
        g = logU[:, :, a] - logU[:, :, b]                  # (M, x, pair)
        lft[w] = g.max(axis=1) - g.min(axis=1)
    T = np.broadcast_to(np.eye(k), (M, k, k)).copy()
    for o in range(right_k.shape[1]):
        T = np.einsum("mij,mjk->mik", T, right_k[:, o])  # X_p → X_{p+o+1}
        logT = np.log(T)
        rgt[o] = (logT[:, a, :] - logT[:, b, :]).max(axis=2)
    return lft, rgt


def _envelope(x: Arr) -> Arr:
    """Running maximum over longer sides (axis 0 reversed)."""
    return np.maximum.accumulate(x[::-1], axis=0)[::-1]


def _shortest(terms: list[tuple[Arr, Arr]], epsilon: float, max_records: int) -> tuple[int, int] | None:
    """The (L, R) of the smallest L + R (then max(L, R)) with left(L) + right(R) ≤ ε − SLACK in every
    column (scenario, position, pair) of every term pair; None when none within ``max_records``."""
    need = np.zeros(max_records + 1, dtype=np.int64)
    for lft, rgt in terms:
        le = _envelope(lft).reshape(max_records + 1, -1)
        re = _envelope(rgt).reshape(max_records + 1, -1)
        for j in range(le.shape[1]):  # right envelope non-increasing: count the R that fail
            need = np.maximum(need, np.searchsorted(-re[:, j], -(epsilon - SLACK - le[:, j]), side="left"))
    ok = need <= max_records
    if not ok.any():
        return None
    L = np.arange(max_records + 1)
    score = np.where(ok, (L + need) * (max_records + 2) + np.maximum(L, need), np.iinfo(np.int64).max)
    best = int(np.argmin(score))
    return best, int(need[best])


def check_period(sample_period: float) -> None:
    """Refuse a sample period the time-of-day figures cannot cover at every clock position.

    Each step takes the kernel of its record's hour, so what changes with a mark's clock position
    is which record an hour boundary falls on. When the period divides an hour (3,600 = c·period),
    records at t_p + j·period, t_p = i·period + φ (0 ≤ φ < period), lie in the same hours for
    every phase φ as for φ = 0: the positions at the multiples of the period cover every
    alignment. At most MAX_POSITIONS of them an hour are evaluated (cost), so the period must be
    at least a minute: 60, 120, 300, 600, 900, 1,800 or 3,600 s, … (a shorter or non-dividing
    period would leave alignments unevaluated: tests/test_tod_clock_grid.py)."""
    if not (sample_period >= HOUR / MAX_POSITIONS and math.isclose(HOUR / sample_period, round(HOUR / sample_period),
                                                                    rel_tol=0.0, abs_tol=1e-9)):
        raise ModelError(f"the time-of-day scenario needs a sample period that divides an hour and is at least "
                         f"{HOUR / MAX_POSITIONS:g} s (60, 120, 300, 600, 900, 1800 or 3600 s, …), not "
                         f"{sample_period:g} s: resample the recording and the stream at such a period")


def _grid_step(sample_period: float) -> float:
    """Seconds between the mark positions tried for the time-of-day scenario: the sample period,
    which covers every alignment of the records with the hours (:func:`check_period`)."""
    check_period(sample_period)
    return float(sample_period)


def _window_hours(pos: Arr, n_left: int, n_right: int, sample_period: float
                  ) -> tuple[NDArray[np.int8], NDArray[np.int8]]:
    """The local hour of each step's source record around marks at clock ``pos`` (seconds after
    local midnight): ``left[m, j]`` for the step from X_{p−j−1} (j < n_left), ``right[m, o]`` for
    the step from X_{p+o} (o < n_right); a step uses the kernel of its source record's hour."""
    def at(offsets: NDArray[np.float64]) -> NDArray[np.int8]:
        return (np.mod(pos[:, None] + offsets[None, :] * sample_period, DAY) // HOUR).astype(np.int8)

    return at(-(np.arange(n_left) + 1.0)), at(np.arange(n_right, dtype=np.float64))


def _window_kernels(hourly: Arr, pos: Arr, n_left: int, n_right: int, sample_period: float) -> tuple[Arr, Arr]:
    """The kernels of :func:`_window_hours`: ``left[m, j]``, ``right[m, o]`` (k × k each)."""
    left, right = _window_hours(pos, n_left, n_right, sample_period)
    return hourly[left], hourly[right]


@dataclass(frozen=True)
class HourPlan:
    """The window of a mark in local hour ``hour``: redact ``left`` records before, ``right`` after."""

    hour: int
    left: int
    right: int
    sample_period: float

    @property
    def redacted(self) -> int:
        return self.left + self.right + 1

    def cost_text(self) -> str:
        from .tv_plan import duration

        return (f"a mark at {self.hour:02d}:00–{self.hour + 1:02d}:00 redacts {self.left} records "
                f"({duration(self.left * self.sample_period)}) before and {self.right} "
                f"({duration(self.right * self.sample_period)}) after")


def hour_plans(sc: Scenarios, sample_period: float, epsilon: float, *, max_records: int = MAX_RECORDS
               ) -> list[HourPlan | None]:
    """One window plan per local hour (module docstring); None for an hour with none."""
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError("epsilon must be a positive number")
    W1 = max_records + 1
    kerns = np.stack([kern for _, kern in sc.constant_kernels()])  # one position each
    seq = np.broadcast_to(kerns[:, None], (kerns.shape[0], W1, sc.k, sc.k))
    const = side_terms(seq, seq)
    hourly = smoothed(sc.hourly)
    out: list[HourPlan | None] = []
    for h in range(24):
        pos = h * HOUR + np.arange(0.0, HOUR, _grid_step(sample_period))
        tod = side_terms(*_window_kernels(hourly, pos, W1, W1, sample_period))
        best = _shortest([tod, const], epsilon, max_records)
        out.append(None if best is None else HourPlan(h, best[0], best[1], sample_period))
    return out


# ------------------------------------------------------------- the time-of-day scenario, any rows
def _extremes(cands: Arr) -> tuple[Arr, Arr]:
    """Of candidate vectors (M, C, 2), normalised, the ones with the smallest and the largest ratio v0/v1."""
    c = cands / cands.sum(axis=2, keepdims=True)
    with np.errstate(divide="ignore"):  # a one-hot start: its ratio is ±∞, as it should be
        lr = np.log(c[:, :, 0]) - np.log(c[:, :, 1])
    m = np.arange(cands.shape[0])
    return c[m, np.argmin(lr, axis=1)], c[m, np.argmax(lr, axis=1)]


def _ratio_range(left_k: Arr, right_k: Arr, left: Arr, right: Arr) -> tuple[Arr, Arr, Arr, Arr]:
    """Binary, per position m: the range over outputs of log Pr(y_left, X_p = 0)/Pr(y_left, X_p = 1)
    and of log Pr(y_right | X_p = 0)/Pr(y_right | X_p = 1), for rows outward ``left`` (j = 1..) and
    ``right`` (o = 1..), each side ended by a released record. Each output option maps the pair of
    extreme vectors monotonically (a ⊥ multiplies by the row and moves one step; a release restarts
    at the value), so propagating the two extremes is exact (the same recursion as the benchmark's
    independent evaluator, benchmarks/real_homes.py)."""
    M = left_k.shape[0]
    onehot = [np.tile(np.eye(2)[v], (M, 1)) for v in (0, 1)]
    lo, hi = _extremes(np.stack(onehot, axis=1))  # the released record at −(H + 1)
    H = left.shape[0]
    for j in range(H, 0, -1):  # forward: step from X_{p−j−1}, then record p − j
        Kin, r = left_k[:, j], left[j - 1]
        opts = [np.einsum("mi,mij->mj", f, Kin) * r[None, :] for f in (lo, hi)] if r.max() > 0 else []
        opts += [onehot[v] * (1.0 - r[v]) for v in (0, 1) if r[v] < 1.0]
        lo, hi = _extremes(np.stack(opts, axis=1))
    ends = np.stack([np.einsum("mi,mij->mj", f, left_k[:, 0]) for f in (lo, hi)], axis=1)
    llo, lhi = _extremes(ends)
    R = right.shape[0]
    end = right_k[:, R]  # backward from the released record at p + R + 1
    lo, hi = _extremes(np.stack([end[:, :, 0], end[:, :, 1]], axis=1))
    for o in range(R, 0, -1):
        Ko, r = right_k[:, o - 1], right[o - 1]
        opts = [np.einsum("mij,mj->mi", Ko, v * r[None, :]) for v in (lo, hi)] if r.max() > 0 else []
        opts += [Ko[:, :, v] * (1.0 - r[v]) for v in (0, 1) if r[v] < 1.0]
        lo, hi = _extremes(np.stack(opts, axis=1))
    lr = [np.log(v[:, 0]) - np.log(v[:, 1]) for v in (llo, lhi, lo, hi)]
    return lr[0], lr[1], lr[2], lr[3]


def tod_leakage(sc: Scenarios, sample_period: float, left: Arr, right: Arr) -> float:
    """The leakage about X_p of the rows ``left``/``right`` (outward, (n, 2); a side not ended by a
    released row gets one: that only adds information) under the time-of-day scenario, the worst
    over every mark position of the day on the grid of :func:`hour_plans` and over every law before
    the window: per ordered pair (a, b), max_y log Pr(y_left, a)/Pr(y_left, b) + max_x log U(x, b)/U(x, a)
    (U the kernels from the farthest left record to p: the prior odds' supremum, module docstring)
    + max_y log Pr(y_right | a)/Pr(y_right | b). Binary streams."""
    if sc.k != 2:
        raise ModelError("the time-of-day scenario check is for binary streams")
    stop = np.zeros((1, 2))
    left = left if left.shape[0] and not left[-1].any() else np.vstack([left, stop])
    right = right if right.shape[0] and not right[-1].any() else np.vstack([right, stop])
    hourly = smoothed(sc.hourly)
    left_h, right_h = day_hours(sample_period, left.shape[0], right.shape[0])
    return float(np.max(window_leakage(hourly[left_h], hourly[right_h], left, right)))


def day_hours(sample_period: float, n_left: int, n_right: int
              ) -> tuple[NDArray[np.int8], NDArray[np.int8]]:
    """The hours of :func:`_window_hours` for a mark at every position of the day on the grid of
    :func:`hour_plans` (M positions): the figures that take their maximum over these do not trust
    the wall clock."""
    return _window_hours(np.arange(0.0, DAY, _grid_step(sample_period)), n_left, n_right, sample_period)


def window_leakage(left_k: Arr, right_k: Arr, left: Arr, right: Arr) -> Arr:
    """Binary, per position m: the leakage about X_p of the rows ``left``/``right`` (outward, each
    ended by a released row, shapes (L + 1, 2) and (R + 1, 2)) under the kernel sequence
    ``left_k[m, j]`` (step from X_{p−j−1}, j = 0..L) and ``right_k[m, o]`` (step from X_{p+o},
    o = 0..R), over every law before the window (:func:`tod_leakage`)."""
    flo, fhi, blo, bhi = _ratio_range(left_k, right_k, left[:-1], right[:-1])
    U = np.broadcast_to(np.eye(2), (left_k.shape[0], 2, 2)).copy()
    for j in range(left.shape[0]):
        U = np.einsum("mij,mjk->mik", left_k[:, j], U)
    g = np.log(U[:, :, 0]) - np.log(U[:, :, 1])  # (M, x): log U(x, 0)/U(x, 1)
    ab = fhi - g.min(axis=1) + bhi  # pair (0, 1)
    ba = -flo + g.max(axis=1) - blo  # pair (1, 0)
    return np.maximum(ab, ba)


# ------------------------------------------ the time-of-day scenario at run time, any window shape
def left_pairs_at(hourly: Arr, hours: NDArray[np.int8], rows: Arr, laws: Arr, *, reaches: bool) -> Arr:
    """L[m, a, b] = max over left outputs of log Pr(y | X_p = a)/Pr(y | X_p = b), worst case over the
    laws in conv(``laws``), for the kernel sequence of each position m, ``hourly[hours[m, j − 1]]``
    stepping from X_{p−j} to X_{p−j+1}: audit/start.py's :func:`~streamguard.audit.start.left_pairs`
    (its derivation; ``hours`` (M, m) when the window reaches the first record X_{p−m}, whose law is
    in the set, else (M, m + 1) with the released stand-in p − m − 1 of a law in the set), its
    compiled release recursion run once per position (one position's kernels at a time). Every
    kernel must be positive (Dirichlet-½ means are): then every value is possible wherever a law
    can reach, every X_p has positive probability, and no ratio is 0/0.

    Release first at distance j with value x: log v_j(x, a)/v_j(x, b); plus the prior odds' sup,
    max_ν log (νQ)_b/(νQ)_a, Q the product from the first record (or the stand-in) to p. Reaching
    windows add the all-redacted output's sup over the laws (``_all_redacted``, exact for two states)."""
    (M, steps), k = hours.shape, hourly.shape[1]
    m = rows.shape[0]
    if steps != (m if reaches else m + 1):
        raise ValueError("left_pairs_at: one kernel per step from the first record (or the stand-in) to p")
    if not np.all(hourly > 0):
        raise ModelError("left_pairs_at: the time-of-day kernels must be positive")
    if steps == 0:
        return np.zeros((M, k, k))  # the mark is the first record: nothing on its left
    possible = np.ones((steps, k), dtype=bool)
    if reaches:
        possible[m - 1] = laws.max(axis=0) > 0  # a value no law gives is not an output of the first record
    rows = np.ascontiguousarray(rows, dtype=np.float64)
    out, v, q = np.empty((M, k, k)), np.empty((M, k, k)), np.empty((M, k, k))
    for i in range(M):
        _release_kernel(hourly[hours[i]], rows, possible, out[i], v[i], q[i])
    lq = np.log(np.einsum("lx,mxa->mla", laws, q))  # log (νQ)_a per vertex law ν (> 0: positive kernels)
    prior = (lq[:, :, None, :] - lq[:, :, :, None]).max(axis=1)  # [m, a, b]: max_ν log (νQ)_b/(νQ)_a
    off = ~np.eye(k, dtype=bool)[None]
    out = np.where(off & np.isfinite(out), out + prior, out)
    if reaches:
        W = rows[m - 1][None, :, None] * v
        for i in range(M):
            for a, b in zip(*np.nonzero(off[0])):
                out[i, a, b] = max(out[i, a, b], _all_redacted(W[i], q[i], laws, int(a), int(b)))
    return out


def right_pairs_at(hourly: Arr, hours: NDArray[np.int8], rows: Arr) -> Arr:
    """R[m, a, b] = max over right outputs of log Pr(y | X_p = a)/Pr(y | X_p = b) for the kernel
    sequence of each position m (``hourly[hours[m, d − 1]]`` steps from distance d − 1 to d; ``hours``
    (M, n) for ``rows`` (n, k) at distances 1..n): audit/kstate.py's ``right_pairs``, its compiled
    recursion run once per position. A side ended by a released record ends in a row of zeros."""
    (M, n), k = hours.shape, hourly.shape[1]
    if rows.shape != (n, k):
        raise ValueError("right_pairs_at: one kernel per record")
    if n == 0:
        return np.zeros((M, k, k))
    rows = np.ascontiguousarray(rows, dtype=np.float64)
    out = np.empty((M, k, k))
    for i in range(M):
        _right_kernel(hourly[hours[i]], rows, out[i])
    return out
