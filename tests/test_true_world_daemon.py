"""The real daemon against the *true world*: exact leakage about every private step, computed by
the tests' own evaluator (tests/true_world.py) from the rows the daemon published, the true
chain and the true initial law — including the steps the daemon never saw (lost frames, the
hidden gap of a restart) and the steps it published nothing for (rejected frames).

Each run: one redaction stream (labels lo/hi, the true α, β as its model, ε), frames fed
in-process through an extra source (the ``source = "stdin"`` path), commands through
``Daemon.handle_command``, published records captured from Mosquitto by a Spy. Every true step has
its own ``ts``, so published copies map to true steps by ``ts``. The contract checked (issue 9):

- every record carries ``"redaction": [r0, r1]``, consistent with what it shows;
- for every mark (``open_marks``/``recent_marks``; mapped to its true steps by position — within a
  life the frames sent are the steps, in order — and cross-checked with its ``ts`` or ``seq``; a run
  of private steps covers position..``last``, issue 28): every figure it reports
  (``leakage.total``, ``achieved.total``) ≥ the true leakage − 1e-9; if it says ``honoured``, the
  true leakage for the true μ, and for every initial law (item 9), is ≤ ε·(1+1e-9);
- every step the daemon could know to be private (flag, redelivered flag, command, schedule,
  rejected private frame) has a mark; no mark stays open after a drained run; ``run`` returns.

Failures name the run's seed (rerun one run with ``STREAMGUARD_PROPERTY_SEED``); the property
test runs ``STREAMGUARD_PROPERTY_RUNS`` runs (default 12). Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import math
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from brokers import Broker
from daemon_harness import Spy, running
from streamguard.config import PublishConfig, Settings
from streamguard.stream.daemon import Daemon
from streamguard.stream.transport import MqttTransport
from true_world import combine_copies, transition, true_leakage, worst_over_initial

BASE, DEVICE, NAME = "tw", "dev", "s"
LABELS = ("lo", "hi")
DATA = f"{BASE}/{DEVICE}/{NAME}/data"
#: A whole minute (so schedule windows of whole minutes hold whole steps).
T0 = 1_699_999_980
RUN_TIMEOUT = 60.0
SPY_TIMEOUT = 15.0
TOL = 1e-9


# -- the true world and the script the daemon sees ------------------------------------------------
@dataclass
class World:
    """The truth of one stream: chain, initial law, states and ``ts`` of every step, and which
    steps are private in a way the daemon can know (``private``); ``lives`` is what each daemon
    life receives, in order: ("frame", step, bytes) — step −1 for a frame that is no new step —,
    ("command", step, bytes), or ("await-seq", seq, b"") (wait until that record is published)."""

    seed: int
    alpha: float
    beta: float
    epsilon: float
    mu: np.ndarray
    states: list[int]
    ts: list[float]
    private: set[int] = field(default_factory=set)
    lives: list[list[tuple[str, int, bytes]]] = field(default_factory=lambda: [[]])
    schedule: list[dict[str, str]] = field(default_factory=list)
    delay: int | None = None
    max_hold: float | None = None
    #: step → seq of its accepted record (the contract's numbering)
    seq_of: dict[int, int] = field(default_factory=dict)
    #: a k-state world (issue 12): its transition matrix (alpha, beta unused) and labels; a
    #: time-varying world (issue 25): its kernel sequence (n − 1, k, k), [t] the step t → t+1
    matrix: np.ndarray | None = None
    labels: tuple[str, ...] = LABELS
    #: the stream's ``[model]`` table when it is not the true chain (a model set's file, issue 11)
    model: dict[str, Any] | None = None
    #: the stream's ``sample_period`` (steps are slots of ``ts``; lost frames are then missing slots
    #: the daemon counts within a life)
    sample_period: float | None = None

    @property
    def P(self) -> np.ndarray:
        return transition(self.alpha, self.beta) if self.matrix is None else self.matrix

    def describe(self) -> str:
        model = (f"alpha={self.alpha:.4g} beta={self.beta:.4g}" if self.matrix is None
                 else f"matrix={np.round(self.matrix, 4).tolist()}" if self.matrix.ndim == 2
                 else f"{len(self.matrix)} kernels")
        return f"seed={self.seed} {model} eps={self.epsilon:.4g} mu={self.mu.tolist()} n={len(self.states)}"


def sample_world(seed: int, alpha: float, beta: float, epsilon: float, mu: np.ndarray, n: int,
                 spacing: float = 1.0, matrix: np.ndarray | None = None) -> World:
    """A world of n steps; binary (alpha, beta) unless ``matrix`` gives a k-state chain (or a
    time-varying one: a sequence of n − 1 kernels)."""
    rng = np.random.default_rng(seed)
    P = transition(alpha, beta) if matrix is None else matrix
    k = P.shape[-1]
    states = [int(rng.choice(k, p=mu))]
    for t in range(n - 1):
        states.append(int(rng.choice(k, p=(P if P.ndim == 2 else P[t])[states[-1]])))
    labels = LABELS if matrix is None else tuple(f"s{i}" for i in range(k))
    return World(seed, alpha, beta, epsilon, np.asarray(mu, dtype=float), states,
                 [T0 + spacing * t + spacing / 2 for t in range(n)], matrix=matrix, labels=labels)


def reading(w: World, t: int, *, private: bool = False) -> bytes:
    return json.dumps({"value": w.labels[w.states[t]], "ts": w.ts[t], **({"private": True} if private else {})}).encode()


def malformed(w: World, t: int, *, private: bool = False) -> bytes:
    return json.dumps({"value": "xx", "ts": w.ts[t], **({"private": True} if private else {})}).encode()


def escaped_private(w: World, t: int) -> bytes:
    """A rejected frame whose "private" key is spelt with an escape (item 8)."""
    return b'{"\\u0070rivate": true, "value": "xx", "ts": %r}' % w.ts[t]


NOT_JSON = b'{"value": "lo", "ts": '  # truncated: unreadable, ts unknown


class Script:
    """Builds a world's lives, keeping the contract's seq numbering and the private steps."""

    def __init__(self, w: World) -> None:
        self.w = w
        self.next_seq = 0

    def restart(self) -> None:
        self.w.lives.append([])

    def send(self, t: int, kind: str = "reading", *, private: bool = False) -> bytes:
        w = self.w
        if kind == "reading":
            data = reading(w, t, private=private)
            w.seq_of[t] = self.next_seq
            self.next_seq += 1
        elif kind == "malformed":
            data = malformed(w, t, private=private)
        elif kind == "escaped":
            data, private = escaped_private(w, t), True
        elif kind == "not-json":
            data = NOT_JSON
        else:
            raise ValueError(kind)
        if private:
            w.private.add(t)
        w.lives[-1].append(("frame", t, data))
        return data

    def resend(self, data: bytes) -> None:
        """A redelivery (same bytes, same ts): no new step."""
        self.w.lives[-1].append(("frame", -1, data))

    def command(self, t: int) -> None:
        self.w.private.add(t)
        self.w.lives[-1].append(("command", t, json.dumps({"private": self.w.seq_of[t]}).encode()))

    def await_seq(self, seq: int) -> None:
        self.w.lives[-1].append(("await-seq", seq, b""))


def script_faults(w: World, rng: np.random.Generator, *, duplicates: float = 0.0) -> None:
    """Script all of ``w``'s steps with the faults of the model-set worlds: one restart in the middle
    third followed by a hidden gap of 0–3 steps, 5 % lost frames, 5 % malformed ones, 10 % private
    flags, late commands (8 % after each reading, for one of the last 2–7 readings of the life)
    and, with ``duplicates`` > 0, that share of readings redelivered right after their frame."""
    s, n = Script(w), len(w.states)
    restart_at = int(rng.integers(n // 3, 2 * n // 3))
    readings: list[int] = []
    t = 0
    while t < n:
        if t == restart_at:
            s.restart()
            readings = []
            t += int(rng.integers(0, 4))  # a hidden gap
            if t >= n:
                break
        roll = rng.uniform()
        if roll < 0.05:
            t += 1  # lost
            continue
        flag = bool(rng.uniform() < 0.1)
        if roll < 0.1:
            s.send(t, "malformed", private=flag)
        else:
            data = s.send(t, private=flag)
            readings.append(t)
            if duplicates and rng.uniform() < duplicates:
                s.resend(data)
        if len(readings) > 3 and rng.uniform() < 0.08:
            s.command(readings[-int(rng.integers(2, min(len(readings), 8)))])  # often late
        t += 1


def minute_window(ts: float) -> dict[str, str]:
    """The one-minute daily window (local time) that holds ``ts``."""
    start = dt.datetime.fromtimestamp(ts).replace(second=0, microsecond=0)
    return {"start": start.strftime("%H:%M"), "end": (start + dt.timedelta(minutes=1)).strftime("%H:%M")}


def in_window(ts: float, window: dict[str, str]) -> bool:
    return dt.datetime.fromtimestamp(ts).strftime("%H:%M") == window["start"]


# -- running the daemon ------------------------------------------------------------------------
@dataclass
class Outcome:
    records: list[dict[str, Any]]  # every distinct record published (all lives)
    marks: list[list[dict[str, Any]]]  # per life: open + recent marks after it returned
    open_after: list[int]  # per life: open marks left after the drained run


def _settings(broker: Broker, w: World, outbox: Path) -> Settings:
    model = {"alpha": w.alpha, "beta": w.beta} if w.matrix is None else {"matrix": w.matrix.tolist()}
    model = model if w.model is None else w.model
    stream: dict[str, Any] = {"name": NAME, "labels": list(w.labels), "model": model,
                              "epsilon": w.epsilon, "source": "stdin", "schedule": w.schedule}
    if w.delay is not None:
        stream["delay"] = w.delay
    if w.max_hold is not None:
        stream["max_hold"] = w.max_hold
    if w.sample_period is not None:
        stream["sample_period"] = w.sample_period
    return Settings(device=DEVICE, topic_base=BASE, broker=broker.broker_config(), outbox={"path": outbox},
                    streams=[stream], stdout=False, deterministic_seed=w.seed)


async def run_world(broker: Broker, w: World, workdir: Path) -> Outcome:
    """Run every life of ``w`` on one outbox; collect what was published and the final marks."""
    workdir.mkdir(parents=True, exist_ok=True)
    # each world is an identity's history of its own: the previous world's retained privacy status
    # goes (a fresh outbox under published seqs is refused, issue 28)
    async with MqttTransport(broker.broker_config(), PublishConfig(), device=f"clear{w.seed}", status_topic="x",
                             will=False) as t:
        await t.publish(f"{BASE}/{DEVICE}/{NAME}/privacy", b"", retain=True)
    spy = Spy(broker.broker_config(), DATA, name=f"spy{w.seed}")
    marks: list[list[dict[str, Any]]] = []
    open_after: list[int] = []
    async with running(spy.run()):
        await asyncio.wait_for(spy.subscribed.wait(), 10)
        for life in w.lives:
            daemon = Daemon(_settings(broker, w, workdir / "outbox.sqlite"), extra_sources=[])

            async def source(life: list[tuple[str, int, bytes]] = life, daemon: Daemon = daemon
                             ) -> AsyncIterator[tuple[str, bytes]]:
                for kind, arg, data in life:
                    if kind == "frame":
                        yield NAME, data
                    elif kind == "command":
                        await daemon.intake.handle_command(NAME, data)
                    else:
                        await spy.wait_until(lambda s=arg: s in spy.seqs(DATA), SPY_TIMEOUT, f"record seq {arg}")

            daemon.extra_sources.append(source)
            await asyncio.wait_for(daemon.run(asyncio.Event()), RUN_TIMEOUT)
            status = daemon.runtimes[NAME].privacy_status()
            next_seq = status["next_seq"]
            await spy.wait_until(lambda n=next_seq: spy.seqs(DATA) >= set(range(n)), SPY_TIMEOUT,
                                 f"records 0..{next_seq - 1}")
            marks.append(status["open_marks"] + status["recent_marks"])
            open_after.append(len(status["open_marks"]))
    by_seq: dict[int, set[bytes]] = {}
    for seq, payload in spy.records(DATA):
        by_seq.setdefault(seq, set()).add(payload)
    records = []
    for seq, payloads in sorted(by_seq.items()):
        assert len(payloads) == 1, f"{w.describe()}: record seq {seq} published with two different payloads"
        records.append(json.loads(next(iter(payloads))))
    return Outcome(records, marks, open_after)


# -- the true leakage and the checks -------------------------------------------------------------
def _number(x: Any) -> float:
    return math.inf if x == "inf" else float(x)


@dataclass
class Verdict:
    rows: np.ndarray
    truth: dict[int, float]  # step → true leakage (true μ) of the steps that have marks
    problems: list[str]
    marks_of: dict[int, list[dict[str, Any]]]


def evaluate(w: World, out: Outcome) -> Verdict:
    """Effective rows of every true step from the published records; every mark checked against
    the true leakage of its step (see module docstring). Returns the problems found."""
    n, P = len(w.states), w.P
    k = P.shape[0]
    problems: list[str] = []
    step_of_ts = {ts: t for t, ts in enumerate(w.ts)}
    copies: list[list[tuple[float, ...]]] = [[] for _ in range(n)]
    step_of_seq: dict[int, int] = {}
    rowless: list[int] = []
    for r in out.records:
        t = step_of_ts.get(r["ts"])
        if t is None:
            problems.append(f"record seq {r['seq']} has a ts of no true step")
            continue
        step_of_seq[r["seq"]] = t
        if "redaction" not in r:
            rowless.append(r["seq"])
            copies[t].append((0.0,) * k)  # unknown row: as if released for sure (no credit taken)
            continue
        row = tuple(float(v) for v in r["redaction"])
        if len(row) != k:
            problems.append(f"record seq {r['seq']} has a row of {len(row)} probabilities for {k} states")
            copies[t].append((0.0,) * k)
            continue
        x = w.states[t]
        if r["value"] is not None:
            if r["value"] != w.labels[x] or row[x] >= 1.0:
                problems.append(f"record seq {r['seq']} shows a value its row {r['redaction']} forbids or a wrong value")
        elif row[x] <= 0.0:
            problems.append(f"record seq {r['seq']} is redacted although its row {r['redaction']} releases it")
        copies[t].append(row)
    if rowless:
        problems.append(f"{len(rowless)} records lack their 'redaction' row (seqs {rowless[:5]}…)")
    rows = np.array([combine_copies(c, k) for c in copies])
    truth: dict[int, float] = {}
    marks_of: dict[int, list[dict[str, Any]]] = {}
    step_at = _steps_by_position(w, out, problems)
    for life, (marks, still_open) in enumerate(zip(out.marks, out.open_after)):
        # a mark whose right window reaches past the last reading stays open (a later run keeps
        # protecting it); its 'leakage' figure is checked like every other one
        # a mark restored from an earlier life (its window was open at the stop) keeps its position
        for mk in marks:
            pos = mk.get("position")
            # a run of private steps (issue 28) is one mark over positions position..last, each
            # of whose true steps it must protect
            named = (step_of_ts.get(mk["ts"]) if mk.get("ts") is not None else
                     step_of_seq.get(mk["seq"], next((s for s, q in w.seq_of.items() if q == mk["seq"]), None))
                     if mk.get("seq") is not None else None)
            # (a mark on a step decided too long ago has no position: the step it names)
            at = [named] if pos is None else [step_at.get(q) for q in range(pos, mk.get("last", pos) + 1)]
            if None in at or (named is not None and named != at[0]):
                problems.append(f"life {life}: a mark maps to no true step (or to another than it names): {mk}")
                continue
            for t in at:
                _check_mark(w, P, rows, t, mk, truth, marks_of, problems)
    covered = set(marks_of)
    for life, frames in enumerate(w.lives):
        bare = [t for kind, t, data in frames if kind == "frame" and t >= 0 and data == NOT_JSON and t not in covered]
        if bare:
            problems.append(f"life {life}: non-JSON frames (private anyway) without a mark: steps {bare}")
    for t in sorted(w.private - set(marks_of)):
        problems.append(f"private step {t} (ts {w.ts[t]}) has no mark")
    return Verdict(rows, truth, problems, marks_of)


def _steps_by_position(w: World, out: Outcome, problems: list[str]) -> dict[int, int]:
    """Daemon position → true step. Within a life every frame sent with a step (t ≥ 0) is a new
    step, in order (each carries its step's ts, or none) — with a ``sample_period`` every slot
    between a life's first and last frame is (a lost frame is a missing slot); a life's first
    position is anchored on a published record of it (position and ts), else continues the
    previous life's."""
    pos_of_ts = {r["ts"]: r["position"] for r in out.records if r.get("position") is not None}
    step_at: dict[int, int] = {}
    base = 0
    for life, frames in enumerate(w.lives):
        steps = [t for kind, t, _ in frames if kind == "frame" and t >= 0]
        if w.sample_period is not None and steps:
            steps = list(range(steps[0], steps[-1] + 1))
        anchors = {pos_of_ts[w.ts[t]] - i for i, t in enumerate(steps) if w.ts[t] in pos_of_ts}
        if len(anchors) > 1:
            problems.append(f"life {life}: the published positions do not follow the frames sent")
        base = min(anchors) if anchors else base
        step_at.update({base + i: t for i, t in enumerate(steps)})
        base += len(steps)
    return step_at


def _check_mark(w: World, P: np.ndarray, rows: np.ndarray, t: int, mk: dict[str, Any], truth: dict[int, float],
                marks_of: dict[int, list[dict[str, Any]]], problems: list[str]) -> None:
    """Every figure a mark reports about true step t is ≥ its true leakage; honoured: ≤ ε for the
    true μ and for every initial law."""
    marks_of.setdefault(t, []).append(mk)
    if t not in truth:
        truth[t] = true_leakage(P, w.mu, rows, t).total
    true = truth[t]
    figures = {"leakage": (mk.get("leakage") or {}).get("total"),
               "achieved": (mk.get("achieved") or {}).get("total")}
    if figures["leakage"] is None:
        problems.append(f"step {t} (seq {mk.get('seq')}): the mark reports no 'leakage' figure")
    for name, fig in figures.items():
        if fig is not None and _number(fig) < true - TOL:
            problems.append(f"step {t} (seq {mk.get('seq')}): reported {name} {_number(fig):.6g} "
                            f"< true leakage {true:.6g}")
    if mk.get("honoured"):
        worst = worst_over_initial(P, rows, t).total
        if true > w.epsilon * (1 + TOL):
            problems.append(f"step {t} (seq {mk.get('seq')}): honoured, but the true leakage "
                            f"{true:.6g} > ε = {w.epsilon:.6g}")
        elif worst > w.epsilon * (1 + TOL):
            problems.append(f"step {t} (seq {mk.get('seq')}): honoured, but for some initial law the "
                            f"leakage is {worst:.6g} > ε = {w.epsilon:.6g}")


async def check_world(broker: Broker, w: World, workdir: Path) -> Verdict:
    out = await run_world(broker, w, workdir)
    verdict = evaluate(w, out)
    if verdict.problems:
        raise AssertionError(f"{w.describe()}:\n  " + "\n  ".join(verdict.problems))
    return verdict


# -- regressions (issue 9; positions 0-based) ----------------------------------------------------
async def test_regression_1_late_figure_is_not_below_the_truth(mosquitto: Broker, tmp_path: Path) -> None:
    """α=0.03, β=0.05, ε=2.67, delay 0: 20 readings "lo", reading 12 private (its left neighbours
    are already out). The reported figure must be ≥ the truth (found: 2.7533 reported, 3.5267 true)."""
    w = sample_world(1, 0.03, 0.05, 2.67, np.array([0.625, 0.375]), 20)
    w.states = [0] * 20
    w.delay = 0
    s = Script(w)
    for t in range(20):
        s.send(t, private=t == 12)
    v = await check_world(mosquitto, w, tmp_path)
    assert 12 in v.marks_of and v.truth[12] > 0


async def test_regression_2_command_for_a_published_record(mosquitto: Broker, tmp_path: Path) -> None:
    """α=0.1, β=0.3, ε=1: readings 0–15, 5 private; once record 15 is out (max_hold), the command
    {"private": 6}: run returns normally and the mark for seq 6 carries a figure ≥ the truth."""
    w = sample_world(2, 0.1, 0.3, 1.0, np.array([0.75, 0.25]), 16)
    w.max_hold = 0.3
    s = Script(w)
    for t in range(16):
        s.send(t, private=t == 5)
    s.await_seq(15)
    s.command(6)
    v = await check_world(mosquitto, w, tmp_path)
    (mk,) = v.marks_of[6]
    # its window (fully redacted to its end) may reach past the last reading: then it is still open
    # and its figure is the exact leakage of the rows used and committed; either way ≥ the truth
    figure = mk["achieved"] or mk["leakage"]
    assert mk["seq"] == 6 and figure is not None, mk
    assert _number(figure["total"]) >= v.truth[6] - TOL
    assert mk["honoured"] == (_number(figure["total"]) <= 1.0 * (1 + 1e-12))


async def test_regression_6_a_redelivered_reading_is_one_step(mosquitto: Broker, tmp_path: Path) -> None:
    """α=0.5, β=0.76, ε=0.37: reading 5 delivered twice (same bytes), reading 6 private — the true
    leakage about step 6 is ≤ ε (found: 0.847 while 0.336 was reported)."""
    w = sample_world(6, 0.5, 0.76, 0.37, np.array([0.76, 0.5]) / 1.26, 16)
    s = Script(w)
    for t in range(16):
        data = s.send(t, private=t == 6)
        if t == 5:
            s.resend(data)
    v = await check_world(mosquitto, w, tmp_path)
    assert v.truth[6] <= w.epsilon * (1 + TOL), v.truth[6]


async def test_regression_7_rejected_frame_in_a_schedule_window(mosquitto: Broker, tmp_path: Path) -> None:
    """A one-minute schedule window holding only step 8, whose frame is rejected (value "xx"):
    that step is private and the true leakage about it is ≤ ε."""
    w = sample_world(7, 0.1, 0.2, 1.0, np.array([2 / 3, 1 / 3]), 18, spacing=60.0)
    w.schedule = [minute_window(w.ts[8])]
    assert [t for t in range(18) if in_window(w.ts[t], w.schedule[0])] == [8]
    s = Script(w)
    for t in range(18):
        s.send(t, "malformed" if t == 8 else "reading")
    w.private.add(8)
    v = await check_world(mosquitto, w, tmp_path)
    assert v.truth[8] <= w.epsilon * (1 + TOL), v.truth[8]


async def test_regression_8_escaped_private_key_protects_its_step(mosquitto: Broker, tmp_path: Path) -> None:
    """A rejected frame {"\\u0070rivate": true, "value": "xx", "ts": …} at step 6: its step is
    protected (true leakage ≤ ε)."""
    w = sample_world(8, 0.1, 0.2, 1.0, np.array([2 / 3, 1 / 3]), 16)
    s = Script(w)
    for t in range(16):
        s.send(t, "escaped" if t == 6 else "reading")
    v = await check_world(mosquitto, w, tmp_path)
    assert v.truth[6] <= w.epsilon * (1 + TOL), v.truth[6]


async def test_regression_9_a_chain_that_boots_in_a_known_state(mosquitto: Broker, tmp_path: Path) -> None:
    """α=0.0108, β=0.265, ε=0.42, μ = point mass on "hi", 24 steps, step 7 private: the true
    leakage for that μ is ≤ ε (found: 1.704)."""
    w = sample_world(9, 0.0108, 0.265, 0.42, np.array([0.0, 1.0]), 24)
    s = Script(w)
    for t in range(24):
        s.send(t, private=t == 7)
    v = await check_world(mosquitto, w, tmp_path)
    assert v.truth[7] <= w.epsilon * (1 + TOL), v.truth[7]


async def test_restart_with_a_hidden_gap(mosquitto: Broker, tmp_path: Path) -> None:
    """Two lives on one outbox: steps 0–19 (18 private), steps 20–22 never sent, steps 23–44
    (24 private, its left neighbours are before the gap). Marks of both lives against the truth
    of the whole world."""
    w = sample_world(10, 0.1, 0.2, 1.0, np.array([1.0, 0.0]), 45)
    s = Script(w)
    for t in range(20):
        s.send(t, private=t == 18)
    s.restart()
    for t in range(23, 45):
        s.send(t, private=t == 24)
    v = await check_world(mosquitto, w, tmp_path)
    assert {18, 24} <= set(v.truth)


# -- the property test -----------------------------------------------------------------------------
def random_world(seed: int, k: int = 2) -> World:
    """A random world with faults: duplicates, malformed and non-JSON frames, out-of-order
    redeliveries, lost frames, private flags, commands, a schedule window, point-mass initial
    laws, and (sometimes) a restart with a hidden gap. k > 2: a random k-state chain (sticky,
    cyclic-leaning or plain random, never reversible by design) instead of (α, β)."""
    rng = np.random.default_rng(seed)
    family = seed % 4
    if family == 0:
        a, b = rng.uniform(0.01, 0.1, 2)
    elif family == 1:
        a, b = rng.uniform(0.8, 0.99, 2)
    else:
        lo, hi = sorted(rng.uniform(0.02, 0.95, 2))
        a, b = (hi, lo) if family == 2 else (lo, hi)
    matrix = None if k == 2 else _k_chain(rng, k, seed % 3)
    u = float(rng.choice([0.0, 1.0, rng.uniform()]))
    mu = np.array([1.0 - u, u]) if k == 2 else (np.eye(k)[int(rng.integers(k))] if u in (0.0, 1.0)
                                                 else rng.dirichlet(np.ones(k)))
    n = int(rng.integers(30, 61))
    w = sample_world(seed, float(a), float(b), float(rng.uniform(0.2, 3.0)), mu, n, spacing=20.0, matrix=matrix)
    if rng.uniform() < 0.4:
        w.schedule = [minute_window(w.ts[int(rng.integers(0, n))])]
    restart_at = int(rng.integers(n // 3, 2 * n // 3)) if rng.uniform() < 0.3 else None
    gap = int(rng.integers(0, 4))
    s = Script(w)
    sent: list[bytes] = []  # readable frames sent (redeliverable: their ts identifies the step)
    readings: list[int] = []  # steps accepted in the current life (commands name their seqs)
    t = 0
    while t < n:
        if t == restart_at:
            s.restart()
            readings = []
            if sent and rng.uniform() < 0.5:
                s.resend(sent[-1])  # the broker redelivers the last frame of the previous life
            t += gap  # hidden: never sent
            if t >= n:
                break
        roll = rng.uniform()
        flag = bool(rng.uniform() < 0.1)
        if roll < 0.05:
            t += 1  # lost (its privacy request, if any, never arrives)
            continue
        if roll < 0.10:
            data = s.send(t, "malformed", private=flag)
        elif roll < 0.13:
            data = s.send(t, "not-json", private=flag)
        elif roll < 0.15:
            data = s.send(t, "escaped")
        else:
            data = s.send(t, private=flag)
            readings.append(t)
        if any(in_window(w.ts[t], win) for win in w.schedule):
            w.private.add(t)  # a readable ts in the window, or a non-JSON frame (private anyway, item 8)
        if data != NOT_JSON:
            sent.append(data)
            if rng.uniform() < 0.08:
                s.resend(data)  # duplicate
        if len(sent) > 3 and rng.uniform() < 0.05:
            s.resend(sent[-int(rng.integers(2, 4))])  # out-of-order redelivery of a seen step
        if readings and rng.uniform() < 0.05:
            s.command(int(rng.choice(readings)))
        t += 1
    return w


def _k_chain(rng: np.random.Generator, k: int, kind: int) -> np.ndarray:
    """An irreducible aperiodic k-state chain: sticky, cyclic-leaning (not reversible) or random."""
    if kind == 0:
        return 0.8 * np.eye(k) + 0.2 * rng.dirichlet(np.ones(k), size=k)
    if kind == 1:
        return 0.3 * np.eye(k) + 0.6 * np.roll(np.eye(k), 1, axis=1) + 0.1 * rng.dirichlet(np.ones(k), size=k)
    return rng.dirichlet(np.full(k, 0.8), size=k)


def _property_seeds() -> list[int]:
    one = os.environ.get("STREAMGUARD_PROPERTY_SEED")
    if one is not None:
        return [int(one)]
    return list(range(1000, 1000 + int(os.environ.get("STREAMGUARD_PROPERTY_RUNS", "12"))))


async def test_property_random_faulty_streams(mosquitto: Broker, tmp_path: Path) -> None:
    """Random worlds (see :func:`random_world`); every failing seed is reported with its problems."""
    await run_property(mosquitto, tmp_path, [random_world(seed) for seed in _property_seeds()])


async def run_property(broker: Broker, tmp_path: Path, worlds: list[World]) -> None:
    """Run every world; every failing seed is reported with its problems."""
    failures = []
    for w in worlds:
        try:
            verdict = evaluate(w, await run_world(broker, w, tmp_path / f"run{w.seed}"))
        except Exception as exc:  # noqa: BLE001 - a crash or a timeout is this seed's failure; go on
            failures.append(f"{w.describe()}: {type(exc).__name__}: {exc}")
            continue
        if verdict.problems:
            failures.append(f"{w.describe()}:\n    " + "\n    ".join(verdict.problems[:8]))
    if failures:
        raise AssertionError(f"{len(failures)} failing runs:\n" + "\n".join(failures))


@pytest.mark.parametrize("seed", [3, 4])
def test_random_worlds_are_well_formed(seed: int) -> None:
    """The generator's own bookkeeping: seqs count the readings sent in order, every private
    step was sent, lost steps are in no life."""
    w = random_world(seed)
    sent = [t for life in w.lives for kind, t, _ in life if kind == "frame" and t >= 0]
    assert sent == sorted(set(sent))
    assert sorted(w.seq_of.values()) == list(range(len(w.seq_of)))
    assert w.private <= set(sent)


async def test_a_redelivery_across_a_restart_is_one_step(mosquitto: Broker, tmp_path: Path) -> None:
    """The broker redelivers the last frame of the previous life after a restart (found by the
    property test, seed 1002): it must not become a new step (a phantom step shifts every seq and
    distance after it), and a command naming a seq must land on the step the subscriber saw."""
    w = sample_world(7, 0.3742, 0.3522, 1.144, np.array([0.0, 1.0]), 12)
    s = Script(w)
    for t in range(6):
        s.send(t)
    last = reading(w, 5)
    s.restart()
    s.resend(last)
    for t in range(6, 12):
        s.send(t, private=t == 8)
    s.command(9)
    await check_world(mosquitto, w, tmp_path)  # raises naming every problem


# -- k-state streams (issue 12) ------------------------------------------------------------------
async def test_k_state_marks_by_flag_command_schedule_late_and_restart(mosquitto: Broker, tmp_path: Path) -> None:
    """A 4-state stream (labels s0..s3, sticky non-reversible chain, boots in s2): a flag, a
    schedule window, a command for a record already published (late), a malformed private frame,
    and a restart with a hidden gap of 2 steps and a private flag just after it. Every mark's
    figure ≥ the true leakage; every honoured mark ≤ ε for the true μ and for every initial law."""
    P = np.array([[0.80, 0.15, 0.05, 0.00], [0.05, 0.80, 0.10, 0.05],
                  [0.00, 0.10, 0.80, 0.10], [0.10, 0.00, 0.15, 0.75]])
    w = sample_world(12, 0.0, 0.0, 1.5, np.eye(4)[2], 56, spacing=60.0, matrix=P)
    w.schedule = [minute_window(w.ts[14])]
    w.max_hold = 0.3
    s = Script(w)
    for t in range(30):
        s.send(t, "malformed" if t == 22 else "reading", private=t in (6, 22))
        if t == 14:
            w.private.add(14)
    s.await_seq(24)
    s.command(3)  # its left neighbours were published long ago: a late mark
    s.restart()
    for t in range(32, 56):
        s.send(t, private=t in (33, 45))
    v = await check_world(mosquitto, w, tmp_path)
    assert {3, 6, 14, 22, 33, 45} <= set(v.marks_of)
    for t in (6, 14, 45):
        assert any(m["honoured"] for m in v.marks_of[t])
        assert v.truth[t] <= w.epsilon * (1 + TOL)
    for late in v.marks_of[3]:  # (reported in both lives) after its neighbours were published: late
        figure = late["achieved"] or late["leakage"]
        assert late["late"] and late["honoured"] == (_number(figure["total"]) <= w.epsilon * (1 + 1e-12))


async def test_k_state_property_random_faulty_streams(mosquitto: Broker, tmp_path: Path) -> None:
    """Random 3- and 4-state worlds with the binary property test's faults (STREAMGUARD_PROPERTY_RUNS
    scales it; default 3 runs)."""
    runs = max(1, int(os.environ.get("STREAMGUARD_PROPERTY_RUNS", "12")) // 4)
    await run_property(mosquitto, tmp_path, [random_world(seed, k=3 + seed % 2) for seed in range(2000, 2000 + runs)])
