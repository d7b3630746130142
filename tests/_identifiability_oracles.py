"""Brute-force LP oracles for paper 001 (notes/001 §3, §7.8), tests only: scipy's HiGHS.

* PD-I in joint form: variables π(x, y) ≥ 0 over 𝒟ⁿ × 𝒟ⁿ, minimise Σ π d subject to
  π(x, y) ≤ e^ε π(x', y) for neighbours x ~ x' and Σ_y π(x, y) = p(x). D_i*(ε) is its optimum.
* PD-DP: variables W(y|x) ≥ 0, minimise Σ p(x) W(y|x) d(x, y) subject to W(y|x) ≤ e^ε W(y|x')
  for x ~ x' and rows summing to 1. D_d*(ε) is its optimum.
* ε*(D) = inf{ε : D*(ε) ≤ D} by bisection (D* is non-increasing in ε); ε kept ≤ 15 (§7.8).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

from streamguard.perturbation.identifiability import hamming_matrix


def _neighbour_rows(m: int, n: int, eps: float) -> coo_matrix:
    """One row per (x, x', y) with x ~ x': v(x, y) − e^ε v(x', y) ≤ 0 on the flattened N×N variable."""
    d = hamming_matrix(m, n)
    N = m**n
    pairs = np.argwhere(d == 1)
    k = pairs.shape[0]
    rows = np.repeat(np.arange(k * N), 2)
    ys = np.tile(np.arange(N), k)
    xs, xps = np.repeat(pairs[:, 0], N), np.repeat(pairs[:, 1], N)
    cols = np.empty(2 * k * N, dtype=np.int64)
    cols[0::2], cols[1::2] = xs * N + ys, xps * N + ys
    vals = np.empty(2 * k * N)
    vals[0::2], vals[1::2] = 1.0, -math.exp(eps)
    return coo_matrix((vals, (rows, cols)), shape=(k * N, N * N))


def d_star(prior: NDArray[np.float64], eps: float, notion: str) -> float:
    """D_i*(ε) (notion "identifiability") or D_d*(ε) (notion "dp"); ∞ when infeasible."""
    p = np.asarray(prior, dtype=np.float64)
    m, n = p.shape[0], p.ndim
    N = m**n
    px = p.ravel()
    d = hamming_matrix(m, n).astype(np.float64)
    joint = notion == "identifiability"
    cost = d.ravel() if joint else (px[:, None] * d).ravel()
    eq = coo_matrix((np.ones(N * N), (np.repeat(np.arange(N), N), np.arange(N * N))), shape=(N, N * N))
    rhs = px if joint else np.ones(N)
    ub = _neighbour_rows(m, n, eps)
    res = linprog(cost, A_ub=ub, b_ub=np.zeros(ub.shape[0]), A_eq=eq, b_eq=rhs, bounds=(0, None), method="highs")
    if res.status == 2:
        return math.inf
    assert res.status == 0, res.message
    return float(res.fun)


def eps_star(prior: NDArray[np.float64], D: float, notion: str, hi: float = 15.0, tol: float = 1e-8) -> float:
    """ε*(D) = inf{ε : D*(ε) ≤ D} by bisection on [0, hi]."""
    ok: Callable[[float], bool] = lambda e: d_star(prior, e, notion) <= D + 1e-10
    if ok(0.0):
        return 0.0
    lo = 0.0
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi
