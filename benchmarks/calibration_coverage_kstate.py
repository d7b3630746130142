"""Calibration coverage for k-state chains (issue 11): do robust k-state plans protect under the TRUE chain?

The k-state row of :mod:`benchmarks.calibration_coverage`. For each true 3-state chain and each
calibration length, simulate ``--runs`` calibrations of a stationary path; for each, the row-wise
confidence region at ``--confidence`` (streamguard calibrate) and the robust k-state stream plan
certified over it (:func:`streamguard.model.krobust.robust_kstream_plan`), and beside it the plan
designed on the unsmoothed MLE as if it were the truth. Each plan's table is audited *exactly under
the true chain* (audit/kstate.py, a released record beyond each horizon). Target: the share of
calibrations whose robust plan exceeds ε ≤ 1 − confidence (PASS/MISS). A region holding a chain
that never leaves a state admits no plan ("no plan": the daemon refuses to start; fails closed).
Utility: expected redactions per mark under the true chain, robust vs the oracle (the plan designed
on the true chain).

    python -m benchmarks.calibration_coverage_kstate            # 2 chains × 3 lengths × 200 runs (hours on 2 busy cores)
    python -m benchmarks.calibration_coverage_kstate --quick    # 1 chain × 1 length × 5 runs
"""

from __future__ import annotations

from typing import Any

import numpy as np

from streamguard.model.chain import MarkovChain, ModelError
from streamguard.model.calibrate import TransitionData
from streamguard.model.krobust import kstream_windows, member_leakage, robust_kstream_plan
from streamguard.model.modelset import from_calibration
from streamguard.redaction.kplan import KStreamPlan, plan_kstream

from ._common import base_parser, environment, markdown_table, output_dir, progress, result_stem, verdict, write_json

CHAINS = {
    "sticky": [[0.9, 0.07, 0.03], [0.05, 0.9, 0.05], [0.1, 0.1, 0.8]],
    "fast": [[0.6, 0.3, 0.1], [0.2, 0.6, 0.2], [0.25, 0.25, 0.5]],
}
LENGTHS = [3_000, 10_000, 30_000]
EPSILON = 1.0
SPLIT = "even"  # the daemon's default


def _simulate_counts(rng: np.random.Generator, P: np.ndarray, n: int, runs: int) -> np.ndarray:
    """(runs, k, k) transition counts of ``runs`` stationary paths of length n, all at once."""
    k = P.shape[0]
    cum = np.cumsum(P, axis=1)
    x = rng.choice(k, size=runs, p=MarkovChain(P).stationary_law)
    counts = np.zeros((runs, k, k), dtype=np.int64)
    idx = np.arange(runs)
    for _ in range(n - 1):
        y = np.minimum((rng.random(runs)[:, None] > cum[x]).sum(axis=1), k - 1)
        np.add.at(counts, (idx, x, y), 1)
        x = y
    return counts


def _redactions(true: MarkovChain, plan: KStreamPlan) -> float:
    return float(sum(np.sum(sp.red[: sp.horizon] * true.stationary_law[None, :]) for sp in (plan.left, plan.right)))


def run_cell(rng: np.random.Generator, name: str, n: int, runs: int, confidence: float) -> dict[str, Any]:
    true = MarkovChain(CHAINS[name])
    oracle = plan_kstream(true, EPSILON, split=SPLIT)
    out: dict[str, Any] = {"chain": name, "n": n, "runs": runs, "robust_over": 0, "no_plan": 0,
                           "outside_region": 0, "robust_max_ratio": 0.0, "mle_over": 0, "mle_max_ratio": 0.0,
                           "oracle_redactions": _redactions(true, oracle)}
    red = []
    for i, counts in enumerate(_simulate_counts(rng, true.matrix, n, runs)):
        ms = from_calibration(TransitionData(counts), confidence)
        out["outside_region"] += not ms.contains(true)
        try:
            rp = robust_kstream_plan(ms, EPSILON, split=SPLIT)
        except ModelError:
            out["no_plan"] += 1
        else:
            v = member_leakage(true.matrix, kstream_windows(rp.plan))
            assert v is not None
            out["robust_over"] += v > EPSILON * (1 + 1e-9)
            out["robust_max_ratio"] = max(out["robust_max_ratio"], v / EPSILON)
            red.append(_redactions(true, rp.plan))
            if rp.point_plan is not None:
                vp = member_leakage(true.matrix, kstream_windows(rp.point_plan))
                assert vp is not None
                out["mle_over"] += vp > EPSILON * (1 + 1e-9)
                out["mle_max_ratio"] = max(out["mle_max_ratio"], vp / EPSILON)
        if (i + 1) % 10 == 0:
            progress(f"  {name}, n = {n}: {i + 1}/{runs} calibrations")
    out["robust_redactions_mean"] = float(np.mean(red)) if red else None
    return out


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=None, help="calibrations per cell (default 200; 5 with --quick)")
    parser.add_argument("--confidence", type=float, default=0.95, help="confidence of the region (default 0.95)")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--lengths", help="calibration lengths, comma-separated (default 3000,10000,30000)")
    parser.add_argument("--chains", help=f"comma-separated, of {', '.join(CHAINS)} (default all)")
    args = parser.parse_args(argv)
    runs = args.runs or (5 if args.quick else 200)
    names = args.chains.split(",") if args.chains else (["fast"] if args.quick else list(CHAINS))
    lengths = [int(x) for x in args.lengths.split(",")] if args.lengths else ([10_000] if args.quick else LENGTHS)
    rng = np.random.default_rng(args.seed)
    cells = []
    for name in names:
        for n in lengths:
            cells.append(run_cell(rng, name, n, runs, args.confidence))
            c = cells[-1]
            progress(f"{name}, n = {n}: robust over ε {c['robust_over']}/{runs}, MLE point {c['mle_over']}/{runs}")
    allowed = 1.0 - args.confidence
    rows = []
    for c in cells:
        share = c["robust_over"] / c["runs"]
        red = c["robust_redactions_mean"]
        rows.append([c["chain"], f"{c['n']:,}", c["runs"], c["outside_region"], f"{c['robust_over']} ({share:.3f})",
                     f"≤ {allowed:.3f}", verdict(share <= allowed), f"{c['robust_max_ratio']:.3f}", c["no_plan"],
                     f"{c['mle_over']} ({c['mle_max_ratio']:.2f})", "—" if red is None else f"{red:.1f}",
                     f"{c['oracle_redactions']:.1f}"])
    headers = ["true chain", "calibration steps", "runs", "true chain outside region", "robust plans over ε (share)",
               "target", "", "robust max true leakage ÷ ε", "no plan (fails closed)",
               "MLE point plans over ε (max ÷ ε)", "robust redactions / mark", "oracle redactions / mark"]
    print(f"k = 3 states, ε = {EPSILON} nats, confidence {args.confidence}, {runs} calibrations per cell; leakage "
          "audited exactly under the true chain\n")
    print(markdown_table(headers, rows))
    out = output_dir(args.out) / f"{result_stem('calibration_coverage_kstate', args.quick)}.json"
    write_json(out, {"environment": environment(), "epsilon": EPSILON, "confidence": args.confidence,
                     "seed": args.seed, "chains": {n: CHAINS[n] for n in names}, "cells": cells})
    (out.with_suffix(".md")).write_text(markdown_table(headers, rows) + "\n")
    progress(f"wrote {out}")
    return 0 if all(c["robust_over"] / c["runs"] <= allowed for c in cells) else 1


if __name__ == "__main__":
    raise SystemExit(main())
