"""A 3R redaction stream at run time: the plan by signed distance, the privatizer core, the marks' ledger
events and the retained privacy status (the frame handling all streams share is in :mod:`.runtime`)."""

from __future__ import annotations

import functools
import json
import logging
import math
import time
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import numpy as np

from ..model.chain import MarkovChain
from ..config import ConfigError, Settings, StreamConfig
from ..redaction.kplan import KStreamPlan, stream_plan_for
from ..redaction.plan import OverBudget, StreamPlan, within
from ..redaction.plan_cache import PlanCache, cached_plan_stream
from ..sampling import BitSource, KeystreamSource
from ..ledger.events import DriftEvent, RedactionEvent
from ..model.block_drift import BlockDriftGuard, DriftState, StateError, partition_for
from ..model.modelset import ModelSet
from ..model.krobust import RobustKStreamPlan, region, robust_kstream_plan
from ..model.robust import RobustStreamPlan
from ..model.robust_cache import cached_robust_stream_plan
from ..model.scenarios import Scenarios
from ..quilt.release import AggregateRelease
from . import privacy_mode
from .privatizer import Mark, Release, StreamPrivatizer
from ..frames.records import Element, Rejection
from ..frames.steps import Step, StepTracker

from .runtime import FRESH, Resume, StreamRuntime, _is_power_of_ten

log = logging.getLogger(__name__)

#: A batch is decided in chunks of at most this many elements (one kernel call each). The core
#: keeps the rows (and decisions) of its last 4·span + delay + 64 + S positions, span = H_ℓ + H_r + 1,
#: S its start hold (records held at the start and after a restart, privatizer.start_hold);
#: one call decides at most DECIDE_EVERY + delay + S records, and the windows of the marks it
#: finishes reach at most span beyond them on either side: DECIDE_EVERY + delay + S + 2·span ≤
#: 4·span + delay + 64 + S holds for every span ≥ 0, so all of it is still in memory. (Slots skipped under a sample
#: period add positions to a call; a row no longer in memory then counts as released in a mark's
#: exact evaluation — privatizer._window_rows — which can only overstate its leakage.)
DECIDE_EVERY = 64
#: Rejected frames a stream takes one by one, per second (and at once): beyond it, a rejected
#: frame that is private and a new step with no slot missing before it — a step of the run of
#: private steps that a burst of malformed frames is (privatizer.coalesces), with or without a
#: time of its own, on a stream with or without aggregate windows — is only counted (its time
#: noted for the step rule: steps.py), and the steps counted are taken in bulk at the stream's next
#: tick or frame (privatizer.skip_run: O(memory) however many; the aggregate windows observe them
#: as one run: aggregates.observe_run). A burst then costs per frame its parse and a counter
#: (issue 28; docs/operations.md, "Hostile input").
HOSTILE_PER_SECOND = 200.0
#: Finished marks listed in the privacy status (``recent_marks``): the latest ones, oldest first.
RECENT_MARKS = 50
#: Redaction rows whose text :meth:`RedactionRuntime.payload` keeps.
_ROW_TEXTS = 256
_Plan = TypeVar("_Plan")


def checked_stream_plan(name: str, epsilon: float, build: Callable[[], _Plan],
                        leakage: Callable[[_Plan], Any]) -> tuple[_Plan, Any]:
    """A redaction stream's plan and its exact leakage, for ``run`` and ``config check`` alike. A
    plan whose exact leakage exceeds ε (the design's own final check, :class:`OverBudget`, or this
    one) is a configuration error — exit 78, one line naming the stream — never a warning."""
    try:
        plan = build()
    except OverBudget as exc:
        raise ConfigError(f"streams.{name}: {exc}; the stream is refused") from None
    lk = leakage(plan)
    if not within(lk.total, epsilon):
        raise ConfigError(f"streams.{name}: the plan's exact leakage {lk.total:.9g} nats > ε = {epsilon:g}; "
                          "the stream is refused")
    return plan, lk


class RedactionRuntime(StreamRuntime):
    """A 3R redaction stream: the plan by signed distance and the privatizer core."""

    mechanism = "redaction"

    def __init__(self, settings: Settings, cfg: StreamConfig, source: BitSource, *, resume: Resume = FRESH,
                 aggregate_source: BitSource | None = None, plan_cache: PlanCache | None = None) -> None:
        super().__init__(settings, cfg, source, aggregate_source)
        assert cfg.epsilon is not None  # config validation: redaction streams have a budget
        #: Every step private while on (stream/privacy_mode.py; the daemon restores it at start).
        self.privacy_mode = False
        #: The model set the plan is robust over (None: the single configured chain).
        self.model_set = cfg.model_set()
        self.robust: RobustStreamPlan | RobustKStreamPlan | None = None

        def build() -> StreamPlan | KStreamPlan:
            if self.model_set is not None and not self.model_set.is_binary:  # a k-state row-wise set (not cached)
                self.robust = robust_kstream_plan(self.model_set, cfg.epsilon, split=cfg.split)
                return self.robust.evaluation_plan()
            if self.model_set is not None:  # cached by the set's content, re-certified on every start
                self.robust = cached_robust_stream_plan(self.model_set, cfg.epsilon, design=cfg.design,
                                                        split=cfg.split, cache=plan_cache)
                return self.robust.evaluation_plan()
            if self.chain.is_binary:
                return cached_plan_stream(self.chain, cfg.epsilon, design=cfg.design, split=cfg.split,
                                          cache=plan_cache,
                                          progress=lambda msg: log.info("stream %s: %s", cfg.name, msg))
            return stream_plan_for(self.chain, cfg.epsilon, design=cfg.design, split=cfg.split)  # k states

        self.plan: StreamPlan | KStreamPlan
        self.plan, self.plan_leakage = checked_stream_plan(
            cfg.name, cfg.epsilon, build, lambda plan: plan.leakage() if plan_cache is None else plan_cache.leakage(plan))
        self.core = self._new_core(source, resume)
        guard_on = cfg.drift_guard if cfg.drift_guard is not None else self.model_set is not None
        guarded = self.model_set or ModelSet("finite", self.chain.k, point=self.chain, members=(self.chain,))
        #: The id of the model (set) the drift alarm concerns (ledger drift events name it).
        self.model_id = guarded.digest()
        #: The drift guard per time-of-day block, reading only what is released unchanged; its
        #: counts persist beside the outbox (streamguard.model.block_drift).
        self.drift = self._new_guard(guarded, cfg.drift_false_alarm) if guard_on else None
        if resume.drift is not None and resume.drift.raised:
            self._restore_drift(resume.drift, guarded)
        if self.drift is not None:  # it reads each decision as it is made, inside a group too
            self.core.observer = self._watch_drift
        self.steps = StepTracker(cfg.sample_period, max_missing=self.core.memory,
                                 floor=resume.newest_ts)
        #: Open marks already logged as not honoured (each mark is logged once; see mark_records).
        self._warned_open: list[Mark] = [m for m in resume.open_marks if not m.honoured]
        #: Inside a batch (:meth:`_on_batch`): steps are taken, decisions wait for the chunk's end.
        self._defer = False
        #: Decisions and mark events moved out of the core's bounded deques during a batch, so
        #: none is lost before the owner takes them (take_decisions, mark_records).
        self._decisions: list[tuple[float, ...]] = []
        self._mark_events: list[Mark] = []
        dump = functools.partial(json.dumps, separators=(",", ":"))
        #: The payload's fixed parts, JSON-encoded once (:meth:`payload`): its head up to ``seq``,
        #: each state's published value, the mode.
        self._parts = (f'{{"device":{dump(settings.device)},"stream":{dump(self.name)},"seq":',
                       [dump(self.states.label_of(i)) for i in range(self.states.k)], dump(self._mode()))
        #: The text of recent redaction rows (most records carry one of a few: all zero, or the rows
        #: of an open mark's window).
        self._row_text: dict[tuple[float, ...], str] = {}
        #: Rejected frames taken one by one may still be taken this second (a token bucket of
        #: HOSTILE_PER_SECOND), as of ``_tokens_at``; and the private steps counted beyond it, not
        #: yet taken (:meth:`_take_owed`) and the times of the first and the newest of them, with
        #: how many were counted so since the start.
        self._tokens, self._tokens_at = HOSTILE_PER_SECOND, -math.inf
        self._owed = 0
        self._owed_ts: tuple[float | None, float | None] = (None, None)
        self.bulk_steps = 0

    def _new_core(self, source: BitSource, resume: Resume = FRESH) -> StreamPrivatizer:
        """A privatizer core with this stream's plan and settings, continuing at ``resume``."""
        cfg = self.cfg
        return StreamPrivatizer(self.plan, source, delay=cfg.delay, max_hold=cfg.max_hold,
                                first_seq=resume.first_seq, first_phys=resume.first_phys,
                                decided=dict(resume.decided), open_marks=list(resume.open_marks),
                                restarted=resume.restarted, restarts=resume.restarts,
                                initial=None if cfg.model.initial is None else np.array(cfg.model.initial),
                                members=self._members(), time_of_day=self._time_of_day(),
                                box=self.model_set.box if self.model_set is not None and self.model_set.kind == "box"
                                else None,
                                region=region(self.model_set) if isinstance(self.robust, RobustKStreamPlan) else None,
                                region_table=self.robust.certified_table()
                                if isinstance(self.robust, RobustKStreamPlan) else None)

    @property
    def warm_key(self) -> Hashable:
        """Streams with equal keys run the same compiled kernels (numba compiles per argument
        types, not per plan): warming one of them warms all."""
        return (type(self.plan).__name__, self.states.k, bool(self._members()), self.core.box is not None,
                self.core.region is not None, self.cfg.model.initial is not None)

    def warm_up(self) -> None:
        """Load the compiled kernels that this stream's decisions and marks run — numba's on-disk
        cache, or a compile right after an install — before its first record. Otherwise the first
        mark (its exact evaluation) and the first fractional row (the redaction kernel, the
        keystream cipher) load them in the data path, and the stream stalls behind them: 20 ms
        at delay 0 and 35 ms at delay 7 with a warm cache on the reference machine, seconds
        after an install. A throwaway core (this plan and settings, a throwaway keystream) takes
        2·span + delay + 2 steps with one flagged step and decides them all; nothing of it is
        kept, stored or published, and the stream's own source is not drawn from."""
        core = self._new_core(KeystreamSource(block_bytes=64))
        span = self.plan.left_horizon + self.plan.right_horizon + 1
        for i in range(2 * span + core.delay + 2):
            core.accept(i % self.states.k, float(i), now=float(i), private=i == span)
        core.drain()

    def _members(self) -> tuple[MarkovChain, ...]:
        """Further chains the privatizer evaluates every mark under: a finite set's members; none for
        a binary box or a k-state region (their figures are certified over the whole set:
        docs/model-sets.md §5) or a single chain."""
        if self.model_set is None or self.model_set.kind != "finite":
            return ()
        return tuple(self.model_set.members)

    def _time_of_day(self) -> tuple[Scenarios, float] | None:
        """A set-chain's calibration scenarios and sample period: the privatizer's figures then cover
        its time-of-day scenario as well as the finite members (docs/time-varying.md §7)."""
        sc = None if self.model_set is None else self.model_set.setchain
        return None if sc is None or sc.scenarios is None else (sc.scenarios, sc.sample_period)

    # -- input --------------------------------------------------------------------------------
    def _on_batch(self, steps: list[bytes | Element | Rejection], now: float) -> list[Release]:
        """Several steps (a batch's elements, frames received together) are taken one by one
        (marks included), then what is due is decided in one kernel call per DECIDE_EVERY steps.
        Deciding at the end instead of after each step only lets a mark on a later step reach more
        undecided records (never less redaction); the newest record stays held until the next
        frame, so a ``"now"`` command after them still protects it."""
        out: list[Release] = []
        for lo in range(0, len(steps), DECIDE_EVERY):
            self._defer = True
            try:
                out += super()._on_batch(steps[lo:lo + DECIDE_EVERY], now)
            finally:
                self._defer = False
            out += self._count(self.core.decide_due())
            self._decisions += self.core.last_decisions
            self.core.last_decisions.clear()
            self._mark_events += self.core.mark_events
            self.core.mark_events.clear()
        return out

    def on_frame(self, data: bytes | Element | Rejection, now: float) -> tuple[list[Release], Rejection | None]:
        """Validate and privatize one raw frame. Returns the records decided as a result and the
        rejection, if any.

        Steps (steps.py): a redelivered frame (a step already seen) or a late one makes no new step
        — it only marks the step it repeats private when it asks to be. Slots skipped under a
        sample period are missing readings. A rejected frame gets no seq and is never published,
        but it still occupies its step, as a record redacted with probability 1 (privatizer.py); it
        is private when it may carry a private request or its time — its own ``ts``, else the
        daemon's clock — lies within ``schedule_guard`` of a schedule window (fail closed)."""
        rec, step = self._intake(data, now)
        rejection = rec if isinstance(rec, Rejection) else None
        if rejection is not None and self._over_rate(rejection, step, now):
            return [], rejection  # (counted: a step of the open run, taken before anything that follows it)
        releases = self._take_owed(now)  # (the steps counted before this frame come first)
        if not step.new:  # a redelivery, or a late frame: no step of its own
            if rec.private and step.repeat is not None:
                self.core.mark_position(step.repeat, source="flag")
            elif rec.private:  # older than the memory: nothing left to protect, and it is said
                self.core.mark_lost(source="flag", ts=rec.ts)
            return self._count(releases), rejection
        mode = self.privacy_mode  # every step is private while it is on (stream/privacy_mode.py)
        for missing in step.missing:  # readings that never arrived still occupy their steps
            releases += self.core.skip(now=now, ts=missing, private=mode or self._scheduled(missing, guard=True),
                                       defer=self._defer)
            self.steps.taken(missing, self.core.next_phys - 1)
            self._observe(self.core.next_phys - 1, None, missing)
        if isinstance(rec, Rejection):
            clock = now if self.wall_clock else None  # (its time: its own ts, else the daemon's clock)
            private = rec.private or mode or self._scheduled(clock if rec.ts is None else rec.ts, guard=True)
            releases += self.core.skip(now=now, ts=rec.ts, private=private, defer=self._defer)
            self.steps.taken(rec.ts, self.core.next_phys - 1)
            self._observe(self.core.next_phys - 1, None, now if rec.ts is None else rec.ts)
            return self._count(releases), rec
        scheduled = mode or self._scheduled(rec.ts, guard=False)
        source = "flag" if rec.private else "mode" if mode else "schedule"
        _, accepted = self.core.accept(rec.state, math.nan if rec.ts is None else rec.ts, now=now, private=rec.private or scheduled,
                                       source=source, defer=self._defer)
        self.steps.taken(rec.ts, self.core.next_phys - 1)
        # a record flagged private on arrival stays out of the aggregate windows (its position is
        # still charged); a mark that comes later cannot take back a reading already counted
        self._observe(self.core.next_phys - 1, None if rec.private or scheduled else rec.state, rec.ts)
        return self._count(releases + accepted), None

    def _over_rate(self, rec: Rejection, step: Step, now: float) -> bool:
        """Is this rejected frame one to count only (HOSTILE_PER_SECOND)? Only a new step with no
        missing slot before it, private (at its own time, else the daemon's clock), right after an
        open run in which every undecided step lies (privatizer.open_run), and only once the bucket
        is empty. Counted, it is owed: its physical index is the core's next one plus the steps
        owed before it (skip_run numbers them in order), which the step rule notes with its time."""
        elapsed = max(0.0, now - self._tokens_at)  # (a wall clock stepped back refills nothing)
        self._tokens = min(HOSTILE_PER_SECOND, self._tokens + elapsed * HOSTILE_PER_SECOND)
        self._tokens_at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return False
        if not (step.new and not step.missing):
            return False
        clock = now if self.wall_clock else None
        private = rec.private or self.privacy_mode or self._scheduled(clock if rec.ts is None else rec.ts, guard=True)
        if not private or (self._owed == 0 and self.core.open_run() is None):
            return False
        self.steps.taken(rec.ts, self.core.next_phys + self._owed)
        t = now if rec.ts is None else rec.ts  # (what the aggregate windows see of it, as one by one)
        self._owed_ts = (t if self._owed == 0 else self._owed_ts[0], t)
        self._owed += 1
        self.bulk_steps += 1
        if _is_power_of_ten(self.bulk_steps):
            log.warning("stream %s: more than %g rejected frames a second: further ones are counted and taken "
                        "in bulk as private steps [%d so far]", self.name, HOSTILE_PER_SECOND, self.bulk_steps)
        return True

    def _take_owed(self, now: float) -> list[Release]:
        """Take the private steps counted beyond the rate (privatizer.skip_run), before anything else."""
        n, self._owed = self._owed, 0
        if not n:
            return []
        first = self.core.next_phys
        releases = self.core.skip_run(n, now=now)
        if self.aggregates is not None:  # (rejected steps: no state, but their positions count)
            self._aggregate_releases += self.aggregates.observe_run(first, first + n - 1, *self._owed_ts)
        return releases

    def on_command(self, data: bytes) -> Rejection | None:
        """Apply ``{"private": <seq>}``, ``{"private": "now"}`` or ``{"privacy_mode": "on"|"off"}``
        (stream/privacy_mode.py: on also marks the newest step); a bad command is counted."""
        try:
            obj = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):  # RecursionError: nested too deeply
            return self._bad_command("not-json", "command is not valid JSON")
        try:
            mode = privacy_mode.requested(obj)
        except ValueError as exc:
            return self._bad_command("bad-privacy-mode", str(exc))
        if mode is not None:
            if mode and not self.privacy_mode and self.core.next_seq > self.core.first_seq:
                self.core.mark(None, source="mode")
            self.privacy_mode = mode
            return None
        if not isinstance(obj, dict) or "private" not in obj:
            return self._bad_command("not-object", "command must be an object with field 'private'")
        target = obj["private"]
        if target == "now":
            seq = None
        elif isinstance(target, int) and not isinstance(target, bool) and target >= 0:
            seq = target
        else:
            return self._bad_command("bad-private", "field 'private' must be a record seq or \"now\"")
        try:
            self.core.mark(seq, source="command")
        except ValueError:
            return self._bad_command("unknown-seq", "field 'private' names a record not yet received")
        return None

    def tick(self, now: float) -> list[Release]:
        """Take the private steps counted beyond the rate; decide records held longer than max_hold."""
        return self._count(self._take_owed(now) + self.core.expire(now))

    def drain(self) -> list[Release]:
        out = self._count(self._take_owed(time.time()) + self.core.drain())
        self._flush_aggregates()  # (after the owed steps: the open windows span their positions too)
        if self.drift is not None:  # (the evidence gathered since the last test carries over)
            self.drift.persist()
        return out

    def _count(self, releases: list[Release]) -> list[Release]:
        for r in releases:
            if r.redacted:
                self.counters.redacted += 1
            else:
                self.counters.released += 1
        return releases

    def _new_guard(self, guarded: ModelSet, false_alarm: float) -> BlockDriftGuard:
        """The drift guard, continuing the counts persisted for this model (model/block_drift.py).
        A state file that cannot be read fails closed: one ERROR line, the alarm holds for this
        run, and the file is left as it is (removing it starts the test afresh)."""
        part, state = partition_for(guarded), DriftState.beside(self.settings.outbox.path, self.name)
        try:
            return BlockDriftGuard(part, self.model_id, false_alarm, state=state)
        except StateError as exc:
            log.error("stream %s: drift guard: %s: failing closed (marks' windows fully redacted, aggregates "
                      "stop); remove the file to restart the test", self.name, exc)
            guard = BlockDriftGuard(part, self.model_id, false_alarm)  # (no state: nothing is overwritten)
            guard.restore(0)
            self._fail_closed()
            return guard

    def _watch_drift(self, phys: int, ts: float, state: int | None, row: tuple[float, ...]) -> None:
        """The core's observer: the drift guard reads each decision in order (a record without a
        time is placed by the clock at its decision: a block chosen before the next state is seen
        keeps the test valid); when it fires, the core fails closed before the next record of the
        same decision (privatizer._settle_closed)."""
        assert self.drift is not None
        if self.drift.released(phys, ts if math.isfinite(ts) else time.time(), state, row):
            self._on_drift()

    def _on_drift(self) -> None:
        """The guard fired: fail closed (marks' windows fully redacted, aggregates stop), one WARNING,
        and a drift ledger event (raised) — which also keeps the alarm across restarts."""
        assert self.drift is not None
        log.warning("stream %s: DRIFT — the live chain has left the model set (sequential test, false-alarm rate "
                    "%g, after %d observed transitions): marks' windows are now fully redacted and aggregates "
                    "stop; re-calibrate and restart the daemon", self.name, self.drift.false_alarm,
                    self.drift.transitions)
        self._ledger_events.append(DriftEvent(
            device=self.settings.device, stream=self.name, raised=True, model=self.model_id,
            transitions=self.drift.transitions, false_alarm=self.drift.false_alarm,
            reason="the sequential test found the live chain outside the model set"))
        self._fail_closed()

    def _fail_closed(self) -> None:
        self.core.fail_closed("drift: the live chain left the model set; the window is fully redacted but no "
                              "guarantee is stated outside the set")

    def _restore_drift(self, event: DriftEvent, guarded: ModelSet) -> None:
        """Recovery rule (docs/model-sets.md §6): an alarm raised under this model set holds after a
        restart — the stream starts failing closed, the guard is on whatever the configuration says;
        under a different model set (re-calibrated) it is cleared, with a ledger event of its own."""
        if event.model != self.model_id:
            log.info("stream %s: the drift alarm raised under model set %s is cleared: the stream now runs "
                     "model set %s", self.name, event.model, self.model_id)
            self._ledger_events.append(DriftEvent(
                device=self.settings.device, stream=self.name, raised=False, model=self.model_id,
                false_alarm=event.false_alarm,
                reason=f"a new model set replaces {event.model}, under which the alarm was raised"))
            return
        if self.drift is None:
            self.drift = self._new_guard(guarded, event.false_alarm)
        self.drift.restore(event.transitions)
        log.warning("stream %s: still in DRIFT — the alarm raised before the restart (ledger) holds under the "
                    "same model set %s: marks' windows are fully redacted and aggregates stop; re-calibrate "
                    "(a new model set clears it)", self.name, self.model_id)
        self._fail_closed()

    def take_aggregates(self) -> list[tuple[int, AggregateRelease]]:
        """Aggregate releases to publish — none once the drift guard has fired (they are dropped)."""
        out = super().take_aggregates()
        return [] if self.drift is not None and self.drift.alarm else out

    def take_decisions(self) -> list[tuple[float, ...]]:
        """The redaction rows used since the last call, (physical index, r0, …, r(k−1)), for the outbox."""
        rows, self._decisions = [*self._decisions, *self.core.last_decisions], []
        self.core.last_decisions.clear()
        return rows

    def mark_records(self) -> dict[int, dict[str, Any]]:
        """Marks created or finished since the last call, and runs that grew, by seq, as stored in
        the outbox: ``{"open": bool, "state": Mark.state(), "report": Mark.report()}``.

        Every such mark but a run that only grew (its figure does not change: privatizer._extend),
        honoured or not, also becomes one ledger event with its current figures
        (:meth:`take_ledger_events`; a mark on a record published too long ago too, by its seq).
        Each mark that is not honoured is logged as one WARNING when it becomes so — at its
        creation, or when the exact check at its end fails — naming the stream, the seq, the
        position and the reason, never a reading."""
        marks: list[Mark] = []
        for m in (*self._mark_events, *self.core.mark_events):  # a mark created and finished since the
            if not any(m is k for k in marks):  # last call is listed twice
                marks.append(m)
        self._mark_events = []
        self.core.mark_events.clear()
        # runs that only grew (privatizer._extend): their stored state follows, no ledger event
        grown = [m for m in self.core.run_updates if not any(m is k for k in marks)]
        self.core.run_updates.clear()
        for m in marks:
            is_open, warned = self.core.is_open(m), any(m is w for w in self._warned_open)
            if not m.honoured and not warned:
                where = f"seq {m.seq}" if m.seq is not None else "a step with no known seq"
                at = f"position {m.phys}" if m.phys >= 0 else "position unknown"
                log.warning("stream %s: private mark (%s) on %s (%s) NOT honoured: %s", self.name, m.source,
                            where, at, m.reason or "no reason recorded")
                if is_open:
                    self._warned_open.append(m)
            elif warned and not is_open:
                self._warned_open = [w for w in self._warned_open if w is not m]
        self._ledger_events.extend(self._mark_event(m) for m in marks)
        # rejected frames: negative keys; a mark with neither seq nor position (a step older than
        # the privatizer's memory) is never open, has nothing to restore, and no key of its own
        return {m.seq if m.seq is not None else -(m.phys + 1):
                {"open": self.core.is_open(m), "state": m.state(), "report": m.report()}
                for m in (*marks, *grown) if m.seq is not None or m.phys >= 0}

    def _mark_event(self, m: Mark) -> RedactionEvent:
        """The ledger's record of a mark, with the privatizer's figure (``Mark.leakage``): the exact
        leakage of the rows used plus the rows committed, never below the final figure and exact
        once the mark's window is decided — so the ledger holds the mark before any of its
        neighbours is published. A mark whose position is no longer known (phys −1) is recorded
        with position None (and its seq, if it has one), not honoured, with unbounded leakage."""
        assert m.leakage is not None and self.cfg.epsilon is not None  # the privatizer reports every mark's figure
        known = m.phys >= 0
        return RedactionEvent(device=self.settings.device, stream=self.name, position=m.phys if known else None,
                              seq=m.seq, plan=self._plan_name(), epsilon=self.cfg.epsilon,
                              left=m.leakage.left, right=m.leakage.right, total=m.leakage.total,
                              honoured=m.honoured, reason=m.reason,
                              lo=max(0, m.phys - m.left.shape[0]) if known else None,
                              hi=m.right_end if known else None, last=m.through)

    def _plan_name(self) -> str:
        """The plan as the ledger names it (with the model set's id when the plan is robust over one)."""
        name = f"3R:{self.plan.design}"
        return name if self.model_set is None else f"{name} robust over model set {self.model_set.digest()}"

    # -- output -------------------------------------------------------------------------------
    def record(self, r: Release) -> dict[str, Any]:
        """The sanitized record of a decision (no raw value unless the plan released it)."""
        return {
            "device": self.settings.device,
            "stream": self.name,
            "seq": r.seq,
            "position": r.phys,
            "ts": None if math.isnan(r.ts) else r.ts,  # (NaN: a batch frame without ts)
            "value": None if r.state is None else self.states.label_of(r.state),
            "redacted": r.state is None,
            "redaction": list(r.row),
            "mode": self._mode(),
        }

    def payload(self, r: Release) -> bytes:
        """The bytes of ``json.dumps(self.record(r), separators=(",", ":"))``, formatted from parts
        encoded once (the per-record JSON encoder was a tenth of the daemon's per-record path; a
        test checks the two byte for byte): ints and ``repr`` of floats are what the JSON encoder
        writes for them, and ``ts`` is finite or NaN (null)."""
        head, values, mode = self._parts
        ts = "null" if math.isnan(r.ts) else repr(r.ts)
        value = "null" if r.state is None else values[r.state]
        row = self._row_text.get(r.row)
        if row is None:
            if len(self._row_text) >= _ROW_TEXTS:
                self._row_text.clear()
            row = self._row_text[r.row] = ",".join(map(repr, r.row))
        return (f'{head}{r.seq},"position":{r.phys},"ts":{ts},"value":{value},'
                f'"redacted":{"true" if r.state is None else "false"},"redaction":[{row}],"mode":{mode}}}').encode()

    def _model_description(self) -> dict[str, Any]:
        """The point model as a consumer needs it to correct its estimates (``kind`` "point"): one
        chain — α, β (binary), its stationary flag and transition matrix — and the initial law the
        config states (None: any law). Under a model set it is the set's point estimate (a
        member); the set the plan and the marks are certified over is ``model_set`` beside it, and
        the chain ``plan_leakage`` is evaluated under is ``model_set.worst_case.member``."""
        initial = self.cfg.model.initial
        point = self.model_set.point if self.model_set is not None else None
        chain = point if point is not None else self.plan.chain
        return {"kind": "point", **({"alpha": chain.alpha, "beta": chain.beta} if chain.is_binary else {}),
                "stationary": chain.stationary, "matrix": chain.matrix.tolist(),
                "initial": None if initial is None else list(initial)}

    def privacy_status(self) -> dict[str, Any]:
        """The retained privacy status: model, budget, plan, marks and counters."""
        chain = self.plan.chain
        core = self.core.status(recent=RECENT_MARKS)
        drift = {} if self.drift is None else {"drift": self.drift.status()}
        robust = {} if self.robust is None else {
            "guarantee": "ε-LDP about each private position under every chain of the stated model set",
            "model_set": self.robust.status()}
        return {
            "stream": self.name,
            "guarantee": "ε-LDP about each private position under the stated Markov model",
            "model": self._model_description(),
            **robust,
            **drift,
            "labels": [self.states.label_of(i) for i in range(self.states.k)],
            # the table by signed distance (issue 14): rows Pr(⊥ | state) at t = p − d and p + d
            "plan": {"left": self.plan.left.red[: self.plan.left_horizon].tolist(),
                     "right": self.plan.right.red[: self.plan.right_horizon].tolist()},
            "mechanism": "3R redaction (paper 000, corrected)" if chain.is_binary
            else "3R redaction for k states (docs/k-state-redaction.md)",
            "epsilon": self.plan.epsilon,
            "design": self.plan.design,
            "split": [self.plan.left.budget, self.plan.right.budget],
            "horizons": {"left": self.plan.left_horizon, "right": self.plan.right_horizon},
            # the table by signed distance t − p: one row of k probabilities Pr(⊥ | X = x) per offset
            "table": {"offsets": self.plan.offsets().tolist(), "redaction": self.plan.table().tolist()},
            "plan_leakage": self.plan_leakage.total,
            "delay": core["delay"],
            "max_hold": self.cfg.max_hold,
            "deterministic": self.deterministic,
            "next_seq": core["next_seq"],
            "pending": core["pending"],
            "open_marks": core["open_marks"],
            "recent_marks": core["finished_marks"],
            "restarted": core["restarted"],
            # the first position after the last restart: an unknown number of readings lies before it
            "restart_position": self.core.boundary,
            "privacy_mode": self.privacy_mode,
            "counters": self.counters.as_dict(),
        }
