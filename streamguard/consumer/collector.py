"""Collected streams: de-duplication, gaps, order, and the retained status each stream follows.

Delivery is at least once (QoS 1, resends after a reconnect or a daemon restart), and batches of
several streams may interleave, so a consumer must:

- **de-duplicate** records by (device, stream, seq): the privatizer decides a record once and a
  resend carries the stored bytes, so a second copy is identical; a copy that differs is a
  *conflict* (two writers for one stream, or a tampered message) and is counted, first copy kept;
- **restore order** by seq (:meth:`StreamLog.ordered`);
- **detect gaps** in grid steps: a record's ``position`` is its physical step (the chain's time,
  the resampler's grid slot), so the steps missing between the first and the newest record
  received are counted by position (:meth:`StreamLog.position_gaps`) — a lost record and a step
  the producer published nothing for (a rejected frame, a missing or stale reading) alike, as the
  consumer cannot tell them apart; the records known lost are the seqs missing
  (:meth:`StreamLog.gaps`). A consumer that joined late counts nothing before its first record;
- **follow the status**: the newest privacy status of the stream (retained, re-published as it
  changes) is what estimates and audits use; a status with a smaller ``next_seq`` than the one
  held (an old copy delivered late) does not replace it.

Aggregate windows are de-duplicated by (device, stream, query index, lo). Memory is bounded: a
stream keeps at most ``limit`` records and ``limit`` windows (the ones received first are dropped
and counted in ``evicted``; a copy of an evicted record that arrives again counts as new).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..stream.transport import Message
from .messages import DeviceStatus, Item, Malformed, Record, Status, Window, parse

#: Records kept per stream by default.
DEFAULT_LIMIT = 1_000_000


@dataclass
class StreamLog:
    """Everything received for one (device, stream)."""

    device: str
    stream: str
    limit: int = DEFAULT_LIMIT
    records: dict[int, Record] = field(default_factory=dict)
    duplicates: int = 0
    conflicts: int = 0
    #: Records that arrived after a record with a larger seq (restored to order).
    reordered: int = 0
    evicted: int = 0
    windows: dict[tuple[int, int], Window] = field(default_factory=dict)
    window_duplicates: int = 0
    status: dict[str, Any] | None = None
    statuses: int = 0
    #: Every restart position any status named (an unknown number of readings precede each).
    restarts: set[int] = field(default_factory=set)
    _newest: int = -1

    def add_record(self, r: Record) -> None:
        old = self.records.get(r.seq)
        if old is not None:
            self.duplicates += 1
            if old != r:
                self.conflicts += 1
            return
        if r.seq < self._newest:
            self.reordered += 1
        self._newest = max(self._newest, r.seq)
        self.records[r.seq] = r
        if len(self.records) > self.limit:  # drop the record received first (O(1): dicts keep order)
            del self.records[next(iter(self.records))]
            self.evicted += 1

    def add_window(self, w: Window) -> None:
        key = (w.index, w.lo)
        if key in self.windows:
            self.window_duplicates += 1
            return
        self.windows[key] = w
        if len(self.windows) > self.limit:
            del self.windows[next(iter(self.windows))]
            self.evicted += 1

    def ordered(self) -> list[Record]:
        """The records received, by seq."""
        return [self.records[s] for s in sorted(self.records)]

    def gaps(self) -> list[tuple[int, int]]:
        """Missing seq ranges [lo, hi] between the first and the newest record received."""
        seqs = sorted(self.records)
        return [(a + 1, b - 1) for a, b in zip(seqs, seqs[1:]) if b > a + 1]

    def missing(self) -> int:
        """Records known lost: the seqs missing between the first and the newest received."""
        return sum(hi - lo + 1 for lo, hi in self.gaps())

    def position_gaps(self) -> list[tuple[int, int]]:
        """Grid steps without a received record, as ranges [lo, hi] of positions between the first
        and the newest record received (a record without a position, from a producer before
        positions, is placed at its seq)."""
        pos = sorted({r.position if r.position is not None else r.seq for r in self.records.values()})
        return [(a + 1, b - 1) for a, b in zip(pos, pos[1:]) if b > a + 1]

    @property
    def mechanism(self) -> str | None:
        """"redaction" or "channel" from the records, else from the status (None: unknown)."""
        for r in self.records.values():
            return r.mechanism
        if self.status is not None:
            mech = str(self.status.get("mechanism", ""))
            return "channel" if mech.startswith("per-record channel") else "redaction" if "3R" in mech else None
        return None


def _older(new: dict[str, Any], current: dict[str, Any] | None) -> bool:
    """Is status ``new`` older than ``current``? Their ``next_seq`` only grows (across restarts too),
    so a smaller one is an old status delivered late (a queued copy after the retained one)."""
    if current is None:
        return False
    a, b = new.get("next_seq"), current.get("next_seq")
    return isinstance(a, int) and isinstance(b, int) and a < b


@dataclass
class Collector:
    """Streams by (device, stream), device statuses, and counters of what could not be used."""

    base: str
    limit: int = DEFAULT_LIMIT
    streams: dict[tuple[str, str], StreamLog] = field(default_factory=dict)
    devices: dict[str, str] = field(default_factory=dict)
    malformed: dict[str, int] = field(default_factory=dict)
    messages: int = 0

    def log(self, device: str, stream: str) -> StreamLog:
        key = (device, stream)
        if key not in self.streams:
            self.streams[key] = StreamLog(device, stream, self.limit)
        return self.streams[key]

    def feed(self, message: Message) -> list[Item]:
        """Take one MQTT message; returns its items."""
        self.messages += 1
        items = parse(message, self.base)
        for it in items:
            self.add(it)
        return items

    def feed_all(self, messages: Iterable[Message]) -> None:
        for m in messages:
            self.feed(m)

    def add(self, it: Item) -> None:
        if isinstance(it, Record):
            self.log(it.device, it.stream).add_record(it)
        elif isinstance(it, Window):
            self.log(it.device, it.stream).add_window(it)
        elif isinstance(it, Status):
            s = self.log(it.device, it.stream)
            s.statuses += 1
            if not _older(it.body, s.status):
                s.status = it.body
            if isinstance(it.body.get("restart_position"), int):
                s.restarts.add(it.body["restart_position"])
        elif isinstance(it, DeviceStatus):
            self.devices[it.device] = it.state
        elif isinstance(it, Malformed):
            self.malformed[it.reason] = self.malformed.get(it.reason, 0) + 1

    def records(self) -> int:
        return sum(len(s.records) for s in self.streams.values())
