"""Exact discrete Laplace noise (streamguard.quilt.noise): realised law, ratio property, sampler."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from streamguard.quilt import noise
from streamguard.quilt.noise import DiscreteLaplace, NoiseError, discrete_laplace
from streamguard.sampling import CsprngSource, SeededSource


def _tail(d: DiscreteLaplace, m: np.ndarray) -> np.ndarray:
    """P(Z ≥ m) for m ≥ 1 in closed form: τ^m/(1 + τ) (independent of the pmf code)."""
    tau = math.exp(-d.den / d.num)
    return tau ** m.astype(np.float64) / (1.0 + tau)


def _cdf(d: DiscreteLaplace, z: np.ndarray) -> np.ndarray:
    """P(Z ≤ z): τ^{−z}/(1+τ) for z < 0, 1 − τ^{z+1}/(1+τ) for z ≥ 0."""
    z = np.asarray(z)
    return np.where(z < 0, _tail(d, np.abs(z)), 1.0 - _tail(d, np.abs(z) + 1))


@pytest.mark.parametrize("beta", [0.3, 1.0, 7.5, 44.6, 2.2e5])
def test_realised_scale_is_stated_exactly_and_never_below_the_request(beta):
    d = DiscreteLaplace.at_least(beta)
    assert d.scale >= Fraction(beta)  # exact rational comparison on the float's binary value
    assert float(d.scale - Fraction(beta)) <= beta * 2.0**-40
    assert d.num >= 2**40 and d.den & (d.den - 1) == 0  # power-of-two denominator


@pytest.mark.parametrize("beta", [0.3, 1.0, 7.5])
def test_pmf_has_the_adjacent_ratio_exactly_and_sums_to_one(beta):
    d = DiscreteLaplace.at_least(beta)
    z = np.arange(-400, 401)
    p = d.pmf(z)
    assert p.sum() == pytest.approx(1.0, abs=1e-12)
    live = (z[:-1] >= 0) & (p[1:] > 1e-250)
    np.testing.assert_allclose(p[1:][live] / p[:-1][live], d.ratio, rtol=1e-12)
    # log-ratio of neighbours is −1/β' with β' ≥ β: at least as private as the requested scale.
    lp = d.log_pmf(z)
    assert np.max(np.abs(np.diff(lp))) <= 1.0 / beta + 1e-12
    np.testing.assert_allclose(np.abs(np.diff(lp)), float(d.den) / d.num, rtol=1e-12)
    np.testing.assert_array_equal(d.pmf(z), d.pmf(-z))


@pytest.mark.parametrize("beta,seed", [(0.3, 11), (1.0, 12), (7.5, 13), (44.6, 14), (2.2e5, 15)])
def test_sampled_law_matches_the_exact_pmf_chi_square(beta, seed):
    d = DiscreteLaplace.at_least(beta)
    n = 200_000
    x = d.sample(n, SeededSource(seed))
    assert x.dtype == np.int64
    # 20 equiprobable-ish bins from the exact CDF; the bin edges are integers.
    q = np.linspace(0, 1, 21)[1:-1]
    edges = np.unique(np.array([_quantile(d, qq) for qq in q]))
    probs = np.diff(np.concatenate([[0.0], _cdf(d, edges), [1.0]]))
    observed = np.bincount(np.searchsorted(edges, x, side="left"), minlength=len(probs))
    assert observed.sum() == n
    _, pvalue = stats.chisquare(observed, probs * n)
    assert pvalue > 1e-3, f"chi-square p = {pvalue:.3g}"
    # the two moments the law fixes
    assert abs(x.mean()) < 5 * math.sqrt(d.variance() / n)
    assert x.var() == pytest.approx(d.variance(), rel=0.03)


def _quantile(d: DiscreteLaplace, q: float) -> int:
    """Smallest integer z with P(Z ≤ z) ≥ q (bisection on the closed-form CDF)."""
    lo, hi = -(2**50), 2**50
    while lo < hi:
        mid = (lo + hi) // 2
        if _cdf(d, np.array([mid]))[0] >= q:
            hi = mid
        else:
            lo = mid + 1
    return lo


def test_small_scale_sampled_pmf_cell_by_cell():
    """At β = 0.3 almost all mass is on {−2..2}: compare every cell, including P(Z = 0)."""
    d = DiscreteLaplace.at_least(0.3)
    n = 300_000
    x = d.sample(n, SeededSource(21))
    cells = np.arange(-3, 4)
    expected = d.pmf(cells) * n
    expected[0] += (_tail(d, np.array([4]))[0]) * n
    expected[-1] += (_tail(d, np.array([4]))[0]) * n
    observed = np.array([np.sum(np.clip(x, -3, 3) == c) for c in cells])
    _, pvalue = stats.chisquare(observed, expected)
    assert pvalue > 1e-3


def test_kernel_equals_the_plain_python_reference_word_for_word(monkeypatch):
    """Same words in, same integers out — also through the refill path (tiny buffers force a
    refill in the middle of many samples, which must rerun them from the same words)."""
    for beta in (0.3, 3.3, 44.6, 2.2e5):
        d = DiscreteLaplace.at_least(beta)
        a = d.sample(3000, SeededSource(5))
        b = d.sample(3000, SeededSource(5), use_reference=True)
        np.testing.assert_array_equal(a, b)
    monkeypatch.setattr(noise, "_WORDS_PER_SAMPLE", 1)
    monkeypatch.setattr(noise, "_WORDS_MARGIN", 0)
    d = DiscreteLaplace.at_least(3.3)
    np.testing.assert_array_equal(d.sample(3000, SeededSource(6)),
                                  d.sample(3000, SeededSource(6), use_reference=True))


def test_csprng_source_and_the_convenience_function():
    src = CsprngSource()
    x = discrete_laplace(2.0, 4000, src)
    d = DiscreteLaplace.at_least(2.0)
    assert x.shape == (4000,) and x.dtype == np.int64
    assert abs(x.mean()) < 5 * math.sqrt(d.variance() / 4000)
    assert discrete_laplace(2.0, 0, src).shape == (0,)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf, 1e300, 1e-30])
def test_unusable_scales_are_refused(bad):
    with pytest.raises(NoiseError):
        DiscreteLaplace.at_least(bad)
    with pytest.raises(NoiseError):
        DiscreteLaplace(0, 1)
