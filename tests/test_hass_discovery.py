"""Home Assistant MQTT discovery (issue 10, part 2; streamguard/stream/hass.py).

- The configs use only keys that Home Assistant documents for the component
  (home-assistant.io ``binary_sensor.mqtt`` / ``sensor.mqtt``), with the required ones present.
- What Home Assistant would show for every record the real runtime publishes: the templates are
  rendered with Jinja's sandbox (Home Assistant's template engine) and the result is handled the
  way Home Assistant's MQTT binary_sensor and sensor do it (home-assistant/core
  ``components/mqtt/binary_sensor.py``, ``sensor.py`` since #127032): a redacted record shows as
  *unknown*, never as the last value; a released one as its own state.
- On a real Mosquitto: the daemon announces retained configs, re-sends them when Home Assistant
  publishes ``online`` on ``<prefix>/status``, and at the next start removes the config of a
  stream taken out of the configuration (and all of them when discovery is turned off).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from brokers import Broker
from daemon_harness import Spy, daemon_running, daemon_toml, running

from streamguard.config import ConfigError, Settings, load_settings
from streamguard.sampling import bit_source
from streamguard.stream.hass import Discovery, controls, display, entity, published_values
from streamguard.stream.runtimes import make_runtime

jinja2 = pytest.importorskip("jinja2")
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

BASE, DEVICE = "sghass", "hassdev"
LABELS = ("vacant", "occupied")
STATUS = f"{BASE}/{DEVICE}/status"

# -- documented discovery keys (home-assistant.io, source/_integrations/*.mqtt.markdown) ------------
_COMMON = {"availability", "availability_mode", "availability_template", "availability_topic", "default_entity_id",
           "device", "device_class", "enabled_by_default", "encoding", "entity_category", "entity_picture",
           "expire_after", "force_update", "icon", "json_attributes_template", "json_attributes_topic", "name",
           "object_id", "origin", "payload_available", "payload_not_available", "platform", "qos", "state_topic",
           "unique_id", "value_template"}
DOCUMENTED = {
    "binary_sensor": _COMMON | {"off_delay", "payload_off", "payload_on"},
    "button": (_COMMON - {"state_topic", "value_template", "expire_after", "force_update", "device_class"})
    | {"command_template", "command_topic", "device_class", "payload_press", "retain"},
    "switch": _COMMON - {"expire_after", "force_update"}
    | {"command_template", "command_topic", "optimistic", "payload_off", "payload_on", "retain", "state_off",
       "state_on"},
    "sensor": _COMMON | {"last_reset_value_template", "options", "suggested_display_precision", "state_class",
                         "unit_of_measurement"},
}
DEVICE_KEYS = {"configuration_url", "connections", "hw_version", "identifiers", "manufacturer", "model", "model_id",
               "name", "serial_number", "suggested_area", "sw_version", "via_device"}
ORIGIN_KEYS = {"name", "sw_version", "support_url"}


def settings_for(tmp_path: Path, streams: str, *, enabled: bool = True) -> Settings:
    conf = tmp_path / "c.toml"
    conf.write_text(f'device = "{DEVICE}"\ntopic_base = "{BASE}"\n[outbox]\npath = "{tmp_path / "o.sqlite"}"\n'
                    f'[homeassistant]\nenabled = {str(enabled).lower()}\n{streams}')
    return load_settings(conf)


BINARY = f"""[[streams]]
name = "hall"
labels = {json.dumps(list(LABELS))}
epsilon = 1.0
design = "exact"
delay = 0
[streams.model]
alpha = 0.1
beta = 0.2
[streams.homeassistant]
device_class = "occupancy"
name = "Hall occupancy"
"""
ENUM = """[[streams]]
name = "activity"
labels = ["rest", "walk", "run"]
mechanism = "channel"
[streams.model]
matrix = [[0.8, 0.15, 0.05], [0.1, 0.8, 0.1], [0.05, 0.15, 0.8]]
[streams.channel]
kind = "rr"
epsilon = 1.0
prior = [0.3, 0.4, 0.3]
"""


# -- what Home Assistant does with a message (its MQTT entity code, reduced to the state) ----------
#: homeassistant/components/mqtt/const.py: a state that renders to this string means *unknown*.
PAYLOAD_NONE = "None"
_ENV = ImmutableSandboxedEnvironment()


def render(template: str, payload: bytes) -> str:
    """MqttValueTemplate.async_render_with_possible_json_value: value and value_json, stripped."""
    text = payload.decode()
    return _ENV.from_string(template).render(value=text, value_json=json.loads(text)).strip()


def ha_state(config: dict[str, Any], component: str, payload: bytes, previous: str) -> str:
    """The entity state after ``payload`` on its state topic (``previous`` when ignored)."""
    out = render(config["value_template"], payload)
    if component == "binary_sensor":
        if not out:
            return previous
        if out == config.get("payload_on", "ON"):
            return "on"
        if out == config.get("payload_off", "OFF"):
            return "off"
        if out == PAYLOAD_NONE:
            return "unknown"
        return previous  # "No matching payload found": ignored, the last state stays
    if config.get("device_class") == "enum":
        # 2024.3.3 (the release for Python 3.11) shows an enum sensor's rendered text as it is, "None"
        # included; 2024.10 and later also check it against the options
        assert out in config["options"], f"{out!r} is not an enum option"
        return out
    if out == PAYLOAD_NONE:
        return "unknown"
    return out


def check_documented(component: str, config: dict[str, Any]) -> None:
    assert set(config) <= DOCUMENTED[component], set(config) - DOCUMENTED[component]
    assert set(config["device"]) <= DEVICE_KEYS and config["device"]["identifiers"]
    assert set(config["origin"]) <= ORIGIN_KEYS and config["origin"]["name"]
    assert config["unique_id"] and config["availability"][0]["topic"] == STATUS
    assert config["availability_mode"] == "all" if len(config["availability"]) > 1 else "availability_mode" not in config
    if "options" in config:
        assert config["device_class"] == "enum" and config["options"] and "state_class" not in config


def runtime_for(settings: Settings, i: int = 0) -> Any:
    return make_runtime(settings, settings.streams[i], bit_source(None, i))


def frames(labels: tuple[str, ...], n: int) -> list[bytes]:
    t0 = 1_700_000_000.0
    return [json.dumps({"value": labels[(i * 7 + i // 3) % len(labels)], "ts": t0 + i,
                        "private": i % 9 == 4}).encode() for i in range(n)]


def test_binary_sensor_config_is_documented_and_shows_redacted_as_unknown(tmp_path: Path) -> None:
    s = settings_for(tmp_path, BINARY)
    rt = runtime_for(s)
    e = entity(s, rt)
    assert e.component == "binary_sensor"
    assert e.topic == f"homeassistant/binary_sensor/streamguard_{DEVICE}/hall/config"
    check_documented("binary_sensor", e.config)
    assert e.config["device_class"] == "occupancy" and e.config["name"] == "Hall occupancy"
    assert e.config["state_topic"] == e.config["json_attributes_topic"] == f"{BASE}/{DEVICE}/hall/data"
    assert json.loads(e.payload()) == e.config

    payloads = []
    for f in frames(LABELS, 60):
        releases, _ = rt.on_frame(f, 1_700_000_100.0)
        payloads += [rt.payload(r) for r in releases]
    payloads += [rt.payload(r) for r in rt.drain()]
    records = [json.loads(p) for p in payloads]
    assert len(records) == 60 and any(r["redacted"] for r in records) and not all(r["redacted"] for r in records)
    state = "occupied-before"  # a state HA would keep if a message were ignored
    for p, r in zip(payloads, records):
        state = ha_state(e.config, "binary_sensor", p, state)
        assert state == ("unknown" if r["redacted"] else "on" if r["value"] == "occupied" else "off"), r
        attrs = json.loads(render(e.config["json_attributes_template"], p))
        assert attrs == {"seq": r["seq"], "redacted": r["redacted"], "mode": "csprng", "privatized": True,
                         "privacy_status_topic": f"{BASE}/{DEVICE}/hall/privacy"}
    # a batch (publish.batch_max > 1) shows its last record
    batch = json.dumps(records[:5]).encode()
    last = records[4]
    assert ha_state(e.config, "binary_sensor", batch, "x") == \
        ("unknown" if last["redacted"] else "on" if last["value"] == "occupied" else "off")
    # available while the daemon's status is online (the will included) and the stream's privacy
    # status counts a record published by this process: not the previous session's last value
    status, published = e.config["availability"]
    for body, want in (({"device": DEVICE, "state": "online", "instance": "x"}, "online"),
                       ({"device": DEVICE, "state": "offline"}, "offline")):
        assert render(status["value_template"], json.dumps(body).encode()) == want
    assert published["topic"] == f"{BASE}/{DEVICE}/hall/privacy"
    for n, want in ((0, "offline"), (1, "online"), (250, "online")):
        body = {"delivery": {"stream": {"published_records": n, "buffered": 0}}}
        assert render(published["value_template"], json.dumps(body).encode()) == want


def test_privacy_controls_press_a_mark_and_show_its_status(tmp_path: Path) -> None:
    s = settings_for(tmp_path, BINARY.replace("delay = 0", "delay = 3"))
    rt = runtime_for(s)
    button, switch, status = controls(s, rt)
    assert (button.component, switch.component, status.component) == ("button", "switch", "sensor")
    assert button.topic == f"homeassistant/button/streamguard_{DEVICE}/hall_private/config"
    check_documented("button", button.config)
    check_documented("switch", switch.config)
    assert switch.config["command_topic"] == button.config["command_topic"]
    assert switch.config["state_topic"] == f"{BASE}/{DEVICE}/hall/privacy"
    check_documented("sensor", status.config)
    assert button.config["command_topic"] == f"{BASE}/{DEVICE}/hall/cmd"
    assert status.config["state_topic"] == status.config["json_attributes_topic"] == f"{BASE}/{DEVICE}/hall/privacy"
    assert "Hall occupancy" in button.config["name"] and len({button.config["unique_id"], status.config["unique_id"],
                                                             entity(s, rt).config["unique_id"]}) == 3

    def shown(doc: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        payload = json.dumps(doc).encode()
        return (render(status.config["value_template"], payload),
                json.loads(render(status.config["json_attributes_template"], payload)))

    ledger: dict[str, Any] = {"redaction": None}
    state, attrs = shown(rt.privacy_status() | {"ledger": ledger})
    steps = rt.plan.left_horizon + rt.plan.right_horizon + 1
    assert state == "no marks" and attrs["marks"] == 0 and attrs["last_mark_seq"] is None
    # after a restart the ledger remembers marks the status no longer lists: never "no marks" then
    remembered = {"redaction": {"epsilon": 0.8, "budget": 3.0, "count": 2, "not_honoured": 0}}
    state, attrs = shown(rt.privacy_status() | {"ledger": remembered})
    assert state == "no recent marks" and attrs["marks"] == 2
    assert attrs["mark_cost_steps"] == steps and attrs["mark_cost_minutes"] is None  # (no sample_period)
    assert render(switch.config["value_template"], json.dumps(rt.privacy_status()).encode()) == "OFF"
    # the button's payload is the stream's "now" command: a mark on the newest step, with its accounting
    for f in frames(LABELS, 5):
        rt.on_frame(f.replace(b'"private": true', b'"private": false'), 1_700_000_100.0)
    assert rt.on_command(button.config["payload_press"].encode()) is None
    doc = rt.privacy_status()
    assert [m["source"] for m in doc["open_marks"]] == ["command"]
    # the switch's payloads are the stream's privacy mode commands; its state follows the status
    assert rt.on_command(switch.config["payload_on"].encode()) is None and rt.privacy_mode
    assert render(switch.config["value_template"], json.dumps(rt.privacy_status()).encode()) == "ON"
    assert rt.on_command(switch.config["payload_off"].encode()) is None and not rt.privacy_mode
    ledger = {"redaction": {"epsilon": 0.8, "budget": 3.0, "count": 1, "not_honoured": 0}}
    state, attrs = shown(doc | {"ledger": ledger})
    assert state == "protecting"
    assert attrs | {"last_mark_time": None} == {
        "epsilon_per_mark": 1.0, "epsilon_used": 0.8, "budget": 3.0, "marks": 1, "marks_not_honoured": 0,
        "last_mark_seq": doc["open_marks"][0]["seq"], "last_mark_time": None, "last_mark_source": "command",
        "last_mark_reason": None, "mark_cost_steps": steps, "mark_cost_minutes": None}
    done = dict(doc["open_marks"][0])
    assert shown(doc | {"open_marks": [], "recent_marks": [done], "ledger": ledger})[0] == "honoured"
    refused = done | {"honoured": False, "reason": "budget"}
    state, attrs = shown(doc | {"open_marks": [], "recent_marks": [done, refused], "ledger": ledger})
    assert state == "not honoured" and attrs["last_mark_reason"] == "budget"
    # with a sample period the cost is also in minutes; a channel stream (no commands) has no controls
    s2 = settings_for(tmp_path, BINARY.replace("delay = 0", "sample_period = 2.0"))
    rt2 = runtime_for(s2)
    cost = json.loads(render(controls(s2, rt2)[-1].config["json_attributes_template"],
                             json.dumps(rt2.privacy_status() | {"ledger": None}).encode()))
    steps2 = rt2.plan.left_horizon + rt2.plan.right_horizon + 1
    assert cost["mark_cost_minutes"] == round(steps2 * 2.0 / 60, 2)
    s3 = settings_for(tmp_path, ENUM)
    assert controls(s3, runtime_for(s3)) == []


def test_binary_on_label_is_configurable(tmp_path: Path) -> None:
    s = settings_for(tmp_path, BINARY.replace('device_class = "occupancy"', 'on = "vacant"'))
    e = entity(s, runtime_for(s))
    assert "device_class" not in e.config
    rec = {"device": DEVICE, "stream": "hall", "seq": 0, "ts": 1.0, "value": "vacant", "redacted": False,
           "redaction": [0.0, 0.0], "mode": "csprng"}
    assert ha_state(e.config, "binary_sensor", json.dumps(rec).encode(), "x") == "on"
    assert ha_state(e.config, "binary_sensor", json.dumps(rec | {"value": "occupied"}).encode(), "x") == "off"


def test_enum_sensor_lists_every_published_value(tmp_path: Path) -> None:
    s = settings_for(tmp_path, ENUM)
    rt = runtime_for(s)
    e = entity(s, rt)
    assert e.component == "sensor" and e.topic.startswith("homeassistant/sensor/")
    check_documented("sensor", e.config)
    assert e.config["options"] == ["rest", "walk", "run", "unknown"]
    assert [display(v) for v in published_values(rt)] == ["rest", "walk", "run"]
    seen = set()
    for f in frames(("rest", "walk", "run"), 40):
        releases, _ = rt.on_frame(f, 1_700_000_100.0)
        for r in releases:
            p = rt.payload(r)
            rec = json.loads(p)
            shown = ha_state(e.config, "sensor", p, "x")
            assert shown == ("unknown" if rec["redacted"] else rec["value"])
            seen.add(shown)
    assert seen - {"unknown"} <= set(e.config["options"]) and len(seen - {"unknown"}) >= 2
    redacted = {"device": DEVICE, "stream": "activity", "seq": 1, "ts": 1.0, "value": None, "redacted": True,
                "mode": "csprng"}
    assert ha_state(e.config, "sensor", json.dumps(redacted).encode(), "walk") == "unknown"
    merged = redacted | {"value": ["rest", "walk"], "redacted": False}  # a merged group (watchdog outputs)
    assert render(e.config["value_template"], json.dumps(merged).encode()) == "rest|walk" == display(["rest", "walk"])


def test_binned_enum_values_render_as_their_options(tmp_path: Path) -> None:
    s = settings_for(tmp_path, ENUM.replace('labels = ["rest", "walk", "run"]', "bins = [0, 0.5, 10, 1e6]"))
    rt = runtime_for(s)
    e = entity(s, rt)
    assert e.config["options"] == ["0.0", "0.5", "10.0", "unknown"]
    for v in published_values(rt):
        rec = {"seq": 0, "value": v, "redacted": False, "mode": "csprng"}
        assert ha_state(e.config, "sensor", json.dumps(rec).encode(), "x") == display(v)


@pytest.mark.parametrize("labels", [["None", "a", "b"], ["a", " b", "c"], ["a", "", "c"], ["unknown", "a", "b"],
                                    ["a", "unavailable", "b"]])
def test_enum_values_that_home_assistant_cannot_show_are_refused(tmp_path: Path, labels: list[str]) -> None:
    streams = ENUM.replace('["rest", "walk", "run"]', json.dumps(labels))
    with pytest.raises(ConfigError, match="Home Assistant cannot show"):  # at config check
        settings_for(tmp_path, streams)
    s = settings_for(tmp_path, streams, enabled=False)  # and at start, on every value it can publish
    with pytest.raises(ConfigError, match="Home Assistant cannot show"):
        entity(s, runtime_for(s))


def test_stream_homeassistant_keys_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="two-state streams"):
        settings_for(tmp_path, ENUM + '[streams.homeassistant]\ndevice_class = "occupancy"\n')
    with pytest.raises(ConfigError, match="device_class"):
        settings_for(tmp_path, BINARY.replace('"occupancy"', '"no-such-class"'))
    with pytest.raises(ConfigError, match="homeassistant.on"):
        settings_for(tmp_path, BINARY.replace('device_class = "occupancy"', 'on = "maybe"'))


def test_disabled_discovery_announces_nothing(tmp_path: Path) -> None:
    s = settings_for(tmp_path, BINARY, enabled=False)
    d = Discovery(s, [runtime_for(s)])
    assert d.entities == {} and d.subscriptions == []


# -- on a real broker -------------------------------------------------------------------------------
def config_file(tmp_path: Path, port: int, *, second: bool, enabled: bool = True) -> Path:
    extra = f"[homeassistant]\nenabled = {str(enabled).lower()}\n"
    extra += '[streams.homeassistant]\ndevice_class = "motion"\n'
    if second:
        extra += ENUM
    return daemon_toml(tmp_path / "d.toml", tmp_path / "outbox.sqlite", port, base=BASE, device=DEVICE,
                       stream="hall", labels=LABELS, extra=extra)


HALL = f"homeassistant/binary_sensor/streamguard_{DEVICE}/hall/config"
HALL_BUTTON = f"homeassistant/button/streamguard_{DEVICE}/hall_private/config"
HALL_PRIVACY = f"homeassistant/sensor/streamguard_{DEVICE}/hall_privacy/config"
HALL_MODE = f"homeassistant/switch/streamguard_{DEVICE}/hall_privacy_mode/config"
HALL_ALL = {HALL, HALL_BUTTON, HALL_PRIVACY, HALL_MODE}
ACTIVITY = f"homeassistant/sensor/streamguard_{DEVICE}/activity/config"


async def remembered(outbox: Path, want: set[str]) -> set[str]:
    """The config topics the daemon's outbox remembers, once they are ``want`` (a running daemon
    forgets a removed one right after the broker acknowledged the removal); at most 10 s."""
    deadline = time.monotonic() + 10
    while True:
        with contextlib.closing(sqlite3.connect(f"file:{outbox}?mode=ro", uri=True)) as db:
            got = {topic for (topic,) in db.execute("SELECT topic FROM announced")}
        if got == want or time.monotonic() > deadline:
            return got
        await asyncio.sleep(0.05)


async def retained_configs(broker: Broker) -> dict[str, bytes]:
    """The retained messages under homeassistant/ now (a fresh subscriber gets exactly those)."""
    spy = Spy(broker.broker_config(), "homeassistant/+/+/+/config", name="retained")
    async with running(spy.run()):
        await asyncio.wait_for(spy.subscribed.wait(), 10)
        await asyncio.sleep(0.5)  # retained messages follow the SUBACK at once
    return {m.topic: m.payload for m in spy.messages if m.retain}


async def test_daemon_announces_resends_and_removes(tmp_path: Path, mosquitto: Broker) -> None:
    cfg = mosquitto.broker_config()
    outbox = tmp_path / "outbox.sqlite"
    live = Spy(cfg, "homeassistant/#", name="live")
    async with running(live.run()):
        await asyncio.wait_for(live.subscribed.wait(), 10)
        settings = load_settings(config_file(tmp_path, mosquitto.port, second=True))
        async with daemon_running(settings):
            await live.wait_until(lambda: HALL_ALL | {ACTIVITY} <= {m.topic for m in live.messages}, 30, "announcement")
            before = len(live.on("/config"))
            # Home Assistant restarts: its birth message makes the daemon send every config again
            await live.transport.publish("homeassistant/status", b"online")
            await live.wait_until(lambda: len(live.on("/config")) >= before + 5, 10, "re-announcement")
            # a flood of birth messages gets one re-announcement per RESEND_INTERVAL, not one each
            for _ in range(20):
                await live.transport.publish("homeassistant/status", b"online")
            await asyncio.sleep(1.0)
            assert len(live.on("/config")) == before + 5
            assert await remembered(outbox, HALL_ALL | {ACTIVITY}) == HALL_ALL | {ACTIVITY}
        retained = await retained_configs(mosquitto)
        assert set(retained) == HALL_ALL | {ACTIVITY}
        hall = json.loads(retained[HALL])
        assert hall["device_class"] == "motion" and hall["state_topic"] == f"{BASE}/{DEVICE}/hall/data"
        assert json.loads(retained[ACTIVITY])["options"] == ["rest", "walk", "run", "unknown"]

        # the "activity" stream is taken out of the configuration: its entity is deleted
        settings = load_settings(config_file(tmp_path, mosquitto.port, second=False))
        async with daemon_running(settings):
            await live.wait_until(lambda: any(m.topic == ACTIVITY and m.payload == b"" for m in live.messages),
                                  30, "removal")
            assert await remembered(outbox, HALL_ALL) == HALL_ALL
        assert set(await retained_configs(mosquitto)) == HALL_ALL

        # discovery turned off: the remaining entity goes too, and nothing is announced
        settings = load_settings(config_file(tmp_path, mosquitto.port, second=False, enabled=False))
        async with daemon_running(settings):
            await live.wait_until(lambda: any(m.topic == HALL and m.payload == b"" for m in live.messages),
                                  30, "removal of the last entity")
            assert await remembered(outbox, set()) == set()
        assert await retained_configs(mosquitto) == {}
