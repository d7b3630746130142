"""Certified leakage bounds over time-varying Markov set-chains (docs/time-varying.md; issue 25).

Process class (docs/time-varying.md §1). X_0, X_1, … with X_{t+1} ~ K_t(X_t, ·), each K_t in the
row-wise set S_t = {lo_t ≤ K ≤ hi_t, rows sum to 1} of its step (its time-of-day block,
:class:`.setchain.SetChain`), chosen anew at every step, and any law of the chain far enough back.
Time-of-day variation and drift inside the sets are members. Two readings of "chosen":

- class A (:func:`chain_bound`, the box terms): the sequence may be random and may depend on the
  clock, on exogenous randomness and on the *published* output so far (a mixture of sequences);
- class A0 (adds the Birkhoff terms of :func:`window_terms`): one fixed, unknown sequence — the
  guarantee holds for the true sequence whatever it is, as a model set's guarantee holds for the
  true member (docs/model-sets.md).

A kernel that depends on *hidden* states after p is in neither: it can carry X_p into every later
released record, and no finite window bounds that (§4 of the page; tests/test_tv_leakage.py).

The bound, for redaction rows r (Pr(⊥ | x) per record) around the private record p with Y_p = ⊥
and every ordered pair a ≠ b:

    log Pr(y | X_p=a)/Pr(y | X_p=b) = log g(a)/g(b)            (left posterior odds, forward)
                                     + log Pr(X_p=b)/Pr(X_p=a)  (prior odds: law of X_p)
                                     + log w(a)/w(b)            (right, backward)

for one kernel sequence; a mixture of sequences (class A) is at most its worst component
(Pr(y, a)/Pr(y, b) is a mediant of the components' ratios, and the law of X_p a mixture of
reachable laws). Each term is bounded over every sequence in the per-step sets, separately
(docs/time-varying.md §2):

- left: :func:`.kinterval.left_bounds_steps` with the sets of the left steps (the forward vector of
  any hidden-history-dependent choice is the forward vector of one Markov sequence: its rows are
  convex mixtures of rows of the set);
- prior: the law of X_p is νK_{p−N}⋯K_{p−1} for *any* law ν at p − N; a ratio of linear functions
  of ν is largest at a vertex e_x, so the bound is that of the left event "release x at distance N"
  through N always-redacted steps (:func:`prior_odds_bound`), minimised over N (each N is valid);
- right: :func:`.kinterval.right_bounds_steps` with the sets of the right steps.

Rounding: the propagated boxes are widened outward by kinterval.WIDEN per step; the sum is raised
by ``ROUND`` · (1 + |figure|) (:func:`_up`), far above the float error of the few additions.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from .kinterval import left_bounds_steps, right_bounds_steps

#: Relative outward rounding of a reported figure (see module docstring).
ROUND = 1e-9

Arr = NDArray[np.float64]


def _up(v: float) -> float:
    return v if math.isinf(v) else v + ROUND * (1.0 + abs(v))


def _c(a: Arr) -> Arr:
    return np.ascontiguousarray(a, dtype=np.float64)


def _grid(n: int) -> list[int]:
    """Horizons tried for the prior bound: 1..16, then doubling, then ``n`` itself."""
    out = list(range(1, min(n, 16) + 1))
    h = 32
    while h < n:
        out.append(h)
        h *= 2
    if n > 16:
        out.append(n)
    return out


def prior_odds_bound(klo: Arr, khi: Arr) -> Arr:
    """(k, k) bound, entry [a, b], on log Pr(X_p = b)/Pr(X_p = a) over every law ν of X_{p−N} and
    every kernel sequence in the sets. ``klo[j − 1]``/``khi[j − 1]`` (N, k, k): step j *backwards*,
    from X_{p−j} to X_{p−j+1}. The bound for each horizon n ≤ N is valid (any law at p − n), so the
    entrywise minimum over a grid of horizons is returned. N = 0: +∞ off the diagonal."""
    n, k = klo.shape[0], klo.shape[1]
    best = np.full((k, k), math.inf)
    np.fill_diagonal(best, 0.0)
    for h in _grid(n):
        out = left_bounds_steps(_c(klo[:h]), _c(khi[:h]), np.ones((h - 1, k)), True)
        best = np.minimum(best, out.T)
    return best


def left_term(klo: Arr, khi: Arr, rows: Arr, *, standin: bool, prior: Arr) -> Arr:
    """(k, k) bound, entry [a, b], on the left side's log Pr(y_ℓ | X_p=a)/Pr(y_ℓ | X_p=b):
    posterior odds (:func:`.kinterval.left_bounds_steps`) plus the prior bound ``prior``
    (:func:`prior_odds_bound`). ``rows`` (m, k): Pr(⊥ | x) at distances 1..m; ``standin``: a record
    released surely lies at distance m + 1 (a stream; m + 1 steps in ``klo``), otherwise the record
    at distance m is the first of the stream (m steps; any law there — its row is treated as a
    release, every value an event, which covers the all-redacted output: a ratio of linear
    functions of the first record's law is largest at a vertex). m = 0: no left side, 0."""
    k = klo.shape[1]
    m = rows.shape[0]
    if m == 0 and not standin:
        return np.zeros((k, k))
    r = _c(rows).copy()
    if not standin:
        r[m - 1] = 0.0
    post = left_bounds_steps(_c(klo), _c(khi), r, standin)
    out = post + prior
    np.fill_diagonal(out, 0.0)
    return out


def right_term(klo: Arr, khi: Arr, rows: Arr, *, ends: bool) -> Arr:
    """(k, k) bound, entry [a, b], on log Pr(y_r | X_p=a)/Pr(y_r | X_p=b) (:func:`.kinterval.
    right_bounds_steps`). ``rows`` (m, k) at distances 1..m; ``ends``: the stream (chain) ends at
    distance m; otherwise pass a released row of zeros last (the records beyond)."""
    k = klo.shape[1]
    if rows.shape[0] == 0:
        return np.zeros((k, k))
    return right_bounds_steps(_c(klo), _c(khi), _c(rows), ends)


def total(left: Arr, right: Arr, mask: NDArray[np.bool_] | None = None) -> float:
    """max over a ≠ b (over ``mask``, lifted chains: :func:`pair_mask`) of left[a, b] + right[a, b],
    rounded outward."""
    s = left + right
    if mask is None:
        mask = ~np.eye(s.shape[0], dtype=bool)
    return _up(float(np.max(np.where(mask, s, -math.inf))))


def chain_bound(klo: Arr, khi: Arr, rows: Arr, p: int) -> float:
    """Certified bound on the leakage about X_p of the emission table ``rows`` (n, k) of a finite
    chain of n records (row p ignored: Y_p = ⊥) over the set-chain with step sets ``klo[t]``,
    ``khi[t]`` (n − 1, k, k; step t from X_t to X_{t+1}), any law of X_0."""
    n, k = rows.shape
    if klo.shape != (n - 1, k, k) or khi.shape != klo.shape or not 0 <= p < n:
        raise ValueError("chain_bound: need n − 1 step sets of k × k and 0 ≤ p < n")  # the kernels do not check
    left_steps = slice(p - 1, None, -1) if p > 0 else slice(0, 0)
    llo, lhi = klo[left_steps], khi[left_steps]  # step j back = kernel t = p − j
    prior = prior_odds_bound(llo, lhi) if p > 0 else np.zeros((k, k))
    L = left_term(llo, lhi, rows[p - 1::-1] if p > 0 else rows[:0], standin=False, prior=prior)
    R = right_term(klo[p:], khi[p:], rows[p + 1:], ends=True)
    return total(L, R)


def tight_bounds(lo: Arr, hi: Arr) -> tuple[Arr, Arr]:
    """Entry bounds of the row-wise set (..., k, k) tightened by the simplex: hi' = min(hi, 1 − Σ_{other} lo),
    lo' = max(lo, 1 − Σ_{other} hi) (every member's entries lie in [lo', hi'])."""
    lo_t = np.maximum(lo, 1.0 - (hi.sum(axis=-1, keepdims=True) - hi))
    hi_t = np.minimum(hi, 1.0 - (lo.sum(axis=-1, keepdims=True) - lo))
    return np.clip(lo_t, 0.0, 1.0), np.clip(hi_t, 0.0, 1.0)


def diameters(klo: Arr, khi: Arr) -> Arr:
    """Per step set (n, k, k), an upper bound on Birkhoff's projective diameter of its members,
    Δ(K) = max_{s,t,a,b} log K_sa K_tb/(K_sb K_ta) ≤ max log hi'_sa hi'_tb/(lo'_sb lo'_ta) (rows
    chosen independently); +∞ when some entry may be 0. Rounded outward."""
    lo, hi = tight_bounds(klo, khi)
    with np.errstate(divide="ignore", invalid="ignore"):  # an entry that may be 0: Δ = ∞ (NaN → ∞ below)
        lhi, llo = np.log(hi), np.log(lo)
        d = lhi[..., :, :, None] - llo[..., :, None, :]  # [n, s, a, b]: log hi_sa − log lo_sb
        m = (d[..., :, None, :, :] + np.swapaxes(d, -1, -2)[..., None, :, :, :]).max(axis=(-4, -3, -2, -1))
    return np.where(np.isfinite(m), m * (1.0 + 1e-12) + 1e-15, math.inf)


def column_spreads(klo: Arr, khi: Arr) -> Arr:
    """Per step set, max over columns x of log max_s K_sx / min_s K_sx ≤ log max_s hi'_sx − log min_s lo'_sx."""
    lo, hi = tight_bounds(klo, khi)
    with np.errstate(divide="ignore", invalid="ignore"):
        m = (np.log(hi.max(axis=-2)) - np.log(lo.min(axis=-2))).max(axis=-1)
    return np.where(np.isfinite(m), m * (1.0 + 1e-12) + 1e-15, math.inf)


def _contractions(diam: Arr) -> Arr:
    """Birkhoff's coefficient τ = tanh(Δ/4) per step (1 for Δ = ∞), rounded up."""
    return np.minimum(1.0, np.tanh(diam / 4.0) * (1.0 + 1e-12))


def _product(lo: Arr, hi: Arr, order: range) -> tuple[Arr, Arr]:
    """Entry bounds of the product of the sets ``order`` (in that order): lo(AB) ≥ lo(A) lo(B),
    hi(AB) ≤ hi(A) hi(B) (non-negative entries), each factor tightened first, rounded outward."""
    plo = phi = None
    for i in order:
        a_lo, a_hi = tight_bounds(lo[i], hi[i])
        if plo is None:
            plo, phi = a_lo, a_hi
        else:
            plo, phi = (plo @ a_lo) * (1.0 - 1e-12), np.minimum(1.0, (phi @ a_hi) * (1.0 + 1e-12))
    return plo, phi


def birkhoff_sides(klo: Arr, khi: Arr, stride: int = 1, *, left: bool) -> Arr:
    """Birkhoff bounds of one side of a window for every side length m = 0..N − 1 (m + 1 steps;
    ``klo[j − 1]``: step j from p outward). The steps are grouped in chunks of ``stride`` from p
    outward (a chunk's product is positive for a lifted memory-``stride`` chain, docs/time-varying.md
    §4); the far chunk takes the remainder. Left (``left``): the Hilbert distance of two rows of
    the product, ≤ Δ(far chunk) · Π τ(near chunks). Right: the distance of a column from the ones
    vector, ≤ (column spread of the far chunk) · Π τ(near chunks). +∞ below ``stride`` steps."""
    n = klo.shape[0]
    if stride == 1:  # one step per chunk: every step's figures at once
        taus = _contractions(diameters(klo, khi))
        lead = (diameters if left else column_spreads)(klo, khi)
        cum = np.concatenate([[1.0], np.cumprod(taus[:-1])]) if n else np.ones(0)
        return np.where(np.isfinite(lead), lead * cum * (1.0 + 1e-12), math.inf)
    out = np.full(n, math.inf)

    def prod(i0: int, i1: int) -> tuple[Arr, Arr]:  # forward time order
        return _product(klo, khi, range(i1, i0 - 1, -1) if left else range(i0, i1 + 1))

    taus = []
    for c in range(n // stride):
        plo, phi = prod(c * stride, (c + 1) * stride - 1)
        taus.append(float(_contractions(diameters(plo[None], phi[None]))[0]))
    cum = np.concatenate([[1.0], np.cumprod(taus)])
    for m in range(n):
        q = (m + 1) // stride
        if q == 0:
            continue
        plo, phi = prod((q - 1) * stride, m)
        lead = (diameters if left else column_spreads)(plo[None], phi[None])[0]
        if np.isfinite(lead):
            out[m] = lead * cum[q - 1] * (1.0 + 1e-12)
    return out


def lift(klo: Arr, khi: Arr, memory: int) -> tuple[Arr, Arr]:
    """Per-step sets of the chain of ``memory``-tuples Z_t = (X_{t−m+1}, …, X_t) (index base k, the
    latest state last) when the kernel of X may depend on the last ``memory`` states with every
    conditional row in the step's set: row z of the lifted kernel is 0 off the shift of z and the
    set of z's last state on it (docs/time-varying.md §4). (n, k, k) → (n, k^m, k^m)."""
    n, k = klo.shape[0], klo.shape[1]
    if memory == 1:
        return klo, khi
    km = k ** memory
    lo = np.zeros((n, km, km))
    hi = np.zeros((n, km, km))
    for z in range(km):
        last = z % k
        base = (z * k) % km  # drop the oldest state, shift in the next one
        lo[:, z, base:base + k] = klo[:, last, :]
        hi[:, z, base:base + k] = khi[:, last, :]
    return lo, hi


def pair_mask(k: int, memory: int) -> NDArray[np.bool_]:
    """Pairs (z, z') of lifted states whose latest states differ: the leakage about X_p is at most
    the largest lifted-pair figure over them (a ratio of mixtures is at most its largest ratio)."""
    last = np.arange(k ** memory) % k
    return last[:, None] != last[None, :]


def window_terms(klo_left: Arr, khi_left: Arr, klo_right: Arr, khi_right: Arr,
                 prior: Arr, L: int, R: int, *, fixed: bool = True, stride: int = 1) -> tuple[Arr, Arr]:
    """Left and right (k, k) bounds of the stream window plan that redacts [p − L, p + R] surely and
    releases every other record. ``klo_left[j − 1]``: step j backwards (X_{p−j} → X_{p−j+1}), at
    least L + 1 of them; ``klo_right[j − 1]``: step j forwards (X_{p+j−1} → X_{p+j}), at least R + 1.

    Each side is the smaller of the box bound (module docstring) and the Birkhoff bound
    (:func:`birkhoff_sides`, docs/time-varying.md §3): the left ratio is at most the Hilbert
    distance of two rows of the product K_{p−L−1}⋯K_{p−1}; the right ratio at most the Hilbert
    distance of a column of K_p⋯K_{p+R} from the ones vector. The Birkhoff left bound needs the same
    kernel sequence for the posterior and the prior odds: one fixed sequence (class A0 of the page);
    ``fixed=False`` leaves it out (class A: random or output-adaptive sequences, box bounds only).
    ``stride``: chunk length of the Birkhoff bounds (the memory of a lifted chain)."""
    k = klo_left.shape[1]
    if klo_left.shape[0] < L + 1 or klo_right.shape[0] < R + 1 or khi_left.shape != klo_left.shape \
            or khi_right.shape != klo_right.shape:
        raise ValueError("window_terms: need L + 1 left and R + 1 right step sets")  # the kernels do not check
    left = left_term(klo_left[:L + 1], khi_left[:L + 1], np.ones((L, k)), standin=True, prior=prior)
    right = right_term(klo_right[:R + 1], khi_right[:R + 1], np.vstack([np.ones((R, k)), np.zeros((1, k))]),
                       ends=False)
    if not fixed:
        return left, right
    bl = birkhoff_sides(klo_left[:L + 1], khi_left[:L + 1], stride, left=True)[L]
    br = birkhoff_sides(klo_right[:R + 1], khi_right[:R + 1], stride, left=False)[R]
    off = ~np.eye(k, dtype=bool)
    return np.where(off, np.minimum(left, bl), 0.0), np.where(off, np.minimum(right, br), 0.0)


def window_bound(klo_left: Arr, khi_left: Arr, klo_right: Arr, khi_right: Arr, prior: Arr | None, L: int, R: int,
                 *, fixed: bool = True, memory: int = 1) -> float:
    """Certified leakage bound about X_p of the window plan [p − L, p + R] (:func:`window_terms`),
    over kernels that may depend on the last ``memory`` states (the sets lifted, :func:`lift`; the
    records at p − L − 1 and p + R + 1 counted as releasing their whole tuple, which only adds
    information). ``prior``: :func:`prior_odds_bound` of the lifted left sets (None: computed here
    over all of ``klo_left``)."""
    k = klo_left.shape[1]
    llo, lhi = lift(klo_left, khi_left, memory)
    rlo, rhi = lift(klo_right, khi_right, memory)
    if prior is None:
        prior = prior_odds_bound(llo, lhi)
    left, right = window_terms(llo, lhi, rlo, rhi, prior, L, R, fixed=fixed, stride=memory)
    return total(left, right, pair_mask(k, memory))
