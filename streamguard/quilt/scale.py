"""MQM noise scales with witnesses (notes/002 §3.1, §3.3–3.5, §8).

For a 1-Lipschitz query F, MQM releases F(X) + σ·Z with Z ~ Lap(1) (an L-Lipschitz query uses
L·σ). Algorithm 1 computes

    σ_i^θ = min over quilts X_Q of X_i with e < ε of card(X_N) / (ε − e_θ(X_Q | X_i)),
    σ_max = max_θ max_i σ_i^θ,

over the minimal quilts of Lemma II.5 (two-sided, one-sided, ∅), with card(N) = a + b − 1 where an
absent left side counts as a = i and an absent right side as b = T − i + 1.

Public functions (all take ε > 0 and return a :class:`Scale`):

* :func:`sigma_max` — Algorithm 1 for a chain of known length T, fast (see below);
* :func:`sigma_inf` — σ_∞ = min_{a,b} (a+b−1)/(ε − e(a,b)) for translation-invariant modes: valid
  for every T, so for streams of unknown length (notes §3.4);
* :func:`sigma_supq` — σ̄_supq, the T-independent E-supq scale using e at i = a + 1 (notes §3.4);
* :func:`sigma_max_naive` — the literal O(T³) Algorithm 1, the reference for tests;
* :func:`epsilon_of_load` — the inverse map ρ ↦ ε(ρ) = min_{a,b} (a+b−1)ρ + e(a,b) (notes §8 item 5).

**Fast σ_max** (derived here from the borrowing argument of notes §3.4; the authors' middle-node
search is a heuristic and is not used). Let O_i be node i's best one-sided-or-empty score and S2*
the best two-sided score over all (a, b) that fit somewhere (a + b ≤ T − 1). Borrowing gives
σ_i ≤ S := min(S2*, T/ε, σ_∞) at every node, and every two-sided option of node i scores ≥ S2* ≥ S,
hence for a translation-invariant e

    σ_i = min(O_i, S)   and   σ_max = max_i min(O_i, S).

Options with card > ⌈σ_bound·ε⌉ (σ_bound = min(σ_∞, T/ε)) can never be active, so all tables
and loops stop at that radius R, and when T ≥ 2R + 1 a node with R free positions on both sides
has σ_i = σ_∞, so σ_max = σ_∞ without looking at any other node. E-supq is non-increasing in i,
so among the "interior" nodes (R free positions on both sides, identical option sets) the leftmost
one dominates: only the R + 1 first and R last nodes are searched. E-q has no such structure and
searches every node. Two-sided minima come from the exact branch-and-bound of
:mod:`streamguard.quilt._search`.

Witness positions are **1-based** as in the paper: node i ∈ [1, T], quilt {X_{i−a}, X_{i+b}},
``a``/``b`` = None for an absent side. For the T-independent scales the witness node is i = a + 1
(the first node where the quilt fits; for σ̄_supq the node at which its e was evaluated).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from streamguard.model.chain import ModelError

from ._search import bb_load, bb_score, diagonal_score, one_sided_all, one_sided_best
from .influence import ChainTables, e_table_reference, e_value, side_maxima
from .model import QuiltModel


#: Chains up to this length skip σ_∞ in :func:`sigma_max` (tables up to T are cheap; σ_∞ may need more).
DIRECT_MAX_T = 2048


class InfiniteScaleError(ModelError):
    """No finite T-independent noise scale exists (periodic/reducible chain, or eigengap 0)."""


@dataclass(frozen=True)
class Witness:
    """The active quilt that fixes a noise scale: chain ``theta`` (0-based index into Θ), node ``i``
    (1-based), quilt {X_{i−a}, X_{i+b}} with None for an absent side, card(N) and its max-influence
    ``e``; the scale is ``card / (ε − e)``."""

    theta: int
    i: int
    a: int | None
    b: int | None
    card: int
    e: float

    def as_dict(self) -> dict[str, object]:
        return {"theta": self.theta, "i": self.i, "a": self.a, "b": self.b, "card": self.card, "e": self.e}


@dataclass(frozen=True)
class Scale:
    """A noise scale σ for 1-Lipschitz queries (use L·σ for L-Lipschitz ones).

    ``t_independent`` is True when σ is valid for every stream length (σ_∞, σ̄_supq); ``T`` is the
    chain length it was computed for (None when T-independent). ``search_cells`` counts the
    max-influence evaluations of the search (for benchmarks)."""

    sigma: float
    witness: Witness
    t_independent: bool
    mode: str
    epsilon: float
    T: int | None
    search_cells: int = 0

    def as_dict(self) -> dict[str, object]:
        return {"sigma": self.sigma, "witness": self.witness.as_dict(), "t_independent": self.t_independent,
                "mode": self.mode, "epsilon": self.epsilon, "T": self.T}


# ------------------------------------------------------------------------------------- validation


def _check_epsilon(epsilon: float) -> float:
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float, np.floating)):
        raise ValueError("epsilon must be a number")
    eps = float(epsilon)
    if not (math.isfinite(eps) and eps > 0):
        raise ValueError(f"epsilon must be finite and > 0, got {epsilon!r}")
    return eps


def _check_length(T: int) -> int:
    if isinstance(T, bool) or not isinstance(T, (int, np.integer)) or T < 1:
        raise ValueError(f"the chain length T must be an integer ≥ 1, got {T!r}")
    return int(T)


def _card_bound(sigma: float, eps: float) -> int:
    """Largest card an active quilt can have when σ_max ≤ sigma (card = σ(ε − e) ≤ σε)."""
    return int(math.ceil(sigma * eps * (1.0 + 1e-12)))


def _witness(theta: int, i: int, T: int | None, a: int, b: int, e: float) -> Witness:
    """Build a witness from table indices (0 = absent side)."""
    card_a = a if a > 0 else i
    card_b = b if b > 0 else (T - i + 1 if T is not None else 0)
    return Witness(theta, i, a if a > 0 else None, b if b > 0 else None, card_a + card_b - 1, float(e))


# --------------------------------------------------------------------------------- σ_∞ per chain


@dataclass(frozen=True)
class _Best:
    sigma: float
    i: int
    a: int
    b: int
    e: float
    cells: int


def _sigma_inf_theta(tab: ChainTables, eps: float) -> _Best:
    """σ_∞ of one chain's translation-invariant table: min_{a,b≥1} (a+b−1)/(ε − e(a,b))."""
    if tab.unbounded_reason is not None:
        raise InfiniteScaleError(f"σ_∞ = ∞: {tab.unbounded_reason}; cap the stream length and use "
                                 "sigma_max(model, epsilon, T)")
    R = 32
    while True:  # grow until the diagonal offers a usable quilt (e → 0 for ergodic chains)
        bwd, fwd = tab.ti(R)
        best, d, e = diagonal_score(bwd, fwd, R, eps)
        if best < math.inf:
            break
        R *= 2
    cmax = _card_bound(best, eps)
    bwd, fwd = tab.ti(cmax)
    s, a, b, e2, cells = bb_score(bwd, fwd, cmax, cmax, cmax, eps, best)
    if a == 0:  # the diagonal incumbent is optimal
        return _Best(best, d + 1, d, d, e, cells + d)
    return _Best(s, a + 1, a, b, e2, cells + d)


def _bounded_inf(tab: ChainTables, eps: float) -> _Best | None:
    try:
        return _sigma_inf_theta(tab, eps)
    except InfiniteScaleError:
        return None


# ----------------------------------------------------------------------------- σ_max per chain


def _sigma_max_translation_invariant(tab: ChainTables, eps: float, T: int) -> _Best:
    # σ_∞ only pays for long chains (shortcut and radius); short ones search radius T directly
    inf_best = _bounded_inf(tab, eps) if T > DIRECT_MAX_T else None
    sigma_inf = inf_best.sigma if inf_best is not None else math.inf
    if inf_best is not None:
        Rs = _card_bound(sigma_inf, eps)
        if T >= 2 * Rs + 1:  # node T//2+1 has Rs free positions on both sides: σ_i = σ_∞
            return _Best(sigma_inf, T // 2 + 1, inf_best.a, inf_best.b, inf_best.e, inf_best.cells)
    cmax = min(T, _card_bound(min(sigma_inf, T / eps), eps))
    R = max(1, min(cmax, T - 1))
    bwd, fwd = tab.ti(R)
    if e_value(bwd, fwd, R, 0) == math.inf and e_value(bwd, fwd, 0, R) == math.inf:
        return _Best(T / eps, 1, 0, 0, 0.0, 2)  # no usable quilt at all: the empty one (card T)
    cells = 0
    S2 = math.inf
    if T >= 3:
        S2, _, _, _, c = bb_score(bwd, fwd, T - 2, T - 2, min(cmax, T - 2), eps, math.inf)
        cells += c
    S = min(S2, T / eps, sigma_inf)
    score = np.empty(T)
    a_o, b_o = np.empty(T, dtype=np.int64), np.empty(T, dtype=np.int64)
    e_o = np.empty(T)
    one_sided_all(side_maxima(bwd), side_maxima(fwd), T, eps, cmax, score, a_o, b_o, e_o)
    vals = np.minimum(score, S)
    i_star = int(np.argmax(vals))
    node = i_star + 1
    if score[i_star] <= S:
        return _Best(float(score[i_star]), node, int(a_o[i_star]), int(b_o[i_star]), float(e_o[i_star]), cells + T)
    # σ_i = S comes from a two-sided quilt at this node: find it
    s, a, b, e, c = bb_score(bwd, fwd, min(node - 1, R), min(T - node, R), cmax, eps, math.inf)
    return _Best(s, node, a, b, e, cells + c + T)


def _node_best(tab: ChainTables, eps: float, T: int, i: int, R: int, cmax: int) -> _Best:
    """Exact σ_i of node i with tables of that node (E-q / E-supq)."""
    A, B = min(i - 1, R), min(T - i, R)
    bwd, fwd = tab.node(i, A, B)
    s1, a1, b1, e1 = one_sided_best(side_maxima(bwd), side_maxima(fwd), i, T, eps, cmax)
    s2, a2, b2, e2, cells = bb_score(bwd, fwd, A, B, cmax, eps, s1)
    if a2 > 0:
        return _Best(s2, i, a2, b2, e2, cells)
    return _Best(s1, i, a1, b1, e1, cells)


def _sigma_max_by_nodes(tab: ChainTables, eps: float, T: int) -> _Best:
    bound = T / eps
    if tab.mode == "supq" or (tab.mode == "q" and tab.unbounded_reason is None):
        # E-q ≤ E-supq ≤ E-supq at i = a+1, so σ̄_supq bounds both (notes §3.4)
        sup = _bounded_inf_supq(tab, eps)
        if sup is not None:
            bound = min(bound, sup)
    cmax = min(T, _card_bound(bound, eps))
    R = max(1, min(cmax, T - 1))
    if tab.mode == "supq":  # interior nodes R+1..T−R: σ_i non-increasing, the first dominates
        nodes = list(range(1, min(T, R + 1) + 1)) + list(range(max(R + 2, T - R + 1), T + 1))
    else:
        nodes = list(range(1, T + 1))
    best: _Best | None = None
    cells = 0
    for i in nodes:
        nb = _node_best(tab, eps, T, i, R, cmax)
        cells += nb.cells
        if best is None or nb.sigma > best.sigma:
            best = nb
    assert best is not None
    return _Best(best.sigma, best.i, best.a, best.b, best.e, cells)


def _bounded_inf_supq(tab: ChainTables, eps: float) -> float | None:
    """σ̄_supq of the chain of ``tab`` (also a bound for E-q), None if unbounded."""
    if tab.unbounded_reason is not None:
        return None
    sup_tab = tab if tab.mode == "supq" else ChainTables(tab.chain, "supq")
    try:
        return _sigma_inf_theta(sup_tab, eps).sigma
    except ModelError:  # too slowly mixing to bound within the table limit: prune without it
        return None


# -------------------------------------------------------------------------------- public API


def _over_thetas(model: QuiltModel, per_theta) -> tuple[int, _Best, int]:
    best_theta, best, cells = -1, None, 0
    for theta in range(len(model.chains)):
        b = per_theta(model.tables(theta))
        cells += b.cells
        if best is None or b.sigma > best.sigma:
            best_theta, best = theta, b
    assert best is not None
    return best_theta, best, cells


def sigma_max(model: QuiltModel, epsilon: float, T: int) -> Scale:
    """Algorithm 1's σ_max for a chain X_1..X_T, worst case over Θ, with its witness (fast search)."""
    eps, T = _check_epsilon(epsilon), _check_length(T)
    if model.translation_invariant:
        theta, b, cells = _over_thetas(model, lambda t: _sigma_max_translation_invariant(t, eps, T))
    else:
        theta, b, cells = _over_thetas(model, lambda t: _sigma_max_by_nodes(t, eps, T))
    return Scale(b.sigma, _witness(theta, b.i, T, b.a, b.b, b.e), False, model.mode, eps, T, cells)


def sigma_inf(model: QuiltModel, epsilon: float) -> Scale:
    """σ_∞(ε), valid for every stream length (translation-invariant modes: stat, approx, approx-rev).

    Raises :class:`InfiniteScaleError` (with the reason) when a chain's influence never decays.
    """
    eps = _check_epsilon(epsilon)
    if not model.translation_invariant:
        raise ValueError(f"sigma_inf needs a translation-invariant mode (stat, approx, approx-rev), not "
                         f"{model.mode!r}; use sigma_supq for 'supq' or sigma_max with a length for 'q'")
    theta, b, cells = _over_thetas(model, lambda t: _sigma_inf_theta(t, eps))
    return Scale(b.sigma, _witness(theta, b.i, None, b.a, b.b, b.e), True, model.mode, eps, None, cells)


def sigma_supq(model: QuiltModel, epsilon: float) -> Scale:
    """σ̄_supq(ε) = min_{a,b} (a+b−1)/(ε − e_{i=a+1}(a,b)): E-supq for any length and any start."""
    eps = _check_epsilon(epsilon)
    if model.mode != "supq":
        raise ValueError(f"sigma_supq needs a model with mode 'supq', not {model.mode!r}")
    theta, b, cells = _over_thetas(model, lambda t: _sigma_inf_theta(t, eps))
    return Scale(b.sigma, _witness(theta, b.i, None, b.a, b.b, b.e), True, model.mode, eps, None, cells)


def sigma_max_naive(model: QuiltModel, epsilon: float, T: int) -> Scale:
    """Reference: the literal Algorithm 1, every node and every quilt (O(|Θ|·T³·pairs), numpy)."""
    eps, T = _check_epsilon(epsilon), _check_length(T)
    best: tuple[float, Witness] | None = None
    for theta in range(len(model.chains)):
        tab = model.tables(theta)
        for i in range(1, T + 1):
            bwd, fwd = tab.node(i, i - 1, T - i)
            E = e_table_reference(bwd, fwd)
            ca = np.arange(i)
            ca[0] = i
            cb = np.arange(T - i + 1)
            cb[0] = T - i + 1
            card = ca[:, None] + cb[None, :] - 1
            with np.errstate(divide="ignore", invalid="ignore"):
                score = np.where(E < eps, card / (eps - E), np.inf)
            a, b = np.unravel_index(int(np.argmin(score)), score.shape)
            s = float(score[a, b])
            if best is None or s > best[0]:
                best = (s, _witness(theta, i, T, int(a), int(b), float(E[a, b])))
    assert best is not None
    return Scale(best[0], best[1], False, model.mode, eps, T)


def epsilon_of_load(model: QuiltModel, rho: float) -> float:
    """ε(ρ) = max_θ min_{a,b≥1} [(a+b−1)·ρ + e_θ(a,b)]: the guarantee of an interior position under a
    constant load ρ per position (notes/002 §8 item 5, §4.7 duality: ε(1/σ_∞(ε)) = ε).

    Translation-invariant modes, and ``supq`` with its conservative i = a + 1 table.
    """
    if isinstance(rho, bool) or not isinstance(rho, (int, float, np.floating)) or not (math.isfinite(rho) and rho > 0):
        raise ValueError(f"the load rho must be finite and > 0, got {rho!r}")
    if model.mode == "q":
        raise ValueError("epsilon_of_load needs a translation-invariant mode or 'supq', not 'q'")
    rho = float(rho)
    worst = 0.0
    for theta in range(len(model.chains)):
        worst = max(worst, _epsilon_of_load_theta(model.tables(theta), rho))
    return worst


def _epsilon_of_load_theta(tab: ChainTables, rho: float) -> float:
    R = 32
    while True:  # incumbent from the diagonal; grow until the load dominates further options
        bwd, fwd = tab.ti(R)
        inc = min((2 * d - 1) * rho + e_value(bwd, fwd, d, d) for d in (1, R // 2, R))
        if inc < math.inf and 2 * R * rho >= inc:
            break
        if tab.unbounded_reason is not None and R >= 1 << 12:
            if inc < math.inf:
                break
            return math.inf
        R *= 2
    cmax = int(math.ceil(inc / rho)) + 1
    bwd, fwd = tab.ti(cmax)
    S = rho * np.arange(2 * cmax + 2, dtype=np.float64)
    best, _, _, _ = bb_load(bwd, fwd, S, cmax, cmax, cmax, inc)
    return float(best)
