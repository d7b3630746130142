"""Data-independent baselines of paper 000: MQ windows, the Theorem 2 bound, the best window.

All assume a stationary binary chain (reversible, so p > n/2 is handled by reflection t → n−1−t).
I(Δ) below is the max-influence max(ǐ(Δ), î(Δ)) at distance Δ; Δ*(ε) the smallest Δ with I(Δ) ≤ ε.
Positions in formulas are the paper's 1-based p₁ = p + 1.

- **MQ, Algorithm 1 as printed** (paper 000 App. C): one-sided window [1, p₁ + min(Δ*(ε), n − p₁)]
  if p₁ = 1, ε < I(n+1−p₁) + I(p₁−1) or t_p(ε) = p₁ + Δ*(ε) − 2Δ*(ε/2) < 0; otherwise the
  symmetric window of radius Δ*(ε/2), clipped to the chain.
- **MQ, tight**: the same with radii Δ*(ε) − 1 and Δ*(ε/2) − 1: the quilt record at distance Δ*
  already has influence ≤ ε, so the printed radius is one record per side too many (notes/000 §4.7).
- **Theorem 2** (utility upper bound for data-independent mechanisms), as printed and corrected:
  the two-sided case's R₂ = min(R₁, 2Δ*(ε/2) − 1) is off by one for p₁ > 1; the corrected R₂ uses
  2Δ*(ε/2) − 2 (notes/000 §7.5).
- **Best window** (notes/000 §4.8): the exact optimum over all data-independent mechanisms. A
  window [p − Δ_ℓ, p + Δ_r] has leakage equal to the max-influence of its quilt
  (Corollary 3), max_{a,b} |s_ℓ(a) + s_r(b)|, with s(0) = log((1−α_Δ)/β_Δ) and
  s(1) = log(α_Δ/(1−β_Δ)) at the quilt distance Δ (a side reaching the chain's end has no term).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from ..model.chain import MarkovChain
from ..influence import delta_star, max_influence_binary
from .plan import RedactionPlan, _check_private, check_epsilon, finalize
from .regions import L, S

BASELINES = ("mq", "mq-tight", "best-window")


def _require_stationary_binary(chain: MarkovChain) -> None:
    if not (chain.is_binary and chain.stationary):
        raise ValueError("the data-independent baselines need a stationary binary chain")


def _I(chain: MarkovChain, delta: int) -> float:
    return math.inf if delta <= 0 else max_influence_binary(chain.alpha, chain.beta, delta)


def mq_radius(chain: MarkovChain, n: int, p: int, epsilon: float, tight: bool = False) -> tuple[int, int]:
    """(Δ_ℓ, Δ_r) of Algorithm 1 for 0-based p (reflected when p₁ > n/2), clipped to the chain."""
    _require_stationary_binary(chain)
    reflect = p + 1 > n / 2
    q = n - 1 - p if reflect else p
    p1 = q + 1
    a, b = chain.alpha, chain.beta
    d_e, d_h = delta_star(a, b, epsilon), delta_star(a, b, epsilon / 2)
    cut = 1 if tight else 0
    one_sided = p1 == 1 or epsilon < _I(chain, n + 1 - p1) + _I(chain, p1 - 1) or p1 + d_e - 2 * d_h < 0
    if one_sided:
        dl, dr = p1 - 1, min(d_e - cut, n - p1)
    else:
        dl, dr = min(d_h - cut, p1 - 1), min(d_h - cut, n - p1)
    return (dr, dl) if reflect else (dl, dr)


def _window_plan(chain: MarkovChain, n: int, private: tuple[int, ...], epsilon: float, name: str,
                 radii: dict[int, tuple[int, int]]) -> RedactionPlan:
    red = np.zeros((n, 2))
    for p, (dl, dr) in radii.items():
        red[max(0, p - dl) : min(n, p + dr + 1)] = 1.0
    regions = np.where(red[:, 0] == 1.0, L, S).astype(np.int8)
    splits = {p: (math.nan, math.nan) for p in private}
    return finalize(chain, n, private, epsilon, name, red, regions, splits)


def mq_plan(chain: MarkovChain, n: int, private: list[int] | tuple[int, ...], epsilon: float,
            tight: bool = False) -> RedactionPlan:
    """MQ windows (Algorithm 1 as printed, or tight) around each private index, combined by max."""
    eps = check_epsilon(epsilon)
    ps = _check_private(n, private)
    radii = {p: mq_radius(chain, n, p, eps, tight) for p in ps}
    return _window_plan(chain, n, ps, eps, "mq-tight" if tight else "mq", radii)


def theorem2_bound(chain: MarkovChain, n: int, p: int, epsilon: float, corrected: bool = True) -> float:
    """Theorem 2's upper bound on the utility of any ε-private data-independent mechanism."""
    _require_stationary_binary(chain)
    q = n - 1 - p if p + 1 > n / 2 else p
    p1 = q + 1
    a, b = chain.alpha, chain.beta
    I_n = _I(chain, n - p1)
    I_1 = _I(chain, p1 - 1)
    if epsilon < I_n:
        return 0.0
    R1 = delta_star(a, b, epsilon) + p1 - 1
    if epsilon >= I_1 + I_n:
        R2 = min(R1, 2 * delta_star(a, b, epsilon / 2) - (2 if corrected else 1))
        return 1.0 - R2 / n
    return 1.0 - R1 / n


def _quilt_logratios(chain: MarkovChain, deltas: NDArray[np.int64]) -> NDArray[np.float64]:
    """(len, 2): s(Δ, x) = log Pr(X_{p+Δ}=x | X_p=0) / Pr(X_{p+Δ}=x | X_p=1), in log1p form."""
    a, b = chain.alpha, chain.beta
    lp = np.power(1.0 - a - b, deltas.astype(np.float64))
    s = np.empty(deltas.shape + (2,))
    s[:, 0] = np.log1p((a / b) * lp) - np.log1p(-lp)
    s[:, 1] = np.log1p(-lp) - np.log1p((b / a) * lp)
    return s


def window_leakage(chain: MarkovChain, n: int, p: int, dl: int, dr: int) -> float:
    """Exact leakage of redacting exactly [p − dl, p + dr] (quilt max-influence, Corollary 3)."""
    left = _quilt_logratios(chain, np.array([dl + 1]))[0] if p - dl > 0 else np.zeros(1)
    right = _quilt_logratios(chain, np.array([dr + 1]))[0] if p + dr < n - 1 else np.zeros(1)
    return float(np.abs(left[:, None] + right[None, :]).max())


def best_window_radius(chain: MarkovChain, n: int, p: int, epsilon: float) -> tuple[int, int]:
    """The smallest ε-private window around 0-based p (ties: the smaller leakage).

    Either one side is fully redacted and the other needs I(Δ+1) ≤ ε, or both sides keep a quilt
    record; then each side's term alone is ≤ the window's leakage (the other side can always
    pick a record of the same sign), so both radii are ≥ Δ*(ε) − 1, and the search over total
    window size W stops at the best one-sided size.
    """
    _require_stationary_binary(chain)
    eps = check_epsilon(epsilon)
    nl, nr = p, n - 1 - p  # records on each side
    d_e = delta_star(chain.alpha, chain.beta, eps)
    options: list[tuple[int, float, int, int]] = [(nl + nr, 0.0, nl, nr)]  # redact everything
    if nr > 0:
        dr = min(d_e - 1, nr)
        options.append((nl + dr, window_leakage(chain, n, p, nl, dr), nl, dr))
    if nl > 0:
        dl = min(d_e - 1, nl)
        options.append((dl + nr, window_leakage(chain, n, p, dl, nr), dl, nr))
    best_one_sided = min(o[0] for o in options)
    lo = d_e - 1
    if nl > lo and nr > lo:
        R = min(max(nl, nr), best_one_sided)
        s = _quilt_logratios(chain, np.arange(lo + 1, R + 2))  # row r − lo: quilt of radius r
        for W in range(2 * lo, best_one_sided):
            dls = np.arange(max(lo, W - (nr - 1)), min(nl - 1, W - lo) + 1)
            if dls.size == 0:
                continue
            drs = W - dls
            sl = s[dls - lo]
            sr = s[drs - lo]
            leak = np.abs(sl[:, :, None] + sr[:, None, :]).max(axis=(1, 2))
            ok = np.flatnonzero(leak <= eps)
            if ok.size:
                i = int(ok[np.argmin(leak[ok])])
                options.append((W, float(leak[i]), int(dls[i]), int(drs[i])))
                break
    feasible = [o for o in options if o[1] <= eps]
    W, _, dl, dr = min(feasible, key=lambda o: (o[0], o[1]))
    return dl, dr


def best_window_plan(chain: MarkovChain, n: int, private: list[int] | tuple[int, ...], epsilon: float) -> RedactionPlan:
    """The exact best data-independent window around each private index, combined by max."""
    eps = check_epsilon(epsilon)
    ps = _check_private(n, private)
    radii = {p: best_window_radius(chain, n, p, eps) for p in ps}
    return _window_plan(chain, n, ps, eps, "best-window", radii)


def baseline_plan(name: str, chain: MarkovChain, n: int, private: list[int] | tuple[int, ...],
                  epsilon: float) -> RedactionPlan:
    """Dispatch on the CLI's ``--baseline`` names."""
    if name == "mq":
        return mq_plan(chain, n, private, epsilon)
    if name == "mq-tight":
        return mq_plan(chain, n, private, epsilon, tight=True)
    if name == "best-window":
        return best_window_plan(chain, n, private, epsilon)
    raise ValueError(f"unknown baseline {name!r}; expected one of {', '.join(BASELINES)}")
