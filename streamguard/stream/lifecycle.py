"""The daemon's life after start-up (DESIGN.md §6; stream/daemon.py): the ticker, READY=1, running
until a stop, the end of input or a failure, and the shutdown in order — stop intake, decide what
is pending, store it (into the shutdown reserve on a full disk), drain the outbox, publish
``offline``, all within ``SHUTDOWN_TIMEOUT`` — and the frozen heap of a process that is one
daemon."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any

from ..config import Settings
from ..ingest.stream import IngestHub
from .intake import Intake
from .outbox import AsyncOutbox, InUse
from .publisher import Publisher
from .runtime import StreamRuntime
from .sessions import Sessions
from .store import Store
from .systemd import Notifier
from .tasks import TASK_STOP_TIMEOUT, stop_tasks
from .transport import ConnectRefused
from .vouch import ButtonHearing

log = logging.getLogger(__name__)

TICK_INTERVAL = 0.2
#: Everything after intake stopped (store, drain, ``offline``) ends within this many seconds; with
#: the two TASK_STOP_TIMEOUT waits outside it (writer, publisher: normally instant) a shutdown takes
#: at most 18 s, less than the systemd unit's TimeoutStopSec (deploy/streamguard.service, 20 s).
SHUTDOWN_TIMEOUT = 14.0
#: Of it, kept for publishing ``offline`` after the drain.
OFFLINE_RESERVE = 3.0


class Lifecycle:
    """The ticker, READY=1 and the run until a stop with its shutdown (see module docstring)."""

    def __init__(self, settings: Settings, runtimes: Mapping[str, StreamRuntime], *, intake: Intake, store: Store,
                 sessions: Sessions, publisher: Publisher, box: AsyncOutbox, ingest: IngestHub,
                 hearings: Mapping[str, ButtonHearing], systemd: Notifier) -> None:
        self.settings = settings
        self.runtimes = runtimes
        self.intake = intake
        self.store = store
        self.sessions = sessions
        self.publisher = publisher
        self.box = box
        self.ingest = ingest
        self.hearings = hearings
        self.systemd = systemd

    async def ticker(self) -> None:
        """Every TICK_INTERVAL: decide the records held past ``max_hold`` and end the hold of a button
        that ran out while it is not heard (its unheard steps decided private: stream/vouch.py)."""
        while True:
            await asyncio.sleep(TICK_INTERVAL)
            now = time.time()
            for name, hearing in self.hearings.items():
                await self.intake.unvouched(name, hearing.expire(self.ingest.clock()))
            for rt in self.runtimes.values():  # (a tick may decide steps without a release: skip_run)
                await self.store.put(rt, rt.tick(now))

    async def say_ready(self) -> None:
        """READY=1 (systemd) once the daemon takes input: ``online`` published — so the input
        connection's subscriptions and the sensors' are confirmed — and the buttons' connection
        subscribed. A producer that starts on READY loses no frame (issue 28: READY came before the
        input session subscribed, and 18 of 20 frames published in the 0.1 s after it were lost)."""
        sessions = self.sessions
        if sessions.buttons is None:
            sessions.buttons_subscribed.set()
        await sessions.online.wait()
        await sessions.buttons_subscribed.wait()
        self.systemd.notify(READY="1", STATUS=f"running {len(self.runtimes)} stream(s): " + ", ".join(self.runtimes))

    async def serve(self, stop: asyncio.Event, stopping: asyncio.Task[Any], writer: asyncio.Task[None],
                    publisher: asyncio.Task[None], workers: list[asyncio.Task[Any]],
                    sources: list[asyncio.Task[Any]]) -> None:
        """Run until ``stop``, the end of every input or a failure, then shut down in order."""
        essential = [writer, publisher, *(w for w in workers if w not in sources)]
        await until_done(self.settings, stopping, essential, sources)
        failure = next((w.exception() for w in (writer, publisher, *workers) if w.done() and not w.cancelled()
                        and w.exception() is not None), None)
        if failure is not None:
            if not isinstance(failure, InUse | ConnectRefused):  # (the caller reports those, in one line)
                log.error("stopping: a task failed: %s", failure)
        elif not stop.is_set():
            log.info("stopping: the input ended")
        self.systemd.notify(STOPPING="1", STATUS="stopping: storing and publishing what is decided")
        deadline = asyncio.get_running_loop().time() + SHUTDOWN_TIMEOUT
        # 1. stop intake  2. decide what is pending  3. store it  4. drain  5. offline  6. disconnect
        await stop_tasks([*workers, stopping], TASK_STOP_TIMEOUT)
        store = self.store
        store.closing = True
        for name, hearing in self.hearings.items():
            self.intake.say_unvouched(name, hearing.close())  # (stored with the drained records)
        drained = 0  # records held for the release delay (their frames are acknowledged)
        for rt in self.runtimes.values():
            releases = rt.drain()
            drained += len(releases)
            store.put_nowait(rt, releases)
        stored_all = False  # (a writer that failed stores nothing more: its failure is raised below)
        if not writer.done():
            try:
                async with asyncio.timeout_at(deadline - OFFLINE_RESERVE):
                    await store.flush()
                stored_all = True
            except TimeoutError:
                if not store.disk_failing:
                    log.error("shutdown: %d decided records could not be stored in time", store.unstored())
        full = store.full_at_stop(drained, stored_all, self.sessions.unacknowledged)  # (exit 74: cli/daemon.py)
        if full is not None:
            log.error("shutdown: %s", full)
        await stop_tasks([writer], TASK_STOP_TIMEOUT)
        # the other daemon owns the identity: leave it alone; or the broker refuses us: no use trying
        # (or the identity check has not passed: its retained statuses may be another outbox's)
        taken_over = isinstance(failure, InUse | ConnectRefused)
        # (the publisher starts once the identity check passes, also while this drain waits)
        if not taken_over and not await self.publisher.drain(_left(deadline) - OFFLINE_RESERVE):
            log.warning("shutdown: %d sanitized records stay in the outbox for the next start",
                        await self.box.run(len))
        await stop_tasks([publisher], TASK_STOP_TIMEOUT)
        if failure is None and publisher.done() and not publisher.cancelled() \
                and isinstance(publisher.exception(), InUse):
            failure = publisher.exception()  # (the identity check refused during the stop)
            taken_over = True
        # (nothing under an identity whose check has not passed: its statuses may be another outbox's)
        if not taken_over and self.sessions.identity_checked:
            try:
                async with asyncio.timeout_at(deadline):
                    await self.sessions.say_offline()
            except TimeoutError:
                log.warning("could not publish the offline status in time")
        if failure is not None:
            raise failure
        if full is not None:
            raise full


async def until_done(settings: Settings, stopping: asyncio.Task[Any], essential: list[asyncio.Task[Any]],
                     sources: list[asyncio.Task[Any]]) -> None:
    """Wait until a stop is asked, an essential task ends, or a source fails. A source that
    simply ends (stdin closed) does not stop the other streams: the daemon stops for the end
    of input only when every source ended and no stream of ``settings`` reads from MQTT."""
    open_sources = set(sources)
    mqtt_fed = any(c.source == "mqtt" for c in settings.streams)
    while True:
        done, _ = await asyncio.wait([stopping, *essential, *open_sources], return_when=asyncio.FIRST_COMPLETED)
        ended = {t for t in done if t in open_sources and not t.cancelled() and t.exception() is None}
        if done - ended:
            return
        open_sources -= ended
        if not open_sources and not mqtt_fed:
            return
        log.info("an input ended (standard input closed); the other streams go on")


def _left(deadline: float) -> float:
    return max(0.0, deadline - asyncio.get_running_loop().time())


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Serve with the objects of start-up (modules, numba's and the plans' structures: about 100 k)
    moved out of the garbage collector's sight (gc.freeze), then give them back. Without it every
    full collection walked them all: 50–77 ms with the event loop stopped, several times a
    minute under load (bench_stream, 100-frame batches: 6 in 11 s). What is created while serving
    is collected as before; start-up's garbage is collected first, so none is kept. Process-wide:
    only for a process that is one daemon (Daemon's ``freeze_heap``; ``streamguard run``)."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
