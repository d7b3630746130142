"""Exact claim verification (streamguard.perturbation.verify): exact at the boundary, agrees with the
float measures of .lift/.metrics away from it, checks the quantised channel, fails closed, and every
registered designer's channel passes it (with its float leakage within the claim)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from streamguard.perturbation import Claim, DesignError, Joint, PerturbationChannel
from streamguard.perturbation import lift
from streamguard.perturbation.designers import DESIGNERS, KINDS, design
from streamguard.perturbation.metrics import channel_metrics
from streamguard.perturbation.sampler import SCALE_BITS
from streamguard.perturbation.verify import ClaimViolation, require_valid, verify

LIFT_A = Joint(np.array([[0.20, 0.15, 0.10, 0.05], [0.05, 0.10, 0.15, 0.20]]))


def _channel(matrix, claims, *, outputs=None, joint=LIFT_A) -> PerturbationChannel:
    m = np.asarray(matrix, dtype=np.float64)
    return PerturbationChannel("test", m, "x", joint.n_s, m.shape[0], tuple(outputs or range(m.shape[1])),
                               tuple(claims))


# ---------------------------------------------------------------------------------------------
# Exactness at the boundary
# ---------------------------------------------------------------------------------------------


def test_ratio_exactly_at_e_epsilon_is_decided_exactly():
    """RR with ratio exactly 3: ε one float step above ln 3 holds, one step below is violated —
    although the float log of the ratio equals the float ln 3 in both cases."""
    W = [[0.75, 0.25], [0.25, 0.75]]
    prior = Joint.from_prior([0.5, 0.5])
    up, down = math.nextafter(math.log(3), math.inf), math.nextafter(math.log(3), -math.inf)
    assert verify(_channel(W, [Claim("ldp_x", {"epsilon": up})], joint=prior), prior).ok
    report = verify(_channel(W, [Claim("ldp_x", {"epsilon": down})], joint=prior), prior)
    assert not report.ok
    assert {c.target for c in report.failures} == {"stored", "quantised"}


def test_epsilon_zero_constant_channel_holds_exactly():
    W = np.tile([0.1, 0.2, 0.7], (4, 1))
    ch = _channel(W, [Claim("ldp_x", {"epsilon": 0.0}), Claim("ldp_s", {"epsilon": 0.0}),
                      Claim("lip", {"epsilon": 0.0}), Claim("chi2_lift", {"threshold": 0.0})])
    assert require_valid(ch, LIFT_A).ok


def test_distortion_compared_exactly():
    W = [[0.75, 0.25], [0.25, 0.75]]
    prior = Joint.from_prior([0.5, 0.5])
    assert verify(_channel(W, [Claim("distortion", {"D": 0.25})], joint=prior), prior).ok
    assert not verify(_channel(W, [Claim("distortion", {"D": math.nextafter(0.25, 0)})], joint=prior), prior).ok


def test_quantised_channel_is_checked_too():
    """Entries near 2⁻⁶³: the stored ratio 2.6/1.4 < 2 holds, but the sampler's counts are 3 and 1
    (largest remainder), ratio 3 > 2: refused, naming the quantised channel."""
    u = 2.0**-SCALE_BITS
    W = [[1 - 1.4 * u, 1.4 * u], [1 - 2.6 * u, 2.6 * u]]
    prior = Joint.from_prior([0.5, 0.5])
    ch = _channel(W, [Claim("ldp_x", {"epsilon": math.log(2)})], joint=prior)
    report = verify(ch, prior)
    assert [c.target for c in report.failures] == ["quantised"]
    with pytest.raises(ClaimViolation, match=r"\(quantised\).*ldp_x.*output y=1.*realised 1\.0986"):
        require_valid(ch, prior)


def test_violation_names_constraint_without_data():
    """Y = X under the notes/003 Case A joint: the min-lift 0.4 (output 0, s = 1) breaks ε_l = 0.5;
    the message names notion, constraint, output, s and both values."""
    W = np.eye(4)
    ch = _channel(W, [Claim("alip", {"eps_l": 0.5, "eps_u": 0.5})])
    with pytest.raises(ClaimViolation) as err:
        require_valid(ch, LIFT_A)
    msg = str(err.value)
    assert "alip(eps_l=0.5, eps_u=0.5)" in msg and "min-lift" in msg and "output y=0" in msg and "s=1" in msg
    assert "realised 0.916290731874" in msg and "allowed 0.5" in msg  # −log 0.4


@pytest.mark.parametrize("claims, match", [
    ([], "states no claim"),
    ([Claim("dp", {"epsilon": 1.0})], "unknown notion"),
    ([Claim("alip", {"eps_l": 1.0})], "expected parameters eps_l, eps_u"),
    ([Claim("ldp_s", {"epsilon": -1.0})], "finite number ≥ 0"),
    ([Claim("ldp_s", {"epsilon": math.inf})], "finite number ≥ 0"),
    ([Claim("alpha_lift", {"alpha": 0.0, "threshold": 2.0})], "alpha must be > 0"),
])
def test_malformed_claims_fail_closed(claims, match):
    with pytest.raises(ClaimViolation, match=match):
        require_valid(_channel(np.full((4, 2), 0.5), claims), LIFT_A)


def test_alphabet_mismatch_refused():
    with pytest.raises(ValueError, match=r"\|X\| = 3"):
        verify(_channel(np.eye(3), [Claim("ldp_s", {"epsilon": 1.0})], joint=Joint.from_prior([0.2, 0.3, 0.5])),
               LIFT_A)


# ---------------------------------------------------------------------------------------------
# Agreement with the float measures away from the boundary
# ---------------------------------------------------------------------------------------------


@st.composite
def cases(draw):
    n_s, n_x, n_y = draw(st.integers(2, 3)), draw(st.integers(2, 4)), draw(st.integers(2, 4))
    p = np.array([[draw(st.floats(0.02, 1.0)) for _ in range(n_x)] for _ in range(n_s)])
    W = np.array([[draw(st.one_of(st.just(0.0), st.floats(0.02, 1.0))) for _ in range(n_y)] for _ in range(n_x)])
    W[W.sum(axis=1) == 0, 0] = 1.0
    joint = Joint(p / p.sum())
    ch = PerturbationChannel("test", W / W.sum(axis=1, keepdims=True), "x", n_s, n_x, tuple(range(n_y)))
    return joint, ch


def _realised(joint: Joint, ch: PerturbationChannel, notion: str, alpha: float) -> dict[str, float]:
    """Float values of each notion's parameter(s) at which the claim is exactly tight."""
    m = channel_metrics(ch, joint)
    lifts, _ = lift.channel_lifts(joint, ch)
    ps = joint.p_s
    values = {
        "ldp_x": {"epsilon": m["ldp_x"]}, "ldp_s": {"epsilon": m["ldp_s"]},
        "identifiability": {"epsilon": m["identifiability"]}, "lip": {"epsilon": m["log_lift"]},
        "alip": {"eps_l": m["alip_eps_l"], "eps_u": m["alip_eps_u"]}, "distortion": {"D": m["distortion"]},
        "l1_lift": {"threshold": lift.l1_lift(lifts, ps).max()},
        "l1_lift_inverse": {"threshold": lift.l1_lift_inverse(lifts, ps).max()},
        "chi2_lift": {"threshold": lift.chi2_lift(lifts, ps).max()},
        "chi2_lift_inverse": {"threshold": lift.chi2_lift_inverse(lifts, ps).max()},
        "alpha_lift": {"alpha": alpha, "threshold": lift.alpha_lift(lifts, ps, alpha).max()},
        "alpha_lift_inverse": {"alpha": alpha, "threshold": lift.alpha_lift_inverse(lifts, ps, alpha).max()},
    }
    return {k: float(v) for k, v in values[notion].items()}


NOTIONS = ("ldp_x", "ldp_s", "identifiability", "lip", "alip", "distortion", "l1_lift", "l1_lift_inverse",
           "chi2_lift", "chi2_lift_inverse", "alpha_lift", "alpha_lift_inverse")


@given(cases(), st.sampled_from(NOTIONS), st.sampled_from([2.0, 3.5]), st.sampled_from([1e-6, -1e-6]))
def test_exact_verdict_matches_float_measure(case, notion, alpha, rel):
    """Budget = float realised·(1 ± 10⁻⁶): the exact verdict is 'holds' for + and 'violated' for −."""
    joint, ch = case
    tight = _realised(joint, ch, notion, alpha)
    budget = {k: (v if k == "alpha" else v * (1 + rel)) for k, v in tight.items()}
    assume(all(math.isfinite(v) for v in budget.values()))
    assume(rel > 0 or any(v > 1e-9 for k, v in tight.items() if k != "alpha"))
    report = verify(PerturbationChannel(ch.kind, ch.matrix, "x", ch.n_s, ch.n_x, ch.outputs,
                                        (Claim(notion, budget),)), joint)
    assert report.ok == (rel > 0), [c.message("test") for c in report.checks]


@given(cases())
def test_infinite_levels_are_violations(case):
    joint, ch = case
    m = channel_metrics(ch, joint)
    assume(m["ldp_x"] == math.inf)
    report = verify(PerturbationChannel(ch.kind, ch.matrix, "x", ch.n_s, ch.n_x, ch.outputs,
                                        (Claim("ldp_x", {"epsilon": 50.0}),)), joint)
    assert not report.ok and report.failures[0].realised == math.inf


# ---------------------------------------------------------------------------------------------
# Every registered designer: its channel verifies, and its float leakage stays within the claim
# ---------------------------------------------------------------------------------------------

_TIGHT = {"ldp_x": "ldp_x", "ldp_s": "ldp_s", "identifiability": "identifiability", "lip": "log_lift",
          "log_lift": "log_lift", "distortion": "distortion"}


@st.composite
def designs(draw):
    kind = draw(st.sampled_from(KINDS))
    n_x = draw(st.integers(2, 4))
    if DESIGNERS[kind].model == "prior":
        p = np.array([draw(st.floats(0.05, 1.0)) for _ in range(n_x)])
        joint = Joint.from_prior(p / p.sum())
    else:
        n_s = draw(st.integers(2, 3))
        p = np.array([[draw(st.floats(0.02, 1.0)) for _ in range(n_x)] for _ in range(n_s)])
        joint = Joint(p / p.sum())
    epsilon = draw(st.floats(0.2, 3.0))
    lam = draw(st.sampled_from([0.35, 0.5, 0.65])) if DESIGNERS[kind].takes_lambda else None
    return kind, joint, epsilon, lam


@given(designs())
def test_designers_verify_and_leak_within_claims(case):
    kind, joint, epsilon, lam = case
    try:
        ch = design(kind, joint, epsilon, lam=lam)
    except DesignError:
        assume(False)  # e.g. rr-prior below ε_X: refused by the designer, never a silent channel
        return
    require_valid(ch, joint)
    m = channel_metrics(ch, joint)
    for claim in ch.claims:
        if claim.notion in _TIGHT:
            key = _TIGHT[claim.notion]
            bound = claim.params["D" if claim.notion == "distortion" else "epsilon"]
            assert m[key if key != "distortion" else "distortion"] <= bound + 1e-9
        elif claim.notion == "alip":
            assert m["alip_eps_l"] <= claim.params["eps_l"] + 1e-9
            assert m["alip_eps_u"] <= claim.params["eps_u"] + 1e-9
    assert any(c.notion in ("ldp_x", "ldp_s", "identifiability", "alip", "lip", "log_lift") for c in ch.claims)
    assert ch.kind == kind


# ---------------------------------------------------------------------------------------------
# Building blocks
# ---------------------------------------------------------------------------------------------


@given(st.integers(0, 2**3000), st.integers(1, 2**3000), st.sampled_from([40, 120]))
def test_ratio_enclosure_contains_value_and_is_tight(num, den, digits):
    from fractions import Fraction

    from streamguard.perturbation.verify import Ratio

    lo, hi = Ratio(num, den).enclose(digits)
    value = Fraction(num, den)
    assert lo <= value <= hi
    assert hi - lo <= value * Fraction(1, 10 ** (digits - 1))  # relative precision ~ digits


def test_outputs_named_alike_all_count_as_released_as_itself():
    """Two outputs both named 0 (as AORR names outputs by their posterior's support): neither is a
    distortion of x = 0."""
    prior = Joint.from_prior([0.5, 0.5])
    ch = PerturbationChannel("test", np.array([[0.5, 0.5, 0.0], [0.0, 0.2, 0.8]]), "x", 2, 2, (0, 0, 1),
                             (Claim("distortion", {"D": 0.1}),))
    assert channel_metrics(ch, prior)["distortion"] == pytest.approx(0.1)
    assert verify(ch, prior).ok


def test_a_channel_that_reveals_nothing_has_alip_budgets_of_exactly_zero():
    """Found by Hypothesis in CI: a constant channel (every x to output 0) has every lift exactly 1,
    but the float lift came out 1 + 2⁻⁵² and ε_l* = −2.2·10⁻¹⁶, a budget the exact verifier rightly
    refuses as negative. Λ ≥ 1 ≥ Ψ holds exactly, so the metrics clamp at 0 and the claim holds."""
    joint = Joint(np.array([[4, 4, 4], [2, 1, 2]], dtype=float) / 17)
    ch = PerturbationChannel("test", np.array([[1.0, 0.0]] * 3), "x", 2, 3, (0, 1), ())
    m = channel_metrics(ch, joint)
    assert m["alip_eps_l"] == 0.0 and 0.0 <= m["alip_eps_u"] < 1e-15
    claim = {"eps_l": m["alip_eps_l"], "eps_u": m["alip_eps_u"]}
    report = verify(PerturbationChannel(ch.kind, ch.matrix, "x", 2, 3, ch.outputs, (Claim("alip", claim),)), joint)
    assert report.ok
