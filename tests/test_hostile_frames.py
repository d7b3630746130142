"""Issue 28, hostile input: a burst of frames that are not UTF-8 (rejected, and treated as private:
they may carry a private request) through the daemon, stdin-fed, against a real Mosquitto. What
each one costs is measured in steady state — after a warm-up burst of the same size — and printed
(ledger events, outbox rows and file size, RSS, time per frame); the outbox's part is asserted
bounded: its marks table keeps at most ``KEEP_DECISIONS`` closed marks of rejected frames per
stream, and its file gives freed pages back (incremental vacuum), so it does not grow with the
burst. 10⁴ frames over MQTT, 10⁵ in-process (the issue's run); and 10⁶ rejected frames that carry
a timestamp, on a stream with aggregate windows (the per-second cap covers both), after 10⁶ more.

RSS is read as the daemon keeps it — the C heap's free pages given back first (``malloc_trim``,
which ``streamguard run`` does once a minute: stream/memory.py) — and in-process frames are fed
as a pipe would feed them (at most ``PIPE_FRAMES`` not yet read), so that the test's own backlog
is not counted as the daemon's memory."""

from __future__ import annotations

import asyncio
import gc
import json
import sqlite3
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from brokers import Broker
from daemon_harness import daemon_running, publish_all, subscribed, until

from streamguard.config import Settings
from streamguard.ledger.store import Ledger
from streamguard.stream.store import KEEP_DECISIONS
from streamguard.stream.memory import glibc_malloc_trim
from streamguard.stream.outbox import Outbox
from streamguard.stream.redaction_runtime import HOSTILE_PER_SECOND, RedactionRuntime

NOT_UTF8 = b"\xff\xfe not utf-8"
AGGREGATES = [{"query": "histogram", "window": 60, "epsilon": 1.0}]
#: In-process frames not yet read by the daemon, at most (a pipe's 64 KiB holds about as many):
#: an unbounded queue held a whole burst of distinct frames (10⁵ timed ones: ~10 MB) in the
#: process, and the holes its release left in Python's allocator were measured as the daemon's.
PIPE_FRAMES = 1000
_TRIM = glibc_malloc_trim()


def _not_utf8(_i: int) -> bytes:
    return NOT_UTF8


def _timed_bogus(t0: float) -> Callable[[int], bytes]:
    """Frames that carry a time (a new step each) and ask to be private, with a value that is no label."""
    return lambda i: json.dumps({"value": "bogus", "ts": t0 + i, "private": True}).encode()


def _rss_kb() -> int:
    """VmRSS after the C heap's free pages are given back (glibc; elsewhere as it stands)."""
    if _TRIM is not None:
        _TRIM(0)
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def _file_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


async def _burst(mosquitto: Broker, tmp_path: Path, n: int, via: str = "source", frame: Callable[[int], bytes] = _not_utf8,
                 warm: int | None = None, **stream: object) -> dict[str, float]:
    """Two bursts, a warm-up of ``warm`` frames (default n) and a measured one of n, frames
    ``frame(i)`` (i = 0..warm+n−1), fed through an in-process frame source (the daemon's stdin
    path; at most PIPE_FRAMES waiting) or published to the stream's raw topic on Mosquitto
    (``via="mqtt"``, QoS 1, one producer connection), then the next start on the files they left.
    Each burst's growth of RSS and of the blocks Python's allocator has in use (objects and their
    small buffers: ``sys.getallocatedblocks``, after a collection) is taken from its start to its end. ``stream``: more of the stream's settings."""
    queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=PIPE_FRAMES)

    async def frames() -> AsyncIterator[tuple[str, bytes]]:
        while (f := await queue.get()) is not None:
            yield "s", f

    outbox = tmp_path / "outbox.sqlite"
    settings = Settings(device="hostile", topic_base="sgh", broker=mosquitto.broker_config(), outbox={"path": outbox},
                        streams=[{"name": "s", "labels": ["off", "on"], "source": "mqtt" if via == "mqtt" else "stdin",
                                  "epsilon": 1.0, "model": {"alpha": 0.1, "beta": 0.2}, "design": "exact", **stream}])
    out: dict[str, float] = {}
    async with daemon_running(settings, extra_sources=[] if via == "mqtt" else [frames]) as (daemon, _, task):
        await until(lambda: "s" in daemon.runtimes, 60, "the start")
        if via == "mqtt":
            await until(lambda: subscribed(daemon), 20, "the input subscription")
        warm = n if warm is None else warm
        for first, count, round_ in ((0, warm, "warm"), (warm, n, "measured")):
            assert daemon._ledger is not None
            events0 = daemon._ledger.head[0]
            gc.collect()
            rss0, blocks0, began = _rss_kb(), sys.getallocatedblocks(), time.monotonic()
            frames0 = daemon.stats.frames
            if via == "mqtt":
                raw = settings.topic("s", "raw")
                assert await publish_all(mosquitto.broker_config(),
                                         ((raw, frame(first + i)) for i in range(count))) == count
            else:
                for i in range(count):
                    await queue.put(frame(first + i))
            await until(lambda: daemon.stats.frames - frames0 == count and not daemon.store.queue, 60 + count / 200,
                        f"the {round_} burst")
            await daemon.store.flush()
            out[f"{round_}_seconds"] = time.monotonic() - began
            await daemon.store.box.run(Outbox.checkpoint)  # the database itself, not the WAL's high-water mark
            gc.collect()
            out[f"{round_}_blocks"] = sys.getallocatedblocks() - blocks0
            out[f"{round_}_rss_kb"] = _rss_kb() - rss0
            out[f"{round_}_events"] = daemon._ledger.head[0] - events0
            out[f"{round_}_outbox_bytes"] = _file_bytes(outbox)
            out[f"{round_}_ledger_bytes"] = _file_bytes(settings.ledger_path())
        assert not task.done()
        rt = daemon.runtimes["s"]
        assert isinstance(rt, RedactionRuntime)
        await until(lambda: rt._owed == 0, 5, "the steps counted last taken (the next tick)")
        out["positions"], out["bulk_steps"] = rt.core.next_phys, rt.bulk_steps
        out["rejected"] = sum(rt.counters.rejected.values())
    began = time.monotonic()  # the next start, on the files the bursts left
    async with daemon_running(settings) as (daemon, _, task):
        await until(lambda: "s" in daemon.runtimes, 60, "the next start")
        out["next_start_seconds"] = time.monotonic() - began
        assert not task.done()
    with sqlite3.connect(outbox) as db:
        out["marks_rows"] = db.execute("SELECT COUNT(*) FROM marks").fetchone()[0]
        out["freelist"] = db.execute("PRAGMA freelist_count").fetchone()[0]
    out["outbox_bytes_closed"] = _file_bytes(outbox)
    with Ledger.open(settings.ledger_path(), readonly=True) as led:
        out["ledger_events"] = led.head[0]
    return out


def _report(n: int, r: dict[str, float], warm: int | None = None) -> None:
    ledger = (r["measured_ledger_bytes"] - r["warm_ledger_bytes"]) / n
    after = "" if warm is None else f" after {warm}"
    print(f"\n[hostile ×{n}{after}] per frame (steady state): ledger events {r['measured_events'] / n:.5f} "
          f"({ledger:.1f} B), RSS {r['measured_rss_kb'] / n * 1024:.1f} B, Python blocks "
          f"{r['measured_blocks'] / n:+.4f}, time {r['measured_seconds'] / n * 1e6:.0f} µs; "
          f"outbox {r['warm_outbox_bytes'] / 1e6:.2f} MB after the first burst, "
          f"{r['measured_outbox_bytes'] / 1e6:.2f} MB after the second, {r['outbox_bytes_closed'] / 1e6:.2f} MB "
          f"closed; marks rows {r['marks_rows']:.0f}, free pages {r['freelist']:.0f}; ledger events "
          f"{r['ledger_events']:.0f}; steps taken in bulk {r['bulk_steps']:.0f} of {r['positions']:.0f}; next start "
          f"{r['next_start_seconds']:.2f} s")


def _check_bounded(n: int, r: dict[str, float], rss_kb: int, warm: int | None = None) -> None:
    """What a burst may cost (docs/operations.md, "Hostile input"): a bounded outbox, no ledger event per frame,
    RSS within ``rss_kb`` for the whole (measured) burst of n after ``warm`` (default n) — and
    every frame still one step of the chain."""
    total = n + (n if warm is None else warm)
    assert r["rejected"] == total and r["positions"] == total  # (bulk steps keep their positions)
    assert r["bulk_steps"] > n  # the rate held: most frames were only counted
    assert r["marks_rows"] <= KEEP_DECISIONS + 64  # bounded, not one per frame (1 here: one run)
    # the second burst adds nothing that stays: the file does not grow with the frames (a closed
    # mark of a rejected frame is about 1.2 KB: n of them would be n × 1.2 KB)
    assert r["measured_outbox_bytes"] <= r["warm_outbox_bytes"] * 1.1 + 256 * 1024, r
    assert r["measured_events"] <= 3, r  # one run: at most created, became a run, finished
    assert r["measured_rss_kb"] <= rss_kb, r
    assert r["next_start_seconds"] < 10, r


async def test_hostile_burst_of_100k_costs_a_bounded_amount(mosquitto: Broker, tmp_path: Path) -> None:
    """The issue's run: 10⁵ frames after a warm-up of 10⁵ (about 10 s)."""
    n = 100_000
    r = await _burst(mosquitto, tmp_path, n)
    _report(n, r)
    _check_bounded(n, r, rss_kb=4096)  # before coalescing: 0.74 KB a frame, 72 MB


@pytest.mark.slow
async def test_hostile_timed_burst_on_an_aggregate_stream_costs_a_bounded_amount(mosquitto: Broker,
                                                                                tmp_path: Path) -> None:
    """10⁶ rejected frames that carry a time (a new step each) and ask to be private, after a
    warm-up of 10⁶, on a stream with an aggregate window: the cap covers them too (before: taken one
    by one — only timeless frames on streams without aggregates were capped). About 45 s: slow (the
    chaos suite's "hostile-timed" row runs it); the cap's behaviour itself is checked in the
    default suite by tests/test_hostile_rate.py (the capped path against the cap lifted).

    Why 10⁶ after 10⁶: the memory such a burst takes levels off, but only after ~10⁶ frames
    (scratch runs of 10⁶-3·10⁶ frames, issue 28): the Python blocks in use and glibc's heap in use
    stay flat from the first 10⁵, while Python's allocator arenas and glibc's free space fill
    (+2.4-6 MB in all) before they level off. Measured from the end of a warm-up of 10⁵ (the test
    before), that fill read as 13-54 B a frame and missed a 41 B bound at random; from 10⁶ on it
    was 0.2-1.1 B a frame up to 3·10⁶. The bounds: ≤ 3 B of RSS a frame over 10⁶ frames (one more
    1 MiB arena of Python's allocator, seen once, fits) and ≤ 0.1 more Python block in use a
    frame (the blocks in flight at a burst's end vary by ±5·10⁴); a leak of one small object a
    frame misses both (injected: 24 B of RSS and +1.0 block a frame)."""
    warm = n = 1_000_000
    r = await _burst(mosquitto, tmp_path, n, frame=_timed_bogus(time.time() - 10 * (warm + n)), warm=warm,
                     aggregates=AGGREGATES)
    _report(n, r, warm)
    _check_bounded(n, r, rss_kb=3 * n // 1024, warm=warm)
    assert r["measured_blocks"] <= n // 10, r


async def test_hostile_burst_over_mqtt_costs_a_bounded_amount(mosquitto: Broker, tmp_path: Path) -> None:
    """10⁴ frames published to the raw topic on Mosquitto (QoS 1, each acknowledged by the broker
    before the next: the producer, not the daemon, sets the pace), after a warm-up of 10⁴."""
    n = 10_000
    assert HOSTILE_PER_SECOND * 5 < n  # (well beyond the rate, however fast the machine publishes)
    r = await _burst(mosquitto, tmp_path, n, via="mqtt")
    _report(n, r)
    _check_bounded(n, r, rss_kb=2048)  # before coalescing: 656 B a frame, 6.4 MB


def _closed(phys: int) -> dict[str, object]:
    return {"open": False, "state": {"phys": phys}, "report": {"position": phys, "pad": "x" * 1000}}


def test_closed_marks_of_rejected_frames_are_pruned_and_the_file_shrinks(tmp_path: Path) -> None:
    """Closed marks of rejected frames (keys −(position + 1)) more than ``keep`` steps behind the
    newest are deleted; an open one is kept whatever its age (a restart restores it); the freed
    pages go back to the file system."""
    from streamguard.stream.outbox import Item, Outbox

    path = tmp_path / "o.sqlite"
    with Outbox(path, 100_000, "drop-oldest") as box:
        box.store([], keep=100, marks={"s": {-1: {**_closed(0), "open": True}}})
        for lo in range(1, 3001, 100):
            box.store([], keep=100, marks={"s": {-(p + 1): _closed(p) for p in range(lo, lo + 100)}})
        keys = sorted(box.marks("s"))
        assert keys[-1] == -1 and box.marks("s")[-1]["open"]  # the open one stays
        assert len(keys) <= 201 and min(keys) == -3001  # the newest are kept, the old closed ones gone
        box.store([Item("s", i, "t", b"y" * 3000) for i in range(3000)], keep=100)
        box.checkpoint()
        full = path.stat().st_size
        rows = box.peek(5000)
        box.ack(r.id for r in rows)
        for i in range(40):  # stores give the freed pages back, RECLAIM_PAGES at a time
            box.store([Item("s", 3000 + i, "t", b"z")], keep=100)
        box.checkpoint()
        assert path.stat().st_size < full / 2, (path.stat().st_size, full)


def test_an_outbox_without_incremental_vacuum_is_converted(tmp_path: Path) -> None:
    from streamguard.stream.outbox import Outbox

    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE x (a)")
        assert db.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
    with Outbox(path, 10, "drop-oldest") as box:
        assert box._db.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
