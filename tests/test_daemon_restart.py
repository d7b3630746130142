"""The daemon as a real process (``python -m streamguard.cli run --config FILE``), killed with
SIGKILL twice while it works and restarted, against a real Mosquitto (tests/brokers.py).

What a crash may cost, by design (DESIGN.md §6, daemon.py): records still pending in the release
delay, and frames the broker had not yet delivered, are lost; their positions are reused. What it
must never cost: a stored decision (a stored record is published with its stored bytes, never
re-drawn), a position (numbering continues after the last stored record), or raw data on an
output topic. A subscriber on ``#`` sees the whole run.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from brokers import Broker
from daemon_harness import (Spy, Truth, check_outputs, daemon_toml, first_occurrences, publish_all, running,
                            truth_of)

from firmware_sim import Button, Faults, Labels, SimDevice, SimStream
from streamguard import MarkovChain
from streamguard.ledger.store import Ledger
from streamguard.stream.outbox import Outbox

BASE = "sgk"
DEVICE = "killme"
STREAM = "occ"
LABELS = ("vacant", "occupied")
EPSILON = 1.0
DATA = f"{BASE}/{DEVICE}/{STREAM}/data"
RAW = f"{BASE}/{DEVICE}/{STREAM}/raw"
PRIVACY = f"{BASE}/{DEVICE}/{STREAM}/privacy"
STATUS = f"{BASE}/{DEVICE}/status"


def write_config(tmp_path: Path, port: int, client_id: str | None = None) -> Path:
    return daemon_toml(tmp_path / "streamguard.toml", tmp_path / "outbox.sqlite", port, base=BASE, device=DEVICE,
                       stream=STREAM, labels=LABELS, epsilon=EPSILON, client_id=client_id,
                       extra='[[streams.aggregates]]\nquery = "histogram"\nwindow = 40\nepsilon = 1.0\n')


class DaemonProcess:
    """``python -m streamguard.cli run --config FILE`` with its stderr in a file."""

    def __init__(self, conf: Path, log: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMGUARD_")}
        self.log = log
        with open(log, "ab") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "streamguard.cli", "run", "--config", str(conf)],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(10) == -signal.SIGKILL

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(30)

    def ensure_dead(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def statuses(spy: Spy) -> list[str]:
    return spy.states(STATUS)


def outbox_state(path: Path) -> tuple[int, int]:
    """(next position, stored records) of the stream, read while no daemon runs."""
    with Outbox(path, 10, "drop-oldest") as box:
        return box.next_position(STREAM), len(box)


async def test_sigkill_and_restart(mosquitto: Broker, tmp_path: Path) -> None:
    """Three runs of the daemon process, the first two ended by SIGKILL while frames are flowing
    and records are being published, the last by SIGTERM. Checks: every message on a non-raw topic
    is a well-formed record, status or privacy report; one seq never has two payloads (stored
    decisions are resent byte for byte, never re-drawn); positions continue from the outbox's
    position mark after each restart; all published seqs together are 0..N−1 without a gap, and
    each released value is the true reading at its position; the will reports the crash; the
    privacy status says "restarted": true after a restart; a private record is always redacted and
    every honoured mark's achieved leakage is ≤ ε."""
    cfg = mosquitto.broker_config()
    conf = write_config(tmp_path, mosquitto.port)
    outbox = tmp_path / "outbox.sqlite"
    sim = SimStream(STREAM, MarkovChain.binary(0.1, 0.2), rate=100.0, seed=77, emission=Labels(LABELS),
                    button=Button(probability=0.03), faults=Faults(rate=0.02))
    frames = list(SimDevice(DEVICE, [sim]).frames(count=1300))
    runs = [frames[:500], frames[500:1000], frames[1000:]]
    truths: list[Truth] = [truth_of(r, STREAM, LABELS) for r in runs]
    first_seq: list[int] = [0]  # the first position of each run
    procs: list[DaemonProcess] = []

    spy = Spy(cfg, "#", name="everything")
    try:
        async with running(spy.run()):
            await asyncio.wait_for(spy.subscribed.wait(), 10)
            for r, run_frames in enumerate(runs):
                n_status, n_priv = len(statuses(spy)), len(spy.json_on(PRIVACY))
                # each run its own client id, so its own input session: the frames a killed run never
                # took die with its session (the truth here counts each run's frames; the persistent
                # session that hands them to the next run is tested in test_ops_sessions.py)
                conf = write_config(tmp_path, mosquitto.port, client_id=f"restart-run{r}")
                procs.append(DaemonProcess(conf, tmp_path / "daemon.log"))
                await spy.wait_until(lambda: "online" in statuses(spy)[n_status:], 30, f"run {r}: online")
                # the first privacy report of this run says whether it restarted
                await spy.wait_until(lambda: len(spy.json_on(PRIVACY)) > n_priv, 10, "a privacy report")
                assert spy.json_on(PRIVACY)[n_priv]["restarted"] is (r > 0)
                items = [(RAW, f.payload) for f in run_frames]
                if r < len(runs) - 1:
                    # kill while frames flow and records are being published
                    seen_before = len(spy.seqs(DATA))
                    async with running(publish_all(cfg, items, pause_every=20, pause=0.01)):
                        await spy.wait_until(lambda: len(spy.seqs(DATA)) >= seen_before + 150, 30,
                                             f"run {r}: records")
                        procs[-1].kill()
                    await spy.wait_until(lambda: statuses(spy)[-1] == "offline", 10, "the will")
                    nxt, stored = outbox_state(outbox)
                    published = spy.seqs(DATA)
                    assert nxt >= max(published) + 1 and nxt > first_seq[-1]  # positions never go back
                    first_seq.append(nxt)
                else:
                    await publish_all(cfg, items)

                    def counted() -> bool:
                        reports = spy.json_on(PRIVACY)
                        c = reports[-1]["counters"] if reports else {"accepted": -1, "rejected": {}}
                        return c["accepted"] + sum(c["rejected"].values()) == len(run_frames)

                    await spy.wait_until(counted, 30, "the last run's frames")
                    assert procs[-1].terminate() == 0
                    final = first_seq[-1] + truths[-1].accepted

                    def shut_down() -> bool:
                        last = spy.json_on(PRIVACY)[-1]
                        return (len(spy.seqs(DATA)) >= final and statuses(spy)[-1] == "offline"
                                and last["pending"] == 0 and last["counters"]["accepted"] == truths[-1].accepted)

                    await spy.wait_until(shut_down, 20, "the drained outbox and the final reports")
                    assert outbox_state(outbox) == (final, 0)
    finally:
        for p in procs:
            p.ensure_dead()

    log = (tmp_path / "daemon.log").read_text(errors="replace")
    assert "Traceback" not in log, log

    # 0. the ledger is written ahead: every aggregate window anyone received is in it, no position
    #    was charged by two windows across the crashes, and the accountant's ε is within budget
    aggregates = {(a["lo"], a["hi"]): a for a in spy.json_on(f"{BASE}/{DEVICE}/{STREAM}/aggregate")}
    assert len(aggregates) >= 10
    with Ledger.open(tmp_path / "outbox.ledger.sqlite", readonly=True) as led:
        book = led.book(DEVICE, STREAM)
        charged = sorted(ev.span() for ev in led.events_of(DEVICE, STREAM, "aggregate"))
        assert set(aggregates) <= set(charged)
        assert all(a[1] < b[0] for a, b in zip(charged, charged[1:]))
        assert max(acc.eps_max() for acc in book.accountants.values()) <= 1.0 + 1e-9

    # 1. nothing but sanitized records, statuses and privacy reports on output topics
    counts = check_outputs(spy.messages, base=BASE, device=DEVICE, labels={STREAM: LABELS}, mode="csprng",
                           inputs=("raw",))
    assert counts["data"] >= first_seq[-1] + truths[-1].accepted

    # 2. never re-drawn; positions contiguous across the restarts
    order, payloads = first_occurrences(spy.records(DATA))
    final = first_seq[-1] + truths[-1].accepted
    assert sorted(payloads) == list(range(final))
    assert all(len(p) == 1 for p in payloads.values()), "a record was published with two different payloads"

    # 3. every value is the true reading at its position (or null); private records are null
    bounds = first_seq + [final]
    for r, truth in enumerate(truths):
        lo, hi = bounds[r], bounds[r + 1]
        assert hi - lo <= truth.accepted  # a killed run loses at most its pending records
        flags = truth.flag_marks()
        for seq in range(lo, hi):
            rec: dict[str, Any] = json.loads(next(iter(payloads[seq])))
            local = seq - lo
            if not rec["redacted"]:
                assert rec["value"] == truth.label_of_seq(local), f"run {r} seq {seq}: not the reading"
            if truth.seq_phys[local] in flags:
                assert rec["redacted"], f"run {r} seq {seq}: a private record was released"

    # 4. the privacy reports: restarted after a restart, marks within budget or reported
    reports = spy.json_on(PRIVACY)
    assert reports[-1]["restarted"] is True and reports[-1]["pending"] == 0
    for rep in reports:
        for mk in rep["recent_marks"]:
            if mk["honoured"]:
                assert mk["achieved"]["total"] <= EPSILON + 1e-9, mk
            else:
                assert mk["reason"], mk
    assert sum(len(rep["recent_marks"]) for rep in reports) > 0


async def test_a_mark_pending_at_the_crash_keeps_protecting(mosquitto: Broker, tmp_path: Path) -> None:
    """The privacy button on reading 50, one more reading, SIGKILL: record 50 is still pending
    (release delay 4), so it is lost with 47..49, but the records after the restart are its right
    neighbours. They must be redacted over the mark's right window (rows 1), the mark must be
    reported after the restart, and its achieved leakage — worst case over the unknown number of
    readings missed during the restart — must be ≤ ε (exactly the value computed here)."""
    import numpy as np

    from streamguard.audit.exact import exact_leakage
    from streamguard.privacy.channel import ChannelSequence
    from streamguard.redaction.plan import plan_stream

    cfg = mosquitto.broker_config()
    conf = write_config(tmp_path, mosquitto.port)
    chain = MarkovChain.binary(0.1, 0.2)
    plan = plan_stream(chain, EPSILON, design="exact")
    H, R = plan.left_horizon, plan.right_horizon
    assert (H, R) == (4, 4)
    sim = SimStream(STREAM, chain, rate=10.0, seed=5, emission=Labels(LABELS), button=Button(at=frozenset({50})))
    frames = list(SimDevice(DEVICE, [sim]).frames(count=72))
    before, after = frames[:52], frames[52:]
    truth_after = truth_of(after, STREAM, LABELS)
    procs: list[DaemonProcess] = []
    spy = Spy(cfg, "#", name="everything")
    try:
        async with running(spy.run()):
            await asyncio.wait_for(spy.subscribed.wait(), 10)
            procs.append(DaemonProcess(conf, tmp_path / "daemon.log"))
            await spy.wait_until(lambda: "online" in statuses(spy), 30, "online")
            await publish_all(cfg, [(RAW, f.payload) for f in before])
            # reading 51 decides record 46 (51 − 46 > delay): once 46 is out, 47..51 are pending
            await spy.wait_until(lambda: 46 in spy.seqs(DATA), 15, "record 46")
            procs[-1].kill()
            await spy.wait_until(lambda: statuses(spy)[-1] == "offline", 10, "the will")  # after its last report
            assert outbox_state(tmp_path / "outbox.sqlite")[0] == 47
            assert spy.seqs(DATA) == set(range(47))

            n_status, n_priv = len(statuses(spy)), len(spy.json_on(PRIVACY))
            procs.append(DaemonProcess(conf, tmp_path / "daemon.log"))
            await spy.wait_until(lambda: "online" in statuses(spy)[n_status:], 30, "online again")
            await spy.wait_until(lambda: len(spy.json_on(PRIVACY)) > n_priv, 10, "a privacy report")
            first = spy.json_on(PRIVACY)[n_priv]
            assert first["restarted"] is True and [m["seq"] for m in first["open_marks"]] == [50]
            await publish_all(cfg, [(RAW, f.payload) for f in after])
            # all but the newest H + 1 (held back by the release delay)
            await spy.wait_until(lambda: len(spy.seqs(DATA)) >= 47 + truth_after.accepted - H - 1, 15, "new records")
            assert procs[-1].terminate() == 0

            def finished() -> bool:
                last = spy.json_on(PRIVACY)[-1]
                return statuses(spy)[-1] == "offline" and last["pending"] == 0 and any(
                    m["seq"] == 50 for m in last["recent_marks"])

            await spy.wait_until(finished, 15, "the final report")
    finally:
        for p in procs:
            p.ensure_dead()

    order, payloads = first_occurrences(spy.records(DATA))
    assert sorted(payloads) == list(range(47 + truth_after.accepted)) and all(len(p) == 1 for p in payloads.values())
    new = [json.loads(next(iter(payloads[47 + j]))) for j in range(truth_after.accepted)]
    # the mark's right window, restored across the crash: fully redacted
    assert all(r["redacted"] for r in new[:R]), [r["value"] for r in new[:R]]
    # beyond it (and beyond every mark) released with the true reading
    assert all(r["value"] == truth_after.label_of_seq(j) for j, r in enumerate(new) if j >= R)

    mark = next(m for m in spy.json_on(PRIVACY)[-1]["recent_marks"] if m["seq"] == 50)
    assert mark["honoured"] and not mark["late"] and mark["source"] == "flag"
    left_row = tuple(plan.table()[0])  # record 46 was decided with the plan's row at distance −4
    worst = 0.0
    # the released stand-in at 45 has law μP^45 for an unknown law μ of the first reading (or μP^46,
    # a reading lost before it): the worst case is at a vertex, a row of P^45 or P^46
    laws = [*np.linalg.matrix_power(chain.matrix, 45), *np.linalg.matrix_power(chain.matrix, 46)]
    for gap in range(0, 120):  # readings missed between the crash and the first new one
        rows = np.array([(0, 0), left_row, (1, 1), (1, 1), (1, 1), (1, 1)] + [(1, 1)] * (gap + R) + [(0, 0)],
                        dtype=float)
        for law in laws:
            worst = max(worst, exact_leakage(MarkovChain(chain.matrix, law), ChannelSequence.from_redaction(rows),
                                             5).total)
    assert abs(mark["achieved"]["total"] - worst) <= 1e-9 and worst <= EPSILON
