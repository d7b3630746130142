"""Calibration: transition counts from a file of frames, with their real timestamps (issue 11).

Input: JSON lines of frames as the daemon reads them (``{"value": …, "ts": …}``; labels or numeric
bins as the stream defines), or the steps a stream recorded (an unknown step is a frame whose value
cannot be read, e.g. ``"value": null``). Each line is validated by the daemon's own parser
(:func:`streamguard.frames.records.parse_frame`) and placed on the chain's time by the daemon's
own step rule (:class:`streamguard.frames.steps.StepTracker`):

- a transition is counted only between two *consecutive steps* with readings: with a sample
  period, steps one period apart (slots skipped between two frames are missing readings: the chain
  breaks there); without one, consecutive distinct timestamps;
- a malformed or unreadable line is a step whose reading is unknown: it is counted (by reason) and
  the chain breaks there too; a redelivered frame (same ``ts`` or slot) is the same step; a frame
  earlier than the newest step is late and ignored (counted);
- a frame without ``ts`` is the next step in file order; with a sample period it cannot be placed
  on the grid, so it is counted as malformed (``missing-ts``) and breaks the chain.

Timestamps are real epoch seconds: the file is read with no "now" (the daemon's clock check, which
made the old calibration reject every real timestamp as "in the future", does not apply to a
recording). Nothing here ever prints a reading.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..frames.records import RawRecord, StateMap, parse_frame
from ..frames.steps import StepTracker

#: Stands in for "now" so that no real timestamp is "in the future"; a frame without ``ts`` gets it.
_NO_CLOCK = 1e300


@dataclass
class TransitionData:
    """What a calibration file holds: transition counts and how the file was read."""

    counts: NDArray[np.int64]
    lines: int = 0
    steps: int = 0  # steps with a reading
    segments: int = 0  # maximal runs of consecutive steps with readings
    gaps: int = 0  # missing slots between frames (with a sample period)
    duplicates: int = 0
    late: int = 0
    malformed: Counter[str] = field(default_factory=Counter)
    #: With ``keep=True``: one row per counted transition, (ts of its source step, state two steps
    #: back or −1 when that step had no reading, source state, target state) — what model
    #: selection (:mod:`.select`) tests; not part of :meth:`as_dict`.
    trans_ts: list[float] = field(default_factory=list)
    trans: list[tuple[int, int, int]] = field(default_factory=list)

    @property
    def transitions(self) -> int:
        return int(self.counts.sum())

    def as_dict(self) -> dict[str, Any]:
        return {"lines": self.lines, "steps": self.steps, "transitions": self.transitions,
                "segments": self.segments, "gaps": self.gaps, "duplicates": self.duplicates,
                "late": self.late, "malformed": dict(sorted(self.malformed.items())),
                "malformed_total": sum(self.malformed.values())}


def read_transitions(path: Path, states: StateMap, sample_period: float | None = None,
                     keep: bool = False) -> TransitionData:
    """Transition counts of a calibration file (module docstring); with ``keep``, also each
    transition with its time and the state before its source (``trans_ts``/``trans``)."""
    data = TransitionData(np.zeros((states.k, states.k), dtype=np.int64))
    tracker = StepTracker(sample_period, max_missing=1)
    prev: int | None = None
    prev2: int | None = None  # the reading before ``prev`` in the same run
    prev_ts = 0.0
    phys = 0
    with open(path, "rb") as fh:
        for line in fh:
            line = line.rstrip(b"\r\n")
            if not line.strip():
                continue
            data.lines += 1
            rec = parse_frame(line, states, now=_NO_CLOCK, last_ts=None)
            ts = rec.ts if rec.ts is not None and rec.ts != _NO_CLOCK else None
            if ts is None and sample_period is not None:
                if isinstance(rec, RawRecord):
                    rec = None  # no time: cannot be placed on the grid
                data.malformed["missing-ts" if rec is None else rec.reason] += 1
                prev = None
                continue
            step = tracker.classify(ts)
            if step.duplicate:
                data.duplicates += 1
                continue
            if not step.new:
                data.late += 1
                continue
            if step.missing:
                data.gaps += 1
                prev = None
            tracker.taken(ts, phys)
            phys += 1
            if not isinstance(rec, RawRecord):
                data.malformed[rec.reason] += 1
                prev = None
                continue
            data.steps += 1
            if prev is None:
                data.segments += 1
                prev2 = None
            else:
                data.counts[prev, rec.state] += 1
                if keep:
                    data.trans_ts.append(prev_ts)
                    data.trans.append((-1 if prev2 is None else prev2, prev, rec.state))
                prev2 = prev
            prev = rec.state
            prev_ts = ts if ts is not None else 0.0
    return data
