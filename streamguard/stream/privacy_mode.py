"""A stream's **privacy mode** (issue 26): while it is on, every step of the stream is private.

It is switched by a command on the stream's command topic, the path every privacy command takes
(Home Assistant's *privacy mode* switch publishes these; stream/hass.py)::

    {"privacy_mode": "on"}    every step from now on is private (and the newest one, now)
    {"privacy_mode": "off"}   steps are private again only when marked

Each private step is a mark (source ``mode``) with the usual accounting: its leakage is
evaluated and recorded in the ledger like any mark's; marks combine by the element-wise maximum of
their redaction rows (notes/000 §4.5), so a run of them costs no more than one, and the records
around them are redacted.

The mode **survives restarts**: it is kept per stream in ``<outbox stem>.modes.json`` beside the
outbox (0600, written to a temporary file, synced and renamed), written *before* the command takes
effect — a crash right after a switch leaves the new mode in force at the next start, never a
mode the household did not ask for. A file that cannot be read or parsed turns the mode **on** for
every stream (fail closed) and says so in one error line; the stream's retained privacy status
carries ``privacy_mode`` (Home Assistant's switch reads its state there).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from ..support.private_files import write_private

log = logging.getLogger(__name__)

FIELD = "privacy_mode"
_VALUES = {"on": True, "off": False}


def requested(obj: object) -> bool | None:
    """The mode a decoded command asks for (True: on), or None when it is not a mode command.
    Raises ValueError for a mode command with a value other than ``"on"``/``"off"``."""
    if not isinstance(obj, dict) or FIELD not in obj:
        return None
    value = obj[FIELD]
    if not isinstance(value, str) or value not in _VALUES:
        raise ValueError(f"field '{FIELD}' must be \"on\" or \"off\"")
    return _VALUES[value]


def requested_bytes(data: bytes) -> bool | None:
    """:func:`requested` of a raw command; None for anything that is not a valid mode command."""
    try:
        return requested(json.loads(data.decode("utf-8")))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None


def beside(outbox: Path) -> Path:
    """The mode file: ``<outbox stem>.modes.json`` next to the outbox."""
    return Path(outbox).with_name(Path(outbox).stem + ".modes.json")


class ModeFile:
    """The persisted privacy modes of a daemon's streams (module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.modes: dict[str, bool] = {}

    def load(self, streams: list[str]) -> dict[str, bool]:
        """Each stream's mode as persisted (a stream not in the file: off). An unreadable or
        malformed file: every stream on, and one ERROR line naming the problem."""
        try:
            doc = json.loads(self.path.read_text())
            modes = doc["streams"]
            if doc.get("version") != 1 or not isinstance(modes, dict) or \
                    not all(isinstance(k, str) and isinstance(v, bool) for k, v in modes.items()):
                raise ValueError("not a version-1 mode file")
        except FileNotFoundError:
            modes = {}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.error("privacy modes: cannot read %s (%s): privacy mode ON for every stream until switched off",
                      self.path, exc)
            modes = dict.fromkeys(streams, True)
        self.modes = {name: bool(modes.get(name, False)) for name in streams}
        return dict(self.modes)

    def set(self, stream: str, on: bool) -> None:
        """Persist ``stream``'s mode (synced to disk before this returns)."""
        modes = {**self.modes, stream: on}
        write_private(self.path, json.dumps({"version": 1, "streams": modes}, sort_keys=True), synced=True)
        self.modes = modes
