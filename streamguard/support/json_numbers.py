"""JSON has no infinity: how streamguard writes (and reads back) unbounded numbers (leakages, ε, metrics)."""

from __future__ import annotations

import math


def json_number(x: float | None) -> float | str | None:
    """``x`` for JSON: +∞ as the string ``"inf"`` (−∞ as ``"-inf"``), None kept, else a float."""
    if x is None:
        return None
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return float(x)


def number_from_json(x: object) -> float | None:
    """The inverse of :func:`json_number`: ``"inf"``/``"-inf"`` → ±∞, None kept, an int or float →
    a float. Anything else (another string, a bool, a list, NaN) raises ``ValueError``."""
    if x is None:
        return None
    if x == "inf" or x == "-inf":
        return math.inf if x == "inf" else -math.inf
    if isinstance(x, bool) or not isinstance(x, (int, float)) or math.isnan(x):
        raise ValueError('expected a number, "inf" or null')
    return float(x)
