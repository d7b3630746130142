"""Issue 13, clocks: timestamps are checked against the daemon's clock with a small allowance
(records.MAX_CLOCK_AHEAD), and batch ``privatize`` works on historical data (no clock)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from streamguard.cli import main
from streamguard.config import Settings
from streamguard.sampling import bit_source
from streamguard.frames.records import MAX_CLOCK_AHEAD
from streamguard.stream.runtimes import make_runtime

LABELS = ("off", "on")


def _runtime(tmp_path: Path, **stream: object):
    s = Settings(device="clk", outbox={"path": tmp_path / "o.sqlite"},
                 streams=[{"name": "s", "labels": list(LABELS), "source": "stdin", "epsilon": 1.0,
                           "model": {"alpha": 0.1, "beta": 0.2}, **stream}])
    return make_runtime(s, s.streams[0], bit_source(None, 0))


def _frame(ts: float | None, value: str = "on") -> bytes:
    return json.dumps({"value": value, **({} if ts is None else {"ts": ts})}).encode()


def test_a_frame_an_hour_ahead_does_not_block_its_stream(tmp_path: Path) -> None:
    """Before: a frame stamped an hour ahead was accepted, and every later frame was "out of order"
    for ~58 minutes. Now it is refused (bad-ts), and the next frames on time are accepted."""
    rt = _runtime(tmp_path)
    now = time.time()
    for i in range(3):
        rt.on_frame(_frame(now - 10 + i), now)
    _, rejection = rt.on_frame(_frame(now + 3600), now)
    assert rejection is not None and rejection.reason == "bad-ts"
    for i in range(5):
        _, rejection = rt.on_frame(_frame(now + 1 + i), now + 1 + i)
        assert rejection is None
    assert rt.counters.accepted == 8 and dict(rt.counters.rejected) == {"bad-ts": 1}


def test_the_allowance_is_small_and_holds_back_at_most_that_long(tmp_path: Path) -> None:
    """A frame within the allowance is accepted; it holds back earlier-stamped frames only until the
    clock passes it, which is at most MAX_CLOCK_AHEAD seconds."""
    assert MAX_CLOCK_AHEAD <= 60
    rt = _runtime(tmp_path)
    now = time.time()
    assert rt.on_frame(_frame(now + MAX_CLOCK_AHEAD - 1), now)[1] is None
    assert rt.on_frame(_frame(now + 1), now + 1)[1].reason == "ts-out-of-order"  # type: ignore[union-attr]
    later = now + MAX_CLOCK_AHEAD
    assert rt.on_frame(_frame(later), later)[1] is None
    assert rt.on_frame(_frame(now + 2 * MAX_CLOCK_AHEAD + 1), now)[1].reason == "bad-ts"  # type: ignore[union-attr]


def test_batch_privatize_takes_historical_and_future_data_and_frames_without_ts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """privatize has no clock: frames from 2001 and from 2100 are accepted in order; a frame
    without ts in the middle is a record with ``ts`` null and does not make the later historical
    frames "out of order" (before: it was stamped with the current time and they were all refused)."""
    import io

    conf = tmp_path / "c.toml"
    conf.write_text(f"""device = "clk"
[outbox]
path = "{tmp_path / 'o.sqlite'}"
[[streams]]
name = "s"
labels = ["off", "on"]
source = "stdin"
epsilon = 1.0
[streams.model]
alpha = 0.1
beta = 0.2
""")
    old, future = 1.0e9, 4.1e9  # 2001, 2099
    ts = [old + i for i in range(10)] + [None] + [old + 10 + i for i in range(10)] + [future + i for i in range(5)]
    lines = b"".join(_frame(t, LABELS[i % 2]) + b"\n" for i, t in enumerate(ts))
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(lines)))
    assert main(["privatize", "--config", str(conf)]) == 0
    out, err = capsys.readouterr()
    recs = [json.loads(line) for line in out.splitlines()]
    assert [r["seq"] for r in recs] == list(range(len(ts)))
    assert [r["ts"] for r in recs] == ts
    assert f"{len(ts)} accepted" in err and "rejected: none" in err


def test_batch_frames_without_ts_are_private_under_a_schedule(tmp_path: Path) -> None:
    """With no clock, a frame without ts has an unknown time: under a private schedule it is
    treated as inside it (fail closed), never as outside."""
    rt = _runtime(tmp_path, schedule=[{"start": "00:00", "end": "00:01"}])
    rt.wall_clock = False
    releases = []
    for i in range(30):
        releases += rt.on_frame(_frame(None if i == 15 else 1.0e9 + 7200 + i), time.time())[0]
    releases += rt.drain()
    by_seq = {r.seq: r for r in releases}
    assert by_seq[15].state is None  # withheld
    assert rt.counters.accepted == 30


LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")


@pytest.mark.skipif(not LIBFAKETIME.exists(), reason="libfaketime not installed (apt-get install faketime)")
async def test_wall_clock_steps_do_not_stop_the_resampled_grid(mosquitto: Any, tmp_path: Path) -> None:
    """Issue 28: the daemon as a process under libfaketime (the wall clock only: the monotonic clock
    is left alone), reading a mapped sensor resampled every 0.2 s. Its wall clock is stepped back by
    an hour, then forward by an hour again. Before: no step for the hour after the step back, with
    no counter and no log line. Now the grid goes on by the monotonic clock through both steps,
    each counted (``clock_steps`` in the ingest status) and logged in one line."""
    import asyncio
    import contextlib
    import os
    import subprocess
    import sys

    from daemon_harness import Spy, running, stop_daemon
    from ingest_harness import retain

    offset = tmp_path / "faketime"
    offset.write_text("+0\n")
    conf = tmp_path / "c.toml"
    conf.write_text(f"""device = "fk"
topic_base = "sg"
deterministic_seed = 7
log_level = "WARNING"
[broker]
host = "127.0.0.1"
port = {mosquitto.port}
[outbox]
path = "{tmp_path / 'o.sqlite'}"
[[streams]]
name = "s"
labels = ["vacant", "occupied"]
epsilon = 1.0
delay = 0
design = "exact"
sample_period = 0.2
[streams.model]
alpha = 0.3
beta = 0.4
[streams.ingest]
preset = "zigbee2mqtt"
device = "hall"
field = "occupancy"
retained = true
values = {{ "true" = "occupied", "false" = "vacant" }}
""")
    cfg = mosquitto.broker_config()
    await retain(cfg, [("zigbee2mqtt/hall", '{"occupancy": true}')])
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMGUARD_")} | {
        "LD_PRELOAD": str(LIBFAKETIME), "FAKETIME_TIMESTAMP_FILE": str(offset), "FAKETIME_CACHE_DURATION": "0",
        "FAKETIME_NO_CACHE": "1", "DONT_FAKE_MONOTONIC": "1"}
    spy = Spy(cfg, "sg/fk/s/#")
    data = "sg/fk/s/data"

    def steps() -> int:
        return len(spy.seqs(data))

    async with running(spy.run()):
        await asyncio.wait_for(spy.subscribed.wait(), 10)
        p = subprocess.Popen([sys.executable, "-m", "streamguard.cli", "run", "--config", str(conf)],
                             stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        try:
            await spy.wait_until(lambda: steps() >= 5, 60, "the first steps")
            counted = []
            for shift in ("-3600", "+0"):  # back an hour, then forward an hour
                offset.write_text(shift + "\n")
                await asyncio.sleep(0.5)
                before, t0 = steps(), time.monotonic()
                # 10 more steps (2 s of 0.2 s slots when idle): a grid stalled by the step gives none
                # for an hour; the 30 s bound only absorbs a loaded machine
                with contextlib.suppress(AssertionError):
                    await spy.wait_until(lambda: steps() >= before + 10, 30, "steps after the clock step")
                counted.append((steps() - before, round(time.monotonic() - t0, 1)))
            await asyncio.sleep(2.5)  # (a privacy status refresh)
        finally:
            stop_daemon(p)
    err = p.stderr.read().decode() if p.stderr else ""
    ingest = json.loads(spy.on("/privacy")[-1].payload)["ingest"]
    print(f"(steps, seconds) after the wall clock stepped back 1 h, then forward 1 h: {counted}; "
          f"clock_steps {ingest.get('clock_steps')}")
    assert all(n >= 10 for n, _ in counted), (counted, err)
    assert ingest.get("clock_steps") == 2, ingest
    assert ingest["missed_ticks"] < 100, ingest  # (the step forward is no hour of missed ticks: 18,000)
    assert err.count("wall clock stepped back") == 1 and err.count("wall clock stepped forward") == 1, err

    # a restart after the wall clock stepped back: the stored steps lie an hour ahead of it; the
    # grid goes on after them (before: no new step until the wall clock passed the newest one)
    offset.write_text("-3600\n")
    async with running(spy.run()):
        await asyncio.wait_for(spy.subscribed.wait(), 10)
        before = len(spy.seqs(data))
        p = subprocess.Popen([sys.executable, "-m", "streamguard.cli", "run", "--config", str(conf)],
                             stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        try:
            with contextlib.suppress(AssertionError):
                await spy.wait_until(lambda: len(spy.seqs(data)) >= before + 10, 30, "steps after the restart")
        finally:
            stop_daemon(p)
    after_restart = len(spy.seqs(data)) - before
    print(f"steps after a restart an hour behind the stored ones: {after_restart}")
    assert after_restart >= 10, p.stderr.read().decode() if p.stderr else ""


def test_the_steady_clock_goes_on_through_steps_both_ways() -> None:
    """The clock behind the grid, on injected clocks: it follows the wall clock while nothing
    steps; stepped back 1 h it goes on with the monotonic clock (never back); stepped forward it
    follows the wall clock again; each step is counted once, slewing (within STEP_TOLERANCE) is not."""
    from streamguard.ingest.grid import STEP_TOLERANCE, SteadyClock

    wall, mono = [1.8e9], [100.0]
    c = SteadyClock(wall=lambda: wall[0], mono=lambda: mono[0])

    def advance(dt: float, step: float = 0.0) -> float:
        mono[0] += dt
        wall[0] += dt + step
        return c()

    assert advance(1.0) == 1.8e9 + 1.0
    assert advance(1.0, STEP_TOLERANCE / 2) == wall[0] and c.steps == 0  # (a slew is no step)
    t = advance(0.5, -3600.0)  # stepped back an hour
    assert c.steps == 1 and t == 1.8e9 + 2.5 + STEP_TOLERANCE / 2 and t > wall[0]
    assert advance(2.0) == t + 2.0 and c.steps == 1  # the monotonic clock's pace, counted once
    t = advance(1.0, 7200.0)  # forward: the wall clock is ahead again
    assert c.steps == 2 and t == wall[0]
    c.not_before(wall[0] + 600.0)  # a restart's stored steps ahead of the wall clock
    assert advance(1.0) == t + 601.0 and c.steps == 2
