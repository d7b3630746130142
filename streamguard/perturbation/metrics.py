"""Leakage and utility of a per-record channel under a joint law P(S, X), in floating point (fast).

Everything here is a number to *report*; whether a channel keeps its promises is decided exactly,
in rational arithmetic, by :mod:`streamguard.perturbation.verify`. Logs are natural (nats).

Write W for the channel, P_SX for the joint, and r(s, x) for the channel row read at (s, x): row x
for Markov kinds (``inputs == "x"``), row s·|X| + x for non-Markov kinds (``inputs == "sx"``).
The laws everything is computed from are

    P_SY(s, y) = Σ_x P_SX(s, x) · W[r(s, x), y]        P_XY(x, y) = Σ_s P_SX(s, x) · W[r(s, x), y]

(for Markov kinds P_XY(x, y) = P_X(x) W(y|x); for non-Markov kinds it is the joint of X and Y
through the effective channel, notes/004 eq. (9)). The metrics of :func:`channel_metrics`:

``ldp_x``
    classical LDP of the channel w.r.t. its input: max_y log max_r W(r, y) / min_r W(r, y) over the
    input rows r (notes/001 §7.6 ``dp_level``). For non-Markov kinds the input is the pair (s, x),
    so this is LDP w.r.t. the pair (non-Markov kernels have zeros: usually ∞, notes/004 §7).
``ldp_s``
    LDP w.r.t. S (notes/003 Def. 2, notes/004 eq. (1)): max_y log max_s P(y|s) / min_s P(y|s),
    with P_{Y|S} = :meth:`PerturbationChannel.effective`.
``identifiability``
    max over y with P_Y(y) > 0 of log max_x P(x|y) / min_x P(x|y) (notes/001 Def. 2 with n = 1,
    §7.6 ``ident_level``: every pair x ≠ x' is a neighbour pair).
``max_lift``, ``min_lift``
    Λ = max l(s, y) and Ψ = min l(s, y) over s and y with P_Y(y) > 0, where
    l(s, y) = P_SY(s, y) / (P_S(s) P_Y(y)) (notes/003 eq. (1)–(2)).
``log_lift``
    max |log l(s, y)| = max(log Λ, −log Ψ) (notes/004 eq. (2); equal to the LIP level).
``alip_eps_u``, ``alip_eps_l``
    the realised ALIP budgets ε_u* = log Λ and ε_l* = −log Ψ (notes/003 §3.7); both ≥ 0, since
    Σ_s P(s)·l(s, y) = 1 forces Λ ≥ 1 ≥ Ψ (a float just past 1 is clamped).
``mi_sy``, ``mi_xy``
    I(S; Y) and I(X; Y) in nats (0·log 0 = 0). ``h_x`` = H(X), so NMI = mi_xy / h_x.
``distortion``
    expected Hamming distortion Pr(released symbol ≠ X). Convention for merged outputs: an output
    symbol equals x only when it *is* x (an int x, or the one-element group (x,)); releasing a
    merged group of two or more symbols counts as a distortion even if it contains x, because the
    consumer cannot tell which member was read.

A ratio with a zero denominator and a non-zero numerator is ``math.inf``; :func:`metrics_json`
encodes it as the string ``"inf"`` (JSON has no infinity).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..support.json_numbers import json_number
from .model import Joint, ModelInputError, PerturbationChannel

#: The keys of :func:`channel_metrics`, in report order.
METRIC_KEYS = ("ldp_x", "ldp_s", "identifiability", "max_lift", "min_lift", "log_lift", "alip_eps_l",
               "alip_eps_u", "mi_sy", "mi_xy", "h_x", "distortion")


def require_compatible(channel: PerturbationChannel, joint: Joint) -> None:
    """Raise :class:`ModelInputError` unless the channel's input alphabet matches the joint's."""
    if channel.n_x != joint.n_x:
        raise ModelInputError(f"channel reads |X| = {channel.n_x} states, the joint has |X| = {joint.n_x}")
    if channel.inputs == "sx" and channel.n_s != joint.n_s:
        raise ModelInputError(f"channel reads |S| = {channel.n_s} values, the joint has |S| = {joint.n_s}")


def row_index(channel: PerturbationChannel, n_s: int) -> NDArray[np.int64]:
    """(|S|, |X|) array of the channel row read at (s, x): x, or s·|X| + x for ``inputs == "sx"``."""
    s = np.arange(n_s)[:, None]
    x = np.arange(channel.n_x)[None, :]
    if channel.inputs == "x":
        return np.broadcast_to(x, (n_s, channel.n_x)).copy()
    return s * channel.n_x + x


def released_as_itself(channel: PerturbationChannel) -> NDArray[np.bool_]:
    """(|X|, |Y|) mask: output j *is* x (the symbol x, or the one-element group (x,))."""
    mask = np.zeros((channel.n_x, channel.n_y), dtype=bool)
    for j, sym in enumerate(channel.outputs):
        x = sym if isinstance(sym, int) else (sym[0] if len(sym) == 1 else None)
        if x is not None and 0 <= x < channel.n_x:
            mask[x, j] = True
    return mask


def sy_xy_joints(channel: PerturbationChannel, joint: Joint) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(P_SY, P_XY) of the module docstring, as float arrays."""
    require_compatible(channel, joint)
    W = channel.matrix[row_index(channel, joint.n_s)]  # (|S|, |X|, |Y|): W[r(s, x), y]
    weighted = joint.p[:, :, None] * W
    return weighted.sum(axis=1), weighted.sum(axis=0)


def _log_spread(columns: NDArray[np.float64]) -> float:
    """max over columns with a non-zero entry of log(max / min) down the column (∞ if min is 0)."""
    live = columns[:, columns.max(axis=0) > 0]
    if live.size == 0:
        return 0.0
    lo, hi = live.min(axis=0), live.max(axis=0)
    if np.any(lo == 0):
        return math.inf
    return float(np.max(np.log(hi) - np.log(lo)))


def _mutual_information(pab: NDArray[np.float64]) -> float:
    """Σ P(a, b)·(log P(a, b) − log P(a) − log P(b)): logs of the marginals taken apart, since the
    product P(a)·P(b) of two small marginals can underflow to 0."""
    pa, pb = pab.sum(axis=1), pab.sum(axis=0)
    a, b = np.nonzero(pab > 0)
    terms = pab[a, b]
    return float(np.sum(terms * (np.log(terms) - np.log(pa[a]) - np.log(pb[b]))))


def channel_metrics(channel: PerturbationChannel, joint: Joint) -> dict[str, float]:
    """All the metrics of the module docstring (floats; ``math.inf`` where a ratio is unbounded)."""
    psy, pxy = sy_xy_joints(channel, joint)
    py = psy.sum(axis=0)
    live = py > 0
    ps = psy.sum(axis=1)
    lift = psy[:, live] / ps[:, None] / py[None, live]  # not ÷ (P_S·P_Y): that product can underflow
    lam_max, psi_min = float(lift.max()), float(lift.min())
    # Σ_s P(s)·l(s, y) = 1 for every live y, so Λ ≥ 1 ≥ Ψ exactly: a float Λ of 1 − 2⁻⁵² (or Ψ
    # of 1 + 2⁻⁵²) is round-off, and the realised budgets are ≥ 0
    eps_u = max(0.0, math.log(lam_max))
    eps_l = math.inf if psi_min == 0 else max(0.0, -math.log(psi_min))
    px = pxy.sum(axis=1)
    kept = float(pxy[released_as_itself(channel)].sum())
    return {
        "ldp_x": _log_spread(channel.matrix),
        "ldp_s": _log_spread(psy / ps[:, None]),
        "identifiability": _log_spread(pxy[:, live]),
        "max_lift": lam_max,
        "min_lift": psi_min,
        "log_lift": max(eps_u, eps_l),
        "alip_eps_l": eps_l,
        "alip_eps_u": eps_u,
        "mi_sy": _mutual_information(psy),
        "mi_xy": _mutual_information(pxy),
        "h_x": float(-np.sum(px[px > 0] * np.log(px[px > 0]))),
        "distortion": min(1.0, max(0.0, 1.0 - kept / float(pxy.sum()))),
    }


def metrics_json(metrics: dict[str, float]) -> dict[str, Any]:
    """The metrics with ``math.inf`` written as the string ``"inf"``; :class:`ModelInputError` for a
    metric that is NaN (JSON cannot hold it, and no metric of a valid channel and joint is NaN)."""
    nan = next((k for k, v in metrics.items() if math.isnan(v)), None)
    if nan is not None:
        raise ModelInputError(f"metrics: {nan} is not a number (NaN)")
    return {k: json_number(v) for k, v in metrics.items()}


def _float(v: int | float) -> float:
    """``float(v)``, or ∞ for an int too large for a float."""
    try:
        return float(v)
    except OverflowError:
        return math.inf


def metrics_from_json(doc: Any) -> dict[str, float]:
    """Inverse of :func:`metrics_json`; raises :class:`ModelInputError` on anything but numbers / "inf"."""
    if not isinstance(doc, dict):
        raise ModelInputError("metrics: expected an object")
    out: dict[str, float] = {}
    for k, v in doc.items():
        if v == "inf":
            out[str(k)] = math.inf
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(number := _float(v)):
            out[str(k)] = number
        else:
            raise ModelInputError(f"metrics: {k!r} is not a finite number or \"inf\"")
    return out
