"""systemd's notify protocol, on the standard library (deploy/streamguard.service: ``Type=notify``).

The protocol (sd_notify(3), stable and documented by systemd): a datagram of newline-separated
``KEY=value`` lines to the AF_UNIX socket named by ``$NOTIFY_SOCKET``; a name starting with ``@`` is
in the abstract namespace (a leading NUL byte). The daemon sends ``READY=1`` once it runs,
``STATUS=…`` (one line, shown by ``systemctl status``), ``STOPPING=1`` when it begins to shut
down, and ``WATCHDOG=1`` every half of ``$WATCHDOG_USEC`` (``WatchdogSec=`` in the unit) *from the
event loop*: a loop that stalls stops the pings, and systemd kills and restarts the service.
While it designs its plans before ``READY=1`` (minutes on a first start with a model set, before
the plan cache holds them), it sends ``EXTEND_TIMEOUT_USEC`` (systemd ≥ 236) from a thread
(:meth:`Notifier.extending`), so ``TimeoutStartSec=`` bounds the time *between* signs of life
instead of the whole design; the extensions stop after :data:`MAX_START_EXTENSION` in all.
Without ``$NOTIFY_SOCKET`` (not under systemd) everything here does nothing. The Python packages
for this (sdnotify, systemd-python) are stale or need libsystemd (notes/ecosystem.md §0).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator

log = logging.getLogger(__name__)

#: While the start is extended, a message every EXTEND_EVERY seconds asks for EXTEND_BY more: three
#: messages can be lost (or the thread starved of the GIL by a long compiled call) before it expires.
EXTEND_EVERY = 15.0
EXTEND_BY = 60.0
#: The start is extended for at most this long in all (then TimeoutStartSec= runs out as usual):
#: a design that takes longer than an hour is a fault to show, not to wait for.
MAX_START_EXTENSION = 3600.0


class Notifier:
    """Sends notify messages to ``$NOTIFY_SOCKET`` (read once, at construction)."""

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        path = env.get("NOTIFY_SOCKET", "")
        self._address = ("\0" + path[1:]) if path.startswith("@") else path
        self.watchdog_interval = _watchdog_interval(env)

    @property
    def enabled(self) -> bool:
        return bool(self._address)

    def notify(self, **fields: str) -> bool:
        """Send one message (``notify(READY="1", STATUS="running")``); True if it was sent. A
        failure is logged at debug level: systemd not listening must never stop the daemon."""
        if not self._address:
            return False
        text = "\n".join(f"{k}={v.replace(chr(10), ' ')}" for k, v in fields.items())
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.sendto(text.encode(), self._address)
        except OSError as exc:
            log.debug("sd_notify to %s failed: %s", self._address, exc)
            return False
        return True

    @contextlib.contextmanager
    def extending(self, status: str, *, every: float = EXTEND_EVERY, by: float = EXTEND_BY,
                  limit: float = MAX_START_EXTENSION) -> Iterator[None]:
        """Extend the start-up timeout while the body runs (blocking work before ``READY=1``):
        ``EXTEND_TIMEOUT_USEC=by`` with ``STATUS=status`` at once and every ``every`` seconds from
        a daemon thread, until the body ends or ``limit`` seconds have passed. Inert without
        ``$NOTIFY_SOCKET``."""
        if not self.enabled:
            yield
            return
        done = threading.Event()
        usec = str(int(by * 1e6))

        def pinger() -> None:
            end = time.monotonic() + limit
            while time.monotonic() < end:
                self.notify(EXTEND_TIMEOUT_USEC=usec, STATUS=status)
                if done.wait(every):
                    return
            log.warning("start-up still busy after %.0f s (%s): no more start-up extensions", limit, status)

        thread = threading.Thread(target=pinger, name="systemd-extend", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()

    async def watchdog(self) -> None:
        """Ping ``WATCHDOG=1`` every half of ``$WATCHDOG_USEC`` until cancelled (returns at once
        when no watchdog is configured). It runs on the event loop: when the loop stalls, the pings
        stop."""
        if self.watchdog_interval is None or not self.enabled:
            return
        while True:
            self.notify(WATCHDOG="1")
            await asyncio.sleep(self.watchdog_interval)


def _watchdog_interval(env: os._Environ[str] | dict[str, str]) -> float | None:
    """Half of ``$WATCHDOG_USEC`` in seconds, if it is set for this process (``$WATCHDOG_PID``,
    when present, names it)."""
    try:
        usec = int(env.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    pid = env.get("WATCHDOG_PID")
    if usec <= 0 or (pid is not None and pid != str(os.getpid())):
        return None
    return usec / 2e6
