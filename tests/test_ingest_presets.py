"""Each ingest preset on a real Mosquitto, with payloads of the shapes the projects document
(notes/sensor-ecosystem.md §1), through the daemon and its resampler on a manual clock.

One scenario per preset: a retained state at start-up (and retained availability ``online``), the
same state republished with other attributes changed, messages of other devices / components /
methods on the same topics, a change, an unmapped value (not a reading: the held one stays),
availability offline and back online,
and a tick with no message. What must hold: exactly one step per tick (so neither the retained
state nor the republishes nor the foreign messages make a step), the published values are the
held readings in order, every record's ``ts`` is exactly its tick, the unknown steps are counted
by reason and published as nothing, and no sensor payload appears on a sanitized topic.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiomqtt
import pytest

from brokers import Broker
from daemon_harness import claimed, daemon_running
from ingest_harness import ManualClock, ingest_settings, retain, rig, until
from streamguard.ingest.stream import IngestHub

Msg = tuple[str, str]


@dataclass(frozen=True)
class Case:
    name: str
    ingest: dict[str, Any]
    states: dict[str, Any]
    a: Msg
    a_value: Any
    a_again: list[Msg]
    b: Msg
    b_value: Any
    unmapped: Msg
    unmapped_reason: str
    noise: list[Msg]
    online: Msg | None = None
    offline: Msg | None = None
    #: A substring of the sensor payloads that must never reach a sanitized topic.
    secret: str = "linkquality"


def _notify(dev: str, comp: str, state: Any, ts: str = "{ts}") -> str:
    return (f'{{"src":"{dev}","dst":"{dev}/events","method":"NotifyStatus",'
            f'"params":{{"ts":{ts},"{comp}":{{"id":0,"state":{json.dumps(state)}}}}}}}')


SHELLY = "shellyplus1-a8032ab12345"
CASES = [
    Case("zigbee2mqtt-occupancy",
         {"preset": "zigbee2mqtt", "device": "hall", "field": "occupancy",
          "values": {"true": "occupied", "false": "vacant"}},
         {"labels": ["vacant", "occupied"]},
         ("zigbee2mqtt/hall", '{"occupancy":true,"battery":97,"linkquality":120,"voltage":2900}'), "occupied",
         [("zigbee2mqtt/hall", '{"occupancy":true,"battery":96,"linkquality":87,"voltage":2900}'),
          ("zigbee2mqtt/hall", '{"occupancy":true,"battery":96,"linkquality":64,"voltage":2890}')],
         ("zigbee2mqtt/hall", '{"occupancy":false,"battery":96,"linkquality":70,"voltage":2890}'), "vacant",
         ("zigbee2mqtt/hall", '{"occupancy":null,"battery":96,"linkquality":70}'), "unmapped",
         [("zigbee2mqtt/kitchen", '{"occupancy":false,"linkquality":33}'),
          ("zigbee2mqtt/hall/availability", '{"state":"online"}')],
         ("zigbee2mqtt/hall/availability", '{"state":"online"}'),
         ("zigbee2mqtt/hall/availability", "offline")),  # the legacy bare form
    Case("zigbee2mqtt-contact-inverted",
         {"preset": "zigbee2mqtt", "device": "front_door", "field": "contact",
          "values": {"true": "closed", "false": "open"}},
         {"labels": ["closed", "open"]},
         ("zigbee2mqtt/front_door", '{"contact":true,"battery":100,"linkquality":150}'), "closed",
         [("zigbee2mqtt/front_door", '{"contact":true,"battery":99,"linkquality":141}')],
         ("zigbee2mqtt/front_door", '{"contact":false,"battery":99,"linkquality":141}'), "open",
         ("zigbee2mqtt/front_door", '{"battery":99,"linkquality":141}'), "missing-field",
         [],
         ("zigbee2mqtt/front_door/availability", "online"),
         ("zigbee2mqtt/front_door/availability", '{"state":"offline"}')),
    Case("tasmota-power",
         {"preset": "tasmota", "device": "plug", "component": "POWER", "values": {"ON": "on", "OFF": "off"}},
         {"labels": ["off", "on"]},
         ("stat/plug/POWER", "ON"), "on",
         [("stat/plug/POWER", "ON"),
          ("tele/plug/STATE", '{"Time":"2026-11-25T22:00:00","Uptime":"0T01:00:00","POWER":"ON","Wifi":{"RSSI":76}}')],
         ("stat/plug/POWER", "OFF"), "off",
         ("stat/plug/POWER", "BLINK"), "unmapped",
         [("stat/plug/RESULT", '{"POWER":"OFF"}'), ("stat/other/POWER", "OFF")],
         ("tele/plug/LWT", "Online"), ("tele/plug/LWT", "Offline"), secret="BLINK"),
    Case("esphome-motion",
         {"preset": "esphome", "device": "kitchen", "component": "binary_sensor/motion",
          "values": {"ON": "motion", "OFF": "clear"}},
         {"labels": ["clear", "motion"]},
         ("kitchen/binary_sensor/motion/state", "ON"), "motion", [("kitchen/binary_sensor/motion/state", "ON")],
         ("kitchen/binary_sensor/motion/state", "OFF"), "clear",
         ("kitchen/binary_sensor/motion/state", "nan"), "unmapped",
         [("kitchen/sensor/temperature/state", "21.5"), ("hall/binary_sensor/motion/state", "OFF")],
         ("kitchen/status", "online"), ("kitchen/status", "offline"), secret="21.5"),
    Case("shelly-gen2-input",
         {"preset": "shelly", "device": SHELLY, "component": "input:0", "field": "state",
          "values": {"true": "pressed", "false": "released"}},
         {"labels": ["released", "pressed"]},
         (f"{SHELLY}/status/input:0", '{"id":0,"state":true}'), "pressed",
         [(f"{SHELLY}/events/rpc", _notify(SHELLY, "input:0", True))],
         (f"{SHELLY}/events/rpc", _notify(SHELLY, "input:0", False)), "released",
         (f"{SHELLY}/status/input:0", '{"id":0,"state":"weird"}'), "unmapped",
         [(f"{SHELLY}/events/rpc", _notify(SHELLY, "switch:0", True)),
          (f"{SHELLY}/events/rpc", '{"src":"x","method":"NotifyEvent","params":{"ts":1,"events":[]}}')],
         (f"{SHELLY}/online", "true"), (f"{SHELLY}/online", "false"), secret="NotifyStatus"),
    Case("homeassistant-statestream",
         {"preset": "homeassistant", "device": "binary_sensor.hall_motion"},
         {"labels": ["off", "on"]},
         ("homeassistant/binary_sensor/hall_motion/state", '"on"'), "on",
         [("homeassistant/binary_sensor/hall_motion/state", '"on"'),
          ("homeassistant/binary_sensor/hall_motion/last_changed", '"2026-11-25T22:00:00+00:00"')],
         ("homeassistant/binary_sensor/hall_motion/state", '"off"'), "off",
         ("homeassistant/binary_sensor/hall_motion/state", '"unavailable"'), "unmapped",
         [("homeassistant/binary_sensor/kitchen_motion/state", '"off"')], secret="unavailable"),
    Case("rtl_433-routed",
         {"preset": "rtl_433", "field": "temperature_C", "match": {"model": "Nexus-TH", "id": 42, "channel": 2}},
         {"bins": [-40.0, 10.0, 60.0]},
         ("rtl_433/pi/events", '{"time":"2026-11-25 22:00:00","model":"Nexus-TH","id":42,"channel":2,'
                               '"battery_ok":1,"temperature_C":21.3,"humidity":40}'), 10.0,
         [("rtl_433/pi/events", '{"time":"2026-11-25 22:00:01","model":"Nexus-TH","id":42,"channel":2,'
                                '"battery_ok":1,"temperature_C":21.3,"humidity":40}')],
         ("rtl_433/pi/events", '{"model":"Nexus-TH","id":42,"channel":2,"temperature_C":4.5,"humidity":41}'), -40.0,
         ("rtl_433/pi/events", '{"model":"Nexus-TH","id":42,"channel":2,"temperature_C":"err"}'), "unmapped",
         [("rtl_433/pi/events", '{"model":"Nexus-TH","id":43,"channel":2,"temperature_C":-30.0}'),
          ("rtl_433/pi/events", '{"model":"Acurite-Tower","id":42,"channel":2,"temperature_C":-30.0}'),
          ("rtl_433/pi/events", '{"model":"Nexus-TH","id":42,"channel":1,"temperature_C":-30.0}')],
         secret="humidity"),
]


def _fill(msg: Msg, ts: float) -> Msg:
    return msg[0], msg[1].replace("{ts}", repr(ts))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_preset_on_mosquitto(case: Case, mosquitto: Broker, tmp_path: Path) -> None:
    settings = ingest_settings(mosquitto.broker_config(), tmp_path, {**case.ingest, "retained": True},
                               sample_period=1.0, **case.states)
    retained = [case.a] + ([case.online] if case.online else [])
    await retain(settings.broker, retained)
    expected: list[Any] = []
    unknown: dict[str, int] = {}
    async with rig(settings, retained=len(retained)) as r:
        send = lambda m: r.send(*_fill(m, r.clock.t))  # noqa: E731
        await r.tick()  # the retained state is the held reading: one step
        expected.append(case.a_value)
        for m in case.a_again + case.noise:  # republished unchanged state, other devices: no step
            await send(m)
        await r.tick()
        expected.append(case.a_value)
        await send(case.b)
        await r.tick()
        expected.append(case.b_value)
        await send(case.unmapped)
        await r.tick()  # not a reading: the held one stays (an unknown step would date the message)
        expected.append(case.b_value)
        if case.offline is not None:
            assert case.online is not None
            await send(case.a)
            await send(case.offline)
            await r.tick()
            expected.append(None)
            await send(case.online)
            await r.tick()  # back online: the reading held before going offline is not reused
            expected.append(None)
            unknown |= {"offline": 1, "no-reading": 3}
        await send(case.b)
        await r.tick()  # (back online: a live message does not end the wait, only a retained state would)
        expected.append(case.b_value if case.offline is None else None)
        await r.tick()  # no message: the held reading
        expected.append(case.b_value if case.offline is None else None)
        # (with delay 0 a record is decided when the next step arrives: the newest is still pending)
        known = [(g, v) for g, v in zip(r.ticks[:-1], expected) if v is not None]
        records = await r.wait_records(len(known))
        assert r.steps() == len(r.ticks) == len(expected)  # exactly one step per tick
        assert r.runtime.core.next_phys == len(r.ticks)
        assert [rec["seq"] for rec in records] == list(range(len(known)))
        assert [(rec["ts"], rec["value"]) for rec in records] == known  # ts exactly the tick
        assert not any(rec["redacted"] for rec in records)  # no mark: all released
        assert dict(r.runtime.counters.rejected) == unknown
        resampler = r.hub.streams["s"].resampler
        assert resampler is not None and dict(resampler.counters.unreadable) == {case.unmapped_reason: 1}
        status = r.hub.status("s")
        assert status is not None and status["unknown_steps"] == unknown and status["missed_ticks"] == 0
        for m in r.spy.messages:  # nothing of the sensor's payloads on a sanitized topic
            assert m.topic.startswith("sg/") and case.secret.encode() not in m.payload


async def test_privacy_button_marks_the_current_step(mosquitto: Broker, tmp_path: Path) -> None:
    """A zigbee2mqtt button's ``action`` marks the step of the next tick (the reading of the moment
    of the press); a retained press left on the broker marks nothing."""
    ingest = {"preset": "zigbee2mqtt", "device": "hall", "field": "occupancy",
              "values": {"true": "occupied", "false": "vacant"}, "retained": True,
              "button": {"preset": "zigbee2mqtt", "device": "privacy_button", "field": "action", "press": ["single"]}}
    settings = ingest_settings(mosquitto.broker_config(), tmp_path, ingest, labels=["vacant", "occupied"],
                               sample_period=1.0)
    await retain(settings.broker, [("zigbee2mqtt/hall", '{"occupancy":true,"linkquality":9}'),
                                   ("zigbee2mqtt/privacy_button", '{"action":"single","linkquality":40}')])
    async with rig(settings, retained=2) as r:
        for _ in range(3):
            await r.tick()
        assert r.runtime.core.status()["open_marks"] == [] and not r.runtime.core.finished
        await r.send("zigbee2mqtt/privacy_button", '{"action":"single","battery":80,"linkquality":41}')
        await r.tick()  # step 3: marked
        for _ in range(3):
            await r.tick()
        marks = r.runtime.core.status()["open_marks"] + list(r.runtime.core.status()["finished_marks"])
        assert [(m["seq"], m["source"]) for m in marks] == [(3, "flag")]
        assert r.hub.streams["s"].local_counters()["button_presses"] == 1
        records = await r.wait_records(6)
        assert records[3]["ts"] == r.ticks[3] and records[3]["redacted"]  # the private step itself


async def test_periodic_source_steps_per_message(mosquitto: Broker, tmp_path: Path) -> None:
    """A Tasmota SENSOR stream stated periodic (``TelePeriod``): each message is a step at its
    ``Time``; the retained message at start-up is a previous step and makes none; the privacy
    status says the timing is the operator's statement."""
    settings = ingest_settings(mosquitto.broker_config(), tmp_path,
                               {"preset": "tasmota", "device": "th", "field": "DS18B20.Temperature"},
                               bins=[-40.0, 18.0, 60.0], periodic=True, sample_period=10.0)
    base = float(int(time.time())) // 10 * 10 - 600
    stamp = lambda t: dt.datetime.fromtimestamp(t).strftime("%Y-%m-%dT%H:%M:%S")  # noqa: E731  (local, no zone)
    sensor = lambda t, v: json.dumps({"Time": stamp(t), "DS18B20": {"Id": "01144A0CB2AA", "Temperature": v},  # noqa: E731
                                      "TempUnit": "C"})
    await retain(settings.broker, [("tele/th/SENSOR", sensor(base - 10, 25.0))])
    async with rig(settings, retained=1) as r:
        for i, v in enumerate((17.5, 21.0, 21.0, 12.0)):
            await r.send("tele/th/SENSOR", sensor(base + 10 * i, v))
        await r.send("tele/th/SENSOR", sensor(base + 10, 30.0))  # a late copy of a slot: no step
        await r.send("tele/th/SENSOR", sensor(base + 50, 30.0))  # slot 4 is missing: a missing step
        records = await r.wait_records(4)  # (delay 0: the newest step waits for the next one)
        assert [(rec["ts"], rec["value"]) for rec in records] == [
            (base, -40.0), (base + 10, 18.0), (base + 20, 18.0), (base + 30, -40.0)]
        assert r.runtime.core.next_phys == 6  # 5 readings + the missing slot at base + 40
        assert r.hub.streams["s"].local_counters()["retained_skipped"] == 1
        assert "stated periodic" in r.hub.status("s")["timing"]  # type: ignore[index]


async def test_a_broker_restart_makes_steps_unknown_until_a_fresh_reading(mosquitto: Broker,
                                                                          tmp_path: Path) -> None:
    """The device's broker restarts (without persistence: its retained state is gone). Messages
    sent meanwhile are lost, so the held reading is not trusted: the steps are ``disconnected``
    while the daemon is away and ``no-reading`` after. Without a heartbeat only a retained state
    delivered on subscription ends that wait (docs/unknown-steps.md, "How a wait ends"): the
    restarted broker has none, and the sensor's next report — published retained, but reaching the
    daemon live — is a change, so it does not end it either (before: it did, and dated the change)."""
    settings = ingest_settings(mosquitto.broker_config(), tmp_path,
                               {"preset": "zigbee2mqtt", "device": "hall", "field": "occupancy",
                                "values": {"true": "occupied", "false": "vacant"}, "retained": True},
                               labels=["vacant", "occupied"], sample_period=1.0)
    clock = ManualClock(float(int(time.time())) + 0.5)
    hub = IngestHub(settings, clock=clock, sleep=clock.sleep)
    resampler = hub.streams["s"].resampler
    assert resampler is not None

    async def report(payload: str) -> None:
        before = hub.routed
        async with aiomqtt.Client(mosquitto.host, mosquitto.port, identifier="sensor") as c:
            await c.publish("zigbee2mqtt/hall", payload.encode(), qos=1, retain=True)
        await until(lambda: hub.routed > before, "the daemon to route the report")

    async def tick() -> None:
        rt = daemon.runtimes["s"]
        before = rt.counters.accepted + sum(rt.counters.rejected.values())
        clock.advance_to(math.floor(clock.t) + 1.0)
        await until(lambda: rt.counters.accepted + sum(rt.counters.rejected.values()) > before, "a step")

    await retain(settings.broker, [("zigbee2mqtt/hall", '{"occupancy":true,"linkquality":50}')])
    async with daemon_running(settings, ingest=hub) as (daemon, _stop, _task):
        await until(lambda: claimed(daemon) and hub.routed >= 1, "the daemon online, the retained state routed")
        await tick()
        mosquitto.stop()
        await until(lambda: not resampler.connected, "the daemon to notice the broker is gone")
        await tick()
        mosquitto.start()
        await until(lambda: resampler.connected, "the daemon back", timeout=30)
        await tick()
        await report('{"occupancy":false,"linkquality":52}')
        await tick()
        rt = daemon.runtimes["s"]
        assert rt.counters.accepted == 1 and resampler.counters.live_in_wait == 1
        assert dict(rt.counters.rejected) == {"disconnected": 1, "no-reading": 2}
