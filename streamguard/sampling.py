"""Randomness for privatization: CSPRNG words and integer-threshold Bernoulli draws (DESIGN.md §5).

Production draws come from a cryptographically secure generator: :class:`KeystreamSource` (the
default), a ChaCha20 keystream (RFC 8439) under keys drawn from ``os.urandom``, or
:class:`CsprngSource`, ``os.urandom`` itself. The keystream is the standard construction of a
DRBG from a stream cipher (NIST SP 800-90A's CTR_DRBG does the same with AES; Linux's own CRNG
expands its pool with ChaCha20): as long as ChaCha20 is a PRF its output is indistinguishable from
uniform, and it is an order of magnitude faster than a system call per batch.

A redaction probability r is quantised *upwards* to a 63-bit threshold T = ⌈r · 2⁶³⌉ and a record
is redacted iff U < T for a uniform 63-bit U, an exact Bernoulli(T / 2⁶³) with no floating point
in the draw (notes/ecosystem.md §4.6). Rounding up only ever redacts more, which is a
post-processing of the planned channel (notes/000 §4.5), so the realised leakage never exceeds the
planned one; r = 1 gives T = 2⁶³ (always) and r = 0 gives T = 0 (never).

The comparison is *lazy*: U = h · 2³¹ + ℓ with h the first 32 random bits and ℓ 31 more, so
U < T ⟺ h < ⌊T / 2³¹⌋, or h = ⌊T / 2³¹⌋ and ℓ < T mod 2³¹. Only a tie (probability ≤ 2⁻³²) needs
the extra bits, which are drawn for the tied records alone: the same exact Bernoulli(T / 2⁶³) with
4 random bytes per record instead of 8.

A seeded deterministic source (PCG64) exists for tests and benchmarks only; it is not
cryptographically secure and says so through ``deterministic``.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._jit import kernel

#: Output code of a redacted record in sanitized state arrays.
REDACTED = -1
_SCALE = float(2**63)


class BitSource(Protocol):
    """A source of uniformly random 64-bit words (consumed once: never hand out a word twice)."""

    deterministic: bool

    def words(self, n: int) -> NDArray[np.uint64]: ...


def words32(source: BitSource, n: int) -> NDArray[np.uint32]:
    """n uniform 32-bit words: ``source.words32`` where the source has it (4 bytes a word), else
    the halves of ⌈n / 2⌉ 64-bit words (any :class:`BitSource`)."""
    own = getattr(source, "words32", None)
    if own is not None:
        return own(n)
    return np.ascontiguousarray(source.words((n + 1) // 2), dtype=np.uint64).view(np.uint32)[:n]


class CsprngSource:
    """Words from the OS CSPRNG (``os.urandom``): one system call per draw."""

    deterministic = False

    def words(self, n: int) -> NDArray[np.uint64]:
        return np.frombuffer(os.urandom(8 * n), dtype=np.uint64)

    def words32(self, n: int) -> NDArray[np.uint32]:
        return np.frombuffer(os.urandom(4 * n), dtype=np.uint32)


_ZEROS = bytes(1 << 20)  # plaintext of the keystream, encrypted a MiB at a time into the output


class KeystreamSource:
    """Words from a ChaCha20 keystream (RFC 8439, via the ``cryptography`` package's OpenSSL
    binding) under a fresh 256-bit key from ``os.urandom`` for every block; the production source.

    Each key encrypts one block of zeros (at most ``block_bytes``, far below ChaCha20's 2³⁸-byte
    limit per nonce) and is then dropped, so no key ever produces two blocks and the generator is
    re-seeded from the OS every block. A block is served front to back and never reused (a lock
    makes this hold across threads). After a ``fork`` the child discards the parent's block
    (``os.register_at_fork`` and a pid check), so a parent and its child never share a single word.
    """

    deterministic = False
    _instances: weakref.WeakSet[KeystreamSource] = weakref.WeakSet()

    def __init__(self, block_bytes: int = 1 << 20) -> None:
        if not 64 <= block_bytes <= 1 << 32:
            raise ValueError("block_bytes must lie in [64, 2^32]")
        self._block = block_bytes
        self._buf = np.empty(0, dtype=np.uint8)
        self._pos = 0
        self._pid = os.getpid()
        self._lock = threading.Lock()
        KeystreamSource._instances.add(self)

    @staticmethod
    def keystream(key: bytes, nonce: bytes, size: int) -> NDArray[np.uint8]:
        """``size`` bytes of the ChaCha20 keystream for ``key`` (32 bytes) and ``nonce`` (16 bytes:
        the 32-bit little-endian initial block counter, then RFC 8439's 96-bit nonce)."""
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

        out = np.empty(size, dtype=np.uint8)
        view, zeros = memoryview(out), memoryview(_ZEROS)
        encryptor = Cipher(algorithms.ChaCha20(key, nonce), mode=None).encryptor()
        for start in range(0, size, len(_ZEROS)):  # the keystream is the encryption of zeros
            stop = min(size, start + len(_ZEROS))
            encryptor.update_into(zeros[: stop - start], view[start:stop])
        return out

    def _forget(self) -> None:
        self._buf = np.empty(0, dtype=np.uint8)
        self._pos = 0
        self._pid = os.getpid()

    def _take(self, size: int) -> NDArray[np.uint8]:
        with self._lock:
            if self._pid != os.getpid():
                self._forget()
            if self._pos + size > self._buf.shape[0]:
                self._buf = self.keystream(os.urandom(32), bytes(16), max(size, self._block))
                self._pos = 0
            out = self._buf[self._pos: self._pos + size]
            self._pos += -(-size // 8) * 8  # the next draw starts 8-byte aligned
            return out

    def words(self, n: int) -> NDArray[np.uint64]:
        return self._take(8 * n).view(np.uint64)

    def words32(self, n: int) -> NDArray[np.uint32]:
        return self._take(4 * n).view(np.uint32)


def _forget_after_fork() -> None:
    for source in list(KeystreamSource._instances):
        source._lock = threading.Lock()  # another parent thread may have held it at the fork
        source._forget()


os.register_at_fork(after_in_child=_forget_after_fork)


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
def _redact_kernel(states, thr, index, words, out, ties):  # pragma: no cover - compiled
    """First pass of the lazy comparison: out[i] from h = words[i] against ⌊T / 2³¹⌋; the ties
    are written to ``ties`` (released for now) and their count returned."""
    nt = 0
    for i in range(states.shape[0]):
        s = states[i]
        hi = thr[index[i], s] >> np.uint64(31)
        w = np.uint64(words[i])
        if w < hi:
            out[i] = -1
        else:
            out[i] = s
            if w == hi:
                ties[nt] = i
                nt += 1
    return nt


def _redact_numpy(states, thr, index, words, out, ties):
    """Plain-numpy reference of :func:`_redact_kernel`."""
    hi = thr[index, states] >> np.uint64(31)
    w = words.astype(np.uint64)
    out[:] = np.where(w < hi, np.int8(REDACTED), states)
    tied = np.flatnonzero(w == hi)
    ties[: tied.size] = tied
    return tied.size


_LOW31 = np.uint64((1 << 31) - 1)


def _settle_ties(states, thr, index, ties, source, out) -> None:
    """Second pass: a tied record is redacted iff ℓ < T mod 2³¹, ℓ the top 31 bits of a fresh word."""
    if ties.size == 0:
        return
    low = source.words(ties.size) >> np.uint64(33)
    redact = low < (thr[index[ties], states[ties]] & _LOW31)
    out[ties[redact]] = REDACTED


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
    words = words32(source, x.shape[0])
    thr = np.ascontiguousarray(thr, dtype=np.uint64)
    out = np.empty(x.shape[0], dtype=np.int8)
    ties = np.empty(x.shape[0], dtype=np.int64)
    nt = (_redact_numpy if use_numpy else _redact_kernel)(x, thr, idx, words, out, ties)
    _settle_ties(x, thr, idx, ties[:nt], source, out)
    return out


def bit_source(deterministic_seed: int | None, stream_index: int = 0) -> BitSource:
    """The configured source: the ChaCha20 keystream keyed from the OS CSPRNG, or — when a seed is
    configured — seeded PCG64 words (one independent stream per configured stream). Seeded mode is
    for tests, demos and benchmarks; payloads and status say "deterministic" whenever it is in use."""
    if deterministic_seed is None:
        return KeystreamSource()
    return SeededSource(deterministic_seed, stream=100 + stream_index)
