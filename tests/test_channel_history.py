"""The book keeps a summary of a stream's channel releases that does not grow with them
(ledger/channel_history.py), and states exactly the channel rules of ledger/book.py.

The oracle here applies the rules to the list of recorded events by brute force: Σ ε of the
``ldp_x`` claims record by record, every pair of ranges for the other notions and for "released
twice", and the stream-leakage conditions in their stated order. ε values are dyadic, so sums are
exact in any order. Histories are random (seeded): a daemon-like stream (consecutive ranges, one
channel), and mixed ones with overlaps, gaps, several channels and models, missing stream
leakage and ε = 0 or +∞ claims. The budget filter's decision on a further range is checked
against the oracle too.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from ledger_replay import alive, record

from streamguard.support.json_numbers import json_number
from streamguard.ledger.book import Guarantee
from streamguard.ledger.channel_history import KEEP, Coverage
from streamguard.ledger.events import ChannelClaim, ChannelEvent
from streamguard.ledger.odometer import odometer
from streamguard.ledger.store import BudgetExceeded, Ledger


def _event(rng: random.Random, lo: int, daemon: bool) -> ChannelEvent:
    if daemon:
        return ChannelEvent(device="d", stream="s", time=1.0, channel="rr:eps=0.5", lo=lo, hi=lo + 63,
                            claims=(ChannelClaim("ldp_x", 0.5), ChannelClaim("alip_l", 0.25)),
                            stream_leakage=0.75, model="c1")
    claims = []
    if rng.random() < 0.8:
        claims.append(ChannelClaim("ldp_x", rng.choice([0.0, 0.25, 0.5, 1.0, 1.0, math.inf if rng.random() < 0.05
                                                        else 0.125])))
    for notion in ("ldp_s", "alip_l"):
        if rng.random() < 0.4 or not claims:
            claims.append(ChannelClaim(notion, rng.choice([0.25, 0.5, 2.0])))
    leak = rng.choice([None, 0.5, 0.75, 0.75, 0.75])
    return ChannelEvent(device="d", stream="s", time=1.0, channel=rng.choice(["rr:eps=0.5", "rr:eps=0.5", "watchdog"]),
                        lo=lo, hi=lo + rng.randint(0, 40), claims=tuple(claims), stream_leakage=leak,
                        model=None if leak is None else rng.choice(["c1", "c1", "c1", "c2"]))


def _history(seed: int, n: int) -> list[ChannelEvent]:
    rng = random.Random(seed)
    daemon = seed % 3 == 0
    out, pos = [], 0
    for _ in range(n):
        ev = _event(rng, pos, daemon)
        out.append(ev)
        pos = ev.hi + 1 + (0 if daemon else rng.choice([0, 0, 0, 5, -3 if ev.hi - ev.lo > 4 else 0]))
    return out


def _meet(a: ChannelEvent, b: ChannelEvent) -> bool:
    return a.lo <= b.hi and b.lo <= a.hi


def _guarantees(events: list[ChannelEvent]) -> list[tuple[str, float | None]]:
    """The channel rules (ledger/book.py) on the list, in the order the book states them."""
    out: list[tuple[str, float | None]] = []
    per_record: dict[int, float] = {}
    ldp_claimed = False
    for ev in events:
        for c in ev.claims:
            if c.notion == "ldp_x":
                ldp_claimed = True
                for j in range(ev.lo, ev.hi + 1):
                    per_record[j] = per_record.get(j, 0.0) + c.epsilon
    if ldp_claimed:
        out.append(("channel:claim:ldp_x", max(per_record.values(), default=0.0)))
    notions = sorted({c.notion for ev in events for c in ev.claims if c.notion != "ldp_x"})
    for notion in notions:
        with_it = [(ev, c) for ev in events for c in ev.claims if c.notion == notion]
        clash = any(_meet(a, b) for i, (a, _) in enumerate(with_it) for b, _ in with_it[i + 1:])
        out.append((f"channel:claim:{notion}", None if clash else max(c.epsilon for _, c in with_it)))
    if any(ev.stream_leakage is not None for ev in events):
        out.append(("channel:stream_leakage", _leakage(events)[0]))
    return out


def _leakage(events: list[ChannelEvent]) -> tuple[float | None, str | None]:
    stated = [ev.stream_leakage for ev in events]
    if all(s is None for s in stated):
        return None, "no channel release states an exact stream leakage"
    if any(s is None for s in stated):
        return None, "a channel release states no exact stream leakage"
    if len({(ev.channel, ev.model) for ev in events}) > 1:
        return None, "different channels (or models) released records of this stream; no theorem composes them"
    if any(_meet(a, b) for i, a in enumerate(events) for b in events[i + 1:]):
        return None, "some records were released twice; the stated stream leakage covers one release per record"
    return max(s for s in stated if s is not None), None


def _oracle(events: list[ChannelEvent], limit: int | None) -> dict[str, Any]:
    figures = dict(_guarantees(events))
    leak, why = _leakage(events)
    records = [[ev.lo, ev.hi, ev.channel] for ev in events]
    shown = records if limit is None else records[-limit:]
    claims = {k.removeprefix("channel:claim:"): json_number(v) for k, v in figures.items() if k.startswith("channel:claim:")}
    return {"releases": len(events), "covered": [min(ev.lo for ev in events), max(ev.hi for ev in events)],
            "channels": sorted({ev.channel for ev in events}), "claims": claims,
            "stream_leakage": {"epsilon": json_number(leak), "composed": why is None, "reason": why,
                               "models": sorted({ev.model for ev in events if ev.model is not None})},
            "records": shown, "records_truncated": len(shown) < len(records)}


def _section(doc: dict[str, Any]) -> dict[str, Any]:
    got = {k: doc[k] for k in ("releases", "covered", "channels", "stream_leakage", "records", "records_truncated")}
    got["claims"] = {k: v["epsilon"] for k, v in doc["claims"].items()}
    return got


@pytest.mark.parametrize("seed", range(12))
def test_the_summary_states_what_the_events_give(tmp_path: Path, seed: int) -> None:
    events = _history(seed, 120)
    path = tmp_path / "l.db"
    with Ledger.open(path) as led:
        for ev in events:
            led.commit(ev)
        live = odometer(led, "d", "s", limit=None)["channel"]
        live20 = odometer(led, "d", "s", limit=20)["channel"]
        declared = [(g.name, g.value) for g in led.book("d", "s").guarantees()]
    assert _section(live) == _oracle(events, None)
    assert _section(live20) == _oracle(events, 20)
    assert declared == _guarantees(events)
    with Ledger.open(path, readonly=True) as led:
        assert odometer(led, "d", "s", limit=None)["channel"] == live
        assert odometer(led, "d", "s", limit=20)["channel"] == live20
        assert led.events_of("d", "s", "channel") == events


@pytest.mark.parametrize("seed", [1, 2, 4, 5, 7, 8])  # mixed histories (seed % 3 == 0: a daemon stream)
def test_the_budget_filter_decides_as_the_rules_on_the_list(tmp_path: Path, seed: int) -> None:
    """Each further range is admitted iff no channel figure of the list with it exceeds the budget
    ("not composed" counts as +∞); a refused one is not counted."""
    rng = random.Random(1000 + seed)
    admitted: list[ChannelEvent] = []
    with Ledger.open(tmp_path / "l.db") as led:
        for ev in _history(seed, 80):
            budget = rng.choice([1.0, 2.0, 3.0])
            over = next(((name, math.inf if v is None else v) for name, v in _guarantees([*admitted, ev])
                         if (math.inf if v is None else v) > budget), None)
            got = led.book("d", "s").excess(ev, budget)
            assert (None if got is None else (got.name, got.value)) == over
            try:
                led.admit(ev, budget)
                admitted.append(ev)
            except BudgetExceeded:
                assert over is not None
        assert led.events_of("d", "s", "channel") == admitted
    assert admitted and len(admitted) < 80  # both outcomes happened


def test_coverage_finds_every_shared_position() -> None:
    rng = random.Random(7)
    for _ in range(200):
        cover, covered = Coverage(), set()
        for _ in range(rng.randint(1, 12)):
            lo = rng.randint(0, 60)
            hi = lo + rng.randint(0, 8)
            assert cover.meets(lo, hi) == bool(covered & set(range(lo, hi + 1)))
            cover.add(lo, hi)
            covered |= set(range(lo, hi + 1))
        starts, ends = cover._starts, cover._ends
        assert {j for s, e in zip(starts, ends) for j in range(s, e + 1)} == covered
        assert all(e + 1 < s for e, s in zip(ends, starts[1:]))  # disjoint, touching ranges merged


def test_a_daemon_stream_keeps_a_constant_summary(tmp_path: Path) -> None:
    """3,000 consecutive ranges of one channel: one run, one covered range per notion, the latest
    KEEP ranges, and no ChannelEvent alive after a replay."""
    path = tmp_path / "l.db"
    record(path, _history(0, 3000))
    with Ledger.open(path, readonly=True) as led:
        assert alive(ChannelEvent) == 0
        history = led.book("d", "s").channels
        assert history.count == 3000 and len(history.recent) == KEEP
        assert len(history.ldp_runs) == 1 and len(history.cover._starts) == 1
        assert [len(n.cover._starts) for n in history.notions.values()] == [1]
        assert led.book("d", "s").guarantees() == [Guarantee("channel", "channel:claim:ldp_x", 0.5),
                                                    Guarantee("channel", "channel:claim:alip_l", 0.25),
                                                    Guarantee("channel", "channel:stream_leakage", 0.75)]


def test_ldp_x_sums_are_exact_and_reported_rounded_up(tmp_path: Path) -> None:
    """0.3 + 0.2 + 0.1 as floats sums to 0.6 or 0.6000000000000001 depending on the order; the
    exact sum of those three doubles is above the double 0.6, so a budget of 0.6 refuses the third
    claim whatever the order, and the next double up admits it (review of stop 23)."""
    exact = Fraction(0.3) + Fraction(0.2) + Fraction(0.1)
    assert exact > Fraction(0.6)
    up = math.nextafter(0.6, math.inf)
    assert Fraction(up) >= exact
    for order in ([0.3, 0.2, 0.1], [0.1, 0.2, 0.3], [0.2, 0.1, 0.3]):
        with Ledger.open(tmp_path / f"{order}.db") as led:
            for eps in order[:2]:
                led.commit(ChannelEvent(device="d", stream="s", time=1.0, channel=f"c{eps}", lo=0, hi=9,
                                        claims=(ChannelClaim("ldp_x", eps),)))
            last = ChannelEvent(device="d", stream="s", time=1.0, channel="last", lo=5, hi=5,
                                claims=(ChannelClaim("ldp_x", order[2]),))
            with pytest.raises(BudgetExceeded):
                led.admit(last, 0.6)
            led.admit(last, up)
            assert led.book("d", "s").ldp_x_max() == up
