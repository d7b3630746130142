"""Commits on the event loop's thread at a low rate (issue 15, latency; daemon.INLINE_QUIET).

A lone store entry after a quiet interval is committed at once by the intake that queued it, on
the loop's own thread, while the writer waits for work and the outbox thread is idle
(Store._commit_inline, AsyncOutbox.run_here): no writer wake-up, no thread switch; entries that
come close together go to the writer and the outbox thread, where intake overlaps the disk sync; a
slow or failed inline commit sends commits to the thread for a while. The outbox connection must never be used by two threads at
once, and a record is still handed to the publisher only after its commit returned.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from pathlib import Path

import pytest

from daemon_harness import restored, until

from streamguard.config import Settings
from streamguard.stream import store as store_module
from streamguard.stream.daemon import Daemon
from streamguard.stream.outbox import AsyncOutbox, Full, Item, Outbox
from streamguard.stream.metrics import render


def _settings(tmp_path: Path) -> Settings:
    return Settings(device="dev", topic_base="t", broker={"host": "127.0.0.1", "port": 1},
                    outbox={"path": tmp_path / "outbox.sqlite"},
                    streams=[{"name": "s", "labels": ["a", "b"], "epsilon": 1.0, "source": "mqtt", "delay": 0,
                              "model": {"alpha": 0.05, "beta": 0.2}}])


async def test_run_here_only_while_the_outbox_thread_is_idle(tmp_path):
    gate = threading.Event()
    async with await AsyncOutbox.open(Outbox, tmp_path / "o.sqlite", 100, "drop-oldest") as box:
        assert box.idle
        busy = asyncio.ensure_future(box.run(lambda _b: gate.wait(5.0)))
        await asyncio.sleep(0.05)
        assert not box.idle
        with pytest.raises(RuntimeError, match="busy"):
            box.run_here(Outbox.peek, 10)
        gate.set()
        await busy
        assert box.idle
        where = box.run_here(lambda b: (b.put([Item("s", 0, "t/s", b"{}")], keep=10), threading.current_thread()))[1]
        assert where is threading.current_thread()  # the caller's (the loop's) thread
        assert [r.seq for r in await box.run(Outbox.peek, 10)] == [0]


async def test_a_cancelled_queued_call_does_not_make_the_worker_look_idle(tmp_path):
    """Review finding (F1): a call queued behind a running one and then cancelled is done at once;
    the worker is still busy with the older call, so run_here must refuse (it ran a transaction on
    the loop's thread inside the worker's: 'cannot start a transaction within a transaction', or
    a commit at the worker's synchronous=NORMAL)."""
    gate = threading.Event()
    async with await AsyncOutbox.open(Outbox, tmp_path / "o.sqlite", 100, "drop-oldest") as box:
        running = asyncio.ensure_future(box.run(lambda _b: gate.wait(5.0)))
        await asyncio.sleep(0.05)
        queued = asyncio.ensure_future(box.run(Outbox.peek, 10))
        await asyncio.sleep(0)
        queued.cancel()
        await asyncio.gather(queued, return_exceptions=True)
        assert not box.idle
        with pytest.raises(RuntimeError, match="busy"):
            box.run_here(Outbox.peek, 10)
        gate.set()
        await running
        for _ in range(100):  # (the worker's done-callback runs on its thread)
            if box.idle:
                break
            await asyncio.sleep(0.01)
        assert box.idle


class _Writer:
    """A restored daemon's writer task running, with a publisher stand-in that checks each
    handed-over record is committed, and a record of where each group was committed (True: on the
    loop's thread, inline)."""

    def __init__(self, d: Daemon, box: AsyncOutbox) -> None:
        self.d, self.box = d, box
        self.on_loop: list[bool] = []
        self.handed: list[int] = []
        persist = d.store.persist

        def traced(b: Outbox, group, closing=False):
            self.on_loop.append(threading.current_thread() is threading.main_thread())
            return persist(b, group, closing)

        d.store.persist = traced  # type: ignore[method-assign]
        d.store.notify = self._notify
        self.task = asyncio.create_task(d.store.writer())

    def _notify(self, rows) -> None:
        stored = {r.seq for r in self.box._outbox.peek(10_000)}  # (the writer's thread, or idle)
        assert {r.seq for r in rows} <= stored  # handed over only once committed
        self.handed += [r.seq for r in rows]

    async def frame(self, i: int) -> None:
        await self.d.intake.handle_frame("s", f'{{"value":"{"ab"[i % 2]}","ts":{1.7e9 + i}}}'.encode())

    async def feed(self, frames: range, gap: float) -> None:
        """Frames ``gap`` seconds apart (0: one loop turn), then wait until all is stored."""
        for i in frames:
            await self.frame(i)
            await asyncio.sleep(gap)
        await self.settle()

    async def settle(self) -> None:
        for _ in range(200):
            if not self.d.store.queue and self.box.idle and self.d.store.idle.is_set():
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the writer did not settle")

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


async def test_quiet_lone_entries_commit_on_the_loop_and_a_burst_on_the_outbox_thread(tmp_path, monkeypatch):
    # (the backoff after a slow inline commit has its own test: on a loaded machine one commit can
    # take over INLINE_MAX and send the rest to the thread, which is not what this test is about)
    monkeypatch.setattr(store_module, "INLINE_MAX", 10.0)
    async with restored(_settings(tmp_path)) as (d, box):
        w = _Writer(d, box)
        try:
            await w.feed(range(6), 0.02)  # 20 ms apart: each entry is lone and quiet
            quiet = list(w.on_loop)
            w.on_loop.clear()
            await w.feed(range(6, 60), 0)  # one loop turn apart: the first is quiet, the others are not
            burst = list(w.on_loop)
        finally:
            await w.stop()
    assert quiet and all(quiet), quiet
    assert burst[0] and len(burst) > 1 and not any(burst[1:]), burst
    assert w.handed == list(range(59))  # delay 0: frame i releases record i − 1; all, in order


async def test_a_slow_inline_commit_sends_commits_to_the_outbox_thread(tmp_path, monkeypatch):
    monkeypatch.setattr(store_module, "INLINE_MAX", 0.0)  # every inline commit counts as slow
    async with restored(_settings(tmp_path)) as (d, box):
        w = _Writer(d, box)
        try:
            await w.feed(range(5), 0.02)
        finally:
            await w.stop()
    assert w.on_loop[0] and not any(w.on_loop[1:]), w.on_loop
    assert w.handed == list(range(4))


async def test_a_failed_inline_commit_sends_the_retry_to_the_outbox_thread(tmp_path, monkeypatch):
    """Review finding (F2): an inline commit that fails (here: the outbox is full under stop-input)
    backs off like a slow one; the retry waits on the outbox thread, not on the loop."""
    monkeypatch.setattr(store_module, "INLINE_MAX", 10.0)  # (only the failure counts)
    async with restored(_settings(tmp_path)) as (d, box):
        w = _Writer(d, box)
        persist, calls = w.d.store.persist, []

        def full_once(b: Outbox, group, closing=False):
            calls.append(threading.current_thread() is threading.main_thread())
            if len(calls) == 2:  # the second group (the first holds no record: delay 0)
                raise Full("full")
            return persist(b, group, closing)

        w.d.store.persist = full_once  # type: ignore[method-assign]
        try:
            await w.feed(range(3), 0.2)
        finally:
            await w.stop()
    assert calls[:2] == [True, True] and not any(calls[2:]), calls
    assert d.stats.outbox_full_waits == 0  # (the entry went back to the writer, whose retry met room)
    assert w.handed == list(range(2))


async def test_no_inline_commit_once_the_writer_is_gone(tmp_path):
    """Review finding (round 2): the writer cancelled while it waited (shutdown) must not leave the
    intake committing inline behind it; a late entry stays queued."""
    async with restored(_settings(tmp_path)) as (d, box):
        w = _Writer(d, box)
        await w.feed(range(2), 0.02)
        await w.stop()
        before = len(w.on_loop)
        await asyncio.sleep(0.02)
        await w.frame(2)
        assert len(w.on_loop) == before and len(d.store.queue) == 1


def _delayed(tmp_path: Path, ms: float) -> Settings:
    base = _settings(tmp_path)
    return base.model_copy(update={"outbox": base.outbox.model_copy(update={"commit_delay_ms": ms})})


async def test_a_commit_delay_groups_what_is_decided_meanwhile_into_one_transaction(tmp_path):
    """``outbox.commit_delay_ms`` (group commit): the writer waits that long after the oldest
    queued entry, so entries decided meanwhile share one transaction and one disk sync; nothing
    commits inline, nothing is handed over before its commit, and nothing waits much longer."""
    async with restored(_delayed(tmp_path, 250.0)) as (d, box):
        w = _Writer(d, box)
        try:
            t0 = time.monotonic()
            for i in range(8):  # 8 entries within ~80 ms
                await w.frame(i)
                await asyncio.sleep(0.01)
            assert not w.on_loop  # (still waiting out the delay)
            await until(lambda: len(w.handed) == 7, 5, "the first group")
            first = time.monotonic() - t0
            await w.feed(range(8, 10), 0.0)  # later entries: a group of their own
        finally:
            await w.stop()
    assert first >= 0.25 and len(w.on_loop) == 2 and not any(w.on_loop), (first, w.on_loop)
    assert w.handed == list(range(9))


async def test_entries_decided_during_a_group_commit_wait_out_their_own_delay(tmp_path):
    """Review finding (group commit): what was queued while a transaction ran waits its own delay
    instead of getting a transaction (and a disk sync) of its own right after."""
    async with restored(_delayed(tmp_path, 250.0)) as (d, box):
        w = _Writer(d, box)
        persist = d.store.persist

        def slow(b: Outbox, group, closing=False):  # (a slow disk: frames arrive during each transaction)
            time.sleep(0.06)
            return persist(b, group, closing)

        d.store.persist = slow  # type: ignore[method-assign]
        try:
            t0 = time.monotonic()
            for i in range(50):  # ~0.5 s of frames: groups of ~250 ms
                await w.frame(i)
                await asyncio.sleep(0.01)
            span = time.monotonic() - t0
            await w.settle()
        finally:
            await w.stop()
    # each group holds what was decided in at least one delay (the bug: a group per transaction)
    assert 2 <= len(w.on_loop) <= math.ceil(span / 0.25) + 1, (len(w.on_loop), span)
    assert w.handed == list(range(49))


async def test_a_private_mark_does_not_wait_out_the_commit_delay(tmp_path):
    """Review finding (group commit): a private command is acknowledged once handled; its mark
    must be on disk at once, not after the delay (a power cut would lose it, and the records after
    it would be published without its protection). The records queued before it go with it."""
    async with restored(_delayed(tmp_path, 1000.0)) as (d, box):
        w = _Writer(d, box)
        try:
            for i in range(4):
                await w.frame(i)
            t0 = time.monotonic()
            await d.intake.handle_command("s", b'{"private": "now"}')
            while not await box.run(lambda b: b.marks("s")):  # (read on the outbox's thread)
                assert time.monotonic() - t0 < 0.5, "the mark is not on disk"
            took = time.monotonic() - t0
            await w.settle()
        finally:
            await w.stop()
    assert took < 0.5 and w.handed == list(range(3))


async def test_statuses_count_only_committed_draws(tmp_path):
    """Review finding: a privacy status reports the released and redacted counts of committed
    decisions only — a draw still waiting for its commit (a crash could lose it and the restart
    draw again) is not counted yet. The counts are checked against the records actually in the
    outbox (read back and counted here; nothing is acknowledged in this harness)."""
    async def on_disk(box: AsyncOutbox) -> tuple[int, int]:
        redacted = [json.loads(r.payload)["redacted"] for r in await box.run(Outbox.peek, 10_000)]
        return redacted.count(False), redacted.count(True)

    async with restored(_delayed(tmp_path, 1000.0)) as (d, box):
        w = _Writer(d, box)
        rt = d.runtimes["s"]
        try:
            for i in range(5):
                await w.frame(i)
            decided = rt.counters.released + rt.counters.redacted
            before = json.loads((await d.status.privacy_payloads([rt]))[0])["counters"]
            exported = render(d.runtimes, {}, d.store.stored_counts, private_counters=True)  # (textfile_loop's call)
            disk_before = await on_disk(box)
            await w.settle()
            after = json.loads((await d.status.privacy_payloads([rt]))[0])["counters"]
            disk_after = await on_disk(box)
        finally:
            await w.stop()
    assert decided == 4 and disk_before == (0, 0) == (before["released"], before["redacted"])
    assert 'streamguard_records_released_total{stream="s"} 0' in exported
    assert 'streamguard_records_redacted_total{stream="s"} 0' in exported
    assert sum(disk_after) == 4 and (after["released"], after["redacted"]) == disk_after


async def test_the_shutdown_flush_does_not_wait_out_the_commit_delay(tmp_path):
    async with restored(_delayed(tmp_path, 1000.0)) as (d, box):
        w = _Writer(d, box)
        try:
            await w.frame(0)
            await w.frame(1)
            await asyncio.sleep(0.05)  # (the writer is in its wait)
            t0 = time.monotonic()
            d.store.closing = True
            await d.store.flush()
            took = time.monotonic() - t0
        finally:
            await w.stop()
    assert took < 0.5 and w.handed == [0]


async def _mark_on_disk(box: AsyncOutbox, within: float) -> float:
    """Seconds until a mark of stream "s" is committed (read on the outbox's thread)."""
    t0 = time.monotonic()
    while not await box.run(lambda b: b.marks("s")):
        assert time.monotonic() - t0 < within, "the mark is not on disk"
        await asyncio.sleep(0.005)
    return time.monotonic() - t0


async def test_a_private_frame_behind_a_whole_group_does_not_wait_out_the_delay(tmp_path):
    """Review round 2 (F1): an urgent entry queued behind more than a group (STORE_GROUP) goes in
    the next transaction, not after the delay."""
    async with restored(_delayed(tmp_path, 1000.0)) as (d, box):
        w = _Writer(d, box)
        try:
            for i in range(300):  # one loop turn: 300 ordinary entries queued
                await w.frame(i)
            await d.intake.handle_frame("s", f'{{"value":"a","ts":{1.7e9 + 300},"private":true}}'.encode())
            took = await _mark_on_disk(box, 0.5)
            await w.settle()
        finally:
            await w.stop()
    assert took < 0.5


async def test_an_inline_urgent_commit_leaves_the_next_entries_to_the_delay(tmp_path):
    """Review round 2 (F2): a private command committed inline (a lone urgent entry) must not make
    the ordinary entry after it skip the delay."""
    async with restored(_delayed(tmp_path, 1000.0)) as (d, box):
        w = _Writer(d, box)
        try:
            await w.frame(0)  # (delay 0: record 0 is held; nothing to store yet)
            await asyncio.sleep(0.02)  # (the writer waits for work)
            await d.intake.handle_command("s", b'{"private": "now"}')  # a lone urgent entry: inline
            assert w.on_loop == [True]
            await asyncio.sleep(0.05)
            await w.frame(1)  # releases record 0: an ordinary entry
            await asyncio.sleep(0.3)
            waited = list(w.handed)
            await w.settle()
        finally:
            await w.stop()
    assert waited == [] and w.handed == [0]


async def test_a_whole_group_cuts_the_delay_short(tmp_path):
    """Review round 2 (F3): once a whole group (STORE_GROUP) is queued it is committed, not held
    for the rest of the delay (the queue would reach its limit and hold intake)."""
    async with restored(_delayed(tmp_path, 1000.0)) as (d, box):
        w = _Writer(d, box)
        try:
            t0 = time.monotonic()
            for i in range(store_module.STORE_GROUP + 20):
                await w.frame(i)
                await asyncio.sleep(0)  # (the writer starts its wait after the first)
            await until(lambda: len(w.handed) >= store_module.STORE_GROUP - 1, 0.5, "the first group")
            took = time.monotonic() - t0
            await w.settle()
        finally:
            await w.stop()
    assert took < 0.5
