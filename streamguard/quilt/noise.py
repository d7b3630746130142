"""Exact discrete Laplace (two-sided geometric) noise from CSPRNG words (DESIGN.md §5).

Law. ``DiscreteLaplace(num, den)`` is the discrete Laplace distribution of rational scale
β' = num/den on the integers,

    P(Z = z) = (1 − τ)/(1 + τ) · τ^|z|,        τ = exp(−1/β'),

so P(Z = z ± 1)/P(Z = z) ∈ [τ, 1/τ] = [e^{−1/β'}, e^{1/β'}]: an integer-valued query of
sensitivity Δ (in grid units) released as F + Z is (Δ/β')-indistinguishable exactly as with the
continuous Laplace that the MQM proofs use (notes/002 §8, "Laplace sampling": the ratio property is
all Lemma A.2 needs).

Requested vs realised scale. ``DiscreteLaplace.at_least(β)`` picks den = 2^r and
num = ⌈β·2^r⌉ (exact rational arithmetic on the binary value of β, r chosen so that num ≥ 2^40), so
β' = num/den ≥ β with β' − β < 2^−r ≤ β·2^−40: rounding only ever *adds* noise, and the realised
β' is stated exactly (``scale`` is a Fraction) and recorded with every release.

Sampler: Canonne, Kamath and Steinke, "The Discrete Gaussian for Differential Privacy" (NeurIPS
2020, arXiv 2004.00010), Algorithm 2 (discrete Laplace of scale t/s) on top of their Algorithm 1
(Bernoulli(exp(−γ)) for γ ∈ [0, 1]). Why this sampler rather than a geometric built from repeated
Bernoulli(τ) draws with τ rounded up to a dyadic rational: that one costs about 2β' words per
sample, so a mean released on a fine grid (β' ~ 10^5 grid steps) would need megabytes of CSPRNG
output per value; CKS needs O(1) words per sample whatever the scale (measured: 17 words at
β = 0.3, 13 at β = 1, 9 at β ≥ 40), and is exact in law. Every random choice is an integer
comparison on 64-bit words from a :class:`~streamguard.sampling.BitSource` — no floating point
anywhere in the draw:

* Uniform{0..n−1}: rejection sampling on the top 63 bits of a word (accept w < ⌊2^63/n⌋·n, return
  w mod n); exact.
* Bernoulli(p/q) for integers 0 ≤ p ≤ q: Uniform{0..q−1} < p.
* Bernoulli(γ/K) in Algorithm 1, γ = p/q: the product of independent Bernoulli(p/q) and
  Bernoulli(1/K) draws — exact, and no integer ever exceeds q or K (no overflow).
* Bernoulli(1/2): the top bit of a word.

Algorithm 2 (scale t/s, here t = num, s = den): repeat {U ~ Uniform{0..t−1}; accept with
Bernoulli(exp(−U/t)); V ~ Geometric(1 − e^{−1}) by counting Bernoulli(exp(−1)) successes;
X = U + t·V (geometric with ratio e^{−1/t}); Y = ⌊X/s⌋ (geometric with ratio e^{−s/t});
B ~ Bernoulli(1/2); reject B = 1, Y = 0; return (1 − 2B)·Y}.

Word supply without bias. The number of words a sample consumes depends on its value, so a sample
that runs out of words must never be abandoned and redrawn (that would favour cheap, i.e. small,
samples — less noise). The kernel instead reports where the unfinished sample began; the caller
appends fresh words *after* the unused ones and reruns that sample from the same start, which
yields exactly the value an unbounded buffer would have given.

The numba kernel :func:`_sample_kernel` has a plain-Python twin :func:`_sample_reference` (same
words in, same integers out; the tests compare them). Seeded sources are for tests only and every
release says whether it was deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..support.jit import kernel
from ..sampling import BitSource

#: Realised scales carry at least this many bits of numerator (relative rounding ≤ 2^−40).
_MIN_NUM_BITS = 40
#: Largest numerator accepted: keeps U + t·V far inside int64 (V ≥ 2^10 has probability e^{−1024}).
_MAX_NUM = 2**52
#: Words requested per outstanding sample (the mean is 9–17, more for small scales), a margin, and
#: the most samples one buffer is sized for (bounds memory: ~14·2^15 words = 3.5 MB).
_WORDS_PER_SAMPLE = 14
_WORDS_MARGIN = 64
_CHUNK = 1 << 15


class NoiseError(ValueError):
    """A noise scale is unusable (not finite, not positive, or too large)."""


@dataclass(frozen=True)
class DiscreteLaplace:
    """Discrete Laplace law on ℤ with rational scale ``num/den`` (see the module docstring)."""

    num: int
    den: int

    def __post_init__(self) -> None:
        if not (isinstance(self.num, int) and isinstance(self.den, int)) or self.num < 1 or self.den < 1:
            raise NoiseError("discrete Laplace scale must be a ratio of positive integers")
        if self.num > _MAX_NUM or self.den > _MAX_NUM:
            raise NoiseError(f"discrete Laplace scale terms must be ≤ 2^{_MAX_NUM.bit_length() - 1}")

    @classmethod
    def at_least(cls, beta: float) -> DiscreteLaplace:
        """The law of realised scale β' = ⌈β·2^r⌉/2^r ≥ β (r ≥ 0 chosen so the numerator has ≥ 40 bits)."""
        if not (isinstance(beta, (int, float)) and math.isfinite(beta) and beta > 0):
            raise NoiseError("noise scale must be a finite number > 0")
        exact = Fraction(beta)  # the exact binary value of the float
        r = max(0, _MIN_NUM_BITS - math.floor(math.log2(beta)))
        if 2**r > _MAX_NUM:
            raise NoiseError(f"noise scale {beta:.6g} is too small (min about {2.0 ** (_MIN_NUM_BITS - 52):.3g})")
        num = math.ceil(exact * 2**r)
        if num > _MAX_NUM:
            raise NoiseError(f"noise scale {beta:.6g} is too large (max about {float(_MAX_NUM):.3g})")
        return cls(num, 2**r)

    @property
    def scale(self) -> Fraction:
        """The realised scale β' (exact)."""
        return Fraction(self.num, self.den)

    @property
    def ratio(self) -> float:
        """τ = exp(−1/β'): P(Z = z+1)/P(Z = z) for z ≥ 0."""
        return math.exp(-self.den / self.num)

    def log_pmf(self, z: ArrayLike) -> NDArray[np.float64]:
        """log P(Z = z) = log((1 − τ)/(1 + τ)) − |z|/β', evaluated stably."""
        zz = np.abs(np.asarray(z, dtype=np.float64))
        inv = self.den / self.num
        log_norm = math.log(-math.expm1(-inv)) - math.log1p(math.exp(-inv))
        return log_norm - zz * inv

    def pmf(self, z: ArrayLike) -> NDArray[np.float64]:
        """P(Z = z)."""
        return np.exp(self.log_pmf(z))

    def variance(self) -> float:
        """Var Z = 2τ/(1 − τ)²."""
        tau = self.ratio
        return 2.0 * tau / (1.0 - tau) ** 2

    def sample(self, n: int, source: BitSource, *, use_reference: bool = False) -> NDArray[np.int64]:
        """``n`` independent draws as int64, consuming words from ``source``."""
        if n < 0:
            raise ValueError("sample size must be ≥ 0")
        if use_reference:
            return _sample_reference(self.num, self.den, _word_stream(source), n)
        out = np.empty(n, dtype=np.int64)
        words = source.words(_WORDS_PER_SAMPLE * min(n, _CHUNK) + _WORDS_MARGIN)
        done = 0
        while True:
            done, begin = _sample_kernel(self.num, self.den, words, out, done)
            if done == n:
                return out
            # Sample ``done`` ran out of words: keep the words it started from, append fresh ones
            # and rerun it from the same start (no sample is ever discarded, see the docstring).
            fresh = source.words(_WORDS_PER_SAMPLE * min(n - done, _CHUNK) + _WORDS_MARGIN)
            words = np.concatenate([words[begin:], fresh])


def discrete_laplace(beta: float, n: int, source: BitSource) -> NDArray[np.int64]:
    """``n`` draws of discrete Laplace noise of realised scale ≥ ``beta`` (see :meth:`DiscreteLaplace.at_least`)."""
    return DiscreteLaplace.at_least(beta).sample(n, source)


# -------------------------------------------------------------------------------- numba kernel

@kernel
def _uniform_below(n, words, pos):  # pragma: no cover - compiled
    """(Uniform{0..n−1}, next position), or (0, −1) when the words run out. n ≥ 1."""
    if n == 1:
        return np.int64(0), pos
    un = np.uint64(n)
    limit = (np.uint64(1) << np.uint64(63)) // un * un
    while pos < words.shape[0]:
        w = words[pos] >> np.uint64(1)
        pos += 1
        if w < limit:
            return np.int64(w % un), pos
    return np.int64(0), np.int64(-1)


@kernel
def _bernoulli_exp(p, q, words, pos):  # pragma: no cover - compiled
    """(Bernoulli(exp(−p/q)), next position) for 0 ≤ p ≤ q (CKS Algorithm 1); pos −1 when out."""
    k = np.int64(1)
    while True:
        # A ~ Bernoulli(γ/K) = Bernoulli(p/q) · Bernoulli(1/K), independent draws.
        if p < q:
            u, pos = _uniform_below(q, words, pos)
            if pos < 0:
                return False, pos
            if u >= p:
                break
        if k > 1:
            u, pos = _uniform_below(k, words, pos)
            if pos < 0:
                return False, pos
            if u != 0:
                break
        k += 1
    return (k % 2) == 1, pos


@kernel
def _one_sample(t, s, words, pos):  # pragma: no cover - compiled
    """(Z ~ discrete Laplace of scale t/s, next position) (CKS Algorithm 2); pos −1 when out."""
    while True:
        u, pos = _uniform_below(t, words, pos)
        if pos < 0:
            return np.int64(0), pos
        d, pos = _bernoulli_exp(u, t, words, pos)
        if pos < 0:
            return np.int64(0), pos
        if not d:
            continue
        v = np.int64(0)
        while True:
            a, pos = _bernoulli_exp(np.int64(1), np.int64(1), words, pos)
            if pos < 0:
                return np.int64(0), pos
            if not a:
                break
            v += 1
        y = (u + t * v) // s
        if pos >= words.shape[0]:
            return np.int64(0), np.int64(-1)
        b = np.int64(words[pos] >> np.uint64(63))
        pos += 1
        if b == 1 and y == 0:
            continue
        return (1 - 2 * b) * y, pos


@kernel
def _sample_kernel(t, s, words, out, start):  # pragma: no cover - compiled
    """Fill out[start:]; return (index reached, word position where that sample began)."""
    pos = np.int64(0)
    i = start
    while i < out.shape[0]:
        begin = pos
        z, pos = _one_sample(np.int64(t), np.int64(s), words, pos)
        if pos < 0:
            return i, begin
        out[i] = z
        i += 1
    return i, pos


# ---------------------------------------------------------------------- plain-Python reference


def _word_stream(source: BitSource, chunk: int = 256) -> Iterator[int]:
    while True:
        yield from (int(w) for w in source.words(chunk))


def _uniform_ref(n: int, words: Iterator[int]) -> int:
    if n == 1:
        return 0
    limit = (2**63 // n) * n
    while True:
        w = next(words) >> 1
        if w < limit:
            return w % n


def _bernoulli_exp_ref(p: int, q: int, words: Iterator[int]) -> bool:
    k = 1
    while True:
        if p < q and _uniform_ref(q, words) >= p:
            break
        if k > 1 and _uniform_ref(k, words) != 0:
            break
        k += 1
    return k % 2 == 1


def _sample_reference(t: int, s: int, words: Iterator[int], n: int) -> NDArray[np.int64]:
    """Plain-Python CKS Algorithm 2, drawing in the same order as the kernel."""
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        while True:
            u = _uniform_ref(t, words)
            if not _bernoulli_exp_ref(u, t, words):
                continue
            v = 0
            while _bernoulli_exp_ref(1, 1, words):
                v += 1
            y = (u + t * v) // s
            b = next(words) >> 63
            if b == 1 and y == 0:
                continue
            out[i] = (1 - 2 * b) * y
            break
    return out
