"""Calibration coverage (issue 11): do plans designed from a calibration protect under the TRUE chain?

For each true binary chain (the four of issue 11's table and two more) and each calibration length
(1,000 … 100,000 steps), simulate ``--runs`` calibrations (≥ 200 in a full run) of a stationary
path, and for each:

- **robust** (this issue): the confidence region at ``--confidence`` (streamguard calibrate) and
  the robust stream plan certified over it (:func:`streamguard.model.robust.robust_stream_plan`);
- **before**: the old calibration — add-one smoothed maximum likelihood — and the plan designed on
  that point estimate as if it were the truth; **MLE point**: the unsmoothed MLE, likewise.

Each plan's table is audited *exactly under the true chain* (streamguard.audit.exact_leakage on
the window with one released record beyond each horizon). Target: the share of calibrations
whose robust plan exceeds ε is ≤ 1 − confidence (PASS/MISS). A region holding a chain that never
leaves a state admits no stream plan: that calibration is counted as "no plan" (the daemon then
refuses to start; fails closed, never exceeds). Utility: expected redactions per mark under the true
chain, robust plan vs the plan designed on the true chain itself (the oracle) — what more data
buys back.

    python -m benchmarks.calibration_coverage            # 6 chains × 5 lengths × 200 runs, ~40 min on 2 busy cores
    python -m benchmarks.calibration_coverage --quick    # 3 chains × 2 lengths × 30 runs, ~75 s
"""

from __future__ import annotations

from typing import Any

import numpy as np

from streamguard.audit.exact import exact_leakage
from streamguard.model.chain import MarkovChain, ModelError
from streamguard.privacy.channel import ChannelSequence
from streamguard.model.calibrate import TransitionData
from streamguard.model.modelset import from_calibration
from streamguard.model.robust import robust_stream_plan
from streamguard.redaction.plan import StreamPlan, plan_stream

from ._common import base_parser, environment, markdown_table, output_dir, progress, result_stem, verdict, write_json

CHAINS = [(0.005, 0.05), (0.01, 0.02), (0.03, 0.03), (0.1, 0.2), (0.25, 0.5), (0.6, 0.7)]
LENGTHS = [1_000, 3_000, 10_000, 30_000, 100_000]
EPSILON = 1.0


def _simulate_counts(rng: np.random.Generator, a: float, b: float, n: int, runs: int) -> np.ndarray:
    """(runs, 2, 2) transition counts of ``runs`` stationary paths of length n, all at once."""
    x = np.empty((n, runs), dtype=np.int8)
    x[0] = rng.random(runs) < a / (a + b)
    for t in range(1, n):
        u = rng.random(runs)
        x[t] = np.where(x[t - 1] == 0, u < a, u >= b)
    codes = 2 * x[:-1].astype(np.int64) + x[1:]
    return np.stack([np.bincount(codes[:, r], minlength=4).reshape(2, 2) for r in range(runs)])


def _true_leakage(true: MarkovChain, plan: StreamPlan) -> float:
    window = np.vstack([np.zeros((1, 2)), plan.table(), np.zeros((1, 2))])
    return exact_leakage(true, ChannelSequence.from_redaction(window), plan.left_horizon + 1).total


def _redactions(true: MarkovChain, plan: StreamPlan) -> float:
    return float(np.sum(plan.table() * true.initial[None, :])) - 1.0


def _point_plan(counts: np.ndarray, smooth: float) -> StreamPlan | None:
    est = (counts + smooth) / (counts.sum(axis=1, keepdims=True) + 2 * smooth)
    try:
        return plan_stream(MarkovChain(est), EPSILON)
    except (ModelError, ValueError):
        return None  # e.g. an MLE that never leaves a state


def run_cell(rng: np.random.Generator, a: float, b: float, n: int, runs: int, confidence: float) -> dict[str, Any]:
    true = MarkovChain.binary(a, b)
    oracle = plan_stream(true, EPSILON)
    out: dict[str, Any] = {"alpha": a, "beta": b, "n": n, "runs": runs, "robust_over": 0, "no_plan": 0,
                           "outside_region": 0, "robust_max_ratio": 0.0, "robust_redactions": [],
                           "before_over": 0, "before_max_ratio": 0.0, "mle_over": 0, "mle_max_ratio": 0.0,
                           "mle_no_plan": 0, "oracle_redactions": _redactions(true, oracle)}
    for counts in _simulate_counts(rng, a, b, n, runs):
        ms = from_calibration(TransitionData(counts), confidence)
        out["outside_region"] += not ms.contains(true)
        try:
            rp = robust_stream_plan(ms, EPSILON)
        except ModelError:
            out["no_plan"] += 1
        else:
            v = _true_leakage(true, rp.plan)
            out["robust_over"] += v > EPSILON * (1 + 1e-9)
            out["robust_max_ratio"] = max(out["robust_max_ratio"], v / EPSILON)
            out["robust_redactions"].append(_redactions(true, rp.plan))
        for key, smooth in (("before", 1.0), ("mle", 0.0)):
            pp = _point_plan(counts, smooth)
            if pp is None:
                out[f"{key}_no_plan"] = out.get(f"{key}_no_plan", 0) + 1
                continue
            v = _true_leakage(true, pp)
            out[f"{key}_over"] += v > EPSILON * (1 + 1e-9)
            out[f"{key}_max_ratio"] = max(out[f"{key}_max_ratio"], v / EPSILON)
    red = out.pop("robust_redactions")
    out["robust_redactions_mean"] = float(np.mean(red)) if red else None
    return out


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=None, help="calibrations per cell (default 200; 30 with --quick)")
    parser.add_argument("--confidence", type=float, default=0.95, help="confidence of the region (default 0.95)")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--lengths", help="calibration lengths, comma-separated (default 1000,3000,10000,30000,100000)")
    args = parser.parse_args(argv)
    runs = args.runs or (30 if args.quick else 200)
    chains = CHAINS[:3] if args.quick else CHAINS
    lengths = [int(x) for x in args.lengths.split(",")] if args.lengths else ([1_000, 10_000] if args.quick else LENGTHS)
    rng = np.random.default_rng(args.seed)
    cells = []
    for a, b in chains:
        for n in lengths:
            cells.append(run_cell(rng, a, b, n, runs, args.confidence))
            c = cells[-1]
            progress(f"(α, β) = ({a}, {b}), n = {n}: robust over ε {c['robust_over']}/{runs}, "
                     f"before {c['before_over']}/{runs}")
    allowed = 1.0 - args.confidence
    rows = []
    for c in cells:
        share = c["robust_over"] / c["runs"]
        red = c["robust_redactions_mean"]
        rows.append([f"({c['alpha']}, {c['beta']})", f"{c['n']:,}", c["runs"],
                     f"{c['outside_region']}", f"{c['robust_over']} ({share:.3f})", f"≤ {allowed:.3f}",
                     verdict(share <= allowed), f"{c['robust_max_ratio']:.3f}", c["no_plan"],
                     f"{c['before_over']} ({c['before_max_ratio']:.2f})", f"{c['mle_over']} ({c['mle_max_ratio']:.2f})",
                     "—" if red is None else f"{red:.1f}", f"{c['oracle_redactions']:.1f}"])
    headers = ["true (α, β)", "calibration steps", "runs", "true chain outside region", "robust plans over ε (share)",
               "target", "", "robust max true leakage ÷ ε", "no plan (fails closed)",
               "before: smoothed plans over ε (max ÷ ε)", "MLE point plans over ε (max ÷ ε)",
               "robust redactions / mark", "oracle redactions / mark"]
    print(f"ε = {EPSILON} nats, confidence {args.confidence}, {runs} calibrations per cell; leakage audited exactly "
          "under the true chain\n")
    print(markdown_table(headers, rows))
    out = output_dir(args.out) / f"{result_stem('calibration_coverage', args.quick)}.json"
    write_json(out, {"environment": environment(), "epsilon": EPSILON, "confidence": args.confidence,
                     "seed": args.seed, "cells": cells})
    (out.with_suffix(".md")).write_text(markdown_table(headers, rows) + "\n")
    progress(f"wrote {out}")
    return 0 if all(c["robust_over"] / c["runs"] <= allowed for c in cells) else 1


if __name__ == "__main__":
    raise SystemExit(main())
