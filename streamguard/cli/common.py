"""What every command shares: the one-line user error and the exit statuses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: ``run``'s exit status when another streamguard holds the outbox or the ledger (it exits at once)
#: or took over the MQTT client id (it stops): EX_TEMPFAIL.
EXIT_IN_USE = 75


class CliError(Exception):
    """A user error reported as one line, exit status 2."""



def json_arg(text: str, what: str) -> Any:
    """Parse a JSON command-line value; a :class:`CliError` naming ``what`` if it is not JSON."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise CliError(f"{what}: not valid JSON") from None



def read_text(path: Path) -> str:
    """A file's text; a :class:`CliError` naming the file if it cannot be read."""
    try:
        return path.read_text()
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}") from None
