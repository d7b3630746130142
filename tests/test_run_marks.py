"""Runs of private steps (issue 28, hostile input): consecutive private steps that come in bursts —
rejected frames, missing readings, flagged records, schedule-window, unvouched and privacy-mode
steps — are ONE mark, a run
[a, b] (privatizer.coalesces, StreamPrivatizer._extend), with one marks row and at most three
ledger events (created, became a run, finished) however long it is.

The run's figure is L_a + R_b: the left leakage of its left rows at a plus the right leakage of
its right rows at b. Every position of the run must leak at most that. It is checked here against
evaluators that share no code with the privatizer: a brute force over every state sequence of
a short binary chain (:func:`brute_leakage`, written for this test) on the rows the core used,
and the forward/backward evaluator of tests/test_button_outage.py on a long run of a sticky chain.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import json
import math
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from brokers import Broker
from daemon_harness import daemon_running, until

from test_button_outage import ALPHA, BETA, PI, exact_leakage
from streamguard import MarkovChain
from streamguard.config import Settings
from streamguard.redaction.plan_cache import cached_plan_stream
from streamguard.sampling import bit_source
from streamguard.stream.privatizer import Mark, StreamPrivatizer


def brute_leakage(P: np.ndarray, init: np.ndarray, rows: list[tuple[float, float]], p: int) -> float:
    """max over outputs y and values a ≠ b of log Pr(y | X_p = a) / Pr(y | X_p = b), by enumerating
    every binary state sequence x of len(rows) (law ``init``, kernel P) and every output sequence
    y the rows allow (at t: ⊥ with probability rows[t][x_t], else x_t)."""
    n = len(rows)
    X = np.array(list(itertools.product((0, 1), repeat=n)))
    px = init[X[:, 0]] * np.prod(P[X[:, :-1], X[:, 1:]], axis=1)
    supports = [[v for v in (0, 1) if r[v] < 1.0] + (["⊥"] if max(r) > 0.0 else []) for r in rows]
    marg = np.array([px[X[:, p] == a].sum() for a in (0, 1)])
    worst = 0.0
    for y in itertools.product(*supports):
        lik = px.copy()
        for t, yt in enumerate(y):
            r = np.asarray(rows[t])[X[:, t]]
            lik *= r if yt == "⊥" else (1.0 - r) * (X[:, t] == yt)
        cond = [lik[X[:, p] == a].sum() / marg[a] for a in (0, 1)]
        if max(cond) == 0.0:
            continue
        if min(cond) == 0.0:
            return math.inf
        worst = max(worst, abs(math.log(cond[0] / cond[1])))
    return worst


def _drive(core: StreamPrivatizer, layout: str) -> tuple[dict[int, tuple[float, ...]], list[Mark]]:
    """Feed ``layout`` ('.' a released-candidate record, 'x' a rejected frame that asks to be
    private, 'm' a privacy-mode record, 'f' a flagged record, 's' a record in a schedule window),
    drain, and return the rows used by position and every mark event, in order."""
    rows: dict[int, tuple[float, ...]] = {}
    events: list[Mark] = []

    def take() -> None:
        rows.update({int(d[0]): tuple(d[1:]) for d in core.last_decisions})
        core.last_decisions.clear()
        events.extend(core.mark_events)
        core.mark_events.clear()

    for i, c in enumerate(layout):
        if c == "x":
            core.skip(now=float(i), ts=float(i), private=True)
        else:
            core.accept(i % 2, float(i), now=float(i), private=c in "mfs",
                        source={"m": "mode", "s": "schedule"}.get(c, "flag"))
        take()
    core.drain()
    take()
    return rows, events


@pytest.mark.parametrize("alpha,beta,eps,layout", [
    (0.1, 0.2, 2.0, "...xxx...."),   # fractional rows at distance 2 on both sides
    (0.1, 0.2, 2.0, "..xx....."),
    (0.1, 0.2, 2.0, "...mmmm...."),  # privacy-mode records
    (0.9, 0.8, 1.0, ".....xxx......"),  # λ < 0: the correlation's sign alternates with distance
    (0.1, 0.2, 2.0, "...ssss...."),  # a schedule window
    (0.9, 0.8, 1.0, ".....sss......"),
    (0.1, 0.2, 2.0, "..ffff....."),  # flagged records
    (0.1, 0.2, 2.0, "...fsxm...."),  # sources mixed: the accounting does not depend on them
])
def test_every_position_of_a_run_leaks_at_most_its_figure_brute_force(alpha: float, beta: float, eps: float,
                                                                       layout: str) -> None:
    chain = MarkovChain.binary(alpha, beta)
    plan = cached_plan_stream(chain, eps, design="exact", split="even", cache=None)
    core = StreamPrivatizer(plan, bit_source(3), initial=chain.initial)
    rows, events = _drive(core, layout)
    [run] = {id(m): m for m in events}.values()  # one mark for the whole run
    a, b = layout.index(layout.strip(".")[0]), len(layout.rstrip(".")) - 1
    assert (run.phys, run.last) == (a, b) and run.honoured and run.achieved is not None
    assert len(events) == 3  # created, became a run, finished
    used = [rows[t] for t in range(len(layout))]
    assert all(used[t] == (1.0, 1.0) for t in range(a, b + 1))
    assert any(0.0 < v < 1.0 for r in used for v in r) or alpha > 0.5  # (the λ < 0 case: rows 0/1)
    truth = [brute_leakage(chain.matrix, chain.initial, used, p) for p in range(a, b + 1)]
    assert max(truth) > 0.05  # something is released around the run: the check is not vacuous
    assert max(truth) <= run.achieved.total * (1 + 1e-9) <= eps * (1 + 1e-9), (truth, run.achieved)
    assert run.leakage == run.achieved


def test_the_brute_force_agrees_with_the_tests_evaluator_on_a_single_mark() -> None:
    """The two evaluators of this file agree (the brute force is checked, not only trusted)."""
    chain = MarkovChain.binary(ALPHA, BETA)
    rows = [(0.0, 0.0), (0.3, 0.9), (1.0, 1.0), (1.0, 1.0), (0.5, 0.2), (0.0, 0.0), (0.7, 0.1)]
    for p in (2, 3):
        assert brute_leakage(chain.matrix, PI, rows, p) == pytest.approx(exact_leakage(dict(enumerate(rows)), p),
                                                                        rel=1e-9)


def test_a_long_run_of_rejected_frames_is_one_mark_within_its_figure() -> None:
    """300 rejected frames in a row on the sticky chain of issue 24 (H_ℓ = 25): one mark, three
    events, the run's figure bounds the exact leakage of every position of it (the tests'
    evaluator on the rows used), and an honoured figure ≤ ε."""
    chain = MarkovChain.binary(ALPHA, BETA)
    plan = cached_plan_stream(chain, 1.0, design="optimal", split="even", cache=None)
    core = StreamPrivatizer(plan, bit_source(7), initial=PI)
    layout = "." * 60 + "x" * 300 + "." * 60
    rows, events = _drive(core, layout)
    [run] = {id(m): m for m in events}.values()
    assert (run.phys, run.last, len(events)) == (60, 359, 3) and run.honoured
    assert run.achieved is not None and run.achieved.total <= 1.0 * (1 + 1e-12)
    truth = [exact_leakage(rows, p) for p in (60, 61, 62, 85, 210, 334, 357, 358, 359)]  # type: ignore[arg-type]
    assert max(truth) > 0.1
    assert max(truth) <= run.achieved.total * (1 + 1e-9)
    # the ends are where the run leaks most; the figure over-states the worst by at most the
    # smaller side (L_a + R_b against max(L_a + R_a, L_b + R_b))
    assert max(truth) >= run.achieved.total - min(run.achieved.left, run.achieved.right) - 1e-9


def test_commands_stay_marks_of_their_own_and_a_mark_inside_a_run_changes_nothing() -> None:
    chain = MarkovChain.binary(0.1, 0.2)
    plan = cached_plan_stream(chain, 2.0, design="exact", split="even", cache=None)
    core = StreamPrivatizer(plan, bit_source(3), initial=chain.initial)
    _, events = _drive(core, "...ff..xx.ss.s")
    marks = list({id(m): m for m in events}.values())
    assert [(m.phys, m.last, m.source) for m in marks] == [(3, 4, "flag"), (7, 8, "flag"), (10, 11, "schedule"),
                                                           (13, 13, "schedule")]
    core = StreamPrivatizer(plan, bit_source(3), initial=chain.initial)
    for i in range(3):
        core.accept(0, float(i), now=float(i), private=i == 2, source="schedule")
    core.accept(0, 3.0, now=3.0)
    command = core.mark(3, source="command")  # a command on the record right after a run: its own mark
    assert (command.phys, command.last) == (3, 3) and command is not core.covering(2)
    core = StreamPrivatizer(plan, bit_source(3), initial=chain.initial)
    for i in range(3):
        core.accept(0, float(i), now=float(i))
    run = core.skip(now=3.0, private=True) and core.covering(3)
    core.accept(1, 4.0, now=4.0, private=True, source="mode")
    assert core.mark(3, source="command") is run and (run.phys, run.last) == (3, 4)  # seq 3 is position 4


@pytest.mark.parametrize("kind", ["rejected", "schedule"])
def test_a_run_is_restored_whole_after_a_restart(kind: str) -> None:
    """An open run's stored state names its last step: restored, its right window (fully redacted
    then) starts after that step, so the first steps after the restart are redacted surely. (A run
    of rejected frames, or of a schedule window's records.)"""
    chain = MarkovChain.binary(ALPHA, BETA)
    plan = cached_plan_stream(chain, 1.0, design="optimal", split="even", cache=None)
    core = StreamPrivatizer(plan, bit_source(7), initial=PI)
    for i in range(40):
        core.accept(0, float(i), now=float(i))
    for i in range(40, 240):
        if kind == "rejected":
            core.skip(now=float(i), private=True)
        else:
            core.accept(1, float(i), now=float(i), private=True, source="schedule")
    [run] = [m for m in core.mark_events if core.is_open(m)][-1:]
    assert (run.phys, run.last) == (40, 239)
    restored = Mark.from_state(run.state())
    assert (restored.phys, restored.last, restored.right.shape[0]) == (40, 239, plan.right_horizon)
    assert restored.run_left == run.run_left is not None  # the left figure survives its rows
    after = StreamPrivatizer(plan, bit_source(7), first_seq=core.next_seq, first_phys=240, open_marks=[restored],
                             restarted=True, initial=PI)
    for i in range(240, 240 + plan.right_horizon + 40):
        after.accept(0, float(i), now=float(i))
    after.drain()
    used = {int(d[0]): tuple(d[1:]) for d in after.last_decisions}
    assert all(used[t] == (1.0, 1.0) for t in range(240, 240 + plan.right_horizon))
    assert used[240 + plan.right_horizon + 30] == (0.0, 0.0)
    [done] = [m for m in after.finished if m.phys == 40]
    assert done.last == 239 and done.achieved is not None and math.isfinite(done.achieved.total)


def test_steps_taken_in_bulk_keep_their_positions_and_their_protection() -> None:
    """skip_run (the per-second cap's bulk path): 1,000 more steps of an open run in one call
    decide what was pending at once (all of it in the run, redacted surely) and keep every
    position. The records after the run get the same rows as when each step is taken one by one;
    a command on the first of them is a late mark (its left neighbours are decided), honoured, and
    within its figure by the tests' evaluator. (A command: a flag there would join the run.)"""
    chain = MarkovChain.binary(ALPHA, BETA)
    plan = cached_plan_stream(chain, 1.0, design="optimal", split="even", cache=None)
    used: list[dict[int, tuple[float, ...]]] = []
    Q = 60 + 30 + 1000  # the first record after the run
    for bulk in (False, True):
        core = StreamPrivatizer(plan, bit_source(7), initial=PI)
        for i in range(60):
            core.accept(0, float(i), now=float(i))
        for i in range(30):  # (more than the delay: every undecided step is in the run)
            core.skip(now=60.0, private=True)
        rows = {int(d[0]): tuple(d[1:]) for d in core.last_decisions}
        core.last_decisions.clear()
        if bulk:
            assert core.open_run() is not None
            assert core.skip_run(1000, now=61.0) == [] and core.pending == 0
        else:
            for _ in range(1000):
                core.skip(now=61.0, private=True)
        rows.update({int(d[0]): tuple(d[1:]) for d in core.last_decisions})
        assert core.next_phys == Q
        for i in range(Q, Q + 80):
            core.accept(1, float(i), now=float(i), private=bulk and i == Q, source="command")
            rows.update({int(d[0]): tuple(d[1:]) for d in core.last_decisions})
        core.drain()
        rows.update({int(d[0]): tuple(d[1:]) for d in core.last_decisions})
        used.append(rows)
        [run] = [m for m in (*core.finished, *core._marks) if m.phys == 60]
        assert (run.last, run.honoured) == (Q - 1, True)
    plain, bulk_rows = used
    assert all(plain[t] == bulk_rows[t] for t in range(Q + 30, Q + 80))  # beyond the command's reach
    assert all(bulk_rows[t] == (1.0, 1.0) for t in range(Q - 100, Q + 1))
    [command] = [m for m in core.finished if m.phys == Q]
    assert command.late and command.honoured and command.achieved is not None and command.achieved.total <= 1.0 + 1e-9
    full = {t: bulk_rows.get(t, (1.0, 1.0) if 60 <= t < Q else (0.0, 0.0)) for t in range(0, Q + 80)}
    assert exact_leakage(full, Q) <= command.achieved.total * (1 + 1e-9)  # type: ignore[arg-type]
    assert max(exact_leakage(full, p) for p in (60, Q - 1)) <= run.achieved.total * (1 + 1e-9)  # type: ignore[arg-type,union-attr]



@pytest.mark.parametrize("kind", ["schedule", "flag"])
async def test_a_window_of_private_steps_through_the_daemon_is_one_run(mosquitto: Broker, tmp_path: Path,
                                                                       kind: str) -> None:
    """1,000 consecutive private records — inside a schedule window, or each flagged ``"private":
    true`` — fed to the daemon (stdin path, real Mosquitto): one run, at most 3 ledger events for
    the whole window and one marks row in the outbox (before: one mark, one row and 2 events per
    record). Every record of the window is published redacted."""
    n, before = 1000, 40
    start = (time.time() - 1000) // 60 * 60  # a whole minute, the window's 10 minutes in the past
    ts = [start + 3 * (i - before) / 5 for i in range(before + n + 40)]  # 0.6 s apart: n fill the window
    private = [before <= i < before + n for i in range(len(ts))]
    queue: asyncio.Queue[bytes | None] = asyncio.Queue()

    async def frames() -> AsyncIterator[tuple[str, bytes]]:
        while (f := await queue.get()) is not None:
            yield "s", f

    stream: dict[str, Any] = {"name": "s", "labels": ["off", "on"], "source": "stdin", "epsilon": 1.0,
                              "model": {"alpha": 0.1, "beta": 0.2}, "design": "exact"}
    if kind == "schedule":
        at = [dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%H:%M") for t in (start, start + 600)]
        stream["schedule"] = [{"start": at[0], "end": at[1], "timezone": "UTC"}]
    outbox = tmp_path / "outbox.sqlite"
    settings = Settings(device="night", topic_base="sgn", broker=mosquitto.broker_config(), outbox={"path": outbox},
                        streams=[stream], stdout=False, deterministic_seed=3)
    async with daemon_running(settings, extra_sources=[frames]) as (daemon, _, task):
        await until(lambda: "s" in daemon.runtimes, 60, "the start")
        for i, t in enumerate(ts[:before]):
            queue.put_nowait(json.dumps({"value": "on" if i % 3 else "off", "ts": t}).encode())
        await until(lambda: daemon.stats.frames == before and not daemon.store.queue, 30, "the frames before")
        await daemon.store.flush()
        assert daemon._ledger is not None
        events0 = daemon._ledger.head[0]
        for i, t in enumerate(ts[before:], before):
            flag = {"private": True} if kind == "flag" and private[i] else {}
            queue.put_nowait(json.dumps({"value": "on" if i % 3 else "off", "ts": t, **flag}).encode())
        await until(lambda: daemon.stats.frames == len(ts) and not daemon.store.queue, 60, "the window")
        await daemon.store.flush()
        rt = daemon.runtimes["s"]
        rt.core.drain()  # (the run finishes once its right window is decided)
        await daemon.store.flush()
        events = daemon._ledger.head[0] - events0
        runs = [m for m in (*rt.core.finished, *rt.core._marks) if m.phys >= before]
        assert not task.done()
    with sqlite3.connect(outbox) as db:
        marks_rows = db.execute("SELECT COUNT(*) FROM marks").fetchone()[0]
        print(f"\n[{kind} window x{n}] marks {len(runs)}, ledger events {events}, marks rows {marks_rows}")
        assert [(m.phys, m.last, m.honoured) for m in runs] == [(before, before + n - 1, True)]
        assert 1 <= events <= 3, events  # created, became a run, finished
        assert marks_rows == 1
        rows = db.execute("SELECT row0, row1 FROM decisions WHERE seq BETWEEN ? AND ?",
                          (before, before + n - 1)).fetchall()
    assert len(rows) == n and set(rows) == {(1.0, 1.0)}  # every record of the window redacted surely
