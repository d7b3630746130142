"""Command-line UX (issue 13): demo without its extra, privatize refusing mostly-rejected input,
the end of stdin not stopping the other streams, per-stream delivery counters."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from streamguard.cli import main
from streamguard.config import load_settings
from streamguard.stream.daemon import Daemon
from streamguard.stream.lifecycle import until_done
from streamguard.stream.outbox import Item, Outbox

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "streamguard.toml"


def test_demo_without_the_demo_extra_says_how_in_one_line(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "amqtt", None)  # import amqtt.broker → ImportError
    monkeypatch.setitem(sys.modules, "amqtt.broker", None)
    assert main(["demo", "--duration", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert 'pip install "streamguard[demo]"' in err and "--broker 127.0.0.1:1883" in err


def test_privatize_fails_loudly_when_most_frames_are_rejected(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(EXAMPLE.read_text().split("[[streams.schedule]]")[0].replace(
        "/var/lib/streamguard/outbox.sqlite", "outbox.sqlite"))
    frames = [json.dumps({"value": "vacant" if i < 3 else "secret-state", "ts": 1.79e9 + i}) for i in range(10)]
    proc = subprocess.run([sys.executable, "-m", "streamguard.cli", "privatize", "--config", str(cfg)],
                          input="\n".join(frames).encode(), capture_output=True, timeout=120)
    err = proc.stderr.decode()
    assert proc.returncode == 65
    assert "error: most frames were rejected (7 of 10)" in err and "secret-state" not in err


def _settings(tmp_path: Path, *sources: str):
    streams = "".join(f"""
[[streams]]
name = "s{i}"
labels = ["a", "b"]
source = "{src}"
epsilon = 1.0
[streams.model]
alpha = 0.1
beta = 0.3
""" for i, src in enumerate(sources))
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[outbox]\npath = "o.sqlite"\n{streams}')
    return load_settings(cfg)


async def _wait_with(daemon: Daemon, stop_after: float | None) -> float:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    stopping = asyncio.create_task(stop.wait())
    essential = [asyncio.create_task(asyncio.sleep(30))]
    sources = [asyncio.create_task(asyncio.sleep(0))]  # stdin: ends at once
    if stop_after is not None:
        loop.call_later(stop_after, stop.set)
    started = loop.time()
    try:
        async with asyncio.timeout(5):
            await until_done(daemon.settings, stopping, essential, sources)
    finally:
        for t in (stopping, *essential):
            t.cancel()
    return loop.time() - started


@pytest.mark.parametrize(("sources", "goes_on"), [(("stdin", "mqtt"), True), (("stdin",), False)])
def test_the_end_of_stdin_stops_only_a_daemon_with_nothing_else_to_read(tmp_path, sources, goes_on):
    daemon = Daemon(_settings(tmp_path, *sources))
    took = asyncio.run(_wait_with(daemon, 0.5 if goes_on else None))
    assert (took >= 0.45) if goes_on else (took < 0.45)


def test_outbox_counts_buffered_and_dropped_records_per_stream(tmp_path):
    with Outbox(tmp_path / "o.sqlite", 10, "drop-oldest") as box:
        box.put([Item("a", i, "t/a", b"{}") for i in range(6)], keep=10)
        box.put([Item("b", i, "t/b", b"{}") for i in range(3)], keep=10)
        assert (box.count("a"), box.count("b"), len(box)) == (6, 3, 9)
        box.put([Item("b", i, "t/b", b"{}") for i in range(3, 7)], keep=10)  # 13 > 10: the 3 oldest go
        assert box.dropped_by_stream == {"a": 3} and box.dropped == 3
        assert (box.count("a"), box.count("b")) == (3, 7)
