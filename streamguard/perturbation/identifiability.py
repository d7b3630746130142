"""Paper 001's prior-dependent constants and theory curves (notes/001 §4, §5, §6, §7.7).

A *prior* here is the law p_X of a database of n rows over an m-letter alphabet, given as an
array of shape (m,)*n (row 1 on axis 0; a flat vector is one row, n = 1), with full support —
otherwise ε_X = ∞ and E_i, ε̃_X and identifiability are undefined (notes/001 §11). Logs are
natural, information is in nats.

* ε_X = max_{x~x'} ln p(x)/p(x')  (16): the largest prior log-ratio between neighbours.
* K_ε = ⊗_i k_ε with k_ε = α·I + (1−α)·J/m, α = (e^ε−1)/(e^ε+m−1) (§4): the E_d kernel.
  ε̃_X = inf{ε ≥ 0 : q_ε := K_ε⁻¹ p_X ≥ 0}: E_i exists iff ε ≥ ε̃_X, i.e. D ≤ h(ε̃_X).
  The feasible set is upward closed (semigroup k_{α1}k_{α2} = k_{α1α2}), so bisection is valid.
  Always ε̃_X ≥ ε_X and h(ε̃_X) ≤ D_const.
* D_const = Σ_i (1 − max_b P(X_i = b)): the distortion of the best constant output.
* Theorem 1 / §6.3 / §7.7: ε_i*(D) = h⁻¹(D) for D ≤ h(ε̃_X), ε_d*(D) = h⁻¹(D) for D < h(ε̃_X);
  both have only bounds in the gap (h(ε̃_X), D_const); beyond it ε_i* = ε_X and ε_d* = 0.
* Theorem 2: R(D) = ε_m*(D) = H(X) − n·H_m(D/n) for D ≤ h(ε̃_X) (tight Shannon lower bound),
  0 for D ≥ D_const, and Blahut–Arimoto in between.

The general-prior routines cost O(n·mⁿ) and amplify rounding by up to α^{−n}: for small ε and
large n use the product (:func:`eps_tilde_product`) or Markov structure instead (§11).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import product

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .model import ModelInputError
from .randomized_response import check_distortion, check_epsilon, h, h_inv

#: Tolerance for "the prior sums to one" (as :data:`streamguard.perturbation.model.SUM_TOL`).
PRIOR_SUM_TOL = 1e-9
#: Relative tolerance when a budget D is compared with a threshold computed in floating point
#: (h(ε̃_X) and D_const coincide in exact arithmetic for some priors, e.g. n = 1, m = 2).
THRESHOLD_RTOL = 1e-12


def _at_least(D: float, threshold: float) -> bool:
    return D >= threshold * (1.0 - THRESHOLD_RTOL)


def prior_tensor(prior: ArrayLike) -> NDArray[np.float64]:
    """Validate a database prior of shape (m,)*n: finite, full support, summing to 1."""
    try:
        p = np.array(prior, dtype=np.float64)
    except (TypeError, ValueError):
        raise ModelInputError("prior: not a numeric array") from None
    if p.ndim < 1 or p.shape[0] < 2 or any(s != p.shape[0] for s in p.shape):
        raise ModelInputError(f"prior: expected shape (m,)*n with m ≥ 2, got {p.shape}")
    if not np.all(np.isfinite(p)):
        raise ModelInputError("prior: contains NaN or infinity")
    if np.any(p <= 0):
        raise ModelInputError("prior: needs full support (a zero or negative probability makes ε_X infinite)")
    if abs(float(p.sum()) - 1.0) > PRIOR_SUM_TOL:
        raise ModelInputError(f"prior: sums to {float(p.sum()):.12g}, not 1")
    return p


def alpha_of(eps: float, m: int) -> float:
    """α = (e^ε−1)/(e^ε+m−1) = (1 − t)/(1 + (m−1)t), t = e^{−ε} (the 'keep, else uniform' weight)."""
    t = math.exp(-eps)
    return -math.expm1(-eps) / (1.0 + (m - 1) * t)  # 1 − t without cancellation at small ε


def eps_of_alpha(alpha: float, m: int) -> float:
    """ε = ln((1+(m−1)α)/(1−α))."""
    return math.inf if alpha >= 1 else math.log1p((m - 1) * alpha) - math.log1p(-alpha)


def kernel_apply(p: NDArray[np.float64], alpha: float) -> NDArray[np.float64]:
    """K_ε p: mix every axis with the uniform law (k v = α v + (1−α) sum(v)/m)."""
    out = np.array(p, dtype=np.float64)
    m = out.shape[0]
    for axis in range(out.ndim):
        out = alpha * out + (1.0 - alpha) / m * out.sum(axis=axis, keepdims=True)
    return out


def kinv_apply(p: NDArray[np.float64], alpha: float) -> NDArray[np.float64]:
    """K_ε⁻¹ p: un-mix every axis, k⁻¹ v = (v − (1−α)/m · sum(v)) / α (§4), O(n·mⁿ); α > 0."""
    if not alpha > 0:
        raise ValueError(f"K_ε is not invertible at α = {alpha!r} (ε = 0)")
    out = np.array(p, dtype=np.float64)
    m = out.shape[0]
    for axis in range(out.ndim):
        out = (out - (1.0 - alpha) / m * out.sum(axis=axis, keepdims=True)) / alpha
    return out


def _nonnegative(q: NDArray[np.float64], ulps: int = 64) -> bool:
    """q ≥ 0 up to the rounding of the un-mixing, −ulps·n·2⁻⁵²·max|q| (see :func:`eps_tilde_x`)."""
    return bool(q.min() >= -ulps * q.ndim * np.finfo(np.float64).eps * np.abs(q).max())


def output_law(prior: ArrayLike, epsilon: float) -> NDArray[np.float64] | None:
    """E_i's output law q_ε = K_ε⁻¹ p_X (shape of the prior), rounding noise below 0 clipped;
    None when E_i does not exist at ε (q has a negative entry, ε < ε̃_X). At ε ≈ 0 (α = 0 in
    floating point) it exists only for the uniform prior, whose q is uniform at every ε."""
    p = prior_tensor(prior)
    eps = check_epsilon(epsilon)
    if p.max() == p.min():
        return np.full(p.shape, 1.0 / p.size)  # uniform prior: q uniform at every ε (E_i = E_d)
    alpha = alpha_of(eps, p.shape[0])
    if alpha <= 0:
        return None
    q = kinv_apply(p, alpha)
    return np.maximum(q, 0.0) if _nonnegative(q) else None


def eps_x(prior: ArrayLike) -> float:
    """ε_X (16): the largest log-ratio of the prior along any one axis (neighbours differ in one row)."""
    p = prior_tensor(prior)
    logp = np.log(p)
    return float(max(np.max(logp.max(axis=a) - logp.min(axis=a)) for a in range(p.ndim)))


def eps_tilde_product(marginals: ArrayLike) -> float:
    """ε̃_X of a product prior ⊗ p_i (rows of ``marginals``, shape (n, m)), §4:
    max_i max(0, ln(1/min_b p_i(b) − (m−1))); then h(ε̃_X) = n(m−1)·min p."""
    rows = np.array(marginals, dtype=np.float64)
    if rows.ndim == 1:
        rows = rows[None, :]
    for row in rows:
        prior_tensor(row)
    m = rows.shape[1]
    return max(0.0, math.log(1.0 / float(rows.min()) - (m - 1)))


def eps_tilde_x(prior: ArrayLike) -> float:
    """ε̃_X: the least ε with K_ε⁻¹ p_X ≥ 0 (closed form for one row, else bisection on α).

    Entries of q that are exactly 0 at the threshold come out of the float un-mixing as ±1e−17;
    q counts as non-negative down to −16·n·2⁻⁵²·max|q| so that such noise does not push the answer
    up (by ~1e−6 for a product prior whose rows all hit 0: q vanishes there like (α − α*)ⁿ); the
    price is that the answer may sit ~1e−14 below the exact threshold. Bisection keeps the
    feasible end."""
    p = prior_tensor(prior)
    m = p.shape[0]
    if p.ndim == 1:
        return eps_tilde_product(p)
    if p.max() == p.min():
        return 0.0
    lo, hi = 0.0, 1.0  # infeasible, feasible (α = 1 is the identity)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if _nonnegative(kinv_apply(p, mid), ulps=16):  # stricter than output_law's 64: ε̃_X is accepted there
            hi = mid
        else:
            lo = mid
    return eps_of_alpha(hi, m)


def d_const(prior: ArrayLike) -> float:
    """Σ_i (1 − max_b P(X_i = b)): distortion of the best constant output (the per-row modes)."""
    p = prior_tensor(prior)
    axes = range(p.ndim)
    return float(sum(1.0 - p.sum(axis=tuple(a for a in axes if a != i)).max() for i in axes))


def entropy(prior: ArrayLike) -> float:
    """H(X) in nats."""
    p = prior_tensor(prior)
    return float(-np.sum(p * np.log(p)))


def h_m(delta: float, m: int) -> float:
    """H_m(δ) = −(1−δ)ln(1−δ) − δ ln(δ/(m−1)): entropy of one RR row's noise (0·ln 0 = 0)."""
    out = 0.0
    if delta < 1:
        out -= (1 - delta) * math.log1p(-delta)
    if delta > 0:
        out -= delta * math.log(delta / (m - 1))
    return out


def _shape(p: NDArray[np.float64]) -> tuple[int, int]:
    return int(p.shape[0]), int(p.ndim)


def feasibility_threshold(prior: ArrayLike) -> float:
    """h(ε̃_X): the largest distortion at which E_i exists (D_c in notes/001 §4)."""
    p = prior_tensor(prior)
    m, n = _shape(p)
    return h(eps_tilde_x(p), m, n)


@dataclass(frozen=True)
class Interval:
    """A value known to lie in [lower, upper]; ``exact`` when the two coincide."""

    lower: float
    upper: float

    @property
    def exact(self) -> bool:
        return self.lower == self.upper


def eps_i_star(D: float, prior: ArrayLike) -> Interval:
    """ε_i*(D) (Thm 1a, Lemma 3, §7.7). In the gap (h(ε̃_X), D_const) only bounds are known:
    lower max(h⁻¹(D), ε_X); upper min(ε̃_X, h⁻¹(D) + ε_X) — E_i at ε̃_X has distortion
    h(ε̃_X) < D, E_d at h⁻¹(D) has identifiability h⁻¹(D) + ε_X."""
    p = prior_tensor(prior)
    m, n = _shape(p)
    D = check_distortion(D, n)
    ex, et = eps_x(p), eps_tilde_x(p)
    if not _at_least(D, h(et, m, n) * (1.0 + 2 * THRESHOLD_RTOL)):
        v = h_inv(D, m, n)
        return Interval(v, v)
    if _at_least(D, d_const(p)):
        return Interval(ex, ex)
    hi = h_inv(D, m, n)
    return Interval(max(hi, ex), min(et, hi + ex))


def eps_d_star(D: float, prior: ArrayLike) -> Interval:
    """ε_d*(D) (Thm 1b, §6.3, §7.7): h⁻¹(D) below h(ε̃_X) (DP tightness), 0 from D_const on,
    and [max(h⁻¹(D) − ε_X, 0), max(h⁻¹(D), 0)] in between (and at h(ε̃_X) itself)."""
    p = prior_tensor(prior)
    m, n = _shape(p)
    D = check_distortion(D, n)
    if _at_least(D, d_const(p)):
        return Interval(0.0, 0.0)
    v = h_inv(D, m, n)
    if not _at_least(D, h(eps_tilde_x(p), m, n)):
        return Interval(v, v)
    return Interval(max(v - eps_x(p), 0.0), max(v, 0.0))


def mutual_information_rr(prior: ArrayLike, epsilon: float, mechanism: str = "E_d") -> float:
    """I(X;Y) in nats of E_d or E_i at ε under the prior (§6.1, §6.2):
    E_d: H(K_ε p_X) − n·H_m(δ);  E_i (needs ε ≥ ε̃_X): H(X) − n·H_m(δ) = R(h(ε))."""
    p = prior_tensor(prior)
    m, n = _shape(p)
    eps = check_epsilon(epsilon)
    delta = h(eps, m)
    if mechanism == "E_i":
        if eps < eps_tilde_x(p):
            raise ValueError(f"E_i does not exist at ε = {eps:.6g} < ε̃_X for this prior")
        return entropy(p) - n * h_m(delta, m)
    if mechanism != "E_d":
        raise ValueError(f"mechanism must be 'E_d' or 'E_i', got {mechanism!r}")
    out = kernel_apply(p, alpha_of(eps, m))
    out = out[out > 0]
    return float(-np.sum(out * np.log(out))) - n * h_m(delta, m)


def hamming_matrix(m: int, n: int) -> NDArray[np.int64]:
    """d(x, y) over all mⁿ databases in lexicographic order (row 1 most significant)."""
    codes = np.array(list(product(range(m), repeat=n)), dtype=np.int64).reshape(m**n, n)
    return (codes[:, None, :] != codes[None, :, :]).sum(axis=2)


def _newton_on_support(px: NDArray[np.float64], a: NDArray[np.float64], q: NDArray[np.float64],
                       support: NDArray[np.bool_]) -> NDArray[np.float64]:
    """Solve c(y) = Σ_x p(x) a(x,y) / (A q)(x) = 1 for y in the support (Newton, damped so that
    A q stays positive); q is 0 off the support. Entries may come out negative (then the support
    was too large)."""
    cols = a[:, support]
    qs = q[support] / q[support].sum()
    for _ in range(100):
        z = cols @ qs
        r = (px / z) @ cols - 1.0
        if np.max(np.abs(r)) < 1e-15:
            break
        jac = -(cols * (px / z**2)[:, None]).T @ cols
        step = np.linalg.lstsq(jac, -r, rcond=None)[0]
        t = 1.0
        while np.any(cols @ (qs + t * step) <= 0) and t > 1e-12:
            t /= 2
        qs = qs + t * step
    out = np.zeros_like(q)
    out[support] = qs
    return out


def _dual_value(px: NDArray[np.float64], a: NDArray[np.float64], q: NDArray[np.float64],
                tol: float) -> tuple[float, NDArray[np.float64]]:
    """G(s) = min_q −Σ_x p(x) ln Σ_y q(y) e^{−s d(x,y)} (a = e^{−s d}), bracketed rigorously:
    for every q ≥ 0, F(q) − ln max_y c(y) ≤ G(s) ≤ F(q) (Blahut 1972). Blahut–Arimoto steps
    q ← q·c find the support; their convergence is sublinear near a slope where the support
    changes, so an active-set Newton solve of c = 1 on the support finishes the job.
    Returns the bracket's midpoint; ArithmeticError if its half-width stays ≥ tol."""
    for _ in range(2000):
        z = a @ q
        c = (px / z) @ a
        if math.log(c.max()) < 2 * tol:
            return float(-px @ np.log(z)) - math.log(c.max()) / 2, q
        q = q * c
        q /= q.sum()
    support = q > 1e-9 * q.max()
    for _ in range(2 * q.size):
        cand = _newton_on_support(px, a, q, support)
        if cand.min() < 0:
            support[int(np.argmin(cand))] = False
            continue
        z = a @ cand
        c = (px / z) @ a
        gap = math.log(c.max())
        if gap < 2 * tol:
            return float(-px @ np.log(z)) - gap / 2, cand
        support[int(np.argmax(c))] = True
        q = np.where(support, np.maximum(cand, 1e-12), 0.0)
    raise ArithmeticError("Blahut–Arimoto/Newton did not converge")


def rate_distortion(D: float, prior: ArrayLike, *, tol: float = 1e-10) -> float:
    """R(D) = ε_m*(D) in nats (Thm 2): closed form H(X) − n·H_m(D/n) for D ≤ h(ε̃_X), 0 for
    D ≥ D_const. In between, the dual R(D) = max_{s ≥ 0} [−sD + G(s)] with G concave (a minimum
    of functions affine in s): golden-section search on s ∈ [0, ε̃_X], each G(s) by warm-started
    Blahut–Arimoto to within ``tol``."""
    p = prior_tensor(prior)
    m, n = _shape(p)
    D = check_distortion(D, n)
    et = eps_tilde_x(p)
    if not _at_least(D, h(et, m, n) * (1.0 + 2 * THRESHOLD_RTOL)):
        return max(0.0, entropy(p) - n * h_m(D / n, m))
    if _at_least(D, d_const(p)):
        return 0.0
    px = p.ravel()
    d = hamming_matrix(m, n)
    state = {"q": px.copy()}

    def phi(s: float) -> float:
        g, state["q"] = _dual_value(px, np.exp(-s * d), state["q"] + 1e-12, tol)
        return -s * D + g

    golden = (math.sqrt(5.0) - 1.0) / 2.0
    lo, hi = 0.0, et
    s1, s2 = hi - golden * (hi - lo), lo + golden * (hi - lo)
    f1, f2 = phi(s1), phi(s2)
    while hi - lo > 1e-7:
        if f1 < f2:
            lo, s1, f1 = s1, s2, f2
            s2 = lo + golden * (hi - lo)
            f2 = phi(s2)
        else:
            hi, s2, f2 = s2, s1, f1
            s1 = hi - golden * (hi - lo)
            f1 = phi(s1)
    return max(0.0, f1, f2)


def e_i_matrix(prior: ArrayLike, epsilon: float) -> NDArray[np.float64]:
    """E_i (26) for a general prior on small 𝒟ⁿ (§7.4), float, mⁿ × mⁿ (lexicographic order):
    W(y|x) = q(y)·K_ε(x,y)/p(x) with q = K_ε⁻¹ p (:func:`output_law`). Raises ValueError when E_i
    does not exist (ε < ε̃_X). For tests, reports and the exact check of the Markov sampler.
    K_ε⁻¹ amplifies rounding by α⁻ⁿ (notes/001 §11): for a nearly uniform prior at ε ≈ ε̃_X ≈ 0
    the float result is meaningless (rows off 1 by ~2⁻⁵²·α⁻ⁿ)."""
    p = prior_tensor(prior)
    m, n = _shape(p)
    eps = check_epsilon(epsilon)
    q = output_law(p, eps)
    if q is None:
        raise ValueError(f"E_i does not exist at ε = {eps:.6g} < ε̃_X for this prior")
    t = math.exp(-eps)
    k = t ** hamming_matrix(m, n) / (1.0 + (m - 1) * t) ** n
    return q.ravel()[None, :] * k / p.ravel()[:, None]
