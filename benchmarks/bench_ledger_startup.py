"""The ledger at a daemon's start: a full replay against the summary checkpoint (issue 28).

A ledger of one stream's redaction marks (``commit_all``, 500 at a time, as in
``bench_ledger_growth.py``) is built at each size; the ledger writes its checkpoints as the
daemon's does (every ``CHECKPOINT_EVERY`` events and at the close). Each start runs in a fresh
interpreter that has first imported the daemon (``streamguard.stream.daemon``, what a start has
loaded before it opens the ledger), and opens a copy of the file:

- **full replay**: the copy without its checkpoint file (a ledger without one: every event is read);
  opened read-only, so the time is the replay alone (a writable start then writes a checkpoint);
- **checkpoint**: the file as the close left it (the checkpoint covers every event): a clean restart;
- **checkpoint + tail**: ``CHECKPOINT_EVERY − 1`` marks written after the checkpoint and no
  close (a crash just before the next checkpoint): the worst case after a crash.

Per start: seconds in ``Ledger.open``, the RSS after the imports and after the open, and the
process's peak RSS (``VmHWM``). Targets (issue 28): start ≤ 2 s and peak RSS ≤ 250 MB at 300,000 marks.
Also the checkpoint itself: its size and the seconds one write takes (the pause it adds, every
``CHECKPOINT_EVERY`` events, on the thread that stores decisions).

Outputs in ``--out``: ``bench_ledger_startup.md`` and ``.json`` (``_quick`` with ``--quick``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from streamguard.ledger import checkpoint
from streamguard.ledger.checkpoint import CHECKPOINT_EVERY
from streamguard.ledger.store import Ledger

from ._common import base_parser, environment, environment_line, markdown_table, output_dir, progress, verdict, write_report
from .bench_ledger_growth import fill

START_TARGET_S = 2.0
RSS_TARGET_MB = 250.0

_START = """
import sys, time
status = lambda key: int([l for l in open("/proc/self/status") if l.startswith(key)][0].split()[1]) / 1024
rss = lambda: status("VmRSS:")
import streamguard.stream.daemon  # (what a daemon start has imported before it opens the ledger)
from streamguard.ledger.store import Ledger
base = rss(); t = time.perf_counter()
led = Ledger.open(sys.argv[1], readonly=sys.argv[2] == "ro")
seconds = time.perf_counter() - t
print(seconds, base, rss(), status("VmHWM:"))  # (not ru_maxrss: it keeps the forking parent's peak across exec)
led._db.close()  # (no checkpoint at the close: the copy is measured as it is)
"""


def start(path: Path, readonly: bool) -> tuple[float, float, float, float]:
    """(seconds to open, RSS MB after the imports, after the open, peak) in a fresh interpreter."""
    out = subprocess.run([sys.executable, "-c", _START, str(path), "ro" if readonly else "rw"], capture_output=True,
                         text=True, check=True, timeout=900).stdout.split()
    seconds, base, after, peak = map(float, out)
    return seconds, base, after, peak


def copy(path: Path, to: Path, *, with_checkpoint: bool) -> Path:
    """Copy the ledger (and its checkpoint file, or not)."""
    for suffix in ("", "-wal", ".checkpoint" if with_checkpoint else None):
        if suffix is not None and Path(f"{path}{suffix}").exists():
            shutil.copy(f"{path}{suffix}", f"{to}{suffix}")
    return to


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    args = parser.parse_args(argv)
    out = output_dir(args.out)
    sizes = (5_000, 20_000) if args.quick else (100_000, 300_000)
    env = environment()
    rows, cp_rows, cells, all_ok = [], [], [], True
    with tempfile.TemporaryDirectory() as tmp:
        path, done = Path(tmp) / "marks.sqlite", 0
        for n in sizes:
            progress(f"recording marks {done:,} … {n:,}")
            with Ledger.open(path) as led:
                fill(led, "redaction", done, n)
            done = n
            with Ledger.open(path) as led:  # one more checkpoint write, timed (everything is frozen already)
                t = time.perf_counter()
                led.save_summaries()
                write_s = time.perf_counter() - t
            size_mb = checkpoint.path_of(str(path)).stat().st_size / 2**20
            cp_rows.append([f"{n:,}", f"{size_mb:.1f}", f"{write_s:.3f}"])
            full = copy(path, Path(tmp) / "full.sqlite", with_checkpoint=False)
            crashed = copy(path, Path(tmp) / "crashed.sqlite", with_checkpoint=True)
            led = Ledger.open(crashed)
            fill(led, "redaction", n, n + CHECKPOINT_EVERY - 1)
            led._db.close()  # a crash: the next checkpoint never written
            for case, file, readonly in (("full replay", full, True), ("checkpoint", path, False),
                                         ("checkpoint + tail", crashed, False)):
                seconds, base, after, peak = start(file, readonly)
                ok_s, ok_mb = seconds <= START_TARGET_S, peak <= RSS_TARGET_MB
                if case != "full replay":
                    all_ok &= ok_s and ok_mb
                progress(f"  {n:,} marks, {case}: {seconds:.2f} s, RSS {base:.0f} → {after:.0f} MB, peak {peak:.0f} MB")
                rows.append([f"{n:,}", case, f"{seconds:.2f}", f"{base:.0f}", f"{after:.0f}", f"{peak:.0f}",
                             verdict(ok_s), verdict(ok_mb)])
                cells.append({"marks": n, "case": case, "start_s": seconds, "rss_imports_mb": base,
                              "rss_after_mb": after, "peak_rss_mb": peak, "checkpoint_mb": size_mb,
                              "checkpoint_write_s": write_s})
            for f in (full, crashed):
                for suffix in ("", "-wal", "-shm", ".checkpoint"):
                    Path(f"{f}{suffix}").unlink(missing_ok=True)
    table = markdown_table(["marks", "start", "open s", "RSS after imports MB", "RSS after open MB", "peak RSS MB",
                            f"≤ {START_TARGET_S:g} s", f"≤ {RSS_TARGET_MB:g} MB"], rows)
    cp_table = markdown_table(["marks", "checkpoint MB", "one write s"], cp_rows)
    report = "\n\n".join([
        "# The ledger at a daemon's start: full replay against the summary checkpoint",
        environment_line(env),
        "One stream of redaction marks (committed 500 at a time). Each start in a fresh interpreter that first "
        "imports the daemon; the targets apply to the checkpoint starts "
        f"(a full replay happens once, on the first start of a ledger written before checkpoints). The tail is "
        f"{CHECKPOINT_EVERY - 1:,} marks after the checkpoint (a crash just before the next one).",
        table, "The checkpoint (written every "
        f"{CHECKPOINT_EVERY:,} events and at a clean close, on the thread that stores decisions):", cp_table]) + "\n"
    write_report(out, "bench_ledger_startup", args.quick, report, {"environment": env, "every": CHECKPOINT_EVERY,
                                                                   "cells": cells})
    return 0 if all_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
