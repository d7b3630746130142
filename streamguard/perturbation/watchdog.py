"""The watchdog mechanism: release low-risk symbols unchanged, merge the high-risk ones (notes/003 §2.2,
§2.4, §3.2, §3.3, §3.6).

A privacy **criterion** (measure + budget) splits 𝒳 into the low-risk symbols 𝒳_L, whose identity release
meets the budget, and the high-risk rest 𝒳_H (eqs. 6–7). The mechanism publishes every x ∈ 𝒳_L as itself
and each merged group 𝒳_i as one output symbol (Y = 𝒳_i, X-invariant randomisation with |𝒴_i| = 1, eq. 8).
Its utility has the closed form (eq. 13)

    I(X;Y) = H(X) − Σ_i Σ_{x∈𝒳_i} P_X(x)·log(P(𝒳_i)/P_X(x)).

* **Complete merging**: one group, 𝒳_H.
* **Subset merging**: the greedy partition of Algorithm 1, as corrected in notes/003 §3.3: the outer loop
  runs ``while |X_Q| > 0`` (E2), the ALIP risk is ω = Λ + 1/Ψ (E3; the printed Λ + Ψ rewards a small
  min-lift), ties go to the lowest symbol (or group) index.

**Repair (notes/003 E4, §3.3 "Gap in the paper").** The paper guarantees the budget only on 𝒴_L: the merged
𝒳_H (complete merging) or Algorithm 1's last subset can itself break the budget — e.g. when 𝒳_H is one
symbol with a tiny min-lift. With ``repair=True`` (what the designers use) the failing group absorbs, one at
a time, the low-risk symbol x that minimises ω(group ∪ {x}) until it meets the budget; merging all of 𝒳 has
lift ≡ 1, so this terminates. ``repair=False`` gives the paper's mechanism and is kept for the erratum
demonstration and the paper reproduction only; the designers never return it.

Measures (``measure=``) and the claims they produce (definitions in :mod:`.lift`), with ε_l = λε, ε_u = (1−λ)ε:

==========================  =======================================================  ==================
measure                     a column is private iff                                  risk ω
==========================  =======================================================  ==================
``alip``                    Ψ ≥ e^{−ε_l} and Λ ≤ e^{ε_u}                             Λ + 1/Ψ
``lip``                     Ψ ≥ e^{−ε} and Λ ≤ e^{ε} (λ unused)                      max(log Λ, −log Ψ)
``ldp`` (w.r.t. S)          Γ = Λ/Ψ ≤ e^{ε} (λ unused)                               Γ
``l1``                      Λ_ℓ1 ≤ e^{ε_u} − 1 and Ψ_ℓ1 ≤ e^{ε_l} − 1   (§6.2)        Λ_ℓ1 + Ψ_ℓ1
``chi2``                    Λ_χ² ≤ (e^{ε_u} − 1)² and Ψ_χ² ≤ (e^{ε_l} − 1)²          Λ_χ² + Ψ_χ²
``alpha-lift``              Λ_α ≤ e^{ε_u} and Ψ_α ≤ e^{ε_l}   (needs ``alpha`` > 1)  Λ_α + Ψ_α
``<m>-based``               only the lift-based half of ``<m>``                      Λ_m
``<m>-inverse``             only the lift-inverse half of ``<m>``                    Ψ_m
==========================  =======================================================  ==================

The lift-based / lift-inverse sets are relaxed criteria, **not** implied by or implying ALIP (E1).
Every test inside the design uses budgets tightened by :data:`.lift.DESIGN_MARGIN`; the returned channel's
claims carry the nominal budgets and are verified exactly before it is returned (:func:`.verify.require_designed`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .lift import (
    Lifts,
    alpha_lift,
    alpha_lift_inverse,
    chi2_lift,
    chi2_lift_inverse,
    l1_lift,
    l1_lift_inverse,
    lift_ratio,
    max_lift,
    min_lift,
    positive_number,
    satisfied,
    split_budget,
    symbol_lifts,
    tightened,
)
from .model import Claim, DesignError, Joint, PerturbationChannel, Symbol
from .verify import require_designed

Risk = Callable[[Lifts, NDArray[np.float64]], NDArray[np.float64]]

_PAIRS = ("l1", "chi2", "alpha-lift")
#: Every ``measure=`` the watchdog designers accept.
MEASURES = ("alip", "lip", "ldp", *(f"{m}{v}" for m in _PAIRS for v in ("", "-based", "-inverse")))


@dataclass(frozen=True)
class Criterion:
    """A privacy test and risk score for symbols and merged subsets at one budget.

    ``claims`` carry the nominal budget (what a channel built with this criterion promises);
    ``design`` the same claims with budgets tightened by DESIGN_MARGIN (what the design tests)."""

    measure: str
    claims: tuple[Claim, ...]
    design: tuple[Claim, ...]
    risk_of: Risk

    def ok(self, lifts: Lifts, p_s: NDArray[np.float64]) -> NDArray[np.bool_]:
        """Per column of a lift table: private under the (tightened) budget?"""
        return satisfied(lifts, p_s, self.design)

    def risk(self, lifts: Lifts, p_s: NDArray[np.float64]) -> NDArray[np.float64]:
        """ω per column (larger = riskier)."""
        return self.risk_of(lifts, p_s)


def _alip_risk(lifts: Lifts, p_s: NDArray[np.float64]) -> NDArray[np.float64]:
    with np.errstate(divide="ignore"):
        return max_lift(lifts) + 1.0 / min_lift(lifts)


def _lip_risk(lifts: Lifts, p_s: NDArray[np.float64]) -> NDArray[np.float64]:
    with np.errstate(divide="ignore"):
        return np.maximum(np.log(max_lift(lifts)), -np.log(min_lift(lifts)))


def _ldp_risk(lifts: Lifts, p_s: NDArray[np.float64]) -> NDArray[np.float64]:
    return lift_ratio(lifts)


def criterion(measure: str, epsilon: float, *, lam: float = 0.5, alpha: float | None = None) -> Criterion:
    """The criterion of ``measure`` at budget ε (split ε_l = λε, ε_u = (1−λ)ε where the measure has two
    sides); see the module table. Raises DesignError for an unknown measure or a bad parameter."""
    if measure not in MEASURES:
        raise DesignError(f"unknown watchdog measure {measure!r}; known: {', '.join(MEASURES)}")
    eps_l, eps_u = split_budget(epsilon, lam)
    epsilon = float(epsilon)
    family = next((m for m in _PAIRS if measure.startswith(m)), measure)
    if family == "alpha-lift" and alpha is None:
        raise DesignError(f"measure {measure!r} needs alpha (> 1)")
    if family != "alpha-lift" and alpha is not None:
        raise DesignError(f"alpha applies only to the alpha-lift measures, not {measure!r}")
    if family in ("lip", "ldp"):
        if lam != 0.5:
            raise DesignError(f"measure {measure!r} has a single budget epsilon; lam does not apply")
        notion = "lip" if family == "lip" else "ldp_s"
        risk = _lip_risk if family == "lip" else _ldp_risk
        return Criterion(measure, (Claim(notion, {"epsilon": epsilon}),),
                         (Claim(notion, {"epsilon": tightened(epsilon)}),), risk)
    if family == "alip":
        return Criterion(measure, (Claim("alip", {"eps_l": eps_l, "eps_u": eps_u}),),
                         (Claim("alip", {"eps_l": tightened(eps_l), "eps_u": tightened(eps_u)}),), _alip_risk)
    return _pair_criterion(measure, family, eps_l, eps_u, alpha)


def _pair_criterion(measure: str, family: str, eps_l: float, eps_u: float, alpha: float | None) -> Criterion:
    """Lift-based (bound from ε_u) and/or lift-inverse (bound from ε_l) measures of §2.6 / §6.2."""
    extra: dict[str, float] = {}
    if family == "l1":
        bound: Callable[[float], float] = math.expm1
        based, inverse = ("l1_lift", l1_lift), ("l1_lift_inverse", l1_lift_inverse)
    elif family == "chi2":
        bound = lambda e: math.expm1(e) ** 2  # noqa: E731
        based, inverse = ("chi2_lift", chi2_lift), ("chi2_lift_inverse", chi2_lift_inverse)
    else:
        a = positive_number(alpha, "alpha")
        if a <= 1:
            raise DesignError(f"alpha must be > 1, got {a!r}")
        extra = {"alpha": a}
        bound = math.exp
        based = ("alpha_lift", lambda l, p: alpha_lift(l, p, a))
        inverse = ("alpha_lift_inverse", lambda l, p: alpha_lift_inverse(l, p, a))
    sides = [(based, eps_u), (inverse, eps_l)]
    if measure.endswith("-based"):
        sides = sides[:1]
    elif measure.endswith("-inverse"):
        sides = sides[1:]
    try:
        claims = tuple(Claim(name, {**extra, "threshold": bound(eps)}) for (name, _), eps in sides)
        design = tuple(Claim(name, {**extra, "threshold": bound(tightened(eps))}) for (name, _), eps in sides)
    except OverflowError:
        raise DesignError(f"measure {measure!r}: its threshold at ε_l = {eps_l:g}, ε_u = {eps_u:g} overflows a "
                          "float; use a smaller budget") from None
    fns = [fn for (_, fn), _ in sides]

    def risk(lifts: Lifts, p_s: NDArray[np.float64]) -> NDArray[np.float64]:
        return sum((fn(lifts, p_s) for fn in fns), np.zeros(lifts.shape[1]))

    return Criterion(measure, claims, design, risk)


# ------------------------------------------------------------------------------------------ partitions


@dataclass(frozen=True)
class Partition:
    """Which symbols a watchdog releases unchanged (``low``) and which it merges (``groups``, each one
    output). ``absorbed`` lists the low-risk symbols the E4 repair moved into the last group."""

    low: tuple[int, ...]
    groups: tuple[tuple[int, ...], ...]
    absorbed: tuple[int, ...] = ()


def split_symbols(joint: Joint, crit: Criterion) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(𝒳_L, 𝒳_H): symbols whose identity release meets ``crit`` and the rest (eqs. 6–7)."""
    ok = crit.ok(symbol_lifts(joint), joint.p_s)
    return tuple(int(x) for x in np.flatnonzero(ok)), tuple(int(x) for x in np.flatnonzero(~ok))


class _Groups:
    """Union lifts of a group with each of several candidates, from running sums (notes/003 §3.3,
    incremental kernel): l(s, G ∪ C) = (a_G + a_C)(s) / P_S(s) / (m_G + m_C) (divided in turn, see
    :func:`.lift.symbol_lifts`)."""

    def __init__(self, joint: Joint, crit: Criterion) -> None:
        self.p, self.p_s, self.p_x, self.crit = joint.p, joint.p_s, joint.p_x, crit

    def sums(self, members: Sequence[int]) -> tuple[NDArray[np.float64], float]:
        idx = np.asarray(members, dtype=np.int64)
        return self.p[:, idx].sum(axis=1), float(self.p_x[idx].sum())

    def ok(self, members: Sequence[int]) -> bool:
        a, m = self.sums(members)
        return bool(self.crit.ok((a / self.p_s / m)[:, None], self.p_s)[0])

    def best(self, members: Sequence[int], candidates: Sequence[Sequence[int]]) -> int:
        """Index of the candidate whose union with ``members`` has the lowest risk (ties: first)."""
        a, m = self.sums(members)
        indicator = np.zeros((self.p.shape[1], len(candidates)))
        for j, cand in enumerate(candidates):
            indicator[list(cand), j] = 1.0
        ca, cm = self.p @ indicator, self.p_x @ indicator
        lifts = (a[:, None] + ca) / self.p_s[:, None] / (m + cm)[None, :]
        return int(np.argmin(self.crit.risk(lifts, self.p_s)))


def _absorb(g: _Groups, group: list[int], low: list[int]) -> list[int]:
    """E4 repair: move low-risk symbols into ``group`` (lowest union risk first) until it is private.
    Mutates both lists; returns the absorbed symbols in order."""
    absorbed: list[int] = []
    while not g.ok(group):
        if not low:
            raise DesignError("merging every symbol into one output still misses the budget "
                              "(the budget is below floating-point resolution)")
        x = low.pop(g.best(group, [[x] for x in low]))
        group.append(x)
        absorbed.append(x)
    return absorbed


def _finish(low: list[int], groups: list[list[int]], absorbed: Sequence[int]) -> Partition:
    return Partition(tuple(low), tuple(tuple(sorted(gr)) for gr in groups), tuple(absorbed))


def complete_partition(joint: Joint, crit: Criterion, *, repair: bool = True) -> Partition:
    """Complete merging: all of 𝒳_H in one group (§3.2), repaired by absorption if it breaks the budget."""
    low, high = (list(v) for v in split_symbols(joint, crit))
    if not high:
        return _finish(low, [], ())
    absorbed = _absorb(_Groups(joint, crit), high, low) if repair else []
    return _finish(low, [high], absorbed)


def subset_partition(joint: Joint, crit: Criterion, *, repair: bool = True) -> Partition:
    """Algorithm 1 (subset merging) as corrected in notes/003 §3.3 (E2, E3), plus the E4 repair.

    Seed each subset with the riskiest remaining high-risk symbol and grow it with the symbol that keeps
    its risk lowest until it is private; a non-private last subset is merged with the earlier subset that
    minimises the union's risk (lines 12–15) and, if still non-private, absorbs low-risk symbols."""
    low, high = (list(v) for v in split_symbols(joint, crit))
    g = _Groups(joint, crit)
    p_s = joint.p_s
    lifts = symbol_lifts(joint)
    queue = high
    groups: list[list[int]] = []
    while queue:                                                  # line 4, read as |X_Q| > 0 (E2)
        group = [queue.pop(int(np.argmax(crit.risk(lifts[:, queue], p_s))))]   # line 5
        while queue and not g.ok(group):                         # lines 6-8
            group.append(queue.pop(g.best(group, [[x] for x in queue])))
        groups.append(group)
    while len(groups) > 1 and not g.ok(groups[-1]):               # lines 12-15
        i = g.best(groups[-1], groups[:-1])
        groups[-1].extend(groups.pop(i))
    absorbed = _absorb(g, groups[-1], low) if repair and groups else []
    return _finish(low, groups, absorbed)


def partition_mutual_information(joint: Joint, groups: Sequence[Sequence[int]]) -> float:
    """I(X;Y) in nats of the mechanism releasing every symbol outside ``groups`` unchanged and each group
    as one symbol: H(X) − Σ_i Σ_{x∈𝒳_i} P_X(x)·log(P(𝒳_i)/P_X(x))  (eqs. 11, 13)."""
    p_x = joint.p_x
    loss = 0.0
    for members in groups:
        px = p_x[np.asarray(members, dtype=np.int64)]
        loss += float(np.sum(px * np.log(px.sum() / px)))
    return float(-np.sum(p_x * np.log(p_x))) - loss


def partition_matrix(n_x: int, partition: Partition) -> tuple[NDArray[np.float64], tuple[Symbol, ...]]:
    """The 0/1 channel of a partition: outputs are the released symbols (in order) then the groups."""
    outputs: list[Symbol] = [*partition.low, *partition.groups]
    matrix = np.zeros((n_x, len(outputs)))
    for j, out in enumerate(outputs):
        matrix[list(out) if isinstance(out, tuple) else out, j] = 1.0
    return matrix, tuple(outputs)


# ------------------------------------------------------------------------------------------ designers


def watchdog_channel(joint: Joint, epsilon: float, *, lam: float = 0.5, measure: str = "alip",
                     merge: str = "complete", alpha: float | None = None) -> PerturbationChannel:
    """The watchdog (kind ``"watchdog"`` for ``merge="complete"``, ``"watchdog-subset"`` for
    ``merge="subset"``) under ``measure`` at budget ε (module docstring), repaired so that every output,
    merged groups included, meets the budget (E4). Its claims are verified exactly before return."""
    crit = criterion(measure, epsilon, lam=lam, alpha=alpha)
    if merge == "complete":
        kind, partition = "watchdog", complete_partition(joint, crit)
    elif merge == "subset":
        kind, partition = "watchdog-subset", subset_partition(joint, crit)
    else:
        raise DesignError(f"merge must be 'complete' or 'subset', got {merge!r}")
    matrix, outputs = partition_matrix(joint.n_x, partition)
    params: dict[str, Any] = {"epsilon": float(epsilon), "lam": float(lam), "measure": measure, "merge": merge,
                              "absorbed": list(partition.absorbed)}
    if alpha is not None:
        params["alpha"] = float(alpha)
    channel = PerturbationChannel(kind, matrix, "x", joint.n_s, joint.n_x, outputs, crit.claims, params)
    return require_designed(channel, joint)


def subset_merging_channel(joint: Joint, epsilon: float, *, lam: float = 0.5, measure: str = "alip",
                           alpha: float | None = None) -> PerturbationChannel:
    """The watchdog with subset merging (corrected Algorithm 1 + E4 repair); see :func:`watchdog_channel`."""
    return watchdog_channel(joint, epsilon, lam=lam, measure=measure, merge="subset", alpha=alpha)
