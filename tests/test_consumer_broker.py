"""The consumer against a fleet (issue 14): two devices, each a real Mosquitto (tests/brokers.py)
with a real daemon process, bridged to a central Mosquitto where the consumer subscribes. One
daemon is killed with SIGKILL and restarted mid-stream, while the consumer itself disconnects and
comes back on its persistent session.

Checks: the consumer ends with exactly the seqs every device published (nothing lost across its
own absence — QoS 1 on a persistent session — and no gap across the daemon's crash, whose resends
are counted as duplicates, never as records); it follows each device's retained status (the
restarted device says so, and names its restart position); the re-audit finds the claims true; the
fleet estimate is the record-weighted combination of the devices'; and the estimate for the
device that ran undisturbed lies within 4.5 posterior standard deviations of the true share
(false-failure probability < 1e-5 if the interval is right).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
from brokers import Broker, _run_broker
from daemon_harness import Spy, daemon_toml, publish_all, running, truth_of
from test_daemon_restart import DaemonProcess

from firmware_sim import Button, Labels, SimDevice, SimStream
from streamguard import MarkovChain
from streamguard.consumer.collector import Collector
from streamguard.consumer.estimates import Z95
from streamguard.consumer.report import report
from streamguard.consumer.subscribe import Selection, consume

BASE = "sgc"
STREAM = "occ"
LABELS = ("vacant", "occupied")
DEVICES = ("hall", "kitchen")


def _device_broker(workdir: Path, name: str, central: Broker):
    """A device's Mosquitto bridging its sanitized outputs (never raw or cmd) out to ``central``."""
    workdir.mkdir()
    return _run_broker(workdir, [
        "allow_anonymous true", "persistence false", "max_queued_messages 100000",
        f"connection {name}-to-central", f"address 127.0.0.1:{central.port}",
        *(f"topic {BASE}/+/+/{kind} out 1" for kind in ("data", "aggregate", "privacy")),
        f"topic {BASE}/+/status out 1", "cleansession false", "restart_timeout 1 2",
        "bridge_protocol_version mqttv311", "try_private false"])


async def test_a_bridged_fleet_through_a_daemon_crash_and_a_consumer_absence(mosquitto: Broker,
                                                                            tmp_path: Path) -> None:
    cfg = mosquitto.broker_config()  # the central broker: the witness and the consumer read here
    gens = {d: _device_broker(tmp_path / f"broker-{d}", d, mosquitto) for d in DEVICES}
    brokers: dict[str, Broker] = {}
    for d, g in gens.items():
        try:
            brokers[d] = next(g)
        except BaseException:
            for started in list(gens.values())[: len(brokers)]:
                started.close()
            raise
    chain = MarkovChain.binary(0.1, 0.2)
    frames = {d: list(SimDevice(d, [SimStream(STREAM, chain, rate=100.0, seed=40 + i, emission=Labels(LABELS),
                                              button=Button(probability=0.05))]).frames(count=400))
              for i, d in enumerate(DEVICES)}
    raw = {d: f"{BASE}/{d}/{STREAM}/raw" for d in DEVICES}
    conf = {d: daemon_toml(tmp_path / f"{d}.toml", tmp_path / f"{d}.sqlite", brokers[d].port, base=BASE, device=d,
                           stream=STREAM, labels=LABELS) for d in DEVICES}
    local = {d: brokers[d].broker_config() for d in DEVICES}  # raw frames go to the device's own broker
    status = {d: f"{BASE}/{d}/status" for d in DEVICES}
    data = {d: f"{BASE}/{d}/{STREAM}/data" for d in DEVICES}
    collector = Collector(BASE)
    sel = Selection(BASE)
    spy = Spy(cfg, f"{BASE}/#", name="witness")
    procs: dict[str, DaemonProcess] = {}
    extra: list[DaemonProcess] = []
    try:
        for d in DEVICES:
            procs[d] = DaemonProcess(conf[d], tmp_path / f"{d}.log")
        async with running(spy.run()):
            await asyncio.wait_for(spy.subscribed.wait(), 10)
            for d in DEVICES:
                await spy.wait_until(lambda d=d: "online" in spy.states(status[d]), 30, f"{d} online")
            # part 1: the consumer reads while the first quarter flows, stops after 100 records and
            # what arrives until the flow pauses, and goes away (its session stays on the broker)
            first = asyncio.ensure_future(consume(cfg, sel, collector, count=100, client_id="fleet-consumer"))
            await asyncio.sleep(0.5)  # its subscriptions are in place
            await asyncio.gather(*(publish_all(local[d], [(raw[d], f.payload) for f in frames[d][:100]],
                                               identifier=f"producer-{d}") for d in DEVICES))
            await asyncio.wait_for(first, 30)
            assert collector.records() >= 100
            await asyncio.gather(*(publish_all(local[d], [(raw[d], f.payload) for f in frames[d][100:200]],
                                               identifier=f"producer-{d}") for d in DEVICES))
            # the hall daemon crashes while its records are published, and starts again
            await spy.wait_until(lambda: len(spy.seqs(data["hall"])) >= 150, 30, "hall records")
            procs["hall"].kill()
            await spy.wait_until(lambda: spy.states(status["hall"])[-1] == "offline", 10, "the will")
            extra.append(DaemonProcess(conf["hall"], tmp_path / "hall.log"))
            await spy.wait_until(lambda: spy.states(status["hall"])[-1] == "online", 30, "hall back")
            await asyncio.gather(*(publish_all(local[d], [(raw[d], f.payload) for f in frames[d][200:]],
                                               identifier=f"producer-{d}") for d in DEVICES))
            await asyncio.sleep(0.5)  # the last frames reach the daemons before SIGTERM
            assert extra[0].terminate() == 0 and procs["kitchen"].terminate() == 0
            for d in DEVICES:
                await spy.wait_until(lambda d=d: spy.states(status[d])[-1] == "offline", 20, f"{d} offline")
            published = {d: spy.seqs(data[d]) for d in DEVICES}
            # part 2: the consumer comes back on its session and receives what it missed
            missing = sum(len(published[d]) for d in DEVICES) - collector.records()
            assert missing > 0
            await asyncio.wait_for(consume(cfg, sel, collector, count=missing, duration=30,
                                           client_id="fleet-consumer"), 40)
            # a second short session: the final retained statuses come again on subscribing (the
            # first may have ended, its count reached, before the statuses queued after the last
            # records arrived)
            await asyncio.wait_for(consume(cfg, sel, collector, duration=1.0, client_id="fleet-consumer"), 20)
    finally:
        for p in [*procs.values(), *extra]:
            p.ensure_dead()
        for g in gens.values():
            g.close()

    for d in DEVICES:
        log = collector.streams[(d, STREAM)]
        assert set(log.records) == published[d], d
        assert log.gaps() == [] and log.conflicts == 0
        assert log.status is not None and log.status["pending"] == 0
    hall, kitchen = collector.streams[("hall", STREAM)], collector.streams[("kitchen", STREAM)]
    assert hall.status is not None and hall.status["restarted"] is True and hall.restarts
    assert kitchen.status is not None and kitchen.status["restarted"] is False and not kitchen.restarts

    rep = report(collector)
    s = rep["streams"][STREAM]
    assert s["labels"] == list(LABELS) and set(s["devices"]) == set(DEVICES)
    assert s["records"] == sum(len(published[d]) for d in DEVICES) and s["gaps"] == 0
    assert s["duplicates"] == sum(collector.streams[(d, STREAM)].duplicates for d in DEVICES)
    for d in DEVICES:
        dev = s["devices"][d]
        assert dev["audit"]["warnings"] == [] and dev["audit"]["marks_checked"] > 0, (d, dev["audit"])
    per = [s["devices"][d] for d in DEVICES]
    weighted = sum(p["records"] * np.array(p["estimate"]["frequency"]) for p in per) / s["records"]
    np.testing.assert_allclose(s["frequency"], weighted, atol=1e-12)
    # the undisturbed device: the estimate against the truth of its readings
    truth = truth_of(frames["kitchen"], STREAM, LABELS)
    est, (lo, hi) = per[1]["estimate"]["frequency"][1], per[1]["estimate"]["frequency_ci"][1]
    realised = np.mean([truth.state_of_seq(q) == 1 for q in sorted(kitchen.records)])
    sd = max((hi - lo) / (2 * Z95), 1e-3)
    assert abs(est - realised) <= 4.5 * sd, (est, realised, sd)


async def test_a_session_ended_by_its_duration_leaves_cleanly_and_the_next_gets_the_rest(
        mosquitto: Broker) -> None:
    """A consumer stopped by ``duration`` disconnects (it does not linger connected, acknowledging
    messages it will never read): what is published while it is away reaches its next session."""
    import json

    cfg = mosquitto.broker_config()

    def rec(seq: int) -> bytes:
        return json.dumps({"device": "d", "stream": "s", "seq": seq, "position": seq, "ts": 1.0, "value": "a",
                           "redacted": False, "redaction": [0.0, 0.0], "mode": "csprng"}).encode()

    topic = f"{BASE}/d/s/data"
    collector = Collector(BASE)
    first = asyncio.ensure_future(consume(cfg, Selection(BASE), collector, duration=1.5, client_id="c-dur"))
    await asyncio.sleep(0.5)
    await publish_all(cfg, [(topic, rec(s)) for s in range(3)])
    await asyncio.wait_for(first, 15)
    await publish_all(cfg, [(topic, rec(s)) for s in range(3, 8)])
    await asyncio.wait_for(consume(cfg, Selection(BASE), collector, count=5, client_id="c-dur"), 15)
    assert sorted(collector.streams[("d", "s")].records) == list(range(8))
