"""Robust plans at start-up: the search (what every start of a stream with a model set did before
issue 11's cache) against a hit in the plan cache keyed by the model set's content (which still
rebuilds the plan, re-runs the exact checks and re-certifies the worst case over the whole set).

Model sets: 99 % boxes calibrated from the expected transition counts of the true chain
(α, β) = (0.005, 0.05) and (0.03, 0.03) after 1,000, 10,000 and 100,000 steps; ε = 1, even split;
designs ``optimal`` (the default) and ``exact``. Both sides are measured in this one process, side by
side, as CPU seconds (``time.process_time``; the machine is shared, so wall time is noisy), median of
``--reps`` repetitions, after the kernels are compiled.

Target (brief of issue 11's daemon work, no figure in the issue): a hit costs less than the search
(ratio < 1) in every cell, with the same plan table and certified worst case.

Outputs in ``--out``: ``bench_robust_cache.md`` and ``.json`` (``_quick`` with ``--quick``).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from streamguard.model import modelset
from streamguard.model.calibrate import TransitionData
from streamguard.model.robust import robust_stream_plan
from streamguard.model.robust_cache import cached_robust_stream_plan
from streamguard.redaction.plan_cache import PlanCache

from ._common import base_parser, environment, environment_line, markdown_table, output_dir, progress, verdict, write_report

EPS = 1.0
CHAINS = ((0.005, 0.05), (0.03, 0.03))


def _counts(alpha: float, beta: float, steps: int) -> np.ndarray:
    """Expected transition counts of ``steps`` stationary steps (rounded): a typical calibration."""
    pi0 = beta / (alpha + beta)
    n0, n1 = steps * pi0, steps * (1 - pi0)
    return np.rint([[n0 * (1 - alpha), n0 * alpha], [n1 * beta, n1 * (1 - beta)]]).astype(np.int64)


def _cpu(fn: Callable[[], Any], reps: int) -> tuple[list[float], Any]:
    times, out = [], None
    for _ in range(reps):
        t0 = time.process_time()
        out = fn()
        times.append(time.process_time() - t0)
    return times, out


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="repetitions per measurement (default 3)")
    args = parser.parse_args(argv)
    out = output_dir(args.out)
    reps = 1 if args.quick else max(1, args.reps)
    lengths = (1_000, 10_000) if args.quick else (1_000, 10_000, 100_000)
    designs = ("optimal",) if args.quick else ("optimal", "exact")
    env = environment()
    robust_stream_plan(modelset.from_calibration(TransitionData(_counts(0.1, 0.2, 1000)), 0.99), EPS)  # compile
    rows, results, all_ok = [], [], True
    with tempfile.TemporaryDirectory() as tmp:
        for (a, b) in CHAINS:
            for n in lengths:
                ms = modelset.from_calibration(TransitionData(_counts(a, b, n)), 0.99)
                for design in designs:
                    progress(f"({a:g}, {b:g}) {n} steps, {design}")
                    t_search, fresh = _cpu(lambda: robust_stream_plan(ms, EPS, design=design), reps)
                    cache = PlanCache(Path(tmp) / f"{a}-{b}-{n}-{design}.json")
                    cached_robust_stream_plan(ms, EPS, design=design, cache=cache)  # fills the cache
                    t_hit, hit = _cpu(lambda: cached_robust_stream_plan(ms, EPS, design=design, cache=cache), reps)
                    same = (hit.plan.table().tolist() == fresh.plan.table().tolist()
                            and hit.worst.bound == fresh.worst.bound)
                    s, h = statistics.median(t_search), statistics.median(t_hit)
                    ok = same and h < s
                    all_ok &= ok
                    rows.append([f"({a:g}, {b:g})", f"{n:,}", design, f"{s:.4f}", f"{h:.4f}", f"{h / s:.3f}",
                                 "yes" if same else "NO", verdict(ok)])
                    results.append({"alpha": a, "beta": b, "steps": n, "design": design, "search_cpu_s": t_search,
                                    "hit_cpu_s": t_hit, "same_plan_and_worst_case": same,
                                    "worst_case": fresh.worst.bound})
    table = markdown_table(["true (α, β)", "steps", "design", "search CPU [s]", "cache hit CPU [s]", "hit ÷ search",
                            "same plan", "hit < search"], rows)
    report = "\n\n".join([
        "# Robust plans at start-up: search vs plan-cache hit",
        environment_line(env),
        f"ε = {EPS:g}, 99 % boxes, medians of {reps} repetitions of CPU seconds in one process.", table]) + "\n"
    write_report(out, "bench_robust_cache", args.quick, report, {"environment": env, "epsilon": EPS, "reps": reps, "cells": results})
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
