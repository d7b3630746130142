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
  user, which still gets the sanitized records and the discovery configs.

The source is the daemon's raw frame format on ``streamguard/<device>/<stream>/raw``; the
zigbee2mqtt gateway publishes on ``zigbee2mqtt/hall`` (a sensor topic the bridge and the ACL
must keep local). Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from brokers import DeviceAndCentral, device_and_central  # noqa: F401
from daemon_harness import Spy, check_outputs, daemon_running, daemon_toml, publish_all, running

from streamguard.config import load_settings

BASE, DEVICE, STREAM = "streamguard", "bridgetest", "hall"
LABELS = ("vacant", "occupied")
N = 60
DATA = f"{BASE}/{DEVICE}/{STREAM}/data"
RAW = f"{BASE}/{DEVICE}/{STREAM}/raw"
CMD = f"{BASE}/{DEVICE}/{STREAM}/cmd"
STATUS = f"{BASE}/{DEVICE}/status"
SENSOR = "zigbee2mqtt/hall"


def raw_frames(t0: float) -> list[tuple[str, bytes]]:
    return [(RAW, json.dumps({"value": LABELS[(i // 4) % 2], "ts": t0 + i, "private": i == 20}).encode())
            for i in range(N)]


def sensor_messages() -> list[tuple[str, bytes]]:
    return [(SENSOR, json.dumps({"occupancy": i % 2 == 0, "battery": 97, "linkquality": 120 + i}).encode())
            for i in range(10)]


async def test_only_sanitized_topics_cross_the_bridge(tmp_path: Path,
                                                      device_and_central: DeviceAndCentral) -> None:  # noqa: F811
    brokers = device_and_central
    central = Spy(brokers.central.broker_config(), "#", name="central")
    local_ha = Spy(brokers.login("homeassistant"), "#", name="homeassistant")
    conf = daemon_toml(tmp_path / "d.toml", tmp_path / "outbox.sqlite", brokers.device.port, base=BASE,
                       device=DEVICE, stream=STREAM, labels=LABELS,
                       extra="[homeassistant]\nenabled = true\n")
    settings = load_settings(conf, broker=brokers.login("streamguard"))
    frames = raw_frames(time.time() - N)
    sensor = sensor_messages()
    command = [(CMD, b'{"private": "now"}')]
    async with running(central.run(), local_ha.run()):
        await asyncio.wait_for(asyncio.gather(central.subscribed.wait(), local_ha.subscribed.wait()), 10)
        async with daemon_running(settings):
            # the daemon's retained "online" crossing the bridge: the daemon and the bridge are up
            await central.wait_until(lambda: "online" in central.states(STATUS), 30, "online at the central broker")
            await publish_all(brokers.login("zigbee2mqtt"), sensor, identifier="z2m")
            await publish_all(brokers.login("sensor"), frames[:30], identifier="firmware")
            await publish_all(brokers.login("button"), command, identifier="button")
            await publish_all(brokers.login("sensor"), frames[30:], identifier="firmware")
            await publish_all(brokers.login("homeassistant"), [("homeassistant/status", b"online")],
                              identifier="ha")
        # stopped: every decided record was published (drain); wait for all of them centrally
        await central.wait_until(lambda: central.seqs(DATA) >= set(range(N)) and "offline" in central.states(STATUS),
                                 30, "every record at the central broker")
        await local_ha.wait_until(lambda: local_ha.seqs(DATA) >= set(range(N)), 10, "every record on the device")

    # every sanitized record crossed, byte for byte
    device_records = dict(local_ha.records(DATA))
    central_records = dict(central.records(DATA))
    assert central_records.keys() == device_records.keys() == set(range(N))
    assert central_records == device_records
    assert any(json.loads(p)["redacted"] for p in central_records.values())  # the mark's window

    # nothing but sanitized outputs of this device at the central broker
    kinds = check_outputs(central.messages, base=BASE, device=DEVICE, labels={STREAM: LABELS}, inputs=())
    assert set(kinds) == {"data", "status", "privacy"}, kinds
    sent = {p for _, p in frames + sensor + command}
    assert not sent & {m.payload for m in central.messages}
    assert not [m.topic for m in central.messages if not m.topic.startswith(f"{BASE}/{DEVICE}/")]

    # on the device: Home Assistant's user reads sanitized topics and discovery, never raw ones
    topics = {m.topic for m in local_ha.messages}
    assert not [t for t in topics if t in (RAW, CMD) or t.startswith("zigbee2mqtt/")], topics
    assert DATA in topics and f"homeassistant/binary_sensor/streamguard_{DEVICE}/{STREAM}/config" in topics
    assert not sent & {m.payload for m in local_ha.messages if m.topic != "homeassistant/status"}
