"""A consumer that joins a stream late, through a real Mosquitto and the real daemon (issue 24 §5).

The daemon runs a resampled stream (``sample_period`` = 1 s: positions are grid slots); marks are
honoured before the consumer subscribes and after. Some grid slots get no frame at all (withheld
by the test: missing readings), so the daemon publishes no record for them while seqs stay
consecutive. Checks: the consumer raises no alarm about the marks it never saw (it says it cannot
check them), confirms the marks whose windows it received, and counts exactly the grid steps the
test withheld as missing (in positions, not seqs).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import numpy as np
from brokers import Broker
from daemon_harness import Spy, daemon_running, publish_all, running, until
from test_daemon_e2e import BASE, DEVICE, STATUS, settings_for, stream_cfg, topic, wait_counted

from streamguard.consumer.collector import Collector
from streamguard.consumer.report import report
from streamguard.consumer.subscribe import Selection, consume

LABELS = ("vacant", "occupied")
P = np.array([[0.9, 0.1], [0.2, 0.8]])
SLOTS = 520
JOIN = 160  # slots published before the consumer subscribes
WITHHELD = {*range(300, 305), *range(380, 392), *range(450, 457)}  # grid slots without a frame
MARKS = (40, 80, 120, 230, 340, 420)


def _frames(seed: int) -> list[tuple[int, bytes]]:
    rng = np.random.default_rng(seed)
    t0 = time.time() - 2 * SLOTS  # real epoch times in the past (never ahead of the daemon's clock)
    x = int(rng.random() < P[0, 1] / (P[0, 1] + P[1, 0]))
    out = []
    for slot in range(SLOTS):
        if slot not in WITHHELD:
            frame: dict[str, object] = {"ts": t0 + slot, "value": LABELS[x]}
            if slot in MARKS:
                frame["private"] = True
            out.append((slot, json.dumps(frame).encode()))
        x = int(rng.random() < P[x, 1])
    return out


async def test_a_late_consumer_raises_no_false_alarm_and_counts_missing_grid_steps(mosquitto: Broker,
                                                                                 tmp_path: Path) -> None:
    cfg = mosquitto.broker_config()
    frames = _frames(5)
    raw = topic("occ", "raw")
    settings = settings_for(cfg, tmp_path, [stream_cfg("occ", LABELS, 0.1, 0.2, 1.0, sample_period=1.0)])
    collector = Collector(BASE)
    spy = Spy(cfg, f"{BASE}/#")
    first = [(raw, p) for s, p in frames if s < JOIN]
    rest = [(raw, p) for s, p in frames if s >= JOIN]
    async with running(spy.run()):
        await asyncio.wait_for(spy.subscribed.wait(), 10)
        async with daemon_running(settings) as (daemon, _, task):
            await spy.wait_until(lambda: "online" in spy.states(STATUS), 30, "online")
            await publish_all(cfg, first)
            await wait_counted(daemon, {"occ": len(first)})
            data = topic("occ", "data")
            await spy.wait_until(lambda: any(json.loads(p)["position"] >= JOIN - 20 for _, p in spy.records(data)),
                                 15, "the first part published")
            late = asyncio.ensure_future(consume(cfg, Selection(BASE), collector, duration=90, client_id="late"))
            try:
                await until(lambda: (DEVICE, "occ") in collector.streams
                            and collector.streams[(DEVICE, "occ")].status is not None, 15, "the retained status")
                await publish_all(cfg, rest)
                await wait_counted(daemon, {"occ": len(frames)})
            except BaseException:
                late.cancel()
                raise
        assert task.done() and task.exception() is None
        log = collector.streams[(DEVICE, "occ")]

        def final() -> bool:
            s = log.status
            return s is not None and s["pending"] == 0 and s["counters"]["accepted"] == len(frames)

        try:
            await until(final, 20, "the final privacy status")
            await until(lambda: len(log.records) == max(log.records) - min(log.records) + 1, 10, "every record")
        finally:
            late.cancel()
            await asyncio.gather(late, return_exceptions=True)

    assert log.status is not None
    marks = {m["position"]: m for m in log.status["recent_marks"]}
    assert set(marks) == set(MARKS) and all(m["honoured"] for m in marks.values())
    joined_at = min(r.position for r in log.records.values() if r.position is not None)
    assert MARKS[2] < joined_at <= JOIN  # the first three marks were published before the consumer came

    rep = report(collector)["streams"]["occ"]
    dev = rep["devices"][DEVICE]
    assert dev["warnings"] == [], dev["warnings"]  # no false alarm
    verdicts = {m["position"]: m["verdict"] for m in dev["audit"]["marks"]}
    assert verdicts == {p: "not checkable" if p < joined_at else "confirmed" for p in MARKS}
    assert dev["audit"]["marks_checked"] == 3 and dev["audit"]["marks_not_checkable"] == 3
    # the grid steps the test withheld are missing, counted in positions (seqs have no gap)
    assert dev["lost"] == 0 and log.gaps() == []
    assert dev["missing"] == len(WITHHELD) == 24 and dev["gaps"] == 3
    assert rep["missing"] == 24 and rep["gaps"] == 3
