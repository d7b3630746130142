"""Review: the daemon as a real process fed JSON lists of frames (issue 15's batched intake and
group commits), SIGKILLed twice while lists flow and records are being published, restarted on the
same client id (the persistent session hands the unacknowledged lists to the next run: they come
again — duplicates or late frames), then stopped with SIGTERM. Checked against the frames sent,
independently of the daemon's code: one payload per seq (never re-drawn), seqs contiguous, every
released value is the true reading of its ts, every reading flagged private is redacted, nothing
but sanitized records on output topics."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from brokers import Broker
from daemon_harness import Spy, check_outputs, daemon_toml, first_occurrences, publish_all, running
from test_daemon_restart import DaemonProcess

from firmware_sim import Button, Faults, Labels, SimDevice, SimStream
from streamguard import MarkovChain

BASE, DEVICE, STREAM = "sgrk", "rk", "occ"
LABELS = ("vacant", "occupied")
DATA = f"{BASE}/{DEVICE}/{STREAM}/data"
RAW = f"{BASE}/{DEVICE}/{STREAM}/raw"
PRIVACY = f"{BASE}/{DEVICE}/{STREAM}/privacy"
STATUS = f"{BASE}/{DEVICE}/status"


def statuses(spy: Spy) -> list[str]:
    return spy.states(STATUS)


@pytest.mark.slow
async def test_lists_sigkilled_twice_never_redrawn_private_kept(mosquitto: Broker, tmp_path: Path) -> None:
    cfg = mosquitto.broker_config()
    conf = daemon_toml(tmp_path / "sg.toml", tmp_path / "outbox.sqlite", mosquitto.port, base=BASE, device=DEVICE,
                       stream=STREAM, labels=LABELS, client_id="review-kill",
                       extra="[publish]\nbatch_max = 50\n")
    sim = SimStream(STREAM, MarkovChain.binary(0.1, 0.2), rate=100.0, seed=91, emission=Labels(LABELS),
                    button=Button(probability=0.04), faults=Faults(rate=0.0))
    frames = list(SimDevice(DEVICE, [sim]).frames(count=1500))
    decoded = [json.loads(f.payload) for f in frames]
    truth = {d["ts"]: d["value"] for d in decoded}
    private_ts = {d["ts"] for d in decoded if d.get("private")}
    lists = [b"[" + b",".join(f.payload for f in frames[i:i + 25]) + b"]" for i in range(0, len(frames), 25)]
    runs = [lists[:24], lists[24:48], lists[48:]]
    procs: list[DaemonProcess] = []
    spy = Spy(cfg, "#", name="everything")
    try:
        async with running(spy.run()):
            await asyncio.wait_for(spy.subscribed.wait(), 10)
            for r, items in enumerate(runs):
                n_status = len(statuses(spy))
                procs.append(DaemonProcess(conf, tmp_path / "daemon.log"))
                await spy.wait_until(lambda: "online" in statuses(spy)[n_status:], 30, f"run {r}: online")
                if r < 2:
                    seen = len(spy.seqs(DATA))
                    async with running(publish_all(cfg, [(RAW, m) for m in items], pause_every=2, pause=0.02)):
                        await spy.wait_until(lambda: len(spy.seqs(DATA)) >= seen + 200, 30, f"run {r}: records")
                        procs[-1].kill()
                    await spy.wait_until(lambda: statuses(spy)[-1] == "offline", 10, "the will")
                else:
                    await publish_all(cfg, [(RAW, m) for m in items])
                    await asyncio.sleep(3)
                    assert procs[-1].terminate() == 0
                    await spy.wait_until(lambda: statuses(spy)[-1] == "offline", 20, "offline")
                    await asyncio.sleep(1)
    finally:
        for p in procs:
            p.ensure_dead()
    log = (tmp_path / "daemon.log").read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]
    check_outputs(spy.messages, base=BASE, device=DEVICE, labels={STREAM: LABELS}, mode="csprng", inputs=("raw",))
    order, payloads = first_occurrences(spy.records(DATA))
    assert all(len(p) == 1 for p in payloads.values()), "a record was published with two different payloads"
    seqs = sorted(payloads)
    assert seqs == list(range(len(seqs))) and len(seqs) > 600, (len(seqs), seqs[:5], seqs[-5:])
    seen_ts: dict[float, int] = {}
    for seq in seqs:
        rec = json.loads(next(iter(payloads[seq])))
        assert rec["ts"] not in seen_ts, f"ts {rec['ts']} published as seq {seen_ts.get(rec['ts'])} and {seq}"
        seen_ts[rec["ts"]] = seq
        if not rec["redacted"]:
            assert rec["value"] == truth[rec["ts"]], f"seq {seq}: not the reading of its ts"
        if rec["ts"] in private_ts:
            assert rec["redacted"], f"seq {seq}: a reading flagged private was released"
