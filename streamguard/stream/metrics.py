"""The daemon's counters as a Prometheus textfile (issue 13: metrics).

``[metrics] textfile = PATH`` makes the daemon rewrite PATH every ``interval`` seconds in the
Prometheus text exposition format (version 0.0.4), for node_exporter's textfile collector — a file
on the device, never a listening port. The file is replaced atomically (written beside it, then
renamed). The format is small and stable, so it is written with the standard library
(``prometheus_client`` would add a dependency for the same bytes).

Two kinds of counters:

- **Operational** (always written): frames accepted, rejected by reason and duplicated; records
  buffered in the outbox, dropped, published; reconnects; broker sessions lost; full-disk waits;
  ledger refusals. They show how the pipeline runs, not when anything private happened: none of
  them moves with a private mark (one step is one frame and one record, marked or not;
  ``tests/test_ops_metrics.py`` compares a run with marks and one without, series by series).
- **Private** (only with ``private_counters = true``): anything that moves with a private event
  (a button press, a privacy command, a private flag, a scheduled window), which a series of
  scrapes would date to the scrape interval: records released and redacted (redactions come in
  bursts around a private position); the ledger's events (a mark's figure is recorded when it
  opens and when its window is decided); the ``bad-private`` reason of a rejected frame (only a
  private request has it; without ``private_counters`` it is counted as ``wrong-type``, which
  other frames give too). They are also visible in the published records and the privacy status
  (which lists every mark: consumers audit them), but a monitoring system is often a different,
  wider audience: keep them out unless that audience may know.

The file is 0600 either way, created so before a byte is written
(:func:`~streamguard.support.private_files.write_private`): the monitoring agent reads it as the
daemon's user. (Residual: with ``outbox.commit_delay_ms`` > 0 a
store group holding a mark commits at once, so a scrape within that delay of a mark may see the
group's records published up to that much earlier — well under a scrape interval, and no more
than the records' arrival on the data topic shows.)

Names follow the Prometheus conventions: ``streamguard_`` prefix, ``_total`` for counters, base
units, a ``stream`` label (and ``reason`` for rejections).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..support.private_files import write_private

if TYPE_CHECKING:
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
)
_PRIVATE = (
    ("streamguard_records_released_total", "counter", "Records released (value published) since start."),
    ("streamguard_records_redacted_total", "counter", "Records redacted since start."),
    ("streamguard_ledger_events", "gauge", "Events in the privacy ledger (private marks add to them); every one "
                                           "is read at start, so the start-up time grows with it "
                                           "(docs/implementation.md, Growth)."),
)
#: Rejection reasons only a private request gives, and the reason of the same kind that other
#: frames give too, under which they are counted without ``private_counters`` (a ``private`` of the
#: wrong type is a field of the wrong type, as a ``value`` of one is).
PRIVATE_REASONS = {"bad-private": "wrong-type"}


class Counted(Protocol):
    """What the textfile reports (the daemon's status part, stream/status.py: Status): the streams'
    runtimes, the (released, redacted) counts of their committed decisions, the device counters."""

    @property
    def runtimes(self) -> Mapping[str, StreamRuntime]: ...

    @property
    def stored_counts(self) -> Mapping[str, tuple[int, int]]: ...

    async def device_counters(self) -> dict[str, float]: ...


def render(runtimes: Mapping[str, StreamRuntime], device: Mapping[str, float],
           stored: Mapping[str, tuple[int, int]], *, private_counters: bool = False) -> str:
    """The counters of the streams' ``runtimes`` and the ``device``-wide ones (keyed by metric
    name, from :meth:`Counted.device_counters`) in the text exposition format. ``stored``: per
    stream, the (released, redacted) counts of decisions already in the outbox
    (:attr:`Counted.stored_counts`): a draw a crash could still lose and draw again is not counted."""
    values: dict[str, list[tuple[dict[str, str], float]]] = {name: [] for name, _, _ in _OPERATIONAL + _PRIVATE}
    for name, rt in runtimes.items():
        c, label = rt.counters, {"stream": name}
        values["streamguard_frames_accepted_total"].append((label, c.accepted))
        values["streamguard_frames_duplicate_total"].append((label, c.duplicates))
        rejected: Counter[str] = Counter()
        for reason, n in c.rejected.items():
            rejected[reason if private_counters else PRIVATE_REASONS.get(reason, reason)] += n
        for reason, n in sorted(rejected.items()):
            values["streamguard_frames_rejected_total"].append((label | {"reason": reason}, n))
        released, redacted = stored.get(name, (0, 0))
        values["streamguard_records_released_total"].append((label, released))
        values["streamguard_records_redacted_total"].append((label, redacted))
    for name, value in device.items():
        values[name].append(({}, value))
    metrics = _OPERATIONAL + (_PRIVATE if private_counters else ())
    return "".join(_family(name, kind, text, values[name]) for name, kind, text in metrics)


def _family(name: str, kind: str, text: str, samples: Iterable[tuple[dict[str, str], float]]) -> str:
    lines = [f"# HELP {name} {text}\n", f"# TYPE {name} {kind}\n"]
    for labels, value in samples:
        inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
        lines.append(f"{name}{{{inner}}} {value:g}\n" if inner else f"{name} {value:g}\n")
    return "".join(lines)


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


async def textfile_loop(counted: Counted, path: Path, interval: float, *, private_counters: bool) -> None:
    """Rewrite the textfile of ``counted`` every ``interval`` seconds until cancelled (a failed
    write is logged once per streak of failures, and retried)."""
    failing = False
    while True:
        text = render(counted.runtimes, await counted.device_counters(), counted.stored_counts,
                      private_counters=private_counters)
        try:
            write_private(path, text)
            failing = False
        except OSError as exc:
            if not failing:
                log.warning("metrics textfile %s cannot be written: %s", path, exc.strerror)
            failing = True
        await asyncio.sleep(interval)
