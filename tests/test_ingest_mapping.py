"""Ingest without a broker: topic filters, timestamps, value maps, the resampler's sample-and-hold
rule, the grid task on a fake clock, the steps recorder and the configuration checks (issue 10)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from streamguard.config import ConfigError, Settings, load_settings
from streamguard.ingest.grid import run_grid, tick_index
from streamguard.ingest.mapping import Extractor, Reading, Unreadable, canonical
from streamguard.ingest.presets import resolve
from streamguard.ingest.resampler import Resampler
from streamguard.ingest.spec import IngestConfig
from streamguard.ingest.stream import IngestHub, IngestStream
from streamguard.ingest.timestamps import parse_time
from streamguard.ingest.topics import matches, valid_filter
from streamguard.frames.records import Rejection, StateMap

NOW = 1_795_648_000.0  # 2026-11-25T23:06:40Z
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


# -- topics, timestamps, canonical values ------------------------------------------------------
@pytest.mark.parametrize("flt,topic,ok", [
    ("zigbee2mqtt/hall", "zigbee2mqtt/hall", True),
    ("zigbee2mqtt/hall", "zigbee2mqtt/hall/availability", False),
    ("rtl_433/+/events", "rtl_433/pi/events", True),
    ("rtl_433/+/events", "rtl_433/pi/x/events", False),
    ("a/#", "a", True),
    ("a/#", "a/b/c", True),
    ("#", "$SYS/broker/uptime", False),
    ("+/status", "kitchen/status", True),
])
def test_topic_matching(flt: str, topic: str, ok: bool) -> None:
    assert matches(flt, topic) is ok


def test_filter_validity() -> None:
    assert valid_filter("a/+/b/#") and not valid_filter("a/b#") and not valid_filter("a/#/b") and not valid_filter("")


def test_timestamps() -> None:
    assert parse_time(1_700_000_000, "epoch-s", now=NOW) == 1_700_000_000.0
    assert parse_time(1_700_000_000_250, "epoch-ms", now=NOW) == 1_700_000_000.25
    assert parse_time("2026-11-25T22:00:00Z", "iso8601", now=NOW) == dt.datetime(
        2026, 11, 25, 22, tzinfo=dt.timezone.utc).timestamp()
    assert parse_time("2026-11-25T23:00:00+01:00", "iso8601", now=NOW) == parse_time(
        "2026-11-25T22:00:00Z", "iso8601", now=NOW)
    # without a zone: the device's local time (Tasmota), as the local clock reads it
    assert parse_time("2026-11-25T22:00:00", "iso8601", now=NOW) == dt.datetime(2026, 11, 25, 22).timestamp()
    for bad, fmt in ((True, "epoch-s"), ("soon", "epoch-s"), (float("nan"), "epoch-s"), ("2026-13-01", "iso8601"),
                     (NOW + 7200, "epoch-s"), (12, "iso8601")):
        assert parse_time(bad, fmt, now=NOW) is None


def test_canonical_values() -> None:
    assert [canonical(v) for v in (True, False, "ON", 1, 1.0, 0, 2.5, None)] == \
        ["true", "false", "ON", "1", "1", "0", "2.5", "null"]
    assert canonical({"a": 1}) is None and canonical([1]) is None and canonical(float("inf")) is None


# -- extraction ---------------------------------------------------------------------------------
def _extractor(labels: list[str] | None = None, bins: list[float] | None = None, **spec: Any) -> Extractor:
    states = StateMap(labels=None if labels is None else tuple(labels), bins=None if bins is None else tuple(bins))
    return Extractor(resolve(IngestConfig(**spec)), states)


def test_value_maps_and_bare_payloads() -> None:
    z = _extractor(["vacant", "occupied"], preset="zigbee2mqtt", device="hall", field="occupancy",
                   values={"true": "occupied", "false": "vacant"})
    assert z.reading("zigbee2mqtt/hall", b'{"occupancy":true}', recv=NOW) == Reading("occupied", NOW)
    assert z.reading("zigbee2mqtt/other", b'{"occupancy":true}', recv=NOW) is None
    bad = z.reading("zigbee2mqtt/hall", b'{"occupancy":"yes"}', recv=NOW)
    assert isinstance(bad, Unreadable) and bad.reason == "unmapped" and "yes" not in bad.message
    nojson = z.reading("zigbee2mqtt/hall", b"occupied", recv=NOW)
    assert isinstance(nojson, Unreadable) and nojson.reason == "not-json"
    # "1"/"0", quoted or not, and a quoted JSON string (Home Assistant statestream)
    g = _extractor(["off", "on"], topic="x/state", values={"1": "on", "0": "off"})
    assert [g.reading("x/state", p, recv=NOW).value for p in (b"1", b'"1"', b"0", b'"0"')] == ["on", "on", "off", "off"]  # type: ignore[union-attr]
    h = _extractor(["off", "on"], preset="homeassistant", device="binary_sensor.door")
    assert h.reading("homeassistant/binary_sensor/door/state", b'"on"', recv=NOW) == Reading("on", NOW)
    # a stream with more than two labels (issue 12: k-state streams)
    k = _extractor(["rest", "walk", "run"], topic="act", field="a", values={"0": "rest", "1": "walk", "2": "run"})
    assert [k.reading("act", json.dumps({"a": i}).encode(), recv=NOW).value for i in range(3)] == ["rest", "walk", "run"]  # type: ignore[union-attr]
    # ignore policy: an unmapped value is no reading at all
    i = _extractor(["vacant", "occupied"], topic="t", field="o", values={"true": "occupied"}, unmapped="ignore")
    assert i.reading("t", b'{"o":false}', recv=NOW) is None and i.reading("t", b"{}", recv=NOW) is None


def test_numbers_for_bins_and_tasmota_time() -> None:
    t = _extractor(bins=[-40.0, 18.0, 60.0], preset="tasmota", device="th", field="DS18B20.Temperature")
    r = t.reading("tele/th/SENSOR", b'{"Time":"2026-11-25T21:59:00","DS18B20":{"Temperature":20.6}}', recv=NOW)
    assert r == Reading(20.6, dt.datetime(2026, 11, 25, 21, 59).timestamp())
    bad = t.reading("tele/th/SENSOR", b'{"Time":"yesterday","DS18B20":{"Temperature":20.6}}', recv=NOW)
    assert isinstance(bad, Unreadable) and bad.reason == "bad-ts"
    for payload in (b'{"Time":"2026-11-25T21:59:00","DS18B20":{"Temperature":"nan"}}',
                    b'{"Time":"2026-11-25T21:59:00","DS18B20":{"Temperature":true}}'):
        assert isinstance(t.reading("tele/th/SENSOR", payload, recv=NOW), Unreadable)
    e = _extractor(bins=[0.0, 50.0, 100.0], preset="esphome", device="n", component="sensor/h")
    assert e.reading("n/sensor/h/state", b"41.5", recv=NOW) == Reading(41.5, NOW)
    assert isinstance(e.reading("n/sensor/h/state", b"nan", recv=NOW), Unreadable)  # ESPHome's unknown


def test_tasmota_relay_reads_power_and_the_periodic_state() -> None:
    t = _extractor(["off", "on"], preset="tasmota", device="plug", component="POWER", values={"ON": "on", "OFF": "off"})
    assert t.reading("stat/plug/POWER", b"ON", recv=NOW) == Reading("on", NOW)
    state = b'{"Time":"2026-11-25T22:00:00","Uptime":"0T01:00:00","POWER":"OFF","Wifi":{"RSSI":76}}'
    assert t.reading("tele/plug/STATE", state, recv=NOW + 1) == Reading("off", NOW + 1)  # receive time: one clock
    assert t.reading("tele/plug/STATE", b'{"Time":"x","Uptime":"0T01:00:00"}', recv=NOW) is None  # no relay key
    assert t.availability("tele/plug/LWT", b"Online") is True and t.availability("tele/plug/LWT", b"Offline") is False


def test_shelly_merges_notify_status() -> None:
    s = _extractor(["released", "pressed"], preset="shelly", device="sh1", component="input:0", field="state",
                   values={"true": "pressed", "false": "released"})
    assert s.reading("sh1/status/input:0", b'{"id":0,"state":false}', recv=NOW) == Reading("released", NOW)
    note = {"method": "NotifyStatus", "params": {"ts": NOW - 1.5, "input:0": {"state": True}}}
    assert s.reading("sh1/events/rpc", json.dumps(note).encode(), recv=NOW) == Reading("pressed", NOW - 1.5)
    other = {"method": "NotifyStatus", "params": {"ts": NOW, "switch:0": {"output": True}}}
    assert s.reading("sh1/events/rpc", json.dumps(other).encode(), recv=NOW) is None
    assert s.reading("sh1/events/rpc", b'{"method":"NotifyEvent","params":{"ts":1}}', recv=NOW) is None
    # a NotifyStatus that changes another field of the component keeps the merged state
    more = {"method": "NotifyStatus", "params": {"ts": NOW, "input:0": {"id": 0}}}
    assert s.reading("sh1/events/rpc", json.dumps(more).encode(), recv=NOW) == Reading("pressed", NOW)


def test_availability_forms() -> None:
    z = _extractor(["a", "b"], preset="zigbee2mqtt", device="d", field="x")
    topic = "zigbee2mqtt/d/availability"
    assert [z.availability(topic, p) for p in (b"online", b"offline", b'{"state":"online"}',
                                               b'{"state":"offline"}', b"garbage")] == [True, False, True, False, False]
    assert z.availability("zigbee2mqtt/d", b"online") is None


# -- resampler ---------------------------------------------------------------------------------
def test_sample_and_hold_rules() -> None:
    r = Resampler(1.0, stale_after=5.0)
    assert r.sample(10.0).reason == "no-reading"
    r.reading(Reading("on", 10.2), 10.2, retained=True)  # the state delivered on subscription
    r.reading(Reading("off", 10.9), 11.3)  # received after the tick at 11: not in it
    s = r.sample(11.0)
    assert (s.ts, s.value, s.private) == (11.0, "on", False)
    assert r.sample(12.0).value == "off"
    r.reading(Reading("on", 9.0), 12.5)  # older than the held reading: late, ignored
    assert r.sample(13.0).value == "off" and r.counters.late == 1
    assert r.sample(15.9).value == "off"
    assert r.sample(17.0).reason == "stale"  # 17 − 10.9 > 5
    r.reading(Reading("on", 17.5), 17.5)
    r.press(17.6)
    assert (r.sample(18.0).value, r.sample(18.0 + 1).private) == ("on", False)
    r.press(19.5)
    s = r.sample(20.0)
    assert s.private and s.value == "on"  # the press marks the tick after it, once
    r.availability(False, 20.5)
    assert r.sample(21.0).reason == "offline"
    r.availability(True, 21.5)
    assert r.sample(22.0).reason == "no-reading"  # the reading before offline is not reused
    r.reading(Reading("off", 22.2), 22.2)  # live: its time is a change's, it does not end the wait
    assert r.sample(23.0).reason == "no-reading" and r.counters.live_in_wait == 1
    r.reading(Reading("off", 23.2), 23.2, retained=True)  # delivered on a new subscription
    r.reading(Unreadable("unmapped", "field 'x' …", 23.7), 23.7)  # not a reading: "off" stays
    assert r.sample(24.0).value == "off" and dict(r.counters.unreadable) == {"unmapped": 1}
    assert dict(r.counters.unknown) == {"no-reading": 3, "stale": 1, "offline": 1}


class FakeClock:
    def __init__(self, t: float) -> None:
        self.t = t
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.t

    async def sleep(self, d: float) -> None:
        self.slept.append(d)
        self.t += d + (5.0 if len(self.slept) == 3 else 0.0)  # the third sleep oversleeps 5 s (a stall)
        await asyncio.sleep(0)


async def test_grid_ticks_on_the_grid_and_counts_missed_ticks() -> None:
    clock = FakeClock(100.25)
    ticks: list[tuple[float, float]] = []
    missed: list[int] = []

    async def on_tick(g: float, now: float) -> None:
        ticks.append((g, now))
        if len(ticks) == 5:
            raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await run_grid(0.5, on_tick, clock=clock, sleep=clock.sleep, on_missed=missed.append)
    assert [g for g, _ in ticks] == [100.5, 101.0, 106.5, 107.0, 107.5]
    assert missed == [10]  # 101.5 … 106.0 slept through: the step tracker makes them missing steps
    assert all(g == tick_index(g, 0.5) * 0.5 for g, _ in ticks)


# -- the stream glue, recorder, config -----------------------------------------------------------
def _settings(tmp: Path, **stream: Any) -> Settings:
    base: dict[str, Any] = {"name": "s", "labels": ["vacant", "occupied"], "model": {"alpha": 0.3, "beta": 0.4},
                            "epsilon": 1.0, "ingest": {"preset": "zigbee2mqtt", "device": "hall", "field": "occupancy",
                                                       "values": {"true": "occupied", "false": "vacant"},
                                                       "retained": True}}
    return Settings(outbox={"path": tmp / "o.sqlite"}, streams=[base | stream])


def test_on_change_source_without_grid_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="publishes on change.*sample_period.*periodic = true"):
        _settings(tmp_path)
    assert _settings(tmp_path, periodic=True).streams[0].resampled() is False
    assert _settings(tmp_path, sample_period=1.0).streams[0].resampled() is True
    for bad, msg in (({"sample_period": 5.0, "stale_after": 1.0, "heartbeat": 0.5}, "every step would be stale"),
                     ({"periodic": True, "stale_after": 10.0}, "stale_after is the resampler's"),
                     ({"periodic": True, "heartbeat": 10.0}, "heartbeat is the resampler's"),
                     ({"sample_period": 1.0, "raw_topic": "x"}, "no raw_topic"),
                     ({"sample_period": 1.0, "source": "stdin"}, "source"),
                     ({"sample_period": 1.0, "ingest": {"topic": "t", "values": {"1": "open"}}}, "'open' is not one"),
                     ({"sample_period": 1.0, "ingest": {"preset": "zigbee2mqtt", "device": "hall"}}, "needs field"),
                     ({"sample_period": 1.0, "ingest": {"preset": "rtl_433", "field": "t"}}, "give match"),
                     ({"sample_period": 1.0, "ingest": {"topic": "a/#/b"}}, "not a valid MQTT topic filter"),
                     ({"sample_period": 1.0, "ingest": {"preset": "zigbee2mqtt", "device": "+", "field": "o"}},
                      "one sensor")):
        with pytest.raises(ValueError, match=msg):
            _settings(tmp_path, **bad)
    with pytest.raises(ValueError, match="goes with"):
        Settings(streams=[{"name": "s", "labels": ["a", "b"], "model": {"alpha": 0.3, "beta": 0.4}, "epsilon": 1.0,
                           "stale_after": 10.0}])


def test_periodic_stream_steps_per_message(tmp_path: Path) -> None:
    s = IngestStream(_settings(tmp_path, periodic=True).streams[0])
    assert s.on_message("zigbee2mqtt/hall", b'{"occupancy":true}', retain=True, now=NOW) == []  # a previous step
    [(kind, frame)] = s.on_message("zigbee2mqtt/hall", b'{"occupancy":true}', retain=False, now=NOW)
    assert kind == "frame" and json.loads(frame) == {"value": "occupied", "ts": NOW, "private": False}  # type: ignore[arg-type]
    [(_, rej)] = s.on_message("zigbee2mqtt/hall", b'{"occupancy":7}', retain=False, now=NOW + 1)
    assert isinstance(rej, Rejection) and rej.reason == "unmapped" and rej.ts == NOW + 1
    assert "timing" in s.status() and s.local_counters()["retained_skipped"] == 1


def test_button_marks_the_next_tick_and_ignores_retained(tmp_path: Path) -> None:
    ingest = {"preset": "zigbee2mqtt", "device": "hall", "field": "occupancy",
              "values": {"true": "occupied", "false": "vacant"}, "retained": True,
              "button": {"preset": "zigbee2mqtt", "device": "privacy_button", "field": "action", "press": ["single"]}}
    s = IngestStream(_settings(tmp_path, sample_period=1.0, ingest=ingest).streams[0])
    # the button is read on the persistent buttons session, the sensor on the control connection
    assert s.button_filters() == ["zigbee2mqtt/privacy_button"] and "zigbee2mqtt/privacy_button" not in s.filters()

    def press(payload: bytes, *, retain: bool, now: float) -> None:
        p = s.press("zigbee2mqtt/privacy_button", payload, retain=retain, now=now)
        if p is not None:
            assert p.ts is None  # (no timestamp configured)
            assert s.press_received(now) is None  # (resampled: the resampler marks the next tick)

    s.on_message("zigbee2mqtt/hall", b'{"occupancy":false}', retain=True, now=NOW + 0.1)
    press(b'{"action":"single"}', retain=True, now=NOW + 0.1)
    assert json.loads(s.tick(NOW + 1))["private"] is False  # type: ignore[arg-type]
    press(b'{"action":"double"}', retain=False, now=NOW + 1.2)
    assert json.loads(s.tick(NOW + 2))["private"] is False  # type: ignore[arg-type]
    press(b'{"action":"single","battery":90}', retain=False, now=NOW + 2.2)
    assert json.loads(s.tick(NOW + 3)) == {"value": "vacant", "ts": NOW + 3, "private": True}  # type: ignore[arg-type]
    press(b'{"action":"single"}', retain=False, now=NOW + 3.5)
    s.on_message("zigbee2mqtt/hall/availability", b"offline", retain=False, now=NOW + 3.6)
    unknown = s.tick(NOW + 4)  # an unknown step that was pressed is still marked (fail closed)
    assert isinstance(unknown, Rejection) and unknown.private and unknown.reason == "offline"


def test_button_press_carries_its_own_time(tmp_path: Path) -> None:
    """With the button's ``timestamp``, a press reports when it was pressed (a press queued at the
    broker during an outage is placed at that step: stream/vouch.py); an unreadable time is none."""
    ingest = {"preset": "zigbee2mqtt", "device": "hall", "field": "occupancy",
              "values": {"true": "occupied", "false": "vacant"}, "retained": True,
              "button": {"preset": "zigbee2mqtt", "device": "b", "field": "action", "press": ["single"],
                         "timestamp": {"field": "t", "format": "epoch-ms"}}}
    s = IngestStream(_settings(tmp_path, sample_period=1.0, ingest=ingest).streams[0])
    p = s.press("zigbee2mqtt/b", b'{"action":"single","t":%d}' % int((NOW - 5) * 1000), retain=False, now=NOW)
    assert p is not None and p.ts == pytest.approx(NOW - 5)
    p = s.press("zigbee2mqtt/b", b'{"action":"single","t":"soon"}', retain=False, now=NOW)
    assert p is not None and p.ts is None
    assert s.press("zigbee2mqtt/b", b'{"action":"double","t":1}', retain=False, now=NOW) is None


def test_retained_redelivery_never_replaces_a_held_reading(tmp_path: Path) -> None:
    s = IngestStream(_settings(tmp_path, sample_period=1.0).streams[0])
    s.on_message("zigbee2mqtt/hall", b'{"occupancy":true}', retain=True, now=NOW + 0.1)  # start-up: taken
    assert json.loads(s.tick(NOW + 1))["value"] == "occupied"  # type: ignore[arg-type]
    s.on_message("zigbee2mqtt/hall", b'{"occupancy":false}', retain=False, now=NOW + 1.5)
    s.on_message("zigbee2mqtt/hall", b'{"occupancy":true}', retain=True, now=NOW + 1.6)  # a reconnect: skipped
    assert json.loads(s.tick(NOW + 2))["value"] == "vacant"  # type: ignore[arg-type]
    s.on_message("zigbee2mqtt/hall/availability", b"offline", retain=False, now=NOW + 2.5)
    s.on_message("zigbee2mqtt/hall/availability", b"online", retain=True, now=NOW + 2.6)
    s.on_message("zigbee2mqtt/hall", b'{"occupancy":true}', retain=True, now=NOW + 2.7)  # nothing held: taken
    assert json.loads(s.tick(NOW + 3))["value"] == "occupied"  # type: ignore[arg-type]
    assert s.local_counters()["retained_skipped"] == 1
    assert set(s.status()) == {"preset", "topics", "timing", "sample_period", "stale_after", "heartbeat",
                               "retained", "missed_ticks", "unknown_steps"}  # nothing counted per raw message is published


def test_a_lost_broker_connection_makes_the_held_reading_unknown(tmp_path: Path) -> None:
    """Messages sent while the daemon's connection is down are lost: the steps are unknown
    (``disconnected``) until it is back, and then until a fresh reading — a retained state
    redelivered on the new subscription is one."""
    settings = _settings(tmp_path, sample_period=1.0)
    hub = IngestHub(settings, clock=lambda: clock[0])
    clock = [NOW + 0.5]
    s = hub.streams["s"]
    hub.route("zigbee2mqtt/hall", b'{"occupancy":true}', retain=True, now=clock[0])  # on subscription
    assert json.loads(s.tick(NOW + 1))["value"] == "occupied"  # type: ignore[arg-type]
    clock[0] = NOW + 1.5
    hub.connection(False)
    step = s.tick(NOW + 2)
    assert isinstance(step, Rejection) and step.reason == "disconnected"
    clock[0] = NOW + 2.5
    hub.connection(True)
    step = s.tick(NOW + 3)
    assert isinstance(step, Rejection) and step.reason == "no-reading"  # the old reading is not reused
    hub.route("zigbee2mqtt/hall", b'{"occupancy":false}', retain=True, now=NOW + 3.5)  # redelivered retained
    assert json.loads(s.tick(NOW + 4))["value"] == "vacant"  # type: ignore[arg-type]


def test_recorder_writes_the_steps_privately(tmp_path: Path) -> None:
    t0 = float(int(time.time()))  # the calibration reader refuses times in the future
    steps = tmp_path / "steps.jsonl"
    s = IngestStream(_settings(tmp_path, sample_period=1.0, record={"steps_file": steps, "max_steps": 3}).streams[0])
    s.tick(t0)
    s.on_message("zigbee2mqtt/hall", b'{"occupancy":true}', retain=True, now=t0 + 0.5)  # on subscription
    for i in range(1, 4):
        s.tick(t0 + i)
    s.close()
    lines = [json.loads(x) for x in steps.read_text().splitlines()]
    assert lines == [{"value": None, "ts": t0}, {"value": "occupied", "ts": t0 + 1}, {"value": "occupied", "ts": t0 + 2}]
    assert stat.S_IMODE(os.stat(steps).st_mode) == 0o600
    # the calibration reader takes this format as it is: the null step breaks the chain
    from streamguard.model.calibrate import read_transitions

    data = read_transitions(steps, StateMap(labels=("vacant", "occupied")), sample_period=1.0)
    assert data.counts.sum() == 1 and data.counts[1, 1] == 1 and data.steps == 2


@pytest.mark.parametrize("name", ["zigbee2mqtt.toml", "tasmota.toml", "esphome.toml"])
def test_examples_are_valid(name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("STREAMGUARD_BROKER__PORT", "18830")
    monkeypatch.setenv("STREAMGUARD_OUTBOX__PATH", str(tmp_path / "o.sqlite"))
    s = load_settings(EXAMPLES / name)
    assert s.broker.port == 18830 and s.outbox.path == tmp_path / "o.sqlite"
    assert all(c.resampled() for c in s.streams)


def test_example_errors_are_one_line(tmp_path: Path) -> None:
    conf = tmp_path / "c.toml"
    conf.write_text((EXAMPLES / "zigbee2mqtt.toml").read_text().replace("sample_period = 1.0", ""))
    with pytest.raises(ConfigError) as err:
        load_settings(conf)
    assert "\n" not in str(err.value) and "sample_period" in str(err.value)


@pytest.mark.parametrize("mechanism", ["redaction", "channel"])
def test_ticks_reach_the_runtime_as_steps(mechanism: str, tmp_path: Path) -> None:
    """Known ticks are accepted records at the tick's time; unknown ones take the rejected-frame
    path (a physical step, no seq, counted by reason) — for 3R and for a 3-state channel stream. An
    unmapped value is not a reading: the held one stays (counted for the log)."""
    from streamguard.sampling import bit_source
    from streamguard.stream.runtimes import make_runtime

    t0 = float(int(time.time()))
    if mechanism == "channel":
        stream: dict[str, Any] = {
            "labels": ["rest", "walk", "run"], "mechanism": "channel", "epsilon": None,
            "model": {"matrix": [[0.8, 0.15, 0.05], [0.1, 0.8, 0.1], [0.05, 0.15, 0.8]]},
            "channel": {"kind": "rr", "epsilon": 1.0, "prior": [0.3, 0.4, 0.3]},
            "ingest": {"topic": "act/state", "values": {"0": "rest", "1": "walk", "2": "run"}, "retained": True}}
    else:
        stream = {}
    settings = _settings(tmp_path, sample_period=1.0, **stream)
    cfg = settings.streams[0]
    ingest, rt = IngestStream(cfg), make_runtime(settings, cfg, bit_source(3, 0))
    topic, payloads = ((cfg.ingest.topic, [b"2", b"0", b"9"]) if mechanism == "channel"  # type: ignore[union-attr]
                       else ("zigbee2mqtt/hall", [b'{"occupancy":true}', b'{"occupancy":false}', b'{"occupancy":1}']))
    steps = []
    for i, payload in enumerate([None, *payloads, None]):
        if payload is not None:
            ingest.on_message(topic, payload, retain=i == 1, now=t0 + i + 0.5)  # (the first: on subscription)
        steps.append(ingest.tick(t0 + i + 1))
        rt.on_frame(steps[-1], t0 + i + 1)
    assert rt.counters.accepted == 4 and dict(rt.counters.rejected) == {"no-reading": 1}
    assert [isinstance(s, Rejection) for s in steps] == [True, False, False, False, False]
    assert ingest.local_counters()["unreadable"] == 1
    assert rt.steps.newest_ts == t0 + 5
    if mechanism == "redaction":
        assert rt.core.next_phys == 5 and rt.core.next_seq == 4  # every tick a step; seqs for the known ones
