"""Issue 28, one identity, one sequence: a second daemon with the same device and client id but an
outbox of its own (a fresh one: a re-install, a lost disk) must not number records from 0 again
while the identity's retained privacy status shows that seqs were published already. It refuses
in one line (exit 75) before it connects anything but a short check, so the running daemon is not
disturbed and no subscriber sees two payloads for one seq. Before: the old daemon exited 75 as
designed and the new one published seq 0, 1, … again (a subscriber saw conflicting payloads).
Real daemons and Mosquitto; every wait bounded."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from brokers import Broker
from daemon_harness import Spy, daemon_toml, first_occurrences, publish_all, running, stop_daemon, until

from streamguard.cli.common import EXIT_IN_USE

BASE, DEVICE, STREAM = "sgid", "twin", "s"
DATA = f"{BASE}/{DEVICE}/{STREAM}/data"
RAW = f"{BASE}/{DEVICE}/{STREAM}/raw"


def _start(d: Path, port: int) -> subprocess.Popen[bytes]:
    d.mkdir(exist_ok=True)
    conf = daemon_toml(d / "c.toml", d / "o.sqlite", port, base=BASE, device=DEVICE, stream=STREAM,
                       labels=("off", "on"), source="mqtt")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMGUARD_")}
    return subprocess.Popen([sys.executable, "-m", "streamguard.cli", "run", "--config", str(conf)],
                            stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)


def _frames(lo: int, hi: int) -> list[tuple[str, bytes]]:
    return [(RAW, json.dumps({"value": "off", "ts": 1.79e9 + i}).encode()) for i in range(lo, hi)]


async def test_a_fresh_outbox_under_a_published_identity_refuses(mosquitto: Broker, tmp_path: Path) -> None:
    cfg = mosquitto.broker_config()
    spy = Spy(cfg, f"{BASE}/#")
    first = second = None
    try:
        async with running(spy.run()):
            first = _start(tmp_path / "a", mosquitto.port)
            await until(lambda: any(m.topic.endswith("/status") and b'"online"' in m.payload for m in spy.messages),
                        60, "the first daemon online")
            await publish_all(cfg, _frames(0, 30))
            await spy.wait_until(lambda: len(spy.seqs(DATA)) >= 20, 30, f"records ({len(spy.seqs(DATA))})")
            await spy.wait_until(lambda: any(json.loads(m.payload).get("next_seq", 0) >= 20
                                             for m in spy.on("/privacy")), 10, "the privacy status at seq 20")
            t = time.monotonic()
            second = _start(tmp_path / "b", mosquitto.port)  # same device and client id, its own fresh outbox
            try:
                rc: int | None = second.wait(30)
            except subprocess.TimeoutExpired:
                rc = None
            took = time.monotonic() - t
            await publish_all(cfg, _frames(30, 40))
            with contextlib.suppress(AssertionError):  # (before the fix: the old daemon had gone)
                await spy.wait_until(lambda: len(spy.seqs(DATA)) >= 30, 15, "more records")
            disturbed = first.poll() is not None
    finally:
        for p in (first, second):
            if p is not None and p.poll() is None:
                stop_daemon(p)
    order, payloads = first_occurrences(spy.records(DATA))
    conflicting = sorted(s for s, p in payloads.items() if len(p) > 1)
    err = second.stderr.read().decode() if second is not None and second.stderr else ""
    print(f"second daemon: exit {rc} in {took:.1f} s; seqs with conflicting payloads: {len(conflicting)}")
    assert conflicting == [], conflicting
    assert rc == EXIT_IN_USE, err
    assert not disturbed, "the running daemon was disturbed"
    lines = [ln for ln in err.splitlines() if ln.startswith("streamguard:")]
    assert len(lines) == 1 and "seq" in lines[0] and STREAM in lines[0], err
    assert sorted(order) == list(range(len(order))) and len(order) >= 30  # (the rest is held in the release delay)


async def test_the_check_waits_for_a_broker_that_is_down(mosquitto_persistent: Broker, tmp_path: Path) -> None:
    """A first start while the broker is down: the check waits for it — longer than the sentinel's
    10 s — and then refuses on the retained status it finds (before the fix of the wait's scope:
    after 10 s the check gave up and the daemon went on numbering from 0)."""
    import asyncio

    from streamguard.config import PublishConfig
    from streamguard.stream.transport import MqttTransport

    cfg = mosquitto_persistent.broker_config()
    status = json.dumps({"stream": STREAM, "next_seq": 7}).encode()
    async with MqttTransport(cfg, PublishConfig(), device="old", status_topic="x", will=False) as t:
        await t.publish(f"{BASE}/{DEVICE}/{STREAM}/privacy", status, retain=True)
    mosquitto_persistent.stop()  # (a clean stop: the retained status is saved)
    p = _start(tmp_path / "a", mosquitto_persistent.port)
    try:
        await asyncio.sleep(12.0)
        assert p.poll() is None
        mosquitto_persistent.start()
        rc = p.wait(30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
    err = p.stderr.read().decode() if p.stderr else ""
    assert rc == EXIT_IN_USE, err
    assert "seqs 0-6 were published" in err, err
