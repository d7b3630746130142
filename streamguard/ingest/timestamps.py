"""A reading's time from a payload field: epoch seconds or milliseconds, or ISO 8601 with or without
a zone (without one it is the device's local time, as Tasmota and rtl_433 send it). A time that
cannot be read, is not finite, or lies more than ``MAX_CLOCK_AHEAD`` ahead of the daemon's clock is
None: the caller makes the reading unknown (fail closed), never guesses a time."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from ..frames.records import MAX_CLOCK_AHEAD, _finite_float


def finite_number(x: Any) -> float | None:
    """``x`` — a number, or a string holding one (ESPHome, statestream) — as a finite float, or
    None (a bool, anything else, NaN/±inf, too large)."""
    if isinstance(x, str):
        try:
            x = float(x)
        except ValueError:
            return None
    return _finite_float(x)


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
        v = finite_number(raw)
        if v is None:
            return None
        t = v / 1000.0 if fmt == "epoch-ms" else v
    if not math.isfinite(t) or t > now + MAX_CLOCK_AHEAD:
        return None
    return t
