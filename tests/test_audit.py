"""Exact O(n) leakage audit vs brute force and closed forms (streamguard.audit; notes/000 §9.2)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from _reference import enumerate_leakage, hat_i, redaction_emissions
from streamguard import MarkovChain, ModelError
from streamguard.audit import brute_force_leakage, exact_leakage, side_leakage
from streamguard.audit.exact import side_range
from streamguard.privacy.channel import ChannelError, ChannelSequence
from streamguard.redaction.baselines import window_leakage


def _close(a: float, b: float, tol: float) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= tol


# ---------------------------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------------------------

probs = st.floats(0.01, 0.99)


@st.composite
def emission_rows(draw, m: int):
    """One row of an emission table over m outputs, with zeros allowed (never all zero)."""
    w = [draw(st.one_of(st.just(0.0), st.floats(0.01, 1.0))) for _ in range(m)]
    if sum(w) == 0.0:
        w[draw(st.integers(0, m - 1))] = 1.0
    s = sum(w)
    return [v / s for v in w]


@st.composite
def channel_cases(draw, max_n: int = 6):
    """(chain, seq, p): a random binary chain (stationary or not) and random emission tables."""
    alpha, beta = draw(probs), draw(probs)
    m = draw(st.integers(1, 4))
    n = draw(st.integers(1, max_n if m <= 3 else max_n - 1))
    p = draw(st.integers(0, n - 1))
    kind = draw(st.sampled_from(["stationary", "random", "degenerate"]))
    if kind == "stationary":
        chain = MarkovChain.binary(alpha, beta)
    elif kind == "random":
        a = draw(st.floats(0.05, 0.95))
        chain = MarkovChain.binary(alpha, beta, initial=[a, 1 - a])
    else:
        chain = MarkovChain.binary(alpha, beta, initial=draw(st.sampled_from([[1.0, 0.0], [0.0, 1.0]])))
    assume(np.all(chain.marginal(p) > 0))
    E = np.array([[draw(emission_rows(m)) for _ in range(2)] for _ in range(n)])
    return chain, ChannelSequence.from_dense(E), p


@st.composite
def redaction_cases(draw, max_n: int = 8):
    """(chain, red, p): random redaction tables with Y_p = ⊥ and some revealing (0, 0) rows."""
    chain = MarkovChain.binary(draw(probs), draw(probs))
    n = draw(st.integers(1, max_n))
    p = draw(st.integers(0, n - 1))
    # (probabilities below 1e-4 are left out: with subnormal inputs such as 2e-311 the brute force
    # loses relative precision — it was off by 4e-9 in one such case while the audit was exact)
    cell = st.one_of(st.just(0.0), st.just(1.0), st.floats(1e-4, 1.0 - 1e-4))
    red = np.array([[draw(cell), draw(cell)] for _ in range(n)])
    red[p] = 1.0
    return chain, red, p


# ---------------------------------------------------------------------------------------------
# Exact audit == brute force (any emission tables, any initial law)
# ---------------------------------------------------------------------------------------------


@given(channel_cases())
def test_exact_equals_brute_force_for_any_emission_tables(case):
    chain, seq, p = case
    exact = exact_leakage(chain, seq, p).total
    brute = brute_force_leakage(chain, seq, p)
    assert _close(exact, brute, 1e-9), (exact, brute)


@given(channel_cases())
def test_numba_kernel_equals_numpy_reference(case):
    chain, seq, p = case
    a = exact_leakage(chain, seq, p)
    b = exact_leakage(chain, seq, p, use_numpy=True)
    for x, y in ((a.total, b.total), (a.left, b.left), (a.right, b.right)):
        assert _close(x, y, 1e-12), (a, b)


@given(redaction_cases())
def test_redaction_audit_equals_brute_force_and_composes(case):
    chain, red, p = case
    seq = ChannelSequence.from_redaction(red)
    lk = exact_leakage(chain, seq, p)
    brute = brute_force_leakage(chain, seq, p)
    assert _close(lk.total, brute, 1e-9)
    # Y_p = ⊥: the sides compose (notes/000 §4.1), and each side alone never exceeds the total
    assert lk.total <= lk.left + lk.right + 1e-12
    assert max(lk.left, lk.right) <= lk.total + 1e-12


@given(channel_cases(max_n=4))
def test_library_brute_force_equals_independent_output_enumerator(case):
    chain, seq, p = case
    brute = brute_force_leakage(chain, seq, p)
    ref = enumerate_leakage(chain.matrix, chain.initial, seq.dense(), p)
    assert _close(brute, ref, 1e-10)


def test_brute_force_of_three_state_chain_equals_independent_enumerator():
    P = np.array([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.25, 0.25, 0.5]])
    chain = MarkovChain(P)
    rng = np.random.default_rng(7)
    for _ in range(5):
        E = rng.random((4, 3, 2)) * (rng.random((4, 3, 2)) > 0.2) + 1e-3
        E /= E.sum(axis=2, keepdims=True)
        seq = ChannelSequence.from_dense(E)
        for p in range(4):
            assert brute_force_leakage(chain, seq, p) == pytest.approx(
                enumerate_leakage(P, chain.initial, E, p), abs=1e-10
            )


# ---------------------------------------------------------------------------------------------
# Reference numbers
# ---------------------------------------------------------------------------------------------


def test_example1_leakage_is_log_18_over_11(ex1_chain):
    # notes/000 §6, Example 1: n = 2, p = 1 (index 0), q2 = 1/8
    seq = ChannelSequence.from_redaction([[1.0, 1.0], [1 / 8, 1.0]])
    expected = math.log(18 / 11)
    assert expected == pytest.approx(0.4924765, abs=1e-7)
    lk = exact_leakage(ex1_chain, seq, 0)
    assert lk.total == pytest.approx(expected, abs=1e-14)
    assert lk.right == pytest.approx(expected, abs=1e-14) and lk.left == 0.0
    assert exact_leakage(ex1_chain, seq, 0, use_numpy=True).total == pytest.approx(expected, abs=1e-14)
    assert brute_force_leakage(ex1_chain, seq, 0) == pytest.approx(expected, abs=1e-14)


def test_example1_releasing_x2_leaks_log2(ex1_chain):
    # Table I: releasing X_2 fully leaks max(log 1.5, log 2) = log 2 = I(X_1 ⇝ X_2)
    seq = ChannelSequence.from_redaction([[1.0, 1.0], [0.0, 0.0]])
    assert exact_leakage(ex1_chain, seq, 0).total == pytest.approx(math.log(2), abs=1e-15)


@pytest.mark.parametrize(("alpha", "beta"), [(0.01, 0.8), (0.25, 0.5), (0.1, 0.3), (0.6, 0.9), (0.5, 0.75), (0.8, 0.1)])
def test_deterministic_window_leakage_equals_quilt_max_influence(alpha, beta):
    """Corollary 3: a redacted window's leakage is the max-influence of its quilt."""
    chain = MarkovChain.binary(alpha, beta)
    n = 9
    lam = 1 - alpha - beta
    for p in range(n):
        for dl in range(p + 1):
            for dr in range(n - p):
                red = np.zeros((n, 2))
                red[p - dl : p + dr + 1] = 1.0
                seq = ChannelSequence.from_redaction(red)
                exact = exact_leakage(chain, seq, p).total
                assert window_leakage(chain, n, p, dl, dr) == pytest.approx(exact, abs=1e-12)
                has_left, has_right = p - dl > 0, p + dr < n - 1
                if lam >= 0:
                    # λ ≥ 0: the quilt's max-influences add (Remark 1)
                    expected = (hat_i(alpha, beta, dl + 1) if has_left else 0.0) + (
                        hat_i(alpha, beta, dr + 1) if has_right else 0.0
                    )
                    assert exact == pytest.approx(expected, rel=1e-10, abs=1e-15)
                else:
                    # λ < 0: sub-additive; equal for even distance between the quilt records
                    bound = (hat_i(alpha, beta, dl + 1) if has_left else 0.0) + (
                        hat_i(alpha, beta, dr + 1) if has_right else 0.0
                    )
                    assert exact <= bound + 1e-12
                    if not (has_left and has_right) or (dl + dr + 2) % 2 == 0:
                        assert exact == pytest.approx(bound, rel=1e-10, abs=1e-15)
                    else:
                        assert exact < bound


def test_window_leakage_matches_brute_force_small():
    chain = MarkovChain.binary(0.6, 0.9)  # λ = −0.5
    n = 6
    for p in range(n):
        for dl in range(p + 1):
            for dr in range(n - p):
                red = np.zeros((n, 2))
                red[p - dl : p + dr + 1] = 1.0
                brute = brute_force_leakage(chain, ChannelSequence.from_redaction(red), p)
                assert window_leakage(chain, n, p, dl, dr) == pytest.approx(brute, abs=1e-12)


def test_support_mismatch_gives_infinite_leakage():
    chain = MarkovChain.binary(0.2, 0.3)
    # releasing the private record itself: the output "0" is impossible when X_p = 1
    seq = ChannelSequence.from_redaction([[0.5, 0.5], [0.0, 1.0], [0.2, 0.7]])
    assert exact_leakage(chain, seq, 1).total == math.inf
    assert exact_leakage(chain, seq, 1, use_numpy=True).total == math.inf
    assert brute_force_leakage(chain, seq, 1) == math.inf
    # a general channel at p with one column only one input can produce
    E = np.array([[[0.5, 0.5], [0.5, 0.5]], [[1.0, 0.0], [0.3, 0.7]], [[0.5, 0.5], [0.5, 0.5]]])
    seq = ChannelSequence.from_dense(E)
    assert exact_leakage(chain, seq, 1).total == math.inf
    assert brute_force_leakage(chain, seq, 1) == math.inf


def test_noisy_channel_at_p_adds_its_log_ratio():
    # everything else redacted: leakage = max over y of |log e_p(y|0)/e_p(y|1)|
    chain = MarkovChain.binary(0.2, 0.3)
    E = np.array([[[0, 0, 1.0], [0, 0, 1.0]], [[0.7, 0.3, 0], [0.2, 0.8, 0]], [[0, 0, 1.0], [0, 0, 1.0]]])
    expected = max(abs(math.log(0.7 / 0.2)), abs(math.log(0.3 / 0.8)))
    assert exact_leakage(chain, ChannelSequence.from_dense(E), 1).total == pytest.approx(expected, abs=1e-14)


# ---------------------------------------------------------------------------------------------
# Per-side leakage and the revealing cut
# ---------------------------------------------------------------------------------------------


@given(redaction_cases(max_n=8))
def test_side_leakage_equals_brute_force_with_the_other_side_redacted(case):
    chain, red, p = case
    seq = ChannelSequence.from_redaction(red)
    lk = exact_leakage(chain, seq, p)
    for side in ("left", "right"):
        only = red.copy()
        if side == "left":
            only[p:] = 1.0
        else:
            only[: p + 1] = 1.0
        brute = brute_force_leakage(chain, ChannelSequence.from_redaction(only), p)
        got = side_leakage(chain, seq, p, side)
        assert got == pytest.approx(brute, abs=1e-9)
        assert got == pytest.approx(getattr(lk, side), abs=1e-12)
        assert side_leakage(chain, seq, p, side, use_numpy=True) == pytest.approx(got, abs=1e-12)


@pytest.mark.parametrize("tiny", [2.2250738585e-311, 1e-300, 1e-30])
def test_tiny_probabilities_beyond_a_released_record_do_not_matter(tiny):
    chain = MarkovChain.binary(0.25, 0.5)
    red = np.array([[1.0, 1.0], [0.0, 0.0], [0.0, 0.5], [0.0, tiny], [tiny, tiny]])
    seq = ChannelSequence.from_redaction(red)
    expected = hat_i(0.25, 0.5, 1)  # the released neighbour screens off the rest: I(1) = log 2
    assert exact_leakage(chain, seq, 0).total == pytest.approx(expected, abs=1e-15)
    assert exact_leakage(chain, seq, 0, use_numpy=True).total == pytest.approx(expected, abs=1e-15)


def test_side_leakage_rejects_unknown_side():
    chain = MarkovChain.binary(0.2, 0.3)
    seq = ChannelSequence.from_redaction([[1.0, 1.0], [0.0, 0.0]])
    with pytest.raises(ValueError, match="side must be"):
        side_leakage(chain, seq, 0, "middle")


@given(
    alpha=probs,
    beta=probs,
    rows=st.lists(
        st.sampled_from([(0.0, 0.0), (1.0, 1.0), (0.3, 1.0), (1.0, 0.6), (0.5, 0.5), (0.1, 0.9)]),
        min_size=1,
        max_size=12,
    ),
    use_numpy=st.booleans(),
)
def test_revealing_cut_does_not_change_the_side_range(alpha, beta, rows, use_numpy):
    chain = MarkovChain.binary(alpha, beta)
    seq = ChannelSequence.from_redaction(np.array(rows))
    kern = chain.matrix[None]
    full = side_range(kern, seq.tables, seq.index, use_numpy=use_numpy)
    cut = side_range(kern, seq.tables, seq.index, revealing=seq.revealing_tables(), use_numpy=use_numpy)
    assert cut.lo == pytest.approx(full.lo, abs=1e-12)
    assert cut.hi == pytest.approx(full.hi, abs=1e-12)


def test_revealing_tables_flags_exactly_the_always_release_rows():
    seq = ChannelSequence.from_redaction([[0.0, 0.0], [1.0, 1.0], [0.5, 1.0], [0.0, 0.0]])
    rev = seq.revealing_tables()[seq.index]
    np.testing.assert_array_equal(rev, [True, False, False, True])


def test_non_stationary_left_side_uses_bayes_kernels():
    # X_0 = 0 surely; the record left of p is then informative in a way the stationary kernel
    # would get wrong. Check the exact audit against brute force and the independent enumerator.
    chain = MarkovChain.binary(0.3, 0.4, initial=[0.9, 0.1])
    red = np.array([[0.0, 0.0], [0.4, 1.0], [1.0, 1.0], [0.0, 0.2]])
    seq = ChannelSequence.from_redaction(red)
    ref = enumerate_leakage(chain.matrix, chain.initial, redaction_emissions(red), 2)
    assert exact_leakage(chain, seq, 2).total == pytest.approx(ref, abs=1e-12)
    stationary = exact_leakage(MarkovChain.binary(0.3, 0.4), seq, 2).total
    assert abs(stationary - ref) > 1e-3


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


def test_audit_errors():
    chain = MarkovChain.binary(0.2, 0.3)
    seq = ChannelSequence.from_redaction([[1.0, 1.0], [0.0, 0.0]])
    with pytest.raises(ValueError, match="outside 0..1"):
        exact_leakage(chain, seq, 2)
    three = MarkovChain(np.full((3, 3), 1 / 3))
    with pytest.raises(ModelError, match="binary chain"):
        exact_leakage(three, seq, 0)
    with pytest.raises(ChannelError, match="3 input states"):
        brute_force_leakage(chain, ChannelSequence.from_dense(np.full((2, 3, 2), 0.5)), 0)
    # a known first reading: X_0 = 1 has probability 0 and nothing lies on its left, so its right side
    # (the chain started from each value, docs/initial-law.md) decides: log max P[a,x]/P[b,x]
    degenerate = MarkovChain.binary(0.2, 0.3, initial=[1.0, 0.0])
    assert exact_leakage(degenerate, seq, 0).total == pytest.approx(math.log(0.7 / 0.2), abs=1e-12)
    assert brute_force_leakage(degenerate, seq, 0) == pytest.approx(math.log(0.7 / 0.2), abs=1e-12)
    stuck = MarkovChain([[1.0, 0.0], [0.5, 0.5]], [1.0, 0.0])  # X_1 = 1 impossible, with a left side
    with pytest.raises(ModelError, match="both states possible"):
        exact_leakage(stuck, ChannelSequence.from_redaction([[0.0, 0.0], [1.0, 1.0]]), 1)
    with pytest.raises(ValueError, match="refused"):
        brute_force_leakage(chain, ChannelSequence.from_redaction(np.ones((20, 2))), 0)


def test_fraction_reference_sanity():
    # the helper used above: I(1) for α = .25, β = .5 is log 2 exactly
    assert hat_i(0.25, 0.5, 1) == pytest.approx(math.log(2), abs=1e-15)
    assert Fraction(0.25) == Fraction(1, 4)
