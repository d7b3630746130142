"""Unit checks of the consumer's estimators (streamguard.consumer.estimates) against quantities
computed independently here: the channel inversion on exact expected output frequencies, the
S-averaged matrix of a channel that reads S, the aggregate noise variance from the discrete Laplace
pmf summed numerically, and the fleet combination."""

from __future__ import annotations

import math

import numpy as np
import pytest

from streamguard.consumer.estimates import Shares, Z95, channel_matrix, channel_shares, combine, window_variance
from streamguard.consumer.messages import Record


def _channel_records(outputs):
    return [Record("d", "s", i, i, 0.0, "x", False, None, int(o), "channel", "csprng") for i, o in enumerate(outputs)]


def test_least_squares_recovers_the_shares_from_expected_outputs():
    C = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6]])
    p = np.array([0.5, 0.3, 0.2])
    N = 1000
    q = C.T @ p * N  # exact expected output counts: 390, 350, 260
    assert np.allclose(q, np.round(q))
    outputs = np.repeat(np.arange(3), np.round(q).astype(int))
    s = channel_shares(_channel_records(outputs), C)
    assert s is not None
    np.testing.assert_allclose(s.frequency, p, atol=1e-12)
    # the interval: ± z·sd with sd from A Cov(q̂|X) Aᵀ, computed here directly
    A = np.linalg.inv(C.T)
    cov_q = sum(p[x] * (np.diag(C[x]) - np.outer(C[x], C[x])) for x in range(3)) / N
    sd = np.sqrt(np.diag(A @ cov_q @ A.T))
    for f, (lo, hi), sdx in zip(s.frequency, s.frequency_ci, sd):
        assert hi - f == pytest.approx(Z95 * sdx) and f - lo == pytest.approx(Z95 * sdx)
    # a channel that merges two states cannot be inverted: refused
    merged = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    assert channel_shares(_channel_records([0, 1, 0]), merged) is None


def test_a_channel_reading_s_is_averaged_over_s_given_x():
    joint = np.array([[0.3, 0.1], [0.1, 0.5]])  # P(S, X)
    C = np.array([[0.9, 0.1], [0.6, 0.4], [0.2, 0.8], [0.3, 0.7]])  # rows s·|X| + x
    eff = channel_matrix({"channel": {"inputs": "sx", "matrix": C.tolist()}, "joint": joint.tolist()}, 2)
    for x in range(2):
        ps = joint[:, x] / joint[:, x].sum()
        np.testing.assert_allclose(eff[x], ps[0] * C[x] + ps[1] * C[2 + x], atol=1e-15)


def test_aggregate_noise_variance_is_the_discrete_laplace_variance():
    num, den, grid = 7, 2, 0.25  # scale 3.5 lattice steps of 0.25
    tau = math.exp(-den / num)
    z = np.arange(-2000, 2001)
    pmf = (1 - tau) / (1 + tau) * tau ** np.abs(z)
    assert pmf.sum() == pytest.approx(1, abs=1e-12)
    expected = grid**2 * float((pmf * z**2).sum())
    assert window_variance({"noise_num": num, "noise_den": den, "grid": grid}) == pytest.approx(expected, rel=1e-12)


def test_combination_weights_devices_by_records():
    a = Shares([0.2, 0.8], [[0.1, 0.3], [0.7, 0.9]], None, "m", sd=[0.05, 0.05], n=100)
    b = Shares([0.6, 0.4], [[0.5, 0.7], [0.3, 0.5]], None, "m", sd=[0.02, 0.02], n=300)
    c = combine([a, b])
    np.testing.assert_allclose(c.frequency, [0.5, 0.5])
    sd = math.sqrt(0.25**2 * 0.05**2 + 0.75**2 * 0.02**2)
    assert c.frequency_ci[0] == pytest.approx([0.5 - Z95 * sd, 0.5 + Z95 * sd])
    assert c.n == 400


def test_aggregate_sums_and_means_recover_the_truth_when_the_noise_is_negligible():
    """At ε = 80 the discrete Laplace noise is 0 except with probability ≈ 2e^{−40} per value
    (tests/test_stream_aggregates.py), so the totals must equal the true counts and mean."""
    from consumer_sim import BASE, simulate
    from streamguard.consumer.collector import Collector
    from streamguard.consumer.estimates import aggregate_summary

    stream = {"labels": ["a", "b"], "model": {"alpha": 0.1, "beta": 0.2}, "epsilon": 1.0,
              "aggregates": [{"query": "histogram", "window": 20, "epsilon": 80.0},
                             {"query": "count", "state": "b", "window": 30, "epsilon": 80.0},
                             {"query": "mean", "values": [1.0, 3.0], "step": 0.5, "window": 25, "epsilon": 80.0}]}
    sim = simulate(stream, np.array([[0.9, 0.1], [0.2, 0.8]]), 110, 5)
    c = Collector(BASE)
    c.feed_all(sim.messages)
    summary = {e["kind"]: e for e in aggregate_summary(list(c.streams[("dev", "s")].windows.values()))}
    truth = np.bincount([sim.truth[q] for q in sorted(sim.truth)], minlength=2)
    assert summary["histogram"]["sum"] == truth.tolist() and summary["histogram"]["states"] == 110
    assert summary["histogram"]["partial"] == 1  # 110 = 5·20 + 10: the last window is cut by the shutdown
    assert summary["count"]["sum"] == [truth[1]] and summary["count"]["state_label"] == "b"
    assert summary["mean"]["mean"] == pytest.approx((truth[0] * 1.0 + truth[1] * 3.0) / 110, abs=1e-12)
    lo, hi = summary["mean"]["mean_ci"]
    assert lo < summary["mean"]["mean"] < hi
