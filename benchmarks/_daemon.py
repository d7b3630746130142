"""A ``streamguard run`` subprocess for the benchmarks that drive the real daemon (bench_uptime,
chaos): the shipped example configuration pointed at a loopback broker, the process's memory from
/proc, a paced producer, and a bounded stop.

Nothing here measures by itself; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import aiomqtt

from streamguard.support.loopback import HOST

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "streamguard.toml"
#: The shipped device broker's configuration (deploy/README.md, "The device broker").
SHIPPED_BROKER = ROOT / "deploy" / "mosquitto" / "streamguard-device.conf"
#: Its per-client bounds: QoS 1 messages in flight, and what is queued for a client that is slow.
BROKER_BOUNDS = ("max_inflight_messages", "max_queued_messages", "max_queued_bytes")
#: Mosquitto's count of messages it dropped at those bounds (every ``sys_interval`` seconds).
DROPPED_TOPIC = "$SYS/broker/publish/messages/dropped"
#: The example's device and stream (examples/streamguard.toml).
DEVICE, STREAM, BASE = "kitchen-pi", "occupancy", "streamguard"
RAW_TOPIC = f"{BASE}/{DEVICE}/{STREAM}/raw"
DATA_TOPIC = f"{BASE}/{DEVICE}/{STREAM}/data"
STOP_TIMEOUT = 30.0
PUBLISH_TIMEOUT = 60.0  # a paced publish's acknowledgement (aiomqtt's 10 s is short on a loaded machine)


def example_config(path: Path, port: int, state: Path, *, schedule: bool = False, device: str = DEVICE,
                   extra: str = "") -> Path:
    """examples/streamguard.toml with the broker's port, the outbox under ``state`` and the given
    ``device``; its daily private window (23:00–06:00) is dropped unless ``schedule``, so that a run
    does not depend on the time of day. ``extra`` is appended. Returns ``path``."""
    text = EXAMPLE.read_text()
    for old, new in (("port = 1883", f"port = {port}"), ("/var/lib/streamguard/outbox.sqlite", str(state / "outbox.sqlite")),
                     (f'device = "{DEVICE}"', f'device = "{device}"')):
        if old not in text:
            raise KeyError(f"examples/streamguard.toml no longer sets {old!r}: the benchmark must follow")
        text = text.replace(old, new)
    if not schedule:
        head, sep, _ = text.partition("[[streams.schedule]]")
        if not sep:
            raise KeyError("examples/streamguard.toml no longer has a [[streams.schedule]]")
        text = head
    path.write_text(text + "\n" + extra)
    return path


def shipped_bounds() -> list[str]:
    """The lines of the shipped device broker configuration that set :data:`BROKER_BOUNDS`.

    A broker on Mosquitto's defaults (20 in flight, 1,000 queued) drops, after acknowledging them
    to the producer, the frames past 1,020 that wait for a daemon a moment behind: at 180 frames/s a
    stall of 9 s lost 595 frames (issue 28); the shipped 10,000 hold 55 s."""
    lines = [ln.strip() for ln in SHIPPED_BROKER.read_text().splitlines() if ln.split(" ", 1)[0] in BROKER_BOUNDS]
    if sorted(ln.split(" ", 1)[0] for ln in lines) != sorted(BROKER_BOUNDS):
        raise KeyError(f"{SHIPPED_BROKER.name} no longer sets each of {BROKER_BOUNDS} once: the benchmark must follow")
    return lines


def read_counters(path: Path) -> dict[str, float]:
    """The samples of a Prometheus textfile (stream/metrics.py) summed over their labels, by
    metric name ({} if there is no file yet)."""
    out: dict[str, float] = {}
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            if line and not line.startswith("#"):
                series, _, value = line.rpartition(" ")
                name = series.partition("{")[0]
                out[name] = out.get(name, 0.0) + float(value)
    return out


def memory_kb(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon and RssFile of a process, kB ({} once it is gone)."""
    out: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[key] = int(rest.split()[0])
    return out


class Daemon:
    """``python -m streamguard.cli run --config CONFIG`` with its stderr in ``log``."""

    def __init__(self, config: Path, log: Path, *, env: dict[str, str] | None = None,
                 stdin: int | None = subprocess.DEVNULL, wrapper: list[str] | None = None) -> None:
        base = {k: v for k, v in os.environ.items() if not k.startswith("STREAMGUARD_")}
        self.log = log
        self.started = time.monotonic()
        with log.open("w") as err:
            self.proc = subprocess.Popen([*(wrapper or []), sys.executable, "-m", "streamguard.cli", "run", "--config",
                                          str(config)], cwd=ROOT, env=base | (env or {}), stdin=stdin,
                                         stdout=subprocess.DEVNULL, stderr=err)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss_mb(self) -> float:
        return memory_kb(self.pid).get("VmRSS", 0) / 1024

    def stop(self, timeout: float = STOP_TIMEOUT) -> tuple[int | None, float]:
        """SIGTERM and wait up to ``timeout`` s (then SIGKILL): (exit status or None if killed, seconds)."""
        t0 = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout), time.monotonic() - t0
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5.0)
            return None, time.monotonic() - t0

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5.0)

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def tail(self, n: int = 10) -> str:
        return "\n".join(self.text().splitlines()[-n:])


async def wait_for_log(d: Daemon, needle: str, timeout: float) -> bool:
    """Whether ``needle`` appears in the daemon's log within ``timeout`` s (False if it exited)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if needle in d.text():
            return True
        if d.proc.poll() is not None:
            return needle in d.text()
        await asyncio.sleep(0.1)
    return False


def frame(value: str, **extra: object) -> bytes:
    return json.dumps({"value": value, "ts": time.time(), **extra}).encode()


async def paced(client: aiomqtt.Client, topic: str, rate: float, seconds: float, make: Callable[[int], bytes],
                every: float = 0.0, tick: Callable[[float, int], None] | None = None) -> int:
    """Publish ``make(i)`` on ``topic`` (QoS 1) at ``rate`` per second for ``seconds``; ``tick(t, i)``
    is called about every ``every`` seconds. Returns how many were published. (Late frames are
    sent at once, so the mean rate holds on a busy machine.)"""
    t0 = time.monotonic()
    i, last = 0, t0
    while (now := time.monotonic()) - t0 < seconds:
        if (wait := t0 + i / rate - now) > 0:
            await asyncio.sleep(wait)
        await client.publish(topic, make(i), qos=1, timeout=PUBLISH_TIMEOUT)
        i += 1
        if tick is not None and every and time.monotonic() - last >= every:
            last = time.monotonic()
            tick(last - t0, i)
    return i


def client(port: int, name: str) -> aiomqtt.Client:
    """An MQTT client on the loopback broker at ``port`` with room for many QoS 1 publishes in flight."""
    return aiomqtt.Client(HOST, port, identifier=name, max_inflight_messages=1000)
