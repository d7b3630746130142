"""Lift tables, the lift-based privacy notions of paper 003 and exact-definition checks (notes/003 §1–§2).

Setting: a joint P_SX (:class:`~streamguard.perturbation.model.Joint`) and a channel releasing Y, so
P_SY = P_S · P_{Y|S} (for an x-input channel P_{Y|S} = P_{X|S}·W). For every output y with
P_Y(y) > 0 (outputs that never occur are ignored by every notion below):

* **lift** l(s, y) = P_SY(s, y) / (P_S(s)·P_Y(y)) = P(s|y)/P(s)                    (eq. 1)
* **min-lift** Ψ(y) = min_s l(s, y), **max-lift** Λ(y) = max_s l(s, y), Γ(y) = Λ(y)/Ψ(y)   (eq. 2)
  (Ψ ≤ 1 ≤ Λ always, because Σ_s P_S(s)·l(s, y) = 1.)

Symbol lifts l(s, x) are the lifts of the identity release Y = X; the lift of a subset 𝒳_i released
as one merged symbol is l(s, 𝒳_i) = P(𝒳_i|s)/P(𝒳_i) (notes/003 §1).

Claim notions defined here (``Claim.notion`` and its ``params``; "for every y" means every output
with P_Y(y) > 0; all logs natural). These definitions are normative for ``perturbation.verify``:

* ``"alip"`` {eps_l, eps_u}: e^{-eps_l} ≤ Ψ(y) and Λ(y) ≤ e^{eps_u}                 (Def. 3, eq. 5)
* ``"lip"`` {epsilon}: e^{-ε} ≤ Ψ(y) and Λ(y) ≤ e^{ε}                                (Def. 1, eq. 3)
* ``"ldp_s"`` {epsilon}: Γ(y) = max_{s,s'} P(y|s)/P(y|s') ≤ e^{ε}    (Def. 2, eq. 4: LDP w.r.t. S)
* ``"l1_lift"`` {threshold}: Λ_ℓ1(y) = Σ_s P_S(s)·|l(s,y) − 1| ≤ threshold         (eq. 31)
* ``"l1_lift_inverse"`` {threshold}: Ψ_ℓ1(y) = Σ_s P_S(s)·|1/l(s,y) − 1| ≤ threshold (eq. 34)
* ``"chi2_lift"`` {threshold}: Λ_χ²(y) = Σ_s P_S(s)·(l(s,y) − 1)² ≤ threshold       (eq. 32)
* ``"chi2_lift_inverse"`` {threshold}: Ψ_χ²(y) = Σ_s P_S(s)·(1/l(s,y) − 1)² ≤ threshold (eq. 35)
* ``"alpha_lift"`` {alpha, threshold}: Λ_α(y) = (Σ_s P_S(s)·l(s,y)^α)^{1/α} ≤ threshold (eq. 33)
* ``"alpha_lift_inverse"`` {alpha, threshold}: Ψ_α(y) = (Σ_s P_S(s)·l(s,y)^{−α})^{1/α} ≤ threshold (eq. 36)

A lift of 0 makes every inverse measure (and the min-lift bound of alip/lip, and Γ) infinite, i.e.
violated for every finite budget. The watchdog designers state thresholds as the float values of
e^{ε_u} − 1, (e^{ε_u} − 1)², e^{ε_u} (lift-based) and e^{ε_l} − 1, … (lift-inverse), §2.6 / §6.2. These
lift-based sets do **not** imply ALIP (notes/003 E1: Props. 3.1–3.2 and 5.1–5.2 are false in general).

Everything here is vectorised over columns: a lift table has shape |S|×m (one column per output,
symbol or subset). The α-measures are evaluated in the log domain (logsumexp), so α = 100 cannot
overflow (notes/003 §7, numeric pitfalls).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import logsumexp

from .model import Claim, DesignError, Joint, PerturbationChannel, require_level

#: Relative margin by which designers tighten every budget before designing (ε' = ε·(1 − margin)),
#: so that round-off in the realised matrix cannot push a claim over its nominal budget (notes/003 §7).
DESIGN_MARGIN = 1e-6

Lifts = NDArray[np.float64]


# ---------------------------------------------------------------------------------------- lift tables


def symbol_lifts(joint: Joint) -> Lifts:
    """l(s, x) = P(x|s)/P(x) for the identity release Y = X: shape |S|×|X|.

    Every lift here is a conditional over a marginal, never P_SX/(P_S·P_X): that product of two small
    probabilities can underflow (P_S = 1e−323 reads every lift as exactly 1)."""
    return joint.x_given_s / joint.p_x[None, :]


def group_lifts(joint: Joint, groups: Sequence[Sequence[int]]) -> Lifts:
    """l(s, 𝒳_i) = P(𝒳_i|s)/P(𝒳_i) of each subset merged into one symbol: shape |S|×len(groups)."""
    p, p_s, p_x = joint.p, joint.p_s, joint.p_x
    out = np.empty((joint.n_s, len(groups)))
    for j, members in enumerate(groups):
        idx = np.asarray(members, dtype=np.int64)
        if idx.size == 0:
            raise ValueError(f"group {j} is empty")
        out[:, j] = p[:, idx].sum(axis=1) / p_s / p_x[idx].sum()
    return out


def channel_lifts(joint: Joint, channel: PerturbationChannel | ArrayLike) -> tuple[Lifts, NDArray[np.int64]]:
    """Lifts l(s, y) of a channel (a PerturbationChannel of either input kind, or a row-stochastic
    matrix with rows by x). Returns the |S|×m table of the m outputs with P_Y(y) > 0 and their indices."""
    if isinstance(channel, PerturbationChannel):
        if channel.n_s != joint.n_s or channel.n_x != joint.n_x:
            raise ValueError(f"channel is for |S|={channel.n_s}, |X|={channel.n_x}; joint has "
                             f"|S|={joint.n_s}, |X|={joint.n_x}")
        y_given_s = channel.effective(joint)
    else:
        matrix = np.asarray(channel, dtype=np.float64)
        if matrix.ndim != 2 or matrix.shape[0] != joint.n_x:
            raise ValueError(f"channel matrix must have {joint.n_x} rows (one per x), got shape {matrix.shape}")
        y_given_s = joint.x_given_s @ matrix
    p_y = joint.p_s @ y_given_s
    used = np.flatnonzero(p_y > 0)
    return y_given_s[:, used] / p_y[used][None, :], used


def min_lift(lifts: Lifts) -> NDArray[np.float64]:
    """Ψ per column."""
    return lifts.min(axis=0)


def max_lift(lifts: Lifts) -> NDArray[np.float64]:
    """Λ per column."""
    return lifts.max(axis=0)


def lift_ratio(lifts: Lifts) -> NDArray[np.float64]:
    """Γ = Λ/Ψ per column (∞ where Ψ = 0): the LDP-w.r.t.-S ratio max_{s,s'} P(y|s)/P(y|s')."""
    with np.errstate(divide="ignore"):
        return max_lift(lifts) / min_lift(lifts)


def alip_leakage(lifts: Lifts) -> tuple[float, float]:
    """Realised (ε_l*, ε_u*) = (−log min_y Ψ(y), log max_y Λ(y)) of a lift table (§3.7)."""
    with np.errstate(divide="ignore"):
        return float(-np.log(min_lift(lifts).min())), float(np.log(max_lift(lifts).max()))


# ------------------------------------------------------------------- lift-based and lift-inverse measures


def l1_lift(lifts: Lifts, p_s: NDArray[np.float64]) -> NDArray[np.float64]:
    """Λ_ℓ1(y) = Σ_s P_S(s)·|l(s,y) − 1| (eq. 31); T(S;Y) = ½·E_Y[Λ_ℓ1(Y)]."""
    return p_s @ np.abs(lifts - 1.0)


def chi2_lift(lifts: Lifts, p_s: NDArray[np.float64]) -> NDArray[np.float64]:
    """Λ_χ²(y) = Σ_s P_S(s)·(l(s,y) − 1)² (eq. 32); χ²(S;Y) = E_Y[Λ_χ²(Y)]."""
    return p_s @ (lifts - 1.0) ** 2


def alpha_lift(lifts: Lifts, p_s: NDArray[np.float64], alpha: float) -> NDArray[np.float64]:
    """Λ_α(y) = (Σ_s P_S(s)·l(s,y)^α)^{1/α} (eq. 33), as exp((1/α)·logsumexp(log P_S + α·log l))."""
    return _log_power_mean(lifts, p_s, alpha)


def l1_lift_inverse(lifts: Lifts, p_s: NDArray[np.float64]) -> NDArray[np.float64]:
    """Ψ_ℓ1(y) = Σ_s P_S(s)·|1/l(s,y) − 1| (eq. 34); ∞ if some l(s,y) = 0."""
    with np.errstate(divide="ignore"):
        return p_s @ np.abs(1.0 / lifts - 1.0)


def chi2_lift_inverse(lifts: Lifts, p_s: NDArray[np.float64]) -> NDArray[np.float64]:
    """Ψ_χ²(y) = Σ_s P_S(s)·(1/l(s,y) − 1)² (eq. 35); ∞ if some l(s,y) = 0."""
    with np.errstate(divide="ignore"):
        return p_s @ (1.0 / lifts - 1.0) ** 2


def alpha_lift_inverse(lifts: Lifts, p_s: NDArray[np.float64], alpha: float) -> NDArray[np.float64]:
    """Ψ_α(y) = (Σ_s P_S(s)·l(s,y)^{−α})^{1/α} (eq. 36), in the log domain; ∞ if some l(s,y) = 0."""
    return _log_power_mean(lifts, p_s, -alpha, outer=alpha)


def _log_power_mean(lifts: Lifts, p_s: NDArray[np.float64], power: float, outer: float | None = None) -> NDArray[np.float64]:
    """(Σ_s P_S(s)·l^power)^{1/outer} with outer = power unless given, via logsumexp."""
    outer = power if outer is None else outer
    with np.errstate(divide="ignore"):
        log_terms = np.log(p_s)[:, None] + power * np.log(lifts)  # l = 0: −∞ (power > 0) or +∞ (power < 0)
    with np.errstate(over="ignore"):
        return np.exp(logsumexp(log_terms, axis=0) / outer)


# ------------------------------------------------------------------------------------------- checks


@dataclass(frozen=True)
class Violation:
    """One broken constraint: ``constraint`` of ``notion`` fails at column ``output`` (an index into
    the checked table: an output of a channel, a symbol or a subset), with ``realised`` > ``allowed``
    in the units of the constraint (log-lift for alip/lip/ldp_s, the measure itself otherwise)."""

    notion: str
    constraint: str
    output: int
    realised: float
    allowed: float

    @property
    def excess(self) -> float:
        return self.realised - self.allowed

    def __str__(self) -> str:
        return (f"{self.notion}: {self.constraint} at output {self.output} is {self.realised:.9g}, "
                f"allowed {self.allowed:.9g}")


_MEASURES = {
    "l1_lift": ("l1-lift", l1_lift),
    "l1_lift_inverse": ("l1-lift-inverse", l1_lift_inverse),
    "chi2_lift": ("chi2-lift", chi2_lift),
    "chi2_lift_inverse": ("chi2-lift-inverse", chi2_lift_inverse),
}
_ALPHA_MEASURES = {
    "alpha_lift": ("alpha-lift", alpha_lift),
    "alpha_lift_inverse": ("alpha-lift-inverse", alpha_lift_inverse),
}
#: Every claim notion this module defines and checks.
NOTIONS = ("alip", "lip", "ldp_s", *_MEASURES, *_ALPHA_MEASURES)


def constraint_values(lifts: Lifts, p_s: NDArray[np.float64], claim: Claim) -> list[tuple[str, NDArray[np.float64], float]]:
    """The constraints of ``claim`` on every column: (constraint name, realised value per column,
    allowed value). A column satisfies the claim iff realised ≤ allowed for each entry."""
    prm = claim.params
    try:
        with np.errstate(divide="ignore"):
            if claim.notion in ("alip", "lip"):
                lo, hi = (prm["eps_l"], prm["eps_u"]) if claim.notion == "alip" else (prm["epsilon"],) * 2
                return [("min-lift", -np.log(min_lift(lifts)), float(lo)),
                        ("max-lift", np.log(max_lift(lifts)), float(hi))]
            if claim.notion == "ldp_s":
                return [("lift ratio", np.log(lift_ratio(lifts)), float(prm["epsilon"]))]
            if claim.notion in _MEASURES:
                name, fn = _MEASURES[claim.notion]
                return [(name, fn(lifts, p_s), float(prm["threshold"]))]
            if claim.notion in _ALPHA_MEASURES:
                name, fn = _ALPHA_MEASURES[claim.notion]
                return [(f"{name} (alpha={prm['alpha']:g})", fn(lifts, p_s, float(prm["alpha"])),
                         float(prm["threshold"]))]
    except KeyError as exc:
        raise ValueError(f"claim {claim.notion!r} lacks parameter {exc.args[0]!r}") from None
    raise ValueError(f"unknown lift claim notion {claim.notion!r}; known: {', '.join(NOTIONS)}")


def satisfied(lifts: Lifts, p_s: NDArray[np.float64], claims: Sequence[Claim]) -> NDArray[np.bool_]:
    """Per column: does it meet every claim (exact float comparison, no tolerance)?"""
    ok = np.ones(lifts.shape[1], dtype=bool)
    for claim in claims:
        for _, realised, allowed in constraint_values(lifts, p_s, claim):
            ok &= realised <= allowed
    return ok


def worst_violation(lifts: Lifts, p_s: NDArray[np.float64], claim: Claim,
                    columns: Sequence[int] | None = None) -> Violation | None:
    """The violated constraint of ``claim`` with the largest excess (ties: lowest column), or None.
    ``columns`` renames the columns (e.g. the output indices returned by :func:`channel_lifts`)."""
    worst: Violation | None = None
    for name, realised, allowed in constraint_values(lifts, p_s, claim):
        excess = realised - allowed
        j = int(np.argmax(excess)) if excess.size else 0
        if excess.size and excess[j] > 0 and (worst is None or excess[j] > worst.excess):
            label = int(columns[j]) if columns is not None else j
            worst = Violation(claim.notion, name, label, float(realised[j]), allowed)
    return worst


def check_claim(joint: Joint, channel: PerturbationChannel | ArrayLike, claim: Claim) -> Violation | None:
    """The worst violation of ``claim`` by ``channel`` under ``joint`` (None if it holds)."""
    lifts, used = channel_lifts(joint, channel)
    return worst_violation(lifts, joint.p_s, claim, used)


def check_alip(joint: Joint, channel: PerturbationChannel | ArrayLike, eps_l: float, eps_u: float) -> Violation | None:
    """(ε_l, ε_u)-ALIP (Def. 3): worst violation or None."""
    return check_claim(joint, channel, Claim("alip", {"eps_l": eps_l, "eps_u": eps_u}))


def check_lip(joint: Joint, channel: PerturbationChannel | ArrayLike, epsilon: float) -> Violation | None:
    """ε-LIP (Def. 1): worst violation or None."""
    return check_claim(joint, channel, Claim("lip", {"epsilon": epsilon}))


def check_ldp_s(joint: Joint, channel: PerturbationChannel | ArrayLike, epsilon: float) -> Violation | None:
    """ε-LDP with respect to S (Def. 2): worst violation or None."""
    return check_claim(joint, channel, Claim("ldp_s", {"epsilon": epsilon}))


# ------------------------------------------------------------------------------------------ budgets


def positive_number(value: object, name: str) -> float:
    """``value`` as a finite float > 0; raises DesignError naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise DesignError(f"{name} must be a number, got {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not (np.isfinite(number) and number > 0):
        raise DesignError(f"{name} must be finite and > 0, got {number!r}")
    return number


def split_budget(epsilon: float, lam: float) -> tuple[float, float]:
    """(ε_l, ε_u) = (λε, (1−λ)ε) (notes/003 §1, budget split); ε ∈ (0, :data:`.model.MAX_LEVEL`],
    λ ∈ (0, 1)."""
    epsilon = require_level(positive_number(epsilon, "epsilon"))
    lam = positive_number(lam, "lam")
    if lam >= 1:
        raise DesignError(f"lam must lie in (0, 1), got {lam!r}")
    return lam * epsilon, (1.0 - lam) * epsilon


def tightened(value: float) -> float:
    """A budget tightened by :data:`DESIGN_MARGIN` for designing (claims keep the nominal value)."""
    return value * (1.0 - DESIGN_MARGIN)
