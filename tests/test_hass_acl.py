"""The shipped ACL lets Home Assistant's login press the privacy buttons and nothing more (issue 26;
deploy/mosquitto/streamguard.acl, stream/hass.py's button entities).

On the device broker running the shipped configuration and ACL (tests/brokers.py
``device_and_central``), the ``homeassistant`` login publishes what its button entity publishes —
``{"private": "now"}`` on a stream's command topic — and the daemon marks the newest step (the
same mark and accounting as any command). What the same login publishes anywhere else (a raw
topic, a sensor's topic, the daemon's status, a record topic) reaches nobody, and it cannot read
the command topics. Before the grant the broker dropped the command silently.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from brokers import DeviceAndCentral, device_and_central  # noqa: F401  (fixture)
from daemon_harness import Spy, daemon_running, daemon_toml, publish_all, running

from streamguard.config import load_settings

BASE, DEVICE, STREAM = "streamguard", "acltest", "door"
LABELS = ("closed", "open")
RAW, CMD = f"{BASE}/{DEVICE}/{STREAM}/raw", f"{BASE}/{DEVICE}/{STREAM}/cmd"
NOW = b'{"private": "now"}'


async def test_home_assistant_login_presses_the_button_and_nothing_else(
        tmp_path: Path, device_and_central: DeviceAndCentral) -> None:  # noqa: F811
    brokers = device_and_central
    conf = daemon_toml(tmp_path / "d.toml", tmp_path / "outbox.sqlite", brokers.device.port, base=BASE,
                       device=DEVICE, stream=STREAM, labels=LABELS, extra="[homeassistant]\nenabled = true\n")
    settings = load_settings(conf, broker=brokers.login("streamguard"))
    # the daemon's login sees every topic it may read: whatever Home Assistant's login gets through
    watcher = Spy(brokers.login("streamguard"), "#", name="watcher")
    ha_reader = Spy(brokers.login("homeassistant"), f"{BASE}/{DEVICE}/+/cmd", name="ha-reader")
    t0 = time.time() - 10
    frames = [(RAW, json.dumps({"value": LABELS[i % 2], "ts": t0 + i}).encode()) for i in range(6)]
    forged = [(RAW, json.dumps({"value": "open", "ts": t0 + 100}).encode()),
              ("zigbee2mqtt/hall", b'{"occupancy": true}'),
              (f"{BASE}/{DEVICE}/status", b'{"state": "offline"}'),
              (f"{BASE}/{DEVICE}/{STREAM}/data", b'{"seq": 999, "value": "open"}')]
    async with running(watcher.run(), ha_reader.run()):
        await asyncio.wait_for(asyncio.gather(watcher.subscribed.wait(), ha_reader.subscribed.wait()), 10)
        async with daemon_running(settings) as (daemon, _, _):
            await watcher.wait_until(lambda: any(m.topic == f"{BASE}/{DEVICE}/status" and b"online" in m.payload
                                                 for m in watcher.messages), 30, "online")
            await publish_all(brokers.login("sensor"), frames, identifier="firmware")
            rt = daemon.runtimes[STREAM]
            await watcher.wait_until(lambda: rt.privacy_status()["next_seq"] == len(frames), 10, "the frames")
            await publish_all(brokers.login("homeassistant"), forged + [(CMD, NOW)], identifier="ha")

            def marks() -> list[dict]:
                st = rt.privacy_status()
                return st["open_marks"] + st["recent_marks"]
            await watcher.wait_until(lambda: bool(marks()), 10, "the button's mark")
            await asyncio.sleep(0.5)
            assert [(m["source"], m["seq"]) for m in marks()] == [("command", len(frames) - 1)]
            assert rt.privacy_status()["next_seq"] == len(frames)  # the forged raw frame never arrived
            assert daemon.stats.commands == 1
    got = {(m.topic, m.payload) for m in watcher.messages}
    assert (CMD, NOW) in got
    assert not got & set(forged), got & set(forged)
    assert not ha_reader.messages  # Home Assistant's login cannot read the command topics
