"""Capture files: the MQTT messages a consumer received, one JSON object per line —
``{"topic": str, "payload": str, "retain": bool}`` with the payload as UTF-8 text (every
sanitized payload is JSON), or ``"payload_b64"`` for bytes that are not UTF-8. ``streamguard
consume --capture FILE`` writes one, ``--file FILE`` reads one back, so an analysis can be re-run
offline on exactly the messages received (duplicates and order included).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from ..support.private_files import private_file
from ..stream.transport import Message

#: Longest line read (a batch of records is a few hundred bytes per record).
MAX_LINE = 16 * 1024 * 1024


class CaptureError(ValueError):
    """A capture file cannot be read (names the line, never its content)."""


def to_line(m: Message) -> str:
    try:
        doc: dict[str, object] = {"topic": m.topic, "payload": m.payload.decode("utf-8")}
    except UnicodeDecodeError:
        doc = {"topic": m.topic, "payload_b64": base64.b64encode(m.payload).decode()}
    doc["retain"] = m.retain
    return json.dumps(doc, separators=(",", ":"))


def read_capture(path: Path) -> Iterator[Message]:
    """The messages of a capture file, in the order they were received."""
    with path.open("r", encoding="utf-8") as f:
        for n, line in enumerate(iter(lambda: f.readline(MAX_LINE + 1), ""), start=1):
            if len(line) > MAX_LINE:
                raise CaptureError(f"{path}: line {n} is longer than {MAX_LINE} bytes")
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
                topic = doc["topic"]
                payload = (doc["payload"].encode("utf-8") if "payload" in doc
                           else base64.b64decode(doc["payload_b64"], validate=True))
                if not isinstance(topic, str):
                    raise TypeError
            except (ValueError, KeyError, TypeError, AttributeError):
                raise CaptureError(f"{path}: line {n} is not a captured message") from None
            yield Message(topic, payload, bool(doc.get("retain", False)))


class CaptureWriter:
    """Appends messages to a capture file created private (0600: it holds what was received)."""

    def __init__(self, path: Path) -> None:
        private_file(path)
        self._f: IO[str] = path.open("a", encoding="utf-8")

    def write(self, m: Message) -> None:
        self._f.write(to_line(m) + "\n")

    def close(self) -> None:
        self._f.close()
