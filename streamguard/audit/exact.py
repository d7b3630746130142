"""Exact LDP leakage of any sequence of local channels about one record of a binary Markov chain.

Definition (paper 000 Def. 1), for the private record X_p and the whole released sequence Y:

    L(X_p → Y) = log sup_{y ∈ supp(Y)} max_{a ≠ b} Pr(Y = y | X_p = a) / Pr(Y = y | X_p = b).

Algorithm (notes/000 §9.2, generalised from redaction to arbitrary emission columns and to
non-stationary chains). Given X_p the two sides are independent, so

    Pr(y | X_p = x) = e_p(y_p | x) · Λ_x(y_left) · P_x(y_right).

On one side, ordered outward (distance 1, 2, …), let g_d(x) = Pr(y_{d..D} | X at distance d−1 = x)
with g_{D+1} = 1. Then g_d = K_d · diag(e_d(y_d | ·)) · g_{d+1}, where K_d is the kernel for the step
outward: P on the right; on the left the time-reversed kernel Pr(X_{t−1} | X_t), which for a
stationary binary chain is P itself. For k = 2 each step is a Möbius map of the ratio
g(0)/g(1) with non-negative coefficients, hence monotone, so the smallest and largest ratio over
*all* supported suffixes propagate through the two extreme vectors alone: O(D · m) work, exact.
Ratios are carried as normalised vectors (g(0), g(1)), so 0 and ∞ are represented without overflow.

The leakage is then the maximum over supported y_p of
max(s + hi_left + hi_right, −(s + lo_left + lo_right)), with s = log e_p(y_p|0) − log e_p(y_p|1);
redaction has Y_p = ⊥ surely, so s = 0 and L ≤ L_left + L_right (the decomposition behind
paper 000 Eq. 2, notes/000 §4.1).

Every kernel here has a plain-numpy twin (``*_numpy``) that the tests compare against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ..support.jit import kernel
from ..model.chain import MarkovChain, ModelError
from ..privacy.channel import ChannelError, ChannelSequence


@kernel
def _side_extremes_kernel(kernels, tables, index, out):  # pragma: no cover - compiled
    """Extreme suffix vectors of one side. kernels: (K,C,2,2) with K = 1 (homogeneous) or K = D,
    and C candidate kernels per step (C = 1 for one chain; C > 1: the extremes over every choice of
    a candidate at each step, streamguard.model.interval); tables: (c,2,m); index: (D,) outward.
    Writes out[0] = argmin-ratio vector, out[1] = argmax. Returns the first distance (1-based) with
    no supported output, or 0 when all are fine."""
    lo0 = 0.5
    lo1 = 0.5
    hi0 = 0.5
    hi1 = 0.5
    D = index.shape[0]
    K = kernels.shape[0]
    C = kernels.shape[1]
    m = tables.shape[2]
    for d in range(D - 1, -1, -1):
        kk = 0 if K == 1 else d
        tab = index[d]
        have = False
        nlo0 = 0.0
        nlo1 = 0.0
        nhi0 = 0.0
        nhi1 = 0.0
        for y in range(m):
            e0 = tables[tab, 0, y]
            e1 = tables[tab, 1, y]
            if e0 == 0.0 and e1 == 0.0:
                continue
            for cc in range(C):
                k00 = kernels[kk, cc, 0, 0]
                k01 = kernels[kk, cc, 0, 1]
                k10 = kernels[kk, cc, 1, 0]
                k11 = kernels[kk, cc, 1, 1]
                for c in range(2):
                    if c == 0:
                        w0 = e0 * lo0
                        w1 = e1 * lo1
                    else:
                        w0 = e0 * hi0
                        w1 = e1 * hi1
                    g0 = k00 * w0 + k01 * w1
                    g1 = k10 * w0 + k11 * w1
                    s = g0 + g1
                    if s <= 0.0:
                        continue  # this y cannot follow that suffix: not in the support
                    g0 /= s
                    g1 /= s
                    if not have:
                        nlo0 = g0
                        nlo1 = g1
                        nhi0 = g0
                        nhi1 = g1
                        have = True
                    else:
                        if g0 * nlo1 < nlo0 * g1:
                            nlo0 = g0
                            nlo1 = g1
                        if g0 * nhi1 > nhi0 * g1:
                            nhi0 = g0
                            nhi1 = g1
        if not have:
            return d + 1
        lo0 = nlo0
        lo1 = nlo1
        hi0 = nhi0
        hi1 = nhi1
    out[0, 0] = lo0
    out[0, 1] = lo1
    out[1, 0] = hi0
    out[1, 1] = hi1
    return 0


def _side_extremes_numpy(kernels, tables, index):
    """Plain-numpy reference of :func:`_side_extremes_kernel` (vectorised over outputs)."""
    lo = np.array([0.5, 0.5])
    hi = np.array([0.5, 0.5])
    D = index.shape[0]
    for d in range(D - 1, -1, -1):
        K = kernels[0 if kernels.shape[0] == 1 else d]
        E = tables[index[d]]  # (2, m)
        E = E[:, (E > 0).any(axis=0)]
        W = np.concatenate([E * lo[:, None], E * hi[:, None]], axis=1)  # (2, 2m)
        G = K @ W
        s = G.sum(axis=0)
        G = G[:, s > 0] / s[s > 0]
        if G.shape[1] == 0:
            return None, None, d + 1
        with np.errstate(divide="ignore"):
            r = G[0] / G[1]
        lo = G[:, int(np.argmin(r))]
        hi = G[:, int(np.argmax(r))]
    return lo, hi, 0


def _log_ratio(v: NDArray[np.float64]) -> float:
    if v[1] == 0.0:
        return math.inf
    if v[0] == 0.0:
        return -math.inf
    return math.log(v[0]) - math.log(v[1])


@dataclass(frozen=True)
class SideRange:
    """Range [lo, hi] of log Pr(y_side | X_p=0)/Pr(y_side | X_p=1) over supported y_side."""

    lo: float
    hi: float

    @property
    def leakage(self) -> float:
        """L(X_p → Y_side) = max(hi, −lo): the side's leakage when Y_p = ⊥."""
        return max(self.hi, -self.lo)


EMPTY_SIDE = SideRange(0.0, 0.0)


def _first_revealing(revealing: NDArray[np.bool_], index: NDArray[np.int64]) -> int:
    """Offset of the first record of ``index`` whose table is revealing (len(index) if none).

    Scans in doubling chunks, so the cost is proportional to the distance found, not to n.
    """
    start, chunk = 0, 64
    while start < index.shape[0]:
        hits = np.flatnonzero(revealing[index[start : start + chunk]])
        if hits.size:
            return start + int(hits[0])
        start += chunk
        chunk *= 2
    return int(index.shape[0])


def side_range(
    kernels: NDArray[np.float64],
    tables: NDArray[np.float64],
    index: NDArray[np.int64],
    *,
    revealing: NDArray[np.bool_] | None = None,
    use_numpy: bool = False,
) -> SideRange:
    """Exact log-ratio range of one side (see module docstring). ``index`` is ordered outward.

    ``kernels`` is (K, 2, 2) (one chain), or (K, C, 2, 2): C candidate kernels per step, and the
    range over every choice of a candidate at each step (streamguard.model.interval; kernel only).

    With ``revealing`` (per table, see :meth:`ChannelSequence.revealing_tables`) the side is cut
    after its first revealing record: what lies beyond is independent of X_p given that record's
    value, so the result is unchanged and the cost is the distance to that record.
    """
    if revealing is not None:
        index = index[: _first_revealing(revealing, index) + 1]
    if index.shape[0] == 0:
        return EMPTY_SIDE
    kernels = np.ascontiguousarray(kernels, dtype=np.float64)
    index = np.ascontiguousarray(index, dtype=np.int64)
    if kernels.ndim == 3:
        kernels = kernels[:, None]
    if use_numpy:
        if kernels.shape[1] != 1:
            raise ValueError("the numpy reference takes one kernel per step")
        lo, hi, bad = _side_extremes_numpy(kernels[:, 0], tables, index)
    else:
        out = np.empty((2, 2))
        bad = _side_extremes_kernel(np.ascontiguousarray(kernels), tables, index, out)
        lo, hi = out[0], out[1]
    if bad:
        raise ChannelError(f"no output is possible at distance {bad} from the private record")
    return SideRange(_log_ratio(lo), _log_ratio(hi))


@dataclass(frozen=True)
class Leakage:
    """Exact leakage (nats) about one private record: total, and each side alone (as if Y_p = ⊥)."""

    total: float
    left: float
    right: float

    def as_dict(self) -> dict[str, float]:
        return {"total": self.total, "left": self.left, "right": self.right}


def left_kernels(chain: MarkovChain, p: int) -> NDArray[np.float64]:
    """Kernels stepping left from index p: (1,2,2) when stationary, else one per step (p,2,2).

    Step d (0-based) goes from index p−d to p−d−1 with R[j, i] = Pr(X_{p−d−1} = i | X_{p−d} = j).
    """
    if chain.stationary:
        return chain.reversed_kernel(chain.initial)[None]
    marg = chain.marginals(p)[::-1]  # marg[d] = law of index p−1−d
    joint = marg[:, :, None] * chain.matrix[None]  # joint[d, i, j] = Pr(X_{p−1−d}=i, X_{p−d}=j)
    after = joint.sum(axis=1)  # (p, k): law of index p−d
    with np.errstate(invalid="ignore", divide="ignore"):
        R = np.swapaxes(joint, 1, 2) / after[:, :, None]
    return np.where(np.isfinite(R), R, 1.0 / chain.k)  # unreachable states: never used


def _require_binary_private(chain: MarkovChain, seq: ChannelSequence, p: int) -> None:
    if not chain.is_binary:
        raise ModelError("the O(n) exact audit needs a binary chain; use audit.brute for k > 2")
    if seq.k != 2:
        raise ChannelError(f"emission tables have {seq.k} input states, the chain has 2")
    if not 0 <= p < seq.n:
        raise ValueError(f"private index {p} is outside 0..{seq.n - 1}")
    if p > 0 and np.any(chain.marginal(p) <= 0):
        # (the first record has no left side: a value of probability 0 there is a secret like any
        # other, its right side the chain started from it — docs/initial-law.md)
        raise ModelError("the binary exact audit needs both states possible at a private record after "
                         "the first; use the k-state audit (audit.kstate)")


def exact_leakage(
    chain: MarkovChain, seq: ChannelSequence, p: int, *, use_numpy: bool = False
) -> Leakage:
    """Exact L(X_p → Y) for channels ``seq`` applied to a binary ``chain``; p is a 0-based index."""
    _require_binary_private(chain, seq, p)
    right = _side(chain, seq, p, "right", use_numpy)
    left = _side(chain, seq, p, "left", use_numpy)
    e_p = seq.table(p)
    total = -math.inf
    for y in range(seq.m):
        e0, e1 = float(e_p[0, y]), float(e_p[1, y])
        if e0 == 0.0 and e1 == 0.0:
            continue
        if e0 == 0.0 or e1 == 0.0:
            return Leakage(math.inf, left.leakage, right.leakage)
        s = math.log(e0) - math.log(e1)
        total = max(total, s + left.hi + right.hi, -(s + left.lo + right.lo))
    return Leakage(total, left.leakage, right.leakage)


def _side(chain: MarkovChain, seq: ChannelSequence, p: int, side: str, use_numpy: bool) -> SideRange:
    revealing = seq.revealing_tables()
    if side == "right":
        return side_range(chain.matrix[None], seq.tables, seq.index[p + 1 :], revealing=revealing,
                          use_numpy=use_numpy)
    if side == "left":
        idx = seq.index[p - 1 :: -1] if p else seq.index[:0]
        idx = idx[: _first_revealing(revealing, idx) + 1]
        kern = left_kernels(chain, p)
        if kern.shape[0] > 1:  # per-step kernels: only as far as the side reaches
            kern = kern[: idx.size]
        return side_range(kern, seq.tables, idx, revealing=revealing, use_numpy=use_numpy)
    raise ValueError("side must be 'left' or 'right'")


def side_leakage(
    chain: MarkovChain, seq: ChannelSequence, p: int, side: str, *, use_numpy: bool = False
) -> float:
    """L(X_p → Y_side) for ``side`` in {"left", "right"}, without computing the other side."""
    _require_binary_private(chain, seq, p)
    return _side(chain, seq, p, side, use_numpy).leakage
