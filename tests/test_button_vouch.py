"""The rule for steps whose privacy button the daemon cannot hear (stream/vouch.py), on the
privatizer core without a broker (the real-broker scenario is tests/test_button_outage.py).

Each case drives a :class:`ButtonHearing` over a core with the sticky chain of issue 24 (α = 0.02,
β = 0.05, ε = 1, stationary initial law; the default delay, H_ℓ = 25) on a 0.5 s grid, and checks
what was held, what was marked and why — and, where steps were decided as private, the exact leakage about each of them
from the rows the core used (the brute-force evaluator of tests/test_button_outage.py)."""

from __future__ import annotations

import pytest

from test_button_outage import ALPHA, BETA, EPS, PERIOD, PI, exact_leakage
from streamguard import MarkovChain
from streamguard.ingest.mapping import Press
from streamguard.redaction.plan_cache import cached_plan_stream
from streamguard.sampling import bit_source
from streamguard.stream.privatizer import Mark, StreamPrivatizer
from streamguard.frames.steps import StepTracker
from streamguard.stream.vouch import LATE_PRESS, OVERDUE, SESSION_LOST, STOPPED, ButtonHearing

T0 = 1_800_000_000.0  # a grid time (a multiple of PERIOD)


def _steps(marks: list[Mark]) -> list[int]:
    """The steps a list of marks makes private, as listed: one entry per step marked, in order.
    Consecutive unvouched steps are one mark, a run (privatizer.coalesces), listed once per step:
    a repeated entry names the step after the previous one, and the run covers it."""
    out: list[int] = []
    for i, m in enumerate(marks):
        step = out[-1] + 1 if i and marks[i - 1] is m else m.phys
        assert m.phys <= step <= m.last
        out.append(step)
    return out


class Stream:
    """A core, its steps and a hearing; ``step()`` takes the next tick's step (state 0)."""

    def __init__(self, *, delay: int | None = None, max_hold: float | None = None) -> None:
        plan = cached_plan_stream(MarkovChain.binary(ALPHA, BETA), EPS, design="optimal", split="even", cache=None)
        self.core = StreamPrivatizer(plan, bit_source(5), delay=delay, max_hold=max_hold, initial=PI)
        self.steps = StepTracker(PERIOD, max_missing=self.core.memory)
        self.hearing = ButtonHearing(self.core, self.steps, PERIOD, now=T0)
        self.t = T0
        self.rows: dict[int, tuple[float, float]] = {}
        self.released = 0

    def step(self) -> list[object]:
        self.t += PERIOD
        p = self.core.next_phys
        _, out = self.core.accept(0, self.t, now=self.t)
        self.steps.taken(self.t, p)
        self.released += len(out)
        self._rows()
        return self.hearing.taken([p], self.t)

    def _rows(self) -> None:
        for phys, *row in self.core.last_decisions:
            self.rows[int(phys)] = (row[0], row[1])
        self.core.last_decisions.clear()

    def finish(self) -> dict[int, tuple[float, float]]:
        for _ in range(60):  # the marks' right windows (H_r = 25) and the delay
            self.step()
        self.core.drain()
        self._rows()
        return self.rows


def _heard_stream(**kw: object) -> Stream:
    s = Stream(**kw)  # type: ignore[arg-type]
    assert s.hearing.confirmed(True) == []
    for _ in range(30):
        s.step()
    return s


def test_session_not_kept_decides_the_unheard_steps_as_private() -> None:
    s = _heard_stream()
    s.hearing.lost(s.t)
    before = s.released
    first = s.core.next_phys
    for _ in range(4):
        assert s.step() == []
    assert s.released == before  # held: nothing decided while the button is not heard
    assert s.core.expire(s.t + 3600) == []  # not even by max_hold
    marks = s.hearing.confirmed(False)
    assert _steps(marks) == list(range(first, first + 4))
    assert all(m.source == "unvouched" and m.reason == SESSION_LOST and not m.late and m.honoured for m in marks)
    rows = s.finish()
    for p in range(first, first + 4):
        assert exact_leakage(rows, p) <= EPS * (1 + 1e-9)
    assert s.hearing.status()["unvouched_steps"] == 4


def test_session_kept_vouches_for_the_unheard_steps() -> None:
    s = _heard_stream()
    s.hearing.lost(s.t)
    before = s.released
    for _ in range(4):
        s.step()
    assert s.hearing.confirmed(True) == []
    assert not s.core.held
    s.step()
    assert s.released == before + 5  # what waited is decided with the next step
    assert all(r == (0.0, 0.0) for r in s.rows.values())  # nothing marked


def test_hold_runs_out_after_delay_steps_then_every_unheard_step_is_marked() -> None:
    s = _heard_stream()
    s.hearing.lost(s.t)
    first = s.core.next_phys
    delay = s.core.delay
    assert delay == 25
    for _ in range(delay):
        assert s.step() == []
    marks = s.step()  # one more than the delay
    assert _steps(marks) == list(range(first, first + delay + 1))
    assert all(m.reason == OVERDUE and m.honoured and not m.late for m in marks)
    [m] = s.step()  # marked as it is taken
    assert (m.phys, m.last) == (first, first + delay + 1) and m.source == "unvouched" and m.honoured  # the run grew
    assert s.hearing.confirmed(True) == []  # heard again: no more marks
    assert s.step() == []
    rows = s.finish()
    for p in range(first, first + delay + 2):
        assert exact_leakage(rows, p) <= EPS * (1 + 1e-9)


def test_a_delay_below_the_left_horizon_makes_unvouched_marks_late_and_says_so() -> None:
    """With ``delay`` < H_ℓ the left neighbours of a step are decided before the hold begins (a
    live press on the newest step would be late as well): the marks are reported not honoured,
    with the exact figure, never hidden."""
    s = _heard_stream(delay=10)
    s.hearing.lost(s.t)
    for _ in range(4):
        s.step()
    marks = s.hearing.confirmed(False)
    assert len(marks) == 4 and all(m.late and not m.honoured and m.leakage is not None
                                   and m.leakage.total > EPS for m in marks)
    assert all(m.reason.startswith(SESSION_LOST + "; ") for m in marks if m.reason is not None)
    assert s.hearing.status()["unvouched_steps"] == 4


def test_hold_runs_out_after_max_hold_seconds() -> None:
    s = _heard_stream(max_hold=1.2)
    s.hearing.lost(s.t)
    first = s.core.next_phys
    assert s.step() == [] and s.step() == []  # 1.0 s after the loss
    assert s.hearing.expire(s.t + 0.1) == []
    marks = s.hearing.expire(s.t + 0.2)  # 1.2 s after the loss
    assert _steps(marks) == [first, first + 1] and all(m.reason == OVERDUE for m in marks)
    assert not s.core.held


def test_a_press_without_time_received_while_unheard_marks_every_unheard_step() -> None:
    s = _heard_stream()
    s.hearing.lost(s.t)
    first = s.core.next_phys
    for _ in range(3):
        s.step()
    placed, marks = s.hearing.press(Press())
    assert not placed  # the caller also marks the next tick, like any press
    assert _steps(marks) == [first, first + 1, first + 2] and all(m.reason == LATE_PRESS for m in marks)
    assert s.hearing.confirmed(True) == []  # vouched: nothing more to mark
    placed, marks = s.hearing.press(Press())  # heard: an ordinary press
    assert not placed and marks == []


def test_a_timed_press_marks_the_step_of_its_time() -> None:
    s = _heard_stream()
    s.hearing.lost(s.t)
    first = s.core.next_phys
    for _ in range(4):
        s.step()
    # pressed 0.3 s before the third unheard tick: that tick's step
    placed, [m] = s.hearing.press(Press(T0 + PERIOD * (30 + 3) - 0.3))
    assert placed and m.phys == first + 2 and m.source == "flag" and not m.late and m.honoured
    assert s.hearing.confirmed(True) == []
    # a press whose step is long decided: reported, not honoured (DESIGN.md "Late marks")
    placed, [old] = s.hearing.press(Press(T0 + PERIOD * 3))
    assert placed and old.late and not old.honoured
    # a press whose step is still to come: placed by the caller (the next tick)
    placed, marks = s.hearing.press(Press(s.t + 0.2))
    assert not placed and marks == []


def test_a_stop_while_unheard_decides_the_unheard_steps_as_private() -> None:
    s = _heard_stream()
    s.hearing.lost(s.t)
    first = s.core.next_phys
    s.step()
    s.step()
    marks = s.hearing.close()
    assert _steps(marks) == [first, first + 1] and all(m.reason == STOPPED for m in marks)
    assert not s.core.held


def test_steps_before_the_first_confirmation_are_unheard() -> None:
    """At start the button is not heard until the first SUBACK: a fresh session (the broker had
    none) decides the steps taken before it as private."""
    s = Stream()
    s.step()
    s.step()
    assert s.released == 0 and s.core.held
    marks = s.hearing.confirmed(False)
    assert _steps(marks) == [0, 1] and all(m.reason == SESSION_LOST for m in marks)


@pytest.mark.parametrize("kept", [True, False])
def test_a_lost_connection_before_any_step_holds_nothing_back_for_long(kept: bool) -> None:
    s = _heard_stream()
    s.hearing.lost(s.t)
    assert s.hearing.confirmed(kept) == []  # nothing was taken meanwhile
    assert not s.core.held
