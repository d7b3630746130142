"""The daemon: sources → privatizer → outbox (SQLite) → publisher (MQTT), plus status.

Tasks (DESIGN.md §6):

- **control**: one MQTT connection (identifier ``<client id>``) that carries the retained
  ``<base>/<device>/status`` (``online``; its will is ``offline``), each stream's retained
  ``<base>/<device>/<stream>/privacy``, and subscribes to each stream's command topic
  ``…/<stream>/cmd`` and, for ``source = "mqtt"`` streams, its raw topic ``…/<stream>/raw``.
- **publisher**: a second connection (``<client id>-pub``) draining the outbox in order, QoS 1.
- **sources**: stdin (JSON lines) and in-process simulated devices feed frames like MQTT does.
- **ticker**: decides records held past ``max_hold`` and refreshes the privacy status.

Every decision is stored in the outbox (with the redaction rows used and the open marks) before
it can be published; a retry resends the stored bytes, never a new draw. SIGTERM/SIGINT (or the
``stop`` event) end intake, decide what is pending, drain the outbox within a deadline, publish
``offline`` and disconnect. Nothing here logs a reading: frames are counted, never printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from ..config import Settings
from ..sampling import bit_source
from .outbox import AsyncOutbox, Full, Item, Outbox
from .privatizer import Mark, Release
from .publisher import Publisher
from .runtime import StreamRuntime
from .transport import MqttTransport, Transport, TransportError, reconnecting

log = logging.getLogger(__name__)

#: Decisions kept per stream in the outbox for a restart (≫ any horizon).
KEEP_DECISIONS = 4096
STATUS_INTERVAL = 2.0
TICK_INTERVAL = 0.2
DRAIN_TIMEOUT = 10.0

FrameSource = Callable[[], AsyncIterator[tuple[str, bytes]]]


@dataclass
class DaemonStats:
    started: float = field(default_factory=time.time)
    frames: int = 0
    stored: int = 0
    outbox_full_waits: int = 0


class Daemon:
    """Runs the configured streams until ``stop`` is set (see module docstring).

    ``extra_sources`` are async iterables of (stream name, raw frame) — the demo's simulated
    devices, or stdin — fed through the same path as MQTT frames.
    """

    def __init__(self, settings: Settings, *, extra_sources: list[FrameSource] | None = None) -> None:
        self.settings = settings
        self.extra_sources = list(extra_sources or [])
        self.stats = DaemonStats()
        self.runtimes: dict[str, StreamRuntime] = {}
        self._box: AsyncOutbox | None = None
        self._publisher: Publisher | None = None
        self._control: MqttTransport | None = None
        self._status_dirty = asyncio.Event()
        # Stores happen in decision order; under stop-input a full outbox holds every source here.
        self._store_lock = asyncio.Lock()

    # -- set-up -------------------------------------------------------------------------------
    async def _restore(self, box: AsyncOutbox) -> None:
        """Build each stream's runtime, continuing positions and history after a restart."""
        s = self.settings
        for i, cfg in enumerate(s.streams):
            decided = await box.run(Outbox.recent_decisions, cfg.name)
            first_seq = await box.run(Outbox.next_position, cfg.name)
            marks = await box.run(Outbox.marks, cfg.name)
            restarted = bool(decided)
            first_phys = max(decided) + 1 if decided else 0
            open_marks = [Mark.from_state(m["state"]) for m in marks.values()
                          if m.get("open") and m["state"]["phys"] < first_phys]
            self.runtimes[cfg.name] = StreamRuntime(
                s, cfg, bit_source(s.deterministic_seed, i), first_seq=first_seq, first_phys=first_phys,
                decided=decided, open_marks=open_marks, restarted=restarted)
            if restarted:
                log.info("stream %s: resuming at seq %d after a restart (%d open marks kept)",
                         cfg.name, first_seq, len(open_marks))

    def _transport(self, suffix: str, *, will: bool) -> MqttTransport:
        s = self.settings
        return MqttTransport(s.broker, s.publish, device=s.device, status_topic=s.topic("status"),
                             identifier_suffix=suffix, will=will)

    # -- frames -------------------------------------------------------------------------------
    async def handle_frame(self, stream: str, data: bytes) -> None:
        rt = self.runtimes.get(stream)
        if rt is None:
            return
        self.stats.frames += 1
        releases, _ = rt.on_frame(data, time.time())
        await self._store(rt, releases)

    async def handle_command(self, stream: str, data: bytes) -> None:
        rt = self.runtimes.get(stream)
        if rt is None:
            return
        rt.on_command(data)
        await self._store(rt, [])

    async def _store(self, rt: StreamRuntime, releases: list[Release]) -> None:
        """Persist decisions, rows and mark states in one go, then wake the publisher."""
        assert self._box is not None and self._publisher is not None
        items = [Item(rt.name, r.seq, rt.data_topic(), rt.payload(r)) for r in releases]
        decisions = list(rt.core.last_decisions)
        rt.core.last_decisions.clear()
        marks = rt.mark_records()
        async with self._store_lock:
            while True:
                try:
                    await self._box.run(_persist, rt.name, items, decisions, marks)
                    break
                except Full:  # stop-input policy: hold intake until the publisher makes room
                    self.stats.outbox_full_waits += 1
                    await asyncio.sleep(0.1)
        self.stats.stored += len(items)
        if items:
            self._publisher.notify()
        if marks:
            self._status_dirty.set()

    # -- tasks --------------------------------------------------------------------------------
    async def _control_session(self, t: Transport) -> None:
        s = self.settings
        for rt in self.runtimes.values():
            await t.subscribe(rt.command_topic())
            if rt.cfg.source == "mqtt":
                await t.subscribe(rt.raw_topic())
        # "online" once subscribed: a producer that waits for it loses no frame
        await t.publish(s.topic("status"), self._status_payload("online"), retain=True)
        self._status_dirty.set()
        routes: dict[str, tuple[str, bool]] = {}
        for rt in self.runtimes.values():
            routes[rt.command_topic()] = (rt.name, True)
            if rt.cfg.source == "mqtt":
                routes[rt.raw_topic()] = (rt.name, False)
        status = asyncio.create_task(self._status_loop(t))
        try:
            async for msg in t.messages():
                route = routes.get(msg.topic)
                if route is None:
                    continue
                name, is_command = route
                if is_command:
                    await self.handle_command(name, msg.payload)
                else:
                    await self.handle_frame(name, msg.payload)
        finally:
            status.cancel()
            await asyncio.gather(status, return_exceptions=True)

    async def _status_loop(self, t: Transport) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._status_dirty.wait(), STATUS_INTERVAL)
            self._status_dirty.clear()
            for rt in self.runtimes.values():
                await t.publish(rt.privacy_topic(), await self._privacy_payload(rt), retain=True)

    async def _privacy_payload(self, rt: StreamRuntime) -> bytes:
        """The stream's privacy status plus the device's delivery counters (shared outbox)."""
        status = rt.privacy_status()
        assert self._box is not None and self._publisher is not None
        status["delivery"] = {
            "buffered": await self._box.run(len),
            "dropped": await self._box.run(lambda b: b.dropped),
            "published_records": self._publisher.stats.records,
            "published_messages": self._publisher.stats.messages,
            "reconnects": self._publisher.stats.reconnects,
        }
        return json.dumps(status).encode()

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(TICK_INTERVAL)
            now = time.time()
            for rt in self.runtimes.values():
                released = rt.tick(now)
                if released:
                    await self._store(rt, released)

    async def _feed(self, source: FrameSource) -> None:
        async for stream, data in source():
            await self.handle_frame(stream, data)

    def _status_payload(self, state: str) -> bytes:
        s = self.settings
        return json.dumps({
            "device": s.device,
            "state": state,
            "streams": [rt.name for rt in self.runtimes.values()],
            "deterministic": s.deterministic_seed is not None,
        }).encode()

    # -- run ----------------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set, then shut down in order (module docstring)."""
        s = self.settings
        async with await AsyncOutbox.open(Outbox.from_config, s.outbox) as box:
            self._box = box
            await self._restore(box)
            self._publisher = Publisher(box, self._transport("-pub", will=False), s.publish)
            self._control = self._transport("", will=True)
            publisher = asyncio.create_task(self._publisher.run(), name="publisher")
            workers = [asyncio.create_task(reconnecting(self._control, self._control_session), name="control"),
                       asyncio.create_task(self._ticker(), name="ticker")]
            workers += [asyncio.create_task(self._feed(src), name="source") for src in self.extra_sources]
            stopping = asyncio.create_task(stop.wait())
            await asyncio.wait([stopping, *workers], return_when=asyncio.FIRST_COMPLETED)
            failure = next((w.exception() for w in workers if w.done() and not w.cancelled()
                            and w.exception() is not None), None)
            if failure is not None:
                log.error("stopping: a task failed: %s", failure)
            elif not stop.is_set():
                log.info("stopping: the input ended")
            # 1. stop intake  2. decide what is pending  3. drain  4. offline  5. disconnect
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            stopping.cancel()
            for rt in self.runtimes.values():
                await self._store(rt, rt.drain())
            drained = await self._publisher.drain(DRAIN_TIMEOUT)
            if not drained:
                log.warning("shutdown: %d sanitized records stay in the outbox for the next start",
                            await box.run(len))
            publisher.cancel()
            await asyncio.gather(publisher, return_exceptions=True)
            await self._say_offline()
            if failure is not None:
                raise failure

    async def _say_offline(self) -> None:
        """A clean DISCONNECT suppresses the will, so publish ``offline`` explicitly."""
        assert self._control is not None
        try:
            async with self._control as t:
                await t.publish(self.settings.topic("status"), self._status_payload("offline"), retain=True)
                for rt in self.runtimes.values():
                    await t.publish(rt.privacy_topic(), await self._privacy_payload(rt), retain=True)
        except TransportError as exc:
            log.warning("could not publish the offline status: %s", exc)


def _persist(box: Outbox, stream: str, items: list[Item], decisions: list[tuple[int, float, float]],
             marks: dict[int, dict[str, Any]]) -> None:
    """Records, the rows used (by physical index) and mark states in one transaction."""
    box.store(items, keep=KEEP_DECISIONS, stream=stream, decisions=decisions, marks=marks)


async def stdin_frames(stream: str) -> AsyncIterator[tuple[str, bytes]]:
    """Raw JSON lines from standard input, as frames of ``stream``."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        data = line.rstrip(b"\r\n")
        if data:
            yield stream, data
