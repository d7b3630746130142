"""Guarantees of perturbation/ at the edges of floating point and of hostile input:

* a designer never returns a channel breaking its own claim, even when a product of two small
  probabilities underflows in its float lifts: the exact verifier has the last word (and the float
  lifts are formed as conditionals over marginals, so such joints are designed, not refused);
* budgets and claim levels above ``model.MAX_LEVEL`` (1000 nats) are refused, by every designer
  and by the verifier; up to it, randomized response keeps the near-identity table it claims;
* hostile numbers in a (resealed) channel file — integers beyond the float range, ε = 1e19,
  α = 1e300 — give a named error or a decided verdict, quickly, never a raw overflow;
* metrics of extreme joints are never NaN, so a verified channel can always be saved;
* a non-Markov channel row the joint cannot reach may not release an output of probability 0.

Every expected value is computed here, exactly (fractions) or from the matrix, independently of the
code under test.
"""

from __future__ import annotations

import copy
import decimal
import json
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from streamguard import MarkovChain
from streamguard.perturbation.channel_file import (ChannelFileError, channel_document, document_digest,
                                                   load_channel, read_document, save_channel)
from streamguard.perturbation.designers import DESIGNERS, design
from streamguard.perturbation.linear_reduction import alpha_for_ldp, alpha_for_loglift, ldp_leakage, \
    log_lift_leakage, target
from streamguard.perturbation.markov_prior import MarkovPriorSampler
from streamguard.perturbation.metrics import channel_metrics, metrics_json
from streamguard.perturbation.model import MAX_LEVEL, Claim, DesignError, Joint, ModelInputError, \
    PerturbationChannel
from streamguard.perturbation.randomized_response import rr_channel
from streamguard.perturbation.rr_prior import rr_prior_channel
from streamguard.perturbation.verify import ClaimViolation, verify

# P_S(0) = 1.5e-323 (subnormal): the float product P_S(0)·P_X(x) loses most of its bits, so lifts
# formed as P_SX/(P_S·P_X) read exactly 1, while the exact lift l(0, 0) = (1/3)/0.4 = 0.8333….
SUBNORMAL_JOINT = [[5e-324, 1e-323], [0.4, 0.6]]
GRID = Fraction(1, 2 ** 52)


def _exact_lifts(joint: list[list[float]], matrix: np.ndarray) -> list[Fraction]:
    """Every lift l(s, y) = P_SY(s, y)/(P_S(s)·P_Y(y)) with P_Y(y) > 0, exactly, for rows by x."""
    p = [[Fraction(v) for v in row] for row in joint]
    total = sum(map(sum, p))
    p = [[v / total for v in row] for row in p]
    w = [[Fraction(float(v)) for v in row] for row in matrix]
    w = [[v / sum(row) for v in row] for row in w]
    ps = [sum(row) for row in p]
    psy = [[sum(p[s][x] * w[x][y] for x in range(len(w))) for y in range(len(w[0]))] for s in range(len(p))]
    py = [sum(psy[s][y] for s in range(len(p))) for y in range(len(w[0]))]
    return [psy[s][y] / (ps[s] * py[y]) for y in range(len(py)) if py[y] > 0 for s in range(len(p))]


def _log(q: Fraction) -> float:
    return math.log(q.numerator) - math.log(q.denominator)


# ------------------------------------------------------------------------------------------------
# Designers: the exact verifier has the last word
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind,measure", [("aorr", None), ("srr", None), ("watchdog", "alip"),
                                          ("watchdog", "lip"), ("watchdog-subset", "alip")])
def test_designer_keeps_its_lift_claim_exactly_when_float_products_underflow(kind, measure):
    """The budget (ε_l, ε_u) = (0.005, 0.005) is far below the exact |log l(0, 0)| = 0.18 of the
    identity release, which float products P_S·P_X would report as 0."""
    joint = Joint(SUBNORMAL_JOINT)
    channel = design(kind, joint, 0.01, measure=measure)
    assert verify(channel, joint).ok
    lifts = _exact_lifts(SUBNORMAL_JOINT, channel.matrix)
    assert max(abs(_log(lv)) for lv in lifts if lv > 0) <= 0.005
    assert all(lv > 0 for lv in lifts)  # min-lift side: no lift 0 (that would be ε_l = ∞)


def test_subnormal_joint_is_merged_by_the_watchdog():
    """Both symbols break the budget (exact |log l| = 0.18 and 0.105), so complete merging releases one
    group — which the float split, reading every lift as 1, would have left unmerged."""
    assert design("watchdog", Joint(SUBNORMAL_JOINT), 0.01, measure="alip").outputs == ((0, 1),)


@pytest.mark.parametrize("kind", ["aorr", "srr"])
def test_aorr_row_that_underflows_is_a_design_error_naming_the_kind(kind):
    """P_X(0) = 5e−324: β·v(0)/P_X(0) is not a distribution in floating point."""
    joint = Joint([[5e-324, 0.0, 0.3], [0.0, 5e-324, 0.7]])
    with pytest.raises(DesignError, match=f"^{kind}: row x=0 "):
        design(kind, joint, 1.0)


# ------------------------------------------------------------------------------------------------
# The level cap: refused above MAX_LEVEL, kept right up to it
# ------------------------------------------------------------------------------------------------

JOINT = Joint([[0.3, 0.1, 0.1], [0.1, 0.2, 0.2]])
PRIOR = [0.2, 0.3, 0.5]


def test_every_designer_refuses_a_budget_above_the_cap():
    assert MAX_LEVEL == 1000.0
    for kind, spec in DESIGNERS.items():
        model = Joint.from_prior(PRIOR) if spec.model == "prior" else JOINT
        with pytest.raises(DesignError, match="above 1000: not a privacy guarantee"):
            design(kind, model, 1000.5)
    with pytest.raises(DesignError, match="above 1000"):
        rr_prior_channel(PRIOR, epsilon=1e7)
    with pytest.raises(DesignError, match="above 1000"):
        MarkovPriorSampler(MarkovChain(np.array([[0.9, 0.1], [0.2, 0.8]]), np.array([0.5, 0.5])), 3, epsilon=1e7)


def test_markov_prior_sampler_refuses_a_budget_whose_kernel_is_the_identity():
    """e^{−800} underflows to 0: the kernel would release every row unchanged."""
    chain = MarkovChain(np.array([[0.9, 0.1], [0.2, 0.8]]), np.array([0.5, 0.5]))
    with pytest.raises(DesignError, match="identity"):
        MarkovPriorSampler(chain, 3, epsilon=800.0)


@pytest.mark.parametrize("kind", ["aorr", "srr", "watchdog", "watchdog-subset", "linear", "linear-optimal",
                                  "linear-nonmarkov"])
def test_designers_serve_budgets_up_to_the_cap(kind):
    """ε = 1000 (e^ε overflows a float): a verified channel, no OverflowError."""
    assert verify(design(kind, JOINT, 1000.0), JOINT).ok


def test_watchdog_threshold_beyond_float_range_is_a_named_refusal():
    """χ² threshold (e^{ε_u} − 1)² with ε_u = 500 overflows a float."""
    with pytest.raises(DesignError, match="measure 'chi2'.*overflows a float"):
        design("watchdog", JOINT, 1000.0, measure="chi2")


@pytest.mark.parametrize("eps", [720.0, 1000.0])
def test_linear_alpha_at_a_large_budget_meets_it(eps):
    """α(ε) without e^ε: the target's leakages stay within ε (the joint's are finite, ≤ ln 4)."""
    for measure, alpha_of, leak in (("ldp", alpha_for_ldp, lambda t: ldp_leakage(t)),
                                    ("log_lift", alpha_for_loglift, lambda t: log_lift_leakage(JOINT.p_s, t))):
        a = alpha_of(JOINT, eps)
        assert a == 0.0 and leak(target(JOINT, a)) <= eps, measure


@pytest.mark.parametrize("m", [2, 5])
@pytest.mark.parametrize("eps", [745.0, 746.0, 1000.0])
def test_rr_keeps_the_near_identity_table_where_exp_minus_epsilon_underflows(m, eps):
    """One unit of 2⁻⁵² on each changed value: keep/change ratio 2⁵² − m + 1 ≤ e^37, distortion
    (m − 1)·2⁻⁵² — not the constant table (distortion (m − 1)/m) that e^{−746} = 0 used to give."""
    ch = rr_channel(m, epsilon=eps)
    w = [[Fraction(float(v)) for v in row] for row in ch.matrix]
    assert all(w[x][y] == (1 - (m - 1) * GRID if x == y else GRID) for x in range(m) for y in range(m))
    assert ch.claims[0].params["epsilon"] == eps
    assert Fraction(ch.claims[1].params["D"]) >= (m - 1) * GRID and ch.claims[1].params["D"] < 1e-14
    assert verify(ch, Joint.from_prior(np.full(m, 1.0 / m))).ok


def test_verifier_refuses_a_claim_level_above_the_cap_and_accepts_it_at_the_cap():
    joint = Joint.from_prior([0.5, 0.5])
    ch = rr_channel(2, epsilon=1000.0)
    assert verify(ch, joint).ok
    over = PerturbationChannel("rr", ch.matrix, "x", 2, 2, (0, 1), (Claim("ldp_x", {"epsilon": 1000.5}),))
    with pytest.raises(ClaimViolation, match="epsilon = 1000.5 nats is above 1000"):
        verify(over, joint)


# ------------------------------------------------------------------------------------------------
# Hostile numbers in a resealed channel file
# ------------------------------------------------------------------------------------------------


def _doc_with(mutate):
    doc = copy.deepcopy(channel_document(rr_channel(2, epsilon=1.0), Joint.from_prior([0.5, 0.5])))
    mutate(doc)
    doc["digest"] = document_digest(doc)  # the digest is a seal, not a signature: anyone can reseal
    return json.loads(json.dumps(doc))


def _claim_param(name, value):
    return lambda d: d["channel"]["claims"][0]["params"].__setitem__(name, value)


@pytest.mark.parametrize("mutate,error,match", [
    (_claim_param("epsilon", 1e19), ClaimViolation, "above 1000: not a privacy guarantee"),
    (_claim_param("epsilon", 1e7), ClaimViolation, "above 1000: not a privacy guarantee"),
    (_claim_param("epsilon", 10 ** 400), ChannelFileError, r"ldp_x\.epsilon is too large for a float"),
    (lambda d: d["channel"]["channel"][0].__setitem__(0, 10 ** 400), ChannelFileError,
     "channel: contains a number too large for a float"),
    (lambda d: d["model"]["prior"].__setitem__(0, 10 ** 400), ChannelFileError,
     "prior: contains a number too large for a float"),
    (lambda d: d["metrics"].__setitem__("ldp_x", 10 ** 400), ChannelFileError, "'ldp_x' is not a finite number"),
], ids=["eps-1e19", "eps-1e7", "eps-int-1e400", "matrix-int-1e400", "prior-int-1e400", "metric-int-1e400"])
def test_hostile_channel_file_fails_with_a_named_error(mutate, error, match):
    with pytest.raises(error, match=match):
        read_document(_doc_with(mutate))


def test_alpha_1e300_claim_is_decided_not_overflowed():
    """Under the uniform prior the lifts of RR are 2·W(y|x); Λ_α → max lift as α → ∞ and, at
    α = 1e300, (½·l₁^α + ½·l₂^α)^{1/α} = l_max·2^{−1e−300}: it holds just above l_max, not just below."""
    ch = rr_channel(2, epsilon=1.0)
    l_max = 2 * Fraction(float(ch.matrix.max()))
    for factor, holds in ((1 + 1e-12, True), (1 - 1e-12, False)):
        claim = {"notion": "alpha_lift", "params": {"alpha": 1e300, "threshold": float(l_max) * factor}}
        doc = _doc_with(lambda d: d["channel"]["claims"].append(claim))
        if holds:
            channel, _ = read_document(doc)
            assert channel.claims[-1].params["alpha"] == 1e300
        else:
            with pytest.raises(ClaimViolation, match="α-lift ≤ threshold VIOLATED"):
                read_document(doc)


def test_inverse_measure_of_a_tiny_lift_is_violated_with_an_infinite_realised_value():
    """l(0, y=1) ≈ 2e−200 gives Ψ_χ²(1) ≥ ½·(1e200/2)² ≈ 1e399 > 1e308, beyond the float range."""
    joint = Joint.from_prior([0.5, 0.5])
    channel = PerturbationChannel("rr", [[1 - 1e-200, 1e-200], [0.5, 0.5]], "x", 2, 2, (0, 1),
                                  (Claim("chi2_lift_inverse", {"threshold": 1e308}),))
    report = verify(channel, joint)
    assert not report.ok and report.failures[0].realised == math.inf


@st.composite
def _cases(draw):
    n_s, n_x = draw(st.integers(2, 3)), draw(st.integers(2, 4))
    p = np.array([[draw(st.floats(0.02, 1.0)) for _ in range(n_x)] for _ in range(n_s)])
    W = np.array([[draw(st.floats(0.02, 1.0)) for _ in range(n_x)] for _ in range(n_x)])
    return Joint(p / p.sum()), W / W.sum(axis=1, keepdims=True)


def _alpha_measure(joint: Joint, matrix: np.ndarray, alpha: float, inverse: bool) -> float:
    """max_y (Σ_s P_S(s)·l(s, y)^{±α})^{1/α}, from the exact lifts, in 60-digit decimal arithmetic."""
    ctx = decimal.Context(prec=60, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)
    lifts = _exact_lifts(joint.p.tolist(), matrix)
    p = [Fraction(v) for v in joint.p.sum(axis=1)]
    p_s = [v / sum(p) for v in p]
    a = ctx.create_decimal(alpha) * (-1 if inverse else 1)
    worst = decimal.Decimal(0)
    for y in range(len(lifts) // joint.n_s):
        total = decimal.Decimal(0)
        for s in range(joint.n_s):
            q = lifts[y * joint.n_s + s]
            ln_l = ctx.subtract(ctx.ln(decimal.Decimal(q.numerator)), ctx.ln(decimal.Decimal(q.denominator)))
            weight = ctx.divide(decimal.Decimal(p_s[s].numerator), decimal.Decimal(p_s[s].denominator))
            total = ctx.add(total, ctx.multiply(weight, ctx.exp(ctx.multiply(a, ln_l))))
        worst = max(worst, ctx.exp(ctx.divide(ctx.ln(total), abs(a))))
    return float(worst)


@given(_cases(), st.sampled_from([1e-6, 0.5, 50.0, 1e6]), st.booleans(), st.sampled_from([1e-6, -1e-6]))
def test_alpha_measures_are_decided_for_tiny_and_huge_alpha(case, alpha, inverse, rel):
    """Threshold = the measure·(1 ± 10⁻⁶): holds for +, violated for −, for α from 10⁻⁶ (the
    weighted geometric mean of the lifts) to 10⁶ (their maximum)."""
    joint, matrix = case
    value = _alpha_measure(joint, matrix, alpha, inverse)
    assume(math.isfinite(value))
    notion = "alpha_lift_inverse" if inverse else "alpha_lift"
    ch = PerturbationChannel("test", matrix, "x", joint.n_s, joint.n_x, tuple(range(joint.n_x)),
                             (Claim(notion, {"alpha": alpha, "threshold": value * (1 + rel)}),))
    report = verify(ch, joint)
    assert report.ok == (rel > 0), [c.message("test") for c in report.failures]
    assert all(c.realised == pytest.approx(value, rel=2e-6) for c in report.failures)  # a y within 10⁻⁶ of the max


# ------------------------------------------------------------------------------------------------
# Metrics of extreme joints; models with numbers beyond the float range
# ------------------------------------------------------------------------------------------------


def test_identity_channel_on_a_tiny_joint_saves_and_loads(tmp_path):
    """P_S·P_Y = 1e−170·1e−170 underflows: lifts and mutual information are still finite. The exact
    lifts: l(0, 0) = 0, the others 1/(1 + 1e−170) and (1e−170/(1 + 1e−170))/1e−170, both 1 in floats."""
    joint = Joint([[0.0, 1e-170], [1e-170, 1.0]])
    channel = PerturbationChannel("linear", np.eye(2), "x", 2, 2, (0, 1), (Claim("distortion", {"D": 0.0}),))
    metrics = channel_metrics(channel, joint)
    assert not any(math.isnan(v) for v in metrics.values())
    assert metrics["min_lift"] == 0.0 and metrics["max_lift"] == 1.0
    assert metrics["mi_xy"] == pytest.approx(metrics["h_x"], rel=1e-12)  # Y = X
    save_channel(tmp_path / "c.json", channel, joint)
    loaded, _ = load_channel(tmp_path / "c.json")
    assert np.array_equal(loaded.matrix, channel.matrix)


def test_a_nan_metric_is_a_named_error_not_invalid_json():
    with pytest.raises(ModelInputError, match="metrics: mi_xy is not a number"):
        metrics_json({"ldp_x": 1.0, "mi_xy": math.nan})


@pytest.mark.parametrize("build", [
    lambda: Joint([[10 ** 400, 0.5], [0.25, 0.25]]),
    lambda: Joint.from_prior([10 ** 400, 0.5]),
    lambda: PerturbationChannel("rr", [[10 ** 400, 0.0], [0.5, 0.5]], "x", 2, 2, (0, 1)),
], ids=["joint", "prior", "channel"])
def test_integers_beyond_the_float_range_are_model_input_errors(build):
    with pytest.raises(ModelInputError, match="too large for a float"):
        build()


# ------------------------------------------------------------------------------------------------
# Rows the joint cannot reach
# ------------------------------------------------------------------------------------------------

SX_JOINT = Joint([[0.5, 0.0], [0.25, 0.25]])  # P_SX(0, 1) = 0: row (s=0, x=1) is unreachable


def _sx_channel(unreachable_row):
    matrix = [[0.5, 0.5, 0.0], unreachable_row, [0.5, 0.5, 0.0], [0.5, 0.5, 0.0]]
    return PerturbationChannel("linear-nonmarkov", matrix, "sx", 2, 2, (0, 1, (0, 1)),
                               (Claim("ldp_s", {"epsilon": 0.0}), Claim("lip", {"epsilon": 0.0})))


def test_unreachable_row_releasing_an_impossible_output_is_refused():
    """Output 2 has P_Y = 0 under the joint, yet record (s=0, x=1) — which the sampler accepts —
    releases it with probability 1 and so reveals s = 0: every claim fails there."""
    channel = _sx_channel([0.0, 0.0, 1.0])
    report = verify(channel, SX_JOINT)
    assert not report.ok
    assert {c.claim.notion for c in report.failures} == {"ldp_s", "lip"}
    assert all(c.where.startswith("row (s=0, x=1), output y=2") for c in report.failures
               if c.constraint.startswith("Pr(y|row)"))
    with pytest.raises(ClaimViolation, match=r"Pr\(y\|row\) = 0 where P_Y\(y\) = 0 VIOLATED at row \(s=0, x=1\)"):
        channel_document(channel, SX_JOINT)


def test_unreachable_row_releasing_live_outputs_verifies():
    """The same row releasing outputs the reachable rows release: every reachable row is (½, ½, 0),
    so P(y|s) is the same for both s and the ε = 0 claims hold exactly."""
    assert verify(_sx_channel([0.0, 1.0, 0.0]), SX_JOINT).ok
