"""Channel tables that the sampler realises exactly, and exact checks of their privacy levels.

The paper-001 mechanisms are *tight*: randomized response keeps a row with probability exactly
e^ε times that of each other value, and E_i's posteriors hit e^ε exactly. Stored as float64 and
drawn with 63-bit integer thresholds, such a table is only approximately the designed one, and the
tight ratios can end up a hair above e^ε. The designers in :mod:`.randomized_response` and
:mod:`.identifiability` therefore build every table as **integer units of 2⁻⁵²** per entry with
each row summing to exactly 2⁵² units:

* every entry u / 2⁵² (u ≤ 2⁵²) is an exact float64, every partial sum of a row is exact, and
  scaling by 2⁶³ is exact — so the sampler's quantisation to counts over 2⁶³
  (:func:`streamguard.perturbation.sampler.quantise`) reproduces the stored table exactly, and
  ``verify`` checks the same numbers in its stored and quantised passes;
* the levels of the table can be computed exactly in integers/rationals here, at design time,
  and a candidate that breaks its requested budget is rejected before it is returned.

Rigorous e^ε bounds come from :mod:`decimal`, whose ``exp`` is correctly rounded; stepping one
unit in the last place outward encloses the true value.
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

#: Entries are multiples of 2^-GRID_BITS; a row sums to exactly ONE units.
GRID_BITS = 52
ONE = 1 << GRID_BITS

#: A ratio level: an exact rational, or ``math.inf`` (positive over zero).
Ratio = Fraction | float

_DIGITS = 60


def round_rows(rows: Sequence[Sequence[Fraction]], diagonal: str = "nearest") -> NDArray[np.int64] | None:
    """Round each exact row r (non-negative rationals summing to 1) to integer units summing to ONE.

    ``"nearest"``: ⌊p·ONE⌋ each, then one more unit to the entries with the largest fractional
    parts (ties to the lower index). ``"up"``: every off-diagonal entry ⌊·⌋ and the diagonal entry
    W(r|r) takes the rest — it only grows, so the distortion only goes down. ``"down"``: every
    off-diagonal entry ⌈·⌉ and the diagonal the rest — keep-to-change ratios only go down.
    A row whose diagonal is exactly 0 is rounded "nearest". An exact zero always stays zero.
    None when the diagonal would go negative.
    """
    if diagonal not in ("nearest", "up", "down"):
        raise ValueError(f"round_rows: diagonal must be 'nearest', 'up' or 'down', got {diagonal!r}")
    out = np.empty((len(rows), len(rows[0])), dtype=np.int64)
    for r, row in enumerate(rows):
        if sum(row) != 1 or min(row) < 0:
            raise ValueError("round_rows: an exact row must be non-negative and sum to 1")
        scaled = [v * ONE for v in row]
        if diagonal == "nearest" or row[r] == 0:
            units = [math.floor(v) for v in scaled]
            short = ONE - sum(units)
            for j in sorted(range(len(row)), key=lambda j: (-(scaled[j] - units[j]), j))[:short]:
                units[j] += 1
        else:
            step = math.floor if diagonal == "up" else math.ceil
            units = [step(v) for v in scaled]
            units[r] = ONE - (sum(units) - units[r])
            if units[r] < 0:
                return None
        out[r] = units
    return out


def to_matrix(units: NDArray[np.int64]) -> NDArray[np.float64]:
    """The float64 table u / 2⁵² (exact)."""
    return units.astype(np.float64) / float(ONE)


def exp_lower(eps: float) -> Fraction:
    """A rational L with L ≤ e^ε (exactly 1 at ε = 0)."""
    if eps == 0:
        return Fraction(1)
    ctx = decimal.Context(prec=_DIGITS, rounding=decimal.ROUND_HALF_EVEN,
                          Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)
    return Fraction(ctx.exp(decimal.Decimal(eps)).next_minus(ctx))


def within(ratio: Ratio, eps: float) -> bool:
    """True iff ratio ≤ e^ε is *proved* (ε = ∞ allows everything; a ratio of 1 needs only ε ≥ 0)."""
    if eps == math.inf:
        return True
    if ratio == 1:
        return eps >= 0
    return ratio != math.inf and ratio <= exp_lower(eps)


def log_upper(ratio: Ratio) -> float:
    """A float ε with e^ε ≥ ratio, proved, within a few ulps of ln(ratio) (∞ for an infinite ratio)."""
    if ratio == math.inf:
        return math.inf
    assert isinstance(ratio, Fraction) and ratio >= 1
    if ratio == 1:
        return 0.0
    eps = math.log1p(float(ratio - 1)) if ratio < 2 else math.log(ratio.numerator) - math.log(ratio.denominator)
    while not within(ratio, eps):
        eps = max(math.nextafter(eps, math.inf), eps * (1.0 + 2.0**-50))
    return eps


def _spread(column: list[Fraction] | list[int]) -> Ratio | None:
    """max/min of a column; None if the column is all zero (the output never occurs)."""
    hi = max(column)
    if hi == 0:
        return None
    lo = min(column)
    return math.inf if lo == 0 else Fraction(hi) / Fraction(lo)


def _worst(spreads: list[Ratio | None]) -> Ratio:
    live = [s for s in spreads if s is not None]
    return max(live) if live else Fraction(1)


def ldp_ratio(units: NDArray[np.int64]) -> Ratio:
    """max_y max_{x,x'} W(y|x)/W(y|x') of the table (notes/001 Def. 3 per record)."""
    cols = units.T.tolist()
    return _worst([_spread(c) for c in cols])


def identifiability_ratio(units: NDArray[np.int64], prior: Sequence[Fraction]) -> Ratio:
    """max over outputs y with P(y) > 0 of max_{x,x'} P(x)W(y|x) / (P(x')W(y|x')) (notes/001 Def. 2,
    one row per record: every pair x ≠ x' is a neighbour pair)."""
    cols = units.T.tolist()
    return _worst([_spread([p * u for p, u in zip(prior, col, strict=True)]) for col in cols])


def distortion(units: NDArray[np.int64], prior: Sequence[Fraction] | None = None) -> Fraction:
    """Expected Hamming distortion Σ_x P(x)(1 − W(x|x)); without a prior, the worst input's
    max_x (1 − W(x|x)), which bounds it under every prior."""
    change = [Fraction(ONE - int(units[x, x]), ONE) for x in range(units.shape[0])]
    if prior is None:
        return max(change)
    return sum((p * c for p, c in zip(prior, change, strict=True)), Fraction(0))


def float_at_least(value: Fraction) -> float:
    """The smallest float ≥ value."""
    f = float(value)
    return f if Fraction(f) >= value else math.nextafter(f, math.inf)


def exact_prior(prior: NDArray[np.float64]) -> list[Fraction]:
    """The prior's floats as exact rationals, divided by their exact sum (a float prior may sum to
    1 ± 1e−16; ``verify`` normalises the joint the same way)."""
    values = [Fraction(float(v)) for v in prior]
    total = sum(values)
    return [v / total for v in values]
