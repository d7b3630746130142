"""The ingest streams at run time: MQTT messages in, the stream's steps out (issue 10).

:class:`IngestStream` owns one mapped stream's extractor, button, resampler (or, for a source the
operator states is periodic, none) and steps recorder. A step goes to the stream's runtime as the
daemon's own frame ``{"value", "ts", "private"}`` — ``ts`` the grid time — or, when its reading is
unknown, as a :class:`~streamguard.frames.records.Rejection` with the reason, so that it is handled
exactly like a rejected frame (redacted with probability 1, occupies its step, counted).

- **Resampled** (``sample_period``, not ``periodic``): messages only update the resampler; steps
  come from :meth:`IngestStream.tick`, driven by the grid task (:mod:`.grid`). A retained message
  is the broker's memory of the device's state: it is held when nothing else is (at start-up, after
  a reconnect) and skipped otherwise (it may be older than the reading held); without a heartbeat
  it is the only reading that ends a wait (resampler.py, ``no-reading``). A republished unchanged
  state changes nothing. Neither makes a step.
- **Periodic** (``periodic = true``): each mapped message is a step, at its timestamp (payload
  field, else receive time); a retained message is a previous run's step and is skipped;
  availability is not used (there is no tick to make unknown). The privacy button marks the newest
  step (``{"private": "now"}``).

The privacy button is read on the daemon's persistent buttons session, not with the sensor's
messages (a press sent while the daemon is away waits at the broker): :meth:`IngestHub.presses`
routes its messages, and the daemon places each press (stream/vouch.py).

:class:`IngestHub` holds the ingest streams of a daemon: the topic filters to subscribe to, the
routing of a message to every stream it concerns, the grid tasks and the status.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from ..config import Settings, StreamConfig
from ..frames.records import Rejection
from .grid import Clock, Sleep, SteadyClock, run_grid
from .mapping import Extractor, Mapping, Press, Reading, Unreadable, pressed
from .presets import resolve, resolve_button
from .recorder import StepRecorder
from .resampler import Resampler, Sample

log = logging.getLogger(__name__)

#: What a step is handed to the runtime as: frame bytes, or the rejection of an unknown reading.
StepInput = bytes | Rejection
NOW_COMMAND = b'{"private":"now"}'
#: Seconds a wait for the retained state may last before the log and the status say why.
RETAINED_WAIT = 10.0
WAITING = (f"no retained state was delivered on subscription within {RETAINED_WAIT:g} s of the wait's start (start-up, "
           "reconnect, device back online), and without a heartbeat nothing else ends it (a live message would date "
           "a change): every step stays unknown until one comes with the next subscription — publish the device's "
           "state retained (zigbee2mqtt: retain: true in its options) or declare heartbeat")

_UNKNOWN_MESSAGES = {
    "no-reading": "no reading received yet",
    "disconnected": "the daemon is not connected to the broker",
    "offline": "the device is offline",
    "stale": "the held reading is older than stale_after",
    "heartbeat": "the source was silent longer than its declared heartbeat: unknown for the rest of the run",
}


class IngestStream:
    """One mapped stream (module docstring)."""

    def __init__(self, cfg: StreamConfig) -> None:
        assert cfg.ingest is not None
        self.cfg = cfg
        self.name = cfg.name
        self.mapping: Mapping = resolve(cfg.ingest)
        self.extractor = Extractor(self.mapping, cfg.state_map())
        button = cfg.ingest.button
        self.button: Mapping | None = None if button is None else resolve_button(button)
        self.presses = frozenset(() if button is None else button.press)
        self.resampler: Resampler | None = None
        if cfg.resampled():
            assert cfg.sample_period is not None
            self.resampler = Resampler(cfg.sample_period, stale_after=cfg.stale_after, heartbeat=cfg.heartbeat)
        self.recorder = None if cfg.record is None else StepRecorder(
            cfg.record.steps_file, max_steps=cfg.record.max_steps, stream=cfg.name)
        self.messages = 0
        self.retained_skipped = 0
        self.missed_ticks = 0
        #: The wait (its start) already reported as lasting past RETAINED_WAIT.
        self._said_waiting: float | None = None

    def filters(self) -> list[str]:
        """The sensor's topic filters (readings and availability; not the button's)."""
        return self.mapping.filters()

    def button_filters(self) -> list[str]:
        """The privacy button's topic filters (none without a button)."""
        return [] if self.button is None else self.button.filters()

    # -- messages -----------------------------------------------------------------------------
    def press(self, topic: str, payload: bytes, *, retain: bool, now: float) -> Press | None:
        """The press of this stream's privacy button in one message (a retained message never is)."""
        if self.button is None or retain:
            return None
        p = pressed(self.button, self.presses, topic, payload, now=now)
        if p is not None:
            self.messages += 1
        return p

    def press_received(self, now: float) -> bytes | None:
        """A press placed by when it was received (``now``): it marks the step of the next tick —
        the step that holds the reading of that moment — or, for a periodic stream, the newest step
        (the command that does so is returned, for the runtime)."""
        if self.resampler is None:
            return NOW_COMMAND
        self.resampler.press(now)
        return None

    def on_message(self, topic: str, payload: bytes, *, retain: bool, now: float) -> list[tuple[str, StepInput]]:
        """Apply one sensor message; returns what goes to the runtime now, as ("frame", input) —
        nothing for a resampled stream, whose steps come from :meth:`tick`."""
        out: list[tuple[str, StepInput]] = []
        online = self.extractor.availability(topic, payload)
        if online is not None:
            self.messages += 1
            if self.resampler is not None:
                self.resampler.availability(online, now)
        reading = self.extractor.reading(topic, payload, recv=now)
        if reading is None:
            return out
        self.messages += 1
        if self.resampler is not None:
            self.resampler.reading(reading, now, retained=retain)
        elif retain:
            self.retained_skipped += 1
        else:
            value = reading.value if isinstance(reading, Reading) else None
            message = reading.message if isinstance(reading, Unreadable) else None
            out.append(("frame", self._input(Sample(reading.ts, value, _reason(reading), False, message))))
        return out

    # -- ticks --------------------------------------------------------------------------------
    def tick(self, g: float) -> StepInput:
        """The step of grid time ``g`` (resampled streams)."""
        assert self.resampler is not None
        stopped = self.resampler.silent is not None
        sample = self.resampler.sample(g)
        if not stopped and self.resampler.silent is not None:
            log.error("stream %s: no message for more than the declared heartbeat (%g s) while the device is online: "
                      "every step is unknown until the daemon is restarted (check heartbeat)", self.name,
                      self.cfg.heartbeat)
        since = self.resampler.awaiting
        if sample.reason == "no-reading" and since is not None and g - since > RETAINED_WAIT \
                and self._said_waiting != since:
            self._said_waiting = since
            log.error("stream %s: %s", self.name, WAITING)
        return self._input(sample)

    def _input(self, s: Sample) -> StepInput:
        if self.recorder is not None:
            self.recorder.step(s.value, s.ts)
        if s.value is None:
            assert s.reason is not None
            message = s.message or _UNKNOWN_MESSAGES[s.reason]
            return Rejection(s.reason, message, private=s.private, ts=s.ts)
        return json.dumps({"value": s.value, "ts": s.ts, "private": s.private}, separators=(",", ":")).encode()

    def status(self) -> dict[str, Any]:
        """What the published privacy status says about the stream's input: the mapping, the timing
        and the unknown steps by reason — counted per tick, so value-independent in their times.
        Nothing counted per raw message is published: the count of an on-change sensor's messages,
        refreshed with the status every few seconds, would tell when its value changed (notes/
        sensor-ecosystem.md §4); those counts are in :meth:`local_counters`, for the log."""
        doc: dict[str, Any] = {"preset": self.mapping.preset,
                               "topics": list(dict.fromkeys(self.filters() + self.button_filters()))}
        if self.resampler is not None:
            doc["timing"] = (f"resampled: one step per {self.cfg.sample_period:g} s tick of the wall-clock grid, "
                             "stamped with the tick (publish times depend on the grid only)")
            doc["sample_period"] = self.cfg.sample_period
            doc["stale_after"] = self.cfg.stale_after
            doc["heartbeat"] = self.cfg.heartbeat
            doc["retained"] = self.cfg.ingest is not None and self.cfg.ingest.retained
            if self.resampler.silent is not None:
                doc["stopped"] = _UNKNOWN_MESSAGES["heartbeat"]
            if self.resampler.awaiting is not None and self._said_waiting == self.resampler.awaiting:
                doc["waiting"] = WAITING
            doc["missed_ticks"] = self.missed_ticks
            doc["unknown_steps"] = dict(self.resampler.counters.unknown)
        else:
            doc["timing"] = ("stated periodic by the operator (not checked): each message is a step; "
                             "if the source reports on change, its message times reveal the changes")
        return doc

    def local_counters(self) -> dict[str, int]:
        """Counts of raw messages (never published; logged once at shutdown)."""
        out = {"messages": self.messages, "retained_skipped": self.retained_skipped}
        if self.resampler is not None:
            c = self.resampler.counters
            out["retained_skipped"] += c.retained_skipped
            out |= {"late_readings": c.late, "unreadable": sum(c.unreadable.values()), "button_presses": c.presses,
                    "live_in_wait": c.live_in_wait}
        return out

    def close(self) -> None:
        log.info("stream %s: sensor messages %s", self.name, self.local_counters())
        if self.recorder is not None:
            self.recorder.close()


def _reason(r: Reading | Unreadable) -> str | None:
    return r.reason if isinstance(r, Unreadable) else None


class IngestHub:
    """The ingest streams of one daemon (module docstring). ``clock``/``sleep`` drive the grid
    (default: a :class:`~.grid.SteadyClock`, which wall-clock steps do not stop; tests pass a fake
    clock)."""

    def __init__(self, settings: Settings, *, clock: Clock | None = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.streams = {c.name: IngestStream(c) for c in settings.streams if c.ingest is not None}
        self.clock: Clock = SteadyClock() if clock is None else clock
        self.sleep: Sleep = sleep
        #: Messages routed so far (a test's fence: everything published before was seen).
        self.routed = 0

    def filters(self) -> list[str]:
        """Every sensor topic filter to subscribe to (the control connection), each once."""
        return list(dict.fromkeys(f for s in self.streams.values() for f in s.filters()))

    def button_filters(self) -> list[str]:
        """Every privacy button's topic filter (the persistent buttons session), each once."""
        return list(dict.fromkeys(f for s in self.streams.values() for f in s.button_filters()))

    def route(self, topic: str, payload: bytes, *, retain: bool, now: float) -> list[tuple[str, str, StepInput]]:
        """(stream, "frame", input) for everything one sensor message makes at once."""
        self.routed += 1
        return [(name, kind, data) for name, s in self.streams.items()
                for kind, data in s.on_message(topic, payload, retain=retain, now=now)]

    def presses(self, topic: str, payload: bytes, *, retain: bool, now: float) -> list[tuple[str, Press]]:
        """(stream, press) for every privacy button pressed in one message (buttons session)."""
        self.routed += 1
        return [(name, p) for name, s in self.streams.items()
                if (p := s.press(topic, payload, retain=retain, now=now)) is not None]

    def grid_tasks(self, feed: Callable[[str, StepInput, float], Awaitable[None]]) -> list[Coroutine[Any, Any, None]]:
        """One grid task per resampled stream; ``feed(stream, input, now)`` takes each step."""
        tasks = []
        for s in self.streams.values():
            if s.resampler is None:
                continue

            async def on_tick(g: float, now: float, s: IngestStream = s) -> None:
                await feed(s.name, s.tick(g), now)

            def missed(n: int, s: IngestStream = s) -> None:
                s.missed_ticks += n

            tasks.append(run_grid(s.resampler.period, on_tick, clock=self.clock, sleep=self.sleep, on_missed=missed))
        return tasks

    def not_before(self, t: float | None) -> None:
        """The grid's clock goes on from ``t`` at least (:meth:`~.grid.SteadyClock.not_before`)."""
        if t is not None and isinstance(self.clock, SteadyClock):
            self.clock.not_before(t)

    def connection(self, up: bool) -> None:
        """The daemon's control connection (which carries the sensors' messages) went down or
        came back: the resampled streams' held readings are no longer known (resampler.py)."""
        now = self.clock()
        for s in self.streams.values():
            if s.resampler is not None:
                s.resampler.connection(up, now)

    def status(self, stream: str) -> dict[str, Any] | None:
        """The stream's ingest status, with ``clock_steps``: the wall clock's steps the grid went
        through (a device's event, nothing of a sensor's)."""
        s = self.streams.get(stream)
        if s is None:
            return None
        doc = s.status()
        if isinstance(self.clock, SteadyClock) and s.resampler is not None:
            doc["clock_steps"] = self.clock.steps
        return doc

    def close(self) -> None:
        for s in self.streams.values():
            s.close()
