"""Issue 13, systemd: the notify protocol against a fake ``$NOTIFY_SOCKET`` (an abstract datagram
socket, as systemd uses): READY=1 and STATUS arrive, WATCHDOG=1 pings arrive at half of
``$WATCHDOG_USEC``, STOPPING=1 on SIGTERM, and a stalled event loop stops the pings."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from brokers import Broker
from daemon_harness import daemon_toml

from streamguard.stream.systemd import Notifier


def _listener() -> tuple[socket.socket, str]:
    name = f"@streamguard-test-{secrets.token_hex(6)}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name[1:])
    sock.settimeout(0.2)
    return sock, name


def _receive(sock: socket.socket, until: float) -> list[tuple[float, dict[str, str]]]:
    out = []
    while time.monotonic() < until:
        try:
            data = sock.recv(4096)
        except TimeoutError:
            continue
        out.append((time.monotonic(), dict(line.split("=", 1) for line in data.decode().splitlines())))
    return out


def test_ready_watchdog_and_stopping_from_the_daemon(mosquitto: Broker, tmp_path: Path) -> None:
    sock, name = _listener()
    conf = daemon_toml(tmp_path / "c.toml", tmp_path / "o.sqlite", mosquitto.port, base="sgs", device="sd",
                       stream="s", labels=("off", "on"), source="mqtt")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMGUARD_")}
    env |= {"NOTIFY_SOCKET": name, "WATCHDOG_USEC": "400000"}  # pings every 0.2 s
    with sock:
        p = subprocess.Popen([sys.executable, "-m", "streamguard.cli", "run", "--config", str(conf)],
                             stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        try:
            msgs: list[tuple[float, dict[str, str]]] = []
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not any("READY" in m for _, m in msgs):
                msgs += _receive(sock, time.monotonic() + 0.5)
            msgs += _receive(sock, time.monotonic() + 1.5)
            p.send_signal(signal.SIGTERM)
            msgs += _receive(sock, time.monotonic() + 3)
            assert p.wait(25) == 0
        finally:
            if p.poll() is None:
                p.kill()
                p.wait(10)
    ready = [m for _, m in msgs if m.get("READY") == "1"]
    assert len(ready) == 1 and "running 1 stream(s): s" in ready[0]["STATUS"], msgs
    t_ready = next(t for t, m in msgs if m.get("READY") == "1")
    # the start-up (plan design) is extended before READY=1 and no longer after it
    extend = [t for t, m in msgs if "EXTEND_TIMEOUT_USEC" in m]
    assert extend and max(extend) < t_ready, msgs
    pings = [t for t, m in msgs if m.get("WATCHDOG") == "1" and t >= t_ready]
    assert len(pings) >= 5, msgs  # ~1.5 s at 0.2 s
    assert max(b - a for a, b in zip(pings, pings[1:])) < 1.0
    assert any(m.get("STOPPING") == "1" for _, m in msgs)


def test_a_stalled_loop_stops_the_pings() -> None:
    """The pings come from the event loop: while it is blocked (here 1.2 s of synchronous work, as
    a hung call would), none is sent, so systemd's WatchdogSec would expire."""
    sock, name = _listener()
    notifier = Notifier({"NOTIFY_SOCKET": name, "WATCHDOG_USEC": "200000"})  # pings every 0.1 s
    assert notifier.watchdog_interval == 0.1

    async def scenario() -> tuple[float, float]:
        task = asyncio.create_task(notifier.watchdog())
        await asyncio.sleep(0.5)
        stall_from = time.monotonic()
        time.sleep(1.2)  # the stall
        stall_to = time.monotonic()
        await asyncio.sleep(0.5)
        task.cancel()
        return stall_from, stall_to

    with sock:
        sock.setblocking(False)
        stall_from, stall_to = asyncio.run(scenario())
        times = []
        while True:
            try:
                sock.recv(64)
            except BlockingIOError:
                break
            times.append(None)
    # 0.5 s before and after at 0.1 s: about 10-12 pings, none of the ~12 the stall would have had
    assert 6 <= len(times) <= 14, len(times)


def test_start_extensions_while_busy_then_none() -> None:
    """EXTEND_TIMEOUT_USEC (systemd >= 236) while blocking start-up work runs — so a first start's
    plan design longer than TimeoutStartSec=180 is not killed — at the stated interval, none after
    the work ends, and none past the overall limit."""
    sock, name = _listener()
    notifier = Notifier({"NOTIFY_SOCKET": name})
    with sock:
        with notifier.extending("designing", every=0.1, by=2.0):
            time.sleep(0.55)  # blocking, as plan design is (the pings come from a thread)
        msgs = _receive(sock, time.monotonic() + 0.5)
        with notifier.extending("designing", every=0.1, by=2.0, limit=0.25):
            time.sleep(0.8)
        limited = _receive(sock, time.monotonic() + 0.3)
    times = [t for t, m in msgs if m == {"EXTEND_TIMEOUT_USEC": "2000000", "STATUS": "designing"}]
    # at 0, 0.1, ..., 0.5 s, and none in the 0.5 s after (they would make ~11)
    assert len(times) == len(msgs) and 5 <= len(times) <= 7, msgs
    assert 2 <= len(limited) <= 4, limited  # at 0, 0.1, 0.2 s, then the limit
    assert not Notifier({}).enabled  # (and without a socket the context does nothing)
    with Notifier({}).extending("x"):
        pass


def test_no_socket_no_messages_and_stale_watchdog_pid_ignored() -> None:
    assert not Notifier({}).notify(READY="1")
    assert Notifier({"NOTIFY_SOCKET": "@x", "WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"}).watchdog_interval is None


async def test_frames_published_right_after_ready_are_all_decided(mosquitto: Broker, tmp_path: Path) -> None:
    """Issue 28: READY=1 means the daemon can take input. A producer that starts publishing QoS 1
    raw frames the moment READY=1 arrives (a first start: no session waits at the broker yet)
    gets every frame decided and published (before: READY came before the input session had
    subscribed, and the frames of the first ~0.1 s were lost)."""
    from daemon_harness import Spy, running, stop_daemon

    from streamguard.config import PublishConfig
    from streamguard.stream.transport import MqttTransport

    sock, name = _listener()
    sock.setblocking(False)
    conf = daemon_toml(tmp_path / "c.toml", tmp_path / "o.sqlite", mosquitto.port, base="sgr", device="rd",
                       stream="s", labels=("off", "on"), source="mqtt")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMGUARD_")} | {"NOTIFY_SOCKET": name}
    cfg = mosquitto.broker_config()
    spy = Spy(cfg, "sgr/rd/s/data")
    producer = MqttTransport(cfg, PublishConfig(), device="producer", status_topic="x", will=False)
    n = 20
    loop = asyncio.get_running_loop()
    with sock:
        async with running(spy.run()), producer:
            await asyncio.wait_for(spy.subscribed.wait(), 10)
            p = subprocess.Popen([sys.executable, "-m", "streamguard.cli", "run", "--config", str(conf)],
                                 stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
            try:
                async with asyncio.timeout(60):
                    while b"READY=1" not in await loop.sock_recv(sock, 4096):
                        pass
                for i in range(n):  # over ~0.1 s
                    await producer.publish("sgr/rd/s/raw", json.dumps({"value": "off", "i": i}).encode(), qos=1)
                    await asyncio.sleep(0.005)
                with contextlib.suppress(AssertionError):
                    await spy.wait_until(lambda: len(spy.seqs("sgr/rd/s/data")) >= n, 15, "records")
            finally:
                stop_daemon(p)
    got = len(spy.seqs("sgr/rd/s/data"))
    print(f"frames published right after READY=1: {got} of {n} decided")
    assert got == n, (got, p.stderr.read().decode() if p.stderr else "")
