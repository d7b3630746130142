"""The privacy ledger over a long uptime: what a stream's history costs the daemon.

A ledger file is filled with the history of one stream of one family — tumbling aggregate windows
(``admit``, one per window, as the daemon records them) or redaction marks (``commit_all``) — at
several sizes. For each size, side by side:

- **replay**: ``Ledger.open`` of the file in a fresh interpreter: seconds and the RSS it adds, and
  the RSS each further event adds between two sizes (every event is replayed into memory;
  docs/implementation.md, "Growth");
- **odometer rebuild**: :func:`~streamguard.ledger.odometer.odometer` built from the history, as every
  privacy status did before the cache (CPU seconds, median of repetitions);
- **cached**: what a status costs now when nothing changed (:class:`OdometerCache` hit).

Target (stop 22's fix, no figure in an issue): a status with an unchanged ledger costs ≤ 0.05 ms
at every size. The replay and rebuild rows are information: they grow with the history, and
bounding them needs a compaction of the book that is not built.

Outputs in ``--out``: ``bench_ledger_growth.md`` and ``.json`` (``_quick`` with ``--quick``).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from streamguard.chain import MarkovChain
from streamguard.ledger.events import AggregateEvent, RedactionEvent
from streamguard.ledger.odometer import OdometerCache, odometer
from streamguard.ledger.store import Ledger
from streamguard.quilt import QuiltModel, sigma_inf

from ._common import base_parser, environment, environment_line, markdown_table, output_dir, progress, verdict, write_report

CHAIN = MarkovChain([[0.9, 0.1], [0.2, 0.8]])
WINDOW = 10  # positions per aggregate window
CACHED_TARGET_S = 0.05e-3
LIMIT = 20  # the daemon's ODOMETER_LIMIT

_REPLAY = """
import sys, time
rss = lambda: int([l for l in open("/proc/self/status") if l.startswith("VmRSS")][0].split()[1]) / 1024
from streamguard.ledger.store import Ledger
import streamguard.quilt  # (imported by a replay of aggregates: not part of the history's cost)
before = rss(); t = time.perf_counter()
with Ledger.open(sys.argv[1], readonly=True) as led:
    print(time.perf_counter() - t, rss() - before)
"""


def _aggregate(model: QuiltModel, sigma: float, i: int) -> AggregateEvent:
    lo = WINDOW * i
    return AggregateEvent(device="d", stream="s", time=1.0, kind="count", lo=lo, hi=lo + WINDOW - 1, lipschitz=1.0,
                          beta=sigma, sigma=sigma, epsilon=1.0, model=model.identifier, mode=model.mode,
                          witness={"a": 9, "b": 9}, t_independent=True, sampler="csprng", deterministic=False)


def _mark(i: int) -> RedactionEvent:
    p = 20 * i + 10
    return RedactionEvent(device="d", stream="s", time=1.0, position=p, seq=p, plan="3R-optimal", epsilon=1.0,
                          left=0.5, right=0.5, total=0.9, honoured=True, lo=p - 3, hi=p + 3)


def fill(led: Ledger, family: str, start: int, stop: int) -> None:
    """Record events ``start`` … ``stop − 1`` of the family's history."""
    if family == "aggregate":
        model = QuiltModel(CHAIN, "stat")
        sigma = sigma_inf(model, 1.0).sigma * (1 + 1e-9)
        for i in range(start, stop):
            led.admit(_aggregate(model, sigma, i), 1e9, model=model)
    else:
        for lo in range(start, stop, 500):
            led.commit_all([_mark(i) for i in range(lo, min(stop, lo + 500))])


def _cpu(fn: Callable[[], Any], reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return statistics.median(times)


def replay(path: Path) -> tuple[float, float]:
    """(seconds, MB of RSS added) to open the ledger in a fresh interpreter."""
    out = subprocess.run([sys.executable, "-c", _REPLAY, str(path)], capture_output=True, text=True, check=True,
                         timeout=600).stdout.split()
    return float(out[0]), float(out[1])


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    args = parser.parse_args(argv)
    out = output_dir(args.out)
    sizes = (500, 2_000) if args.quick else (1_000, 10_000, 30_000)
    reps = 3
    env = environment()
    rows, cells, all_ok = [], [], True
    with tempfile.TemporaryDirectory() as tmp:
        for family in ("aggregate", "redaction"):
            path = Path(tmp) / f"{family}.sqlite"
            done, last_mb = 0, None
            for n in sizes:
                progress(f"{family}: recording events {done:,} … {n:,}")
                with Ledger.open(path) as led:
                    fill(led, family, done, n)
                prev, done = done, n
                seconds, mb = replay(path)
                with Ledger.open(path) as led:
                    rebuild = _cpu(lambda: odometer(led, "d", "s", limit=LIMIT), reps)
                    cache = OdometerCache(led, LIMIT)
                    cache("d", "s")
                    hits = 1000
                    cached = _cpu(lambda: [cache("d", "s") for _ in range(hits)], reps) / hits
                ok = cached <= CACHED_TARGET_S
                all_ok &= ok
                progress(f"  replay {seconds:.2f} s (+{mb:.1f} MB), rebuild {rebuild * 1e3:.2f} ms, "
                         f"cached {cached * 1e6:.2f} µs")
                further = "—" if last_mb is None else f"{(mb - last_mb) * 1024 / (n - prev):.2f}"
                rows.append([family, f"{n:,}", f"{seconds:.3f}", f"{seconds / n * 1e3:.3f}", f"{mb:.1f}", further,
                             f"{rebuild * 1e3:.2f}", f"{cached * 1e6:.2f}", f"{rebuild / cached:,.0f}×", verdict(ok)])
                last_mb = mb
                cells.append({"family": family, "events": n, "replay_s": seconds, "replay_rss_mb": mb,
                              "rebuild_cpu_s": rebuild, "cached_cpu_s": cached})
    table = markdown_table(["family", "events", "replay s", "ms per event", "RSS added MB", "KB per further event",
                            "odometer rebuild ms", "cached µs", "rebuild ÷ cached",
                            f"cached ≤ {CACHED_TARGET_S * 1e3:g} ms"], rows)
    report = "\n\n".join([
        "# The privacy ledger over a long uptime",
        environment_line(env),
        f"One stream; aggregates: tumbling windows of {WINDOW} positions admitted one by one; redaction: marks "
        f"committed 500 at a time. Replay: `Ledger.open` in a fresh interpreter. Rebuild and cached: CPU time, "
        f"median of {reps}, odometer limit {LIMIT} (the daemon's). The replay and rebuild columns grow with the "
        "history: information, not bounded yet (docs/implementation.md, \"Growth\").", table]) + "\n"
    write_report(out, "bench_ledger_growth", args.quick, report, {"environment": env, "window": WINDOW, "limit": LIMIT, "cells": cells})
    return 0 if all_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
