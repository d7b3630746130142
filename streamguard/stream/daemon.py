"""The daemon: sources → privatizer → outbox (SQLite) → publisher (MQTT), plus status.

Tasks (DESIGN.md §6):

- **control**: one MQTT connection (identifier ``<client id>``, clean session) that carries the
  retained ``<base>/<device>/status`` (``online``; its will is ``offline``) and each stream's
  retained ``<base>/<device>/<stream>/privacy``.
- **input**: a connection (``<client id>-in``) with a persistent session, subscribed to each
  stream's command topic ``…/<stream>/cmd`` and, for ``source = "mqtt"`` streams (without ``ingest``), its raw topic
  ``…/<stream>/raw``: QoS 1 frames published while it is away (a broker or daemon restart) wait at
  the broker, and a frame is acknowledged only once handled (back-pressure; stream/transport.py).
- **buttons**: with a mapped sensor's privacy button, a fourth connection (``<client id>-btn``, a
  persistent session of its own) subscribed to the buttons' topics and to the command topics of the
  streams held for them (instead of the input connection): presses published while it is away
  wait at the broker (QoS 0 too, with ``queue_qos0_messages``). While a button cannot be
  heard, the steps it might mark are held and, unless the broker kept the session, decided as
  private (stream/vouch.py).
- **publisher**: a third connection (``<client id>-pub``) draining the outbox in order, QoS 1.
- **sources**: stdin (JSON lines) and in-process simulated devices feed frames like MQTT does.
- **ticker**: decides records held past ``max_hold`` and refreshes the privacy status.
- **grid**: one per stream that reads a sensor of the MQTT ecosystem (``[streams.ingest]``,
  streamguard/ingest): the control connection also subscribes to the sensor's topics, whose
  messages update the stream's resampler, and this task takes one step per tick of the stream's
  ``sample_period`` grid (issue 10).
- **Home Assistant discovery** (``[homeassistant]``, stream/hass.py): once online on a
  connection, the control connection publishes the retained discovery configs (and deletes those
  of removed streams); it also subscribes to ``<prefix>/status`` and re-sends them when Home
  Assistant announces ``online``.

Every decision is stored in the outbox (with the redaction rows used and the open marks) before
it can be published — by one writer task that commits whatever has queued up as one group; a retry resends the stored bytes, never a new draw. A decision is queued for the writer in the
same step that makes it, so the store queue (and the outbox, and the publisher) holds each
stream's records in seq order, and a decided record is never lost to a cancelled wait.

SIGTERM/SIGINT (or the ``stop`` event) end intake, decide what is pending, store everything
decided (under ``stop-input`` past ``max_records`` if the outbox is full), drain the outbox, publish
``offline`` and disconnect — all within ``SHUTDOWN_TIMEOUT`` (inside the systemd unit's
``TimeoutStopSec``); what is not acknowledged by then stays in the outbox for the next start.
A stop that finds the disk full stores into the room of the shutdown reserve, allocated at start
(stream/disk.py, :class:`~.disk.Reserve`): the records held for the release delay, whose frames
were acknowledged long ago, are not lost; it then exits 74 naming the frames left unacknowledged.

One daemon per outbox: :meth:`Daemon.run` holds an exclusive lock on the outbox and the ledger
(:class:`~.outbox.ExclusiveLock`) and raises :class:`~.outbox.InUse` at once if another process
holds either. One daemon per identity: the retained status carries a random ``instance`` token;
a daemon that finds, after it first went online, another instance's status on its status topic
(another streamguard took over its client id or runs the same device) raises
:class:`~.outbox.InUse` and stops without reconnecting, draining or publishing ``offline`` (which
would disturb the other one). One identity, one sequence: before any connection but a short
check (:meth:`Daemon._check_identity`), a stream this outbox has no position of must not find seqs
already published under the identity's retained privacy status (:class:`~.outbox.InUse` if it
does). Nothing here logs a reading: frames are counted, never printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import math
import os
import secrets
import sqlite3
import stat
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..config import Settings
from ..ingest.mapping import Press
from ..ingest.stream import IngestHub, StepInput
from ..ledger.events import AggregateEvent, DriftEvent, Event
from ..ledger.odometer import OdometerCache
from ..ledger.store import BudgetExceeded, Ledger
from ..quilt.release import AggregateRelease
from ..sampling import bit_source
from . import privacy_mode
from .hass import Discovery
from .outbox import AsyncOutbox, ExclusiveLock, Full, InUse, Item, Outbox, Row
from .privatizer import Mark
from ..frames.records import MAX_BATCH_BYTES, MAX_FRAME_BYTES, Rejection
from .publisher import Publisher
from .redaction_runtime import RedactionRuntime
from .runtime import Resume, StreamRuntime
from .runtimes import make_runtime
from ..redaction.plan_cache import PlanCache, beside
from .disk import RETRY_INTERVAL as DISK_RETRY
from .disk import DiskFull, FullEpisodes, Reserve, is_disk_full, probe_room, reserve_bytes, reserves
from .metrics import textfile_loop
from .systemd import Notifier
from .transport import PROMPT, ConnectRefused, Message, MqttTransport, Transport, TransportError, reconnecting
from .vouch import ButtonHearing

log = logging.getLogger(__name__)

#: Decisions kept per stream in the outbox for a restart (≫ any horizon).
KEEP_DECISIONS = 4096
#: Entries written per transaction, and queued at most before intake waits.
STORE_GROUP = 256
#: Seconds between the starts of two store transactions at least: many slow streams (a frame a
#: second each, 1,000 of them) would otherwise commit — and sync the disk — once per record; what
#: arrives meanwhile joins the next group. Below 1/COMMIT_SPACING groups a second nothing waits.
COMMIT_SPACING = 0.002
STORE_QUEUE_LIMIT = 4096
#: A lone store entry (one intake's decisions) that came at least this many seconds after the one
#: before is committed on the event loop's own thread while the outbox thread is idle
#: (AsyncOutbox.run_here): at such a rate nothing would overlap the disk sync anyway, and the two
#: thread switches and the loop's self-pipe wake-up were about a third of the latency that
#: privatization adds (issue 15; docs/implementation.md). Under load entries come closer together
#: and go to the outbox thread, where intake goes on during the sync.
INLINE_QUIET = 0.001
#: An inline commit that takes longer than this (a slow disk), or fails (a full outbox or disk),
#: sends every commit to the outbox thread for INLINE_BACKOFF seconds: on a slow disk the loop is
#: blocked by at most one commit a minute.
INLINE_MAX = 0.005
INLINE_BACKOFF = 60.0
STATUS_INTERVAL = 2.0
#: SUBSCRIBE requests of the input connection in flight at once (stream/transport.py).
SUBSCRIBE_WINDOW = 32
#: Privacy statuses the periodic refresh computes per second at most: with many streams the
#: period grows to streams / STATUS_RATE seconds (1,000 streams: 10 s), so the statuses cost a
#: bounded share of the loop (bench_gateway); marks and aggregates refresh their stream at once.
STATUS_RATE = 100.0
#: Privacy statuses computed in one go, between two visits of the event loop to its other tasks:
#: one costs about 0.15–0.2 ms, and a round of 1,000 computed at once held every frame back for
#: up to 200 ms every 10 s (bench_gateway, 1,000 streams: p99 146–186 ms).
STATUS_SLICE = 8
TICK_INTERVAL = 0.2
#: Windows, marks and channel ranges listed in the published odometer (its figures cover all).
ODOMETER_LIMIT = 20
#: Aggregate noise of stream i is drawn from deterministic stream AGGREGATE_STREAMS + i (seeded mode).
AGGREGATE_STREAMS = 1000
#: Everything after intake stopped (store, drain, ``offline``) ends within this many seconds; with
#: the two TASK_STOP_TIMEOUT waits outside it (writer, publisher: normally instant) a shutdown takes
#: at most 18 s, less than the systemd unit's TimeoutStopSec (deploy/streamguard.service, 20 s).
SHUTDOWN_TIMEOUT = 14.0
#: Of it, kept for publishing ``offline`` after the drain.
OFFLINE_RESERVE = 3.0
#: Seconds to wait for the intake tasks to end once cancelled (each is re-cancelled meanwhile).
TASK_STOP_TIMEOUT = 2.0
#: Seconds to wait for the retained status (the takeover check) before going ``online``.
CLAIM_WAIT = 1.0
#: Seconds after which a sentinel that has not come back is reported (the wait goes on).
SENTINEL_WAIT = 10.0

FrameSource = Callable[[], AsyncIterator[tuple[str, bytes]]]


async def _consume_beside(consume: Coroutine[Any, Any, None], side: Coroutine[Any, Any, None], name: str) -> None:
    """Run a session's message loop (``consume``) and a task beside it (``side``: subscribing,
    confirming) until the loop ends; a failure of either ends both (the session is then lost and
    ``reconnecting()`` retries), and neither outlives the call."""
    consuming = asyncio.create_task(consume, name=f"{name}-consume")
    siding = asyncio.create_task(side, name=f"{name}-side")
    try:
        await asyncio.wait([consuming, siding], return_when=asyncio.FIRST_EXCEPTION)
        if siding.done():
            siding.result()
        await consuming
    finally:
        for task in (siding, consuming):
            task.cancel()
        await asyncio.gather(siding, consuming, return_exceptions=True)


@dataclass
class DaemonStats:
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


class Daemon:
    """Runs the configured streams until ``stop`` is set (see module docstring).

    ``extra_sources`` are async iterables of (stream name, raw frame) — the demo's simulated
    devices, or stdin — fed through the same path as MQTT frames. ``ingest``: the mapped sensors
    and their resampler clock (default: from ``settings``, on the wall clock).
    """

    def __init__(self, settings: Settings, *, extra_sources: list[FrameSource] | None = None,
                 ingest: IngestHub | None = None, freeze_heap: bool = False) -> None:
        """``freeze_heap``: serve with start-up's objects frozen (:func:`_frozen_heap`) — a change to
        the whole process's garbage collector, for a process that is this daemon (``streamguard
        run``), not for one that embeds it."""
        self.settings = settings
        self._freeze_heap = freeze_heap
        self.extra_sources = list(extra_sources or [])
        self.stats = DaemonStats()
        self.runtimes: dict[str, StreamRuntime] = {}
        #: Streams read from sensors of the MQTT ecosystem, and their resampler grids (issue 10).
        self.ingest = IngestHub(settings) if ingest is None else ingest
        self._box: AsyncOutbox | None = None
        self._ledger: Ledger | None = None
        self._odometers: OdometerCache | None = None  # (the open ledger's, for the privacy statuses)
        self._publisher: Publisher | None = None
        self._control: MqttTransport | None = None
        self._input: MqttTransport | None = None
        self._inputs_ready = asyncio.Event()
        #: The privacy buttons' connection (only with a stream whose button is heard for: vouch.py).
        self._buttons: MqttTransport | None = None
        #: The sentinel the buttons' connection waits for before they count as heard (its token, and
        #: the future the consumer resolves when the sentinel comes back): :meth:`_buttons_heard`.
        self._sentinel: tuple[bytes, asyncio.Future[None]] | None = None
        self._sentinels = 0
        #: Per stream, the reason last logged for steps decided as private unvouched (one line per
        #: episode of not hearing its button, not one per step).
        self._unvouched_said: dict[str, str | None] = {}
        #: Each redaction stream's privacy button as the daemon hears it (stream/vouch.py).
        self.hearings: dict[str, ButtonHearing] = {}
        self._discovery: Discovery | None = None  # Home Assistant discovery (stream/hass.py)
        self._status_dirty = asyncio.Event()
        self._status_urgent: set[str] = set()  # streams whose status must be refreshed at once
        # Store queue (decision order) drained by one writer task in groups.
        self._queue: deque[_StoreEntry] = deque()
        self._queued = asyncio.Event()
        self._room = asyncio.Event()
        #: Store entries queued so far, and how many of them (in queue order) are committed: a raw
        #: MQTT frame is acknowledged once every entry queued before it is handled is (_durable).
        self._entries = 0
        self._entries_stored = 0
        self._stored_more = asyncio.Event()
        self._in_hand: list[_StoreEntry] = []  # the group the writer is storing
        #: The disk's full/room state with hysteresis (stream/disk.py).
        self._disk = FullEpisodes()
        #: The shutdown reserve on each filesystem of the outbox and the ledger (stream/disk.py), and
        #: the records queued when a stop on a full disk released it (None: not released).
        self._reserves: list[Reserve] = []
        self._reserve_used: int | None = None
        #: Raw frames received on the input connection and not acknowledged when it last ended.
        self.unacknowledged = 0
        self._idle = asyncio.Event()  # the writer has nothing in hand (an inline commit is over when it returns)
        self._idle.set()
        self._last_entry = -math.inf  # (monotonic) when the newest store entry was queued
        self._quiet = False  # it came at least INLINE_QUIET after the one before
        self._inline_after = 0.0  # (monotonic) no inline commit before then: the last one was slow
        self._commit_delay = settings.outbox.commit_delay_ms / 1e3  # (group commit: _delay_wait)
        #: Wakes the writer from a group commit's wait to look again (_delay_wait): an urgent entry
        #: or a whole group was queued, or the shutdown began.
        self._hurry = asyncio.Event()
        #: Per stream, (released, redacted) as of its last committed entry: what the privacy status
        #: and the metrics report, so that they never count a draw that a crash could still lose and
        #: draw again.
        self.stored_counts: dict[str, tuple[int, int]] = {}
        self._writer_waiting = False  # the writer waits for the queue (not spacing its commits)
        self._last_commit = -COMMIT_SPACING  # (monotonic) when the last store transaction ended
        self._closing = False  # intake has stopped: store the rest even past max_records
        #: Random token in this process's retained status (and will): tells its own status from
        #: another streamguard's on the same topic.
        self.instance = secrets.token_hex(8)
        self._claimed = False  # published "online" at least once
        #: systemd's notify protocol (READY, STATUS, STOPPING, WATCHDOG); inert outside systemd.
        self.systemd = Notifier()
        #: Each stream's privacy mode, persisted beside the outbox (stream/privacy_mode.py).
        self._modes = privacy_mode.ModeFile(privacy_mode.beside(settings.outbox.path))
        self._status_checked = asyncio.Event()
        #: Set once ``online`` was first published (every input and sensor subscription confirmed),
        #: and once the buttons' connection has subscribed (set at once without one): READY=1.
        self._online = asyncio.Event()
        self._buttons_subscribed = asyncio.Event()
        #: The identity check passed (_check_identity): until then nothing is published under it.
        self._identity_checked = False

    # -- set-up -------------------------------------------------------------------------------
    async def _restore(self, box: AsyncOutbox) -> None:
        """Build each stream's runtime, continuing positions and history after a restart."""
        s = self.settings
        plans = PlanCache(beside(s.outbox.path), share=True)  # streams of one model share a plan
        # One CSPRNG for every stream (and their aggregates): a keystream source buffers a block
        # (up to 1 MiB) of its own, which made ~1 MB per stream; a shared source hands each word
        # out once (sampling.py), so the streams' draws stay independent. Seeded (test) mode keeps
        # one deterministic stream per configured stream.
        shared = bit_source(None) if s.deterministic_seed is None else None
        stored = await box.run(lambda b: [self._stored_state(b, cfg.name) for cfg in s.streams])
        for i, cfg in enumerate(s.streams):
            decided, first_seq, marks, charged, newest, drift = stored[i]
            decided_upto = max(decided) + 1 if decided else 0
            # Positions continue past every one the ledger has charged (no window is charged
            # twice) and past an open mark whose own record was still pending at the crash: that
            # record is lost, but the records after the restart are its right neighbours (at an
            # unknown distance ≥ 1). Every skipped position was never published: on a redaction
            # stream it is recorded as fully redacted, so that open marks are restored like any
            # other (the rest of their right window redacted, their leakage evaluated over every
            # restart gap, the skipped records counted as withheld — not as released).
            lost = [m["state"]["phys"] + 1 for m in marks.values()
                    if m.get("open") and m["state"]["phys"] >= decided_upto]
            first_phys = max([decided_upto, charged, *lost])
            if cfg.mechanism == "redaction" and first_phys > decided_upto:
                k = cfg.state_map().k
                never = [(t, *(1.0,) * k) for t in range(decided_upto, first_phys)]
                await box.run(Outbox.record_decisions, cfg.name, never, keep=KEEP_DECISIONS)
                decided.update((t, tuple(row)) for t, *row in never)
            restarted = bool(decided)
            # every restart boundary a window may still span (the last is first_phys)
            restarts = (await box.run(Outbox.add_restart, cfg.name, first_phys, keep=KEEP_DECISIONS)
                        if restarted and cfg.mechanism == "redaction" else [])
            open_marks = [Mark.from_state(m["state"], cfg.state_map().k) for m in marks.values()
                          if m.get("open") and m["state"]["phys"] < first_phys]
            source = shared if shared is not None else bit_source(s.deterministic_seed, i)
            noise = shared if shared is not None else bit_source(s.deterministic_seed, AGGREGATE_STREAMS + i)
            self.runtimes[cfg.name] = make_runtime(
                s, cfg, source,
                resume=Resume(first_seq, first_phys, decided, tuple(open_marks), restarted, newest, drift,
                              tuple(restarts)),
                aggregate_source=noise, plan_cache=plans)
            if s.deterministic_seed is not None:
                log.warning("stream %s: DETERMINISTIC (seeded) randomness — for tests only, not private "
                            "against anyone who knows the seed", cfg.name)
            if restarted:
                log.info("stream %s: resuming at seq %d after a restart (%d open marks kept)",
                         cfg.name, first_seq, len(open_marks))
        for name, on in self._modes.load(list(self.runtimes)).items():  # (each stream's privacy mode)
            if isinstance(rt := self.runtimes[name], RedactionRuntime):
                rt.privacy_mode = on
        warmed: set[Hashable] = set()  # (one stream of each kind loads the kernels for all)
        for rt in self.runtimes.values():
            if (key := rt.warm_key) is not None and key not in warmed:
                warmed.add(key)
                rt.warm_up()

    def _stored_state(self, box: Outbox, stream: str) -> tuple[Any, ...]:
        """What a restart of ``stream`` continues from (outbox thread; every stream's is read in one
        visit, not six per stream): its recent decisions, next seq, marks, the ledger's charged
        end, the newest step's time and its latest drift event."""
        return (box.recent_decisions(stream), box.next_position(stream), box.marks(stream),
                self._charged_upto(stream), box.newest_step(stream), self._drift_of(stream))

    def _drift_of(self, stream: str) -> DriftEvent | None:
        """The stream's latest drift event in the ledger (outbox thread)."""
        assert self._ledger is not None
        return self._ledger.book(self.settings.device, stream).drift

    def _charged_upto(self, stream: str) -> int:
        """One past the last position an aggregate window or a channel reservation of ``stream``
        covers in the ledger (outbox thread). Redaction marks are left out: their spans reach to
        the end of the planned window, and the positions after a restart must stay inside an open
        mark's window (they are its right neighbours)."""
        assert self._ledger is not None
        book = self._ledger.book(self.settings.device, stream)
        spans = [book.span(f) for f in book.families() if f != "redaction"]
        return max((hi + 1 for _, hi in filter(None, spans)), default=0)

    def _transport(self, suffix: str, *, will: bool, persistent: bool = False) -> MqttTransport:
        s = self.settings
        return MqttTransport(s.broker, s.publish, device=s.device, status_topic=s.topic("status"),
                             identifier_suffix=suffix, will=will, instance=self.instance if will else None,
                             persistent_session=persistent)

    # -- frames -------------------------------------------------------------------------------
    async def handle_frame(self, stream: str, data: StepInput | list[bytes], now: float | None = None) -> None:
        """Raw input of a stream (its raw topic, a stdin line, a mapped sensor's step): a frame, a
        batch of frames (a JSON list), several raw messages received together (a list of them:
        StreamRuntime.on_messages — decided together and queued as one store entry), or a step
        whose reading is known to be unknown."""
        rt = self.runtimes.get(stream)
        if rt is None:
            return
        now = time.time() if now is None else now
        if isinstance(data, Rejection):
            self.stats.frames += 1
            releases = rt.on_frame(data, now)[0]
        else:
            messages = data if isinstance(data, list) else [data]
            self.stats.frames += len(messages)
            releases = rt.on_messages(messages, now)
        await self._store(rt, releases)

    async def handle_command(self, stream: str, data: bytes) -> None:
        rt = self.runtimes.get(stream)
        if rt is None:
            return
        self.stats.commands += 1
        if isinstance(rt, RedactionRuntime) and (mode := privacy_mode.requested_bytes(data)) is not None:
            self._modes.set(stream, mode)  # persisted before it takes effect (stream/privacy_mode.py)
        rt.on_command(data)
        await self._store(rt, [])

    async def _store(self, rt: StreamRuntime, releases: list[Any]) -> None:
        """Queue the decisions, the rows used and the mark states for the writer (:meth:`_enqueue`),
        then wait while the queue is over ``STORE_QUEUE_LIMIT`` (the outbox is slow or, under
        stop-input, full): the wait holds back the caller's next intake, never this entry, so
        cancelling it loses nothing. The queue exceeds the limit by at most one entry per intake
        task."""
        if self._enqueue(rt, releases) and not (self._commit_here() and self._commit_inline()):
            self._queued.set()
        while len(self._queue) > STORE_QUEUE_LIMIT:
            self._room.clear()
            await self._room.wait()

    async def _durable(self) -> None:
        """Wait until every store entry queued so far is committed (outbox and ledger). The input
        connection awaits it before acknowledging the raw frames and commands it handled, so an
        acknowledged frame's decision is never only in memory: while the disk is full nothing is
        acknowledged and the broker keeps the frames (issue 28: before, 605 acknowledged frames
        were lost at a SIGTERM on a full disk). The cost is one commit per group of messages (a
        group is what arrived meanwhile: a slow commit makes the next group bigger)."""
        target = self._entries
        while self._entries_stored < target:
            self._stored_more.clear()
            await self._stored_more.wait()

    def _enqueue(self, rt: StreamRuntime, releases: list[Any]) -> bool:
        """Append what ``rt`` decided since the last call to the store queue, synchronously (no
        await between a decision and its place in the queue: the queue is in decision order, so
        each stream's records are in seq order). Returns whether an entry was queued; the caller
        wakes the writer (``_queued``)."""
        marks = rt.mark_records()  # (also turns the marks into ledger events)
        name, topic, payload = rt.name, rt.data_topic(), rt.payload
        entry = _StoreEntry(
            name,
            [Item(name, r.seq, topic, payload(r)) for r in releases],
            rt.take_decisions(),
            marks,
            rt.take_ledger_events(),
            [_Aggregate(rt, q, rel) for q, rel in rt.take_aggregates()],
            rt.steps.newest_ts,
            counts=(rt.counters.released, rt.counters.redacted),
        )
        if entry.items or entry.decisions or entry.marks or entry.events or entry.aggregates:
            now = time.monotonic()
            self._quiet, self._last_entry = now - self._last_entry >= INLINE_QUIET, now
            entry.queued, entry.urgent = now, bool(entry.marks or entry.events or entry.aggregates)
            self._entries += 1
            entry.number = self._entries
            self._queue.append(entry)
            if self._commit_delay and (entry.urgent or len(self._queue) >= STORE_GROUP):
                self._hurry.set()
            return True
        return False

    async def _writer(self) -> None:
        """Group commit: everything queued while the previous transaction ran goes in the next one
        (one disk sync per group); only then can the publisher see the records."""
        assert self._box is not None and self._publisher is not None
        while True:
            self._writer_waiting = True
            try:
                await self._queued.wait()
            finally:  # (cancelled at shutdown: no inline commit after the writer has gone)
                self._writer_waiting = False
            self._idle.clear()  # busy: a flush must not return on the idle flag of the last round
            await self._wait_to_commit()
            self._queued.clear()
            while self._queue:
                self._in_hand = group = [self._queue.popleft() for _ in range(min(len(self._queue), STORE_GROUP))]
                self._room.set()
                report = _reported(group)
                while True:
                    try:  # (once intake has stopped, a full stop-input outbox takes the group anyway)
                        rows = await self._box.run(self._persist, group, self._closing)
                        break
                    except Full:  # stop-input: hold intake (the queue fills) until acks make room
                        self.stats.outbox_full_waits += 1
                        await asyncio.sleep(0.1)
                    except (sqlite3.OperationalError, OSError) as exc:
                        if not is_disk_full(exc):
                            raise
                        await self._disk_full(exc)
                self._stored_after_failure()
                self._in_hand = []
                self._committed(group, rows, report)
                if self._queue and self._commit_delay:  # (what came during the transaction waits out its own delay)
                    await self._wait_to_commit()
            self._idle.set()

    def _delay_wait(self) -> float:
        """Seconds the group commit (``outbox.commit_delay_ms``) still waits: until that long
        after the oldest queued entry was queued — none while an urgent entry or a whole group
        (STORE_GROUP) is queued, or once the shutdown began."""
        if (not self._commit_delay or not self._queue or len(self._queue) >= STORE_GROUP or self._closing
                or any(e.urgent for e in self._queue)):  # (fewer than STORE_GROUP entries to look at)
            return 0.0
        return self._queue[0].queued + self._commit_delay - time.monotonic()

    async def _wait_to_commit(self) -> None:
        """Wait COMMIT_SPACING after the last transaction (above 1/COMMIT_SPACING groups a
        second), then out :meth:`_delay_wait`, looking again whenever ``_hurry`` is set."""
        if (spacing := self._last_commit + COMMIT_SPACING - time.monotonic()) > 0:
            await asyncio.sleep(spacing)
        while (wait := self._delay_wait()) > 0:
            self._hurry.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._hurry.wait()

    def _stored_after_failure(self) -> None:
        """A group was stored: intake goes on; at the end of a full-disk episode (ROOM_HOLD
        seconds without a failure: stream/disk.py) say so, once."""
        if not self._disk.failing and self._disk.since is None:
            return
        since = self._disk.since
        self._room.set()  # (intake held for the disk: _store)
        if self._disk.stored(time.monotonic()) and since is not None:
            log.warning("the disk has room again (full since %.0f s ago, %d failed attempts): storing resumes",
                        time.time() - since, self.stats.disk_full_waits)
            self.stats.disk_full_since = None
            self.systemd.notify(STATUS="running: the disk has room again")

    def _committed(self, group: list[_StoreEntry], rows: list[Row] | None, report: set[str]) -> None:
        """After ``group``'s transaction: hand its records to the publisher (only now can it see
        them), the JSON-lines sink, and refresh the statuses of the streams in ``report``."""
        assert self._publisher is not None
        self._last_commit = time.monotonic()
        self._entries_stored = group[-1].number
        self._stored_more.set()
        for e in group:  # (in queue order: each stream's last entry holds its newest counts)
            self.stored_counts[e.stream] = e.counts
        stored = sum(len(e.items) for e in group)
        self.stats.stored += stored
        if stored:
            self._publisher.notify(rows)
            if self.settings.stdout:  # the JSON-lines sink: stored, so never re-drawn
                sys.stdout.write("".join(it.payload.decode() + "\n" for e in group for it in e.items))
                sys.stdout.flush()
        if report:
            self._status_urgent |= report
            self._status_dirty.set()

    def _commit_here(self) -> bool:
        """Commit the queued entry at once, on the loop's thread (INLINE_QUIET)? Only a lone entry
        queued after a quiet interval, while the writer waits for work (not spacing its commits),
        the outbox thread is idle, no inline commit was slow or failed lately, and no group commit
        is asked for (``outbox.commit_delay_ms``) unless the entry is urgent."""
        return (self._writer_waiting and len(self._queue) == 1 and self._quiet
                and (not self._commit_delay or self._queue[0].urgent)
                and self._box is not None and self._box.idle
                and time.monotonic() >= max(self._last_commit + COMMIT_SPACING, self._inline_after)
                and self.stats.disk_full_since is None)

    def _commit_inline(self) -> bool:
        """Commit the lone queued entry on the loop's thread (AsyncOutbox.run_here), from the
        intake that queued it: no writer wake-up, no thread switch, and the release is published
        before the raw frame's PUBACK goes out. Returns False, with the entry back at the queue's
        head for the writer (on the outbox thread, and with its error handling), if the commit
        failed — nothing of the entry's records was stored then (``_persist`` retries only the
        store); a failed or slow commit sends the next ones to the thread for INLINE_BACKOFF."""
        assert self._box is not None
        group = [self._queue.popleft()]
        report = _reported(group)
        began, slow = time.monotonic(), True
        try:
            rows = self._box.run_here(self._persist, group, self._closing)
            slow = time.monotonic() - began > INLINE_MAX
        except Exception:  # noqa: BLE001 - the writer meets the same error and handles it
            self._queue.appendleft(group[0])
            return False
        finally:
            if slow:
                self._inline_after = time.monotonic() + INLINE_BACKOFF
        self._committed(group, rows, report)
        return True

    async def _disk_full(self, exc: BaseException) -> None:
        """The disk is full (stream/disk.py): say so once, free the WAL files, wait and let the
        writer retry; intake waits meanwhile. Once intake has stopped (a stop), release the
        reserve instead and let the writer retry at once into the freed space."""
        self.stats.disk_full_waits += 1
        if self._closing and self._release_reserve():
            return
        if self._disk.failed(time.time(), time.monotonic()):  # (one line per episode: FullEpisodes)
            self.stats.disk_full_since = self._disk.since
            log.error("the disk holding the outbox or the ledger is full (%s): intake is held (nothing more "
                      "is acknowledged: the broker keeps the frames) until space is freed", exc)
            self.systemd.notify(STATUS="disk full: intake held until space is freed")
        assert self._box is not None and self._ledger is not None
        ledger = self._ledger
        try:
            await self._box.run(lambda b: (b.checkpoint(), ledger.checkpoint()))
        except (sqlite3.OperationalError, OSError) as err:
            log.debug("checkpoint on a full disk failed: %s", err)
        await asyncio.sleep(DISK_RETRY)

    def _release_reserve(self) -> bool:
        """Release every reserve not yet released (a stop on a full disk). Returns whether any was."""
        freed = [r for r in self._reserves if r.release()]
        if not freed:
            return False
        self._reserve_used = self._unstored()
        log.warning("shutdown on a full disk: the reserve (%d KiB) is released to store the %d decided record(s)",
                    sum(r.size for r in freed) // 1024, self._reserve_used)
        return True

    def _held_bound(self) -> int:
        """Records a stop on a full disk may have to store (disk.reserve_bytes). Per redaction
        stream: those held for the release delay (at most delay + start hold + 1; with a privacy
        button, ``delay`` more: vouch.py ends a hold while it is not heard after ``delay`` unheard
        steps) and one window per aggregate query; plus one store group (decided when the disk
        filled: intake is held after it) and, with mapped sensors (their grid goes on while intake
        is held), the whole store queue."""
        held = sum(rt.core.delay * (2 if name in self.hearings else 1) + rt.core.start_hold + 1  # type: ignore[operator]
                   for name, rt in self.runtimes.items() if isinstance(rt, RedactionRuntime))
        held += sum(len(rt.cfg.aggregates) for rt in self.runtimes.values())
        return held + STORE_GROUP + (STORE_QUEUE_LIMIT if self.ingest.streams else 0)

    def _create_reserves(self) -> None:
        """The shutdown reserve beside the outbox (and the ledger, on another filesystem), sized
        from the streams (disk.reserve_bytes); no room for it raises :class:`DiskFull` (exit 74)."""
        s = self.settings
        size = reserve_bytes(self._held_bound(), len(self.runtimes))
        self._reserves = reserves([s.outbox.path, s.ledger_path()], size)
        for r in self._reserves:
            r.create()

    async def _flush_stores(self) -> None:
        """Wait until everything queued is in the outbox."""
        while self._queue or not self._idle.is_set():
            self._idle.clear()
            self._hurry.set()
            self._queued.set()
            await self._idle.wait()

    # -- tasks --------------------------------------------------------------------------------
    async def _control_session(self, t: Transport) -> None:
        """The status connection (clean session): the takeover check, ``online`` and the privacy
        status. (Not the persistent input session: statuses queued there while it was away — our
        own previous process's, say — would look like another instance's live status.)"""
        status_topic = self.settings.topic("status")
        self._status_checked.clear()
        self.ingest.connection(True)  # (a sensor's messages sent while we were away are lost)
        # the status first: its retained message (delivered after this SUBACK) is the takeover check
        await t.subscribe(status_topic)
        assert self._discovery is not None and self._box is not None
        for topic in self._discovery.subscriptions:
            await t.subscribe(topic)
        for topic_filter in self.ingest.filters():
            await t.subscribe(topic_filter)
        status = asyncio.create_task(self._go_online(t))
        try:
            async for msg in t.messages():
                if msg.topic == status_topic:
                    self._check_status(msg)
                    continue
                if self._discovery.wants_resend(msg):  # Home Assistant (re)started
                    await self._discovery.sync(t, self._box)
                    continue
                await self._ingest_message(msg)
        finally:
            self.ingest.connection(False)
            await _stop_tasks([status], TASK_STOP_TIMEOUT)

    async def _input_session(self, t: Transport) -> None:
        """The input connection (persistent session, stream/transport.py: Sessions): each stream's
        command topic (but those of streams held for their privacy button: :meth:`_button_session`)
        and, for ``source = "mqtt"`` without ``ingest``, its raw topic. A message is acknowledged
        once handled, so a stalled intake stops the broker instead of filling memory."""
        routes: dict[str, tuple[str, bool]] = {}
        for rt in self.runtimes.values():
            if rt.name not in self.hearings:
                routes[rt.command_topic()] = (rt.name, True)
            if rt.cfg.source == "mqtt" and rt.cfg.ingest is None:
                routes[rt.raw_topic()] = (rt.name, False)
        # Messages are handled while the subscriptions are made: a persistent session gets what
        # was queued for it (and what it left unacknowledged) right after connecting, and an
        # intake that waited for every SUBACK first stopped reading the socket once its queue was
        # full (transport.py, Bounds) — the SUBACKs behind those messages never came, and with
        # 1,000 streams a restart never got past subscribing.
        try:
            await _consume_beside(self._consume_inputs(t, routes), self._subscribe_inputs(t, list(routes)),
                                  "input")
        finally:
            self.unacknowledged = t.held
            if held := t.held:  # (never acknowledged: the persistent session gets them again)
                log.warning("%d received message(s) left unhandled; unacknowledged, so the broker delivers "
                            "them again to the next session", held)

    async def _subscribe_inputs(self, t: Transport, topics: list[str]) -> None:
        """Subscribe every input topic, up to ``SUBSCRIBE_WINDOW`` SUBSCRIBEs in flight (1,000
        streams: 2,000 topics in a few round trips' time), then say the inputs are ready."""
        window = asyncio.Semaphore(SUBSCRIBE_WINDOW)

        async def one(topic: str) -> None:
            async with window:
                await t.subscribe(topic)

        try:
            async with asyncio.TaskGroup() as group:
                for topic in topics:
                    group.create_task(one(topic))
        except* TransportError as failed:  # the first one stands for all: the session is lost
            raise failed.exceptions[0] from None
        self._inputs_ready.set()

    async def _button_session(self, t: Transport) -> None:
        """The privacy buttons' connection (``<client id>-btn``): a persistent session of its own,
        so that no backlog of raw frames shares its queue at the broker (``max_queued_messages``).
        Every button topic, the command topics of the streams held for their button (a command is
        a press too) and ``<base>/<device>/sentinel`` are subscribed (QoS 1), then
        :meth:`_buttons_heard`; a press is handled as it comes (:meth:`_button_message`,
        :meth:`_command_message`). When the connection ends the buttons are no longer heard
        (stream/vouch.py)."""
        sentinel = self.settings.topic("sentinel")
        try:
            await _consume_beside(self._consume_buttons(t, sentinel), self._confirm_buttons(t, sentinel), "buttons")
        finally:
            now = self.ingest.clock()
            for hearing in self.hearings.values():
                hearing.lost(now)

    async def _consume_buttons(self, t: Transport, sentinel: str) -> None:
        """Handle the buttons' messages in order; the sentinel being waited for resolves its future."""
        commands = {self.runtimes[name].command_topic(): name for name in self.hearings}
        async for msg in t.messages():
            if msg.topic in commands:
                await self._command_message(commands[msg.topic], msg.payload)
            elif msg.topic != sentinel:
                await self._button_message(msg)
            elif (sent := self._sentinel) is not None and msg.payload == sent[0] and not sent[1].done():
                sent[1].set_result(None)  # everything before it is handled
            await self._durable()  # (a press is acknowledged once its mark is stored)

    async def _confirm_buttons(self, t: Transport, sentinel: str) -> None:
        commands = [self.runtimes[name].command_topic() for name in self.hearings]
        for topic in (*self.ingest.button_filters(), *commands, sentinel):
            await t.subscribe(topic)
        self._buttons_subscribed.set()
        if self.hearings:  # (a periodic stream's button is not held for)
            await self._buttons_heard(t)

    async def _buttons_heard(self, t: Transport) -> None:
        """Every subscription is confirmed: publish a sentinel to ``<base>/<device>/sentinel``, which
        this session subscribes to, and once it comes back — after everything the broker had queued
        for the session, presses included, since it delivers a session's messages in order — the
        buttons are heard; the steps taken meanwhile are vouched for if the broker kept the session,
        else decided private (stream/vouch.py)."""
        self._sentinels += 1
        token = f"{self.instance}/{self._sentinels}".encode()
        back = asyncio.get_running_loop().create_future()
        self._sentinel = (token, back)
        topic = self.settings.topic("sentinel")
        await t.publish(topic, token, qos=1)
        try:
            async with asyncio.timeout(SENTINEL_WAIT):
                await asyncio.shield(back)
        except TimeoutError:
            log.error("the sentinel published on %s did not come back within %g s: the privacy buttons are not "
                      "heard (their steps are held, then decided as private); does the broker's ACL let this "
                      "client read and write it?", topic, SENTINEL_WAIT)
            await back
        kept = isinstance(t, MqttTransport) and t.session_present
        for name, hearing in self.hearings.items():
            await self._unvouched(name, hearing.confirmed(kept))
            self._unvouched_said.pop(name, None)

    async def _consume_inputs(self, t: Transport, routes: dict[str, tuple[str, bool]]) -> None:
        async for group in t.message_groups():  # what queued up while the last group was handled
            frames: list[bytes] = []  # consecutive raw frames of one stream, taken together
            name = ""
            for msg in group:
                route = routes.get(msg.topic)
                if route is None:
                    continue
                if frames and (route[1] or route[0] != name):  # (commands keep their place)
                    await self.handle_frame(name, frames)
                    frames = []
                name, is_command = route
                if is_command:
                    await self.handle_command(name, msg.payload)
                else:
                    frames.append(msg.payload)
            if frames:
                await self.handle_frame(name, frames)
            await self._durable()  # (acknowledged when the next group is asked for)

    async def _button_message(self, msg: Message) -> None:
        """A message on a privacy button's topic: each press is placed (stream/vouch.py) — at the
        step of its own time, or by when it was received (the next tick; for a periodic stream the
        newest step); one received while the button is not heard also marks every unheard step."""
        now = self.ingest.clock()
        for name, press in self.ingest.presses(msg.topic, msg.payload, retain=msg.retain, now=now):
            self.stats.commands += 1
            hearing = self.hearings.get(name)
            placed = False
            if hearing is not None:
                placed, marks = hearing.press(press)
                await self._unvouched(name, marks)
            if not placed and (command := self.ingest.streams[name].press_received(now)) is not None:
                await self.handle_command(name, command)

    async def _command_message(self, name: str, data: bytes) -> None:
        """A command to a stream held for its privacy button: ``{"private": "now"}`` is a press
        without a time of its own (received while the button is not heard, it also marks every
        unheard step: stream/vouch.py); a command naming a seq marks that record, wherever it comes."""
        try:
            now_press = json.loads(data).get("private") == "now"
        except (ValueError, AttributeError, RecursionError):  # (the runtime rejects it, counted)
            now_press = False
        if now_press:
            await self._unvouched(name, self.hearings[name].press(Press())[1])
        await self.handle_command(name, data)

    async def _ingest_step(self, stream: str, data: StepInput, now: float) -> None:
        """A resampled stream's step (the grid): taken, and, while its privacy button is not heard,
        held or marked (stream/vouch.py)."""
        hearing = self.hearings.get(stream)
        if hearing is None:
            await self.handle_frame(stream, data, now)
            return
        core = hearing.core
        first = core.next_phys
        await self.handle_frame(stream, data, now)
        await self._unvouched(stream, hearing.taken(range(first, core.next_phys), now))

    async def _unvouched(self, stream: str, marks: list[Mark]) -> None:
        """Store the marks a :class:`ButtonHearing` made (their ledger events go with them), and say
        once which steps were decided as private for want of hearing the button."""
        if marks:
            self._say_unvouched(stream, marks)
            await self._store(self.runtimes[stream], [])

    def _say_unvouched(self, stream: str, marks: list[Mark]) -> None:
        """One WARNING per stream and reason while its button is not heard (not one per step)."""
        unvouched = [m for m in marks if m.source == "unvouched"]
        if unvouched and self._unvouched_said.get(stream, "") != unvouched[-1].reason:
            self._unvouched_said[stream] = unvouched[-1].reason
            log.warning("stream %s: %d step(s) at positions %d–%d decided as private: %s", stream, len(unvouched),
                        min(m.phys for m in unvouched), max(m.last for m in unvouched), unvouched[-1].reason)

    async def _ingest_message(self, msg: Message) -> None:
        """A message on a mapped sensor's topic: it updates the resamplers, or is a step of a
        stream stated periodic (a privacy button is read on the input session: _button_message)."""
        now = self.ingest.clock()  # the resampler's clock: receive times and ticks on one time line
        for name, _kind, data in self.ingest.route(msg.topic, msg.payload, retain=msg.retain, now=now):
            await self.handle_frame(name, data, now)

    def _check_status(self, msg: Message) -> None:
        """Raise :class:`InUse` if ``msg`` (on our status topic) is another streamguard's status
        that can only have been published since we went online: a live one, or a retained one
        found on a reconnect after we had claimed the topic (another daemon connected with our
        client id — taking our connection over — or runs the same device). A retained status of
        another instance before our first claim is a previous run's (ignored)."""
        try:
            body = json.loads(msg.payload)
            other = body.get("instance") if isinstance(body, dict) else None
        except ValueError:
            other = None
        if isinstance(other, str) and other != self.instance and (self._claimed or not msg.retain):
            assert self._control is not None
            raise InUse(f"client id {self._control.identifier} (device {self.settings.device}) was taken over by "
                        "another streamguard; stopping")
        self._status_checked.set()

    async def _go_online(self, t: Transport) -> None:
        """Publish ``online`` once the retained status passed :meth:`_check_status` (or none came
        within ``CLAIM_WAIT``) and the input subscriptions are in place (a producer that waits for
        ``online`` loses no frame), then keep the privacy status fresh."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLAIM_WAIT):
                await self._status_checked.wait()
        await self._inputs_ready.wait()
        if self._discovery is not None and self._discovery.enabled:
            # Home Assistant shows a stream only once its privacy status counts a record published
            # by this process (stream/hass.py): these go out before ``online``, so the previous
            # process's retained statuses never make its last value look current again
            rts = list(self.runtimes.values())
            for rt, payload in zip(rts, await self._privacy_payloads(rts)):
                await t.publish(rt.privacy_topic(), payload, retain=True)
        await t.publish(self.settings.topic("status"), self._status_payload("online"), retain=True)
        self._claimed = True
        self._online.set()
        assert self._discovery is not None and self._box is not None
        await self._discovery.sync(t, self._box)
        self._status_dirty.set()
        await self._status_loop(t)

    async def _status_loop(self, t: Transport) -> None:
        """Keep each stream's retained privacy status fresh on this connection: every stream's at
        once when it comes up, then a periodic round every ``max(STATUS_INTERVAL, streams /
        STATUS_RATE)`` seconds, and at once the statuses of the streams whose marks or aggregates
        were just stored (before the rest of a round in progress). A round goes STATUS_SLICE
        streams at a time: their outbox and ledger figures in one visit to the outbox thread,
        their statuses computed, then published — only those that differ from what this
        connection last published (the broker retains those); a periodic round while nothing at
        all happened on the device (:meth:`_activity`) computes nothing."""
        loop = asyncio.get_running_loop()
        sent: dict[str, bytes] = {}
        due = loop.time()  # the first round: every stream
        seen: tuple[Any, ...] | None = None
        while True:
            # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancel that arrives as
            # the event is set, and this loop would outlive the shutdown that cancelled it
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, due - loop.time())):
                    await self._status_dirty.wait()
            self._status_dirty.clear()
            urgent, self._status_urgent = self._status_urgent, set()
            if loop.time() >= due:
                due = loop.time() + max(STATUS_INTERVAL, len(self.runtimes) / STATUS_RATE)
                activity = self._activity()
                names = list(self.runtimes) if activity != seen or activity is None else sorted(urgent)
                seen = activity
            else:
                names = sorted(urgent)
            due_now = deque(self.runtimes[n] for n in names if n in self.runtimes)
            while due_now:  # (the loop serves frames between slices)
                if self._status_urgent:  # stored meanwhile (a mark, an aggregate): those go first
                    due_now.extendleft(self.runtimes[n] for n in sorted(self._status_urgent, reverse=True)
                                       if n in self.runtimes)
                    self._status_urgent = set()
                part = [due_now.popleft() for _ in range(min(STATUS_SLICE, len(due_now)))]
                for rt, payload in zip(part, await self._privacy_payloads(part)):
                    if sent.get(rt.name) != payload:
                        await t.publish(rt.privacy_topic(), payload, retain=True)
                        sent[rt.name] = payload

    def _activity(self) -> tuple[Any, ...] | None:
        """Counters that move whenever anything a privacy status reports may have changed (a frame,
        a command, a stored or published record, a drop, a reconnect, a refusal); None (always
        refresh) with ingest streams, whose input status has its own clock."""
        if self.ingest.streams:
            return None
        pub, s = self._publisher, self.stats
        return (s.frames, s.commands, s.stored, s.outbox_full_waits, s.disk_full_waits, s.ledger_refusals,
                None if pub is None else (pub.stats.records, pub.stats.messages, pub.stats.reconnects),
                None if self._input is None else self._input.sessions_lost)

    async def _privacy_payloads(self, rts: list[StreamRuntime]) -> list[bytes]:
        """Each stream's privacy status plus the device's delivery counters (shared outbox), with
        one visit to the outbox thread for all of them."""
        if not rts:
            return []
        assert self._box is not None and self._ledger is not None
        if self._odometers is None or self._odometers.ledger is not self._ledger:
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
        ingest = self.ingest.status(rt.name)
        if ingest is not None:
            status["ingest"] = ingest
            if (hearing := self.hearings.get(rt.name)) is not None:
                ingest["button"] = hearing.status()
        if rt.aggregates is not None:
            status["aggregates"] = rt.aggregates.status()
        status["ledger"] = ledger
        assert self._publisher is not None
        stats = self._publisher.stats
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
        if self._box is not None:
            out["streamguard_outbox_records"], out["streamguard_outbox_dropped_total"] = await self._box.run(
                lambda b: (len(b), b.dropped))
        if self._ledger is not None:  # (event ids are consecutive from 1)
            out["streamguard_ledger_events"] = self._ledger.head[0]
        if self._publisher is not None:
            out["streamguard_published_records_total"] = self._publisher.stats.records
            out["streamguard_reconnects_total"] = self._publisher.stats.reconnects
        if self._input is not None:
            out["streamguard_input_sessions_lost_total"] = self._input.sessions_lost
        return out

    def _intake_counters(self) -> dict[str, int]:
        """What the input connection knows was lost on the way in (transport.py: Sessions)."""
        c = self._input
        return {"sessions_lost": 0 if c is None else c.sessions_lost}

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(TICK_INTERVAL)
            now = time.time()
            for name, hearing in self.hearings.items():
                await self._unvouched(name, hearing.expire(self.ingest.clock()))
            for rt in self.runtimes.values():  # (a tick may decide steps without a release: skip_run)
                await self._store(rt, rt.tick(now))

    async def _feed(self, source: FrameSource) -> None:
        """Handle a source's frames; while stores fail (a full disk) read no more (stdin's writer
        waits on the pipe). A mapped sensor's grid goes on instead: its steps come on a clock."""
        async for stream, data in source():
            await self.handle_frame(stream, data)
            while self._disk.failing:
                self._room.clear()
                await self._room.wait()

    async def _until_done(self, stopping: asyncio.Task[Any], essential: list[asyncio.Task[Any]],
                          sources: list[asyncio.Task[Any]]) -> None:
        """Wait until a stop is asked, an essential task ends, or a source fails. A source that
        simply ends (stdin closed) does not stop the other streams: the daemon stops for the end
        of input only when every source ended and no stream reads from MQTT."""
        open_sources = set(sources)
        mqtt_fed = any(c.source == "mqtt" for c in self.settings.streams)
        while True:
            done, _ = await asyncio.wait([stopping, *essential, *open_sources], return_when=asyncio.FIRST_COMPLETED)
            ended = {t for t in done if t in open_sources and not t.cancelled() and t.exception() is None}
            if done - ended:
                return
            open_sources -= ended
            if not open_sources and not mqtt_fed:
                return
            log.info("an input ended (standard input closed); the other streams go on")

    def _status_payload(self, state: str) -> bytes:
        s = self.settings
        return json.dumps({
            "device": s.device,
            "state": state,
            "streams": [rt.name for rt in self.runtimes.values()],
            "deterministic": s.deterministic_seed is not None,
            "instance": self.instance,
        }).encode()

    # -- run ----------------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set, then shut down in order (module docstring). Raises
        :class:`~.outbox.InUse` at once, before opening anything, if another process holds the
        outbox or the ledger, and after a shutdown if another streamguard took over the
        identity."""
        s = self.settings
        for risk in s.broker.risks():
            log.warning("%s", risk)
        with contextlib.ExitStack() as locks:
            locked: set[str] = set()
            for path, what in ((s.outbox.path, "outbox"), (s.ledger_path(), "ledger")):
                if os.path.abspath(path) not in locked:  # (one lock if both live in one file)
                    locked.add(os.path.abspath(path))
                    locks.enter_context(ExclusiveLock(path, what))
                    probe_room(path)  # (no room for the next write: DiskFull, one line, exit 74)
            async with await AsyncOutbox.open(Outbox.from_config, s.outbox) as box:
                self._box = box
                # the ledger lives on the outbox's thread: a group's ledger events commit right
                # before its records are stored, in one place and order (write-ahead, DESIGN.md §4)
                self._ledger = await box.run(lambda _b: Ledger.open(s.ledger_path()))
                try:
                    await self._run(box, stop)
                finally:
                    self.ingest.close()
                    ledger, self._ledger, self._odometers = self._ledger, None, None
                    await box.run(lambda _b: ledger.close())

    async def _run(self, box: AsyncOutbox, stop: asyncio.Event) -> None:
        s = self.settings
        with self.systemd.extending("starting: building the streams' privacy plans"):
            await self._restore(box)
        # (after a wall clock stepped back, the stored steps lie ahead of it: the grid goes on after them)
        newest = await box.run(lambda b: [b.newest_step(name) for name in self.ingest.streams])
        self.ingest.not_before(max((t for t in newest if t is not None), default=None))
        for name, ing in self.ingest.streams.items():
            rt = self.runtimes.get(name)
            if ing.button is not None and ing.resampler is not None and isinstance(rt, RedactionRuntime):
                self.hearings[name] = ButtonHearing(rt.core, rt.steps, ing.resampler.period, now=self.ingest.clock())
        self._create_reserves()  # (no room: DiskFull, one line, exit 74)
        self._discovery = Discovery(s, self.runtimes.values())
        self._publisher = Publisher(box, self._transport("-pub", will=False), s.publish, backoff=PROMPT)
        self._control = self._transport("", will=True)
        # raw frames and commands published while this connection is away wait at the broker (QoS 1)
        self._input = self._transport("-in", will=False, persistent=True)
        if self.ingest.button_filters():  # privacy buttons: a persistent session of their own
            self._buttons = self._transport("-btn", will=False, persistent=True)
        # every connection of the identity waits for the check (the sources, the ticker and the
        # writer go on: what they decide is stored, and published only if the check passes)
        checked = asyncio.create_task(self._check_identity(box), name="identity")
        publisher = asyncio.create_task(_after(checked, self._publisher.run), name="publisher")
        writer = asyncio.create_task(self._writer(), name="writer")
        control, inputs = self._control, self._input
        workers = [asyncio.create_task(_after(checked, lambda: reconnecting(control, self._control_session,
                                                                            backoff=PROMPT)), name="control"),
                   asyncio.create_task(_after(checked, lambda: reconnecting(inputs, self._input_session,
                                                                            backoff=PROMPT)), name="input"),
                   asyncio.create_task(self._ticker(), name="ticker")]
        if (buttons := self._buttons) is not None:
            workers.append(asyncio.create_task(_after(checked, lambda: reconnecting(buttons, self._button_session,
                                                                                    backoff=PROMPT)), name="buttons"))
        sources = [asyncio.create_task(self._feed(src), name="source") for src in self.extra_sources]
        workers += sources
        workers += [asyncio.create_task(grid, name="grid") for grid in self.ingest.grid_tasks(self._ingest_step)]
        stopping = asyncio.create_task(stop.wait())
        watchdog = asyncio.create_task(self.systemd.watchdog(), name="watchdog")  # (until the very end)
        m = s.metrics
        if m.textfile is not None:  # (stopped with intake)
            workers.append(asyncio.create_task(
                textfile_loop(self, m.textfile, m.interval, private_counters=m.private_counters), name="metrics"))
        ready = asyncio.create_task(self._say_ready(), name="ready")  # (ends once said: not a worker)
        try:
            with _frozen_heap() if self._freeze_heap else contextlib.nullcontext():
                await self._serve(box, stop, stopping, writer, publisher, workers, sources)
        finally:
            await _stop_tasks([watchdog, ready, checked], TASK_STOP_TIMEOUT)

    async def _check_identity(self, box: AsyncOutbox) -> None:
        """One identity, one sequence (issue 28). A stream this outbox holds no position of numbers
        its records from seq 0; if the identity's retained privacy status shows seqs published
        already (by another outbox: a re-install, a lost disk, a second daemon with an outbox of
        its own), consumers would get two payloads for one seq. A short clean connection
        (``<client id>-chk``, no will: a running daemon of the identity is not disturbed) reads
        those streams' retained privacy statuses — everything retained arrives before a sentinel
        published after the subscriptions — and raises :class:`~.outbox.InUse` naming the first
        stream whose ``next_seq`` is above 0. Every other connection waits for it; a broker that
        is down is waited for (``reconnecting``); a stop meanwhile drains what the publisher can
        publish once the check passed, and says ``offline`` only if it did (``_identity_checked``).
        A sentinel that does not come back within ``SENTINEL_WAIT`` of the subscriptions (an ACL
        without ``<base>/<device>/sentinel``) is logged and the check passes on what came."""
        names = list(self.runtimes)
        positions = await box.run(lambda b: [b.next_position(n) for n in names])
        fresh = {self.runtimes[n].privacy_topic(): n for n, p in zip(names, positions) if p == 0}
        if not fresh:
            self._identity_checked = True
            return
        sentinel = self.settings.topic("sentinel")
        token = f"{self.instance}/identity".encode()

        async def session(t: Transport) -> None:
            for topic in (*fresh, sentinel):
                await t.subscribe(topic)
            await t.publish(sentinel, token, qos=1)
            try:
                async with asyncio.timeout(SENTINEL_WAIT):
                    async for msg in t.messages():
                        if msg.topic == sentinel and msg.payload == token:
                            return
                        if msg.topic in fresh and (published := _next_seq(msg.payload)) > 0:
                            raise InUse(f"stream {fresh[msg.topic]}: seqs 0-{published - 1} were published under "
                                        f"device {self.settings.device} (retained {msg.topic}), but this outbox "
                                        f"({self.settings.outbox.path}) holds none of them and would number from 0 "
                                        "again: run with the outbox that published them, or another device id")
            except TimeoutError:
                log.warning("identity check: the sentinel on %s did not come back within %g s; going on with the "
                            "retained statuses received", sentinel, SENTINEL_WAIT)

        await reconnecting(self._transport("-chk", will=False), session, backoff=PROMPT)
        self._identity_checked = True

    async def _say_ready(self) -> None:
        """READY=1 (systemd) once the daemon takes input: ``online`` published — so the input
        connection's subscriptions and the sensors' are confirmed — and the buttons' connection
        subscribed. A producer that starts on READY loses no frame (issue 28: READY came before the
        input session subscribed, and 18 of 20 frames published in the 0.1 s after it were lost)."""
        if self._buttons is None:
            self._buttons_subscribed.set()
        await self._online.wait()
        await self._buttons_subscribed.wait()
        self.systemd.notify(READY="1", STATUS=f"running {len(self.runtimes)} stream(s): " + ", ".join(self.runtimes))

    async def _serve(self, box: AsyncOutbox, stop: asyncio.Event, stopping: asyncio.Task[Any],
                     writer: asyncio.Task[None], publisher: asyncio.Task[None],
                     workers: list[asyncio.Task[Any]], sources: list[asyncio.Task[Any]]) -> None:
        """Run until ``stop``, the end of every input or a failure, then shut down in order."""
        await self._until_done(stopping, [writer, publisher, *(w for w in workers if w not in sources)], sources)
        failure = next((w.exception() for w in (writer, publisher, *workers) if w.done() and not w.cancelled()
                        and w.exception() is not None), None)
        if failure is not None:
            if not isinstance(failure, InUse | ConnectRefused):  # (the caller reports those, in one line)
                log.error("stopping: a task failed: %s", failure)
        elif not stop.is_set():
            log.info("stopping: the input ended")
        self.systemd.notify(STOPPING="1", STATUS="stopping: storing and publishing what is decided")
        deadline = asyncio.get_running_loop().time() + SHUTDOWN_TIMEOUT
        # 1. stop intake  2. decide what is pending  3. store it  4. drain  5. offline  6. disconnect
        await _stop_tasks([*workers, stopping], TASK_STOP_TIMEOUT)
        self._closing = True
        for name, hearing in self.hearings.items():
            self._say_unvouched(name, hearing.close())  # (stored with the drained records)
        drained = 0  # records held for the release delay (their frames are acknowledged)
        for rt in self.runtimes.values():
            releases = rt.drain()
            drained += len(releases)
            if self._enqueue(rt, releases):
                self._queued.set()
        stored_all = False  # (a writer that failed stores nothing more: its failure is raised below)
        if not writer.done():
            try:
                async with asyncio.timeout_at(deadline - OFFLINE_RESERVE):
                    await self._flush_stores()
                stored_all = True
            except TimeoutError:
                if not self._disk.failing:
                    log.error("shutdown: %d decided records could not be stored in time", self._unstored())
        full = self._full_at_stop(drained, stored_all)  # (exit 74: cli/daemon.py)
        if full is not None:
            log.error("shutdown: %s", full)
        await _stop_tasks([writer], TASK_STOP_TIMEOUT)
        # the other daemon owns the identity: leave it alone; or the broker refuses us: no use trying
        # (or the identity check has not passed: its retained statuses may be another outbox's)
        taken_over = isinstance(failure, InUse | ConnectRefused)
        # (the publisher starts once the identity check passes, also while this drain waits)
        if not taken_over and not await self._publisher.drain(self._left(deadline) - OFFLINE_RESERVE):
            log.warning("shutdown: %d sanitized records stay in the outbox for the next start",
                        await box.run(len))
        await _stop_tasks([publisher], TASK_STOP_TIMEOUT)
        if failure is None and publisher.done() and not publisher.cancelled() \
                and isinstance(publisher.exception(), InUse):
            failure = publisher.exception()  # (the identity check refused during the stop)
            taken_over = True
        # (nothing under an identity whose check has not passed: its statuses may be another outbox's)
        if not taken_over and self._identity_checked:
            try:
                async with asyncio.timeout_at(deadline):
                    await self._say_offline()
            except TimeoutError:
                log.warning("could not publish the offline status in time")
        if failure is not None:
            raise failure
        if full is not None:
            raise full

    def _unstored(self) -> int:
        """Decided records not stored yet (the writer's group in hand and the queue)."""
        return sum(len(e.items) for e in (*self._in_hand, *self._queue))

    def _full_at_stop(self, drained: int, stored_all: bool) -> DiskFull | None:
        """The one line (exit 74) of a stop that met a full disk, None if it did not. The frames
        left unacknowledged at the broker are delivered again; with the reserve released and
        everything stored (``stored_all``) nothing acknowledged is lost, else the line names the
        records lost — up to ``drained`` of them held for the release delay from frames
        acknowledged earlier."""
        used = self._reserve_used
        if used is None and not (self._disk.failing and not stored_all):
            return None
        at_broker = (f"{self.unacknowledged} raw frame(s) stay unacknowledged at the broker (delivered again at the "
                     "next start)")
        if stored_all:
            return DiskFull(f"the disk is full at shutdown: the reserve was released to store the {used} decided "
                            f"record(s) pending ({drained} held for the release delay), none lost; {at_broker}; "
                            "the next start needs room for the reserve again")
        unstored = self._unstored()
        return DiskFull(f"the disk is still full at shutdown{'' if used is None else ', even with the reserve released'}:"
                        f" {at_broker}; {unstored} decided record(s) not stored, up to {min(drained, unstored)} of them "
                        "held for the release delay from frames acknowledged earlier (lost as at a crash)")

    @staticmethod
    def _left(deadline: float) -> float:
        return max(0.0, deadline - asyncio.get_running_loop().time())

    async def _say_offline(self) -> None:
        """A clean DISCONNECT suppresses the will, so publish ``offline`` explicitly."""
        assert self._control is not None
        try:
            async with self._control as t:
                await t.publish(self.settings.topic("status"), self._status_payload("offline"), retain=True)
                rts = list(self.runtimes.values())
                for rt, payload in zip(rts, await self._privacy_payloads(rts)):
                    await t.publish(rt.privacy_topic(), payload, retain=True)
        except TransportError as exc:
            log.warning("could not publish the offline status: %s", exc)

    def _persist(self, box: Outbox, group: list[_StoreEntry], over_capacity: bool = False) -> list[Row] | None:
        """On the outbox thread: first the group's ledger events (durable; aggregates only if the
        budget filter admits them), then its records, rows used and mark states in one outbox
        transaction — so nothing is publishable before the ledger holds it. The ledger step is
        done once per entry: a retry (the outbox was full under ``stop-input``) only retries the
        store, with the admitted aggregates already turned into records. ``over_capacity`` is
        passed to :meth:`Outbox.store` (shutdown). Returns the stored rows (for the publisher; None
        when the overflow policy dropped records)."""
        assert self._ledger is not None
        self._ledger.commit_all([ev for e in group for ev in e.events])
        next_window: dict[str, int] = {}
        for e in group:
            e.events = []
            while e.aggregates:  # each one leaves the list once admitted or refused: a retry (full
                a = e.aggregates[0]  # disk) never records it twice
                if self._admit(a):
                    key = f"{a.rt.name}/aggregate"
                    seq = next_window.get(key)
                    if seq is None:  # (past the windows a failed attempt already numbered)
                        seq = max([box.next_position(key)] + [it.seq + 1 for g in group for it in g.items
                                                              if it.stream == key])
                    next_window[key] = seq + 1
                    e.items.append(Item(key, seq, a.rt.aggregate_topic(), a.rt.aggregate_payload(a.query, a.release)))
                e.aggregates.pop(0)
        decisions: dict[str, list[tuple[int, float, float]]] = {}
        marks: dict[str, dict[int, dict[str, Any]]] = {}
        newest: dict[str, float] = {}
        for e in group:
            decisions.setdefault(e.stream, []).extend(e.decisions)
            marks.setdefault(e.stream, {}).update(e.marks)
            if e.newest is not None:
                newest[e.stream] = max(newest.get(e.stream, e.newest), e.newest)
        return box.store([it for e in group for it in e.items], keep=KEEP_DECISIONS, decisions=decisions,
                         marks=marks, over_capacity=over_capacity, newest=newest)

    def _admit(self, a: _Aggregate) -> bool:
        """The ledger's budget filter for one aggregate release: is it admitted (and recorded)?"""
        assert self._ledger is not None and a.rt.aggregates is not None
        rt, device = a.rt, self.settings.device
        budget = rt.aggregates.budget
        assert budget is not None
        event = AggregateEvent.from_release(a.release, device, rt.name)
        try:
            self._ledger.admit(event, budget, model=rt.aggregates.queries[a.query].model)
        except BudgetExceeded as exc:  # recorded by the ledger and reported in the odometer
            self.stats.ledger_refusals += 1
            log.warning("stream %s: aggregate window [%d, %d] refused: %s", rt.name, a.release.lo, a.release.hi, exc)
            return False
        return True


async def _after(checked: asyncio.Task[None], work: Callable[[], Awaitable[Any]]) -> Any:
    """Run ``work()`` once ``checked`` has passed (its exception, e.g. InUse, is raised instead)."""
    await asyncio.shield(checked)
    return await work()


def _next_seq(payload: bytes) -> int:
    """The ``next_seq`` of a retained privacy status (0 if it has none)."""
    with contextlib.suppress(ValueError):
        body = json.loads(payload)
        if isinstance(body, dict) and isinstance(n := body.get("next_seq"), int):
            return n
    return 0


@contextlib.contextmanager
def _frozen_heap() -> Iterator[None]:
    """Serve with the objects of start-up (modules, numba's and the plans' structures: about 100 k)
    moved out of the garbage collector's sight (gc.freeze), then give them back. Without it every
    full collection walked them all: 50–77 ms with the event loop stopped, several times a
    minute under load (bench_stream, 100-frame batches: 6 in 11 s). What is created while serving
    is collected as before; start-up's garbage is collected first, so none is kept. Process-wide:
    only for a process that is one daemon (Daemon's ``freeze_heap``; ``streamguard run``)."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@dataclass
class _StoreEntry:
    stream: str
    items: list[Item]
    decisions: list[tuple[int, float, float]]  # (physical index, row0, row1)
    marks: dict[int, dict[str, Any]]
    events: list[Event]
    aggregates: list[_Aggregate]
    newest: float | None = None  # the stream's newest step time (persisted: redeliveries after a restart)
    queued: float = 0.0  # (monotonic) when it was queued
    number: int = 0  # its place in the queue's order since start (Daemon._durable)
    counts: tuple[int, int] = (0, 0)  # the stream's (released, redacted) counters once it is decided
    #: Must not wait out a group commit's delay: it holds a private mark (its input may be
    #: acknowledged already: a mark lost to a power cut would leave later records unprotected),
    #: ledger events or aggregates. Set when queued (_persist empties ``events`` and ``aggregates``:
    #: an entry put back after a failed inline commit stays urgent).
    urgent: bool = False


@dataclass
class _Aggregate:
    rt: StreamRuntime
    query: int
    release: AggregateRelease


def _reported(group: list[_StoreEntry]) -> set[str]:
    """The streams whose status a stored ``group`` refreshes at once: those with marks or
    aggregates (taken before persisting, which empties the aggregates)."""
    return {e.stream for e in group if e.marks or e.aggregates}


async def _stop_tasks(tasks: list[asyncio.Task[Any]], timeout: float) -> None:
    """Cancel ``tasks`` and wait for them to end, at most ``timeout`` seconds, cancelling again
    every 0.5 s a task that is still running (a cancel can be swallowed, e.g. by a library's
    ``wait_for`` on Python 3.11); one that still runs is logged and left behind, so a shutdown
    never hangs on it. Their exceptions are retrieved (the caller read the one it reports)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    pending = {t for t in tasks if not t.done()}
    while pending and (left := deadline - loop.time()) > 0:
        for t in pending:
            t.cancel()
        _, pending = await asyncio.wait(pending, timeout=min(0.5, left))
    for t in tasks:
        if t.done() and not t.cancelled():
            t.exception()
    if pending:
        log.error("shutdown: task(s) %s did not stop when cancelled", ", ".join(sorted(t.get_name() for t in pending)))


#: Bytes of a standard-input line kept: a longer line is refused as oversize either way
#: (records.py), and the rest of it is read and dropped, so a line without end costs bounded memory.
STDIN_LINE_LIMIT = max(MAX_FRAME_BYTES, MAX_BATCH_BYTES) + 1
STDIN_CHUNK = 65536


async def stdin_frames(stream: str) -> AsyncIterator[tuple[str, bytes]]:
    """Raw JSON lines from standard input (a pipe or a file), as frames of ``stream``."""
    async for line in _lines(_stdin_chunks()):
        data = line.rstrip(b"\r")
        if data:
            yield stream, data


async def _stdin_chunks() -> AsyncIterator[bytes]:
    """Standard input's bytes as they come, until its end. A pipe, socket or terminal is read by the
    event loop itself: no thread sits blocked in ``read``, so a stop with the writer's end still
    open is not held up (issue 28: before, SIGTERM never completed). Anything else (a regular
    file, /dev/null) never waits for a writer and is read in a worker thread."""
    fd = sys.stdin.fileno()
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)):
        while chunk := await asyncio.to_thread(os.read, fd, STDIN_CHUNK):
            yield chunk
        return
    reader = asyncio.StreamReader(limit=STDIN_CHUNK)
    # (a duplicate: closing the transport leaves descriptor 0 itself alone)
    transport, _ = await asyncio.get_running_loop().connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), open(os.dup(fd), "rb", buffering=0))
    try:
        while chunk := await reader.read(STDIN_CHUNK):
            yield chunk
    finally:
        transport.close()
        with contextlib.suppress(OSError):  # (the loop made the shared file description non-blocking:
            os.set_blocking(fd, True)       # a terminal stays usable for the shell after us)


async def _lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The newline-separated lines of ``chunks`` (the last one may end without a newline), each cut
    to its first ``STDIN_LINE_LIMIT`` bytes."""
    part = bytearray()
    async for chunk in chunks:
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            part += chunk[start:min(end, start + STDIN_LINE_LIMIT - len(part))]
            yield bytes(part)
            part.clear()
            start = end + 1
        part += chunk[start:min(len(chunk), start + STDIN_LINE_LIMIT - len(part))]
    if part:
        yield bytes(part)
