"""The daemon: sources → privatizer → outbox (SQLite) → publisher (MQTT), plus status.

:class:`Daemon` restores the streams' runtimes, opens the outbox and the ledger, creates one part
per task and starts their tasks; each task below names the module that holds its code, with a class
of its own: :class:`~.intake.Intake`, :class:`~.store.Store`, :class:`~.sessions.Sessions`,
:class:`~.status.Status`, :class:`~.lifecycle.Lifecycle` (stream/tasks.py: starting and stopping
tasks).

Tasks (DESIGN.md §6):

- **control** (stream/sessions.py; its payloads: stream/status.py): one MQTT connection (identifier
  ``<client id>``, clean session) that carries the retained ``<base>/<device>/status`` (``online``;
  its will is ``offline``) and each stream's retained ``<base>/<device>/<stream>/privacy``.
- **input** (stream/sessions.py → stream/intake.py): a connection (``<client id>-in``) with a
  persistent session, subscribed to each stream's command topic ``…/<stream>/cmd`` and, for
  ``source = "mqtt"`` streams (without ``ingest``), its raw topic ``…/<stream>/raw``: QoS 1 frames
  published while it is away (a broker or daemon restart) wait at the broker, and a frame is
  acknowledged only once handled (back-pressure; stream/transport.py).
- **buttons** (stream/sessions.py → stream/intake.py): with a mapped sensor's privacy button, a
  fourth connection (``<client id>-btn``, a persistent session of its own) subscribed to the
  buttons' topics and to the command topics of the streams held for them (instead of the input
  connection): presses published while it is away wait at the broker (QoS 0 too, with
  ``queue_qos0_messages``). While a button cannot be heard, the steps it might mark are held and,
  unless the broker kept the session, decided as private (stream/vouch.py).
- **publisher** (stream/publisher.py): a third connection (``<client id>-pub``) draining the outbox
  in order, QoS 1.
- **sources** (stream/intake.py): stdin (JSON lines) and in-process simulated devices feed frames
  like MQTT does.
- **ticker** (stream/lifecycle.py; the status loop: stream/status.py): decides records held past
  ``max_hold`` and refreshes the privacy status.
- **grid** (stream/intake.py): one per stream that reads a sensor of the MQTT ecosystem
  (``[streams.ingest]``, streamguard/ingest): the control connection also subscribes to the sensor's
  topics, whose messages update the stream's resampler, and this task takes one step per tick of the
  stream's ``sample_period`` grid (issue 10).
- **Home Assistant discovery** (``[homeassistant]``, stream/hass.py, sent by stream/sessions.py):
  once online on a connection, the control connection publishes the retained discovery configs (and
  deletes those of removed streams); it also subscribes to ``<prefix>/status`` and re-sends them
  when Home Assistant announces ``online``.

Every decision is stored (stream/store.py) in the outbox (with the redaction rows used and the open
marks) before it can be published — by one writer task that commits whatever has queued up as one
group; a retry resends the stored bytes, never a new draw. A decision is queued for the writer in
the same step that makes it, so the store queue (and the outbox, and the publisher) holds each
stream's records in seq order, and a decided record is never lost to a cancelled wait.

SIGTERM/SIGINT (or the ``stop`` event; stream/lifecycle.py) end intake, decide what is pending,
store everything decided (under ``stop-input`` past ``max_records`` if the outbox is full), drain
the outbox, publish ``offline`` and disconnect — all within ``SHUTDOWN_TIMEOUT`` (inside the systemd
unit's ``TimeoutStopSec``); what is not acknowledged by then stays in the outbox for the next start.
A stop that finds the disk full stores into the room of the shutdown reserve, allocated at start
(stream/disk.py, :class:`~.disk.Reserve`): the records held for the release delay, whose frames were
acknowledged long ago, are not lost; it then exits 74 naming the frames left unacknowledged.

One daemon per outbox: :meth:`Daemon.run` holds an exclusive lock on the outbox and the ledger
(:class:`~.outbox.ExclusiveLock`) and raises :class:`~.outbox.InUse` at once if another process
holds either. One daemon per identity: the retained status carries a random ``instance`` token; a
daemon that finds, after it first went online, another instance's status on its status topic
(another streamguard took over its client id or runs the same device) raises :class:`~.outbox.InUse`
and stops without reconnecting, draining or publishing ``offline`` (which would disturb the other
one) (stream/sessions.py). One identity, one sequence: before any connection but a short check
(:meth:`Sessions.check_identity <.sessions.Sessions.check_identity>`), a stream this outbox has no
position of must not find seqs already published under the identity's retained privacy status
(:class:`~.outbox.InUse` if it does). Nothing here logs a reading: frames are counted, never
printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
from collections.abc import Hashable
from typing import Any

from ..config import Settings
from ..ingest.stream import IngestHub
from ..ledger.events import DriftEvent
from ..ledger.store import Ledger
from ..redaction.plan_cache import PlanCache, beside
from ..sampling import bit_source
from . import privacy_mode
from .disk import probe_room
from .hass import Discovery
from .intake import FrameSource, Intake
from .lifecycle import Lifecycle, frozen_heap
from .metrics import textfile_loop
from .outbox import AsyncOutbox, ExclusiveLock, Outbox
from .privatizer import Mark
from .publisher import Publisher
from .redaction_runtime import RedactionRuntime
from .runtime import Resume, StreamRuntime
from .runtimes import make_runtime
from .sessions import Sessions, transport
from .status import DaemonStats, Refresh, Status
from .store import KEEP_DECISIONS, Store
from .systemd import Notifier
from .tasks import TASK_STOP_TIMEOUT, after, stop_tasks
from .transport import PROMPT, MqttTransport, reconnecting
from .vouch import ButtonHearing

log = logging.getLogger(__name__)

#: Aggregate noise of stream i is drawn from deterministic stream AGGREGATE_STREAMS + i (seeded mode).
AGGREGATE_STREAMS = 1000


class Daemon:
    """Runs the configured streams until ``stop`` is set (see module docstring).

    ``extra_sources`` are async iterables of (stream name, raw frame) — the demo's simulated
    devices, or stdin — fed through the same path as MQTT frames. ``ingest``: the mapped sensors
    and their resampler clock (default: from ``settings``, on the wall clock).

    The parts (``store``, ``status``, ``intake``, ``sessions``, ``lifecycle``) exist once the
    outbox and the ledger are open and the runtimes restored (:meth:`_assemble`).
    """

    store: Store
    status: Status
    intake: Intake
    sessions: Sessions
    lifecycle: Lifecycle
    publisher: Publisher
    #: The input connection (its sessions lost: the status counters).
    input: MqttTransport

    def __init__(self, settings: Settings, *, extra_sources: list[FrameSource] | None = None,
                 ingest: IngestHub | None = None, freeze_heap: bool = False) -> None:
        """``freeze_heap``: serve with start-up's objects frozen (:func:`~.lifecycle.frozen_heap`) —
        a change to the whole process's garbage collector, for a process that is this daemon
        (``streamguard run``), not for one that embeds it."""
        self.settings = settings
        self._freeze_heap = freeze_heap
        self.extra_sources = list(extra_sources or [])
        self.stats = DaemonStats()
        self.runtimes: dict[str, StreamRuntime] = {}
        #: Streams read from sensors of the MQTT ecosystem, and their resampler grids (issue 10).
        self.ingest = IngestHub(settings) if ingest is None else ingest
        self._ledger: Ledger | None = None
        #: Each redaction stream's privacy button as the daemon hears it (stream/vouch.py).
        self.hearings: dict[str, ButtonHearing] = {}
        #: Random token in this process's retained status (and will): tells its own status from
        #: another streamguard's on the same topic.
        self.instance = secrets.token_hex(8)
        #: systemd's notify protocol (READY, STATUS, STOPPING, WATCHDOG); inert outside systemd.
        self.systemd = Notifier()
        #: Each stream's privacy mode, persisted beside the outbox (stream/privacy_mode.py).
        self._modes = privacy_mode.ModeFile(privacy_mode.beside(settings.outbox.path))

    async def _restore(self, box: AsyncOutbox) -> None:
        """Build each stream's runtime, continuing positions and history after a restart."""
        s = self.settings
        plans = PlanCache(beside(s.outbox.path), share=True)  # streams of one model share a plan
        # One CSPRNG for every stream (and their aggregates): a keystream source buffers a block
        # (up to 1 MiB) of its own, which made ~1 MB per stream; a shared source hands each word
        # out once (sampling.py), so the streams' draws stay independent. Seeded (test) mode keeps
        # one deterministic stream per configured stream.
        shared = bit_source(None) if s.deterministic_seed is None else None
        stored = await box.run(lambda b: [self._stored_state(b, cfg.name) for cfg in s.streams])
        for i, cfg in enumerate(s.streams):
            decided, first_seq, marks, charged, newest, drift = stored[i]
            decided_upto = max(decided) + 1 if decided else 0
            # Positions continue past every one the ledger has charged (no window is charged
            # twice) and past an open mark whose own record was still pending at the crash: that
            # record is lost, but the records after the restart are its right neighbours (at an
            # unknown distance ≥ 1). Every skipped position was never published: on a redaction
            # stream it is recorded as fully redacted, so that open marks are restored like any
            # other (the rest of their right window redacted, their leakage evaluated over every
            # restart gap, the skipped records counted as withheld — not as released).
            lost = [m["state"]["phys"] + 1 for m in marks.values()
                    if m.get("open") and m["state"]["phys"] >= decided_upto]
            first_phys = max([decided_upto, charged, *lost])
            if cfg.mechanism == "redaction" and first_phys > decided_upto:
                k = cfg.state_map().k
                never = [(t, *(1.0,) * k) for t in range(decided_upto, first_phys)]
                await box.run(Outbox.record_decisions, cfg.name, never, keep=KEEP_DECISIONS)
                decided.update((t, tuple(row)) for t, *row in never)
            restarted = bool(decided)
            # every restart boundary a window may still span (the last is first_phys)
            restarts = (await box.run(Outbox.add_restart, cfg.name, first_phys, keep=KEEP_DECISIONS)
                        if restarted and cfg.mechanism == "redaction" else [])
            open_marks = [Mark.from_state(m["state"], cfg.state_map().k) for m in marks.values()
                          if m.get("open") and m["state"]["phys"] < first_phys]
            source = shared if shared is not None else bit_source(s.deterministic_seed, i)
            noise = shared if shared is not None else bit_source(s.deterministic_seed, AGGREGATE_STREAMS + i)
            self.runtimes[cfg.name] = make_runtime(
                s, cfg, source,
                resume=Resume(first_seq, first_phys, decided, tuple(open_marks), restarted, newest, drift,
                              tuple(restarts)),
                aggregate_source=noise, plan_cache=plans)
            if s.deterministic_seed is not None:
                log.warning("stream %s: DETERMINISTIC (seeded) randomness — for tests only, not private "
                            "against anyone who knows the seed", cfg.name)
            if restarted:
                log.info("stream %s: resuming at seq %d after a restart (%d open marks kept)",
                         cfg.name, first_seq, len(open_marks))
        for name, on in self._modes.load(list(self.runtimes)).items():  # (each stream's privacy mode)
            if isinstance(rt := self.runtimes[name], RedactionRuntime):
                rt.privacy_mode = on
        warmed: set[Hashable] = set()  # (one stream of each kind loads the kernels for all)
        for rt in self.runtimes.values():
            if (key := rt.warm_key) is not None and key not in warmed:
                warmed.add(key)
                rt.warm_up()

    def _stored_state(self, box: Outbox, stream: str) -> tuple[Any, ...]:
        """What a restart of ``stream`` continues from (outbox thread; every stream's is read in one
        visit, not six per stream): its recent decisions, next seq, marks, the ledger's charged
        end, the newest step's time and its latest drift event."""
        return (box.recent_decisions(stream), box.next_position(stream), box.marks(stream),
                self._charged_upto(stream), box.newest_step(stream), self._drift_of(stream))

    def _drift_of(self, stream: str) -> DriftEvent | None:
        """The stream's latest drift event in the ledger (outbox thread)."""
        assert self._ledger is not None
        return self._ledger.book(self.settings.device, stream).drift

    def _charged_upto(self, stream: str) -> int:
        """One past the last position an aggregate window or a channel reservation of ``stream``
        covers in the ledger (outbox thread). Redaction marks are left out: their spans reach to
        the end of the planned window, and the positions after a restart must stay inside an open
        mark's window (they are its right neighbours)."""
        assert self._ledger is not None
        book = self._ledger.book(self.settings.device, stream)
        spans = [book.span(f) for f in book.families() if f != "redaction"]
        return max((hi + 1 for _, hi in filter(None, spans)), default=0)

    def _assemble(self, box: AsyncOutbox) -> None:
        """Create the parts on the open outbox and ledger, for the restored runtimes: the
        publisher and the connections (none connects yet), the store, the status, the intake, the
        sessions and the lifecycle."""
        s = self.settings
        assert self._ledger is not None
        self.publisher = Publisher(box, transport(s, self.instance, "-pub", will=False), s.publish, backoff=PROMPT)
        control = transport(s, self.instance, "", will=True)
        # raw frames and commands published while this connection is away wait at the broker (QoS 1)
        self.input = transport(s, self.instance, "-in", will=False, persistent=True)
        # privacy buttons: a persistent session of their own
        buttons = (transport(s, self.instance, "-btn", will=False, persistent=True)
                   if self.ingest.button_filters() else None)
        refresh = Refresh()
        self.store = Store(s, box, self._ledger, self.stats, self.systemd, notify=self.publisher.notify,
                           report=refresh.ask)
        self.status = Status(s, self.runtimes, self.stats, box=box, ledger=self._ledger,
                             stored_counts=self.store.stored_counts, delivery=self.publisher.stats,
                             inputs=self.input, ingest=self.ingest, hearings=self.hearings, instance=self.instance,
                             refresh=refresh)
        self.intake = Intake(self.runtimes, self.stats, self.store, ingest=self.ingest, hearings=self.hearings,
                             modes=self._modes)
        self.sessions = Sessions(s, self.runtimes, intake=self.intake, store=self.store, status=self.status,
                                 discovery=Discovery(s, self.runtimes.values()), box=box, ingest=self.ingest,
                                 hearings=self.hearings, instance=self.instance, control=control, buttons=buttons)
        self.lifecycle = Lifecycle(s, self.runtimes, intake=self.intake, store=self.store, sessions=self.sessions,
                                   publisher=self.publisher, box=box, ingest=self.ingest, hearings=self.hearings,
                                   systemd=self.systemd)

    # -- run ----------------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set, then shut down in order (module docstring). Raises
        :class:`~.outbox.InUse` at once, before opening anything, if another process holds the
        outbox or the ledger, and after a shutdown if another streamguard took over the
        identity."""
        s = self.settings
        for risk in s.broker.risks():
            log.warning("%s", risk)
        with contextlib.ExitStack() as locks:
            locked: set[str] = set()
            for path, what in ((s.outbox.path, "outbox"), (s.ledger_path(), "ledger")):
                if os.path.abspath(path) not in locked:  # (one lock if both live in one file)
                    locked.add(os.path.abspath(path))
                    locks.enter_context(ExclusiveLock(path, what))
                    probe_room(path)  # (no room for the next write: DiskFull, one line, exit 74)
            async with await AsyncOutbox.open(Outbox.from_config, s.outbox) as box:
                # the ledger lives on the outbox's thread: a group's ledger events commit right
                # before its records are stored, in one place and order (write-ahead, DESIGN.md §4)
                self._ledger = await box.run(lambda _b: Ledger.open(s.ledger_path()))
                try:
                    await self._run(box, stop)
                finally:
                    self.ingest.close()
                    ledger, self._ledger = self._ledger, None
                    await box.run(lambda _b: ledger.close())

    async def _run(self, box: AsyncOutbox, stop: asyncio.Event) -> None:
        s = self.settings
        with self.systemd.extending("starting: building the streams' privacy plans"):
            await self._restore(box)
        # (after a wall clock stepped back, the stored steps lie ahead of it: the grid goes on after them)
        newest = await box.run(lambda b: [b.newest_step(name) for name in self.ingest.streams])
        self.ingest.not_before(max((t for t in newest if t is not None), default=None))
        for name, ing in self.ingest.streams.items():
            rt = self.runtimes.get(name)
            if ing.button is not None and ing.resampler is not None and isinstance(rt, RedactionRuntime):
                self.hearings[name] = ButtonHearing(rt.core, rt.steps, ing.resampler.period, now=self.ingest.clock())
        self._assemble(box)
        store, sessions, life = self.store, self.sessions, self.lifecycle
        # (no room: DiskFull, one line, exit 74)
        store.create_reserves(Store.held_bound(self.runtimes, self.hearings, bool(self.ingest.streams)),
                              len(self.runtimes))
        # every connection of the identity waits for the check (the sources, the ticker and the
        # writer go on: what they decide is stored, and published only if the check passes)
        checked = asyncio.create_task(sessions.check_identity(), name="identity")
        publisher = asyncio.create_task(after(checked, self.publisher.run), name="publisher")
        writer = asyncio.create_task(store.writer(), name="writer")
        control, inputs = sessions.control, self.input
        workers = [asyncio.create_task(after(checked, lambda: reconnecting(control, sessions.control_session,
                                                                           backoff=PROMPT)), name="control"),
                   asyncio.create_task(after(checked, lambda: reconnecting(inputs, sessions.input_session,
                                                                           backoff=PROMPT)), name="input"),
                   asyncio.create_task(life.ticker(), name="ticker")]
        if (buttons := sessions.buttons) is not None:
            workers.append(asyncio.create_task(after(checked, lambda: reconnecting(buttons, sessions.button_session,
                                                                                   backoff=PROMPT)), name="buttons"))
        sources = [asyncio.create_task(self.intake.feed(src), name="source") for src in self.extra_sources]
        workers += sources
        workers += [asyncio.create_task(grid, name="grid") for grid in self.ingest.grid_tasks(self.intake.ingest_step)]
        stopping = asyncio.create_task(stop.wait())
        watchdog = asyncio.create_task(self.systemd.watchdog(), name="watchdog")  # (until the very end)
        m = s.metrics
        if m.textfile is not None:  # (stopped with intake)
            workers.append(asyncio.create_task(
                textfile_loop(self.status, m.textfile, m.interval, private_counters=m.private_counters),
                name="metrics"))
        ready = asyncio.create_task(life.say_ready(), name="ready")  # (ends once said: not a worker)
        try:
            with frozen_heap() if self._freeze_heap else contextlib.nullcontext():
                await life.serve(stop, stopping, writer, publisher, workers, sources)
        finally:
            await stop_tasks([watchdog, ready, checked], TASK_STOP_TIMEOUT)
