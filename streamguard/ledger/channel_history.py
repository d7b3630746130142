"""What a stream's book keeps of its channel releases: a summary that does not grow with them.

A channel stream reserves ledger coverage 4,096 records at a time, so a stream at 1,000 records/s
records a range every 4 s. The book used to keep every
:class:`~streamguard.ledger.events.ChannelEvent` and recompute the channel family's figures from
all of them for every admission and every odometer — quadratic in the ranges for the notions
other than ``ldp_x`` (8,000 ranges: 7.7 s per admission). The rules (``book.py``, "channel")
are kept incrementally instead, each exactly as stated there:

* ``ldp_x``: Σ ε over the channels that released a record, per record — run-lengths of that sum
  (:class:`~streamguard.privacy.runs.Runs`), kept exactly (as fractions: a float sum depends on the order
  of its terms), and its running maximum, reported rounded up to a float, so that "the sum
  exceeds the budget" is decided exactly; +∞ once a channel claims ε = +∞;
* every other notion: the max claimed ε, and whether two ranges with that notion share a record
  (:class:`Coverage` of the records released with it);
* the exact stream leakage: how many ranges state one and how many do not, the (channel, model)
  pairs seen, whether any record was released twice (a coverage of all ranges), the max stated;
* the count, span, channel names and stream-leakage models, and the latest :data:`KEEP` ranges
  for the odometer's list (the whole list is read back from the ledger file on request).

Memory is independent of the number of ranges where consecutive ranges touch and carry the same
claims (the daemon's case); gaps and changes of ε cost one run each, and an admission copies the
summary (linear in those runs).
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from ..privacy.runs import Runs
from .aggregate_history import KEEP, stored_span
from .events import LDP_X, ChannelEvent, widen

NO_LEAKAGE_STATED = "no channel release states an exact stream leakage"
SOME_UNSTATED = "a channel release states no exact stream leakage"
MIXED_CHANNELS = "different channels (or models) released records of this stream; no theorem composes them"
RELEASED_TWICE = "some records were released twice; the stated stream leakage covers one release per record"


class Coverage:
    """A set of positions as ordered disjoint inclusive ranges (touching ones merged)."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []

    def copy(self) -> Coverage:
        out = Coverage()
        out._starts, out._ends = list(self._starts), list(self._ends)
        return out

    def state(self) -> list[list[int]]:
        """[starts, ends] (a summary checkpoint)."""
        return [self._starts, self._ends]

    @classmethod
    def from_state(cls, doc: list[list[int]]) -> Coverage:
        out = cls()
        for lo, hi in zip(*doc, strict=True):
            if out._ends and lo <= out._ends[-1] + 1 or hi < lo:
                raise ValueError("coverage: ranges not ordered and disjoint")
            out._starts.append(int(lo))
            out._ends.append(int(hi))
        return out

    def meets(self, lo: int, hi: int) -> bool:
        """Whether a position of [lo, hi] is covered: the last range starting at or before ``hi``
        reaches ``lo`` (earlier ones end before it starts)."""
        j = bisect.bisect_right(self._starts, hi) - 1
        return j >= 0 and self._ends[j] >= lo

    def add(self, lo: int, hi: int) -> None:
        i = bisect.bisect_left(self._ends, lo - 1)  # first range that ends at or after lo − 1
        j = bisect.bisect_right(self._starts, hi + 1)  # ranges i..j−1 overlap or touch [lo, hi]
        if i < j:
            lo, hi = min(lo, self._starts[i]), max(hi, self._ends[j - 1])
        self._starts[i:j] = [lo]
        self._ends[i:j] = [hi]


@dataclass
class NotionHistory:
    """One notion other than ``ldp_x``: the max claimed ε, whether two of its ranges share a
    record, and the records released with it."""

    best: float = 0.0
    clash: bool = False
    cover: Coverage = field(default_factory=Coverage)

    def copy(self) -> NotionHistory:
        return NotionHistory(self.best, self.clash, self.cover.copy())


@dataclass
class ChannelHistory:
    """The summary of one stream's channel releases, fed in ledger order (module docstring)."""

    count: int = 0
    span: tuple[int, int] | None = None
    channels: set[str] = field(default_factory=set)
    models: set[str] = field(default_factory=set)
    recent: deque[tuple[int, int, str]] = field(default_factory=lambda: deque(maxlen=KEEP))
    ldp_runs: Runs = field(default_factory=Runs)  # exact Σ ε of the finite ldp_x claims, per record
    ldp_peak: Fraction | None = None  # its maximum; None: no ldp_x claim
    ldp_inf: bool = False  # a channel claimed ldp_x = +∞
    notions: dict[str, NotionHistory] = field(default_factory=dict)
    stated: int = 0
    pairs: set[tuple[str, str | None]] = field(default_factory=set)
    cover: Coverage = field(default_factory=Coverage)
    twice: bool = False
    leak_max: float | None = None

    def copy(self) -> ChannelHistory:
        return ChannelHistory(self.count, self.span, set(self.channels), set(self.models), deque(self.recent, KEEP),
                              self.ldp_runs.copy(), self.ldp_peak, self.ldp_inf,
                              {k: v.copy() for k, v in self.notions.items()},
                              self.stated, set(self.pairs), self.cover.copy(), self.twice, self.leak_max)

    def state(self) -> dict[str, Any]:
        """JSON-ready state (a summary checkpoint, ``ledger/checkpoint.py``): exact sums as fractions
        in text."""
        return {"count": self.count, "span": self.span, "channels": sorted(self.channels),
                "models": sorted(self.models), "recent": list(self.recent), "ldp_runs": [[s, e, str(v)] for s, e, v in self.ldp_runs.segments()],
                "ldp_peak": None if self.ldp_peak is None else str(self.ldp_peak), "ldp_inf": self.ldp_inf,
                "notions": {k: [v.best, v.clash, v.cover.state()] for k, v in self.notions.items()},
                "stated": self.stated, "pairs": sorted(self.pairs, key=repr), "cover": self.cover.state(),
                "twice": self.twice, "leak_max": self.leak_max}

    @classmethod
    def from_state(cls, doc: dict[str, Any]) -> ChannelHistory:
        runs = Runs()
        for s, e, v in doc["ldp_runs"]:
            runs.append(int(s), int(e), Fraction(v))
        return cls(int(doc["count"]), stored_span(doc["span"]), set(doc["channels"]), set(doc["models"]),
                   deque((tuple(r) for r in doc["recent"]), KEEP), runs,
                   None if doc["ldp_peak"] is None else Fraction(doc["ldp_peak"]), bool(doc["ldp_inf"]),
                   {k: NotionHistory(float(b), bool(c), Coverage.from_state(cov))
                    for k, (b, c, cov) in doc["notions"].items()},
                   int(doc["stated"]), {(c, m) for c, m in doc["pairs"]}, Coverage.from_state(doc["cover"]),
                   bool(doc["twice"]), None if doc["leak_max"] is None else float(doc["leak_max"]))

    def add(self, ev: ChannelEvent) -> None:
        lo, hi = ev.span()
        self.count += 1
        self.span = widen(self.span, (lo, hi))
        self.channels.add(ev.channel)
        if ev.model is not None:
            self.models.add(ev.model)
        self.recent.append((lo, hi, ev.channel))
        for c in ev.claims:
            if c.notion == LDP_X:
                if math.isinf(c.epsilon):
                    self.ldp_inf = True
                elif c.epsilon > 0.0:
                    self.ldp_runs.add(lo, hi, Fraction(c.epsilon))  # type: ignore[arg-type]
                peak = max((v for _, _, v in self.ldp_runs.segments_in(lo, hi)), default=Fraction(0))
                self.ldp_peak = peak if self.ldp_peak is None else max(self.ldp_peak, peak)
            else:
                notion = self.notions.setdefault(c.notion, NotionHistory())
                notion.clash = notion.clash or notion.cover.meets(lo, hi)
                notion.cover.add(lo, hi)
                notion.best = max(notion.best, c.epsilon)
        self.pairs.add((ev.channel, ev.model))
        self.twice = self.twice or self.cover.meets(lo, hi)
        self.cover.add(lo, hi)
        if ev.stream_leakage is not None:
            self.stated += 1
            leak = ev.stream_leakage
            self.leak_max = leak if self.leak_max is None else max(self.leak_max, leak)

    # -- the rules' figures (book.py, "channel") --------------------------------------------------
    def ldp_x_max(self) -> float | None:
        """max over records of Σ ε of the ``ldp_x`` claims that released it, rounded up (None: no
        ``ldp_x`` claim)."""
        if self.ldp_peak is None:
            return None
        if self.ldp_inf:
            return math.inf
        up = float(self.ldp_peak)
        return math.nextafter(up, math.inf) if Fraction(up) < self.ldp_peak else up

    def notion_claims(self) -> dict[str, float | None]:
        """Per non-``ldp_x`` notion: the max claimed ε, or None when one record was released by
        two channels with that notion."""
        return {k: None if v.clash else v.best for k, v in self.notions.items()}

    def stream_leakage(self) -> tuple[float | None, str | None]:
        """The exact stream leakage and, if it cannot be given, why."""
        if self.stated == 0:
            return None, NO_LEAKAGE_STATED
        if self.stated < self.count:
            return None, SOME_UNSTATED
        if len(self.pairs) > 1:
            return None, MIXED_CHANNELS
        if self.twice:
            return None, RELEASED_TWICE
        return self.leak_max, None
