"""Whether the daemon can vouch that a privacy button was not pressed (issue 24 item 3; docs/sensors.md,
"Privacy buttons across outages").

A mapped stream's privacy button (``[streams.ingest.button]``) is read on the daemon's buttons
connection: a persistent MQTT session of its own (a fixed client id ``<client id>-btn``,
clean_session false / clean_start false with a session expiry) whose subscriptions are QoS 1, so the broker queues for it
while it is away (QoS 0 presses too, with the shipped ``queue_qos0_messages true``). A press marks
the step of the first tick at or after the moment it was pressed. The daemon *vouches* for a step —
no press of it can still come — only when every press published meanwhile reaches it:

- **Heard.** Once every subscription of a connection is confirmed (SUBACK), the daemon publishes a
  sentinel to ``<base>/<device>/sentinel``, which the session subscribes to. The broker delivers a
  session's messages in order, so when the sentinel comes back everything queued for the session
  before it — presses included — has been received and handled. From then until the loss of the
  connection is seen, a press reaches the daemon as it is published.
- **Away, session kept.** When the daemon reconnects and the broker kept its session (CONNACK
  "session present"), the broker held the session's subscriptions all along: a press published
  meanwhile was queued and comes before the sentinel. The steps taken while away are vouched for.
- **Away, session not kept.** Otherwise — a broker restarted without persistence, a session that
  expired, the first connection of the client id, the time before the session existed — a press
  published meanwhile may be lost. Those steps are *decided as private*: each is marked with source
  ``unvouched`` (ledger, privacy status and log say so), as if the button had been pressed there.

The sensor's own readings are on the control connection, a clean session: after a reconnect its
held reading is dropped and its steps are unknown until the retained state delivered on the new
subscription (or the heartbeat's clock) — never until a live message, whose time would be a change's
and would pin the unknown steps, unvouched marks included (docs/unknown-steps.md, "How a wait ends").

This applies to resampled 3R streams (``sample_period`` without ``periodic``) with a button; their
command topic is read on the buttons' session too, and ``{"private": "now"}`` is a press without a
time of its own. A periodic stream's button (on the same session) and other streams' commands (on
the persistent input session) are queued alike but not held for.

While the button is not heard the privatizer decides nothing (``StreamPrivatizer.held``), so the
records before the unheard steps stay undecided and a mark on any of them is on time (with a
``delay`` of at least the left horizon, the default; a shorter one makes it late, as it makes a
live press late, and the mark says so). The hold
ends when the button is heard again, or — whichever comes first — once more than ``delay`` steps
were taken unheard or ``max_hold`` seconds passed since it was lost: then the unheard steps are
decided as private, and every further step taken while unheard is marked as it is taken.

A press received while the button is not heard (before the sentinel: it was queued, or sent
meanwhile) may have reached the broker at any time since the loss. With its own time (the button's
``timestamp``; the button's clock is trusted) it marks the step of that time; without one it marks
every unheard step, and the next step like any press. A timed press marks the step of its time wherever it arrives; a
step already decided follows the late-mark rules (DESIGN.md "Late marks": not honoured, and said so,
when its neighbours are already published); one older than the memory is reported lost.

Not covered (docs/sensors.md): a press the button's own client drops while the broker is unreachable
(zigbee2mqtt's client queues it and sends it on reconnecting); a QoS 0 press published over a
connection that is already dead but not yet seen to be (a silent network loss, found by the
keepalive) — a QoS 1 press is resent to the session; a broker that crashes (no clean shutdown)
restores the session from its last save (``autosave_interval``) and forgets what it queued since;
and more than ``max_inflight_messages`` (100) presses queued in one outage with QoS 1 ones among
them, which Mosquitto 2.0.11 may hold back behind the sentinel (docs/implementation.md: measured).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from ..ingest.mapping import Press
from .privatizer import Mark, StreamPrivatizer
from ..frames.steps import StepTracker

#: Why an unheard step was decided as private (the mark's reason).
SESSION_LOST = ("unvouched: the broker did not keep the daemon's session, so a privacy-button press in this time "
                "may be lost")
OVERDUE = "unvouched: the privacy button was not heard for longer than the release delay (or max_hold)"
STOPPED = "unvouched: the daemon stopped before it could hear the privacy button again"
LATE_PRESS = ("unvouched: a privacy-button press received after an outage, without its own time: it may belong to "
              "any step of it")


class ButtonHearing:
    """One redaction stream's privacy button as the daemon hears it (module docstring): the core
    it holds and marks, the stream's steps (to place a timed press) and its sample period."""

    def __init__(self, core: StreamPrivatizer, steps: StepTracker, period: float, *, now: float) -> None:
        self.core = core
        self.steps = steps
        self.period = period
        #: The button's subscriptions are confirmed on a live connection.
        self.heard = False
        #: Since when it is not heard (the daemon's start, or the loss of the connection).
        self.since: float | None = now
        #: Physical steps taken while not heard, not yet vouched for nor marked.
        self.unheard: list[int] = []
        #: The hold ran out while not heard: every step taken unheard is marked as it is taken.
        self.overdue = False
        #: Steps decided as private because they could not be vouched for (since start).
        self.unvouched = 0
        core.held = True

    # -- the connection ------------------------------------------------------------------------
    def lost(self, now: float) -> None:
        """The buttons' connection is gone: the button is not heard from now on."""
        if self.heard:
            self.heard, self.since = False, now
            self.core.held = not self.overdue

    def confirmed(self, session_present: bool) -> list[Mark]:
        """Every subscription is confirmed and what came before is handled: the button is heard.
        The unheard steps are vouched for if the broker kept the session, else decided private."""
        self.heard, self.since, self.overdue = True, None, False
        marks = [] if session_present else self._mark_unheard(SESSION_LOST)
        self.unheard = []
        self.core.held = False
        return marks

    # -- steps and time ------------------------------------------------------------------------
    def taken(self, steps: Iterable[int], now: float) -> list[Mark]:
        """Physical steps just taken (a tick's step, and the missing ones before it)."""
        if self.heard:
            return []
        if self.overdue:
            return [self._mark(p, OVERDUE) for p in steps]
        self.unheard.extend(steps)
        return self.expire(now)

    def expire(self, now: float) -> list[Mark]:
        """End the hold if it ran out (module docstring): the unheard steps are decided private."""
        if self.heard or self.overdue:
            return []
        delay, max_hold = self.core.delay, self.core.max_hold
        assert delay is not None
        late = self.since is not None and max_hold is not None and now - self.since >= max_hold
        if len(self.unheard) <= delay and not late:
            return []
        self.overdue = True
        marks = self._mark_unheard(OVERDUE)
        self.unheard = []
        self.core.held = False
        return marks

    def close(self) -> list[Mark]:
        """The daemon stops: steps still unheard are decided as private (they were never vouched for)."""
        marks = self._mark_unheard(STOPPED) if not self.heard else []
        self.unheard = []
        self.core.held = False
        return marks

    # -- presses -------------------------------------------------------------------------------
    def press(self, press: Press) -> tuple[bool, list[Mark]]:
        """Place a press: (placed, marks). ``placed`` False: the caller places it by when it was
        received (the next tick) — a press without a time, or one whose step is still to come."""
        if press.ts is not None:
            n = math.ceil(press.ts / self.period - 1e-9)  # the first tick at or after the press
            newest = self.steps.newest_ts
            if newest is not None and n * self.period <= newest + 1e-9 * self.period:
                step = self.steps.classify(n * self.period)
                if step.repeat is not None:
                    return True, [self.core.mark_position(step.repeat, source="flag")]
                return True, [self.core.mark_lost(source="flag", ts=press.ts)]
            return False, []
        if self.heard:
            return False, []
        return False, self._mark_unheard(LATE_PRESS)

    # -- marks ---------------------------------------------------------------------------------
    def _mark_unheard(self, reason: str) -> list[Mark]:
        return [self._mark(p, reason) for p in self.unheard]

    def _mark(self, p: int, reason: str) -> Mark:
        """Mark step p private as unvouched (a step already marked keeps its mark). Consecutive
        unvouched steps are one mark, a run (privatizer.coalesces): it keeps the reason of its
        first step, and each step is counted (also one that joins a run of another source, e.g. a
        schedule window's)."""
        was_marked = self.core.covering(p) is not None
        m = self.core.mark_position(p, source="unvouched")
        if not was_marked:
            self.unvouched += 1
            if m.source == "unvouched" and not (m.reason or "").startswith("unvouched"):
                # (a late mark keeps the privatizer's reason for not being honoured after ours)
                m.reason = reason if m.reason is None else f"{reason}; {m.reason}"
        return m

    def status(self) -> dict[str, Any]:
        """For the privacy status: whether the button is heard, the steps held for it, and the
        steps decided as private because they could not be vouched for."""
        return {"heard": self.heard, "held_steps": len(self.unheard), "unvouched_steps": self.unvouched,
                "not_heard_since": self.since, "rule": "docs/sensors.md: Privacy buttons across outages"}
