"""Pruned quilt searches (numba) over the monotone tables of :mod:`streamguard.quilt.influence`.

Both searches are exact branch-and-bound minimisations over a rectangle of two-sided quilts
(a, b) ∈ [1, amax] × [1, bmax]. They rely only on e(a, b) being non-increasing in a and b (which
the tables guarantee), so on a sub-rectangle [a0, a1] × [b0, b1] the smallest e is e(a1, b1):

* noise scale (Algorithm 1):  min (a+b−1) / (ε − e(a,b)),  lower bound (a0+b0−1)/(ε − e(a1,b1));
* accountant (notes/002 §4.7): min Σ_{j∈N} ρ_j + e(a,b) with N = [x−a+1, x+b−1],
  lower bound load(a0, b0) + e(a1, b1) (the load is non-decreasing in a and b).

A rectangle whose bound is not strictly below the incumbent is dropped, so the result equals the
full enumeration's minimum; among ties the first one found is kept. The one-sided quilts are 1-D
loops over the one-sided maxima (:func:`one_sided_best`). The searches also return how many table cells they evaluated.
"""

from __future__ import annotations

import numpy as np

from streamguard.support.jit import kernel

from .influence import e_value

_STACK = 512  # depth ≤ log2(amax) + log2(bmax) + 2 per branch; two entries per level


@kernel
def _push_halves(st, top, a0, a1, b0, b1):  # pragma: no cover - compiled
    """Split the rectangle [a0, a1] × [b0, b1] across its longer side and push both halves on the
    stack ``st`` at ``top`` (the lower half last, so it is searched first); returns the new top."""
    if a1 - a0 >= b1 - b0:
        m = (a0 + a1) // 2
        lo_a, hi_a, lo_b, hi_b = m + 1, a1, b0, b1
        a1 = m
    else:
        m = (b0 + b1) // 2
        lo_a, hi_a, lo_b, hi_b = a0, a1, m + 1, b1
        b1 = m
    st[top, 0] = lo_a
    st[top, 1] = hi_a
    st[top, 2] = lo_b
    st[top, 3] = hi_b
    st[top + 1, 0] = a0
    st[top + 1, 1] = a1
    st[top + 1, 2] = b0
    st[top + 1, 3] = b1
    return top + 2


@kernel
def bb_score(bwd, fwd, amax, bmax, cmax, eps, best):  # pragma: no cover - compiled
    """min over a ≤ amax, b ≤ bmax, a+b−1 ≤ cmax of (a+b−1)/(ε − e(a,b)) if below ``best``.

    Returns (score, a, b, e, cells); a = b = 0 when nothing beats ``best``.
    """
    amax = min(amax, cmax)
    bmax = min(bmax, cmax)
    ba = 0
    bb = 0
    be = 0.0
    cells = 0
    if amax < 1 or bmax < 1:
        return best, ba, bb, be, cells
    st = np.empty((_STACK, 4), dtype=np.int64)
    top = 0
    st[0, 0] = 1
    st[0, 1] = amax
    st[0, 2] = 1
    st[0, 3] = bmax
    top = 1
    while top > 0:
        top -= 1
        a0 = st[top, 0]
        a1 = st[top, 1]
        b0 = st[top, 2]
        b1 = st[top, 3]
        if a0 + b0 - 1 > cmax:
            continue
        e = e_value(bwd, fwd, a1, b1)
        cells += 1
        if not e < eps:
            continue
        if (a0 + b0 - 1) / (eps - e) >= best:
            continue
        if a1 + b1 - 1 <= cmax:
            s = (a1 + b1 - 1) / (eps - e)
            if s < best:
                best = s
                ba = a1
                bb = b1
                be = e
        if a0 == a1 and b0 == b1:
            continue
        top = _push_halves(st, top, a0, a1, b0, b1)
    return best, ba, bb, be, cells


@kernel
def bb_load(bwd, fwd, S, x, amax, bmax, best):  # pragma: no cover - compiled
    """min over a ≤ amax, b ≤ bmax of (S[x+b] − S[x−a+1]) + e(a,b) if below ``best``.

    ``S`` are prefix sums of the loads (S[j] = Σ_{m<j} ρ_m) on a local array holding position x;
    the caller guarantees x − amax + 1 ≥ 0 and x + bmax < len(S). Returns (value, a, b, cells).
    """
    ba = 0
    bb = 0
    cells = 0
    if amax < 1 or bmax < 1:
        return best, ba, bb, cells
    st = np.empty((_STACK, 4), dtype=np.int64)
    st[0, 0] = 1
    st[0, 1] = amax
    st[0, 2] = 1
    st[0, 3] = bmax
    top = 1
    while top > 0:
        top -= 1
        a0 = st[top, 0]
        a1 = st[top, 1]
        b0 = st[top, 2]
        b1 = st[top, 3]
        low = S[x + b0] - S[x - a0 + 1]
        if low >= best:
            continue
        e = e_value(bwd, fwd, a1, b1)
        cells += 1
        if low + e >= best:
            continue
        v = S[x + b1] - S[x - a1 + 1] + e
        if v < best:
            best = v
            ba = a1
            bb = b1
        if a0 == a1 and b0 == b1:
            continue
        top = _push_halves(st, top, a0, a1, b0, b1)
    return best, ba, bb, cells


@kernel
def diagonal_score(bwd, fwd, R, eps):  # pragma: no cover - compiled
    """Best (2d−1)/(ε − e(d,d)) over d ≤ R: a quick incumbent. Returns (score, d, e)."""
    best = np.inf
    bd = 0
    be = 0.0
    for d in range(1, R + 1):
        if (2 * d - 1) / eps >= best:
            break
        e = e_value(bwd, fwd, d, d)
        if e < eps:
            s = (2 * d - 1) / (eps - e)
            if s < best:
                best = s
                bd = d
                be = e
    return best, bd, be


@kernel
def one_sided_best(EL, ER, i, T, eps, cmax):  # pragma: no cover - compiled
    """Best one-sided or empty quilt of node i (1-based) in a chain of length T.

    Options: ∅ (card T, e = 0), {X_{i+b}} (card i+b−1, e = ER[b] = e(⊥,b)), {X_{i−a}} (card a+T−i,
    e = EL[a] = e(a,⊥)), with a ≤ min(i−1, len(EL)−1), b ≤ min(T−i, len(ER)−1); cards above
    ``cmax`` are skipped (they cannot be active). Returns (score, a, b, e) with 0 for an absent side.
    """
    best = T / eps
    ba = 0
    bb = 0
    be = 0.0
    bmax = min(T - i, ER.shape[0] - 1)
    for b in range(1, bmax + 1):
        card = i + b - 1
        if card > cmax or card / eps >= best:
            break
        e = ER[b]
        if e < eps:
            s = card / (eps - e)
            if s < best:
                best = s
                ba = 0
                bb = b
                be = e
    amax = min(i - 1, EL.shape[0] - 1)
    for a in range(1, amax + 1):
        card = a + T - i
        if card > cmax or card / eps >= best:
            break
        e = EL[a]
        if e < eps:
            s = card / (eps - e)
            if s < best:
                best = s
                ba = a
                bb = 0
                be = e
    return best, ba, bb, be


@kernel
def one_sided_all(EL, ER, T, eps, cmax, score, a_out, b_out, e_out):  # pragma: no cover - compiled
    """:func:`one_sided_best` for every node i = 1..T of a translation-invariant table."""
    for i in range(1, T + 1):
        s, a, b, e = one_sided_best(EL, ER, i, T, eps, cmax)
        score[i - 1] = s
        a_out[i - 1] = a
        b_out[i - 1] = b
        e_out[i - 1] = e
