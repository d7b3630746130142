"""Issue 13, metrics: the Prometheus textfile (stream/metrics.py) from a running daemon. Its
figures are the daemon's counters; the counters that move with private events (released,
redacted, the ledger's events, ``bad-private`` rejections) appear only with ``private_counters =
true`` (issue 24 item 5: a run with marks and one without export the same series otherwise), and
the file is 0600 either way."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import re
import stat
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from brokers import Broker
from daemon_harness import daemon_running

from streamguard.config import Settings

#: The series written only with ``private_counters = true``.
PRIVATE_SERIES = ("streamguard_records_released", "streamguard_records_redacted", "streamguard_ledger_events")
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
            while private:
                with contextlib.closing(sqlite3.connect(settings.ledger_path())) as db:
                    events = db.execute("SELECT COUNT(*) FROM events").fetchone()[0]
                if _parse(prom.read_text()).get("streamguard_ledger_events") == events >= 1:
                    break
                await asyncio.sleep(0.2)
    assert got['streamguard_frames_rejected_total{stream="s",reason="not-json"}'] == 1
    assert got['streamguard_frames_rejected_total{stream="s",reason="unknown-state"}'] == 1
    assert got["streamguard_disk_full_waits_total"] == 0 and "streamguard_outbox_records" in got
    assert stat.S_IMODE(prom.stat().st_mode) == 0o600
    timing = [k for k in got if k.startswith(PRIVATE_SERIES)]
    if private:
        assert timing
        assert got['streamguard_records_redacted_total{stream="s"}'] <= c.redacted
    else:
        assert not timing


N_FRAMES = 60


async def _settled_metrics(mosquitto: Broker, tmp: Path, *, marks: bool, private: bool) -> tuple[dict[str, float], int]:
    """One run of a stream: 60 frames (one of them an unknown state), with ``marks`` three private
    flags (one on the unknown state), a ``"now"`` command and a malformed private request (without
    marks, the same frames without the request: the malformed one is an unknown value instead).
    Returns the textfile once everything decided is published and two writes agree, and its mode."""
    queue: asyncio.Queue[bytes | None] = asyncio.Queue()

    async def frames() -> AsyncIterator[tuple[str, bytes]]:
        while (f := await queue.get()) is not None:
            yield "s", f

    prom = tmp / "streamguard.prom"
    # (a device of its own per run: two outboxes under one identity are refused, issue 28)
    settings = Settings(device=f"met-{tmp.name}", topic_base="sgm", broker=mosquitto.broker_config(),
                        outbox={"path": tmp / "o.sqlite"},
                        metrics={"textfile": prom, "interval": 1.0, "private_counters": private},
                        streams=[{"name": "s", "labels": ["off", "on"], "source": "stdin", "epsilon": 1.0,
                                  "model": {"alpha": 0.1, "beta": 0.2}, "design": "exact"}])
    t0 = time.time() - 1000

    def frame(i: int) -> bytes:
        doc: dict[str, object] = {"value": "maybe" if i == 33 else ("on" if i % 3 else "off"), "ts": t0 + i}
        if marks and i in (10, 33, 50):
            doc["private"] = True
        if i == 45:  # a malformed private request is rejected (wrong type), as an unknown value is
            doc = {"value": "on", "ts": t0 + i, "private": "yes"} if marks else {"value": [], "ts": t0 + i}
        return json.dumps(doc).encode()

    async with daemon_running(settings, extra_sources=[frames]) as (daemon, _, _task):
        async def until(cond: Callable[[], bool]) -> None:
            async with asyncio.timeout(30):
                while not cond():
                    await asyncio.sleep(0.1)

        def seen() -> int:
            rt = daemon.runtimes.get("s")
            return 0 if rt is None else rt.counters.accepted + sum(rt.counters.rejected.values())

        for i in range(25):
            queue.put_nowait(frame(i))
        await until(lambda: seen() == 25)
        if marks:
            await daemon.intake.handle_command("s", b'{"private":"now"}')
        for i in range(25, N_FRAMES):
            queue.put_nowait(frame(i))
        await until(lambda: seen() == N_FRAMES)
        last: dict[str, float] = {}
        async with asyncio.timeout(30):
            while True:
                await asyncio.sleep(1.1)
                got = _parse(prom.read_text()) if prom.exists() else {}
                published = got.get("streamguard_published_records_total", -1)
                if got == last and got.get("streamguard_outbox_records") == 0 and published == daemon.stats.stored > 0:
                    break
                last = got
    return got, stat.S_IMODE(prom.stat().st_mode)


@pytest.mark.parametrize("private", [False, True])
async def test_marks_move_no_exported_series_without_private_counters(mosquitto: Broker, tmp_path: Path,
                                                                      private: bool) -> None:
    """The differential test of issue 24 item 5: a run with marks (flags, a command, a malformed
    request) and one without write the same series with the same values unless
    ``private_counters = true``; with it the private series move. The file is 0600 either way."""
    (tmp_path / "plain").mkdir()
    (tmp_path / "marked").mkdir()
    plain, plain_mode = await _settled_metrics(mosquitto, tmp_path / "plain", marks=False, private=private)
    marked, marked_mode = await _settled_metrics(mosquitto, tmp_path / "marked", marks=True, private=private)
    assert plain_mode == marked_mode == 0o600
    assert plain['streamguard_frames_accepted_total{stream="s"}'] == N_FRAMES - 2
    if not private:
        assert marked == plain
        assert not [k for k in plain if k.startswith(PRIVATE_SERIES)]
        assert plain['streamguard_frames_rejected_total{stream="s",reason="wrong-type"}'] == 1
    else:
        moved = {k for k in plain.keys() | marked.keys() if plain.get(k) != marked.get(k)}
        assert marked["streamguard_ledger_events"] >= 2 * 4 > plain["streamguard_ledger_events"] == 0
        redacted = 'streamguard_records_redacted_total{stream="s"}'
        assert marked[redacted] > plain[redacted]
        assert marked['streamguard_frames_rejected_total{stream="s",reason="bad-private"}'] == 1
        assert moved <= {k for k in moved if k.startswith(PRIVATE_SERIES) or "reason=" in k}, moved
