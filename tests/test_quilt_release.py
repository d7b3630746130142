"""Windowed MQM aggregate releases (streamguard.quilt.release): plumbing, noise law, records, errors."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from streamguard import MarkovChain
from streamguard.quilt import QuiltModel, sigma_inf, sigma_max
from streamguard.quilt import release as aggregate
from streamguard.quilt.noise import DiscreteLaplace
from streamguard.quilt.release import ReleaseError
from streamguard.sampling import CsprngSource, SeededSource

C1 = [[0.9, 0.1], [0.2, 0.8]]
C4 = [[0.8, 0.15, 0.05], [0.1, 0.8, 0.1], [0.05, 0.15, 0.8]]


@pytest.fixture(scope="module")
def c4():
    model = QuiltModel(MarkovChain(C4), "stat")
    return model, sigma_inf(model, 1.0)


def _noise(beta: float, n: int, seed: int) -> np.ndarray:
    """The noise a release with this seed must have added (same words, same law)."""
    return DiscreteLaplace.at_least(beta).sample(n, SeededSource(seed))


def test_histogram_adds_iid_noise_of_scale_two_sigma_to_the_exact_counts(c4):
    model, scale = c4
    states = np.array([0, 2, 2, 1, 0, 2, 1, 1, 2])
    rel = aggregate.histogram(states, 40, model, scale, SeededSource(3))
    exact = np.bincount(states, minlength=3)
    np.testing.assert_array_equal(np.array(rel.values) - exact, _noise(2 * scale.sigma, 3, 3))
    assert (rel.kind, rel.lo, rel.hi, rel.window_length) == ("histogram", 40, 48, 9)
    assert rel.lipschitz == 2 and rel.beta == pytest.approx(2 * scale.sigma) and rel.grid == 1
    assert rel.load == pytest.approx(1 / scale.sigma)  # ρ = L/β = 1/σ per position
    assert Fraction(rel.noise_num, rel.noise_den) >= Fraction(rel.beta)  # realised ≥ claimed
    assert rel.epsilon == 1.0 and rel.model == model.identifier and rel.mode == "stat"
    assert rel.t_independent and rel.T is None and rel.witness == scale.witness.as_dict()
    assert rel.deterministic and rel.sampler == "seeded"


def test_count_of_one_state(c4):
    model, scale = c4
    states = [1, 1, 0, 2, 1]
    rel = aggregate.count(states, 0, 1, model, scale, SeededSource(4))
    assert rel.values[0] - 3 == _noise(scale.sigma, 1, 4)[0]
    assert rel.lipschitz == 1 and rel.beta == pytest.approx(scale.sigma) and rel.load == pytest.approx(1 / scale.sigma)
    assert rel.query == {"k": 3, "state": 1}


def test_mean_is_released_on_the_stated_grid(c4):
    model, scale = c4
    values, v_lo, v_hi, step = [0.0, 2.52, 9.99], 0.0, 10.0, 0.05
    q = aggregate.quantise_values(values, v_lo, v_hi, step)
    np.testing.assert_array_equal(q, [0, 50, 200])  # data-independent rounding to the grid
    states = np.array([2, 1, 1, 0, 2, 2])
    W = len(states)
    rel = aggregate.mean(states, 7, values, v_lo, v_hi, step, model, scale, SeededSource(5))
    G = 200  # (v_hi − v_lo)/step grid steps: the Lipschitz constant in grid units
    z = _noise(G * scale.sigma, 1, 5)[0]
    assert rel.values[0] == pytest.approx(v_lo + step * (q[states].sum() + z) / W, rel=1e-12)
    assert rel.lipschitz == pytest.approx((v_hi - v_lo) / W) and rel.grid == pytest.approx(step / W)
    assert rel.beta == pytest.approx((v_hi - v_lo) / W * scale.sigma)
    assert rel.load == pytest.approx(1 / scale.sigma)
    assert rel.noise_scale >= G * scale.sigma and rel.noise_scale == pytest.approx(rel.beta / rel.grid)
    assert rel.query["grid_units"] == [0, 50, 200]


def test_clipping_is_post_processing_of_the_output_only(c4):
    model, scale = c4
    states = [0, 0, 1]
    raw = aggregate.histogram(states, 0, model, scale, SeededSource(8))
    clipped = aggregate.histogram(states, 0, model, scale, SeededSource(8), clip=True)
    np.testing.assert_array_equal(clipped.values, np.clip(raw.values, 0, 3))
    assert clipped.clipped and not raw.clipped
    m = aggregate.mean(states, 0, [0.0, 1.0, 2.0], 0.0, 2.0, 0.5, model, scale, SeededSource(9), clip=True)
    assert 0.0 <= m.values[0] <= 2.0


def test_histogram_noise_follows_the_exact_law_over_many_windows():
    """2000 windows of C1 data: noisy − exact counts against the exact discrete Laplace pmf (χ²)."""
    model = QuiltModel(MarkovChain(C1), "stat")
    scale = sigma_max(model, 2.0, 12)
    src = SeededSource(17)
    rng = np.random.default_rng(0)
    noise = []
    for _ in range(2000):
        states = rng.integers(0, 2, size=12)
        rel = aggregate.histogram(states, 0, model, scale, src)
        noise.extend(np.array(rel.values) - np.bincount(states, minlength=2))
    noise = np.array(noise)
    law = DiscreteLaplace(rel.noise_num, rel.noise_den)
    edges = np.array([-12, -6, -3, -1, 0, 1, 3, 6, 12])
    cells = np.searchsorted(edges, noise, side="left")
    observed = np.bincount(cells, minlength=len(edges) + 1)
    z = np.arange(-400, 401)
    expected = np.bincount(np.searchsorted(edges, z, side="left"), weights=law.pmf(z), minlength=len(edges) + 1)
    _, p = stats.chisquare(observed, expected / expected.sum() * len(noise))
    assert p > 1e-3


def test_release_records_serialise_and_name_no_data():
    model = QuiltModel(MarkovChain(C1), "stat")
    scale = sigma_max(model, 1.0, 20)
    rel = aggregate.histogram([0, 1, 1], 2, model, scale, CsprngSource())
    doc = json.loads(json.dumps(rel.to_json()))
    assert doc["lo"] == 2 and doc["hi"] == 4 and doc["T"] == 20 and not doc["deterministic"]
    assert doc["sampler"] == "csprng" and doc["load"] == pytest.approx(1 / scale.sigma)
    for field in ("kind", "lipschitz", "beta", "sigma", "epsilon", "model", "mode", "witness", "t_independent"):
        assert field in doc  # the ledger's aggregate-event fields
    assert set(doc["witness"]) == {"theta", "i", "a", "b", "card", "e"}


@pytest.mark.parametrize("bad_states,fragment,value", [
    ([0, 1, 7], "1 record(s) have a state outside 0..2", "7"),
    ([0, -4], "outside 0..2", "-4"),
    ([0.75, 1.0], "must be integers", "0.75"),
    ([], "non-empty", None),
])
def test_bad_windows_are_refused_without_echoing_values(c4, bad_states, fragment, value):
    model, scale = c4
    with pytest.raises(ReleaseError) as info:
        aggregate.histogram(np.array(bad_states), 0, model, scale, SeededSource(1))
    assert fragment in str(info.value)
    assert value is None or value not in str(info.value)


def test_a_window_beyond_the_chain_sigma_was_computed_for_is_refused():
    """σ_max(T): any T consecutive positions under a position-free mode, only 0..T−1 under mode q."""
    model = QuiltModel(MarkovChain(C1), "stat")
    scale = sigma_max(model, 1.0, 10)
    aggregate.count([0] * 10, 25, 0, model, scale, SeededSource(1))  # a segment of 10: fine
    with pytest.raises(ReleaseError, match="longer than the T = 10"):
        aggregate.count([0] * 11, 0, 0, model, scale, SeededSource(1))
    q_model = QuiltModel(MarkovChain(C1, [0.5, 0.5]), "q")
    q_scale = sigma_max(q_model, 1.0, 10)
    aggregate.count([0] * 5, 5, 0, q_model, q_scale, SeededSource(1))  # positions 5..9
    with pytest.raises(ReleaseError, match="beyond the 10 positions"):
        aggregate.count([0] * 5, 6, 0, q_model, q_scale, SeededSource(1))


@pytest.mark.parametrize("values,v_lo,v_hi,step,fragment", [
    ([0.0, 11.0], 0.0, 10.0, 0.5, "lie in"),
    ([0.0, 1.0], 0.0, 1.0, 0.3, "whole number"),
    ([0.0, 1.0], 1.0, 1.0, 0.5, "v_lo < v_hi"),
    ([0.0, math.nan], 0.0, 1.0, 0.5, "lie in"),
    ([0.0], 0.0, 1.0, 0.5, "one number per state"),
])
def test_bad_mean_queries_are_refused(values, v_lo, v_hi, step, fragment):
    with pytest.raises(ReleaseError, match=fragment):
        aggregate.quantise_values(values, v_lo, v_hi, step)


def test_count_state_must_exist(c4):
    model, scale = c4
    with pytest.raises(ReleaseError, match="state must be one of"):
        aggregate.count([0, 1], 0, 3, model, scale, SeededSource(1))


def test_scale_and_model_must_belong_together(c4):
    model, scale = c4
    other = QuiltModel(MarkovChain(C4), "approx")
    with pytest.raises(ReleaseError, match="mode 'stat'"):
        aggregate.histogram([0, 1], 0, other, scale, SeededSource(1))
    with pytest.raises(ReleaseError, match="one number per state"):
        aggregate.mean([0, 1], 0, [0.0, 1.0], 0.0, 1.0, 0.5, model, scale, SeededSource(1))
