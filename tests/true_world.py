"""The tests' own evaluator of the *true world*: the exact leakage about one step of a binary
Markov chain whose steps are redacted independently, written from the definitions with numpy
only. It deliberately shares no code with streamguard (no streamguard.audit, .redaction,
.channel or .stream.privatizer), so that a test built on it checks the daemon's claims against
an independent computation.

The world (states 0 = "lo", 1 = "hi"): steps t = 0..n-1 of a chain with transition matrix
P = [[1-α, α], [β, 1-β]] (0 < α, β < 1) and initial law μ. Step t emits, independently given
X_t, either ⊥ or the exact value X_t; ``rows[t] = (Pr(⊥ | X_t=0), Pr(⊥ | X_t=1))`` is its
*effective* redaction row: (1, 1) for a step that published nothing (rejected, lost, never
sent), the row used for a step published once, and the element-wise product of the rows for a
step published several times with independent draws (:func:`combine_copies`).

Leakage about X_p: L_p = max over a ≠ b and over outputs y with Pr(y | X_p=a) > 0 of
log Pr(y | X_p=a) / Pr(y | X_p=b), infinite if some such y has Pr(y | X_p=b) = 0.

How it is evaluated in O(n) per p. Given X_p the left outputs y_0..p-1, the output y_p and the
right outputs y_p+1.. are independent, so for each ordered pair (a, b) the maximum is the sum of
three maxima. Each side is a finite list of *terms*: a vector w with w(a) ∝ Pr(y | X_p=a) for
every y of one class (the constant of proportionality is the same for a and b, so it cancels):

- right: the first released step p+j with value x (the rest is independent of X_p given it):
  w(a) = Pr(y_p+1..p+j-1 = ⊥, X_p+j = x | X_p=a) = [P D_p+1 P … D_p+j-1 P]_(a,x), D_t = diag(rows[t]),
  for every j with rows[p+j][x] < 1; plus "all redacted to the end": [P D_p+1 … P D_n-1 1]_a;
- centre: ⊥ gives w = rows[p]; the value x gives w = (1 - rows[p][x]) · e_x;
- left, computed forward from μ (valid for any μ, stationary or not): the first released step
  p-j to the left with value x gives Pr(y_left, X_p=a) / Pr(X_p=a) ∝ π_p-j(x) [P D_p-j+1 … D_p-1 P]_(x,a)
  / π_p(a) (π_t = μ P^t; the factor π_p-j(x) only decides whether the class has positive
  probability); "all redacted to the start" gives [μ D_0 P D_1 … D_p-1 P]_a / π_p(a).

Each left term is (linear in u = μ(1)) / (linear in u) component-wise, which is what
:func:`worst_over_initial` maximises over the whole simplex.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.polynomial import Polynomial
from numpy.typing import ArrayLike, NDArray

Array = NDArray[np.float64]
#: The two ordered pairs (a, b), a ≠ b, of a binary state.
PAIRS = ((0, 1), (1, 0))
#: Largest chain :func:`brute_force_leakage` enumerates (2^n paths × 3^n outputs).
BRUTE_MAX_STEPS = 8


def transition(alpha: float, beta: float) -> Array:
    """P = [[1-α, α], [β, 1-β]]; requires 0 < α, β < 1 (every state reachable at every step)."""
    if not (0.0 < alpha < 1.0 and 0.0 < beta < 1.0):
        raise ValueError("alpha and beta must lie strictly between 0 and 1")
    return np.array([[1.0 - alpha, alpha], [beta, 1.0 - beta]])


def combine_copies(copies: Iterable[ArrayLike]) -> Array:
    """The effective row of a step published as several copies with independent draws: the
    element-wise product of their rows ((1, 1) for no copy).

    Why the product is exact: copy i of step t shows ⊥ with probability ρ_i(X_t), else X_t. The
    probability that every copy is ⊥ is Π_i ρ_i(X_t). An output in which some copy shows the
    value x has likelihood factor 1[X_t = x] · c(x) where c(x) = Π_(i shown) (1-ρ_i(x)) Π_(i ⊥) ρ_i(x)
    is a number fixed by the output itself (x is in it); so Pr(y | X_p=a) / Pr(y | X_p=b) is the
    same as for the single output "x released" — c(x) multiplies numerator and denominator
    alike and does not depend on X_p. Once a copy shows the value, further copies add nothing;
    the step is the single emission with redaction row Π_i ρ_i."""
    row = np.ones(2)
    for c in copies:
        row = row * _row(c)
    return row


def _row(r: ArrayLike) -> Array:
    out = np.asarray(r, dtype=float).reshape(2)
    if not np.all((out >= 0.0) & (out <= 1.0)):
        raise ValueError("a redaction row holds two probabilities in [0, 1]")
    return out


def _rows(rows: ArrayLike) -> Array:
    out = np.asarray(rows, dtype=float)
    if out.ndim != 2 or out.shape[1] != 2 or out.shape[0] == 0:
        raise ValueError("rows must be an (n, 2) array with n ≥ 1")
    if not np.all((out >= 0.0) & (out <= 1.0)):
        raise ValueError("rows must hold probabilities in [0, 1]")
    return out


def _law(mu: ArrayLike) -> Array:
    out = np.asarray(mu, dtype=float).reshape(2)
    if np.any(out < 0.0) or abs(out.sum() - 1.0) > 1e-12:
        raise ValueError("mu must be a probability vector over the two states")
    return out


def _scaled(m: Array) -> Array:
    """``m`` divided by its largest entry (ratios within m are what the terms use; avoids underflow)."""
    top = m.max()
    return m / top if top > 0.0 else m


@dataclass(frozen=True)
class _Term:
    """One class of outputs of one side: w(a) ∝ c(u)_a / π(u)_a for u = μ(1), where
    c(u) = c0 + u (c1 − c0) and π(u) = π0 + u (π1 − π0) (both ≥ 0 on [0, 1])."""

    c0: Array
    c1: Array
    pi0: Array
    pi1: Array

    @classmethod
    def fixed(cls, w: Array) -> _Term:
        one = np.ones(2)
        return cls(w, w, one, one)

    def c(self, u: float) -> Array:
        return (1.0 - u) * self.c0 + u * self.c1  # (not c0 + u (c1 − c0): no cancellation near u = 1)

    def pi(self, u: float) -> Array:
        return (1.0 - u) * self.pi0 + u * self.pi1

    def value(self, a: int, b: int, u: float) -> float:
        """log w(a)/w(b) at μ = (1-u, u); −inf if the class is impossible under a."""
        return _log_ratio(self.c(u), self.pi(u), a, b)

    def sup(self, a: int, b: int) -> float:
        """sup over u ∈ [0, 1] of :meth:`value`: endpoints (as limits) and the real roots in (0, 1)
        of the derivative's numerator N'D − ND', N = c_a π_b, D = c_b π_a (degree ≤ 2)."""
        best = -math.inf
        for u0, u1 in ((0.0, 1.0), (1.0, 0.0)):
            c = self.c(u0)
            if not np.any(c > 0.0):  # c vanishes at u0: c(u) ∝ c(u1) near it (c is linear)
                c = self.c(u1)
            best = max(best, _log_ratio(c, self.pi(u0), a, b))
        ca, cb = Polynomial([self.c0[a], self.c1[a] - self.c0[a]]), Polynomial([self.c0[b], self.c1[b] - self.c0[b]])
        pa, pb = (Polynomial([self.pi0[k], self.pi1[k] - self.pi0[k]]) for k in (a, b))
        num, den = ca * pb, cb * pa
        slope = num.deriv() * den - num * den.deriv()
        if np.any(slope.coef != 0.0):
            for root in np.atleast_1d(slope.trim().roots()):
                if abs(root.imag) <= 1e-12 and 0.0 < root.real < 1.0:
                    best = max(best, self.value(a, b, float(root.real)))
        return best


def _log_ratio(c: Array, pi: Array, a: int, b: int) -> float:
    if c[a] <= 0.0:
        return -math.inf
    if c[b] <= 0.0:
        return math.inf
    return math.log(c[a]) - math.log(c[b]) + math.log(pi[b]) - math.log(pi[a])


def _right_terms(P: Array, rows: Array, p: int) -> list[_Term]:
    """Terms of the outputs right of p (see the module docstring)."""
    n = rows.shape[0]
    terms: list[_Term] = []
    m = np.eye(2)  # m[a, x] ∝ Pr(y_p+1..t-1 = ⊥, X_t = x | X_p = a) once multiplied by P
    for t in range(p + 1, n):
        m = _scaled(m @ P)
        for x in (0, 1):
            if rows[t, x] < 1.0 and np.any(m[:, x] > 0.0):
                terms.append(_Term.fixed(m[:, x].copy()))
        m = m * rows[t]  # · diag(rows[t]): step t redacted
    terms.append(_Term.fixed(m.sum(axis=1)))  # all redacted to the end (p = n-1: the empty output)
    return terms


def _centre_terms(rows: Array, p: int) -> list[_Term]:
    r = rows[p]
    return [_Term.fixed(r.copy()), _Term.fixed(np.array([1.0 - r[0], 0.0])),
            _Term.fixed(np.array([0.0, 1.0 - r[1]]))]


def _left_terms(P: Array, rows: Array, p: int) -> list[_Term]:
    """Terms of the outputs left of p as functions of u = μ(1) (see the module docstring)."""
    if p == 0:
        return [_Term.fixed(np.ones(2))]
    e0, e1 = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    powers = [np.eye(2)]
    for _ in range(p):
        powers.append(powers[-1] @ P)
    pi0, pi1 = powers[p][0], powers[p][1]  # π_p for μ = δ_0 and μ = δ_1
    terms: list[_Term] = []
    nmat = P.copy()  # [P D_s+1 P … D_p-1 P] for s = p-1, p-2, …, 0
    for s in range(p - 1, -1, -1):
        for x in (0, 1):
            if rows[s, x] < 1.0 and np.any(nmat[x] > 0.0):
                # the class has probability ∝ π_s(x) = μ P^s e_x, linear in u
                terms.append(_Term(powers[s][0, x] * nmat[x], powers[s][1, x] * nmat[x], pi0, pi1))
        if s > 0:
            nmat = _scaled(P @ (rows[s][:, None] * nmat))
    terms.append(_Term((e0 * rows[0]) @ nmat, (e1 * rows[0]) @ nmat, pi0, pi1))  # all redacted to the start
    return terms


def _check_position(rows: Array, p: int) -> None:
    if not 0 <= p < rows.shape[0]:
        raise ValueError("p must index a step of rows")


@dataclass(frozen=True)
class Leakage:
    """Exact leakage about X_p: ``total`` is L_p; ``left``/``right`` are the largest one-sided
    log-ratios (over both orders of the pair; the centre step p is in ``total`` only)."""

    left: float
    right: float
    total: float


def _combine(sides: Sequence[Sequence[_Term]], side_max: Callable[[_Term, int, int], float]) -> Leakage:
    """Leakage from the (left, centre, right) terms, ``side_max`` giving one term's log-ratio."""
    left = right = total = -math.inf
    for a, b in PAIRS:
        lm, cm, rm = (max(side_max(t, a, b) for t in terms) for terms in sides)
        assert -math.inf not in (lm, cm, rm), "every side has an output that is possible under a"
        left, right, total = max(left, lm), max(right, rm), max(total, lm + cm + rm)
    return Leakage(left, right, total)


def true_leakage(P: ArrayLike, mu: ArrayLike, rows: ArrayLike, p: int) -> Leakage:
    """Exact leakage about X_p in the true world (P, μ, rows), O(n). Requires Pr(X_p = a) > 0 for
    both a when p ≥ 1 (true for 0 < α, β < 1); at p = 0 the leakage does not depend on μ."""
    P, rows, mu = np.asarray(P, dtype=float), _rows(rows), _law(mu)
    _check_position(rows, p)
    u = float(mu[1])
    sides = (_left_terms(P, rows, p), _centre_terms(rows, p), _right_terms(P, rows, p))
    return _combine(sides, lambda t, a, b: t.value(a, b, u))


def worst_over_initial(P: ArrayLike, rows: ArrayLike, p: int) -> Leakage:
    """sup over every initial law μ of :func:`true_leakage` (only the left side depends on μ):
    the guarantee a daemon that does not know μ must give."""
    P, rows = np.asarray(P, dtype=float), _rows(rows)
    _check_position(rows, p)
    sides = (_left_terms(P, rows, p), _centre_terms(rows, p), _right_terms(P, rows, p))
    return _combine(sides, lambda t, a, b: t.sup(a, b))


# -- brute force (the evaluator's own check) ---------------------------------------------------
def brute_force_leakage(P: ArrayLike, mu: ArrayLike, rows: ArrayLike, p: int) -> float:
    """L_p by enumerating all 2^n state paths and all 3^n output sequences (n ≤ 8), straight
    from the definition: Pr(y | X_p=a) = Σ_paths with x_p=a μ(x_0) Π P Π e_t(y_t | x_t) / Pr(X_p=a).
    At p = 0 the conditional law given X_0 does not involve μ, so μ is taken uniform there (the
    definition needs Pr(X_0 = a) > 0 for both a)."""
    P, rows, mu = np.asarray(P, dtype=float), _rows(rows), _law(mu)
    n = rows.shape[0]
    if n > BRUTE_MAX_STEPS:
        raise ValueError(f"brute force enumerates at most {BRUTE_MAX_STEPS} steps")
    _check_position(rows, p)
    if p == 0:
        mu = np.array([0.5, 0.5])
    paths = np.array(list(itertools.product((0, 1), repeat=n)), dtype=int)  # (2^n, n)
    outs = np.array(list(itertools.product((0, 1, 2), repeat=n)), dtype=int)  # 2 = ⊥
    prior = mu[paths[:, 0]] * np.prod(P[paths[:, :-1], paths[:, 1:]], axis=1) if n > 1 else mu[paths[:, 0]]
    lik = np.ones((outs.shape[0], paths.shape[0]))
    for t in range(n):
        y, x = outs[:, t][:, None], paths[:, t][None, :]
        e = np.where(y == 2, rows[t][x], np.where(y == x, 1.0 - rows[t][x], 0.0))
        lik *= e
    joint = np.stack([lik[:, paths[:, p] == a] @ prior[paths[:, p] == a] for a in (0, 1)], axis=1)
    marg = joint.sum(axis=0)
    assert np.all(marg > 0.0), "Pr(X_p = a) must be positive for both states"
    cond = joint / marg
    best = -math.inf
    for a, b in PAIRS:
        possible = cond[:, a] > 0.0
        if np.any(possible & (cond[:, b] <= 0.0)):
            return math.inf
        best = max(best, float(np.max(np.log(cond[possible, a]) - np.log(cond[possible, b]))))
    return best
