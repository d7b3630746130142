"""The daemon's status (DESIGN.md §6; stream/daemon.py): the device's retained
``<base>/<device>/status`` payload, each stream's retained ``…/<stream>/privacy`` status and the
loop that keeps them fresh on the control connection, and the device-wide counters.

A privacy status is the stream runtime's own status with the draws as committed (the store's
``stored_counts``: none that a crash could lose and draw again), the mapped sensor's input and
privacy button, the aggregates, the ledger's odometer and the delivery counters of the shared
outbox. :class:`Status` is what the metrics textfile reads (stream/metrics.py: ``Counted``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..config import Settings
from ..ingest.stream import IngestHub
from ..ledger.odometer import OdometerCache
from ..ledger.store import Ledger
from .outbox import AsyncOutbox
from .publisher import PublisherStats
from .runtime import StreamRuntime
from .transport import MqttTransport, Transport
from .vouch import ButtonHearing

STATUS_INTERVAL = 2.0
#: Privacy statuses the periodic refresh computes per second at most: with many streams the
#: period grows to streams / STATUS_RATE seconds (1,000 streams: 10 s), so the statuses cost a
#: bounded share of the loop (bench_gateway); marks and aggregates refresh their stream at once.
STATUS_RATE = 100.0
#: Privacy statuses computed in one go, between two visits of the event loop to its other tasks:
#: one costs about 0.15–0.2 ms, and a round of 1,000 computed at once held every frame back for
#: up to 200 ms every 10 s (bench_gateway, 1,000 streams: p99 146–186 ms).
STATUS_SLICE = 8
#: Windows, marks and channel ranges listed in the published odometer (its figures cover all).
ODOMETER_LIMIT = 20


@dataclass
class DaemonStats:
    """The daemon's counters since it started (``started``): the privacy statuses' activity and
    delivery figures and the device counters read them."""

    started: float = field(default_factory=time.time)
    frames: int = 0
    commands: int = 0
    stored: int = 0
    outbox_full_waits: int = 0
    #: Attempts to store that met a full disk, and since when it is full (None: it is not).
    disk_full_waits: int = 0
    disk_full_since: float | None = None
    #: Aggregate windows the ledger refused (budget exceeded).
    ledger_refusals: int = 0


class Refresh:
    """The streams whose privacy status must be refreshed at once (their marks or aggregates were
    just stored: stream/store.py), and the event that wakes the status loop."""

    def __init__(self) -> None:
        self.dirty = asyncio.Event()
        self.urgent: set[str] = set()  # streams whose status must be refreshed at once

    def ask(self, names: set[str]) -> None:
        """Refresh the statuses of ``names`` at once (before the rest of a round in progress)."""
        self.urgent |= names
        self.dirty.set()


class Status:
    """The device's status payload, the streams' privacy statuses and the device counters.

    ``stored_counts``: per stream, (released, redacted) as of its last committed store entry
    (stream/store.py). ``delivery``: the publisher's counters; ``inputs``: the input connection
    (its sessions lost), None without one."""

    def __init__(self, settings: Settings, runtimes: Mapping[str, StreamRuntime], stats: DaemonStats, *,
                 box: AsyncOutbox, ledger: Ledger, stored_counts: Mapping[str, tuple[int, int]],
                 delivery: PublisherStats, inputs: MqttTransport | None, ingest: IngestHub,
                 hearings: Mapping[str, ButtonHearing], instance: str, refresh: Refresh) -> None:
        self.settings = settings
        self.runtimes = runtimes
        self.stats = stats
        self.stored_counts = stored_counts
        self.delivery = delivery
        self.refresh = refresh
        self._box = box
        self._ledger = ledger
        self._odometers: OdometerCache | None = None  # (the open ledger's, for the privacy statuses)
        self._inputs = inputs
        self._ingest = ingest
        self._hearings = hearings
        self._instance = instance

    def status_payload(self, state: str) -> bytes:
        """The device's retained status (``online``/``offline``) with this process's ``instance``."""
        s = self.settings
        return json.dumps({
            "device": s.device,
            "state": state,
            "streams": [rt.name for rt in self.runtimes.values()],
            "deterministic": s.deterministic_seed is not None,
            "instance": self._instance,
        }).encode()

    async def loop(self, t: Transport) -> None:
        """Keep each stream's retained privacy status fresh on this connection: every stream's at
        once when it comes up, then a periodic round every ``max(STATUS_INTERVAL, streams /
        STATUS_RATE)`` seconds, and at once the statuses of the streams whose marks or aggregates
        were just stored (before the rest of a round in progress). A round goes STATUS_SLICE
        streams at a time: their outbox and ledger figures in one visit to the outbox thread,
        their statuses computed, then published — only those that differ from what this
        connection last published (the broker retains those); a periodic round while nothing at
        all happened on the device (:meth:`_activity`) computes nothing."""
        loop = asyncio.get_running_loop()
        refresh = self.refresh
        sent: dict[str, bytes] = {}
        due = loop.time()  # the first round: every stream
        seen: tuple[Any, ...] | None = None
        while True:
            # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancel that arrives as
            # the event is set, and this loop would outlive the shutdown that cancelled it
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, due - loop.time())):
                    await refresh.dirty.wait()
            refresh.dirty.clear()
            urgent, refresh.urgent = refresh.urgent, set()
            if loop.time() >= due:
                due = loop.time() + max(STATUS_INTERVAL, len(self.runtimes) / STATUS_RATE)
                activity = self._activity()
                names = list(self.runtimes) if activity != seen or activity is None else sorted(urgent)
                seen = activity
            else:
                names = sorted(urgent)
            due_now = deque(self.runtimes[n] for n in names if n in self.runtimes)
            while due_now:  # (the loop serves frames between slices)
                if refresh.urgent:  # stored meanwhile (a mark, an aggregate): those go first
                    due_now.extendleft(self.runtimes[n] for n in sorted(refresh.urgent, reverse=True)
                                       if n in self.runtimes)
                    refresh.urgent = set()
                part = [due_now.popleft() for _ in range(min(STATUS_SLICE, len(due_now)))]
                for rt, payload in zip(part, await self.privacy_payloads(part)):
                    if sent.get(rt.name) != payload:
                        await t.publish(rt.privacy_topic(), payload, retain=True)
                        sent[rt.name] = payload

    def _activity(self) -> tuple[Any, ...] | None:
        """Counters that move whenever anything a privacy status reports may have changed (a frame,
        a command, a stored or published record, a drop, a reconnect, a refusal); None (always
        refresh) with ingest streams, whose input status has its own clock."""
        if self._ingest.streams:
            return None
        pub, s = self.delivery, self.stats
        return (s.frames, s.commands, s.stored, s.outbox_full_waits, s.disk_full_waits, s.ledger_refusals,
                (pub.records, pub.messages, pub.reconnects),
                None if self._inputs is None else self._inputs.sessions_lost)

    async def privacy_payloads(self, rts: list[StreamRuntime]) -> list[bytes]:
        """Each stream's privacy status plus the device's delivery counters (shared outbox), with
        one visit to the outbox thread for all of them."""
        if not rts:
            return []
        if self._odometers is None:
            self._odometers = OdometerCache(self._ledger, ODOMETER_LIMIT)
        odometers, device = self._odometers, self.settings.device
        buffered, dropped, figures = await self._box.run(  # one thread hop (the ledger's thread)
            lambda b: (len(b), b.dropped, [(b.count(rt.name), b.dropped_by_stream[rt.name], odometers(device, rt.name))
                                           for rt in rts]))
        return [self._payload(rt, buffered, dropped, *f) for rt, f in zip(rts, figures)]

    def _payload(self, rt: StreamRuntime, buffered: int, dropped: int, mine: int, mine_dropped: int,
                 ledger: Any) -> bytes:
        status = rt.privacy_status()
        if "counters" in status:  # draws as committed: none that a crash could lose and re-draw
            status["counters"]["released"], status["counters"]["redacted"] = self.stored_counts.get(rt.name, (0, 0))
        ingest = self._ingest.status(rt.name)
        if ingest is not None:
            status["ingest"] = ingest
            if (hearing := self._hearings.get(rt.name)) is not None:
                ingest["button"] = hearing.status()
        if rt.aggregates is not None:
            status["aggregates"] = rt.aggregates.status()
        status["ledger"] = ledger
        stats = self.delivery
        # counters are since this process started (``since``); "buffered" is the outbox right now
        status["counters_since"] = self.stats.started
        status["delivery"] = {
            "since": self.stats.started,
            "stream": {"buffered": mine, "dropped": mine_dropped,
                       "published_records": stats.records_by_stream[rt.name]},
            "buffered": buffered,
            "dropped": dropped,
            "published_records": stats.records,
            "published_messages": stats.messages,
            "reconnects": stats.reconnects,
            **self._intake_counters(),
        }
        return json.dumps(status).encode()

    async def device_counters(self) -> dict[str, float]:
        """The device-wide counters by Prometheus name (stream/metrics.py)."""
        out: dict[str, float] = {"streamguard_disk_full_waits_total": self.stats.disk_full_waits,
                                 "streamguard_ledger_refusals_total": self.stats.ledger_refusals}
        out["streamguard_outbox_records"], out["streamguard_outbox_dropped_total"] = await self._box.run(
            lambda b: (len(b), b.dropped))
        # (event ids are consecutive from 1)
        out["streamguard_ledger_events"] = self._ledger.head[0]
        out["streamguard_published_records_total"] = self.delivery.records
        out["streamguard_reconnects_total"] = self.delivery.reconnects
        if self._inputs is not None:
            out["streamguard_input_sessions_lost_total"] = self._inputs.sessions_lost
        return out

    def _intake_counters(self) -> dict[str, int]:
        """What the input connection knows was lost on the way in (transport.py: Sessions)."""
        c = self._inputs
        return {"sessions_lost": 0 if c is None else c.sessions_lost}
