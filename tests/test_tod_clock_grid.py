"""The time-of-day figure is the worst case over *every* clock position of a mark, not only over
the positions of scenarios' grid (issue 25; docs/time-varying.md §7). Periods for which the grid
cannot cover them all are refused (scenarios.check_period); this was found failing at 10 and 20 s.

A set-chain's ToD figure (StreamPrivatizer._tod_figure, and the plan's scenarios.tod_leakage)
takes its maximum over mark positions spaced max(sample period, 1 h / MAX_POSITIONS) = 60 s apart
for a sample period under a minute. The kernel of each step is that of its source record's hour,
so what changes with the position is where an hour boundary falls among the window's records;
with a 5-20 s period, positions 60 s apart put it only every 3-12 records, and the positions in
between are never evaluated. The wall clock is not trusted, so a mark may sit at any of them.

The evaluator is the tests' own (true_world.worst_over_initial: a kernel per step, worst case
over the law of the released stand-in before the window), at every position where an hour boundary
falls on a different record (every sample period around each hour): a lower bound of the true
worst case, which the figure must still reach.
"""

from __future__ import annotations

import numpy as np
import pytest

from test_tod_runtime import DAY, HOUR, _core, _kernels_at
from true_world import worst_over_initial


def _truth(core, left: np.ndarray, right: np.ndarray, period: float) -> tuple[float, float]:
    """(total, left side alone): the worst over every position at which an hour boundary falls on
    a different record of the window (a lower bound of the worst over every position), rows
    outward from the mark."""
    m, n = left.shape[0], right.shape[0]
    rows = np.vstack([np.zeros((1, 2)), left[::-1], np.ones((1, 2)), right, np.zeros((1, 2))])
    at = m + 1
    offs = np.arange(rows.shape[0] - 1) - at
    shifts = np.arange(-(n + 2), m + 3) * period
    positions = np.unique(np.concatenate([np.mod(h * HOUR + shifts, DAY) for h in range(24)]))
    tot = lft = 0.0
    for pos in positions:
        Ks = _kernels_at(core, pos, offs)
        tot = max(tot, worst_over_initial(Ks, rows, at).total)
        lft = max(lft, worst_over_initial(Ks[:at], rows[:at + 1], at).total)
    return tot, lft


@pytest.mark.parametrize("seed,period", [(0, 60.0), (2, 120.0), (5, 300.0)])
def test_tod_figure_covers_every_clock_position(seed: int, period: float) -> None:
    """Periods that divide an hour, at least a minute: the grid of the period covers every
    alignment of the records with the hours (scenarios.check_period)."""
    rng = np.random.default_rng(seed)
    core = _core(rng, None, period)
    m, n = int(rng.integers(2, 8)), int(rng.integers(2, 8))
    left, right = rng.random((m, 2)) ** 3, rng.random((n, 2)) ** 3
    fig = core._tod_figure(m + 5, left, right)
    tot, lft = _truth(core, left, right, period)
    assert tot <= fig.total + 1e-9 and lft <= fig.left + 1e-9, (fig, tot, lft)


@pytest.mark.parametrize("period", [10.0, 20.0, 70.0, 420.0])
def test_periods_whose_alignments_are_not_all_evaluated_are_refused(period: float) -> None:
    """Under a minute (positions 60 s apart put an hour boundary only on every few records: the
    figure was 5.400 where the evaluator found 5.419 at 10 s, left 2.327 < 2.345 at 20 s), or not
    dividing an hour (7 min): refused: a privatizer core with such a time-of-day scenario is not built."""
    from streamguard.model.chain import ModelError
    from streamguard.model.scenarios import check_period

    with pytest.raises(ModelError, match="divides an hour"):  # (the core's own window figure, at construction)
        _core(np.random.default_rng(0), None, period)
    with pytest.raises(ModelError, match="divides an hour"):
        check_period(period)
