"""Helpers for the tests of the ledger's summaries: record a history of redaction or channel
events, and count the objects of a type still alive (what a replay keeps in memory)."""

from __future__ import annotations

import gc
from collections.abc import Sequence
from pathlib import Path

from streamguard.ledger.events import ChannelEvent, RedactionEvent
from streamguard.ledger.store import Ledger


def record(path: Path, events: Sequence[ChannelEvent | RedactionEvent], batch: int = 500) -> None:
    """Commit ``events`` to a new ledger at ``path``, ``batch`` per transaction."""
    with Ledger.open(path) as led:
        for k in range(0, len(events), batch):
            led.commit_all(events[k:k + batch])


def alive(kind: type) -> int:
    """How many objects of ``kind`` are alive after a full collection."""
    gc.collect()
    return sum(isinstance(o, kind) for o in gc.get_objects())
