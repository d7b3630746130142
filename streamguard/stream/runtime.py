"""One configured stream at run time: frames and commands in, sanitized payloads and status out.

This is the glue between the configuration, the frame validator and the privatizer core. It is
synchronous and free of I/O, so the daemon (MQTT), batch mode (``streamguard privatize``) and
the tests all drive the same code.

Sanitized record payload (JSON, one per record; ``value`` is null exactly when redacted):
``{"device", "stream", "seq", "ts", "value", "redacted", "mode"}`` where mode is ``"csprng"`` or
``"deterministic"`` (seeded test mode). Counters and marks are reported by :meth:`privacy_status`.
"""

from __future__ import annotations

import abc
import json
import logging
from collections import Counter
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any


from ..config import Settings, StreamConfig
from ..sampling import BitSource
from .privatizer import Mark
from ..ledger.events import DriftEvent, Event
from ..quilt.release import AggregateRelease
from .aggregates import StreamAggregates
from ..frames.records import Element, RawRecord, Rejection, SensitiveField, parse_element, parse_frame, split_batch
from ..frames.steps import Step, StepTracker

COMMAND_REASONS = ("not-json", "not-object", "bad-private", "unknown-seq")

log = logging.getLogger(__name__)


def _is_power_of_ten(n: int) -> bool:
    while n % 10 == 0:
        n //= 10
    return n == 1


@dataclass
class StreamCounters:
    accepted: int = 0
    released: int = 0
    redacted: int = 0
    #: Frames that repeated a step already seen (redeliveries): no new step.
    duplicates: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    commands_rejected: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {
            "accepted": self.accepted,
            "released": self.released,
            "redacted": self.redacted,
            "duplicates": self.duplicates,
            "rejected": dict(self.rejected),
            "commands_rejected": dict(self.commands_rejected),
        }


@dataclass(frozen=True)
class Resume:
    """Where a stream continues after a restart: its next ``seq`` and physical position and, for
    redaction, the rows used (physical index → (r0, r1)) and the marks still open."""

    first_seq: int = 0
    first_phys: int = 0
    decided: Mapping[int, tuple[float, float]] = field(default_factory=dict)
    open_marks: tuple[Mark, ...] = ()
    restarted: bool = False
    #: The newest step's timestamp before the restart (frames at or before it make no new step).
    newest_ts: float | None = None
    #: The stream's latest drift event in the ledger (the alarm persists across restarts).
    drift: DriftEvent | None = None
    #: The first positions of earlier lives still within reach of a window (the outbox's
    #: ``restarts``; the last restart is ``first_phys``).
    restarts: tuple[int, ...] = ()


#: A stream's first start.
FRESH = Resume()


class StreamRuntime(abc.ABC):
    """What every stream has, whatever its mechanism: topics, counters, the frame validator, and
    its aggregate windows (see module docstring). Subclasses privatize the records."""

    mechanism: str = ""
    #: Frames are checked against the daemon's clock (records.parse_frame); False in batch mode
    #: (``streamguard privatize`` on historical data), where a frame without ``ts`` has no time.
    wall_clock: bool = True

    def __init__(self, settings: Settings, cfg: StreamConfig, source: BitSource,
                 aggregate_source: BitSource | None = None) -> None:
        self.settings = settings
        self.cfg = cfg
        self.states = cfg.state_map()
        self.deterministic = bool(source.deterministic)
        self.counters = StreamCounters()
        self._last_ts: float | None = None
        #: The stream's Markov model, built once (a calibration file is read once).
        self.chain = cfg.chain()
        self.aggregates = (StreamAggregates(cfg, cfg.model_chains(), aggregate_source or source) if cfg.aggregates
                           else None)
        self._aggregate_releases: list[tuple[int, AggregateRelease]] = []
        self._ledger_events: list[Event] = []
        #: What a step is (set by each mechanism, which knows where its positions continue).
        self.steps: StepTracker

    def aggregate_topic(self) -> str:
        return self.settings.topic(self.name, "aggregate")

    def _observe(self, position: int, state: int | None, ts: float | None = None) -> None:
        """Feed the aggregate windows one chain position (None: a rejected frame) at time ``ts``."""
        if self.aggregates is not None:
            self._aggregate_releases.extend(self.aggregates.observe(position, state, ts))

    def _flush_aggregates(self) -> None:
        if self.aggregates is not None:
            self._aggregate_releases.extend(self.aggregates.flush())

    def take_aggregates(self) -> list[tuple[int, AggregateRelease]]:
        """Aggregate releases computed since the last call, (query index, release): each must pass
        the ledger's budget filter before it is stored for publishing."""
        out, self._aggregate_releases = self._aggregate_releases, []
        return out

    def take_ledger_events(self) -> list[Event]:
        """Ledger events to commit before the records stored with them can be published."""
        out, self._ledger_events = self._ledger_events, []
        return out

    def aggregate_payload(self, q: int, rel: AggregateRelease) -> bytes:
        """The published aggregate: the release's public fields plus the stream and the query's index."""
        doc = {"device": self.settings.device, "stream": self.name, "index": q, **rel.to_json()}
        doc["influence"] = doc.pop("mode")  # the max-influence mode; "mode" is the randomness, as on records
        doc["mode"] = self._mode()
        # issue 14: the noise scale L·σ is "laplace_scale" ("beta" collides with the chain's β; the
        # old key stays for one release), windows carry times and the counted state's label
        doc["laplace_scale"] = doc["beta"]
        info = self.aggregates.window_info(q, rel.lo) if self.aggregates is not None else None
        doc["ts_start"], doc["ts_end"] = (info.ts_start, info.ts_end) if info is not None else (None, None)
        doc["partial"] = info.partial if info is not None else None
        doc["states"] = info.states if info is not None else None
        if "state" in rel.query:
            doc["state_label"] = self.states.label_of(int(rel.query["state"]))
        doc["labels"] = [self.states.label_of(i) for i in range(self.states.k)]
        return json.dumps(doc, separators=(",", ":")).encode()

    @property
    def name(self) -> str:
        return self.cfg.name

    def data_topic(self) -> str:
        return self.settings.topic(self.name, "data")

    def privacy_topic(self) -> str:
        return self.settings.topic(self.name, "privacy")

    def raw_topic(self) -> str:
        return self.cfg.raw_topic or self.settings.topic(self.name, "raw")

    def command_topic(self) -> str:
        return self.settings.topic(self.name, "cmd")

    def _parse(self, data: bytes | Element, now: float) -> RawRecord | Rejection:
        clock = now if self.wall_clock else None
        if isinstance(data, Element):
            rec = parse_element(data, self.states, now=clock, last_ts=self._last_ts, sensitive=self._sensitive())
        else:
            rec = parse_frame(data, self.states, now=clock, last_ts=self._last_ts, sensitive=self._sensitive())
        if not isinstance(rec, Rejection):
            rec = self._outside_model(rec) or rec
        return rec

    def _intake(self, data: bytes | Element | Rejection, now: float) -> tuple[RawRecord | Rejection, Step]:
        """Validate a frame and say which step it is (steps.py). Every frame is counted once: as a
        duplicate (it repeats a step already seen — whatever else is wrong with it), as rejected
        (by reason; a late frame is ``ts-out-of-order`` and no step), or as accepted. A
        :class:`Rejection` given instead of bytes is a step whose reading is known to be unknown
        (a mapped sensor's stale, offline or unreadable step: streamguard/ingest)."""
        rec = data if isinstance(data, Rejection) else self._parse(data, now)
        step = self.steps.classify(rec.ts)
        if step.duplicate:
            self.counters.duplicates += 1
            return rec, step
        if step.unusable and not isinstance(rec, Rejection):
            rec = Rejection("bad-ts", "field 'ts' lies too far from the sample grid's anchor",
                            private=rec.private, ts=rec.ts)
        elif not step.new and not isinstance(rec, Rejection):  # late by the step rule (sample slots)
            rec = Rejection("ts-out-of-order", "field 'ts' lies in a sample slot before the newest one",
                            private=rec.private, ts=rec.ts)
        if isinstance(rec, Rejection):
            n = self.counters.rejected[rec.reason] = self.counters.rejected[rec.reason] + 1
            if _is_power_of_ten(n):  # the 1st, 10th, 100th, … of each reason: bounded log volume
                log.warning("stream %s: rejected frame (%s): %s [%d so far]", self.name, rec.reason, rec.message, n)
        else:
            if rec.ts is not None:  # (batch mode: a frame without ts holds nothing back)
                self._last_ts = rec.ts
            self.counters.accepted += 1
        return rec, step

    def _scheduled(self, ts: float | None, *, guard: bool = False) -> bool:
        """Is time ``ts`` in a private schedule window (or, with ``guard``, within
        ``schedule_guard`` of one)? An unknown time (None: batch mode) is, when there is a
        schedule: fail closed."""
        if ts is None or not self.cfg.schedule:
            return bool(self.cfg.schedule)
        if guard:
            return any(w.near(ts, self.cfg.schedule_guard) for w in self.cfg.schedule)
        return any(w.contains(ts) for w in self.cfg.schedule)

    def _outside_model(self, rec: RawRecord) -> Rejection | None:
        """A well-formed record the mechanism cannot privatize under its model (none by default)."""
        return None

    def _sensitive(self) -> SensitiveField | None:
        return None

    def _bad_command(self, reason: str, message: str) -> Rejection:
        self.counters.commands_rejected[reason] += 1
        return Rejection(reason, message)

    def _mode(self) -> str:
        return "deterministic" if self.deterministic else "csprng"

    # -- what the daemon drives (each mechanism implements these) -------------------------------
    def on_message(self, data: bytes, now: float) -> list[Any]:
        """Validate and privatize one raw message of the stream's raw topic (or one stdin line):
        a frame (:meth:`on_frame`) or a batch — a JSON list of frames (records.split_batch), whose
        elements are the stream's next steps in list order, each validated and counted like a frame
        of its own. A list over the bounds is one rejected, private step (fail closed). Returns
        the records decided."""
        return self.on_messages([data], now)

    def on_messages(self, messages: list[bytes], now: float) -> list[Any]:
        """:meth:`on_message` for raw messages of the stream received together, in order: their
        steps are taken one by one and decided together (:meth:`_on_batch`)."""
        steps: list[bytes | Element | Rejection] = []
        for data in messages:
            batch = split_batch(data)
            if batch is None or isinstance(batch, Rejection):
                steps.append(data if batch is None else batch)
            else:
                steps += batch
        if len(steps) == 1:
            return self.on_frame(steps[0], now)[0]
        return self._on_batch(steps, now)

    def _on_batch(self, steps: list[bytes | Element | Rejection], now: float) -> list[Any]:
        """Several steps in order, each one frame (a mechanism may decide them together)."""
        out: list[Any] = []
        for step in steps:
            out += self.on_frame(step, now)[0]
        return out

    @property
    def warm_key(self) -> Hashable | None:
        """Streams with equal keys load the same compiled kernels in :meth:`warm_up` (None: this
        mechanism has nothing to load ahead)."""
        return None

    def warm_up(self) -> None:
        """Load, before the first record, what the data path would otherwise load at its first
        use (see :meth:`RedactionRuntime.warm_up`)."""

    @abc.abstractmethod
    def on_frame(self, data: bytes | Element | Rejection, now: float) -> tuple[list[Any], Rejection | None]:
        """Validate and privatize one raw frame (or one element of a batch); returns the records
        decided and the rejection."""

    @abc.abstractmethod
    def on_command(self, data: bytes) -> Rejection | None:
        """Apply a command from the stream's command topic; a bad one is counted and returned."""

    @abc.abstractmethod
    def tick(self, now: float) -> list[Any]:
        """Records decided because time passed."""

    @abc.abstractmethod
    def drain(self) -> list[Any]:
        """Decide everything pending (shutdown)."""

    @abc.abstractmethod
    def take_decisions(self) -> list[tuple[int, float, float]]:
        """Rows to persist with the records (restart state), taken once."""

    @abc.abstractmethod
    def mark_records(self) -> dict[int, dict[str, Any]]:
        """Mark states to persist with the records, taken once."""

    @abc.abstractmethod
    def payload(self, r: Any) -> bytes:
        """The sanitized record's bytes."""

    @abc.abstractmethod
    def privacy_status(self) -> dict[str, Any]:
        """The retained privacy status."""
