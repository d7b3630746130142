"""Stream plans by signed distance (streamguard.redaction.plan.plan_stream; notes/000 §9.3)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from _reference import influences_float
from streamguard import MarkovChain
from streamguard.audit import brute_force_leakage, exact_leakage
from streamguard.privacy.channel import ChannelSequence
from streamguard.influence import binary_closed_form
from streamguard.redaction.plan import plan_stream


@st.composite
def stream_cases(draw, designs=("paper", "optimal", "exact")):
    design = draw(st.sampled_from(designs))
    if design == "exact":
        # The exact design costs O(K²) exact audits for K records in M, and K grows like
        # 1/log(1/|λ|): keep |λ| ≤ 0.7 and skip the optimized split/threshold (seconds to minutes).
        alpha = draw(st.floats(0.15, 0.85))
        beta = draw(st.floats(0.15, 0.85))
        eps = draw(st.floats(0.3, 6.0))
        split = draw(st.one_of(st.just("even"), st.floats(0.05 * eps, 0.95 * eps)))
        threshold = draw(st.one_of(st.none(), st.floats(0.1, 1.0)))
    else:
        alpha = draw(st.floats(0.02, 0.98))
        beta = draw(st.floats(0.02, 0.98))
        eps = draw(st.floats(0.05, 6.0))
        split = draw(st.one_of(st.just("even"), st.just("optimize"), st.floats(0.05 * eps, 0.95 * eps)))
        threshold = draw(st.one_of(st.none(), st.just("optimize"), st.floats(0.1, 1.0)))
    return MarkovChain.binary(alpha, beta), eps, design, split, threshold


@given(stream_cases())
def test_stream_plan_is_private_and_placement_matches_the_stream_value(case):
    chain, eps, design, split, threshold = case
    sp = plan_stream(chain, eps, design=design, split=split, threshold=threshold)
    lk = sp.leakage()
    assert lk.total <= eps + 1e-9
    assert sp.left.budget + sp.right.budget <= eps
    assert lk.left <= sp.left.budget + 1e-9 and lk.right <= sp.right.budget + 1e-9
    table = sp.table()
    H_l, H_r = sp.left_horizon, sp.right_horizon
    assert table.shape == (H_l + H_r + 1, 2)
    assert table[H_l].tolist() == [1.0, 1.0]
    np.testing.assert_array_equal(sp.offsets(), np.arange(-H_l, H_r + 1))
    # far from both ends of a long finite chain the placed table leaks exactly the stream value
    n = H_l + H_r + 41
    p = H_l + 20
    placed = sp.apply(n, [p])
    assert placed.leakage[p].total == pytest.approx(lk.total, abs=1e-12)
    np.testing.assert_array_equal(placed.red[p - H_l : p + H_r + 1], table)
    assert np.all(placed.red[: p - H_l] == 0) and np.all(placed.red[p + H_r + 1 :] == 0)
    # near the start the left side is truncated: still private
    n_short = H_l + H_r + 10
    for q in range(0, min(H_l, 30) + 1):
        assert sp.apply(n_short, [q]).leakage[q].total <= eps + 1e-9
    # and near the end the right side is truncated: still private
    for q in range(max(0, n_short - 1 - min(H_r, 30)), n_short):
        assert sp.apply(n_short, [q]).leakage[q].total <= eps + 1e-9


@given(stream_cases())
def test_stream_leakage_by_brute_force_when_the_window_is_small(case):
    chain, eps, design, split, threshold = case
    sp = plan_stream(chain, eps, design=design, split=split, threshold=threshold)
    H_l, H_r = sp.left_horizon, sp.right_horizon
    if H_l + H_r + 3 > 8:
        return
    # one released record past each horizon ends each side (Markov): the window is exact
    window = np.vstack([np.zeros((1, 2)), sp.table(), np.zeros((1, 2))])
    brute = brute_force_leakage(chain, ChannelSequence.from_redaction(window), H_l + 1)
    assert brute == pytest.approx(sp.leakage().total, abs=1e-9)
    # and more released records beyond do not change it
    wider = np.vstack([np.zeros((2, 2)), sp.table(), np.zeros((2, 2))])
    assert exact_leakage(chain, ChannelSequence.from_redaction(wider), H_l + 2).total == pytest.approx(
        sp.leakage().total, abs=1e-12
    )


@given(stream_cases(designs=("paper", "optimal")))
def test_stream_horizons_are_delta_star_minus_one(case):
    chain, eps, design, split, _ = case
    sp = plan_stream(chain, eps, design=design, split=split, threshold=None)
    ref = influences_float(chain.matrix, 600)  # Def. 3 by float matrix powers
    hat = ref.max(axis=1)
    for side in (sp.left, sp.right):
        e = side.budget
        ds = int(np.argmax(hat <= e)) + 1  # Δ*(ε_side) by a linear scan
        assert hat[ds - 1] <= e
        if np.any(np.abs(ref[:ds] - e) <= 1e-9 * e):
            continue  # a budget on a breakpoint up to round-off: either side of the tie is fine
        assert side.horizon == ds - 1
        regions = side.region_string()
        assert re.fullmatch(r"L*M*S", regions), regions
        assert len(regions) == ds  # first S at distance Δ*(ε_side)
        for d, r in enumerate(regions, start=1):
            lo, hi = ref[d - 1].min(), ref[d - 1].max()
            assert r == ("L" if e < lo else "M" if e < hi else "S")


def test_fig3_stream_at_eps_1():
    """ε = 1 split evenly: each side has budget 0.5, regions M M S, the Fig. 3 ε = 0.5 design."""
    chain = MarkovChain.binary(0.01, 0.8)
    sp = plan_stream(chain, 1.0, design="paper")
    assert sp.left.budget == sp.right.budget == 0.5
    assert sp.left.region_string() == sp.right.region_string() == "MMS"
    assert sp.left_horizon == sp.right_horizon == 2  # Δ*(0.5) − 1
    # δ_1 = ǐ(2), δ_2 = î(3) (t+ = 3 ∈ S): q = max(e^{−(0.5−ǐ(2))}, e^{−(0.5−î(3))/2}) = 0.972540
    infl = binary_closed_form(0.01, 0.8, [2, 3])
    q = max(math.exp(-(0.5 - infl[0, 0])), math.exp(-(0.5 - infl[1, 1]) / 2))
    assert q == pytest.approx(0.972540, abs=1e-6)
    np.testing.assert_allclose(sp.table()[:, 0], [q, q, 1.0, q, q], rtol=1e-12)
    np.testing.assert_array_equal(sp.table()[:, 1], 1.0)
    lk = sp.leakage()
    # notes/000 §6: exact leakage of this one-sided design is 0.466004; the sides add
    assert lk.left == pytest.approx(0.466004, abs=1e-6)
    assert lk.right == pytest.approx(0.466004, abs=1e-6)
    assert lk.total == pytest.approx(lk.left + lk.right, abs=1e-12)


def test_stream_sides_are_reversible_mirrors():
    chain = MarkovChain.binary(0.2, 0.5)
    sp = plan_stream(chain, 0.8, design="optimal")
    np.testing.assert_array_equal(sp.left.red, sp.right.red)
    np.testing.assert_array_equal(sp.table(), sp.table()[::-1])


def test_stream_multiple_private_indices_combine():
    chain = MarkovChain.binary(0.01, 0.8)
    sp = plan_stream(chain, 1.0, design="exact")
    plan = sp.apply(30, [10, 12, 25])
    for p in (10, 12, 25):
        assert plan.leakage[p].total <= 1.0 + 1e-9
        single = sp.apply(30, [p])
        assert plan.leakage[p].total <= single.leakage[p].total + 1e-12


def test_stream_plan_errors():
    chain = MarkovChain.binary(0.2, 0.5)
    with pytest.raises(ValueError, match="side budget of 0"):
        plan_stream(chain, 1.0, split=0.0)
    with pytest.raises(ValueError, match="side budget of 0"):
        plan_stream(chain, 1.0, split=1.0)
    with pytest.raises(ValueError, match="stationary binary"):
        plan_stream(MarkovChain.binary(0.2, 0.5, initial=[1.0, 0.0]), 1.0)
    with pytest.raises(ValueError, match="epsilon"):
        plan_stream(chain, -1.0)
    # split="optimize" never picks a zero budget for an unbounded side
    sp = plan_stream(chain, 1.0, split="optimize")
    assert sp.left.budget > 0 and sp.right.budget > 0
