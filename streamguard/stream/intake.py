"""The daemon's intake (DESIGN.md §6; stream/daemon.py): raw frames and commands of every kind of
source — a stream's raw and command topics (routed by stream/sessions.py), a mapped sensor's
messages and the steps of its resampler grid (issue 10), the privacy buttons' presses
(stream/vouch.py), stdin and in-process simulated devices — handed to the stream's runtime, and
what it decides queued for the store (stream/store.py). Nothing here logs a reading: frames are
counted, never printed."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import stat
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping

from ..frames.records import MAX_BATCH_BYTES, MAX_FRAME_BYTES, Rejection
from ..ingest.mapping import Press
from ..ingest.stream import IngestHub, StepInput
from . import privacy_mode
from .privatizer import Mark
from .redaction_runtime import RedactionRuntime
from .runtime import StreamRuntime
from .status import DaemonStats
from .store import Store
from .transport import Message
from .vouch import ButtonHearing

log = logging.getLogger(__name__)

FrameSource = Callable[[], AsyncIterator[tuple[str, bytes]]]


class Intake:
    """Hands each stream's input to its runtime and queues the decisions for ``store``.

    ``modes``: each stream's privacy mode, persisted beside the outbox (stream/privacy_mode.py);
    ``hearings``: each redaction stream's privacy button as the daemon hears it (stream/vouch.py)."""

    def __init__(self, runtimes: Mapping[str, StreamRuntime], stats: DaemonStats, store: Store, *,
                 ingest: IngestHub, hearings: Mapping[str, ButtonHearing], modes: privacy_mode.ModeFile) -> None:
        self.runtimes = runtimes
        self.stats = stats
        self.store = store
        self.ingest = ingest
        self.hearings = hearings
        self._modes = modes
        #: Per stream, the reason last logged for steps decided as private unvouched (one line per
        #: episode of not hearing its button, not one per step).
        self.unvouched_said: dict[str, str | None] = {}

    async def handle_frame(self, stream: str, data: StepInput | list[bytes], now: float | None = None) -> None:
        """Raw input of a stream (its raw topic, a stdin line, a mapped sensor's step): a frame, a
        batch of frames (a JSON list), several raw messages received together (a list of them:
        StreamRuntime.on_messages — decided together and queued as one store entry), or a step
        whose reading is known to be unknown."""
        rt = self.runtimes.get(stream)
        if rt is None:
            return
        now = time.time() if now is None else now
        if isinstance(data, Rejection):
            self.stats.frames += 1
            releases = rt.on_frame(data, now)[0]
        else:
            messages = data if isinstance(data, list) else [data]
            self.stats.frames += len(messages)
            releases = rt.on_messages(messages, now)
        await self.store.put(rt, releases)

    async def handle_command(self, stream: str, data: bytes) -> None:
        rt = self.runtimes.get(stream)
        if rt is None:
            return
        self.stats.commands += 1
        if isinstance(rt, RedactionRuntime) and (mode := privacy_mode.requested_bytes(data)) is not None:
            self._modes.set(stream, mode)  # persisted before it takes effect (stream/privacy_mode.py)
        rt.on_command(data)
        await self.store.put(rt, [])

    async def button_message(self, msg: Message) -> None:
        """A message on a privacy button's topic: each press is placed (stream/vouch.py) — at the
        step of its own time, or by when it was received (the next tick; for a periodic stream the
        newest step); one received while the button is not heard also marks every unheard step."""
        now = self.ingest.clock()
        for name, press in self.ingest.presses(msg.topic, msg.payload, retain=msg.retain, now=now):
            self.stats.commands += 1
            hearing = self.hearings.get(name)
            placed = False
            if hearing is not None:
                placed, marks = hearing.press(press)
                await self.unvouched(name, marks)
            if not placed and (command := self.ingest.streams[name].press_received(now)) is not None:
                await self.handle_command(name, command)

    async def command_message(self, name: str, data: bytes) -> None:
        """A command to a stream held for its privacy button: ``{"private": "now"}`` is a press
        without a time of its own (received while the button is not heard, it also marks every
        unheard step: stream/vouch.py); a command naming a seq marks that record, wherever it comes."""
        try:
            now_press = json.loads(data).get("private") == "now"
        except (ValueError, AttributeError, RecursionError):  # (the runtime rejects it, counted)
            now_press = False
        if now_press:
            await self.unvouched(name, self.hearings[name].press(Press())[1])
        await self.handle_command(name, data)

    async def ingest_step(self, stream: str, data: StepInput, now: float) -> None:
        """A resampled stream's step (the grid): taken, and, while its privacy button is not heard,
        held or marked (stream/vouch.py)."""
        hearing = self.hearings.get(stream)
        if hearing is None:
            await self.handle_frame(stream, data, now)
            return
        core = hearing.core
        first = core.next_phys
        await self.handle_frame(stream, data, now)
        await self.unvouched(stream, hearing.taken(range(first, core.next_phys), now))

    async def unvouched(self, stream: str, marks: list[Mark]) -> None:
        """Store the marks a :class:`ButtonHearing` made (their ledger events go with them), and say
        once which steps were decided as private for want of hearing the button."""
        if marks:
            self.say_unvouched(stream, marks)
            await self.store.put(self.runtimes[stream], [])

    def say_unvouched(self, stream: str, marks: list[Mark]) -> None:
        """One WARNING per stream and reason while its button is not heard (not one per step)."""
        unvouched = [m for m in marks if m.source == "unvouched"]
        if unvouched and self.unvouched_said.get(stream, "") != unvouched[-1].reason:
            self.unvouched_said[stream] = unvouched[-1].reason
            log.warning("stream %s: %d step(s) at positions %d–%d decided as private: %s", stream, len(unvouched),
                        min(m.phys for m in unvouched), max(m.last for m in unvouched), unvouched[-1].reason)

    async def ingest_message(self, msg: Message) -> None:
        """A message on a mapped sensor's topic: it updates the resamplers, or is a step of a
        stream stated periodic (a privacy button is read on the input session: button_message)."""
        now = self.ingest.clock()  # the resampler's clock: receive times and ticks on one time line
        for name, _kind, data in self.ingest.route(msg.topic, msg.payload, retain=msg.retain, now=now):
            await self.handle_frame(name, data, now)

    async def feed(self, source: FrameSource) -> None:
        """Handle a source's frames; while stores fail (a full disk) read no more (stdin's writer
        waits on the pipe). A mapped sensor's grid goes on instead: its steps come on a clock."""
        async for stream, data in source():
            await self.handle_frame(stream, data)
            await self.store.room()


#: Bytes of a standard-input line kept: a longer line is refused as oversize either way
#: (records.py), and the rest of it is read and dropped, so a line without end costs bounded memory.
STDIN_LINE_LIMIT = max(MAX_FRAME_BYTES, MAX_BATCH_BYTES) + 1
STDIN_CHUNK = 65536


async def stdin_frames(stream: str) -> AsyncIterator[tuple[str, bytes]]:
    """Raw JSON lines from standard input (a pipe or a file), as frames of ``stream``."""
    async for line in _lines(_stdin_chunks()):
        data = line.rstrip(b"\r")
        if data:
            yield stream, data


async def _stdin_chunks() -> AsyncIterator[bytes]:
    """Standard input's bytes as they come, until its end. A pipe, socket or terminal is read by the
    event loop itself: no thread sits blocked in ``read``, so a stop with the writer's end still
    open is not held up (issue 28: before, SIGTERM never completed). Anything else (a regular
    file, /dev/null) never waits for a writer and is read in a worker thread."""
    fd = sys.stdin.fileno()
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)):
        while chunk := await asyncio.to_thread(os.read, fd, STDIN_CHUNK):
            yield chunk
        return
    reader = asyncio.StreamReader(limit=STDIN_CHUNK)
    # (a duplicate: closing the transport leaves descriptor 0 itself alone)
    transport, _ = await asyncio.get_running_loop().connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), open(os.dup(fd), "rb", buffering=0))
    try:
        while chunk := await reader.read(STDIN_CHUNK):
            yield chunk
    finally:
        transport.close()
        with contextlib.suppress(OSError):  # (the loop made the shared file description non-blocking:
            os.set_blocking(fd, True)       # a terminal stays usable for the shell after us)


async def _lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The newline-separated lines of ``chunks`` (the last one may end without a newline), each cut
    to its first ``STDIN_LINE_LIMIT`` bytes."""
    part = bytearray()
    async for chunk in chunks:
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            part += chunk[start:min(end, start + STDIN_LINE_LIMIT - len(part))]
            yield bytes(part)
            part.clear()
            start = end + 1
        part += chunk[start:min(len(chunk), start + STDIN_LINE_LIMIT - len(part))]
    if part:
        yield bytes(part)
