"""Helpers shared by the benchmark scripts: CLI, progress lines, timing, tables and result files.

Nothing here measures anything by itself; the scripts decide what is timed.
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

#: Default output directory (git-ignored).
RESULTS_DIR = Path(__file__).resolve().parent / "results"

_START = time.perf_counter()


# --------------------------------------------------------------------------------------------- CLI


def base_parser(description: str) -> argparse.ArgumentParser:
    """Parser with the options every benchmark accepts: ``--quick`` and ``--out DIR``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="small sizes (< 20 s), for smoke tests")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help=f"output directory (default {RESULTS_DIR})")
    return parser


def output_dir(path: Path) -> Path:
    """Create the output directory if needed and return it."""
    path.mkdir(parents=True, exist_ok=True)
    return path


def result_stem(name: str, quick: bool) -> str:
    """File stem of a script's outputs; quick runs get their own files so they never overwrite a full run."""
    return f"{name}_quick" if quick else name


# -------------------------------------------------------------------------------------- progress


def progress(message: str) -> None:
    """One progress line on stderr, prefixed with the seconds since the script started."""
    print(f"[{time.perf_counter() - _START:7.1f} s] {message}", file=sys.stderr, flush=True)


def elapsed() -> float:
    """Seconds since the script started."""
    return time.perf_counter() - _START


# ---------------------------------------------------------------------------------------- timing


@dataclass(frozen=True)
class Timing:
    """Wall-clock seconds per call (``time.perf_counter``) of each repetition of one measurement;
    a repetition ran the call ``inner`` times back to back. ``cpu`` holds the same repetitions'
    CPU seconds per call of this process (``time.process_time``): on a loaded machine, CPU time of
    a pinned single-threaded call is the steadier measure."""

    times: tuple[float, ...]
    inner: int = 1
    cpu: tuple[float, ...] = ()

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def min(self) -> float:
        return min(self.times)

    @property
    def max(self) -> float:
        return max(self.times)

    @property
    def cpu_median(self) -> float:
        """Median CPU seconds per call (NaN if CPU time was not recorded)."""
        return statistics.median(self.cpu) if self.cpu else math.nan

    def as_dict(self) -> dict[str, Any]:
        out = {"median_s": self.median, "min_s": self.min, "max_s": self.max, "reps": len(self.times),
               "inner": self.inner, "times_s": list(self.times)}
        if self.cpu:
            out |= {"cpu_median_s": self.cpu_median, "cpu_s": list(self.cpu)}
        return out


def measure(fn: Callable[[], T], reps: int = 3, min_time: float = 0.0) -> tuple[Timing, T]:
    """Time ``fn``: ``reps`` repetitions, each calling it ``inner`` times, reported per call.

    With ``min_time`` > 0 a first call calibrates ``inner`` so that a repetition lasts at least
    ``min_time`` seconds (short calls are otherwise dominated by timer and cache noise); if that
    call alone lasts ``min_time`` it counts as the first repetition, so long calls are not run
    an extra time. Garbage is collected once before the repetitions and the collector is off
    while they run. Warm-up (JIT) is the caller's job. Returns the timing and the last result.
    """
    if reps < 1:
        raise ValueError("reps must be ≥ 1")
    inner = 1
    times: list[float] = []
    cpu: list[float] = []
    if min_time > 0:
        t0, c0 = time.perf_counter(), time.process_time()
        result = fn()
        once = time.perf_counter() - t0
        if once >= min_time:
            times.append(once)
            cpu.append(time.process_time() - c0)
        else:
            inner = math.ceil(min_time / max(once, 1e-9))
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        while len(times) < reps:
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(inner):
                result = fn()
            times.append((time.perf_counter() - t0) / inner)
            cpu.append((time.process_time() - c0) / inner)
    finally:
        if was_enabled:
            gc.enable()
    return Timing(tuple(times), inner, tuple(cpu)), result


def loglog_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of log y against log x: 1 means linear growth, 2 quadratic."""
    lx = [math.log(x) for x in xs]
    ly = [math.log(y) for y in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    sxx = sum((a - mx) ** 2 for a in lx)
    if sxx == 0:
        return math.nan
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sxx


# ------------------------------------------------------------------------------------ formatting


def fmt_seconds(s: float) -> str:
    """Seconds with a unit that keeps 3 significant digits (ns … s)."""
    if s is None or not math.isfinite(s):
        return "—"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def fmt_range(t: Timing) -> str:
    """Median with [min–max] of a timing."""
    return f"{fmt_seconds(t.median)} [{fmt_seconds(t.min)}–{fmt_seconds(t.max)}]"


def fmt_rate(per_second: float, unit: str = "rec/s") -> str:
    """A rate with an SI prefix: 23.4 M rec/s."""
    for prefix, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if per_second >= scale:
            return f"{per_second / scale:.3g} {prefix} {unit}"
    return f"{per_second:.3g} {unit}"


def fmt_pow10(n: int) -> str:
    """10^k for exact powers of ten, else the number with thousands separators."""
    k = round(math.log10(n)) if n > 0 else 0
    return f"10^{k}" if n == 10**k else f"{n:,}"


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], align: str | None = None) -> str:
    """A GitHub-markdown table, padded so it also reads well as plain text.

    ``align`` has one character per column, 'l' or 'r' (default: first column left, rest right).
    """
    align = align or "l" + "r" * (len(headers) - 1)
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        parts = [c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(row, widths, align)]
        return "| " + " | ".join(parts) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if a == "r" else (":" + "-" * (w + 1)) for w, a in zip(widths, align)) + "|"
    return "\n".join([line(cells[0]), rule] + [line(r) for r in cells[1:]])


# ------------------------------------------------------------------------------------------ files


def write_csv(path: Path, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(headers)
        writer.writerows(rows)


def write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, default=_json_default) + "\n")


def write_report(out: Path, name: str, quick: bool, report: str, data: Any) -> None:
    """Print the markdown ``report`` and write it and ``data`` to ``out/<name>[_quick].{md,json}``."""
    print(report)
    stem = result_stem(name, quick)
    (out / f"{stem}.md").write_text(report)
    write_json(out / f"{stem}.json", data)
    progress(f"wrote {out / stem}.md and {stem}.json")


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "as_dict"):
        return obj.as_dict()
    if hasattr(obj, "tolist"):  # numpy scalars and arrays
        return obj.tolist()
    return str(obj)


def environment() -> dict[str, Any]:
    """Where the numbers come from: versions, CPU, the cores this process may use, and the git commit."""
    import numba
    import numpy

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "numba": numba.__version__,
        "machine": platform.machine(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "numba_threads": numba.config.NUMBA_NUM_THREADS,
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    info.update(_git_state())
    return info


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _git_state() -> dict[str, Any]:
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "streamguard", "firmware_sim"], cwd=root,
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {"git_commit": None}
    return {"git_commit": commit, "library_modified_since_commit": bool(dirty)}


def environment_line(env: dict[str, Any]) -> str:
    """One readable line summarising :func:`environment`."""
    commit = (env.get("git_commit") or "?")[:10]
    dirty = " (+ uncommitted library changes)" if env.get("library_modified_since_commit") else ""
    return (f"{env['cpu']}, {env['cpu_count']} cores (affinity {env['affinity']}), Python {env['python']}, "
            f"numpy {env['numpy']}, numba {env['numba']}; commit {commit}{dirty}; {env['date_utc']}")


class PredrawnSource:
    """A BitSource returning words drawn beforehand: times a sampling kernel without the draw."""

    deterministic = True

    def __init__(self, words: Any) -> None:
        self._words = words

    def words(self, n: int) -> Any:
        return self._words[:n]
