"""Coverage of the consumer's 95% intervals over repeated simulated runs with known truth (issue 14
"Evidence"), through the real runtimes: a redaction stream with frequent marks, a randomized-
response channel stream, histogram aggregates (scenarios in tests/consumer_sim.py).

Each scenario runs one stream of R·300 records cut into R blocks estimated separately (R = 24 by
default, ``STREAMGUARD_COVERAGE_RUNS`` for more; the benchmark benchmarks/consumer.py runs
hundreds) and counts the blocks whose interval for the share of state 1 covers the realised share. The test fails if fewer than t runs cover, t the smallest count
with P(Binomial(R, 0.95) < t) ≤ 0.001: the false-failure rate of a correct 95% interval is at most
0.1% per scenario (seeded, so a given R always gives the same verdict). The naive share's bias is
asserted beside it for the redaction stream (its plan redacts "occupied" next to every mark and
"vacant" only sometimes), and so is the coverage of its interval for the rate of staying
"occupied" (a transition estimate).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from scipy.stats import binom

from consumer_sim import trials as run_trials

RUNS = int(os.environ.get("STREAMGUARD_COVERAGE_RUNS", "24"))
N = 300


def _threshold(runs: int, alpha: float = 1e-3) -> int:
    return max(t for t in range(runs + 1) if binom.cdf(t - 1, runs, 0.95) <= alpha)


@pytest.mark.parametrize("kind", ["redaction", "channel", "aggregate"])
def test_intervals_cover_the_realised_share(kind):
    trials = run_trials(kind, N, RUNS, 1000)
    covered = sum(t.ci[1][0] <= t.truth[1] <= t.ci[1][1] for t in trials)  # type: ignore[index]
    assert covered >= _threshold(RUNS), (kind, covered, RUNS)
    err = np.array([t.frequency[1] - t.truth[1] for t in trials])
    half = np.array([(t.ci[1][1] - t.ci[1][0]) / 2 for t in trials])  # type: ignore[index]
    assert np.all(half > 0)
    # unbiased: the mean error is within 4 standard errors of 0
    assert abs(err.mean()) <= 4 * err.std(ddof=1) / np.sqrt(RUNS) + 1e-12, (kind, err.mean())
    if kind == "redaction":
        naive = np.array([t.naive[1] - t.truth[1] for t in trials])  # type: ignore[index]
        # the naive share of "occupied" is too low, by many standard errors
        assert naive.mean() < -4 * naive.std(ddof=1) / np.sqrt(RUNS), naive.mean()
        assert abs(err.mean()) < abs(naive.mean()) / 4
        # the posterior-sampling interval of the realised rate of staying "occupied"
        stay = sum(t.stay_ci[0] <= t.stay <= t.stay_ci[1] for t in trials)  # type: ignore[index, operator]
        assert stay >= _threshold(RUNS), ("transition", stay, RUNS)
