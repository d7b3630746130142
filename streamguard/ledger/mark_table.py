"""The marks of a stream kept as one packed table: ~100 bytes per mark instead of ~730.

:class:`~streamguard.ledger.mark_history.MarkHistory` keeps the marks that changed lately as
:class:`~streamguard.ledger.mark_history.MarkSummary` objects and moves the others here when it
is frozen (at each summary checkpoint, ``ledger/checkpoint.py``). A row holds exactly the fields
of a summary; strings (plans, reasons) are stored once in :attr:`MarkTable.strings` and referred
to by index. Rows are sorted by the mark's key (its first event's ``order``, then its ledger id),
so a mark is found by its name with a binary search and the table is in mark order.

The key is packed into two integers: ``major`` = kind·2⁶¹ + value (kind 0: position, 1: seq,
2: value 0) and ``minor`` = the first event's id. A mark's name determines its major for kinds 0
and 1 (``"17"``, ``"seq:17"``) and its minor for kind 2 (``"event:12"``, always value 0), so the
name finds one row. A value of 2⁶¹ or more cannot be packed: :meth:`MarkTable.packable` says so,
and such a mark stays an object.

The table's bytes are the checkpoint's record of the marks (:meth:`MarkTable.to_bytes`): reading
them back creates no Python object per mark.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    from .mark_history import MarkSummary

KIND_SHIFT = 61
VALUE_LIMIT = 1 << KIND_SHIFT
NONE = -1  # a position, seq or reason that is None

ROW = np.dtype([("major", "<i8"), ("minor", "<i8"), ("position", "<i8"), ("seq", "<i8"), ("plan", "<i4"),
                ("reason", "<i4"), ("epsilon", "<f8"), ("total", "<f8"), ("left", "<f8"), ("right", "<f8"),
                ("events", "<i8"), ("honoured", "?")])


def packed_key(key: tuple[tuple[int, int], int]) -> tuple[int, int]:
    """(major, minor) of a mark's key ((kind, value), first event id) (module docstring)."""
    (kind, value), first = key
    return (kind << KIND_SHIFT) | value, first


def _name(major: int, minor: int) -> str:
    kind, value = major >> KIND_SHIFT, major & (VALUE_LIMIT - 1)
    return str(value) if kind == 0 else f"seq:{value}" if kind == 1 else f"event:{minor}"


def _name_key(name: str) -> tuple[int, int | None] | None:
    """(major, minor or None when the major alone finds the mark) of a mark's name; None if the
    name is no mark's."""
    kind, _, digits = name.rpartition(":")
    if not digits.isdigit() or kind not in ("", "seq", "event"):
        return None
    value = int(digits)
    if kind == "event":
        return 2 << KIND_SHIFT, value
    return (1 << KIND_SHIFT if kind == "seq" else 0) | value, None


class MarkTable:
    """Packed marks in mark order (module docstring). Immutable: :meth:`merged` returns a new one."""

    def __init__(self, rows: NDArray[np.void] | None = None, strings: list[str] | None = None) -> None:
        self.rows = np.zeros(0, ROW) if rows is None else rows
        self.strings = [] if strings is None else strings
        self._index = {s: i for i, s in enumerate(self.strings)}
        # (contiguous copies of the key: a search in a strided field copies it first, O(n) a lookup)
        self._major = np.ascontiguousarray(self.rows["major"])
        self._minor = np.ascontiguousarray(self.rows["minor"])

    def __len__(self) -> int:
        return len(self.rows)

    @staticmethod
    def packable(mark: MarkSummary) -> bool:
        """Whether the mark's key fits a row (its value below 2⁶¹)."""
        return mark.key[0][1] < VALUE_LIMIT

    def _row(self, name: str) -> int | None:
        key = _name_key(name)
        if key is None or not len(self.rows):
            return None
        major, minor = key
        majors = self._major
        lo = int(np.searchsorted(majors, major, "left"))
        if minor is None:
            return lo if lo < len(majors) and majors[lo] == major else None
        hi = int(np.searchsorted(majors, major, "right"))
        i = lo + int(np.searchsorted(self._minor[lo:hi], minor, "left"))
        return i if i < hi and self._minor[i] == minor else None

    def __contains__(self, name: str) -> bool:
        return self._row(name) is not None

    def get(self, name: str) -> MarkSummary | None:
        """A fresh summary of the mark called ``name`` (None if it has no row)."""
        i = self._row(name)
        return None if i is None else self._summary(self.rows[i])

    def _summary(self, r: np.void) -> MarkSummary:
        from .mark_history import MarkSummary

        major, minor = int(r["major"]), int(r["minor"])
        kind, value = major >> KIND_SHIFT, major & (VALUE_LIMIT - 1)
        position, seq, reason = int(r["position"]), int(r["seq"]), int(r["reason"])
        return MarkSummary(((kind, value), minor), None if position == NONE else position,
                           None if seq == NONE else seq, self.strings[int(r["plan"])], float(r["epsilon"]),
                           float(r["total"]), float(r["left"]), float(r["right"]), bool(r["honoured"]),
                           None if reason == NONE else self.strings[reason], int(r["events"]))

    def keyed(self, start: int = 0) -> Iterator[tuple[tuple[int, int], str]]:
        """((major, minor), name) of the rows from ``start`` on, in mark order."""
        for major, minor in zip(self._major[start:].tolist(), self._minor[start:].tolist()):
            yield (major, minor), _name(major, minor)

    def _intern(self, strings: list[str], index: dict[str, int], s: str | None) -> int:
        if s is None:
            return NONE
        i = index.get(s)
        if i is None:
            i = index[s] = len(strings)
            strings.append(s)
        return i

    def merged(self, marks: Iterable[tuple[str, MarkSummary]]) -> MarkTable:
        """A table with ``marks`` (name, summary; each packable) added: a mark with a row already
        replaces it."""
        strings, index = list(self.strings), dict(self._index)
        rows, new = self.rows, []
        for name, m in marks:
            major, minor = packed_key(m.key)
            row = (major, minor, NONE if m.position is None else m.position, NONE if m.seq is None else m.seq,
                   self._intern(strings, index, m.plan), self._intern(strings, index, m.reason), m.epsilon, m.total,
                   m.left, m.right, m.events, m.honoured)
            i = self._row(name)
            if i is None:
                new.append(row)
            else:
                if rows is self.rows:  # (copied once, and only if a row changes)
                    rows = rows.copy()
                rows[i] = row
        if new:
            added = np.array(new, ROW)
            added = added[np.lexsort((added["minor"], added["major"]))]
            after = not len(rows) or (int(added["major"][0]), int(added["minor"][0])) > (int(self._major[-1]),
                                                                                           int(self._minor[-1]))
            rows = np.concatenate([rows, added])
            if not after:  # (marks mostly come in position order: then they all sort after the table)
                rows = rows[np.lexsort((rows["minor"], rows["major"]))]
        return MarkTable(rows, strings)

    def to_bytes(self) -> memoryview:
        """The rows, packed (little-endian, :data:`ROW`; a view, not a copy); the strings go beside them."""
        return memoryview(np.ascontiguousarray(self.rows)).cast("B")

    @classmethod
    def from_bytes(cls, data: bytes | memoryview, strings: list[str]) -> MarkTable:
        """The table :meth:`to_bytes` wrote, with its strings; the rows are a read-only view of
        ``data`` (no copy: :meth:`merged` copies). ValueError if the bytes are not whole rows in
        mark order, or refer to a string that is not there."""
        if len(data) % ROW.itemsize:
            raise ValueError("mark table: not a whole number of rows")
        rows = np.frombuffer(data, ROW)
        if len(rows):
            major, minor = rows["major"], rows["minor"]
            ascending = (major[1:] > major[:-1]) | ((major[1:] == major[:-1]) & (minor[1:] > minor[:-1]))
            if not ascending.all():
                raise ValueError("mark table: rows not in mark order")
            refs = np.concatenate([rows["plan"], rows["reason"][rows["reason"] != NONE]])
            if refs.min() < 0 or refs.max() >= len(strings):
                raise ValueError("mark table: a string index out of range")
        return cls(rows, list(strings))
