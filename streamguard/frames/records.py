"""Raw frames in, validated records out: parsing that never echoes a reading (DESIGN.md §6).

A raw frame is one JSON object (UTF-8): ``{"value": <label or number>, "ts": <seconds since the
epoch, optional>, "private": true (optional)}``. A stream whose per-record channel reads the
sensitive attribute S as well (paper 004's non-Markov reduction) names a second field, e.g.
``{"value": 21.5, "occupancy": "home"}``, mapped to S's states like ``value``. A frame that fails any check becomes a
:class:`Rejection` with a short machine-readable reason and a message naming the field — never
the value, because the value is the private reading.

A raw message may also carry a **batch**: a JSON list of such objects, all of one stream, each
element one step in list order (:func:`split_batch`, at most :data:`MAX_BATCH_FRAMES` elements and
:data:`MAX_BATCH_BYTES` bytes). Each element is validated by the same rules as a frame of its own
(:func:`parse_element`), so a malformed element is one rejected step — private when it may carry a
private request — and its neighbours in the list are unaffected. A list over the bounds is refused
as a whole: one rejected step, private (fail closed: its elements are not read).
"""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import dataclass
from typing import Any, NamedTuple

#: Frames larger than this are refused before parsing.
MAX_FRAME_BYTES = 16 * 1024
#: A timestamp further ahead of the daemon's clock is refused. Timestamps must not go backwards, so
#: an accepted frame stamped ahead holds back its stream's later frames ("out of order") until the
#: clock reaches it: for at most this many seconds (it was an hour; issue 13: clocks).
MAX_CLOCK_AHEAD = 30.0
#: A batch (a JSON list of frames) holds at most this many frames and bytes.
MAX_BATCH_FRAMES = 1000
MAX_BATCH_BYTES = 256 * 1024

REASONS = (
    "oversize",
    "not-utf8",
    "not-json",
    "not-object",
    "missing-value",
    "wrong-type",
    "not-finite",
    "unknown-state",
    "bad-ts",
    "ts-out-of-order",
    "bad-private",
    "missing-sensitive",
    "outside-model",
    # steps of a mapped sensor (streamguard/ingest) whose reading is unknown
    "no-reading",
    "offline",
    "disconnected",
    "stale",
    "unmapped",
    "missing-field",
)


class RawRecord(NamedTuple):
    """A validated reading: its state index (never logged), timestamp and private flag, and the
    state of the sensitive attribute S when the stream reads one. (A named tuple, like
    :class:`Element`: one is made per frame, and a frozen dataclass cost twice as much to build.)"""

    state: int
    #: None only in batch mode (no clock) for a frame without ``ts``.
    ts: float | None
    private: bool
    sensitive: int | None = None


@dataclass(frozen=True)
class Rejection:
    """Why a frame was refused. ``message`` names the field, never the reading. ``private`` says
    the frame may carry a request to be private (:func:`parse_frame`): fail closed and protect it.
    ``ts`` is its timestamp when one could be read (it identifies the step)."""

    reason: str
    message: str
    private: bool = False
    ts: float | None = None


@dataclass(frozen=True)
class StateMap:
    """How raw values map to the chain's states 0..k−1: by ``labels`` (value = label string) or by
    numeric ``bins`` (k+1 increasing edges; state i covers [edges[i], edges[i+1]), the last bin
    closed on the right)."""

    labels: tuple[str, ...] | None = None
    bins: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if (self.labels is None) == (self.bins is None):
            raise ValueError("a state map needs exactly one of labels or bins")
        if self.labels is not None:
            if len(self.labels) < 2 or len(set(self.labels)) != len(self.labels):
                raise ValueError("labels must be at least two distinct strings")
        if self.bins is not None:
            b = self.bins
            if len(b) < 3 or any(not math.isfinite(v) for v in b) or any(x >= y for x, y in zip(b, b[1:])):
                raise ValueError("bins must be at least three finite, strictly increasing edges")

    @property
    def k(self) -> int:
        return len(self.labels) if self.labels is not None else len(self.bins) - 1  # type: ignore[arg-type]

    def state_of(self, value: Any) -> int | Rejection:
        """The state of a raw value, or a Rejection naming what is wrong with field 'value'."""
        if self.labels is not None:
            if not isinstance(value, str):
                return Rejection("wrong-type", "field 'value' must be a label string")
            try:
                return self.labels.index(value)
            except ValueError:
                return Rejection("unknown-state", "field 'value' is not one of the configured labels")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return Rejection("wrong-type", "field 'value' must be a number")
        edges = self.bins
        assert edges is not None
        try:
            v = float(value)
        except OverflowError:  # an integer beyond the float range: below or above every bin
            return 0 if value < 0 else len(edges) - 2
        if not math.isfinite(v):
            return Rejection("not-finite", "field 'value' is NaN or infinite")
        # The first and last bins are open-ended: a reading below or above every edge is in them.
        # Refusing it instead would publish, outside ε, that the reading left the range (a
        # rejected step is visible: no record at its position, a counter by reason).
        return min(max(bisect.bisect_right(edges, v) - 1, 0), len(edges) - 2)

    def label_of(self, state: int) -> str | float:
        """What a released state is published as: its label, or its bin's lower edge."""
        if self.labels is not None:
            return self.labels[state]
        assert self.bins is not None
        return self.bins[state]


class _NonFinite(ValueError):
    pass


def _reject_constant(token: str) -> float:
    raise _NonFinite(token)


def _finite_float(x: Any) -> float | None:
    """``x`` as a finite float, or None (not a number, a bool, NaN/±inf, or an integer too large
    for a float — ``float(10**400)`` raises OverflowError)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    try:
        v = float(x)
    except OverflowError:
        return None
    return v if math.isfinite(v) else None


@dataclass(frozen=True)
class SensitiveField:
    """Where a frame carries the sensitive attribute S: the field's name and S's state map."""

    field: str
    states: StateMap


class _Object(dict):  # type: ignore[type-arg]
    """A decoded JSON object that remembers whether it held a key "private" (any case, any
    escaping — the decoder has resolved ``\\u0070rivate``) with a value other than ``false``."""

    asks_private = False


def _object(pairs: list[tuple[str, Any]]) -> _Object:
    obj = _Object(pairs)
    for k, v in pairs:  # nested objects (decoded first) and lists of them count too
        if (v is not False and k.strip().lower() == "private") or _asks_private(v):
            obj.asks_private = True
            break
    return obj


def _decode(text: str, *, private_keys: bool = True) -> Any:
    """JSON with every object an :class:`_Object`; NaN/Infinity refused (:class:`_NonFinite`).
    ``private_keys=False`` (:func:`may_name_private` said no key can be "private"): plain dicts,
    decoded by the C scanner without the per-object hook — none asks to be private."""
    if not private_keys:
        return json.loads(text, parse_constant=_reject_constant)
    return json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_object)


def may_name_private(data: bytes) -> bool:
    """Can the document in ``data`` hold a key that reads "private" (any case, any escaping)? Not
    if its bytes hold no backslash (so no escape) and no "private" in any ASCII case: a key whose
    ``strip().lower()`` is "private" is that word's ASCII letters in some case, between whitespace
    (the one non-ASCII character that lowercases to an ASCII letter, U+0130, lowercases to two
    characters). A cheap test on the bytes that lets most frames skip the per-object hook."""
    return b"\\" in data or b"private" in data.lower()


def _asks_private(obj: Any) -> bool:
    """Does a decoded document carry a private request anywhere (an object in a list included)?"""
    if isinstance(obj, _Object):
        return obj.asks_private
    if isinstance(obj, list):
        return any(_asks_private(v) for v in obj)
    return False


def parse_frame(
    data: bytes, states: StateMap, *, now: float | None, last_ts: float | None, max_bytes: int = MAX_FRAME_BYTES,
    sensitive: SensitiveField | None = None,
) -> RawRecord | Rejection:
    """Validate one raw frame (see :func:`_parse`).

    ``now`` is the daemon's clock: a ``ts`` more than :data:`MAX_CLOCK_AHEAD` ahead of it is
    refused, and a frame without ``ts`` is stamped with it (:func:`_stamp`). ``now=None`` is batch mode (historical
    data, no clock): any ``ts`` is accepted in order, and a frame without one keeps ``ts`` None (a
    step of unknown time; it never holds back the frames after it).

    "Asked to be private" is read from the decoded document, not from its bytes: a frame is private
    when any object in it has a key ``private`` (any case) whose value is not ``false`` — so an
    escaped key, a duplicate key (``{"private": true, "private": false}``) or a nested request
    counts. A rejected frame that cannot be decoded at all (oversized, not UTF-8, not JSON, nested too
    deeply) may carry such a request and is private too: fail closed (issue 9 item 8)."""
    result = _parse(data, states, now=now, last_ts=last_ts, max_bytes=max_bytes, sensitive=sensitive)
    if not isinstance(result, Rejection):
        return result
    obj: Any = None
    readable = len(data) <= max_bytes
    if readable:
        try:
            obj = json.loads(data.decode("utf-8"), object_pairs_hook=_object)  # NaN allowed: only keys matter
        except (UnicodeDecodeError, ValueError, RecursionError):
            readable = False
    return _refused(result, obj, readable, now)


def _refused(result: Rejection, obj: Any, readable: bool, now: float | None) -> Rejection:
    """``result`` with the frame's private request (any, or unreadable: fail closed) and its
    timestamp when one can be read from the decoded ``obj``."""
    ts = _finite_float(obj.get("ts")) if isinstance(obj, dict) else None
    if ts is not None and now is not None and ts > now + MAX_CLOCK_AHEAD:
        ts = None  # not a usable time: a bad clock must not become the stream's newest step
    return Rejection(result.reason, result.message, private=not readable or _asks_private(obj), ts=ts)


class Element(NamedTuple):
    """One element of a batch, decoded (:func:`split_batch`); ``non_finite``: the batch held a
    NaN or an infinity somewhere, so this element is checked for one."""

    obj: Any
    non_finite: bool = False


class _NonFiniteToken:
    """Stands in for a NaN/Infinity constant while a batch is decoded (refused per element)."""


_NON_FINITE = _NonFiniteToken()


def _holds_non_finite(obj: Any) -> bool:
    if obj is _NON_FINITE:
        return True
    if isinstance(obj, dict):
        return any(_holds_non_finite(v) for v in obj.values())
    if isinstance(obj, list):
        return any(_holds_non_finite(v) for v in obj)
    return False


def split_batch(data: bytes) -> list[Element] | Rejection | None:
    """The frames of a raw message that is a batch — a JSON list whose elements are frames — or
    None when it is not one (a single frame, or bytes no JSON decoder reads as a list: they go
    through :func:`parse_frame` as one frame, exactly as before batches existed). A list longer than
    :data:`MAX_BATCH_FRAMES` or larger than :data:`MAX_BATCH_BYTES` is a :class:`Rejection`
    (``oversize``, private: its elements are not read, fail closed). The empty list is a batch of
    no frames."""
    if data[:1] != b"[" and data.lstrip()[:1] != b"[":
        return None
    if len(data) > MAX_BATCH_BYTES:
        return Rejection("oversize", f"batch exceeds {MAX_BATCH_BYTES} bytes", private=True)
    found: list[bool] = []

    def constant(_token: str) -> _NonFiniteToken:
        found.append(True)
        return _NON_FINITE

    hook = {"object_pairs_hook": _object} if may_name_private(data) else {}
    try:
        doc = json.loads(data.decode("utf-8"), parse_constant=constant, **hook)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(doc, list):
        return None
    if len(doc) > MAX_BATCH_FRAMES:
        return Rejection("oversize", f"batch holds more than {MAX_BATCH_FRAMES} frames", private=True)
    non_finite = bool(found)
    return [Element(x, non_finite) for x in doc]


def parse_element(
    element: Element, states: StateMap, *, now: float | None, last_ts: float | None,
    sensitive: SensitiveField | None = None,
) -> RawRecord | Rejection:
    """Validate one frame of a batch by the rules of :func:`parse_frame` (a NaN or infinity in it
    is ``not-finite``; a rejected element is private when it carries a private request)."""
    obj = element.obj
    if element.non_finite and _holds_non_finite(obj):
        result: RawRecord | Rejection = Rejection("not-finite", "frame contains NaN or Infinity")
    else:
        result = _check(obj, states, now=now, last_ts=last_ts, sensitive=sensitive)
    if not isinstance(result, Rejection):
        return result
    return _refused(result, obj, True, now)


def frame_text(data: bytes, max_bytes: int, what: str = "frame") -> str | Rejection:
    """The text of a frame (or of a mapped sensor's payload, ``what``): refused when larger than
    ``max_bytes`` (before decoding) or not UTF-8."""
    if len(data) > max_bytes:
        return Rejection("oversize", f"{what} exceeds {max_bytes} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return Rejection("not-utf8", f"{what} is not valid UTF-8")


def _parse(
    data: bytes, states: StateMap, *, now: float | None, last_ts: float | None, max_bytes: int,
    sensitive: SensitiveField | None,
) -> RawRecord | Rejection:
    """Validate one raw frame. ``last_ts`` is the timestamp of the stream's previous accepted
    record (timestamps must not go backwards); ``now`` stands in for a missing ``ts``."""
    text = frame_text(data, max_bytes)
    if isinstance(text, Rejection):
        return text
    try:
        obj = _decode(text, private_keys=may_name_private(data))
    except _NonFinite:
        return Rejection("not-finite", "frame contains NaN or Infinity")
    except ValueError:
        return Rejection("not-json", "frame is not valid JSON")
    except RecursionError:  # e.g. thousands of nested brackets: the decoder's recursion limit
        return Rejection("not-json", "frame is nested too deeply to parse")
    return _check(obj, states, now=now, last_ts=last_ts, sensitive=sensitive)


def _stamp(now: float | None, last_ts: float | None) -> float | None:
    """The time of a frame without ``ts``: the daemon's clock, or just after the previous record's
    ``ts`` when the clock is not past it — frames handled together (a JSON list, messages grouped
    while the daemon was busy) share one clock reading, and each is still a step of its own."""
    if now is None or last_ts is None or now > last_ts:
        return now
    return math.nextafter(last_ts, math.inf)


def _check(
    obj: Any, states: StateMap, *, now: float | None, last_ts: float | None, sensitive: SensitiveField | None,
) -> RawRecord | Rejection:
    """The checks of a decoded frame (see :func:`_parse`)."""
    if not isinstance(obj, dict):
        return Rejection("not-object", "frame must be a JSON object")
    if "value" not in obj:
        return Rejection("missing-value", "field 'value' is missing")
    state = states.state_of(obj["value"])
    if isinstance(state, Rejection):
        return state
    ts = _finite_float(obj["ts"]) if "ts" in obj else _stamp(now, last_ts)
    if ts is None and "ts" in obj:
        return Rejection("bad-ts", "field 'ts' must be a finite number of seconds")
    if ts is not None and now is not None and ts > now + MAX_CLOCK_AHEAD:
        return Rejection("bad-ts", f"field 'ts' lies more than {MAX_CLOCK_AHEAD:g} s ahead of the daemon's clock")
    if ts is not None and last_ts is not None and ts < last_ts:
        return Rejection("ts-out-of-order", "field 'ts' is earlier than the previous record's")
    private = obj.get("private", False)
    if not isinstance(private, bool):
        return Rejection("bad-private", "field 'private' must be true or false")
    private = _asks_private(obj)  # a duplicate or nested key asking to be private counts too
    if sensitive is None:
        return RawRecord(state, ts, private)
    if sensitive.field not in obj:
        return Rejection("missing-sensitive", f"field {sensitive.field!r} (the sensitive attribute) is missing")
    s_state = sensitive.states.state_of(obj[sensitive.field])
    if isinstance(s_state, Rejection):
        return Rejection(s_state.reason, s_state.message.replace("field 'value'", f"field {sensitive.field!r}"))
    return RawRecord(state, ts, private, s_state)
