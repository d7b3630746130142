"""A full disk under the outbox or the ledger (issue 13: failing like a service; issue 28:
back-pressure, not loss).

SQLite reports a full disk as ``sqlite3.OperationalError("database or disk is full")``
(SQLITE_FULL); a write outside SQLite as ``OSError`` with ``ENOSPC`` (or ``EDQUOT``, a quota). The
daemon's writer does not crash on it: it logs one line per episode (:class:`FullEpisodes`,
hysteresis), checkpoints and truncates both WAL files (their pages are copied into the
databases, the WAL files shrink to zero bytes) and retries the same group every
:data:`RETRY_INTERVAL` seconds until space is freed. A retried group is recorded in the ledger
once (daemon.Daemon._persist). Intake is held meanwhile without losing anything: a raw MQTT frame
is acknowledged only once every decision taken so far is stored (daemon.Daemon._durable), so
the broker keeps what could not be stored, as it does for slow handling, and a SIGTERM while the
disk is still full ends with :class:`DiskFull` (exit 74) naming how many frames stay
unacknowledged at the broker. At start, a full disk — or one without room for the next write
(:func:`probe_room`) — is one line and exit status 74 (EX_IOERR; cli/daemon.py).
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
