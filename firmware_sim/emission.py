"""How a simulated sensor writes a Markov state into a frame: a label, or a number in a per-state range.

The daemon maps a raw ``value`` back to a state either by label or by numeric bins; an emission here
is the sensor side of that contract, and :meth:`state_of` is the mapping a correct daemon applies.
A :class:`Sensitive` attribute is an optional second field ``"s"`` drawn given the state.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

#: Labels of a binary stream when none are given.
DEFAULT_BINARY_LABELS = ("vacant", "occupied")


def default_labels(k: int) -> Labels:
    """``vacant``/``occupied`` for a binary chain, ``s0``..``s{k-1}`` otherwise."""
    return Labels(DEFAULT_BINARY_LABELS if k == 2 else tuple(f"s{i}" for i in range(k)))


@dataclass(frozen=True)
class Labels:
    """State i is written as the string ``names[i]``."""

    names: tuple[str, ...]

    def __post_init__(self) -> None:
        names = tuple(self.names)
        object.__setattr__(self, "names", names)
        if len(names) < 2 or not all(isinstance(n, str) and n for n in names):
            raise ValueError("labels: need at least two non-empty strings")
        if len(set(names)) != len(names):
            raise ValueError("labels: must be distinct")

    @property
    def k(self) -> int:
        """Number of states."""
        return len(self.names)

    def value(self, state: int, rng: np.random.Generator) -> str:
        """The label of ``state`` (draws nothing)."""
        return self.names[state]

    def state_of(self, value: object) -> int | None:
        """The state a label names, or None."""
        return self.names.index(value) if isinstance(value, str) and value in self.names else None

    def unknown_label(self) -> str:
        """A string that is no label: longer than every label."""
        return "unknown:" + max(self.names, key=len)

    def out_of_range(self, rng: np.random.Generator) -> int:
        """A number that names no state: the state index k."""
        return self.k


@dataclass(frozen=True)
class NumericRanges:
    """State i is written as a float drawn uniformly from the half-open range ``ranges[i]``.

    The ranges must be finite, non-empty and pairwise disjoint, so that numeric bins recover the
    state; they need not be sorted.
    """

    ranges: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        ranges = tuple((float(lo), float(hi)) for lo, hi in self.ranges)
        object.__setattr__(self, "ranges", ranges)
        if len(ranges) < 2:
            raise ValueError("numeric ranges: need at least two states")
        if not all(math.isfinite(lo) and math.isfinite(hi) and lo < hi for lo, hi in ranges):
            raise ValueError("numeric ranges: each must be finite with low < high")
        ordered = sorted(ranges)
        if any(prev[1] > nxt[0] for prev, nxt in zip(ordered, ordered[1:])):
            raise ValueError("numeric ranges: must not overlap")

    @property
    def k(self) -> int:
        """Number of states."""
        return len(self.ranges)

    def value(self, state: int, rng: np.random.Generator) -> float:
        """A uniform draw from ``[low, high)`` of ``state``."""
        lo, hi = self.ranges[state]
        v = lo + (hi - lo) * float(rng.random())
        return v if v < hi else math.nextafter(hi, lo)

    def state_of(self, value: object) -> int | None:
        """The state whose range holds a (non-bool) number, or None."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        return next((i for i, (lo, hi) in enumerate(self.ranges) if lo <= value < hi), None)

    def unknown_label(self) -> str:
        """A string where a number is expected."""
        return "unknown"

    def out_of_range(self, rng: np.random.Generator) -> float:
        """A finite number below or above every range (by up to twice the overall span)."""
        lo = min(r[0] for r in self.ranges)
        hi = max(r[1] for r in self.ranges)
        gap = (hi - lo) * (1.0 + float(rng.random()))
        return lo - gap if rng.random() < 0.5 else hi + gap


Emission = Labels | NumericRanges


@dataclass(frozen=True, eq=False)
class Sensitive:
    """A sensitive attribute S written as ``"s": labels[j]``, drawn with Pr(S = j | X = i) = matrix[i, j]."""

    labels: tuple[str, ...]
    matrix: NDArray[np.float64]

    def __init__(self, labels: Sequence[str], matrix: ArrayLike) -> None:
        m = np.array(matrix, dtype=np.float64)
        names = tuple(labels)
        if len(names) < 2 or len(set(names)) != len(names) or not all(isinstance(n, str) for n in names):
            raise ValueError("sensitive labels: need at least two distinct strings")
        if m.ndim != 2 or m.shape[1] != len(names):
            raise ValueError(f"sensitive matrix: must be k×{len(names)}, got shape {m.shape}")
        if not np.all(np.isfinite(m)) or np.any(m < 0) or not np.allclose(m.sum(axis=1), 1.0, atol=1e-9):
            raise ValueError("sensitive matrix: rows must be probability distributions")
        m.setflags(write=False)
        object.__setattr__(self, "labels", names)
        object.__setattr__(self, "matrix", m)

    def draw(self, state: int, rng: np.random.Generator) -> int:
        """The index of S given the state."""
        return int(rng.choice(len(self.labels), p=self.matrix[state]))
