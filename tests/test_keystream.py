"""The ChaCha20 keystream CSPRNG (streamguard.sampling.KeystreamSource) and the lazy 16-bit
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
from streamguard.sampling import CHUNK, REDACTED, KeystreamSource, apply_redaction, bit_source

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
    keys = [bytes([i]) * 32 for i in range(1, 6)]
    drawn: list[int] = []

    def fake_urandom(n: int) -> bytes:
        assert n == 32
        drawn.append(n)
        return keys[len(drawn) - 1]

    src = KeystreamSource(block_bytes=64)
    monkeypatch.setattr(sampling.os, "urandom", fake_urandom)
    stream = b"".join(chacha20_block(k, 0, bytes(12)) for k in keys)  # 64 bytes (one block) per key
    assert src.words(8).tobytes() == stream[:64]  # one whole block under key 1
    assert src.words(4).tobytes() == stream[64:96]  # key 1 is spent: key 2
    buf = np.zeros(37, np.uint8)
    src.fill(buf)  # draws continue byte by byte, across the end of key 2's block
    assert buf.tobytes() == stream[96:133]
    assert src.words(7).tobytes() == stream[133:189]
    assert src.words(10).tobytes() == stream[189:269]  # keys 3, 4 and 5: no key serves two blocks
    assert len(drawn) == 5


def test_no_word_is_served_twice() -> None:
    src = KeystreamSource(block_bytes=4096)
    got = [src.words(n) for n in (1, 7, 300, 511, 513, 2000, 3)]
    for n in (5, 1000, 4099):
        buf = np.empty(8 * n, np.uint8)
        src.fill(buf)
        got.append(buf.view(np.uint64))
    words = np.concatenate(got)
    assert np.unique(words).size == words.size  # 64-bit collisions among 8,439 uniform words: ~2e-12


def test_fill_refuses_a_buffer_it_cannot_write_in_place() -> None:
    src = KeystreamSource()
    with pytest.raises(ValueError, match="C-contiguous uint8"):
        src.fill(np.zeros(16, np.uint8)[::2])
    with pytest.raises(ValueError, match="C-contiguous uint8"):
        src.fill(np.zeros(4, np.uint32))


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
    """A BitSource serving given 16-bit words to ``fill`` (the first stage) and given 64-bit words
    to ``words`` (the ties), and recording how many of each it served."""

    deterministic = True

    def __init__(self, w16: np.ndarray, w64: np.ndarray) -> None:
        self._w16, self._w64 = np.asarray(w16, np.uint16), np.asarray(w64, np.uint64)
        self.served16 = self.asked64 = 0

    def fill(self, buf: np.ndarray) -> None:
        m = buf.shape[0] // 2
        buf.view(np.uint16)[:] = self._w16[self.served16: self.served16 + m]
        self.served16 += m

    def words(self, n: int) -> np.ndarray:
        out = self._w64[self.asked64: self.asked64 + n]
        self.asked64 += n
        return out


EDGE_THRESHOLDS = [0, 1, (1 << 47) - 1, 1 << 47, (1 << 47) + 5, 1 << 62, (1 << 63) - (1 << 10),
                   (1 << 63) - (1 << 47), (1 << 63) - 1, 1 << 63]


@pytest.mark.parametrize("use_numpy", [False, True])
def test_lazy_comparison_is_the_full_63_bit_comparison(use_numpy: bool) -> None:
    """Each record is redacted iff U = W·2⁴⁷ + L < T, with W its 16-bit word and L the top 47 bits of
    the extra word drawn for it if (and only if) W ties with ⌊T / 2⁴⁷⌋ and T mod 2⁴⁷ ≠ 0 — checked
    with Python integers against the full comparison, for thresholds and words chosen to hit every
    case (forced ties included), over more than one chunk."""
    rng = np.random.default_rng(7)
    n = CHUNK + 4000
    thr_vals = EDGE_THRESHOLDS + [int(x) for x in rng.integers(0, 1 << 63, size=7, dtype=np.uint64)]
    thr = np.array(thr_vals, dtype=np.uint64).reshape(-1, 1)
    index = rng.integers(0, thr.shape[0], size=n)
    hi = np.minimum(thr[index, 0] >> np.uint64(47), np.uint64(0xFFFF))
    w16 = np.where(rng.random(n) < 0.5, hi, rng.integers(0, 1 << 16, size=n, dtype=np.uint64)).astype(np.uint16)
    extra = rng.integers(0, 1 << 64, size=n, dtype=np.uint64)
    src = _Scripted(w16, extra)
    out = apply_redaction(np.zeros(n, np.int8), thr, index, src, use_numpy=use_numpy)
    t = [int(thr[index[i], 0]) for i in range(n)]
    ties = [i for i in range(n) if int(w16[i]) == t[i] >> 47 and t[i] % (1 << 47) != 0]
    assert src.served16 == n and src.asked64 == len(ties) > 10_000  # extra words for the ties only, in order
    low = {i: int(extra[j]) >> 17 for j, i in enumerate(ties)}
    # a record without an extra word is decided as if L were maximal (the tie then releases: R = 0)
    expected = [REDACTED if (int(w16[i]) << 47) + low.get(i, (1 << 47) - 1) < t[i] else 0 for i in range(n)]
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("threshold", EDGE_THRESHOLDS + [0x2345_6789_ABCD_EF01, 0x7FFF_0000_0000_0001])
def test_redaction_probability_is_exactly_t_over_2_63(threshold: int) -> None:
    """Exhaustive over the first stage: all 2¹⁶ words W, each once. Exactly ⌊T / 2⁴⁷⌋ of them redact
    outright, at most one (W = ⌊T / 2⁴⁷⌋, and only if R = T mod 2⁴⁷ ≠ 0) asks for L, and that one is
    redacted iff L < R (checked at L = R − 1 and L = R). So Pr(redact) = (H·2⁴⁷ + R) / 2⁶³ = T / 2⁶³."""
    h, r = threshold >> 47, threshold % (1 << 47)
    thr = np.array([[threshold]], dtype=np.uint64)
    all_words = np.arange(1 << 16, dtype=np.uint64)
    for low, redacts_tie in ((max(r - 1, 0), r > 0), (r, False)):
        src = _Scripted(all_words, np.full(1, low << 17, dtype=np.uint64))
        out = apply_redaction(np.zeros(1 << 16, np.int8), thr, np.zeros(1 << 16, np.int64), src)
        tie = h < (1 << 16) and r > 0
        assert src.asked64 == int(tie)
        assert np.count_nonzero(out == REDACTED) == min(h, 1 << 16) + int(tie and redacts_tie)
        np.testing.assert_array_equal(out[: min(h, 1 << 16)], REDACTED)  # exactly the words W < H
