"""Malformed raw frames, one kind at a time (the daemon must reject each with a counted error).

Every fault is a whole frame in place of a reading; it draws no Markov state, so the readings alone
form the chain's path. The kinds and their payloads:

================  =====================================================================
kind              payload
================  =====================================================================
wrong_type        ``value`` is a JSON object ``{"state": label}``, a list ``[label]`` or a bool
unknown_label     ``value`` is a string naming no state
nan               ``value`` is the bare token ``NaN`` (as Python's json writes it; not JSON)
infinity          ``value`` is the bare token ``Infinity`` or ``-Infinity``
out_of_range      ``value`` is a finite number outside every numeric range (streamguard puts it in
                  the first or last bin) or, for labelled streams, the state index k (wrong type)
truncated         a reading's JSON cut short (a strict prefix): not parseable
oversize          a well-formed reading padded with a ``"pad"`` string to more than 64 KiB
non_utf8          a reading whose label is encoded in Latin-1 (byte 0xE9): not UTF-8
missing_value     ``{"ts": ...}`` with no ``value`` field
================  =====================================================================
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from enum import StrEnum

import numpy as np

from .emission import Emission
from .frames import encode

#: Payloads longer than this many bytes are oversize.
OVERSIZE_LIMIT = 64 * 1024
#: A non-ASCII label encoded in Latin-1 instead of UTF-8 (é is 0xE9, an invalid UTF-8 sequence here).
_LATIN1_LABEL = "caf\u00e9"


class FaultKind(StrEnum):
    """The kinds of malformed frame (see the module docstring for each payload)."""

    WRONG_TYPE = "wrong_type"
    UNKNOWN_LABEL = "unknown_label"
    NAN = "nan"
    INFINITY = "infinity"
    OUT_OF_RANGE = "out_of_range"
    TRUNCATED = "truncated"
    OVERSIZE = "oversize"
    NON_UTF8 = "non_utf8"
    MISSING_VALUE = "missing_value"


_Builder = Callable[[float, str | float, Emission, np.random.Generator], bytes]


def _wrong_type(ts: float, decoy: str | float, emission: Emission, rng: np.random.Generator) -> bytes:
    value = [{"state": decoy}, [decoy], bool(rng.integers(2))][int(rng.integers(3))]
    return encode({"value": value, "ts": ts})


def _unknown_label(ts: float, decoy: str | float, emission: Emission, rng: np.random.Generator) -> bytes:
    return encode({"value": emission.unknown_label(), "ts": ts})


def _nan(ts: float, decoy: str | float, emission: Emission, rng: np.random.Generator) -> bytes:
    return encode({"value": math.nan, "ts": ts})


def _infinity(ts: float, decoy: str | float, emission: Emission, rng: np.random.Generator) -> bytes:
    return encode({"value": math.inf if rng.integers(2) else -math.inf, "ts": ts})


def _out_of_range(ts: float, decoy: str | float, emission: Emission, rng: np.random.Generator) -> bytes:
    return encode({"value": emission.out_of_range(rng), "ts": ts})


def _truncated(ts: float, decoy: str | float, emission: Emission, rng: np.random.Generator) -> bytes:
    whole = encode({"value": decoy, "ts": ts})
    return whole[: int(rng.integers(1, len(whole)))]


def _oversize(ts: float, decoy: str | float, emission: Emission, rng: np.random.Generator) -> bytes:
    base = len(encode({"value": decoy, "ts": ts, "pad": ""}))
    target = OVERSIZE_LIMIT + 1 + int(rng.integers(1024))
    return encode({"value": decoy, "ts": ts, "pad": "x" * (target - base)})


def _non_utf8(ts: float, decoy: str | float, emission: Emission, rng: np.random.Generator) -> bytes:
    return json.dumps({"value": _LATIN1_LABEL, "ts": ts}, ensure_ascii=False).encode("latin-1")


def _missing_value(ts: float, decoy: str | float, emission: Emission, rng: np.random.Generator) -> bytes:
    return encode({"ts": ts})


_BUILDERS: dict[FaultKind, _Builder] = {
    FaultKind.WRONG_TYPE: _wrong_type,
    FaultKind.UNKNOWN_LABEL: _unknown_label,
    FaultKind.NAN: _nan,
    FaultKind.INFINITY: _infinity,
    FaultKind.OUT_OF_RANGE: _out_of_range,
    FaultKind.TRUNCATED: _truncated,
    FaultKind.OVERSIZE: _oversize,
    FaultKind.NON_UTF8: _non_utf8,
    FaultKind.MISSING_VALUE: _missing_value,
}


def fault_payload(kind: FaultKind, ts: float, emission: Emission, rng: np.random.Generator) -> bytes:
    """The payload of a ``kind`` fault at timestamp ``ts``.

    Every kind first draws a decoy reading (a uniform state's label or number) from ``rng``; the
    kind's own details (which wrong type, where to cut, how much padding) are drawn after it.
    """
    decoy = emission.value(int(rng.integers(emission.k)), rng)
    return _BUILDERS[kind](ts, decoy, emission, rng)
