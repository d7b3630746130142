"""k-state 3R (issue 12): exact audit cost against k and n, plan time against k, and utility of the exact
design against the best data-independent window.

(a) Audit: ``redaction_leakage`` of dense random redaction rows (no row is all zeros or all ones, so
    every position is walked) about the middle record of n = 10^3 … 10^6 (``--quick``: … 10^4), for
    k = 2, 3, 4, 6, 8 (random non-reversible chains), numba kernel; the numpy reference up to 10^4.
    Target: linear in n (log-log slope of the median time ≤ 1.15 for n ≥ 10^4).
(b) Plans: ``plan_kstream`` (exact design) for sticky chains with k = 2 … 8, even and optimised split.
    Target: an even-split plan for k ≤ 4 in ≤ 5 s (the daemon plans at start-up).
(c) Utility: expected redacted records per private mark of the exact design and of the best window
    (``design="window"``), each with its optimised split, for several chains and ε. Target: the exact
    design never redacts more than the window.

Medians of ≥ 3 repetitions after warm-up. Outputs in ``--out``: ``bench_kstate.md`` and
``bench_kstate.json`` (``--quick``: ``bench_kstate_quick.*``).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence

import numpy as np

from streamguard.audit.kstate import redaction_leakage
from streamguard.model.chain import MarkovChain
from streamguard.redaction.kplan import plan_kstream

from ._common import (
    base_parser,
    environment,
    fmt_seconds,
    loglog_slope,
    markdown_table,
    measure,
    output_dir,
    progress,
    result_stem,
    verdict,
    write_json,
)

KS = (2, 3, 4, 6, 8)
SIZES = (10**3, 10**4, 10**5, 10**6)
QUICK_SIZES = (10**3, 10**4)
NUMPY_MAX_N = 10**4
PLAN_KS = (2, 3, 4, 6, 8)
QUICK_PLAN_KS = (2, 3, 4)
EPS_GRID = (0.5, 1.0, 2.0)
SLOPE_TARGET = 1.15
PLAN_TARGET_S = 5.0


def random_chain(k: int, rng: np.random.Generator) -> np.ndarray:
    return rng.dirichlet(np.full(k, 0.7), size=k)


def sticky_chain(k: int, rng: np.random.Generator) -> np.ndarray:
    return 0.8 * np.eye(k) + 0.2 * rng.dirichlet(np.ones(k), size=k)


def audit_section(sizes: Sequence[int], reps: int) -> tuple[str, dict, bool]:
    rng = np.random.default_rng(1)
    rows_out, data, slopes = [], {}, {}
    for k in KS:
        P = random_chain(k, rng)
        mu = MarkovChain(P).stationary_law
        times = []
        for n in sizes:
            rows = rng.uniform(0.05, 0.95, (n, k))
            p = n // 2
            redaction_leakage(P, mu, rows[:10], 5)  # warm-up
            t, lk = measure(lambda: redaction_leakage(P, mu, rows, p), reps)
            tn = None
            if n <= NUMPY_MAX_N:
                tn, _ = measure(lambda: redaction_leakage(P, mu, rows, p, use_numpy=True), reps)
            times.append(t.median)
            data[f"k{k}_n{n}"] = {"numba": t.times, "numpy": None if tn is None else tn.times, "leakage": lk.total}
            rows_out.append([k, f"{n:.0e}", fmt_seconds(t.median), f"{t.median / n * 1e9:.0f}",
                             "—" if tn is None else fmt_seconds(tn.median), f"{lk.total:.4g}"])
            progress(f"audit k={k} n={n}: {fmt_seconds(t.median)}")
        big = [(n, s) for n, s in zip(sizes, times) if n >= 10**4]
        slopes[k] = loglog_slope([n for n, _ in big], [s for _, s in big]) if len(big) >= 2 else math.nan
    ok = all(not math.isfinite(s) or s <= SLOPE_TARGET for s in slopes.values())
    table = markdown_table(["k", "n", "numba median", "ns/position", "numpy reference", "leakage (nats)"], rows_out)
    slope_line = "Growth exponent in n (n ≥ 10^4): " + ", ".join(f"k={k}: {s:.2f}" for k, s in slopes.items())
    return table + "\n\n" + slope_line, {"timings": data, "slopes": slopes}, ok


def plan_section(ks: Sequence[int], reps: int) -> tuple[str, dict, bool]:
    rng = np.random.default_rng(2)
    rows_out, data, ok = [], {}, True
    for k in ks:
        chain = MarkovChain(sticky_chain(k, rng))
        t_even, sp = measure(lambda: plan_kstream(chain, 1.0, split="even"), reps)
        t_opt, so = measure(lambda: plan_kstream(chain, 1.0, split="optimize"), max(1, reps // 3))
        if k <= 4:
            ok &= t_even.median <= PLAN_TARGET_S
        data[k] = {"even": t_even.times, "optimize": t_opt.times}
        rows_out.append([k, fmt_seconds(t_even.median), f"{sp.left_horizon}/{sp.right_horizon}",
                         f"{sp.expected_redacted():.3f}", fmt_seconds(t_opt.median), f"{so.expected_redacted():.3f}"])
        progress(f"plan k={k}: even {fmt_seconds(t_even.median)}, optimize {fmt_seconds(t_opt.median)}")
    table = markdown_table(["k", "even split", "horizons ℓ/r", "E[redacted]", "optimised split", "E[redacted]"],
                           rows_out)
    return table, data, ok


def utility_section(quick: bool) -> tuple[str, dict, bool]:
    rng = np.random.default_rng(3)
    chains = {
        "sticky k=3": np.array([[0.8, 0.15, 0.05], [0.1, 0.8, 0.1], [0.05, 0.15, 0.8]]),
        "activity k=4": np.array([[0.8, 0.15, 0.05, 0.0], [0.05, 0.8, 0.1, 0.05],
                                  [0.0, 0.1, 0.8, 0.1], [0.1, 0.0, 0.15, 0.75]]),
        "random k=4": random_chain(4, rng),
    }
    if not quick:
        chains["sticky k=5"] = sticky_chain(5, rng)
    rows_out, data, ok = [], {}, True
    for name, P in chains.items():
        chain = MarkovChain(P)
        for eps in EPS_GRID:
            ex = plan_kstream(chain, eps, split="optimize")
            win = plan_kstream(chain, eps, design="window", split="optimize")
            e_ex, e_win = ex.expected_redacted(), win.expected_redacted()
            ok &= e_ex <= e_win + 1e-9 and ex.leakage().total <= eps * (1 + 1e-12)
            data[f"{name} eps={eps}"] = {"exact": e_ex, "window": e_win, "leakage": ex.leakage().total}
            rows_out.append([name, eps, f"{e_win:.3f}", f"{e_ex:.3f}", f"{(e_win - e_ex) / e_win * 100:.1f} %",
                             f"{ex.leakage().total:.4f}"])
            progress(f"utility {name} ε={eps}: window {e_win:.3f}, exact {e_ex:.3f}")
    table = markdown_table(["chain", "ε", "best window: E[redacted]", "exact 3R: E[redacted]", "fewer redactions",
                            "exact leakage"], rows_out)
    return table, data, ok


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="repetitions per measurement (≥ 3)")
    args = parser.parse_args(argv)
    if args.reps < 3:
        parser.error("--reps must be ≥ 3")
    out = output_dir(args.out)
    stem = result_stem("bench_kstate", args.quick)
    audit, audit_data, audit_ok = audit_section(QUICK_SIZES if args.quick else SIZES, args.reps)
    plans, plan_data, plan_ok = plan_section(QUICK_PLAN_KS if args.quick else PLAN_KS, args.reps)
    util, util_data, util_ok = utility_section(args.quick)
    targets = markdown_table(["target", ""], [
        [f"audit linear in n (slope ≤ {SLOPE_TARGET})", verdict(audit_ok)],
        [f"even-split plan for k ≤ 4 in ≤ {PLAN_TARGET_S:g} s", verdict(plan_ok)],
        ["exact design never redacts more than the best window (and meets ε)", verdict(util_ok)],
    ])
    report = "\n\n".join([
        f"# k-state 3R benchmarks{' (quick)' if args.quick else ''}",
        "## (a) Exact audit of dense random rows about the middle record", audit,
        "## (b) Stream plans (exact design, ε = 1, sticky chains)", plans,
        "## (c) Expected redacted records per private mark: exact 3R vs the best window (optimised splits)", util,
        "## Targets", targets]) + "\n"
    print(report)
    (out / f"{stem}.md").write_text(report)
    write_json(out / f"{stem}.json", {"environment": environment(), "audit": audit_data, "plans": plan_data,
                                      "utility": util_data, "targets": {"audit": audit_ok, "plan": plan_ok,
                                                                        "utility": util_ok}})
    return 0 if audit_ok and plan_ok and util_ok else 1


if __name__ == "__main__":
    sys.exit(main())
