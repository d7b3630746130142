"""The daemon end to end against a real Mosquitto (tests/brokers.py): simulated devices → daemon →
subscriber, private marks of every source, broker outages, fuzzed input, TLS and passwords, and
the demo's embedded broker.

The daemon runs in-process (``Daemon(settings).run(stop)`` as a task); the SIGKILL test, which
needs a real process, is in test_daemon_restart.py. Ground truth comes from firmware_sim (each
frame carries its state in its meta); the expected redaction rows are computed by
:func:`daemon_harness.expected_rows` from the plan table and the marks.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import io
import json
import math
import socket
import threading
import time
from pathlib import Path
from typing import Any

import aiomqtt
import numpy as np
import pytest
from brokers import Broker
from daemon_harness import (
    Spy,
    Truth,
    binomial_tail,
    check_outputs,
    daemon_running,
    expected_rows,
    first_occurrences,
    covering_marks,
    publish_all,
    running,
    truth_of,
)
from hypothesis import HealthCheck, example, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from firmware_sim import DEFAULT_START, Button, Faults, Labels, SimDevice, SimStream
from streamguard import MarkovChain
from streamguard.audit.exact import Leakage, exact_leakage
from streamguard.audit.start import start_effect
from streamguard.privacy.channel import ChannelSequence
from streamguard.config import PublishConfig, Settings
from streamguard.redaction.plan import StreamPlan, plan_stream
from streamguard.redaction.side import SideModel, plan_side
from streamguard.stream.daemon import Daemon
from streamguard.stream.outbox import Outbox
from streamguard.frames.records import MAX_BATCH_BYTES, MAX_BATCH_FRAMES, MAX_CLOCK_AHEAD, MAX_FRAME_BYTES, REASONS
from streamguard.stream.transport import MAX_PACKET_BYTES
from streamguard.stream.runtime import COMMAND_REASONS
from streamguard.stream.transport import MqttTransport

BASE = "sg"
DEVICE = "dev"
#: Every statistical check below fails, when the daemon is correct, with probability ≤ this.
FALSE_FAILURE = 1e-6


def settings_for(cfg: Any, tmp_path: Path, streams: list[dict[str, Any]], **kw: Any) -> Settings:
    return Settings(device=DEVICE, topic_base=BASE, broker=cfg, outbox={"path": tmp_path / "outbox.sqlite"},
                    streams=streams, **kw)


def stream_cfg(name: str, labels: tuple[str, str], alpha: float, beta: float, epsilon: float, **kw: Any) -> dict:
    return {"name": name, "labels": list(labels), "model": {"alpha": alpha, "beta": beta}, "epsilon": epsilon,
            "design": "exact", **kw}


def topic(stream: str, kind: str) -> str:
    return f"{BASE}/{DEVICE}/{stream}/{kind}"


STATUS = f"{BASE}/{DEVICE}/status"


def frame_items(frames: list[Any]) -> list[tuple[str, bytes]]:
    return [(topic(f.stream, f.meta.channel), f.payload) for f in frames]


async def wait_counted(daemon: Any, expected: dict[str, int], timeout: float = 30.0) -> None:
    """Wait until the daemon has taken in (accepted or rejected) ``expected[stream]`` frames."""
    def done() -> bool:
        for name, n in expected.items():
            c = daemon.runtimes[name].counters
            if c.accepted + sum(c.rejected.values()) < n:
                return False
        return True

    async with asyncio.timeout(timeout):
        while not done():
            await asyncio.sleep(0.02)


def final_privacy(spy: Spy, stream: str) -> dict[str, Any]:
    return spy.json_on(topic(stream, "privacy"))[-1]


def shut_down(spy: Spy, accepted: dict[str, int]) -> bool:
    """The daemon's final reports reached the subscriber: the last status is ``offline`` and each
    stream's last privacy report counts all ``accepted[stream]`` records, none pending."""
    states = spy.states(STATUS)
    if not states or states[-1] != "offline":
        return False
    for s, n in accepted.items():
        reports = spy.json_on(topic(s, "privacy"))
        if not reports or reports[-1]["counters"]["accepted"] != n or reports[-1]["pending"] != 0:
            return False
    return True


def start_zone(plan: StreamPlan) -> int:
    """The steps from the start of a stream on which the daemon may redact more than the plan: a mark
    before ``matters_until`` is charged for any law of the first reading (docs/initial-law.md), so
    its right side is re-planned with what its left side leaves, up to its right horizon."""
    effect = start_effect(plan.chain.matrix, plan.left.red[: plan.left_horizon], plan.left.budget, None)
    return int(effect["matters_until"]) + plan.right_horizon + 1


def check_stream_records(spy: Spy, stream: str, truth: Truth, rows: np.ndarray,
                         plan: StreamPlan | None = None) -> list[dict[str, Any]]:
    """Every accepted record exactly once (after de-duplication), in order, with byte-identical
    duplicates; a released value is the true value; each record's published redaction row is the
    expected one (``rows``), or — within :func:`start_zone` of ``plan`` — at least the expected
    one; a row 1 ⇒ null, a row 0 ⇒ the true value. ``rows`` is updated in place to the published
    rows (the rows actually used) for the frequency tests. Returns the records by seq."""
    order, payloads = first_occurrences(spy.records(topic(stream, "data")))
    assert sorted(payloads) == list(range(truth.accepted)), f"{stream}: not every accepted record arrived once"
    assert order == sorted(order), f"{stream}: records arrived out of order"
    assert all(len(p) == 1 for p in payloads.values()), f"{stream}: one record published with two payloads"
    zone = 0 if plan is None else start_zone(plan)
    out = []
    for seq in range(truth.accepted):
        r = json.loads(next(iter(payloads[seq])))
        state = truth.state_of_seq(seq)
        t = truth.seq_phys[seq]
        used = np.array(r["redaction"], dtype=float)
        assert r["seq"] == seq and r["ts"] == truth.steps[t][2]
        assert np.all(used >= rows[t] - 1e-12), f"{stream} seq {seq}: less redaction than the plan"
        if t >= zone:
            assert np.allclose(used, rows[t], rtol=0, atol=1e-12), f"{stream} seq {seq}: not the plan's row"
        rows[t] = used
        if r["redacted"]:
            assert used[state] > 0, f"{stream} seq {seq}: redacted although its row releases it (row 0)"
        else:
            assert r["value"] == truth.labels[state], f"{stream} seq {seq}: released value is not the reading"
            assert used[state] < 1, f"{stream} seq {seq}: released although its row redacts it surely (row 1)"
        out.append(r)
    return out


def isolated(p: int, marks: set[int], truth: Truth, plan: StreamPlan) -> bool:
    """A mark whose window holds no other mark's window and no rejected frame, away from the start:
    its achieved leakage must be exactly the plan's."""
    H, R = plan.left_horizon, plan.right_horizon
    if p < H or p + R >= len(truth.steps):
        return False
    if any(q != p and abs(q - p) <= H + R for q in marks):
        return False
    return all(truth.steps[t][0] for t in range(p - H, p + R + 1))


def check_marks_report(report: dict[str, Any], truth: Truth, marks: set[int], plan: StreamPlan,
                       source: str | None = None) -> int:
    """Every finished on-time mark: honoured, not late, achieved ≤ ε; an isolated one exactly at the
    plan's leakage (1e-9). Returns how many isolated marks were checked exactly."""
    exact = 0
    plan_total = plan.leakage().total
    for mk in report["recent_marks"]:
        p = mk["position"] if mk["seq"] is None else truth.seq_phys[mk["seq"]]  # a rejected frame: by position
        assert p in marks, f"a mark at seq {mk['seq']} that no flag, command or schedule made"
        assert mk["honoured"] and not mk["late"], mk
        assert source is None or mk["source"] == source, mk
        total = mk["achieved"]["total"]
        assert total <= plan.epsilon + 1e-9, mk
        if isolated(p, marks, truth, plan):
            # the worst case over the law of the first reading is never below the stationary value,
            # and equals it once the start has mixed away (|λ|^p < 1e-12 for these chains at p ≥ 150)
            assert total >= plan_total - 1e-9, (mk, plan_total)
            if p >= 150:
                assert abs(total - plan_total) <= 1e-9, (mk, plan_total)
            exact += 1
    return exact


# -- 1. end to end, CSPRNG, statistics -----------------------------------------------------------
E2E_STREAMS = {
    # name: (labels, alpha, beta, epsilon, button probability)
    "occ": (("vacant", "occupied"), 0.25, 0.5, 1.0, 0.30),  # horizons 1/1, rows ±1: (0.2385, 1)
    "door": (("closed", "open"), 0.1, 0.2, 1.0, 0.10),  # horizons 4/4, rows ±4: (0.8368, 1), ±1..3: 1
}


async def test_end_to_end_records_match_the_plan(mosquitto: Broker, tmp_path: Path) -> None:
    """Two simulated streams (privacy-button flags, 2 % malformed frames) through the daemon with
    the OS CSPRNG: every accepted record arrives exactly once and in order; released values are
    the readings; rows 1 are always null and rows 0 always the true value (every record beyond all
    marks' horizons is released); the redaction frequency at each offset from an (isolated) mark
    matches the plan table (exact binomial test, false-failure rate ≤ 1e-6 overall); counters and
    the exact achieved leakage of isolated marks agree with the plan."""
    cfg = mosquitto.broker_config()
    device = SimDevice(DEVICE, [
        SimStream(name, MarkovChain.binary(a, b), rate=50.0, seed=101 + i, emission=Labels(labels),
                  button=Button(probability=bp), faults=Faults(rate=0.02))
        for i, (name, (labels, a, b, _, bp)) in enumerate(E2E_STREAMS.items())
    ])
    frames = list(device.frames(count=3200))
    truths = {name: truth_of(frames, name, labels) for name, (labels, *_) in E2E_STREAMS.items()}
    plans = {name: plan_stream(MarkovChain.binary(a, b), eps, design="exact")
             for name, (_, a, b, eps, _) in E2E_STREAMS.items()}
    settings = settings_for(cfg, tmp_path, [stream_cfg(n, lb, a, b, e) for n, (lb, a, b, e, _) in E2E_STREAMS.items()])
    assert settings.deterministic_seed is None  # the production CSPRNG

    spy = Spy(cfg, f"{BASE}/#")
    async with running(spy.run()):
        await asyncio.wait_for(spy.subscribed.wait(), 10)
        async with daemon_running(settings) as (daemon, _, task):
            await spy.wait_until(lambda: "online" in spy.states(STATUS), 15, "online")
            for name, plan in plans.items():
                assert daemon.runtimes[name].plan.table().tolist() == plan.table().tolist()
            await publish_all(cfg, frame_items(frames))
            await wait_counted(daemon, {n: len(t.steps) for n, t in truths.items()})
        assert task.done() and task.exception() is None
        await spy.wait_until(lambda: shut_down(spy, {n: t.accepted for n, t in truths.items()}), 15,
                             "the final status")

    labels = {n: v[0] for n, v in E2E_STREAMS.items()}
    counts = check_outputs(spy.messages, base=BASE, device=DEVICE, labels=labels, mode="csprng")
    assert counts["data"] >= sum(t.accepted for t in truths.values())

    groups: dict[tuple[str, int, int], list[int]] = {}  # (stream, offset, state) → [trials, redactions]
    pooled: dict[tuple[str, float], list[int]] = {}  # (stream, expected probability) → [trials, redactions]
    for name, truth in truths.items():
        plan = plans[name]
        marks = truth.flag_marks()
        assert len(marks) > 50
        rows = expected_rows(len(truth.steps), marks, plan)
        records = check_stream_records(spy, name, truth, rows, plan)
        cover = covering_marks(len(truth.steps), marks, plan)
        far = [r for s, r in enumerate(records) if not cover[truth.seq_phys[s]]]
        assert len(far) > 100 and not any(r["redacted"] for r in far)  # beyond every horizon: released
        zone = start_zone(plan)  # before it, a mark's window may be longer than the plan's
        for seq, r in enumerate(records):
            t = truth.seq_phys[seq]
            near = cover[t]
            prob = float(rows[t, truth.state_of_seq(seq)])
            if 0.0 < prob < 1.0:
                g = pooled.setdefault((name, prob), [0, 0])
                g[0] += 1
                g[1] += r["redacted"]
            if len(near) == 1 and near[0] != t and t >= zone:
                key = (name, t - near[0], truth.state_of_seq(seq))
                g = groups.setdefault(key, [0, 0])
                g[0] += 1
                g[1] += r["redacted"]

        report = final_privacy(spy, name)
        c = report["counters"]
        assert c["accepted"] == truth.accepted and sum(c["rejected"].values()) == truth.rejected() > 0
        assert set(c["rejected"]) <= set(REASONS)
        assert c["released"] + c["redacted"] == truth.accepted
        assert c["redacted"] == sum(r["redacted"] for r in records)
        assert report["deterministic"] is False and report["restarted"] is False
        assert report["horizons"] == {"left": plan.left_horizon, "right": plan.right_horizon}
        assert abs(report["plan_leakage"] - plan.leakage().total) <= 1e-12
        assert check_marks_report(report, truth, marks, plan, source="flag") >= 3

    # Redaction frequencies against the plan: per offset from a mark, for the records that only
    # one mark covers (the plan table itself), and pooled by expected probability over all records
    # (several marks combine by the element-wise maximum), which has more trials. Exact binomial
    # tails; a union bound over all groups keeps the false-failure rate ≤ FALSE_FAILURE.
    fractional = {k: v for k, v in groups.items()
                  if 0.0 < plans[k[0]].table()[k[1] + plans[k[0]].left_horizon][k[2]] < 1.0}
    assert {(k[0], k[1]) for k in fractional} == {("occ", -1), ("occ", 1), ("door", -4), ("door", 4)}
    delta = FALSE_FAILURE / (len(fractional) + len(pooled))
    for (name, d, x), (n, k) in groups.items():
        plan = plans[name]
        p = float(plan.table()[d + plan.left_horizon][x])
        if p in (0.0, 1.0):
            assert k == (n if p == 1.0 else 0), (name, d, x, n, k)
            continue
        assert n >= 20 if x == 0 else n >= 1, (name, d, x, n)  # the common state has enough trials
        tail = binomial_tail(k, n, p)
        assert tail >= delta / 2, f"{name} offset {d:+d} state {x}: {k}/{n} redacted, plan {p:.4f}, tail {tail:.2e}"
    assert max(n for n, _ in pooled.values()) >= 300  # occ: every record next to a mark
    for (name, p), (n, k) in pooled.items():
        tail = binomial_tail(k, n, p)
        assert tail >= delta / 2, f"{name} probability {p:.4f}: {k}/{n} redacted, tail {tail:.2e}"


# -- 2. private marks by flag, command, "now" and schedule; late marks ---------------------------
STRONG = (0.1, 0.2)  # horizons 4/4 at ε = 1 (exact design)
WEAK = (0.25, 0.5)  # one-step influence log 2 < 1: a late mark with released left neighbours is honoured
MARK_RATE = 10.0
LABELS = ("off", "on")


def local_time(ts: float) -> dt.time:
    return dt.datetime.fromtimestamp(ts).time()


def in_window(ts: float, start: dt.time, end: dt.time) -> bool:
    t = local_time(ts)
    return start <= t < end if start <= end else (t >= start or t < end)


def _worst_over_start(chain: MarkovChain, rows: np.ndarray, p: int) -> Leakage:
    """Leakage about position p of redaction rows over positions 0..len−1 (the stream's first
    record at 0), worst case over the law of that first record: the O(n) audit for each law of a
    grid that includes the point masses and laws next to them (a supremum may be approached there
    without being attained)."""
    seq = ChannelSequence.from_redaction(rows)
    worst = Leakage(0.0, 0.0, 0.0)
    for u in np.r_[np.linspace(0.0, 1.0, 21), 1e-11, 1 - 1e-11]:
        law = np.array([1.0 - u, u])
        if p == 0 and law.min() == 0:
            continue  # a secret with probability 0
        lk = exact_leakage(MarkovChain(chain.matrix, law), seq, p)
        worst = Leakage(max(worst.total, lk.total), max(worst.left, lk.left), max(worst.right, lk.right))
    return worst


def late_expectation(chain: MarkovChain, epsilon: float, left_rows: list[tuple[float, float]], p: int,
                     design: str = "exact") -> tuple[float, np.ndarray, float]:
    """A late mark at physical position p whose left neighbours used ``left_rows`` (outward from p;
    pending ones are 1; farther records were released): (exact left leakage, the right rows
    re-planned with the remaining budget — or, when nothing remains, the rest of the window fully
    redacted — and the exact total of those rows), worst case over the law of the first record."""
    window = np.array([*([(0.0, 0.0)] * (p - len(left_rows))), *left_rows[::-1], (1.0, 1.0)])
    left = _worst_over_start(chain, np.vstack([window, [[0.0, 0.0]]]), p).left
    budget = epsilon - left
    if budget > 1e-12:
        side = plan_side(SideModel(chain, 0, "right", None), budget, design)
        right = side.red[: side.horizon]
    else:
        right = np.ones((plan_stream(chain, epsilon, design=design).right_horizon, 2))
    full = np.vstack([window, right, [[0.0, 0.0]]])
    return left, right, _worst_over_start(chain, full, p).total


async def test_marks_by_flag_command_now_and_schedule(mosquitto: Broker, tmp_path: Path) -> None:
    """Every source of a private mark produces the plan's redactions on both sides of p (rows 1 ⇒
    null, rows 0 ⇒ the true value) and an on-time isolated mark's achieved leakage on the privacy
    topic equals StreamPlan.leakage() to 1e-9. Late marks — a command naming a seq whose left
    neighbours were already published (by waiting, or with delay = 0) — are reported late, with
    their exact left leakage, re-planned right side, exact achieved leakage and honoured flag;
    bad commands are counted. Deterministic seed: payloads say "deterministic"."""
    cfg = mosquitto.broker_config()
    strong, weak = MarkovChain.binary(*STRONG), MarkovChain.binary(*WEAK)
    n = 100
    sims = {
        "flag": SimStream("flag", strong, rate=MARK_RATE, seed=1, emission=Labels(LABELS),
                          button=Button(at=frozenset({20, 40, 41, 70}))),
        "now": SimStream("now", strong, rate=MARK_RATE, seed=2, emission=Labels(LABELS),
                         button=Button(at=frozenset({20, 45}), mode="command")),
        "cmd": SimStream("cmd", strong, rate=MARK_RATE, seed=3, emission=Labels(LABELS)),
        "sched": SimStream("sched", strong, rate=MARK_RATE, seed=4, emission=Labels(LABELS)),
        "late": SimStream("late", weak, rate=MARK_RATE, seed=5, emission=Labels(LABELS)),
        "late2": SimStream("late2", strong, rate=MARK_RATE, seed=6, emission=Labels(LABELS)),
    }
    frames = list(SimDevice(DEVICE, list(sims.values())).frames(duration=n / MARK_RATE))
    ts = {r: DEFAULT_START + r / MARK_RATE for r in range(n)}
    half = 0.5 / MARK_RATE
    windows = [(local_time(ts[20] - half), local_time(ts[20] + half)),
               (local_time(ts[50] - half), local_time(ts[52] + half))]
    assert {r for r in range(n) if any(in_window(ts[r], a, b) for a, b in windows)} == {20, 50, 51, 52}

    # commands inserted right after a given reading of a stream: (stream, after reading, payload)
    commands = [("cmd", 20, {"private": 20}), ("cmd", 50, {"private": 48}), ("cmd", 60, {"private": 999}),
                ("cmd", 60, {"private": -1}), ("cmd", 60, b"{not json"),
                ("late", 20, {"private": 20}), ("late", 40, {"private": 35}), ("late2", 20, {"private": 20})]
    items: list[tuple[str, bytes]] = []
    for f in frames:
        items.append((topic(f.stream, f.meta.channel), f.payload))
        for stream, after, payload in commands:
            if f.stream == stream and f.meta.channel == "raw" and f.meta.reading == after:
                items.append((topic(stream, "cmd"), payload if isinstance(payload, bytes) else json.dumps(payload).encode()))

    streams = [stream_cfg(name, LABELS, *(WEAK if name == "late" else STRONG), 1.0,
                          **({"delay": 0} if name.startswith("late") else {}),
                          **({"schedule": [{"start": a, "end": b} for a, b in windows]} if name == "sched" else {}))
               for name in sims]
    settings = settings_for(cfg, tmp_path, streams, deterministic_seed=7)
    truths = {name: truth_of(frames, name, LABELS) for name in sims}
    assert all(t.accepted == n and t.rejected() == 0 for t in truths.values())

    spy = Spy(cfg, f"{BASE}/#")
    async with running(spy.run()):
        await asyncio.wait_for(spy.subscribed.wait(), 10)
        async with daemon_running(settings) as (daemon, _, task):
            await spy.wait_until(lambda: "online" in spy.states(STATUS), 15, "online")
            await publish_all(cfg, items)
            await wait_counted(daemon, {name: n for name in sims})
            await asyncio.sleep(0.2)  # the last commands
        assert task.done() and task.exception() is None
        await spy.wait_until(lambda: shut_down(spy, {name: n for name in sims}), 15, "the final status")
    check_outputs(spy.messages, base=BASE, device=DEVICE, labels={s: LABELS for s in sims}, mode="deterministic")

    splan = plan_stream(strong, 1.0, design="exact")
    reports = {name: final_privacy(spy, name) for name in sims}
    marks_by = {name: {m["seq"]: m for m in r["recent_marks"]} for name, r in reports.items()}
    assert all(not r["open_marks"] and r["deterministic"] for r in reports.values())

    # on-time marks: flag, "now" command, {"private": seq} command, schedule
    on_time = {"flag": ({20, 40, 41, 70}, "flag"), "now": ({20, 45}, "command"), "cmd": ({20}, "command"),
               "sched": ({20, 50, 51, 52}, "schedule")}
    assert truths["flag"].flag_marks() == {20, 40, 41, 70} and truths["now"].now_marks == {20, 45}
    late_rows: dict[str, np.ndarray] = {}

    # the late mark of "cmd": {"private": 48} after reading 50 (delay 4): 44, 45 were published
    # (released), 46, 47 still pending (fully redacted from now on)
    left, right, total = late_expectation(strong, 1.0, [(1, 1), (1, 1), (0, 0), (0, 0)], 48)
    mk = marks_by["cmd"][48]
    assert mk["late"] and mk["honoured"] and mk["source"] == "command"
    assert abs(mk["left_leakage"] - left) <= 1e-9 and abs(mk["right_budget"] - (1.0 - left)) <= 1e-9
    assert abs(mk["achieved"]["total"] - total) <= 1e-9 and total <= 1.0 + 1e-9
    rows = expected_rows(n, {20}, splan)
    for d, row in [(-2, (1, 1)), (-1, (1, 1)), (0, (1, 1))] + [(i + 1, tuple(r)) for i, r in enumerate(right)]:
        np.maximum(rows[48 + d], row, out=rows[48 + d])
    late_rows["cmd"] = rows
    assert reports["cmd"]["counters"]["commands_rejected"] == {"unknown-seq": 1, "bad-private": 1, "not-json": 1}

    # delay = 0, weak chain: {"private": 20} after reading 20 — its left neighbour was released,
    # leaking about log 2 < ε (a little more for the worst first reading): honoured with the rest
    # of the budget on the right
    left, right, total = late_expectation(weak, 1.0, [(0, 0)], 20)
    mk = marks_by["late"][20]
    assert mk["late"] and mk["honoured"] and math.log(2) - 1e-9 <= left <= math.log(2) + 1e-3
    assert abs(mk["left_leakage"] - left) <= 1e-9 and abs(mk["achieved"]["total"] - total) <= 1e-9
    assert total <= 1.0 + 1e-9
    rows = np.zeros((n, 2))
    for d, row in [(0, (1, 1))] + [(i + 1, tuple(r)) for i, r in enumerate(right)]:
        rows[20 + d] = row
    # {"private": 35} after reading 40: record 35 itself was already published — not honoured,
    # reported with an unbounded leakage (never hidden)
    mk = marks_by["late"][35]
    assert mk["late"] and not mk["honoured"] and mk["achieved"]["total"] == "inf" and mk["reason"]
    late_rows["late"] = rows

    # delay = 0, strong chain: the released left neighbour alone leaks about log 8 > ε — not
    # honoured; p and the rest of its right window are redacted fully (fail closed), and the
    # achieved leakage is reported exactly
    left, right, total = late_expectation(strong, 1.0, [(0, 0)], 20)
    mk = marks_by["late2"][20]
    assert mk["late"] and not mk["honoured"] and math.log(8) - 1e-9 <= left <= math.log(8) + 1e-2 and total > 1.0
    assert abs(mk["left_leakage"] - left) <= 1e-9 and abs(mk["achieved"]["total"] - total) <= 1e-9
    rows = np.zeros((n, 2))
    for d, row in [(0, (1, 1))] + [(i + 1, tuple(r)) for i, r in enumerate(right)]:
        rows[20 + d] = row
    late_rows["late2"] = rows

    for name, truth in truths.items():
        if name in on_time:
            marks, source = on_time[name]
            plan = splan
            rows = expected_rows(n, marks, plan) if name not in late_rows else late_rows[name]
            reported_on_time = {s: m for s, m in marks_by[name].items() if not m["late"]}
            # consecutive flagged or scheduled records are one mark, a run seq..last (issue 28): one
            # report per run, and the runs cover exactly the private positions (no rejected frames
            # here: seq = position)
            assert set(reported_on_time) == {s for s in marks if s - 1 not in marks}
            assert {t for s, m in reported_on_time.items() for t in range(s, m.get("last", s) + 1)} == marks
            exact = check_marks_report({"recent_marks": list(reported_on_time.values())}, truth, marks, plan, source)
            assert exact == {"flag": 2, "now": 2, "cmd": 1, "sched": 1}[name]
        else:
            rows = late_rows[name]
        records = check_stream_records(spy, name, truth, rows, splan)
        # both sides of every private position are redacted as planned (rows 1 on both sides here)
        for p in set(marks_by[name]) - ({35} if name == "late" else set()):
            assert records[p]["redacted"]
        assert reports[name]["counters"]["accepted"] == n
        # issue 13: each stream's own delivery counters, and since when the counters count
        d = reports[name]["delivery"]
        assert d["since"] == reports[name]["counters_since"] > 0
        assert 0 <= d["stream"]["published_records"] <= d["published_records"]
        assert 0 <= d["stream"]["buffered"] <= d["buffered"] and d["stream"]["dropped"] == 0
    assert sum(reports[name]["delivery"]["stream"]["published_records"] for name in truths) > 0


# -- 3. broker outages ------------------------------------------------------------------------------
async def test_broker_restarts_lose_nothing(mosquitto_persistent: Broker, tmp_path: Path) -> None:
    """The broker is stopped three times while the daemon publishes, and a simulated device (an
    in-process source) keeps feeding it during each outage: the outbox keeps what cannot be
    published and drains after each reconnect; the subscriber (persistent session) gets every
    accepted record after de-duplication, in order, never one record with two payloads, values as
    the plan allows; the outbox is empty at the end."""
    broker = mosquitto_persistent
    cfg = broker.broker_config()
    labels = ("vacant", "occupied")
    chain = MarkovChain.binary(0.1, 0.2)
    sim = SimStream("occ", chain, rate=50.0, seed=31, emission=Labels(labels), button=Button(probability=0.03),
                    faults=Faults(rate=0.02))
    frames = list(SimDevice(DEVICE, [sim]).frames(count=1000))
    truth = truth_of(frames, "occ", labels)
    chunks = [frames[i:i + 250] for i in range(0, len(frames), 250)]
    accepted_upto = np.cumsum([sum(f.meta.accepted for f in c) for c in chunks])
    gates = [asyncio.Event() for _ in chunks]

    async def source() -> Any:
        for gate, chunk in zip(gates, chunks):
            await gate.wait()
            for f in chunk:
                yield f.stream, f.payload
        await asyncio.Event().wait()  # the input stays open until the daemon is stopped

    settings = settings_for(cfg, tmp_path, [stream_cfg("occ", labels, 0.1, 0.2, 1.0, source="sim")],
                            deterministic_seed=3)
    spy = Spy(cfg, f"{BASE}/#", persistent=True)
    async with running(spy.run()):
        await asyncio.wait_for(spy.subscribed.wait(), 10)
        async with daemon_running(settings, extra_sources=[source]) as (daemon, _, task):
            await spy.wait_until(lambda: "online" in spy.states(STATUS), 15, "online")
            publisher = daemon.publisher
            assert publisher is not None
            gates[0].set()
            for i in range(1, len(chunks)):
                # the publisher is busy with the previous chunk (which, after the first outage, it
                # could only publish after reconnecting) ...
                target = int(accepted_upto[i - 1]) - 120
                async with asyncio.timeout(20):
                    while publisher.stats.records < target:
                        await asyncio.sleep(0.005)
                # ... when the broker stops; the next chunk arrives during the outage
                await asyncio.to_thread(broker.stop)
                gates[i].set()
                await wait_counted(daemon, {"occ": sum(len(c) for c in chunks[: i + 1])}, timeout=10)
                assert await daemon.store.box.run(len) > 0  # buffered on disk
                await asyncio.to_thread(broker.start)
        assert task.done() and task.exception() is None
        assert publisher.stats.reconnects >= 3 and publisher.stats.resends >= 1
        await spy.wait_until(lambda: len(spy.seqs(topic("occ", "data"))) >= truth.accepted, 30, "every record")
        await spy.wait_until(lambda: shut_down(spy, {"occ": truth.accepted}), 15, "the final status")

    check_outputs(spy.messages, base=BASE, device=DEVICE, labels={"occ": labels}, mode="deterministic")
    plan = plan_stream(chain, 1.0, design="exact")
    marks = truth.flag_marks()
    check_stream_records(spy, "occ", truth, expected_rows(len(truth.steps), marks, plan), plan)
    report = final_privacy(spy, "occ")
    assert report["counters"]["accepted"] == truth.accepted
    check_marks_report(report, truth, marks, plan, source="flag")
    with Outbox(tmp_path / "outbox.sqlite", 10, "drop-oldest") as box:
        assert len(box) == 0 and box.next_position("occ") == truth.accepted  # drained


# -- 4. fuzzed input ----------------------------------------------------------------------------------
def _no_constants(token: str) -> float:
    raise ValueError(token)


def oracle_steps(data: bytes) -> list[tuple[float | str | None, float | None]]:
    """The frames a raw message carries, each as (:func:`oracle_frame`, :func:`oracle_step_ts`):
    the message itself, or — when it decodes as a JSON list (NaN allowed) of at most
    MAX_BATCH_FRAMES elements and MAX_BATCH_BYTES bytes — each element as a frame of its own (no
    per-frame size limit inside a list); a longer list is one rejected frame without a time."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        doc = None
    if not isinstance(doc, list):
        return [(oracle_frame(data), oracle_step_ts(data))]
    if len(data) > MAX_BATCH_BYTES or len(doc) > MAX_BATCH_FRAMES:
        return [(None, None)]
    return [(_oracle_object(e, _holds_constant(e)), _oracle_seconds(e.get("ts")) if isinstance(e, dict) else None)
            for e in doc]


def _holds_constant(obj: Any) -> bool:
    """Does a decoded JSON value hold NaN or ±Infinity (not JSON: the frame is rejected)?"""
    if isinstance(obj, float):
        return not math.isfinite(obj)
    if isinstance(obj, dict):
        return any(_holds_constant(v) for v in obj.values())
    if isinstance(obj, list):
        return any(_holds_constant(v) for v in obj)
    return False


def oracle_frame(data: bytes) -> float | str | None:
    """What a correct daemon makes of a raw frame (labels "off"/"on"), from the wire format alone:
    None if it must be rejected, else its ``ts`` (a float) or ``"now"`` when it carries none.
    Timestamp order is checked by the caller."""
    if len(data) > MAX_FRAME_BYTES:
        return None
    try:
        obj = json.loads(data.decode("utf-8"), parse_constant=_no_constants)
    except (ValueError, RecursionError):
        return None
    return _oracle_object(obj, False)


def _oracle_object(obj: Any, non_finite: bool) -> float | str | None:
    """:func:`oracle_frame` of a decoded frame (``non_finite``: it held NaN or ±Infinity)."""
    if non_finite:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("value"), str) or obj["value"] not in LABELS:
        return None
    if "private" in obj and not isinstance(obj["private"], bool):
        return None
    if "ts" not in obj:
        return "now"
    return _oracle_seconds(obj["ts"])


def _oracle_seconds(ts: Any) -> float | None:
    """A JSON value as a finite number of seconds (not a bool, within the float range), or None."""
    if isinstance(ts, bool) or not isinstance(ts, (int, float)):
        return None
    try:
        f = float(ts)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def oracle_step_ts(data: bytes) -> float | None:
    """The ``ts`` that identifies a frame's step even when the frame is rejected (issue 9 item 6):
    a finite number in field "ts" of a frame that decodes as a JSON object (NaN constants allowed
    elsewhere in it), else None."""
    if len(data) > MAX_FRAME_BYTES:
        return None
    try:
        obj = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    return _oracle_seconds(obj.get("ts")) if isinstance(obj, dict) else None


def _dumps(v: Any) -> bytes:
    return json.dumps(v).encode()  # NaN and ±Infinity as Python writes them (not JSON)


_leaf = (st.none() | st.booleans() | st.integers() | st.integers(min_value=10**300, max_value=10**400)
         | st.floats() | st.text(max_size=12) | st.sampled_from(LABELS))
JSON = st.recursive(_leaf, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=6), c, max_size=4),
                    max_leaves=12)
NEAR_VALID = st.fixed_dictionaries({}, optional={
    "value": st.sampled_from(LABELS) | JSON,
    "ts": st.floats() | st.integers() | st.integers(min_value=-(10**400), max_value=10**400) | JSON,
    "private": st.booleans() | JSON,
    "pad": JSON,
})
HUGE = st.tuples(st.integers(MAX_FRAME_BYTES - 8, MAX_FRAME_BYTES + 8) | st.integers(MAX_FRAME_BYTES, 2 * 2**20),
                 st.sampled_from([b" ", b"x", b"\xff", b"["])).map(
    lambda t: (b'{"value":"on"' + t[1] * max(0, t[0] - 14) + b"}") if t[1] == b" " else t[1] * t[0])
DEEP = st.integers(50, 8000).map(lambda d: b'{"value":' + b"[" * d + b"]" * d + b"}") | st.integers(1, 20000).map(
    lambda d: b"{" * d)
RAW_FUZZ = st.one_of(st.binary(max_size=300), JSON.map(_dumps), NEAR_VALID.map(_dumps), HUGE, DEEP,
                     st.text(max_size=50).map(lambda t: t.encode("utf-8", "surrogatepass")))
CMD_FUZZ = st.one_of(st.binary(max_size=100), JSON.map(_dumps), DEEP,
                     st.fixed_dictionaries({"private": st.integers(-3, 10**30) | st.sampled_from(["now", "later"])
                                            | JSON}).map(_dumps))


class Background:
    """An asyncio loop in a thread, so that a (synchronous) hypothesis test can drive a daemon
    that keeps running across examples."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="daemon-loop", daemon=True)

    def __enter__(self) -> Background:
        self.thread.start()
        return self

    def run(self, coro: Any, timeout: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


#: A frame without ts is stamped by the daemon's clock within this many seconds of being sent.
NOW_SLACK = 10.0


def test_fuzzed_frames_never_crash_nor_leak(mosquitto: Broker, tmp_path: Path) -> None:
    """Arbitrary bytes, arbitrary JSON, near-valid objects, payloads around and far beyond the size
    limit (up to 2 MiB: those over the MQTT 5 Maximum Packet Size never reach the daemon) and
    deeply nested JSON, and JSON lists (batches: each element a frame) on the raw topic — and
    fuzzed commands — never
    crash the daemon: each frame is counted as accepted or rejected exactly as the wire format
    says (an independent oracle), a valid frame afterwards is still processed, and nothing but
    well-formed sanitized records, statuses and privacy reports is ever published."""
    cfg = mosquitto.broker_config()
    stream = "fz"
    conf = settings_for(cfg, tmp_path, [stream_cfg(stream, LABELS, *WEAK, 1.0)], deterministic_seed=11)
    raw, cmd = topic(stream, "raw"), topic(stream, "cmd")

    class Rig:
        async def start(self) -> None:
            self.spy = Spy(cfg, f"{BASE}/#")
            self.spy_task = asyncio.create_task(self.spy.run())
            await asyncio.wait_for(self.spy.subscribed.wait(), 10)
            self.daemon = Daemon(conf)
            self.stop = asyncio.Event()
            self.task = asyncio.create_task(self.daemon.run(self.stop))
            await self.spy.wait_until(lambda: "online" in self.spy.states(STATUS), 15, "online")
            self.client = aiomqtt.Client(cfg.host, cfg.port, identifier="fuzzer")
            await self.client.__aenter__()

        async def send(self, items: list[tuple[str, bytes]], frames_total: int) -> dict[str, Any]:
            for t, payload in items:
                await self.client.publish(t, payload, qos=1)
            c = self.daemon.runtimes[stream].counters
            async with asyncio.timeout(15):
                while c.accepted + sum(c.rejected.values()) + c.duplicates < frames_total and not self.task.done():
                    await asyncio.sleep(0.005)
            return {"accepted": c.accepted, "rejected": dict(c.rejected), "duplicates": c.duplicates,
                    "commands_rejected": dict(c.commands_rejected), "alive": not self.task.done()}

        async def finish(self) -> None:
            await self.client.__aexit__(None, None, None)
            self.stop.set()
            await asyncio.wait_for(self.task, 30)  # re-raises a daemon failure
            n = self.daemon.runtimes[stream].counters.accepted
            await self.spy.wait_until(lambda: shut_down(self.spy, {stream: n}), 15, "the final status")
            self.spy_task.cancel()
            await asyncio.gather(self.spy_task, return_exceptions=True)

    rig = Rig()
    expect = {"accepted": 0, "rejected": 0, "frames": 0, "ambiguous": False}
    last: list[float] = [-math.inf, -math.inf]  # the daemon's last accepted ts lies in [lo, hi]
    # steps by their exact ts (a frame with the ts of a step already seen is a redelivery: no new
    # step, counted as a duplicate), and the newest step's ts as a range like ``last``
    seen: set[float] = set()
    newest: list[float] = [-math.inf, -math.inf]

    with Background() as bg:
        bg.run(rig.start())

        @hsettings(max_examples=100, suppress_health_check=list(HealthCheck))
        @given(frames=st.lists(RAW_FUZZ, min_size=1, max_size=4), command=st.none() | CMD_FUZZ)
        @example(frames=[b'{"value":' + b"[" * 3000 + b"]" * 3000 + b"}", b'{"value":"on","ts":1' + b"0" * 400 + b"}",
                         b'{"value":"on","ts":-1' + b"0" * 400 + b"}", b'{"value":"on","ts":1e400}'],
                 command=b"[" * 5000)  # the decoder's recursion limit; integers beyond the float range
        @example(frames=[b'{"value":"on"' + b" " * (MAX_FRAME_BYTES - 14) + b"}",  # exactly at the limit: valid
                         b'{"value":"on"' + b" " * (MAX_FRAME_BYTES - 13) + b"}",  # one byte more
                         b'{"value":"on","pad":"' + b"x" * 2 * 2**20 + b'"}'], command=None)
        @example(frames=[b'[{"value":"on","ts":1e9}, {"value":"off"}, "x", {"value":"on","ts":NaN}, [], '
                         b'{"value":"on","ts":1e9,"private":true}]', b"[]",  # batches (issue 15); a duplicate
                         b"[" + b'{"value":"on"},' * MAX_BATCH_FRAMES + b'{"value":"on"}]'],  # one too many
                 command=b'{"private": "now"}')
        def one_batch(frames: list[bytes], command: bytes | None) -> None:
            sent_at = time.time()
            steps = []  # each message's frames (a JSON list is several); the broker discards a packet
            for data in frames:  # over our MQTT 5 Maximum Packet Size: never seen
                if len(data) + len(raw) + 10 <= MAX_PACKET_BYTES:
                    steps += oracle_steps(data)
            for verdict, step_ts in steps:
                expect["frames"] += 1
                if step_ts is not None and step_ts > sent_at + MAX_CLOCK_AHEAD:  # no usable time
                    expect["ambiguous"] |= step_ts <= sent_at + MAX_CLOCK_AHEAD + 30.0
                    step_ts = None
                if step_ts is not None and step_ts in seen:
                    continue  # a duplicate: neither accepted nor rejected
                if verdict is None:
                    expect["rejected"] += 1
                    if step_ts is not None:  # a rejected frame with a readable ts: a step, unless late
                        if step_ts >= newest[1]:
                            seen.add(step_ts)
                            newest[:] = [step_ts, step_ts]
                        elif step_ts >= newest[0]:
                            expect["ambiguous"] = True
                    continue
                if verdict != "now" and verdict > sent_at + MAX_CLOCK_AHEAD:  # too far in the future
                    if verdict > sent_at + MAX_CLOCK_AHEAD + 30.0:
                        expect["rejected"] += 1
                    else:
                        expect["ambiguous"] = True  # depends on the daemon's exact clock reading
                    continue
                if verdict == "now":  # stamped max(the daemon's clock, just after the last accepted ts)
                    lo = max(sent_at, math.nextafter(last[0], math.inf))  # (records._stamp: frames handled
                    hi = max(sent_at + NOW_SLACK, math.nextafter(last[1], math.inf))  # together share a clock)
                    if newest == last or lo > newest[1]:  # after the newest step for sure
                        expect["accepted"] += 1
                        last[:] = [lo, hi]
                        newest[:] = [lo, hi]
                    elif hi < newest[0]:
                        expect["rejected"] += 1  # before a rejected frame's later ts: out of order
                    else:
                        expect["ambiguous"] = True
                    continue
                if verdict >= max(last[1], newest[1]):
                    expect["accepted"] += 1
                    last[:] = [verdict, verdict]
                    newest[:] = [verdict, verdict]
                    seen.add(verdict)
                elif verdict < max(last[0], newest[0]):
                    expect["rejected"] += 1  # out of order
                else:
                    expect["ambiguous"] = True  # a "now" frame's clock reading is not known exactly
            # after every "now" frame, and within the daemon's clock allowance
            follow_ts = max(last[1], newest[1], time.time() + NOW_SLACK + 5.0)
            assert follow_ts < time.time() + MAX_CLOCK_AHEAD
            valid = _dumps({"value": "on", "ts": follow_ts})
            expect["frames"] += 1
            expect["accepted"] += 1
            last[:] = [follow_ts, follow_ts]
            newest[:] = [follow_ts, follow_ts]
            seen.add(follow_ts)
            items = [(raw, f) for f in frames] + ([(cmd, command)] if command is not None else []) + [(raw, valid)]
            got = bg.run(rig.send(items, expect["frames"]))
            assert got["alive"], "the daemon stopped"
            assert got["accepted"] + sum(got["rejected"].values()) + got["duplicates"] == expect["frames"]
            if not expect["ambiguous"]:
                assert got["accepted"] == expect["accepted"], (got, expect)
            assert set(got["rejected"]) <= set(REASONS) and set(got["commands_rejected"]) <= set(COMMAND_REASONS)

        one_batch()
        bg.run(rig.finish(), timeout=60)

    counters = rig.daemon.runtimes[stream].counters
    assert counters.rejected["oversize"] and counters.rejected["not-json"]
    counts = check_outputs(rig.spy.messages, base=BASE, device=DEVICE, labels={stream: LABELS}, mode="deterministic")
    order, payloads = first_occurrences(rig.spy.records(topic(stream, "data")))
    assert order == list(range(counters.accepted)) and counts["data"] == counters.accepted
    assert all(len(p) == 1 for p in payloads.values())


# -- 5. TLS and passwords -------------------------------------------------------------------------
@pytest.mark.parametrize("secured", ["tls", "password_file"])
async def test_tls_and_password_brokers(secured: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """The daemon, configured from a TOML file, talks to a Mosquitto that requires TLS (verified
    against ``ca_file``) or a username and a password read from ``password_file``: records,
    status and privacy reports flow; the broker really refuses a client without them."""
    from streamguard.config import load_settings
    from streamguard.stream.transport import ConnectFailed

    if secured == "tls":
        broker: Broker = request.getfixturevalue("mosquitto_tls")
        assert broker.ca_file is not None
        broker_toml = f'tls = true\nca_file = "{broker.ca_file}"\n'
        refused = broker.broker_config(tls=False, ca_file=None)
    else:
        broker = request.getfixturevalue("mosquitto_auth")
        secret = tmp_path / "mqtt-password"
        secret.write_text(f"{broker.password}\n")
        broker_toml = f'username = "{broker.username}"\npassword_file = "{secret}"\n'
        refused = broker.broker_config(username=None, password=None)
    conf = tmp_path / "streamguard.toml"
    conf.write_text(f"""device = "{DEVICE}"
topic_base = "{BASE}"
deterministic_seed = 5
[broker]
host = "127.0.0.1"
port = {broker.port}
{broker_toml}
[outbox]
path = "{tmp_path / 'outbox.sqlite'}"
[[streams]]
name = "occ"
labels = ["off", "on"]
epsilon = 1.0
design = "exact"
[streams.model]
alpha = {STRONG[0]}
beta = {STRONG[1]}
""")
    settings = load_settings(conf)
    cfg = settings.broker
    assert (cfg.tls and cfg.ca_file == broker.ca_file) if secured == "tls" else (
        cfg.username == broker.username and cfg.secret() == broker.password and cfg.password is None)
    with pytest.raises(ConnectFailed):
        async with MqttTransport(refused, PublishConfig(), device="intruder", status_topic="x", timeout=1.0):
            pass

    sim = SimStream("occ", MarkovChain.binary(*STRONG), rate=10.0, seed=8, emission=Labels(LABELS),
                    button=Button(at=frozenset({10})))
    frames = list(SimDevice(DEVICE, [sim]).frames(count=40))
    truth = truth_of(frames, "occ", LABELS)
    spy = Spy(cfg, f"{BASE}/#")
    async with running(spy.run()):
        await asyncio.wait_for(spy.subscribed.wait(), 10)
        async with daemon_running(settings) as (daemon, _, task):
            await spy.wait_until(lambda: "online" in spy.states(STATUS), 15, "online")
            await publish_all(cfg, frame_items(frames))
            await wait_counted(daemon, {"occ": len(frames)})
        assert task.done() and task.exception() is None
        await spy.wait_until(lambda: shut_down(spy, {"occ": truth.accepted}), 15, "the final status")
    check_outputs(spy.messages, base=BASE, device=DEVICE, labels={"occ": LABELS}, mode="deterministic")
    plan = plan_stream(MarkovChain.binary(*STRONG), 1.0, design="exact")
    check_stream_records(spy, "occ", truth, expected_rows(len(truth.steps), {10}, plan), plan)
    assert check_marks_report(final_privacy(spy, "occ"), truth, {10}, plan, "flag") == 1


# -- 6. the demo and its embedded broker --------------------------------------------------------------
def _non_loopback_address() -> str | None:
    """An address of this host on a non-loopback interface, if it has one (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))
            addr = s.getsockname()[0]
        except OSError:
            return None
    return None if addr.startswith("127.") else addr


async def test_embedded_broker_round_trip_on_loopback_only() -> None:
    from streamguard.demo.broker import embedded_broker

    async with embedded_broker() as (host, port):
        assert host == "127.0.0.1" and 0 < port < 65536
        async with aiomqtt.Client(host, port, identifier="embedded-test") as client:
            await client.subscribe("sgtest/#", qos=1)
            await client.publish("sgtest/x", b"\x00hello", qos=1)
            msg = await asyncio.wait_for(anext(aiter(client.messages)), 5)
        assert msg.topic.value == "sgtest/x" and msg.payload == b"\x00hello"
        other = _non_loopback_address()
        if other is not None:  # never reachable from the network
            with pytest.raises(OSError):
                socket.create_connection((other, port), timeout=0.5).close()
    with pytest.raises(OSError):  # shut down with the context
        socket.create_connection((host, port), timeout=0.5).close()


async def test_run_demo_passes_its_end_to_end_checks() -> None:
    from streamguard.demo.run import run_demo

    out = io.StringIO()
    assert await asyncio.wait_for(run_demo(duration=4, rate=20.0, seed=3, broker=None, out=out), 60) == 0
    text = out.getvalue()
    assert "checks: all passed" in text and "embedded MQTT broker (amqtt) on 127.0.0.1:" in text
    summary = text.split("summary after", 1)[1]  # counters in words, no Python dict reprs
    assert "simulator sent: frames " in summary and "{" not in summary


async def test_stdout_sink_and_extra_source_feed_the_same_records(mosquitto, tmp_path, capsys) -> None:
    """A daemon with an in-process source writes every stored record to stdout as a JSON line, in
    seq order, with the same bytes that go to the outbox (and so to MQTT)."""
    from streamguard.config import Settings

    settings = Settings(device="sink", broker=mosquitto.broker_config(), stdout=True,
                        outbox={"path": tmp_path / "o.sqlite"},
                        streams=[{"name": "s", "labels": ["a", "b"], "model": {"alpha": 0.2, "beta": 0.3},
                                  "epsilon": 1.0, "source": "stdin"}])

    async def frames():
        for i in range(25):
            yield "s", json.dumps({"value": "ab"[i % 2], "ts": 1.79e9 + i, "private": i == 12}).encode()

    async with daemon_running(settings, extra_sources=[frames]) as (_, _, task):
        await asyncio.wait_for(asyncio.shield(task), 30)  # the source ends → the daemon drains and stops
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["seq"] for r in lines] == list(range(25))
    assert all((r["value"] is None) == r["redacted"] and r["value"] in (None, "ab"[r["seq"] % 2]) for r in lines)
    assert lines[12]["redacted"]
