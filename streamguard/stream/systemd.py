"""systemd's notify protocol, on the standard library (deploy/streamguard.service: ``Type=notify``).

The protocol (sd_notify(3), stable and documented by systemd): a datagram of newline-separated
``KEY=value`` lines to the AF_UNIX socket named by ``$NOTIFY_SOCKET``; a name starting with ``@`` is
in the abstract namespace (a leading NUL byte). The daemon sends ``READY=1`` once it runs,
``STATUS=…`` (one line, shown by ``systemctl status``), ``STOPPING=1`` when it begins to shut
down, and ``WATCHDOG=1`` every half of ``$WATCHDOG_USEC`` (``WatchdogSec=`` in the unit) *from the
event loop*: a loop that stalls stops the pings, and systemd kills and restarts the service.
Without ``$NOTIFY_SOCKET`` (not under systemd) everything here does nothing. The Python packages
for this (sdnotify, systemd-python) are stale or need libsystemd (notes/ecosystem.md §0).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket

log = logging.getLogger(__name__)


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
