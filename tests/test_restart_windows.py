"""Windows that span earlier restarts: every figure ≥ the any-law leakage (issue 29 follow-up).

A stream restarted several times has several boundaries, each the first record of a life: before
it an unknown number G ≥ 0 of readings went unseen, or the sensor restarted too (the new first
record has any law, the older records are independent of the newer ones). The daemon used to know
only the last boundary, so a window spanning an earlier one was evaluated as if the chain ran on
through it without a gap: late marks right after a restart reported figures below the truth (a
core-level sweep of 3-life streams: 4 of 76 marks, 1.231 against 1.361 nats). The outbox now keeps
the recent restart positions (``restarts``) and the core evaluates every boundary in a window.

The privatizer core runs each life as the daemon does (drained at the end of a life, the next one
continuing at the next position with the decided rows, the open marks and the restarts before it);
:func:`test_start_marks.any_law_leakage` — the tests' evaluator, on tests/true_world.py, which
shares no code with streamguard — takes every combination of hypotheses at every boundary (sensor
restarted, or G = 0..gmax) and the exact worst initial law. Contract per mark: every reported figure
(committed ``leakage`` and exact ``achieved``) ≥ that value − 1e-9, and an honoured mark's value ≤ ε.
With a binary box the figure is certified over the box: it must be ≥ the value at the box's
corners and centre. The daemon test checks that the restarts are persisted across lives.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from brokers import Broker
from streamguard.model.chain import MarkovChain
from streamguard.redaction.kplan import stream_plan_for
from streamguard.sampling import bit_source
from streamguard.stream.outbox import Outbox
from streamguard.stream.privatizer import Mark, StreamPrivatizer
from test_start_marks import Case, any_law_leakage, check, run_case
from true_world import transition

TOL = 1e-9
Life = list[tuple[int, bool, bool]]  # per step: (state, flag on the frame, "now" command after it)
Box = tuple[tuple[float, float], tuple[float, float]]


@dataclass
class CoreCase:
    alpha: float
    beta: float
    epsilon: float
    design: str
    split: str | float
    delay: int | None
    lives: list[Life]
    box: Box | None = None
    seed: int = 0
    #: A k-state chain's transition matrix (then ``alpha``/``beta`` are unused).
    matrix: np.ndarray | None = None

    @property
    def P(self) -> np.ndarray:
        return transition(self.alpha, self.beta) if self.matrix is None else self.matrix

    def describe(self) -> str:
        marks = [[i for i, (_, f, c) in enumerate(life) if f or c] for life in self.lives]
        if self.matrix is not None:
            return (f"seed={self.seed} P={self.matrix.round(4).tolist()} ε={self.epsilon:.6g} split={self.split} "
                    f"lives={[len(v) for v in self.lives]} marks={marks}")
        return (f"seed={self.seed} α={self.alpha:.6g} β={self.beta:.6g} ε={self.epsilon:.6g} {self.design} "
                f"split={self.split} delay={self.delay} box={self.box} lives={[len(v) for v in self.lives]} "
                f"marks={marks}")


@dataclass
class CoreOutcome:
    rows: np.ndarray
    boundaries: list[int]
    reports: dict[int, dict[str, Any]] = field(default_factory=dict)


def run_core(case: CoreCase) -> CoreOutcome:
    """Every life of ``case`` through the privatizer core, as the daemon restarts it."""
    plan = stream_plan_for(MarkovChain(case.P), case.epsilon, design=case.design, split=case.split)
    k = case.P.shape[0]
    decided: dict[int, tuple[float, ...]] = {}
    open_states: list[dict[str, Any]] = []
    boundaries: list[int] = []
    reports: dict[int, dict[str, Any]] = {}
    first = 0
    for n, life in enumerate(case.lives):
        if n:
            boundaries.append(first)
        core = StreamPrivatizer(plan, bit_source(case.seed, n), delay=case.delay, first_seq=first, first_phys=first,
                                decided=dict(decided), open_marks=[Mark.from_state(s, k) for s in open_states],
                                restarted=n > 0, restarts=tuple(boundaries), box=case.box)
        seen: list[Mark] = list(core.open_marks)
        for i, (x, flag, command) in enumerate(life):
            core.accept(x, float(first + i), now=0.0, private=flag)
            if command:
                core.mark(None)
        core.drain()
        seen += core.mark_events
        for t, *row in core.last_decisions:
            decided[int(t)] = tuple(row)
        for m in seen:
            reports[m.phys] = m.report()
        open_states = list({id(m): m.state() for m in seen if core.is_open(m)}.values())
        first = core.next_phys
    total = first
    rows = np.array([decided[t] for t in range(total)])
    return CoreOutcome(rows, boundaries, reports)


def _number(x: Any) -> float:
    return math.inf if x == "inf" else float(x)


def _chains(case: CoreCase) -> list[np.ndarray]:
    """The chains the figure must cover: the model's, or a box's corners and centre."""
    if case.box is None:
        return [case.P]
    (a0, a1), (b0, b1) = case.box
    return [transition(a, b) for a in (a0, a1) for b in (b0, b1)] + [transition((a0 + a1) / 2, (b0 + b1) / 2)]


def _horizon(P: np.ndarray) -> int:
    """The evaluator's largest gap: ρ^G ≤ 1e-13, ρ the second largest eigenvalue modulus."""
    rho = float(np.sort(np.abs(np.linalg.eigvals(P)))[-2])
    return 0 if rho < 1e-15 else max(0, math.ceil(math.log(1e-13) / math.log(rho)))


@dataclass
class Count:
    marks: int = 0
    honoured: int = 0
    late: int = 0
    below: int = 0  # reported figures below the any-law leakage
    over: int = 0  # honoured marks whose any-law leakage exceeds ε
    worst: float = 0.0  # the largest (any-law leakage − reported figure) in nats
    problems: list[str] = field(default_factory=list)


#: The gaps the quick tests evaluate at each boundary (with "the sensor restarted"): the value is
#: then a lower bound on the any-law leakage — a figure below it is below the truth; the sweep
#: takes every G up to the evaluator's horizon.
QUICK_GAPS = (0, 1, 2)


def tally(case: CoreCase, out: CoreOutcome, count: Count, gaps: tuple[int, ...] | None = None) -> None:
    """Check every mark of ``case`` against the tests' evaluator (module docstring), at the given
    gaps only (None: every gap)."""
    for p, mk in sorted(out.reports.items()):
        if p < 0:
            continue
        # a run of private steps (flags, issue 28) is one mark whose figure covers every step in it
        v = max(any_law_leakage(P, out.rows, q, out.boundaries, _horizon(P), gaps)
                for P in _chains(case) for q in range(p, int(mk.get("last", p)) + 1))
        count.marks += 1
        count.honoured += bool(mk["honoured"])
        count.late += bool(mk["late"])
        for name in ("leakage", "achieved"):
            fig = (mk.get(name) or {}).get("total")
            if fig is not None and _number(fig) < v - TOL:
                count.below += 1
                count.worst = max(count.worst, v - _number(fig))
                count.problems.append(f"{case.describe()}: step {p} ({'late' if mk['late'] else 'on time'}) "
                                      f"reported {name} {_number(fig):.6g} < any-law {v:.6g}")
                break
        if mk["honoured"] and v > case.epsilon * (1 + TOL):
            count.over += 1
            count.problems.append(f"{case.describe()}: step {p} honoured, any-law {v:.6g} > ε {case.epsilon:.6g}")


def random_core_case(seed: int, *, box: bool = False, max_lives: int = 4, max_lam: float = 0.9) -> CoreCase:
    """2..max_lives short lives (so that late marks right after a restart have earlier lives in
    their window), marks (flags and commands) anywhere, |λ| ≤ max_lam."""
    rng = np.random.default_rng(seed)
    while True:
        alpha, beta = (float(v) for v in rng.uniform(0.03, 0.97, 2))
        if abs(1 - alpha - beta) <= max_lam and (not box or min(alpha, beta) > 0.07 and max(alpha, beta) < 0.93):
            break
    epsilon = float(np.exp(rng.uniform(math.log(0.2), math.log(2.0))))
    design = str(rng.choice(["optimal", "paper"]))
    split: str | float = "even" if rng.uniform() < 0.5 else float(rng.uniform(0.2, 0.8) * epsilon)
    delay = None if rng.uniform() < 0.5 else int(rng.choice([0, 1, 2, 3]))
    lives = []
    for _ in range(int(rng.integers(2, max_lives + 1))):
        x, life = int(rng.integers(2)), []
        for _ in range(int(rng.integers(1, 5))):
            x = x if rng.uniform() < (1 - alpha if x == 0 else 1 - beta) else 1 - x
            mark = rng.uniform() < 0.35
            command = mark and rng.uniform() < 0.3
            life.append((x, mark and not command, command))
        lives.append(life)
    half = 0.02
    bx = ((alpha - half, alpha + half), (beta - half, beta + half)) if box else None
    return CoreCase(alpha, beta, epsilon, design, split, delay, lives, bx, seed)


def random_k_case(seed: int, k: int = 3) -> CoreCase:
    """A k-state chain (rows: a sticky diagonal of 0.3..0.85, the rest spread at random) with
    2..4 short lives, as :func:`random_core_case`."""
    rng = np.random.default_rng(seed)
    P = np.empty((k, k))
    for i in range(k):
        stay = rng.uniform(0.3, 0.85)
        rest = rng.dirichlet(np.ones(k - 1)) * (1 - stay)
        P[i] = np.insert(rest, i, stay)
    epsilon = float(np.exp(rng.uniform(math.log(0.5), math.log(3.0))))
    split: str | float = "even" if rng.uniform() < 0.5 else float(rng.uniform(0.3, 0.7) * epsilon)
    lives = []
    for _ in range(int(rng.integers(2, 5))):
        x, life = int(rng.integers(k)), []
        for _ in range(int(rng.integers(1, 5))):
            x = int(rng.choice(k, p=P[x]))
            mark = rng.uniform() < 0.35
            command = mark and rng.uniform() < 0.3
            life.append((x, mark and not command, command))
        lives.append(life)
    return CoreCase(0.0, 0.0, epsilon, "exact", split, None, lives, None, seed, P)


def sweep(seeds: range, gaps: tuple[int, ...] | None = QUICK_GAPS, k: int = 2, **kw: Any) -> Count:
    count = Count()
    for seed in seeds:
        case = random_core_case(seed, **kw) if k == 2 else random_k_case(seed, k)
        if any(f or c for life in case.lives for _, f, c in life):
            tally(case, run_core(case), count, gaps)
    return count


def test_the_reported_three_life_case() -> None:
    """The report's kind of case: three lives (1, 1 and 4 readings; α 0.929, β 0.225, ε 1.347,
    design "paper"), a late mark on the first reading of the third life, whose window holds the
    decided records of both earlier lives. Before: figure 1.296 nats, honoured, against an any-law
    leakage of 1.360 > ε (the restart at position 1 was taken for a chain running on)."""
    case = random_core_case(10)
    out = run_core(case)
    count = Count()
    tally(case, out, count, gaps=None)  # every gap: exact
    assert [len(v) for v in case.lives] == [1, 1, 4] and out.boundaries == [1, 2], case.describe()
    assert out.reports[2]["late"], out.reports[2]
    assert count.below == 0 and count.over == 0, "\n".join(count.problems)


async def test_the_three_life_case_through_the_daemon(mosquitto: Broker, tmp_path: Path) -> None:
    """The same three lives through the daemon (three lives on one outbox, a real Mosquitto): the
    outbox keeps both restarts, and the late mark's figure is ≥ the any-law leakage over every
    combination of hypotheses at both (test_start_marks.check). Before: the daemon knew only the
    restart at 2 and reported 1.296 nats, honoured, against 1.360 > ε."""
    core = random_core_case(10)
    case = Case(core.alpha, core.beta, core.epsilon, core.design, core.split, core.delay,
                [[(x, f, c) for x, f, c in life] for life in core.lives], seed=10)
    out = await run_case(mosquitto, case, tmp_path)
    check(case, out)
    assert out.boundaries == [1, 2] and out.reports[2]["late"], out.reports
    with Outbox(tmp_path / "outbox.sqlite", 10, "drop-oldest") as box:
        assert box.add_restart("s", 2, keep=4096) == [1, 2]


def test_the_outbox_keeps_recent_restarts(tmp_path: Path) -> None:
    """``Outbox.add_restart``: durable, idempotent, per stream, and bounded (positions more than
    ``keep`` before the newest are forgotten)."""
    path = tmp_path / "o.sqlite"
    with Outbox(path, 10, "drop-oldest") as box:
        assert box.add_restart("s", 5, keep=100) == [5]
        assert box.add_restart("s", 5, keep=100) == [5]
        assert box.add_restart("t", 7, keep=100) == [7]
        assert box.add_restart("s", 90, keep=100) == [5, 90]
    with Outbox(path, 10, "drop-oldest") as box:
        assert box.add_restart("s", 106, keep=100) == [90, 106]


def test_random_multi_restart_family() -> None:
    """2–4 lives, marks on time and late, binary point model (before the fix: 9 of 150 figures below
    the value, up to 0.274 nats, and 2 honoured marks above ε)."""
    count = sweep(range(0, 80))  # (consecutive flags are one run since issue 28: fewer marks a case)
    assert count.marks >= 120 and count.late >= 60, count
    assert count.below == 0 and count.over == 0, "\n".join(count.problems[:20])


def test_random_multi_restart_family_over_a_box() -> None:
    """The same over a binary box (certified figures, model/box_window.py): ≥ the any-law leakage at
    the box's corners and centre."""
    count = sweep(range(0, 12), box=True, max_lives=3)
    assert count.marks >= 15, count
    assert count.below == 0 and count.over == 0, "\n".join(count.problems[:20])


def test_random_multi_restart_family_k_states() -> None:
    """The same for 3-state chains (the exact k-state design; before the fix: 4 of 55 figures below
    the value in seeds 0..19, two of them in these)."""
    count = sweep(range(2, 9), k=3)  # (consecutive flags are one run since issue 28: fewer marks a case)
    assert count.marks >= 12 and count.late >= 6, count
    assert count.below == 0 and count.over == 0, "\n".join(count.problems[:20])


#: The sweep's gaps at each boundary (a lower bound still: the evaluator's horizon is up to ~300
#: gaps for |λ| = 0.9, and every combination over three boundaries is out of reach).
SWEEP_GAPS = (0, 1, 2, 3, 4, 5, 8)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["binary", "box", "3 states"])
def test_random_multi_restart_family_sweep(family: str) -> None:
    """400 binary cases (about 5 min; before the fix: 40 of 1,067 figures below the value, up to
    0.591 nats, 6 honoured marks above ε), 60 over a box, 60 of 3 states (the quick gaps: every
    combination over three boundaries costs ~9 s a mark at the sweep's)."""
    count = {"binary": lambda: sweep(range(1000, 1400), SWEEP_GAPS),
             "box": lambda: sweep(range(1000, 1060), SWEEP_GAPS, box=True, max_lives=3),
             "3 states": lambda: sweep(range(1000, 1060), k=3)}[family]()
    print(family, count.marks, count.late, count.honoured, count.below, count.over)
    assert count.below == 0 and count.over == 0, "\n".join(count.problems[:20])
