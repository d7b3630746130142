"""Watchdog with complete and subset merging (notes/003 §2.2, §2.4, §3.2, §3.3, §3.6, §5.1, E2–E4)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _lift_oracles import entropy_x, joints, mutual_information_xy, posterior_lifts
from hypothesis import given
from hypothesis import strategies as st

from streamguard.perturbation.lift import check_alip, check_claim, check_ldp_s, group_lifts, symbol_lifts
from streamguard.perturbation.model import DesignError, Joint
from streamguard.perturbation.watchdog import (
    MEASURES,
    Partition,
    complete_partition,
    criterion,
    partition_matrix,
    partition_mutual_information,
    split_symbols,
    subset_merging_channel,
    subset_partition,
    watchdog_channel,
)

CASE_A = Joint([[0.20, 0.15, 0.10, 0.05], [0.05, 0.10, 0.15, 0.20]])
LOG4 = math.log(4)
MERGED_03 = LOG4 - 0.5 * math.log(2)  # 1.039721

#: notes/003 E4: at ε = 2, λ = 0.5 symbol 2 is the only high-risk symbol and its min-lift (≈ 0.04) is far
#: below e^{-1}, so the paper's watchdog (complete or subset merging) releases a non-private group.
E4_JOINT = Joint([[0.25, 0.25, 0.001], [0.25, 0.20, 0.049]])


def _alpha(measure: str) -> float | None:
    return 10.0 if measure.startswith("alpha") else None


# --------------------------------------------------------------------------------- reference case A


@pytest.mark.parametrize("merge", ["complete", "subset"])
@pytest.mark.parametrize("lam", [0.5, 0.65, 0.35])  # (ε_l, ε_u) = (0.5, 0.5), (0.65, 0.35), (0.35, 0.65)
def test_case_a_alip_rows(merge, lam):
    ch = watchdog_channel(CASE_A, 1.0, lam=lam, merge=merge)
    assert ch.outputs == (1, 2, (0, 3))
    assert mutual_information_xy(CASE_A, ch.matrix) == pytest.approx(MERGED_03, abs=1e-6)
    assert partition_mutual_information(CASE_A, [(0, 3)]) == pytest.approx(1.039721, abs=1e-6)
    assert MERGED_03 / LOG4 == pytest.approx(0.75)
    assert ch.claims[0].params == pytest.approx({"eps_l": lam, "eps_u": 1 - lam})
    assert ch.kind == ("watchdog" if merge == "complete" else "watchdog-subset")


@pytest.mark.parametrize("merge", ["complete", "subset"])
def test_case_a_large_budget_releases_x(merge):
    ch = watchdog_channel(CASE_A, 2.0, merge=merge)  # (ε_l, ε_u) = (1, 1): 𝒳_H = ∅
    assert ch.outputs == (0, 1, 2, 3)
    np.testing.assert_array_equal(ch.matrix, np.eye(4))
    assert mutual_information_xy(CASE_A, ch.matrix) == pytest.approx(LOG4)


def test_case_a_ldp_rows():
    ch = watchdog_channel(CASE_A, 1.0, measure="ldp")
    assert ch.outputs == (1, 2, (0, 3))
    assert mutual_information_xy(CASE_A, ch.matrix) == pytest.approx(1.039721, abs=1e-6)
    # realised LDP leakage log 1.5 = 0.4055 (outputs 1 and 2)
    assert check_ldp_s(CASE_A, ch, math.log(1.5) * (1 + 1e-12)) is None
    assert check_ldp_s(CASE_A, ch, 0.4054).realised == pytest.approx(0.405465, abs=1e-6)
    assert watchdog_channel(CASE_A, 2.0, measure="ldp").outputs == (0, 1, 2, 3)


# ---------------------------------------------------------------------------------------- erratum E4


@pytest.mark.parametrize("partition_fn", [complete_partition, subset_partition])
def test_erratum_e4_paper_watchdog_group_breaks_budget_and_repair_fixes_it(partition_fn):
    crit = criterion("alip", 2.0)
    assert split_symbols(E4_JOINT, crit) == ((0, 1), (2,))
    paper = partition_fn(E4_JOINT, crit, repair=False)
    assert paper == Partition(low=(0, 1), groups=((2,),))
    matrix, _ = partition_matrix(3, paper)
    v = check_alip(E4_JOINT, matrix, 1.0, 1.0)
    assert v is not None and v.constraint == "min-lift" and v.output == 2
    assert v.realised == pytest.approx(-math.log(0.02 / 0.501), rel=1e-9)  # min-lift of {2} ≈ 0.04
    fixed = partition_fn(E4_JOINT, crit)
    assert fixed == Partition(low=(0,), groups=((1, 2),), absorbed=(1,))  # {1,2} has lower ω than {0,2}
    matrix, _ = partition_matrix(3, fixed)
    assert check_alip(E4_JOINT, matrix, 1.0, 1.0) is None
    ch = watchdog_channel(E4_JOINT, 2.0, merge="complete" if partition_fn is complete_partition else "subset")
    assert ch.outputs == (0, (1, 2)) and ch.params["absorbed"] == [1]


def test_literal_line_4_reading_would_stop_at_complete_merging():
    """E2: Algorithm 1's printed outer test stops once the *remaining* set is private. On case A the merged
    𝒳_H = {0, 3} is private, so the literal reading returns complete merging; ours does too here, but on a
    joint with two separable risky pairs it splits them (utility strictly higher)."""
    joint = Joint(np.array([[8, 1, 4.5, 4.5, 1, 8], [1, 8, 4.5, 4.5, 8, 1]]) / 54.0)
    crit = criterion("alip", 1.0)
    low, high = split_symbols(joint, crit)
    assert high == (0, 1, 4, 5) and low == (2, 3)
    assert group_lifts(joint, [high])[:, 0] == pytest.approx([1.0, 1.0])  # literal reading: stop at once
    sub = subset_partition(joint, crit)
    assert sub.groups == ((0, 1), (4, 5))  # seed 0 (riskiest, lowest index), best partner 1; then {4, 5}
    assert partition_mutual_information(joint, sub.groups) > partition_mutual_information(joint, [high])


# ------------------------------------------------------------------------------------------ properties


@given(joints(), st.sampled_from([0.25, 0.5, 1.0, 2.0, 4.0, 8.0]), st.sampled_from([0.35, 0.5, 0.65]),
       st.sampled_from(MEASURES), st.sampled_from(["complete", "subset"]))
def test_claims_hold_and_channel_is_a_partition(joint, eps, lam, measure, merge):
    lam = 0.5 if measure in ("lip", "ldp") else lam
    ch = watchdog_channel(joint, eps, lam=lam, measure=measure, merge=merge, alpha=_alpha(measure))
    for claim in ch.claims:
        assert check_claim(joint, ch.matrix, claim) is None
    # independent recomputation of the lifts for the two-sided notions
    lifts = posterior_lifts(joint, ch.matrix)
    if measure == "alip":
        assert lifts.min() >= math.exp(-lam * eps) and lifts.max() <= math.exp((1 - lam) * eps)
    if measure == "lip":
        assert lifts.min() >= math.exp(-eps) and lifts.max() <= math.exp(eps)
    if measure == "ldp":
        assert np.all(lifts.max(axis=0) <= math.exp(eps) * lifts.min(axis=0))
    # 0/1 rows; singletons released unchanged; groups cover the rest exactly once
    assert set(np.unique(ch.matrix)) <= {0.0, 1.0}
    seen = []
    for j, out in enumerate(ch.outputs):
        members = list(out) if isinstance(out, tuple) else [out]
        seen += members
        assert np.all(ch.matrix[members, j] == 1.0)
    assert sorted(seen) == list(range(joint.n_x))
    # utility: closed form (13) equals the mutual information of the matrix
    groups = [o for o in ch.outputs if isinstance(o, tuple)]
    assert partition_mutual_information(joint, groups) == pytest.approx(mutual_information_xy(joint, ch.matrix),
                                                                        abs=1e-10)


@given(joints(), st.sampled_from([0.5, 1.0, 2.0, 4.0, 8.0]), st.sampled_from(["alip", "ldp", "l1", "alpha-lift"]))
def test_subset_merging_is_at_least_complete_merging(joint, eps, measure):
    """The repaired subset partition refines the repaired complete one (notes/003 §2.4, Def. 4)."""
    kw = {"measure": measure, "alpha": _alpha(measure)}
    sub = subset_merging_channel(joint, eps, **kw)
    comp = watchdog_channel(joint, eps, merge="complete", **kw)
    assert mutual_information_xy(joint, sub.matrix) >= mutual_information_xy(joint, comp.matrix) - 1e-12


@given(joints(), st.sampled_from([0.5, 1.0, 2.0, 4.0]), st.sampled_from([0.35, 0.5, 0.65]))
def test_algorithm_1_structure(joint, eps, lam):
    """Paper Algorithm 1 (no repair): subsets partition 𝒳_H and all but the last are private; the repair
    only ever touches a non-private last subset and then makes it private."""
    crit = criterion("alip", eps, lam=lam)
    low, high = split_symbols(joint, crit)
    paper = subset_partition(joint, crit, repair=False)
    assert sorted(x for gr in paper.groups for x in gr) == list(high) and paper.low == low
    if paper.groups:
        ok = crit.ok(group_lifts(joint, paper.groups), joint.p_s)
        assert np.all(ok[:-1])
        fixed = subset_partition(joint, crit)
        assert fixed.groups[:-1] == paper.groups[:-1]
        assert bool(fixed.absorbed) == (not ok[-1])
        assert np.all(crit.ok(group_lifts(joint, fixed.groups), joint.p_s))


@given(joints(), st.data())
def test_refinement_never_lowers_utility(joint, data):
    """Def. 4: if 𝒢' refines 𝒢 then I_𝒢 ≤ I_𝒢' (closed form 13)."""
    labels = data.draw(st.lists(st.integers(0, 2), min_size=joint.n_x, max_size=joint.n_x))
    coarse = [[x for x in range(joint.n_x) if labels[x] == g] for g in range(3)]
    coarse = [g for g in coarse if g]
    fine = []
    for g in coarse:
        cut = data.draw(st.integers(1, len(g)))
        fine += [g[:cut], g[cut:]] if cut < len(g) else [g]
    assert partition_mutual_information(joint, fine) >= partition_mutual_information(joint, coarse) - 1e-12
    assert partition_mutual_information(joint, []) == pytest.approx(entropy_x(joint))


@given(joints(), st.sampled_from([0.5, 1.0, 2.0, 4.0]), st.sampled_from([0.35, 0.5, 0.65]))
def test_prop_2_ldp_high_risk_set_within_alip(joint, eps, lam):
    """Prop. 2: 𝒳_H(ε-LDP) ⊆ 𝒳_H((λε, (1−λ)ε)-ALIP), so the paper's LDP watchdog has ≥ utility."""
    _, h_ldp = split_symbols(joint, criterion("ldp", eps))
    _, h_alip = split_symbols(joint, criterion("alip", eps, lam=lam))
    assert set(h_ldp) <= set(h_alip)
    mi = [partition_mutual_information(joint, complete_partition(joint, criterion(m, eps, lam=l), repair=False).groups)
          for m, l in (("ldp", 0.5), ("alip", lam))]
    assert mi[0] >= mi[1] - 1e-12


@given(joints(min_x=3), st.data())
def test_theorem_1_no_randomisation_of_high_risk_set_beats_merging(joint, data):
    """Thm. 1 / Prop. A2 and the ALIP analogue: for any r(y|x) on 𝒳_H, max_y Γ(y) ≥ Γ(𝒳_H),
    max_y Λ(y) ≥ Λ(𝒳_H) and min_y Ψ(y) ≤ Ψ(𝒳_H) over the outputs 𝒴_H."""
    n_h = data.draw(st.integers(1, joint.n_x))
    high = sorted(data.draw(st.permutations(range(joint.n_x)))[:n_h])
    n_y = data.draw(st.integers(1, 4))
    r = np.array(data.draw(st.lists(st.floats(0.0, 1.0), min_size=n_h * n_y, max_size=n_h * n_y))).reshape(n_h, n_y)
    r[:, 0] += 1e-3
    r /= r.sum(axis=1, keepdims=True)
    w = np.zeros((joint.n_x, n_y))
    w[high] = r
    occurs = (joint.p_x @ w) > 0
    lifts = posterior_lifts(joint, w)  # over 𝒴_H only (rows outside 𝒳_H are zero)
    merged = group_lifts(joint, [high])[:, 0]
    assert occurs.any()
    tol = 1e-9
    assert (lifts.max(axis=0) / lifts.min(axis=0)).max() >= merged.max() / merged.min() * (1 - tol)
    assert lifts.max() >= merged.max() * (1 - tol)
    assert lifts.min() <= merged.min() * (1 + tol)


def test_alpha_100_watchdog_on_extreme_lifts():
    joint = Joint(np.array([[1e-9, 0.3, 0.2], [0.25, 0.05, 0.2 - 1e-9]]))
    ch = subset_merging_channel(joint, 1.0, measure="alpha-lift", alpha=100.0)
    for claim in ch.claims:
        assert check_claim(joint, ch, claim) is None
    assert all(isinstance(o, tuple) for o in ch.outputs[-1:])


def test_lift_based_only_measures_protect_one_side():
    """'-based' bounds the max-lift side only; on case A at ε = 1 the symbols' Λ_ℓ1 = 0.6 ≤ e^{0.5} − 1 so
    nothing is merged, while '-inverse' (Ψ_ℓ1(x0) = 0.9375 > 0.6487) merges {0, 3}."""
    assert watchdog_channel(CASE_A, 1.0, measure="l1-based").outputs == (0, 1, 2, 3)
    assert watchdog_channel(CASE_A, 1.0, measure="l1-inverse").outputs == (1, 2, (0, 3))
    assert watchdog_channel(CASE_A, 1.0, measure="l1").outputs == (1, 2, (0, 3))


# ---------------------------------------------------------------------------------------- bad inputs


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"epsilon": 0.0}, "epsilon must be finite and > 0"),
    ({"epsilon": -1.0}, "epsilon must be finite and > 0"),
    ({"epsilon": float("nan")}, "epsilon must be finite and > 0"),
    ({"epsilon": float("inf")}, "epsilon must be finite and > 0"),
    ({"epsilon": "1"}, "epsilon must be a number, got str"),
    ({"epsilon": None}, "epsilon must be a number"),
    ({"alpha": True, "measure": "alpha-lift"}, "alpha must be a number, got bool"),
    ({"lam": 1.0}, "lam must lie in"),
    ({"lam": 0.0}, "lam must be finite and > 0"),
    ({"measure": "tv"}, "unknown watchdog measure 'tv'"),
    ({"merge": "partial"}, "merge must be 'complete' or 'subset'"),
    ({"measure": "alpha-lift"}, "needs alpha"),
    ({"measure": "alpha-lift", "alpha": 1.0}, "alpha must be > 1"),
    ({"measure": "l1", "alpha": 2.0}, "alpha applies only"),
    ({"measure": "ldp", "lam": 0.65}, "lam does not apply"),
])
def test_bad_parameters_are_refused(kwargs: dict, message: str):
    args = {"epsilon": 1.0, **kwargs}
    eps = args.pop("epsilon")
    with pytest.raises(DesignError, match=message):
        watchdog_channel(CASE_A, eps, **args)


def test_symbol_lifts_are_what_the_split_uses():
    crit = criterion("alip", 1.0)
    ok = crit.ok(symbol_lifts(CASE_A), CASE_A.p_s)
    assert ok.tolist() == [False, True, True, False]
