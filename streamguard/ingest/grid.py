"""The resampler's clock: an asyncio task that fires at every tick g_n = n·T of the wall-clock grid
(notes/sensor-ecosystem.md §2). The clock and the sleep are injected, so tests drive it with a fake
clock; the daemon passes ``time.time`` and ``asyncio.sleep``.

When the loop wakes at time ``now`` the tick is the newest due one, floor(now/T)·T. Ticks it slept
through (a stalled loop or a suspended device) are not emitted after the fact — what the sensor read
then is not known — but the stream's step tracker sees the skipped slots and makes each a missing
step (redacted with probability 1), so the chain's distances stay the grid's; ``on_missed`` counts
them.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]
#: ``on_tick(grid_time, now)``.
OnTick = Callable[[float, float], Awaitable[None]]


def tick_index(t: float, period: float) -> int:
    """The index of the newest grid tick at or before time ``t`` (a time within 1e-9 of a period
    below a tick counts as the tick: n·T rounded down must not read as tick n − 1)."""
    return math.floor(t / period + 1e-9)


async def run_grid(period: float, on_tick: OnTick, *, clock: Clock, sleep: Sleep,
                   on_missed: Callable[[int], None] = lambda n: None) -> None:
    """Call ``on_tick`` once per tick of the grid of ``period`` seconds, forever (cancel to stop).
    The first tick is the first one after the task starts."""
    n = tick_index(clock(), period) + 1
    while True:
        delay = n * period - clock()
        if delay > 0:
            await sleep(delay)
        now = clock()
        newest = tick_index(now, period)
        if newest < n:  # woke a little early
            continue
        if newest > n:
            on_missed(newest - n)
        await on_tick(newest * period, now)
        n = newest + 1
