"""Pointwise influence and max-influence of one record on another (paper 000 Def. 3, Prop. 1).

For a private record X_p and another record X_t,

    i(X_p ⇝ X_t = x) = log max_{a, b} Pr(X_t = x | X_p = a) / Pr(X_t = x | X_p = b)
    I(X_p ⇝ X_t)     = max_x i(X_p ⇝ X_t = x).

Binary stationary chain (α = P[0,1], β = P[1,0], λ = 1 − α − β, Δ = |t − p|), paper 000 Eq. 13–14:

    ǐ(Δ) := i(·=0) = |log((1 + (α/β) λ^Δ) / (1 − λ^Δ))|
    î(Δ) := i(·=1) = |log((1 + (β/α) λ^Δ) / (1 − λ^Δ))|

evaluated with ``log1p`` (notes/000 §9.4: the naive quotient is exactly 0 at Δ ≈ 30 for λ = ¼,
while the true value at Δ = 40 is 2.48e-24). With α ≤ β, ǐ ≤ î and I = î; for α > β the roles
swap, which the planners handle by choosing per position the value of smaller influence
(notes/000 §4.6).

General k-state chains use matrix powers, in log space:
- right of p: Pr(X_{p+Δ} = x | X_p = a) = P^Δ[a, x];
- left of p:  Pr(X_{p−Δ} = x | X_p = a) = π_{p−Δ}(x) P^Δ[x, a] / π_p(a), so the ratio over (a, b)
  is P^Δ[x, a] π_p(b) / (P^Δ[x, b] π_p(a)), which for a stationary reversible chain equals the
  right-hand value.
A value that cannot occur at t has influence 0 (it is never observed); a value possible under
some a but impossible under another b has influence +∞.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .model.chain import MarkovChain


def binary_closed_form(alpha: float, beta: float, deltas: ArrayLike) -> NDArray[np.float64]:
    """Pointwise influences of a binary chain at distances Δ ≥ 1 (paper 000 Prop. 1).

    Returns an array of shape ``(len(deltas), 2)``: column x is i(X_p ⇝ X_{p±Δ} = x). Valid on the
    right of p for any initial law, and on the left when the chain is stationary.
    """
    D = np.asarray(deltas, dtype=np.int64)
    if np.any(D < 1):
        raise ValueError("influence distances must be ≥ 1")
    lam = 1.0 - alpha - beta
    lp = np.power(lam, D.astype(np.float64))  # integer exponents: sign alternates for λ < 0
    denom = np.log1p(-lp)
    out = np.empty(D.shape + (2,))
    out[..., 0] = np.abs(np.log1p((alpha / beta) * lp) - denom)
    out[..., 1] = np.abs(np.log1p((beta / alpha) * lp) - denom)
    return out


def _log_ratio_spread(logs: NDArray[np.float64]) -> float:
    """max − min of finite log-likelihoods; +∞ if some are −∞ and others finite; 0 if all −∞."""
    finite = np.isfinite(logs)
    if not finite.any():
        return 0.0
    if not finite.all():
        return math.inf
    return float(logs.max() - logs.min())


def _check_max_delta(max_delta: int) -> None:
    if max_delta < 0:
        raise ValueError("max_delta must be ≥ 0")


def pointwise_right(chain: MarkovChain, max_delta: int) -> NDArray[np.float64]:
    """i(X_p ⇝ X_{p+Δ} = x) for Δ = 1..max_delta as a ``(max_delta, k)`` array (any chain)."""
    _check_max_delta(max_delta)
    if chain.is_binary:
        return binary_closed_form(chain.alpha, chain.beta, np.arange(1, max_delta + 1))
    k = chain.k
    out = np.empty((max_delta, k))
    Pd = np.eye(k)
    with np.errstate(divide="ignore"):
        for d in range(max_delta):
            Pd = Pd @ chain.matrix
            logs = np.log(Pd)
            for x in range(k):
                out[d, x] = _log_ratio_spread(logs[:, x])
    return out


def pointwise_left(chain: MarkovChain, p: int, max_delta: int) -> NDArray[np.float64]:
    """i(X_p ⇝ X_{p−Δ} = x) for Δ = 1..min(max_delta, p) as an array of k columns.

    ``p`` is the 0-based index of the private record; distances past the start are not returned.
    """
    _check_max_delta(max_delta)
    D = min(max_delta, p)
    if chain.stationary and chain.is_binary:
        return binary_closed_form(chain.alpha, chain.beta, np.arange(1, D + 1))
    k = chain.k
    pi_p = chain.marginal(p)
    support = pi_p > 0
    out = np.empty((D, k))
    Pd = np.eye(k)
    with np.errstate(divide="ignore"):
        log_pi_p = np.log(pi_p[support])
        marg = chain.marginals(p)  # laws of indices 0..p-1
        for d in range(D):
            Pd = Pd @ chain.matrix
            logs = np.log(Pd)
            for x in range(k):
                if marg[p - 1 - d, x] <= 0:
                    out[d, x] = 0.0  # the value never occurs at that index
                else:
                    out[d, x] = _log_ratio_spread(logs[x, support] - log_pi_p)
    return out


def max_influence_binary(alpha: float, beta: float, delta: int) -> float:
    """I(X_p ⇝ X_{p±Δ}) = max(ǐ(Δ), î(Δ)) for a stationary binary chain; +∞ at Δ = 0."""
    if delta == 0:
        return math.inf
    return float(binary_closed_form(alpha, beta, [delta]).max())


def delta_star(alpha: float, beta: float, epsilon: float) -> int:
    """Δ*(ε): the smallest Δ ≥ 1 with I(X_p ⇝ X_{p+Δ}) ≤ ε (paper 000 Thm 2).

    The max-influence is strictly decreasing in Δ (or identically 0 when λ = 0), so an exponential
    search followed by bisection finds it in O(log Δ*) closed-form evaluations.
    """
    if not (epsilon >= 0 and math.isfinite(epsilon)):
        raise ValueError("epsilon must be a finite number ≥ 0")

    def ok(d: int) -> bool:
        return max_influence_binary(alpha, beta, d) <= epsilon

    hi = 1
    while not ok(hi):
        hi *= 2
        if hi > 1 << 62:  # influences underflow to 0 long before this
            raise ValueError("epsilon is too small for Δ*(ε) to be represented")
    lo = hi // 2  # ok(lo) is False unless lo == 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi
