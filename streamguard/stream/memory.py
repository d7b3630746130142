"""Give the C heap's free pages back to the system once a minute (issue 28: memory that does not
grow with uptime).

What grows, and why: at 180 frames/s the daemon's Python objects are bounded (tracemalloc flat,
tests/test_uptime_memory.py) and so is glibc's in-use heap (``mallinfo2().uordblks``), but the
free space inside the main arena (``fordblks``; the event loop's thread: MQTT payloads, records,
JSON) keeps growing, freed blocks left between live ones, and its pages stay resident. glibc
gives back by itself only the top of a heap (past ``M_TRIM_THRESHOLD``); ``malloc_trim(0)`` also
returns (``madvise``) every whole free page inside every arena. The other threads' arenas (the
outbox's SQLite thread among them) hold under 0.6 MB each and do not grow, so
capping the arenas (``MALLOC_ARENA_MAX=2``) does not help. Measured side by side (benchmarks/
bench_uptime.py's run, glibc's statistics sampled in the daemon; 5 min at 180 frames/s, a private
frame every 1,000; RssAnon slope over the last half): unchanged +0.16 MB/min,
``MALLOC_ARENA_MAX=2`` +0.20, a fixed 64 KB mmap threshold (``MALLOC_MMAP_THRESHOLD_``) +0.10,
``malloc_trim(0)`` once a minute +0.03 and −0.04; every frame private: +0.01 with and without,
``MALLOC_ARENA_MAX=2`` +0.10. A trim takes 0.2–0.4 ms on the event loop (once 9 ms, at load 10)
and returns 0.4–0.9 MB.

:func:`trimmed_heap` is entered by ``streamguard run`` around the daemon (cli/daemon.py): the
process is the daemon, and the heap is the process's. Only glibc has ``malloc_trim``; elsewhere
(musl, macOS) nothing runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
from collections.abc import AsyncIterator, Callable

#: Seconds between two trims: the free space grows by under 1 MB a minute at 180 frames/s.
TRIM_INTERVAL = 60.0

Trim = Callable[[int], int]


def glibc_malloc_trim() -> Trim | None:
    """glibc's ``malloc_trim(pad)`` via ctypes, or None where the C library is not glibc."""
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 — glibc's own symbol (musl and macOS lack it)
        trim = libc.malloc_trim
    except (OSError, TypeError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


async def _trim_every(trim: Trim, interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        trim(0)


@contextlib.asynccontextmanager
async def trimmed_heap(trim: Trim | None, interval: float = TRIM_INTERVAL) -> AsyncIterator[None]:
    """While inside, call ``trim(0)`` (:func:`glibc_malloc_trim`) every ``interval`` seconds on the
    running loop; nothing if ``trim`` is None (not glibc)."""
    if trim is None:
        yield
        return
    task = asyncio.create_task(_trim_every(trim, interval), name="heap-trim")
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
