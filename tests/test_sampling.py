"""Randomness and the integer-threshold redaction sampler (streamguard.sampling)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamguard import MarkovChain
from streamguard.redaction.plan import plan_redaction
from streamguard.sampling import (
    REDACTED,
    CsprngSource,
    KeystreamSource,
    SeededSource,
    apply_redaction,
    compact_index,
    quantised,
    thresholds,
)

TWO63 = 2**63


# ---------------------------------------------------------------------------------------------
# Thresholds
# ---------------------------------------------------------------------------------------------


def test_threshold_endpoints():
    thr = thresholds(np.array([0.0, 1.0, 0.5]))
    assert thr.dtype == np.uint64
    assert int(thr[0]) == 0
    assert int(thr[1]) == TWO63
    assert int(thr[2]) == TWO63 // 2


@given(st.floats(0.0, 1.0))
def test_thresholds_round_up(p):
    thr = thresholds(np.array([p]))
    # exact integer check: T = ⌈p · 2⁶³⌉ (p · 2⁶³ is exact in binary floating point)
    from fractions import Fraction

    exact = Fraction(p) * TWO63
    assert int(thr[0]) == math.ceil(exact)
    assert quantised(thr)[0] >= p
    assert Fraction(int(thr[0]), TWO63) - Fraction(p) < Fraction(1, TWO63)


@pytest.mark.parametrize("bad", [-1e-300, 1.0000000000000002, math.nan, 2.0])
def test_thresholds_reject_probabilities_outside_unit_interval(bad):
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        thresholds(np.array([0.5, bad]))


def test_extreme_thresholds_are_deterministic():
    # T = 0 never redacts, T = 2⁶³ always does, whatever the words are
    thr = thresholds(np.array([[0.0, 1.0]]))
    n = 10_000
    src = SeededSource(3)
    out0 = apply_redaction(np.zeros(n, np.int8), thr, np.zeros(n, np.int64), src)
    out1 = apply_redaction(np.ones(n, np.int8), thr, np.zeros(n, np.int64), src)
    assert np.all(out0 == 0)
    assert np.all(out1 == REDACTED)


def test_all_ones_word_is_still_redacted_at_probability_one():
    class MaxWords:
        deterministic = True

        def words(self, n):
            return np.full(n, np.iinfo(np.uint64).max, dtype=np.uint64)

    thr = thresholds(np.array([[1.0, 1.0], [np.nextafter(1.0, 0.0), 0.0]]))
    out = apply_redaction(np.array([0, 1, 0], np.int8), thr, np.array([0, 0, 1]), MaxWords())
    # U = 2⁶³ − 1 (all ones) < 2⁶³ (always) but not < ⌈(1 − 2⁻⁵³)·2⁶³⌉ = 2⁶³ − 2¹⁰
    np.testing.assert_array_equal(out, [REDACTED, REDACTED, 0])


# ---------------------------------------------------------------------------------------------
# apply_redaction: numba == numpy, validation
# ---------------------------------------------------------------------------------------------


@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(0, 300),
    rows=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), min_size=1, max_size=5),
    data=st.data(),
)
def test_numba_kernel_equals_numpy_reference(seed, n, rows, data):
    thr = thresholds(np.array(rows))
    states = np.array(data.draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)), dtype=np.int8)
    index = np.array(data.draw(st.lists(st.integers(0, len(rows) - 1), min_size=n, max_size=n)), dtype=np.int64)
    a = apply_redaction(states, thr, index, SeededSource(seed))
    b = apply_redaction(states, thr, index, SeededSource(seed), use_numpy=True)
    assert a.dtype == b.dtype == np.int8
    np.testing.assert_array_equal(a, b)
    # output is the state or REDACTED, never anything else
    assert np.all((a == states) | (a == REDACTED))


def test_seeded_source_is_reproducible_and_seed_dependent():
    a = SeededSource(42).words(1000)
    b = SeededSource(42).words(1000)
    c = SeededSource(43).words(1000)
    assert a.dtype == np.uint64
    np.testing.assert_array_equal(a, b)
    assert np.mean(a == c) < 0.01
    assert SeededSource.deterministic is True


@pytest.mark.parametrize(
    "states",
    [
        np.array([0, 1, 37, 1], dtype=np.int64),
        np.array([0, -5, 1], dtype=np.int16),
        [0, 1, 99],
        np.array([0, 1, 2], dtype=np.int8),
    ],
    ids=["int64-37", "int16-neg5", "list-99", "int8-2"],
)
def test_bad_states_raise_without_echoing_the_value(states):
    thr = thresholds(np.array([[0.2, 0.9]]))
    idx = np.zeros(len(states), dtype=np.int64)
    with pytest.raises(ValueError) as info:
        apply_redaction(states, thr, idx, SeededSource(1))
    msg = str(info.value)
    bad = [int(v) for v in np.asarray(states) if not 0 <= int(v) <= 1]
    for v in bad:
        assert str(v) not in msg.replace("0..1", "")
    assert "refusing" in msg


@pytest.mark.parametrize(
    "states",
    [
        np.array([0, 1, 256], dtype=np.int64),  # wraps to 0 when cast to int8
        np.array([1, 257, 0], dtype=np.int32),  # wraps to 1
        [0, 1, 300],  # Python int out of int8 range
        np.array([0.0, 1.5, 1.0]),  # not an integer state
    ],
    ids=["int64-256", "int32-257", "list-300", "float-1.5"],
)
def test_out_of_range_states_that_do_not_fit_int8_are_rejected(states):
    """States outside 0..k−1 must raise ValueError (documented), even when they do not fit the
    int8 working type; the message must not echo the bad value."""
    thr = thresholds(np.array([[0.0, 0.0]]))  # release everything: a wrapped value would leak out
    idx = np.zeros(len(states), dtype=np.int64)
    with pytest.raises(ValueError) as info:
        apply_redaction(states, thr, idx, SeededSource(1))
    msg = str(info.value)
    for v in ("256", "257", "300", "1.5"):
        assert v not in msg


def test_shape_and_index_errors():
    thr = thresholds(np.array([[0.2, 0.9]]))
    with pytest.raises(ValueError, match="same length"):
        apply_redaction(np.array([0, 1]), thr, np.array([0]), SeededSource(1))
    with pytest.raises(ValueError, match="does not exist"):
        apply_redaction(np.array([0, 1]), thr, np.array([0, 1]), SeededSource(1))


def test_csprng_words():
    src = CsprngSource()
    w = src.words(64)
    assert w.dtype == np.uint64 and w.shape == (64,)
    assert len(np.unique(w)) > 1
    assert src.deterministic is False
    assert src.words(0).shape == (0,)
    # 64 uniform words: the top bit is set in 32 ± 4σ (σ = 4) of them, unless something is badly off
    top = int(np.count_nonzero(w >> np.uint64(63)))
    assert 8 <= top <= 56


# ---------------------------------------------------------------------------------------------
# Statistical check of realised redaction frequencies
# ---------------------------------------------------------------------------------------------

DRAWS = 200_000


@pytest.mark.parametrize("source_kind", ["seeded", "csprng", "keystream"])
def test_empirical_redaction_frequencies_match_the_plan(source_kind):
    """Each (table row, state) cell is drawn 200 000 times; the redaction count is Binomial(N, r).

    For 0 < r < 1 we require |z| < 5 with z = (k − N r)/√(N r (1 − r)): a false failure has
    probability ≈ 5.7e-7 per cell, ≈ 1e-5 for the whole test (≤ 16 cells). With the seeded source
    the test is deterministic; with the CSPRNG it is genuinely random at that rate. Cells with
    r ∈ {0, 1} must be exact.
    """
    chain = MarkovChain.binary(0.01, 0.8)
    plan = plan_redaction(chain, 10, [0, 9], 1.0, design="exact")
    seq = plan.channels()
    r = seq.tables[:, :, -1]  # Pr(⊥ | x) per distinct table
    thr = thresholds(r)
    source = {"seeded": lambda: SeededSource(20240611), "csprng": CsprngSource,
              "keystream": KeystreamSource}[source_kind]()
    for t in range(r.shape[0]):
        for x in range(2):
            states = np.full(DRAWS, x, dtype=np.int8)
            out = apply_redaction(states, thr, np.full(DRAWS, t, dtype=np.int64), source)
            k = int(np.count_nonzero(out == REDACTED))
            assert np.all(out[out != REDACTED] == x)
            p = float(r[t, x])
            if p == 0.0:
                assert k == 0
            elif p == 1.0:
                assert k == DRAWS
            else:
                z = (k - DRAWS * p) / math.sqrt(DRAWS * p * (1 - p))
                assert abs(z) < 5.0, (t, x, p, k, z)
    # the plan does have fractional cells (otherwise this test would prove little)
    assert np.any((r > 0) & (r < 1))


def test_plan_privatize_uses_the_plan_table():
    chain = MarkovChain.binary(0.01, 0.8)
    plan = plan_redaction(chain, 10, [0], 1.0, design="paper")
    rng = np.random.default_rng(5)
    states = rng.integers(0, 2, size=10).astype(np.int8)
    out = plan.privatize(states, SeededSource(9))
    # L records are always redacted, S records always released
    L = plan.red[:, 0] == 1.0
    S = (plan.red == 0.0).all(axis=1)
    assert np.all(out[L & (plan.red[:, 1] == 1.0)] == REDACTED)
    np.testing.assert_array_equal(out[S], states[S])
    # and rare values in M are always redacted
    M = (plan.red[:, 0] > 0) & (plan.red[:, 0] < 1)
    assert np.all(out[M & (states == 1)] == REDACTED)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.int64, np.int32])
def test_any_row_index_dtype_gives_the_same_output(dtype):
    """The kernel reads uint8/uint16/uint32/int64 row indices as they are (others become int64):
    the same words give the same output whatever the dtype."""
    rng = np.random.default_rng(11)
    thr = thresholds(rng.uniform(0, 1, size=(3, 2)))
    states = rng.integers(0, 2, size=5000).astype(np.int8)
    index = rng.integers(0, 3, size=5000)
    want = apply_redaction(states, thr, index.astype(np.int64), SeededSource(4))
    np.testing.assert_array_equal(apply_redaction(states, thr, index.astype(dtype), SeededSource(4)), want)


def test_compact_index_picks_the_narrowest_unsigned_dtype_and_checks_rows():
    assert compact_index(np.array([0, 255]), 256).dtype == np.uint8
    assert compact_index(np.array([0, 256]), 257).dtype == np.uint16
    assert compact_index(np.array([0, 70_000]), 70_001).dtype == np.uint32
    np.testing.assert_array_equal(compact_index(np.array([3, 0, 2]), 4), [3, 0, 2])
    for bad in ([0, 256], [-1, 0]):  # a row that does not exist never wraps into range
        with pytest.raises(ValueError, match="row that does not exist"):
            compact_index(np.array(bad), 256)


@pytest.mark.parametrize("use_numpy", [False, True])
def test_out_of_range_input_in_a_later_chunk_is_refused(use_numpy):
    """int8 states and the row index are range-checked inside the chunked kernel: a bad entry
    anywhere (here in the second chunk) refuses the whole call, with the count and no value."""
    from streamguard.sampling import CHUNK

    n = CHUNK + 100
    thr = thresholds(np.array([[0.2, 0.9], [0.5, 0.5]]))
    states, index = np.zeros(n, np.int8), np.zeros(n, np.int64)
    for pos, value in ((CHUNK + 7, 2), (CHUNK + 8, -3)):
        states[pos] = value
    with pytest.raises(ValueError, match=r"^2 record\(s\) have a state outside 0\.\.1") as info:
        apply_redaction(states, thr, index, SeededSource(1), use_numpy=use_numpy)
    assert "-3" not in str(info.value)
    states[:] = 0
    for bad_row in (-1, 2):
        index[CHUNK + 50] = bad_row
        with pytest.raises(ValueError, match="row that does not exist"):
            apply_redaction(states, thr, index, SeededSource(1), use_numpy=use_numpy)
