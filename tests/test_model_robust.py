"""Robust 3R plans over a model set (issue 11): the certified bound against the exact audit (random
members, dense grids, brute force) and robust plans audited exactly under members of the set."""

from __future__ import annotations

import numpy as np
import pytest

from streamguard.audit import brute_force_leakage, exact_leakage
from streamguard.model.chain import MarkovChain, ModelError
from streamguard.privacy.channel import ChannelSequence
from streamguard.model.modelset import ModelSet
from streamguard.model.robust import (chain_windows, robust_redaction_plan, robust_stream_plan, stream_windows,
                                      worst_leakage)
from streamguard.redaction.plan import plan_redaction, plan_stream


def _box(rng: np.random.Generator) -> tuple[tuple[float, float], tuple[float, float]]:
    lo = rng.uniform(0.005, 0.8, 2)
    hi = np.minimum(lo * rng.uniform(1.05, 3.0, 2), 0.99)
    return (float(lo[0]), float(hi[0])), (float(lo[1]), float(hi[1]))


def _members(rng, box, count):
    (a0, a1), (b0, b1) = box
    return [MarkovChain.binary(rng.uniform(a0, a1), rng.uniform(b0, b1)) for _ in range(count)]


def _stream_exact(chain: MarkovChain, plan) -> float:
    window = np.vstack([np.zeros((1, 2)), plan.table(), np.zeros((1, 2))])
    return exact_leakage(chain, ChannelSequence.from_redaction(window), plan.left_horizon + 1).total


def test_certified_bound_covers_random_members_and_a_dense_grid():
    rng = np.random.default_rng(7)
    for _ in range(25):
        box = _box(rng)
        n, p = int(rng.integers(3, 14)), None
        p = int(rng.integers(0, n))
        red = rng.uniform(0, 1, (n, 2)) * (rng.random((n, 2)) < 0.8)
        red[p] = 1.0
        seq = ChannelSequence.from_redaction(red)
        ms = ModelSet("box", 2, box=box)
        wc = worst_leakage(ms, [(red[p - 1 :: -1] if p else red[:0], red[p + 1 :])])
        (a0, a1), (b0, b1) = box
        grid = [MarkovChain.binary(a, b) for a in np.linspace(a0, a1, 9) for b in np.linspace(b0, b1, 9)]
        exact = [exact_leakage(c, seq, p).total for c in grid + _members(rng, box, 40)]
        assert wc.bound >= max(exact) - 1e-12
        assert wc.attained <= wc.bound and wc.attained >= max(exact) - 1e-3 * max(exact) - 1e-12
        a, b = wc.member
        assert exact_leakage(MarkovChain.binary(a, b), seq, p).total == pytest.approx(wc.attained, rel=1e-9, abs=1e-12)


def test_certified_bound_is_at_least_brute_force_on_small_chains():
    rng = np.random.default_rng(8)
    for _ in range(12):
        box = _box(rng)
        n = int(rng.integers(3, 7))
        p = int(rng.integers(0, n))
        red = rng.uniform(0, 1, (n, 2)) * (rng.random((n, 2)) < 0.8)
        red[p] = 1.0
        wc = worst_leakage(ModelSet("box", 2, box=box), [(red[p - 1 :: -1] if p else red[:0], red[p + 1 :])])
        seq = ChannelSequence.from_redaction(red)
        for c in _members(rng, box, 4):
            assert brute_force_leakage(c, seq, p) <= wc.bound + 1e-9


def test_finite_set_worst_case_is_the_worst_member_exactly():
    members = (MarkovChain.binary(0.01, 0.05), MarkovChain.binary(0.02, 0.02), MarkovChain.binary(0.3, 0.6))
    ms = ModelSet("finite", 2, members=members)
    plan = plan_stream(members[1], 1.0)
    wc = worst_leakage(ms, stream_windows(plan))
    exact = [_stream_exact(m, plan) for m in members]
    assert wc.bound == pytest.approx(max(exact), rel=1e-12) and wc.bound == wc.attained
    assert wc.member == (members[int(np.argmax(exact))].alpha, members[int(np.argmax(exact))].beta)


@pytest.mark.parametrize("box,eps", [(((0.006, 0.014), (0.012, 0.026)), 1.0), (((0.03, 0.06), (0.2, 0.35)), 0.5),
                                     (((0.3, 0.5), (0.4, 0.8)), 1.0)])
def test_robust_stream_plan_meets_epsilon_at_members_and_costs_more_than_the_point_plan(box, eps):
    (a0, a1), (b0, b1) = box
    point = MarkovChain.binary((a0 + a1) / 2, (b0 + b1) / 2)
    ms = ModelSet("box", 2, box=box, point=point)
    rp = robust_stream_plan(ms, eps)
    assert rp.worst.bound <= eps
    rng = np.random.default_rng(9)
    corners = ms.corners()
    for c in corners + _members(rng, box, 30):
        assert _stream_exact(c, rp.plan) <= eps * (1 + 1e-9)
    assert rp.point_expected_redacted is not None and rp.expected_redacted >= rp.point_expected_redacted - 1e-9
    # the point-estimate plan is exactly ε-tight at the point, so some member beats it unless the
    # set is a point: its worst case over the set is what the robust plan pays for
    assert max(_stream_exact(c, rp.point_plan) for c in corners) >= rp.point_worst.attained - 1e-9


def test_robust_chain_plan_meets_epsilon_at_members():
    box = ((0.01, 0.03), (0.05, 0.12))
    ms = ModelSet("box", 2, box=box, point=MarkovChain.binary(0.02, 0.08))
    rp = robust_redaction_plan(ms, 60, [10, 40], 0.8)
    assert rp.worst.bound <= 0.8 and rp.utility <= rp.point_utility + 1e-12
    seq = rp.plan.channels()
    for c in _members(np.random.default_rng(3), box, 20):
        for p in (10, 40):
            assert exact_leakage(c, seq, p).total <= 0.8 * (1 + 1e-9)
    assert worst_leakage(ms, chain_windows(plan_redaction(ms.point, 60, [10, 40], 0.8).red, [10, 40])).bound > 0.8


def test_a_set_holding_a_chain_that_never_moves_has_no_stream_plan():
    ms = ModelSet("box", 2, box=((0.0, 0.05), (0.01, 0.1)))
    with pytest.raises(ModelError, match="no 3R stream plan"):
        robust_stream_plan(ms, 1.0)
    full = robust_redaction_plan(ms, 12, [5], 1.0)  # a finite chain: redacting more always works
    assert full.worst.bound <= 1.0
