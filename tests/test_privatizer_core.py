"""The synchronous privatizer core: rows applied, phantoms, late marks, restarts — checked exactly.

Every leakage the core reports is recomputed here independently by brute-force enumeration
(streamguard.audit.brute) over the rows that were actually used.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize_scalar

from streamguard import MarkovChain
from streamguard.audit import brute_force_leakage, exact_leakage
from streamguard.privacy.channel import ChannelSequence
from streamguard.redaction.plan import plan_stream
from streamguard.sampling import SeededSource
from streamguard.stream.privatizer import Mark, StreamPrivatizer

CHAIN = MarkovChain.binary(0.01, 0.8)
PLAN = plan_stream(CHAIN, 1.0, design="exact")  # horizons 2 / 2


def _feed(core: StreamPrivatizer, states, flags=(), skips=()):
    out = []
    for i, s in enumerate(states):
        if i in skips:
            out += core.skip(now=float(i))
        _, rel = core.accept(int(s), float(i), now=float(i), private=i in flags)
        out += rel
    return out + core.drain()


def _window_brute(rows_by_phys, m: Mark, chain=CHAIN, gap_at=None, gap=0, at=None) -> float:
    """Leakage about mark m's record (position ``at`` of a run, default its first) of the rows used
    in its window [phys − left_reach, last + len(right)],
    one released record beyond each end (and ``gap`` fully redacted steps inserted before physical
    index ``gap_at``), worst case over the law of the stream's first record (physical index 0):

    - the window starts after index 0: its released stand-in lo − 1 has a law μP^{lo−1} (or μP^{lo},
      a reading lost before it) for some μ; the leakage is a maximum of ratios of linear functions
      of that law, so the worst case is at a vertex: a row of P^{lo−1} or P^{lo} — evaluated each by
      brute-force enumeration (or the O(n) audit with that initial law for long windows);
    - the window reaches index 0: μ itself is the law; evaluated on a grid of μ (with points next to
      the point masses, where a supremum may be approached) — a lower bound of the worst case, which
      the caller compares with a small tolerance.
    """
    p = m.phys if at is None else at
    lo, hi = max(0, m.phys - max(m.left_reach, m.left.shape[0])), m.last + m.right.shape[0]
    rows = [(0.0, 0.0)] if lo > 0 else []  # nothing lies before the stream's first frame
    index_p = None
    for t in range(lo, hi + 1):
        if gap_at is not None and t == gap_at:
            rows += [(1.0, 1.0)] * gap
        if t == p:
            index_p = len(rows)
        rows.append(rows_by_phys.get(t, (0.0, 0.0)))
    rows.append((0.0, 0.0))
    seq = ChannelSequence.from_redaction(np.array(rows))
    if lo > 0:
        vertices = list(np.linalg.matrix_power(chain.matrix, lo - 1)) + list(np.linalg.matrix_power(chain.matrix, lo))
        # a vertex may make a released value of the stand-in impossible; the supremum is then
        # approached next to it, inside the set: evaluate there too
        laws = vertices + [(1 - 1e-11) * v + 1e-11 * w for v in vertices for w in vertices]
        worst = 0.0
        for law in laws:
            c = MarkovChain(chain.matrix, np.clip(law, 0.0, 1.0) / np.clip(law, 0.0, 1.0).sum())
            audit = brute_force_leakage(c, seq, index_p) if seq.n <= 6 else exact_leakage(c, seq, index_p).total
            worst = max(worst, audit)
        return worst

    # the window reaches the first record: μ itself is free. The O(n) audit for one law is exact;
    # the worst law is found numerically — a grid, then a bounded scalar search around the best
    # point, and points 1e-13 from the point masses (where a supremum may only be approached)
    def at(x: float) -> float:
        return exact_leakage(MarkovChain(chain.matrix, [1 - x, x]), seq, index_p).total

    grid = np.linspace(1e-13, 1 - 1e-13, 21)
    values = [at(x) for x in grid]
    k = int(np.argmax(values))
    lo_u, hi_u = grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]
    best = minimize_scalar(lambda x: -at(x), bounds=(lo_u, hi_u), method="bounded", options={"xatol": 1e-13})
    return max(max(values), -float(best.fun))


def test_on_time_mark_applies_the_plan_table_and_reports_its_exact_leakage():
    core = StreamPrivatizer(PLAN, SeededSource(1))
    rel = _feed(core, [0] * 20, flags={10})
    rows = {r.seq: r.row for r in rel}
    table = PLAN.table()
    for d, row in zip(PLAN.offsets(), table):
        assert rows[10 + d] == pytest.approx(tuple(row))
    assert rows[7] == (0.0, 0.0) and rows[13] == (0.0, 0.0)
    (m,) = core.finished
    assert not m.late and m.honoured
    assert m.achieved.total == pytest.approx(PLAN.leakage().total, abs=1e-12)
    assert m.achieved.total == pytest.approx(_window_brute(core._rows, m), abs=1e-9)


def test_rejected_frames_are_redacted_steps_and_distances_are_physical():
    core = StreamPrivatizer(PLAN, SeededSource(2))
    rel = _feed(core, [0] * 20, flags={10}, skips={11})  # a rejected frame right after the mark
    rows = {r.seq: r.row for r in rel}
    phys = {r.seq: r.phys for r in rel}
    assert phys[10] + 2 == phys[11]  # seq 11 sits two physical steps after the mark
    assert rows[11] == pytest.approx(tuple(PLAN.right.red[1]))
    assert core._rows[phys[10] + 1] == (1.0, 1.0)  # the phantom itself
    assert [r.seq for r in rel] == list(range(20))  # phantoms get no seq and are never released
    (m,) = core.finished
    assert m.achieved.total <= 1.0 + 1e-9
    assert m.achieved.total == pytest.approx(_window_brute(core._rows, m), abs=1e-9)


def test_late_mark_uses_the_rows_that_were_published():
    core = StreamPrivatizer(PLAN, SeededSource(3))
    for i in range(12):
        core.accept(0, float(i), now=float(i))
    m = core.mark(9)  # 9 is pending, 8 and 7 were decided as released
    assert m.late and not m.honoured  # a released neighbour at distance 1 carries ≈ log 20 > ε
    # X_8 = 1 released: Pr(X_8=1 | X_9=a) ∝ P(1,a)/Pr(X_9=a); worst over the law μ of the first
    # record, Pr(X_9=0)/Pr(X_9=1) is largest at a point mass (log 20 for the stationary start)
    P9 = np.linalg.matrix_power(CHAIN.matrix, 9)
    worst = math.log(CHAIN.matrix[1, 1] / CHAIN.matrix[1, 0]) + math.log(max(P9[:, 0] / P9[:, 1]))
    assert worst > math.log(20)
    assert m.left_leakage == pytest.approx(worst, rel=1e-12)
    core.drain()
    assert m.achieved.total > 1.0
    assert m.achieved.total == pytest.approx(_window_brute(core._rows, m), abs=1e-9)


def test_mark_on_a_published_record_is_not_honoured():
    core = StreamPrivatizer(PLAN, SeededSource(4))
    for i in range(10):
        core.accept(1, float(i), now=float(i))
    m = core.mark(2)
    assert not m.honoured and math.isinf(m.achieved.total)
    assert m.report()["achieved"]["total"] == "inf"


def test_now_mark_before_the_next_frame_is_on_time():
    core = StreamPrivatizer(PLAN, SeededSource(5))
    for i in range(10):
        core.accept(0, float(i), now=float(i))
    m = core.mark(None)
    assert not m.late and m.honoured and m.seq == 9


def test_restart_reports_the_worst_gap_exactly():
    lam_neg = MarkovChain.binary(0.8, 0.7)  # λ < 0: leakage is not monotone in the gap
    plan = plan_stream(lam_neg, 1.0, design="exact")
    first = StreamPrivatizer(plan, SeededSource(6))
    for i in range(30):
        first.accept(i % 2, float(i), now=float(i))
    first.drain()
    decided = dict(first._rows)
    again = StreamPrivatizer(plan, SeededSource(7), first_seq=30, first_phys=30, decided=decided, restarted=True)
    _feed(again, [0] * 10, flags={1})
    (m,) = [m for m in again.finished if m.seq == 31]
    assert m.late  # its left window reaches records published before the restart
    # the core's worst case equals the worst of brute force over explicit gaps G = 0..8 (it
    # converges well before: |λ|^8 < 1e-5), and is never below any of them
    brute = [_window_brute(again._rows, m, lam_neg, gap_at=30, gap=G) for G in range(9)]
    assert m.achieved.total >= max(brute) - 1e-9
    assert m.achieved.total == pytest.approx(max(brute), abs=1e-4)


def test_open_marks_survive_a_restart_and_redact_the_rest_of_their_window():
    core = StreamPrivatizer(PLAN, SeededSource(8))
    for i in range(10):
        core.accept(0, float(i), now=float(i), private=(i == 9))
    core.drain()  # shutdown decides 9; its right window (10, 11) is still open
    (m,) = [m for m in core._marks if m.seq == 9]
    restored = [Mark.from_state(m.state())]
    again = StreamPrivatizer(PLAN, SeededSource(9), first_seq=10, first_phys=10, decided=dict(core._rows),
                             open_marks=restored, restarted=True)
    rel = _feed(again, [0] * 6)
    rows = {r.seq: r.row for r in rel}
    assert rows[10] == (1.0, 1.0) and rows[11] == (1.0, 1.0)
    assert rows[12] == (0.0, 0.0)


@settings(max_examples=40)
@given(
    a=st.floats(0.05, 0.95),
    b=st.floats(0.05, 0.95),
    eps=st.floats(0.3, 3.0),
    n=st.integers(5, 40),
    data=st.data(),
)
def test_every_finished_mark_is_honest(a, b, eps, n, data):
    """Honoured marks achieve ≤ ε; every reported leakage equals brute force on the rows used."""
    chain = MarkovChain.binary(a, b)
    plan = plan_stream(chain, eps)
    core = StreamPrivatizer(plan, SeededSource(data.draw(st.integers(0, 1000))))
    flags = data.draw(st.sets(st.integers(0, n - 1), max_size=4))
    skips = data.draw(st.sets(st.integers(0, n - 1), max_size=3))
    late = data.draw(st.lists(st.integers(0, n - 1), max_size=2))
    for i in range(n):
        if i in skips:
            core.skip(now=float(i))
        core.accept(data.draw(st.integers(0, 1)), float(i), now=float(i), private=i in flags)
        for s in late:
            if s == i - 3:
                core.mark(s)
    core.drain()
    for m in core.finished:
        if m.phys < 0 or math.isinf(m.achieved.total):
            continue
        if m.honoured:
            assert m.achieved.total <= eps + 1e-9
        if m.through is None:
            assert m.achieved.total == pytest.approx(_window_brute(core._rows, m, chain), abs=1e-9)
        else:  # a run (consecutive flags): L_a + R_b bounds every position of it (test_run_marks.py)
            truth = max(_window_brute(core._rows, m, chain, at=q) for q in range(m.phys, m.last + 1))
            assert truth <= m.achieved.total + 1e-9


def test_late_mark_on_a_redacted_record_with_released_right_neighbours_is_judged_exactly():
    """Found in review: p was redacted surely (inside another mark's window) but its right
    neighbours were already released; re-planning the right side would over-claim."""
    chain = MarkovChain.binary(0.05, 0.2)
    plan = plan_stream(chain, 1.0)
    core = StreamPrivatizer(plan, SeededSource(11))
    for i in range(40):
        core.accept(0, float(i), now=float(i), private=(i == 10))
    m = core.mark(11 + plan.right_horizon - 1)  # redacted surely, right neighbours published
    core.drain()
    assert m.late and m.achieved is not None
    assert m.achieved.total == pytest.approx(_window_brute(core._rows, m, chain), abs=1e-9)
    assert m.honoured == (m.achieved.total <= 1.0 * (1 + 1e-12))


def test_a_rejected_frame_that_asked_to_be_private_protects_its_neighbours():
    core = StreamPrivatizer(PLAN, SeededSource(12))
    rel = []
    for i in range(20):
        if i == 10:
            rel += core.skip(now=float(i), private=True)
        rel += core.accept(0, float(i), now=float(i))[1]
    rel += core.drain()
    (m,) = core.finished
    assert m.seq is None and m.honoured and m.report()["seq"] is None
    rows = {r.phys: r.row for r in rel}
    for d, row in zip(PLAN.offsets(), PLAN.table()):
        if d:
            assert rows[m.phys + d] == pytest.approx(tuple(row))
    assert m.achieved.total == pytest.approx(PLAN.leakage().total, abs=1e-12)


class _CountingSource(SeededSource):
    """A seeded source that counts the random bytes it serves."""

    served = 0

    def words(self, n: int):  # type: ignore[no-untyped-def]
        self.served += 8 * n
        return super().words(n)


def test_only_records_whose_redaction_probability_lies_strictly_between_0_and_1_draw():
    """A record no mark reaches (probability 0) is released and one with probability 1 (the mark
    itself, a rejected step) redacted without a draw: the same outcome the kernel gives them (its
    threshold is 0 or 2⁶³). Only the window's fractional rows use randomness — an exact binomial
    count of their redactions is in test_batch_intake / the true-world tests."""
    src = _CountingSource(5)
    core = StreamPrivatizer(PLAN, src)
    rel = _feed(core, [0, 1] * 20)
    assert src.served == 0  # no mark: 40 records, no random byte
    assert [r.state for r in rel] == [0, 1] * 20 and all(r.row == (0.0, 0.0) for r in rel)
    src = _CountingSource(6)
    core = StreamPrivatizer(PLAN, src)
    rel = _feed(core, [0] * 40, flags={20}, skips={30})
    fractional = [r for r in rel if 0.0 < r.row[0] < 1.0]
    assert fractional and src.served > 0
    by_seq = {r.seq: r for r in rel}
    assert by_seq[20].redacted and by_seq[20].row == (1.0, 1.0)  # the mark: redacted, no draw needed
    assert all(not r.redacted for r in rel if r.row == (0.0, 0.0))
    assert core._rows[by_seq[30].phys - 1] == (1.0, 1.0)  # the rejected step: redacted with probability 1


def test_a_row_that_is_not_a_probability_is_refused_not_released():
    """The shortcut for rows 0 and 1 never bypasses the kernel's check: a NaN or out-of-range entry
    still raises (fail closed), as before."""
    core = StreamPrivatizer(PLAN, SeededSource(7))
    core.accept(0, 0.0, now=0.0)
    core._rows_of = lambda lo, count: np.full((count, 2), np.nan)  # type: ignore[method-assign]
    with pytest.raises(ValueError):
        core.drain()
