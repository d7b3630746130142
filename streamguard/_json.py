"""JSON has no infinity: how streamguard writes unbounded numbers (leakages, ε, metrics)."""

from __future__ import annotations

import math


def json_number(x: float | None) -> float | str | None:
    """``x`` for JSON: +∞ as the string ``"inf"`` (−∞ as ``"-inf"``), None kept, else a float."""
    if x is None:
        return None
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return float(x)
