"""The privatizer core: positions, release delay, private marks, late marks. Synchronous, no I/O.

Semantics (DESIGN.md §3), for one stream planned by a :class:`StreamPlan` (table by signed
distance t − p, left horizon H_ℓ, right horizon H_r):

- **Positions.** Accepted records get seq = 0, 1, 2, … in arrival order.
- **Release delay.** A record is decided (released or redacted, once, never re-drawn) when
  ``delay`` later records have arrived, or when it has been held ``max_hold`` seconds. The
  default delay is H_ℓ, so a mark at the newest record still protects its left neighbours.
- **Marks** (a record's flag, a command, a schedule) make position p private. Each undecided
  record t is redacted with probability max over marks of table[t − p] (notes/000 §4.5: the
  element-wise maximum is a post-processing of each mark alone).
- **Late marks.** If some of p's left neighbours were already decided, their actual redaction
  rows are used: the still-undecided left neighbours are fully redacted, the left leakage L_ℓ is
  computed exactly, and the right side is re-planned with the remaining budget ε − L_ℓ. If p itself
  was already released, or L_ℓ uses up ε, the mark is reported as *not honoured* — never hidden.
- **Achieved leakage.** Once every record of a mark's window is decided, the exact leakage of the
  redaction rows actually used is computed (records outside the window are treated as released,
  which can only over-state it) and reported with the mark.

The core only sees state indices; it never formats or logs a reading.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from ..audit.exact import Leakage, exact_leakage, side_range
from ..channel import ChannelSequence, redaction_tables, revealing
from ..redaction.plan import StreamPlan
from ..redaction.side import MIN_SIDE_BUDGET, SideModel, plan_side
from ..sampling import BitSource, apply_redaction, thresholds

MARK_SOURCES = ("flag", "command", "schedule")


@dataclass(frozen=True)
class Release:
    """The decision for one record: ``state`` is None when redacted. ``row`` is the redaction
    probabilities (Pr(⊥|0), Pr(⊥|1)) that were used — persisted with the decision."""

    seq: int
    ts: float
    state: int | None
    row: tuple[float, float]

    @property
    def redacted(self) -> bool:
        return self.state is None


@dataclass
class Mark:
    """A private position and what became of it."""

    seq: int
    source: str
    left: NDArray[np.float64]  # rows by distance 1..len, applied to undecided left neighbours
    right: NDArray[np.float64]  # rows by distance 1..len
    late: bool = False
    honoured: bool = True
    reason: str | None = None
    left_leakage: float | None = None  # late marks: exact leakage already incurred on the left
    right_budget: float | None = None
    achieved: Leakage | None = None

    @property
    def right_end(self) -> int:
        return self.seq + self.right.shape[0]

    def row_at(self, t: int) -> NDArray[np.float64] | None:
        d = t - self.seq
        if d == 0:
            return np.ones(2)
        if 0 < d <= self.right.shape[0]:
            return self.right[d - 1]
        if 0 < -d <= self.left.shape[0]:
            return self.left[-d - 1]
        return None

    def report(self) -> dict[str, object]:
        """JSON-ready summary (positions and leakages only; never a reading)."""
        return {
            "seq": self.seq,
            "source": self.source,
            "late": self.late,
            "honoured": self.honoured,
            "reason": self.reason,
            "left_leakage": _json_number(self.left_leakage),
            "right_budget": _json_number(self.right_budget),
            "achieved": None if self.achieved is None else {
                k: _json_number(v) for k, v in self.achieved.as_dict().items()},
        }


def _json_number(x: float | None) -> float | str | None:
    """JSON has no infinity: an unbounded leakage is reported as the string "inf"."""
    if x is None:
        return None
    return "inf" if math.isinf(x) else x


@dataclass
class _Pending:
    seq: int
    state: int
    ts: float
    arrived: float


@dataclass
class StreamPrivatizer:
    """Privatizes one stream record by record (see module docstring).

    ``source`` supplies the randomness (the OS CSPRNG in production). ``first_seq`` continues
    positions after a restart; ``decided`` restores the (seq → row) history of recent decisions.
    """

    plan: StreamPlan
    source: BitSource
    delay: int | None = None
    max_hold: float | None = None
    first_seq: int = 0
    decided: dict[int, tuple[float, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.delay is None:
            self.delay = self.plan.left_horizon
        if self.delay < 0:
            raise ValueError("the release delay must be ≥ 0 records")
        self.next_seq = self.first_seq
        self._pending: deque[_Pending] = deque()
        span = self.plan.left_horizon + self.plan.right_horizon + 1
        self._keep = 4 * span + self.delay + 64
        self._rows: OrderedDict[int, tuple[float, float]] = OrderedDict(sorted(self.decided.items()))
        self._marks: list[Mark] = []  # marks whose window is not yet fully decided
        self.finished: deque[Mark] = deque(maxlen=1000)  # most recent completed marks

    # -- intake -------------------------------------------------------------------------------
    def accept(self, state: int, ts: float, *, now: float, private: bool = False,
               source: str = "flag") -> tuple[int, list[Release]]:
        """Take one validated record; returns its seq and the records decided as a result."""
        seq = self.next_seq
        self.next_seq += 1
        self._pending.append(_Pending(seq, int(state), float(ts), float(now)))
        if private:
            self.mark(seq, source=source)
        due = [p for p in self._pending if p.seq + self.delay < self.next_seq]  # type: ignore[operator]
        return seq, self._decide(len(due))

    def expire(self, now: float) -> list[Release]:
        """Decide records held longer than ``max_hold`` seconds (their right marks may come late)."""
        if self.max_hold is None:
            return []
        count = 0
        for p in self._pending:
            if now - p.arrived >= self.max_hold:
                count += 1
            else:
                break
        return self._decide(count)

    def drain(self) -> list[Release]:
        """Decide every pending record now (shutdown)."""
        return self._decide(len(self._pending))

    @property
    def pending(self) -> int:
        return len(self._pending)

    # -- marks --------------------------------------------------------------------------------
    def mark(self, seq: int | None = None, *, source: str = "command") -> Mark:
        """Make position ``seq`` private (None = the newest record). Returns the mark, which says
        whether it is late and whether it can be honoured."""
        if source not in MARK_SOURCES:
            raise ValueError(f"unknown mark source {source!r}")
        if self.next_seq == self.first_seq and seq is None:
            raise ValueError("no record has been received yet")
        p = self.next_seq - 1 if seq is None else int(seq)
        if p >= self.next_seq:
            raise ValueError("a mark must name a record already received")
        for m in self._marks:
            if m.seq == p and m.honoured:
                return m  # already private; a second mark changes nothing
        oldest_pending = self._pending[0].seq if self._pending else self.next_seq
        H = self.plan.left_horizon
        if p >= oldest_pending and max(p - H, 0) >= oldest_pending:
            mark = Mark(p, source, self.plan.left.red[:H], self.plan.right.red[: self.plan.right_horizon])
        else:
            mark = self._late_mark(p, source, oldest_pending)
        self._marks.append(mark)
        return mark

    def _late_mark(self, p: int, source: str, oldest_pending: int) -> Mark:
        H = self.plan.left_horizon
        chain = self.plan.chain
        if p < oldest_pending:
            row = self._rows.get(p)
            if row is None or min(row) < 1.0:
                return Mark(p, source, np.zeros((0, 2)), self.plan.right.red[: self.plan.right_horizon],
                            late=True, honoured=False, reason="the record was already published",
                            achieved=Leakage(math.inf, math.inf, math.inf))
        # left rows outward: decided ones as used (unknown → released, conservative), pending → 1
        width = min(p, max(H, self._keep))
        left = np.ones((width, 2))
        for d in range(1, width + 1):
            t = p - d
            if t < oldest_pending:
                left[d - 1] = self._rows.get(t, (0.0, 0.0))
        cut = np.vstack([left, np.zeros((1, 2))])
        tables = redaction_tables(cut)
        kern = chain.reversed_kernel(chain.initial)[None]
        l_leak = side_range(kern, tables, np.arange(cut.shape[0]), revealing=revealing(tables)).leakage
        pending_left = np.ones((max(0, min(width, p - oldest_pending)), 2))
        budget = self.plan.epsilon - l_leak
        if budget < MIN_SIDE_BUDGET:
            return Mark(p, source, pending_left, self.plan.right.red[: self.plan.right_horizon], late=True,
                        honoured=False, reason="the published left neighbours already exhaust the budget",
                        left_leakage=l_leak, right_budget=0.0)
        right = plan_side(SideModel(chain, 0, "right", None), budget, self.plan.design)
        return Mark(p, source, pending_left, right.red[: right.horizon], late=True,
                    left_leakage=l_leak, right_budget=budget)

    # -- decisions ----------------------------------------------------------------------------
    def _row(self, t: int) -> NDArray[np.float64]:
        row = np.zeros(2)
        for m in self._marks:
            r = m.row_at(t)
            if r is not None:
                np.maximum(row, r, out=row)
        return row

    def _decide(self, count: int) -> list[Release]:
        if count == 0:
            return []
        batch = [self._pending.popleft() for _ in range(count)]
        rows = np.stack([self._row(p.seq) for p in batch])
        states = np.array([p.state for p in batch], dtype=np.int8)
        out = apply_redaction(states, thresholds(rows), np.arange(count), self.source)
        releases = []
        for p, row, y in zip(batch, rows, out):
            r = (float(row[0]), float(row[1]))
            self._rows[p.seq] = r
            releases.append(Release(p.seq, p.ts, None if y < 0 else int(y), r))
        while len(self._rows) > self._keep:
            self._rows.popitem(last=False)
        self._finish_marks()
        return releases

    def _finish_marks(self) -> None:
        decided_upto = self._pending[0].seq if self._pending else self.next_seq
        still = []
        for m in self._marks:
            if m.right_end >= decided_upto:
                still.append(m)
                continue
            if m.achieved is None:
                m.achieved = self._achieved(m)
            self.finished.append(m)
        self._marks = still

    def _achieved(self, m: Mark) -> Leakage:
        lo = max(0, m.seq - max(m.left.shape[0], self.plan.left_horizon))
        hi = m.right_end
        window = np.zeros((hi - lo + 3, 2))  # one released record beyond each end
        for t in range(lo, hi + 1):
            window[t - lo + 1] = self._rows.get(t, (0.0, 0.0))
        return exact_leakage(self.plan.chain, ChannelSequence.from_redaction(window), m.seq - lo + 1)

    def status(self) -> dict[str, object]:
        """Open and recently finished marks (JSON-ready)."""
        return {
            "next_seq": self.next_seq,
            "pending": len(self._pending),
            "delay": self.delay,
            "open_marks": [m.report() for m in self._marks],
            "finished_marks": [m.report() for m in self.finished],
        }
