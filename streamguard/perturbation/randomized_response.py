"""Paper 001's DP-optimal mechanism E_d: per-row m-ary randomized response (notes/001 §6.1).

A database of n rows over an m-letter alphabet is released row by row. E_d keeps each row with
probability 1−δ = e^ε/(e^ε+m−1) and otherwise moves it to each of the other m−1 values with
probability c = 1/(e^ε+m−1) (k-RR; the exponential mechanism with score −d, paper eq. (27)). It is
exactly ε-DP (Lemma 5) with expected Hamming distortion h(ε) = n·δ for every prior, and it is
DP-optimal: ε_d*(D) = h⁻¹(D) for D < h(ε̃_X) (notes/001 §6.3), within ε_X otherwise (Thm 1b).

    h(ε)   = n(m−1) / (e^ε + m − 1)           decreasing; h(0) = n(m−1)/m, h(∞) = 0     (32)
    h⁻¹(D) = ln(n/D − 1) + ln(m−1)             h⁻¹(0) = ∞; negative for D > n(m−1)/m      (17)

The channel of :func:`rr_channel` is one row (a record = one symbol, n = 1, so D = δ); a record of
n rows applies it n times (distortion n·δ, DP level ε under replacement adjacency).

Exactness (notes/001 §11): the table is built in units of 2⁻⁵² (:mod:`.dyadic`) so that the
sampler realises it exactly, and the requested budget is checked exactly before the channel is
returned. With ε given, c is rounded *up* (keep-to-change ratio ≤ e^ε, proved); with D given, c is
rounded *down* (distortion ≤ D, exactly). The other quantity is then stated as the exact realised
level rounded outward, so it may differ from h / h⁻¹ of the request in the 16th digit.

Decisions: D = 0 (or ε = ∞) is the identity channel, which releases raw values; it is refused
unless ``allow_identity=True``. For δ ≥ (m−1)/m (or ε = 0) every row of the table is the same
distribution, so the output is independent of the input (0-DP); notes/001 §7.1 calls this ε = 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

from . import dyadic
from .model import Claim, DesignError, PerturbationChannel, require_level

#: Relative slacks tried in turn when a tight design rounds onto the wrong side of its budget.
SLACKS = (0.0, 1e-13, 1e-11, 1e-9, 1e-7, 1e-5)


def _check_alphabet(m: int) -> int:
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 2:
        raise DesignError(f"alphabet size must be an integer ≥ 2, got {m!r}")
    return int(m)


def _check_rows(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise DesignError(f"number of rows must be an integer ≥ 1, got {n!r}")
    return int(n)


def check_epsilon(eps: float) -> float:
    """A privacy budget: a number ≥ 0 (∞ allowed), not NaN."""
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.floating, np.integer)) or math.isnan(eps) \
            or eps < 0:
        raise DesignError(f"epsilon must be a number ≥ 0, got {eps!r}")
    return float(eps)


def check_distortion(D: float, n: int = 1) -> float:
    """A distortion budget: expected Hamming distance in [0, n]."""
    if isinstance(D, bool) or not isinstance(D, (int, float, np.floating, np.integer)) or not (0 <= D <= n):
        raise DesignError(f"distortion D must be a number in [0, {n}] (expected changed rows), got {D!r}")
    return float(D)


def h(eps: float, m: int, n: int = 1) -> float:
    """h(ε) = n(m−1)/(e^ε+m−1): the least expected Hamming distortion at identifiability level ε
    (Lemma 1), attained by E_d and E_i. Computed through t = e^{−ε}, so a large ε never overflows."""
    m, n = _check_alphabet(m), _check_rows(n)
    if math.isnan(eps):
        raise DesignError("epsilon must not be NaN")
    if eps == math.inf:
        return 0.0
    if eps < 0:
        return n * (m - 1) / (math.exp(eps) + m - 1)
    t = math.exp(-eps)
    return n * (m - 1) * t / (1.0 + (m - 1) * t)


def h_inv(D: float, m: int, n: int = 1) -> float:
    """h⁻¹(D) = ln(1−δ) − ln δ + ln(m−1) with δ = D/n (eq. (17); log1p form, notes/001 §11).

    +∞ at D = 0; negative for D > n(m−1)/m (then the DP bound is 0, notes/001 §9 item 7);
    −∞ at D = n."""
    m, n = _check_alphabet(m), _check_rows(n)
    D = check_distortion(D, n)
    delta = D / n
    if delta == 0:
        return math.inf
    if delta == 1:
        return -math.inf
    return math.log1p(-delta) - math.log(delta) + math.log(m - 1)


# -- tables in units of 2^-52 ----------------------------------------------------------------------


def rr_units(m: int, other: int) -> NDArray[np.int64]:
    """The RR table with ``other`` units on each changed value and the rest on the kept one."""
    keep = dyadic.ONE - (m - 1) * other
    if other < 0 or keep < 0:
        raise ValueError("rr_units: per-value change probability out of range")
    units = np.full((m, m), other, dtype=np.int64)
    np.fill_diagonal(units, keep)
    return units


def constant_units(m: int) -> NDArray[np.int64]:
    """Every row the same (near-uniform) distribution: output independent of input, exactly 0-DP.
    The remainder units go to the first entries, so 1 − W(x|x) ≤ 1 − ⌊2⁵²/m⌋/2⁵²."""
    base, extra = divmod(dyadic.ONE, m)
    row = np.full(m, base, dtype=np.int64)
    row[:extra] += 1
    return np.tile(row, (m, 1))


def rr_candidates(m: int, eps: float) -> Iterator[NDArray[np.int64]]:
    """RR tables at ε·(1 − s) for the slacks s of :data:`SLACKS` (c rounded up, and at least one unit:
    from ε ≈ 36 on, where c < 2⁻⁵², that is the near-identity table with ratio 2⁵² − m + 1 — kept even
    where e^{−ε} underflows to 0), then the constant table: the caller keeps the first one whose exact
    level meets its budget."""
    for slack in SLACKS:
        e = eps * (1.0 - slack)
        if eps > 0 and e > 0:
            t = math.exp(-e)
            c = Fraction(t / (1.0 + (m - 1) * t))
            yield rr_units(m, min(max(math.ceil(c * dyadic.ONE), 1), dyadic.ONE // m))
    yield constant_units(m)


def first_certified(candidates: Iterator[NDArray[np.int64]],
                    ok: Callable[[NDArray[np.int64]], bool]) -> NDArray[np.int64] | None:
    """The first candidate table that passes the exact check ``ok``."""
    return next((u for u in candidates if ok(u)), None)


def rr_distortion_units(m: int, D: float) -> NDArray[np.int64]:
    """The RR table with worst-input distortion ≤ D exactly: c = D/(m−1) rounded down; for
    D ≥ (m−1)/m the constant table (0-DP) when it fits (it fails only within 2⁻⁵² of (m−1)/m)."""
    if Fraction(D) >= Fraction(m - 1, m):
        units = constant_units(m)
        if dyadic.distortion(units) <= Fraction(D):
            return units
    other = math.floor(Fraction(D) / (m - 1) * dyadic.ONE)
    return rr_units(m, min(other, dyadic.ONE // (m - 1)))


def _identity_refused(allow_identity: bool, what: str) -> None:
    if not allow_identity:
        raise DesignError(f"{what} gives the identity channel (raw values released, ε = ∞); "
                          "pass allow_identity=True to build it anyway")


def rr_channel(n_x: int, *, epsilon: float | None = None, distortion: float | None = None,
               allow_identity: bool = False) -> PerturbationChannel:
    """E_d for one row over n_x values (kind "rr"): exactly one of ``epsilon`` / ``distortion``.

    Claims ``ldp_x`` ε and ``distortion`` D (worst input, hence under every prior). The requested
    budget is met exactly; the other is the realised level rounded outward (module docstring).
    Raises :class:`DesignError` for a bad budget (a finite ε above :data:`.model.MAX_LEVEL` included)
    or for the identity channel without ``allow_identity``.
    """
    m = _check_alphabet(n_x)
    if (epsilon is None) == (distortion is None):
        raise DesignError("rr_channel: give exactly one of epsilon and distortion")
    if epsilon is not None:
        eps = require_level(check_epsilon(epsilon))
        if eps == math.inf:
            _identity_refused(allow_identity, "epsilon = inf")
            units = rr_units(m, 0)
        else:
            units = first_certified(rr_candidates(m, eps), lambda u: dyadic.within(dyadic.ldp_ratio(u), eps))
            assert units is not None  # the constant table is 0-DP, within every ε ≥ 0
        eps_claim, d_claim = eps, dyadic.float_at_least(dyadic.distortion(units))
        budget = "epsilon"
    else:
        D = check_distortion(distortion)  # type: ignore[arg-type]
        units = rr_distortion_units(m, D)
        if units[0, 0] == dyadic.ONE:
            _identity_refused(allow_identity, f"distortion D = {D!r}")
        eps_claim, d_claim = dyadic.log_upper(dyadic.ldp_ratio(units)), D
        budget = "distortion"
    return PerturbationChannel(
        kind="rr", matrix=dyadic.to_matrix(units), inputs="x", n_s=m, n_x=m, outputs=tuple(range(m)),
        claims=(Claim("ldp_x", {"epsilon": eps_claim}), Claim("distortion", {"D": d_claim})),
        params={"m": m, "budget": budget, "epsilon": eps_claim, "distortion": d_claim},
    )
