"""firmware_sim's on-change sensors (issue 10): the formats the projects document, deterministic
under the seed, a message per change (plus zigbee2mqtt's unchanged republishes), dwell times that
depend on the state, and the ``--onchange`` command line against a real Mosquitto."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys

import aiomqtt
import pytest

from brokers import Broker
from firmware_sim.onchange import OnChangeSensor


def _first(sensor: OnChangeSensor, n: int) -> list:
    return list(itertools.islice(sensor.messages(), n))


@pytest.mark.parametrize("fmt,reading,avail,online", [
    ("zigbee2mqtt", "zigbee2mqtt/hall", "zigbee2mqtt/hall/availability", b'{"state":"online"}'),
    ("tasmota", "stat/hall/POWER", "tele/hall/LWT", b"Online"),
    ("esphome", "hall/binary_sensor/motion/state", "hall/status", b"online"),
])
def test_formats(fmt: str, reading: str, avail: str, online: bytes) -> None:
    msgs = _first(OnChangeSensor(fmt, "hall", republish=1.0 if fmt == "zigbee2mqtt" else 0.0, seed=3), 200)  # type: ignore[arg-type]
    assert (msgs[0].topic, msgs[0].payload, msgs[0].retain) == (avail, online, True)
    states = [m for m in msgs if m.state is not None]
    assert all(m.topic == reading for m in states)
    for m in states:
        if fmt == "zigbee2mqtt":
            body = json.loads(m.payload)
            assert body["occupancy"] is bool(m.state) and {"battery", "linkquality"} <= set(body)
        else:
            assert m.payload == (b"ON" if m.state else b"OFF")
        assert m.retain is (fmt == "esphome")  # ESPHome retains its states by default
    changes = [m for m in states if m.change]
    assert all(a.state != b.state for a, b in zip(changes, changes[1:]))  # a change message changes the state
    republished = [m for m in states if not m.change]
    assert (len(republished) > 0) is (fmt == "zigbee2mqtt")
    assert [m.at for m in msgs] == sorted(m.at for m in msgs)


def test_deterministic_and_value_dependent_dwell() -> None:
    s = OnChangeSensor("tasmota", "p", dwell=(2.0, 0.5), seed=9)
    assert _first(s, 50) == _first(s, 50)
    changes = [m for m in _first(s, 4001) if m.state is not None and m.change]
    dwell = {0: [], 1: []}  # type: dict[int, list[float]]
    for a, b in zip(changes, changes[1:]):
        dwell[a.state].append(b.at - a.at)  # type: ignore[index]
    mean0, mean1 = (sum(v) / len(v) for v in (dwell[0], dwell[1]))
    # exponential means 2.0 and 0.5 from ~2000 draws each: within 10 % (≈ 4.5 standard errors)
    assert abs(mean0 - 2.0) < 0.2 and abs(mean1 - 0.5) < 0.05


def test_cli_publishes_on_change_to_mosquitto(mosquitto: Broker) -> None:
    async def run() -> list[aiomqtt.Message]:
        got: list[aiomqtt.Message] = []
        async with aiomqtt.Client(mosquitto.host, mosquitto.port, identifier="watch") as c:
            await c.subscribe("zigbee2mqtt/#", qos=1)
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "firmware_sim", "--onchange", "zigbee2mqtt:hall:0.2:0.1", "--duration", "1",
                "--mqtt", f"{mosquitto.host}:{mosquitto.port}", stderr=subprocess.PIPE)
            async with asyncio.timeout(30):
                _, err = await proc.communicate()
                assert proc.returncode == 0, err
                summary = json.loads(err.decode().split("firmware_sim: ", 1)[1])
                async for m in c.messages:
                    got.append(m)
                    if len(got) == summary["messages"]:
                        break
        return got

    got = asyncio.run(run())
    assert got[0].topic.value == "zigbee2mqtt/hall/availability"
    assert sum(1 for m in got if m.topic.value == "zigbee2mqtt/hall") >= 4


def test_retain_option() -> None:
    """A reading is published retained as the format does by default (ESPHome), or as stated
    (zigbee2mqtt's ``retain: true``); availability stays retained either way."""
    def retained(sensor: OnChangeSensor) -> set[bool]:
        return {m.retain for m, _ in zip(sensor.messages(), range(20)) if m.state is not None}

    assert retained(OnChangeSensor("zigbee2mqtt", "hall")) == {False}
    assert retained(OnChangeSensor("zigbee2mqtt", "hall", retain=True)) == {True}
    assert retained(OnChangeSensor("esphome", "living")) == {True}
    assert retained(OnChangeSensor("esphome", "living", retain=False)) == {False}
