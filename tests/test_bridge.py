"""The device broker and its sanitized-only bridge (issue 10 part 2, issue 13's device
mosquitto.conf; deploy/mosquitto/).

Two Mosquitto instances on loopback (tests/brokers.py ``device_and_central``): the device broker
runs the shipped configuration and ACL, with only its port, paths and bridge address replaced,
and bridges to a central broker. The daemon logs in as ``streamguard``; a sensor firmware, a
zigbee2mqtt gateway, a privacy button and Home Assistant log in as their own users and do what
they do. Then:

- every sanitized record (each seq, byte for byte as published on the device) reaches the
  central broker, with the status and privacy reports;
- nothing else does: every message at the central broker is a well-formed sanitized record,
  status or privacy report of this device; no raw, command, sensor or discovery topic and no
  payload that any producer sent (a subscriber to ``#`` on the central broker sees all of it);
- on the device, the ACL keeps raw frames, sensor topics and commands from Home Assistant's
  user, which still gets the sanitized records and the discovery configs;
- records published while the central broker is down wait in the bridge's queue and arrive;
- with the shipped option for a Home Assistant at the central site, the discovery configs go out
  and its birth message comes in (the daemon re-announces), and still nothing raw goes out.

Two streams: ``hall`` reads a zigbee2mqtt occupancy sensor (``zigbee2mqtt/hall``, on change,
through the zigbee2mqtt preset and the resampler on a 0.1 s grid), ``door`` streamguard's own raw
frames from a firmware on ``streamguard/<device>/door/raw``. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import aiomqtt
import pytest

from brokers import DeviceAndCentral
from daemon_harness import Spy, check_outputs, daemon_running, daemon_toml, publish_all, running

from streamguard.config import ConfigError, filters_overlap, load_settings

BASE, DEVICE = "streamguard", "bridgetest"
LABELS = ("vacant", "occupied")
DOOR_LABELS = ("closed", "open")
STREAMS = {"hall": LABELS, "door": DOOR_LABELS}
DOOR_RAW = f"{BASE}/{DEVICE}/door/raw"
HALL_CMD = f"{BASE}/{DEVICE}/hall/cmd"
STATUS = f"{BASE}/{DEVICE}/status"
SENSOR = "zigbee2mqtt/hall"
#: The zigbee2mqtt stream (resampled on a 0.1 s grid) and the Home Assistant discovery, after the
#: door stream that daemon_toml writes.
EXTRA = """[homeassistant]
enabled = true
[[streams]]
name = "hall"
labels = ["vacant", "occupied"]
epsilon = 1.0
design = "exact"
sample_period = 0.1
[streams.model]
alpha = 0.1
beta = 0.2
[streams.ingest]
preset = "zigbee2mqtt"
device = "hall"
field = "occupancy"
values = { true = "occupied", false = "vacant" }
retained = true
[streams.homeassistant]
device_class = "occupancy"
"""


def door_frames(t0: float) -> list[tuple[str, bytes]]:
    return [(DOOR_RAW, json.dumps({"value": DOOR_LABELS[(i // 4) % 2], "ts": t0 + i, "private": i == 20}).encode())
            for i in range(40)]


def zigbee_messages() -> list[tuple[str, bytes]]:
    """On-change state with republishes (battery, link quality), in zigbee2mqtt's shape."""
    return [(SENSOR, json.dumps({"occupancy": (i // 3) % 2 == 0, "battery": 97 - i // 10, "linkquality": 120 + i,
                                 "voltage": 2900}).encode()) for i in range(24)]


async def test_only_sanitized_topics_cross_the_bridge(tmp_path: Path,
                                                      device_and_central: DeviceAndCentral) -> None:
    brokers = device_and_central
    central = Spy(brokers.central.broker_config(), "#", name="central")
    local_ha = Spy(brokers.login("homeassistant"), "#", name="homeassistant")
    conf = daemon_toml(tmp_path / "d.toml", tmp_path / "outbox.sqlite", brokers.device.port, base=BASE,
                       device=DEVICE, stream="door", labels=DOOR_LABELS, extra=EXTRA)
    settings = load_settings(conf, broker=brokers.login("streamguard"))
    frames = door_frames(time.time() - 40)
    zigbee = [(f"{SENSOR}/availability", b'{"state":"online"}')] + zigbee_messages()
    command = [(HALL_CMD, b'{"private": "now"}')]
    async with running(central.run(), local_ha.run()):
        await asyncio.wait_for(asyncio.gather(central.subscribed.wait(), local_ha.subscribed.wait()), 10)
        z2m = brokers.login("zigbee2mqtt")  # the sensor's state, retained (zigbee2mqtt retain: true)
        async with aiomqtt.Client(z2m.host, z2m.port, identifier="z2m", username=z2m.username,
                                  password=z2m.secret()) as client:
            await client.publish(zigbee[1][0], zigbee[1][1], qos=1, retain=True)
        async with daemon_running(settings) as (daemon, _, _):
            # the daemon's retained "online" crossing the bridge: the daemon and the bridge are up
            await central.wait_until(lambda: "online" in central.states(STATUS), 30, "online at the central broker")
            await asyncio.gather(
                publish_all(brokers.login("zigbee2mqtt"), zigbee, identifier="z2m", pause_every=1, pause=0.1),
                publish_all(brokers.login("sensor"), frames, identifier="firmware", pause_every=1, pause=0.05))
            await publish_all(brokers.login("button"), command, identifier="button")
            await publish_all(brokers.login("homeassistant"), [("homeassistant/status", b"online")], identifier="ha")
            await asyncio.sleep(0.5)
        decided = {name: rt.privacy_status()["next_seq"] for name, rt in daemon.runtimes.items()}
        data = {name: f"{BASE}/{DEVICE}/{name}/data" for name in STREAMS}
        # stopped: every decided record was published (drain); wait for all of them centrally
        await central.wait_until(lambda: all(central.seqs(data[n]) >= set(range(decided[n])) for n in STREAMS)
                                 and "offline" in central.states(STATUS), 30, "every record at the central broker")
        await local_ha.wait_until(lambda: all(local_ha.seqs(data[n]) >= set(range(decided[n])) for n in STREAMS),
                                  10, "every record on the device")

    assert decided["door"] == 40 and decided["hall"] >= 20, decided  # ≥ 2 s of 0.1 s ticks
    hall = [json.loads(p) for _, p in central.records(data["hall"])]
    assert {r["value"] for r in hall} == {None, "vacant", "occupied"}  # changes, and the mark's window
    for name in STREAMS:
        # every sanitized record crossed, byte for byte
        device_records = dict(local_ha.records(data[name]))
        central_records = dict(central.records(data[name]))
        assert central_records.keys() == device_records.keys() == set(range(decided[name]))
        assert central_records == device_records

    # nothing but sanitized outputs of this device at the central broker
    kinds = check_outputs(central.messages, base=BASE, device=DEVICE, labels=STREAMS, inputs=())
    assert set(kinds) == {"data", "status", "privacy"}, kinds
    sent = {p for _, p in frames + zigbee + command}
    assert not sent & {m.payload for m in central.messages}
    assert not [m for m in central.messages if b"linkquality" in m.payload or b"battery" in m.payload]
    assert not [m.topic for m in central.messages if not m.topic.startswith(f"{BASE}/{DEVICE}/")]
    # the privacy status leaves the device: nothing in it counts the sensor's messages (such a count
    # rises at the sensor's event times, which the resampler hides)
    hall_status = [json.loads(m.payload) for m in central.messages if m.topic == f"{BASE}/{DEVICE}/hall/privacy"]
    assert hall_status and all(not {"messages", "late_readings"} & set(st["ingest"]) for st in hall_status)
    # within the device broker's max_packet_size (65536 bytes with the topic and header)
    assert max(len(m.payload) for m in central.messages) < 60_000

    # on the device: Home Assistant's user reads sanitized topics and discovery, never raw ones
    topics = {m.topic for m in local_ha.messages}
    assert not [t for t in topics if t in (DOOR_RAW, HALL_CMD) or t.startswith("zigbee2mqtt/")], topics
    assert f"homeassistant/binary_sensor/streamguard_{DEVICE}/hall/config" in topics
    assert not sent & {m.payload for m in local_ha.messages if m.topic != "homeassistant/status"}


#: The shipped configuration's option for a Home Assistant at the central site (for device-1).
CENTRAL_HA = ("topic homeassistant/+/streamguard_device-1/+/config out 1", "topic homeassistant/status in 1")


@pytest.mark.parametrize("device_and_central", [CENTRAL_HA], indirect=True)
async def test_central_home_assistant_option(tmp_path: Path,
                                             device_and_central: DeviceAndCentral) -> None:
    brokers, device = device_and_central, "device-1"
    central = Spy(brokers.central.broker_config(), "#", name="central")
    conf = daemon_toml(tmp_path / "d.toml", tmp_path / "outbox.sqlite", brokers.device.port, base=BASE,
                       device=device, stream="door", labels=DOOR_LABELS,
                       extra="[homeassistant]\nenabled = true\n[streams.homeassistant]\ndevice_class = \"door\"\n")
    settings = load_settings(conf, broker=brokers.login("streamguard"))
    config_topic = f"homeassistant/binary_sensor/streamguard_{device}/door/config"
    frames = [(f"{BASE}/{device}/door/raw", json.dumps({"value": "open", "ts": time.time() - 5 + i}).encode())
              for i in range(5)]
    async with running(central.run()):
        await asyncio.wait_for(central.subscribed.wait(), 10)
        async with daemon_running(settings):
            await central.wait_until(lambda: bool(central.on(config_topic)), 30, "the discovery config centrally")
            await publish_all(brokers.login("sensor"), frames, identifier="firmware")
            # Home Assistant at the central site restarts: its birth message crosses the bridge inward
            await central.transport.publish("homeassistant/status", b"online")
            await central.wait_until(lambda: len(central.on(config_topic)) >= 2, 10, "the re-announcement")
    config = json.loads(central.on(config_topic)[-1].payload)
    assert config["device_class"] == "door" and config["state_topic"] == f"{BASE}/{device}/door/data"
    sent = {p for _, p in frames}
    assert not sent & {m.payload for m in central.messages}
    outputs = [m for m in central.messages if not m.topic.startswith("homeassistant/")]
    assert set(check_outputs(outputs, base=BASE, device=device, labels={"door": DOOR_LABELS}, inputs=())) <= \
        {"data", "status", "privacy"}


@pytest.mark.parametrize("a, b, overlap", [
    ("streamguard/+/+/data", "streamguard/dev/hall/data", True),
    ("streamguard/+/+/data", "streamguard/dev/hall/raw", False),
    ("streamguard/+/status", "streamguard/#", True),
    ("streamguard/+/status", "streamguard/dev/hall/#", False),
    ("a/#", "a", True),
    ("a", "a/b", False),
    ("+/+/+/privacy", "zigbee2mqtt/hall", False),
    ("#", "x/y", True),
])
def test_filters_overlap(a: str, b: str, overlap: bool) -> None:
    assert filters_overlap(a, b) is overlap and filters_overlap(b, a) is overlap


@pytest.mark.parametrize("stream", [
    'raw_topic = "streamguard/other/door/data"',
    'sample_period = 1.0\n[streams.ingest]\ntopic = "streamguard/+/+/privacy"\nretained = true\n',
])
def test_inputs_on_sanitized_topics_are_refused(tmp_path: Path, stream: str) -> None:
    conf = tmp_path / "c.toml"
    conf.write_text(f'[[streams]]\nname = "door"\nlabels = ["closed", "open"]\nepsilon = 1.0\n{stream}\n'
                    '[streams.model]\nalpha = 0.1\nbeta = 0.2\n')
    with pytest.raises(ConfigError, match="sanitized output topic"):
        load_settings(conf)


async def test_records_published_while_the_central_broker_is_down_arrive_later(
        tmp_path: Path, device_and_central: DeviceAndCentral) -> None:
    """The bridge's local queue (cleansession false, bounded by max_queued_messages) carries the
    records published while the central broker was down; none is lost, none is raw."""
    brokers, device = device_and_central, "outage"
    conf = tmp_path / "d.toml"
    conf.write_text(f'device = "{device}"\ntopic_base = "{BASE}"\nlog_level = "WARNING"\n'
                    f'[broker]\nport = {brokers.device.port}\n[outbox]\npath = "{tmp_path / "o.sqlite"}"\n'
                    '[[streams]]\nname = "door"\nlabels = ["closed", "open"]\nepsilon = 1.0\ndesign = "exact"\n'
                    'delay = 0\n[streams.model]\nalpha = 0.1\nbeta = 0.2\n')
    settings = load_settings(conf, broker=brokers.login("streamguard"))
    data = f"{BASE}/{device}/door/data"
    t0 = time.time() - 60
    frames = [(f"{BASE}/{device}/door/raw", json.dumps({"value": DOOR_LABELS[i % 2], "ts": t0 + i}).encode())
              for i in range(40)]
    # persistent: the central broker keeps its subscription and queue across its restart, so the
    # records the bridge delivers before this subscriber is back are not missed
    central = Spy(brokers.central.broker_config(), "#", name="central", persistent=True)
    local = Spy(brokers.login("homeassistant"), data, name="local")
    async with running(central.run(), local.run()):
        await asyncio.wait_for(asyncio.gather(central.subscribed.wait(), local.subscribed.wait()), 10)
        async with daemon_running(settings):
            await central.wait_until(lambda: "online" in central.states(f"{BASE}/{device}/status"), 30, "online")
            await publish_all(brokers.login("sensor"), frames[:20], identifier="firmware")
            # (a record is decided when the next frame arrives, the last one at shutdown)
            await central.wait_until(lambda: central.seqs(data) >= set(range(19)), 10, "the first records")
            brokers.central.stop()
            await publish_all(brokers.login("sensor"), frames[20:], identifier="firmware")
            # published on the device while the central broker is down
            await local.wait_until(lambda: local.seqs(data) >= set(range(39)), 10, "the records on the device")
            assert central.seqs(data) < set(range(39))
            brokers.central.start()
            await central.wait_until(lambda: central.seqs(data) >= set(range(39)), 30, "the queued records")
        await central.wait_until(lambda: central.seqs(data) >= set(range(40)), 10, "the last record")
        await local.wait_until(lambda: local.seqs(data) >= set(range(40)), 10, "the last record on the device")
    assert dict(central.records(data)) == dict(local.records(data))
    sent = {p for _, p in frames}
    assert not sent & {m.payload for m in central.messages}
    check_outputs(central.messages, base=BASE, device=device, labels={"door": DOOR_LABELS}, inputs=())
