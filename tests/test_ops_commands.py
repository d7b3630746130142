"""Issue 13, commands: 3,000 identical ``{"private": 250}`` commands write the ledger events of
one mark, and the privacy status stays small (before: 3,000 events, a 659 KB retained status)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from streamguard.config import Settings
from streamguard.sampling import bit_source
from streamguard.stream.runtimes import make_runtime


def _events_and_status(tmp_path: Path, repeats: int) -> tuple[int, int]:
    s = Settings(device="x", outbox={"path": tmp_path / "o.sqlite"},
                 streams=[{"name": "s", "labels": ["off", "on"], "source": "stdin", "epsilon": 1.0,
                           "model": {"alpha": 0.1, "beta": 0.2}, "design": "exact", "max_hold": 1e9}])
    rt = make_runtime(s, s.streams[0], bit_source(None, 0))
    now, events = time.time(), 0

    def frame(i: int) -> None:
        nonlocal events
        rt.on_frame(json.dumps({"value": "on" if i % 5 else "off", "ts": now - 1000 + i}).encode(), now)
        rt.mark_records()
        events += len(rt.take_ledger_events())

    for i in range(252):
        frame(i)
    for _ in range(repeats):
        rt.on_command(b'{"private": 250}')
        rt.mark_records()
        events += len(rt.take_ledger_events())
    for i in range(252, 300):
        frame(i)
    return events, len(json.dumps(rt.privacy_status()))


def test_repeated_private_commands_are_one_mark(tmp_path: Path) -> None:
    once = _events_and_status(tmp_path / "a", 1)
    many = _events_and_status(tmp_path / "b", 3000)
    assert once[0] >= 1 and many[0] == once[0]
    assert many[1] <= once[1] + 64 and many[1] < 4096
