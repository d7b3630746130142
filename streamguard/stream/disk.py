"""A full disk under the outbox or the ledger (issue 13: failing like a service; issue 28:
back-pressure, not loss).

SQLite reports a full disk as ``sqlite3.OperationalError("database or disk is full")``
(SQLITE_FULL); a write outside SQLite as ``OSError`` with ``ENOSPC`` (or ``EDQUOT``, a quota). The
daemon's writer does not crash on it: it logs one line per episode (:class:`FullEpisodes`,
hysteresis), checkpoints and truncates both WAL files (their pages are copied into the
databases, the WAL files shrink to zero bytes) and retries the same group every
:data:`RETRY_INTERVAL` seconds until space is freed. A retried group is recorded in the ledger
once (store.Store.persist). Intake is held meanwhile without losing anything: a raw MQTT frame
is acknowledged only once every decision taken so far is stored (store.Store.durable), so
the broker keeps what could not be stored, as it does for slow handling, and a SIGTERM while the
disk is still full ends with :class:`DiskFull` (exit 74) naming how many frames stay
unacknowledged at the broker. At start, a full disk — or one without room for the next write
(:func:`probe_room`) — is one line and exit status 74 (EX_IOERR; cli/daemon.py).

The records held in memory for the release delay are the exception to "the broker keeps it":
their frames were acknowledged when they arrived (raw readings never touch disk), and they are
decided only at the stop. A :class:`Reserve` — a preallocated file of :func:`reserve_bytes` beside
the outbox (and the ledger, on another filesystem) — is the room kept for them: a stop that finds
the disk full releases it and stores everything decided into the freed space, so no acknowledged
frame is lost (issue 28); the next start re-creates it, or exits 74 if there is still no room.
While running, a full disk is back-pressure only: the reserve is not touched.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import sqlite3
from dataclasses import dataclass

#: Seconds between attempts to store a group while the disk is full.
RETRY_INTERVAL = 1.0


def is_disk_full(exc: BaseException) -> bool:
    """Is ``exc`` a full disk (or quota)?"""
    if isinstance(exc, sqlite3.OperationalError):
        return "full" in str(exc)
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)

#: Seconds of storing without a failure before a full disk counts as having room again. A nearly
#: full disk, whose checkpoint frees a little room at a time, let a commit through every ~5 s and
#: flipped between "full" and "room again" (an ERROR/WARNING pair each time, issue 28); with this
#: hysteresis such a disk is one episode: one ERROR when it begins, one WARNING when it ends.
ROOM_HOLD = 60.0
#: Bytes that must be writable beside the outbox and beside the ledger at start (a probe file is
#: written, synced and removed; :func:`probe_room`), else one line and exit 74: a daemon that
#: started on a full disk could store nothing and held every frame (issue 28).
START_ROOM = 256 * 1024


#: The reserve's size (:func:`reserve_bytes`): per record, per stream, the factor over both and the
#: floor. Measured with :meth:`Outbox.store` on tmpfs, one entry per stream and 256 entries a
#: transaction as the shutdown writes them, 260-byte payloads with their decision rows: 0.53–0.67
#: KiB a record (database pages and WAL frames) at ≥ 10 records a stream, 5.6–13 KiB a stream (its
#: pages of the positions, decisions and marks tables; 1,000 streams), 40 KiB for one record. A
#: daemon's stop on a full disk, 20 streams holding 4,020 records with a mark every 25 (marks and
#: ledger rows included: a few per mark, never per step — a run is one mark): 0.28 KiB a record,
#: within the allowance before the factor (tests/test_disk_backpressure.py). The factor 2 covers
#: payloads longer than measured (k-state redaction rows) and the publisher's deletions at the stop.
RESERVE_PER_RECORD = 1024
RESERVE_PER_STREAM = 16 * 1024
RESERVE_FACTOR = 2
RESERVE_FLOOR = 1024 * 1024


def reserve_bytes(held: int, streams: int) -> int:
    """Bytes kept for the stop's store (:class:`Reserve`): max(RESERVE_FLOOR, RESERVE_FACTOR ·
    (RESERVE_PER_STREAM · ``streams`` + RESERVE_PER_RECORD · ``held``)), where ``held`` bounds the
    records decided but not stored when a stop meets a full disk (the daemon's
    ``Store.held_bound``: per redaction stream delay + start hold + 1 + its aggregate windows,
    plus the entries the store queue can hold while intake is held)."""
    return max(RESERVE_FLOOR, RESERVE_FACTOR * (RESERVE_PER_STREAM * streams + RESERVE_PER_RECORD * held))


class DiskFull(OSError):
    """The disk is full where the daemon must write: at start (:func:`probe_room`), or still at the
    end of a shutdown that could not store everything decided. ``streamguard run`` exits 74."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.ENOSPC, message)

    def __str__(self) -> str:
        return str(self.strerror)


def probe_room(path: str | os.PathLike[str], nbytes: int = START_ROOM) -> None:
    """Raise :class:`DiskFull` unless ``nbytes`` can be written (and synced) in the directory of
    ``path``: a probe file is written there and removed. The databases may exist already (then
    opening them writes nothing, and a full disk showed only at the first commit)."""
    where = os.path.dirname(os.path.abspath(path))
    name = os.path.join(where, f".streamguard-room-{os.getpid()}")
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            chunk = bytes(min(nbytes, 65536))
            left = nbytes
            while left > 0:
                left -= os.write(fd, chunk[:left])
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        raise DiskFull(f"no room for the next write in {where} ({nbytes // 1024} KiB could not be written: "
                       f"{exc.strerror})") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)


class Reserve:
    """A preallocated file (``os.posix_fallocate``: its blocks are taken, not a sparse hole) of
    ``size`` bytes, private (0600), in the directory of a database: room kept for storing what a
    stop decides when the disk is full (module docstring). It outlives a normal stop (the next start
    then allocates nothing new); :meth:`release` removes it. On a filesystem that compresses or
    deduplicates zeros (ZFS, btrfs with compression) allocated blocks may still not be room: the
    stop then ends as without a reserve, naming what was lost."""

    def __init__(self, path: str | os.PathLike[str], size: int) -> None:
        self.path, self.size = os.fspath(path), size
        self.released = False

    @classmethod
    def beside(cls, path: str | os.PathLike[str], size: int) -> Reserve:
        """The reserve of the database at ``path``: ``.<name>.reserve`` in its directory."""
        where, name = os.path.split(os.path.abspath(path))
        return cls(os.path.join(where, f".{name}.reserve"), size)

    def create(self) -> None:
        """Allocate the file (a larger one left by another configuration is cut to ``size``);
        raise :class:`DiskFull` — with nothing left behind — if the disk has no room for it."""
        try:
            self._allocate()
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            raise DiskFull(f"no room for the next write in {os.path.dirname(self.path)} (the shutdown reserve "
                           f"of {self.size // 1024} KiB could not be allocated: {exc.strerror})") from None
        self.released = False

    def _allocate(self) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.fchmod(fd, 0o600)
            if os.fstat(fd).st_size > self.size:
                os.ftruncate(fd, self.size)
            os.posix_fallocate(fd, 0, self.size)
            os.fsync(fd)
        finally:
            os.close(fd)

    def release(self) -> bool:
        """Remove the file, freeing its blocks. Returns whether this call freed them."""
        if self.released:
            return False
        self.released = True
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        return True


def reserves(paths: list[str | os.PathLike[str]], size: int) -> list[Reserve]:
    """One :class:`Reserve` of ``size`` beside the first of ``paths`` on each filesystem."""
    seen: set[int] = set()
    out: list[Reserve] = []
    for path in paths:
        dev = os.stat(os.path.dirname(os.path.abspath(path))).st_dev
        if dev not in seen:
            seen.add(dev)
            out.append(Reserve.beside(path, size))
    return out


@dataclass
class FullEpisodes:
    """The full/room state of the disk, with hysteresis (:data:`ROOM_HOLD`).

    ``failing``: the latest attempt to store failed (intake is held: the daemon acknowledges no
    input meanwhile). ``since``: when the current episode began (wall clock), None outside one.
    An episode begins at a failure outside one, and ends at a successful store :data:`ROOM_HOLD`
    seconds (monotonic) after its last failure — so ``failed`` and ``stored`` return True once
    per episode each: the caller logs one line at each."""

    since: float | None = None
    failing: bool = False
    _last_failure: float = -math.inf

    def failed(self, wall: float, mono: float) -> bool:
        """An attempt to store met a full disk. Returns whether an episode begins."""
        self.failing, self._last_failure = True, mono
        if self.since is not None:
            return False
        self.since = wall
        return True

    def stored(self, mono: float) -> bool:
        """An attempt to store succeeded. Returns whether the episode ends (room again)."""
        self.failing = False
        if self.since is None or mono - self._last_failure < ROOM_HOLD:
            return False
        self.since = None
        return True
