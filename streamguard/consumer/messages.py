"""What a subscriber receives, parsed: sanitized records, aggregate windows, privacy statuses and
device statuses (the topic layout is ``<base>/<device>/<stream>/<kind>`` and
``<base>/<device>/status``; the payloads are described by the JSON Schemas in
``streamguard/schemas/``).

A data message is one record or, with publisher batching, a JSON list of records. Parsing never
trusts the topic alone: a record names its device and stream, and they must match the topic. A
malformed message is returned as :class:`Malformed` with a one-line reason (it is counted, never
fatal, and its content is not echoed).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from ..stream.transport import Message

KINDS = ("data", "aggregate", "privacy")


@dataclass(frozen=True)
class Record:
    """One sanitized record. ``value`` is the released label (None: redacted); ``row`` the
    redaction row used (Pr(⊥ | state) per state; None for a channel record); ``output`` the channel
    output index (channel records)."""

    device: str
    stream: str
    seq: int
    position: int | None
    ts: float
    value: Any
    redacted: bool
    row: tuple[float, ...] | None
    output: int | None
    mechanism: str  # "redaction" or "channel"
    mode: str


@dataclass(frozen=True)
class Window:
    """One published aggregate window (the payload as published, plus its query index)."""

    device: str
    stream: str
    index: int
    lo: int
    hi: int
    body: dict[str, Any]


@dataclass(frozen=True)
class Status:
    """A stream's retained privacy status."""

    device: str
    stream: str
    body: dict[str, Any]


@dataclass(frozen=True)
class DeviceStatus:
    device: str
    state: str


@dataclass(frozen=True)
class Malformed:
    topic: str
    reason: str


Item = Record | Window | Status | DeviceStatus | Malformed


def split_topic(topic: str, base: str) -> tuple[str, str | None, str] | None:
    """(device, stream or None, kind) of a topic under ``base``, or None if it is not one of ours."""
    prefix = base.split("/") if base else []
    parts = topic.split("/")
    if parts[: len(prefix)] != prefix:
        return None
    rest = parts[len(prefix):]
    if len(rest) == 2 and rest[1] == "status":
        return rest[0], None, "status"
    if len(rest) == 3 and rest[2] in KINDS:
        return rest[0], rest[1], rest[2]
    return None


def parse(message: Message, base: str) -> list[Item]:
    """The items of one message (empty for a topic that is not a sanitized output: raw, cmd, …)."""
    where = split_topic(message.topic, base)
    if where is None:
        return []
    device, stream, kind = where
    try:
        body = json.loads(message.payload)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return [Malformed(message.topic, "payload is not JSON")]
    if kind == "status":
        if not isinstance(body, dict) or not isinstance(body.get("state"), str):
            return [Malformed(message.topic, "device status without a state")]
        return [DeviceStatus(device, body["state"])]
    assert stream is not None
    if kind == "privacy":
        if not isinstance(body, dict) or body.get("stream") != stream:
            return [Malformed(message.topic, "privacy status does not name its stream")]
        return [Status(device, stream, body)]
    if kind == "aggregate":
        if (not isinstance(body, dict) or body.get("stream") != stream or body.get("device") != device
                or not all(_is_int(body.get(f)) for f in ("index", "lo", "hi"))):
            return [Malformed(message.topic, "aggregate without device, stream, index, lo and hi")]
        return [Window(device, stream, body["index"], body["lo"], body["hi"], body)]
    items: list[Item] = []
    for r in body if isinstance(body, list) else [body]:
        items.append(_record(r, device, stream, message.topic))
    return items


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _record(r: object, device: str, stream: str, topic: str) -> Record | Malformed:
    if not isinstance(r, dict) or r.get("device") != device or r.get("stream") != stream:
        return Malformed(topic, "record does not name the topic's device and stream")
    seq, ts, redacted = r.get("seq"), r.get("ts"), r.get("redacted")
    position = r.get("position")
    if not _is_int(seq) or not isinstance(redacted, bool):
        return Malformed(topic, "record without a valid seq or redacted flag")
    if not isinstance(ts, (int, float)) or isinstance(ts, bool) or not math.isfinite(ts):
        return Malformed(topic, "record without a finite ts")
    if position is not None and not _is_int(position):
        return Malformed(topic, "record with an invalid position")
    channel = r.get("mechanism") == "channel"
    row = r.get("redaction")
    if not channel:
        if (not isinstance(row, list) or not row
                or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x <= 1 for x in row)):
            return Malformed(topic, "redaction record without a valid redaction row")
        row = tuple(float(x) for x in row)
    output = r.get("output")
    if channel and not redacted and not _is_int(output):
        return Malformed(topic, "channel record without an output index")
    if redacted != (r.get("value") is None):
        return Malformed(topic, "record whose value and redacted flag disagree")
    return Record(device, stream, seq, position, float(ts), r.get("value"), redacted,
                  None if channel else row, output if channel else None,
                  "channel" if channel else "redaction", str(r.get("mode")))
