"""Reproduce paper 000 Fig. 3: utility ν against the privacy budget ε for p = 1, n = 10, α = 0.01, β = 0.8.

What is computed at every ε of a log-spaced grid on [0.1, 10]:

- DIM-UB: Theorem 2's upper bound on any data-independent mechanism (a bound, not a plan);
- MQ (Algorithm 1 as printed), MQ tight (radius Δ* − 1) and the best window (exact optimum over
  data-independent mechanisms);
- 3R relaxation (the paper's common q, ``design="paper"``), 3R optimal relaxation (lower-hull q,
  ``design="optimal"``);
- 3R numerical, the paper's own curve: the regions of the relaxation and the smallest *common* q
  whose exact leakage meets ε (bisection, ``design.common_q_exact``);
- our exact design (``design="exact"``: per-position q checked by the exact audit), and the exact
  design with the budget split and the region threshold optimized (``split="optimize"``,
  ``threshold="optimize"``).

The full run adds both sides (ε·(1 ∓ 1e-7)) of the five region breakpoints in [0.1, 10] to the
grid, so the plotted jumps sit at the right ε; ``--quick`` (6 points) leaves them out.

Every plan is audited exactly (numba kernel, cross-checked against the numpy reference); a plan
whose leakage exceeds ε + 1e-9 stops the script with an error (exit status 2). The DIM-UB, MQ,
relaxation and numerical curves are also compared with the reference rows of notes/000 §6 (the
Fig. 3 table, and the values just below / above each breakpoint); a mismatch above 1e-6 or a
failed ordering check (e.g. exact design below the relaxation) gives exit status 1.

Outputs in ``--out``: ``paper_fig3.csv`` (one row per ε), ``paper_fig3_reference.csv`` and
``paper_fig3_breakpoints.csv`` (the comparisons) and ``paper_fig3.png`` (the figure); ``--quick``
writes ``paper_fig3_quick*`` instead.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import NamedTuple

import numpy as np

from streamguard import MarkovChain
from streamguard.audit.exact import exact_leakage
from streamguard.influence import pointwise_right
from streamguard.redaction.baselines import best_window_plan, mq_plan, theorem2_bound
from streamguard.redaction.design import common_q_exact
from streamguard.redaction.plan import RedactionPlan, finalize, plan_redaction
from streamguard.redaction.regions import M, S, side_redaction
from streamguard.redaction.side import SideModel, _classified

from ._common import (
    base_parser,
    environment,
    environment_line,
    markdown_table,
    output_dir,
    progress,
    result_stem,
    write_csv,
)

ALPHA, BETA, N, P = 0.01, 0.8, 10, 0  # P is the 0-based index of the paper's p = 1
CHAIN = MarkovChain.binary(ALPHA, BETA)
EPS_RANGE = (0.1, 10.0)
POINTS, QUICK_POINTS = 60, 6
#: A plan whose exact leakage exceeds ε by more than this is a privacy failure.
LEAK_TOL = 1e-9
#: Reference values of notes/000 §6 carry 6 decimals: agreement means |Δ| ≤ this.
REF_TOL = 1e-6


class PrivacyViolation(RuntimeError):
    """A plan leaks more than its budget, or the two exact audits disagree."""


# ------------------------------------------------------------------------------------ the curves


@dataclass(frozen=True)
class Outcome:
    """One method at one ε: utility ν, exact leakage (None for a bound), the q of the first M
    record (None if there is no M record) and the region string of the chain (1-based order)."""

    utility: float
    leakage: float | None = None
    q: float | None = None
    regions: str = ""


def paper_common_q_plan(chain: MarkovChain, eps: float) -> RedactionPlan:
    """The paper's "3R (numerical)": regions at threshold ε on the single (right) side, one common q
    for every M record, the smallest whose exact leakage is ≤ ε (bisection)."""
    model = SideModel(chain, P, "right", N - 1 - P)
    _, side_regions, common = _classified(model, eps)
    q = common_q_exact(side_regions, common, eps, model.exact_leakage)
    q_side = np.where(side_regions == M, q if q is not None else 0.0, 0.0)
    red = np.zeros((N, 2))
    regions = np.full(N, S, dtype=np.int8)
    width = side_regions.shape[0]
    red[P + 1 : P + 1 + width] = side_redaction(side_regions, common, q_side)
    regions[P + 1 : P + 1 + width] = side_regions
    return finalize(chain, N, (P,), eps, "numerical", red, regions, {P: (0.0, eps)})


@dataclass(frozen=True)
class Method:
    key: str
    label: str
    build: Callable[[MarkovChain, float], RedactionPlan | float]


METHODS: tuple[Method, ...] = (
    Method("dim_ub", "DIM-UB (Thm 2)", lambda c, e: theorem2_bound(c, N, P, e)),
    Method("mq", "MQ (Alg. 1 as printed)", lambda c, e: mq_plan(c, N, [P], e)),
    Method("mq_tight", "MQ tight", lambda c, e: mq_plan(c, N, [P], e, tight=True)),
    Method("best_window", "best window", lambda c, e: best_window_plan(c, N, [P], e)),
    Method("relax", "3R relaxation (paper q)", lambda c, e: plan_redaction(c, N, [P], e, design="paper")),
    Method("optimal", "3R optimal relaxation", lambda c, e: plan_redaction(c, N, [P], e, design="optimal")),
    Method("numerical", "3R numerical (paper, common q)", paper_common_q_plan),
    Method("exact", "3R exact design (ours)", lambda c, e: plan_redaction(c, N, [P], e, design="exact")),
    Method("exact_opt", "3R exact + opt. split/threshold",
           lambda c, e: plan_redaction(c, N, [P], e, design="exact", split="optimize", threshold="optimize")),
)
BY_KEY = {m.key: m for m in METHODS}
ALL_KEYS = tuple(m.key for m in METHODS)
REFERENCE_KEYS = ("dim_ub", "mq", "relax", "optimal", "numerical")

#: (a, b): ν_a ≤ ν_b must hold at every ε (each b searches a superset of a, or bounds it).
ORDER_CHECKS = (
    ("mq", "mq_tight"), ("mq_tight", "best_window"), ("best_window", "dim_ub"), ("mq", "relax"),
    ("relax", "optimal"), ("optimal", "exact"), ("numerical", "exact"), ("exact", "exact_opt"),
)


def outcome_of(plan: RedactionPlan | float, eps: float, label: str) -> Outcome:
    """Utility and exact leakage of a plan; raises :class:`PrivacyViolation` if it leaks > ε."""
    if not isinstance(plan, RedactionPlan):
        return Outcome(float(plan))
    leak = plan.leakage[P].total
    reference = exact_leakage(CHAIN, plan.channels(), P, use_numpy=True).total
    if not abs(leak - reference) <= 1e-9 * max(1.0, abs(leak)):
        raise PrivacyViolation(f"{label} at ε={eps:.6g}: numba audit {leak!r} ≠ numpy audit {reference!r}")
    if not leak <= eps + LEAK_TOL:
        raise PrivacyViolation(f"{label} at ε={eps:.6g}: exact leakage {leak:.12g} > ε (plan {plan.red.tolist()})")
    m_rows = np.flatnonzero(plan.regions == M)
    q = float(plan.red[m_rows[0], 0]) if m_rows.size else None
    return Outcome(plan.utility, leak, q, "".join(plan.region_names()))


def evaluate(eps: float, keys: Sequence[str] = ALL_KEYS) -> dict[str, Outcome]:
    """Every requested method at one ε."""
    return {k: outcome_of(BY_KEY[k].build(CHAIN, eps), eps, BY_KEY[k].label) for k in keys}


def _evaluate_job(eps: float, keys: tuple[str, ...]) -> tuple[float, dict[str, Outcome]]:
    return eps, evaluate(eps, keys)


def evaluate_all(grid: Sequence[float], keys: tuple[str, ...], jobs: int, what: str) -> dict[float, dict[str, Outcome]]:
    """Evaluate the grid, in ``jobs`` worker processes (fork) when jobs > 1; a progress line per ε."""
    results: dict[float, dict[str, Outcome]] = {}

    def done(eps: float, res: dict[str, Outcome]) -> None:
        results[eps] = res
        progress(f"{what}: ε = {eps:.4g} done ({len(results)}/{len(grid)})")

    if jobs <= 1:
        for eps in grid:
            done(*_evaluate_job(eps, keys))
    else:
        with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("fork")) as pool:
            futures = [pool.submit(_evaluate_job, eps, keys) for eps in grid]
            for fut in as_completed(futures):
                done(*fut.result())
    return {eps: results[eps] for eps in grid}


# --------------------------------------------------------------------------------- notes/000 §6


class RefRow(NamedTuple):
    """One row of the Fig. 3 table in notes/000 §6 (None where the table has '–')."""

    dim_ub: float
    mq: float
    relax_q: float | None
    relax_nu: float
    num_q: float | None
    num_nu: float
    relax_leak: float  # "exact leakage of the relaxation designs" table, same section


REFERENCE: dict[float, RefRow] = {
    0.10: RefRow(0.5, 0.4, 0.973641, 0.507810, 0.607661, 0.616248, 0.037219),
    0.15: RefRow(0.6, 0.5, 0.975542, 0.604831, 0.809304, 0.637668, 0.105617),
    0.20: RefRow(0.6, 0.5, 0.951456, 0.609589, 0.681989, 0.662817, 0.110977),
    0.30: RefRow(0.6, 0.5, 0.935656, 0.619065, 0.719734, 0.683042, 0.213093),
    0.40: RefRow(0.6, 0.5, 0.904981, 0.628154, 0.636950, 0.707570, 0.213093),
    0.50: RefRow(0.7, 0.6, 0.972540, 0.705424, 0.932052, 0.713422, 0.466004),
    0.70: RefRow(0.7, 0.6, 0.879990, 0.723706, 0.741185, 0.751124, 0.547575),
    1.00: RefRow(0.7, 0.6, 0.757415, 0.747918, 0.546926, 0.789496, 0.679971),
    1.50: RefRow(0.8, 0.7, 0.900021, 0.809874, 0.853388, 0.814480, 1.464699),
    2.00: RefRow(0.8, 0.7, 0.545890, 0.844850, 0.387126, 0.860531, 1.790436),
    5.00: RefRow(0.9, 0.8, None, 0.9, None, 0.9, 2.995732),
}


#: Relative offset of the ε evaluated just below / above a breakpoint (notes/000 §9.4: ties flip there).
BREAK_OFFSET = 1e-7


class Breakpoint(NamedTuple):
    """A region breakpoint of notes/000 §6 ("values just below and just above each breakpoint"):
    the influence i(distance) of the larger (hi) or smaller (lo) value, and the reference
    (relax ν, num ν) just below and just above it."""

    name: str
    distance: int
    which: str  # "hi" = î, "lo" = ǐ
    below: tuple[float, float]
    above: tuple[float, float]

    @property
    def value(self) -> float:
        infl = pointwise_right(CHAIN, self.distance)[self.distance - 1]
        return float(infl.max() if self.which == "hi" else infl.min())

    @property
    def sides(self) -> tuple[float, float]:
        return self.value * (1 - BREAK_OFFSET), self.value * (1 + BREAK_OFFSET)


BREAKPOINTS: tuple[Breakpoint, ...] = (
    Breakpoint("î(4)", 4, "hi", (0.507856, 0.616597), (0.6, 0.6)),
    Breakpoint("ǐ(1)", 1, "lo", (0.610815, 0.668121), (0.610916, 0.654751)),
    Breakpoint("î(3)", 3, "hi", (0.632085, 0.716597), (0.7, 0.7)),
    Breakpoint("î(2)", 2, "hi", (0.774711, 0.823286), (0.8, 0.8)),
    Breakpoint("î(1)", 1, "hi", (0.878846, 0.898765), (0.9, 0.9)),
)


def breakpoint_epsilons() -> list[float]:
    """Both sides of every breakpoint: added to the full grid so the curves jump at the right ε."""
    return [e for b in BREAKPOINTS for e in b.sides]


def ours_as_ref(res: dict[str, Outcome]) -> RefRow:
    """Our values in the layout of :class:`RefRow`."""
    relax, num = res["relax"], res["numerical"]
    return RefRow(res["dim_ub"].utility, res["mq"].utility, relax.q, relax.utility, num.q, num.utility,
                  relax.leakage)


def absdiff(a: float | None, b: float | None) -> float:
    """|a − b|; 0 when both are missing, ∞ when only one is."""
    if a is None and b is None:
        return 0.0
    if a is None or b is None:
        return math.inf
    return abs(a - b)


# ------------------------------------------------------------------------------------------ report


def grid_table(results: dict[float, dict[str, Outcome]]) -> str:
    headers = ["ε", "regions"] + list(ALL_KEYS)
    rows = [[f"{eps:.6g}", res["relax"].regions] + [f"{res[k].utility:.4f}" for k in ALL_KEYS]
            for eps, res in results.items()]
    return markdown_table(headers, rows, align="ll" + "r" * len(ALL_KEYS))


def method_summary(results: dict[float, dict[str, Outcome]]) -> str:
    """Per method: mean ν over the grid, mean gain over the relaxation, worst leakage/ε."""
    rows = []
    mean_relax = np.mean([r["relax"].utility for r in results.values()])
    for m in METHODS:
        nu = [r[m.key].utility for r in results.values()]
        ratios = [r[m.key].leakage / eps for eps, r in results.items() if r[m.key].leakage is not None]
        worst = f"{max(ratios):.6f}" if ratios else "— (bound)"
        rows.append([m.key, m.label, f"{np.mean(nu):.4f}", f"{np.mean(nu) - mean_relax:+.4f}", worst])
    return markdown_table(["key", "method", "mean ν", "vs relax", "max leakage/ε"], rows, align="llrrr")


def order_violations(results: dict[float, dict[str, Outcome]]) -> list[str]:
    """Sanity checks that should hold by construction (ORDER_CHECKS, and equal regions for the
    numerical and relaxation curves); returns human-readable violations."""
    bad = []
    for eps, res in results.items():
        for a, b in ORDER_CHECKS:
            if res[a].utility > res[b].utility + 1e-9:
                bad.append(f"ε={eps:.6g}: ν[{a}]={res[a].utility:.6f} > ν[{b}]={res[b].utility:.6f}")
        if res["numerical"].regions != res["relax"].regions:
            bad.append(f"ε={eps:.6g}: regions differ: numerical {res['numerical'].regions} vs relax {res['relax'].regions}")
    return bad


def monotonicity_line(results: dict[float, dict[str, Outcome]]) -> str:
    """How often each curve drops as ε grows. A plan for ε is valid for every larger ε, so only a
    design that is not a global optimum can drop: the paper's sawtooth at the region breakpoints."""
    eps = list(results)
    drops = {k: sum(results[b][k].utility < results[a][k].utility - 1e-9 for a, b in zip(eps, eps[1:]))
             for k in ALL_KEYS}
    return "drops of ν as ε grows (sawtooth at region breakpoints): " + ", ".join(f"{k} {v}" for k, v in drops.items())


REF_COLUMNS = ("dim_ub", "mq", "relax_q", "relax_nu", "num_q", "num_nu", "relax_leak")


def reference_rows(ref_results: dict[float, dict[str, Outcome]]) -> list[tuple[float, RefRow, RefRow]]:
    return [(eps, REFERENCE[eps], ours_as_ref(res)) for eps, res in ref_results.items()]


def reference_table(rows: list[tuple[float, RefRow, RefRow]]) -> str:
    def f(v: float | None) -> str:
        return "–" if v is None else f"{v:.6f}"

    out = []
    for eps, ref, ours in rows:
        out.append([f"{eps:g}", f(ref.relax_nu), f(ours.relax_nu), f"{absdiff(ref.relax_nu, ours.relax_nu):.1e}",
                    f(ref.num_nu), f(ours.num_nu), f"{absdiff(ref.num_nu, ours.num_nu):.1e}"])
    headers = ["ε", "relax ν (notes)", "relax ν (ours)", "|Δ|", "num ν (notes)", "num ν (ours)", "|Δ|"]
    return markdown_table(headers, out)


def breakpoint_rows(ref_results: dict[float, dict[str, Outcome]]) -> list[list[object]]:
    """Per breakpoint and side: (name, side, ε, relax ν notes/ours, num ν notes/ours)."""
    rows = []
    for b in BREAKPOINTS:
        for side, eps, ref in (("below", b.sides[0], b.below), ("above", b.sides[1], b.above)):
            res = ref_results[eps]
            rows.append([b.name, side, eps, ref[0], res["relax"].utility, ref[1], res["numerical"].utility])
    return rows


def breakpoint_table(rows: list[list[object]]) -> str:
    out = [[name, side, f"{eps:.6f}", f"{r_rel:.6f}", f"{o_rel:.6f}", f"{abs(r_rel - o_rel):.1e}",
            f"{r_num:.6f}", f"{o_num:.6f}", f"{abs(r_num - o_num):.1e}"]
           for name, side, eps, r_rel, o_rel, r_num, o_num in rows]
    headers = ["breakpoint", "side", "ε", "relax ν (notes)", "relax ν (ours)", "|Δ|", "num ν (notes)",
               "num ν (ours)", "|Δ|"]
    return markdown_table(headers, out, align="llrrrrrrr")


def reference_summary(rows: list[tuple[float, RefRow, RefRow]], brk: list[list[object]]) -> tuple[str, bool]:
    """Largest |Δ| per reference column (and at the breakpoints) and whether all are within REF_TOL."""
    worst = {c: max(absdiff(getattr(r, c), getattr(o, c)) for _, r, o in rows) for c in REF_COLUMNS}
    worst["breakpoints"] = max(max(abs(r[3] - r[4]), abs(r[5] - r[6])) for r in brk)
    ok = all(v <= REF_TOL for v in worst.values())
    text = ", ".join(f"{c} {v:.1e}" for c, v in worst.items())
    return f"max |Δ| vs notes/000 §6 — {text} → {'PASS' if ok else 'MISS'} (tolerance {REF_TOL:g})", ok


# ------------------------------------------------------------------------------------------ files


def write_grid_csv(path: Path, results: dict[float, dict[str, Outcome]]) -> None:
    breaks = set(breakpoint_epsilons())
    headers = ["epsilon", "kind", "regions_relax"]
    for k in ALL_KEYS:
        headers += [f"{k}_utility", f"{k}_leakage"]
    headers += ["relax_q", "numerical_q", "regions_exact_opt"]
    rows = []
    for eps, res in results.items():
        row: list[object] = [repr(eps), "breakpoint" if eps in breaks else "grid", res["relax"].regions]
        for k in ALL_KEYS:
            row += [repr(res[k].utility), "" if res[k].leakage is None else repr(res[k].leakage)]
        row += [_blank(res["relax"].q), _blank(res["numerical"].q), res["exact_opt"].regions]
        rows.append(row)
    write_csv(path, headers, rows)


def write_reference_csv(path: Path, rows: list[tuple[float, RefRow, RefRow]]) -> None:
    headers = ["epsilon"] + [f"{c}_{w}" for c in REF_COLUMNS for w in ("notes", "ours", "absdiff")]
    out = []
    for eps, ref, ours in rows:
        row: list[object] = [eps]
        for c in REF_COLUMNS:
            a, b = getattr(ref, c), getattr(ours, c)
            row += [_blank(a), _blank(b), repr(absdiff(a, b))]
        out.append(row)
    write_csv(path, headers, out)


def write_breakpoint_csv(path: Path, rows: list[list[object]]) -> None:
    headers = ["breakpoint", "side", "epsilon", "relax_nu_notes", "relax_nu_ours", "num_nu_notes", "num_nu_ours"]
    write_csv(path, headers, [[r[0], r[1], repr(r[2]), r[3], repr(r[4]), r[5], repr(r[6])] for r in rows])


def _blank(v: float | None) -> str:
    return "" if v is None else repr(v)


STYLES = {
    "dim_ub": dict(color="black", ls="--", lw=1.5, drawstyle="steps-post"),
    "mq": dict(color="tab:gray", ls=":", lw=1.5),
    "mq_tight": dict(color="tab:brown", ls=":", lw=1.2),
    "best_window": dict(color="tab:olive", ls="-.", lw=1.0),
    "relax": dict(color="tab:blue", lw=1.8),
    "optimal": dict(color="tab:cyan", ls="--", lw=1.0),
    "numerical": dict(color="tab:red", lw=1.8),
    "exact": dict(color="tab:green", lw=1.5),
    "exact_opt": dict(color="tab:purple", lw=1.5),
}


def write_plot(path: Path, results: dict[float, dict[str, Outcome]]) -> None:
    """Utility against ε (log x), as paper 000 Fig. 3, with the notes/000 §6 reference points."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    eps = np.array(list(results))
    fig, ax = plt.subplots(figsize=(8.5, 5.2))
    for m in METHODS:
        ax.plot(eps, [results[e][m.key].utility for e in eps], label=m.label, **STYLES[m.key])
    ref_eps = list(REFERENCE)
    ax.plot(ref_eps, [REFERENCE[e].relax_nu for e in ref_eps], "x", color="tab:blue", label="notes/000 §6: relax ν")
    ax.plot(ref_eps, [REFERENCE[e].num_nu for e in ref_eps], "+", color="tab:red", ms=9, label="notes/000 §6: num ν")
    ax.set_xscale("log")
    ax.set_xlim(*EPS_RANGE)
    ax.set_ylim(0.35, 0.95)
    ax.set_xlabel("privacy budget ε (nats)")
    ax.set_ylabel("utility ν (expected fraction released)")
    ax.set_title(f"Paper 000 Fig. 3: p = 1, n = {N}, α = {ALPHA}, β = {BETA}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)


# -------------------------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=None, help=f"ε grid size (default {POINTS}, quick {QUICK_POINTS})")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="worker processes (default 2)")
    args = parser.parse_args(argv)
    out = output_dir(args.out)
    stem = result_stem("paper_fig3", args.quick)
    points = args.points or (QUICK_POINTS if args.quick else POINTS)
    grid = [float(e) for e in np.geomspace(*EPS_RANGE, points)]
    if not args.quick:  # both sides of each breakpoint, so the plotted jumps sit at the right ε
        grid = sorted(grid + breakpoint_epsilons())
    ref_eps = list(REFERENCE) + breakpoint_epsilons()

    env = environment()
    progress(f"paper_fig3: {len(grid)} grid points, {len(ref_eps)} reference points, {args.jobs} job(s)")
    try:
        ref_results = evaluate_all(ref_eps, REFERENCE_KEYS, args.jobs, "reference")
        results = evaluate_all(grid, ALL_KEYS, args.jobs, "grid")
    except PrivacyViolation as exc:
        print(f"PRIVACY VIOLATION: {exc}", file=sys.stderr)
        return 2

    ref_rows = reference_rows({e: ref_results[e] for e in REFERENCE})
    brk_rows = breakpoint_rows(ref_results)
    ref_line, ref_ok = reference_summary(ref_rows, brk_rows)
    violations = order_violations(results)
    extra = "" if args.quick else f" + both sides (×(1 ∓ {BREAK_OFFSET:g})) of {len(BREAKPOINTS)} region breakpoints"
    print(f"# Paper 000 Fig. 3 — p = 1, n = {N}, α = {ALPHA}, β = {BETA}, ε ∈ [{EPS_RANGE[0]}, {EPS_RANGE[1]}] "
          f"({points} log-spaced points{extra})\n")
    print(environment_line(env) + "\n")
    print("## Utility ν per method (regions of the relaxation, positions 1..n)\n")
    print(grid_table(results) + "\n")
    print(f"## Per method over the grid (every plan audited exactly: leakage ≤ ε + {LEAK_TOL:g} at all points)\n")
    print(method_summary(results) + "\n")
    print("## Comparison with notes/000 §6 (Fig. 3 table)\n")
    print(reference_table(ref_rows) + "\n")
    print("Just below / above the region breakpoints (notes/000 §6, second table):\n")
    print(breakpoint_table(brk_rows) + "\n")
    print(ref_line)
    print(monotonicity_line(results))
    print(f"ordering/consistency checks: {len(violations)} violation(s)")
    for v in violations:
        print(f"  - {v}")

    write_grid_csv(out / f"{stem}.csv", results)
    write_reference_csv(out / f"{stem}_reference.csv", ref_rows)
    write_breakpoint_csv(out / f"{stem}_breakpoints.csv", brk_rows)
    write_plot(out / f"{stem}.png", results)
    progress(f"wrote {out / stem}.csv, {stem}_reference.csv, {stem}_breakpoints.csv, {stem}.png")
    return 0 if ref_ok and not violations else 1


if __name__ == "__main__":
    sys.exit(main())
