"""The publisher: one task draining the outbox to the broker, in order, at least once (DESIGN.md §6).

Semantics:

- **Order.** Records are read from the outbox oldest first and published in that order within
  each stream (records of different streams may be interleaved differently when batching).
- **Window.** Up to ``PublishConfig.window`` QoS 1 messages are in flight at once. Records are
  acknowledged in the outbox (deleted) only after their PUBACK, and only as a prefix of the
  messages sent, so the records still stored are always, per stream, a suffix of what was put.
  Deletions are grouped: at most :data:`ACK_BATCH` records or :data:`ACK_DELAY` seconds after the
  first acknowledgement (a record acknowledged and not yet deleted when the publisher stops is
  sent again: at-least-once). :attr:`Publisher.idle` waits for them.
- **Failure.** On :class:`~.transport.Undelivered` (or a lost connection) the publisher drops
  everything in flight, backs off and reconnects (:func:`~.transport.reconnecting`), and resends
  from the first unacknowledged record. The resent payload bytes are the stored ones — a decision
  is never re-drawn. Delivery is at-least-once: consumers de-duplicate by ``(stream, seq)``.
- **Batching.** With ``batch_max > 1`` every message is a JSON list of up to ``batch_max``
  consecutive records of one stream (and one topic), so each stored payload must be a JSON text.
  A partial batch waits for more records until its oldest record has been stored for
  ``batch_latency_ms``; with ``batch_max == 1`` each message is one record's payload as stored.
- **Wake-up.** Call :meth:`Publisher.notify` after every put, so the publisher reads the new
  records; :attr:`Publisher.idle` is set while there is nothing left to publish. The writer hands
  over the rows it just stored (``notify(rows)``, issue 15): the publisher takes them instead of
  reading them back only when they continue exactly where its reading stopped (the next id), so
  what it sends is what :meth:`Outbox.peek` would have returned; otherwise it reads the outbox.
  The session waits on one future that ``notify``, the oldest message in flight and a timer
  resolve, and hands each message to a transport with ``start_publish`` at once (no task per
  round or per message; docs/implementation.md, "Latency at a low rate").
- **Shutdown.** :meth:`Publisher.drain` sends partial batches at once and waits, up to a
  deadline, until the outbox is empty; then cancel the task running :meth:`Publisher.run`.
  What is not acknowledged stays in the outbox for the next start.
"""

from __future__ import annotations

import asyncio
import sqlite3
import contextlib
import logging
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ..config import PublishConfig
from .outbox import AsyncOutbox, Outbox, Row
from .disk import is_disk_full
from .transport import Backoff, Transport, _settle, reconnecting

log = logging.getLogger(__name__)

#: Most records read from the outbox in one query.
_READ_CHUNK = 1000
#: Most stored rows held for the publisher (handed over by the writer); beyond, it reads the outbox.
_HANDOFF_LIMIT = 2 * _READ_CHUNK
#: Acknowledged records are deleted together (one outbox visit and transaction for all): once this
#: many are acknowledged, or this many seconds after the first of them (module docstring: Window).
ACK_BATCH = 512
ACK_DELAY = 0.02


@dataclass
class PublisherStats:
    """Counters since start. ``messages`` and ``records`` count PUBACKs (a resent record that had
    already reached the broker counts again); ``resends`` counts records sent again after a
    failure; ``reconnects`` counts connections after the first."""

    messages: int = 0
    records: int = 0
    resends: int = 0
    reconnects: int = 0
    #: ``records`` per stream.
    records_by_stream: Counter[str] = field(default_factory=Counter)


@dataclass
class _Flight:
    rows: list[Row]
    done: asyncio.Future[None]  # the broker's acknowledgement (fails with Undelivered)


@dataclass
class _Session:
    """What one connection's session holds: the rows read and not yet sent, the messages in
    flight (oldest first), the id read up to, and the ids sent in the session before (resends)."""

    transport: Transport
    batcher: _Batcher
    previous: set[int]
    inflight: deque[_Flight] = field(default_factory=deque)
    cursor: int = 0


class _Batcher:
    """Buffered rows, per stream in outbox order, cut into messages (see module docstring)."""

    def __init__(self, batch_max: int, latency: float) -> None:
        self._max = batch_max
        self._latency = latency
        self._streams: dict[str, deque[Row]] = {}
        self.size = 0

    def add(self, rows: list[Row]) -> None:
        for r in rows:
            self._streams.setdefault(r.stream, deque()).append(r)
        self.size += len(rows)

    def _head(self, q: deque[Row]) -> list[Row]:
        head: list[Row] = []
        for r in q:
            if len(head) == self._max or r.topic != q[0].topic:
                break
            head.append(r)
        return head

    def pop(self, now: float, flush: bool) -> list[Row] | None:
        """The ready batch whose first record is oldest: full, closed by a topic change, due
        (its oldest record waited ``latency``) or flushed. None if no batch is ready."""
        best: list[Row] | None = None
        for q in self._streams.values():
            head = self._head(q)
            ready = len(head) == self._max or len(head) < len(q) or flush or now >= head[0].created_at + self._latency
            if ready and (best is None or head[0].id < best[0].id):
                best = head
        if best is None:
            return None
        q = self._streams[best[0].stream]
        for _ in best:
            q.popleft()
        if not q:
            del self._streams[best[0].stream]
        self.size -= len(best)
        return best

    def next_due(self) -> float | None:
        """When the oldest buffered partial batch becomes due (epoch s), or None if none is buffered."""
        return min((q[0].created_at + self._latency for q in self._streams.values()), default=None)


class Publisher:
    """Drains ``outbox`` through ``transport`` (see the module docstring for semantics).

    ``backoff`` and ``sleep`` are passed to :func:`~.transport.reconnecting` (tests inject both).
    """

    def __init__(
        self,
        outbox: AsyncOutbox,
        transport: Transport,
        config: PublishConfig,
        *,
        backoff: Backoff = Backoff(),
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self._box = outbox
        self._transport = transport
        self._window = config.window
        self._batch_max = config.batch_max
        self._latency = config.batch_latency_ms / 1000.0
        self._lookahead = min(config.window * config.batch_max, _READ_CHUNK)
        self._backoff = backoff
        self._sleep = sleep
        self._wake = asyncio.Event()
        self._waiter: asyncio.Future[None] | None = None  # what the session waits on (_wait)
        self._live: _Session | None = None  # the current session's state
        self._flush = False
        self._sessions = 0
        self._sent: set[int] = set()  # ids sent in the current session and not yet acknowledged
        self._ack_later: list[int] = []  # acknowledged by the broker, not yet deleted (grouped; disk full)
        self._ack_since = 0.0  # (monotonic) when the oldest of them was acknowledged
        self.stats = PublisherStats()
        #: Set while there is nothing to publish: the outbox is empty and nothing is in flight.
        self.idle = asyncio.Event()
        #: Rows just stored, handed over by the writer (consecutive ids), not yet taken.
        self._handed: deque[Row] = deque()

    def notify(self, rows: list[Row] | None = None) -> None:
        """New records were put: read them. ``rows``: the rows just stored, in id order (from
        :meth:`Outbox.store`), taken without a read when they continue the publisher's reading;
        None when unknown (the outbox is read; anything handed over before is forgotten)."""
        if rows is None or len(self._handed) + len(rows) > _HANDOFF_LIMIT or (
                self._handed and rows and rows[0].id != self._handed[-1].id + 1):
            self._handed.clear()
        else:
            self._handed.extend(rows)
        self.idle.clear()
        s = self._live
        if s is not None and self._waiter is not None and self._handed and self._take(s):
            self._pump(s)  # the session waits for records (_wait): they go out now, not a few loop turns later
        else:
            self._wake.set()
        _settle(self._waiter)

    def _take_handed(self, cursor: int, want: int) -> list[Row] | None:
        """Up to ``want`` handed-over rows from id ``cursor + 1`` on, or None when they do not start
        there (the outbox is read instead)."""
        q = self._handed
        while q and q[0].id <= cursor:  # (already read from the outbox)
            q.popleft()
        if not q or q[0].id != cursor + 1:
            q.clear()
            return None
        return [q.popleft() for _ in range(min(want, len(q)))]

    async def run(self) -> None:
        """Publish until cancelled, reconnecting after failures."""
        await reconnecting(self._transport, self._session, backoff=self._backoff, sleep=self._sleep)

    async def drain(self, timeout: float) -> bool:
        """Send partial batches at once and wait up to ``timeout`` seconds for the outbox to
        empty. Returns whether it did; whatever was not acknowledged stays stored."""
        self._flush = True
        if not await self._box.run(len):
            return True
        self.notify()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):  # (not wait_for: on 3.11 it can swallow a cancel)
                await self.idle.wait()
        return self.idle.is_set()

    async def _session(self, transport: Transport) -> None:
        """Publish over one connection until it fails (raises TransportError) or is cancelled."""
        if self._sessions:
            self.stats.reconnects += 1
        self._sessions += 1
        previous, self._sent = self._sent, set()
        s = _Session(transport, _Batcher(self._batch_max, self._latency), previous)
        self._wake.set()  # read the outbox from its oldest record
        if self._ack_later:  # acknowledged before the last session ended: not to be read again
            await self._delete_acked()
        self._live = s
        try:
            while True:
                if self._wake.is_set() and s.batcher.size < self._lookahead:
                    self._wake.clear()
                    if not self._take(s):
                        await self._read(s)
                now = self._pump(s)
                if not s.inflight and not s.batcher.size and not self._wake.is_set() and not self._ack_later:
                    self.idle.set()
                await self._wait(s.inflight, s.batcher, now)
                await self._ack_completed(s.inflight)
        finally:
            self._live = None
            for f in s.inflight:
                f.done.cancel()
            await asyncio.gather(*(f.done for f in s.inflight), return_exceptions=True)

    def _take(self, s: _Session) -> bool:
        """Take the rows the writer handed over, if they continue the session's reading; False if
        there are none such (then the outbox is to be read: :meth:`_read`)."""
        want = self._lookahead - s.batcher.size
        rows = self._take_handed(s.cursor, want)
        self._add(s, rows or [], want)
        return bool(rows)

    async def _read(self, s: _Session) -> None:
        """Read the next rows from the outbox (after the session's cursor)."""
        want = self._lookahead - s.batcher.size
        self._add(s, await self._box.run(Outbox.peek, want, after=s.cursor), want)

    def _add(self, s: _Session, rows: list[Row], want: int) -> None:
        if rows:
            s.cursor = rows[-1].id
            s.batcher.add(rows)
        if len(rows) == want:
            self._wake.set()  # there may be more

    def _pump(self, s: _Session) -> float:
        """Send what is due while the window has room; returns the time it went by."""
        now = time.time()
        while len(s.inflight) < self._window and (batch := s.batcher.pop(now, self._flush)):
            s.inflight.append(self._send(s.transport, batch, s.previous))
        return now

    def _send(self, transport: Transport, rows: list[Row], previous: set[int]) -> _Flight:
        """Publish one message. A transport with ``start_publish`` (MqttTransport) hands it to the
        connection at once and gives the acknowledgement as a future; any other one's ``publish``
        runs in a task. A failure to send is the flight's failure, met in order (_ack_completed)."""
        if self._batch_max == 1:
            payload = rows[0].payload
        else:
            payload = b"[" + b",".join(r.payload for r in rows) + b"]"
        ids = [r.id for r in rows]
        if previous:
            self.stats.resends += sum(i in previous for i in ids)
        self._sent.update(ids)
        start = getattr(transport, "start_publish", None)
        if start is None:
            return _Flight(rows, asyncio.ensure_future(transport.publish(rows[0].topic, payload)))
        try:
            return _Flight(rows, start(rows[0].topic, payload))
        except Exception as exc:  # noqa: BLE001 - not lost: raised in order by _ack_completed
            failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            failed.set_exception(exc)
            return _Flight(rows, failed)

    async def _wait(self, inflight: deque[_Flight], batcher: _Batcher, now: float) -> None:
        """Wait for the oldest message in flight to complete or, while the window has room, for
        new records (:meth:`notify`) or for a partial batch to become due; or until the grouped
        deletion is due. One future, resolved by whichever comes first (no task per round)."""
        listen = len(inflight) < self._window and batcher.size < self._lookahead
        if listen and self._wake.is_set():
            return
        timeout = None
        if len(inflight) < self._window and (due := batcher.next_due()) is not None:
            timeout = max(0.0, due - now)
        if self._ack_later:  # (the grouped deletion is due then)
            ack_due = max(0.0, self._ack_since + ACK_DELAY - time.monotonic())
            timeout = ack_due if timeout is None else min(timeout, ack_due)
        if not inflight and not listen:  # only partial batches are buffered, with no room to read more
            await asyncio.sleep(timeout or 0.0)
            return
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        def wake(_: object = None) -> None:  # (also the oldest flight's done-callback)
            _settle(waiter)

        oldest = inflight[0].done if inflight else None
        if oldest is not None:
            oldest.add_done_callback(wake)
        timer = None if timeout is None else loop.call_later(timeout, wake)
        if listen:
            self._waiter = waiter
        try:
            await waiter
        finally:
            self._waiter = None
            if oldest is not None:
                oldest.remove_done_callback(wake)
            if timer is not None:
                timer.cancel()

    async def _ack_completed(self, inflight: deque[_Flight]) -> None:
        """Acknowledge the completed prefix of the messages in flight (deleted from the outbox
        together with those before, once due: module docstring, Window); re-raise the first
        failure (after acknowledging the messages before it)."""
        done: list[_Flight] = []
        try:
            while inflight and inflight[0].done.done():
                inflight[0].done.result()
                done.append(inflight.popleft())
        finally:
            if done:
                ids = [r.id for f in done for r in f.rows]
                self.stats.messages += len(done)
                self.stats.records += len(ids)
                for f in done:  # (a message holds records of one stream: _Batcher)
                    self.stats.records_by_stream[f.rows[0].stream] += len(f.rows)
                if not self._ack_later:
                    self._ack_since = time.monotonic()
                self._ack_later += ids
            if self._ack_later and (len(self._ack_later) >= ACK_BATCH
                                    or time.monotonic() >= self._ack_since + ACK_DELAY):
                await self._delete_acked()

    async def _delete_acked(self) -> None:
        """Delete the acknowledged records from the outbox. On a full disk they stay listed (and in
        ``_sent``, so this session does not send them again) until it has room (stream/disk.py)."""
        ids = self._ack_later
        try:
            await self._box.run(Outbox.ack, ids)
        except (sqlite3.OperationalError, OSError) as exc:
            if not is_disk_full(exc):
                raise
            self._ack_since = time.monotonic()  # (retried after the next delay)
        else:
            self._sent.difference_update(ids)
            self._ack_later = []

