"""What every command shares: the one-line user error and the exit statuses."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

#: ``run``'s exit status when another streamguard holds the outbox or the ledger (it exits at once)
#: or took over the MQTT client id (it stops): EX_TEMPFAIL.
EXIT_IN_USE = 75
#: Exit status of every command when the configuration is invalid, and of ``run`` when the broker
#: refuses it for good (credentials, TLS; retrying cannot mend it) or the password file cannot be
#: read: EX_CONFIG (sysexits.h), so systemd and scripts tell a broken config from a transient failure.
EXIT_CONFIG = 78
#: ``run``'s exit status when the disk under the outbox or the ledger has no room at start (the
#: shutdown reserve included, stream/disk.py) or is still full at a stop: EX_IOERR.
EXIT_DISK_FULL = 74
#: The last line of a plan's table (``plan``, binary and k-state).
GUARANTEE_NOTE = "Guarantee holds under the stated Markov model; see docs/guarantees.md."


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
def user_plan_cache() -> Any:
    """The user's plan cache ($XDG_CACHE_HOME/streamguard/plans.json), or None without a home."""
    from ..redaction.plan_cache import PlanCache, default_cache_path

    path = default_cache_path()
    return None if path is None else PlanCache(path)


def stream_plan(chain: Any, epsilon: float, design: str, split: str | float,
                threshold: float | str | None = None, label: str = "") -> Any:
    """A stream plan from the user's plan cache, with a line on stderr while a slow (exact)
    design runs."""
    from ..redaction.plan_cache import cached_plan_stream

    return cached_plan_stream(chain, epsilon, design=design, split=split, threshold=threshold,
                              cache=user_plan_cache(),
                              progress=lambda msg: print(f"streamguard: {label}{msg}", file=sys.stderr))
