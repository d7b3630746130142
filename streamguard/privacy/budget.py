"""One rule for a privacy budget ε everywhere a user gives one: a finite number with
0 < ε ≤ :data:`MAX_EPSILON` nats (config keys, ``plan``, ``mqm``, ``mechanism design``).

ε = 0 is refused (a redaction plan would redact an unbounded stream forever; the quilt noise scale
is infinite), and so is anything above 1000 nats: a likelihood ratio of e^1000 ≈ 10^434 is no
privacy guarantee, and the exact channel verifier builds e^ε as a rational
(:data:`streamguard.perturbation.model.MAX_LEVEL` is this same bound).
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import Field

MAX_EPSILON = 1000.0

#: A config field holding a budget (pydantic): the same rule as :func:`check_budget`.
Epsilon = Annotated[float, Field(gt=0, le=MAX_EPSILON, allow_inf_nan=False)]


def check_budget(value: Any, name: str = "epsilon") -> float:
    """``value`` as a float if it is a budget (module docstring), else ``ValueError`` naming ``name``."""
    try:
        eps = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number in (0, {MAX_EPSILON:g}] nats") from None
    if not (math.isfinite(eps) and 0.0 < eps <= MAX_EPSILON):
        raise ValueError(f"{name} must be a number in (0, {MAX_EPSILON:g}] nats, got {eps:g}")
    return eps
