"""Summary checkpoints (ledger/checkpoint.py): a start from the checkpoint and the events after it
gives exactly the state a replay of every event gives, and a checkpoint that does not match the
events is never used.

The oracle is the full replay of the same file with its checkpoint deleted. Histories are random
(seeded): two streams, aggregates admitted under a budget (some refused), redaction marks with
repeats, unknown positions and infinite leakages, channel ranges with exact ldp_x sums, drift
events; checkpoints are taken every few events (``CHECKPOINT_EVERY`` made small) and at random
points, so marks frozen into a table receive later events.
"""

from __future__ import annotations

import errno
import logging
import math
import random
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from ledger_replay import alive

from streamguard.model.chain import MarkovChain
from streamguard.ledger import checkpoint
from streamguard.ledger.events import (AggregateEvent, ChannelClaim, ChannelEvent, DriftEvent, Event, RedactionEvent)
from streamguard.ledger.mark_history import MarkSummary
from streamguard.ledger.odometer import odometer
from streamguard.ledger.store import BudgetExceeded, Ledger, LedgerCorrupt
from streamguard.quilt import QuiltModel, sigma_inf

MODEL = QuiltModel(MarkovChain([[0.9, 0.1], [0.2, 0.8]]), "stat")
SIGMA = sigma_inf(MODEL, 1.0).sigma * (1 + 1e-9)
STREAMS = ("s", "t")


def _event(rng: random.Random, n: int) -> Event:
    stream, kind = rng.choice(STREAMS), rng.random()
    if kind < 0.2:
        lo = rng.randrange(0, 200)
        return AggregateEvent(device="d", stream=stream, time=1.0, kind="count", lo=lo, hi=lo + rng.randint(0, 9),
                              lipschitz=1.0, beta=SIGMA, sigma=SIGMA, epsilon=1.0, model=MODEL.identifier,
                              mode=MODEL.mode, witness={"a": 9, "b": 9}, t_independent=True, sampler="csprng",
                              deterministic=False)
    if kind < 0.3:
        lo = rng.randrange(0, 300)
        return ChannelEvent(device="d", stream=stream, time=1.0, channel=rng.choice(["rr:eps=0.1", "rr:eps=0.2"]),
                            lo=lo, hi=lo + rng.randint(0, 20),
                            claims=(ChannelClaim("ldp_x", rng.choice([0.1, 0.2, 0.3])), ChannelClaim("alip_l", 0.25)),
                            stream_leakage=rng.choice([None, 0.75, math.inf]), model="c1")
    if kind < 0.33:
        return DriftEvent(device="d", stream=stream, time=float(n), raised=rng.random() < 0.5, model="m",
                          transitions=n, false_alarm=0.01, reason=f"drift {n}")
    if kind < 0.38:  # position unknown: never honoured, +inf
        return RedactionEvent(device="d", stream=stream, time=1.0, position=None, seq=rng.choice([None, rng.randint(0, 30)]),
                              plan="3R-optimal", epsilon=1.0, left=math.inf, right=0.0, total=math.inf, honoured=False,
                              reason="position unknown")
    p = rng.randrange(0, 120)
    left, right = rng.choice([0.25, 0.5]), rng.choice([0.25, 0.5, 0.75])
    total = rng.choice([left, right, max(left, right)])
    honoured = total <= 0.6 and rng.random() < 0.9
    return RedactionEvent(device="d", stream=stream, time=1.0, position=p, seq=p + 1, plan=rng.choice(["3R-optimal", "late"]),
                          epsilon=1.0, left=left, right=right, total=total, honoured=honoured,
                          reason=None if honoured else rng.choice([None, "late: left neighbours published"]),
                          lo=max(0, p - rng.randint(0, 3)), hi=p + rng.randint(0, 3))


def _record(led: Ledger, rng: random.Random, count: int, *, saves: float = 0.05) -> None:
    """Record ``count`` random events (some through the budget filter), checkpointing now and then."""
    for n in range(count):
        ev = _event(rng, n)
        try:
            if isinstance(ev, AggregateEvent):
                led.admit(ev, rng.choice([1e9, 3.0]), model=MODEL)
            elif isinstance(ev, DriftEvent) or rng.random() < 0.5:
                led.commit(ev, model=None)
            else:
                led.admit(ev, rng.choice([1e9, 0.6]))
        except BudgetExceeded:
            pass
        if rng.random() < saves:
            assert led.save_summaries()


def figures(led: Ledger) -> dict[str, Any]:
    """Everything a start restores, as the odometer, the export and the budget filter state it."""
    out: dict[str, Any] = {"head": led.head, "declared": led.export()["declared"], "streams": led.streams()}
    for d, s in led.streams():
        book = led.book(d, s)
        probes = [RedactionEvent(device=d, stream=s, time=1.0, position=p, seq=p, plan="3R-optimal", epsilon=1.0,
                                 left=0.3, right=0.3, total=0.3, honoured=True) for p in (0, 7, 50, 119, 500)]
        out[f"{d}/{s}"] = {
            "odometer": odometer(led, d, s, limit=None), "latest": odometer(led, d, s, limit=3),
            "refusals": [r.id for r in led.refusals(d, s)], "budgets": led.budgets(d, s),
            "drift": book.drift, "excess": [book.excess(p, b) for p in probes for b in (0.25, 0.4, 1.0)],
            "names": book.marks.names(), "worst": book.marks.worst, "span": book.marks.span}
    return out


def full_replay(path: Path, tmp: Path) -> dict[str, Any]:
    """The figures of a replay of every event (a copy of the file without its checkpoint)."""
    copy = tmp / "full.db"
    for suffix in ("", "-wal"):
        if Path(f"{path}{suffix}").exists():
            shutil.copy(f"{path}{suffix}", f"{copy}{suffix}")
    assert not checkpoint.path_of(str(copy)).exists()
    with Ledger.open(copy, readonly=True) as led:
        return figures(led)


def _upto(path: Path) -> int:
    row = checkpoint.read(checkpoint.path_of(str(path)))
    return 0 if row is None else row[0]


@pytest.fixture
def every(monkeypatch: pytest.MonkeyPatch) -> int:
    """Checkpoints every 17 events."""
    monkeypatch.setattr(checkpoint, "CHECKPOINT_EVERY", 17)
    return 17


@pytest.mark.parametrize("seed", range(4))
def test_a_start_from_the_checkpoint_equals_a_full_replay(tmp_path: Path, seed: int, every: int,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    rng = random.Random(seed)
    path = tmp_path / "l.db"
    with Ledger.open(path) as led:
        _record(led, rng, 160)
        live = figures(led)
    assert _upto(path) == live["head"][0]  # (the clean close covered every event)
    with Ledger.open(path) as led:  # all from the checkpoint
        assert figures(led) == live
        _record(led, rng, 60)  # marks frozen into the table receive further events
        live = figures(led)
    assert full_replay(path, tmp_path) == live
    with Ledger.open(path, readonly=True) as led:
        assert figures(led) == live
    assert "checkpoint not used" not in caplog.text


def test_a_crash_after_the_checkpoint_replays_the_events_after_it(tmp_path: Path, every: int) -> None:
    rng = random.Random(7)
    path = tmp_path / "l.db"
    led = Ledger.open(path)
    _record(led, rng, 100, saves=0.0)
    led.save_summaries()
    _record(led, rng, every - 1, saves=0.0)  # written, not yet checkpointed
    live = figures(led)
    led._db.close()  # a crash: no checkpoint at close
    assert 0 < _upto(path) < live["head"][0]
    with Ledger.open(path) as again:
        assert figures(again) == live
    assert full_replay(path, tmp_path) == live


def test_a_failed_checkpoint_changes_nothing_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "l.db"
    with Ledger.open(path) as led:
        _record(led, random.Random(3), 40, saves=0.0)
        assert led.save_summaries()
        covered = led.head[0]

        def full(*_: Any) -> Any:
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(checkpoint, "write_private", full)
        _record(led, random.Random(4), 30, saves=0.0)
        with caplog.at_level(logging.WARNING):
            assert not led.save_summaries()
        assert "checkpoint not written ([Errno 28] No space left on device)" in caplog.text
        live = figures(led)
    assert _upto(path) == covered  # (nor at the close)
    monkeypatch.undo()
    with Ledger.open(path, readonly=True) as led:
        assert figures(led) == live


def _tamper(path: Path, redigest: bool = False, **changes: Any) -> None:
    """Change fields of the checkpoint (a function of the old value each) and write it back."""
    where = checkpoint.path_of(str(path))
    row = checkpoint.read(where)
    assert row is not None
    fields = dict(zip(("upto", "head", "refusals", "state", "marks", "digest"), row))
    fields["marks"] = bytes(fields["marks"])
    for name, change in changes.items():
        fields[name] = change(fields[name])
    if redigest:  # someone who recomputes the checkpoint's digest
        fields["digest"] = checkpoint._digest(*(fields[k] for k in ("upto", "head", "refusals", "state", "marks")))
    checkpoint.write(where, tuple(fields.values()))  # type: ignore[arg-type]


@pytest.mark.parametrize("edit", ["state", "marks", "head", "upto", "truncated", "derived"])
def test_a_checkpoint_that_does_not_match_is_not_used(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                     edit: str) -> None:
    path = tmp_path / "l.db"
    with Ledger.open(path) as led:
        _record(led, random.Random(11), 120, saves=0.0)
        live = figures(led)
    if edit == "state":  # the count of marks not honoured changed in the JSON: the digest no longer matches
        _tamper(path, state=lambda s: s.replace('"not_honoured":', '"not_honoured":1'))
    elif edit == "marks":  # a mark's leakage in the packed table changed from 0.5 to 0.25
        _tamper(path, marks=lambda m: m.replace(b"\x00\x00\xe0\x3f", b"\x00\x00\xd0\x3f", 1) if m.count(b"\xe0\x3f")
                else pytest.fail("no 0.5 in the table"))
    elif edit == "head":  # a chain head that is not the last event's (digest recomputed; no event after it)
        _tamper(path, redigest=True, head=lambda _: "0" * 63 + "1")
    elif edit == "upto":  # a stale checkpoint claiming to cover one event less (digest recomputed)
        _tamper(path, redigest=True, upto=lambda u: u - 1)
    elif edit == "truncated":  # a write cut short (a power loss before the data reached the disk)
        where = checkpoint.path_of(str(path))
        where.write_bytes(where.read_bytes()[:-100])
    else:  # the accountants it restores (digest recomputed) disagree with the derived state
        _tamper(path, redigest=True, state=lambda s: s.replace(']],"version"', '],[99999,99999,0.5]],"version"'))
    with caplog.at_level(logging.WARNING), Ledger.open(path) as led:
        assert figures(led) == live
    assert "checkpoint not used" in caplog.text and "replaying every event" in caplog.text


def test_a_tampered_event_after_the_checkpoint_does_not_open(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    led = Ledger.open(path)
    _record(led, random.Random(5), 30, saves=0.0)
    led.save_summaries()
    led.commit(RedactionEvent(device="d", stream="s", time=1.0, position=500, seq=500, plan="3R-optimal", epsilon=1.0,
                              left=0.5, right=0.5, total=0.5, honoured=True))
    last = led.head[0]
    led._db.close()
    db = sqlite3.connect(path)
    db.execute("UPDATE events SET body = replace(body, '\"total\":0.5', '\"total\":0.1') WHERE id = ?", (last,))
    db.commit()
    db.close()
    with pytest.raises(LedgerCorrupt, match=f"event {last}: digest"):
        Ledger.open(path)


def test_a_start_from_the_checkpoint_keeps_no_mark_object(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    with Ledger.open(path) as led:
        led.commit_all([RedactionEvent(device="d", stream="s", time=1.0, position=p, seq=p, plan="3R-optimal",
                                       epsilon=1.0, left=0.5, right=0.5, total=0.5, honoured=True) for p in range(3000)])
        assert alive(MarkSummary) >= 3000  # live until the checkpoint at the close freezes them
    assert checkpoint.path_of(str(path)).stat().st_mode & 0o777 == 0o600  # (it dates the private marks)
    with Ledger.open(path, readonly=True) as led:
        assert alive(MarkSummary) == 0 and alive(RedactionEvent) == 0
        assert len(led.book("d", "s").marks) == 3000
        assert led.book("d", "s").mark_leakage("2999") == 0.5
