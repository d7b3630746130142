"""Issue 28, memory that does not grow with uptime: ``streamguard run`` gives the C heap's free
pages back once a minute (stream/memory.py: ``malloc_trim(0)``, glibc only). Bounded: well under a
second each, no broker (benchmarks/bench_uptime.py measures the effect on the real daemon)."""

from __future__ import annotations

import argparse
import asyncio
import platform
import time
from pathlib import Path
from typing import Any

import pytest

from streamguard.cli.daemon import cmd_run
from streamguard.stream import daemon as daemon_module
from streamguard.stream import memory
from streamguard.stream.memory import glibc_malloc_trim, trimmed_heap


class Calls:
    """A stand-in for ``malloc_trim``: records each pad it is called with."""

    def __init__(self) -> None:
        self.pads: list[int] = []

    def __call__(self, pad: int) -> int:
        self.pads.append(pad)
        return 0


async def test_trims_every_interval_while_inside_and_never_after() -> None:
    calls = Calls()
    async with trimmed_heap(calls, interval=0.02):
        await asyncio.sleep(0.3)
        inside = len(calls.pads)
    await asyncio.sleep(0.1)
    assert 3 <= inside <= 15  # 0.3 s / 0.02 s, less on a loaded machine; never more
    assert len(calls.pads) == inside and set(calls.pads) == {0}


async def test_without_glibc_nothing_runs() -> None:
    before = asyncio.all_tasks()
    async with trimmed_heap(None, interval=0.0):
        await asyncio.sleep(0.05)
        assert asyncio.all_tasks() == before


def _rss_anon_kb() -> int:
    return next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
                if line.startswith("RssAnon:"))


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_glibc_trim_returns_free_pages_inside_the_heap_quickly() -> None:
    trim = glibc_malloc_trim()
    assert trim is not None
    blocks = [bytearray(100_000) for _ in range(600)]  # 60 MB in malloc'd blocks below the mmap threshold
    held = _rss_anon_kb()
    del blocks[::2]  # 30 MB free, each between two live blocks: glibc keeps the pages
    assert _rss_anon_kb() > held - 10_000
    t0 = time.perf_counter()
    trim(0)
    took = time.perf_counter() - t0
    assert _rss_anon_kb() < held - 20_000  # most of the 30 MB given back
    assert took < 0.5
    del blocks


def test_streamguard_run_trims_the_heap_while_the_daemon_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = Calls()

    def fast(trim: memory.Trim | None, interval: float = memory.TRIM_INTERVAL) -> Any:
        assert (trim is None) == (glibc_malloc_trim() is None)  # cmd_run hands over glibc's (None elsewhere)
        return trimmed_heap(calls, interval=0.01)

    class Daemon:  # serves until three trims happened (bounded)
        def __init__(self, *_: Any, **__: Any) -> None:
            pass

        async def run(self, _stop: asyncio.Event) -> None:
            async with asyncio.timeout(10):
                while len(calls.pads) < 3:
                    await asyncio.sleep(0.01)

    monkeypatch.setattr(memory, "trimmed_heap", fast)
    monkeypatch.setattr(daemon_module, "Daemon", Daemon)
    config = tmp_path / "streamguard.toml"
    config.write_text(f'device = "trim"\n[outbox]\npath = "{tmp_path / "o.sqlite"}"\n'
                      '[[streams]]\nname = "s"\nlabels = ["off", "on"]\nsource = "mqtt"\nepsilon = 1.0\n'
                      '[streams.model]\nalpha = 0.1\nbeta = 0.2\n')
    assert cmd_run(argparse.Namespace(config=str(config))) == 0
    assert len(calls.pads) >= 3
