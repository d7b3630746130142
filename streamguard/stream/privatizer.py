"""The privatizer core: positions, release delay, private marks, late marks. Synchronous, no I/O.

Semantics (DESIGN.md §3), for one stream planned by a :class:`StreamPlan` (table by signed
distance, left horizon H_ℓ, right horizon H_r):

- **Positions.** Accepted records get ``seq`` = 0, 1, 2, … in arrival order (published).
  Privacy arithmetic uses the *physical* index of each frame instead: a rejected frame
  (:meth:`StreamPrivatizer.skip`) occupies a physical step of the chain but no ``seq``, and is
  treated as a record redacted with probability 1 — an element-wise larger redaction, hence a
  post-processing of the plan (notes/000 §4.5), so every guarantee still holds.
- **Release delay.** A record is decided (released or redacted, once, never re-drawn) when the
  newest frame is more than ``delay`` positions after it, or when it has been held ``max_hold``
  seconds. The default delay is H_ℓ, so a mark on the newest record — by its flag or by a
  ``"now"`` command before the next frame — still finds its left neighbours undecided. At the
  start of a stream and after a restart the records before position S − 1 from the first record
  (S: the *start hold*, audit/start.py ``start_hold``) are decided only with that record, so an
  on-time mark at p < S still finds every record back to the first one undecided.
- **Marks** (a record's flag, a command, a schedule) make a position p private. Each undecided
  record t is redacted with probability max over marks of table[t − p] (element-wise maximum).
- **Late marks.** If some of p's left neighbours were already decided, their actual redaction
  rows are used: the undecided left neighbours are fully redacted, the left leakage L_ℓ is
  computed exactly, and the right side keeps the plan's rows if the exact figure of the whole
  window stays within ε, else is re-planned with the remaining budget ε − L_ℓ — under a finite
  model set, whose other members (and a set-chain's time-of-day scenario) may take a side above
  its design budget, for ever smaller budgets until the exact figure is within ε (``_fit_right``).
  If p itself was already released, or L_ℓ uses up ε, the mark is reported as *not honoured* —
  never hidden.
- **The first record.** Its law is unknown (docs/initial-law.md); the first record after a restart
  counts as one too. An on-time mark whose left records are undecided back to the first record
  redacts them all when the plan's rows would exceed the left budget for some law (the window
  reaches that record, p − first ≤ H_ℓ) or leave the right side less than MIN_SIDE_BUDGET (it does
  not), or when no right side brings the exact figure within ε: a side that releases nothing leaks
  nothing, whatever the law.
- **Achieved leakage.** Once every record of a mark's window is decided, the exact leakage of the
  rows actually used is computed (records outside the window are treated as released, which only
  over-states it) and reported with the mark.
- **Restarts.** After a restart an unknown number G ≥ 0 of readings separates the last decided
  record from the first new one (lost pending records, downtime). Leakage is not monotone in G
  (for λ < 0 the sign of the correlation alternates with distance), so every window that spans
  the restart is evaluated exactly for every G up to the mixing horizon and for G = ∞ (one step
  with kernel P^(G+1)), and the worst case is reported. Marks whose right side was open at the
  crash fully redact the rest of their window. Earlier restarts (``restarts``, kept by the owner)
  count as well: each side takes its nearest one's hypotheses, and a further one inside the window
  cuts it at a released stand-in (docs/initial-law.md, "Several restarts").

The core only sees state indices; it never formats or logs a reading.
"""

from __future__ import annotations

import itertools
import math
from bisect import bisect_right
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from ..support.json_numbers import json_number
from ..audit.exact import Leakage
from ..audit.kstate import combine, right_pairs
from ..audit.start import exceeds_left_budget, laws_at_distance, left_pairs, start_hold
from ..model.chain import MarkovChain
from ..model.box_window import EXPLICIT_GAPS, MAX_BOXES, LeftCase, RightCase, WindowCase, certify, gap_kind
from ..model.krobust import CertifiedTable, RowBox
from ..model.rows_window import MAX_SETS, certify_rows, left_worst
from ..model.scenarios import Scenarios, day_hours, left_pairs_at, right_pairs_at, smoothed
from ..redaction.kplan import KStreamPlan
from ..redaction.plan import StreamPlan
from ..redaction.side import MIN_SIDE_BUDGET
from ..sampling import REDACTED, BitSource, apply_redaction, thresholds

#: "unvouched": a step whose privacy button the daemon could not hear, decided as private (stream/vouch.py).
#: "mode": a step made while the stream's privacy mode is on (stream/privacy_mode.py).
MARK_SOURCES = ("flag", "command", "schedule", "unvouched", "mode")
#: Sources of private steps that come in bursts and coalesce into runs (with the steps that have no
#: seq: rejected frames, missing readings), see :func:`coalesces`. Only a command stays a mark of
#: its own (it names any seq, one at a time).
RUN_SOURCES = ("flag", "schedule", "unvouched", "mode")
#: A right side re-planned for what a mark's left side leaves of ε is designed under the plan's own
#: chain; while a model set's other members still take the figure above ε, it is re-planned for a
#: budget this much smaller, at most RIGHT_TRIES times (StreamPrivatizer._fit_right).
RIGHT_SHRINK = 0.7
RIGHT_TRIES = 16
#: Largest restart gap evaluated explicitly; beyond it G = ∞ (stationary rows) stands in.
MAX_GAP = 4096
#: Sub-boxes the left side of a late mark is tightened with over a box (it sets the right budget; a
#: looser bound only redacts more on the right).
LATE_LEFT_BOXES = 100


def mixing_gap(chain: MarkovChain) -> int:
    """The largest restart gap worth evaluating: G with ρ^G ≤ 1e-17, ρ = |λ| for a binary chain and
    the second largest eigenvalue modulus for k states (P^(G+1) − 1π shrinks like ρ^G), capped at
    MAX_GAP; beyond it G = ∞ stands in."""
    if chain.is_binary:
        rho = abs(chain.lam)
    else:
        rho = float(np.sort(np.abs(np.linalg.eigvals(chain.matrix)))[-2])
    if rho >= 1.0:
        return MAX_GAP
    return 0 if rho == 0 else min(MAX_GAP, math.ceil(math.log(1e-17) / math.log(rho)))


def coalesces(seq: int | None, source: str) -> bool:
    """Does a private step join the run ending right before it (:meth:`StreamPrivatizer._extend`)?
    Steps without a seq (a rejected frame, a missing reading), flagged records, schedule-window,
    unvouched and privacy-mode steps do: they come in bursts (10⁵ malformed frames, a night's
    schedule window, a sensor flagging every frame, an outage, an evening in privacy mode). A
    command stays a mark of its own. The run's accounting does not depend on its steps' sources."""
    return seq is None or source in RUN_SOURCES


class Release(NamedTuple):
    """The decision for one accepted record: ``state`` is None when redacted. ``row`` is the
    redaction probabilities (Pr(⊥|0), …, Pr(⊥|k−1)) that were used. (A named tuple: one is made
    per record.)"""

    seq: int
    phys: int
    ts: float
    state: int | None
    row: tuple[float, ...]

    @property
    def redacted(self) -> bool:
        return self.state is None


@dataclass
class Mark:
    """A private position (physical index ``phys``, published ``seq`` — None for a rejected frame
    that asked to be private) and what became of it."""

    seq: int | None
    phys: int
    source: str
    left: NDArray[np.float64]  # rows by distance 1..len, applied to undecided left neighbours
    right: NDArray[np.float64]  # rows by distance 1..len
    late: bool = False
    honoured: bool = True
    reason: str | None = None
    left_leakage: float | None = None  # late marks: exact leakage already incurred on the left
    right_budget: float | None = None
    achieved: Leakage | None = None
    #: How far left the exact computations look (records beyond count as released).
    left_reach: int = 0
    #: The frame's timestamp (None: a frame whose timestamp could not be read).
    ts: float | None = None
    #: A run's last position (None: the mark is the single position ``phys``). A run of consecutive
    #: private steps taken one after another (rejected frames, flagged, schedule, unvouched and
    #: privacy-mode steps: :func:`coalesces`) is one mark: every position phys..through is redacted
    #: surely, ``left`` is applied outward from ``phys`` and ``right`` outward from ``through``
    #: (StreamPrivatizer._extend).
    through: int | None = None
    #: A run's left figure once every row left of ``phys`` is decided (exact and final then; kept
    #: because a long run outlives the core's memory of those rows).
    run_left: float | None = None
    #: The figure reported now: the exact leakage of the rows used plus the rows committed for the
    #: window's undecided records (worst case over initial laws and restart gaps). Every record's
    #: final row is at least its committed row, so this never under-states; once the window is
    #: decided it is the exact ``achieved`` leakage.
    leakage: Leakage | None = None

    @property
    def last(self) -> int:
        """The last private position of the mark (``phys`` unless it is a run)."""
        return self.phys if self.through is None else self.through

    @property
    def right_end(self) -> int:
        return self.last + self.right.shape[0]

    def row_at(self, t: int) -> NDArray[np.float64] | None:
        if self.phys <= t <= self.last:
            return np.ones(self.right.shape[1])
        if 0 < t - self.last <= self.right.shape[0]:
            return self.right[t - self.last - 1]
        if 0 < self.phys - t <= self.left.shape[0]:
            return self.left[self.phys - t - 1]
        return None

    def report(self) -> dict[str, Any]:
        """JSON-ready summary (positions and leakages only; never a reading)."""
        return {
            "seq": self.seq,
            "position": self.phys if self.phys >= 0 else None,
            "ts": self.ts,
            "source": self.source,
            "late": self.late,
            "honoured": self.honoured,
            "reason": self.reason,
            "left_leakage": json_number(self.left_leakage),
            "right_budget": json_number(self.right_budget),
            "leakage": _leakage_json(self.leakage),
            "achieved": _leakage_json(self.achieved),
            **({} if self.through is None else {"last": self.through}),
        }

    def state(self) -> dict[str, Any]:
        """What a restart needs to keep protecting an open mark (see :meth:`from_state`)."""
        return {"seq": self.seq, "phys": self.phys, "source": self.source, "late": self.late,
                "honoured": self.honoured, "reason": self.reason, "left_leakage": self.left_leakage,
                "right_budget": self.right_budget, "right_len": int(self.right.shape[0]),
                "left_reach": self.left_reach, "ts": self.ts, **({} if self.through is None else {"through": self.through, "run_left": self.run_left})}

    @classmethod
    def from_state(cls, s: dict[str, Any], k: int = 2) -> Mark:
        """Restore an open mark of a k-state stream after a restart: the rest of its right window
        is fully redacted."""
        return cls(None if s["seq"] is None else int(s["seq"]), int(s["phys"]), str(s["source"]), np.zeros((0, k)),
                   np.ones((int(s["right_len"]), k)), late=bool(s["late"]), honoured=bool(s["honoured"]),
                   reason=s["reason"], left_leakage=s["left_leakage"], right_budget=s["right_budget"],
                   left_reach=int(s["left_reach"]), ts=s.get("ts"),
                   through=None if s.get("through") is None else int(s["through"]),
                   run_left=None if s.get("run_left") is None else float(s["run_left"]))


def _leakage_json(v: Leakage | None) -> dict[str, Any] | None:
    return None if v is None else {k: json_number(x) for k, x in v.as_dict().items()}


#: A mark on a record whose reading was released: nothing can protect it any more.
UNBOUNDED = Leakage(math.inf, math.inf, math.inf)


#: Powers P^n of each chain, shared by every stream of that chain (up to MAX_GAP + 2 matrices a
#: chain: a mark after a restart of a sticky chain needs ~2,000; 1,000 streams no longer keep
#: 1,000 copies), for the _POWER_CHAINS chains used last.
_POWERS: OrderedDict[bytes, list[NDArray[np.float64]]] = OrderedDict()
_POWER_CHAINS = 16


class _ChainPowers:
    """A chain marks are evaluated under: its matrix, and its powers for restart gaps (kept, and
    shared between the streams of one chain; read-only)."""

    def __init__(self, chain: MarkovChain) -> None:
        self.chain = chain
        self.P = chain.matrix
        key = f"{chain.k}:".encode() + np.ascontiguousarray(chain.matrix, dtype=np.float64).tobytes()
        powers = _POWERS.pop(key, None)
        if powers is None:
            eye = np.eye(chain.k)
            eye.setflags(write=False)
            powers = [eye]
        _POWERS[key] = powers  # (most recent last)
        while len(_POWERS) > _POWER_CHAINS:
            _POWERS.popitem(last=False)
        self._powers = powers

    def power(self, n: int) -> NDArray[np.float64]:
        """P^n for the restart gaps (n ≤ max_gap + 1), computed once and kept."""
        while len(self._powers) <= n:
            nxt = self._powers[-1] @ self.P
            nxt.setflags(write=False)
            self._powers.append(nxt)
        return self._powers[n]

    def gap_kernel(self, G: int | None) -> NDArray[np.float64]:
        """Kernel of one step across a restart gap of G unseen readings (None: G = ∞, or a sensor
        that restarted too: the new records are independent of the old ones)."""
        if G is None:
            return np.broadcast_to(self.chain.initial, (self.chain.k, self.chain.k)).copy()
        return self.power(G + 1)


@dataclass(frozen=True)
class _LeftSpan:
    """A mark's left window as evaluated for one restart gap (StreamPrivatizer._left_span)."""

    rows: NDArray[np.float64]  # outward from p (cut at the boundary when the sensor restarted too)
    reaches: bool  # it reaches the first record (0, or the boundary after a sensor restart)
    steps: int  # kernel steps: one per row, and one more to the released stand-in beyond
    gap_step: int | None  # the 1-based step that crosses a restart gap, if within the window
    distance: int  # the stand-in's distance from the latest possible start (when not reaching)


@dataclass
class _Pending:
    phys: int
    seq: int | None  # None: a rejected frame (never published, always redacted)
    state: int
    ts: float
    arrived: float


@dataclass
class StreamPrivatizer:
    """Privatizes one stream frame by frame (see module docstring).

    ``source`` supplies the randomness (the OS CSPRNG in production). After a restart,
    ``first_seq``/``first_phys`` continue the positions, ``decided`` restores the (physical
    index → row) history, ``open_marks`` the marks whose window was still open, and
    ``restarted=True`` places an unknown gap before ``first_phys``.
    """

    plan: StreamPlan | KStreamPlan
    source: BitSource
    delay: int | None = None
    max_hold: float | None = None
    first_seq: int = 0
    first_phys: int = 0
    decided: dict[int, tuple[float, ...]] = field(default_factory=dict)
    open_marks: list[Mark] = field(default_factory=list)
    restarted: bool = False
    #: Earlier restart boundaries (the first positions of earlier lives, persisted by the owner: the
    #: outbox's ``restarts``); with ``restarted``, ``first_phys`` is the last one. A window that spans
    #: one of them is evaluated as such (:meth:`_left_span`, :meth:`_right_cut`), never as a chain that
    #: ran on without a gap.
    restarts: tuple[int, ...] = ()
    #: The law of the stream's first record (and of the first after a sensor restart), when the
    #: configuration declares it; None: any law (the guarantee holds for all of them).
    initial: NDArray[np.float64] | None = None
    #: Why marks are failing closed (set by :meth:`fail_closed`), None while the model holds.
    closed_reason: str | None = None
    #: Further chains each mark's figure is evaluated under (the figure is the worst case over
    #: them and the plan's chain): members of a model set (streamguard.model).
    members: tuple[MarkovChain, ...] = ()
    #: A binary box ((α_lo, α_hi), (β_lo, β_hi)) of chains: every mark's figure is then certified over
    #: the whole box (streamguard.model.box_window), not evaluated under finitely many chains.
    box: tuple[tuple[float, float], tuple[float, float]] | None = None
    #: A k-state row-wise region of chains: every mark's figure is then certified over all of it
    #: (streamguard.model.rows_window), as over a binary box.
    region: RowBox | None = None
    #: The plan's certificate over ``region`` (its window and worst case, krobust): an on-time mark
    #: whose window it covers takes its bound (plus the law's drift) without a search.
    region_table: CertifiedTable | None = None
    #: A set-chain's calibration scenarios and its sample period (seconds): every mark's figure then
    #: covers the time-of-day scenario too, at its worst position of the day (:meth:`_tod_figure`).
    time_of_day: tuple[Scenarios, float] | None = None
    #: Called for each decided record with a seq, in order, as (phys, ts — NaN when unknown —,
    #: released state or None, row) — the drift guard. It may call :meth:`fail_closed`; the
    #: records of the same decision that follow are then settled as if decided after it (:meth:`_decide`).
    observer: Callable[[int, float, int | None, tuple[float, ...]], None] | None = None
    #: While set, nothing is decided (neither by ``delay`` nor by ``max_hold``): the owner cannot yet
    #: tell whether a step is private (stream/vouch.py); what is due is decided once it is cleared.
    held: bool = False

    def __post_init__(self) -> None:
        if self.delay is None:
            self.delay = self.plan.left_horizon
        if self.delay < 0:
            raise ValueError("the release delay must be ≥ 0 records")
        self.next_seq = self.first_seq
        self.next_phys = self.first_phys
        self.boundary = self.first_phys if self.restarted else None
        #: Every restart boundary known, in order (the last is ``boundary``).
        self._bounds = sorted({b for b in self.restarts if 0 < b < self.first_phys}
                              | ({self.first_phys} if self.restarted else set()))
        self._pending: deque[_Pending] = deque()
        #: The chains every mark is evaluated under (worst case): the plan's, and ``members``.
        self.k = self.plan.chain.k
        self._chains = [_ChainPowers(c) for c in (self.plan.chain, *self.members)]
        if self.initial is not None:
            self.initial = np.asarray(self.initial, dtype=np.float64)
        #: Marks at positions p < start_hold from the first record (of the stream, or after the
        #: restart) may need their left side redacted back to it (audit/start.py, start_hold): the
        #: records before that position are held until the record at start_hold − 1 is due. Only
        #: with delay ≥ H_ℓ − 1: with less, a mark beyond position delay + 1 is late anyway (a left
        #: neighbour is decided when its flag comes), and one up to it finds the start undecided.
        rows = self.plan.left.red[: self.plan.left_horizon]
        worst = None if self.region is None else left_worst(self.region, rows, self.initial)  # certified
        self.start_hold = max(start_hold(c.P, rows, self.plan.left.budget, self.plan.epsilon, self.initial,
                                         left_worst=worst) for c in self._chains
                              ) if self.delay + 1 >= self.plan.left_horizon else 0
        self._held_until = (self.boundary or 0) + self.start_hold - 1
        #: The plan's window (its rows, then released records) under the time-of-day scenario, at
        #: its worst position of the day (:meth:`_plan_dominated`).
        self._plan_tod = None if self.time_of_day is None else self._tod_of(
            [(self.plan.left.red[: self.plan.left_horizon], False)],
            np.vstack([self.plan.right.red[: self.plan.right_horizon], np.zeros((1, self.k))]))
        span = self.plan.left_horizon + self.plan.right_horizon + 1
        self._keep = 4 * span + self.delay + 64 + self.start_hold
        self._rows: OrderedDict[int, tuple[float, ...]] = OrderedDict(sorted(self.decided.items()))
        self._phys_of_seq: OrderedDict[int, int] = OrderedDict()
        self._marks: list[Mark] = list(self.open_marks)
        #: Timestamps of recent steps by physical index (bounded like the rows).
        self._ts_of: OrderedDict[int, float] = OrderedDict()
        self.finished: deque[Mark] = deque(maxlen=1000)  # most recent completed marks
        #: (physical index, row0, …, row(k−1)) of the frames decided since the owner last took them
        #: (bounded: an owner that never takes them, like batch mode, keeps only the latest).
        self.last_decisions: deque[tuple[float, ...]] = deque(maxlen=self._keep)
        #: Marks created or finished since the owner last took them (to persist and report).
        self.mark_events: deque[Mark] = deque(maxlen=self._keep)
        #: Runs that grew since the owner last took them, with an unchanged figure (to persist
        #: only: their stored ``through`` must follow, the ledger already holds their figure).
        self.run_updates: deque[Mark] = deque(maxlen=self._keep)
        self._max_gap = max(mixing_gap(c.chain) for c in self._chains)
        if self.box is not None and self.k != 2:
            raise ValueError("a box of chains is a binary model set")
        for m in self._marks:  # restored open marks: their figure under the rows known now
            m.leakage = self._committed(m)

    # -- intake -------------------------------------------------------------------------------
    def accept(self, state: int, ts: float, *, now: float, private: bool = False,
               source: str = "flag", defer: bool = False) -> tuple[int, list[Release]]:
        """Take one validated record; returns its seq and the records decided as a result.
        ``defer``: decide nothing yet — the caller takes several steps (a batch) and then calls
        :meth:`decide_due` once, one kernel call for all (deciding later only lets more marks
        reach a record: never less redaction)."""
        state = int(state)
        if not 0 <= state < self.k:
            raise ValueError(f"state outside 0..{self.k - 1}")
        seq = self.next_seq
        self.next_seq += 1
        self._phys_of_seq[seq] = self.next_phys
        self._push(seq, state, float(ts), now)
        if private:
            self.mark(seq, source=source)
        return seq, [] if defer else self._decide_due()

    def skip(self, *, now: float, ts: float | None = None, private: bool = False,
             defer: bool = False) -> list[Release]:
        """A rejected frame (or a step whose reading is missing): one physical step, no seq,
        redacted with probability 1. With ``private`` (the frame asked to be private, as far as it
        could be read, or its time lies in a private schedule) the step is marked private all the
        same, so its neighbours are protected: fail closed. ``ts``: its timestamp, when known."""
        self._push(None, 0, math.nan if ts is None else float(ts), now)
        if private:
            self._mark_at(None, self.next_phys - 1, "flag")
        return [] if defer else self._decide_due()

    def open_run(self) -> Mark | None:
        """The open run that :meth:`skip_run` would extend: it ends at the newest step and every
        undecided step lies in it (None: there is none, or the core is held)."""
        if self.held:
            return None
        oldest = self._pending[0].phys if self._pending else self.next_phys
        return next((m for m in reversed(self._marks) if m.last == self.next_phys - 1 and coalesces(m.seq, m.source)
                     and (self.boundary or 0) <= m.phys <= oldest), None)

    def skip_run(self, n: int, *, now: float) -> list[Release]:
        """``n`` more private steps with neither seq nor time (rejected frames taken in bulk, issue
        28) right after :meth:`open_run`, in O(min(n, memory)) whatever n. Every undecided step
        lies in the run, so deciding them now instead of after ``delay`` changes no outcome (each
        is redacted surely, its row is all ones, and no mark can raise a row above that); the new
        steps join the run and are decided at once (rows of ones, of which the core — and its
        owner — keep only the last ``memory``: older ones count as released if a window ever
        reaches them, which only over-states). A mark on the next record finds its left
        neighbours decided and is evaluated as a late one (exact rows used). Without an open run
        the steps are taken one by one (:meth:`skip`)."""
        run = self.open_run()
        releases = [] if run is None else self._decide(len(self._pending))  # (none: all in the run)
        if run is None or not self.is_open(run):  # (a run without right rows ends once decided)
            for _ in range(n):
                releases += self.skip(now=now, private=True)
            return releases
        first, self.next_phys = self.next_phys, self.next_phys + n
        self._extend(run, self.next_phys - 1)
        ones = (1.0,) * self.k
        for t in range(max(first, self.next_phys - self._keep), self.next_phys):
            self._rows[t] = ones
            self.last_decisions.append((t, *ones))
        while len(self._rows) > self._keep:
            self._rows.popitem(last=False)
        return releases

    def _push(self, seq: int | None, state: int, ts: float, now: float) -> None:
        self._pending.append(_Pending(self.next_phys, seq, state, ts, float(now)))
        if not math.isnan(ts):
            self._ts_of[self.next_phys] = ts
            while len(self._ts_of) > self._keep:
                self._ts_of.popitem(last=False)
        self.next_phys += 1

    def decide_due(self) -> list[Release]:
        """Decide the records that are due (more than ``delay`` steps behind the newest)."""
        return self._decide_due()

    def _decide_due(self) -> list[Release]:
        """A record is due when the newest is more than ``delay`` steps after it; a record held at
        the start (before position start_hold − 1 from the first record) when that record is due."""
        if self.held:
            return []
        count = 0
        newest = self.next_phys - 1
        for p in self._pending:
            if newest - max(p.phys, self._held_until) > self.delay:  # type: ignore[operator]
                count += 1
            else:
                break
        return self._decide(count)

    def expire(self, now: float) -> list[Release]:
        """Decide records held longer than ``max_hold`` seconds (their right marks may come late)."""
        if self.max_hold is None or self.held:
            return []
        count = 0
        for p in self._pending:
            if now - p.arrived >= self.max_hold:
                count += 1
            else:
                break
        return self._decide(count)

    def drain(self) -> list[Release]:
        """Decide every pending record now (shutdown); marks whose window is decided are finished."""
        releases = self._decide(len(self._pending))
        self._finish_marks()
        return releases

    @property
    def pending(self) -> int:
        return len(self._pending)

    # -- marks --------------------------------------------------------------------------------
    def mark(self, seq: int | None = None, *, source: str = "command") -> Mark:
        """Make position ``seq`` private (None = the newest record). Returns the mark, which says
        whether it is late and whether it can be honoured."""
        if source not in MARK_SOURCES:
            raise ValueError(f"unknown mark source {source!r}")
        if seq is None:
            if self.next_seq == self.first_seq:
                raise ValueError("no record has been received yet")
            s = self.next_seq - 1
        else:
            s = int(seq)
        if not 0 <= s < self.next_seq:
            raise ValueError("a mark must name a record already received")
        if s not in self._phys_of_seq:
            for m in self.finished:
                if m.seq == s and m.phys < 0:
                    return m  # already reported: a repeated command changes nothing
            return self._finish_now(Mark(s, -1, source, np.zeros((0, self.k)), np.zeros((0, self.k)), late=True,
                                         honoured=False,
                                         reason="the record was published too long ago (or before a restart)",
                                         achieved=UNBOUNDED, leakage=UNBOUNDED))
        return self._mark_at(s, self._phys_of_seq[s], source)

    @property
    def memory(self) -> int:
        """How many recent steps the core remembers (rows, seqs, timestamps)."""
        return self._keep

    def mark_lost(self, *, source: str, ts: float | None) -> Mark:
        """A request to make private a step older than the core's memory: it was decided long ago
        and cannot be protected any more — reported as not honoured, unbounded, never hidden."""
        return self._finish_now(Mark(None, -1, source, np.zeros((0, self.k)), np.zeros((0, self.k)), late=True,
                                     honoured=False, reason="the step was decided too long ago to protect",
                                     achieved=UNBOUNDED, leakage=UNBOUNDED, ts=ts))

    def mark_position(self, p: int, *, source: str = "flag") -> Mark:
        """Make physical step ``p`` private (a step the owner identified otherwise than by seq: a
        redelivered frame that asks to be private, a rejected or missing step in a schedule)."""
        if not 0 <= p < self.next_phys:
            raise ValueError("a mark must name a step already received")
        seq = next((s for s, q in self._phys_of_seq.items() if q == p), None)
        return self._mark_at(seq, p, source)

    def covering(self, p: int) -> Mark | None:
        """The mark that makes step p private, if any (open, or among the finished ones kept)."""
        return next((m for m in (*self._marks, *self.finished) if m.phys <= p <= m.last), None)

    def _mark_at(self, s: int | None, p: int, source: str) -> Mark:
        """Mark physical step p (seq ``s``, None for a rejected frame) private.

        The rows committed to the window: decided records as used; undecided left neighbours get
        the plan's left rows when none of them is decided yet (on time), else full redaction (late);
        the right side gets the plan's rows, re-planned with what is left of ε when the left side
        already took more than the plan's share, and full redaction when nothing is left (then the
        mark is not honoured, and still protects what it can). The mark's figure is the exact
        leakage of these rows (:meth:`_committed`)."""
        oldest_pending = self._pending[0].phys if self._pending else self.next_phys
        for m in self._marks:
            if m.phys <= p <= m.last:
                return m  # already marked: a repeated flag or command changes nothing (and writes nothing)
        if coalesces(s, source) and p >= oldest_pending:  # (p and every step after it undecided)
            run = next((m for m in reversed(self._marks) if m.last == p - 1 and coalesces(m.seq, m.source)
                        and m.phys >= (self.boundary or 0)), None)
            if run is not None:
                return self._extend(run, p)
        for m in self.finished:
            if m.phys <= p <= m.last:
                return m
        ts = self._ts_of.get(p)
        H, Hr = self.plan.left_horizon, self.plan.right_horizon
        eps = self.plan.epsilon
        if p < oldest_pending:
            row = self._rows.get(p)
            if row is None or min(row) < 1.0:
                # its reading may have been released: nothing can protect it. The mark commits no
                # rows, so it is finished at once (never restored as "open" with a finite figure)
                return self._finish_now(Mark(s, p, source, np.zeros((0, self.k)), np.zeros((0, self.k)), late=True,
                                             honoured=False, reason="the record was already published",
                                             achieved=UNBOUNDED, leakage=UNBOUNDED, ts=ts))
            # p was redacted surely, but its right neighbours up to the oldest pending record are
            # decided too: redact the rest of the window fully; the exact figure decides.
            rest = max(Hr, oldest_pending - p)
            mark = Mark(s, p, source, np.zeros((0, self.k)), np.ones((rest, self.k)), late=True,
                        left_reach=min(max(H, self._keep), p), ts=ts,
                        reason="the record and its right neighbours were already decided")
            return self._add(self._settle(mark))
        # Left rows outward (nothing lies before physical index 0, the stream's first frame).
        late = any(p - d < oldest_pending for d in range(1, min(H, p) + 1)) or (
            self.boundary is not None and p - H < self.boundary)
        width = min(max(H, self._keep), p) if late else min(H, p)
        n_pending = max(0, min(width, p - oldest_pending))
        pending_left = np.ones((n_pending, self.k)) if late else self.plan.left.red[:n_pending]
        mark = Mark(s, p, source, pending_left, self.plan.right.red[:Hr], late=late, left_reach=width, ts=ts)
        l_leak = self._left_leakage(mark)
        first = self.boundary if self.boundary is not None and p >= self.boundary else 0
        held_to_first = not late and oldest_pending <= first < p
        if held_to_first and (exceeds_left_budget(l_leak, self.plan.left.budget) if p - first <= H
                              else eps - l_leak < MIN_SIDE_BUDGET):
            l_leak = self._redact_to_first(mark, p - first)
        figure = self._fit_right(mark, l_leak)
        if held_to_first and mark.left_reach < p - first and not self._within(figure):
            # the plan's left rows leak more than their share under the first record's unknown law
            # and no right side within RIGHT_TRIES re-plans brings the total within ε: every left
            # record back to the first is still undecided, so redact them all instead (issue 29's
            # contract: an on-time mark there is honoured)
            mark.honoured, mark.reason = True, None
            figure = self._fit_right(mark, self._redact_to_first(mark, p - first))
        return self._add(self._settle(mark, figure))

    def _redact_to_first(self, mark: Mark, width: int) -> float:
        """Redact a mark's left side fully back to the first record of its life (``width`` records,
        every one undecided); its new left leakage. The law of that record is unknown (a sensor may
        boot in a known state, DESIGN.md §3; docs/initial-law.md), and a side that releases nothing
        leaks nothing, whatever the law (audit/start.py, start_hold: the records there are held
        for this)."""
        mark.left = np.ones((width, self.k))
        mark.left_reach = width
        return self._left_leakage(mark)

    def _fit_right(self, mark: Mark, l_leak: float) -> Leakage | None:
        """The mark's right rows for what its left side leaves of ε (``l_leak`` taken). For a chain
        or a finite set: the plan's rows if the exact figure of the window keeps them within ε,
        else rows re-planned under the plan's own chain for ε − ``l_leak`` (at most the plan's
        right budget), then — while the exact figure, the worst over every chain evaluated (a
        model set's members, under which a side may leak more than its design budget, and a
        set-chain's time-of-day scenario) still exceeds ε — for a budget RIGHT_SHRINK times
        smaller (a longer, more redacted side), at most RIGHT_TRIES tries in all. Returns the
        exact figure of the rows it leaves when it is within ε (for :meth:`_settle`), else None.
        Over a box or a region, the plan's rows or those re-planned for ε − ``l_leak``, and None.
        With nothing left of ε, full redaction (not honoured) and None."""
        budget = self.plan.epsilon - l_leak
        if mark.late:
            mark.left_leakage, mark.right_budget = l_leak, max(budget, 0.0)
        if budget < MIN_SIDE_BUDGET:
            mark.right = np.ones((self.plan.right_horizon, self.k))
            mark.honoured = False
            mark.reason = "the published left neighbours already exhaust the budget"
            return None
        planned = self.plan.right.budget * (1 - 1e-12)
        if self.box is not None or self.region is not None:
            # (each figure a branch-and-bound certificate: one try, the rows for the budget left)
            mark.right = self.plan.right.red[: self.plan.right_horizon] if budget >= planned \
                else self.plan.right_rows(budget)
            return None
        # the plan's rows first, whatever the left figure: that figure is each side's worst case
        # (under the time-of-day scenario at its own worst position of the day), and the exact
        # total of both sides together may well be within ε where the sum of the two is not
        trial: float | None = None
        for _ in range(RIGHT_TRIES):
            mark.right = self.plan.right.red[: self.plan.right_horizon] if trial is None \
                else self.plan.right_rows(trial)
            # the chains first: rows they already take above ε need no time-of-day evaluation
            figure = self._committed(mark, time_of_day=False)
            if self._within(figure) and self.time_of_day is not None:
                figure = self._committed(mark)
            if self._within(figure):
                return figure
            trial = min(budget, planned) if trial is None else trial * RIGHT_SHRINK
            if trial < MIN_SIDE_BUDGET:
                break
        return None

    def _within(self, figure: Leakage | None) -> bool:
        return figure is not None and figure.total <= self.plan.epsilon * (1 + 1e-12)

    def _extend(self, run: Mark, p: int) -> Mark:
        """Private step p, undecided, right after the open run ``run`` (same life) joins it: the
        run's right rows move on to start after p, and p is redacted surely. Its left rows and
        their figure do not change; every position it moves the right rows over is undecided, so
        no decision is taken back.

        Accounting (docs/implementation.md, "Runs of private steps"): for a private X_p, p in [a, b] = [run.phys, p], the
        outputs left of a and right of b are independent given X_p (the outputs between are ⊥),
        and by the Markov property Pr(y_left | X_p) is a mixture over X_a of Pr(y_left | X_a), and
        Pr(y_right | X_p) one over X_b of Pr(y_right | X_b). A mixture's likelihood ratio is at
        most the largest ratio of its components, so the leakage about every X_p of the run is at
        most L_a + R_b — the left leakage of the rows at a and the right leakage of those at b,
        each worst case over initial laws, restart gaps and chains (:meth:`_figure`). That sum is
        the run's figure, never below any of its positions' exact leakage; each side is within
        its budget as planned, so an honoured mark stays honoured. It changes only when the
        single mark becomes a run (one ledger event then, and one when the run ends); later steps
        only move ``through``, which the owner stores with the decisions (``run_updates``) so a
        restart restores the whole run."""
        became_run = run.through is None
        run.through = p
        if became_run:
            self._settle(run)
            self.mark_events.append(run)
        elif not self.run_updates or self.run_updates[-1] is not run:
            self.run_updates.append(run)
        return run

    def fail_closed(self, reason: str) -> None:
        """From now on every mark's undecided window is fully redacted and the mark is reported as
        not honoured with ``reason`` (the drift guard fired: the model may no longer hold)."""
        self.closed_reason = reason
        for m in self._marks:
            self._close(m)
            self.mark_events.append(m)

    def _close(self, mark: Mark) -> None:
        mark.left = np.ones_like(mark.left)  # new arrays: the plan's own rows are never written
        mark.right = np.ones_like(mark.right)
        mark.honoured = False
        mark.reason = self.closed_reason
        mark.leakage = self._committed(mark)

    def _add(self, mark: Mark) -> Mark:
        """An open mark: its window is still being decided (fully redacted after :meth:`fail_closed`)."""
        if self.closed_reason is not None:
            self._close(mark)
        self._marks.append(mark)
        self.mark_events.append(mark)
        return mark

    def _finish_now(self, mark: Mark) -> Mark:
        """A finished mark: reported (and persisted) as it is, never restored as open."""
        self.finished.append(mark)
        self.mark_events.append(mark)
        return mark

    def _settle(self, mark: Mark, figure: Leakage | None = None) -> Mark:
        """Compute the mark's figure from its committed rows (``figure``: already computed for
        them, in the same step); a mark whose exact figure exceeds ε is not honoured, and then
        redacts the rest of its window fully."""
        mark.leakage = self._committed(mark) if figure is None else figure
        if mark.honoured and not self._within(mark.leakage):
            mark.honoured = False
            mark.reason = mark.reason or "the exact leakage of the rows already used exceeds the budget"
            mark.right = np.ones((max(self.plan.right_horizon, mark.right.shape[0]), self.k))
            mark.leakage = self._committed(mark)
        return mark

    # -- exact leakage of the rows actually used ----------------------------------------------
    def _right_pairs(self, rows: NDArray[np.float64], p: int, G: int | None, c: _ChainPowers) -> NDArray[np.float64]:
        """R[a, b]: max log Pr(y_right | X_p=a)/Pr(y_right | X_p=b) for ``rows`` outward from p, then
        one released record (it stands for whatever lies beyond). A step across the restart
        boundary uses the gap kernel. The right side does not depend on the initial law."""
        k = self.k
        rows, b = self._right_cut(rows, p)
        cut = np.vstack([rows, np.zeros((1, k))])
        kern = np.broadcast_to(c.P, (cut.shape[0], k, k)).copy()
        if b is not None and G != 0:
            j = b - p - 1  # outward step j goes from distance j to j + 1
            if 0 <= j < cut.shape[0]:
                kern[j] = c.gap_kernel(G)
        return right_pairs(kern, cut)

    def _left_span(self, rows: NDArray[np.float64], p: int, G: int | str | None) -> _LeftSpan:
        """The left window of a mark at ``p`` (rows at distances 1..m, m ≤ p) as evaluated for a
        restart gap G (an int, "tail" or None; no restart: G = 0). Without a restart the first
        record is physical index 0. Across a restart boundary b: for G ≥ 1 (or the tail) the step
        into b crosses the gap; for G = None the sensor restarted too, so b is a new first record,
        what lies before it is independent of X_p, and the window is cut at b. Here b is the nearest
        restart boundary at or before p; an earlier one c inside the window (c ≥ p − m) cuts it
        whatever G: record c stands in as released with any law (distance 0) — whatever happened at c
        and before it (a sensor restart, any gap), the law of X_c is some law, and given X_c what lies
        before it is independent of X_p (Markov property through any gap), so this over-states at
        most. (The tests' evaluator takes every combination of hypotheses at every boundary.)"""
        b, c = self._left_bounds(p)
        m = rows.shape[0]
        if c is not None and p - m <= c:
            m = p - c - 1
            rows = rows[:m]
        if b is not None and G is None and p - m < b <= p:
            m = p - b
            rows = rows[:m]
        first = 0 if b is None or G is not None or p < b else b
        reaches = p - m == first
        steps = m if reaches else m + 1
        j = p - b + 1 if b is not None and G else None  # the step from p−j (before b) into b
        # the released stand-in and its distance from the latest possible start; for a mark after
        # the boundary with its stand-in before it, 0: an earlier restart may lie right before the
        # stand-in (the owner keeps only recent ones; a mark before every known boundary keeps its
        # distance from position 0)
        t0 = p - m - 1
        return _LeftSpan(rows, reaches, steps, j if j is not None and 1 <= j <= steps else None,
                         max(t0 - b, 0) if b is not None and p >= b else t0)

    def _left_pairs(self, rows: NDArray[np.float64], p: int, G: int | None, c: _ChainPowers) -> NDArray[np.float64]:
        """L[a, b] for the left ``rows`` (:meth:`_left_span`), worst case over the laws the first
        record can have (any, unless the stream declares it) — audit/start.py; a step across a
        gap of G unseen readings uses P^{G+1}."""
        span = self._left_span(rows, p, G)
        kern = np.broadcast_to(c.P, (span.steps, self.k, self.k)).copy()
        if span.gap_step is not None:
            assert G is not None
            kern[span.gap_step - 1] = c.power(G + 1)
        if span.reaches:
            laws = np.eye(self.k) if self.initial is None else self.initial[None]
        else:
            laws = laws_at_distance(c.P, span.distance, self.initial)
        return left_pairs(kern, span.rows, laws, reaches_start=span.reaches)

    def _left_bounds(self, p: int) -> tuple[int | None, int | None]:
        """The nearest restart boundary at or before p, and the one before it (None: none)."""
        i = bisect_right(self._bounds, p)
        return (self._bounds[i - 1] if i else None), (self._bounds[i - 2] if i >= 2 else None)

    def _right_bounds(self, p: int) -> tuple[int | None, int | None]:
        """The nearest restart boundary after p, and the one after it (None: none)."""
        i = bisect_right(self._bounds, p)
        after: list[int | None] = [*self._bounds[i:i + 2], None, None]
        return after[0], after[1]

    def _right_cut(self, rows: NDArray[np.float64], p: int) -> tuple[NDArray[np.float64], int | None]:
        """The right ``rows`` of a mark at p as evaluated, and the nearest restart boundary after p
        (its step takes the gap hypotheses). A second boundary c within reach (c ≤ p + len + 1) cuts
        them: record c − 1 stands in as released — given X_{c−1}, what lies after it is independent
        of X_p whatever happened at c (the right side does not depend on any law)."""
        b, c = self._right_bounds(p)
        if c is not None and c <= p + rows.shape[0] + 1:
            rows = rows[:c - p - 2]
        return rows, b

    def _gaps(self, b: int | None, lo: int, hi: int) -> list[int | None]:
        """Restart gap lengths to evaluate at boundary b for one side of a window over physical
        indices [lo, hi] (its released stand-in included): G = 0 unless the side spans b, then
        G ∈ {0, …, max_gap} ∪ {None} (G = ∞, or the sensor restarted as well)."""
        if b is None or not lo < b <= hi:
            return [0]
        return [*range(self._max_gap + 1), None]

    def _left_gaps(self, p: int, m: int) -> list[int | None]:
        """Gaps for the left side of a mark at p with m rows (at the nearest boundary at or before p)."""
        return self._gaps(self._left_bounds(p)[0], p - m - 1, p)

    def _right_gaps(self, p: int, m: int) -> list[int | None]:
        """Gaps for the right side of a mark at p with m rows (at the nearest boundary after p)."""
        return self._gaps(self._right_bounds(p)[0], p, p + m + 1)

    def _window_rows(self, m: Mark, committed: bool) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Left and right rows of the mark's window outward from p: decided records as used (an
        unknown one counts as released); undecided ones at the mark's committed row (``committed``)."""
        H = min(max(m.left.shape[0], m.left_reach), m.phys)  # nothing before the first frame

        def row(t: int, d: int, own: NDArray[np.float64]) -> tuple[float, ...]:
            used = self._rows.get(t)
            if used is not None or not committed or not self._is_pending(t):
                return used if used is not None else (0.0,) * self.k
            return (1.0,) * self.k if d > own.shape[0] else tuple(float(v) for v in own[d - 1])

        left = np.array([row(m.phys - d, d, m.left) for d in range(1, H + 1)]).reshape(-1, self.k)
        right = np.array([row(m.last + d, d, m.right) for d in range(1, m.right.shape[0] + 1)]).reshape(-1, self.k)
        return left, right

    def _is_pending(self, t: int) -> bool:
        return t >= (self._pending[0].phys if self._pending else self.next_phys)

    def _evaluate(self, p: int, left: NDArray[np.float64], right: NDArray[np.float64], *,
                  time_of_day: bool = True) -> Leakage:
        """Exact leakage about X_p of these rows, worst case over restart gaps, initial laws and the
        chains evaluated (the plan's and ``members``; and the ``time_of_day`` scenario unless told
        not to — a lower bound then, for a quick rejection); with a ``box`` or a ``region``, the
        certified bound over it."""
        if self.region is not None:
            return certify_rows(self.region, self._box_cases(p, left, right), target=self.plan.epsilon,
                                table=self.region_table)
        if self.box is not None:
            return certify(self.box, self._box_cases(p, left, right), target=self.plan.epsilon)
        worst = Leakage(0.0, 0.0, 0.0)
        for c in self._chains:
            # the two sides meet different restarts (the left one's at or before p, the right
            # one's after it), each with its own gap: per pair (a, b), the worst of each side adds
            L = np.maximum.reduce([self._left_pairs(left, p, G, c) for G in self._left_gaps(p, left.shape[0])])
            R = np.maximum.reduce([self._right_pairs(right, p, G, c) for G in self._right_gaps(p, right.shape[0])])
            lk = combine(L, R)
            worst = Leakage(max(worst.total, lk.total), max(worst.left, lk.left), max(worst.right, lk.right))
        if self.time_of_day is not None and time_of_day:
            tod = self._plan_tod if self._plan_dominated(p, left, right) else self._tod_figure(p, left, right)
            worst = Leakage(max(worst.total, tod.total), max(worst.left, tod.left), max(worst.right, tod.right))
        return worst

    def _left_leakage(self, m: Mark) -> float:
        """The exact left leakage of the mark's committed left rows (worst case, as above)."""
        left, _ = self._window_rows(m, committed=True)
        if self.box is not None or self.region is not None:
            # the decision it feeds: on time, whether the right side keeps the plan's rows (left ≤
            # ε − ε_r; at the stream's start whether the left side is within its budget); late,
            # the right budget ε − L_ℓ itself (no target: as tight as the bounded search gets)
            reaches = m.left_reach >= m.phys
            target = None if m.late else (self.plan.left.budget if reaches
                                          else self.plan.epsilon - self.plan.right.budget)
            cases = self._box_cases(m.phys, left, None)
            if self.region is not None:
                return certify_rows(self.region, cases, key="left", target=target, give_up_above=self.plan.epsilon,
                                    max_boxes=MAX_SETS).left
            assert self.box is not None
            return certify(self.box, cases, key="left", target=target, give_up_above=self.plan.epsilon,
                           max_boxes=LATE_LEFT_BOXES if m.late else MAX_BOXES).left
        G_all = self._left_gaps(m.phys, left.shape[0])
        members = max(float(np.max(self._left_pairs(left, m.phys, G, c))) for c in self._chains for G in G_all)
        return members if self.time_of_day is None else max(members, self._tod_figure(m.phys, left, None).left)

    # -- the time-of-day scenario of a set-chain (model/scenarios.py; docs/time-varying.md §7) ---------
    def _tod_figure(self, p: int, left: NDArray[np.float64], right: NDArray[np.float64] | None) -> Leakage:
        """The leakage about X_p of these rows (outward) under the time-of-day scenario, the worst
        over every position of the day (the wall clock is not trusted) and every law before the
        window; ``right`` None: the left side alone (right term 0). Per position the sides add per
        ordered pair (:func:`combine`). Each side is ended by a released stand-in (any law on the
        left), which only over-states (data processing). A side that meets a restart of unknown gap
        ends at the *first unobserved step*: a released record there (the first lost reading, or
        the boundary record itself when nothing was lost) dominates every gap length and all that
        lies beyond, since given that reading the rest is independent of X_p (Markov property). On
        the left, the sensor may have restarted too (the boundary record is then a new first record
        of any law, independent of the old life): that hypothesis is taken as well, per pair the
        worse one. Positions are the grid of scenarios.hour_plans."""
        return self._tod_of(self._tod_left_spans(p, left), None if right is None else self._tod_right_rows(p, right))

    def _tod_of(self, spans: list[tuple[NDArray[np.float64], bool]], right: NDArray[np.float64] | None) -> Leakage:
        """:meth:`_tod_figure` of the left hypotheses ``spans`` (rows outward, reaches the first
        record) and the ``right`` rows ended by a released record (None: the left side alone)."""
        assert self.time_of_day is not None
        sc, period = self.time_of_day
        rows_r = np.zeros((1, self.k)) if right is None else right
        hourly = smoothed(sc.hourly)
        left_h, right_h = day_hours(period, max(s.shape[0] + (0 if reach else 1) for s, reach in spans),
                                    rows_r.shape[0])
        first_laws = np.eye(self.k) if self.initial is None else self.initial[None]
        L = np.maximum.reduce([left_pairs_at(hourly, left_h[:, :rows.shape[0] + (0 if reach else 1)], rows,
                                             first_laws if reach else np.eye(self.k), reaches=reach)
                               for rows, reach in spans])
        off = ~np.eye(self.k, dtype=bool)
        left_fig = float(np.max(L[:, off]))
        if right is None:
            return Leakage(left_fig, left_fig, 0.0)
        R = right_pairs_at(hourly, right_h, rows_r)
        with np.errstate(invalid="ignore"):
            tot = np.where(off[None], L + R, -math.inf)
        tot = np.where(np.isnan(tot), math.inf, tot)  # (as combine: +∞ on one side, −∞ on the other)
        return Leakage(float(tot.max()), left_fig, float(np.max(R[:, off])))

    def _tod_left_spans(self, p: int, rows: NDArray[np.float64]) -> list[tuple[NDArray[np.float64], bool]]:
        """The left hypotheses of :meth:`_tod_figure`, as (rows outward, reaches the first record):
        the stream's first record (physical 0) reached, of the stated or any law; or, when the
        window spans the nearest restart boundary b ≤ p, rows up to b and then either a released
        stand-in at the first unobserved step (any gap) or b as a new first record (a sensor
        restart); else the rows and a released stand-in beyond them."""
        b, _ = self._left_bounds(p)
        m = rows.shape[0]
        if b is not None and p - m - 1 < b <= p:
            return [(rows[:p - b], False), (rows[:p - b], True)]
        return [(rows, p - m == 0)]

    def _tod_right_rows(self, p: int, rows: NDArray[np.float64]) -> NDArray[np.float64]:
        """The right rows of :meth:`_tod_figure` ended by a released record: after the rows, or at the
        first unobserved step of the nearest restart after p that they reach (distance b − p)."""
        b, _ = self._right_bounds(p)
        if b is not None and b <= p + rows.shape[0] + 1:
            rows = rows[:b - p - 1]
        return np.vstack([rows, np.zeros((1, self.k))])

    def _plan_dominated(self, p: int, left: NDArray[np.float64], right: NDArray[np.float64]) -> bool:
        """Whether the time-of-day figure of these rows is at most the plan's own (``_plan_tod``):
        every row within the plan's horizons is at least the plan's, element-wise, and no restart
        boundary or first record lies within the plan's window and the released records that end
        it. Redacting more is a post-processing of the plan's outputs (notes/000 §4.5), and the
        plan's released records at distances H_ℓ + 1 and H_r + 1 dominate whatever lies beyond
        (given them the rest is independent of X_p): the leakage under every kernel sequence and
        law is at most the plan window's. On-time marks away from starts and restarts take this
        (the plan's figure at every position is computed once); the rest the exact evaluation."""
        H, Hr = self.plan.left_horizon, self.plan.right_horizon
        if left.shape[0] < H or right.shape[0] < Hr or p - H - 1 < 0:
            return False
        b, _ = self._left_bounds(p)
        after, _ = self._right_bounds(p)
        if (b is not None and p - H - 1 < b <= p) or (after is not None and after <= p + Hr + 1):
            return False
        return bool(np.all(left[:H] >= self.plan.left.red[:H]) and np.all(right[:Hr] >= self.plan.right.red[:Hr]))

    # -- certified figures over a box or a k-state region (streamguard.model.box_window, .rows_window)
    def _box_cases(self, p: int, left: NDArray[np.float64], right: NDArray[np.float64] | None) -> list[WindowCase]:
        """The window's hypotheses for the box certificate, mirroring :meth:`_left_pairs` and
        :meth:`_right_pairs`: per side, G = 0 unless it spans its restart, else every gap — G <
        EXPLICIT_GAPS one by one, the rest (and G = ∞) in one tail enclosure — and a sensor that
        restarted too (None); the two sides meet different restarts, so every pair of hypotheses."""
        def gaps(spans: bool) -> list[int | str | None]:
            return [*range(EXPLICIT_GAPS), "tail", None] if spans else [0]

        lefts = [self._box_left(left, p, G) for G in gaps(self._left_gaps(p, left.shape[0]) != [0])]
        rights = [None] if right is None else [self._box_right(right, p, G)
                                               for G in gaps(self._right_gaps(p, right.shape[0]) != [0])]
        return [WindowCase(lc, rc) for lc in lefts for rc in rights]

    def _box_left(self, rows: NDArray[np.float64], p: int, G: int | str | None) -> LeftCase:
        span = self._left_span(rows, p, G)
        kinds = [(1, 1)] * span.steps
        if span.gap_step is not None:  # (a gap of G ≥ 1, or the tail)
            kinds[span.gap_step - 1] = gap_kind(None if G == "tail" else int(G))  # type: ignore[arg-type]
        init = None if self.initial is None else tuple(float(v) for v in self.initial)
        return LeftCase(np.ascontiguousarray(span.rows, dtype=np.float64), tuple(kinds), span.reaches,
                        init if span.reaches else None, max(span.distance, 0))

    def _box_right(self, rows: NDArray[np.float64], p: int, G: int | str | None) -> RightCase:
        rows, b = self._right_cut(rows, p)
        cut = np.vstack([rows, np.zeros((1, self.k))])
        kinds = [(1, 1)] * cut.shape[0]
        if b is not None and G != 0:
            j = b - p - 1
            if 0 <= j < cut.shape[0]:
                kinds[j] = gap_kind(None if G in ("tail", None) else int(G))  # type: ignore[arg-type]
        return RightCase(cut, tuple(kinds))

    def _committed(self, m: Mark, *, time_of_day: bool = True) -> Leakage:
        """The mark's figure now: rows used, and committed rows for its undecided records."""
        return self._figure(m, committed=True, time_of_day=time_of_day)

    def _achieved(self, m: Mark) -> Leakage:
        """Exact leakage of the rows used in the mark's window (every record decided)."""
        return self._figure(m, committed=False)

    def _figure(self, m: Mark, committed: bool, *, time_of_day: bool = True) -> Leakage:
        """A single mark's exact leakage; for a run [a, b] the bound L_a + R_b on every one of its
        positions' leakage (:meth:`_extend`): the left figure of its left rows evaluated at a, the
        right figure of its right rows evaluated at b (the other side of each evaluation, and its
        total, are not used)."""
        left, right = self._window_rows(m, committed)
        if m.through is None:
            return self._evaluate(m.phys, left, right, time_of_day=time_of_day)
        L = self._evaluate(m.phys, left, right, time_of_day=time_of_day).left if m.run_left is None else m.run_left
        R = self._evaluate(m.last, np.ones((1, self.k)), right, time_of_day=time_of_day).right
        return Leakage(L + R, L, R)

    # -- decisions ----------------------------------------------------------------------------
    def _rows_of(self, lo: int, count: int) -> NDArray[np.float64]:
        """The rows of the consecutive positions lo..lo+count−1: for each, the element-wise maximum
        over the marks of :meth:`Mark.row_at` (zeros where no mark reaches), one slice per mark
        side instead of one lookup per position and mark."""
        rows = np.zeros((count, self.k))
        hi = lo + count
        for m in self._marks:
            p, q = m.phys, m.last
            a, b = max(lo, q + 1), min(hi, q + m.right.shape[0] + 1)  # right: t − q = 1..len(right)
            if a < b:
                np.maximum(rows[a - lo:b - lo], m.right[a - q - 1:b - q - 1], out=rows[a - lo:b - lo])
            a, b = max(lo, p - m.left.shape[0]), min(hi, p)  # left: p − t = 1..len(left), reversed
            if a < b:
                np.maximum(rows[a - lo:b - lo], m.left[p - b:p - a][::-1], out=rows[a - lo:b - lo])
            a, b = max(lo, p), min(hi, q + 1)  # the private positions p..q
            if a < b:
                rows[a - lo:b - lo] = 1.0
        return rows

    def _decide(self, count: int) -> list[Release]:
        if count == 0:
            return []
        batch = [self._pending.popleft() for _ in range(count)]
        lo = batch[0].phys  # (pending positions are consecutive: every step is pushed in order)
        assert batch[-1].phys == lo + count - 1
        rows = self._rows_of(lo, count)
        for i, p in enumerate(batch):
            if p.seq is None:  # a rejected frame or a missing reading: redacted with probability 1
                rows[i] = 1.0
        rows_l = rows.tolist()
        out = self._redact(batch, rows, rows_l)
        releases = []
        for i, p in enumerate(batch):
            r, y = tuple(rows_l[i]), out[i]
            self._rows[p.phys] = r
            self.last_decisions.append((p.phys, *r))
            if p.seq is None:
                continue
            releases.append(Release(p.seq, p.phys, p.ts, None if y < 0 else y, r))
            if self.observer is not None and self.closed_reason is None:
                self.observer(p.phys, p.ts, releases[-1].state, r)
                if self.closed_reason is not None and i + 1 < count:
                    self._settle_closed(batch, i + 1, rows_l, out)
        while len(self._rows) > self._keep:
            self._rows.popitem(last=False)
        while self._phys_of_seq and len(self._phys_of_seq) > self._keep:
            self._phys_of_seq.popitem(last=False)
        self._finish_marks()
        return releases

    def _redact(self, batch: list[_Pending], rows: NDArray[np.float64], rows_l: list[list[float]]) -> list[int]:
        """Each record's outcome: its state, or REDACTED with probability rows[i][state]. Where that
        probability is exactly 0 or 1 the outcome needs no randomness (the kernel's threshold is 0
        or 2⁶³: never or always below a 63-bit draw) — most records, which no mark reaches — so
        only the others go to the kernel, in one call."""
        out: list[int] = []
        draw: list[int] = []  # (anything but exactly 0 or 1 — NaN or out of [0, 1] included — goes to
        for i, p in enumerate(batch):  # thresholds(), which refuses what is not a probability)
            q = rows_l[i][p.state]
            out.append(REDACTED if q == 1.0 else p.state)
            if q != 0.0 and q != 1.0:
                draw.append(i)
        if draw:
            states = np.array([batch[i].state for i in draw], dtype=np.int8)
            drawn = apply_redaction(states, thresholds(rows[draw]), np.arange(len(draw)), self.source).tolist()
            for i, y in zip(draw, drawn):
                out[i] = y
        return out

    def _settle_closed(self, batch: list[_Pending], start: int, rows: list[list[float]], out: list[int]) -> None:
        """The observer failed closed while the records batch[start:] were already drawn (one
        kernel call decides a group): settle them as a decision after :meth:`fail_closed` would.
        Closing sets every mark's rows to 1, so each new row is 0 or 1 entry-wise and ≥ the row
        drawn with: the new outcome is ⊥ where the new row's entry for the record's state is 1,
        else the drawn outcome (then both rows give 0: released either way). No new randomness is
        used, and nothing of these records was stored or published yet."""
        lo = batch[start].phys
        fresh = self._rows_of(lo, len(batch) - start).tolist()
        for j in range(start, len(batch)):
            p, new = batch[j], fresh[j - start]
            if p.seq is None:
                new = [1.0] * self.k
            if new[p.state] >= 1.0:
                out[j] = REDACTED
            elif new[p.state] != rows[j][p.state]:  # not reachable (rows are 0 or 1): fail closed
                new, out[j] = [1.0] * self.k, REDACTED
            rows[j] = new

    def _finish_marks(self) -> None:
        decided_upto = self._pending[0].phys if self._pending else self.next_phys
        still = []
        for m in self._marks:
            if m.through is not None and m.run_left is None and m.phys <= decided_upto:
                left, right = self._window_rows(m, committed=False)  # (every row left of phys is decided)
                m.run_left = self._evaluate(m.phys, left, right).left
            if m.right_end >= decided_upto:
                still.append(m)
                continue
            if m.achieved is None:
                m.achieved = self._achieved(m)
            m.leakage = m.achieved
            if m.honoured and not m.achieved.total <= self.plan.epsilon * (1 + 1e-12):
                m.honoured = False  # the exact check has the last word (never expected: the
                m.reason = "the exact achieved leakage exceeds the budget"  # committed figure was ≤ ε)
            self._finish_now(m)
        self._marks = still

    def is_open(self, m: Mark) -> bool:
        """Is the mark's window still undecided (it must survive a restart)?"""
        return any(o is m for o in self._marks)

    def status(self, recent: int | None = None) -> dict[str, Any]:
        """Open and recently finished marks (JSON-ready): the ``recent`` latest finished ones (None:
        all those kept, up to 1,000; a report is built only for those listed)."""
        finished = self.finished if recent is None else itertools.islice(
            self.finished, max(0, len(self.finished) - recent), None)
        return {
            "next_seq": self.next_seq,
            "pending": len(self._pending),
            "delay": self.delay,
            "restarted": self.boundary is not None,
            "open_marks": [m.report() for m in self._marks],
            "finished_marks": [m.report() for m in finished],
        }
