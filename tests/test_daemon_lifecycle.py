"""Daemon operations (issue 9, items 5, 10, 11): it always terminates, one daemon per outbox and
per MQTT identity, and no decided record is lost at shutdown.

- The status loop ends when cancelled at the moment its event is set (Python 3.11's ``wait_for``
  swallowed that cancel, and ``run`` with a stdin source hung at end of input); short
  ``streamguard run`` processes with a stdin source always exit; SIGTERM mid-run stops in order.
- A second daemon on the same outbox exits at once with one line naming the holder (status 75);
  a daemon whose client id another streamguard takes over stops with one line (status 75), and
  the other one keeps running; no seq is published twice.
- Under ``overflow = "stop-input"`` with a tiny outbox and frames arriving faster than the
  broker acknowledges, every decided seq is published or still in the outbox after ``stop``,
  and each stream's records reach the subscriber in seq order.

Real processes and a real Mosquitto (tests/brokers.py); every wait is bounded.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from brokers import Broker
from daemon_harness import Spy, daemon_toml, first_occurrences, restored, running

import streamguard.stream.store as store_mod
from streamguard.config import Settings
from streamguard.ingest.stream import IngestHub
from streamguard.stream.daemon import Daemon
from streamguard.stream.outbox import ExclusiveLock, InUse, Outbox
from streamguard.stream.publisher import PublisherStats
from streamguard.stream.status import DaemonStats, Refresh, Status
from streamguard.stream.transport import Message

BASE = "sgl"
DEVICE = "life"
STREAM = "occ"
LABELS = ("vacant", "occupied")
DATA = f"{BASE}/{DEVICE}/{STREAM}/data"
RAW = f"{BASE}/{DEVICE}/{STREAM}/raw"
STATUS = f"{BASE}/{DEVICE}/status"
PRIVACY = f"{BASE}/{DEVICE}/{STREAM}/privacy"
#: A daemon process must exit this soon after its input ended or after SIGTERM (the unit's
#: TimeoutStopSec is 20 s; start-up, numba's cache included, takes a few seconds).
EXIT_WITHIN = 30.0
EX_TEMPFAIL = 75


def write_config(d: Path, port: int, *, source: str = "mqtt", outbox: str = "outbox.sqlite",
                 client_id: str | None = None, device: str = DEVICE) -> Path:
    return daemon_toml(d / f"{outbox}.toml", d / outbox, port, base=BASE, device=device, stream=STREAM,
                       labels=LABELS, source=source, client_id=client_id)


def frames(n: int, t0: float, private: tuple[int, ...] = ()) -> list[bytes]:
    return [json.dumps({"value": LABELS[(i // 3) % 2], "ts": t0 + i, **({"private": True} if i in private else {})}).encode()
            for i in range(n)]


def start(conf: Path, err: Path, *, stdin: Any = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMGUARD_")}
    with open(err, "wb") as f:
        return subprocess.Popen([sys.executable, "-m", "streamguard.cli", "run", "--config", str(conf)],
                                stdin=stdin, stdout=subprocess.DEVNULL, stderr=f, env=env)


def finish(p: subprocess.Popen[bytes], timeout: float = EXIT_WITHIN) -> int:
    """Wait for ``p`` (bounded); kill it and fail if it does not exit in time."""
    try:
        return p.wait(timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(10)
        raise AssertionError(f"the daemon did not exit within {timeout} s") from None


# -- item 5: never hang -------------------------------------------------------------------------
class _NullTransport:
    async def publish(self, topic: str, payload: bytes, qos: int = 1, retain: bool = False) -> None:
        await asyncio.sleep(0)


def test_status_loop_ends_when_cancelled_as_its_event_is_set(tmp_path: Path) -> None:
    """The race of the hang: the status event is set and the loop cancelled in the same loop
    iteration. The loop must end (3.11's wait_for returned the event's result and kept going)."""
    settings = Settings(device=DEVICE, streams=[{"name": STREAM, "labels": list(LABELS), "source": "stdin",
                                                 "model": {"alpha": 0.1, "beta": 0.2}, "epsilon": 1.0}],
                        outbox={"path": tmp_path / "o.sqlite"})

    async def scenario() -> None:
        for _ in range(20):
            # (no stream: the loop never reaches the outbox or the ledger)
            status = Status(settings, {}, DaemonStats(), box=None, ledger=None,  # type: ignore[arg-type]
                            stored_counts={}, delivery=PublisherStats(), inputs=None, ingest=IngestHub(settings),
                            hearings={}, instance="0" * 16, refresh=Refresh())
            task = asyncio.create_task(status.loop(_NullTransport()))  # type: ignore[arg-type]
            await asyncio.sleep(0.01)  # the loop waits for the event
            status.refresh.dirty.set()
            task.cancel()
            done, _ = await asyncio.wait([task], timeout=3.0)
            assert done, "the status loop outlived its cancellation"
            assert task.cancelled()

    asyncio.run(scenario())


def test_short_stdin_runs_always_exit(mosquitto: Broker, tmp_path: Path) -> None:
    """Short runs (10 frames on stdin, two of them private, then end of input), two at a time: each
    exits by itself, status 0, with every frame's record decided and stored. 8 runs by default
    (the hang hit about 1 in 7 before the fix); STREAMGUARD_LIFECYCLE_RUNS=20 for the issue's count."""
    runs = int(os.environ.get("STREAMGUARD_LIFECYCLE_RUNS", "8"))
    data = b"".join(f + b"\n" for f in frames(10, time.time() - 100, private=(3, 7)))

    def one(i: int) -> tuple[int, float, int]:
        d = tmp_path / f"run{i}"
        d.mkdir()
        # A device each: every run starts a fresh outbox, which the identity check refuses under an
        # identity whose published history it does not hold (issue 28).
        conf = write_config(d, mosquitto.port, source="stdin", device=f"{DEVICE}-{i}")
        t = time.monotonic()
        p = start(conf, d / "err", stdin=subprocess.PIPE)
        assert p.stdin is not None
        p.stdin.write(data)
        p.stdin.close()
        rc = finish(p)
        with Outbox(d / "outbox.sqlite", 10, "drop-oldest") as box:
            decided = box.next_position(STREAM)
        return rc, time.monotonic() - t, decided

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(one, range(runs)))
    assert [rc for rc, _, _ in results] == [0] * runs, [(tmp_path / f"run{i}" / "err").read_text() for i in range(runs)]
    assert all(decided == 10 for _, _, decided in results), results


async def _online(spy: Spy, timeout: float) -> None:
    await spy.wait_until(lambda: bool(spy.states(STATUS)) and spy.states(STATUS)[-1] == "online", timeout,
                         "the daemon's online status")


async def test_sigterm_mid_run_stops_in_order(mosquitto: Broker, tmp_path: Path) -> None:
    """SIGTERM while frames flow: exit status 0 within the bound, every taken-in frame's record
    published once, in order, and ``offline`` as the last status."""
    cfg = mosquitto.broker_config()
    spy = Spy(cfg, f"{BASE}/#")
    async with running(spy.run()):
        await asyncio.wait_for(spy.subscribed.wait(), 10)
        p = start(write_config(tmp_path, mosquitto.port), tmp_path / "err")
        try:
            await _online(spy, EXIT_WITHIN)
            from daemon_harness import publish_all
            n = await publish_all(cfg, [(RAW, f) for f in frames(200, time.time() - 1000)])
            assert n == 200
            p.send_signal(signal.SIGTERM)
            rc = await asyncio.to_thread(finish, p, 20.0)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        assert rc == 0, (tmp_path / "err").read_text()
        await spy.wait_until(lambda: spy.states(STATUS)[-1] == "offline", 10, "offline")
        order, payloads = first_occurrences(spy.records(DATA))
        assert order == sorted(order) and sorted(payloads) == list(range(len(payloads)))
        assert all(len(v) == 1 for v in payloads.values())
        with Outbox(tmp_path / "outbox.sqlite", 10, "drop-oldest") as box:
            assert box.next_position(STREAM) == len(payloads) and len(box) == 0


# -- item 10: one daemon per outbox and per identity ------------------------------------------
def test_the_lock_names_its_holder(tmp_path: Path) -> None:
    path = tmp_path / "o.sqlite"
    with ExclusiveLock(path, "outbox"):
        assert oct((tmp_path / "o.sqlite.lock").stat().st_mode & 0o777) == "0o600"
        with pytest.raises(InUse) as err:
            ExclusiveLock(path, "outbox").acquire()
        assert str(err.value) == f"outbox {path} is in use by another streamguard (pid {os.getpid()})"
    with ExclusiveLock(path, "outbox"):  # released: free again
        pass


async def test_a_second_daemon_on_the_same_outbox_exits_at_once(mosquitto: Broker, tmp_path: Path) -> None:
    """The second instance exits at once (75, one line naming the first's pid); the first keeps
    running and publishes every seq exactly once."""
    cfg = mosquitto.broker_config()
    conf = write_config(tmp_path, mosquitto.port)
    spy = Spy(cfg, f"{BASE}/#")
    async with running(spy.run()):
        await asyncio.wait_for(spy.subscribed.wait(), 10)
        first = start(conf, tmp_path / "err1")
        try:
            await _online(spy, EXIT_WITHIN)
            second = start(conf, tmp_path / "err2")
            rc2 = await asyncio.to_thread(finish, second, EXIT_WITHIN)
            assert rc2 == EX_TEMPFAIL
            lines = (tmp_path / "err2").read_text().splitlines()
            outbox = tmp_path / "outbox.sqlite"
            assert lines == [f"streamguard: outbox {outbox} is in use by another streamguard (pid {first.pid})"]
            assert first.poll() is None, "the first daemon stopped"
            from daemon_harness import publish_all
            await publish_all(cfg, [(RAW, f) for f in frames(100, time.time() - 1000)])
            # the broker acknowledged them; wait until the daemon has them all (its status says so)
            await spy.wait_until(lambda: any(r["counters"]["accepted"] == 100 for r in spy.json_on(PRIVACY)),
                                 15, "all 100 frames at the daemon")
            first.send_signal(signal.SIGTERM)
            assert await asyncio.to_thread(finish, first, 20.0) == 0, (tmp_path / "err1").read_text()
        finally:
            for p in (first,):
                if p.poll() is None:
                    p.kill()
                    p.wait(10)
        await spy.wait_until(lambda: spy.states(STATUS)[-1] == "offline", 10, "offline")
        seqs = [s for s, _ in spy.records(DATA)]
        assert sorted(seqs) == list(range(100)), "a seq was published twice or not at all"


async def test_a_taken_over_client_id_stops_the_older_daemon(mosquitto: Broker, tmp_path: Path) -> None:
    """Two daemons with their own outboxes and one client id: the one taken over stops (75, one
    line naming the client id) instead of reconnecting in a ping-pong; the other keeps running."""
    cfg = mosquitto.broker_config()
    spy = Spy(cfg, f"{BASE}/#")
    async with running(spy.run()):
        await asyncio.wait_for(spy.subscribed.wait(), 10)
        a = start(write_config(tmp_path, mosquitto.port, outbox="a.sqlite", client_id="twin"), tmp_path / "errA")
        b: subprocess.Popen[bytes] | None = None
        try:
            await _online(spy, EXIT_WITHIN)
            b = start(write_config(tmp_path, mosquitto.port, outbox="b.sqlite", client_id="twin"), tmp_path / "errB")
            rc_a = await asyncio.to_thread(finish, a, EXIT_WITHIN)
            lines = (tmp_path / "errA").read_text().splitlines()
            assert rc_a == EX_TEMPFAIL, lines
            assert lines[-1] == (f"streamguard: client id twin (device {DEVICE}) was taken over by another "
                                 "streamguard; stopping")
            assert sum("taken over" in line for line in lines) == 1
            await asyncio.sleep(2.0)  # the survivor is not pushed out in return
            assert b.poll() is None, (tmp_path / "errB").read_text()
            assert spy.states(STATUS)[-1] == "online"
            b.send_signal(signal.SIGTERM)
            assert await asyncio.to_thread(finish, b, 20.0) == 0, (tmp_path / "errB").read_text()
        finally:
            for p in (a, b):
                if p is not None and p.poll() is None:
                    p.kill()
                    p.wait(10)
        # A, B, A reconnecting (it finds B's status and stops), B reconnecting, B's offline at the end
        connects = mosquitto.log_text().count("as twin ")
        assert connects <= 5, f"{connects} connections as twin: the daemons pushed each other out repeatedly"


def test_a_live_status_of_another_instance_is_a_takeover(tmp_path: Path) -> None:
    settings = Settings(device=DEVICE, streams=[{"name": STREAM, "labels": list(LABELS), "source": "stdin",
                                                 "model": {"alpha": 0.1, "beta": 0.2}, "epsilon": 1.0}],
                        outbox={"path": tmp_path / "o.sqlite"})

    async def scenario() -> None:
        async with restored(settings) as (d, _box):
            s = d.sessions
            other = json.dumps({"device": DEVICE, "state": "online", "instance": "f" * 16}).encode()
            s.check_status(Message(STATUS, other, retain=True))  # a previous run's, before our first claim
            s.check_status(Message(STATUS, json.dumps({"device": DEVICE, "state": "online",
                                                       "instance": d.instance}).encode()))  # our own echo
            with pytest.raises(InUse):
                s.check_status(Message(STATUS, other))  # live: published after we subscribed
            s.claimed = True
            with pytest.raises(InUse):
                s.check_status(Message(STATUS, other, retain=True))  # found on a reconnect after our claim

    asyncio.run(scenario())


# -- item 11: decided records are never lost -------------------------------------------------
async def test_stop_input_keeps_every_decided_record_in_order(mosquitto: Broker, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """stop-input, max_records 10, one message in flight, frames offered as fast as the daemon
    takes them (the store queue cut to 8 entries, so intake waits for room constantly, and the
    ticker releases held records meanwhile); then ``stop``. Every decided seq is published or
    still in the outbox (none dropped), and the subscriber sees each stream's seqs increase."""
    monkeypatch.setattr(store_mod, "STORE_QUEUE_LIMIT", 8)
    cfg = mosquitto.broker_config()
    stream = {"name": STREAM, "labels": list(LABELS), "source": "stdin", "model": {"alpha": 0.1, "beta": 0.2},
              "epsilon": 1.0, "design": "exact", "max_hold": 0.05}
    settings = Settings(device=DEVICE, topic_base=BASE, broker=cfg, streams=[stream],
                        outbox={"path": tmp_path / "o.sqlite", "max_records": 10, "overflow": "stop-input"},
                        publish={"window": 1})
    t0 = time.time() - 10_000
    offered = 3000

    async def source() -> AsyncIterator[tuple[str, bytes]]:
        for f in frames(offered, t0, private=tuple(range(50, offered, 97))):
            yield STREAM, f

    spy = Spy(cfg, f"{BASE}/#")
    d = Daemon(settings, extra_sources=[source])
    stop = asyncio.Event()
    async with running(spy.run()):
        await asyncio.wait_for(spy.subscribed.wait(), 10)
        task = asyncio.create_task(d.run(stop))
        try:
            async with asyncio.timeout(60):
                while d.stats.outbox_full_waits < 20 and not task.done():
                    await asyncio.sleep(0.05)
            assert d.stats.outbox_full_waits >= 20, "the outbox never filled: the test does not test stop-input"
            stop.set()
            async with asyncio.timeout(40):
                await task
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        accepted = d.runtimes[STREAM].counters.accepted
        assert 0 < accepted < offered  # stopped mid-stream
        await spy.wait_until(lambda: bool(spy.states(STATUS)) and spy.states(STATUS)[-1] == "offline", 10, "offline")
    order, _ = first_occurrences(spy.records(DATA))
    assert order == sorted(order), "records of the stream were published out of seq order"
    with Outbox(tmp_path / "o.sqlite", 10, "stop-input") as box:
        kept = [r.seq for r in box.peek(100_000) if r.stream == STREAM]
        assert box.next_position(STREAM) == accepted
    assert kept == sorted(kept), "the outbox holds the stream's records out of seq order"
    assert sorted(set(order) | set(kept)) == list(range(accepted)), "a decided record was lost"
