"""3R designs against the reference numbers of notes/000 (§6 Fig. 3/4 grid, Example 1, §7.8).

Setting of Fig. 3: p = 1 (index 0), n = 10, α = .01, β = .8, the whole budget on the right side.
Every ε used here is at least 1e-3 relative away from the breakpoints î(4), ǐ(1), î(3), î(2), î(1).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from _reference import hat_i, influences_exact
from streamguard import MarkovChain
from streamguard.audit import brute_force_leakage, exact_leakage
from streamguard.privacy.channel import ChannelSequence
from streamguard.influence import binary_closed_form, pointwise_right
from streamguard.redaction.design import (
    common_q_exact,
    design_side,
    q_optimal,
    q_paper,
    relaxation_slacks,
)
from streamguard.redaction.plan import plan_redaction
from streamguard.redaction.regions import M, classify, side_redaction

N = 10
PI0 = 0.8 / 0.81  # stationary Pr(X = 0) of the Fig. 3 chain

# notes/000 §6 Fig. 3 table: ε → (regions, relax q, relax ν, num q*, num ν, digits)
# (digits: 6 for the fully printed rows, 4 for the rows printed to 4 decimals)
FIG3 = {
    0.10: ("LLMMMSSSSS", 0.973641, 0.507810, 0.607661, 0.616248, 6),
    0.12: ("LLMMSSSSSS", 0.9903, 0.6019, 0.9138, 0.6170, 4),
    0.15: ("LLMMSSSSSS", 0.975542, 0.604831, 0.809304, 0.637668, 6),
    0.20: ("LLMMSSSSSS", 0.951456, 0.609589, 0.681989, 0.662817, 6),
    0.25: ("LMMMSSSSSS", 0.9514, 0.6144, 0.7712, 0.6678, 4),
    0.30: ("LMMMSSSSSS", 0.935656, 0.619065, 0.719734, 0.683042, 6),
    0.40: ("LMMMSSSSSS", 0.904981, 0.628154, 0.636950, 0.707570, 6),
    0.50: ("LMMSSSSSSS", 0.972540, 0.705424, 0.932052, 0.713422, 6),
    0.70: ("LMMSSSSSSS", 0.879990, 0.723706, 0.741185, 0.751124, 6),
    1.00: ("LMMSSSSSSS", 0.757415, 0.747918, 0.546926, 0.789496, 6),
    1.20: ("LMMSSSSSSS", 0.6853, 0.7622, 0.4519, 0.8083, 4),
    1.50: ("LMSSSSSSSS", 0.900021, 0.809874, 0.853388, 0.814480, 6),
    2.00: ("LMSSSSSSSS", 0.545890, 0.844850, 0.387126, 0.860531, 6),
    2.50: ("LMSSSSSSSS", 0.3311, 0.8661, 0.1388, 0.8851, 4),
    2.90: ("LMSSSSSSSS", 0.2219, 0.8768, 0.0212, 0.8967, 4),
    3.00: ("LSSSSSSSSS", None, 0.9, None, 0.9, 6),
    5.00: ("LSSSSSSSSS", None, 0.9, None, 0.9, 6),
    10.0: ("LSSSSSSSSS", None, 0.9, None, 0.9, 6),
}
# DIM-UB (Theorem 2) and MQ (Algorithm 1 as printed) columns: staircases in Δ*(ε)
DIM_UB = {0.10: 0.5, 0.12: 0.6, 0.15: 0.6, 0.20: 0.6, 0.25: 0.6, 0.30: 0.6, 0.40: 0.6, 0.50: 0.7, 0.70: 0.7,
          1.00: 0.7, 1.20: 0.7, 1.50: 0.8, 2.00: 0.8, 2.50: 0.8, 2.90: 0.8, 3.00: 0.9, 5.00: 0.9, 10.0: 0.9}
# notes/000 §6: exact leakage of the relaxation designs
RELAX_LEAKAGE = {0.1: 0.037219, 0.15: 0.105617, 0.2: 0.110977, 0.3: 0.213093, 0.4: 0.213093, 0.5: 0.466004,
                 0.7: 0.547575, 1.0: 0.679971, 1.5: 1.464699, 2.0: 1.790436, 3.0: 2.995732, 5.0: 2.995732}


def _tol(digits: int) -> float:
    return 0.6 * 10.0 ** (-digits)


def _fig3_plan(chain, eps, design, **kw):
    return plan_redaction(chain, N, [0], eps, design=design, **kw)


def _m_region_q(plan) -> np.ndarray:
    return plan.red[plan.regions == M, 0]


def _right_side_oracle(chain):
    """Exact leakage about index 0 of a right-side table (distances 1..D), with Y_0 = ⊥."""

    def leak(red_side: np.ndarray) -> float:
        red = np.vstack([np.ones((1, 2)), red_side])
        return exact_leakage(chain, ChannelSequence.from_redaction(red), 0).total

    return leak


def test_breakpoints_are_far_from_the_grid():
    bps = [hat_i(0.01, 0.8, 4), binary_closed_form(0.01, 0.8, [1])[0, 0], hat_i(0.01, 0.8, 3),
           hat_i(0.01, 0.8, 2), hat_i(0.01, 0.8, 1)]
    for eps in FIG3:
        assert min(abs(eps - b) / b for b in bps) > 1e-3


# ---------------------------------------------------------------------------------------------
# Fig. 3 grid
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("eps", sorted(FIG3))
@pytest.mark.parametrize("design", ["paper", "optimal"])
def test_fig3_relaxation_q_and_utility(fig3_chain, eps, design):
    regions, q_ref, nu_ref, _, _, digits = FIG3[eps]
    plan = _fig3_plan(fig3_chain, eps, design)
    assert "".join(plan.region_names()) == regions
    q = _m_region_q(plan)
    if q_ref is None:
        assert q.size == 0
    else:
        # the paper's design is one common q; for Fig. 3 the convex optimum coincides (notes §4.2)
        np.testing.assert_allclose(q, q_ref, atol=_tol(digits))
        assert np.ptp(q) == pytest.approx(0.0, abs=1e-12)
        assert np.all(plan.red[plan.regions == M, 1] == 1.0)  # the rare value is always redacted
    assert plan.utility == pytest.approx(nu_ref, abs=_tol(digits))
    # Eq. 3 computed in the test: ν = (|S| + π0 Σ_M (1 − q)) / n
    n_s = regions.count("S")
    assert plan.utility == pytest.approx((n_s + PI0 * float(np.sum(1 - q))) / N, abs=1e-12)


@pytest.mark.parametrize("eps", sorted(RELAX_LEAKAGE))
def test_fig3_exact_leakage_of_relaxation_designs(fig3_chain, eps):
    plan = _fig3_plan(fig3_chain, eps, "paper")
    assert plan.leakage[0].total == pytest.approx(RELAX_LEAKAGE[eps], abs=6e-7)
    assert plan.leakage[0].total <= eps


@pytest.mark.parametrize("eps", sorted(FIG3))
def test_fig3_dim_upper_bound(fig3_chain, eps):
    from streamguard.redaction.baselines import theorem2_bound

    assert theorem2_bound(fig3_chain, N, 0, eps) == pytest.approx(DIM_UB[eps], abs=1e-12)
    # p = 1: the printed and corrected bounds coincide
    assert theorem2_bound(fig3_chain, N, 0, eps, corrected=False) == pytest.approx(DIM_UB[eps], abs=1e-12)


@pytest.mark.parametrize("eps", sorted(FIG3))
def test_fig3_mq_printed_utility(fig3_chain, eps):
    from streamguard.redaction.baselines import mq_plan

    plan = mq_plan(fig3_chain, N, [0], eps)
    assert plan.utility == pytest.approx(DIM_UB[eps] - 0.1, abs=1e-12)  # one record too many
    assert plan.leakage[0].total <= eps


@pytest.mark.parametrize("eps", [e for e in sorted(FIG3) if FIG3[e][3] is not None])
def test_fig3_numerical_common_q(fig3_chain, eps):
    regions_ref, _, _, q_ref, nu_ref, digits = FIG3[eps]
    infl = pointwise_right(fig3_chain, N - 1)
    regions, common = classify(infl, eps)
    assert "L" + "".join("SML"[r] for r in regions) == regions_ref
    oracle = _right_side_oracle(fig3_chain)
    q = common_q_exact(regions, common, eps, oracle)
    assert q == pytest.approx(q_ref, abs=max(1e-5, _tol(digits)))
    # the common q* is (up to bisection) the smallest feasible one
    q_full = np.where(regions == M, q, 0.0)
    assert oracle(side_redaction(regions, common, q_full)) <= eps
    q_full = np.where(regions == M, q - 1e-6, 0.0)
    assert oracle(side_redaction(regions, common, q_full)) > eps
    n_m = int(np.sum(regions == M))
    nu = (regions_ref.count("S") + PI0 * n_m * (1 - q)) / N
    assert nu == pytest.approx(nu_ref, abs=max(1e-5, _tol(digits)))


@pytest.mark.parametrize("eps", [0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0])
def test_fig3_exact_design_beats_common_q_and_is_private(fig3_chain, eps):
    _, _, _, _, nu_num, digits = FIG3[eps]
    plan = _fig3_plan(fig3_chain, eps, "exact")
    assert plan.utility >= nu_num - _tol(digits)
    assert plan.leakage[0].total <= eps
    assert plan.utility >= _fig3_plan(fig3_chain, eps, "optimal").utility - 1e-12


@pytest.mark.parametrize(("eps", "per_position"), [(1.0, 0.7924), (0.1, 0.6285)])
def test_exact_design_reaches_notes_per_position_values(fig3_chain, eps, per_position):
    # notes/000 §4.3: per-position q by coordinate bisection gives 0.7924 (ε=1) and 0.6285 (ε=0.1)
    plan = _fig3_plan(fig3_chain, eps, "exact")
    assert plan.utility >= per_position - 6e-5
    assert brute_force_leakage(fig3_chain, ChannelSequence.from_redaction(plan.red[:8]), 0) <= eps + 1e-12


def test_fig4_redaction_profiles(fig3_chain):
    # notes/000 §6 Fig. 4 (ε = 1): Pr(Y_t = ⊥ | X_t = 0) for t = 1..5
    relax = _fig3_plan(fig3_chain, 1.0, "paper").red[:5, 0]
    np.testing.assert_allclose(relax, [1, 0.7574, 0.7574, 0, 0], atol=6e-5)
    infl = pointwise_right(fig3_chain, N - 1)
    regions, common = classify(infl, 1.0)
    q = common_q_exact(regions, common, 1.0, _right_side_oracle(fig3_chain))
    assert q == pytest.approx(0.5469, abs=6e-5)


# ---------------------------------------------------------------------------------------------
# Worked designs (notes/000 §6)
# ---------------------------------------------------------------------------------------------


def test_worked_design_eps_1(fig3_chain):
    plan = _fig3_plan(fig3_chain, 1.0, "paper")
    assert "".join(plan.region_names()) == "LMMSSSSSSS"
    # δ_2 = ǐ(2) (t+ = 3 ∈ M), δ_3 = î(3) (t+ = 4 ∈ S); common q = max(e^{−b_1}, e^{−b_2/2})
    exact = influences_exact(Fraction(0.01), Fraction(0.8), 3)
    d2, d3 = exact[1, 0], exact[2, 1]
    assert d2 == pytest.approx(0.0372189, abs=1e-7) and d3 == pytest.approx(0.4443114, abs=1e-7)
    q_ref = max(math.exp(-(1 - d2)), math.exp(-(1 - d3) / 2))
    assert q_ref == pytest.approx(0.757415, abs=1e-6)
    np.testing.assert_allclose(_m_region_q(plan), q_ref, rtol=1e-12)
    assert plan.utility == pytest.approx((7 + PI0 * 2 * (1 - q_ref)) / 10, abs=1e-12)
    assert plan.utility == pytest.approx(0.747918, abs=1e-6)


def test_worked_design_slacks_eps_01(fig3_chain):
    infl = pointwise_right(fig3_chain, N - 1)
    regions, common = classify(infl, 0.1)
    m_pos, b = relaxation_slacks(infl, regions, common, 0.1)
    np.testing.assert_array_equal(m_pos, [1, 2, 3])  # distances 2, 3, 4
    np.testing.assert_allclose(0.1 - b, [0.0069684, 0.0013203, 0.0198628], atol=1e-7)
    per_k = np.exp(-b / np.arange(1, 4))
    np.testing.assert_allclose(per_k, [0.911165, 0.951858, 0.973641], atol=1e-6)
    np.testing.assert_allclose(q_paper(b), 0.973641, atol=1e-6)


def test_worked_design_eps_2(fig3_chain):
    plan = _fig3_plan(fig3_chain, 2.0, "paper")
    q = _m_region_q(plan)
    np.testing.assert_allclose(q, math.exp(-(2.0 - hat_i(0.01, 0.8, 2))), rtol=1e-12)
    assert q[0] == pytest.approx(0.545890, abs=1e-6)
    assert plan.utility == pytest.approx(0.844850, abs=1e-6)


# ---------------------------------------------------------------------------------------------
# Example 1 (n = 2, α = .25, β = .5, p = index 0, ε = 0.5)
# ---------------------------------------------------------------------------------------------


def test_example1_exact_design(ex1_chain):
    a, b, eps = 0.25, 0.5, 0.5
    q_star = (1 - b - a * math.exp(eps)) / ((1 - a) * math.exp(eps) - b)  # notes/000 §6
    assert q_star == pytest.approx(0.1192326, abs=1e-7)
    plan = plan_redaction(ex1_chain, 2, [0], eps, design="exact")
    assert plan.red[1, 1] == 1.0 and plan.red[0].tolist() == [1.0, 1.0]
    assert plan.red[1, 0] == pytest.approx(q_star, abs=1e-7)
    assert plan.red[1, 0] >= q_star - 1e-12  # never below the exact minimum
    assert plan.utility == pytest.approx(0.5 * (1 - q_star) * 2 / 3, abs=1e-7)
    assert plan.utility == pytest.approx(0.2935891, abs=1e-7)
    assert plan.leakage[0].total <= eps
    assert plan.leakage[0].total == pytest.approx(eps, abs=1e-9)


def test_example1_relaxation_design(ex1_chain):
    for design in ("paper", "optimal"):
        plan = plan_redaction(ex1_chain, 2, [0], 0.5, design=design)
        assert plan.red[1, 0] == pytest.approx(math.exp(-0.5), rel=1e-12)
        assert plan.utility == pytest.approx(0.1311564, abs=1e-7)
        # exact leakage of the relaxation design is that of the released 0: log 1.5
        assert plan.leakage[0].total == pytest.approx(math.log(1.5), abs=1e-12)


def test_example1_paper_q_one_eighth_utility(ex1_chain):
    # ν(q2 = 1/8) = ½ · 7/8 · 2/3 = 7/24
    from streamguard.redaction.plan import finalize

    red = np.array([[1.0, 1.0], [1 / 8, 1.0]])
    plan = finalize(ex1_chain, 2, (0,), 0.5, "manual", red, np.array([2, 1], np.int8), {})
    assert plan.utility == pytest.approx(7 / 24, abs=1e-15)
    assert plan.leakage[0].total == pytest.approx(math.log(18 / 11), abs=1e-14)


# ---------------------------------------------------------------------------------------------
# The convex optimum of the relaxation (notes/000 §4.2)
# ---------------------------------------------------------------------------------------------


def test_q_optimal_beats_common_q_on_a_non_single_segment_hull():
    # b = (1, 1.2, 3): b_K/K = 1 > b_2/2 = 0.6 → the hull has two segments:
    # U = (0.6, 1.2, 3) → u = (0.6, 0.6, 1.8); common q uses u = min b_k/k = 0.6 everywhere
    b = np.array([1.0, 1.2, 3.0])
    np.testing.assert_allclose(q_optimal(b), np.exp(-np.array([0.6, 0.6, 1.8])), rtol=1e-12)
    np.testing.assert_allclose(q_paper(b), np.exp(-0.6), rtol=1e-12)
    assert q_optimal(b).sum() < q_paper(b).sum()
    # both satisfy the relaxed constraints U_k ≤ b_k (up to the one-ulp upward rounding of q)
    for q in (q_optimal(b), q_paper(b)):
        assert np.all(np.cumsum(-np.log(q)) <= b + 1e-12)


def test_q_optimal_against_brute_force_grid():
    # min Σ q s.t. Σ_{j≤k} −log q_j ≤ b_k, checked on a fine grid for K = 2
    b = np.array([0.3, 1.5])
    grid = np.linspace(0.01, 1.0, 991)
    Q1, Q2 = np.meshgrid(grid, grid, indexing="ij")
    ok = (-np.log(Q1) <= b[0] + 1e-12) & (-np.log(Q1) - np.log(Q2) <= b[1] + 1e-12)
    best = (Q1 + Q2)[ok].min()
    assert q_optimal(b).sum() <= best + 1e-9
    assert q_optimal(b).sum() >= best - 2e-3


def test_design_side_rejects_unknown_design():
    infl = binary_closed_form(0.01, 0.8, np.arange(1, 5))
    regions, common = classify(infl, 1.0)
    with pytest.raises(ValueError, match="unknown design"):
        design_side(infl, regions, common, 1.0, "magic")
    with pytest.raises(ValueError, match="oracle"):
        design_side(infl, regions, common, 1.0, "exact")


# ---------------------------------------------------------------------------------------------
# Region threshold ε' ≤ ε (notes/000 §7.8)
# ---------------------------------------------------------------------------------------------

# ε → (ε' = ε column, best-over-ε' column), both for a common q with exact leakage
SEC78 = {0.1: (0.6162, 0.6230), 0.3: (0.6830, 0.6952), 0.45: (0.7014, 0.7241), 0.5: (0.7134, 0.7312),
         1.4: (0.8008, 0.8237), 1.5: (0.8145, 0.8304)}


@pytest.mark.parametrize("eps", sorted(SEC78))
def test_threshold_optimize_improves_exact_design(fig3_chain, eps):
    base = _fig3_plan(fig3_chain, eps, "exact")
    opt = _fig3_plan(fig3_chain, eps, "exact", threshold="optimize")
    assert opt.utility >= base.utility - 1e-12
    assert opt.leakage[0].total <= eps
    # the exact design is at least as good as the common-q numbers of §7.8
    assert base.utility >= SEC78[eps][0] - 6e-5
    assert opt.utility >= SEC78[eps][1] - 6e-5


@pytest.mark.parametrize("eps", [0.1, 0.3, 0.5, 1.0, 1.4, 2.0])
@pytest.mark.parametrize("design", ["paper", "optimal"])
def test_threshold_optimize_never_hurts_relaxation_designs(fig3_chain, eps, design):
    base = _fig3_plan(fig3_chain, eps, design)
    opt = _fig3_plan(fig3_chain, eps, design, threshold="optimize")
    assert opt.utility >= base.utility - 1e-12
    assert opt.leakage[0].total <= eps


def test_threshold_fraction_is_relative_to_the_side_budget(fig3_chain):
    # θ = 0.5 at ε = 1 classifies with ε' = 0.5: regions of ε = 0.5, budget still 1
    plan = _fig3_plan(fig3_chain, 1.0, "paper", threshold=0.5)
    assert "".join(plan.region_names()) == FIG3[0.5][0]
    assert plan.leakage[0].total <= 1.0
    with pytest.raises(ValueError, match="threshold"):
        _fig3_plan(fig3_chain, 1.0, "paper", threshold=1.5)
    with pytest.raises(ValueError, match="threshold"):
        _fig3_plan(fig3_chain, 1.0, "paper", threshold="best")


# ---------------------------------------------------------------------------------------------
# Relabelling for α > β (notes/000 §4.6)
# ---------------------------------------------------------------------------------------------


def test_alpha_gt_beta_plan_is_the_mirror_of_the_swapped_chain():
    fwd = plan_redaction(MarkovChain.binary(0.01, 0.8), N, [0], 1.0, design="paper")
    rev = plan_redaction(MarkovChain.binary(0.8, 0.01), N, [0], 1.0, design="paper")
    np.testing.assert_allclose(rev.red, fwd.red[:, ::-1], atol=1e-12)
    assert rev.utility == pytest.approx(fwd.utility, abs=1e-12)
    assert rev.leakage[0].total == pytest.approx(fwd.leakage[0].total, abs=1e-12)


@pytest.mark.parametrize(("alpha", "beta", "eps"), [(0.8, 0.01, 1.0), (0.8, 0.01, 0.3), (0.6, 0.1, 0.5)])
def test_naive_redaction_of_value_one_leaks_when_alpha_gt_beta(alpha, beta, eps):
    """Keeping 0 as the 'common' value in M when α > β breaks privacy (notes/000 §4.6)."""
    chain = MarkovChain.binary(alpha, beta)
    n = 10
    infl = pointwise_right(chain, n - 1)
    regions, common = classify(infl, eps)
    assert np.all(common == 1)  # relabelled: 1 is the common value
    assert np.any(regions == M)
    red_side = design_side(infl, regions, common, eps, "paper")
    q = np.where(regions == M, red_side[np.arange(n - 1), common], 0.0)
    oracle = _right_side_oracle(chain)
    assert oracle(red_side) <= eps  # the library's relabelled design is private
    naive = side_redaction(regions, (1 - common).astype(np.int8), q)
    assert oracle(naive) > eps  # the naive one (release 0 sometimes, redact 1) is not
    full = np.vstack([np.ones((1, 2)), naive])
    assert brute_force_leakage(chain, ChannelSequence.from_redaction(full[:8]), 0) > eps
