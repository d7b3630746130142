"""Independent reference computations for the tests (they share no code with streamguard).

- Exact rational matrix powers (``fractions.Fraction``) and pointwise influences computed from
  them by Def. 3 of paper 000 — no closed form involved. The log of a ratio r that is close to 1 is
  taken as log1p(float(r − 1)), where r − 1 is exact, so tiny influences keep full precision.
- A float matrix-power version of the same for parameters that are not nice fractions.
- A tiny leakage enumerator that walks every output sequence y with a forward pass (the library's
  brute force enumerates the inputs x instead).
- The Algorithm 1 (MQ) mode decision of notes/000 §4.7, re-implemented from the notes.
"""

from __future__ import annotations

import functools
import itertools
import math
from fractions import Fraction

import numpy as np

# ---------------------------------------------------------------------------------------------
# Influences from exact matrix powers
# ---------------------------------------------------------------------------------------------


def frac_matrix(alpha: Fraction, beta: Fraction) -> list[list[Fraction]]:
    return [[1 - alpha, alpha], [beta, 1 - beta]]


def frac_matmul(A: list[list[Fraction]], B: list[list[Fraction]]) -> list[list[Fraction]]:
    k = len(A)
    return [[sum(A[i][l] * B[l][j] for l in range(k)) for j in range(k)] for i in range(k)]


def frac_powers(alpha: Fraction, beta: Fraction, max_delta: int) -> list[list[list[Fraction]]]:
    """[P^1, …, P^max_delta] exactly."""
    P = frac_matrix(alpha, beta)
    out, cur = [], P
    for _ in range(max_delta):
        out.append(cur)
        cur = frac_matmul(cur, P)
    return out


def log_of_ratio(r: Fraction) -> float:
    """log r for an exact positive rational, accurate even when r is very close to 1."""
    return math.log1p(float(r - 1))


def influences_exact(alpha: Fraction, beta: Fraction, max_delta: int) -> np.ndarray:
    """(max_delta, 2): i(X_p ⇝ X_{p+Δ} = x) = log max_{a,b} P^Δ[a,x] / P^Δ[b,x] (Def. 3)."""
    out = np.empty((max_delta, 2))
    for d, Pd in enumerate(frac_powers(alpha, beta, max_delta)):
        for x in range(2):
            col = [Pd[0][x], Pd[1][x]]
            out[d, x] = log_of_ratio(max(col) / min(col))
    return out


def influences_float(P: np.ndarray, max_delta: int) -> np.ndarray:
    """(max_delta, k) right-side pointwise influences of any chain, by repeated multiplication."""
    k = P.shape[0]
    out = np.empty((max_delta, k))
    cur = np.eye(k)
    for d in range(max_delta):
        cur = cur @ P
        for x in range(k):
            col = cur[:, x]
            out[d, x] = math.log(col.max() / col.min())
    return out


# ---------------------------------------------------------------------------------------------
# Leakage by enumerating outputs (forward pass per output sequence)
# ---------------------------------------------------------------------------------------------


def enumerate_leakage(P: np.ndarray, init: np.ndarray, emis: np.ndarray, p: int) -> float:
    """L(X_p → Y) = log max_{y ∈ supp} max_{a,b} Pr(y | X_p=a)/Pr(y | X_p=b), by enumeration.

    ``emis`` is (n, k, m): emis[t, x, y] = Pr(Y_t = y | X_t = x).
    """
    n, k, m = emis.shape
    marg_p = init.copy()
    for _ in range(p):
        marg_p = marg_p @ P
    worst = 0.0
    for y in itertools.product(range(m), repeat=n):
        cond = np.empty(k)
        for a in range(k):
            f = init * emis[0, :, y[0]]
            if p == 0:
                f = np.where(np.arange(k) == a, f, 0.0)
            for t in range(1, n):
                f = (f @ P) * emis[t, :, y[t]]
                if t == p:
                    f = np.where(np.arange(k) == a, f, 0.0)
            cond[a] = f.sum() / marg_p[a]
        if cond.max() == 0.0:
            continue  # y is not in the support
        if cond.min() == 0.0:
            return math.inf
        worst = max(worst, math.log(cond.max()) - math.log(cond.min()))
    return worst


def redaction_emissions(red: np.ndarray) -> np.ndarray:
    """(n, 2, 3) emission tables of a binary redaction table (outputs 0, 1, ⊥)."""
    red = np.asarray(red, dtype=float)
    n = red.shape[0]
    E = np.zeros((n, 2, 3))
    for t in range(n):
        for x in range(2):
            E[t, x, x] = 1.0 - red[t, x]
            E[t, x, 2] = red[t, x]
    return E


# ---------------------------------------------------------------------------------------------
# Closed forms written from the notes
# ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def hat_i(alpha: float, beta: float, delta: int) -> float:
    """Max-influence I(Δ) from exact rational matrix powers (alpha, beta as floats are converted
    exactly to rationals, so this is the exact value for the double-precision parameters)."""
    if delta <= 0:
        return math.inf
    return float(influences_exact(Fraction(alpha), Fraction(beta), delta)[-1].max())


def delta_star_scan(alpha: float, beta: float, eps: float) -> int:
    """Δ*(ε) by a linear scan of the exact max-influence."""
    d = 1
    while hat_i(alpha, beta, d) > eps:
        d += 1
    return d


def mq_mode_one_sided(alpha: float, beta: float, n: int, p: int, eps: float) -> tuple[bool, bool]:
    """(one_sided, reflected) of Algorithm 1 (notes/000 §4.7) for 0-based p.

    Algorithm 1 assumes p₁ ≤ n/2 and reflects otherwise; one-sided when p₁ = 1, or
    ε < I(n+1−p₁) + I(p₁−1), or t_p(ε) = p₁ + Δ*(ε) − 2Δ*(ε/2) < 0.
    """
    reflected = p + 1 > n / 2
    p1 = (n - 1 - p if reflected else p) + 1
    if p1 == 1:
        return True, reflected
    de, dh = delta_star_scan(alpha, beta, eps), delta_star_scan(alpha, beta, eps / 2)
    one = eps < hat_i(alpha, beta, n + 1 - p1) + hat_i(alpha, beta, p1 - 1) or p1 + de - 2 * dh < 0
    return one, reflected
