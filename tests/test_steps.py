"""What a step is (issue 9 items 6–8): redeliveries, late frames, sample slots, schedule guards and
private requests read from the decoded document — driven through the real runtime, checked
against the rule as the issue states it."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from streamguard.config import ScheduleWindow, Settings
from streamguard.frames.records import StateMap, parse_frame
from streamguard.stream.redaction_runtime import RedactionRuntime
from streamguard.sampling import SeededSource
from streamguard.frames.steps import StepTracker

T0 = 1_700_000_000.0
LABELS = ("lo", "hi")


def runtime(**stream: object) -> RedactionRuntime:
    cfg = {"name": "s", "labels": list(LABELS), "source": "stdin", "model": {"alpha": 0.5, "beta": 0.76},
           "epsilon": 0.37, **stream}
    settings = Settings(device="d", streams=[cfg])
    return RedactionRuntime(settings, settings.streams[0], SeededSource(1))


def frame(t: float, value: str = "lo", **extra: object) -> bytes:
    return json.dumps({"value": value, "ts": t, **extra}).encode()


def test_a_redelivered_frame_is_the_same_step() -> None:
    rt = runtime()
    for i in range(6):
        rt.on_frame(frame(T0 + i), T0 + i)
    rt.on_frame(frame(T0 + 5), T0 + 5.5)  # QoS 1 redelivery: same bytes, same ts
    rt.on_frame(frame(T0 + 6, private=True), T0 + 6)
    assert rt.core.next_phys == 7 and rt.core.next_seq == 7
    assert rt.counters.duplicates == 1 and rt.counters.accepted == 7
    (m,) = [m for m in rt.core._marks if m.seq == 6]
    assert m.phys == 6  # the private reading sits at its true distance from its neighbours


def test_a_redelivery_that_asks_to_be_private_marks_the_step_it_repeats() -> None:
    rt = runtime()
    for i in range(4):
        rt.on_frame(frame(T0 + i), T0 + i)
    rt.on_frame(frame(T0 + 3, private=True), T0 + 4)
    assert [m.phys for m in rt.core._marks] == [3] and rt.core.next_phys == 4


def test_a_late_frame_is_rejected_and_makes_no_step() -> None:
    rt = runtime()
    for i in range(4):
        rt.on_frame(frame(T0 + 10 * i), T0 + 10 * i)
    rt.on_frame(frame(T0 + 15), T0 + 31)  # earlier than the newest step, not one seen
    assert rt.core.next_phys == 4 and rt.counters.rejected["ts-out-of-order"] == 1
    assert rt.counters.accepted + sum(rt.counters.rejected.values()) + rt.counters.duplicates == 5


def test_with_a_sample_period_missing_slots_are_redacted_steps() -> None:
    rt = runtime(sample_period=10.0)
    rt.on_frame(frame(T0), T0)
    rt.on_frame(frame(T0 + 10.4), T0 + 10)
    rt.on_frame(frame(T0 + 40.2), T0 + 40)  # slots 2 and 3 never arrived
    rt.on_frame(frame(T0 + 39.0), T0 + 41)  # slot 4 again (jitter): a redelivery
    assert rt.core.next_phys == 5 and rt.core.next_seq == 3
    assert rt.counters.duplicates == 1
    rt.drain()
    assert rt.core._rows[2] == (1.0, 1.0) and rt.core._rows[3] == (1.0, 1.0)


def test_tracker_caps_missing_slots() -> None:
    tr = StepTracker(1.0, max_missing=5)
    tr.taken(T0, 0)
    step = tr.classify(T0 + 100)
    assert step.new and len(step.missing) == 5


@pytest.mark.parametrize("payload", [
    b'{"\\u0070rivate": true, "value": 5}',       # an escaped key
    b'{"private": true, "private": false, "value": "lo"}',  # a duplicate key, read last-wins by json
    b'{"value": "lo", "meta": {"Private": 1}}',   # nested, other case
    b'{"value": "lo", "x": [{"private": true}]}',  # in a list inside the object
    b'\xff\xfe{"private": true}',                 # not UTF-8: cannot be read, may carry it
    b'{"value": "lo", "private": tru',            # truncated
    b'{"value": "' + b"x" * 20000 + b'"}',        # oversized
])
def test_a_frame_that_may_ask_to_be_private_is_private(payload: bytes) -> None:
    got = parse_frame(payload, StateMap(labels=LABELS), now=T0, last_ts=None)
    assert got.private


@pytest.mark.parametrize("payload", [b'{"value": "xx", "ts": 5}', b'{"value": "lo", "private": false}', b"[1, 2]"])
def test_a_frame_that_cannot_ask_is_not_private(payload: bytes) -> None:
    assert not parse_frame(payload, StateMap(labels=LABELS), now=T0, last_ts=None).private


def test_a_rejected_frame_near_a_schedule_window_is_private() -> None:
    start = dt.datetime.fromtimestamp(T0 + 3600)
    end = start + dt.timedelta(minutes=1)
    window = {"start": start.time().isoformat(timespec="minutes"), "end": end.time().isoformat(timespec="minutes")}
    rt = runtime(schedule=[window], schedule_guard=60.0)
    w0 = dt.datetime.combine(start.date(), ScheduleWindow(**window).start).timestamp()
    rt.on_frame(frame(w0 - 100), w0 - 100)
    rt.on_frame(b'{"value": "xx", "ts": %r}' % (w0 + 10), w0 + 10)  # rejected, its ts in the window
    rt.on_frame(b"not json at all", w0 - 30)  # no usable ts: the daemon's clock is 30 s before it
    rt.on_frame(frame(w0 + 200), w0 + 200)
    rt.on_frame(b'{"value": "xx"}', w0 + 500)  # far from it by the clock: not private
    # (steps 1 and 2 are one mark, a run: consecutive private steps, issue 28)
    assert [p for p in range(rt.core.next_phys) if rt.core.covering(p) is not None] == [1, 2]


def test_after_a_restart_frames_up_to_the_last_step_make_no_step() -> None:
    """The newest step's ts survives a restart (the outbox keeps it): the previous run's last frame
    redelivered is a duplicate, an older one is late, and a newer one is the next step."""
    tr = StepTracker(None, max_missing=8, floor=T0 + 9)
    assert tr.classify(T0 + 9).duplicate and not tr.classify(T0 + 9).new
    late = tr.classify(T0 + 5)
    assert not late.new and not late.duplicate
    assert tr.classify(T0 + 10).new
