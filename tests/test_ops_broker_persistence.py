"""Issue 28, deploy defaults that do not lose: the shipped device-broker configuration
(deploy/mosquitto/streamguard-device.conf, run verbatim but for ports and paths) keeps the raw
frames it acknowledged across a SIGKILL of the broker. Frames published while the daemon is away
wait in its persistent input session at the broker; the broker is killed (no clean save) and
restarted; the daemon comes back and every acknowledged frame becomes a record. With the
formerly shipped ``autosave_interval 60`` (a save every 60 s) all 500 were lost; with
``autosave_on_changes`` / ``autosave_interval 1`` (a save in the loop turn of each change) at most
the frames of the broker's last loop turn: Mosquitto sends the PUBACK in the turn and saves at its
end, and the kill here comes right after the last PUBACK — the producer has one frame in flight,
so at most 1 (measured: 0 or 1). Real daemon and Mosquitto; every wait bounded."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from brokers import DEVICE_USERS, DeviceAndCentral
from daemon_harness import Spy, daemon_toml, publish_all, running, stop_daemon, until

BASE, DEVICE, STREAM = "streamguard", "pk", "s"  # (the shipped ACL's topic base)
DATA = f"{BASE}/{DEVICE}/{STREAM}/data"
STATUS = f"{BASE}/{DEVICE}/status"
N = 500


def _start(conf: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMGUARD_")}
    with open(log, "ab") as err:
        return subprocess.Popen([sys.executable, "-m", "streamguard.cli", "run", "--config", str(conf)],
                                stdin=subprocess.DEVNULL, stderr=err, env=env)




async def test_frames_acknowledged_before_a_broker_sigkill_are_kept(device_and_central: DeviceAndCentral,
                                                                    tmp_path: Path) -> None:
    dc = device_and_central
    conf = daemon_toml(tmp_path / "c.toml", tmp_path / "o.sqlite", dc.device.port, base=BASE, device=DEVICE,
                       stream=STREAM, labels=("off", "on"), source="mqtt")
    conf.write_text(conf.read_text().replace(
        "[broker]\n", f'[broker]\nusername = "streamguard"\npassword = "{DEVICE_USERS["streamguard"]}"\n', 1))
    log = tmp_path / "daemon.log"
    watcher = Spy(dc.login("homeassistant"), f"{BASE}/{DEVICE}/#", name="watch")
    async with running(watcher.run()):
        first = _start(conf, log)  # makes the input session at the broker, then goes away
        try:
            await until(lambda: "online" in watcher.states(STATUS), 60, "the daemon online")
        finally:
            assert stop_daemon(first) == 0, log.read_text()
    frames = [(f"{BASE}/{DEVICE}/{STREAM}/raw", json.dumps({"value": "off", "ts": 1.79e9 + i}).encode())
              for i in range(N)]
    t = time.monotonic()
    assert await publish_all(dc.login("sensor"), frames) == N  # each acknowledged by the broker
    took = time.monotonic() - t
    dc.device.kill()  # SIGKILL: no save at shutdown
    dc.device.start()
    spy = Spy(dc.login("homeassistant"), DATA)
    async with running(spy.run()):
        await until(spy.subscribed.is_set, 10, "the spy")
        second = _start(conf, log)
        try:
            with contextlib.suppress(AssertionError):
                await spy.wait_until(lambda: len(spy.seqs(DATA)) >= N, 30, "the records")
        finally:
            assert stop_daemon(second) == 0, log.read_text()
        with contextlib.suppress(AssertionError):  # (the release delay's records come at the stop)
            await spy.wait_until(lambda: len(spy.seqs(DATA)) >= N, 5, "the held records")
    lost = N - len(spy.seqs(DATA))
    print(f"broker SIGKILL with the shipped config: {lost} of {N} acknowledged frames lost "
          f"(publishing them took {took:.2f} s)")
    assert lost <= 1  # (the one frame acknowledged in the kill's loop turn: module docstring)
