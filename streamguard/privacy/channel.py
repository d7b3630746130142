"""Local channels: the one abstraction shared by every per-record mechanism (DESIGN.md §2).

At index t a local mechanism is an emission table e_t(y | x) = Pr(Y_t = y | X_t = x): rows are
input states x (k of them), columns output symbols y (m of them), each row a distribution. Redaction
is the special case with outputs {0, …, k−1, ⊥} and e_t(x | x) = 1 − r_t(x), e_t(⊥ | x) = r_t(x).

A :class:`ChannelSequence` stores n such tables compactly as a few distinct tables plus an index
per record, so that a plan over 10⁷ records that is mostly "release" costs one int per record.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

#: Tolerance for "each row of an emission table sums to one".
ROW_TOL = 1e-9


class ChannelError(ValueError):
    """An emission table or redaction table is malformed."""


def _check_tables(tables: NDArray[np.float64], what: str) -> None:
    if tables.ndim != 3 or tables.shape[1] < 2 or tables.shape[2] < 1:
        raise ChannelError(f"{what}: expected shape (count, k, m), got {tables.shape}")
    if not np.all(np.isfinite(tables)):
        raise ChannelError(f"{what}: contains NaN or infinity")
    if np.any(tables < 0):
        raise ChannelError(f"{what}: has negative probabilities")
    sums = tables.sum(axis=2)
    bad = np.argwhere(np.abs(sums - 1.0) > ROW_TOL)
    if bad.size:
        t, x = (int(v) for v in bad[0])
        raise ChannelError(f"{what}: table {t}, input state {x}: row sums to {sums[t, x]:.12g}, not 1")


def check_redaction(red: ArrayLike, k: int = 2) -> NDArray[np.float64]:
    """Validate an (n, k) table of redaction probabilities r_t(x) = Pr(Y_t = ⊥ | X_t = x)."""
    r = np.asarray(red, dtype=np.float64)
    if r.ndim != 2 or r.shape[1] != k:
        raise ChannelError(f"redaction table: expected shape (n, {k}), got {r.shape}")
    if not np.all(np.isfinite(r)) or np.any(r < 0) or np.any(r > 1):
        raise ChannelError("redaction table: probabilities must lie in [0, 1]")
    return r


def redaction_tables(red: NDArray[np.float64]) -> NDArray[np.float64]:
    """(D, k, k+1) emission tables of D redaction rows r(x): outputs 0..k−1, then ⊥ (index k)."""
    D, k = red.shape
    e = np.zeros((D, k, k + 1))
    e[:, np.arange(k), np.arange(k)] = 1.0 - red
    e[:, :, k] = red
    return e


def redaction_table(r: ArrayLike) -> NDArray[np.float64]:
    """The k×(k+1) emission table of one redaction row r(x) (see :func:`redaction_tables`)."""
    return redaction_tables(np.asarray(r, dtype=np.float64)[None])[0]


def revealing(tables: NDArray[np.float64]) -> NDArray[np.bool_]:
    """Per table: does every output identify the input (each column has one non-zero row)?

    Past such a record the rest of a side is independent of the private record given the
    revealed value, so the exact audit may stop there.
    """
    return ((tables > 0).sum(axis=1) <= 1).all(axis=1)


@dataclass(frozen=True)
class ChannelSequence:
    """n local channels as ``tables[index[t]]`` (tables: (c, k, m) float64, index: (n,) int64)."""

    tables: NDArray[np.float64]
    index: NDArray[np.int64]

    def __post_init__(self) -> None:
        tables = np.ascontiguousarray(self.tables, dtype=np.float64)
        index = np.ascontiguousarray(self.index, dtype=np.int64)
        _check_tables(tables, "emission tables")
        if index.ndim != 1:
            raise ChannelError("channel index must be one-dimensional")
        if index.size and (index.min() < 0 or index.max() >= tables.shape[0]):
            raise ChannelError("channel index refers to a table that does not exist")
        object.__setattr__(self, "tables", tables)
        object.__setattr__(self, "index", index)

    @property
    def n(self) -> int:
        return int(self.index.shape[0])

    @property
    def k(self) -> int:
        return int(self.tables.shape[1])

    @property
    def m(self) -> int:
        return int(self.tables.shape[2])

    def table(self, t: int) -> NDArray[np.float64]:
        return self.tables[self.index[t]]

    def dense(self) -> NDArray[np.float64]:
        """The (n, k, m) array of all tables (memory n·k·m floats)."""
        return self.tables[self.index]

    @classmethod
    def from_dense(cls, emissions: ArrayLike) -> ChannelSequence:
        """From an (n, k, m) array of emission tables; identical tables are stored once."""
        E = np.asarray(emissions, dtype=np.float64)
        if E.ndim != 3:
            raise ChannelError(f"emission tables: expected shape (n, k, m), got {E.shape}")
        _check_tables(E, "emission tables")
        flat = E.reshape(E.shape[0], -1)
        uniq, inverse = np.unique(flat, axis=0, return_inverse=True)
        return cls(uniq.reshape((-1,) + E.shape[1:]), inverse.reshape(-1))

    @classmethod
    def from_redaction(cls, red: ArrayLike) -> ChannelSequence:
        """From an (n, k) redaction table: outputs are the k states and ⊥ (last column)."""
        r = np.asarray(red, dtype=np.float64)
        k = r.shape[1] if r.ndim == 2 else 2
        r = check_redaction(r, k)
        # Table 0 is "always release"; only the other rows are de-duplicated (fast for long plans).
        index = np.zeros(r.shape[0], dtype=np.int64)
        rest = np.flatnonzero((r != 0).any(axis=1))
        uniq, inverse = np.unique(r[rest], axis=0, return_inverse=True)
        index[rest] = inverse.reshape(-1) + 1
        return cls(redaction_tables(np.vstack([np.zeros((1, k)), uniq])), index)

    def revealing_tables(self) -> NDArray[np.bool_]:
        """:func:`revealing` of each stored table."""
        return revealing(self.tables)
