"""Raw frames as they leave the simulated firmware, with ground truth for tests.

Wire format (the contract with the streamguard daemon), one JSON object per frame, UTF-8::

    {"value": <label string or number>, "ts": <float seconds since epoch>, "s": <label>, "private": true}

``"s"`` is present only on streams with a sensitive attribute, ``"private"`` only when the privacy
button was pressed for that reading (in ``flag`` mode). A button in ``command`` mode instead sends
:data:`COMMAND_NOW` on the stream's command channel right after the reading. Keys appear in that
order and are written by ``json.dumps`` with its default separators. The :class:`FrameMeta` that
comes with each frame is ground truth for tests; it is never part of a payload.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, NamedTuple

if TYPE_CHECKING:
    from .faults import FaultKind

#: Where a frame goes: the stream's raw topic, or its command topic.
Channel = Literal["raw", "cmd"]


def encode(fields: dict[str, object]) -> bytes:
    """One frame's bytes: ``json.dumps`` (NaN and ±Infinity as Python writes them), ASCII-safe UTF-8."""
    return json.dumps(fields).encode("utf-8")


#: The command payload of a button press in ``command`` mode.
COMMAND_NOW = encode({"private": "now"})


@dataclass(frozen=True, slots=True)
class FrameMeta:
    """Ground truth about one frame.

    ``send_at`` is when the frame is sent, in seconds after the device's start (a burst shares it
    with the reading before it); ``ts`` is the timestamp the frame carries (for a command, that of
    the reading it marks). ``reading`` counts the stream's readings from 0 (faults are not
    readings). ``out_of_order`` marks a reading whose ``ts`` is earlier than an earlier reading's,
    which the daemon must reject.
    """

    channel: Channel
    send_at: float
    ts: float
    state: int | None
    reading: int | None
    fault: FaultKind | None = None
    sensitive: int | None = None
    button: bool = False
    burst: bool = False
    clock_offset: float = 0.0
    out_of_order: bool = False

    @property
    def accepted(self) -> bool:
        """True when a correct daemon accepts the frame as a record (a well-formed, in-order reading)."""
        return self.channel == "raw" and self.fault is None and not self.out_of_order


class Frame(NamedTuple):
    """One frame: ``(stream_name, payload_bytes, meta)``."""

    stream: str
    payload: bytes
    meta: FrameMeta


@dataclass
class FrameCounts:
    """Raw frames per stream, faults per kind and command messages, as counted while sending."""

    frames: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    commands: int = 0

    def add(self, frame: Frame) -> None:
        """Count one frame."""
        if frame.meta.channel == "cmd":
            self.commands += 1
            return
        self.frames[frame.stream] += 1
        if frame.meta.fault is not None:
            self.faults[str(frame.meta.fault)] += 1

    def as_dict(self) -> dict[str, object]:
        """JSON-ready counts."""
        return {"frames": dict(self.frames), "faults": dict(self.faults), "commands": self.commands}
