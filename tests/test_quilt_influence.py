"""Max-influence of Markov quilts (streamguard.quilt.influence) against notes/002 §7 and enumeration."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamguard import MarkovChain, ModelError
from streamguard.quilt import QuiltModel, max_influence
from streamguard.quilt.influence import (
    E_SLACK,
    _finish_rows,
    e_table_reference,
    e_value,
    eigengap,
    finish_reference,
)

C1 = [[0.9, 0.1], [0.2, 0.8]]
C5 = [[0.2, 0.7, 0.1], [0.1, 0.2, 0.7], [0.7, 0.1, 0.2]]
INF = math.inf

# notes/002 §7 "Max-influence values": (a, b) → (E-stat, E-supq at i = a+1, A (Lemma II.3))
C1_TABLE = {
    (1, 1): (4.158883, 5.662960, INF),
    (2, 2): (2.712883, 3.605363, INF),
    (3, 3): (1.884860, 2.463216, INF),
    (5, 5): (0.947584, 1.212281, 7.292418),
    (10, 10): (0.167222, 0.209901, 1.432057),
    (None, 1): (2.079442, 2.079442, INF),
    (1, None): (2.079442, 3.583519, INF),
    (None, 5): (0.473792, 0.473792, 2.430806),
    (5, None): (0.473792, 0.738489, 4.861612),
}
C5_TABLE = {
    (1, 1): (3.198673, 5.144583, INF),
    (3, 3): (0.931482, 1.541064, INF),
    (5, 5): (0.318060, 0.500286, 3.578704),
    (10, 10): (0.014966, 0.024883, 0.573159),
    (None, 1): (1.945910, 1.945910, INF),
}


@pytest.mark.parametrize("matrix,table", [(C1, C1_TABLE), (C5, C5_TABLE)], ids=["C1", "C5"])
@pytest.mark.parametrize("col,mode", [(0, "stat"), (1, "supq"), (2, "approx")])
def test_reference_values(matrix, table, col, mode):
    model = QuiltModel([MarkovChain(matrix)], mode)
    for (a, b), expected in table.items():
        got = max_influence(model, (a or 0) + 1, a, b)  # supq's worst node i = a + 1
        if math.isinf(expected[col]):
            assert got == math.inf
        else:
            assert got == pytest.approx(expected[col], abs=1e-4)


def test_chain_facts_of_notes():
    assert eigengap(MarkovChain(C1)) == pytest.approx(0.51, abs=1e-12)
    assert eigengap(MarkovChain([[0.8, 0.15, 0.05], [0.1, 0.8, 0.1], [0.05, 0.15, 0.8]])) == pytest.approx(0.4375, abs=1e-9)
    assert eigengap(MarkovChain(C5)) == pytest.approx(0.69, abs=1e-9)


def test_empty_quilt_and_iid_chain_have_zero_influence():
    model = QuiltModel([MarkovChain(C1)], "stat")
    assert max_influence(model, 5, None, None) == 0.0
    iid = QuiltModel([MarkovChain([[0.3, 0.7], [0.3, 0.7]])], "stat")
    assert max_influence(iid, 3, 1, 1) == 0.0  # identical rows: exactly independent, no slack


def test_theta_set_is_worst_case():
    sticky = MarkovChain([[0.95, 0.05], [0.05, 0.95]])
    both = QuiltModel([MarkovChain(C1), sticky], "stat")
    for a, b in [(1, 1), (3, 2), (None, 4)]:
        i = (a or 0) + 1
        single = [max_influence(QuiltModel([c], "stat"), i, a, b) for c in both.chains]
        assert max_influence(both, i, a, b) == max(single)


# ------------------------------------------------------------------------------ brute force


def _brute_influence(P, q, T, i, a, b):
    """max_{s≠t} max_{x_Q} log P(X_Q = x_Q | X_i = s) / P(X_Q = x_Q | X_i = t) by enumerating [k]^T."""
    P = np.asarray(P)
    k = P.shape[0]
    seqs = np.array(list(itertools.product(range(k), repeat=T)))
    prob = q[seqs[:, 0]].copy()
    for t in range(T - 1):
        prob *= P[seqs[:, t], seqs[:, t + 1]]
    cols = ([i - 1 - a] if a else []) + ([i - 1 + b] if b else [])
    key = np.zeros(len(seqs), dtype=np.int64)
    for c in cols:
        key = key * k + seqs[:, c]
    nkeys = k ** len(cols)
    cond = np.zeros((k, nkeys))
    for s in range(k):
        sel = seqs[:, i - 1] == s
        mass = prob[sel].sum()
        if mass > 0:
            cond[s] = np.bincount(key[sel], weights=prob[sel], minlength=nkeys) / mass
    valid = [s for s in range(k) if prob[seqs[:, i - 1] == s].sum() > 0]
    worst = 0.0
    for s in valid:
        for t in valid:
            if s == t:
                continue
            for x in range(nkeys):
                if cond[s, x] > 0:
                    worst = max(worst, math.inf if cond[t, x] == 0 else math.log(cond[s, x] / cond[t, x]))
    return worst


def _close_from_above(got: float, expected: float) -> bool:
    """Equal up to the enumeration's round-off, and the tables' deliberate upward slack."""
    tol = 1e-12 * (1 + expected)
    return expected - tol <= got <= expected + 4 * E_SLACK + tol


@st.composite
def chains(draw, zeros=False):
    k = draw(st.integers(2, 3))
    entry = st.one_of(st.just(0.0), st.floats(0.05, 1.0)) if zeros else st.floats(0.05, 1.0)
    rows = [[draw(entry) for _ in range(k)] for _ in range(k)]
    P = np.array(rows) + (1e-3 if zeros else 0.0) * np.eye(k)
    P = P / P.sum(axis=1, keepdims=True)
    q = np.array([draw(st.floats(0.05, 1.0)) for _ in range(k)])
    return P, q / q.sum()


@given(chains(), st.data())
def test_eq_matches_enumeration(pq, data):
    P, q = pq
    k = P.shape[0]
    T = data.draw(st.integers(2, 7 if k == 3 else 10))
    i = data.draw(st.integers(1, T))
    a = data.draw(st.one_of(st.none(), st.integers(1, i - 1))) if i > 1 else None
    b = data.draw(st.one_of(st.none(), st.integers(1, T - i))) if i < T else None
    model = QuiltModel([MarkovChain(P, q)], "q")
    expected = _brute_influence(P, q, T, i, a, b)
    got = max_influence(model, i, a, b)
    if math.isinf(expected):
        assert got == math.inf
    else:
        assert _close_from_above(got, expected)


@given(chains(zeros=True), st.data())
def test_eq_with_zero_probabilities_matches_enumeration(pq, data):
    P, q = pq
    q = q.copy()
    q[data.draw(st.integers(0, len(q) - 1))] = 0.0  # an impossible initial state
    q /= q.sum()
    T = data.draw(st.integers(2, 6))
    i = data.draw(st.integers(2, T))
    a = data.draw(st.integers(1, i - 1))
    b = data.draw(st.one_of(st.none(), st.integers(1, T - i))) if i < T else None
    expected = _brute_influence(P, q, T, i, a, b)
    got = max_influence(QuiltModel([MarkovChain(P, q)], "q"), i, a, b)
    if math.isinf(expected):
        assert got == math.inf
    else:
        assert _close_from_above(got, expected)


@given(chains(), st.data())
def test_stat_is_eq_at_stationarity_and_supq_bounds_every_start(pq, data):
    P, _ = pq
    k = P.shape[0]
    chain = MarkovChain(P)
    T = data.draw(st.integers(3, 7 if k == 3 else 9))
    i = data.draw(st.integers(2, T - 1))
    a = data.draw(st.integers(1, i - 1))
    b = data.draw(st.one_of(st.none(), st.integers(1, T - i)))
    pi = chain.stationary_law
    stat = max_influence(QuiltModel([chain], "stat"), i, a, b)
    assert stat == pytest.approx(_brute_influence(P, pi, T, i, a, b), abs=1e-9)
    supq = max_influence(QuiltModel([chain], "supq"), i, a, b)
    starts = [np.eye(k)[x] * (1 - 1e-9) + 1e-9 / k for x in range(k)] + [pi]
    for q in starts:
        assert _brute_influence(P, q, T, i, a, b) <= supq + 1e-9
    approx = max_influence(QuiltModel([chain], "approx"), i, a, b)
    assert supq <= approx  # Lemma II.3 is never below E-supq (notes §6 item 2)


@given(chains(), st.integers(1, 12), st.integers(1, 12))
def test_tables_monotone_and_joint_max_not_above_sum(pq, a, b):
    P, _ = pq
    model = QuiltModel([MarkovChain(P)], "stat")
    e = lambda a_, b_: max_influence(model, 20, a_, b_)  # noqa: E731
    assert e(a, b) >= e(a + 1, b) and e(a, b) >= e(a, b + 1)
    assert max(e(a, None), e(None, b)) <= e(a, b) <= e(a, None) + e(None, b) + 1e-12


def test_numba_kernels_match_numpy_reference():
    rng = np.random.default_rng(7)
    raw = rng.normal(size=(30, 6))
    raw[5, 2] = np.nan
    raw[8, 1] = np.inf
    fast = np.ascontiguousarray(raw.copy())
    _finish_rows(fast, 1, E_SLACK)
    ref = finish_reference(raw)
    np.testing.assert_array_equal(fast, ref)
    assert np.all(np.diff(ref[1:], axis=0) <= 0) and np.all(ref >= 0)
    E = e_table_reference(ref, ref[::-1].copy())
    for a in range(0, 30, 7):
        for b in range(0, 30, 5):
            assert e_value(ref, ref[::-1].copy(), a, b) == E[a, b]


def test_invalid_arguments_are_refused():
    model = QuiltModel([MarkovChain(C1)], "stat")
    with pytest.raises(ValueError, match="1-based"):
        max_influence(model, 0, None, 1)
    with pytest.raises(ValueError, match="left distance"):
        max_influence(model, 3, 3, 1)
    with pytest.raises(ValueError, match="right distance"):
        max_influence(model, 3, 1, 0)
    with pytest.raises(ModelError, match="unknown max-influence mode"):
        QuiltModel([MarkovChain(C1)], "exact")
    with pytest.raises(ModelError, match="stationary start"):
        QuiltModel([MarkovChain(C1, [0.5, 0.5])], "stat")
    with pytest.raises(ModelError, match="reversible"):
        QuiltModel([MarkovChain(C5)], "approx-rev")
    with pytest.raises(ModelError, match="same number of states"):
        QuiltModel([MarkovChain(C1), MarkovChain(C5)], "stat")
    with pytest.raises(ModelError, match="only applies to mode 'q'"):
        QuiltModel([MarkovChain(C1)], "stat", initial=[0.5, 0.5])
    with pytest.raises(ModelError, match="irreducible"):
        QuiltModel([MarkovChain([[1.0, 0.0], [0.5, 0.5]], [0.5, 0.5])], "supq")


def test_periodic_and_reducible_chains_give_infinite_influence_not_nan():
    periodic = QuiltModel([MarkovChain([[0.0, 1.0], [1.0, 0.0]], [0.5, 0.5])], "stat")
    for a, b in [(1, 1), (4, 7), (None, 6), (3, None)]:
        assert max_influence(periodic, (a or 0) + 1, a, b) == math.inf
    absorbing = QuiltModel([MarkovChain([[1.0, 0.0], [0.5, 0.5]], [0.5, 0.5])], "q")
    v = max_influence(absorbing, 3, 1, 2)
    assert v == math.inf and not math.isnan(v)


def test_model_identifier_and_describe():
    m1 = QuiltModel([MarkovChain(C1)], "stat")
    m2 = QuiltModel([MarkovChain(np.array(C1))], "stat")
    assert m1.identifier == m2.identifier and len(m1.identifier) == 16
    assert QuiltModel([MarkovChain(C1)], "supq").identifier != m1.identifier
    q1 = QuiltModel([MarkovChain(C1)], "q", initial=[0.5, 0.5])
    q2 = QuiltModel([MarkovChain(C1)], "q", initial=[0.4, 0.6])
    assert q1.identifier != q2.identifier
    doc = m1.describe()
    import json

    assert json.loads(json.dumps(doc))["mode"] == "stat" and doc["identifier"] == m1.identifier
