"""The book keeps one small summary per redaction mark and the family's figures as marks change
(ledger/mark_history.py), and states exactly the redaction rule of ledger/book.py.

The oracle here applies the rule to the list of recorded events: group the events by the mark's
name (its position, else ``seq:<seq>``, else the event id), sort the marks by their first event,
take each mark's worst event (the first with the largest total), the largest left and right, the
first event not honoured, and the worst mark (the first in mark order with the largest leakage).
Histories are random (seeded): several events per mark, marks out of order, marks of unknown
position, infinite leakages and ties.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import pytest
from ledger_replay import alive, record

from streamguard.support.json_numbers import json_number
from streamguard.ledger.events import RedactionEvent
from streamguard.ledger.odometer import odometer
from streamguard.ledger.store import BudgetExceeded, Ledger


def _event(rng: random.Random, positions: list[int]) -> RedactionEvent:
    kind = rng.random()
    if kind < 0.1:  # position unknown: never honoured, +inf
        seq = rng.choice([None, rng.randint(0, 50)])
        return RedactionEvent(device="d", stream="s", time=1.0, position=None, seq=seq, plan="3R-optimal", epsilon=1.0,
                              left=math.inf, right=0.0, total=math.inf, honoured=False, reason="position unknown")
    p = rng.choice(positions)
    left, right = rng.choice([0.25, 0.5, 0.5]), rng.choice([0.25, 0.5, 0.75])
    total = rng.choice([left, right, max(left, right), left + right * 0.5])
    eps = rng.choice([0.5, 1.0])
    honoured = total <= eps and rng.random() < 0.9
    return RedactionEvent(device="d", stream="s", time=1.0, position=p, seq=p + 1, plan=rng.choice(["3R-optimal", "late"]),
                          epsilon=eps, left=left, right=right, total=total, honoured=honoured,
                          reason=None if honoured else rng.choice([None, "late: left neighbours published"]),
                          lo=max(0, p - rng.randint(0, 3)), hi=p + rng.randint(0, 3))


def _history(seed: int, n: int) -> list[RedactionEvent]:
    rng = random.Random(seed)
    positions = sorted(rng.sample(range(0, 400), 40))
    return [_event(rng, positions) for _ in range(n)]


def _name(ev: RedactionEvent, event_id: int) -> str:
    if ev.position is not None:
        return str(ev.position)
    return f"event:{event_id}" if ev.seq is None else f"seq:{ev.seq}"


def _oracle(events: list[RedactionEvent], limit: int | None) -> dict[str, Any]:
    groups: dict[str, list[tuple[int, RedactionEvent]]] = {}
    for i, ev in enumerate(events, start=1):
        groups.setdefault(_name(ev, i), []).append((i, ev))

    def order(ev: RedactionEvent) -> tuple[int, int]:
        if ev.position is not None:
            return (0, ev.position)
        return (1, ev.seq) if ev.seq is not None else (2, 0)

    names = sorted(groups, key=lambda k: (order(groups[k][0][1]), groups[k][0][0]))
    marks = []
    for name in names:
        evs = [ev for _, ev in groups[name]]
        worst = evs[[ev.total for ev in evs].index(max(ev.total for ev in evs))]
        bad = [ev for ev in evs if not ev.honoured]
        marks.append({"mark": name, "position": worst.position, "seq": worst.seq, "plan": worst.plan,
                      "epsilon": worst.epsilon, "left": json_number(max(ev.left for ev in evs)),
                      "right": json_number(max(ev.right for ev in evs)), "total": json_number(worst.total),
                      "honoured": not bad, "reason": bad[0].reason if bad else None, "events": len(evs)})
    leak = [max(ev.total for _, ev in groups[m["mark"]]) for m in marks]
    top = leak.index(max(leak))
    spans = [(ev.lo, ev.hi) for ev in events if ev.lo is not None]
    return {"epsilon": json_number(leak[top]), "count": len(marks), "not_honoured": sum(not m["honoured"] for m in marks),
            "worst": marks[top], "marks": marks if limit is None else marks[-limit:],
            "marks_truncated": limit is not None and len(marks) > limit,
            "covered": [min(a for a, _ in spans), max(b for _, b in spans)] if spans else None,
            "declared": [(f"redaction:mark:{m['mark']}", x) for m, x in zip(marks, leak)]}


@pytest.mark.parametrize("seed", range(10))
def test_the_summary_states_what_the_events_give(tmp_path: Path, seed: int) -> None:
    events = _history(seed, 150)
    path = tmp_path / "l.db"
    with Ledger.open(path) as led:
        for k in range(0, len(events), 37):
            led.commit_all(events[k:k + 37])
        docs = {limit: odometer(led, "d", "s", limit=limit) for limit in (None, 5, 20)}
        declared = [(g.name, g.value) for g in led.book("d", "s").guarantees()]
        span = led.book("d", "s").span("redaction")
    for limit, doc in docs.items():
        want = _oracle(events, limit)
        got = {k: doc["redaction"][k] for k in ("epsilon", "count", "not_honoured", "worst", "marks", "marks_truncated")}
        assert got == {k: v for k, v in want.items() if k in got}, limit
    assert declared == want["declared"]
    assert list(span or []) == list(want["covered"] or [])
    with Ledger.open(path, readonly=True) as led:
        assert {limit: odometer(led, "d", "s", limit=limit) for limit in (None, 5, 20)} == docs


@pytest.mark.parametrize("seed", range(4))
def test_the_budget_filter_decides_as_the_rule_on_the_list(tmp_path: Path, seed: int) -> None:
    """A mark's further event is admitted iff that mark's leakage (the max over its events with
    the new one) stays within the budget; a refused event is not counted."""
    rng = random.Random(500 + seed)
    admitted: list[RedactionEvent] = []
    with Ledger.open(tmp_path / "l.db") as led:
        for ev in _history(seed, 80):
            budget = rng.choice([0.5, 0.75, 1.0])
            name = _name(ev, len(admitted) + 1) if ev.position is not None or ev.seq is not None else None
            prior = [e.total for i, e in enumerate(admitted, start=1) if name is not None and _name(e, i) == name]
            fits = max([*prior, ev.total]) <= budget
            try:
                led.admit(ev, budget)
                admitted.append(ev)
                assert fits
            except BudgetExceeded:
                assert not fits
        assert led.events_of("d", "s", "redaction") == admitted
        assert len(led.book("d", "s").marks) == len({_name(e, i) for i, e in enumerate(admitted, start=1)})
    assert admitted and len(admitted) < 80


def test_a_replay_keeps_no_mark_event_in_memory(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    record(path, _history(3, 2000))
    with Ledger.open(path, readonly=True) as led:
        assert alive(RedactionEvent) == 0
        assert len(led.book("d", "s").marks)
