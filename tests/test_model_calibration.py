"""Calibration (issue 11): real epoch timestamps, gaps, malformed lines, and the coverage of the
simultaneous confidence region, by simulation."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.stats import binom

from streamguard.model.chain import MarkovChain, ModelError
from streamguard.model.calibrate import TransitionData, read_transitions
from streamguard.model.confidence import entry_bounds, excludes_range, in_row_set, row_threshold
from streamguard.model.modelset import from_calibration, from_json, load
from streamguard.frames.records import StateMap

LABELS = StateMap(labels=("off", "on"))
EPOCH = 1_764_000_000.0  # November 2025: a real timestamp the old calibration rejected


def _path(rng: np.random.Generator, alpha: float, beta: float, n: int) -> np.ndarray:
    x = np.empty(n, dtype=np.int64)
    x[0] = int(rng.random() < alpha / (alpha + beta))
    u = rng.random(n)
    for t in range(1, n):
        x[t] = (u[t] < alpha) if x[t - 1] == 0 else (u[t] >= beta)
    return x


def _counts(x: np.ndarray, k: int = 2) -> np.ndarray:
    c = np.zeros((k, k), dtype=np.int64)
    np.add.at(c, (x[:-1], x[1:]), 1)
    return c


def _write(tmp_path, lines: list[str]):
    f = tmp_path / "cal.jsonl"
    f.write_text("\n".join(lines) + "\n")
    return f


def test_epoch_timestamps_are_respected(tmp_path):
    x = _path(np.random.default_rng(1), 0.05, 0.1, 3000)
    f = _write(tmp_path, [json.dumps({"value": LABELS.labels[s], "ts": EPOCH + 10 * t}) for t, s in enumerate(x)])
    for period in (None, 10.0):
        data = read_transitions(f, LABELS, period)
        assert data.steps == 3000 and data.segments == 1 and not data.malformed
        assert np.array_equal(data.counts, _counts(x))


def test_gaps_break_the_chain_and_malformed_lines_are_counted(tmp_path):
    x = _path(np.random.default_rng(2), 0.2, 0.3, 400)
    keep = np.ones(400, dtype=bool)
    keep[[50, 51, 200]] = False  # missing readings: slots skipped
    lines = []
    for t, s in enumerate(x):
        if keep[t]:
            lines.append(json.dumps({"value": LABELS.labels[s], "ts": EPOCH + t}))
        if t == 300:
            lines.append(json.dumps({"value": LABELS.labels[s], "ts": EPOCH + t}))  # redelivery
            lines.append("{not json")  # no time: with a period it cannot be placed
        if t == 310:
            lines.append(json.dumps({"value": LABELS.labels[s], "ts": EPOCH + 50}))  # late: a missing slot, in the past
    x[340] = 0
    lines[lines.index(json.dumps({"value": "off", "ts": EPOCH + 340}))] = json.dumps({"value": "dim", "ts": EPOCH + 340})
    f = _write(tmp_path, lines)
    data = read_transitions(f, LABELS, 1.0)
    # expected: transitions between consecutive kept steps, none across 50–51, 200, 300→301 (the
    # unplaceable line), 340 (unknown state)
    breaks = {50, 51, 200, 340}
    exp = np.zeros((2, 2), dtype=np.int64)
    for t in range(1, 400):
        if t in breaks or t - 1 in breaks or t == 301:
            continue
        exp[x[t - 1], x[t]] += 1
    assert np.array_equal(data.counts, exp)
    assert data.gaps == 2 and data.duplicates == 1 and data.late == 1
    assert data.malformed == {"not-json": 1, "unknown-state": 1}
    assert data.segments == 5


def test_untimed_frames_are_consecutive_steps_without_a_period(tmp_path):
    f = _write(tmp_path, ['{"value": "off"}', '{"value": "on"}', '{"value": "on"}', "[]", '{"value": "off"}'])
    data = read_transitions(f, LABELS)
    assert data.counts.tolist() == [[0, 1], [0, 1]] and data.malformed == {"not-object": 1}
    assert read_transitions(f, LABELS, 1.0).malformed == {"missing-ts": 4, "not-object": 1}


def test_the_point_estimate_is_the_unsmoothed_mle_and_the_file_round_trips(tmp_path):
    data = TransitionData(np.array([[990, 10], [20, 980]]))
    ms = from_calibration(data, 0.99, ("off", "on"))
    assert ms.point is not None and math.isclose(ms.point.alpha, 0.01) and math.isclose(ms.point.beta, 0.02)
    (a0, a1), (b0, b1) = ms.box
    assert a0 < 0.01 < a1 and b0 < 0.02 < b1
    ms.write(tmp_path / "MODEL.json")
    back = load(tmp_path / "MODEL.json")
    assert back.box == ms.box and np.array_equal(back.counts, data.counts) and back.labels == ("off", "on")
    assert (tmp_path / "MODEL.json").stat().st_mode & 0o077 == 0
    with pytest.raises(ModelError, match="model set"):
        from_json({"format": "something else"})


def test_little_data_gives_a_wide_region_not_a_refusal():
    ms = from_calibration(TransitionData(np.array([[5, 0], [1, 3]])), 0.99)
    (a0, a1), (b0, b1) = ms.box
    assert a0 == 0.0 and a1 > 0.5 and b1 > 0.8  # never left state 0: α = 0 cannot be ruled out
    assert ms.point is None  # the MLE never leaves state 0: no stationary chain
    empty = from_calibration(TransitionData(np.zeros((3, 3), dtype=np.int64)), 0.9)
    assert np.all(empty.bounds[:, :, 0] == 0.0) and np.all(empty.bounds[:, :, 1] == 1.0)


def test_entry_bounds_are_the_projections_of_the_row_set():
    rng = np.random.default_rng(5)
    counts = np.array([40, 7, 0, 13])
    c = row_threshold(counts, 0.01)
    b = entry_bounds(counts, c)
    inside = 0
    for _ in range(6000):
        p = rng.dirichlet(np.ones(4) * 0.7)
        if in_row_set(counts, p, c):
            inside += 1
            assert np.all(p >= b[:, 0]) and np.all(p <= b[:, 1])
    assert inside > 20


@pytest.mark.parametrize("alpha,beta,n,k", [(0.01, 0.02, 3000, 2), (0.3, 0.1, 400, 2), (None, None, 1500, 3)])
def test_coverage_of_the_simultaneous_region(alpha, beta, n, k):
    """200 simulated calibrations at confidence 0.9: the region misses the true matrix in at most
    a share 0.1 of them (up to binomial noise). The test fails when the misses exceed the 1 − 1e−6
    quantile of Binomial(200, 0.1): a false-failure rate ≤ 1e−6 for a valid region."""
    rng = np.random.default_rng(11)
    if k == 2:
        chain = MarkovChain.binary(alpha, beta)
    else:
        chain = MarkovChain([[0.9, 0.08, 0.02], [0.05, 0.9, 0.05], [0.1, 0.1, 0.8]])
    runs, misses = 200, 0
    cum = np.cumsum(chain.matrix, axis=1)
    x = np.empty((n, runs), dtype=np.int64)  # all runs at once, step by step
    x[0] = rng.integers(k, size=runs)
    for t in range(1, n):
        x[t] = np.minimum((rng.random(runs)[:, None] >= cum[x[t - 1]]).sum(axis=1), k - 1)
    for r in range(runs):
        ms = from_calibration(TransitionData(_counts(x[:, r], k)), 0.9)
        misses += not ms.contains(chain)
    assert misses <= binom.isf(1e-6, runs, 0.1)


def test_range_exclusion_agrees_with_the_entry_bounds():
    rng = np.random.default_rng(6)
    for _ in range(300):
        counts = rng.integers(0, 60, size=3) * (rng.random(3) < 0.8)
        c = row_threshold(counts, 0.05)
        b = entry_bounds(counts, c)
        j = int(rng.integers(3))
        lo = float(rng.uniform(0, 1))
        hi = min(1.0, lo + float(rng.uniform(0, 0.3)))
        disjoint = b[j, 1] < lo or b[j, 0] > hi
        if min(abs(b[j, 1] - lo), abs(b[j, 0] - hi)) > 1e-9:  # away from the bisection's rounding
            assert excludes_range(counts, c, j, lo, hi) == disjoint
