"""What a step of the chain is: one reading, however many times its frame arrives (DESIGN.md §3).

The model counts steps, so a frame that is counted twice (an MQTT QoS 1 redelivery: the same bytes,
the same ``ts``) puts a phantom step between a private reading and its neighbours, and the plan's
rows then under-protect it (issue 9 item 6: up to 5.8× ε). The rule:

- **Without a sample period** every distinct timestamp is a step. A frame whose ``ts`` equals that
  of a recent step is a redelivery of it; a frame whose ``ts`` is earlier than the newest step's is
  a late copy or a clock error. Neither makes a new step. (A frame without ``ts`` is stamped with
  the daemon's clock and is always a new step: a redelivered frame can only be recognised by its
  ``ts`` — or by a sample period.)
- **With a sample period** ``T`` the steps are the slots of a grid anchored at the first frame:
  slot(t) = round((t − anchor)/T). A frame in a slot already seen is a redelivery; slots skipped
  between two frames are missing readings, which still occupy their steps (redacted with
  probability 1, like a malformed frame): the distances of the model stay the sensor's.

A redelivery that asks to be private still marks the step it repeats (fail closed). The tracker
only numbers steps; the privatizer core applies them.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

#: Steps remembered for recognising redeliveries.
MEMORY = 4096


@dataclass(frozen=True)
class Step:
    """The verdict for one frame: ``new`` whether it is a step of its own; ``duplicate`` whether
    it repeats a step already seen (the same ``ts``, or slot); ``repeat`` the physical index of the
    step it repeats, or — for a late frame — of the remembered step nearest in time (None: older
    than the memory); ``missing`` the times of the slots skipped before a new step."""

    new: bool
    repeat: int | None = None
    missing: tuple[float, ...] = ()
    duplicate: bool = False
    #: The time cannot be placed on the sample grid (too far from its anchor to count slots).
    unusable: bool = False


#: The verdict for a new step with no slot skipped before it (most frames).
_NEW = Step(True)


class StepTracker:
    """Recognises the steps of one stream (see module docstring). The owner numbers the steps and
    calls :meth:`taken` with each step's time and physical index as it pushes it."""

    def __init__(self, sample_period: float | None, *, max_missing: int, floor: float | None = None) -> None:
        self.period = sample_period
        self.max_missing = max_missing
        #: The newest step's time before a restart (persisted): a frame at or before it is a
        #: redelivery from the previous run or a late frame, never a new step.
        self.floor = floor
        #: The newest time of a step taken (to persist).
        self.newest_ts: float | None = floor
        self._by_key: OrderedDict[float, int] = OrderedDict()  # ts (or slot) → physical index
        self._newest: float | None = None
        self._anchor: float | None = None

    def _key(self, t: float) -> float | None:
        """The step key of time t: t itself, or its slot on the sample grid (None: no slot can be
        counted, the time lies too far from the anchor)."""
        if self.period is None:
            return t
        if self._anchor is None:
            self._anchor = t
        slots = (t - self._anchor) / self.period
        if not abs(slots) < 2.0**52:  # beyond it (or inf) slots cannot be counted one by one
            return None
        return float(round(slots))

    def classify(self, t: float | None) -> Step:
        """The verdict for a frame at time ``t`` (None: no usable time — a new step)."""
        if t is None or not math.isfinite(t):
            return _NEW
        if self.floor is not None and t <= self.floor:
            return Step(False, None, duplicate=t == self.floor)
        key = self._key(t)
        if key is None:
            return Step(False, unusable=True)
        if key in self._by_key:
            return Step(False, self._by_key[key], duplicate=True)
        if self._newest is not None and key < self._newest:
            return Step(False, self._nearest(key))
        if self.period is not None and self._newest is not None and key > self._newest + 1:
            skipped = int(min(key - self._newest - 1, self.max_missing))
            assert self._anchor is not None
            return Step(True, None, tuple(self._anchor + (self._newest + i) * self.period for i in range(1, skipped + 1)))
        return _NEW

    def taken(self, t: float | None, phys: int) -> None:
        """Record that physical index ``phys`` went to a step at time ``t`` (None: unknown)."""
        if t is None or not math.isfinite(t):
            return
        key = t if self.period is None else self._key(t)
        if key is None:
            return
        if self.newest_ts is None or t > self.newest_ts:
            self.newest_ts = t
        by_key = self._by_key
        by_key[key] = phys
        if self._newest is None or key > self._newest:
            self._newest = key
        if len(by_key) > MEMORY:
            by_key.popitem(last=False)  # (one key in, at most one out)

    def _nearest(self, key: float) -> int | None:
        """The remembered step closest in time to a late frame (None: older than the memory)."""
        if not self._by_key or key < next(iter(self._by_key)):
            return None
        return min(self._by_key.items(), key=lambda kv: abs(kv[0] - key))[1]
