"""Issue 15, batches of raw frames through the daemon and a real Mosquitto (tests/brokers.py):
lists of frames on the raw topic with ``publish.batch_max = 50`` — every accepted record is
published once, in seq order, with the true value or null as its stored row says; a list sent
again (a redelivery: duplicates) and again after a restart (its last frame a duplicate, the others
late) makes no new step and no new draw: the records
published are the stored bytes, never re-drawn; a ``"now"`` command between two lists protects the
last record of the first. Every wait is bounded."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from brokers import Broker
from daemon_harness import Spy, daemon_running, first_occurrences, publish_all, running, subscribed, until

from streamguard.config import BrokerConfig, Settings

BASE, DEVICE, LABELS = "sgbd", "bd", ["off", "on"]
DATA = f"{BASE}/{DEVICE}/s/data"
RAW = f"{BASE}/{DEVICE}/s/raw"
CMD = f"{BASE}/{DEVICE}/s/cmd"


def _settings(cfg: BrokerConfig, tmp_path: Path) -> Settings:
    return Settings(device=DEVICE, topic_base=BASE, broker=cfg, outbox={"path": tmp_path / "o.sqlite"},
                    publish={"batch_max": 50},
                    streams=[{"name": "s", "labels": LABELS, "source": "mqtt", "epsilon": 1.0, "design": "exact",
                              "model": {"alpha": 0.1, "beta": 0.2}}])


def _lists(t0: float, lo: int, hi: int, size: int) -> list[bytes]:
    frames = [{"value": LABELS[(i // 4) % 2], "ts": t0 + i} for i in range(lo, hi)]
    return [json.dumps(frames[i:i + size]).encode() for i in range(0, len(frames), size)]


async def test_lists_of_frames_through_the_daemon_once_in_order_never_redrawn(mosquitto: Broker,
                                                                              tmp_path: Path) -> None:
    cfg = mosquitto.broker_config()
    t0 = time.time() - 5000
    first = _lists(t0, 0, 600, 100)
    second = _lists(t0, 600, 1000, 100)
    spy = Spy(cfg, f"{BASE}/#")
    async with running(spy.run()):
        await until(spy.subscribed.is_set, 10, "the spy")
        async with daemon_running(_settings(cfg, tmp_path)) as (daemon, _, task):
            await until(lambda: subscribed(daemon), 60, "the input subscription")  # (20 s missed once at load 14)
            c = daemon.runtimes["s"].counters
            await publish_all(cfg, [(RAW, m) for m in first])
            await until(lambda: c.accepted == 600, 20, "the first lists")
            await publish_all(cfg, [(CMD, b'{"private": "now"}')])  # the newest record (599) is held
            await until(lambda: daemon.runtimes["s"].core.status()["open_marks"], 10, "the mark")
            await publish_all(cfg, [(RAW, m) for m in first[-2:]])  # redelivered: no new step
            await until(lambda: c.duplicates == 200, 20, "the redeliveries")
            assert c.accepted == 600
        assert task.done() and task.exception() is None
        before = list(spy.records(DATA))
        async with daemon_running(_settings(cfg, tmp_path)) as (daemon, _, task):  # a restart
            await until(lambda: subscribed(daemon), 60, "the input subscription")  # (20 s missed once at load 14)
            c = daemon.runtimes["s"].counters
            await publish_all(cfg, [(RAW, m) for m in [first[-1], *second]])  # the last list again, then new
            await until(lambda: c.duplicates + c.accepted + sum(c.rejected.values()) == 500, 20, "the second lists")
            # after a restart only the newest step's ts is remembered: the list's last frame is a
            # duplicate, its earlier ones are late — no new step either way, nothing drawn again
            assert c.duplicates == 1 and dict(c.rejected) == {"ts-out-of-order": 99} and c.accepted == 400
        assert task.done() and task.exception() is None
        await spy.wait_until(lambda: len({s for s, _ in spy.records(DATA)}) == 1000, 20, "every record")

    records = spy.records(DATA)
    order, payloads = first_occurrences(records)
    assert order == list(range(1000))  # once each (at least once on the wire), in seq order
    assert all(len(p) == 1 for p in payloads.values())  # a resend is the stored bytes: never re-drawn
    assert {s for s, _ in before} == set(range(600))  # the first run published all it decided
    for seq in range(1000):
        rec = json.loads(next(iter(payloads[seq])))
        assert rec["position"] == seq and rec["ts"] == t0 + seq
        truth = LABELS[(seq // 4) % 2]
        if rec["redaction"] == [1.0, 1.0]:
            assert rec["redacted"] and rec["value"] is None
        elif rec["redaction"] == [0.0, 0.0]:
            assert not rec["redacted"] and rec["value"] == truth
        else:
            assert rec["value"] in (None, truth)
    assert json.loads(next(iter(payloads[599])))["redaction"] == [1.0, 1.0]  # the "now" mark
    lists = [m for m in spy.messages if m.topic == DATA]
    assert max(len(json.loads(m.payload)) for m in lists) == 50  # published in lists of batch_max


async def test_a_command_keeps_its_place_among_frames_taken_together(mosquitto: Broker, tmp_path: Path,
                                                                      monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Frames that queue up while the daemon is busy are taken together (transport
    message_groups), but a command between them still applies where it arrived: a ``"now"`` sent
    after frame 149 marks position 149 — not a later frame of the same group."""
    from streamguard.stream import intake as intake_mod

    slow = intake_mod.Intake.handle_frame
    sizes: list[int] = []

    async def handle_slowly(self, stream, data, now=None):  # type: ignore[no-untyped-def]
        sizes.append(len(data) if isinstance(data, list) else 1)
        await asyncio.sleep(0.01)  # intake slower than the producer: messages queue up
        await slow(self, stream, data, now)

    monkeypatch.setattr(intake_mod.Intake, "handle_frame", handle_slowly)
    cfg = mosquitto.broker_config()
    t0 = time.time() - 5000
    frames = [json.dumps({"value": "off", "ts": t0 + i}).encode() for i in range(300)]
    items = [(RAW, f) for f in frames[:150]] + [(CMD, b'{"private": "now"}')] + [(RAW, f) for f in frames[150:]]
    async with daemon_running(_settings(cfg, tmp_path)) as (daemon, _, task):
        await until(lambda: subscribed(daemon), 60, "the input subscription")  # (20 s missed once at load 14)
        await publish_all(cfg, items)
        c = daemon.runtimes["s"].counters
        await until(lambda: c.accepted == 300, 30, "every frame")
        core = daemon.runtimes["s"].core
        marks = [m.phys for m in [*core.finished, *core._marks]]
    assert task.done() and task.exception() is None
    assert marks == [149]
    assert max(sizes) > 1  # frames were taken together

