"""E_i under a Markov-chain prior, sequential sampler (notes/001 §7.5): the exact law of what is
drawn against the brute-force E_i and against its identifiability claim; sampled frequencies."""

from __future__ import annotations

import math
from itertools import accumulate, product

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamguard.model.chain import MarkovChain
from streamguard.perturbation import dyadic
from streamguard.perturbation.identifiability import e_i_matrix, feasibility_threshold, hamming_matrix
from streamguard.perturbation.markov_prior import MarkovPriorSampler, markov_prior_tensor
from streamguard.perturbation.model import DesignError
from streamguard.perturbation.randomized_response import h
from streamguard.sampling import SeededSource

P3 = [[0.7, 0.2, 0.1], [0.2, 0.6, 0.2], [0.15, 0.25, 0.6]]  # notes/001 §7.5 example


def _float_table(sampler: MarkovPriorSampler, length: int | None = None) -> np.ndarray:
    return np.array([[float(v) for v in row] for row in sampler.realised_table(length)])


def test_prior_tensor_is_the_chain_law() -> None:
    chain = MarkovChain(P3)
    p = markov_prior_tensor(chain, 3)
    for x in product(range(3), repeat=3):
        assert p[x] == pytest.approx(chain.initial[x[0]] * P3[x[0]][x[1]] * P3[x[1]][x[2]], rel=1e-15)


@pytest.mark.parametrize(("chain", "n", "kw"), [
    (MarkovChain(P3), 3, {"distortion": 0.05}),
    (MarkovChain.binary(0.2, 0.3), 4, {"distortion": 0.15}),
    (MarkovChain.binary(0.1, 0.4, initial=[0.5, 0.5]), 3, {"epsilon": 4.0}),
])
def test_realised_law_is_e_i_and_keeps_its_claim(chain: MarkovChain, n: int, kw: dict) -> None:
    """Enumerate the exact rational law of the draws (counts over 2⁶³ along every path): it equals
    the brute-force E_i of the record prior, is ε-identifiable exactly and has distortion n·δ."""
    sampler = MarkovPriorSampler(chain, n, **kw)
    table = _float_table(sampler)
    assert table == pytest.approx(e_i_matrix(markov_prior_tensor(chain, n), sampler.design_epsilon), abs=1e-12)
    ratio, dist = sampler.realised_levels()
    assert dyadic.within(ratio, sampler.epsilon)
    assert math.log(ratio) == pytest.approx(sampler.design_epsilon, abs=1e-9)
    assert float(dist) == pytest.approx(sampler.distortion, abs=1e-12)
    if "distortion" in kw:
        assert sampler.distortion == pytest.approx(kw["distortion"], abs=1e-12)
    else:
        assert sampler.epsilon == kw["epsilon"]


def test_shorter_records_get_e_i_of_the_shorter_prior() -> None:
    chain = MarkovChain(P3)
    sampler = MarkovPriorSampler(chain, 4, distortion=0.08)
    table = _float_table(sampler, 2)
    assert table == pytest.approx(e_i_matrix(markov_prior_tensor(chain, 2), sampler.design_epsilon), abs=1e-12)
    ratio, _ = sampler.realised_levels(2)
    assert dyadic.within(ratio, sampler.epsilon)


@st.composite
def chains(draw: st.DrawFn) -> tuple[MarkovChain, int]:
    m, n = draw(st.sampled_from([(2, 2), (2, 3), (2, 4), (3, 2), (3, 3)]))
    rows = [draw(st.lists(st.floats(0.05, 1.0), min_size=m, max_size=m)) for _ in range(m)]
    P = np.array(rows) / np.sum(rows, axis=1, keepdims=True)
    return MarkovChain(P), n


@settings(max_examples=12)
@given(chains(), st.floats(0.05, 0.95))
def test_random_chains_exact_check(chain_n: tuple[MarkovChain, int], frac: float) -> None:
    chain, n = chain_n
    D = frac * feasibility_threshold(markov_prior_tensor(chain, n))
    sampler = MarkovPriorSampler(chain, n, distortion=D)
    ratio, dist = sampler.realised_levels()
    assert dyadic.within(ratio, sampler.epsilon)  # exact identifiability of what is drawn
    assert math.log(ratio) == pytest.approx(sampler.design_epsilon, abs=1e-8)
    assert float(dist) == pytest.approx(D, abs=1e-10)


def test_infeasible_budgets_and_records_are_refused() -> None:
    chain = MarkovChain(P3)
    thr = feasibility_threshold(markov_prior_tensor(chain, 4))  # 0.115704 (§7.5)
    MarkovPriorSampler(chain, 4, distortion=thr * 0.99)
    with pytest.raises(DesignError, match="does not exist"):
        MarkovPriorSampler(chain, 4, distortion=thr * 1.01)
    with pytest.raises(DesignError, match="does not exist"):
        MarkovPriorSampler(chain, 4, epsilon=4.0)  # ε̃_X = 4.206806
    with pytest.raises(DesignError, match="cannot be certified"):
        MarkovPriorSampler(chain, 12, distortion=0.01)
    with pytest.raises(DesignError, match="full support"):
        MarkovPriorSampler(MarkovChain([[0.5, 0.5], [1.0, 0.0]]), 2, distortion=0.01)
    with pytest.raises(DesignError, match="exactly one"):
        MarkovPriorSampler(chain, 2)
    with pytest.raises(DesignError, match="identity"):
        MarkovPriorSampler(chain, 2, distortion=0.0)


def test_bad_records_are_refused_before_any_cast() -> None:
    sampler = MarkovPriorSampler(MarkovChain(P3), 3, distortion=0.05)
    for bad in ([0, 3, 1], [-1, 0, 0], np.array([256, 0, 1])):
        with pytest.raises(ValueError, match="outside 0..2") as err:
            sampler.sample(bad, SeededSource(0))
        assert "256" not in str(err.value)
    with pytest.raises(ValueError, match="integer"):
        sampler.sample([0.0, 1.0], SeededSource(0))
    with pytest.raises(ValueError, match="1..3 rows"):
        sampler.sample([0, 1, 2, 0], SeededSource(0))


def test_kernel_draws_follow_the_counts_it_reports() -> None:
    """Each row is the first c with (word >> 1) < cumulative count: replay with the words."""
    sampler = MarkovPriorSampler(MarkovChain(P3), 3, distortion=0.1)
    x = np.array([[0, 2, 1], [1, 1, 1], [2, 0, 0]])
    y = sampler.sample(x, SeededSource(11))
    words = SeededSource(11).words(x.size).reshape(x.shape)
    for r in range(x.shape[0]):
        for j in range(3):
            cum = list(accumulate(sampler.conditional_counts(x[r], y[r, :j])))
            assert cum[-1] == 1 << 63
            assert y[r, j] == next(c for c, t in enumerate(cum) if (int(words[r, j]) >> 1) < t)


def test_sampled_outputs_follow_the_exact_law() -> None:
    chain = MarkovChain(P3)
    sampler = MarkovPriorSampler(chain, 3, distortion=0.08)
    table = _float_table(sampler)
    d = hamming_matrix(3, 3)
    for x, seed in (((0, 0, 0), 3), ((0, 1, 2), 4)):
        xi = x[0] * 9 + x[1] * 3 + x[2]
        y = sampler.sample(np.tile(x, (200_000, 1)), SeededSource(seed))
        counts = np.bincount(y[:, 0] * 9 + y[:, 1] * 3 + y[:, 2], minlength=27)
        expected = table[xi] * y.shape[0]
        live = expected > 0
        assert counts[~live].sum() == 0
        chi2 = float(((counts[live] - expected[live]) ** 2 / expected[live]).sum())
        assert chi2 < 70.0  # ≤ 26 degrees of freedom: P(χ² > 70) < 1e-5
        assert (y != np.array(x)).sum(axis=1).mean() == pytest.approx(table[xi] @ d[xi], abs=0.005)
    # averaged over the prior the distortion is n·δ = h(ε)
    assert sampler.distortion == pytest.approx(h(sampler.design_epsilon, 3, 3), abs=1e-12)
    assert sampler.distortion == pytest.approx(0.08, abs=1e-12)
