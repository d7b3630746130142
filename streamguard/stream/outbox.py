"""The outbox: sanitized records waiting for publication, durable on the device (DESIGN.md §6).

One SQLite file in WAL mode with ``synchronous=FULL``: a committed transaction survives a crash,
a SIGKILL or a power cut, and an interrupted one leaves nothing behind. It holds **only sanitized
records** (raw readings never touch disk) and what the daemon needs to resume after a restart:

- ``outbox`` — records in FIFO order (``id``), each with its stream, ``seq``, topic and payload
  bytes. A record is stored *before* it is published and deleted (:meth:`Outbox.ack`) only after
  the broker acknowledged it, so a retry resends the same bytes — the decision is never re-drawn.
- ``positions`` — per stream, the high-water mark of reserved positions (:meth:`Outbox.reserve`,
  :meth:`Outbox.next_position`). It never goes backwards, and :meth:`Outbox.put` raises it past
  every stored ``seq``, so a restarted daemon never reuses a position.
- ``decisions`` — per stream, the redaction probabilities (row0, row1; ``rowk``: the whole row of
  a k-state stream, as JSON) used for the last ``keep`` decided positions (to restore the privatizer's history; one decision per position).
- ``marks`` — per stream and position, the JSON report of a private mark (upserted). A closed
  mark is history (the ledger holds its figures; a restart restores only open ones): those more
  than ``keep`` records (seq) or steps (a rejected frame's mark, keyed −(position + 1)) behind the
  newest are deleted, so a burst of private rejected frames leaves a bounded table (issue 28).
- ``restarts`` — per stream, the first position of each restart of the daemon (the boundary an
  unknown number of readings lies before), the last ``keep`` positions' worth: a mark's window that
  spans one is evaluated over what the restart may have been (stream/privatizer.py).
- ``announced`` — the Home Assistant discovery config topics published (stream/hass.py), so that
  the configs of removed streams can be deleted at the next start.

Capacity: at most ``max_records`` records. When a put would exceed it, ``overflow`` decides:
``"drop-oldest"`` deletes the oldest records in the same transaction and counts them in
:attr:`Outbox.dropped` (consumers see a gap in ``seq``); ``"stop-input"`` stores nothing and raises
:class:`Full`, and the caller stops accepting input until records are acknowledged (at
shutdown the daemon stores its last, already decided records past the limit: ``over_capacity``).

Threading: an :class:`Outbox` is one connection, used by one thread at a time, by one process at
a time. Asyncio code uses :class:`AsyncOutbox`, which runs the outbox's calls on one dedicated
worker thread, in order — or, while that thread is idle, one call on the loop's own thread
(:meth:`AsyncOutbox.run_here`: the daemon's commit of a lone record at a low rate). The daemon
holds an :class:`ExclusiveLock` on ``<outbox>.lock`` (and on ``<ledger>.lock``) from before it
opens them until it has closed them, so a second daemon on the same files refuses to start
(:class:`InUse`) instead of drawing a second decision for a seq.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import functools
import json
import logging
import os
import math
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager
from pathlib import Path
from types import TracebackType
from typing import Any, Concatenate, Literal, NamedTuple, ParamSpec, Self, TypeVar

from ..support.sqlite_tx import immediate
from ..config import OutboxConfig
from ..support.private_files import private_file

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

Overflow = Literal["drop-oldest", "stop-input"]
#: Seconds between two "outbox full: dropping" warnings (the count is in each, and in the status).
DROP_LOG_INTERVAL = 10.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    stream TEXT NOT NULL,
    seq INTEGER NOT NULL,
    topic TEXT NOT NULL,
    payload BLOB NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS positions (
    stream TEXT PRIMARY KEY,
    next_seq INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS steps (
    stream TEXT PRIMARY KEY,
    newest_ts REAL NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS decisions (
    stream TEXT NOT NULL,
    seq INTEGER NOT NULL,
    row0 REAL NOT NULL,
    row1 REAL NOT NULL,
    PRIMARY KEY (stream, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS marks (
    stream TEXT NOT NULL,
    seq INTEGER NOT NULL,
    report TEXT NOT NULL,
    PRIMARY KEY (stream, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS announced (
    topic TEXT PRIMARY KEY
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS restarts (
    stream TEXT NOT NULL,
    position INTEGER NOT NULL,
    PRIMARY KEY (stream, position)
) WITHOUT ROWID;
"""


class Full(Exception):
    """The outbox is full under the ``stop-input`` policy; nothing of the put was stored."""


class InUse(Exception):
    """Another streamguard holds this outbox or ledger (its lock), or took over this daemon's MQTT
    identity. The message is one line naming the file or the client id (and the holder's pid when
    known)."""


class ExclusiveLock:
    """An exclusive, non-blocking ``flock`` on ``<path>.lock`` (created 0600), holding the owner's
    PID. :meth:`acquire` raises :class:`InUse` at once if another process (or another open of the
    same lock in this process) holds it. The lock is released by :meth:`release` or when the
    process dies (the kernel drops it, so a crash leaves no stale lock; the file stays, with the
    last holder's PID, and is reused)."""

    def __init__(self, path: str | Path, what: str) -> None:
        self.path = Path(f"{path}.lock")
        self._target = path
        self._what = what
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            os.close(fd)
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            pid = f" (pid {holder})" if holder.isdigit() else ""
            raise InUse(f"{self._what} {self._target} is in use by another streamguard{pid}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # drops the flock

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


class Item(NamedTuple):
    """A sanitized record to store: ``payload`` is exactly what will be published. ``row`` is the
    redaction probabilities (Pr(⊥|0), Pr(⊥|1)) used for its decision, if any."""

    stream: str
    seq: int
    topic: str
    payload: bytes
    row: tuple[float, ...] | None = None


class Row(NamedTuple):
    """A stored record; ``id`` gives the FIFO order, ``created_at`` is when it was stored (epoch s)."""

    id: int
    stream: str
    seq: int
    topic: str
    payload: bytes
    created_at: float


class Outbox:
    """The SQLite outbox (see the module docstring for semantics)."""

    def __init__(self, path: str | Path, max_records: int, overflow: Overflow) -> None:
        if max_records < 1:
            raise ValueError("max_records must be ≥ 1")
        self._max = max_records
        self._overflow = overflow
        new = not os.path.exists(path) or os.path.getsize(path) == 0
        private_file(path)  # 0600, and so its -wal and -shm files too
        # (transactions are explicit; AsyncOutbox.run_here uses the connection from the loop's thread
        # while the worker is idle: one thread at a time, not always the one that opened it)
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        if new:  # (before WAL mode writes the header; an older file is converted: _incremental_vacuum)
            self._db.execute("PRAGMA auto_vacuum=INCREMENTAL")
        mode = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if mode != "wal":
            self._db.close()
            raise sqlite3.OperationalError(f"{path}: the outbox needs WAL mode, got {mode!r}")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        _incremental_vacuum(self._db)
        _add_k_state_rows(self._db)
        #: Stored records per stream (kept in step with every insert and delete: a status asks for
        #: them often, and a COUNT over a large outbox costs milliseconds per stream).
        self._by_stream: Counter[str] = Counter(dict(self._db.execute(
            "SELECT stream, COUNT(*) FROM outbox GROUP BY stream")))
        self._count: int = sum(self._by_stream.values())
        #: Records deleted by the drop-oldest policy since this outbox was opened.
        self.dropped = 0
        #: ``dropped`` per stream (since start).
        self.dropped_by_stream: Counter[str] = Counter()
        self._drop_logged = -math.inf  # when a drop was last logged (time.monotonic)

    @classmethod
    def from_config(cls, config: OutboxConfig) -> Outbox:
        return cls(config.path, config.max_records, config.overflow)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __len__(self) -> int:
        """The number of stored (unacknowledged) records."""
        return self._count

    def count(self, stream: str) -> int:
        """The number of stored (unacknowledged) records of one stream."""
        return self._by_stream[stream]

    def _transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        return immediate(self._db)

    def put(self, items: Sequence[Item], *, keep: int) -> None:
        """Store ``items`` durably, in one transaction with their decisions (the last ``keep`` per
        stream are kept) and with the position marks raised past their ``seq``.

        Applies the overflow policy: raises :class:`Full` (nothing stored) under ``stop-input``, or
        deletes the oldest records under ``drop-oldest``. Raises ``sqlite3.IntegrityError``
        (nothing stored) if a decision for one of the positions is already recorded.
        """
        self.store(items, keep=keep)

    def store(
        self,
        items: Sequence[Item],
        *,
        keep: int,
        decisions: Mapping[str, Sequence[tuple[float, ...]]] | None = None,
        marks: Mapping[str, Mapping[int, Mapping[str, Any]]] | None = None,
        over_capacity: bool = False,
        newest: Mapping[str, float] | None = None,
    ) -> list[Row] | None:
        """:meth:`put` plus, in the same transaction, ``decisions`` (per stream: index, row0, row1, …)
        and mark reports (per stream: seq → report) and the newest step's timestamp (per stream;
        a restart recognises frames redelivered from before it by it) — one disk sync for a whole
        group, and all or nothing after a crash. The overflow check comes first, so a :class:`Full` leaves nothing
        behind and the call can be retried.

        ``over_capacity`` (``stop-input`` only) stores the items even past ``max_records`` instead
        of raising :class:`Full`: the daemon's shutdown keeps what intake already decided (it is
        bounded by the store queue) rather than losing it. The next puts raise :class:`Full` until
        acknowledgements bring the outbox back under ``max_records``.

        Returns the stored rows as :meth:`peek` would read them (ids are consecutive: one writer,
        AUTOINCREMENT), for the publisher without a read back; None when the overflow policy
        deleted records in this transaction (the publisher reads the outbox instead)."""
        excess = self._count + len(items) - self._max
        if self._overflow == "stop-input":
            if items and excess > 0 and not over_capacity:
                raise Full(f"the outbox holds {self._count} of {self._max} records; {len(items)} more do not fit")
            excess = 0  # stop-input never deletes a stored record
        if not items and not decisions and not marks and not newest:
            return []
        upto: dict[str, int] = {}
        decided: dict[str, list[tuple[int, float, float]]] = {}
        for it in items:
            upto[it.stream] = max(upto.get(it.stream, 0), it.seq + 1)
            if it.row is not None:
                decided.setdefault(it.stream, []).append((it.seq, *it.row))
        for name, rows in (decisions or {}).items():
            decided.setdefault(name, []).extend(rows)
        now = time.time()
        with self._transaction() as db:
            for name, by_seq in (marks or {}).items():
                for seq, report in by_seq.items():
                    _upsert_mark(db, name, seq, report)
                if by_seq:  # closed marks far behind are history: keep the table bounded
                    db.execute(
                        "DELETE FROM marks WHERE stream = ? AND seq < ? AND json_extract(report, '$.open') = 0",
                        (name, max(by_seq) - keep),
                    )
                if steps := [-s - 1 for s in by_seq if s < 0]:  # rejected frames' marks, by position
                    db.execute("DELETE FROM marks WHERE stream = ? AND seq < 0 AND seq > ? "
                               "AND json_extract(report, '$.open') = 0", (name, keep - max(steps) - 1))
            db.executemany(
                "INSERT INTO outbox (stream, seq, topic, payload, created_at) VALUES (?, ?, ?, ?, ?)",
                [(it.stream, it.seq, it.topic, it.payload, now) for it in items],
            )
            last = db.execute("SELECT last_insert_rowid()").fetchone()[0] if items else 0
            for name, mark in upto.items():
                _raise_position(db, name, mark)
            for name, rows in decided.items():
                _insert_decisions(db, name, rows, keep)
            for name, ts in (newest or {}).items():
                db.execute("INSERT INTO steps (stream, newest_ts) VALUES (?, ?) ON CONFLICT(stream) "
                           "DO UPDATE SET newest_ts = max(newest_ts, excluded.newest_ts)", (name, ts))
            if items and excess > 0:
                lost = db.execute("SELECT stream, COUNT(*) FROM (SELECT stream FROM outbox ORDER BY id LIMIT ?) "
                                  "GROUP BY stream", (excess,)).fetchall()
                db.execute("DELETE FROM outbox WHERE id IN (SELECT id FROM outbox ORDER BY id LIMIT ?)", (excess,))
        _reclaim(self._db)
        self._count += len(items) - max(excess, 0) if items else 0
        self._by_stream.update(it.stream for it in items)
        if items and excess > 0:
            self._by_stream.subtract(dict(lost))
        first = last - len(items) + 1
        stored = [Row(first + i, it.stream, it.seq, it.topic, it.payload, now) for i, it in enumerate(items)]
        if items and excess > 0:
            self.dropped += excess
            self.dropped_by_stream.update(dict(lost))
            now = time.monotonic()
            if now - self._drop_logged >= DROP_LOG_INTERVAL:  # rate-limited: one line per interval
                self._drop_logged = now
                log.warning("outbox full: dropping the oldest records (%d since start)", self.dropped)
            return None
        return stored

    def peek(self, limit: int, after: int = 0) -> list[Row]:
        """Up to ``limit`` stored records with ``id > after``, oldest first (per-stream order is
        the put order)."""
        cur = self._db.execute(
            "SELECT id, stream, seq, topic, payload, created_at FROM outbox WHERE id > ? ORDER BY id LIMIT ?",
            (after, limit),
        )
        return [Row._make(r) for r in cur]

    def ack(self, ids: Iterable[int]) -> int:
        """Delete published records by id (unknown ids are ignored); returns how many were deleted.

        An acknowledgement need not survive a power cut (a lost one only means the record is sent
        again, and consumers de-duplicate by seq), so it commits without its own disk sync
        (``synchronous=NORMAL`` for this transaction; the next stored group syncs it)."""
        self._db.execute("PRAGMA synchronous=NORMAL")
        try:
            gone: Counter[str] = Counter()
            with self._transaction() as db:  # one range delete per run of consecutive ids
                for run in _runs(ids):  # (what it deletes, per stream: a range scan of the primary key)
                    gone.update(dict(db.execute(
                        "SELECT stream, COUNT(*) FROM outbox WHERE id BETWEEN ? AND ? GROUP BY stream", run)))
                    db.execute("DELETE FROM outbox WHERE id BETWEEN ? AND ?", run)
        finally:
            self._db.execute("PRAGMA synchronous=FULL")
        deleted = sum(gone.values())
        self._count -= deleted
        self._by_stream.subtract(gone)  # (one entry per stream ever stored: bounded by the config)
        return deleted

    def checkpoint(self) -> None:
        """Copy the WAL into the database and truncate it to zero bytes (frees its disk space)."""
        self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def reserve(self, stream: str, upto: int) -> None:
        """Raise the stream's position mark to ``upto`` (never lowers it), durably."""
        with self._transaction() as db:
            _raise_position(db, stream, upto)

    def next_position(self, stream: str) -> int:
        """The stream's position mark: the first position never reserved nor stored (0 if none)."""
        row = self._db.execute("SELECT next_seq FROM positions WHERE stream = ?", (stream,)).fetchone()
        return 0 if row is None else int(row[0])

    def record_decisions(self, stream: str, decisions: Sequence[tuple[float, ...]], *, keep: int) -> None:
        """Durably record (seq, row0, row1, …) decisions (k redaction probabilities), keeping the stream's last ``keep``. Raises
        ``sqlite3.IntegrityError`` (nothing recorded) if a position already has a decision."""
        with self._transaction() as db:
            _insert_decisions(db, stream, decisions, keep)

    def newest_step(self, stream: str) -> float | None:
        """The newest step's timestamp stored for ``stream`` (None: none yet)."""
        row = self._db.execute("SELECT newest_ts FROM steps WHERE stream = ?", (stream,)).fetchone()
        return None if row is None else float(row[0])

    def recent_decisions(self, stream: str) -> dict[int, tuple[float, ...]]:
        """The stream's recorded decisions, seq → (row0, row1, …), in seq order."""
        cur = self._db.execute("SELECT seq, row0, row1, rowk FROM decisions WHERE stream = ? ORDER BY seq",
                               (stream,))
        return {seq: (r0, r1) if rk is None else tuple(float(v) for v in json.loads(rk)) for seq, r0, r1, rk in cur}

    def upsert_mark(self, stream: str, seq: int, report: Mapping[str, Any]) -> None:
        """Durably store (or replace) the JSON report of the mark at ``seq``."""
        with self._transaction() as db:
            _upsert_mark(db, stream, seq, report)

    def marks(self, stream: str) -> dict[int, dict[str, Any]]:
        """The stream's mark reports, seq → report, in seq order."""
        cur = self._db.execute("SELECT seq, report FROM marks WHERE stream = ? ORDER BY seq", (stream,))
        return {seq: json.loads(text) for seq, text in cur}

    def add_restart(self, stream: str, position: int, *, keep: int) -> list[int]:
        """Durably record a restart of ``stream`` at ``position`` (its first new position), forget
        those more than ``keep`` positions before it, and return the stream's restarts in order."""
        with self._transaction() as db:
            db.execute("INSERT OR IGNORE INTO restarts (stream, position) VALUES (?, ?)", (stream, position))
            db.execute("DELETE FROM restarts WHERE stream = ? AND position < ?", (stream, position - keep))
        return [p for (p,) in self._db.execute(
            "SELECT position FROM restarts WHERE stream = ? ORDER BY position", (stream,))]

    def announced(self) -> set[str]:
        """The discovery config topics remembered as published (stream/hass.py)."""
        return {topic for (topic,) in self._db.execute("SELECT topic FROM announced")}

    def set_announced(self, topic: str, announced: bool) -> None:
        """Durably remember (or forget) that a discovery config was published on ``topic``."""
        with self._transaction() as db:
            if announced:
                db.execute("INSERT OR IGNORE INTO announced (topic) VALUES (?)", (topic,))
            else:
                db.execute("DELETE FROM announced WHERE topic = ?", (topic,))


#: Free pages (4 KiB) the outbox keeps before giving them back to the file system, and gives back at
#: most per stored group (``PRAGMA incremental_vacuum``: the cost is bounded per transaction).
RECLAIM_PAGES = 256


def _incremental_vacuum(db: sqlite3.Connection) -> None:
    """Turn an outbox created before incremental vacuum was enabled into one with it (one VACUUM,
    once: it rewrites the file). On a disk without room for the copy it stays as it is (retried at
    the next start): a full disk is handled where it is met (stream/disk.py)."""
    if db.execute("PRAGMA auto_vacuum").fetchone()[0] == 2:
        return
    db.execute("PRAGMA auto_vacuum=INCREMENTAL")
    try:
        db.execute("VACUUM")
    except sqlite3.OperationalError as exc:
        log.warning("outbox: could not enable incremental vacuum (%s); the file keeps its freed pages", exc)


def _reclaim(db: sqlite3.Connection) -> None:
    """Give freed pages back to the file system, after a store (its own small transaction, only
    once RECLAIM_PAGES pages are free): published records, pruned decisions and marks free pages,
    and without this the file never shrank after a burst (228 MB after 10⁵ malformed frames, issue
    28). (``executescript``: ``execute`` runs only the pragma's first step, one page.)"""
    try:  # (the store is committed: a failure here, a full disk say, must not look like the store's)
        if db.execute("PRAGMA freelist_count").fetchone()[0] >= RECLAIM_PAGES:
            db.executescript(f"PRAGMA incremental_vacuum({RECLAIM_PAGES});")
    except sqlite3.OperationalError as exc:
        log.debug("outbox: incremental vacuum failed: %s", exc)


def _runs(ids: Iterable[int]) -> list[tuple[int, int]]:
    """The distinct ``ids`` as maximal runs of consecutive integers, (first, last) each."""
    runs: list[tuple[int, int]] = []
    for i in sorted(set(ids)):
        if runs and i == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs


def _upsert_mark(db: sqlite3.Connection, stream: str, seq: int, report: Mapping[str, Any]) -> None:
    db.execute(
        "INSERT INTO marks (stream, seq, report) VALUES (?, ?, ?) "
        "ON CONFLICT (stream, seq) DO UPDATE SET report = excluded.report",
        (stream, seq, json.dumps(report, sort_keys=True, allow_nan=False)),
    )


def _raise_position(db: sqlite3.Connection, stream: str, upto: int) -> None:
    db.execute(
        "INSERT INTO positions (stream, next_seq) VALUES (?, ?) "
        "ON CONFLICT (stream) DO UPDATE SET next_seq = max(next_seq, excluded.next_seq)",
        (stream, upto),
    )


def _add_k_state_rows(db: sqlite3.Connection) -> None:
    """A ``decisions`` table from before k-state streams gets the ``rowk`` column: the whole row as
    JSON when a stream has more than two states (row0, row1 hold its first two entries)."""
    cols = {r[1] for r in db.execute("PRAGMA table_info(decisions)")}
    if "rowk" not in cols:
        db.execute("ALTER TABLE decisions ADD COLUMN rowk TEXT")


def _insert_decisions(db: sqlite3.Connection, stream: str, decisions: Sequence[tuple[float, ...]], keep: int) -> None:
    if keep < 1:
        raise ValueError("keep must be ≥ 1")
    db.executemany(
        "INSERT INTO decisions (stream, seq, row0, row1, rowk) VALUES (?, ?, ?, ?, ?)",
        [(stream, int(seq), row[0], row[1], json.dumps(list(row)) if len(row) > 2 else None)
         for seq, *row in decisions],
    )
    # keep the last ``keep`` positions (positions are recorded densely, so a range delete on the
    # newest one is enough — no index walk over the kept rows)
    newest = max(int(d[0]) for d in decisions) if decisions else None
    if newest is not None:
        db.execute("DELETE FROM decisions WHERE stream = ? AND seq <= ?", (stream, newest - keep))


class AsyncOutbox:
    """An :class:`Outbox` run on one dedicated worker thread, for asyncio code.

    Open it with ``await AsyncOutbox.open(Outbox, path, max_records, overflow)`` (or
    ``Outbox.from_config, config``) and call methods through :meth:`run`, e.g.
    ``await box.run(Outbox.peek, 100)``. Calls run one at a time, in call order. Cancelling a
    :meth:`run` does not stop a call already running in the worker (a put may still commit).
    :meth:`run_here` runs a call on the loop's thread instead, only while the worker is idle.
    """

    def __init__(self, executor: ThreadPoolExecutor, outbox: Outbox) -> None:
        self._executor = executor
        self._outbox = outbox
        #: Calls submitted to the worker that have not returned (a call cancelled while queued
        #: leaves at once: it never runs; a running one cannot be cancelled and stays until it returns).
        self._pending: set[Future[Any]] = set()

    @classmethod
    async def open(cls, opener: Callable[P, Outbox], *args: P.args, **kwargs: P.kwargs) -> AsyncOutbox:
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="outbox")
        try:
            outbox = await asyncio.get_running_loop().run_in_executor(
                executor, functools.partial(opener, *args, **kwargs))
        except BaseException:
            executor.shutdown(wait=False)
            raise
        return cls(executor, outbox)

    async def run(self, fn: Callable[Concatenate[Outbox, P], T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(outbox, *args, **kwargs)`` on the outbox's thread."""
        fut = self._executor.submit(functools.partial(fn, self._outbox, *args, **kwargs))
        self._pending.add(fut)
        fut.add_done_callback(self._pending.discard)  # (on the worker, or here if done already)
        return await asyncio.wrap_future(fut)

    @property
    def idle(self) -> bool:
        """No call is queued or running on the outbox's thread. (Every call is tracked until it
        returns: the last one submitted is not enough — cancelling a queued call through its
        asyncio wrapper makes it done at once while an older one still runs.)"""
        return not self._pending

    def run_here(self, fn: Callable[Concatenate[Outbox, P], T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(outbox, *args, **kwargs)`` on the calling thread (the event loop's), blocking it for
        as long as the call takes, without the two thread switches of :meth:`run`. Only while
        :attr:`idle` — the connection is still used by one thread at a time — else RuntimeError."""
        if not self.idle or self._outbox._db.in_transaction:
            raise RuntimeError("the outbox thread is busy: use run()")
        return fn(self._outbox, *args, **kwargs)

    async def aclose(self) -> None:
        await self.run(Outbox.close)
        self._executor.shutdown(wait=False)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
