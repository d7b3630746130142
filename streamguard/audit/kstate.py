"""Exact leakage of 3R redaction about one record of a k-state Markov chain (docs/k-state-redaction.md).

Redaction releases either the exact value or ⊥ (Pr(⊥ | X_t = x) = r_t(x), the record's *row*), and
the private record itself is redacted surely. For the private record X_p and a pair of secrets
(a, b) the leakage is

    L = log max_{a ≠ b} [ max_{y_left} Pr(y_left | a)/Pr(y_left | b) + ... ]  (in logs: L[a,b] + R[a,b])

because the two sides are independent given X_p and every pair of supported side outputs is a
supported output (docs/k-state-redaction.md §2).

**Right side** (this module). An output of the records p+1..p+m either releases *first* (nearest p)
the record p+d with value x, or redacts all of them. Given X_{p+d} = x, what lies beyond is
independent of X_p (Markov property), so its probability cancels in the ratio, and with
F_d(a, x) = Pr(X_{p+1..p+d−1} all redacted, X_{p+d} = x | X_p = a):

    F_1 = K_1,   F_{d+1} = (F_d · diag(r_d)) · K_{d+1},
    release at (d, x), r_d(x) < 1:  Pr(y | a)/Pr(y | b) = F_d(a, x) / F_d(b, x),
    all redacted:                   Pr(y | a)/Pr(y | b) = g(a)/g(b),  g = F_m · r_m.

R[a, b] is the largest of these log ratios over the outputs possible under a (+∞ when one is
impossible under b). O(m·k²) per secret a, O(m·k³) for all pairs. Rows are carried scaled by a
common factor per step (the ratios are unchanged), so long redacted windows do not underflow.

**Left side**: :func:`streamguard.audit.start.left_pairs` (forward, any initial law or a set of them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..support.jit import kernel
from .start import left_pairs, scaled_product


class RowsError(ValueError):
    """Redaction rows that are not (n, k) probabilities."""


def check_rows(rows: ArrayLike, k: int) -> NDArray[np.float64]:
    """(n, k) redaction rows Pr(⊥ | X = x), finite and in [0, 1]; a one-line error otherwise."""
    arr = np.asarray(rows, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] != k:
        raise RowsError(f"redaction rows must be a list of rows of {k} probabilities (one per state)")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0) or np.any(arr > 1):
        raise RowsError("redaction probabilities must be numbers in [0, 1]")
    return np.ascontiguousarray(arr)


@kernel
def _right_kernel(kernels, rows, out):  # pragma: no cover - compiled
    """R[a, b] of the module docstring into ``out``; kernels (m, k, k) (step d from p+d−1 to p+d)."""
    m = rows.shape[0]
    k = rows.shape[1]
    F = kernels[0].copy()
    Ft = F.T.copy()
    kernels_t = np.empty_like(kernels)
    for d in range(m):
        kernels_t[d] = kernels[d].T
    tmp = np.empty((k, k))
    lg = np.empty(k)
    for a in range(k):
        for b in range(k):
            out[a, b] = 0.0 if a == b else -np.inf
    for d in range(m):
        if d > 0:
            # F ← F · diag(r_{d−1}) · K_d, computed transposed: Fᵀ ← K_dᵀ · diag(r_{d−1}) · Fᵀ
            scaled_product(kernels_t[d], rows[d - 1], Ft, tmp)
            for a in range(k):
                for x in range(k):
                    F[a, x] = Ft[x, a]
        for x in range(k):
            if rows[d, x] >= 1.0:
                continue  # never released here
            for a in range(k):  # k logarithms per value, not k² (the pairs are differences)
                lg[a] = np.log(F[a, x]) if F[a, x] > 0.0 else -np.inf
            for a in range(k):
                if F[a, x] <= 0.0:
                    continue
                for b in range(k):
                    if a == b:
                        continue
                    val = np.inf if F[b, x] <= 0.0 else lg[a] - lg[b]
                    if val > out[a, b]:
                        out[a, b] = val
    if m > 0:
        g = np.zeros(k)
        for a in range(k):
            for x in range(k):
                g[a] += F[a, x] * rows[m - 1, x]
        for a in range(k):
            if g[a] <= 0.0:
                continue
            for b in range(k):
                if a == b:
                    continue
                val = np.inf if g[b] <= 0.0 else np.log(g[a]) - np.log(g[b])
                if val > out[a, b]:
                    out[a, b] = val


def _log_ratio(num: float, den: float) -> float:
    if num <= 0.0:
        return -math.inf
    if den <= 0.0:
        return math.inf
    return math.log(num) - math.log(den)


def _right_numpy(kernels: NDArray[np.float64], rows: NDArray[np.float64]) -> NDArray[np.float64]:
    """Plain-numpy twin of :func:`_right_kernel` (the tests compare the two)."""
    m, k = rows.shape
    out = np.full((k, k), -math.inf)
    np.fill_diagonal(out, 0.0)
    F = np.array(kernels[0], dtype=np.float64)
    for d in range(m):
        if d:
            F = (F * rows[d - 1][None, :]) @ kernels[d]
            F = F / F.max() if F.max() > 0 else F
        terms = [F[:, x] for x in range(k) if rows[d, x] < 1.0]
        if d == m - 1:
            terms.append(F @ rows[d])
        for col in terms:
            for a in range(k):
                for b in range(k):
                    if a != b and col[a] > 0:
                        out[a, b] = max(out[a, b], _log_ratio(float(col[a]), float(col[b])))
    return out


def right_pairs(kernels: NDArray[np.float64], rows: NDArray[np.float64], *,
                use_numpy: bool = False) -> NDArray[np.float64]:
    """R[a, b] = max over outputs of the records right of p of log Pr(y | X_p = a)/Pr(y | X_p = b).

    ``rows``: (m, k) redaction rows at distances 1..m; ``kernels``: (m, k, k), step d from distance
    d−1 to d (P, or P^{G+1} across a restart gap). The records end at distance m: to model a record
    released beyond (a stream), append a row of zeros. m = 0: nothing on the right (all zeros).
    """
    m, k = rows.shape
    if m == 0:
        return np.zeros((k, k))
    if kernels.shape != (m, k, k):
        raise ValueError("right_pairs: one (k, k) kernel per record")
    kernels = np.ascontiguousarray(kernels, dtype=np.float64)
    rows = np.ascontiguousarray(rows, dtype=np.float64)
    if use_numpy:
        return _right_numpy(kernels, rows)
    out = np.empty((k, k))
    _right_kernel(kernels, rows, out)
    return out


@dataclass(frozen=True)
class PairLeakage:
    """Exact leakage (nats) about one record: ``total`` = max over pairs (a, b) of L[a,b] + R[a,b];
    ``left``/``right`` each side alone (max over pairs); ``pairs`` the (k, k) totals."""

    total: float
    left: float
    right: float
    pairs: NDArray[np.float64]

    def as_dict(self) -> dict[str, float]:
        return {"total": self.total, "left": self.left, "right": self.right}


def combine(L: NDArray[np.float64], R: NDArray[np.float64]) -> PairLeakage:
    """Per ordered pair (a, b) of distinct values the sides add (in logs); the leakage is the largest
    pair total. Every value of X_p is a secret, one of probability 0 too (docs/initial-law.md)."""
    k = L.shape[0]
    mask = ~np.eye(k, dtype=bool)
    with np.errstate(invalid="ignore"):
        tot = np.where(mask, L + R, -math.inf)
    tot = np.where(np.isnan(tot), math.inf, tot)  # +∞ on one side and −∞ (impossible) can't meet
    return PairLeakage(float(tot.max()), float(np.where(mask, L, -math.inf).max()),
                       float(np.where(mask, R, -math.inf).max()), tot)


def redaction_leakage(P: ArrayLike, initial: ArrayLike | None, rows: ArrayLike, p: int, *,
                      use_numpy: bool = False) -> PairLeakage:
    """Exact L(X_p → Y) of redaction ``rows`` (n × k, Pr(⊥ | X_t = x)) applied to X_0..X_{n−1} of
    the chain with transition matrix ``P`` and first-record law ``initial`` (None: the worst case
    over every initial law — exact for k = 2; for k > 2 the all-redacted-left term is an upper
    bound, see audit/start.py). ``p`` is 0-based; row p is ignored (the private record is redacted).
    A value of X_p of probability 0 is a secret too (docs/initial-law.md): the left side leaks
    without bound about it unless it is surely all redacted (audit/start.py).
    """
    P = np.ascontiguousarray(P, dtype=np.float64)
    k = P.shape[0]
    red = check_rows(rows, k)
    n = red.shape[0]
    if not 0 <= p < n:
        raise ValueError(f"private index {p} is outside 0..{n - 1}")
    laws = np.eye(k) if initial is None else np.asarray(initial, dtype=np.float64)[None]
    kern_l = np.broadcast_to(P, (p, k, k))
    L = left_pairs(kern_l, red[:p][::-1], laws, reaches_start=True, use_numpy=use_numpy)
    m = n - 1 - p
    R = right_pairs(np.broadcast_to(P, (m, k, k)), red[p + 1:], use_numpy=use_numpy)
    return combine(L, R)
