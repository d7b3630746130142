"""Data-independent baselines: MQ (Algorithm 1), Theorem 2, best window (notes/000 §4.7, §4.8, §7.5)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from _reference import delta_star_scan, hat_i, mq_mode_one_sided
from streamguard import MarkovChain
from streamguard.audit import exact_leakage
from streamguard.privacy.channel import ChannelSequence
from streamguard.redaction.baselines import (
    baseline_plan,
    best_window_plan,
    best_window_radius,
    mq_plan,
    mq_radius,
    theorem2_bound,
    window_leakage,
)

A, B = 0.01, 0.8


def _window_red(n: int, p: int, dl: int, dr: int) -> np.ndarray:
    red = np.zeros((n, 2))
    red[max(0, p - dl) : min(n, p + dr + 1)] = 1.0
    return red


# ---------------------------------------------------------------------------------------------
# MQ printed vs tight (notes/000 §4.7, Fig. 4)
# ---------------------------------------------------------------------------------------------


def test_mq_printed_vs_tight_at_eps_1(fig3_chain):
    printed = mq_plan(fig3_chain, 10, [0], 1.0)
    tight = mq_plan(fig3_chain, 10, [0], 1.0, tight=True)
    np.testing.assert_array_equal(printed.red[:, 0], [1, 1, 1, 1, 0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(tight.red[:, 0], [1, 1, 1, 0, 0, 0, 0, 0, 0, 0])
    assert printed.utility == pytest.approx(0.6, abs=1e-12)
    assert tight.utility == pytest.approx(0.7, abs=1e-12)
    assert printed.leakage[0].total == pytest.approx(hat_i(A, B, 4), rel=1e-12)
    assert tight.leakage[0].total == pytest.approx(hat_i(A, B, 3), rel=1e-12)
    assert printed.leakage[0].total == pytest.approx(0.1004766, abs=1e-7)
    assert tight.leakage[0].total == pytest.approx(0.4443114, abs=1e-7)


# ε values at least 1e-3 relative away from all the î(Δ), î(Δ)+î(Δ') and 2·î(Δ) breakpoints used
EPS_GRID = [0.07, 0.15, 0.3, 0.6, 1.0, 1.7, 2.2, 3.5, 5.0]


def _far_from_breakpoints(eps: float, alpha: float, beta: float, n: int) -> bool:
    vals = [hat_i(alpha, beta, d) for d in range(1, n + 1)]
    bps = set(vals) | {x + y for x in vals for y in vals}
    return all(abs(eps - b) > 1e-6 * max(b, 1e-3) for b in bps) and all(
        abs(eps / 2 - b) > 1e-6 * max(b, 1e-3) for b in bps
    )


@pytest.mark.parametrize("n", [6, 9, 12, 16])
@pytest.mark.parametrize("eps", EPS_GRID)
def test_mq_radius_follows_algorithm_1(fig3_chain, n, eps):
    assert _far_from_breakpoints(eps, A, B, n + 1)
    de, dh = delta_star_scan(A, B, eps), delta_star_scan(A, B, eps / 2)
    for p in range(n):
        one_sided, reflected = mq_mode_one_sided(A, B, n, p, eps)
        p1 = (n - 1 - p if reflected else p) + 1
        for tight in (False, True):
            cut = 1 if tight else 0
            if one_sided:
                dl, dr = p1 - 1, min(de - cut, n - p1)
            else:
                dl, dr = min(dh - cut, p1 - 1), min(dh - cut, n - p1)
            if reflected:
                dl, dr = dr, dl
            assert mq_radius(fig3_chain, n, p, eps, tight=tight) == (dl, dr)
            plan = mq_plan(fig3_chain, n, [p], eps, tight=tight)
            assert plan.utility == pytest.approx(1 - (dl + dr + 1) / n, abs=1e-12)
            assert plan.leakage[p].total <= eps


@given(
    alpha=st.floats(0.02, 0.98),
    beta=st.floats(0.02, 0.98),
    n=st.integers(2, 14),
    data=st.data(),
    eps=st.floats(0.02, 6.0),
)
def test_mq_privacy_and_lower_bound(alpha, beta, n, data, eps):
    """Algorithm 1 never leaks more than ε and never falls below its lower bound (notes §4.7)."""
    chain = MarkovChain.binary(alpha, beta)
    p = data.draw(st.integers(0, n - 1))
    assume(_far_from_breakpoints(eps, alpha, beta, n + 1))
    plan = mq_plan(chain, n, [p], eps)
    assert plan.leakage[p].total <= eps + 1e-12
    assert exact_leakage(chain, plan.channels(), p).total <= eps + 1e-12
    tight = mq_plan(chain, n, [p], eps, tight=True)
    assert tight.leakage[p].total <= eps + 1e-12
    assert tight.utility >= plan.utility - 1e-12
    # lower bound of notes/000 §4.7 in the paper's 1-based, p ≤ n/2 coordinates
    q = n - 1 - p if p + 1 > n / 2 else p
    p1 = q + 1
    R1 = delta_star_scan(alpha, beta, eps) + p1 - 1
    R2 = 2 * delta_star_scan(alpha, beta, eps / 2) - 1
    i_n = hat_i(alpha, beta, n - p1)
    i_1 = hat_i(alpha, beta, p1 - 1) if p1 > 1 else float("inf")
    if eps < i_n:
        bound = 0.0
    elif eps >= i_1 + i_n:
        bound = 1 - min(R1, R2) / n - 2 / n
    else:
        bound = 1 - R1 / n - 1 / n
    assert plan.utility >= bound - 1e-12


# ---------------------------------------------------------------------------------------------
# Theorem 2
# ---------------------------------------------------------------------------------------------


def _theorem2_reference(alpha, beta, n, p, eps, corrected):
    """notes/000 §4.8 pseudo-code (1-based p₁ ≤ n/2, by reflection)."""
    q = n - 1 - p if p + 1 > n / 2 else p
    p1 = q + 1
    i_n = hat_i(alpha, beta, n - p1)
    i_1 = hat_i(alpha, beta, p1 - 1) if p1 > 1 else float("inf")
    if eps < i_n:
        return 0.0
    R1 = delta_star_scan(alpha, beta, eps) + p1 - 1
    if eps >= i_1 + i_n:
        R2 = min(R1, 2 * delta_star_scan(alpha, beta, eps / 2) - (2 if corrected else 1))
        return 1 - R2 / n
    return 1 - R1 / n


@pytest.mark.parametrize("n", [5, 10, 13])
@pytest.mark.parametrize("eps", EPS_GRID)
def test_theorem2_bound_matches_the_notes_pseudocode(fig3_chain, n, eps):
    for p in range(n):
        for corrected in (False, True):
            assert theorem2_bound(fig3_chain, n, p, eps, corrected=corrected) == pytest.approx(
                _theorem2_reference(A, B, n, p, eps, corrected), abs=1e-12
            )


def test_theorem2_counterexample(fig3_chain):
    """notes/000 §7.5: n = 10, p = 5 (index 4), ε = î(2) + î(3) (+1e-9)."""
    n, p = 10, 4
    eps = hat_i(A, B, 2) + hat_i(A, B, 3) + 1e-9
    assert eps == pytest.approx(1.8389740, abs=1e-7)
    best = best_window_plan(fig3_chain, n, [p], eps)
    assert best.utility == pytest.approx(0.6, abs=1e-12)
    assert best.leakage[p].total <= eps
    assert theorem2_bound(fig3_chain, n, p, eps, corrected=False) == pytest.approx(0.5, abs=1e-12)
    assert best.utility > theorem2_bound(fig3_chain, n, p, eps, corrected=False)
    assert theorem2_bound(fig3_chain, n, p, eps, corrected=True) >= 0.6 - 1e-12
    # the window of the notes: redact 1-based {4,5,6,7}, ρ = (1, 2); leakage î(2) + î(3)
    red = _window_red(n, p, 1, 2)
    lk = exact_leakage(fig3_chain, ChannelSequence.from_redaction(red), p).total
    assert lk == pytest.approx(hat_i(A, B, 2) + hat_i(A, B, 3), rel=1e-12)
    assert 1 - red[:, 0].sum() / n == pytest.approx(0.6)


# ---------------------------------------------------------------------------------------------
# Best window = exact optimum over windows (searched independently here)
# ---------------------------------------------------------------------------------------------


def _best_window_by_search(chain, n, p, eps):
    """Largest utility over all windows [p−dl, p+dr] with exact leakage ≤ ε (exhaustive)."""
    best = -1.0
    for dl in range(p + 1):
        for dr in range(n - p):
            red = _window_red(n, p, dl, dr)
            lk = exact_leakage(chain, ChannelSequence.from_redaction(red), p).total
            if lk <= eps:
                best = max(best, 1 - (dl + dr + 1) / n)
    return best


@given(
    alpha=st.floats(0.02, 0.98),
    beta=st.floats(0.02, 0.98),
    n=st.integers(1, 11),
    data=st.data(),
    eps=st.floats(0.02, 6.0),
)
def test_best_window_is_the_exhaustive_optimum(alpha, beta, n, data, eps):
    chain = MarkovChain.binary(alpha, beta)
    p = data.draw(st.integers(0, n - 1))
    dl, dr = best_window_radius(chain, n, p, eps)
    lk = window_leakage(chain, n, p, dl, dr)
    assume(abs(lk - eps) > 1e-9)  # exhaustive search and the library may round differently at ties
    plan = best_window_plan(chain, n, [p], eps)
    assert plan.leakage[p].total <= eps + 1e-12
    assert plan.utility == pytest.approx(_best_window_by_search(chain, n, p, eps), abs=1e-12)


@pytest.mark.parametrize("eps", EPS_GRID)
def test_best_window_attains_theorem2_for_p1(fig3_chain, eps):
    # Theorem 2 is tight for p = 1, and the tight MQ attains it (notes/000 §4.7)
    bound = theorem2_bound(fig3_chain, 10, 0, eps)
    assert best_window_plan(fig3_chain, 10, [0], eps).utility == pytest.approx(bound, abs=1e-12)
    assert mq_plan(fig3_chain, 10, [0], eps, tight=True).utility == pytest.approx(bound, abs=1e-12)


def test_baseline_dispatch(fig3_chain):
    for name, fn in (("mq", lambda: mq_plan(fig3_chain, 10, [3], 1.0)),
                     ("mq-tight", lambda: mq_plan(fig3_chain, 10, [3], 1.0, tight=True)),
                     ("best-window", lambda: best_window_plan(fig3_chain, 10, [3], 1.0))):
        np.testing.assert_array_equal(baseline_plan(name, fig3_chain, 10, [3], 1.0).red, fn().red)
    with pytest.raises(ValueError, match="unknown baseline"):
        baseline_plan("quilt", fig3_chain, 10, [3], 1.0)


def test_baselines_need_a_stationary_binary_chain():
    chain = MarkovChain.binary(0.1, 0.2, initial=[1.0, 0.0])
    with pytest.raises(ValueError, match="stationary binary"):
        mq_plan(chain, 10, [2], 1.0)
    with pytest.raises(ValueError, match="stationary binary"):
        theorem2_bound(chain, 10, 2, 1.0)
