"""Exact Pufferfish ε of Laplace-noised integer queries on a small Markov chain (notes/002 §6).

Setting (notes/002 §1–2). X = X_1..X_T is a Markov chain θ = (q, P) on k states; the secrets are
"X_i = a" and the pairs (X_i = a, X_i = b), a ≠ b (Def II.1). A *release* r reads a window
[lo, hi] and publishes

    w_r = F_r(X) + Z_r,    F_r(X) = Σ_{j=lo}^{hi} φ_r[X_j] ∈ ℤ^{d_r},

with Z_r i.i.d. two-sided geometric (discrete Laplace, :mod:`streamguard.quilt.noise`) of scale
β_r per coordinate: P(Z = z) ∝ τ_r^{|z|}, τ_r = e^{−1/β_r}. φ_r is a k × d_r integer table:
one-hot rows for a count histogram (d = k), an indicator column for the count of one state, a
column of grid units for a quantised sum. Several releases are independent given X (sequential
composition, overlapping or disjoint windows). The evaluator returns, for every secret pair,

    ε(i, a, b) = sup_w log P(w | X_i = a) / P(w | X_i = b)        (w over all joint outputs)

exactly (up to float rounding), by enumerating all k^T sequences.

Why a finite search is exact [derived here]. Write D = Σ_r d_r for the output coordinates and
C_c for the set of values coordinate c of F takes (the kernel *centres*). For any secret,
P(w | s) = Σ_x P(x | s) Π_c κ_c τ_c^{|w_c − F_c(x)|}. Fix every coordinate but c. On a cell
C_c[m] ≤ w_c ≤ C_c[m+1] between consecutive centres each term is A·u or B/u with u = τ_c^{w_c},
so the likelihood ratio of two secrets is (α u + γ/u)/(α' u + γ'/u) = (α u² + γ)/(α' u² + γ'), a
Möbius function of u² with non-negative coefficients — monotone in w_c across the cell. Beyond the
extreme centres every term has the same sign of w_c − F_c(x), so the ratio is *constant* there:
the ±∞ limits equal the values at the extreme centres. Hence moving w_c to one of its cell's
endpoints never lowers the ratio; doing this coordinate by coordinate reaches a point of the
lattice C_1 × ... × C_D. So the sup over ℤ^D is a max over that lattice — the centres are integers,
so they are outputs the discrete mechanism can produce. The same argument, with u = e^{w_c/β_c}
real, shows the continuous Laplace of the same scale has the *same* sup (attained at the same
lattice points, where the two densities are proportional with a secret-independent constant):
for integer queries the discrete and continuous mechanisms have identical Pufferfish ε.

The same reduction holds for the max-divergence of Thm III.6 (joint law of two release groups vs
the product of their marginals, :func:`dependence_divergence`): both are sums of such terms in
every coordinate.

Computation. Group the sequences of each secret by their lattice cell (a mass tensor over the
lattice), then multiply by the kernel matrix K_c[u, v] = τ_c^{|C_c[u] − C_c[v]|} along each axis
(separable, so O(S · |lattice| · Σ_c |C_c|) for S = T·k secrets). The normaliser Π_c κ_c is common
to all secrets and cancels. Sizes are bounded by :data:`MAX_SEQUENCES` and :data:`MAX_CELLS`;
this is a test and audit tool, not a production path.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..model.chain import MarkovChain

#: Largest k^T enumerated.
MAX_SEQUENCES = 200_000
#: Largest (number of secrets) × (lattice size) held in memory.
MAX_CELLS = 8_000_000


class EvaluatorError(ValueError):
    """The evaluation is not defined or too large (names the problem)."""


@dataclass(frozen=True)
class LaplaceRelease:
    """w = Σ_{j=lo}^{hi} φ[X_j] + Z on ℤ^d, Z i.i.d. discrete Laplace of scale ``beta`` (0-based, inclusive window)."""

    phi: NDArray[np.int64]
    lo: int
    hi: int
    beta: float
    label: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        phi = np.array(self.phi)
        if phi.ndim == 1:
            phi = phi[:, None]
        if phi.ndim != 2 or phi.shape[1] < 1 or phi.dtype.kind not in "iub":
            raise EvaluatorError("phi: must be an integer table of shape (k, d)")
        phi = phi.astype(np.int64)
        phi.setflags(write=False)
        object.__setattr__(self, "phi", phi)
        if not 0 <= self.lo <= self.hi:
            raise EvaluatorError(f"window [{self.lo}, {self.hi}] is not a 0-based interval")
        if not (math.isfinite(self.beta) and self.beta > 0):
            raise EvaluatorError("beta must be a finite number > 0")

    @classmethod
    def histogram(cls, k: int, lo: int, hi: int, beta: float) -> LaplaceRelease:
        """Count of every state in [lo, hi] (L1-Lipschitz constant 2)."""
        return cls(np.eye(k, dtype=np.int64), lo, hi, beta, "histogram")

    @classmethod
    def count(cls, k: int, state: int, lo: int, hi: int, beta: float) -> LaplaceRelease:
        """Count of one state in [lo, hi] (Lipschitz constant 1)."""
        if not 0 <= state < k:
            raise EvaluatorError(f"state must lie in 0..{k - 1}")
        return cls((np.arange(k) == state).astype(np.int64), lo, hi, beta, "count")

    @classmethod
    def sum_of(cls, values: ArrayLike, lo: int, hi: int, beta: float) -> LaplaceRelease:
        """Sum of integer per-state values (grid units) over [lo, hi] (Lipschitz max − min)."""
        return cls(np.asarray(values, dtype=np.int64), lo, hi, beta, "sum")

    @property
    def k(self) -> int:
        return int(self.phi.shape[0])

    @property
    def dim(self) -> int:
        return int(self.phi.shape[1])


@dataclass(frozen=True)
class PufferfishResult:
    """``pairs[i, a, b]`` = sup_w log P(w|X_i=a)/P(w|X_i=b); NaN where X_i = a or b has probability 0."""

    pairs: NDArray[np.float64]

    @property
    def per_position(self) -> NDArray[np.float64]:
        """ε_i = max over secret pairs at position i (0 where no pair is possible)."""
        p = np.where(np.isnan(self.pairs), -np.inf, self.pairs)
        return np.maximum(p.max(axis=(1, 2)), 0.0)

    def eps_at(self, i: int) -> float:
        return float(self.per_position[i])

    @property
    def epsilon(self) -> float:
        """The Pufferfish ε of the whole release sequence: max over all positions and pairs."""
        return float(self.per_position.max())

    def worst(self) -> tuple[int, int, int]:
        """The (i, a, b) attaining ``epsilon``."""
        p = np.where(np.isnan(self.pairs), -np.inf, self.pairs)
        i, a, b = np.unravel_index(int(np.argmax(p)), p.shape)
        return int(i), int(a), int(b)


def pufferfish_epsilon(chain: MarkovChain, T: int, releases: Sequence[LaplaceRelease]) -> PufferfishResult:
    """Exact Pufferfish ε of the independent ``releases`` for every secret pair (module docstring).

    ``chain`` is one adversary θ (its ``initial`` is the law of X_1, any distribution); the
    Pufferfish ε under a set Θ is the max of this over θ ∈ Θ.
    """
    dens, possible, _ = _densities(chain, T, releases)
    k = chain.k
    pairs = np.full((T, k, k), np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):  # impossible secrets: log 0, masked below
        logs = np.log(dens).reshape(T, k, -1)
        for a in range(k):
            for b in range(k):
                if a == b:
                    continue
                diff = (logs[:, a, :] - logs[:, b, :]).max(axis=1)
                ok = possible[:, a] & possible[:, b]
                pairs[ok, a, b] = diff[ok]
    return PufferfishResult(pairs)


def dependence_divergence(
    chain: MarkovChain, T: int, group_a: Sequence[LaplaceRelease], group_b: Sequence[LaplaceRelease]
) -> float:
    """E of Thm III.6: max over secrets s of both D∞(P(M_A, M_B | s) ‖ P(M_A | s)·P(M_B | s)) and
    D∞(P(M_A | s)·P(M_B | s) ‖ P(M_A, M_B | s)), exactly (the lattice argument of the module
    docstring applies to the joint and to the product alike)."""
    joint, possible, shape = _densities(chain, T, list(group_a) + list(group_b))
    pa, _, shape_a = _densities(chain, T, group_a)
    pb, _, shape_b = _densities(chain, T, group_b)
    # The joint lattice is the product of the two groups' lattices (same centres per coordinate).
    assert shape == shape_a + shape_b
    product = pa[:, :, None] * pb[:, None, :]
    logs = np.log(joint[possible.ravel()]) - np.log(product[possible.ravel()].reshape(-1, joint.shape[1]))
    return float(np.abs(logs).max())


# ----------------------------------------------------------------------------------- internals


def _sequences(chain: MarkovChain, T: int) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    k = chain.k
    if T < 1:
        raise EvaluatorError("T must be ≥ 1")
    if k**T > MAX_SEQUENCES:
        raise EvaluatorError(f"k^T = {k**T} sequences exceed the enumeration limit {MAX_SEQUENCES}")
    X = np.array(list(itertools.product(range(k), repeat=T)), dtype=np.int64).reshape(-1, T)
    prob = chain.initial[X[:, 0]].copy()
    for t in range(1, T):
        prob *= chain.matrix[X[:, t - 1], X[:, t]]
    return X, prob


def _densities(
    chain: MarkovChain, T: int, releases: Sequence[LaplaceRelease]
) -> tuple[NDArray[np.float64], NDArray[np.bool_], tuple[int, ...]]:
    """(dens, possible, lattice shape): dens[i·k + a, w] ∝ P(w | X_i = a) on the lattice of
    centres (common normaliser dropped), ``possible[i, a]`` = P(X_i = a) > 0."""
    if not releases:
        raise EvaluatorError("at least one release is needed")
    k = chain.k
    X, prob = _sequences(chain, T)
    values, taus = [], []
    for r in releases:
        if r.k != k:
            raise EvaluatorError(f"a release's φ has {r.k} rows, the chain has {k} states")
        if r.hi >= T:
            raise EvaluatorError(f"window [{r.lo}, {r.hi}] reaches beyond T = {T}")
        values.append(r.phi[X[:, r.lo : r.hi + 1]].sum(axis=1))  # (N, d_r)
        taus.extend([math.exp(-1.0 / r.beta)] * r.dim)
    F = np.concatenate(values, axis=1)  # (N, D)
    centres, index = [], []
    for c in range(F.shape[1]):
        u, inv = np.unique(F[:, c], return_inverse=True)
        centres.append(u)
        index.append(inv.ravel())
    shape = tuple(len(u) for u in centres)
    size = math.prod(shape)
    S = T * k
    if S * size > MAX_CELLS:
        raise EvaluatorError(f"lattice of {size} output points × {S} secrets exceeds {MAX_CELLS}")
    flat = np.ravel_multi_index(tuple(index), shape)
    mass = np.zeros((S, size))
    for i in range(T):
        np.add.at(mass, (i * k + X[:, i], flat), prob)
    marg = mass.sum(axis=1)
    possible = marg > 0
    mass[possible] /= marg[possible, None]
    dens = mass.reshape((S,) + shape)
    for c, (u, tau) in enumerate(zip(centres, taus)):
        kern = tau ** np.abs(u[:, None] - u[None, :]).astype(np.float64)
        dens = np.tensordot(dens, kern, axes=([1], [0]))  # contracted axis moves to the end
    dens = dens.reshape(S, size)
    live = dens[possible]
    if not np.all(np.isfinite(live)) or np.any(live <= 0):
        raise EvaluatorError("densities underflowed: a noise scale is too small for exact evaluation")
    return dens, possible.reshape(T, k), shape
