"""Per-position quilt accountant (streamguard.quilt.accountant) against notes/002 §4.7 and a reference."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamguard import MarkovChain
from streamguard.quilt import QuiltModel, sigma_inf, sigma_max, sigma_supq
from streamguard.quilt.accountant import QuiltAccountant
from streamguard.quilt.influence import e_table_reference

C1 = MarkovChain([[0.9, 0.1], [0.2, 0.8]])
C3 = MarkovChain([[0.6, 0.4], [0.4, 0.6]])


def reference_profile(model: QuiltModel, radius: int, c0: int, segments, positions) -> np.ndarray:
    """ε_i by enumerating every allowed quilt on a dense load array (numpy, no pruning)."""
    last = max(positions) + radius + 1
    rho = np.zeros(last - c0 + 1)
    for s, e, v in segments:
        rho[s - c0 : e - c0 + 1] += v
    S = np.concatenate([[0.0], np.cumsum(rho)])
    out = []
    for pos in positions:
        x, d = pos - c0, pos - c0
        worst = 0.0
        for theta in range(len(model.chains)):
            bwd, fwd = model.tables(theta).ti(radius)
            E = e_table_reference(bwd, fwd)
            A = min(radius, d)
            best = math.inf
            if A >= 1:
                a = np.arange(1, A + 1)[:, None]
                b = np.arange(1, radius + 1)[None, :]
                best = float(np.min(S[x + b] - S[x - a + 1] + E[1 : A + 1, 1:]))
            if d <= radius:  # left-absent quilts {X_{i+b}}
                b = np.arange(1, radius + 1)
                best = min(best, float(np.min(S[x + b] - S[0] + E[0, 1:])))
            worst = max(worst, best)
        out.append(worst)
    return np.array(out)


# --------------------------------------------------------------------- notes/002 §4.7 table


@pytest.mark.parametrize(
    "T,eps_list,expected",
    [(8, (1.0, 2.0), 2.2800), (7, (1.0, 2.0, 4.0), 5.4690), (8, (4.0, 4.0), 7.1891)],
)
def test_section_4_7_whole_chain_releases(T, eps_list, expected):
    M = QuiltModel([C3], "stat")
    acc = QuiltAccountant(M)
    for eps in eps_list:
        acc.record(0, T - 1, 1.0 / sigma_max(M, eps, T).sigma)
    assert acc.eps_max() == pytest.approx(expected, abs=1e-4)
    assert acc.eps_max() <= sum(eps_list)


@pytest.mark.parametrize("windows", [[(0, 3), (4, 7)], [(0, 3), (8, 11)]], ids=["tumbling", "distant"])
def test_section_4_7_windows(windows):
    M = QuiltModel([C3], "stat")
    acc = QuiltAccountant(M)
    sigma = sigma_inf(M, 2.0).sigma
    for lo, hi in windows:
        acc.record(lo, hi, 1.0 / sigma)
    assert acc.eps_max() == pytest.approx(2.0, abs=1e-4)


def test_pure_correlation_leakage_next_to_a_window():
    """C1, ε = 1, one window [101, 150] (1-based): 0.4776 at 100, 0.0588 at 90, 0.0017 at 80, ≈ 0 at 60."""
    M = QuiltModel([C1], "stat")
    acc = QuiltAccountant(M, radius=100)
    acc.record(100, 149, 1.0 / sigma_inf(M, 1.0).sigma)
    for pos, expected in [(99, 0.4776), (89, 0.0588), (79, 0.0017), (59, 0.0)]:
        assert acc.eps_at(pos)[0] == pytest.approx(expected, abs=1e-4)
    eps, theta, (a, b) = acc.eps_at(99)
    assert theta == 0 and a is None and b == 9  # {X_{i+9}}: N reaches 8 positions into the window
    assert acc.eps_max() == pytest.approx(1.0, abs=1e-9)


# ------------------------------------------------------------------------------ properties


def test_duality_constant_load():
    M = QuiltModel([C1], "stat")
    for eps in (0.5, 1.0, 2.0):
        acc = QuiltAccountant(M)
        acc.record(0, 399, 1.0 / sigma_inf(M, eps).sigma)
        prof = acc.eps_profile(0, 399 + acc.radius)
        R = acc.radius
        np.testing.assert_allclose(prof[R : 400 - R], eps, atol=1e-9)  # interior: exactly ε
        assert prof.max() <= eps + 1e-9  # ends and unreleased neighbours: ≤ ε
        assert prof[0] < eps - 1e-3  # the chain start pays less (one-sided quilts)


@given(st.sampled_from(["stat", "approx", "approx-rev"]), st.floats(0.3, 3.0),
       st.lists(st.integers(1, 60), min_size=1, max_size=12), st.integers(0, 5))
def test_tumbling_windows_with_sigma_inf_cost_epsilon(mode, eps, lengths, c0):
    M = QuiltModel([C1], mode)
    acc = QuiltAccountant(M, chain_start=c0)
    load = 1.0 / sigma_inf(M, eps).sigma
    lo = c0
    for n in lengths:
        acc.record(lo, lo + n - 1, load)
        lo += n
    assert acc.eps_max() <= eps + 1e-9


@st.composite
def chain_models(draw, modes=("stat", "approx")):
    k = draw(st.sampled_from([2, 3]))
    rows = np.array([[draw(st.floats(0.05, 1.0)) for _ in range(k)] for _ in range(k)])
    return QuiltModel([MarkovChain(rows / rows.sum(axis=1, keepdims=True))], draw(st.sampled_from(modes)))


@given(chain_models(modes=("stat", "approx")), st.integers(1, 30),
       st.lists(st.floats(0.2, 4.0), min_size=1, max_size=3))
def test_whole_chain_mqm_releases_never_above_the_sum(M, T, eps_list):
    """Thm III.7 (Σ ε_k) is an upper bound of the accountant, up to its floor e(R, R) (restricted quilts)."""
    acc = QuiltAccountant(M)
    for eps in eps_list:
        acc.record(0, T - 1, 1.0 / sigma_max(M, eps, T).sigma)
    assert acc.eps_max() <= sum(eps_list) + acc.floor + 1e-12


@given(chain_models(modes=("supq",)), st.integers(1, 30), st.lists(st.floats(0.2, 4.0), min_size=1, max_size=3))
def test_supq_releases_with_sigma_bar_never_above_the_sum(M, T, eps_list):
    acc = QuiltAccountant(M)
    for eps in eps_list:
        acc.record(0, T - 1, 1.0 / sigma_supq(M, eps).sigma)
    assert acc.eps_max() <= sum(eps_list) + acc.floor + 1e-12


records = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 12), st.floats(0.01, 2.0)), min_size=1, max_size=8)


@given(chain_models(modes=("stat", "approx", "supq")), st.integers(2, 7), st.integers(0, 4), records,
       st.booleans())
def test_incremental_equals_from_scratch(M, radius, c0, recs, two_chains):
    if two_chains:
        M = QuiltModel([M.chains[0], C1 if M.k == 2 else MarkovChain(np.full((3, 3), 1 / 3))], M.mode)
    acc = QuiltAccountant(M, radius=radius, chain_start=c0)
    for start, length, load in recs:
        acc.record(c0 + start, c0 + start + length, load)
    segs = acc.segments()
    # segments are ordered, disjoint, merged and carry the summed loads
    dense = np.zeros(60)
    for start, length, load in recs:
        dense[start : start + length + 1] += load
    rebuilt = np.zeros(60)
    for s, e, v in segs:
        rebuilt[s - c0 : e - c0 + 1] += v
    np.testing.assert_allclose(rebuilt, dense, rtol=1e-12, atol=1e-15)
    assert all(e1 < s2 for (_, e1, _), (s2, _, _) in zip(segs, segs[1:]))
    positions = list(range(c0, c0 + 60 + radius))
    ref = reference_profile(M, radius, c0, segs, positions)
    np.testing.assert_allclose(acc.eps_profile(c0, c0 + 59 + radius), ref, rtol=1e-12, atol=1e-12)
    assert acc.eps_max() == pytest.approx(max(ref.max(), acc.floor), rel=1e-12, abs=1e-12)
    # a from-scratch accountant fed the final segments agrees
    fresh = QuiltAccountant(M, radius=radius, chain_start=c0)
    for s, e, v in segs:
        fresh.record(s, e, v)
    assert fresh.eps_max() == pytest.approx(acc.eps_max(), rel=1e-12, abs=1e-12)


def test_json_round_trip_and_model_check():
    M = QuiltModel([C1], "stat")
    acc = QuiltAccountant(M, chain_start=3)
    acc.record(3, 20, 0.05)
    acc.record(10, 40, 0.02)
    doc = json.loads(json.dumps(acc.to_json()))
    back = QuiltAccountant.from_json(doc, M)
    assert back.segments() == acc.segments() and back.eps_max() == acc.eps_max()
    assert back.radius == acc.radius and back.chain_start == 3
    assert back.record(50, 60, 0.01) == acc.record(50, 60, 0.01)
    with pytest.raises(ValueError, match="belongs to model"):
        QuiltAccountant.from_json(doc, QuiltModel([C3], "stat"))
    bad = dict(doc, segments=[[10, 5, 0.1]])
    with pytest.raises(ValueError, match="segments"):
        QuiltAccountant.from_json(bad, M)


def test_filter_and_calibration():
    M = QuiltModel([C1], "stat")
    acc = QuiltAccountant(M)
    acc.record(0, 99, 1.0 / sigma_inf(M, 1.0).sigma)
    before = acc.segments()
    assert acc.would_exceed(50, 149, 0.01, 1.0) and not acc.would_exceed(50, 149, 0.01, 2.0)
    assert acc.segments() == before  # no state change
    beta = acc.calibrate(100, 199, lipschitz=2.0, budget=1.0)  # next tumbling window, L = 2
    assert beta == pytest.approx(2.0 * sigma_inf(M, 1.0).sigma, rel=1e-9)
    assert not acc.would_exceed(100, 199, 2.0 / beta, 1.0)
    assert acc.would_exceed(100, 199, 2.0 / beta * (1 + 1e-6), 1.0)
    beta2 = acc.calibrate(50, 149, lipschitz=1.0, budget=1.5)  # overlapping: less room
    assert acc.record(50, 149, 1.0 / beta2) <= 1.5
    with pytest.raises(ValueError, match="already exceeded"):
        acc.calibrate(300, 310, 1.0, 0.5)


def test_locality_record_changes_only_nearby_positions():
    M = QuiltModel([C1], "stat")
    acc = QuiltAccountant(M)
    acc.record(0, 999, 0.03)
    R = acc.radius
    before = acc.eps_profile(0, 2000)
    acc.record(1500, 1510, 0.2)
    after = acc.eps_profile(0, 2000)
    changed = np.flatnonzero(after != before)
    assert changed.min() >= 1500 - R and changed.max() <= 1510 + R


def test_bad_input():
    M = QuiltModel([C1], "stat")
    acc = QuiltAccountant(M, chain_start=10)
    for lo, hi in [(5, 20), (20, 19), (-1, 3), (1.5, 3), (True, 12)]:
        with pytest.raises(ValueError):
            acc.record(lo, hi, 0.1)
    for load in (-0.1, math.nan, math.inf, "x"):
        with pytest.raises(ValueError, match="load"):
            acc.record(10, 12, load)
    with pytest.raises(ValueError, match="before the chain start"):
        acc.eps_at(3)
    with pytest.raises(ValueError, match="radius"):
        QuiltAccountant(M, radius=0)
    with pytest.raises(ValueError, match="mode 'q'"):
        QuiltAccountant(QuiltModel([C1], "q"))
    assert acc.record(10, 12, 0.0) == acc.floor and acc.segments() == []
    periodic = QuiltModel([MarkovChain([[0.0, 1.0], [1.0, 0.0]], [0.5, 0.5])], "stat")
    with pytest.raises(Exception, match="explicit radius"):
        QuiltAccountant(periodic)
    capped = QuiltAccountant(periodic, radius=5)
    assert capped.floor == math.inf and capped.eps_max() == math.inf
