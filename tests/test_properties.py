"""Property tests over random chains, budgets, positions, splits, designs and thresholds.

Random α, β ∈ (0.01, 0.99) cover α > β (common value 1) and λ < 0 (α + β > 1); explicit cases
of both are listed as well. The ``exact`` design combined with ``split="optimize"`` or
``threshold="optimize"`` costs up to seconds per plan (both at once: up to ~20 s for n = 6), so
those combinations get their own small test with one of the two optimized.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamguard import MarkovChain
from streamguard.audit import brute_force_leakage, exact_leakage
from streamguard.influence import binary_closed_form
from streamguard.redaction.baselines import (
    best_window_plan,
    mq_plan,
    mq_radius,
    theorem2_bound,
)
from streamguard.redaction.plan import plan_redaction
from streamguard.redaction.regions import L, M, S

TOL = 1e-9
BRUTE_MAX_N = 8


@st.composite
def settings_cases(draw, designs=("paper", "optimal", "exact"), max_n: int = 12, cheap_exact: bool = True):
    alpha = draw(st.floats(0.01, 0.99))
    beta = draw(st.floats(0.01, 0.99))
    eps = draw(st.floats(0.02, 6.0))
    n = draw(st.integers(1, max_n))
    p = draw(st.integers(0, n - 1))
    design = draw(st.sampled_from(designs))
    expensive_ok = design != "exact" or not cheap_exact
    split_choices = [st.just("even"), st.floats(0.0, eps)]
    thr_choices = [st.none(), st.floats(0.05, 1.0)]
    if expensive_ok:
        split_choices.append(st.just("optimize"))
        thr_choices.append(st.just("optimize"))
    split = draw(st.one_of(*split_choices))
    threshold = draw(st.one_of(*thr_choices))
    if not cheap_exact:
        # exact design with one of split/threshold optimized (both at once costs up to ~20 s)
        if draw(st.booleans()):
            split, threshold = "optimize", draw(st.one_of(st.none(), st.floats(0.05, 1.0)))
        else:
            split, threshold = draw(st.one_of(st.just("even"), st.floats(0.0, eps))), "optimize"
    return dict(alpha=alpha, beta=beta, eps=eps, n=n, p=p, design=design, split=split, threshold=threshold)


def _plan(c, **override):
    kw = {**c, **override}
    chain = MarkovChain.binary(kw["alpha"], kw["beta"])
    return chain, plan_redaction(chain, kw["n"], [kw["p"]], kw["eps"], design=kw["design"],
                                 split=kw["split"], threshold=kw["threshold"])


def _check_private(chain, plan, p, eps):
    assert plan.leakage[p].total <= eps + TOL
    recheck = exact_leakage(chain, plan.channels(), p).total
    assert recheck == pytest.approx(plan.leakage[p].total, abs=1e-12)
    if plan.n <= BRUTE_MAX_N:
        assert brute_force_leakage(chain, plan.channels(), p) <= eps + TOL


# ---------------------------------------------------------------------------------------------
# Privacy
# ---------------------------------------------------------------------------------------------


@settings(max_examples=80)
@given(settings_cases())
def test_3r_plans_are_private(c):
    chain, plan = _plan(c)
    p, eps = c["p"], c["eps"]
    _check_private(chain, plan, p, eps)
    # structure: p redacted; probabilities in [0,1]; M records always redact the rare value
    assert plan.red[p].tolist() == [1.0, 1.0] and plan.regions[p] == L
    assert np.all((plan.red >= 0) & (plan.red <= 1))
    assert np.all(plan.red[plan.regions == S] == 0.0)
    assert np.all(plan.red[plan.regions == L] == 1.0)
    rare = 0 if c["alpha"] > c["beta"] else 1
    if c["alpha"] != c["beta"]:
        assert np.all(plan.red[plan.regions == M, rare] == 1.0)
    el, er = plan.splits[p]
    assert el >= 0 and er >= 0 and el + er <= eps


@settings(max_examples=20)
@given(settings_cases(designs=("exact",), max_n=7, cheap_exact=False))
def test_exact_design_with_optimized_split_or_threshold_is_private(c):
    chain, plan = _plan(c)
    _check_private(chain, plan, c["p"], c["eps"])
    _, opt = _plan(c, design="optimal")
    assert plan.utility >= opt.utility - 1e-12


@given(settings_cases(designs=("paper",)))
def test_baselines_are_private(c):
    chain = MarkovChain.binary(c["alpha"], c["beta"])
    n, p, eps = c["n"], c["p"], c["eps"]
    for plan in (mq_plan(chain, n, [p], eps), mq_plan(chain, n, [p], eps, tight=True),
                 best_window_plan(chain, n, [p], eps)):
        _check_private(chain, plan, p, eps)


@pytest.mark.parametrize(
    ("alpha", "beta"),
    [(0.8, 0.01), (0.9, 0.3), (0.6, 0.9), (0.9, 0.6), (0.95, 0.97), (0.55, 0.5)],
    ids=["a>b", "a>b-lam<0", "lam<0", "a>b-lam<0-2", "lam~-1", "a~b-lam<0"],
)
@pytest.mark.parametrize("eps", [0.05, 0.4, 1.0, 2.5])
@pytest.mark.parametrize("design", ["paper", "optimal", "exact"])
def test_alpha_gt_beta_and_negative_lambda_are_private(alpha, beta, eps, design):
    chain = MarkovChain.binary(alpha, beta)
    n = 8
    for p in (0, 3, 7):
        plan = plan_redaction(chain, n, [p], eps, design=design)
        _check_private(chain, plan, p, eps)


@st.composite
def non_stationary_cases(draw):
    alpha, beta = draw(st.floats(0.01, 0.99)), draw(st.floats(0.01, 0.99))
    a0 = draw(st.sampled_from([0.0, 1.0, 0.5, 0.1, 0.93]))
    n = draw(st.integers(2, BRUTE_MAX_N))
    # with a deterministic X_0 the record at index 0 has a state of probability 0: keep p ≥ 1
    p = draw(st.integers(1 if a0 in (0.0, 1.0) else 0, n - 1))
    design = draw(st.sampled_from(["paper", "optimal", "exact"]))
    cheap = design != "exact"
    split = draw(st.one_of(st.just("even"), st.floats(0.0, 1.0), *([st.just("optimize")] if cheap else [])))
    threshold = draw(st.one_of(st.none(), st.floats(0.05, 1.0), *([st.just("optimize")] if cheap else [])))
    return MarkovChain.binary(alpha, beta, initial=[a0, 1 - a0]), n, p, design, split, threshold


@given(non_stationary_cases(), st.floats(0.02, 6.0))
def test_non_stationary_chain_plans_are_private(case, eps):
    chain, n, p, design, split, threshold = case
    if isinstance(split, float):
        split *= eps  # a fraction of the budget for the left side
    plan = plan_redaction(chain, n, [p], eps, design=design, split=split, threshold=threshold)
    _check_private(chain, plan, p, eps)
    # Def. 2 with the non-stationary marginals, computed here by forward propagation
    law, released = chain.initial.copy(), 0.0
    for t in range(n):
        released += float(law @ (1.0 - plan.red[t]))
        law = law @ chain.matrix
    assert plan.utility == pytest.approx(released / n, abs=1e-12)


# ---------------------------------------------------------------------------------------------
# Utility orderings
# ---------------------------------------------------------------------------------------------


@given(settings_cases(designs=("paper",)))
def test_optimal_design_dominates_paper_and_exact_dominates_optimal(c):
    _, paper = _plan(c, design="paper")
    _, optimal = _plan(c, design="optimal")
    assert optimal.utility >= paper.utility - 1e-12
    if c["split"] != "optimize" and c["threshold"] != "optimize":
        _, exact = _plan(c, design="exact")
        assert exact.utility >= optimal.utility - 1e-12


def _mq_split(chain, n, p, eps) -> float:
    """ε_ℓ of MQ's mode (Algorithm 1): one-sided (0, ε), reflected (ε, 0), else (ε/2, ε/2)."""
    dl, dr = mq_radius(chain, n, p, eps)
    if dl == p:
        return 0.0
    if dr == n - 1 - p:
        return eps
    return eps / 2


@given(settings_cases(designs=("paper", "optimal")), st.sampled_from([None, "optimize"]))
def test_3r_with_mq_split_beats_mq(c, threshold):
    """Corollary 1 with MQ's own split (notes/000 §4.4): every MQ-released record is in S."""
    chain = MarkovChain.binary(c["alpha"], c["beta"])
    n, p, eps = c["n"], c["p"], c["eps"]
    mq = mq_plan(chain, n, [p], eps)
    _, r3 = _plan(c, split=_mq_split(chain, n, p, eps), threshold=threshold)
    assert r3.utility >= mq.utility - 1e-12
    released_by_mq = mq.red[:, 0] == 0.0
    assert np.all(r3.red[released_by_mq] == 0.0)


@given(settings_cases(designs=("paper",), max_n=16))
def test_window_baselines_ordering_and_theorem2(c):
    chain = MarkovChain.binary(c["alpha"], c["beta"])
    n, p, eps = c["n"], c["p"], c["eps"]
    mq = mq_plan(chain, n, [p], eps).utility
    tight = mq_plan(chain, n, [p], eps, tight=True).utility
    best = best_window_plan(chain, n, [p], eps).utility
    assert best >= tight - 1e-12
    assert tight >= mq - 1e-12
    # the corrected Theorem 2 bounds every data-independent mechanism, the best window included
    assert best <= theorem2_bound(chain, n, p, eps, corrected=True) + 1e-12
    if p == 0:
        assert best <= theorem2_bound(chain, n, p, eps, corrected=False) + 1e-12


# ---------------------------------------------------------------------------------------------
# Several private records (notes/000 §4.5)
# ---------------------------------------------------------------------------------------------


@settings(max_examples=60)
@given(settings_cases(designs=("paper", "optimal", "exact")), st.data())
def test_multi_position_combiner_never_raises_leakage(c, data):
    n = c["n"]
    if n < 2:
        return
    p1 = c["p"]
    p2 = data.draw(st.integers(0, n - 1).filter(lambda v: v != p1))
    chain = MarkovChain.binary(c["alpha"], c["beta"])
    kw = dict(design=c["design"], split=c["split"], threshold=c["threshold"])
    both = plan_redaction(chain, n, [p1, p2], c["eps"], **kw)
    for p in (p1, p2):
        single = plan_redaction(chain, n, [p], c["eps"], **kw)
        assert np.all(both.red >= single.red)
        assert both.leakage[p].total <= single.leakage[p].total + 1e-12
        assert both.leakage[p].total <= c["eps"] + TOL
        assert both.splits[p] == single.splits[p]
    if n <= BRUTE_MAX_N:
        for p in (p1, p2):
            assert brute_force_leakage(chain, both.channels(), p) <= c["eps"] + TOL


def test_plan_argument_errors(fig3_chain):
    with pytest.raises(ValueError, match="epsilon"):
        plan_redaction(fig3_chain, 10, [0], 0.0)
    with pytest.raises(ValueError, match="outside 1..10"):
        plan_redaction(fig3_chain, 10, [10], 1.0)
    with pytest.raises(ValueError, match="at least one private"):
        plan_redaction(fig3_chain, 10, [], 1.0)
    with pytest.raises(ValueError, match="split"):
        plan_redaction(fig3_chain, 10, [3], 1.0, split="left")
    with pytest.raises(ValueError, match="split"):
        plan_redaction(fig3_chain, 10, [3], 1.0, split=1.5)
    with pytest.raises(ValueError, match="binary"):
        plan_redaction(MarkovChain(np.full((3, 3), 1 / 3)), 10, [3], 1.0)


# ---------------------------------------------------------------------------------------------
# Budgets exactly on a breakpoint (ties ǐ(Δ) = ε' or î(Δ) = ε')
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("alpha", "beta"), [(0.01, 0.8), (0.25, 0.5), (0.6, 0.9), (0.8, 0.05)])
@pytest.mark.parametrize("design", ["paper", "optimal"])
def test_budgets_on_breakpoints_are_private_up_to_round_off(alpha, beta, design):
    """At ε = ǐ(Δ) or î(Δ) the region rule's ties (≤) put the record in the more permissive region
    and the design must still hold. The audit computes log-ratios of numbers near 1/2, so its
    absolute round-off is ~1e-16; for a tiny ε that is ~1e-11 relative, hence the tolerance."""
    chain = MarkovChain.binary(alpha, beta)
    infl = binary_closed_form(alpha, beta, np.arange(1, 8))
    for v in np.unique(infl):
        for eps in (float(v), float(np.nextafter(v, 0.0)), float(np.nextafter(v, 1.0)), 2.0 * float(v)):
            for p in (0, 4, 9):
                plan = plan_redaction(chain, 10, [p], eps, design=design)
                assert plan.leakage[p].total <= eps * (1 + 1e-9) + 1e-15
