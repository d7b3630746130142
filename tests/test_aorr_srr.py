"""AORR (vertex enumeration + LP) and SRR (notes/003 §2.3, §2.5, §3.4, §3.5, §5.1)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _lift_oracles import (
    channels,
    entropy_x,
    joints,
    mutual_information_sy,
    mutual_information_xy,
    naive_vertices,
    posterior_lifts,
)
from hypothesis import given
from hypothesis import strategies as st
from scipy.optimize import linprog

from streamguard.perturbation.aorr import _polish, aorr_channel, optimal_randomisation, polytope_vertices
from streamguard.perturbation.lift import DESIGN_MARGIN, check_alip, channel_lifts, max_lift, min_lift, tightened
from streamguard.perturbation.model import DesignError, Joint
from streamguard.perturbation.srr import srr_channel
from streamguard.perturbation.watchdog import subset_merging_channel, watchdog_channel

CASE_A = Joint([[0.20, 0.15, 0.10, 0.05], [0.05, 0.10, 0.15, 0.20]])
E4_JOINT = Joint([[0.25, 0.25, 0.001], [0.25, 0.20, 0.049]])
#: Designs use budgets tightened by DESIGN_MARGIN (relative), which moves optimal values by ~1e-7.
VALUE_TOL = 1e-6
#: Found by hypothesis (test_prop_1_bounds_on_aorr): at (ε, λ) = (0.25, 0.65) HiGHS's optimal basis is
#: degenerate, holding one vertex at weight 0 that comes back as β ≈ 4e−15 (an output of P_Y ≈ 2e−15).
DEGENERATE_BASIS = Joint([
    [0.0014472529581691263, 0.0457661569823083, 0.0025736201366300796, 0.000257362013663008],
    [0.0025736201366300796, 0.000257362013663008, 0.0457661569823083, 0.014472529581691262],
    [0.25505755719658674, 0.04918067056537082, 0.004918067056537082, 0.000257362013663008],
    [0.257362013663008, 0.0006103015120365928, 0.062137953524726654, 0.257362013663008],
])


def _binary_entropy(a: float) -> float:
    return -a * math.log(a) - (1 - a) * math.log(1 - a)


# --------------------------------------------------------------------------------- reference case A


@pytest.mark.parametrize(("eps", "lam", "expected"), [
    (1.0, 0.5, 1.156687),    # (ε_l, ε_u) = (0.5, 0.5)
    (1.0, 0.65, 1.174267),   # (0.65, 0.35)
    (1.0, 0.35, 1.103001),   # (0.35, 0.65)
    (2.0, 0.5, 1.386294),    # (1, 1): Y = X
])
@pytest.mark.parametrize("design", [aorr_channel, srr_channel])
def test_case_a_values(design, eps, lam, expected):
    ch = design(CASE_A, eps, lam=lam)
    assert mutual_information_xy(CASE_A, ch.matrix) == pytest.approx(expected, abs=VALUE_TOL)
    assert check_alip(CASE_A, ch, lam * eps, (1 - lam) * eps) is None


def test_case_a_closed_form_solution():
    """(0.5, 0.5): x1, x2 kept; x0 → (a, 1−a), x3 → (1−a, a) with a = (0.8 − 0.5e^{−0.5})/0.6; P_Y uniform;
    I = log 4 − ½h(a); the min-lift bound is active, the max-lift is log 1.3934 = 0.3318 < 0.5."""
    a = (0.8 - 0.5 * math.exp(-0.5)) / 0.6
    assert a == pytest.approx(0.8278911, abs=1e-7)
    ch = aorr_channel(CASE_A, 1.0)
    assert ch.outputs == ((0, 3), (0, 3), 1, 2)
    np.testing.assert_allclose(ch.matrix, [[a, 1 - a, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1], [1 - a, a, 0, 0]],
                               atol=1e-6)
    np.testing.assert_allclose(CASE_A.p_x @ ch.matrix, 0.25, atol=1e-12)
    assert mutual_information_xy(CASE_A, ch.matrix) == pytest.approx(math.log(4) - 0.5 * _binary_entropy(a),
                                                                     abs=VALUE_TOL)
    lifts, _ = channel_lifts(CASE_A, ch)
    assert -math.log(min_lift(lifts).min()) == pytest.approx(0.5, rel=2 * DESIGN_MARGIN)
    assert -math.log(min_lift(lifts).min()) <= 0.5
    assert math.log(max_lift(lifts).max()) == pytest.approx(0.3318, abs=1e-4)


# ---------------------------------------------------------------------------------------- enumeration


@given(joints(max_s=3, max_x=6), st.sampled_from([0.1, 0.25, 0.5, 1.0, 2.0, 4.0]),
       st.sampled_from([0.1, 0.25, 0.5, 1.0, 2.0, 4.0]))
def test_vertices_equal_naive_enumeration(joint, eps_l, eps_u):
    """Support-lemma enumeration = brute force over every basis of the full constraint system."""
    b = joint.s_given_x.T
    lo, hi = math.exp(-eps_l) * joint.p_s, math.exp(eps_u) * joint.p_s
    ours = polytope_vertices(b, lo, hi)
    naive = naive_vertices(b, lo, hi)
    assert len(ours) == len(naive)
    for v in ours:
        assert np.abs(naive - v).max(axis=1).min() < 1e-8
    assert np.all((ours > 0).sum(axis=1) <= joint.n_s)
    np.testing.assert_allclose(ours.sum(axis=1), 1.0, rtol=1e-12)


def test_vertices_of_case_a():
    """(0.5, 0.5), |S| = 2: the four bounds reduce to P(s0|v) ∈ [L, U] = [0.5e^{−0.5}, 1 − 0.5e^{−0.5}] with
    P(s0|x) = (0.8, 0.6, 0.4, 0.2). Vertices: the unit vectors of x1, x2 (inside) and, on every simplex edge
    {x_i, x_j}, the points where it crosses L or U: 2 + 1 (0,1) + 1 (0,2) + 2 (0,3) + 1 (1,3) + 1 (2,3) = 8."""
    b = CASE_A.s_given_x.T
    verts = polytope_vertices(b, math.exp(-0.5) * CASE_A.p_s, math.exp(0.5) * CASE_A.p_s)
    low, high = 0.5 * math.exp(-0.5), 1 - 0.5 * math.exp(-0.5)
    expected = [np.eye(4)[1], np.eye(4)[2]]
    for i in range(4):
        for j in range(i + 1, 4):
            for bound in (low, high):
                t = (bound - b[0, j]) / (b[0, i] - b[0, j])
                if 0 < t < 1:
                    v = np.zeros(4)
                    v[i], v[j] = t, 1 - t
                    expected.append(v)
    assert len(expected) == 8 and len(verts) == 8
    for v in expected:
        assert np.abs(verts - v).max(axis=1).min() < 1e-12


# ------------------------------------------------------------------------------------------ properties


def _feasible_mixture(joint, w, eps_l, eps_u):
    """The largest t with t·W + (1−t)·(uniform output) (eps_l, eps_u)-ALIP (lifts move linearly toward 1)."""
    u = np.full_like(w, 1.0 / w.shape[1])
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lifts = posterior_lifts(joint, mid * w + (1 - mid) * u)
        ok = lifts.min() >= math.exp(-eps_l) and lifts.max() <= math.exp(eps_u)
        lo, hi = (mid, hi) if ok else (lo, mid)
    return lo * w + (1 - lo) * u


@given(joints(), st.sampled_from([0.25, 0.5, 1.0, 2.0, 4.0]), st.sampled_from([0.35, 0.5, 0.65]), st.data())
def test_orderings_and_claims(joint, eps, lam, data):
    """complete ≤ subset merging ≤ SRR ≤ AORR (notes/003 §2.5 corollary), all (λε, (1−λ)ε)-ALIP, and no
    ALIP channel found by mixing a random channel toward a constant beats AORR."""
    eps_l, eps_u = lam * eps, (1 - lam) * eps
    chans = [watchdog_channel(joint, eps, lam=lam), subset_merging_channel(joint, eps, lam=lam),
             srr_channel(joint, eps, lam=lam), aorr_channel(joint, eps, lam=lam)]
    mi = [mutual_information_xy(joint, ch.matrix) for ch in chans]
    assert mi[0] <= mi[1] + 1e-12 and mi[1] <= mi[2] + 1e-9 and mi[2] <= mi[3] + 1e-9
    for ch in chans:
        lifts = posterior_lifts(joint, ch.matrix)
        assert lifts.min() >= math.exp(-eps_l) and lifts.max() <= math.exp(eps_u)
        np.testing.assert_allclose(ch.matrix.sum(axis=1), 1.0, atol=1e-12)
    assert chans[3].n_y <= joint.n_x  # basic LP solution
    rival = _feasible_mixture(joint, data.draw(channels(joint.n_x)), eps_l, eps_u)
    assert mutual_information_xy(joint, rival) <= mi[3] + 1e-9


@given(joints(), st.sampled_from([0.25, 1.0, 4.0]), st.sampled_from([0.35, 0.5, 0.65]))
def test_prop_1_bounds_on_aorr(joint, eps, lam):
    """Prop. 1.1, 1.3: I(S;Y) ≤ ε_u; Sibson and Arimoto I_α(S;Y) ≤ α/(α−1)·ε_u (α = 2, 5)."""
    eps_u = (1 - lam) * eps
    ch = aorr_channel(joint, eps, lam=lam)
    assert mutual_information_sy(joint, ch.matrix) <= eps_u + 1e-12
    lifts = posterior_lifts(joint, ch.matrix)
    p_y = (joint.p_x @ ch.matrix)[joint.p_x @ ch.matrix > 0]
    p_s = joint.p_s
    for alpha in (2.0, 5.0):
        escort = p_s**alpha / np.sum(p_s**alpha)
        for weights in (p_s, escort):
            value = alpha / (alpha - 1) * math.log(p_y @ (weights @ lifts**alpha) ** (1 / alpha))
            assert value <= alpha / (alpha - 1) * eps_u + 1e-12


@given(joints(), st.sampled_from([0.25, 1.0, 4.0]))
def test_aorr_utility_is_h_x_minus_lp_value(joint, eps):
    """I(X;Y) of the forward matrix = H(X) − LP value at the (tightened) budgets the design used."""
    half = tightened(0.5 * eps)
    rand = optimal_randomisation(joint, range(joint.n_x), half, half)
    np.testing.assert_allclose(rand.weights @ rand.posteriors, joint.p_x, atol=1e-14)
    ch = aorr_channel(joint, eps)
    assert mutual_information_xy(joint, ch.matrix) == pytest.approx(entropy_x(joint) - rand.conditional_entropy,
                                                                    abs=1e-10)


@given(joints(), st.sampled_from([0.5, 1.0, 2.0, 8.0]))
def test_srr_uses_the_subset_merging_partition(joint, eps):
    srr = srr_channel(joint, eps)
    sub = subset_merging_channel(joint, eps)
    assert srr.params["subsets"] == [list(o) for o in sub.outputs if isinstance(o, tuple)]
    low = [o for o in sub.outputs if isinstance(o, int)]
    assert list(srr.outputs[:len(low)]) == low
    for k, x in enumerate(low):  # low-risk symbols released unchanged
        assert srr.matrix[x, k] == 1.0


def test_srr_repairs_the_e4_case_instead_of_falling_back():
    """Paper Algorithm 2 line 17 would fall back to the non-private merged {2}; ours absorbs x1 first."""
    ch = srr_channel(E4_JOINT, 2.0)
    assert ch.params["subsets"] == [[1, 2]] and ch.params["absorbed"] == [1]
    assert check_alip(E4_JOINT, ch, 1.0, 1.0) is None
    assert mutual_information_xy(E4_JOINT, ch.matrix) >= mutual_information_xy(
        E4_JOINT, subset_merging_channel(E4_JOINT, 2.0).matrix) - 1e-12


def test_17x5_aorr_matches_the_note_scale():
    """One paper-size instance: AORR is ALIP, beats SRR, and every output posterior has support ≤ |S|."""
    rng = np.random.default_rng(2023)
    p = rng.random((5, 17))
    joint = Joint(p / p.sum())
    ch = aorr_channel(joint, 2.0)
    assert check_alip(joint, ch, 1.0, 1.0) is None
    assert mutual_information_xy(joint, ch.matrix) >= mutual_information_xy(joint, srr_channel(joint, 2.0).matrix)
    post = joint.p_x[:, None] * ch.matrix
    assert np.all((post > 0).sum(axis=0) <= 5)


def test_a_degenerate_lp_basis_leaves_no_round_off_output():
    """The zero-weight vertex of a degenerate basis is dropped, not released as an output of P_Y ≈ 2e−15: its
    ~1e−15 forward entries, quantised to multiples of 2⁻⁶³, broke ε_u = 0.0875 by 2e−5, so the exact check
    of the quantised channel refused the design. Dropping it loses no utility (its weight was 0)."""
    joint, eps_l, eps_u = DEGENERATE_BASIS, 0.25 * 0.65, 0.25 * 0.35
    ch = aorr_channel(joint, 0.25, lam=0.65)  # raised DesignError (exact verification) before the fix
    assert check_alip(joint, ch, eps_l, eps_u) is None
    # every released probability is so far above 2⁻⁶³ that quantising it moves it by < DESIGN_MARGIN relative
    assert ch.matrix[ch.matrix > 0].min() > 2.0**-63 / DESIGN_MARGIN
    # utility = H(X) − the optimum of the LP over all vertices and the merged point, solved here directly
    lifts = joint.x_given_s / joint.p_x
    cols = np.vstack([polytope_vertices(lifts, np.full(joint.n_s, math.exp(-tightened(eps_l))),
                                        np.full(joint.n_s, math.exp(tightened(eps_u)))), joint.p_x])
    cost = -np.sum(cols * np.log(np.where(cols > 0, cols, 1.0)), axis=1)
    lp = linprog(cost, A_eq=cols.T, b_eq=joint.p_x, bounds=(0, None), method="highs")
    assert lp.status == 0
    assert mutual_information_xy(joint, ch.matrix) == pytest.approx(entropy_x(joint) - lp.fun, abs=1e-9)


def test_polish_drops_only_weights_that_are_zero_up_to_round_off():
    """On the independent columns e0, e1, c = (0, ½, ½) the target (0.2, 0.4, 0.4) is 0.2·e0 + 0.8·c exactly:
    a round-off weight on e1 goes. The target (0.5, 0.5 − 1e−13, 1e−13) needs its tiny e2 weight: it stays."""
    cols = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.5, 0.5]])
    target = np.array([0.2, 0.4, 0.4])
    beta = _polish(cols, target, np.array([0.2, 3e-15, 0.8]))
    assert beta[1] == 0.0
    np.testing.assert_allclose(beta, [0.2, 0.0, 0.8], rtol=1e-15)
    tiny = np.array([0.5, 0.5 - 1e-13, 1e-13])
    np.testing.assert_allclose(_polish(np.eye(3), tiny, tiny), tiny, rtol=1e-15)


@pytest.mark.parametrize("design", [aorr_channel, srr_channel])
@pytest.mark.parametrize(("eps", "lam", "message"), [
    (0.0, 0.5, "epsilon must be finite and > 0"),
    (float("nan"), 0.5, "epsilon must be finite and > 0"),
    (1.0, 1.5, "lam must lie in"),
    ("1", 0.5, "epsilon must be a number"),
])
def test_bad_budgets_are_refused(design, eps, lam, message):
    with pytest.raises(DesignError, match=message):
        design(CASE_A, eps, lam=lam)


def test_enumeration_in_small_chunks_finds_the_same_vertices(monkeypatch):
    """Supports are solved in chunks of CHUNK; a tiny chunk size must not change the vertex set."""
    import streamguard.perturbation.aorr as aorr

    rng = np.random.default_rng(7)
    p = rng.random((3, 7))
    joint = Joint(p / p.sum())
    args = (joint.s_given_x.T, math.exp(-0.4) * joint.p_s, math.exp(0.6) * joint.p_s)
    whole = polytope_vertices(*args)
    monkeypatch.setattr(aorr, "CHUNK", 3)
    np.testing.assert_array_equal(polytope_vertices(*args), whole)
    assert len(whole) > 7
