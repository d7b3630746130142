"""E_d (per-row m-ary randomized response) and h, h⁻¹: notes/001 §4, §6.1, §7.1, §10, §11."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamguard.perturbation import dyadic
from streamguard.perturbation.model import DesignError, Joint
from streamguard.perturbation.randomized_response import h, h_inv, rr_channel
from streamguard.perturbation.sampler import ChannelSampler
from streamguard.perturbation.verify import require_valid
from streamguard.sampling import SeededSource

# -- h and h⁻¹: notes/001 §10 ------------------------------------------------------------------------


@pytest.mark.parametrize(("eps", "n", "m", "expected"), [
    (1, 1, 2, 0.268941), (1, 2, 3, 0.847766), (1, 3, 3, 1.271649), (2, 3, 3, 0.639042),
    (1, 3, 2, 0.806824), (1.5, 10, 4, 4.009790),
])
def test_h_reference_values(eps: float, n: int, m: int, expected: float) -> None:
    assert h(eps, m, n) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize(("D", "n", "m", "expected"), [
    (0.1, 1, 2, math.log(9)), (0.2, 1, 3, math.log(8)), (1, 2, 3, math.log(2)), (2.5, 10, 4, math.log(9)),
    (1.6, 3, 2, -0.133531),
])
def test_h_inv_reference_values(D: float, n: int, m: int, expected: float) -> None:
    assert h_inv(D, m, n) == pytest.approx(expected, abs=1e-6)


def test_h_ends_and_no_overflow() -> None:
    assert h(0, 3, 2) == pytest.approx(2 * 2 / 3)
    assert h(math.inf, 3) == 0.0
    assert h(1000.0, 4, 5) == pytest.approx(5 * 3 * math.exp(-1000.0), rel=1e-12)  # underflows to 0 cleanly
    assert h_inv(0, 3) == math.inf
    assert h_inv(1, 3) == -math.inf
    assert h_inv(1e-300, 2) == pytest.approx(-math.log(1e-300), rel=1e-12)


@given(st.floats(0, 30), st.integers(2, 8), st.integers(1, 10))
def test_h_inv_inverts_h(eps: float, m: int, n: int) -> None:
    assert h_inv(h(eps, m, n), m, n) == pytest.approx(eps, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("bad", [-0.1, math.nan, "1", True])
def test_bad_budgets_are_refused(bad: object) -> None:
    with pytest.raises(DesignError, match="epsilon"):
        rr_channel(3, epsilon=bad)  # type: ignore[arg-type]
    with pytest.raises(DesignError, match="distortion"):
        rr_channel(3, distortion=bad if bad != -0.1 else 1.5)  # type: ignore[arg-type]


def test_exactly_one_budget_and_a_real_alphabet() -> None:
    with pytest.raises(DesignError, match="exactly one"):
        rr_channel(3)
    with pytest.raises(DesignError, match="exactly one"):
        rr_channel(3, epsilon=1.0, distortion=0.2)
    with pytest.raises(DesignError, match="alphabet"):
        rr_channel(1, epsilon=1.0)


# -- E_d: notes/001 §6.1, §10 ---------------------------------------------------------------------------


def test_rr_reference_tables() -> None:
    """§10: E_d at D = 1/10 for m = 2 is [[.9, .1], [.1, .9]]; at D = 1/5 for m = 3 rows (.8, .1, .1)."""
    assert rr_channel(2, distortion=0.1).matrix == pytest.approx(np.array([[0.9, 0.1], [0.1, 0.9]]), abs=1e-15)
    ch = rr_channel(3, epsilon=math.log(8))
    assert ch.matrix == pytest.approx(np.full((3, 3), 0.1) + 0.7 * np.eye(3), abs=1e-15)
    assert ch.claims[0].params["epsilon"] == math.log(8)
    assert ch.claims[1].params["D"] == pytest.approx(0.2, abs=1e-15)


def test_identity_is_refused_unless_allowed() -> None:
    for kw in ({"epsilon": math.inf}, {"distortion": 0.0}, {"distortion": 1e-17}):
        with pytest.raises(DesignError, match="identity"):
            rr_channel(4, **kw)  # type: ignore[arg-type]
    ch = rr_channel(4, distortion=0.0, allow_identity=True)
    assert np.array_equal(ch.matrix, np.eye(4))
    assert ch.claims[0].params["epsilon"] == math.inf


def test_zero_epsilon_and_large_distortion_give_an_input_independent_output() -> None:
    for ch in (rr_channel(3, epsilon=0.0), rr_channel(3, distortion=0.9), rr_channel(5, distortion=1.0)):
        assert np.all(ch.matrix == ch.matrix[0])  # identical rows: exactly 0-DP
        assert dyadic.ldp_ratio(np.rint(ch.matrix * dyadic.ONE).astype(np.int64)) == 1
    # just below (m−1)/m the table is still RR, with a tiny level
    ch = rr_channel(3, distortion=2 / 3)
    assert 0 < ch.claims[0].params["epsilon"] < 1e-14
    assert ch.claims[1].params["D"] == 2 / 3


def test_huge_epsilon_keeps_every_output_possible() -> None:
    """ε = 40: c = e^{-40}/… is below the 2⁻⁵² grid; it is rounded *up* to one unit, never to 0."""
    ch = rr_channel(3, epsilon=40.0)
    assert ch.matrix.min() == 2.0**-52
    require_valid(ch, Joint.from_prior([0.2, 0.3, 0.5]))


def _units(matrix: np.ndarray) -> np.ndarray:
    units = matrix * dyadic.ONE
    assert np.array_equal(units, np.rint(units)), "entries must be multiples of 2^-52"
    return units.astype(np.int64)


@given(st.integers(2, 8), st.floats(0, 14))
def test_rr_by_epsilon_is_exactly_eps_ldp_with_distortion_h(m: int, eps: float) -> None:
    ch = rr_channel(m, epsilon=eps)
    units = _units(ch.matrix)
    assert (units.sum(axis=1) == dyadic.ONE).all()
    ratio = dyadic.ldp_ratio(units)
    assert dyadic.within(ratio, eps)  # exact: keep/change ≤ e^ε
    level = math.log(ratio) if ratio != 1 else 0.0
    if ratio != 1:  # the RR table (not the constant fall-back for tiny ε)
        assert level == pytest.approx(eps, abs=1e-9)
        assert ch.claims[1].params["D"] == pytest.approx(h(eps, m), abs=1e-12)
    else:
        assert eps < 1e-10 or eps == 0
    assert Fraction(ch.claims[1].params["D"]) >= dyadic.distortion(units)
    prior = np.random.default_rng(m).dirichlet(np.ones(m))
    require_valid(ch, Joint.from_prior(prior / prior.sum()))


@given(st.integers(2, 8), st.floats(1e-6, 1.0))
def test_rr_by_distortion_meets_d_exactly_with_eps_h_inv(m: int, D: float) -> None:
    ch = rr_channel(m, distortion=D)
    units = _units(ch.matrix)
    assert dyadic.distortion(units) <= Fraction(D)  # worst input, exactly
    eps = ch.claims[0].params["epsilon"]
    assert dyadic.within(dyadic.ldp_ratio(units), eps)
    if D < (m - 1) / m * (1 - 1e-9):
        assert eps == pytest.approx(h_inv(D, m), rel=1e-9, abs=1e-12)
    else:
        assert eps < 1e-12


def test_sampled_rr_outputs_follow_the_table() -> None:
    """The sampler realises the stored table exactly (multiples of 2⁻⁵²), and draws follow it."""
    ch = rr_channel(4, epsilon=1.2)
    sampler = ChannelSampler(ch)
    assert np.array_equal(sampler.realised_matrix(), ch.matrix)
    x = np.repeat(np.arange(4), 50_000)
    y = sampler.sample(x, source=SeededSource(7))
    observed = np.array([np.bincount(y[x == a], minlength=4) for a in range(4)])
    expected = ch.matrix * 50_000
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    assert chi2 < 40.0  # 12 degrees of freedom: P(χ² > 40) ≈ 7e-5
