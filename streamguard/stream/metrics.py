"""The daemon's counters as a Prometheus textfile (issue 13: metrics).

``[metrics] textfile = PATH`` makes the daemon rewrite PATH every ``interval`` seconds in the
Prometheus text exposition format (version 0.0.4), for node_exporter's textfile collector — a file
on the device, never a listening port. The file is replaced atomically (written beside it, then
renamed). The format is small and stable, so it is written with the standard library
(``prometheus_client`` would add a dependency for the same bytes).

Two kinds of counters:

- **Operational** (always written): frames accepted, rejected by reason and duplicated; records
  buffered in the outbox, dropped, published; reconnects; broker sessions lost; full-disk waits;
  ledger refusals. They show how the pipeline runs, not when anything private happened.
- **Event timing** (only with ``private_counters = true``): records released and redacted.
  Redactions come in bursts around a private position, so a series of scrapes dates private events
  (a button press, a privacy command, a scheduled window) to the scrape interval. They are also visible in the published records and the privacy status, but a
  monitoring system is often a different, wider audience: keep them out unless that audience may
  know. With them the file is created 0600; without, 0644 (node_exporter must read it).

Names follow the Prometheus conventions: ``streamguard_`` prefix, ``_total`` for counters, base
units, a ``stream`` label (and ``reason`` for rejections).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .daemon import Daemon
    from .runtime import StreamRuntime

log = logging.getLogger(__name__)

#: (name, type, help) of every metric, in output order.
_OPERATIONAL = (
    ("streamguard_frames_accepted_total", "counter", "Raw frames accepted since start."),
    ("streamguard_frames_rejected_total", "counter", "Raw frames rejected since start, by reason."),
    ("streamguard_frames_duplicate_total", "counter", "Raw frames that repeated a step already seen (redeliveries)."),
    ("streamguard_outbox_records", "gauge", "Sanitized records stored and not yet acknowledged by the broker."),
    ("streamguard_outbox_dropped_total", "counter", "Records dropped by the drop-oldest policy since start."),
    ("streamguard_published_records_total", "counter", "Records acknowledged by the broker since start."),
    ("streamguard_reconnects_total", "counter", "Publisher reconnections since start."),
    ("streamguard_input_sessions_lost_total", "counter", "Reconnects on which the broker had lost the input session."),
    ("streamguard_disk_full_waits_total", "counter", "Attempts to store that met a full disk since start."),
    ("streamguard_ledger_refusals_total", "counter", "Aggregate windows the ledger refused (budget) since start."),
    ("streamguard_ledger_events", "gauge", "Events in the privacy ledger; every one is read at start, so the "
                                           "start-up time grows with it (docs/implementation.md, Growth)."),
)
_TIMING = (
    ("streamguard_records_released_total", "counter", "Records released (value published) since start."),
    ("streamguard_records_redacted_total", "counter", "Records redacted since start."),
)


def render(runtimes: Mapping[str, StreamRuntime], device: Mapping[str, float],
           stored: Mapping[str, tuple[int, int]], *, private_counters: bool = False) -> str:
    """The counters of the streams' ``runtimes`` and the ``device``-wide ones (keyed by metric
    name, from :meth:`Daemon.device_counters`) in the text exposition format. ``stored``: per
    stream, the (released, redacted) counts of decisions already in the outbox
    (:attr:`Daemon.stored_counts`): a draw a crash could still lose and draw again is not counted."""
    values: dict[str, list[tuple[dict[str, str], float]]] = {name: [] for name, _, _ in _OPERATIONAL + _TIMING}
    for name, rt in runtimes.items():
        c, label = rt.counters, {"stream": name}
        values["streamguard_frames_accepted_total"].append((label, c.accepted))
        values["streamguard_frames_duplicate_total"].append((label, c.duplicates))
        for reason, n in sorted(c.rejected.items()):
            values["streamguard_frames_rejected_total"].append((label | {"reason": reason}, n))
        released, redacted = stored.get(name, (0, 0))
        values["streamguard_records_released_total"].append((label, released))
        values["streamguard_records_redacted_total"].append((label, redacted))
    for name, value in device.items():
        values[name].append(({}, value))
    metrics = _OPERATIONAL + (_TIMING if private_counters else ())
    return "".join(_family(name, kind, text, values[name]) for name, kind, text in metrics)


def _family(name: str, kind: str, text: str, samples: Iterable[tuple[dict[str, str], float]]) -> str:
    lines = [f"# HELP {name} {text}\n", f"# TYPE {name} {kind}\n"]
    for labels, value in samples:
        inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
        lines.append(f"{name}{{{inner}}} {value:g}\n" if inner else f"{name} {value:g}\n")
    return "".join(lines)


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def write_textfile(path: Path, text: str, *, private: bool) -> None:
    """Replace ``path`` atomically with ``text`` (mode 0600 when ``private``, else 0644)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600 if private else 0o644)
    try:
        os.fchmod(fd, 0o600 if private else 0o644)  # (whatever the umask)
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


async def textfile_loop(daemon: Daemon, path: Path, interval: float, *, private_counters: bool) -> None:
    """Rewrite the textfile every ``interval`` seconds until cancelled (a failed write is logged
    once per streak of failures, and retried)."""
    failing = False
    while True:
        text = render(daemon.runtimes, await daemon.device_counters(), daemon.stored_counts,
                      private_counters=private_counters)
        try:
            write_textfile(path, text, private=private_counters)
            failing = False
        except OSError as exc:
            if not failing:
                log.warning("metrics textfile %s cannot be written: %s", path, exc.strerror)
            failing = True
        await asyncio.sleep(interval)
