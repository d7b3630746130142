"""AORR: the MI-optimal (ε_l, ε_u)-ALIP mechanism, by vertex enumeration plus one LP (notes/003 §2.3, §3.4).

Backward form. Each output y has a posterior column v = P_{X|Y}(·|y) ∈ Δ(𝒳); ALIP is linear in v:

    Π = {v ≥ 0, Σ_x v_x = 1,  e^{−ε_l}·P_S(s) ≤ Σ_x P(s|x)·v_x ≤ e^{ε_u}·P_S(s)  ∀s}      (eq. 25)

Maximising I(X;Y) = H(X) − Σ_y P_Y(y)·H(v_y) subject to Σ_y P_Y(y)·v_y = P_X minimises a mixture of the
concave H over points of Π, which is attained at vertices of Π, so with 𝒱 = vertices(Π) (eq. 26):

    min_{β ≥ 0} Σ_k H(v_k)·β_k   subject to   Σ_k β_k·v_k = P_X,

and the mechanism is P_Y(y_k) = β_k, P_{X|Y}(·|y_k) = v_k, forward P_{Y|X}(y_k|x) = β_k·v_k(x)/P_X(x).

**Enumeration is polynomial in |𝒳| for fixed |𝒮|** (notes/003 §3.4 support lemma, E6 — the paper's
"exp(|𝒳|−1)" overstates it): every vertex has at most |𝒮| non-zero entries, because on its support T the
active rows are 1_T and some P(s|·)_T, and Σ_s P(s|·) = 1 limits them to |𝒮| independent rows. So each
vertex solves, for some support T (|T| = k ≤ |𝒮|), some k−1 rows A ⊆ 𝒮 and a side (lower/upper) per row,

    [1_T ; P(A|T)] v_T = [1 ; bound(A, sides)],

which is Σ_k C(|𝒳|,k)·C(|𝒮|,k−1)·2^{k−1} tiny systems (≈ 7·10⁵ for 17×5). They are solved in batches: one
batched inverse per (k, A) over all supports T (chunks of :data:`CHUNK`), times one right-hand side per choice
of sides; solutions with a negative entry are dropped first, the rest must meet all 2|𝒮| bounds; survivors
are deduplicated deterministically (rounded to 1e−10, sorted).

Numerics (notes/003 §7): the polytope uses budgets tightened by :data:`.lift.DESIGN_MARGIN`; the LP (HiGHS
dual simplex) also gets the merged point P_X/P(𝒳) as a column (it lies in Π, so the LP is always feasible;
concavity means it never beats a vertex decomposition), its basic solution is polished by a least-squares
solve on the basis, columns a degenerate basis holds at weight 0 are dropped, forward rows are renormalised,
and the returned channel's ALIP claim (nominal budgets) is verified exactly (:func:`.verify.require_designed`).
The polytope's rows are written in lifts, P(s|x)/P_S(s) against e^{−ε_l}, e^{ε_u}, rather than P(s|x) against
e^{±ε}·P_S(s): the same polytope, but a tiny P_S(s) no longer shrinks its constraint below the vertex
tolerance. The optimal *value* is unique, the optimal matrix need not be.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations, product

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import linprog
from scipy.special import entr

from .lift import split_budget, symbol_lifts, tightened
from .model import Claim, DesignError, Joint, PerturbationChannel, Symbol
from .verify import require_designed

#: Feasibility slack when accepting a vertex candidate (against budgets already tightened by DESIGN_MARGIN).
VERTEX_TOL = 1e-10
#: |det| below which a k×k candidate system is treated as singular (a row of ones and rows of lifts).
DET_TOL = 1e-13
#: Supports solved per batch (bounds memory at ~|𝒮|²·CHUNK floats).
CHUNK = 50_000
#: Relative precision to which the remaining basis columns must still give every P_X(x) for a column of
#: (numerically) zero weight to be dropped (:func:`_drop_degenerate`): it moves lifts by ~1e−12 relative,
#: far inside the DESIGN_MARGIN·ε slack of every budget ε ≥ 1e−5.
DEGENERATE_RTOL = 1e-12


def polytope_vertices(b: NDArray[np.float64], lo: NDArray[np.float64], hi: NDArray[np.float64]) -> NDArray[np.float64]:
    """Vertices of Π = {v ≥ 0, Σ v = 1, lo ≤ b·v ≤ hi}, one per row (M×n), deduplicated and sorted.

    ``b`` is |𝒮|×n with columns P(·|x) (each summing to 1), or those rows scaled per s (the lifts
    P(s|x)/P_S(s), with bounds scaled alike: some positive combination of the rows is still 1, which is
    all the support lemma needs), ``lo`` < ``hi`` per s. Uses the support lemma (module docstring);
    returns an empty (0×n) array when Π is empty."""
    n_s, n = b.shape
    sides_bounds = np.stack([lo, hi])  # [side, s]
    found: list[NDArray[np.float64]] = []
    for k in range(1, min(n, n_s) + 1):
        all_supports = np.array(list(combinations(range(n), k)), dtype=np.int64)
        choices = list(product((0, 1), repeat=k - 1))            # lower (0) or upper (1) bound per row
        sides = np.array(choices, dtype=np.int64).reshape(len(choices), k - 1)
        for start in range(0, len(all_supports), CHUNK):
            supports = all_supports[start:start + CHUNK]
            b_t = b[:, supports]                                   # (S, C, k)
            for rows in combinations(range(n_s), k - 1):
                mats = np.ones((len(supports), k, k))
                mats[:, 1:, :] = b_t[list(rows)].transpose(1, 0, 2)
                good = np.flatnonzero(np.abs(np.linalg.det(mats)) > DET_TOL)
                if not good.size:
                    continue
                rhs = np.ones((k, len(sides)))                     # one column per choice of sides
                rhs[1:] = sides_bounds[sides.T, np.array(rows, dtype=np.int64)[:, None]]
                v = np.linalg.inv(mats[good]) @ rhs                 # (G, k, sides)
                g, side = np.nonzero(v.min(axis=1) >= -VERTEX_TOL)  # reject negative solutions first
                if not g.size:
                    continue
                v = v[g, :, side]                                   # (G', k)
                bv = np.einsum("sgk,gk->gs", b_t[:, good[g]], v)
                keep = np.all(bv >= lo - VERTEX_TOL, axis=1) & np.all(bv <= hi + VERTEX_TOL, axis=1)
                if keep.any():
                    full = np.zeros((int(keep.sum()), n))
                    np.put_along_axis(full, supports[good[g[keep]]], v[keep], axis=1)
                    found.append(full)
    if not found:
        return np.empty((0, n))
    verts = np.concatenate(found)
    verts[verts < 1e-12] = 0.0                                      # snap round-off to exact zeros
    verts /= verts.sum(axis=1, keepdims=True)
    _, first = np.unique(np.round(verts * 1e10).astype(np.int64), axis=0, return_index=True)
    return verts[first]


@dataclass(frozen=True)
class Randomisation:
    """A backward-form mechanism on a set of symbols: output k has P_Y = ``weights[k]`` and posterior
    ``posteriors[k]`` over ``members`` (Σ_k weights[k]·posteriors[k] = P_X restricted to ``members``)."""

    members: tuple[int, ...]
    weights: NDArray[np.float64]
    posteriors: NDArray[np.float64]
    vertex_count: int

    @property
    def conditional_entropy(self) -> float:
        """Σ_k P_Y(y_k)·H(P_{X|Y}(·|y_k)) in nats: this block's share of H(X|Y)."""
        return float(self.weights @ entr(self.posteriors).sum(axis=1))


def optimal_randomisation(joint: Joint, members: Sequence[int], eps_l: float, eps_u: float) -> Randomisation:
    """The MI-optimal ALIP randomisation of ``members`` (all of 𝒳: AORR; one subset: SRR's per-subset
    problem, eqs. 19–28) at budgets (ε_l, ε_u), already tightened by the caller."""
    idx = np.asarray(members, dtype=np.int64)
    b = symbol_lifts(joint)[:, idx]  # row s of (25) divided by P_S(s): no underflow for a tiny P_S
    ones = np.ones(joint.n_s)
    bounds = np.exp(-eps_l) * ones, np.exp(eps_u) * ones
    target = joint.p_x[idx]
    vertices = polytope_vertices(b, *bounds)
    merged = target / target.sum()
    cols = np.vstack([vertices, merged[None, :]])
    cost = entr(cols).sum(axis=1)
    res = linprog(cost, A_eq=cols.T, b_eq=target, bounds=(0, None), method="highs-ds",
                  options={"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10})
    if res.status != 0:
        raise DesignError(f"AORR linear program failed on symbols {tuple(int(x) for x in idx)}: {res.message}")
    beta = _polish(cols, target, np.asarray(res.x))
    used = np.flatnonzero(beta > 0)
    return Randomisation(tuple(int(x) for x in idx), beta[used], cols[used], len(vertices))


def _polish(cols: NDArray[np.float64], target: NDArray[np.float64], beta: NDArray[np.float64]) -> NDArray[np.float64]:
    """Re-solve Σ_k β_k v_k = target on the LP's basis by least squares (removes the LP's ~1e−10 residual);
    keeps the LP's β if the polished one is not a non-negative exact solution. Then removes the basis's
    degenerate columns (:func:`_drop_degenerate`)."""
    basis = np.flatnonzero(beta > 0)
    polished, *_ = np.linalg.lstsq(cols[basis].T, target, rcond=None)
    exact = np.abs(cols[basis].T @ polished - target).max() <= 1e-14 * target.max()
    out = np.zeros_like(beta)
    out[basis] = polished if exact and polished.min() > 0 else np.clip(beta[basis], 0.0, None)
    return _drop_degenerate(cols, target, out)


def _drop_degenerate(cols: NDArray[np.float64], target: NDArray[np.float64],
                     beta: NDArray[np.float64]) -> NDArray[np.float64]:
    """β without the columns a degenerate LP basis holds at weight 0 up to round-off.

    Such a column comes back with β ≈ 1e−15: an output with P_Y ≈ 1e−15 whose forward entries are
    ≈ 1e−15, which the sampler's quantisation (multiples of 2⁻⁶³ ≈ 1.1e−19) moves by ≈ 1e−4 relative —
    far past :data:`.lift.DESIGN_MARGIN` — so the exact verification of the quantised channel refuses it.
    Smallest weight first, a column is dropped while the remaining ones, re-solved by least squares,
    stay positive and give every target(x) to relative :data:`DEGENERATE_RTOL`; the basis columns are
    independent, so their representation of the target is unique and only weights that are 0 up to
    round-off can go. Forward rows are then renormalised by at most that relative amount."""
    for _ in range(int(np.count_nonzero(beta)) - 1):
        basis = np.flatnonzero(beta > 0)
        rest = np.delete(basis, np.argmin(beta[basis]))
        weights, *_ = np.linalg.lstsq(cols[rest].T, target, rcond=None)
        if weights.min() <= 0 or np.any(np.abs(cols[rest].T @ weights - target) > DEGENERATE_RTOL * target):
            break
        beta = np.zeros_like(beta)
        beta[rest] = weights
    return beta


def forward_block(joint: Joint, rand: Randomisation, kind: str) -> NDArray[np.float64]:
    """P_{Y|X}(y_k|x) = β_k·v_k(x)/P_X(x) for x in the block's members (rows renormalised). Raises
    :class:`DesignError` naming ``kind`` when a row underflows to 0 (P_X(x) near the float limit)."""
    block = rand.posteriors.T * rand.weights[None, :] / joint.p_x[list(rand.members)][:, None]
    sums = block.sum(axis=1, keepdims=True)
    bad = np.flatnonzero(~(np.isfinite(sums[:, 0]) & (sums[:, 0] > 0)))
    if bad.size:
        x = rand.members[int(bad[0])]
        raise DesignError(f"{kind}: row x={x} of the designed channel, β·v(x)/P_X(x), is not a distribution in "
                          f"floating point (P_X(x) = {joint.p_x[x]:.3g}); refusing")
    return block / sums


def output_symbols(rand: Randomisation) -> list[Symbol]:
    """Names of a randomisation's outputs: x for a posterior concentrated on x, else the tuple of the
    posterior's support (the set of x the output is consistent with). Two outputs can share a support
    tuple (different posteriors on the same symbols); the output *index* identifies an output."""
    names: list[Symbol] = []
    for v in rand.posteriors:
        support = tuple(rand.members[i] for i in np.flatnonzero(v > 0))
        names.append(support[0] if len(support) == 1 else support)
    return names


def ordered(rand: Randomisation) -> Randomisation:
    """The same randomisation with outputs in a deterministic order: by support, then posterior."""
    keys = [(tuple(np.flatnonzero(v > 0)), tuple(np.round(-v, 12))) for v in rand.posteriors]
    order = sorted(range(len(keys)), key=keys.__getitem__)
    return Randomisation(rand.members, rand.weights[order], rand.posteriors[order], rand.vertex_count)


def aorr_channel(joint: Joint, epsilon: float, *, lam: float = 0.5) -> PerturbationChannel:
    """AORR (eq. 12): the MI-optimal (λε, (1−λ)ε)-ALIP channel (kind ``"aorr"``, rows by x). Outputs are
    named by :func:`output_symbols`; the ALIP claim is verified exactly before return."""
    eps_l, eps_u = split_budget(epsilon, lam)
    rand = ordered(optimal_randomisation(joint, range(joint.n_x), tightened(eps_l), tightened(eps_u)))
    channel = PerturbationChannel("aorr", forward_block(joint, rand, "aorr"), "x", joint.n_s, joint.n_x,
                                  tuple(output_symbols(rand)), (Claim("alip", {"eps_l": eps_l, "eps_u": eps_u}),),
                                  {"epsilon": float(epsilon), "lam": float(lam)})
    return require_designed(channel, joint)
