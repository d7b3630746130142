"""Randomness for privatization: CSPRNG words and integer-threshold Bernoulli draws (DESIGN.md §5).

Production draws come from the OS CSPRNG (``os.urandom``) as 64-bit words. A redaction probability
r is quantised *upwards* to a 63-bit threshold T = ⌈r · 2⁶³⌉ and a record is redacted iff
(w >> 1) < T, an exact Bernoulli(T / 2⁶³) with no floating point in the draw (notes/ecosystem.md
§4.6). Rounding up only ever redacts more, which is a post-processing of the planned channel
(notes/000 §4.5), so the realised leakage never exceeds the planned one; r = 1 gives T = 2⁶³
(always) and r = 0 gives T = 0 (never).

A seeded deterministic source (PCG64) exists for tests and benchmarks only; it is not
cryptographically secure and says so through ``deterministic``.
"""

from __future__ import annotations

import os
from typing import Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._jit import kernel

#: Output code of a redacted record in sanitized state arrays.
REDACTED = -1
_SCALE = float(2**63)


class BitSource(Protocol):
    """A source of uniformly random 64-bit words."""

    deterministic: bool

    def words(self, n: int) -> NDArray[np.uint64]: ...


class CsprngSource:
    """Words from the OS CSPRNG (``os.urandom``); the production source."""

    deterministic = False

    def words(self, n: int) -> NDArray[np.uint64]:
        return np.frombuffer(os.urandom(8 * n), dtype=np.uint64)


class SeededSource:
    """Reproducible words from PCG64 under a seed. For tests and benchmarks only: NOT a CSPRNG.

    ``stream`` selects an independent stream for the same seed (SeedSequence spawn key), so that
    simulated data and redaction coins drawn under one seed are not the same words.
    """

    deterministic = True

    def __init__(self, seed: int, stream: int = 0) -> None:
        self._bits = np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(stream,)))

    def words(self, n: int) -> NDArray[np.uint64]:
        return self._bits.random_raw(n).astype(np.uint64, copy=False)


def thresholds(probabilities: ArrayLike) -> NDArray[np.uint64]:
    """T = ⌈p · 2⁶³⌉ elementwise (exact: scaling by a power of two is exact in binary floating point)."""
    p = np.asarray(probabilities, dtype=np.float64)
    if not np.all((p >= 0) & (p <= 1)):
        raise ValueError("probabilities must lie in [0, 1]")
    return np.ceil(p * _SCALE).astype(np.uint64)


def quantised(thr: NDArray[np.uint64]) -> NDArray[np.float64]:
    """The probability a threshold actually realises, T / 2⁶³ (≥ the planned one)."""
    return thr.astype(np.float64) / _SCALE


@kernel
def _redact_kernel(states, thr, index, words, out):  # pragma: no cover - compiled
    for i in range(states.shape[0]):
        s = states[i]
        if (words[i] >> np.uint64(1)) < thr[index[i], s]:
            out[i] = -1
        else:
            out[i] = s
    return out


def _redact_numpy(states, thr, index, words):
    """Plain-numpy reference of :func:`_redact_kernel`."""
    redact = (words >> np.uint64(1)) < thr[index, states]
    return np.where(redact, np.int8(REDACTED), states.astype(np.int8))


def apply_redaction(
    states: ArrayLike,
    thr: NDArray[np.uint64],
    index: ArrayLike,
    source: BitSource,
    *,
    use_numpy: bool = False,
) -> NDArray[np.int8]:
    """Redact each record: out[i] = REDACTED with probability thr[index[i], states[i]] / 2⁶³, else
    states[i]. ``thr`` is (c, k) uint64 from :func:`thresholds`; ``index`` picks a row per record.

    Raises ValueError (naming the count, never a value) when a state is outside 0..k−1.
    """
    raw = np.asarray(states)
    idx = np.ascontiguousarray(index, dtype=np.int64)
    if raw.shape != idx.shape or raw.ndim != 1:
        raise ValueError("states and index must be 1-D arrays of the same length")
    if raw.dtype.kind not in "iub":
        raise ValueError(f"states must be integers, got dtype {raw.dtype}; refusing to privatize")
    k = thr.shape[1]
    # Range check on the caller's array, before any narrowing cast could wrap a value into range.
    bad = int(np.count_nonzero((raw < 0) | (raw >= k)))
    if bad:
        raise ValueError(f"{bad} record(s) have a state outside 0..{k - 1}; refusing to privatize")
    x = np.ascontiguousarray(raw, dtype=np.int8)
    if idx.size and (idx.min() < 0 or idx.max() >= thr.shape[0]):
        raise ValueError("plan index refers to a row that does not exist")
    words = source.words(x.shape[0])
    thr = np.ascontiguousarray(thr, dtype=np.uint64)
    if use_numpy:
        return _redact_numpy(x, thr, idx, words)
    return _redact_kernel(x, thr, idx, words, np.empty(x.shape[0], dtype=np.int8))


def bit_source(deterministic_seed: int | None, stream_index: int = 0) -> BitSource:
    """The configured source: the OS CSPRNG, or — when a seed is configured — seeded PCG64 words
    (one independent stream per configured stream). Seeded mode is for tests, demos and
    benchmarks; payloads and status say "deterministic" whenever it is in use."""
    if deterministic_seed is None:
        return CsprngSource()
    return SeededSource(deterministic_seed, stream=100 + stream_index)
