"""What every command shares: the one-line user error and the exit statuses."""

from __future__ import annotations

import json
from typing import Any

#: ``run``'s exit status when another streamguard holds the outbox or the ledger (it exits at once)
#: or took over the MQTT client id (it stops): EX_TEMPFAIL.
EXIT_IN_USE = 75
#: ``run``'s exit status when the broker refuses it for good (credentials, TLS; retrying cannot mend
#: it) or the password file cannot be read: EX_CONFIG.
EXIT_CONFIG = 78
#: ``run``'s exit status when the disk under the outbox or the ledger is full at start: EX_IOERR.
EXIT_DISK_FULL = 74


class CliError(Exception):
    """A user error reported as one line, exit status 2."""



def json_arg(text: str, what: str) -> Any:
    """Parse a JSON command-line value; a :class:`CliError` naming ``what`` if it is not JSON."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise CliError(f"{what}: not valid JSON") from None

