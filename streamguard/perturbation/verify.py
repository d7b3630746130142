"""Exact verification of a channel's claims, in rational arithmetic, before it is saved, loaded or used.

Every float is a dyadic rational, so the stored channel and joint convert to integers exactly
(``float.as_integer_ratio``). The channel is checked as the distributions its rows denote: each row
divided by its exact sum (a float row may sum to 1 ± 1e−16). The *quantised* channel the sampler
really draws from — integer counts over 2⁶³ (:func:`streamguard.perturbation.sampler.quantise`) —
is checked as well; both must keep every claim.

With r(s, x) the row read at (s, x) (see :mod:`.metrics`) and all quantities scaled by one common
positive integer, A(s, y) ∝ P_SY(s, y) and B(x, y) ∝ P_XY(x, y) are integers, and every notion
below is a comparison of exact rationals with a rational bound or a bound e^c:

==================  ================  ==================================================================
notion              params            constraint, for every output y with P_Y(y) > 0
==================  ================  ==================================================================
ldp_x               epsilon           W(y|r) ≤ e^ε W(y|r') for all input rows r, r' (notes/001 Def. 3)
ldp_s               epsilon           P(y|s) ≤ e^ε P(y|s') (notes/003 Def. 2, notes/004 eq. 1)
identifiability     epsilon           P(x|y) ≤ e^ε P(x'|y) (notes/001 Def. 2, n = 1)
alip                eps_l, eps_u      e^{−ε_l} ≤ l(s, y) ≤ e^{ε_u} (notes/003 Def. 3)
lip, log_lift       epsilon           e^{−ε} ≤ l(s, y) ≤ e^{ε} (notes/003 Def. 1; notes/004 eq. 2)
l1_lift             threshold         Λ_ℓ1(y) = Σ_s P_S(s)·|l(s, y) − 1| ≤ threshold (notes/003 eq. 31)
l1_lift_inverse     threshold         Ψ_ℓ1(y) = Σ_s P_S(s)·|1/l(s, y) − 1| ≤ threshold (eq. 34)
chi2_lift           threshold         Λ_χ²(y) = Σ_s P_S(s)·(l(s, y) − 1)² ≤ threshold (eq. 32)
chi2_lift_inverse   threshold         Ψ_χ²(y) = Σ_s P_S(s)·(1/l(s, y) − 1)² ≤ threshold (eq. 35)
alpha_lift          alpha, threshold  Λ_α(y) = (Σ_s P_S(s)·l(s, y)^α)^{1/α} ≤ threshold (eq. 33)
alpha_lift_inverse  alpha, threshold  Ψ_α(y) = (Σ_s P_S(s)·l(s, y)^{−α})^{1/α} ≤ threshold (eq. 36)
distortion          D                 Pr(Y ≠ X) ≤ D (Hamming; merged groups count as ≠, see .metrics)
==================  ================  ==================================================================

These are the definitions of :mod:`.lift` (normative there). ``ldp_x`` ranges over every input
row (for non-Markov channels the pairs (s, x)); the others over the rows the joint can reach. A row
the joint cannot reach (an (s, x) with P_SX(s, x) = 0, non-Markov channels) is still a record the
sampler accepts, so it must not release an output of probability 0 under the joint — that output
would identify the record: every claim of such a channel is violated there. The
watchdog states lift-based thresholds as floats (e^{ε_u} − 1, …): they are compared exactly as
given. They are separate promises, not implied by ALIP (notes/003 E1). A lift of 0 makes every
lift-inverse measure, and the min-lift side of alip/lip, infinite (violated).

Bounds on e^c are rigorous: ``decimal``'s exp and ln are correctly rounded, so stepping one unit
in the last place outward gives an enclosing interval. A comparison that the interval cannot
decide is retried at higher precision; e^c is irrational for rational c ≠ 0, so this ends, but a
claim still undecided at :data:`MAX_DIGITS` digits counts as violated (fail closed).

Hostile numbers have bounded cost. Every parameter must be a finite float ≥ 0, and a privacy level
(ε, ε_l, ε_u) at most :data:`.model.MAX_LEVEL` = 1000 nats — above it a claim is no privacy
guarantee and is refused, so e^ε stays a rational of a few thousand bits. The α-measures are decided
through logs and expm1 (:func:`_sum_of_powers_at_most_one`), so any α > 0 and any lift are cheap. Realised
values in messages are floats, ``inf`` past the float range.
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Union

import numpy as np

from ..support.json_numbers import json_number
from .metrics import released_as_itself, require_compatible, row_index
from .model import MAX_LEVEL, Claim, DesignError, Joint, PerturbationChannel
from .sampler import SCALE_BITS, exact_integers, quantise

#: Decimal digits tried in turn when an enclosure does not decide a comparison.
DIGITS = (40, 120, 400)
MAX_DIGITS = DIGITS[-1]


class ClaimViolation(ValueError):
    """A channel breaks (or does not state, or states malformed) a claim; the message names the
    constraint, where it binds and the realised against the allowed value."""


# -- exact ratios and rigorous enclosures -------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Ratio:
    """An exact rational num/den ≥ 0 (den > 0) kept unreduced: the integers grow large (the
    stored channel's rows have unrelated exact sums), so comparisons cross-multiply instead of
    paying for gcds."""

    num: int
    den: int

    def __lt__(self, other: Ratio) -> bool:
        return self.num * other.den < other.num * self.den

    def __le__(self, other: Ratio) -> bool:
        return self.num * other.den <= other.num * self.den

    def __gt__(self, other: Ratio) -> bool:
        return other < self

    def __ge__(self, other: Ratio) -> bool:
        return other <= self

    def __add__(self, other: Ratio) -> Ratio:
        return Ratio(self.num * other.den + other.num * self.den, self.den * other.den)

    def __float__(self) -> float:
        """Correctly rounded (int / int, whatever the sizes); ``math.inf`` beyond the float range."""
        try:
            return self.num / self.den
        except OverflowError:
            return math.inf

    def log(self) -> float:
        """Natural log as a float (for messages); −inf at 0."""
        return -math.inf if self.num == 0 else math.log(self.num) - math.log(self.den)

    def enclose(self, digits: int) -> tuple[Fraction, Fraction]:
        """lo ≤ num/den ≤ hi to a relative precision of about ``digits`` decimal digits (exact when
        num and den are that short); lo > 0 whenever num > 0."""
        bits = int(3.33 * digits) + 8
        k_num, k_den = max(0, self.num.bit_length() - bits), max(0, self.den.bit_length() - bits)
        if k_num == k_den == 0:
            return Fraction(self.num, self.den), Fraction(self.num, self.den)
        n, d = self.num >> k_num, self.den >> k_den  # num ∈ [n, n+1)·2^k_num, den ∈ [d, d+1)·2^k_den
        scale = Fraction(2) ** (k_num - k_den)
        return Fraction(n, d + (k_den > 0)) * scale, Fraction(n + (k_num > 0), d) * scale


def _ratio(q: Fraction) -> Ratio:
    return Ratio(q.numerator, q.denominator)


#: An enclosure of a real number: digits → (lo, hi) with lo ≤ value ≤ hi.
Enclosure = Callable[[int], tuple[Fraction, Fraction]]
Quantity = Union[Ratio, Enclosure]


def _context(digits: int, rounding: str = decimal.ROUND_HALF_EVEN) -> decimal.Context:
    return decimal.Context(prec=digits, rounding=rounding, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)


def _to_decimal(q: Fraction, digits: int, rounding: str) -> decimal.Decimal:
    return _context(digits, rounding).divide(decimal.Decimal(q.numerator), decimal.Decimal(q.denominator))


def _outward(x: decimal.Decimal, ctx: decimal.Context, up: bool) -> Fraction:
    """The representable neighbour of a correctly rounded result, away from it (so the true value
    lies strictly inside). A zero result is exact: correctly rounded, only ln 1 gives 0."""
    if x == 0:
        return Fraction(0)
    return Fraction(x.next_plus(ctx) if up else x.next_minus(ctx))


def _exp_bounds(c: Fraction, digits: int) -> tuple[Fraction, Fraction]:
    """lo ≤ e^c ≤ hi (exact when c = 0): decimal's exp is correctly rounded, so the neighbours of
    the results for the argument rounded down and up enclose e^c."""
    if c == 0:
        return Fraction(1), Fraction(1)
    ctx = _context(digits)
    lo = _outward(ctx.exp(_to_decimal(c, digits, decimal.ROUND_FLOOR)), ctx, up=False)
    hi = _outward(ctx.exp(_to_decimal(c, digits, decimal.ROUND_CEILING)), ctx, up=True)
    return max(lo, Fraction(0)), hi


def _ln_bounds(q: Fraction, digits: int) -> tuple[Fraction, Fraction]:
    """lo ≤ ln q ≤ hi for q > 0 (exact when q = 1); decimal's ln is correctly rounded."""
    if q == 1:
        return Fraction(0), Fraction(0)
    ctx = _context(digits)
    lo = _outward(ctx.ln(_to_decimal(q, digits, decimal.ROUND_FLOOR)), ctx, up=False)
    hi = _outward(ctx.ln(_to_decimal(q, digits, decimal.ROUND_CEILING)), ctx, up=True)
    return lo, hi


def _exp_of(c: Fraction) -> Enclosure:
    """Enclosure of e^c."""
    return lambda digits: _exp_bounds(c, digits)


#: Exponents below −EXP_FLOOR are bounded by e^−EXP_FLOOR ≈ 10^−869 from above and 0 from below:
#: far below the resolution of :data:`MAX_DIGITS`, and it keeps every rational e^c small.
EXP_FLOOR = 2000


def _ln_enclosure(q: Ratio, digits: int) -> tuple[Fraction, Fraction]:
    """lo ≤ ln q ≤ hi for q > 0."""
    q_lo, q_hi = q.enclose(digits)
    return _ln_bounds(q_lo, digits)[0], _ln_bounds(q_hi, digits)[1]


def _expm1_lower(x: Fraction, digits: int) -> Fraction:
    """A rational ≤ e^x − 1. Near 0 by Taylor with the Lagrange remainder, e^x − 1 = x + x²·e^ξ/2
    (ξ between 0 and x, e^ξ ≥ 1 + min(x, 0)), which keeps its relative precision however small x is."""
    if abs(x) <= Fraction(1, 10 ** (digits // 2)):
        return x + x * x * (1 + min(x, Fraction(0))) / 2
    return Fraction(-1) if x < -EXP_FLOOR else _exp_bounds(x, digits)[0] - 1


def _expm1_upper(x: Fraction, digits: int) -> Fraction:
    """A rational ≥ e^x − 1 (as :func:`_expm1_lower`; e^ξ ≤ 1 + 2·max(x, 0) for |x| ≤ 1)."""
    if abs(x) <= Fraction(1, 10 ** (digits // 2)):
        return x + x * x * (1 + 2 * max(x, Fraction(0))) / 2
    return _exp_bounds(max(x, Fraction(-EXP_FLOOR)), digits)[1] - 1


def _sum_of_powers_at_most_one(weights: list[Ratio], bases: list[Ratio], alpha: Fraction) -> bool | None:
    """Σ_i w_i·b_i^α ≤ 1, for weights w_i > 0 summing to 1, bases b_i ≥ 0 and α > 0: True, False, or
    None if undecided at :data:`MAX_DIGITS` digits.

    Decided as Σ_i w_i·(b_i^α − 1) ≤ 0 with b_i^α − 1 = expm1(α·ln b_i) enclosed, so a tiny α needs
    relative, not 1/α-digit, precision; and a huge α or b_i never builds a huge number: a term with
    ln w_i + α·ln b_i > 0 has w_i·b_i^α > 1 and alone decides (the others are ≥ −(1 − w_i)), and no
    e^x beyond x = 1 − ln w_i is taken (until the precision pins x below it, the sum has no upper bound)."""
    for digits in DIGITS:
        lo = hi = Fraction(0)
        bounded = True
        for w, b in zip(weights, bases):
            w_lo, w_hi = w.enclose(digits)
            if b.num == 0:  # 0^α − 1 = −1
                lo, hi = lo - w_hi, hi - w_lo
                continue
            (lw_lo, lw_hi), (lb_lo, lb_hi) = _ln_enclosure(w, digits), _ln_enclosure(b, digits)
            x_lo, x_hi = alpha * lb_lo, alpha * lb_hi
            if lw_lo + x_lo > 0:
                return False
            e_lo = _expm1_lower(x_lo, digits)
            lo += (w_lo if e_lo >= 0 else w_hi) * e_lo
            if lw_hi + x_hi > 1:
                bounded = False
            elif bounded:
                e_hi = _expm1_upper(x_hi, digits)
                hi += (w_hi if e_hi >= 0 else w_lo) * e_hi
        if lo > 0:
            return False
        if bounded and hi <= 0:
            return True
    return None


def _log_power_mean(weights: list[Ratio], lifts: list[Ratio], power: float) -> float:
    """(Σ_i w_i·l_i^power)^{1/|power|} in floats (for messages; ∞ past the float range), for weights
    summing to 1. Small exponents use ln Σ = log1p(Σ_i w_i·expm1(power·ln l_i)) — exact since Σ w_i = 1,
    and accurate as power → 0, where ln Σ ≈ power·Σ w_i ln l_i — larger ones a log-sum-exp."""
    exponents = [power * lv.log() for lv in lifts]
    if all(e == -math.inf or abs(e) <= 1.0 for e in exponents):
        log_sum = math.log1p(sum(float(w) * math.expm1(e) for w, e in zip(weights, exponents)))
    else:
        terms = [w.log() + e for w, e in zip(weights, exponents)]
        top = max(terms)
        if not math.isfinite(top):
            return top if top > 0 else 0.0
        log_sum = top + math.log(sum(math.exp(t - top) for t in terms))
    try:
        return math.exp(log_sum / abs(power))
    except OverflowError:
        return math.inf


def _enclose(q: Quantity, digits: int) -> tuple[Fraction, Fraction]:
    return q.enclose(digits) if isinstance(q, Ratio) else q(digits)


def _decide(value: Quantity, bound: Quantity) -> bool | None:
    """True if value ≤ bound, False if not, None if still undecided at :data:`MAX_DIGITS` digits."""
    if isinstance(value, Ratio) and isinstance(bound, Ratio):
        return value <= bound
    for digits in DIGITS:
        v_lo, v_hi = _enclose(value, digits)
        b_lo, b_hi = _enclose(bound, digits)
        if b_lo == b_hi and isinstance(value, Ratio):  # an exact bound (e^0 = 1, a rational D)
            return value <= _ratio(b_lo)
        if v_lo == v_hi and isinstance(bound, Ratio):
            return _ratio(v_lo) <= bound
        if v_hi <= b_lo:
            return True
        if v_lo > b_hi:
            return False
    return None


# -- the exact model ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ExactChannel:
    """A channel as exact rationals: row r is ``numerators[r][y] / denominators[r]``."""

    numerators: tuple[tuple[int, ...], ...]
    denominators: tuple[int, ...]

    @classmethod
    def stored(cls, channel: PerturbationChannel) -> ExactChannel:
        """The stored float matrix, each row divided by its exact sum."""
        rows = [exact_integers(row) for row in channel.matrix]
        return cls(tuple(tuple(r) for r in rows), tuple(sum(r) for r in rows))

    @classmethod
    def quantised(cls, channel: PerturbationChannel) -> ExactChannel:
        """What the sampler realises: integer counts over 2⁶³ per row."""
        counts = quantise(channel.matrix)
        return cls(tuple(tuple(int(c) for c in row) for row in counts), (1 << SCALE_BITS,) * counts.shape[0])


# -- checks -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClaimCheck:
    """One constraint of one claim on one version of the channel ("stored" or "quantised")."""

    claim: Claim
    target: str
    constraint: str
    holds: bool
    where: str
    realised: float
    allowed: float
    note: str = ""

    def message(self, kind: str) -> str:
        verdict = "holds" if self.holds else "VIOLATED"
        extra = f" ({self.note})" if self.note else ""
        return (f"{kind} channel ({self.target}): claim {_claim_text(self.claim)}: {self.constraint} "
                f"{verdict} at {self.where}: realised {self.realised:.12g}, allowed {self.allowed:.12g}{extra}")

    def as_dict(self) -> dict[str, Any]:
        return {"claim": self.claim.to_json(), "target": self.target, "constraint": self.constraint,
                "holds": self.holds, "where": self.where, "realised": json_number(self.realised),
                "allowed": json_number(self.allowed), "note": self.note}


def _claim_text(claim: Claim) -> str:
    params = ", ".join(f"{k}={v:g}" for k, v in sorted(claim.params.items()))
    return f"{claim.notion}({params})"


@dataclass(frozen=True)
class VerifyReport:
    """Every constraint of every claim, on the stored and on the quantised channel."""

    kind: str
    checks: tuple[ClaimCheck, ...]

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.holds for c in self.checks)

    @property
    def failures(self) -> tuple[ClaimCheck, ...]:
        return tuple(c for c in self.checks if not c.holds)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "ok": self.ok, "checks": [c.as_dict() for c in self.checks]}


class _Checker:
    """The notions of the module docstring on one exact version of a channel.

    With L the lcm of the row denominators and the joint scaled to integers J ∝ P_SX,
    A(s, y) = Σ_x J(s, x)·W[r(s, x), y]·L and B(x, y) = Σ_s (same) are integers ∝ P_SY and P_XY.
    Then P(y|s) = A(s, y)/a_s, l(s, y) = A(s, y)·T/(a_s·a_y) and P(x|y) ∝ B(x, y), where a_s, a_y are
    the row and column sums of A and T its total.
    """

    def __init__(self, channel: PerturbationChannel, joint: Joint, exact: ExactChannel, target: str) -> None:
        self.channel, self.exact, self.target = channel, exact, target
        lcm = math.lcm(*exact.denominators)
        M = np.empty((len(exact.numerators), channel.n_y), dtype=object)
        for r, (row, den) in enumerate(zip(exact.numerators, exact.denominators)):
            M[r] = [v * (lcm // den) for v in row]
        J = np.array(exact_integers(joint.p), dtype=object).reshape(joint.p.shape)
        weighted = J[:, :, None] * M[row_index(channel, joint.n_s)]
        self.A: list[list[int]] = weighted.sum(axis=1).tolist()
        self.B: list[list[int]] = weighted.sum(axis=0).tolist()
        self.a_s = [sum(row) for row in self.A]
        self.a_y = [sum(col) for col in zip(*self.A)]
        self.total = sum(self.a_s)
        self.live = [y for y in range(channel.n_y) if self.a_y[y] > 0]
        #: (row, output) of a row releasing an output of probability 0 under the joint, if any.
        self.impossible = next(((r, y) for r, row in enumerate(exact.numerators) for y, v in enumerate(row)
                                if v > 0 and self.a_y[y] == 0), None)

    def impossible_output(self, claim: Claim) -> list[ClaimCheck]:
        """A row the joint cannot reach releases an output no reachable row releases (module docstring)."""
        if self.impossible is None:
            return []
        r, y = self.impossible
        value = Ratio(self.exact.numerators[r][y], self.exact.denominators[r])
        n_x = self.channel.n_x
        row = f"row x={r}" if self.channel.inputs == "x" else f"row (s={r // n_x}, x={r % n_x})"
        return [self._check(claim, "Pr(y|row) = 0 where P_Y(y) = 0", f"{row}, {self._y(y)}", False,
                            float(value), 0.0)]

    def _y(self, y: int) -> str:
        """Where-strings name output indices and symbols (state indices), never data."""
        return f"output y={y} (symbol {self.channel.outputs[y]})"

    def _result(self, claim: Claim, constraint: str, where: str, value: Quantity | None, bound: Quantity,
                realised: float, allowed: float) -> ClaimCheck:
        """value ≤ bound, with value None meaning +∞ (violated)."""
        if value is None:
            return self._check(claim, constraint, where, False, math.inf, allowed)
        return self._check(claim, constraint, where, _decide(value, bound), realised, allowed)

    def _check(self, claim: Claim, constraint: str, where: str, verdict: bool | None, realised: float,
               allowed: float) -> ClaimCheck:
        """A decided (or, None, undecided and so refused) constraint."""
        note = "" if verdict is not None else f"undecided at {MAX_DIGITS} digits: refused"
        return ClaimCheck(claim, self.target, constraint, bool(verdict), where, realised, allowed, note)

    def _spread(self, claim: Claim, constraint: str, epsilon: Fraction,
                columns: Iterable[tuple[int, list[Ratio]]], var: str) -> ClaimCheck:
        """max over columns y of max_i c_i / min_i c_i ≤ e^ε (a zero min under a non-zero max: ∞)."""
        worst, where = Ratio(1, 1), "every output"
        for y, col in columns:
            hi, lo = max(col), min(col)
            if hi.num == 0:
                continue
            here = f"{self._y(y)}, {var}={col.index(hi)} vs {var}'={col.index(lo)}"
            if lo.num == 0:
                return self._result(claim, constraint, here, None, Ratio(0, 1), math.inf, float(epsilon))
            ratio = Ratio(hi.num * lo.den, hi.den * lo.num)
            if ratio > worst:
                worst, where = ratio, here
        return self._result(claim, constraint, where, worst, _exp_of(epsilon), worst.log(), float(epsilon))

    def ldp_x(self, claim: Claim, epsilon: Fraction) -> list[ClaimCheck]:
        ex = self.exact
        cols = ((y, [Ratio(row[y], den) for row, den in zip(ex.numerators, ex.denominators)])
                for y in range(self.channel.n_y))
        var = "row x" if self.channel.inputs == "x" else "row s·|X|+x"
        return [self._spread(claim, "log W(y|r)/W(y|r') ≤ ε", epsilon, cols, var)]

    def ldp_s(self, claim: Claim, epsilon: Fraction) -> list[ClaimCheck]:
        cols = ((y, [Ratio(row[y], a) for row, a in zip(self.A, self.a_s)]) for y in self.live)
        return [self._spread(claim, "log P(y|s)/P(y|s') ≤ ε", epsilon, cols, "s")]

    def identifiability(self, claim: Claim, epsilon: Fraction) -> list[ClaimCheck]:
        cols = ((y, [Ratio(row[y], 1) for row in self.B]) for y in self.live)
        return [self._spread(claim, "log P(x|y)/P(x'|y) ≤ ε", epsilon, cols, "x")]

    def _lifts(self) -> dict[int, list[Ratio]]:
        T = self.total
        return {y: [Ratio(row[y] * T, a * self.a_y[y]) for row, a in zip(self.A, self.a_s)] for y in self.live}

    def alip(self, claim: Claim, eps_l: Fraction, eps_u: Fraction) -> list[ClaimCheck]:
        lifts = self._lifts()
        y_hi = max(lifts, key=lambda y: max(lifts[y]))
        y_lo = min(lifts, key=lambda y: min(lifts[y]))
        lam, psi = max(lifts[y_hi]), min(lifts[y_lo])
        where_hi = f"{self._y(y_hi)}, s={lifts[y_hi].index(lam)}"
        where_lo = f"{self._y(y_lo)}, s={lifts[y_lo].index(psi)}"
        upper = self._result(claim, "max-lift log Λ ≤ ε_u", where_hi, lam, _exp_of(eps_u), lam.log(), float(eps_u))
        # Ψ ≥ e^{−ε_l}  ⇔  1/Ψ ≤ e^{ε_l}
        inv = None if psi.num == 0 else Ratio(psi.den, psi.num)
        lower = self._result(claim, "min-lift −log Ψ ≤ ε_l", where_lo, inv, _exp_of(eps_l), -psi.log(), float(eps_l))
        return [upper, lower]

    def lip(self, claim: Claim, epsilon: Fraction) -> list[ClaimCheck]:
        return self.alip(claim, epsilon, epsilon)

    def _lift_measure(self, claim: Claim, threshold: Fraction, power: int, inverse: bool) -> list[ClaimCheck]:
        """max_y Σ_s P_S(s)·|l(s, y) − 1|^power (Λ_ℓ1, Λ_χ²), or with 1/l (Ψ_ℓ1, Ψ_χ²), ≤ threshold;
        exact, over one common denominator per y:

            P_S·|l − 1|^k   = |A·T − a_s·a_y|^k / (T·a_s^(k−1)·a_y^k)
            P_S·|1/l − 1|^k = a_s·|a_s·a_y − A·T|^k / (T·(A·T)^k)
        """
        T = self.total
        m_s = math.lcm(*(a ** (power - 1) for a in self.a_s))  # the a_s share the factor lcm(rows)
        values: dict[int, Ratio | None] = {}
        for y in self.live:
            ay = self.a_y[y]
            col = [row[y] for row in self.A]
            dev = [abs(v * T - a * ay) for v, a in zip(col, self.a_s)]
            if not inverse:
                values[y] = Ratio(sum(d ** power * (m_s // a ** (power - 1)) for d, a in zip(dev, self.a_s)),
                                  T * m_s * ay ** power)
            elif 0 in col:
                values[y] = None
            else:
                m_y = math.lcm(*(v ** power for v in col))
                values[y] = Ratio(sum(a * d ** power * (m_y // v ** power) for d, a, v in zip(dev, self.a_s, col)),
                                  T * T ** power * m_y)
        name = f"{'ℓ1' if power == 1 else 'χ²'}-lift{'-inverse' if inverse else ''}"
        y = next((y for y, v in values.items() if v is None), None)
        if y is None:
            y = max(values, key=lambda k: values[k])  # type: ignore[arg-type, return-value]
        v = values[y]
        return [self._result(claim, f"{name} ≤ threshold", self._y(y), v, _ratio(threshold),
                             math.inf if v is None else float(v), float(threshold))]

    def l1_lift(self, claim: Claim, threshold: Fraction) -> list[ClaimCheck]:
        return self._lift_measure(claim, threshold, 1, inverse=False)

    def l1_lift_inverse(self, claim: Claim, threshold: Fraction) -> list[ClaimCheck]:
        return self._lift_measure(claim, threshold, 1, inverse=True)

    def chi2_lift(self, claim: Claim, threshold: Fraction) -> list[ClaimCheck]:
        return self._lift_measure(claim, threshold, 2, inverse=False)

    def chi2_lift_inverse(self, claim: Claim, threshold: Fraction) -> list[ClaimCheck]:
        return self._lift_measure(claim, threshold, 2, inverse=True)

    def _alpha_measure(self, claim: Claim, alpha: Fraction, threshold: Fraction, inverse: bool) -> list[ClaimCheck]:
        """Λ_α(y) ≤ t ⇔ Σ_s P_S·(l/t)^α ≤ 1;  Ψ_α(y) ≤ t ⇔ Σ_s P_S·(1/(l·t))^α ≤ 1  (α > 0; t = 0 is
        violated: both are positive), decided by :func:`_sum_of_powers_at_most_one`."""
        if alpha <= 0:
            raise ClaimViolation(f"claim {_claim_text(claim)}: alpha must be > 0")
        label = f"α-lift{'-inverse' if inverse else ''} ≤ threshold"
        weights = [Ratio(a, self.total) for a in self.a_s]
        t = _ratio(threshold)
        worst: ClaimCheck | None = None
        for y, ls in self._lifts().items():
            if inverse and any(lv.num == 0 for lv in ls):
                return [self._check(claim, label, self._y(y), False, math.inf, float(threshold))]
            realised = _log_power_mean(weights, ls, float(-alpha if inverse else alpha))
            if t.num == 0:
                verdict: bool | None = False
            else:
                bases = [Ratio(lv.den * t.den, lv.num * t.num) if inverse else Ratio(lv.num * t.den, lv.den * t.num)
                         for lv in ls]
                verdict = _sum_of_powers_at_most_one(weights, bases, alpha)
            check = self._check(claim, label, self._y(y), verdict, realised, float(threshold))
            if not check.holds:
                return [check]
            if worst is None or check.realised > worst.realised:
                worst = check
        assert worst is not None
        return [worst]

    def alpha_lift(self, claim: Claim, alpha: Fraction, threshold: Fraction) -> list[ClaimCheck]:
        return self._alpha_measure(claim, alpha, threshold, inverse=False)

    def alpha_lift_inverse(self, claim: Claim, alpha: Fraction, threshold: Fraction) -> list[ClaimCheck]:
        return self._alpha_measure(claim, alpha, threshold, inverse=True)

    def distortion(self, claim: Claim, D: Fraction) -> list[ClaimCheck]:
        total = sum(map(sum, self.B))
        mask = released_as_itself(self.channel)
        kept = sum(self.B[x][j] for x, j in zip(*np.nonzero(mask)))
        value = Ratio(total - kept, total)
        return [self._result(claim, "Pr(Y ≠ X) ≤ D", "all inputs", value, _ratio(D), float(value), float(D))]


#: The parameters that are privacy levels in nats (bounded by :data:`.model.MAX_LEVEL`).
LEVELS = ("epsilon", "eps_l", "eps_u")

#: notion → (its parameters, in order; the checker method).
NOTIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "ldp_x": (("epsilon",), "ldp_x"),
    "ldp_s": (("epsilon",), "ldp_s"),
    "identifiability": (("epsilon",), "identifiability"),
    "alip": (("eps_l", "eps_u"), "alip"),
    "lip": (("epsilon",), "lip"),
    "log_lift": (("epsilon",), "lip"),
    "l1_lift": (("threshold",), "l1_lift"),
    "l1_lift_inverse": (("threshold",), "l1_lift_inverse"),
    "chi2_lift": (("threshold",), "chi2_lift"),
    "chi2_lift_inverse": (("threshold",), "chi2_lift_inverse"),
    "alpha_lift": (("alpha", "threshold"), "alpha_lift"),
    "alpha_lift_inverse": (("alpha", "threshold"), "alpha_lift_inverse"),
    "distortion": (("D",), "distortion"),
}


def _params(claim: Claim) -> list[Fraction]:
    spec = NOTIONS.get(claim.notion)
    if spec is None:
        raise ClaimViolation(f"claim {claim.notion!r}: unknown notion (known: {', '.join(sorted(NOTIONS))})")
    names = spec[0]
    if set(claim.params) != set(names):
        raise ClaimViolation(f"claim {claim.notion!r}: expected parameters {', '.join(names)}, "
                             f"got {', '.join(sorted(claim.params)) or 'none'}")
    values = []
    for name in names:
        v = claim.params[name]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not _finite_float(v) or v < 0:
            raise ClaimViolation(f"claim {claim.notion!r}: parameter {name} must be a finite number ≥ 0")
        if name in LEVELS and v > MAX_LEVEL:
            raise ClaimViolation(f"claim {claim.notion!r}: {name} = {float(v):g} nats is above {MAX_LEVEL:g}: "
                                 "not a privacy guarantee; refused")
        values.append(Fraction(v))
    return values


def _finite_float(v: int | float) -> bool:
    """A finite float, or an int that converts to one (10**400 does not)."""
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def verify(channel: PerturbationChannel, joint: Joint) -> VerifyReport:
    """Check every claim of ``channel`` under ``joint`` exactly, on the stored and the quantised
    channel. Raises :class:`ClaimViolation` for a malformed claim (unknown notion, wrong or
    negative parameters) and :class:`~.model.ModelInputError` when the alphabets do not match."""
    require_compatible(channel, joint)
    params = [(claim, _params(claim)) for claim in channel.claims]
    checks: list[ClaimCheck] = []
    for target, exact in (("stored", ExactChannel.stored(channel)), ("quantised", ExactChannel.quantised(channel))):
        checker = _Checker(channel, joint, exact, target)
        for claim, values in params:
            checks.extend(checker.impossible_output(claim))
            checks.extend(getattr(checker, NOTIONS[claim.notion][1])(claim, *values))
    return VerifyReport(channel.kind, tuple(checks))


def require_valid(channel: PerturbationChannel, joint: Joint) -> VerifyReport:
    """:func:`verify`, raising :class:`ClaimViolation` naming the first violated constraint (or
    that the channel states no claim at all: a channel without a promise is not used)."""
    if not channel.claims:
        raise ClaimViolation(f"{channel.kind} channel states no claim; refusing an unverifiable channel")
    report = verify(channel, joint)
    if not report.ok:
        raise ClaimViolation(report.failures[0].message(channel.kind))
    return report


def require_designed(channel: PerturbationChannel, joint: Joint) -> PerturbationChannel:
    """What every designer returns its channel through: :func:`require_valid`, with a failure
    raised as :class:`~.model.DesignError` naming the kind. A designer plans in floating point; this
    is the exact check that it never returns a channel breaking its own claims (e.g. when products of
    subnormal probabilities underflow in its float lifts)."""
    try:
        require_valid(channel, joint)
    except ClaimViolation as exc:
        raise DesignError(f"{channel.kind}: the designed channel fails exact verification, refusing it: "
                          f"{exc}") from None
    return channel
