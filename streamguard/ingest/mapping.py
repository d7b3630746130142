"""From an MQTT message of some sensor project to a reading of the stream (issue 10 "Ingest").

A :class:`Mapping` (resolved from a spec by :mod:`.presets`) says where a reading is: the topics
(:class:`Route`: a filter, where the reading's document sits in the payload, whether it is merged
onto the known state — Shelly's ``NotifyStatus`` carries only the fields that changed), the JSON
path of the value (or the bare payload), payload keys that must match (rtl_433), the value map,
the policy for unmapped values, the timestamp source and the availability topic.

:class:`Extractor` applies it to one message and returns a :class:`Reading` (a label, or a number
for a stream with bins, and the reading's time), an :class:`Unreadable` (the message is this
stream's, but no reading can be taken from it: the reason names the field, never the value), or
None (not this stream's message, or an unmapped value under ``unmapped = "ignore"``). Nothing here
logs or keeps a payload.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from ..frames.records import MAX_FRAME_BYTES, Rejection, StateMap, frame_text
from .spec import TimestampSpec
from .timestamps import finite_number, parse_time
from .topics import matches

Path = tuple[str, ...]
_MISSING = object()

UNREADABLE_REASONS = ("oversize", "not-utf8", "not-json", "missing-field", "unmapped", "bad-ts")


@dataclass(frozen=True)
class Route:
    """A topic that carries readings: the payload's document is at ``prefix`` (the payload itself
    when empty); ``require`` lists (path, canonical value) pairs the payload must hold (Shelly:
    ``method`` = ``NotifyStatus``); with ``merge`` the document is merged onto the known one;
    ``ts`` overrides the mapping's timestamp source for this topic."""

    filter: str
    prefix: Path = ()
    require: tuple[tuple[Path, str], ...] = ()
    merge: bool = False
    ts: TimestampSpec | None = None


@dataclass(frozen=True)
class Availability:
    """An availability topic, the payload path (None: bare) and the canonical payloads."""

    filter: str
    path: Path | None
    online: frozenset[str]
    offline: frozenset[str]


@dataclass(frozen=True)
class Mapping:
    """A resolved ingest mapping (module docstring). ``on_change``: the source publishes on change
    (its message times reveal the changes), so it needs the resampler (``sample_period``)."""

    preset: str
    routes: tuple[Route, ...]
    path: Path | None
    values: dict[str, str] | None = None
    unmapped: str = "reject"
    match: tuple[tuple[Path, str], ...] = ()
    timestamp: TimestampSpec | None = None
    availability: Availability | None = None
    on_change: bool = True

    def filters(self) -> list[str]:
        """The topic filters to subscribe to (readings first, then availability)."""
        out = [r.filter for r in self.routes]
        if self.availability is not None:
            out.append(self.availability.filter)
        return list(dict.fromkeys(out))


@dataclass(frozen=True)
class Reading:
    """A reading: the label (or number, for bins) and its time (seconds since the epoch)."""

    value: str | float
    ts: float


@dataclass(frozen=True)
class Unreadable:
    """A message of this stream from which no reading can be taken (``reason`` in
    ``UNREADABLE_REASONS``; ``message`` names the field, never the value)."""

    reason: str
    message: str
    ts: float


def path_of(dotted: str | None) -> Path | None:
    return None if dotted is None else tuple(dotted.split("."))


def canonical(v: Any) -> str | None:
    """The text a value map is keyed by: ``true``/``false``, a string as it is, an integral number
    in decimal (``1`` and ``1.0`` alike), another finite number by ``repr``, ``null``; None for an
    object, a list or a non-finite number."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return v
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            return None
        return str(int(v)) if v.is_integer() and abs(v) < 2.0**53 else repr(v)
    if v is None:
        return "null"
    return None


def get(doc: Any, path: Path) -> Any:
    """The value at ``path`` in nested JSON objects, or ``_MISSING``."""
    for key in path:
        if not isinstance(doc, dict) or key not in doc:
            return _MISSING
        doc = doc[key]
    return doc


def decode(payload: bytes, *, json_only: bool) -> Any:
    """A payload as JSON, or — a bare payload that is not JSON (``ON``, ``online``) — as its text
    (unless ``json_only``). A payload that cannot be read gives a :class:`Rejection` (reason,
    message naming what is wrong, never the payload)."""
    text = frame_text(payload, MAX_FRAME_BYTES, "payload")
    if isinstance(text, Rejection):
        return text
    try:
        return json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        if json_only:
            return Rejection("not-json", "payload is not a JSON object")
        return text.strip()


def _no_constant(token: str) -> None:
    raise ValueError(token)  # NaN/Infinity: not JSON; a bare payload is then read as text


def _merge(into: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """``update`` merged onto ``into`` (nested objects merged key by key), as a new object."""
    out = dict(into)
    for k, v in update.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


@dataclass
class Extractor:
    """Applies a :class:`Mapping` to messages (module docstring). Keeps the merged document of a
    merging route (Shelly) — the device's state, not a reading's history."""

    mapping: Mapping
    states: StateMap
    _known: dict[str, Any] = field(default_factory=dict)

    def reading(self, topic: str, payload: bytes, *, recv: float) -> Reading | Unreadable | None:
        """The reading in one message (module docstring)."""
        m = self.mapping
        route = next((r for r in m.routes if matches(r.filter, topic)), None)
        if route is None:
            return None
        doc = decode(payload, json_only=m.path is not None or bool(route.prefix) or bool(m.match))
        if isinstance(doc, Rejection):
            return Unreadable(doc.reason, doc.message, recv)
        if any(canonical(get(doc, p)) != want for p, want in (*route.require, *m.match)):
            return None  # another device on a shared topic (rtl_433), another method (Shelly)
        ts_spec = route.ts or m.timestamp
        ts = recv
        if ts_spec is not None:
            parsed = parse_time(get(doc, tuple(ts_spec.field.split("."))), ts_spec.format, now=recv)
            if parsed is None:
                return Unreadable("bad-ts", f"field {ts_spec.field!r} is not a usable {ts_spec.format} time", recv)
            ts = parsed
        body = get(doc, route.prefix)
        if body is _MISSING:
            return None  # e.g. a NotifyStatus about another component
        if route.merge:
            if not isinstance(body, dict):
                return Unreadable("missing-field", "the component's status is not an object", ts)
            body = self._known = _merge(self._known, body)
        elif any(r.merge for r in m.routes) and isinstance(body, dict):
            self._known = dict(body)  # a full status replaces what NotifyStatus merged onto
        value = body if m.path is None else get(body, m.path)
        if value is _MISSING:
            return self._unmapped("missing-field", f"field {'.'.join(m.path or ())!r} is missing", ts)
        mapped = self._value(value)
        if mapped is None:
            where = "the payload" if m.path is None else f"field {'.'.join(m.path)!r}"
            return self._unmapped("unmapped", f"{where} holds a value the stream's map does not know", ts)
        return Reading(mapped, ts)

    def _unmapped(self, reason: str, message: str, ts: float) -> Unreadable | None:
        return None if self.mapping.unmapped == "ignore" else Unreadable(reason, message, ts)

    def _value(self, v: Any) -> str | float | None:
        """The stream value of a payload value: a label through the map (or a label itself), a
        finite number for a stream with bins; None when unmapped."""
        if self.states.bins is not None:
            return finite_number(v)
        key = canonical(v)
        if key is None:
            return None
        if self.mapping.values is not None:
            return self.mapping.values.get(key)
        assert self.states.labels is not None
        return key if key in self.states.labels else None

    def availability(self, topic: str, payload: bytes) -> bool | None:
        """True (online) or False (offline, or a payload that is neither: fail closed) for a
        message on the availability topic; None for any other topic."""
        a = self.mapping.availability
        if a is None or not matches(a.filter, topic):
            return None
        doc = decode(payload, json_only=False)
        # zigbee2mqtt sends either form: bare ``online`` (legacy) or ``{"state": "online"}``
        value = get(doc, a.path) if a.path is not None and isinstance(doc, dict) else doc
        return not isinstance(value, Rejection) and canonical(value) in a.online


@dataclass(frozen=True)
class Press:
    """A press of a privacy button: ``ts`` its own time from the payload (the button's
    ``timestamp``), None when the button states none or the field cannot be read (the press is
    then placed by when it was received: stream/vouch.py)."""

    ts: float | None = None


def pressed(button: Mapping, presses: frozenset[str], topic: str, payload: bytes, *, now: float) -> Press | None:
    """The press in this message, if it is one of the privacy button (its value is one of
    ``presses``)."""
    route = next((r for r in button.routes if matches(r.filter, topic)), None)
    if route is None:
        return None
    doc = decode(payload, json_only=button.path is not None or bool(button.match))
    if isinstance(doc, Rejection) or any(canonical(get(doc, p)) != want for p, want in button.match):
        return None
    value = get(doc, route.prefix) if button.path is None else get(get(doc, route.prefix), button.path)
    if value is _MISSING or canonical(value) not in presses:
        return None
    spec = button.timestamp
    if spec is None:
        return Press()
    return Press(parse_time(get(doc, tuple(spec.field.split("."))), spec.format, now=now))
