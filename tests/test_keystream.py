"""The ChaCha20 keystream CSPRNG (streamguard.sampling.KeystreamSource) and the lazy 32-bit
comparison of the redaction sampler.

The keystream is checked against RFC 8439's test vector and against an independent pure-Python
ChaCha20 written here from the RFC (§2.1–2.3), across the MiB chunks the source encrypts; re-keying,
single use of every word and fork safety are checked on the words actually served.
"""

from __future__ import annotations

import os
import struct
import threading

import numpy as np
import pytest

from streamguard import sampling
from streamguard.sampling import REDACTED, KeystreamSource, apply_redaction, bit_source

MASK32 = 0xFFFFFFFF


def _rotl(v: int, c: int) -> int:
    return ((v << c) & MASK32) | (v >> (32 - c))


def _quarter(s: list[int], a: int, b: int, c: int, d: int) -> None:
    s[a] = (s[a] + s[b]) & MASK32
    s[d] = _rotl(s[d] ^ s[a], 16)
    s[c] = (s[c] + s[d]) & MASK32
    s[b] = _rotl(s[b] ^ s[c], 12)
    s[a] = (s[a] + s[b]) & MASK32
    s[d] = _rotl(s[d] ^ s[a], 8)
    s[c] = (s[c] + s[d]) & MASK32
    s[b] = _rotl(s[b] ^ s[c], 7)


def chacha20_block(key: bytes, counter: int, nonce: bytes) -> bytes:
    """RFC 8439 §2.3: one 64-byte block for a 32-byte key, a 32-bit counter, a 12-byte nonce."""
    state = [0x61707865, 0x3320646E, 0x79622D32, 0x6B206574, *struct.unpack("<8L", key), counter,
             *struct.unpack("<3L", nonce)]
    s = list(state)
    for _ in range(10):
        _quarter(s, 0, 4, 8, 12)
        _quarter(s, 1, 5, 9, 13)
        _quarter(s, 2, 6, 10, 14)
        _quarter(s, 3, 7, 11, 15)
        _quarter(s, 0, 5, 10, 15)
        _quarter(s, 1, 6, 11, 12)
        _quarter(s, 2, 7, 8, 13)
        _quarter(s, 3, 4, 9, 14)
    return struct.pack("<16L", *((x + y) & MASK32 for x, y in zip(s, state)))


RFC_KEY = bytes(range(32))
RFC_NONCE = bytes.fromhex("000000090000004a00000000")
#: RFC 8439 §2.3.2, the serialized block for RFC_KEY, RFC_NONCE and block counter 1.
RFC_BLOCK = bytes.fromhex(
    "10f1e7e4d13b5915500fdd1fa32071c4c7d1f4c733c068030422aa9ac3d46c4e"
    "d2826446079faa0914c2d705d98b02a2b5129cd1de164eb9cbd083e8a2503c4e")


def test_rfc8439_block_vector() -> None:
    assert chacha20_block(RFC_KEY, 1, RFC_NONCE) == RFC_BLOCK
    nonce16 = (1).to_bytes(4, "little") + RFC_NONCE  # the library's nonce: counter, then the RFC nonce
    assert KeystreamSource.keystream(RFC_KEY, nonce16, 64).tobytes() == RFC_BLOCK


def test_keystream_matches_the_reference_across_chunks() -> None:
    key = bytes(range(100, 132))
    size = (1 << 20) + 128  # crosses the MiB boundary where the source starts a new chunk
    ks = KeystreamSource.keystream(key, bytes(16), size).tobytes()
    for counter in (0, 1, (1 << 20) // 64 - 1, (1 << 20) // 64, (1 << 20) // 64 + 1):
        assert ks[64 * counter: 64 * counter + 64] == chacha20_block(key, counter, bytes(12)), counter


def test_every_block_has_a_fresh_key_from_the_os(monkeypatch: pytest.MonkeyPatch) -> None:
    keys = [bytes([i]) * 32 for i in range(1, 5)]
    drawn: list[int] = []

    def fake_urandom(n: int) -> bytes:
        assert n == 32
        drawn.append(n)
        return keys[len(drawn) - 1]

    src = KeystreamSource(block_bytes=64)
    monkeypatch.setattr(sampling.os, "urandom", fake_urandom)
    stream = [chacha20_block(k, 0, bytes(12)) for k in keys]
    assert src.words(8).tobytes() == stream[0]  # one whole block under key 1
    assert src.words(4).tobytes() == stream[1][:32]  # key 1 is spent: key 2
    assert src.words32(8).tobytes() == stream[1][32:]
    assert src.words32(1).tobytes() == stream[2][:4]  # key 3
    assert src.words(7).tobytes() == stream[2][8:]  # draws start 8-byte aligned: bytes 4..7 are skipped
    assert src.words(1).tobytes() == stream[3][:8]  # key 3 is spent: key 4
    assert len(drawn) == 4


def test_no_word_is_served_twice() -> None:
    src = KeystreamSource(block_bytes=4096)
    got = np.concatenate([src.words(n) for n in (1, 7, 300, 511, 513, 2000, 3)]
                         + [src.words32(n).astype(np.uint64) << np.uint64(32) for n in (5, 1000)])
    assert np.unique(got).size == got.size  # 64-bit collisions among 4,335 uniform words: ~5e-13


def test_threads_never_share_a_word() -> None:
    src = KeystreamSource(block_bytes=1024)
    got: list[np.ndarray] = []

    def draw() -> None:
        got.extend(src.words(n).copy() for n in [3, 17, 64, 1, 200] * 20)

    threads = [threading.Thread(target=draw) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=30)
    words = np.concatenate(got)
    assert words.size == 4 * 20 * 285 and np.unique(words).size == words.size


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_never_serves_the_parents_words() -> None:
    src = KeystreamSource()
    src.words(1)  # the parent holds a block now, most of it unserved
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        try:
            os.write(write, src.words(4).tobytes())
        finally:
            os._exit(0)
    os.close(write)
    child = b""
    while len(child) < 32:
        chunk = os.read(read, 32 - len(child))
        if not chunk:
            break
        child += chunk
    os.close(read)
    os.waitpid(pid, 0)
    assert len(child) == 32
    assert child != src.words(4).tobytes()  # the parent's next words: the child had to re-key


def test_production_source_is_the_keystream_and_not_deterministic() -> None:
    src = bit_source(None)
    assert isinstance(src, KeystreamSource) and src.deterministic is False


class _Scripted:
    """A BitSource serving given 32-bit words first and given 64-bit words for the ties."""

    deterministic = True

    def __init__(self, w32: np.ndarray, w64: np.ndarray) -> None:
        self._w32, self._w64 = w32, w64
        self.asked64 = 0

    def words32(self, n: int) -> np.ndarray:
        return self._w32[:n]

    def words(self, n: int) -> np.ndarray:
        out = self._w64[self.asked64: self.asked64 + n]
        self.asked64 += n
        return out


@pytest.mark.parametrize("use_numpy", [False, True])
def test_lazy_comparison_is_the_full_63_bit_comparison(use_numpy: bool) -> None:
    """Each record is redacted iff U = h·2³¹ + ℓ < T, with h its 32-bit word and ℓ the top 31 bits of
    the extra word drawn for it if (and only if) h ties with ⌊T / 2³¹⌋ — checked against the full
    integer comparison for thresholds and words chosen to hit every case (ties included)."""
    rng = np.random.default_rng(7)
    n = 4000
    thr_vals = [0, 1, (1 << 31) - 1, 1 << 31, (1 << 31) + 5, 1 << 62, (1 << 63) - (1 << 10), (1 << 63) - 1, 1 << 63]
    thr_vals += [int(x) for x in rng.integers(0, 1 << 63, size=7, dtype=np.uint64)]
    thr = np.array(thr_vals, dtype=np.uint64).reshape(-1, 1)
    index = rng.integers(0, thr.shape[0], size=n)
    hi = np.minimum(thr[index, 0] >> np.uint64(31), np.uint64(MASK32))
    h = np.where(rng.random(n) < 0.5, hi, rng.integers(0, 1 << 32, size=n, dtype=np.uint64)).astype(np.uint32)
    extra = rng.integers(0, 1 << 63, size=n, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    src = _Scripted(h, extra)
    out = apply_redaction(np.zeros(n, np.int8), thr, index, src, use_numpy=use_numpy)
    ties = [i for i in range(n) if int(h[i]) == int(thr[index[i], 0]) >> 31]
    assert src.asked64 == len(ties) > 1000  # extra words for the ties only, in record order
    low = {i: int(extra[j]) >> 33 for j, i in enumerate(ties)}
    expected = [REDACTED if (int(h[i]) << 31) + low.get(i, 0) < int(thr[index[i], 0])
                and (i in low or int(h[i]) < int(thr[index[i], 0]) >> 31) else 0 for i in range(n)]
    np.testing.assert_array_equal(out, expected)
