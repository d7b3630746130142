"""One SQLite write transaction, as the outbox and the ledger open theirs."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator


@contextlib.contextmanager
def immediate(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` on ``db`` (opened with ``isolation_level=None``).

    On an error in the body or at ``COMMIT`` the transaction is rolled back — unless SQLite already
    did, as it does after some errors (a full disk, SQLITE_FULL, during a statement) — and the
    original error is raised: a ``ROLLBACK`` with no transaction active fails with "cannot rollback",
    and that error used to replace the disk-full one, which the daemon waits out
    (stream/disk.py) instead of stopping."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
        db.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):  # (the original error says more; a closed db too)
            if db.in_transaction:
                db.execute("ROLLBACK")
        raise
