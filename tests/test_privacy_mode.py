"""A stream's privacy mode (issue 26; stream/privacy_mode.py): ``{"privacy_mode": "on"}`` on the
command topic makes every step private (a mark of source ``mode``, each with its exact leakage in
the status), ``"off"`` ends it; the mode is persisted before it takes effect and survives a
restart of the daemon; an unreadable mode file turns it on (fail closed).

Checked against the plan itself (independent of the runtime): position p of a mark is redacted with
probability 1 (the plan's row at offset 0), so every record made while the mode is on is redacted;
and the leakage the status reports for each mode mark is at most ε — marks combine by the
element-wise maximum of their rows (notes/000 §4.5), so a run of them costs no more than one.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import time

from pathlib import Path
from typing import Any

from brokers import Broker, mosquitto  # noqa: F401  (fixture)
from daemon_harness import Spy, daemon_running, daemon_toml, publish_all, running

from streamguard.config import load_settings
from streamguard.sampling import bit_source
from streamguard.stream.privacy_mode import ModeFile, beside
from streamguard.stream.runtimes import make_runtime

LABELS = ("vacant", "occupied")
NOW = 1_700_000_100.0  # the daemon clock when frames arrive (their ts lie before it)
ON, OFF = b'{"privacy_mode": "on"}', b'{"privacy_mode": "off"}'


def _runtime(tmp_path: Path):
    conf = daemon_toml(tmp_path / "d.toml", tmp_path / "o.sqlite", 1883, base="sgmode", device="dev",
                       stream="hall", labels=LABELS)
    s = load_settings(conf)
    return make_runtime(s, s.streams[0], bit_source(None, 0))


def _frame(i: int, t0: float = 1_700_000_000.0) -> bytes:
    return json.dumps({"value": LABELS[(i // 3) % 2], "ts": t0 + i}).encode()


def _private(marks: list[dict[str, Any]], source: str) -> set[int]:
    """The positions the reported marks of ``source`` make private (a run: position..last)."""
    return {p for m in marks if m["source"] == source for p in range(m["position"], m.get("last", m["position"]) + 1)}


def test_every_step_is_private_while_the_mode_is_on(tmp_path: Path) -> None:
    rt = _runtime(tmp_path)
    eps = rt.plan.epsilon
    assert rt.plan.table()[list(rt.plan.offsets()).index(0)].tolist() == [1.0, 1.0]  # p itself: always ⊥
    records = []
    for i in range(10):
        records += rt.on_frame(_frame(i), NOW)[0]
    assert rt.on_command(ON) is None and rt.privacy_mode and rt.privacy_status()["privacy_mode"] is True
    on_from = 9  # the newest step when it was switched on is marked too
    for i in range(10, 30):
        records += rt.on_frame(_frame(i), NOW)[0]
    assert rt.on_command(OFF) is None and not rt.privacy_mode
    for i in range(30, 80):
        records += rt.on_frame(_frame(i), NOW)[0]
    records += rt.drain()
    by_seq = {r.seq: r for r in records}
    assert sorted(by_seq) == list(range(80))
    assert all(by_seq[s].redacted for s in range(on_from, 30))  # every step made while on
    assert not all(by_seq[s].redacted for s in range(30 + rt.plan.right_horizon, 80))  # released again
    st = rt.privacy_status()
    marks = st["open_marks"] + st["recent_marks"]
    # consecutive privacy-mode steps are one mark, a run (privatizer.coalesces): its position..last
    assert _private(marks, "mode") == {by_seq[s].phys for s in range(on_from, 30)}
    assert len([m for m in marks if m["source"] == "mode"]) == 1
    assert all(m["honoured"] and m["leakage"]["total"] <= eps + 1e-9 for m in marks)
    # a bad value is refused and counted; the mode stays as it was
    assert rt.on_command(b'{"privacy_mode": "maybe"}').reason == "bad-privacy-mode"
    assert rt.on_command(b'{"privacy_mode": true}').reason == "bad-privacy-mode"
    assert not rt.privacy_mode
    assert rt.privacy_status()["counters"]["commands_rejected"]["bad-privacy-mode"] == 2


def test_mode_file_round_trip_and_fail_closed(tmp_path: Path) -> None:
    path = beside(tmp_path / "outbox.sqlite")
    assert path == tmp_path / "outbox.modes.json"
    f = ModeFile(path)
    assert f.load(["a", "b"]) == {"a": False, "b": False}  # no file: off
    f.set("a", True)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert ModeFile(path).load(["a", "b", "c"]) == {"a": True, "b": False, "c": False}
    path.write_text("{not json")
    assert ModeFile(path).load(["a", "b"]) == {"a": True, "b": True}  # unreadable: on (fail closed)
    path.write_text(json.dumps({"version": 1, "streams": {"a": "yes"}}))
    assert ModeFile(path).load(["a"]) == {"a": True}


async def test_the_mode_survives_a_restart_of_the_daemon(tmp_path: Path, mosquitto: Broker) -> None:  # noqa: F811
    outbox = tmp_path / "outbox.sqlite"
    conf = daemon_toml(tmp_path / "d.toml", outbox, mosquitto.port, base="sgmode", device="dev", stream="hall",
                       labels=LABELS)
    settings = load_settings(conf)
    cmd, raw = "sgmode/dev/hall/cmd", "sgmode/dev/hall/raw"
    t0 = time.time() - 20
    watcher = Spy(mosquitto.broker_config(), "sgmode/dev/status", name="watcher")

    async def online() -> None:
        n = len(watcher.states("sgmode/dev/status"))
        await watcher.wait_until(lambda: "online" in watcher.states("sgmode/dev/status")[n:], 30, "online")
    async with running(watcher.run()), daemon_running(settings) as (daemon, _, _):
        await online()
        await publish_all(mosquitto.broker_config(), [(raw, _frame(i, t0)) for i in range(5)] + [(cmd, ON)])
        rt = daemon.runtimes["hall"]
        for _ in range(100):
            if rt.privacy_mode:
                break
            await asyncio.sleep(0.05)
        assert rt.privacy_mode
    assert json.loads(beside(outbox).read_text()) == {"version": 1, "streams": {"hall": True}}
    async with running(watcher.run()), daemon_running(load_settings(conf)) as (daemon, _, _):
        await online()
        rt = daemon.runtimes["hall"]
        assert rt.privacy_mode and rt.privacy_status()["privacy_mode"] is True
        await publish_all(mosquitto.broker_config(), [(raw, _frame(i, t0)) for i in range(5, 8)] + [(cmd, OFF)])
        for _ in range(100):
            if not rt.privacy_mode:
                break
            await asyncio.sleep(0.05)
        assert not rt.privacy_mode
        marks = rt.privacy_status()["open_marks"] + rt.privacy_status()["recent_marks"]
        # seqs 5–7 (no rejected frame among them: consecutive positions) are one run in this life
        assert any(m["seq"] == 5 and m.get("last") == m["position"] + 2 for m in marks if m["source"] == "mode")
    assert json.loads(beside(outbox).read_text())["streams"] == {"hall": False}
