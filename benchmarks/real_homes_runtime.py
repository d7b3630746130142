"""Real homes, the real runtime (issue 25 item 6; used by :mod:`benchmarks.real_homes`).

The product's redaction runtime (``streamguard.stream.redaction_runtime.RedactionRuntime``, in
process, as tests/test_block_drift.py drives it) is configured with the calibrated MODEL.json
(``[streams.model] file``, what the daemon reads), the trace's labels and sample period and ε, and
is fed the held-out readings as frames in time order (``now`` = the frame's time). Two marks a day:
the reading at 08:30 and at 20:30 local time (or the first reading after it, within the hour) carries
``"private": true``. Slots without a reading are what the runtime makes of them (missing readings:
steps redacted with probability 1).

Collected, per slot of the fed span: the redaction row the runtime used (``take_decisions``: every
step, missing ones included), whether the record was published redacted; per mark the runtime's own
report (honoured, figure); the drift guard's alarm (the first frame time at which it was up) and
status; the released / redacted counters. The leakage of the rows actually used is evaluated by the
caller, with its own evaluator (the runtime's figures are not trusted for it).
"""

from __future__ import annotations

import json
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from streamguard.config import Settings
from streamguard.sampling import SeededSource
from streamguard.stream.redaction_runtime import RedactionRuntime

#: Local clock times of the two daily marks (seconds after midnight).
MARK_CLOCKS = (8.5 * 3600.0, 20.5 * 3600.0)
DAY = 86400.0


@dataclass(frozen=True)
class RuntimeRun:
    """What the runtime did on the fed span: slot i is ``t0 + i · period``."""

    t0: float
    #: (slots, 2): Pr(⊥ | x) used at each slot (a missing reading: 1, 1).
    rows: np.ndarray
    #: (slots,): a reading was fed at the slot / it was published redacted.
    fed: np.ndarray
    redacted: np.ndarray
    #: Slot of each mark, and the runtime's final report of it (privatizer ``Mark.report``).
    mark_slots: np.ndarray
    mark_reports: list[dict[str, Any]]
    #: The plan's horizons (left, right) and design, as the runtime states them.
    horizons: tuple[int, int]
    design: str
    released: int
    redacted_records: int
    #: Time of the first frame after which the drift alarm was up (None: never), and the guard's status.
    drift_ts: float | None
    drift: dict[str, Any]
    #: The runtime's plan certified over the model set (``RobustStreamPlan``; None for a single chain).
    robust: Any


def mark_indices(ts: np.ndarray, utc_offset: float) -> np.ndarray:
    """Indices of the readings that carry the day's marks: per day and mark clock, the first reading
    at or after it, less than an hour later (none that day otherwise)."""
    local = ts + utc_offset
    out = []
    for day in np.unique(np.floor(local / DAY)):
        for clock in MARK_CLOCKS:
            target = day * DAY + clock
            i = int(np.searchsorted(local, target))
            if i < ts.size and local[i] < target + 3600.0:
                out.append(i)
    return np.array(sorted(out), dtype=np.int64)


def run_runtime(ts: np.ndarray, states: np.ndarray, labels: tuple[str, str], period: float, utc_offset: float,
                model: Path, epsilon: float) -> RuntimeRun:
    """Feed the readings (``ts`` increasing, on the ``period`` grid) to a fresh runtime over ``model``."""
    flagged = np.zeros(ts.size, dtype=bool)
    flagged[mark_indices(ts, utc_offset)] = True
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(device="real-homes", broker={"host": "127.0.0.1"},
                            outbox={"path": Path(tmp) / "outbox.sqlite"},
                            streams=[{"name": "trace", "labels": list(labels), "model": {"file": str(model)},
                                      "epsilon": epsilon, "sample_period": period}])
        rt = RedactionRuntime(settings, settings.streams[0], SeededSource(25))
        decisions: list[tuple[float, ...]] = []
        released: dict[int, tuple[float, bool]] = {}  # phys → (ts, published redacted)
        marks: dict[int, dict[str, Any]] = {}
        drift_ts = None

        def collect(releases: list[Any]) -> None:
            for r in releases:
                released[r.phys] = (r.ts, r.redacted)
            decisions.extend(rt.take_decisions())
            for rec in rt.mark_records().values():
                pos = rec["report"]["position"]
                if pos is None:  # (a mark whose position the runtime no longer knows: never expected here)
                    raise RuntimeError("the runtime lost a mark's position")
                marks[pos] = rec["report"]

        for t, s, private in zip(ts.tolist(), states.tolist(), flagged.tolist()):
            frame = {"value": labels[s], "ts": t, **({"private": True} if private else {})}
            got, rejected = rt.on_frame(json.dumps(frame).encode(), now=t)
            if rejected is not None:
                raise RuntimeError(f"the runtime rejected a frame: {rejected.reason}")
            collect(got)
            if drift_ts is None and rt.drift is not None and rt.drift.alarm:
                drift_ts = t
        collect(rt.drain())
        drift = {} if rt.drift is None else rt.drift.status()
        horizons, design = (rt.plan.left_horizon, rt.plan.right_horizon), rt.plan.design
        counters, robust = rt.counters, rt.robust
    return _on_slots(ts, period, decisions, released, marks, horizons, design, counters.released,
                     counters.redacted, drift_ts, drift, robust)


def _on_slots(ts: np.ndarray, period: float, decisions: list[tuple[float, ...]],
              released: dict[int, tuple[float, bool]], marks: dict[int, dict[str, Any]], horizons: tuple[int, int],
              design: str, n_released: int, n_redacted: int, drift_ts: float | None,
              drift: dict[str, Any], robust: Any) -> RuntimeRun:
    """Place the runtime's positions on the slot grid from the first reading; every published record's
    own time must fall on its position's slot (else the runtime numbered the steps otherwise)."""
    t0 = float(ts[0])
    phys0 = min(p for p, (t, _) in released.items() if t == t0)
    n = int(round((ts[-1] - t0) / period)) + 1
    rows = np.full((n, 2), np.nan)
    for d in decisions:
        if 0 <= int(d[0]) - phys0 < n:
            rows[int(d[0]) - phys0] = d[1:]
    if np.isnan(rows).any():
        raise RuntimeError("the runtime left slots of the fed span undecided")
    fed, redacted = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    for p, (t, red) in released.items():
        if not math.isclose(t0 + (p - phys0) * period, t):
            raise RuntimeError(f"position {p} holds a record at {t}, not on its slot")
        fed[p - phys0], redacted[p - phys0] = True, red
    slots = np.array(sorted(p - phys0 for p in marks), dtype=np.int64)
    return RuntimeRun(t0, rows, fed, redacted, slots, [marks[s + phys0] for s in slots], horizons, design,
                      n_released, n_redacted, drift_ts, drift, robust)
