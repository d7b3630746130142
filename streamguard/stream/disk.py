"""A full disk under the outbox or the ledger (issue 13: failing like a service).

SQLite reports a full disk as ``sqlite3.OperationalError("database or disk is full")``
(SQLITE_FULL); a write outside SQLite as ``OSError`` with ``ENOSPC`` (or ``EDQUOT``, a quota). The
daemon's writer does not crash on it: it logs one line, checkpoints and truncates both WAL files
(their pages are copied into the databases, the WAL files shrink to zero bytes), holds intake
(the store queue fills, the input connection stops acknowledging, the broker keeps the raw frames)
and retries the same group every :data:`RETRY_INTERVAL` seconds until space is freed. A retried
group is recorded in the ledger once (daemon.Daemon._persist). At start, a full disk is one line
and exit status 74 (EX_IOERR; cli/daemon.py).
"""

from __future__ import annotations

import errno
import sqlite3

#: Seconds between attempts to store a group while the disk is full.
RETRY_INTERVAL = 1.0


def is_disk_full(exc: BaseException) -> bool:
    """Is ``exc`` a full disk (or quota)?"""
    if isinstance(exc, sqlite3.OperationalError):
        return "full" in str(exc)
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)
