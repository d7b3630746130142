"""Shared pieces of the ingest tests (test_ingest_presets.py, test_ingest_timing.py).

- :class:`ManualClock` — a fake clock for the resampler's grid task: ``sleep`` waits until the test
  moves the time forward (``advance_to``), so a test decides exactly when each tick happens.
- :func:`ingest_settings` — a one-stream daemon configuration reading a mapped sensor, with a
  release delay of 0 and no marks, so every known step is published at its tick with its value.
- :class:`Rig` — a running daemon on a real Mosquitto with a ManualClock, a spy on the sanitized
  topics and a producer connection (publish with or without retain, then wait until the daemon
  has routed everything sent so far).

Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiomqtt

from daemon_harness import Spy, daemon_running, running
from streamguard.config import BrokerConfig, Settings
from streamguard.ingest.stream import IngestHub
from streamguard.ingest.topics import matches
from streamguard.stream.daemon import Daemon

WAIT = 10.0


class ManualClock:
    """Time that moves only when the test says so (module docstring)."""

    def __init__(self, t: float) -> None:
        self.t = t
        self._moved = asyncio.Event()

    def __call__(self) -> float:
        return self.t

    async def sleep(self, delay: float) -> None:
        target = self.t + delay
        while self.t < target:
            self._moved.clear()
            await self._moved.wait()

    def advance_to(self, t: float) -> None:
        assert t >= self.t
        self.t = t
        self._moved.set()


async def until(done: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.01)


def ingest_settings(broker: BrokerConfig, tmp: Path, ingest: dict[str, Any], *, labels: list[str] | None = None,
                    bins: list[float] | None = None, device: str = "ingest-test", **stream: Any) -> Settings:
    """A one-stream redaction daemon named ``s`` reading a mapped sensor (module docstring)."""
    states: dict[str, Any] = {"labels": labels} if bins is None else {"bins": bins}
    return Settings(
        device=device, topic_base="sg", deterministic_seed=7, log_level="WARNING",
        broker={"host": broker.host, "port": broker.port},
        outbox={"path": tmp / "outbox.sqlite"},
        streams=[{"name": "s", **states, "model": {"alpha": 0.3, "beta": 0.4}, "epsilon": 1.0, "delay": 0,
                  "design": "exact", "ingest": ingest, **stream}],
    )


@dataclass
class Rig:
    """A daemon reading one mapped sensor, on a ManualClock (module docstring)."""

    daemon: Daemon
    clock: ManualClock
    spy: Spy
    producer: aiomqtt.Client
    published: int = 0
    grid: float = 1.0
    ticks: list[float] = field(default_factory=list)

    @property
    def hub(self) -> IngestHub:
        return self.daemon.ingest

    @property
    def runtime(self) -> Any:
        return self.daemon.runtimes["s"]

    def steps(self) -> int:
        c = self.runtime.counters
        return c.accepted + sum(c.rejected.values())

    async def send(self, topic: str, payload: bytes | str, *, retain: bool = False) -> None:
        """Publish (QoS 1, in order) and wait until the daemon has routed it (if it subscribed to it).
        The fence holds because the daemon reads each connection in order (and counts what it
        routed on both: a sensor's messages, a button's)."""
        data = payload.encode() if isinstance(payload, str) else payload
        await self.producer.publish(topic, data, qos=1, retain=retain)
        if not any(matches(f, topic) for f in self.hub.filters() + self.hub.button_filters()):
            return  # not subscribed: the daemon never sees it
        self.published += 1
        n = self.published
        await until(lambda: self.hub.routed >= n, f"the daemon to route message {n}")

    async def tick(self) -> None:
        """Move the clock to the next grid tick and wait until the daemon has taken its step."""
        before = self.steps()
        g = (math.floor(self.clock.t / self.grid + 1e-9) + 1) * self.grid
        self.clock.advance_to(g)
        self.ticks.append(g)
        await until(lambda: self.steps() > before, f"the step of tick {g}")

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(m.payload) for m in self.spy.messages if m.topic == "sg/ingest-test/s/data"]

    async def wait_records(self, n: int) -> list[dict[str, Any]]:
        await self.spy.wait_until(lambda: len(self.records()) >= n, WAIT, f"{n} sanitized records")
        return self.records()


async def retain(broker: BrokerConfig, items: list[tuple[str, str | bytes]]) -> None:
    """Leave retained messages on the broker (before the daemon starts)."""
    async with aiomqtt.Client(broker.host, broker.port, identifier="retainer") as c:
        for topic, payload in items:
            await c.publish(topic, payload.encode() if isinstance(payload, str) else payload, qos=1, retain=True)


@asynccontextmanager
async def rig(settings: Settings, *, retained: int = 0) -> AsyncIterator[Rig]:
    """Start the spy, then the daemon on a ManualClock, then a producer (module docstring);
    ``retained``: how many retained sensor messages the daemon must have routed first."""
    clock = ManualClock(math.floor(time.time()) + 0.5)
    spy = Spy(settings.broker, "sg/#")
    async with running(spy.run()):
        await asyncio.wait_for(spy.subscribed.wait(), WAIT)
        hub = IngestHub(settings, clock=clock, sleep=clock.sleep)
        async with daemon_running(settings, ingest=hub) as (daemon, _stop, task):
            await spy.wait_until(lambda: any(m.topic == "sg/ingest-test/status" and b"online" in m.payload
                                             for m in spy.messages), WAIT, "the daemon online")
            await until(lambda: hub.routed >= retained, f"{retained} retained messages routed")
            async with aiomqtt.Client(settings.broker.host, settings.broker.port, identifier="sensor") as producer:
                yield Rig(daemon, clock, spy, producer, published=retained,
                          grid=settings.streams[0].sample_period or 1.0)
            with contextlib.suppress(Exception):
                assert not task.done() or task.exception() is None
