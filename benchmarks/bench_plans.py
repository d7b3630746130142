"""Exact stream plans at start-up: designing them (the compiled exact search) and loading them from
the plan cache (issue 13: ``design = "exact"`` on a 1 Hz occupancy model took 90 s in ``plan`` and
``config check`` and 127 s before ``run`` took its first frame).

Models: the occupancy model of the issue (α = 0.001, β = 0.005), the Fig. 3 chain of paper 000
(α = 0.01, β = 0.8) and a moderately correlated one (α = 0.05, β = 0.3); ε = 1, even split. For each:

- design: ``plan_stream(design="exact")`` after the kernels are compiled (numba's on-disk cache);
- cache hit: ``cached_plan_stream`` with a warm cache file, which re-derives the regions and
  re-checks the stored rows with the exact audit before use;
- the exact leakage of the plan (must be ≤ ε) and its expected redactions against ``optimal``.

Target: ≤ 2 s to design the occupancy model's exact plan (and a cache hit well below that).
The figure before this change (the same search on interpreted numpy calls, one exact audit per
trial point) was measured once on the same machine: 411 s for one side of the occupancy model
under load; it is not re-run here (git stash this change to reproduce it).

Outputs in ``--out``: ``bench_plans.md`` and ``bench_plans.json`` (``_quick`` with ``--quick``).
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from streamguard import MarkovChain
from streamguard.redaction.plan import plan_stream
from streamguard.redaction.plan_cache import PlanCache, cached_plan_stream

from ._common import (
    base_parser,
    environment,
    environment_line,
    fmt_range,
    markdown_table,
    measure,
    output_dir,
    progress,
    result_stem,
    verdict,
    write_json,
)

EPS = 1.0
MODELS = {"occupancy (issue 13)": (0.001, 0.005), "paper 000 Fig. 3": (0.01, 0.8), "moderate": (0.05, 0.3)}
TARGET_S = 2.0


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="repetitions per measurement (default 3)")
    args = parser.parse_args(argv)
    out = output_dir(args.out)
    reps = 1 if args.quick else max(1, args.reps)
    env = environment()
    rows, results = [], {}
    plan_stream(MarkovChain.binary(0.2, 0.6), EPS, design="exact")  # load / compile the kernels
    with tempfile.TemporaryDirectory() as tmp:
        for name, (a, b) in MODELS.items():
            chain = MarkovChain.binary(a, b)
            progress(f"{name}: exact design")
            t_design, plan = measure(lambda: plan_stream(chain, EPS, design="exact"), reps)
            cache = PlanCache(Path(tmp) / f"{a}-{b}.json")
            cached_plan_stream(chain, EPS, design="exact", cache=cache, progress=lambda _m: None)
            progress(f"{name}: cache hit")
            t_hit, hit = measure(lambda: cached_plan_stream(chain, EPS, design="exact", cache=cache), reps)
            leak = plan.leakage().total
            if not leak <= EPS:
                raise AssertionError(f"{name}: the exact plan leaks {leak!r} > ε")
            opt = plan_stream(chain, EPS, design="optimal")
            red = plan.left.expected_redacted + plan.right.expected_redacted
            red_opt = opt.left.expected_redacted + opt.right.expected_redacted
            ok = t_design.median <= TARGET_S
            rows.append([name, f"{a:g} / {b:g}", f"{plan.left_horizon} / {plan.right_horizon}", fmt_range(t_design),
                         fmt_range(t_hit), f"{leak:.9f}", f"{red:.4f}", f"{red_opt:.4f}",
                         verdict(ok) if name.startswith("occupancy") else ""])
            results[name] = {"alpha": a, "beta": b, "design": t_design, "cache_hit": t_hit, "leakage": leak,
                             "expected_redacted": red, "expected_redacted_optimal": red_opt,
                             "horizons": [plan.left_horizon, plan.right_horizon]}
    table = markdown_table(["model", "α / β", "horizons", "exact design [s]", "cache hit [s]", "exact leakage",
                            "E[redacted] exact", "E[redacted] optimal", f"≤ {TARGET_S:g} s"], rows)
    report = "\n\n".join([
        "# Exact stream plans: design and cache hit",
        environment_line(env),
        f"ε = {EPS:g}, even split; medians of {reps} repetitions (median [min–max]) after the kernels were "
        "loaded. Before (issue 13): 90 s in `plan` on the occupancy model; the same search with one "
        "interpreted exact audit per trial point took 411 s for one side on this machine under load.",
        table]) + "\n"
    print(report)
    stem = result_stem("bench_plans", args.quick)
    (out / f"{stem}.md").write_text(report)
    write_json(out / f"{stem}.json", {"environment": env, "epsilon": EPS, "reps": reps, "models": results,
                                      "target_seconds": TARGET_S})
    progress(f"wrote {out / stem}.md and {stem}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
