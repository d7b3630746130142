"""The privacy ledger over a long uptime: what a stream's history costs the daemon.

A ledger file is filled with the history of one stream of one family — tumbling aggregate windows
(``admit``, one per window, as the daemon records them), redaction marks or channel ranges of 4,096
records (``commit_all``, 500 at a time) — at several sizes. For each size, side by side:

- **replay**: ``Ledger.open`` of the file in a fresh interpreter: seconds and the RSS it adds, and
  the RSS each further event adds between two sizes (docs/implementation.md, "Growth"); the file
  holds the summary checkpoint its close wrote, so this is a start from it
  (``ledger/checkpoint.py``; a full replay beside it: ``bench_ledger_startup.py``);
- **odometer rebuild**: :func:`~streamguard.ledger.odometer.odometer` built after a new event, as
  the daemon's status cache does (CPU seconds, median of repetitions);
- **admission**: the budget filter's check of the next release (``StreamBook.excess``);
- **cached**: what a status costs when nothing changed (:class:`OdometerCache` hit).

Targets (no figure in an issue): a cached status ≤ 0.05 ms at every size; a rebuild and an
admission ≤ 1 ms at every size, since the book keeps summaries instead of the events (before them:
283 ms to rebuild at 30,000 windows, 233 ms at 30,000 marks, 7.4 s per admission at 8,000
channel ranges). Each mark keeps a small summary (a packed row once checkpointed).

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

from streamguard.model.chain import MarkovChain
from streamguard.ledger.events import AggregateEvent, ChannelClaim, ChannelEvent, Event, RedactionEvent
from streamguard.ledger.odometer import OdometerCache, odometer
from streamguard.ledger.store import Ledger
from streamguard.quilt import QuiltModel, sigma_inf

from ._common import base_parser, environment, environment_line, markdown_table, output_dir, progress, verdict, write_report

CHAIN = MarkovChain([[0.9, 0.1], [0.2, 0.8]])
WINDOW = 10  # positions per aggregate window
CACHED_TARGET_S = 0.05e-3
BOUNDED_TARGET_S = 1e-3  # rebuild and admission
CHANNEL_RANGE = 4096  # records per channel range (the daemon's reservation)
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


def _channel(i: int) -> ChannelEvent:
    lo = CHANNEL_RANGE * i
    return ChannelEvent(device="d", stream="s", time=1.0, channel="rr:eps=0.5", lo=lo, hi=lo + CHANNEL_RANGE - 1,
                        claims=(ChannelClaim("ldp_x", 0.5), ChannelClaim("alip_l", 0.25)), stream_leakage=0.75,
                        model="c1")


MODEL = QuiltModel(CHAIN, "stat")
SIGMA = sigma_inf(MODEL, 1.0).sigma * (1 + 1e-9)


def event(family: str, i: int) -> Event:
    """Event ``i`` of the family's history."""
    if family == "aggregate":
        return _aggregate(MODEL, SIGMA, i)
    return _mark(i) if family == "redaction" else _channel(i)


def fill(led: Ledger, family: str, start: int, stop: int) -> None:
    """Record events ``start`` … ``stop − 1`` of the family's history."""
    if family == "aggregate":
        for i in range(start, stop):
            led.admit(event(family, i), 1e9, model=MODEL)
    else:
        for lo in range(start, stop, 500):
            led.commit_all([event(family, i) for i in range(lo, min(stop, lo + 500))])


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
        for family in ("aggregate", "channel", "redaction"):
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
                    nxt = event(family, n)
                    admission = _cpu(lambda: led.book("d", "s").excess(nxt, 1e9), reps)
                    cache = OdometerCache(led, LIMIT)
                    cache("d", "s")
                    hits = 1000
                    cached = _cpu(lambda: [cache("d", "s") for _ in range(hits)], reps) / hits
                ok = cached <= CACHED_TARGET_S
                bounded = max(rebuild, admission) <= BOUNDED_TARGET_S
                all_ok &= ok and bounded
                progress(f"  replay {seconds:.2f} s (+{mb:.1f} MB), rebuild {rebuild * 1e3:.2f} ms, "
                         f"admission {admission * 1e3:.3f} ms, cached {cached * 1e6:.2f} µs")
                further = "—" if last_mb is None else f"{(mb - last_mb) * 1024 / (n - prev):.2f}"
                rows.append([family, f"{n:,}", f"{seconds:.3f}", f"{seconds / n * 1e3:.3f}", f"{mb:.1f}", further,
                             f"{rebuild * 1e3:.2f}", f"{admission * 1e3:.3f}", f"{cached * 1e6:.2f}", verdict(ok),
                             verdict(bounded)])
                last_mb = mb
                cells.append({"family": family, "events": n, "replay_s": seconds, "replay_rss_mb": mb,
                              "rebuild_cpu_s": rebuild, "admission_cpu_s": admission, "cached_cpu_s": cached})
    table = markdown_table(["family", "events", "replay s", "ms per event", "RSS added MB", "KB per further event",
                            "odometer rebuild ms", "admission ms", "cached µs", f"cached ≤ {CACHED_TARGET_S * 1e3:g} ms",
                            f"rebuild, admission ≤ {BOUNDED_TARGET_S * 1e3:g} ms"], rows)
    report = "\n\n".join([
        "# The privacy ledger over a long uptime",
        environment_line(env),
        f"One stream; aggregates: tumbling windows of {WINDOW} positions admitted one by one; channels: ranges of "
        f"{CHANNEL_RANGE:,} records and redaction marks, committed 500 at a time. Replay: `Ledger.open` in a fresh "
        f"interpreter. Rebuild, admission and cached: CPU time, median of {reps}, odometer limit {LIMIT} (the "
        "daemon's). The replay starts from the summary checkpoint the close wrote (ledger/checkpoint.py), and each "
        "redaction mark keeps a small summary, a packed row once checkpointed (docs/implementation.md, \"Growth\").",
        table]) + "\n"
    write_report(out, "bench_ledger_growth", args.quick, report, {"environment": env, "window": WINDOW, "limit": LIMIT, "cells": cells})
    return 0 if all_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
