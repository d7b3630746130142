"""Fail-closed refusals where a valid answer is cheap (robustness, not privacy): found by review."""

from __future__ import annotations

import pytest

from streamguard import MarkovChain
from streamguard.quilt import QuiltModel, sigma_max, sigma_max_naive
from streamguard.quilt.accountant import QuiltAccountant

SLOW = [[1 - 1e-9, 1e-9], [1e-9, 1 - 1e-9]]  # ergodic, but mixes over ~1e9 steps


@pytest.mark.parametrize("mode", ["supq", "q"])
def test_sigma_max_of_a_short_chain_does_not_need_the_long_chain_bound(mode):
    # Algorithm 1 on T = 5 is trivial (naive gives 5 = T/ε); the fast path refuses with ModelError
    # because its optional σ̄_supq pruning bound grows tables towards distance 2^24.
    chain = MarkovChain(SLOW, [0.5, 0.5])
    model = QuiltModel(chain, mode)
    assert sigma_max(model, 1.0, 5).sigma == pytest.approx(sigma_max_naive(model, 1.0, 5).sigma)


def test_calibrated_scale_is_admitted_by_the_same_accountant():
    # calibrate() returns β = L/x for a feasible load x, but L/β rounds above x by an ulp, so the
    # filter refuses the very release it calibrated (ε over budget by 2.2e−16).
    acc = QuiltAccountant(QuiltModel(MarkovChain([[0.9, 0.1], [0.2, 0.8]]), "stat"))
    beta = acc.calibrate(0, 0, 1.0, 1.5)
    assert not acc.would_exceed(0, 0, 1.0 / beta, 1.5)
