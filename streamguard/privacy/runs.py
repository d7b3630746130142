"""Non-negative weights on integer positions, kept as run-lengths.

:class:`Runs` holds ρ_j ≥ 0 for every position j as maximal runs [start, end] of one value > 0
(positions outside every run carry 0); adding x to every position of [lo, hi] costs
O(log n + runs overlapped). The quilt accountant keeps its loads ρ_j = Σ L_k/β_k in one
(notes/002 §4.7–4.8: "persist ρ run-lengths"); a stream's channel book keeps the Σ ε of the
``ldp_x`` claims of the channels that released each record in another.
"""

from __future__ import annotations

import bisect

import numpy as np
from numpy.typing import NDArray


class Runs:
    """Run-length weights (module docstring). Runs are ordered, disjoint and non-empty, with value
    > 0; neighbouring runs of equal value are merged."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._vals: list[float] = []

    def __len__(self) -> int:
        return len(self._starts)

    def copy(self) -> Runs:
        out = Runs()
        out._starts, out._ends, out._vals = list(self._starts), list(self._ends), list(self._vals)
        return out

    def segments(self) -> list[tuple[int, int, float]]:
        """The runs as [(start, end, value)], inclusive positions."""
        return list(zip(self._starts, self._ends, self._vals))

    def append(self, start: int, end: int, value: float) -> None:
        """Add a run after every existing one (restoring a stored state); ValueError if it is not
        after the last, empty, or of value ≤ 0."""
        if (self._ends and start <= self._ends[-1]) or end < start or not value > 0.0:
            raise ValueError("segments must be ordered, disjoint, non-empty, with value > 0")
        self._starts.append(start)
        self._ends.append(end)
        self._vals.append(value)

    def _slice(self, i: int, j: int) -> list[tuple[int, int, float]]:
        return list(zip(self._starts[i:j], self._ends[i:j], self._vals[i:j]))

    def _split(self, pos: int) -> None:
        """Make ``pos`` the start of a run if it lies strictly inside one."""
        j = bisect.bisect_right(self._starts, pos) - 1
        if j >= 0 and self._starts[j] < pos <= self._ends[j]:
            self._starts.insert(j + 1, pos)
            self._ends.insert(j + 1, self._ends[j])
            self._vals.insert(j + 1, self._vals[j])
            self._ends[j] = pos - 1

    def add(self, lo: int, hi: int, x: float) -> None:
        """ρ_j += x for j in [lo, hi] (x > 0)."""
        self._split(lo)
        self._split(hi + 1)
        i = bisect.bisect_left(self._starts, lo)
        j = bisect.bisect_right(self._starts, hi)
        pieces: list[tuple[int, int, float]] = []
        cursor = lo
        for s, e, v in zip(self._starts[i:j], self._ends[i:j], self._vals[i:j]):
            if cursor < s:
                pieces.append((cursor, s - 1, x))
            pieces.append((s, e, v + x))
            cursor = e + 1
        if cursor <= hi:
            pieces.append((cursor, hi, x))
        lo_i = i - 1 if i > 0 and self._ends[i - 1] == lo - 1 else i  # neighbours that may merge
        hi_j = j + 1 if j < len(self._starts) and self._starts[j] == hi + 1 else j
        pieces = self._slice(lo_i, i) + pieces + self._slice(j, hi_j)
        merged: list[tuple[int, int, float]] = []
        for s, e, v in pieces:
            if merged and merged[-1][1] == s - 1 and merged[-1][2] == v:
                merged[-1] = (merged[-1][0], e, v)
            else:
                merged.append((s, e, v))
        self._starts[lo_i:hi_j] = [p[0] for p in merged]
        self._ends[lo_i:hi_j] = [p[1] for p in merged]
        self._vals[lo_i:hi_j] = [p[2] for p in merged]

    def segments_in(self, first: int, last: int) -> list[tuple[int, int, float]]:
        """The runs that share a position with [first, last], clipped to it."""
        out = []
        j = max(bisect.bisect_right(self._starts, first) - 1, 0)
        while j < len(self._starts) and self._starts[j] <= last:
            s, e = max(self._starts[j], first), min(self._ends[j], last)
            if s <= e:
                out.append((s, e, self._vals[j]))
            j += 1
        return out

    def dense(self, first: int, last: int) -> NDArray[np.float64]:
        """ρ at positions first..last as an array (O(length + runs overlapping))."""
        out = np.zeros(last - first + 1)
        for s, e, v in self.segments_in(first, last):
            out[s - first : e - first + 1] += v
        return out
