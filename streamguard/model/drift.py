"""The pooled drift guard: a sequential test that the live chain has left the model set (issue 11).

The daemon runs the guard per time-of-day block instead (:mod:`.block_drift`, issue 25; docs/
model-sets.md §6), which also sees hour-of-day structure and keeps its evidence across restarts;
this one, all hours pooled, is the baseline ``benchmarks/drift_power.py`` compares it with.

**What it reads.** Only records released *unchanged with probability 1* (an all-zero redaction row:
far from every mark), as they are published: transitions between two such records at consecutive
steps. Everything it uses is already public, so its decision — and the fail-closed reaction — is a
post-processing of the released stream: it costs no privacy budget and needs no ledger charge.

**The test (anytime valid).** The same mixture martingale as calibration (:mod:`.confidence`): for
each row i, the live confidence set of the row at level δ/k. Under the null "the live chain is a
member P of the model set" each row's set contains P[i, ·] at *every* time with probability
≥ 1 − δ/k (Ville's inequality), so the alarm

    some row's live set is disjoint from the model set's possible values of that row

fires with probability ≤ δ over the *whole life* of one guard (union bound over rows), however
often it is checked. A guard lives for one run of the daemon (its counts are not persisted, only a
raised alarm is): over R runs under the same set the false-alarm rate is at most R·δ. Disjointness is checked on each entry's interval (the live set's projection vs
the model set's range of that entry: a box's α, β ranges, a finite set's members exactly, a row-wise
region's entry bounds) — conservative: it can only make alarms rarer.

Assumption for the false-alarm rate (not for privacy): whether a transition is observed does not
depend on where it goes — marks are not placed *because of* the reading they protect or its
neighbours, and missing readings are not caused by their values. Detection delay depends on how far
the live chain is from the set (tests/test_model_drift.py measures it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .confidence import excludes_range, in_row_set, row_threshold
from .modelset import ModelSet

#: The default false-alarm rate over one guard's life (one run of the daemon).
FALSE_ALARM = 1e-3
#: Re-test after this many new observed transitions (any schedule keeps the rate valid).
CHECK_EVERY = 16


@dataclass
class DriftGuard:
    """A drift guard for one stream (module docstring). Feed it released records in step order
    with :meth:`released`; :attr:`alarm` says whether it fired (it stays fired)."""

    model_set: ModelSet
    false_alarm: float = FALSE_ALARM
    check_every: int = CHECK_EVERY
    counts: NDArray[np.int64] = field(init=False)
    alarm: bool = field(default=False, init=False)
    #: Observed transitions when the alarm fired, and the row that fired it.
    fired_at: int | None = field(default=None, init=False)
    fired_row: int | None = field(default=None, init=False)
    #: The alarm was raised before a restart and restored from the ledger.
    restored: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        if not 0.0 < self.false_alarm < 1.0:
            raise ValueError("the drift guard's false-alarm rate must lie strictly between 0 and 1")
        k = self.model_set.k
        self.counts = np.zeros((k, k), dtype=np.int64)
        self._ranges = self._entry_ranges()
        self._prev: tuple[int, int] | None = None  # (physical index, state) of the last free record
        self._since = 0

    def _entry_ranges(self) -> NDArray[np.float64] | None:
        """(k, k, 2) range of each entry over the set (None for a finite set: checked exactly)."""
        ms = self.model_set
        if ms.kind == "finite":
            return None
        if ms.kind == "box":
            (a0, a1), (b0, b1) = ms.box  # type: ignore[misc]
            return np.array([[[1 - a1, 1 - a0], [a0, a1]], [[b0, b1], [1 - b1, 1 - b0]]])
        assert ms.bounds is not None
        return ms.bounds

    @property
    def transitions(self) -> int:
        return int(self.counts.sum())

    def released(self, phys: int, state: int | None, row: tuple[float, ...]) -> bool:
        """One decided record (physical index, released state or None, row used). Only records
        released with an all-zero row are read. Returns True when this record made the alarm fire."""
        if state is None or any(row):
            self._prev = None
            return False
        prev, self._prev = self._prev, (phys, state)
        if prev is None or prev[0] != phys - 1 or self.alarm:
            return False
        self.counts[prev[1], state] += 1
        self._since += 1
        if self._since >= self.check_every:
            self._since = 0
            return self.check()
        return False

    def check(self) -> bool:
        """Run the test now; True when it fires now."""
        if self.alarm:
            return False
        k = self.model_set.k
        delta_row = self.false_alarm / k
        thresholds = [row_threshold(self.counts[i], delta_row) for i in range(k)]
        if self._ranges is None:  # finite set: every member must be excluded by some row
            if all(any(not in_row_set(self.counts[i], m.matrix[i], thresholds[i]) for i in range(k))
                   for m in self.model_set.members):
                self._fire(None)
        else:
            for i in range(k):
                if any(excludes_range(self.counts[i], thresholds[i], j, *self._ranges[i, j]) for j in range(k)):
                    self._fire(i)
                    break
        return self.alarm

    def restore(self, transitions: int) -> None:
        """The alarm was raised before a restart (after ``transitions`` observed transitions) under
        this model set: it holds again from the start (docs/model-sets.md §6, recovery rule)."""
        self.alarm, self.fired_at, self.restored = True, int(transitions), True

    def _fire(self, row: int | None) -> None:
        self.alarm, self.fired_at, self.fired_row = True, self.transitions, row

    def status(self) -> dict[str, Any]:
        """The guard's part of the privacy status."""
        return {"drift": self.alarm, "false_alarm_rate": self.false_alarm, "observed_transitions": self.transitions,
                "fired_at_transitions": self.fired_at, "fired_row": self.fired_row, "restored": self.restored,
                "reads": "only records released unchanged (an all-zero row): post-processing, no budget"}
