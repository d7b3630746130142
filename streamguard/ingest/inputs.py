"""What each stream of a configuration reads from the broker, and whether two streams read the
same input (issue 24 item 5).

Two streams fed the same readings release them twice, with independent redaction draws: the two
draws of one reading together leak more than either (a reading redacted in one release can be
published by the other), and a private mark reaches only the stream it was sent to. So every
message that carries a reading belongs to one stream. An :class:`Input` is one place a stream
reads; two inputs of different streams are **the same input** (:func:`same_input`) when

- their topic filters can both match one topic (:func:`.topics.filters_overlap`: identical
  ``raw_topic``, one stream's default raw topic written as another's ``raw_topic``, two mapped
  sensors resolving to one device topic, wildcard filters that meet), and
- one of them reads whole messages (streamguard's own frames, a command topic), or both read the
  same value of a message — the same JSON location (a route's document prefix, then the field) —
  under payload conditions that one message can meet together.

Two mapped streams reading *different* values of one topic are different inputs: two fields of
one device (a zigbee2mqtt sensor's ``occupancy`` and ``illuminance``), two components of a Shelly
on its shared ``events/rpc`` topic, or two rtl_433 sensors routed by ``match``. A value at one
location and a value inside it (``a`` and ``a.b``) are never both readings: a reading is a scalar.

A command topic is an input of its stream: another stream reading it (or a stream's raw topic
written as its own command topic) would take marks for readings, or readings for marks.

Not inputs of readings, and free to be shared: availability topics (a device's state, no reading)
and privacy buttons — one button on several streams marks all of them, which only protects more.
``stdin`` is refused for more than one stream elsewhere; a ``sim`` stream reads nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from .topics import filters_overlap

if TYPE_CHECKING:
    from ..config import StreamConfig

#: ``frames``: streamguard frames on a raw topic; ``reading``: a mapped sensor's value;
#: ``command``: a stream's command topic; ``availability`` / ``button``: read, never readings.
Kind = Literal["frames", "reading", "command", "availability", "button"]
Location = tuple[str, ...]
Condition = tuple[Location, str]


@dataclass(frozen=True)
class Input:
    """One topic filter a stream subscribes to, and what it takes from a message there:
    ``value`` the JSON location of the reading (None: the whole message), ``conditions`` the
    (location, canonical value) pairs a payload must hold to be read (rtl_433 ``match``, Shelly's
    ``method``)."""

    stream: str
    kind: Kind
    filter: str
    value: Location | None = None
    conditions: tuple[Condition, ...] = ()


def stream_inputs(streams: Iterable[StreamConfig], topic: Callable[..., str]) -> list[Input]:
    """Every input of ``streams`` (source ``mqtt``; their command topics whatever the source).
    ``topic(stream, kind)`` is the daemon's topic of a stream (``Settings.topic``)."""
    from .presets import resolve, resolve_button

    out: list[Input] = []
    for s in streams:
        out.append(Input(s.name, "command", topic(s.name, "cmd")))
        if s.source != "mqtt":
            continue
        if s.ingest is None:
            out.append(Input(s.name, "frames", s.raw_topic or topic(s.name, "raw")))
            continue
        mapping = resolve(s.ingest)
        for r in mapping.routes:
            value = r.prefix + (mapping.path or ())
            out.append(Input(s.name, "reading", r.filter, value, (*r.require, *mapping.match)))
        if mapping.availability is not None:
            out.append(Input(s.name, "availability", mapping.availability.filter))
        if s.ingest.button is not None:
            out += [Input(s.name, "button", f) for f in resolve_button(s.ingest.button).filters()]
    return out


def _compatible(a: tuple[Condition, ...], b: tuple[Condition, ...]) -> bool:
    """Can one payload meet both lists of conditions? Not when they ask one location for two
    different values; otherwise (conservatively) yes."""
    want = dict(a)
    return all(want.get(loc, value) == value for loc, value in b)


def same_input(a: Input, b: Input) -> bool:
    """Can one message be read by both ``a`` and ``b`` (module docstring)? Availability and
    button inputs never are: they carry no readings."""
    if "availability" in (a.kind, b.kind) or "button" in (a.kind, b.kind):
        return False
    if not filters_overlap(a.filter, b.filter):
        return False
    if a.kind != "reading" or b.kind != "reading":
        return True
    return a.value == b.value and _compatible(a.conditions, b.conditions)


def shared_input(inputs: list[Input]) -> tuple[Input, Input] | None:
    """The first two inputs (in ``inputs`` order) that are the same input (:func:`same_input`) and
    belong to different streams — or to one stream, when one of them is its command topic; None
    when every message is read by at most one stream. Filters without wildcards meet only when
    equal, so they are grouped by topic; a wildcard filter is compared with the filters of its
    first level (or all, when that level is a wildcard) — a thousand streams on their own topics
    cost a thousand look-ups, a hundred rtl_433 sensors on one filter ten thousand comparisons."""
    literal: dict[str, list[int]] = {}
    first: dict[str, list[int]] = {}
    wild: list[int] = []
    for i, x in enumerate(inputs):
        levels = x.filter.split("/")
        first.setdefault(levels[0], []).append(i)
        if any(level in ("+", "#") for level in levels):
            wild.append(i)
        else:
            literal.setdefault(x.filter, []).append(i)
    anywhere = first.get("+", []) + first.get("#", [])
    pairs = [(i, j) for group in literal.values() for n, i in enumerate(group) for j in group[n + 1:]]
    for i in wild:
        head = inputs[i].filter.split("/")[0]
        others = range(len(inputs)) if head in ("+", "#") else first[head] + anywhere
        pairs += [(min(i, j), max(i, j)) for j in others if j != i]
    for i, j in sorted(set(pairs)):
        a, b = inputs[i], inputs[j]
        if (a.stream != b.stream or (a.kind != b.kind and "command" in (a.kind, b.kind))) and same_input(a, b):
            return a, b
    return None


def describe(a: Input, b: Input) -> str:
    """The one-line refusal for two streams sharing an input (names both streams and topics)."""
    if "command" in (a.kind, b.kind):
        cmd, other = (a, b) if a.kind == "command" else (b, a)
        return (f"streams.{other.stream}: input topic {other.filter} can be the command topic {cmd.filter} of "
                f"streams.{cmd.stream}: marks would be taken for readings, or readings for marks")
    return (f"streams.{a.stream} and streams.{b.stream} read the same input (topic {a.filter} / {b.filter}): "
            "its readings would be released twice with independent draws, which together leak more than "
            "either, and a mark would reach only one stream; map each sensor to one stream")
