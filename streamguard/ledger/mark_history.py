"""What a stream's book keeps of its redaction marks: one small summary per mark, and the
family's figures kept as the marks change.

A stream whose policy marks many frames private records a mark per private frame. The book used
to keep every :class:`~streamguard.ledger.events.RedactionEvent` and rebuild the redaction section
of the odometer from all of them after each new mark (30,000 marks: 181 ms each time). The rule
(``book.py``, "redaction": each mark's number stands alone, the family's is the worst mark) is kept
incrementally instead:

* per mark (:class:`MarkSummary`): where it sorts, its worst event (the first with the largest
  ``total``) and the largest ``left`` and ``right``, its first event that was not honoured, and how
  many events it has;
* the marks in mark order (by position, then by seq, then by ledger id), the worst mark (the first
  in that order with the largest leakage: a mark's leakage only grows, so the worst only moves to a
  mark that reaches or passes it), how many are not honoured, and the positions they cover.

The odometer then costs O(limit) per status however many marks there are. Memory stays linear in
the marks, since the budget filter needs each mark's leakage by name; a mark is a
:class:`MarkSummary` object (0.73 KB) while it is live, and a packed row of
:class:`~streamguard.ledger.mark_table.MarkTable` (~0.08 KB) once frozen — each summary
checkpoint freezes every mark (``ledger/checkpoint.py``; ``benchmarks/bench_ledger_growth.py``).
"""

from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass, field
from typing import Any

from ..support.json_numbers import json_number
from .aggregate_history import stored_span
from .events import RedactionEvent, widen
from .mark_table import MarkTable, packed_key


@dataclass(slots=True)
class MarkSummary:
    """One mark's events, summarised (module docstring): ``key`` is where the mark sorts (its first
    event's ``order`` and ledger id); position, seq, plan, ε and total of its worst event; the
    largest left and right; whether all its events were honoured and the first one's reason that
    was not."""

    key: tuple[tuple[int, int], int]
    position: int | None
    seq: int | None
    plan: str
    epsilon: float
    total: float
    left: float
    right: float
    honoured: bool
    reason: str | None
    events: int = 1

    @classmethod
    def first(cls, event_id: int, ev: RedactionEvent) -> MarkSummary:
        return cls((ev.order, event_id), ev.position, ev.seq, ev.plan, ev.epsilon, ev.total, ev.left, ev.right,
                   ev.honoured, None if ev.honoured else ev.reason)

    def add(self, ev: RedactionEvent) -> None:
        if ev.total > self.total:
            self.position, self.seq, self.plan, self.epsilon, self.total = (ev.position, ev.seq, ev.plan, ev.epsilon,
                                                                            ev.total)
        self.left = max(self.left, ev.left)
        self.right = max(self.right, ev.right)
        if self.honoured and not ev.honoured:
            self.honoured, self.reason = False, ev.reason
        self.events += 1

    def entry(self, name: str) -> dict[str, Any]:
        """The mark as the odometer lists it."""
        return {"mark": name, "position": self.position, "seq": self.seq, "plan": self.plan, "epsilon": self.epsilon,
                "left": json_number(self.left), "right": json_number(self.right), "total": json_number(self.total),
                "honoured": self.honoured, "reason": self.reason, "events": self.events}


@dataclass
class MarkHistory:
    """One stream's marks (module docstring), fed in ledger order with their book names.

    The marks that changed since the last :meth:`freeze` are :class:`MarkSummary` objects
    (``live``; one that also has a row in ``frozen`` shadows it); the others are rows of a
    :class:`~streamguard.ledger.mark_table.MarkTable`. Both are in mark order; ``live_order``
    lists the live marks that have no row."""

    frozen: MarkTable = field(default_factory=MarkTable)
    live: dict[str, MarkSummary] = field(default_factory=dict)
    live_order: list[tuple[tuple[int, int], str]] = field(default_factory=list)  # (packed key, name), sorted
    worst: str | None = None
    #: (total, key) of the worst mark, kept so that a new mark is compared without looking it up
    worst_rank: tuple[float, tuple[tuple[int, int], int]] | None = field(default=None, repr=False, compare=False)
    not_honoured: int = 0
    span: tuple[int, int] | None = None

    def __len__(self) -> int:
        return len(self.frozen) + len(self.live_order)

    def __contains__(self, name: str) -> bool:
        return name in self.live or name in self.frozen

    def get(self, name: str) -> MarkSummary:
        """The mark called ``name`` (KeyError if there is none). Read it, do not change it."""
        mark = self.live.get(name) or self.frozen.get(name)
        if mark is None:
            raise KeyError(name)
        return mark

    def add(self, name: str, event_id: int, ev: RedactionEvent) -> None:
        mark = self.live.get(name)
        if mark is None:
            mark = self.frozen.get(name)
            if mark is not None:  # a frozen mark changes: its summary shadows the row
                self.live[name] = mark
        if mark is None:
            mark = self.live[name] = MarkSummary.first(event_id, ev)
            bisect.insort(self.live_order, (packed_key(mark.key), name))
            self.not_honoured += not mark.honoured
        else:
            honoured = mark.honoured
            mark.add(ev)
            self.not_honoured += honoured and not mark.honoured
        if self.worst is not None and self.worst_rank is None:  # (restored from a checkpoint)
            worst = self.get(self.worst)
            self.worst_rank = (worst.total, worst.key)
        if self.worst_rank is None or name == self.worst or self._before(mark, self.worst_rank):
            self.worst, self.worst_rank = name, (mark.total, mark.key)
        sp = ev.span()
        if sp is not None:
            self.span = widen(self.span, sp)

    @staticmethod
    def _before(a: MarkSummary, rank: tuple[float, tuple[tuple[int, int], int]]) -> bool:
        """Whether mark ``a`` is worse than the mark of ``rank`` (total, key): a larger leakage, or
        the same and sorted first."""
        return a.total > rank[0] or (a.total == rank[0] and a.key < rank[1])

    def freeze(self) -> None:
        """Move the live marks into the table (but any whose key cannot be packed)."""
        keep = {name: m for name, m in self.live.items() if not MarkTable.packable(m)}
        self.frozen = self.frozen.merged((name, m) for name, m in self.live.items() if name not in keep)
        self.live = keep
        self.live_order = sorted((packed_key(m.key), name) for name, m in keep.items())

    def state(self) -> tuple[dict[str, Any], memoryview]:
        """Freeze, then the JSON-ready figures and strings and the table's bytes (a summary
        checkpoint, ``ledger/checkpoint.py``). ValueError if a mark cannot be packed."""
        self.freeze()
        if self.live:
            raise ValueError("a mark's position or seq is too large for the mark table")
        return ({"worst": self.worst, "not_honoured": self.not_honoured, "span": self.span,
                 "strings": self.frozen.strings}, self.frozen.to_bytes())

    @classmethod
    def from_state(cls, doc: dict[str, Any], data: bytes | memoryview) -> MarkHistory:
        out = cls(MarkTable.from_bytes(data, doc["strings"]), worst=doc["worst"], not_honoured=int(doc["not_honoured"]),
                  span=stored_span(doc["span"]))
        if (out.worst is None) != (len(out) == 0) or (out.worst is not None and out.worst not in out):
            raise ValueError("marks: the worst mark is not among them")
        return out

    def names(self) -> list[str]:
        """Every mark's name, in mark order."""
        return [name for _, name in heapq.merge(self.frozen.keyed(), self.live_order)]

    def latest(self, limit: int | None) -> list[str]:
        """The last ``limit`` marks in mark order (None: all)."""
        if limit is None:
            return self.names()
        tail = heapq.merge(self.frozen.keyed(max(0, len(self.frozen) - limit)),
                           self.live_order[max(0, len(self.live_order) - limit):])
        return [name for _, name in list(tail)[-limit:]] if limit > 0 else []
