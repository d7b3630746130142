"""A crash right after an aggregate window closed must not turn a private mark whose
neighbours were still pending (never published) into a "not honoured" mark with an invented
leakage.

In-process, no broker: the daemon's own restore/store/persist path (``Daemon._restore``,
``Store.put``, ``Store.persist``) on a real outbox and ledger; the "crash" is closing both without the
shutdown drain (what SIGKILL leaves on disk). Binary chain α = 0.1, β = 0.2, ε = 1, design
"exact" (left/right horizons 4/4, release delay 4, tests/test_daemon_restart.py). The privacy
button is on reading 37; reading 40 closes the aggregate window [0, 39] and decides record 35.
Records 36..40 are pending at the crash: never published. The same run without aggregates is the
control.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from daemon_harness import restored

from streamguard.config import Settings

LABELS = ["off", "on"]
MARK = 37


def _settings(tmp_path: Path, aggregates: list[dict[str, Any]]) -> Settings:
    stream = {"name": "s", "labels": LABELS, "model": {"alpha": 0.1, "beta": 0.2}, "epsilon": 1.0,
              "design": "exact", "source": "stdin", "aggregates": aggregates}
    return Settings(device="dev", deterministic_seed=7, outbox={"path": tmp_path / "o.sqlite"}, streams=[stream])


def _frames(start: int, stop: int, t0: float) -> list[bytes]:
    return [json.dumps({"value": LABELS[(i // 3) % 2], "ts": t0 + i, **({"private": True} if i == MARK else {})}).encode()
            for i in range(start, stop)]


async def _session(settings: Settings, frames: list[bytes], *, drain: bool) -> dict[str, Any]:
    """One daemon life: restore, take the frames, persist them as one group; drain only if asked
    (no drain = SIGKILL after the last group was stored). Returns the stream's privacy status."""
    async with restored(settings) as (d, box):
        rt = d.runtimes["s"]
        for f in frames:
            releases, rej = rt.on_frame(f, time.time())
            assert rej is None
            await d.store.put(rt, releases)
        if drain:
            await d.store.put(rt, rt.drain())
        group = list(d.store.queue)
        d.store.queue.clear()
        await box.run(d.store.persist, group)
        return rt.privacy_status()


def _mark_after_restart(tmp_path: Path, aggregates: list[dict[str, Any]]) -> dict[str, Any]:
    settings = _settings(tmp_path, aggregates)
    t0 = time.time() - 10_000
    asyncio.run(_session(settings, _frames(0, 41, t0), drain=False))  # crash: 36..40 pending
    status = asyncio.run(_session(settings, _frames(41, 60, t0), drain=True))
    marks = [m for m in status["recent_marks"] if m["seq"] == MARK]
    assert len(marks) == 1, status["recent_marks"]
    return marks[0]


def test_control_without_aggregates_the_pending_mark_is_honoured(tmp_path: Path) -> None:
    mark = _mark_after_restart(tmp_path, [])
    assert mark["honoured"], mark


def test_with_aggregates_the_pending_mark_is_still_honoured(tmp_path: Path) -> None:
    mark = _mark_after_restart(tmp_path, [{"query": "histogram", "window": 40, "epsilon": 1.0}])
    assert mark["honoured"], mark
