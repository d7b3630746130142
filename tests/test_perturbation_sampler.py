"""The per-record channel sampler (streamguard.perturbation.sampler): exact quantisation, the
threshold rule at its edges, numba against numpy, input validation before any cast, and sampled
frequencies that follow the channel (chi-square, fixed seed)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import chisquare

from streamguard.perturbation import PerturbationChannel
from streamguard.perturbation.sampler import SCALE_BITS, ChannelSampler, quantise
from streamguard.sampling import SeededSource

ONE = 1 << SCALE_BITS


class FixedWords:
    """A BitSource returning given words (to probe the threshold rule exactly)."""

    deterministic = True

    def __init__(self, words):
        self._words = np.asarray(words, dtype=np.uint64)

    def words(self, n):
        assert n == self._words.size
        return self._words


def _channel(matrix, inputs="x", n_s=1):
    m = np.asarray(matrix, dtype=np.float64)
    n_x = m.shape[0] // (n_s if inputs == "sx" else 1)
    return PerturbationChannel("test", m, inputs, n_s, n_x, tuple(range(m.shape[1])))


W = np.array([[0.5, 0.25, 0.0, 0.25, 0.0], [0.0, 0.1, 0.2, 0.3, 0.4], [0.9, 0.0, 0.0, 0.0, 0.1],
              [0.2, 0.2, 0.2, 0.2, 0.2]])


# ---------------------------------------------------------------------------------------------
# Quantisation
# ---------------------------------------------------------------------------------------------

rows = st.lists(st.one_of(st.just(0.0), st.floats(1e-300, 1.0), st.floats(0.0, 1e-18)), min_size=1,
                max_size=8).filter(lambda r: sum(r) > 0)


@given(rows)
def test_quantise_is_exact_and_keeps_support(row):
    counts = [int(c) for c in quantise(np.array([row]))[0]]
    assert sum(counts) == ONE
    total = sum(Fraction(v) for v in row)
    targets = [Fraction(v) / total * ONE for v in row]
    raised = sum(1 for v, t in zip(row, targets) if v > 0 and t < 1)  # each costs the largest entry a count
    for v, c, t in zip(row, counts, targets):
        if v == 0:
            assert c == 0  # zero stays exactly zero
        else:
            assert c >= 1  # support never shrinks
            assert abs(c - t) < 1 + raised


def test_realised_matrix_and_counts():
    s = ChannelSampler(_channel(W))
    assert all(sum(r) == ONE for r in s.realised_counts())
    real = s.realised_matrix()
    assert np.array_equal(real == 0, W == 0)
    assert np.allclose(real, W, atol=1e-15)


# ---------------------------------------------------------------------------------------------
# The threshold rule
# ---------------------------------------------------------------------------------------------


def test_threshold_edges():
    """Output j iff C_{j−1} ≤ (w >> 1) < C_j: probe u = C_j − 1 and u = C_j for every j of row 1."""
    s = ChannelSampler(_channel(W))
    cum = [int(c) for c in s.cumulative[1]]
    words, expect = [], []
    lower = 0
    for j, c in enumerate(cum):
        if c == lower:
            continue  # zero-probability output: never drawn
        words += [lower << 1, ((c - 1) << 1) | 1]  # lowest and highest u of output j (the low bit is dropped)
        expect += [j, j]
        lower = c
    for use_numpy in (False, True):
        out = s.sample(np.full(len(words), 1), source=FixedWords(words), use_numpy=use_numpy)
        assert out.tolist() == expect


def test_numba_and_numpy_agree():
    s = ChannelSampler(_channel(W))
    x = np.random.default_rng(3).integers(0, 4, 50_000)
    a = s.sample(x, source=SeededSource(7, 1))
    b = s.sample(x, source=SeededSource(7, 1), use_numpy=True)
    assert np.array_equal(a, b)
    assert not np.any(W[x, a] == 0)  # never an impossible output


@pytest.mark.parametrize("row", range(4))
def test_frequencies_follow_the_channel(row):
    n = 200_000
    out = ChannelSampler(_channel(W)).sample(np.full(n, row), source=SeededSource(11, row))
    counts = np.bincount(out, minlength=W.shape[1])
    live = W[row] > 0
    assert counts[~live].sum() == 0
    assert chisquare(counts[live], n * W[row, live]).pvalue > 1e-3


def test_sx_channel_rows_by_s_and_x():
    """Rows s·|X| + x: s = 1 shifts to the second block."""
    M = np.array([[1, 0], [1, 0], [0, 1], [0, 1]], dtype=float)  # s = 0 → output 0, s = 1 → output 1
    s = ChannelSampler(_channel(M, "sx", n_s=2))
    out = s.sample(np.array([0, 1, 0, 1]), np.array([0, 0, 1, 1]), SeededSource(1))
    assert out.tolist() == [0, 0, 1, 1]


# ---------------------------------------------------------------------------------------------
# Validation (before any cast)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("x, match", [
    (np.array([0, 4]), r"x: 1 record\(s\) outside 0\.\.3"),
    (np.array([-1, 0, -3]), r"x: 2 record\(s\) outside"),
    (np.array([256, 0], dtype=np.int16), r"x: 1 record\(s\) outside"),  # would wrap to 0 in int8
    (np.array([2**40], dtype=np.int64), r"x: 1 record\(s\) outside"),
    (np.array([0.0, 1.0]), "must be integers"),
    (np.array([True, False]), "must be integers"),
    (np.array([[0, 1]]), "1-D"),
])
def test_invalid_states_refused(x, match):
    with pytest.raises(ValueError, match=match) as err:
        ChannelSampler(_channel(W)).sample(x, source=SeededSource(1))
    assert "256" not in str(err.value) and str(2**40) not in str(err.value)  # counts, never values


def test_s_required_exactly_for_sx_channels():
    M = np.tile([0.5, 0.5], (4, 1))
    with pytest.raises(ValueError, match="needs the sensitive attribute"):
        ChannelSampler(_channel(M, "sx", n_s=2)).sample(np.array([0]), source=SeededSource(1))
    with pytest.raises(ValueError, match=r"s: 1 record\(s\) outside 0\.\.1"):
        ChannelSampler(_channel(M, "sx", n_s=2)).sample(np.array([0]), np.array([2]), SeededSource(1))
    with pytest.raises(ValueError, match="reads x only"):
        ChannelSampler(_channel(W)).sample(np.array([0]), np.array([0]), SeededSource(1))
