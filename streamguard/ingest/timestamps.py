"""A reading's time from a payload field: epoch seconds or milliseconds, or ISO 8601 with or without
a zone (without one it is the device's local time, as Tasmota and rtl_433 send it). A time that
cannot be read, is not finite, or lies more than ``MAX_CLOCK_AHEAD`` ahead of the daemon's clock is
None: the caller makes the reading unknown (fail closed), never guesses a time."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from ..stream.records import MAX_CLOCK_AHEAD


def _number(x: Any) -> float | None:
    if isinstance(x, bool):
        return None
    if isinstance(x, str):
        try:
            x = float(x)
        except ValueError:
            return None
    if not isinstance(x, (int, float)):
        return None
    try:
        v = float(x)
    except OverflowError:
        return None
    return v if math.isfinite(v) else None


def parse_time(raw: Any, fmt: str, *, now: float) -> float | None:
    """Seconds since the epoch of ``raw`` in format ``epoch-s``, ``epoch-ms`` or ``iso8601``."""
    if fmt == "iso8601":
        if not isinstance(raw, str) or len(raw) > 64:
            return None
        try:
            when = dt.datetime.fromisoformat(raw)
            t = when.timestamp()  # a naive time is local time
        except (ValueError, OverflowError, OSError):
            return None
    else:
        v = _number(raw)
        if v is None:
            return None
        t = v / 1000.0 if fmt == "epoch-ms" else v
    if not math.isfinite(t) or t > now + MAX_CLOCK_AHEAD:
        return None
    return t
