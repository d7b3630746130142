"""Per-record sampling of a k-ary channel with CSPRNG words and integer thresholds (DESIGN.md §5).

Each channel row is quantised once to integer counts c_0 … c_{m−1} ≥ 0 with Σ_j c_j = 2⁶³
(:func:`quantise`); the sampler keeps the cumulative thresholds C_j = c_0 + … + c_j. A record with
row r draws one 64-bit word w and releases the first output j with (w >> 1) < C_j[r] — an exact
draw with probability c_j / 2⁶³ and no floating point anywhere (the redaction sampler's rule,
``streamguard.sampling``, generalised to m outputs).

Quantisation (largest remainder): c_j = ⌊p_j · 2⁶³⌋, plus one for the entries with the largest
remainders until the row sums to 2⁶³, where p_j is the row's exact rational value divided by the
row's exact sum. So |c_j / 2⁶³ − p_j| < 2⁻⁶³, a zero entry stays exactly zero (it never gets a
remainder), and a positive entry below 2⁻⁶³ is raised to one count (taken from the row's largest
entry) so the channel's support — which LDP-type guarantees depend on — never shrinks. The exact
realised probabilities are what :mod:`.verify` checks against the claims, next to the stored ones.

Inputs are validated on the caller's array, before any cast: an out-of-range state must never be
wrapped into a valid one by a narrowing conversion.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..support.jit import kernel
from ..sampling import BitSource, CsprngSource
from .model import PerturbationChannel

#: Probabilities are multiples of 2^−SCALE_BITS; a draw compares the top 63 bits of a word.
SCALE_BITS = 63
_ONE = 1 << SCALE_BITS
_NUMPY_CHUNK = 1 << 16


def exact_integers(values: ArrayLike) -> list[int]:
    """Integers N with N[i] / 2^e = values[i] exactly for one common e (every float is dyadic)."""
    ratios = [float(v).as_integer_ratio() for v in np.asarray(values, dtype=np.float64).ravel()]
    den = max(d for _, d in ratios)
    return [n * (den // d) for n, d in ratios]


def _quantise_row(row: NDArray[np.float64]) -> list[int]:
    n = exact_integers(row)
    total = sum(n)
    counts = [(v << SCALE_BITS) // total for v in n]
    rems = [(v << SCALE_BITS) % total for v in n]
    short = _ONE - sum(counts)
    for j in sorted(range(len(n)), key=lambda j: (-rems[j], j))[:short]:
        counts[j] += 1
    for j, v in enumerate(n):
        if v > 0 and counts[j] == 0:
            counts[j] = 1
            counts[max(range(len(n)), key=lambda i: (counts[i], -i))] -= 1
    return counts


def quantise(matrix: ArrayLike) -> NDArray[np.uint64]:
    """Integer counts per row summing to exactly 2⁶³ (see the module docstring); uint64."""
    m = np.asarray(matrix, dtype=np.float64)
    if m.ndim != 2 or not np.all(np.isfinite(m)) or np.any(m < 0) or np.any(m.sum(axis=1) <= 0):
        raise ValueError("quantise: expected a matrix of non-negative finite rows with positive sums")
    return np.array([_quantise_row(row) for row in m], dtype=np.uint64)


@kernel
def _sample_kernel(rows, cumulative, words, out):  # pragma: no cover - compiled
    m = cumulative.shape[1]
    for i in range(rows.shape[0]):
        u = words[i] >> np.uint64(1)
        r = rows[i]
        j = 0
        while j < m - 1 and u >= cumulative[r, j]:
            j += 1
        out[i] = j
    return out


def _sample_numpy(rows, cumulative, words):
    """Plain-numpy reference of :func:`_sample_kernel`: the number of thresholds ≤ u, in chunks."""
    out = np.empty(rows.shape[0], dtype=np.int64)
    for a in range(0, rows.shape[0], _NUMPY_CHUNK):
        u = words[a:a + _NUMPY_CHUNK] >> np.uint64(1)
        out[a:a + _NUMPY_CHUNK] = (u[:, None] >= cumulative[rows[a:a + _NUMPY_CHUNK]]).sum(axis=1)
    return out


def _states(values: ArrayLike, size: int, name: str) -> NDArray[np.int64]:
    """Validate a 1-D integer array of states in 0..size−1 (checked before any cast)."""
    raw = np.asarray(values)
    if raw.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array of states, got {raw.ndim} dimensions")
    if raw.dtype.kind not in "iu":
        raise ValueError(f"{name}: states must be integers, got dtype {raw.dtype}; refusing to sample")
    bad = int(np.count_nonzero((raw < 0) | (raw >= size)))
    if bad:
        raise ValueError(f"{name}: {bad} record(s) outside 0..{size - 1}; refusing to sample")
    return raw.astype(np.int64)


class ChannelSampler:
    """Draws outputs of one channel for batches of records (see the module docstring)."""

    def __init__(self, channel: PerturbationChannel) -> None:
        self.channel = channel
        self.counts = quantise(channel.matrix)
        self.cumulative = np.ascontiguousarray(np.cumsum(self.counts, axis=1, dtype=np.uint64))

    def realised_counts(self) -> list[list[int]]:
        """The exact realised channel: row r releases output j with probability counts[r][j] / 2⁶³."""
        return [[int(c) for c in row] for row in self.counts]

    def realised_matrix(self) -> NDArray[np.float64]:
        """The realised probabilities counts / 2⁶³ as floats (exactly zero where the channel is)."""
        return np.array([[c / _ONE for c in row] for row in self.realised_counts()])

    def rows(self, x: ArrayLike, s: ArrayLike | None = None) -> NDArray[np.int64]:
        """Validated channel row per record: x, or s·|X| + x for channels that read (s, x)."""
        ch = self.channel
        xs = _states(x, ch.n_x, "x")
        if ch.inputs == "x":
            if s is not None:
                raise ValueError(f"channel kind {ch.kind!r} reads x only; refusing an unexpected s")
            return xs
        if s is None:
            raise ValueError(f"channel kind {ch.kind!r} needs the sensitive attribute S of each record")
        ss = _states(s, ch.n_s, "s")
        if ss.shape != xs.shape:
            raise ValueError("s and x must have the same length")
        return ss * ch.n_x + xs

    def sample(self, x: ArrayLike, s: ArrayLike | None = None, source: BitSource | None = None, *,
               use_numpy: bool = False) -> NDArray[np.int64]:
        """Output indices (into ``channel.outputs``) for records x (and s for ``inputs == "sx"``),
        one word of ``source`` (default: the OS CSPRNG) per record."""
        rows = self.rows(x, s)
        src = CsprngSource() if source is None else source
        words = np.ascontiguousarray(src.words(rows.shape[0]), dtype=np.uint64)
        if use_numpy:
            return _sample_numpy(rows, self.cumulative, words)
        return _sample_kernel(rows, self.cumulative, words, np.empty(rows.shape[0], dtype=np.int64))
