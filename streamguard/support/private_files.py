"""State files that only the daemon's user may read (issue 13, "files and secrets").

The outbox holds sanitized records, redaction rows and mark states; the ledger holds the times of
private marks. Both are SQLite databases in WAL mode, and SQLite creates a database's ``-wal`` and
``-shm`` files with the database file's own permissions. So creating the database file 0600 before
SQLite opens it keeps all three private, whatever the process umask; an existing file readable by
group or others is tightened, and that is logged (it may have been read already).
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger(__name__)

PRIVATE = 0o600


def create_private(path: str | Path) -> int:
    """Create the file at ``path`` with mode 0600 and return a descriptor open for writing. It must
    not exist (``FileExistsError``; a symlink there is not followed), so nothing is ever written to
    it while another user could open it, whatever the umask."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE)
    os.fchmod(fd, PRIVATE)  # (a umask such as 0277 would leave the owner unable to read it)
    return fd


def write_private(path: str | Path, text: str | bytes | Sequence[bytes | memoryview], *, synced: bool = False) -> None:
    """Replace the file at ``path`` atomically with ``text`` (or bytes, or chunks of bytes written
    one after another), mode 0600: a temporary file beside it, created 0600 before anything is
    written (:func:`create_private`; the leftover of a write that failed is removed, never written
    through), then renamed over ``path`` — so an existing file readable by others is replaced, not
    written into. ``synced``: the file is on disk before the rename and the rename before this
    returns (file and directory fsync) — a crash leaves the old content or the new, never neither."""
    chunks = [text.encode()] if isinstance(text, str) else [text] if isinstance(text, bytes) else text
    p = Path(path)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        with os.fdopen(create_private(tmp), "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            if synced:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if synced:
        dfd = os.open(p.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def private_file(path: str | Path) -> None:
    """Make sure the file at ``path`` exists with mode 0600 (or stricter). ``:memory:`` is skipped."""
    p = str(path)
    if p == ":memory:" or p.startswith("file:"):
        return
    try:
        fd = create_private(p)
    except FileExistsError:
        mode = stat.S_IMODE(os.stat(p).st_mode)
        if mode & 0o077:
            os.chmod(p, mode & 0o700)
            for extra in (f"{p}-wal", f"{p}-shm"):
                if os.path.exists(extra):
                    os.chmod(extra, stat.S_IMODE(os.stat(extra).st_mode) & 0o700)
            log.warning("%s was readable by group or others (mode %o): now %o", p, mode, mode & 0o700)
        return
    os.close(fd)
