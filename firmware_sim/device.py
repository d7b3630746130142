"""A simulated device: several streams interleaved in send order, generated or paced in real time."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from collections.abc import AsyncIterator, Iterator, Sequence

from .config import SimStream, check_name, unique_names
from .frames import Frame
from .generator import stream_frames

#: Default start of the simulated clock: 2026-01-01T00:00:00Z (fixed, so runs are reproducible).
DEFAULT_START = 1_767_225_600.0


def _limited(frames: Iterator[Frame], count: int | None, duration: float | None) -> Iterator[Frame]:
    if (count is None) == (duration is None):
        raise ValueError("give exactly one of count and duration")
    if count is not None:
        if not (isinstance(count, int) and count >= 0):
            raise ValueError("count must be a non-negative integer")
        return itertools.islice(frames, count)
    assert duration is not None
    if not (math.isfinite(duration) and duration >= 0):
        raise ValueError("duration must be a non-negative number of seconds")
    return itertools.takewhile(lambda f: f.meta.send_at < duration, frames)


class SimDevice:
    """A device ``device_id`` with ``streams``; its simulated clock starts at ``start`` (epoch seconds).

    Each call of :meth:`frames` or :meth:`run` replays the device from the start, so the same
    configuration always gives the same frames, byte for byte.
    """

    def __init__(self, device_id: str, streams: Sequence[SimStream], start: float = DEFAULT_START) -> None:
        check_name("device id", device_id)
        if not streams:
            raise ValueError("a device needs at least one stream")
        unique_names(streams)
        if not math.isfinite(start):
            raise ValueError("start must be a finite time")
        self.device_id = device_id
        self.streams = tuple(streams)
        self.start = float(start)

    def frames(self, count: int | None = None, duration: float | None = None) -> Iterator[Frame]:
        """The first ``count`` frames, or those sent in the first ``duration`` seconds, without pausing.

        Streams are merged by send time; ties go to the stream listed first, and a stream's own
        frames keep their order. Yields ``(stream_name, payload_bytes, meta)`` tuples.
        """
        merged = heapq.merge(*(stream_frames(s, self.start) for s in self.streams), key=lambda f: f.meta.send_at)
        return _limited(merged, count, duration)

    async def run(
        self, duration: float | None = None, *, count: int | None = None, realtime: bool = True
    ) -> AsyncIterator[Frame]:
        """The frames of :meth:`frames`, each yielded at its send time after the call (``realtime``)
        or as fast as the consumer takes them (still yielding to the event loop between frames).

        A slow consumer delays frames but never drops one; the loop ends after the last frame.
        """
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        for frame in self.frames(count, duration):
            delay = t0 + frame.meta.send_at - loop.time() if realtime else 0.0
            await asyncio.sleep(max(0.0, delay))
            yield frame
