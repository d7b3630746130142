"""Issue 13, metrics: the Prometheus textfile (stream/metrics.py) from a running daemon. Its
figures are the daemon's counters; the counters that date private events (released, redacted)
appear only with ``private_counters = true``, and then the file is 0600."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import re
import stat
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from brokers import Broker
from daemon_harness import daemon_running

from streamguard.config import Settings

SAMPLE = re.compile(r'^([a-z_]+)(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? (-?[0-9.e+]+)$')


def _parse(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.match(r"^# (HELP|TYPE) streamguard_[a-z_]+ ", line), line
            continue
        m = SAMPLE.match(line)
        assert m, line
        out[m.group(1) + (m.group(2) or "")] = float(m.group(4))
    return out


@pytest.mark.parametrize("private", [False, True])
async def test_textfile_holds_the_daemons_counters(mosquitto: Broker, tmp_path: Path, private: bool) -> None:
    queue: asyncio.Queue[bytes | None] = asyncio.Queue()

    async def frames() -> AsyncIterator[tuple[str, bytes]]:
        while (f := await queue.get()) is not None:
            yield "s", f

    prom = tmp_path / "streamguard.prom"
    settings = Settings(device="met", topic_base="sgm", broker=mosquitto.broker_config(),
                        outbox={"path": tmp_path / "o.sqlite"},
                        metrics={"textfile": prom, "interval": 1.0, "private_counters": private},
                        streams=[{"name": "s", "labels": ["off", "on"], "source": "stdin", "epsilon": 1.0,
                                  "model": {"alpha": 0.1, "beta": 0.2}, "design": "exact"}])
    t0 = time.time() - 1000
    for i in range(50):
        queue.put_nowait(json.dumps({"value": "on", "ts": t0 + i, **({"private": True} if i == 20 else {})}).encode())
    for bad in (b"{", b'{"value": "maybe"}'):
        queue.put_nowait(bad)
    async with daemon_running(settings, extra_sources=[frames]) as (daemon, _, task):
        async with asyncio.timeout(30):
            while True:
                await asyncio.sleep(0.2)
                c = daemon.runtimes["s"].counters if "s" in daemon.runtimes else None
                if c is not None and c.accepted == 50 and prom.exists():
                    got = _parse(prom.read_text())
                    if got.get('streamguard_frames_accepted_total{stream="s"}') == 50:
                        break
        c = daemon.runtimes["s"].counters
        # the ledger's size, against the events counted in its file by the test (the private frame's
        # mark makes at least one): the textfile catches up within its interval
        async with asyncio.timeout(10):
            while True:
                with contextlib.closing(sqlite3.connect(settings.ledger_path())) as db:
                    events = db.execute("SELECT COUNT(*) FROM events").fetchone()[0]
                if _parse(prom.read_text()).get("streamguard_ledger_events") == events >= 1:
                    break
                await asyncio.sleep(0.2)
    assert got['streamguard_frames_rejected_total{stream="s",reason="not-json"}'] == 1
    assert got['streamguard_frames_rejected_total{stream="s",reason="unknown-state"}'] == 1
    assert got["streamguard_disk_full_waits_total"] == 0 and "streamguard_outbox_records" in got
    mode = stat.S_IMODE(prom.stat().st_mode)
    timing = [k for k in got if k.startswith(("streamguard_records_released", "streamguard_records_redacted"))]
    if private:
        assert mode == 0o600 and timing
        assert got['streamguard_records_redacted_total{stream="s"}'] <= c.redacted
    else:
        assert mode == 0o644 and not timing
