"""Findings of an adversarial privacy review of the batched intake and the sampling kernel (each
test failed before its fix and states the property): a group of steps decided in one kernel call
fails closed from the drift alarm on, like frame by frame (privatizer._settle_closed); the kernel
refuses more states than int8 carries; frames without ``ts`` taken together are a step each.
Independent checks only."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from streamguard.config import Settings
from streamguard.sampling import CsprngSource, apply_redaction, thresholds
from streamguard.stream.redaction_runtime import RedactionRuntime
from streamguard.stream.runtimes import make_runtime
from streamguard.sampling import bit_source

LABELS = ["lo", "hi"]
T0 = 1.7e9
NOW = T0 + 1e6


# -- 1. the kernel with more than 128 states ----------------------------------------------------
def test_a_state_that_must_be_redacted_is_never_released_with_many_states() -> None:
    """apply_redaction promises: out[i] = REDACTED with probability thr[index[i], states[i]]/2⁶³,
    else states[i], and a ValueError for a state outside 0..k−1. With k = 200 states and int64
    input, state 150 passes the range check, is narrowed to int8 (−106), and the numba kernel
    reads its threshold at a wrapped offset (index·k − 106: before the table) — the state that must
    be redacted with probability 1 is 'released' as the value −106. The numpy reference refuses
    the same input. Either refuse or redact; never release."""
    k = 200
    rows = np.zeros((1, k))
    rows[0, 150] = 1.0  # state 150: always redacted
    states = np.full(64, 150, dtype=np.int64)
    try:
        out = apply_redaction(states, thresholds(rows), np.zeros(64, dtype=np.int64), CsprngSource())
    except ValueError:
        return  # refusing is fine
    assert np.all(out == -1), np.unique(out)


# -- 2. the drift alarm inside a batch ----------------------------------------------------------
def _runtime(tmp_path: Path) -> RedactionRuntime:
    s = Settings(device="d", topic_base="b", broker={"host": "127.0.0.1", "port": 1},
                 outbox={"path": tmp_path / "o.sqlite"},
                 streams=[{"name": "s", "labels": LABELS, "model": {"alpha": 0.05, "beta": 0.3}, "epsilon": 1.0,
                           "design": "exact", "source": "mqtt", "drift_guard": True, "delay": 2}],
                 deterministic_seed=11)
    rt = make_runtime(s, s.streams[0], bit_source(11, 0))
    assert isinstance(rt, RedactionRuntime) and rt.drift is not None
    rt.drift.check_every = 16  # (the timing of the marks below is set for a test every 16 transitions)
    return rt


def _frames(n: int) -> list[dict[str, object]]:
    """The world alternates lo, hi, lo, … (far outside the model, so the guard fires after 16 observed
    transitions); a private flag every 46 steps from step 23 on, so that the first mark's window
    (18..28 under this plan) starts just after the release (16) that makes the alarm fire."""
    out: list[dict[str, object]] = []
    for i in range(n):
        f: dict[str, object] = {"value": LABELS[i % 2], "ts": T0 + i}
        if i % 46 == 23:
            f["private"] = True
        out.append(f)
    return out


def _after_alarm_not_closed(rt: RedactionRuntime, feed) -> list[tuple[int, tuple[float, ...]]]:  # type: ignore[no-untyped-def]
    """Records decided after the release that made the drift alarm fire, lying in a mark's window,
    whose row is not fully redacted (the product says: from the alarm on, marks' windows are fully
    redacted)."""
    assert rt.drift is not None
    fired: list[int] = []
    inner = rt.drift.released

    def released(phys, ts, state, row):  # type: ignore[no-untyped-def]
        hit = inner(phys, ts, state, row)
        if hit:
            fired.append(phys)
        return hit

    rt.drift.released = released  # type: ignore[method-assign]
    releases = feed(rt) + rt.drain()
    assert fired, "the alarm must fire on this world"
    order = [r.phys for r in releases]
    after = releases[order.index(fired[0]) + 1:]
    marks = [*rt.core.finished, *rt.core._marks]
    windows = [(m.phys - m.left.shape[0], m.phys + m.right.shape[0]) for m in marks]
    return [(r.phys, r.row) for r in after
            if any(lo <= r.phys <= hi for lo, hi in windows) and r.row != (1.0, 1.0)]


def test_frame_by_frame_the_alarm_closes_every_later_decision(tmp_path: Path) -> None:
    """Control: one frame at a time, every record decided after the alarm in a mark's window is
    fully redacted."""
    frames = _frames(600)
    bad = _after_alarm_not_closed(_runtime(tmp_path), lambda rt: [r for f in frames
                                                                 for r in rt.on_message(json.dumps(f).encode(), NOW)])
    assert bad == []


def test_a_batch_fails_closed_from_the_alarm_on(tmp_path: Path) -> None:
    """The same frames in lists of 100 (RedactionRuntime._on_batch decides DECIDE_EVERY steps in
    one kernel call): the alarm fires on one release of the call, but the call's later records were
    already drawn with the marks' open rows and are published — not fully redacted, although the
    docstring says deciding a batch together 'never' redacts less than frame by frame, and the
    daemon logs 'marks' windows are now fully redacted'."""
    frames = _frames(600)
    lists = [json.dumps(frames[i:i + 100]).encode() for i in range(0, 600, 100)]
    bad = _after_alarm_not_closed(_runtime(tmp_path), lambda rt: [r for m in lists for r in rt.on_message(m, NOW)])
    assert bad == [], f"{len(bad)} records in marks' windows decided after the alarm with open rows: {bad[:5]}"


# -- 3. frames without ts taken together ---------------------------------------------------------
def _plain_runtime(tmp_path: Path) -> RedactionRuntime:
    s = Settings(device="d", topic_base="b", broker={"host": "127.0.0.1", "port": 1},
                 outbox={"path": tmp_path / "o.sqlite"},
                 streams=[{"name": "s", "labels": LABELS, "model": {"alpha": 0.1, "beta": 0.2}, "epsilon": 1.0,
                           "design": "exact", "source": "mqtt"}],
                 deterministic_seed=3)
    rt = make_runtime(s, s.streams[0], bit_source(3, 0))
    assert isinstance(rt, RedactionRuntime)
    return rt


@pytest.mark.parametrize("together", ["group", "list"])
def test_frames_without_ts_taken_together_are_one_step_each(tmp_path: Path, together: str) -> None:
    """A frame without ``ts`` is stamped with the daemon's clock. One at a time, three such frames
    are three steps. Taken together — raw messages the transport groups (Daemon.input →
    handle_frame(name, frames) → on_messages(messages, now)) or the elements of a JSON list — they
    all get the *same* ``now``, so the second and third are counted as duplicates of the first and
    their readings are dropped (the private flag of the third lands on the first's step). Not a
    leak (the flag marks a held step, fail closed), but readings are lost and the published steps no
    longer correspond to the sensor's steps, only because the daemon was busy."""
    frames = [b'{"value": "hi"}', b'{"value": "lo"}', b'{"value": "hi", "private": true}']
    one = _plain_runtime(tmp_path / "one")
    for i, f in enumerate(frames):
        one.on_message(f, NOW + i * 1e-3)
    assert one.counters.accepted == 3 and one.counters.duplicates == 0  # the reference: three steps
    rt = _plain_runtime(tmp_path / "together")
    if together == "group":
        rt.on_messages(frames, NOW)
    else:
        rt.on_message(b"[" + b",".join(frames) + b"]", NOW)
    assert (rt.counters.accepted, rt.counters.duplicates) == (3, 0)
