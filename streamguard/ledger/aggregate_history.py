"""What a stream's book keeps of its aggregate releases: a summary of constant size.

A daemon that releases a tumbling-window aggregate every few seconds records millions of windows
a year. The book used to keep every :class:`~streamguard.ledger.events.AggregateEvent` (about 1 KB
of memory each, all replayed at every start). What the guarantees and the odometer need of them
is kept incrementally instead (docs/implementation.md, "Growth"):

* the loads — in the quilt accountants themselves (notes/002 §4.7: "persist ρ run-lengths");
* the number of releases, the positions they cover, the id of the latest, whether any used the
  seeded sampler and whether all were length-independent;
* per model Θ, what Thm III.7 and Thm II.6 need (:class:`~streamguard.ledger.composition.MqmTally`:
  Σ ε, the last position read, the first release that differs from the first), and the
  mode of its first release;
* the latest :data:`KEEP` windows (lo, hi, load) for the odometer's list; the whole list is read
  back from the ledger file on request (:meth:`streamguard.ledger.store.Ledger.events_of`).

Memory is then independent of the number of releases (but for the accountants' load segments,
which merge where neighbouring positions carry equal loads, and the releases with a finite
chain length T, which the daemon never makes).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .composition import CompositionError, MqmRelease, MqmTally
from .events import AggregateEvent, widen

#: Latest windows (and channel ranges, ``channel_history.py``) kept in memory for the odometer's
#: lists (the daemon shows 20, ``ledger show`` 20; longer lists are read from the file).
KEEP = 100


@dataclass
class ModelHistory:
    """The releases calibrated under one model: the mode of the first, their :class:`MqmTally`,
    and the first one the composition rules cannot read as an MQM release (raised when the rules
    are asked, as it was when the rules were computed from the events)."""

    mode: str
    count: int = 0
    tally: MqmTally = field(default_factory=MqmTally)
    error: CompositionError | None = None

    def add(self, ev: AggregateEvent) -> None:
        self.count += 1
        try:
            release = MqmRelease(ev.epsilon, ev.lo, ev.hi, ev.model, ev.mode, ev.T)
        except CompositionError as exc:
            self.error = self.error or exc
            return
        self.tally.add(release)

    def state(self) -> dict[str, Any]:
        """JSON-ready state (a summary checkpoint, ``ledger/checkpoint.py``)."""
        t = self.tally
        return {"mode": self.mode, "count": self.count, "error": None if self.error is None else str(self.error),
                "tally": [t.count, sorted(t.models), t.eps_sum, t.max_hi, t.first, t.first_differs, t.timed]}

    @classmethod
    def from_state(cls, doc: dict[str, Any]) -> ModelHistory:
        count, models, eps_sum, max_hi, first, first_differs, timed = doc["tally"]
        tally = MqmTally(int(count), set(models), float(eps_sum), int(max_hi), None if first is None else tuple(first),
                         first_differs, [(int(n), int(T)) for n, T in timed])
        return cls(doc["mode"], int(doc["count"]), tally,
                   None if doc["error"] is None else CompositionError(doc["error"]))


@dataclass
class AggregateHistory:
    """The summary of one stream's aggregate releases, fed in ledger order (module docstring)."""

    count: int = 0
    last_id: int | None = None
    span: tuple[int, int] | None = None
    deterministic: bool = False
    t_independent: bool = True
    recent: deque[tuple[int, int, float]] = field(default_factory=lambda: deque(maxlen=KEEP))
    models: dict[str, ModelHistory] = field(default_factory=dict)

    def add(self, event_id: int, ev: AggregateEvent) -> None:
        self.count += 1
        self.last_id = event_id
        self.span = widen(self.span, ev.span())
        self.deterministic = self.deterministic or ev.deterministic
        self.t_independent = self.t_independent and ev.t_independent
        self.recent.append((ev.lo, ev.hi, ev.load))
        if ev.model not in self.models:
            self.models[ev.model] = ModelHistory(ev.mode)
        self.models[ev.model].add(ev)

    def state(self) -> dict[str, Any]:
        """JSON-ready state (a summary checkpoint, ``ledger/checkpoint.py``)."""
        return {"count": self.count, "last_id": self.last_id, "span": self.span, "deterministic": self.deterministic,
                "t_independent": self.t_independent, "recent": list(self.recent),
                "models": {mid: m.state() for mid, m in self.models.items()}}

    @classmethod
    def from_state(cls, doc: dict[str, Any]) -> AggregateHistory:
        return cls(int(doc["count"]), doc["last_id"], stored_span(doc["span"]), bool(doc["deterministic"]),
                   bool(doc["t_independent"]), deque((tuple(r) for r in doc["recent"]), maxlen=KEEP),
                   {mid: ModelHistory.from_state(m) for mid, m in doc["models"].items()})

    def calibrated(self, model: str) -> int:
        """How many releases were calibrated under ``model``."""
        entry = self.models.get(model)
        return 0 if entry is None else entry.count


def stored_span(doc: Any) -> tuple[int, int] | None:
    """A stored span (None, or [lo, hi])."""
    return None if doc is None else (int(doc[0]), int(doc[1]))
