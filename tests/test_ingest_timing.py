"""The timing test of issue 10: an on-change source whose change times depend on its values goes
through the real daemon (wall clock, real Mosquitto); the sanitized records must carry exactly the
grid times and be published at times that do not depend on when the raw values changed.

Set-up: a zigbee2mqtt-style occupancy sensor (firmware_sim.onchange) that stays vacant 0.45 s and
occupied 0.2 s on average (exponential dwell times: the message times reveal the values) and
republishes its unchanged state 2×/s with a new link quality; the daemon resamples it on a 0.1 s
grid, release delay 0 (a record is published at the next tick), for ``DURATION`` seconds (10 by
default; ``STREAMGUARD_TIMING_SECONDS`` runs it longer, for more power).

Checks:
1. Every record's ``ts`` is exactly a grid time n·T (the value the grid computes, bit for bit), the
   ``ts`` are consecutive ticks, and each released value is the sensor's true state at that tick
   (ticks within 30 ms of a change, where the broker's latency decides, are skipped).
2. Independence. For each record, its publish latency L = (arrival at a subscriber) − ts. Under
   the resampler L depends on the grid and the system's noise only. Two comparisons: (a) records
   whose grid interval (ts − T, ts] held a raw change against those whose did not, and (b) records
   that released occupied against vacant. Each is a stratified permutation test of the difference
   of the group means of L, permuting the labels within blocks of ``BLOCK`` consecutive records
   (the machine's load drifts over a run, and the values come in runs: a plain two-sample test
   would confound the two), ``PERMUTATIONS`` Monte Carlo permutations, p = (1 + #{|d*| ≥ |d|}) /
   (1 + PERMUTATIONS). Each is run at level 0.0005, so under H0 (within a block, latencies are
   exchangeable with respect to the labels) the false-failure rate of the pair is at most 0.001
   (Bonferroni; the Monte Carlo p-value with the +1 is valid). Measured here: latency ≈ T + 16 ms
   with a spread of ~10 ms, so a shift of the mean of roughly 8 ms or more between the groups
   would be detected. A pass-through pipeline, publishing each change when it arrives, would put
   the change records' latencies anywhere in the interval, far beyond that.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest

import numpy as np

from brokers import Broker
from daemon_harness import Spy, claimed, daemon_running, running
from firmware_sim.onchange import OnChangeSensor, publish_onchange
from ingest_harness import ingest_settings, retain, until
from streamguard.ingest.grid import tick_index
from streamguard.stream.transport import Message

pytestmark = pytest.mark.timeout(120)

PERIOD = 0.1
DURATION = min(600.0, float(os.environ.get("STREAMGUARD_TIMING_SECONDS", "10")))
ALPHA = 0.0005  # per test; two tests: false-failure rate ≤ 0.001
MARGIN = 0.03
BLOCK = 10
PERMUTATIONS = 9999


def stratified_permutation_p(latency: list[float], group: list[bool], *, seed: int) -> float:
    """Two-sided p-value of the difference of the group means, labels permuted within blocks of
    BLOCK consecutive records (module docstring)."""
    x, g = np.asarray(latency), np.asarray(group, dtype=bool)

    def diff(labels: np.ndarray) -> np.ndarray:  # one difference per row of labels
        n1 = labels.sum(axis=-1)
        return (labels * x).sum(axis=-1) / n1 - ((~labels) * x).sum(axis=-1) / (len(x) - n1)

    observed = abs(diff(g))
    rng = np.random.default_rng(seed)
    perms = np.tile(g, (PERMUTATIONS, 1))
    for lo in range(0, len(x), BLOCK):
        block = perms[:, lo:lo + BLOCK]
        perms[:, lo:lo + BLOCK] = rng.permuted(block, axis=1)
    return float((1 + np.count_nonzero(np.abs(diff(perms)) >= observed)) / (1 + PERMUTATIONS))


class TimedSpy(Spy):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.arrivals: list[tuple[float, Message]] = []

    def _received(self, m: Message) -> None:
        super()._received(m)
        self.arrivals.append((time.time(), m))


async def test_publish_times_independent_of_change_times(mosquitto: Broker, tmp_path: Path) -> None:
    sensor = OnChangeSensor("zigbee2mqtt", "hall", dwell=(0.45, 0.2), republish=2.0, seed=11)
    settings = ingest_settings(
        mosquitto.broker_config(), tmp_path,
        {"preset": "zigbee2mqtt", "device": "hall", "field": "occupancy",
         "values": {"true": "occupied", "false": "vacant"}, "retained": True},
        labels=["vacant", "occupied"], sample_period=PERIOD)
    initial = next(m for m in sensor.messages() if m.state is not None)  # its state, retained on the broker
    await retain(settings.broker, [(initial.topic, initial.payload)])
    spy = TimedSpy(settings.broker, "sg/ingest-test/s/data")
    async with running(spy.run()):
        await asyncio.wait_for(spy.subscribed.wait(), 10)
        async with daemon_running(settings) as (daemon, _stop, _task):
            await until(lambda: claimed(daemon), "the daemon online (subscribed) before the sensor starts")
            sent = await publish_onchange(sensor, settings.broker.host, settings.broker.port, DURATION)
            await asyncio.sleep(3 * PERIOD)
            status = daemon.ingest.status("s")
            stopping = time.time()  # the shutdown drain publishes the pending record at once: not timed
    records = [(at, json.loads(m.payload)) for at, m in spy.arrivals if at < stopping]
    assert len(records) > 0.8 * DURATION / PERIOD
    assert status is not None and status["missed_ticks"] <= 2
    changes = [at for at, m in sent if m.change and m.state is not None][1:]  # (the first is the initial state)
    assert len(changes) > 1.5 * DURATION
    truth = [(float("-inf"), initial.state)] + [(at, m.state) for at, m in sent if m.state is not None]

    # 1. exactly the grid; consecutive; true values
    ticks = [tick_index(r["ts"], PERIOD) for _, r in records]
    assert [r["ts"] for _, r in records] == [n * PERIOD for n in ticks]
    assert all(b - a >= 1 for a, b in zip(ticks, ticks[1:]))
    compared = 0
    for _, r in records:
        g = r["ts"]
        if r["redacted"] or any(g - MARGIN < c < g + MARGIN for c in changes):
            continue
        state = [s for at, s in truth if at <= g][-1]
        assert r["value"] == ("occupied" if state else "vacant")
        compared += 1
    assert compared > 0.5 * len(records)

    # 2. publish latency independent of the change times and of the values
    latency = [at - r["ts"] for at, r in records]
    changed = [any(r["ts"] - PERIOD < c <= r["ts"] for c in changes) for _, r in records]
    a = [x for x, c in zip(latency, changed) if c]
    b = [x for x, c in zip(latency, changed) if not c]
    assert len(a) >= 15 and len(b) >= 15
    occupied = [x for x, (_, r) in zip(latency, records) if r["value"] == "occupied"]
    vacant = [x for x, (_, r) in zip(latency, records) if r["value"] == "vacant"]
    assert len(occupied) >= 15 and len(vacant) >= 15
    is_occupied = [r["value"] == "occupied" for _, r in records]
    for i, (name, group) in enumerate((("change in interval", changed), ("released value", is_occupied))):
        p = stratified_permutation_p(latency, group, seed=i)
        print(f"{name}: n = {sum(group)}/{len(group) - sum(group)}, permutation p = {p:.3f}")
        assert p > ALPHA, f"publish latency depends on {name}: p = {p:.2g}"
    # every record leaves after its tick, at the next one (delay 0), not at a change time
    assert all(PERIOD * 0.5 < x < PERIOD + 0.5 for x in latency), (min(latency), max(latency))
