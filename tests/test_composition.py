"""Paper composition rules (streamguard.ledger.composition) against exact enumeration (notes/002 §4–6)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamguard import MarkovChain
from streamguard.audit.pufferfish import LaplaceRelease, dependence_divergence, pufferfish_epsilon
from streamguard.ledger.composition import (
    CompositionError,
    MqmRelease,
    NotApplicable,
    PufferfishRelease,
    Quilt,
    active_quilts,
    boundary_influences,
    mqm_release,
    paper_bounds,
    parallel_general,
    thm_II6,
    thm_III1,
    thm_III1_printed_WRONG,
    thm_III3,
    thm_III6,
    thm_III7,
)
from streamguard.quilt import QuiltModel, sigma_max
from streamguard.quilt import release as aggregate
from streamguard.sampling import SeededSource

COUNTER = [[0.97, 0.02, 0.01], [0.4, 0.2, 0.4], [0.2, 0.3, 0.5]]  # notes/002 §4.6


def _rr(k: int, eps: float) -> np.ndarray:
    """k-ary randomized response: keep with e^ε/(e^ε + k − 1)."""
    m = np.ones((k, k))
    np.fill_diagonal(m, math.exp(eps))
    return m / m.sum(axis=1, keepdims=True)


def _rr_leakage(chain: MarkovChain, T: int, channels: dict[int, np.ndarray]) -> np.ndarray:
    """Exact per-position Pufferfish ε of independent local channels at some positions, by enumeration.

    Independent of the Laplace evaluator: plain loops over sequences and the finite outputs."""
    k = chain.k
    nodes = sorted(channels)
    outs = list(itertools.product(range(k), repeat=len(nodes)))
    joint = np.zeros((T, k, len(outs)))
    for x in itertools.product(range(k), repeat=T):
        p = chain.initial[x[0]] * np.prod([chain.matrix[x[t - 1], x[t]] for t in range(1, T)])
        lik = np.array([np.prod([channels[n][x[n], y[j]] for j, n in enumerate(nodes)]) for y in outs])
        for i in range(T):
            joint[i, x[i]] += p * lik
    eps = np.zeros(T)
    for i in range(T):
        marg = joint[i].sum(axis=1)
        live = np.flatnonzero(marg > 0)
        logs = np.log(joint[i, live] / marg[live, None])
        eps[i] = max((logs[a] - logs[b]).max() for a in range(len(live)) for b in range(len(live)) if a != b)
    return eps


# ------------------------------------------------------------------------------ Theorem III.1


def test_thm_III1_printed_statement_is_violated_and_the_proved_one_holds():
    """notes/002 §4.6: RR(10) on X_2, RR(8) on X_3, T = 4, A = [1,2], B = [3,4], stationary start."""
    chain = MarkovChain(COUNTER)
    e_fwd, e_bwd = boundary_influences(QuiltModel(chain, "stat"), 1, 2)  # 0-based T2 = 1, T3 = 2
    assert e_fwd == pytest.approx(3.9120, abs=1e-4) and e_fwd == pytest.approx(math.log(50), abs=1e-12)
    assert e_bwd == pytest.approx(3.7785, abs=1e-4)
    eps = _rr_leakage(chain, 4, {1: _rr(3, 10.0), 2: _rr(3, 8.0)})
    # each mechanism alone is exactly ε-Pufferfish about its own segment's secrets
    assert _rr_leakage(chain, 4, {1: _rr(3, 10.0)})[:2].max() == pytest.approx(10.0, abs=1e-9)
    assert _rr_leakage(chain, 4, {2: _rr(3, 8.0)})[2:].max() == pytest.approx(8.0, abs=1e-9)
    true = eps.max()
    assert true == pytest.approx(13.8797, abs=1e-4)
    printed = thm_III1_printed_WRONG(10.0, 8.0, e_fwd, e_bwd)
    proved = thm_III1(10.0, 8.0, e_fwd, e_bwd)
    assert printed == pytest.approx(13.7785, abs=1e-4) and true > printed + 0.1  # the printed one fails
    assert proved == pytest.approx(13.9120, abs=1e-4) and true <= proved
    verdict = parallel_general([PufferfishRelease(10.0, 0, 1), PufferfishRelease(8.0, 2, 3)], QuiltModel(chain, "stat"))
    assert verdict.applicable and verdict.epsilon == pytest.approx(proved)


@st.composite
def _parallel_case(draw):
    k = draw(st.sampled_from([2, 3]))
    rows = [draw(st.lists(st.floats(0.05, 1.0), min_size=k, max_size=k)) for _ in range(k)]
    P = np.array(rows) / np.array(rows).sum(axis=1, keepdims=True)
    T = draw(st.integers(3, 5))
    t2 = draw(st.integers(0, T - 2))
    t3 = draw(st.integers(t2 + 1, T - 1))
    na = draw(st.integers(0, t2))  # RR node inside A = [0, t2]
    nb = draw(st.integers(t3, T - 1))  # RR node inside B = [t3, T−1]
    ea, eb = draw(st.floats(0.2, 12.0)), draw(st.floats(0.2, 12.0))
    mode = draw(st.sampled_from(["stat", "q"]))
    initial = None
    if mode == "q":
        w = np.array(draw(st.lists(st.floats(0.05, 1.0), min_size=k, max_size=k)))
        initial = w / w.sum()
    return P, initial, mode, T, t2, t3, na, nb, ea, eb


@given(_parallel_case())
def test_thm_III1_as_proved_holds_on_random_chains(case):
    """Property: the exact ε of the pair over A ∪ B secrets ≤ Thm III.1 (proof version), with ε_A
    and ε_B each mechanism's own exact Pufferfish ε about its segment."""
    P, initial, mode, T, t2, t3, na, nb, ea, eb = case
    chain = MarkovChain(P, initial)
    k = chain.k
    eps_a = _rr_leakage(chain, T, {na: _rr(k, ea)})[: t2 + 1].max()
    eps_b = _rr_leakage(chain, T, {nb: _rr(k, eb)})[t3:].max()
    pair = _rr_leakage(chain, T, {na: _rr(k, ea), nb: _rr(k, eb)})
    true = max(pair[: t2 + 1].max(), pair[t3:].max())
    e_fwd, e_bwd = boundary_influences(QuiltModel(chain, mode), t2, t3)
    assert true <= thm_III1(eps_a, eps_b, e_fwd, e_bwd) + 1e-9


def test_boundary_influences_match_enumeration_and_modes_are_ordered():
    """e(X_t3|X_t2) and e(X_t2|X_t3) against direct conditional laws; supq ≥ q for any q."""
    chain = MarkovChain([[0.8, 0.15, 0.05], [0.1, 0.8, 0.1], [0.05, 0.15, 0.8]], initial=[0.7, 0.2, 0.1])
    t2, t3 = 2, 5
    P = chain.matrix
    mu = [chain.initial @ np.linalg.matrix_power(P, t) for t in range(t3 + 1)]
    joint = mu[t2][:, None] * np.linalg.matrix_power(P, t3 - t2)  # [x2, x3]
    fwd = joint / joint.sum(axis=1, keepdims=True)  # P(x3 | x2)
    bwd = (joint / joint.sum(axis=0, keepdims=True)).T  # P(x2 | x3)

    def spread(cond):
        return max(np.log(cond[a] / cond[b]).max() for a in range(3) for b in range(3) if a != b)

    e_f, e_b = boundary_influences(QuiltModel(chain, "q"), t2, t3)
    assert e_f == pytest.approx(spread(fwd), abs=1e-9) and e_b == pytest.approx(spread(bwd), abs=1e-9)
    s_f, s_b = boundary_influences(QuiltModel(chain, "supq"), t2, t3)
    assert s_f == pytest.approx(e_f, abs=1e-9) and s_b >= e_b - 1e-12
    for q in ([1, 0, 0], [0, 0, 1], [0.2, 0.3, 0.5]):  # supq bounds every start (point masses are the worst)
        assert s_b >= boundary_influences(QuiltModel(chain, "q", initial=q), t2, t3)[1] - 1e-12
    assert boundary_influences(QuiltModel(chain, "approx"), t2, t3) == (s_f, s_b)  # exact, not Lemma II.3
    # Θ as a set: the max over its chains
    a = MarkovChain(chain.matrix)
    other = MarkovChain([[0.5, 0.25, 0.25], [0.25, 0.5, 0.25], [0.25, 0.25, 0.5]])
    both = boundary_influences(QuiltModel([a, other], "stat"), t2, t3)
    each = [boundary_influences(QuiltModel(c, "stat"), t2, t3) for c in (a, other)]
    assert both == (max(e[0] for e in each), max(e[1] for e in each))


def test_boundary_influence_is_infinite_when_a_value_is_impossible_under_one_state():
    model = QuiltModel(MarkovChain([[0.5, 0.5, 0.0], [0.0, 0.5, 0.5], [0.5, 0.0, 0.5]]), "stat")
    assert boundary_influences(model, 0, 1) == (math.inf, math.inf)
    assert math.isfinite(boundary_influences(model, 0, 2)[0])  # P² > 0
    with pytest.raises(CompositionError):
        boundary_influences(model, 3, 3)


# ------------------------------------------------------------------------------ Theorem III.6


@given(st.floats(0.2, 0.9), st.floats(0.2, 0.9), st.floats(0.5, 3.0), st.floats(0.5, 3.0),
       st.integers(0, 2), st.integers(0, 2))
def test_thm_III6_bounds_the_exact_pair(p01, p10, beta_a, beta_b, lo_a, lo_b):
    """Property: exact pair ε ≤ ε_A + ε_B + 2E with the exact single ε's and the exact E."""
    chain = MarkovChain.binary(p01, p10)
    T = 4
    A = LaplaceRelease.count(2, 1, lo_a, lo_a + 1, beta_a)
    B = LaplaceRelease.count(2, 1, lo_b, 3, beta_b)
    eps_a = pufferfish_epsilon(chain, T, [A]).epsilon
    eps_b = pufferfish_epsilon(chain, T, [B]).epsilon
    true = pufferfish_epsilon(chain, T, [A, B]).epsilon
    E = dependence_divergence(chain, T, [A], [B])
    assert true <= thm_III6(eps_a, eps_b, E) + 1e-9
    assert E >= 0


def test_thm_III6_rejects_a_negative_or_nan_E():
    with pytest.raises(CompositionError):
        thm_III6(1.0, 1.0, -0.1)
    with pytest.raises(CompositionError):
        thm_III6(1.0, 1.0, math.nan)


# ------------------------------------------------------------------- conditions of the rules


def _mqm(eps, lo, hi, mode="stat", T=None, active=(), model="theta"):
    return MqmRelease(eps, lo, hi, model, mode, T, tuple(active))


def test_thm_III7_and_II6_conditions_are_named():
    rs = [_mqm(1.0, 0, 9), _mqm(2.0, 5, 19)]  # different ε (different quilts), overlapping windows
    v = thm_III7(rs)
    assert v.applicable and v.epsilon == 3.0
    assert isinstance(thm_II6(rs), NotApplicable) and "identical quilt" in thm_II6(rs).reason
    same = [_mqm(1.5, 0, 9, T=30), _mqm(1.5, 10, 29, T=30)]
    assert thm_II6(same).epsilon == 3.0 and thm_III7(same).epsilon == 3.0
    short = [_mqm(1.0, 0, 9, T=10), _mqm(1.0, 10, 19, T=10)]  # σ_max of each short window
    v = thm_III7(short)
    assert isinstance(v, NotApplicable) and "T = 10 < chain length 20" in v.reason
    assert "not an MQM release" in thm_III7([PufferfishRelease(1.0, 0, 3)]).reason
    assert "different models" in thm_III7([_mqm(1, 0, 3), _mqm(1, 0, 3, model="other")]).reason
    assert "beyond the chain length" in thm_III7(rs, T=10).reason


def test_thm_III3_conditions_are_checked_one_by_one():
    ok_q = [Quilt(5, 2, 2)]
    A = _mqm(1.0, 0, 9, mode="approx", active=ok_q)
    B = _mqm(2.0, 20, 29, mode="approx", active=ok_q)
    v = thm_III3([B, A])
    assert v.applicable and v.epsilon == 2.0 and "0..9 and 20..29 only" in v.covers
    near = _mqm(2.0, 15, 24, mode="approx", active=ok_q)
    assert "condition 2" in thm_III3([A, near]).reason
    stat = _mqm(2.0, 20, 29, mode="stat", active=ok_q)
    assert "MQMApprox only" in thm_III3([A, stat]).reason
    one_sided = _mqm(2.0, 20, 29, mode="approx", active=[Quilt(1, None, 3)])
    assert "condition 1" in thm_III3([A, one_sided]).reason and "one-sided" in thm_III3([A, one_sided]).reason
    too_big = _mqm(2.0, 20, 29, mode="approx", active=[Quilt(5, 6, 6)])
    assert "does not fit" in thm_III3([A, too_big]).reason
    unrecorded = _mqm(2.0, 20, 29, mode="approx")
    assert "records no active quilts" in thm_III3([A, unrecorded]).reason
    multi = _mqm(2.0, 20, 29, mode="approx", active=[Quilt(5, 2, 2), Quilt(0, None, 4)])
    assert "θ #1" in thm_III3([A, multi]).reason
    assert "overlap" in thm_III3([A, _mqm(2.0, 9, 18, mode="approx", active=ok_q)]).reason
    assert "exactly two" in thm_III3([A]).reason


def test_paper_bounds_reports_not_composed_when_no_rule_applies():
    chain = MarkovChain(COUNTER)
    overlapping = [PufferfishRelease(1.0, 0, 3), PufferfishRelease(1.0, 2, 5)]
    verdicts = paper_bounds(overlapping, QuiltModel(chain, "stat"))
    assert not any(v.applicable for v in verdicts)
    assert verdicts[-1].rule == "not composed" and "Thm III.4" in verdicts[-1].reason
    disjoint = [PufferfishRelease(1.0, 0, 3), PufferfishRelease(1.0, 6, 9)]
    verdicts = paper_bounds(disjoint, QuiltModel(chain, "stat"))
    assert [v.rule for v in verdicts if v.applicable] == ["Thm III.1 (as proved; disjoint segments)"]
    assert "no model" in paper_bounds(disjoint)[3].reason


def test_malformed_releases_are_refused():
    with pytest.raises(CompositionError):
        PufferfishRelease(0.0, 0, 1)
    with pytest.raises(CompositionError):
        PufferfishRelease(1.0, 3, 1)
    with pytest.raises(CompositionError):
        MqmRelease(1.0, 0, 1, "m", "bogus", None)
    with pytest.raises(CompositionError):
        thm_III1(1.0, 1.0, -1.0, 0.0)
    with pytest.raises(CompositionError):
        thm_III1(0.0, 1.0, 1.0, 0.0)
    with pytest.raises(CompositionError):
        thm_III6(math.inf, 1.0, 0.0)


# ------------------------------------------------------- Theorem III.3 end to end (exact evaluation)


@pytest.mark.parametrize("P,mode,eps,W", [
    ([[0.55, 0.45], [0.45, 0.55]], "approx-rev", 4.0, 6),
    ([[0.52, 0.48], [0.48, 0.52]], "approx-rev", 6.0, 5),
    ([[0.6, 0.4], [0.4, 0.6]], "approx-rev", 6.0, 6),
])
def test_thm_III3_on_released_segments_holds_exactly(P, mode, eps, W):
    """Two MQMApprox releases on segments W−1 apart, each with its own σ_max(W): the rule applies and the
    exact ε over the secrets of A ∪ B (any start: evaluated at π and at a skewed start) is ≤ max ε."""
    model = QuiltModel(MarkovChain(P), mode)
    scale = sigma_max(model, eps, W)
    A = aggregate.count(np.zeros(W, dtype=np.int64), 0, 1, model, scale, SeededSource(0))
    B = aggregate.count(np.zeros(W, dtype=np.int64), 2 * W - 2, 1, model, scale, SeededSource(0))
    verdict = thm_III3([mqm_release(A, model), mqm_release(B, model)])
    assert verdict.applicable and verdict.epsilon == eps
    T = B.hi + 1
    for start in (None, [0.9, 0.1]):
        chain = MarkovChain(P, start)
        per = pufferfish_epsilon(chain, T, [LaplaceRelease.count(2, 1, r.lo, r.hi, r.noise_scale) for r in (A, B)])
        covered = np.r_[per.per_position[: A.hi + 1], per.per_position[B.lo :]]
        assert covered.max() <= verdict.epsilon


def test_thm_III3_condition_1_is_checked_for_every_theta():
    """Θ = {a chain whose witness is two-sided, one whose witness is the empty quilt}: condition 1 fails on θ #1."""
    good, bad = MarkovChain([[0.55, 0.45], [0.45, 0.55]]), MarkovChain([[0.9, 0.1], [0.1, 0.9]])
    model = QuiltModel([good, bad], "approx-rev")
    quilts = active_quilts(model, 4.0, 6)
    assert quilts[0].two_sided and not quilts[1].two_sided
    scale = sigma_max(model, 4.0, 6)
    rels = [aggregate.count(np.zeros(6, dtype=np.int64), lo, 1, model, scale, SeededSource(0))
            for lo in (0, 10)]
    verdict = thm_III3([mqm_release(r, model) for r in rels])
    assert not verdict.applicable and "θ #1" in verdict.reason
    with pytest.raises(CompositionError):
        mqm_release(rels[0], QuiltModel(good, "approx-rev"))
