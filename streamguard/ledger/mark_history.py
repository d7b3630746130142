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
the marks, since the budget filter needs each mark's leakage by name: 0.73 KB per mark measured
(``benchmarks/bench_ledger_growth.py``), against 0.87 KB when the events were kept.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from .._json import json_number
from .events import RedactionEvent, widen


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
    """One stream's marks (module docstring), fed in ledger order with their book names."""

    marks: dict[str, MarkSummary] = field(default_factory=dict)
    order: list[tuple[tuple[tuple[int, int], int], str]] = field(default_factory=list)  # (key, name), sorted
    worst: str | None = None
    not_honoured: int = 0
    span: tuple[int, int] | None = None

    def add(self, name: str, event_id: int, ev: RedactionEvent) -> None:
        mark = self.marks.get(name)
        if mark is None:
            mark = self.marks[name] = MarkSummary.first(event_id, ev)
            bisect.insort(self.order, (mark.key, name))
            self.not_honoured += not mark.honoured
        else:
            honoured = mark.honoured
            mark.add(ev)
            self.not_honoured += honoured and not mark.honoured
        if self.worst is None or self._before(name, self.worst):
            self.worst = name
        sp = ev.span()
        if sp is not None:
            self.span = widen(self.span, sp)

    def _before(self, a: str, b: str) -> bool:
        """Whether mark ``a`` is worse than ``b``: a larger leakage, or the same and sorted first."""
        ma, mb = self.marks[a], self.marks[b]
        return ma.total > mb.total or (ma.total == mb.total and ma.key < mb.key)

    def names(self) -> list[str]:
        """Every mark's name, in mark order."""
        return [name for _, name in self.order]

    def latest(self, limit: int | None) -> list[str]:
        """The last ``limit`` marks in mark order (None: all)."""
        rows = self.order if limit is None else self.order[max(0, len(self.order) - limit):]
        return [name for _, name in rows]
