"""Task helpers of the daemon (stream/daemon.py): running a session's message loop with a task
beside it, starting work once the identity check passed, and stopping tasks within a bounded time
(a shutdown never hangs on a task that swallows its cancel)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

log = logging.getLogger(__name__)

#: Seconds to wait for the intake tasks to end once cancelled (each is re-cancelled meanwhile).
TASK_STOP_TIMEOUT = 2.0


async def consume_beside(consume: Coroutine[Any, Any, None], side: Coroutine[Any, Any, None], name: str) -> None:
    """Run a session's message loop (``consume``) and a task beside it (``side``: subscribing,
    confirming) until the loop ends; a failure of either ends both (the session is then lost and
    ``reconnecting()`` retries), and neither outlives the call."""
    consuming = asyncio.create_task(consume, name=f"{name}-consume")
    siding = asyncio.create_task(side, name=f"{name}-side")
    try:
        await asyncio.wait([consuming, siding], return_when=asyncio.FIRST_EXCEPTION)
        if siding.done():
            siding.result()
        await consuming
    finally:
        for task in (siding, consuming):
            task.cancel()
        await asyncio.gather(siding, consuming, return_exceptions=True)


async def after(checked: asyncio.Task[None], work: Callable[[], Awaitable[Any]]) -> Any:
    """Run ``work()`` once ``checked`` has passed (its exception, e.g. InUse, is raised instead)."""
    await asyncio.shield(checked)
    return await work()


async def stop_tasks(tasks: list[asyncio.Task[Any]], timeout: float) -> None:
    """Cancel ``tasks`` and wait for them to end, at most ``timeout`` seconds, cancelling again
    every 0.5 s a task that is still running (a cancel can be swallowed, e.g. by a library's
    ``wait_for`` on Python 3.11); one that still runs is logged and left behind, so a shutdown
    never hangs on it. Their exceptions are retrieved (the caller read the one it reports)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    pending = {t for t in tasks if not t.done()}
    while pending and (left := deadline - loop.time()) > 0:
        for t in pending:
            t.cancel()
        _, pending = await asyncio.wait(pending, timeout=min(0.5, left))
    for t in tasks:
        if t.done() and not t.cancelled():
            t.exception()
    if pending:
        log.error("shutdown: task(s) %s did not stop when cancelled", ", ".join(sorted(t.get_name() for t in pending)))
