"""The resampler's clock: an asyncio task that fires at every tick g_n = n·T of the wall-clock grid
(notes/sensor-ecosystem.md §2). The clock and the sleep are injected, so tests drive it with a fake
clock; the daemon passes a :class:`SteadyClock` and ``asyncio.sleep``.

When the loop wakes at time ``now`` the tick is the newest due one, floor(now/T)·T. Ticks it slept
through (a stalled loop or a suspended device) are not emitted after the fact — what the sensor read
then is not known — but the stream's step tracker sees the skipped slots and makes each a missing
step (redacted with probability 1), so the chain's distances stay the grid's; ``on_missed`` counts
them.

The daemon's clock is a :class:`SteadyClock`: the wall clock's time, advancing with the monotonic
clock, never going back, so a wall clock stepped back (NTP, an operator) does not stop the grid.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]
#: ``on_tick(grid_time, now)``.
OnTick = Callable[[float, float], Awaitable[None]]


#: A change of (wall clock − monotonic clock) larger than this between two readings is a step of
#: the wall clock (NTP slews both clocks alike; it steps only the wall clock).
STEP_TOLERANCE = 1.0


class SteadyClock:
    """Epoch seconds for the grid and the receive times of the sensors' messages (one time line):
    c(t) = max(wall(t), c(t′) + mono(t) − mono(t′)) for the previous reading t′. The grid's sleeps
    run on the event loop's monotonic clock, and c never goes back, so:

    - a wall clock stepped back by Δ: c goes on with the monotonic clock (from then on Δ ahead of
      the wall clock, until a restart) and the grid keeps one step per period (before: no step
      for Δ, with no counter and no log line);
    - stepped forward by Δ: c follows the wall clock; the Δ/T ticks in between are missed ticks,
      made missing steps (:func:`run_grid`), as after a suspended device.

    Each step (either way) is counted in ``steps`` and logged once, in one line."""

    def __init__(self, wall: Clock = time.time, mono: Clock = time.monotonic) -> None:
        self._wall, self._mono = wall, mono
        m, w = mono(), wall()
        self._last, self._last_mono, self._offset = w, m, w - m
        self.steps = 0

    def not_before(self, t: float) -> None:
        """Go on from ``t`` at least (the newest step a previous run stored): a restart after the
        wall clock stepped back continues the grid after it instead of taking no step until the
        wall clock passes it."""
        self._last = max(self._last, t)

    def __call__(self) -> float:
        m, w = self._mono(), self._wall()
        offset = w - m
        if abs(offset - self._offset) > STEP_TOLERANCE:
            self.steps += 1
            log.warning("the wall clock stepped %s by %.1f s; the resampled streams' grid goes on by the monotonic "
                        "clock (wall clock steps so far: %d)", "back" if offset < self._offset else "forward",
                        abs(offset - self._offset), self.steps)
        self._offset = offset
        now = max(w, self._last + (m - self._last_mono))
        self._last, self._last_mono = now, m
        return now


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
