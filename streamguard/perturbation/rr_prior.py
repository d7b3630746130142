"""Paper 001's prior-aware mechanism E_i (kind "rr-prior"), identifiability- and MI-optimal.

For one row over m values with prior p (full support) and per-row change probability δ,
c = δ/(m−1) (notes/001 §6.2, per-row form; paper eq. (26)):

    q(b)   = (p(b) − c) / (1 − m·c)                 the output law; E_i exists iff q ≥ 0,
                                                     i.e. c ≤ min p, i.e. D ≤ h(ε̃_X) = (m−1)·min p
    W(b|a) = (1−δ)·q(a)/p(a)   if b = a
           =   c  ·q(b)/p(a)   if b ≠ a              posterior P(X=a | Y=b) = k_ε(a, b)

so the posterior is the RR kernel itself: E_i is exactly ε-identifiable with ε = h⁻¹(D) — the
least possible at distortion D for every prior (Thm 1a) — and it attains R(D), the least I(X;Y)
(Thm 2). Its DP level is ε + ε_X when q > 0 (§6.2, claimed as the exact realised level).

**Past the threshold** (D > h(ε̃_X), or ε < ε̃_X) E_i does not exist. ``fallback="rr"`` (the
default) then returns E_d (notes/001 §11 option (a)), with ``params["fallback_used"] = True`` and
claims that say what it really guarantees:

* distortion budget D: E_d at ε = h⁻¹(D) — ε-DP, identifiability ε + ε_X (claimed as realised);
* identifiability budget ε: E_d at DP level ε − ε_X, so the *requested* identifiability ε still
  holds (E_d's identifiability is its DP level + ε_X, §6.1) at distortion h(ε − ε_X) > h(ε).
  Below ε_X no mechanism is ε-identifiable (Lemma 3): :class:`DesignError`.

``fallback=None`` raises :class:`DesignError` instead. (For identifiability alone, E_i at ε̃_X —
distortion h(ε̃_X) < D — beats E_d whenever ε̃_X < h⁻¹(D) + ε_X; see
:func:`.identifiability.eps_i_star`. E_d is the fallback because its DP guarantee is prior-free.)

Exactness: the table is the exact rational E_i for a rational δ, rounded to units of 2⁻⁵²
(:mod:`.dyadic`), so the sampler realises it exactly; the requested budget is checked exactly
and, where rounding lands on the wrong side of a tight ratio, the design is retried with a small
slack (:data:`.randomized_response.SLACKS`). Near the threshold the entries of a vanishing output
are too small to round safely, so E_i *at* the threshold (c = min p exactly: that output is never
released, and its column is exactly zero) is a candidate too. A distortion budget takes the
candidate with the least realised identifiability. An identifiability budget within the slack of
ε̃_X (in particular ε = ε̃_X exactly, where every E_i ratio is tight) may not be certifiable after
rounding; it then gets the fallback.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from fractions import Fraction
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import dyadic
from .identifiability import eps_tilde_x, eps_x, prior_tensor
from .model import Claim, DesignError, Joint, PerturbationChannel, require_level
from .randomized_response import (
    SLACKS,
    check_distortion,
    check_epsilon,
    first_certified,
    h,
    rr_candidates,
    rr_distortion_units,
)

Fallback = Literal["rr"] | None

#: A non-degenerate E_i's realised identifiability stays this close (in ε) to its design ε; near
#: the threshold a vanishing output's entries are ~1e−8 and rounding to 2⁻⁵² moves them by ~1e−8.
_DEGENERACY_TOL = 1e-6


def _exact_e_i(p: list[Fraction], delta: Fraction) -> list[list[Fraction]] | None:
    """The exact rational E_i table at change probability δ, or None when q has a negative entry."""
    m = len(p)
    c = delta / (m - 1)
    alpha = 1 - m * c
    if alpha == 0 and len(set(p)) == 1:
        return [[Fraction(1, m)] * m for _ in range(m)]  # uniform prior at ε = 0: E_i = E_d = constant
    if alpha <= 0:
        return None
    q = [(pb - c) / alpha for pb in p]
    if min(q) < 0:
        return None
    return [[q[b] * ((1 - delta) if b == a else c) / p[a] for b in range(m)] for a in range(m)]


def _e_i_units(p: list[Fraction], delta: Fraction, diagonal: str) -> NDArray[np.int64] | None:
    rows = _exact_e_i(p, delta)
    return None if rows is None else dyadic.round_rows(rows, diagonal)


def _delta_of(eps: float, m: int) -> Fraction:
    t = math.exp(-eps)
    return Fraction((m - 1) * t / (1.0 + (m - 1) * t))


def _log_ratio_of(delta: Fraction, m: int) -> float:
    """The design ε = ln((1−δ)(m−1)/δ) of a rational δ."""
    return math.log((1 - delta) * (m - 1) / delta)


def _prior_vector(prior: ArrayLike | Joint) -> NDArray[np.float64]:
    p = prior.p_x if isinstance(prior, Joint) else prior
    vec = prior_tensor(p)
    if vec.ndim != 1:
        raise DesignError("rr_prior_channel designs one row per record: give a prior vector over the m values "
                          "(a Markov prior over a record of n rows is MarkovPriorSampler's job)")
    return vec


def _e_i_by_epsilon(p: list[Fraction], m: int, eps: float) -> NDArray[np.int64] | None:
    """E_i with identifiability ≤ ε proved: design at ε(1 − slack), then at the threshold."""
    def candidates() -> Iterator[NDArray[np.int64]]:
        for slack in SLACKS:
            units = _e_i_units(p, _delta_of(eps * (1.0 - slack), m), "down")
            if units is None:
                break  # less slack only moves closer to the threshold
            yield units
        threshold = _e_i_units(p, min(p) * (m - 1), "down")
        if threshold is not None:
            yield threshold

    return first_certified(candidates(), lambda u: dyadic.within(dyadic.identifiability_ratio(u, p), eps))


def _e_i_by_distortion(p: list[Fraction], m: int, D: float) -> NDArray[np.int64] | None:
    """E_i with distortion ≤ D exactly, the least realised identifiability among the designs at
    D(1 − slack) and at the threshold that round without degenerating (realised identifiability
    within 1e-6 of the design ε); None when D is past the threshold (exact test c ≤ min p)."""
    delta = Fraction(D)
    if _exact_e_i(p, delta) is None:
        return None
    best: tuple[dyadic.Ratio, NDArray[np.int64]] | None = None
    for design in [delta * Fraction(1.0 - s) for s in SLACKS] + [min(p) * (m - 1)]:
        if not 0 < design <= delta:
            continue
        units = _e_i_units(p, design, "up")
        if units is None or dyadic.distortion(units, p) > delta:
            continue
        realised = dyadic.identifiability_ratio(units, p)
        if dyadic.within(realised, _log_ratio_of(design, m) + _DEGENERACY_TOL) and (best is None or realised < best[0]):
            best = (realised, units)
    return None if best is None else best[1]


def rr_prior_channel(prior: ArrayLike | Joint, *, epsilon: float | None = None, distortion: float | None = None,
                     fallback: Fallback = "rr") -> PerturbationChannel:
    """E_i for one row with the given prior (a vector over m values, or a prior-only Joint; for a
    general Joint its P_X): exactly one of ``epsilon`` (identifiability) or ``distortion`` (D).

    Claims ``identifiability``, ``ldp_x`` and ``distortion``; the requested one is met exactly,
    the others are the exact realised levels rounded outward. Past the threshold see the module
    docstring (``fallback``). Raises :class:`DesignError` for bad budgets (a finite ε above
    :data:`.model.MAX_LEVEL` included), an impossible ε < ε_X,
    or past the threshold with ``fallback=None``; ModelInputError for a malformed prior.
    """
    if fallback not in ("rr", None):
        raise DesignError(f"fallback must be 'rr' or None, got {fallback!r}")
    if (epsilon is None) == (distortion is None):
        raise DesignError("rr_prior_channel: give exactly one of epsilon and distortion")
    vec = _prior_vector(prior)
    m = vec.size
    p = dyadic.exact_prior(vec)
    ex, et = eps_x(vec), eps_tilde_x(vec)
    threshold = h(et, m)
    if epsilon is not None:
        eps = require_level(check_epsilon(epsilon))
        if eps == math.inf:
            raise DesignError("epsilon = inf gives the identity channel (raw values released); use a finite budget")
        units = _e_i_by_epsilon(p, m, eps)
        used = units is None
        if used:
            if fallback is None:
                raise DesignError(f"E_i needs identifiability ε ≥ ε̃_X = {et:.6g} for this prior, got ε = {eps:.6g}")
            if not dyadic.within(Fraction(float(vec.max())) / Fraction(float(vec.min())), eps):
                raise DesignError(f"no mechanism is ε-identifiable below ε_X = {ex:.6g} "
                                  f"(paper 001 Lemma 3), got ε = {eps:.6g}")
            units = first_certified(rr_candidates(m, max(eps - ex, 0.0)),
                                    lambda u: dyadic.within(dyadic.identifiability_ratio(u, p), eps))
            if units is None:
                raise DesignError(f"ε = {eps:.17g} is too close to ε_X to certify after rounding")
        ident = eps
        d_claim = dyadic.float_at_least(dyadic.distortion(units, p))
        budget = "epsilon"
    else:
        D = check_distortion(distortion)  # type: ignore[arg-type]
        if D == 0:
            raise DesignError("distortion D = 0 gives the identity channel (raw values released)")
        units = _e_i_by_distortion(p, m, D)
        used = units is None
        if used:
            if fallback is None:
                raise DesignError(f"E_i needs distortion D ≤ h(ε̃_X) = {threshold:.6g} for this prior, got D = {D:.6g}")
            units = rr_distortion_units(m, D)
        ident = dyadic.log_upper(dyadic.identifiability_ratio(units, p))
        d_claim = D
        budget = "distortion"
    ldp = dyadic.log_upper(dyadic.ldp_ratio(units))
    return PerturbationChannel(
        kind="rr-prior", matrix=dyadic.to_matrix(units), inputs="x", n_s=m, n_x=m, outputs=tuple(range(m)),
        claims=(Claim("identifiability", {"epsilon": ident}), Claim("ldp_x", {"epsilon": ldp}),
                Claim("distortion", {"D": d_claim})),
        params={"m": m, "budget": budget, "mechanism": "E_d" if used else "E_i", "fallback_used": used,
                "epsilon": ident, "distortion": d_claim, "ldp_x": ldp, "eps_x": ex, "eps_tilde_x": et,
                "threshold_distortion": threshold},
    )
