"""Markov-chain state sources for simulations and benchmarks.

A source draws X_0 from the chain's initial law and X_{t+1} from row X_t of the transition matrix,
by inverse-CDF on integer thresholds: with 63-bit uniform words w and cumulative thresholds
C[i, j] = ⌈(Σ_{l ≤ j} P[i, l]) · 2⁶³⌉, X_{t+1} = min{j : w < C[X_t, j]}. Simulation only: its
randomness is a seeded PCG64 stream (its own spawn key, independent of the redaction coins of a
SeededSource with the same seed), reproducible run to run.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from streamguard.support.jit import kernel
from streamguard.model.chain import MarkovChain
from streamguard.sampling import SeededSource, thresholds


#: SeededSource stream of simulated data; redaction coins use stream 0, so one seed for both is safe.
_SOURCE_STREAM = 1


def _cumulative_thresholds(rows: NDArray[np.float64]) -> NDArray[np.uint64]:
    c = np.cumsum(rows, axis=-1)
    c[..., -1] = 1.0  # every word falls below the last threshold
    return thresholds(np.clip(c, 0.0, 1.0))


@kernel
def _walk_kernel(first, cum, words, out):  # pragma: no cover - compiled
    k = cum.shape[1]
    s = first
    for t in range(out.shape[0]):
        out[t] = s
        w = words[t] >> np.uint64(1)
        nxt = k - 1
        for j in range(k):
            if w < cum[s, j]:
                nxt = j
                break
        s = nxt
    return out


def _walk_numpy(first, cum, words):
    """Plain-numpy reference of :func:`_walk_kernel`."""
    out = np.empty(words.shape[0], dtype=np.int8)
    s = first
    for t in range(words.shape[0]):
        out[t] = s
        s = int(np.argmax((words[t] >> np.uint64(1)) < cum[s]))
    return out


class MarkovSource:
    """Reproducible state sequences of a chain: ``MarkovSource(chain, seed).states(n)``.

    Successive calls continue the same path (the last state carries over).
    """

    def __init__(self, chain: MarkovChain, seed: int) -> None:
        self.chain = chain
        self._bits = SeededSource(seed, stream=_SOURCE_STREAM)
        self._cum = _cumulative_thresholds(chain.matrix)
        init = self._bits.words(1)[0] >> np.uint64(1)
        self._state = int(np.argmax(init < _cumulative_thresholds(chain.initial)))

    def states(self, n: int, *, use_numpy: bool = False) -> NDArray[np.int8]:
        words = self._bits.words(n)
        if use_numpy:
            out = _walk_numpy(self._state, self._cum, words)
        else:
            out = _walk_kernel(self._state, self._cum, words, np.empty(n, dtype=np.int8))
        if n:
            w = words[-1] >> np.uint64(1)
            self._state = int(np.argmax(w < self._cum[int(out[-1])]))
        return out
