"""Markov models of a sensor stream: a k-state time-homogeneous chain with an initial distribution.

A stream X_1, X_2, ... of discrete states follows ``Pr(X_{t+1}=j | X_t=i) = P[i, j]`` with
``X_1 ~ initial``. By default the initial distribution is the stationary one, so every marginal
equals it and (paper 000 §II) the chain read backwards from any position has the time-reversed
kernel ``P̂[j, i] = π_i P[i, j] / π_j``; a binary stationary chain is reversible, so ``P̂ = P``.

Positions in the library are 0-based indices (``marginal(0)`` is the initial law); only the CLI and
its JSON speak the papers' 1-based positions.

Privacy holds *under the model*: every guarantee in streamguard is a statement about this chain.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cached_property

import numpy as np
from numpy.typing import ArrayLike, NDArray

#: Tolerance for "rows sum to one" and "the initial law sums to one".
STOCHASTIC_TOL = 1e-9
#: The most states a stream can have: privatized states travel as int8 beside REDACTED = −1
#: (sampling.py), so states 0..127 fit.
MAX_STATES = 128


class ModelError(ValueError):
    """A Markov model is malformed or lacks a property a computation requires."""


def _as_matrix(matrix: ArrayLike) -> NDArray[np.float64]:
    try:
        P = np.array(matrix, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ModelError("transition matrix: not a numeric matrix") from exc
    if P.ndim != 2 or P.shape[0] != P.shape[1] or P.shape[0] < 2:
        raise ModelError(f"transition matrix: must be square k×k with k ≥ 2, got shape {P.shape}")
    if not np.all(np.isfinite(P)):
        raise ModelError("transition matrix: contains NaN or infinity")
    if np.any(P < 0):
        raise ModelError("transition matrix: has negative entries")
    sums = P.sum(axis=1)
    bad = np.flatnonzero(np.abs(sums - 1.0) > STOCHASTIC_TOL)
    if bad.size:
        raise ModelError(
            f"transition matrix: not row-stochastic (row {int(bad[0])} sums to {sums[bad[0]]:.12g})"
        )
    return P


def _as_distribution(vec: ArrayLike, k: int, what: str) -> NDArray[np.float64]:
    try:
        v = np.array(vec, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ModelError(f"{what}: not a numeric vector") from exc
    if v.shape != (k,):
        raise ModelError(f"{what}: must have {k} entries, got shape {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ModelError(f"{what}: contains NaN or infinity")
    if np.any(v < 0):
        raise ModelError(f"{what}: has negative entries")
    if abs(v.sum() - 1.0) > STOCHASTIC_TOL:
        raise ModelError(f"{what}: does not sum to 1 (sums to {v.sum():.12g})")
    return v


def _reachability(P: NDArray[np.float64]) -> NDArray[np.bool_]:
    """Boolean transitive closure of the transition graph (i reaches j in ≥ 1 steps)."""
    A = P > 0
    R = A.copy()
    for _ in range(int(math.ceil(math.log2(P.shape[0]))) + 1):
        R = R | ((R.astype(np.int64) @ R.astype(np.int64)) > 0)
    return R


def _period(P: NDArray[np.float64]) -> int:
    """Period of an irreducible chain: gcd of level[u] + 1 - level[v] over edges u→v (BFS levels)."""
    k = P.shape[0]
    level = [-1] * k
    level[0] = 0
    frontier = [0]
    while frontier:
        nxt = []
        for u in frontier:
            for v in np.flatnonzero(P[u] > 0):
                if level[v] < 0:
                    level[v] = level[u] + 1
                    nxt.append(int(v))
        frontier = nxt
    g = 0
    for u in range(k):
        for v in np.flatnonzero(P[u] > 0):
            g = math.gcd(g, abs(level[u] + 1 - level[int(v)]))
    return g


def stationary_distribution(P: NDArray[np.float64]) -> NDArray[np.float64]:
    """The unique stationary law π = πP of an irreducible chain.

    Binary chains use the closed form π = (β, α)/(α+β). Larger ones use the
    Grassmann–Taksar–Heyman elimination (state reduction): it uses no subtraction, so every entry
    of π is accurate to a few ulps *relative* to itself, however rare the state. A least-squares
    solve of (Pᵀ − I)π = 0 is only accurate in absolute terms (≈1e−16): a state with π ≈ 1e−15 came
    out off by tens of per cent, and the quilt mechanism's ``stat`` normaliser log π(t)/π(s) then
    under-stated the max-influence (found by review; tests/test_quilt_influence.py).

    GTH: for n = k−1 … 1, with S = Σ_{j<n} P[n, j] (> 0 for an irreducible chain), censor state n:
    P[i, n] /= S and P[i, j] += P[i, n]·P[n, j] for i, j < n; then π_0 = 1, π_n = Σ_{i<n} π_i P[i, n],
    normalised. A reducible chain (some S = 0) has no unique law: :class:`ModelError`.
    """
    k = P.shape[0]
    if k == 2:
        a, b = P[0, 1], P[1, 0]
        return np.array([b / (a + b), a / (a + b)])
    A = np.array(P, dtype=np.float64, copy=True)
    for n in range(k - 1, 0, -1):
        S = A[n, :n].sum()
        if not S > 0:
            raise ModelError("transition matrix: chain is reducible (no unique stationary distribution)")
        A[:n, n] /= S
        A[:n, :n] += np.outer(A[:n, n], A[n, :n])
    pi = np.zeros(k)
    pi[0] = 1.0
    for n in range(1, k):
        pi[n] = pi[:n] @ A[:n, n]
    return pi / pi.sum()


class MarkovChain:
    """A time-homogeneous Markov chain on states 0..k-1.

    Parameters
    ----------
    matrix:
        k×k row-stochastic transition matrix, ``matrix[i, j] = Pr(X_{t+1}=j | X_t=i)``.
    initial:
        Law of X_1. ``None`` (the default) means the stationary law, which requires the chain to be
        irreducible and aperiodic so that it is unique; that is checked.

    Raises
    ------
    ModelError
        with a message naming the problem (negative, NaN, not row-stochastic, reducible, periodic,
        wrong shape).
    """

    matrix: NDArray[np.float64]
    initial: NDArray[np.float64]
    #: True when the initial law is stationary, so every marginal equals it.
    stationary: bool

    def __init__(self, matrix: ArrayLike, initial: ArrayLike | None = None) -> None:
        P = _as_matrix(matrix)
        P.setflags(write=False)
        self.matrix = P
        if initial is None:
            self.require_ergodic()
            pi = stationary_distribution(P)
            self.stationary = True
        else:
            pi = _as_distribution(initial, P.shape[0], "initial distribution")
            self.stationary = bool(np.allclose(pi @ P, pi, rtol=0, atol=1e-12))
        pi.setflags(write=False)
        self.initial = pi

    def __repr__(self) -> str:
        return f"MarkovChain(k={self.k}, stationary={self.stationary})"

    # -- constructors ---------------------------------------------------------------------------
    @classmethod
    def binary(cls, alpha: float, beta: float, initial: ArrayLike | None = None) -> MarkovChain:
        """Binary chain of paper 000: P = [[1−α, α], [β, 1−β]] with 0 < α, β < 1."""
        for name, v in (("alpha", alpha), ("beta", beta)):
            if not (isinstance(v, (int, float)) and math.isfinite(v) and 0.0 < v < 1.0):
                raise ModelError(f"{name} must lie strictly between 0 and 1")
        return cls([[1.0 - alpha, alpha], [beta, 1.0 - beta]], initial)

    # -- basic facts ----------------------------------------------------------------------------
    @property
    def k(self) -> int:
        """Number of states."""
        return int(self.matrix.shape[0])

    @property
    def is_binary(self) -> bool:
        return self.k == 2

    @property
    def alpha(self) -> float:
        """P[0, 1] of a binary chain."""
        self._require_binary()
        return float(self.matrix[0, 1])

    @property
    def beta(self) -> float:
        """P[1, 0] of a binary chain."""
        self._require_binary()
        return float(self.matrix[1, 0])

    @property
    def lam(self) -> float:
        """λ = 1 − α − β, the second eigenvalue of a binary chain (paper 000 App. F)."""
        return 1.0 - self.alpha - self.beta

    def _require_binary(self) -> None:
        if not self.is_binary:
            raise ModelError(f"this computation needs a binary chain, got k = {self.k}")

    @cached_property
    def is_irreducible(self) -> bool:
        return bool(_reachability(self.matrix).all())

    @cached_property
    def period(self) -> int:
        """Period of the chain (1 = aperiodic); only meaningful when irreducible."""
        return _period(self.matrix)

    def require_ergodic(self) -> None:
        """Raise unless the chain is irreducible and aperiodic (unique stationary law)."""
        if not self.is_irreducible:
            raise ModelError("transition matrix: chain is reducible (no unique stationary distribution)")
        if self.period != 1:
            raise ModelError(f"transition matrix: chain is periodic with period {self.period}")

    @cached_property
    def stationary_law(self) -> NDArray[np.float64]:
        """The stationary distribution (requires an ergodic chain)."""
        self.require_ergodic()
        return stationary_distribution(self.matrix)

    # -- transitions ----------------------------------------------------------------------------
    def power(self, steps: int) -> NDArray[np.float64]:
        """P^steps (steps ≥ 0), by repeated squaring."""
        if steps < 0:
            raise ValueError("steps must be ≥ 0")
        return np.linalg.matrix_power(self.matrix, steps)

    def marginal(self, t: int) -> NDArray[np.float64]:
        """Law of the record at 0-based index t: initial · P^t."""
        if t < 0:
            raise ValueError("indices are 0-based and non-negative")
        if self.stationary:
            return self.initial.copy()
        return self.initial @ self.power(t)

    def marginals(self, n: int) -> NDArray[np.float64]:
        """Laws of the records at indices 0..n-1 as an (n, k) array."""
        out = np.empty((n, self.k))
        if self.stationary:
            out[:] = self.initial
            return out
        v = self.initial.copy()
        for t in range(n):
            out[t] = v
            v = v @ self.matrix
        return out

    def reversed_kernel(self, marginal_before: NDArray[np.float64]) -> NDArray[np.float64]:
        """Backward kernel R[j, i] = Pr(X_t = i | X_{t+1} = j) = μ_i P[i, j] / (μP)_j.

        ``marginal_before`` is μ, the law of X_t. A column of P that μ cannot reach (probability 0
        at t+1) gets a uniform row, which is never used by a supported observation.
        """
        joint = marginal_before[:, None] * self.matrix  # joint[i, j] = Pr(X_t=i, X_{t+1}=j)
        after = joint.sum(axis=0)
        R = np.empty_like(joint.T)
        for j in range(self.k):
            R[j] = joint[:, j] / after[j] if after[j] > 0 else 1.0 / self.k
        return R

    def time_reversal(self) -> MarkovChain:
        """The stationary time-reversed chain P̂[j, i] = π_i P[i, j] / π_j."""
        pi = self.stationary_law
        return MarkovChain(self.reversed_kernel(pi))

    def describe(self) -> dict[str, object]:
        """JSON-ready summary (no data, only the model)."""
        return {
            "k": self.k,
            "matrix": self.matrix.tolist(),
            "initial": self.initial.tolist(),
            "stationary": self.stationary,
        }


def as_chain(obj: MarkovChain | Sequence[Sequence[float]]) -> MarkovChain:
    """Accept a chain or a transition matrix."""
    return obj if isinstance(obj, MarkovChain) else MarkovChain(obj)
