"""The daemon's store (DESIGN.md §4, §6; stream/daemon.py): the store queue, the writer task's
group commit (and the inline commit of a lone entry), persisting a group — the ledger's events
first, aggregates only if its budget filter admits them, then the records, rows used and mark
states in one outbox transaction —, the full-disk path and the shutdown reserve.

Every decision is stored in the outbox (with the redaction rows used and the open marks) before
it can be published — by one writer task that commits whatever has queued up as one group; a
retry resends the stored bytes, never a new draw. A decision is queued for the writer in the same
step that makes it (:meth:`Store.put`), so the store queue (and the outbox, and the publisher)
holds each stream's records in seq order, and a decided record is never lost to a cancelled wait.
A raw MQTT frame is acknowledged only once every entry queued before it is handled is committed
(:meth:`Store.durable`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import sqlite3
import sys
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from ..config import Settings
from ..ledger.events import AggregateEvent, Event
from ..ledger.store import BudgetExceeded, Ledger
from ..quilt.release import AggregateRelease
from .disk import RETRY_INTERVAL as DISK_RETRY
from .disk import DiskFull, FullEpisodes, Reserve, is_disk_full, reserve_bytes, reserves
from .outbox import AsyncOutbox, Full, Item, Outbox, Row
from .redaction_runtime import RedactionRuntime
from .runtime import StreamRuntime
from .status import DaemonStats
from .systemd import Notifier

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
    number: int = 0  # its place in the queue's order since start (Store.durable)
    counts: tuple[int, int] = (0, 0)  # the stream's (released, redacted) counters once it is decided
    #: Must not wait out a group commit's delay: it holds a private mark (its input may be
    #: acknowledged already: a mark lost to a power cut would leave later records unprotected),
    #: ledger events or aggregates. Set when queued (persist empties ``events`` and ``aggregates``:
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


class Store:
    """The store queue and its writer (see module docstring).

    ``box`` and ``ledger``: the open outbox and the ledger on its thread. ``notify``: hands the
    rows of a committed group to the publisher; ``report``: asks for the privacy statuses of the
    streams whose marks or aggregates were just stored (stream/status.py: Refresh)."""

    def __init__(self, settings: Settings, box: AsyncOutbox, ledger: Ledger, stats: DaemonStats, systemd: Notifier,
                 *, notify: Callable[[list[Row] | None], None], report: Callable[[set[str]], None]) -> None:
        self.settings = settings
        self.stats = stats
        self.notify = notify
        self.box = box  # (the outbox stored into)
        self._ledger = ledger
        self._systemd = systemd
        self._report = report
        # Store queue (decision order) drained by one writer task in groups.
        self.queue: deque[_StoreEntry] = deque()
        self._queued = asyncio.Event()
        self._room = asyncio.Event()
        #: Store entries queued so far, and how many of them (in queue order) are committed: a raw
        #: MQTT frame is acknowledged once every entry queued before it is handled is (durable).
        self._entries = 0
        self._entries_stored = 0
        self._stored_more = asyncio.Event()
        self._in_hand: list[_StoreEntry] = []  # the group the writer is storing
        #: The disk's full/room state with hysteresis (stream/disk.py).
        self._disk = FullEpisodes()
        #: The shutdown reserve on each filesystem of the outbox and the ledger (stream/disk.py), and
        #: the records queued when a stop on a full disk released it (None: not released).
        self.reserves: list[Reserve] = []
        self._reserve_used: int | None = None
        self.idle = asyncio.Event()  # the writer has nothing in hand (an inline commit is over when it returns)
        self.idle.set()
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
        self.closing = False  # intake has stopped: store the rest even past max_records

    async def put(self, rt: StreamRuntime, releases: list[Any]) -> None:
        """Queue the decisions, the rows used and the mark states for the writer (:meth:`_enqueue`),
        then wait while the queue is over ``STORE_QUEUE_LIMIT`` (the outbox is slow or, under
        stop-input, full): the wait holds back the caller's next intake, never this entry, so
        cancelling it loses nothing. The queue exceeds the limit by at most one entry per intake
        task."""
        if self._enqueue(rt, releases) and not (self._commit_here() and self._commit_inline()):
            self._queued.set()
        while len(self.queue) > STORE_QUEUE_LIMIT:
            self._room.clear()
            await self._room.wait()

    def put_nowait(self, rt: StreamRuntime, releases: list[Any]) -> None:
        """Queue what ``rt`` decided for the writer and wake it: no inline commit, no wait for room
        (the shutdown's last decisions)."""
        if self._enqueue(rt, releases):
            self._queued.set()

    async def durable(self) -> None:
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

    @property
    def disk_failing(self) -> bool:
        """Stores fail for a full disk (stream/disk.py: FullEpisodes)."""
        return self._disk.failing

    async def room(self) -> None:
        """Wait while stores fail (a full disk)."""
        while self._disk.failing:
            self._room.clear()
            await self._room.wait()

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
            self.queue.append(entry)
            if self._commit_delay and (entry.urgent or len(self.queue) >= STORE_GROUP):
                self._hurry.set()
            return True
        return False

    async def writer(self) -> None:
        """Group commit: everything queued while the previous transaction ran goes in the next one
        (one disk sync per group); only then can the publisher see the records."""
        while True:
            self._writer_waiting = True
            try:
                await self._queued.wait()
            finally:  # (cancelled at shutdown: no inline commit after the writer has gone)
                self._writer_waiting = False
            self.idle.clear()  # busy: a flush must not return on the idle flag of the last round
            await self._wait_to_commit()
            self._queued.clear()
            while self.queue:
                self._in_hand = group = [self.queue.popleft() for _ in range(min(len(self.queue), STORE_GROUP))]
                self._room.set()
                report = _reported(group)
                while True:
                    try:  # (once intake has stopped, a full stop-input outbox takes the group anyway)
                        rows = await self.box.run(self.persist, group, self.closing)
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
                if self.queue and self._commit_delay:  # (what came during the transaction waits out its own delay)
                    await self._wait_to_commit()
            self.idle.set()

    def _delay_wait(self) -> float:
        """Seconds the group commit (``outbox.commit_delay_ms``) still waits: until that long
        after the oldest queued entry was queued — none while an urgent entry or a whole group
        (STORE_GROUP) is queued, or once the shutdown began."""
        if (not self._commit_delay or not self.queue or len(self.queue) >= STORE_GROUP or self.closing
                or any(e.urgent for e in self.queue)):  # (fewer than STORE_GROUP entries to look at)
            return 0.0
        return self.queue[0].queued + self._commit_delay - time.monotonic()

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
        self._room.set()  # (intake held for the disk: put, room)
        if self._disk.stored(time.monotonic()) and since is not None:
            log.warning("the disk has room again (full since %.0f s ago, %d failed attempts): storing resumes",
                        time.time() - since, self.stats.disk_full_waits)
            self.stats.disk_full_since = None
            self._systemd.notify(STATUS="running: the disk has room again")

    def _committed(self, group: list[_StoreEntry], rows: list[Row] | None, report: set[str]) -> None:
        """After ``group``'s transaction: hand its records to the publisher (only now can it see
        them), the JSON-lines sink, and refresh the statuses of the streams in ``report``."""
        self._last_commit = time.monotonic()
        self._entries_stored = group[-1].number
        self._stored_more.set()
        for e in group:  # (in queue order: each stream's last entry holds its newest counts)
            self.stored_counts[e.stream] = e.counts
        stored = sum(len(e.items) for e in group)
        self.stats.stored += stored
        if stored:
            self.notify(rows)
            if self.settings.stdout:  # the JSON-lines sink: stored, so never re-drawn
                sys.stdout.write("".join(it.payload.decode() + "\n" for e in group for it in e.items))
                sys.stdout.flush()
        if report:
            self._report(report)

    def _commit_here(self) -> bool:
        """Commit the queued entry at once, on the loop's thread (INLINE_QUIET)? Only a lone entry
        queued after a quiet interval, while the writer waits for work (not spacing its commits),
        the outbox thread is idle, no inline commit was slow or failed lately, and no group commit
        is asked for (``outbox.commit_delay_ms``) unless the entry is urgent."""
        return (self._writer_waiting and len(self.queue) == 1 and self._quiet
                and (not self._commit_delay or self.queue[0].urgent)
                and self.box.idle
                and time.monotonic() >= max(self._last_commit + COMMIT_SPACING, self._inline_after)
                and self.stats.disk_full_since is None)

    def _commit_inline(self) -> bool:
        """Commit the lone queued entry on the loop's thread (AsyncOutbox.run_here), from the
        intake that queued it: no writer wake-up, no thread switch, and the release is published
        before the raw frame's PUBACK goes out. Returns False, with the entry back at the queue's
        head for the writer (on the outbox thread, and with its error handling), if the commit
        failed — nothing of the entry's records was stored then (``persist`` retries only the
        store); a failed or slow commit sends the next ones to the thread for INLINE_BACKOFF."""
        group = [self.queue.popleft()]
        report = _reported(group)
        began, slow = time.monotonic(), True
        try:
            rows = self.box.run_here(self.persist, group, self.closing)
            slow = time.monotonic() - began > INLINE_MAX
        except Exception:  # noqa: BLE001 - the writer meets the same error and handles it
            self.queue.appendleft(group[0])
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
        if self.closing and self._release_reserve():
            return
        if self._disk.failed(time.time(), time.monotonic()):  # (one line per episode: FullEpisodes)
            self.stats.disk_full_since = self._disk.since
            log.error("the disk holding the outbox or the ledger is full (%s): intake is held (nothing more "
                      "is acknowledged: the broker keeps the frames) until space is freed", exc)
            self._systemd.notify(STATUS="disk full: intake held until space is freed")
        ledger = self._ledger
        try:
            await self.box.run(lambda b: (b.checkpoint(), ledger.checkpoint()))
        except (sqlite3.OperationalError, OSError) as err:
            log.debug("checkpoint on a full disk failed: %s", err)
        await asyncio.sleep(DISK_RETRY)

    def _release_reserve(self) -> bool:
        """Release every reserve not yet released (a stop on a full disk). Returns whether any was."""
        freed = [r for r in self.reserves if r.release()]
        if not freed:
            return False
        self._reserve_used = self.unstored()
        log.warning("shutdown on a full disk: the reserve (%d KiB) is released to store the %d decided record(s)",
                    sum(r.size for r in freed) // 1024, self._reserve_used)
        return True

    @staticmethod
    def held_bound(runtimes: Mapping[str, StreamRuntime], heard: Collection[str], mapped: bool) -> int:
        """Records a stop on a full disk may have to store (disk.reserve_bytes). Per redaction
        stream: those held for the release delay (at most delay + start hold + 1; with a privacy
        button — the streams ``heard`` —, ``delay`` more: vouch.py ends a hold while it is not heard
        after ``delay`` unheard steps) and one window per aggregate query; plus one store group
        (decided when the disk filled: intake is held after it) and, with mapped sensors
        (``mapped``: their grid goes on while intake is held), the whole store queue."""
        held = sum(rt.core.delay * (2 if name in heard else 1) + rt.core.start_hold + 1  # type: ignore[operator]
                   for name, rt in runtimes.items() if isinstance(rt, RedactionRuntime))
        held += sum(len(rt.cfg.aggregates) for rt in runtimes.values())
        return held + STORE_GROUP + (STORE_QUEUE_LIMIT if mapped else 0)

    def create_reserves(self, held: int, streams: int) -> None:
        """The shutdown reserve beside the outbox (and the ledger, on another filesystem), sized
        for ``held`` records of ``streams`` streams (disk.reserve_bytes, :meth:`held_bound`); no
        room for it raises :class:`DiskFull` (exit 74)."""
        s = self.settings
        size = reserve_bytes(held, streams)
        self.reserves = reserves([s.outbox.path, s.ledger_path()], size)
        for r in self.reserves:
            r.create()

    async def flush(self) -> None:
        """Wait until everything queued is in the outbox."""
        while self.queue or not self.idle.is_set():
            self.idle.clear()
            self._hurry.set()
            self._queued.set()
            await self.idle.wait()

    def unstored(self) -> int:
        """Decided records not stored yet (the writer's group in hand and the queue)."""
        return sum(len(e.items) for e in (*self._in_hand, *self.queue))

    def full_at_stop(self, drained: int, stored_all: bool, unacknowledged: int) -> DiskFull | None:
        """The one line (exit 74) of a stop that met a full disk, None if it did not. The frames
        left unacknowledged at the broker (``unacknowledged``) are delivered again; with the
        reserve released and everything stored (``stored_all``) nothing acknowledged is lost, else
        the line names the records lost — up to ``drained`` of them held for the release delay
        from frames acknowledged earlier."""
        used = self._reserve_used
        if used is None and not (self._disk.failing and not stored_all):
            return None
        at_broker = (f"{unacknowledged} raw frame(s) stay unacknowledged at the broker (delivered again at the "
                     "next start)")
        if stored_all:
            return DiskFull(f"the disk is full at shutdown: the reserve was released to store the {used} decided "
                            f"record(s) pending ({drained} held for the release delay), none lost; {at_broker}; "
                            "the next start needs room for the reserve again")
        unstored = self.unstored()
        return DiskFull(f"the disk is still full at shutdown{'' if used is None else ', even with the reserve released'}:"
                        f" {at_broker}; {unstored} decided record(s) not stored, up to {min(drained, unstored)} of them "
                        "held for the release delay from frames acknowledged earlier (lost as at a crash)")

    def persist(self, box: Outbox, group: list[_StoreEntry], over_capacity: bool = False) -> list[Row] | None:
        """On the outbox thread: first the group's ledger events (durable; aggregates only if the
        budget filter admits them), then its records, rows used and mark states in one outbox
        transaction — so nothing is publishable before the ledger holds it. The ledger step is
        done once per entry: a retry (the outbox was full under ``stop-input``) only retries the
        store, with the admitted aggregates already turned into records. ``over_capacity`` is
        passed to :meth:`Outbox.store` (shutdown). Returns the stored rows (for the publisher; None
        when the overflow policy dropped records)."""
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
        assert a.rt.aggregates is not None
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
