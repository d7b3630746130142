"""The fixed-rate resampler: one step per grid tick, whatever the sensor does (issue 10; DESIGN.md
§3 "Steps"; notes/sensor-ecosystem.md §2).

An on-change sensor's message times reveal its changes, so its messages cannot be the chain's steps.
The resampler turns them into a stream sampled at value-independent times: **sample and hold** on
the wall-clock grid g_n = n·T (T = ``sample_period``, n an integer; the grid is the same after a
restart). The step at g_n is the last reading *received* at or before g_n (by the daemon's clock),
stamped g_n — never the reading's own time. Exactly one step per tick, whether or not a message
arrived; the tick times, and so every later decision and publish time, depend on the grid only.

A step is *unknown* — treated like a rejected frame: redacted with probability 1, it occupies its
step, it is counted by reason, never guessed — when

- ``no-reading``: waiting for a fresh reading (since start-up, back online, reconnected). The wait
  never ends at a live message: on an on-change source the first one is a change, and a wait ending
  with it would date it and pin the steps before it (docs/unknown-steps.md, "How a wait ends").
  With a declared ``heartbeat`` it ends exactly ``heartbeat`` after it began — by then a device
  that keeps it has reported. Without one it ends only at a *retained* reading: the device's state
  the broker delivers right after the daemon's (re)subscription (the config requires
  ``retained = true`` then); live readings meanwhile are not held (counted for the log). A device
  back online is therefore unknown until the daemon's next subscription (a reconnect or restart);
- ``offline``: the availability topic says offline (or sends a payload that is neither online nor
  offline: fail closed). A device that comes back needs a fresh reading: the held one may have
  changed while it was away;
- ``disconnected``: the daemon's own connection to the broker is down — messages sent meanwhile are
  lost, so after it is back only a fresh reading counts (the retained state delivered on the new
  subscription is one);
- ``stale``: the held reading's time (its payload time, else its receive time) is more than
  ``stale_after`` seconds before g_n (allowed only with a declared ``heartbeat`` below it: on an
  on-change source a stale step would say "no change since", docs/unknown-steps.md);
- ``heartbeat``: the source, online and with the daemon connected, was silent for longer than its
  declared ``heartbeat`` (its guaranteed report interval whatever its value). The declaration is
  then false for this source, or the device failed: every step from then on, for the rest of the
  run, is unknown — the stream does not resume at the next message, whose time would be a change's.

A message that cannot be read (an unmapped value, a missing field, not JSON, a bad time…) is not a
reading: the held one stays, and it is counted for the log only. Making the steps unknown from it to
the next readable message would date the source's messages — its changes — and, for a value only one
state sends, name that state (docs/unknown-steps.md). It still counts as the source being heard.

A reading whose payload time is older than the held reading's is late and ignored (counted), and
so is a retained one while a reading is held (a subscription's redelivery may be older). A
privacy-button press marks the step of the next tick — the step that holds the reading of the
moment of the press. Observations are applied in receive order at the first tick at or after their
receive time, so a tick that runs late (a busy event loop) still samples exactly what had arrived by
g_n. This class is synchronous and has no clock: :mod:`.grid` drives it.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

from .mapping import Reading, Unreadable

#: Observations waiting for their tick; beyond it the oldest is applied at once (only under a
#: stalled tick: values stay genuine readings, only their attribution to a tick could move earlier).
MAX_PENDING = 1024


@dataclass(frozen=True)
class Sample:
    """One tick's step: the grid time, the held value (None: unknown, with ``reason`` and, for an
    unreadable message, its ``message`` naming the field) and whether a privacy button marked it."""

    ts: float
    value: str | float | None
    reason: str | None = None
    private: bool = False
    message: str | None = None


@dataclass
class _Observation:
    recv: float
    reading: Reading | Unreadable | None = None
    retained: bool = False  # a reading the broker delivered on subscription (the retain flag)
    online: bool | None = None
    press: bool = False
    connected: bool | None = None


@dataclass
class ResamplerCounters:
    """Counts of one stream's resampler. Only ``unknown`` (counted per tick) may be published:
    ``late``, ``unreadable`` and ``presses`` count raw messages, whose times are the sensor's
    (stream.py)."""

    #: Unknown steps by reason.
    unknown: Counter[str] = field(default_factory=Counter)
    #: Readings older than the held one (ignored).
    late: int = 0
    #: Messages that could not be read, by reason (the held reading stayed).
    unreadable: Counter[str] = field(default_factory=Counter)
    presses: int = 0
    #: Live readings received while waiting for the retained state (not held).
    live_in_wait: int = 0
    #: Retained readings received while one is held (a subscription's redelivery: maybe older).
    retained_skipped: int = 0


class Resampler:
    """Sample and hold for one stream (module docstring)."""

    def __init__(self, period: float, *, stale_after: float | None = None, heartbeat: float | None = None) -> None:
        self.period = period
        self.stale_after = stale_after
        self.heartbeat = heartbeat
        #: When the source was last heard (a message on its reading topics), or since when it is
        #: listened to (start, back online, reconnected); None before the first tick.
        self._heard: float | None = None
        #: Set once the declared heartbeat was missed: the stream stays unknown for the run.
        self.silent: float | None = None
        #: With a heartbeat: no step is known before this time (the current wait's start + heartbeat).
        self._wait_end: float | None = None
        #: Without a heartbeat: since when the current wait for a retained reading lasts (None: no
        #: such wait; the start-up's begins at the first tick).
        self.awaiting: float | None = None
        self._awaiting = heartbeat is None
        self._started = False
        self.counters = ResamplerCounters()
        self._held: Reading | None = None
        self._online = True  # until the availability topic says otherwise (it may never speak)
        self._connected = True
        self._press = False
        self._pending: deque[_Observation] = deque()

    # -- what arrives (with the daemon's receive time) -----------------------------------------
    def reading(self, r: Reading | Unreadable, recv: float, *, retained: bool = False) -> None:
        """A reading received at ``recv``; ``retained``: delivered by the broker on subscription."""
        self._queue(_Observation(recv, reading=r, retained=retained))

    @property
    def connected(self) -> bool:
        """The daemon's broker connection as last reported (applied, or waiting for its tick)."""
        return next((o.connected for o in reversed(self._pending) if o.connected is not None), self._connected)

    def availability(self, online: bool, recv: float) -> None:
        self._queue(_Observation(recv, online=online))

    def press(self, recv: float) -> None:
        self._queue(_Observation(recv, press=True))

    def connection(self, up: bool, recv: float) -> None:
        """The daemon's broker connection went down (``up`` False) or came back (True)."""
        self._queue(_Observation(recv, connected=up))

    def _queue(self, obs: _Observation) -> None:
        self._pending.append(obs)
        while len(self._pending) > MAX_PENDING:
            self._apply(self._pending.popleft())

    def _apply(self, obs: _Observation) -> None:
        if obs.press:
            self._press = True
            self.counters.presses += 1
        if obs.connected is not None:
            self._connected = obs.connected
            self._held = None  # what was held may have changed unseen: only a fresh reading counts
            self._heard = obs.recv
            if obs.connected:
                self._wait(obs.recv)
        if obs.online is not None:
            if not obs.online:
                self._held = None  # when it comes back, only a fresh reading counts
            elif not self._online:
                self._heard = obs.recv
                self._wait(obs.recv)
            self._online = obs.online
        r = obs.reading
        if r is not None:
            self._heard = obs.recv
            if isinstance(r, Unreadable):
                self.counters.unreadable[r.reason] += 1
            elif obs.retained and self._held is not None:
                self.counters.retained_skipped += 1
            elif self._awaiting and not obs.retained:
                self.counters.live_in_wait += 1  # its time is a change's: it cannot end the wait
            elif self._held is not None and r.ts < self._held.ts:
                self.counters.late += 1
            else:
                self._held = r
                self._awaiting, self.awaiting = False, None

    def _wait(self, since: float) -> None:
        """A wait for a fresh reading begins (module docstring, ``no-reading``)."""
        if self.heartbeat is not None:
            self._wait_end = since + self.heartbeat
        else:
            self._held, self._awaiting, self.awaiting = None, True, since

    # -- one tick ------------------------------------------------------------------------------
    def sample(self, g: float) -> Sample:
        """The step at grid time ``g`` (ticks come in increasing order)."""
        while self._pending and self._pending[0].recv <= g:
            self._apply(self._pending.popleft())
        private, self._press = self._press, False
        held = self._held
        if not self._started:
            self._started = True
            self._heard = g if self._heard is None else self._heard
            if self.heartbeat is not None:
                self._wait(g)
            elif self._awaiting:
                self.awaiting = g
        if self.silent is None and self.heartbeat is not None and self._connected and self._online \
                and g - self._heard > self.heartbeat:
            self.silent = g
        if self.silent is not None:
            reason: str | None = "heartbeat"
        elif not self._connected:
            reason = "disconnected"
        elif not self._online:
            reason = "offline"
        elif held is None or (self._wait_end is not None and g < self._wait_end):
            reason = "no-reading"
        elif self.stale_after is not None and g - held.ts > self.stale_after:
            reason = "stale"
        else:
            return Sample(g, held.value, None, private)
        self.counters.unknown[reason] += 1
        return Sample(g, None, reason, private)
