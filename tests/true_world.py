"""The tests' own evaluator of the *true world*: the exact leakage about one step of a k-state
(binary or larger) Markov chain whose steps are redacted independently, written from the definitions with numpy
only. It deliberately shares no code with streamguard (no streamguard.audit, .redaction,
.channel or .stream.privatizer), so that a test built on it checks the daemon's claims against
an independent computation.

The world (binary: states 0 = "lo", 1 = "hi"): steps t = 0..n-1 of a chain with transition matrix
P (binary: [[1-α, α], [β, 1-β]], 0 < α, β < 1) and initial law μ — or of a *time-varying* chain,
P given as a kernel sequence (≥ n−1, k, k) whose P[t] is the kernel of the step t → t+1 (issue 25:
every formula below holds with the product of the kernels in place of each power of P). Step t
emits, independently given X_t, either ⊥ or the exact value X_t; ``rows[t] = (Pr(⊥ | X_t=0), …,
Pr(⊥ | X_t=k−1))`` is its *effective* redaction row: all ones for a step that published nothing
(rejected, lost, never sent), the row used for a step published once, and the element-wise product of the rows for a
step published several times with independent draws (:func:`combine_copies`).

Leakage about X_p: L_p = max over a ≠ b and over outputs y with Pr(y | X_p=a) > 0 of
log Pr(y | X_p=a) / Pr(y | X_p=b), infinite if some such y has Pr(y | X_p=b) = 0.

How it is evaluated in O(n) per p. Given X_p the left outputs y_0..p-1, the output y_p and the
right outputs y_p+1.. are independent, so for each ordered pair (a, b) the maximum is the sum of
three maxima. Each side is a finite list of *terms*: a vector w with w(a) ∝ Pr(y | X_p=a) for
every y of one class (the constant of proportionality is the same for a and b, so it cancels):

- right: the first released step p+j with value x (the rest is independent of X_p given it):
  w(a) = Pr(y_p+1..p+j-1 = ⊥, X_p+j = x | X_p=a) = [P_p D_p+1 P_p+1 … D_p+j-1 P_p+j-1]_(a,x), D_t = diag(rows[t])
  (a homogeneous chain: every P_t = P),
  for every j with rows[p+j][x] < 1; plus "all redacted to the end": [P D_p+1 … P D_n-1 1]_a;
- centre: ⊥ gives w = rows[p]; the value x gives w = (1 - rows[p][x]) · e_x;
- left, computed forward from μ (valid for any μ, stationary or not): the first released step
  p-j to the left with value x gives Pr(y_left, X_p=a) / Pr(X_p=a) ∝ π_p-j(x) [P D_p-j+1 … D_p-1 P]_(x,a)
  / π_p(a) (π_t = μ P^t, or μ P_0 ⋯ P_t-1; the factor π_p-j(x) only decides whether the class has positive
  probability); "all redacted to the start" gives [μ D_0 P D_1 … D_p-1 P]_a / π_p(a).

Each left term is (linear in μ) / (linear in μ) component-wise, which is what
:func:`worst_over_initial` maximises over the whole simplex: for two states on the segment
μ = (1 − u, u) exactly; for k states on every edge of the simplex (δ_i to δ_j) exactly, which is the
supremum because a product of two linear-fractional functions attains its supremum over a polytope
on an edge (docs/k-state-redaction.md §4; :func:`sampled_over_initial` checks it by sampling).
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
#: Largest chain :func:`brute_force_leakage` enumerates: k^n paths × (k+1)^n outputs ≤ 6^8 (binary: n ≤ 8).
BRUTE_MAX_CASES = 6**8


def pairs(k: int) -> list[tuple[int, int]]:
    """The ordered pairs (a, b), a ≠ b, of k states."""
    return [(a, b) for a in range(k) for b in range(k) if a != b]


def transition(alpha: float, beta: float) -> Array:
    """P = [[1-α, α], [β, 1-β]]; requires 0 < α, β < 1 (every state reachable at every step)."""
    if not (0.0 < alpha < 1.0 and 0.0 < beta < 1.0):
        raise ValueError("alpha and beta must lie strictly between 0 and 1")
    return np.array([[1.0 - alpha, alpha], [beta, 1.0 - beta]])


def kernels(P: ArrayLike, n: int) -> Array:
    """The kernel of every step t → t+1 of an n-step world, shape (max(n−1, 0), k, k): P repeated, or
    the first n−1 of a given sequence (which must hold that many kernels, each row a law)."""
    P = np.asarray(P, dtype=float)
    seq = np.broadcast_to(P, (max(n - 1, 0), *P.shape)) if P.ndim == 2 else P[: max(n - 1, 0)]
    if seq.ndim != 3 or seq.shape[0] != max(n - 1, 0) or seq.shape[1] != seq.shape[2]:
        raise ValueError("P must be a k × k matrix or a sequence of at least n − 1 of them")
    if np.any(seq < 0.0) or np.any(np.abs(seq.sum(axis=-1) - 1.0) > 1e-9):
        raise ValueError("every kernel row must be a probability law")
    return seq


def _marginals(Ks: Array, p: int) -> list[Array]:
    """[I, P_0, P_0 P_1, …, P_0 ⋯ P_p-1]: row i of entry t is π_t for μ = δ_i."""
    out = [np.eye(Ks.shape[1])]
    for t in range(p):
        out.append(out[-1] @ Ks[t])
    return out


def combine_copies(copies: Iterable[ArrayLike], k: int = 2) -> Array:
    """The effective row of a step published as several copies with independent draws: the
    element-wise product of their rows (all ones for no copy).

    Why the product is exact: copy i of step t shows ⊥ with probability ρ_i(X_t), else X_t. The
    probability that every copy is ⊥ is Π_i ρ_i(X_t). An output in which some copy shows the
    value x has likelihood factor 1[X_t = x] · c(x) where c(x) = Π_(i shown) (1-ρ_i(x)) Π_(i ⊥) ρ_i(x)
    is a number fixed by the output itself (x is in it); so Pr(y | X_p=a) / Pr(y | X_p=b) is the
    same as for the single output "x released" — c(x) multiplies numerator and denominator
    alike and does not depend on X_p. Once a copy shows the value, further copies add nothing;
    the step is the single emission with redaction row Π_i ρ_i."""
    row = np.ones(k)
    for c in copies:
        row = row * _row(c, k)
    return row


def _row(r: ArrayLike, k: int) -> Array:
    out = np.asarray(r, dtype=float).reshape(-1)
    if out.shape != (k,) or not np.all((out >= 0.0) & (out <= 1.0)):
        raise ValueError("a redaction row holds k probabilities in [0, 1]")
    return out


def _rows(rows: ArrayLike) -> Array:
    out = np.asarray(rows, dtype=float)
    if out.ndim != 2 or out.shape[1] < 2 or out.shape[0] == 0:
        raise ValueError("rows must be an (n, k) array with n ≥ 1, k ≥ 2")
    if not np.all((out >= 0.0) & (out <= 1.0)):
        raise ValueError("rows must hold probabilities in [0, 1]")
    return out


def _law(mu: ArrayLike, k: int) -> Array:
    out = np.asarray(mu, dtype=float).reshape(-1)
    if out.shape != (k,) or np.any(out < 0.0) or abs(out.sum() - 1.0) > 1e-12:
        raise ValueError("mu must be a probability vector over the k states")
    return out


def _scaled(m: Array) -> Array:
    """``m`` divided by its largest entry (ratios within m are what the terms use; avoids underflow)."""
    top = m.max()
    return m / top if top > 0.0 else m


@dataclass(frozen=True)
class _Term:
    """One class of outputs of one side: w(a) ∝ c(μ)_a / π(μ)_a, with c(μ) = Σ_i μ_i C[i] and
    π(μ) = Σ_i μ_i PI[i] (row i: the value for μ = δ_i; all ≥ 0)."""

    C: Array
    PI: Array
    varies: bool = True  # False: the same for every μ (right and centre terms)

    @classmethod
    def fixed(cls, w: Array) -> _Term:
        k = w.shape[0]
        return cls(np.tile(w, (k, 1)), np.ones((k, k)), False)

    def value(self, a: int, b: int, mu: Array) -> float:
        """log w(a)/w(b) at μ; −inf if the class is impossible under a."""
        return _log_ratio(mu @ self.C, mu @ self.PI, a, b)

    def sup(self, a: int, b: int) -> float:
        """sup over every law μ of :meth:`value`: the largest segment supremum over the edges δ_i–δ_j."""
        k = self.C.shape[0]
        if not self.varies:
            return _log_ratio(self.C[0], self.PI[0], a, b)
        return max(self._segment(a, b, i, j) for i in range(k) for j in range(i + 1, k))

    def _segment(self, a: int, b: int, i: int, j: int) -> float:
        """sup over μ = (1 − u) δ_i + u δ_j, u ∈ [0, 1]: endpoints (as limits) and the real roots in
        (0, 1) of the derivative's numerator N'D − ND', N = c_a π_b, D = c_b π_a (degree ≤ 2)."""
        c0, c1, pi0, pi1 = self.C[i], self.C[j], self.PI[i], self.PI[j]

        def c(u: float) -> Array:
            return (1.0 - u) * c0 + u * c1  # (not c0 + u (c1 − c0): no cancellation near u = 1)

        def pi(u: float) -> Array:
            return (1.0 - u) * pi0 + u * pi1

        best = -math.inf
        ca, cb = Polynomial([c0[a], c1[a] - c0[a]]), Polynomial([c0[b], c1[b] - c0[b]])
        pa, pb = (Polynomial([pi0[m], pi1[m] - pi0[m]]) for m in (a, b))
        num, den = ca * pb, cb * pa
        for u0, u1 in ((0.0, 1.0), (1.0, 0.0)):
            cu = c(u0)
            if not np.any(cu > 0.0):  # c vanishes at u0: c(u) ∝ c(u1) near it (c is linear)
                cu = c(u1)
            if np.all(pi(u0)[[a, b]] > 0.0):
                best = max(best, _log_ratio(cu, pi(u0), a, b))
            else:  # a secret impossible at this vertex: the limit u → u0 of N/D (k-state chains with zeros)
                best = max(best, _log_limit(num, den, u0))
        slope = num.deriv() * den - num * den.deriv()
        if np.any(slope.coef != 0.0):
            for root in np.atleast_1d(slope.trim().roots()):
                if abs(root.imag) <= 1e-12 and 0.0 < root.real < 1.0:
                    u = float(root.real)
                    best = max(best, _log_ratio(c(u), pi(u), a, b))
        return best


def _log_limit(num: Polynomial, den: Polynomial, u0: float) -> float:
    """log of lim_{u → u0} num(u)/den(u) from inside [0, 1]: the lowest-order terms of both
    polynomials around u0 decide (−inf if num vanishes faster, +inf if den does; nothing if both
    vanish identically)."""
    shift = Polynomial([u0, 1.0])  # u = u0 + v

    def lowest(poly: Polynomial) -> tuple[int, float]:
        coef = poly(shift).coef
        nz = np.flatnonzero(np.abs(coef) > 1e-300)
        return (int(nz[0]), float(coef[nz[0]])) if nz.size else (10**6, 0.0)

    (dn, cn), (dd, cd) = lowest(num), lowest(den)
    if cn == 0.0:
        return -math.inf
    if dn < dd:
        return math.inf
    if dn > dd:
        return -math.inf
    return math.log(abs(cn)) - math.log(abs(cd))


def _log_ratio(c: Array, pi: Array, a: int, b: int) -> float:
    if c[a] <= 0.0:
        return -math.inf
    if c[b] <= 0.0:
        return math.inf
    return math.log(c[a]) - math.log(c[b]) + math.log(pi[b]) - math.log(pi[a])


def _right_terms(Ks: Array, rows: Array, p: int) -> list[_Term]:
    """Terms of the outputs right of p (see the module docstring); Ks: :func:`kernels`."""
    n, k = rows.shape
    terms: list[_Term] = []
    m = np.eye(k)  # m[a, x] ∝ Pr(y_p+1..t-1 = ⊥, X_t = x | X_p = a) once multiplied by P_t-1
    for t in range(p + 1, n):
        m = _scaled(m @ Ks[t - 1])
        for x in range(k):
            if rows[t, x] < 1.0 and np.any(m[:, x] > 0.0):
                terms.append(_Term.fixed(m[:, x].copy()))
        m = m * rows[t]  # · diag(rows[t]): step t redacted
    terms.append(_Term.fixed(m.sum(axis=1)))  # all redacted to the end (p = n-1: the empty output)
    return terms


def _centre_terms(rows: Array, p: int) -> list[_Term]:
    r = rows[p]
    k = r.shape[0]
    return [_Term.fixed(r.copy())] + [_Term.fixed((1.0 - r[x]) * np.eye(k)[x]) for x in range(k)]


def _left_terms(Ks: Array, rows: Array, p: int) -> list[_Term]:
    """Terms of the outputs left of p as functions of μ (see the module docstring); Ks: :func:`kernels`."""
    k = rows.shape[1]
    if p == 0:
        return [_Term.fixed(np.ones(k))]
    powers = _marginals(Ks, p)
    PI = powers[p]  # row i: π_p for μ = δ_i
    terms: list[_Term] = []
    nmat = Ks[p - 1].copy()  # [P_s D_s+1 P_s+1 … D_p-1 P_p-1] for s = p-1, p-2, …, 0
    for s in range(p - 1, -1, -1):
        for x in range(k):
            if rows[s, x] < 1.0 and np.any(nmat[x] > 0.0):
                # the class has probability ∝ π_s(x) = μ P^s e_x, linear in μ
                terms.append(_Term(powers[s][:, x][:, None] * nmat[x][None, :], PI))
        if s > 0:
            nmat = _scaled(Ks[s - 1] @ (rows[s][:, None] * nmat))
    terms.append(_Term(rows[0][:, None] * nmat, PI))  # all redacted to the start: row i = (δ_i D_0) nmat
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


def _combine(sides: Sequence[Sequence[_Term]], side_max: Callable[[_Term, int, int], float], k: int,
             secrets: Sequence[int] | None = None) -> Leakage:
    """Leakage from the (left, centre, right) terms, ``side_max`` giving one term's log-ratio, over
    the ordered pairs of ``secrets`` (the values X_p can take; default all)."""
    left = right = total = -math.inf
    ok = set(range(k) if secrets is None else secrets)
    for a, b in pairs(k):
        if a not in ok or b not in ok:
            continue
        lm, cm, rm = (max(side_max(t, a, b) for t in terms) for terms in sides)
        assert -math.inf not in (lm, cm, rm), "every side has an output that is possible under a"
        left, right, total = max(left, lm), max(right, rm), max(total, lm + cm + rm)
    return Leakage(left, right, total)


def _sides(P: Array, rows: Array, p: int) -> tuple[list[_Term], list[_Term], list[_Term]]:
    Ks = kernels(P, rows.shape[0])
    return _left_terms(Ks, rows, p), _centre_terms(rows, p), _right_terms(Ks, rows, p)


def true_leakage(P: ArrayLike, mu: ArrayLike, rows: ArrayLike, p: int) -> Leakage:
    """Exact leakage about X_p in the true world (P — a matrix or a kernel sequence —, μ, rows),
    O(n·k³), over the values X_p can take under μ (every pair when p = 0: the conditional law given
    X_0 does not involve μ)."""
    P, rows = np.asarray(P, dtype=float), _rows(rows)
    k = rows.shape[1]
    mu = _law(mu, k)
    _check_position(rows, p)
    secrets = [a for a in range(k) if (mu @ _marginals(kernels(P, rows.shape[0]), p)[p])[a] > 0] if p else None
    return _combine(_sides(P, rows, p), lambda t, a, b: t.value(a, b, mu), k, secrets)


def worst_over_initial(P: ArrayLike, rows: ArrayLike, p: int) -> Leakage:
    """sup over every initial law μ of :func:`true_leakage` (only the left side depends on μ):
    the guarantee a daemon that does not know μ must give."""
    P, rows = np.asarray(P, dtype=float), _rows(rows)
    _check_position(rows, p)
    return _combine(_sides(P, rows, p), lambda t, a, b: t.sup(a, b), rows.shape[1])


def sampled_over_initial(P: ArrayLike, rows: ArrayLike, p: int, laws: ArrayLike) -> float:
    """max of :func:`true_leakage` over the given laws (a lower bound of the worst case; used to
    check :func:`worst_over_initial`'s edge argument by sampling the simplex's interior)."""
    best = -math.inf
    for mu in np.asarray(laws, dtype=float):
        best = max(best, true_leakage(P, mu, rows, p).total)
    return best


# -- brute force (the evaluator's own check) ---------------------------------------------------
def brute_force_leakage(P: ArrayLike, mu: ArrayLike, rows: ArrayLike, p: int) -> float:
    """L_p by enumerating all k^n state paths and all (k+1)^n output sequences, straight from the
    definition: Pr(y | X_p=a) = Σ_paths with x_p=a μ(x_0) Π_t P_t(x_t, x_t+1) Π e_t(y_t | x_t) / Pr(X_p=a), over
    the values a with Pr(X_p = a) > 0. At p = 0 the conditional law given X_0 does not involve μ,
    so μ is taken uniform there."""
    P, rows = np.asarray(P, dtype=float), _rows(rows)
    n, k = rows.shape
    mu = _law(mu, k)
    if k**n * (k + 1) ** n > BRUTE_MAX_CASES:
        raise ValueError(f"brute force enumerates at most {BRUTE_MAX_CASES} cases")
    _check_position(rows, p)
    if p == 0:
        mu = np.full(k, 1.0 / k)
    paths = np.array(list(itertools.product(range(k), repeat=n)), dtype=int)  # (k^n, n)
    outs = np.array(list(itertools.product(range(k + 1), repeat=n)), dtype=int)  # k = ⊥
    steps = np.arange(n - 1)[None, :]
    prior = mu[paths[:, 0]] * np.prod(kernels(P, n)[steps, paths[:, :-1], paths[:, 1:]], axis=1)
    lik = np.ones((outs.shape[0], paths.shape[0]))
    for t in range(n):
        y, x = outs[:, t][:, None], paths[:, t][None, :]
        e = np.where(y == k, rows[t][x], np.where(y == x, 1.0 - rows[t][x], 0.0))
        lik *= e
    joint = np.stack([lik[:, paths[:, p] == a] @ prior[paths[:, p] == a] for a in range(k)], axis=1)
    marg = joint.sum(axis=0)
    ok = [a for a in range(k) if marg[a] > 0.0]
    cond = joint[:, ok] / marg[ok]
    best = -math.inf
    for a, b in pairs(len(ok)):
        possible = cond[:, a] > 0.0
        if np.any(possible & (cond[:, b] <= 0.0)):
            return math.inf
        best = max(best, float(np.max(np.log(cond[possible, a]) - np.log(cond[possible, b]))))
    return best
