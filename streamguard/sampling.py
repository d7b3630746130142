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

The comparison is *lazy* (issue 15). Write U = W · 2⁴⁷ + L with W the first 16 random bits and L
47 more (W, L independent and uniform, so U is uniform on [0, 2⁶³)), and T = H · 2⁴⁷ + R with
H = ⌊T / 2⁴⁷⌋ ∈ [0, 2¹⁶] and R = T mod 2⁴⁷. Then

    U < T  ⟺  W < H,  or  W = H and L < R:

W < H gives U ≤ W·2⁴⁷ + 2⁴⁷ − 1 < H·2⁴⁷ ≤ T; W > H gives U ≥ (H + 1)·2⁴⁷ > T; W = H leaves L < R.
Hence Pr(redact) = H/2¹⁶ + 2⁻¹⁶ · R/2⁴⁷ = (H·2⁴⁷ + R)/2⁶³ = T/2⁶³ exactly. L is drawn (the top 47
bits of a fresh 64-bit word) only for a *tie*, W = H with R ≠ 0 (probability ≤ 2⁻¹⁶ a record); a
tie with R = 0 releases without more bits (L < 0 is impossible). The draw therefore costs 2 random
bytes a record (plus 8 per tie) instead of 8, and draw and comparison are fused per chunk of
:data:`CHUNK` records so that the words are compared while they are still in cache.

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

from .support.jit import kernel
from .model.chain import MAX_STATES

#: Output code of a redacted record in sanitized state arrays.
REDACTED = -1
_SCALE = float(2**63)
#: Records per fused step of :func:`apply_redaction`: 2 B of keystream, 1–8 B of row index and 1 B
#: each of state and output a record, ≤ 0.75 MiB in all, so one step stays in a core's L2 cache.
CHUNK = 1 << 16


class BitSource(Protocol):
    """A source of uniformly random 64-bit words (consumed once: never hand out a word twice).

    A source may also have ``fill(buf)``, writing never-served random bytes into a C-contiguous
    uint8 array in place (see :func:`fill_bytes`)."""

    deterministic: bool

    def words(self, n: int) -> NDArray[np.uint64]: ...


def fill_bytes(source: BitSource, buf: NDArray[np.uint8]) -> None:
    """Fill ``buf`` with random bytes served once: ``source.fill`` where the source has it (in
    place, no temporary), else the bytes of ⌈len(buf) / 8⌉ fresh 64-bit words (any :class:`BitSource`)."""
    own = getattr(source, "fill", None)
    if own is not None:
        own(buf)
        return
    m = buf.shape[0]
    buf[:] = np.ascontiguousarray(source.words(-(-m // 8)), dtype=np.uint64).view(np.uint8)[:m]


class CsprngSource:
    """Words from the OS CSPRNG (``os.urandom``): one system call per draw."""

    deterministic = False

    def words(self, n: int) -> NDArray[np.uint64]:
        return np.frombuffer(os.urandom(8 * n), dtype=np.uint64)


_ZEROS = memoryview(bytes(1 << 20))  # plaintext of the keystream, encrypted a MiB at a time


def _chacha20(key: bytes, nonce: bytes):  # type: ignore[no-untyped-def]
    """An encryptor of ChaCha20 under ``key`` (32 bytes) and ``nonce`` (16 bytes: the 32-bit
    little-endian initial block counter, then RFC 8439's 96-bit nonce)."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

    return Cipher(algorithms.ChaCha20(key, nonce), mode=None).encryptor()


def _encrypt_zeros(encryptor, out: memoryview) -> None:  # type: ignore[no-untyped-def]
    """Write the encryptor's next len(out) keystream bytes (the encryption of zeros) into ``out``."""
    for start in range(0, len(out), len(_ZEROS)):
        stop = min(len(out), start + len(_ZEROS))
        encryptor.update_into(_ZEROS[: stop - start], out[start:stop])


class KeystreamSource:
    """Words from a ChaCha20 keystream (RFC 8439, via the ``cryptography`` package's OpenSSL
    binding) under a fresh 256-bit key from ``os.urandom`` for every block; the production source.

    Each key produces exactly one block of ``block_bytes`` keystream bytes (far below ChaCha20's
    2³⁸-byte limit per nonce), served front to back across draws, and is then dropped: no key ever
    produces two blocks, no byte is served twice, and the generator is re-seeded from the OS every
    block. A lock makes this hold across threads. After a ``fork`` the child drops the parent's key
    (``os.register_at_fork`` and a pid check), so a parent and its child never share a single word.
    :meth:`fill` encrypts straight into the caller's buffer (no temporary).
    """

    deterministic = False
    _instances: weakref.WeakSet[KeystreamSource] = weakref.WeakSet()

    def __init__(self, block_bytes: int = 1 << 20) -> None:
        if not 64 <= block_bytes <= 1 << 32:
            raise ValueError("block_bytes must lie in [64, 2^32]")
        self._block = block_bytes
        self._cipher = None  # the encryptor of the current key
        self._left = 0  # bytes the current key may still produce
        self._pid = os.getpid()
        self._lock = threading.Lock()
        KeystreamSource._instances.add(self)

    @staticmethod
    def keystream(key: bytes, nonce: bytes, size: int) -> NDArray[np.uint8]:
        """``size`` bytes of the ChaCha20 keystream for ``key`` (32 bytes) and ``nonce`` (16 bytes:
        the 32-bit little-endian initial block counter, then RFC 8439's 96-bit nonce)."""
        out = np.empty(size, dtype=np.uint8)
        _encrypt_zeros(_chacha20(key, nonce), memoryview(out))
        return out

    def _forget(self) -> None:
        self._cipher = None
        self._left = 0
        self._pid = os.getpid()

    def fill(self, buf: NDArray[np.uint8]) -> None:
        """Write the next len(buf) keystream bytes into ``buf`` (C-contiguous uint8), under a fresh
        key from ``os.urandom(32)`` whenever the current key has produced its block."""
        view = memoryview(buf)
        if view.format != "B" or not view.c_contiguous or view.readonly:
            raise ValueError("fill needs a writable C-contiguous uint8 buffer")
        with self._lock:
            if self._pid != os.getpid():
                self._forget()
            pos = 0
            while pos < len(view):
                if self._left == 0:
                    self._cipher = _chacha20(os.urandom(32), bytes(16))
                    self._left = self._block
                step = min(len(view) - pos, self._left)
                _encrypt_zeros(self._cipher, view[pos: pos + step])
                pos += step
                self._left -= step

    def words(self, n: int) -> NDArray[np.uint64]:
        out = np.empty(n, dtype=np.uint64)
        self.fill(out.view(np.uint8))
        return out


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


#: The lazy comparison's split of a 63-bit U: a first stage of 16 bits W, then 47 bits L.
_REST_BITS = 47
_REST_MASK = (1 << _REST_BITS) - 1


@kernel
def _redact_chunk(states, index, thr, k, words, start, out, ties):  # pragma: no cover - compiled
    """First stage for records i = start … start + m − 1 (m = len(words)), with T = thr[index[i]·k
    + states[i]] (``thr`` flattened row-major): out[i] = REDACTED if W = words[i − start] <
    H = ⌊T / 2⁴⁷⌋, else states[i]; the ties (W = H and R = T mod 2⁴⁷ ≠ 0) go to ``ties`` in record
    order and their count is returned; −1 (and nothing written) if a state or a row is out of
    range. Indices are unsigned (no wrap-around checks) and the comparison is branch-free;
    ``index`` may be any integer dtype (a negative int64 row becomes ≥ 2⁶³ as uint64)."""
    m = words.shape[0]
    kk = np.uint64(k)
    rows = np.uint64(thr.shape[0] // k)
    shift, mask = np.uint64(_REST_BITS), np.uint64(_REST_MASK)
    top_state = np.uint8(0)  # int8 states as uint8: a negative state is ≥ 128 ≥ k
    top_row = np.uint64(0)
    for j in range(m):
        i = np.uint64(start + j)
        top_state = max(top_state, np.uint8(states[i]))
        top_row = max(top_row, np.uint64(index[i]))
    if np.uint64(top_state) >= kk or top_row >= rows:
        return -1
    nt = 0
    for j in range(m):
        i = np.uint64(start + j)
        s = states[i]
        t = thr[np.uint64(index[i]) * kk + np.uint64(s)]
        w = np.uint64(words[j])
        h = t >> shift
        out[i] = s | -np.int8(w < h)  # −1 = REDACTED if redacted, else s
        nt += (w == h) & ((t & mask) != 0)
    if nt:  # rare (≤ 2⁻¹⁶ a record): a second pass over the chunk, still in cache, lists the ties
        nt = 0
        for j in range(m):
            i = np.uint64(start + j)
            t = thr[np.uint64(index[i]) * kk + np.uint64(states[i])]
            if np.uint64(words[j]) == t >> shift and (t & mask) != 0:
                ties[nt] = i
                nt += 1
    return nt


def _redact_chunk_numpy(states, index, thr, k, words, start, out, ties):
    """Plain-numpy reference of :func:`_redact_chunk`."""
    stop = start + words.shape[0]
    s, r = states[start:stop].astype(np.int64), index[start:stop].astype(np.int64)
    if np.any((s < 0) | (s >= k) | (r < 0) | (r >= thr.shape[0] // k)):
        return -1
    t = thr[r * k + s]
    h, rest = t >> np.uint64(_REST_BITS), t & np.uint64(_REST_MASK)
    w = words.astype(np.uint64)
    out[start:stop] = np.where(w < h, np.int8(REDACTED), states[start:stop])
    tied = np.flatnonzero((w == h) & (rest != 0)) + start
    ties[: tied.size] = tied
    return tied.size


def _settle_ties(states, index, thr, k, ties, source, out) -> None:
    """Second stage: a tied record is redacted iff L < R = T mod 2⁴⁷, L the top 47 bits of a fresh
    64-bit word."""
    low = np.ascontiguousarray(source.words(ties.size), dtype=np.uint64) >> np.uint64(64 - _REST_BITS)
    rest = thr[index[ties].astype(np.int64) * k + states[ties]] & np.uint64(_REST_MASK)
    out[ties[low < rest]] = REDACTED


#: Row-index dtypes the kernel takes as they are; any other is converted to int64.
_INDEX_DTYPES = (np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.uint32), np.dtype(np.int64))


def compact_index(index: ArrayLike, rows: int) -> NDArray[np.unsignedinteger]:
    """``index`` in the narrowest unsigned dtype that holds rows − 1 (uint8, uint16 or uint32), for
    plans that privatize many times: the row index is the largest array the kernel reads (8 B a
    record as int64, 1 B as uint8). Raises ValueError if an entry is not a row in 0..rows−1."""
    idx = np.asarray(index)
    if idx.size and (idx.min() < 0 or idx.max() >= rows):
        raise ValueError("plan index refers to a row that does not exist")
    for dtype in (np.uint8, np.uint16, np.uint32):
        if rows - 1 <= np.iinfo(dtype).max:
            return np.ascontiguousarray(idx, dtype=dtype)
    raise ValueError("a plan with more than 2^32 distinct rows is not supported")


def _count_bad_states(states: NDArray[np.integer], k: int) -> int:
    return int(np.count_nonzero((states < 0) | (states >= k)))


def _refuse(states: NDArray[np.int8], index: NDArray[np.integer], k: int, rows: int) -> None:
    """Raise the error for out-of-range input (counts only, never a value)."""
    bad = _count_bad_states(states, k)
    if bad:
        raise ValueError(f"{bad} record(s) have a state outside 0..{k - 1}; refusing to privatize")
    if index.size and (index.min() < 0 or index.max() >= rows):
        raise ValueError("plan index refers to a row that does not exist")
    raise AssertionError("the redaction kernel refused input that passed the range checks")


def apply_redaction(
    states: ArrayLike,
    thr: NDArray[np.uint64],
    index: ArrayLike,
    source: BitSource,
    *,
    use_numpy: bool = False,
) -> NDArray[np.int8]:
    """Redact each record: out[i] = REDACTED with probability thr[index[i], states[i]] / 2⁶³, else
    states[i]. ``thr`` is (c, k) uint64 from :func:`thresholds`; ``index`` picks a row per record
    (uint8, uint16, uint32 — see :func:`compact_index` — or int64 are used as they are).

    Exact lazy comparison (module docstring): per chunk of :data:`CHUNK` records, 2 random bytes a
    record are drawn into one reused buffer and compared at once; the ties draw one 64-bit word
    each after the last chunk. Every word is drawn once and decides one record.

    Raises ValueError (naming the count, never a value) when a state is outside 0..k−1 or a row
    does not exist, or when k > :data:`MAX_STATES`; nothing is returned then.
    """
    raw = np.asarray(states)
    idx = np.asarray(index)
    idx = np.ascontiguousarray(idx, dtype=idx.dtype if idx.dtype in _INDEX_DTYPES else np.int64)
    if raw.shape != idx.shape or raw.ndim != 1:
        raise ValueError("states and index must be 1-D arrays of the same length")
    if raw.dtype.kind not in "iub":
        raise ValueError(f"states must be integers, got dtype {raw.dtype}; refusing to privatize")
    thr = np.ascontiguousarray(thr, dtype=np.uint64)
    if thr.ndim != 2 or thr.shape[1] == 0:
        raise ValueError("thresholds must be a (rows, states) array with at least one state")
    k = thr.shape[1]
    if k > MAX_STATES:  # states travel as int8 (REDACTED = −1): a state ≥ 128 would wrap negative
        raise ValueError(f"thresholds for {k} states: at most {MAX_STATES} are supported; refusing to privatize")
    if raw.dtype != np.int8:
        # Range check on the caller's array, before the narrowing cast could wrap a value into range
        # (int8 input is checked inside the kernel, chunk by chunk, while the chunk is in cache).
        bad = _count_bad_states(raw, k)
        if bad:
            raise ValueError(f"{bad} record(s) have a state outside 0..{k - 1}; refusing to privatize")
    x = np.ascontiguousarray(raw, dtype=np.int8)
    n = x.shape[0]
    flat = thr.reshape(-1)
    out = np.empty(n, dtype=np.int8)
    buf = np.empty(2 * min(n, CHUNK), dtype=np.uint8)
    words, ties = buf.view(np.uint16), np.empty(min(n, CHUNK), dtype=np.int64)
    first_stage = _redact_chunk_numpy if use_numpy else _redact_chunk
    tied: list[NDArray[np.int64]] = []
    for start in range(0, n, CHUNK):
        m = min(CHUNK, n - start)
        fill_bytes(source, buf[: 2 * m])
        nt = first_stage(x, idx, flat, k, words[:m], start, out, ties)
        if nt < 0:
            _refuse(x, idx, k, thr.shape[0])
        if nt:
            tied.append(ties[:nt].copy())
    if tied:
        _settle_ties(x, idx, flat, k, np.concatenate(tied), source, out)
    return out


def bit_source(deterministic_seed: int | None, stream_index: int = 0) -> BitSource:
    """The configured source: the ChaCha20 keystream keyed from the OS CSPRNG, or — when a seed is
    configured — seeded PCG64 words (one independent stream per configured stream). Seeded mode is
    for tests, demos and benchmarks; payloads and status say "deterministic" whenever it is in use."""
    if deterministic_seed is None:
        return KeystreamSource()
    return SeededSource(deterministic_seed, stream=100 + stream_index)
