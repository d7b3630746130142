"""The time-of-day figure is the worst case over *every* clock position of a mark, not only over
the positions of scenarios' grid (issue 25; docs/time-varying.md §7).

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


@pytest.mark.parametrize("seed,period", [(0, 10.0), (2, 20.0)])
def test_tod_figure_covers_every_clock_position_below_a_minute(seed: int, period: float) -> None:
    rng = np.random.default_rng(seed)
    core = _core(rng, None, period)
    m, n = int(rng.integers(2, 8)), int(rng.integers(2, 8))
    left, right = rng.random((m, 2)) ** 3, rng.random((n, 2)) ** 3
    fig = core._tod_figure(m + 5, left, right)
    tot, lft = _truth(core, left, right, period)
    assert tot <= fig.total + 1e-9 and lft <= fig.left + 1e-9, (fig, tot, lft)
