"""The paper-level composition rules of Song & Chaudhuri, with their conditions checked (notes/002 §4).

These are the *theorems* as pure functions, for audit and cross-checks; the live guarantee of MQM
aggregates comes from the per-position quilt accountant (notes/002 §4.7), which is never worse
than Thm III.7 and recovers Thm III.3 where they apply. Following DESIGN.md §8 (``dp_accounting``): each rule states
which releases it supports; a rule that does not support a set of releases returns
:class:`NotApplicable` naming the failed condition, and what no rule supports is reported as
**not composed** (:func:`paper_bounds`) — never guessed.

| rule | bound | conditions (checked) |
|---|---|---|
| Thm III.7 | Σ_k ε_k | every release an MQM release on the whole chain, one Θ (§4.3) |
| Thm II.6 | K·max_k ε_k | MQM releases with identical quilt sets (§4.2) |
| Thm III.1 *as proved* | max{min(ε_A+ε_B, ε_A+e(X_T3|X_T2)), min(ε_A+ε_B, ε_B+e(X_T2|X_T3))} | disjoint windows, any mechanisms (§4.6) |
| Thm III.3 | max(ε_A, ε_B) | MQMApprox, (1) two-sided active quilts, (2) T3−T2 ≥ max(T2−T1, T4−T3) (§4.6) |
| Thm III.6 | ε_A + ε_B + 2E | E bounds both max-divergences (§4.5) |
| Thm III.4 | — | arbitrary mechanisms on the same data do *not* compose linearly |

Errata followed (notes/002 §9.1): the printed statement of Thm III.1 swaps the two max-influence
terms and is false (counterexample in notes §4.6); :func:`thm_III1` is the proof's version, and
the printed one is exposed only as :func:`thm_III1_printed_WRONG` so tests can show it fails.

Positions are the stream's 0-based indices; windows are inclusive [lo, hi]. The papers' T1 ≤ T2 <
T3 ≤ T4 are A = [T1, T2], B = [T3, T4].
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..quilt.influence import MODES, ChainTables
from ..quilt.model import QuiltModel
from ..quilt.scale import Scale, sigma_inf, sigma_max, sigma_supq

#: The rules' names in verdicts.
THM_III7, THM_II6 = "Thm III.7 (Σ ε_k)", "Thm II.6 (K·max ε_k)"
MIXED_MODELS = "the releases were calibrated under different models Θ"
#: Max-influence modes of an MQM release.
MQM_MODES = MODES
#: The MQMApprox modes (Lemma II.3 bounds; translation-invariant), the setting of Thm III.3.
APPROX_MODES = ("approx", "approx-rev")


class CompositionError(ValueError):
    """A release or argument is malformed (not merely outside a rule's conditions)."""


# ----------------------------------------------------------------------------------- releases


@dataclass(frozen=True)
class Quilt:
    """An active Markov quilt {X_{i−a}, X_{i+b}} of node i; ``a``/``b`` None when that side is absent."""

    i: int
    a: int | None
    b: int | None

    @property
    def two_sided(self) -> bool:
        return self.a is not None and self.b is not None


@dataclass(frozen=True)
class PufferfishRelease:
    """Any mechanism that is ε-Pufferfish private about the secrets of positions [lo, hi]."""

    epsilon: float
    lo: int
    hi: int

    def __post_init__(self) -> None:
        _check_release(self.epsilon, self.lo, self.hi)


@dataclass(frozen=True)
class MqmRelease:
    """An MQM release (notes/002 §3, §4.8) as the composition rules see it.

    ``epsilon`` is the target its σ was computed for; the query reads [lo, hi]. ``model`` is the
    identifier of Θ and ``mode`` the max-influence mode. ``T`` is the chain length σ was computed
    for (the stream's positions 0..T−1), or None when σ is length-independent (σ_∞, σ̄_supq).
    ``active`` holds, for **every** θ ∈ Θ in order, the active quilt of a node of the window as
    reported by the scale search (the witness; node i 1-based in the chain σ was computed on); it
    is needed only for Thm III.3 condition 1 (:func:`active_quilts`, :func:`mqm_release`).
    """

    epsilon: float
    lo: int
    hi: int
    model: str
    mode: str
    T: int | None
    active: tuple[Quilt, ...] = ()

    def __post_init__(self) -> None:
        _check_release(self.epsilon, self.lo, self.hi)
        if self.mode not in MQM_MODES:
            raise CompositionError(f"mode must be one of {', '.join(MQM_MODES)}")
        if self.T is not None and self.T < 1:
            raise CompositionError("T must be ≥ 1 or None")
        object.__setattr__(self, "active", tuple(self.active))


def active_quilts(model: QuiltModel, epsilon: float, T: int | None) -> tuple[Quilt, ...]:
    """The active quilt of the witness node of every θ ∈ Θ, from the same scale search a release
    used (σ_max(T), or σ_∞ / σ̄_supq when ``T`` is None), each θ searched alone.

    Thm III.3 condition 1 asks for a two-sided active quilt *for every θ*, while a release's own
    witness only names the worst θ. Checking the witness node only is conservative: another node
    might qualify when the witness does not.
    """
    out = []
    for chain in model.chains:
        alone = QuiltModel(chain, model.mode, model.initial)
        scale: Scale
        if T is not None:
            scale = sigma_max(alone, epsilon, T)
        else:
            scale = sigma_supq(alone, epsilon) if model.mode == "supq" else sigma_inf(alone, epsilon)
        out.append(Quilt(scale.witness.i, scale.witness.a, scale.witness.b))
    return tuple(out)


def mqm_release(release: Any, model: QuiltModel) -> MqmRelease:
    """The composition view of a published aggregate (:class:`~streamguard.quilt.release.AggregateRelease`
    or anything with ``epsilon, lo, hi, model, mode, T``), with the active quilts of every θ of the
    ``model`` it was calibrated under."""
    if release.model != model.identifier or release.mode != model.mode:
        raise CompositionError("the release was not calibrated under this model")
    return MqmRelease(release.epsilon, release.lo, release.hi, release.model, release.mode, release.T,
                      active_quilts(model, release.epsilon, release.T))


def _check_release(epsilon: float, lo: int, hi: int) -> None:
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise CompositionError("epsilon must be a finite number > 0")
    if not (isinstance(lo, int) and isinstance(hi, int) and 0 <= lo <= hi):
        raise CompositionError("window must be 0-based positions with lo ≤ hi")


Release = PufferfishRelease | MqmRelease


# ----------------------------------------------------------------------------------- verdicts


@dataclass(frozen=True)
class Composed:
    """``rule`` gives ``epsilon`` for the secrets of the positions named in ``covers``."""

    rule: str
    epsilon: float
    covers: str

    @property
    def applicable(self) -> bool:
        return True


@dataclass(frozen=True)
class NotApplicable:
    """``rule`` does not support these releases; ``reason`` names the failed condition."""

    rule: str
    reason: str

    @property
    def applicable(self) -> bool:
        return False


Verdict = Composed | NotApplicable


# -------------------------------------------------------------------- rules on plain numbers


def thm_III1(eps_a: float, eps_b: float, e_fwd: float, e_bwd: float) -> float:
    """Thm III.1 **as proved** (notes/002 §4.6): A = [T1, T2] before B = [T3, T4], any mechanisms.

    ``e_fwd`` = e_Θ(X_{T3} | X_{T2}) (what A-secrets pay), ``e_bwd`` = e_Θ(X_{T2} | X_{T3}):

        max{ min(ε_A + ε_B, ε_A + e_fwd), min(ε_A + ε_B, ε_B + e_bwd) }.
    """
    _positive(eps_a, "eps_a")
    _positive(eps_b, "eps_b")
    _nonneg(e_fwd, "e_fwd")
    _nonneg(e_bwd, "e_bwd")
    total = eps_a + eps_b
    return max(min(total, eps_a + e_fwd), min(total, eps_b + e_bwd))


def thm_III1_printed_WRONG(eps_a: float, eps_b: float, e_fwd: float, e_bwd: float) -> float:
    """The statement of Thm III.1 **as printed — FALSE** (notes/002 §9.1): the two influence terms
    are swapped. Exposed only so the counterexample test can show it is violated; never use it
    as a guarantee."""
    total = eps_a + eps_b
    return max(min(total, eps_a + e_bwd), min(total, eps_b + e_fwd))


def thm_III6(eps_a: float, eps_b: float, E: float) -> float:
    """Thm III.6 (notes/002 §4.5): ε_A + ε_B + 2E, where E bounds, for every secret and θ, both
    D∞(joint ‖ product of marginals) and D∞(product ‖ joint) of the two outputs."""
    _positive(eps_a, "eps_a")
    _positive(eps_b, "eps_b")
    _nonneg(E, "E")
    return eps_a + eps_b + 2.0 * E


def _nonneg(x: float, name: str) -> None:
    if not (isinstance(x, (int, float)) and not math.isnan(x) and x >= 0):
        raise CompositionError(f"{name} must be a number ≥ 0 (+inf allowed)")


def _positive(x: float, name: str) -> None:
    if not (isinstance(x, (int, float)) and math.isfinite(x) and x > 0):
        raise CompositionError(f"{name} must be a finite number > 0")


# ----------------------------------------------------------------- rules on recorded releases


@dataclass
class MqmTally:
    """What Thm III.7 and Thm II.6 need of a sequence of MQM releases, kept incrementally (so a
    stream's odometer states them without keeping every release: docs/implementation.md,
    "Growth"). :meth:`add` the releases in order; ``count`` of them, Σ ε, the last position read,
    the first release's (mode, T, ε) and the index of the first one that differs, and (index, T)
    of every release whose σ was computed for a finite chain length T."""

    count: int = 0
    models: set[str] = field(default_factory=set)
    eps_sum: float = 0.0
    max_hi: int = -1
    first: tuple[str, int | None, float] | None = None
    first_differs: int | None = None
    timed: list[tuple[int, int]] = field(default_factory=list)

    def add(self, r: MqmRelease) -> None:
        key = (r.mode, r.T, r.epsilon)
        if self.first is None:
            self.first = key
        elif self.first_differs is None and key != self.first:
            self.first_differs = self.count
        if r.T is not None:
            self.timed.append((self.count, r.T))
        self.models.add(r.model)
        self.eps_sum += r.epsilon
        self.max_hi = max(self.max_hi, r.hi)
        self.count += 1


def _tally(releases: Sequence[Release]) -> MqmTally:
    tally = MqmTally()
    for r in releases:
        assert isinstance(r, MqmRelease)
        tally.add(r)
    return tally


def thm_III7(releases: Sequence[Release], T: int | None = None) -> Verdict:
    """Thm III.7: K MQM releases on the same chain compose to Σ_k ε_k (notes/002 §4.3).

    Conditions: every release is an MQM release under one model Θ (the same ``model`` identifier —
    the proof holds for MQMExact and MQMApprox alike, but a QuiltModel identifier includes its mode,
    so releases calibrated under different modes are conservatively not composed here), and each
    is an MQM release *on the whole chain* X_0..X_{T−1}
    (``T`` defaults to the last position read + 1): its σ is length-independent or was computed
    for a chain of at least T positions (σ_max is non-decreasing in T, notes/002 §3.4). A σ
    computed on a shorter segment makes the release private only about that segment's secrets —
    Thm III.7 does not cover it (notes §6.7: such pairs exceed max ε).
    """
    reason = _mqm_same_model(releases)
    if reason:
        return NotApplicable(THM_III7, reason)
    beyond = None if T is None else next(((n, r.hi) for n, r in enumerate(releases) if r.hi >= T), None)
    return tally_III7(_tally(releases), T, beyond)


def tally_III7(tally: MqmTally, T: int | None = None, beyond: tuple[int, int] | None = None) -> Verdict:
    """:func:`thm_III7` on the tally of the releases; ``beyond`` is (index, last position read) of
    the first release reading a position ≥ ``T`` (None: none does; always None without ``T``)."""
    if tally.count == 0:
        return NotApplicable(THM_III7, "no releases")
    if len(tally.models) > 1:
        return NotApplicable(THM_III7, MIXED_MODELS)
    chain_len = T if T is not None else tally.max_hi + 1
    short = next(((n, t) for n, t in tally.timed if t < chain_len), None)
    if beyond is not None and (short is None or beyond[0] <= short[0]):
        return NotApplicable(THM_III7, f"release {beyond[0]} reads position {beyond[1]} beyond the chain length "
                                       f"{chain_len}")
    if short is not None:
        return NotApplicable(
            THM_III7,
            f"release {short[0]}: σ was computed for T = {short[1]} < chain length {chain_len}, so it is not an "
            "MQM release on the whole chain",
        )
    return Composed(THM_III7, float(tally.eps_sum), f"every position 0..{chain_len - 1}")


def thm_II6(releases: Sequence[Release], T: int | None = None) -> Verdict:
    """Thm II.6 ([9], notes/002 §4.2): K·max_k ε_k for MQM releases with identical quilt sets.

    The records cannot show which quilt every node used, so identical quilts are established the
    only way they can be: the scale searches were identical — same Θ, mode, chain length and ε.
    (Then K·max ε = Σ ε; the rule is kept for audit cross-checks.)
    """
    base = thm_III7(releases, T)
    if isinstance(base, NotApplicable):
        return NotApplicable(THM_II6, base.reason)
    return tally_II6(_tally(releases), T)


def tally_II6(tally: MqmTally, T: int | None = None) -> Verdict:
    """:func:`thm_II6` on the tally of the releases (none reads beyond ``T``)."""
    base = tally_III7(tally, T)
    if isinstance(base, NotApplicable):
        return NotApplicable(THM_II6, base.reason)
    if tally.first_differs is not None:
        return NotApplicable(
            THM_II6, f"release {tally.first_differs} differs from release 0 in mode, T or ε: identical quilt sets "
                     "are not established")
    assert tally.first is not None
    return Composed(THM_II6, tally.count * tally.first[2], base.covers)  # every ε is the first one


def thm_III3(releases: Sequence[Release]) -> Verdict:
    """Thm III.3: two MQMApprox releases on distant segments give max(ε_A, ε_B) (notes/002 §4.6).

    Conditions checked:
    0. exactly two MQM releases under one Θ, both MQMApprox (``approx``/``approx-rev``), on disjoint
       windows A = [T1, T2] < B = [T3, T4], each an MQM release on its segment (σ for ≥ its length);
    1. for every θ ∈ Θ, each segment has a node whose active quilt is two-sided: the recorded
       active quilt is two-sided and fits inside the segment (a + b ≤ hi − lo), which is what the
       proof's borrowing needs (with 2., the borrowed quilts cannot reach the other segment);
    2. T3 − T2 ≥ max(T2 − T1, T4 − T3).
    The guarantee covers the secrets of A ∪ B only; positions in the gap are not in the framework.
    """
    rule = "Thm III.3 (max ε, MQMApprox on distant segments)"
    reason = _mqm_same_model(releases)
    if reason:
        return NotApplicable(rule, reason)
    if len(releases) != 2:
        return NotApplicable(rule, f"needs exactly two releases, got {len(releases)}")
    A, B = sorted(releases, key=lambda r: r.lo)
    assert isinstance(A, MqmRelease) and isinstance(B, MqmRelease)
    for name, r in (("A", A), ("B", B)):
        if r.mode not in APPROX_MODES:
            return NotApplicable(rule, f"segment {name} uses mode '{r.mode}': Thm III.3 is proved for MQMApprox only")
    if A.hi >= B.lo:
        return NotApplicable(rule, "the windows overlap: Thm III.3 needs disjoint segments")
    for name, r in (("A", A), ("B", B)):
        length = r.hi - r.lo + 1
        if r.T is not None and r.T < length:
            return NotApplicable(rule, f"segment {name}: σ was computed for T = {r.T} < its length {length}")
        if not r.active:
            return NotApplicable(rule, f"condition 1: segment {name} records no active quilts (one per θ needed)")
        for th, q in enumerate(r.active):
            if not q.two_sided:
                return NotApplicable(rule, f"condition 1: segment {name}, θ #{th}: the active quilt is one-sided or empty")
            assert q.a is not None and q.b is not None
            if q.a + q.b > r.hi - r.lo:
                return NotApplicable(
                    rule, f"condition 1: segment {name}, θ #{th}: the two-sided quilt (a={q.a}, b={q.b}) does not fit in the segment"
                )
    gap, len_a, len_b = B.lo - A.hi, A.hi - A.lo, B.hi - B.lo
    if gap < max(len_a, len_b):
        return NotApplicable(rule, f"condition 2: T3 − T2 = {gap} < max(T2 − T1, T4 − T3) = {max(len_a, len_b)}")
    return Composed(rule, max(A.epsilon, B.epsilon), f"positions {A.lo}..{A.hi} and {B.lo}..{B.hi} only")


def parallel_general(releases: Sequence[Release], model: QuiltModel) -> Verdict:
    """Thm III.1 as proved, on two releases with disjoint windows, any mechanisms (notes/002 §4.6).

    The boundary influences come from Θ (``model``) by :func:`boundary_influences`. Covers the
    secrets of A ∪ B only.
    """
    rule = "Thm III.1 (as proved; disjoint segments)"
    if len(releases) != 2:
        return NotApplicable(rule, f"needs exactly two releases, got {len(releases)}")
    A, B = sorted(releases, key=lambda r: r.lo)
    if A.hi >= B.lo:
        return NotApplicable(rule, "the windows overlap: Thm III.1 needs disjoint segments")
    e_fwd, e_bwd = boundary_influences(model, A.hi, B.lo)
    eps = thm_III1(A.epsilon, B.epsilon, e_fwd, e_bwd)
    return Composed(rule, eps, f"positions {A.lo}..{A.hi} and {B.lo}..{B.hi} only")


def paper_bounds(
    releases: Sequence[Release], model: QuiltModel | None = None, T: int | None = None
) -> tuple[Verdict, ...]:
    """Every paper rule's verdict on ``releases`` (for the audit log).

    Thm III.1 needs Θ (``model``) for its boundary influences; without it it is
    reported as not applicable. If no rule applies, the last verdict says so explicitly: the
    releases are **not composed** by any theorem (Thm III.4: arbitrary Pufferfish mechanisms on
    the same data have no linear composition).
    """
    verdicts: list[Verdict] = [thm_III7(releases, T), thm_II6(releases, T), thm_III3(releases)]
    if model is not None:
        verdicts.append(parallel_general(releases, model))
    else:
        verdicts.append(NotApplicable("Thm III.1 (as proved; disjoint segments)", "no model given for the boundary influences"))
    if not any(v.applicable for v in verdicts):
        verdicts.append(NotApplicable("not composed", "no composition theorem supports these releases (Thm III.4)"))
    return tuple(verdicts)


def _mqm_same_model(releases: Sequence[Release]) -> str | None:
    if not releases:
        return "no releases"
    for n, r in enumerate(releases):
        if not isinstance(r, MqmRelease):
            return f"release {n} is not an MQM release"
    models = {r.model for r in releases}  # type: ignore[union-attr]
    if len(models) > 1:
        return MIXED_MODELS
    return None


# --------------------------------------------------------------------- boundary influences


def boundary_influences(model: QuiltModel, t2: int, t3: int) -> tuple[float, float]:
    """(e_Θ(X_{t3} | X_{t2}), e_Θ(X_{t2} | X_{t3})) for 0-based positions t2 < t3 (Def II.2).

    These are max-influences of one-sided quilts, read from the quilt module's exact tables
    (notes/002 §3.2): e(X_{t3} | X_{t2}) is the quilt {X_{i+d}} of node i = t2 (forward term
    fwd_d = max_y log P^d(s,y)/P^d(t,y)) and e(X_{t2} | X_{t3}) the quilt {X_{j−d}} of node j = t3
    (backward term with the mode's normaliser), d = t3 − t2, maxed over secret pairs and θ ∈ Θ.
    For the MQMApprox modes Θ is "every initial law", and the exact E-supq tables are used rather
    than the looser Lemma II.3 bound (both are valid; the exact one is tighter). Tables round e up
    (``E_SLACK``); +∞ when a value is possible under one state and not another.
    """
    if not (isinstance(t2, int) and isinstance(t3, int) and 0 <= t2 < t3):
        raise CompositionError("boundary influences need positions 0 ≤ t2 < t3")
    d = t3 - t2
    fwd_e = bwd_e = 0.0
    for theta, chain in enumerate(model.chains):
        tables = ChainTables(chain, "supq") if model.mode in APPROX_MODES else model.tables(theta)
        _, fwd = tables.node(t2 + 1, 0, d)  # the tables speak the paper's 1-based nodes
        bwd, _ = tables.node(t3 + 1, d, 0)
        fwd_e = max(fwd_e, float(np.max(fwd[d], initial=0.0)))
        bwd_e = max(bwd_e, float(np.max(bwd[d], initial=0.0)))
    return fwd_e, bwd_e
