"""MQM core performance: σ_∞, σ_max(T) against the naive Algorithm 1, and the quilt accountant.

Chains: C1 = [[.9,.1],[.2,.8]] (binary, notes/002 §7) and a 10-state slowly mixing lazy chain
P = (1−γ)I + γQ with γ = 10⁻³ and Q a random stochastic matrix (Dirichlet(1) rows, seed 0): its
relaxation time 1/(1 − |λ₂|) is about 1.25·10³ steps. ε = 1 throughout.

(a) σ_∞ (and σ̄_supq) per chain and mode: cold (a fresh model: tables built from scratch, kernels
    already compiled; wall and CPU time, median of 3) and warm (tables cached); the quilt search
    size (table cells evaluated).
(b) σ_max(T) for T = 10 … 10⁶ (``--quick``: … 10⁴), stat mode, fresh model per T: the fast search
    (borrowing bound + end-node loops) side by side with the literal O(T³) Algorithm 1
    (``sigma_max_naive``) on the sizes where it finishes within the time budget; the two must agree.
(c) Accountant cost per release over a stream of 10⁶ positions (``--quick``: 10⁵), binary C1 and the
    3-state C4, stat mode, default radius: tumbling windows of 100 positions with σ_∞(ε) plus a
    second query every 100 positions on a window shifted by 50 whose scale cycles through three
    values (so the load has 2 segments per window and the segment list keeps growing). Median µs per ``record`` over the 50 releases just
    before the stream reaches 10³, 10⁴, 10⁵, 10⁶ positions.

Targets (issue 4): σ_∞ of the 10-state chain with mixing time ~10³ in under a second (cold);
accountant updates independent of the stream length (per-release time at 10⁶ within 2× of 10³).

Outputs in ``--out``: ``bench_mqm.csv`` (one row per measurement) and ``bench_mqm.md`` (the tables);
``--quick`` writes ``bench_mqm_quick.*``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from streamguard import MarkovChain
from streamguard.quilt import QuiltAccountant, QuiltModel, sigma_inf, sigma_max, sigma_max_naive, sigma_supq

from ._common import (
    base_parser,
    environment,
    environment_line,
    fmt_pow10,
    fmt_seconds,
    markdown_table,
    output_dir,
    progress,
    result_stem,
    verdict,
    write_csv,
)

EPS = 1.0
GAMMA = 1e-3
SEED = 0
SIZES = (10, 30, 100, 300, 10**3, 10**4, 10**5, 10**6)
QUICK_SIZES = (10, 30, 100, 10**3, 10**4)
NAIVE_BUDGET_S, QUICK_NAIVE_BUDGET_S = 30.0, 3.0
STREAM_N, QUICK_STREAM_N = 10**6, 10**5
WINDOW = 100
BLOCK = 50  # releases timed before each checkpoint
REPS = 3  # cold/warm σ_∞ timings: median of this many runs
SIGMA_INF_TARGET_S = 1.0
FLAT_FACTOR = 2.0


def lazy_chain() -> MarkovChain:
    rng = np.random.default_rng(SEED)
    Q = rng.dirichlet(np.ones(10), size=10)
    return MarkovChain((1 - GAMMA) * np.eye(10) + GAMMA * Q)


def relaxation_time(chain: MarkovChain) -> float:
    lam = np.sort(np.abs(np.linalg.eigvals(chain.matrix)))[::-1]
    return 1.0 / (1.0 - lam[1])


CHAINS: dict[str, Callable[[], MarkovChain]] = {
    "C1 (k=2)": lambda: MarkovChain([[0.9, 0.1], [0.2, 0.8]]),
    "C4 (k=3)": lambda: MarkovChain([[0.8, 0.15, 0.05], [0.1, 0.8, 0.1], [0.05, 0.15, 0.8]]),
    "lazy (k=10)": lazy_chain,
}


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def cpu_timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """(wall, CPU) seconds of one call: CPU time separates our work from a shared machine's load."""
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def warm_up() -> None:
    """Compile (or load from the numba cache) every kernel once on a tiny model."""
    M = QuiltModel([MarkovChain([[0.6, 0.4], [0.4, 0.6]])], "stat")
    sigma_inf(M, EPS)
    sigma_max(M, EPS, 30)
    sigma_max(QuiltModel([MarkovChain([[0.6, 0.4], [0.4, 0.6]])], "supq"), EPS, 30)
    sigma_max(QuiltModel([MarkovChain([[0.6, 0.4], [0.4, 0.6]], [1.0, 0.0])], "q"), EPS, 30)
    QuiltAccountant(M).record(0, 10, 0.1)


# ------------------------------------------------------------------------------------- (a) σ_∞


def bench_sigma_inf(rows: list[list[Any]]) -> tuple[str, bool, float]:
    table = []
    target_time = math.nan
    for name in ("C1 (k=2)", "lazy (k=10)"):
        for mode in ("stat", "approx", "supq"):
            fn = sigma_supq if mode == "supq" else sigma_inf
            chain = CHAINS[name]()
            progress(f"σ_∞ {name} {mode}")
            colds = [cpu_timed(lambda: fn(QuiltModel([chain], mode), EPS)) for _ in range(REPS)]
            cold, cold_cpu = float(np.median([c[0] for c in colds])), float(np.median([c[1] for c in colds]))
            M = QuiltModel([chain], mode)
            s = fn(M, EPS)
            warm = float(np.median([cpu_timed(lambda: fn(M, EPS))[0] for _ in range(REPS)]))
            w = s.witness
            label = "σ̄_supq" if mode == "supq" else "σ_∞"
            table.append([name, mode, label, f"{s.sigma:.4f}", f"({w.a}, {w.b})", f"{w.e:.4f}", f"{s.search_cells:,}",
                          fmt_seconds(cold), fmt_seconds(cold_cpu), fmt_seconds(warm)])
            rows.append(["sigma_inf", name, mode, EPS, "", s.sigma, f"{w.a},{w.b}", s.search_cells, cold, warm, "", ""])
            if name == "lazy (k=10)" and mode == "stat":
                target_time = cold
    md = markdown_table(["chain", "mode", "scale", "σ", "witness (a, b)", "e", "cells searched", "cold (wall)",
                         "cold (CPU)", "warm (wall)"], table)
    return md, target_time < SIGMA_INF_TARGET_S, target_time


# ------------------------------------------------------------------------------------ (b) σ_max


def bench_sigma_max(rows: list[list[Any]], sizes: Sequence[int], budget: float) -> tuple[str, bool]:
    table = []
    all_equal = True
    for name in ("C1 (k=2)", "lazy (k=10)"):
        naive_pred = 0.0
        last_naive: tuple[int, float] | None = None
        for T in sizes:
            progress(f"σ_max {name}, T = {fmt_pow10(T)}")
            fast_t, fast = timed(lambda: sigma_max(QuiltModel([CHAINS[name]()], "stat"), EPS, T))
            naive_t, naive_s = math.nan, None
            if last_naive is not None:
                naive_pred = last_naive[1] * (T / last_naive[0]) ** 3
            if naive_pred <= budget:
                naive_t, naive = timed(lambda: sigma_max_naive(QuiltModel([CHAINS[name]()], "stat"), EPS, T))
                naive_s = naive.sigma
                last_naive = (T, naive_t)
                if not math.isclose(naive.sigma, fast.sigma, rel_tol=1e-12):
                    all_equal = False
            w = fast.witness
            ratio = naive_t / fast_t if naive_s is not None else math.nan
            table.append([name, fmt_pow10(T), f"{fast.sigma:.4f}", f"i={w.i} ({w.a}, {w.b})", f"{fast.search_cells:,}",
                          fmt_seconds(fast_t), fmt_seconds(naive_t) if naive_s is not None else "— (skipped)",
                          f"{ratio:,.3g}×" if naive_s is not None else "—",
                          ("yes" if math.isclose(naive_s, fast.sigma, rel_tol=1e-12) else "NO") if naive_s is not None
                          else "—"])
            rows.append(["sigma_max", name, "stat", EPS, T, fast.sigma, f"{w.i}:{w.a},{w.b}", fast.search_cells, fast_t,
                         naive_t, ratio, naive_s if naive_s is not None else ""])
    md = markdown_table(["chain", "T", "σ_max", "witness", "cells searched", "fast (cold tables)",
                         "naive Algorithm 1", "naive ÷ fast", "equal"], table)
    return md, all_equal


# ------------------------------------------------------------------------------- (c) accountant


def bench_accountant(rows: list[list[Any]], n: int) -> tuple[str, bool, dict[str, float]]:
    checkpoints = [c for c in (10**3, 10**4, 10**5, 10**6) if c <= n]
    table = []
    ratios: dict[str, float] = {}
    for name in ("C1 (k=2)", "C4 (k=3)"):
        M = QuiltModel([CHAINS[name]()], "stat")
        acc = QuiltAccountant(M)
        load = 1.0 / sigma_inf(M, EPS).sigma
        times: list[float] = []
        ends: list[int] = []
        progress(f"accountant {name}: stream of {fmt_pow10(n)} positions, radius {acc.radius}")
        for start in range(0, n, WINDOW):
            t0 = time.perf_counter()
            acc.record(start, start + WINDOW - 1, load)  # tumbling window
            times.append(time.perf_counter() - t0)
            ends.append(start + WINDOW)
            if start + WINDOW + WINDOW // 2 <= n:
                t0 = time.perf_counter()
                second = load * (1 + (start // WINDOW) % 3 / 4)  # shifted second query, varying scale
                acc.record(start + WINDOW // 2, start + WINDOW + WINDOW // 2 - 1, second)
                times.append(time.perf_counter() - t0)
                ends.append(start + WINDOW + WINDOW // 2)
            if (start + WINDOW) % (n // 10) == 0:
                progress(f"  {fmt_pow10(start + WINDOW)} positions, {len(acc.segments()):,} segments")
        ends_a, times_a = np.array(ends), np.array(times)
        per_cp = []
        for cp in checkpoints:
            idx = np.flatnonzero(ends_a <= cp)[-BLOCK:]
            med = float(np.median(times_a[idx]))
            per_cp.append(med)
            rows.append(["accountant", name, "stat", EPS, cp, acc.eps_max(), acc.radius, len(acc.segments()), med, "", "",
                         ""])
        ratio = per_cp[-1] / per_cp[0]
        ratios[name] = ratio
        table.append([name, str(acc.radius), f"{len(times):,}", f"{len(acc.segments()):,}", f"{acc.eps_max():.6f}"]
                     + [f"{m * 1e6:.0f}" for m in per_cp] + [f"{ratio:.2f}"])
    headers = ["chain", "radius R", "releases", "segments at end", "eps_max"] + [
        f"µs/release @ {fmt_pow10(c)}" for c in checkpoints] + [f"{fmt_pow10(checkpoints[-1])} ÷ 10^3"]
    ok = all(r <= FLAT_FACTOR for r in ratios.values())
    return markdown_table(headers, table), ok, ratios


# ------------------------------------------------------------------------------------------ main


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    args = parser.parse_args(argv)
    out = output_dir(args.out)
    stem = result_stem("bench_mqm", args.quick)
    env = environment()
    t_warm, _ = timed(warm_up)
    progress(f"warm-up (JIT load/compile): {fmt_seconds(t_warm)}")
    rows: list[list[Any]] = []
    inf_md, inf_ok, inf_t = bench_sigma_inf(rows)
    max_md, equal = bench_sigma_max(rows, QUICK_SIZES if args.quick else SIZES,
                                    QUICK_NAIVE_BUDGET_S if args.quick else NAIVE_BUDGET_S)
    acc_md, flat_ok, ratios = bench_accountant(rows, QUICK_STREAM_N if args.quick else STREAM_N)
    lazy = lazy_chain()
    targets = markdown_table(["target", "measured", ""], [
        [f"σ_∞ of the 10-state chain (relaxation time {relaxation_time(lazy):,.0f}) < {SIGMA_INF_TARGET_S:g} s, cold",
         fmt_seconds(inf_t), verdict(inf_ok)],
        [f"accountant per-release time flat in stream length (last ÷ first checkpoint ≤ {FLAT_FACTOR:g})",
         ", ".join(f"{k}: {v:.2f}" for k, v in ratios.items()), verdict(flat_ok)],
        ["fast σ_max equals the naive Algorithm 1 wherever both ran", "all equal" if equal else "MISMATCH",
         verdict(equal)],
    ], align="lrl")
    parts = [
        f"# MQM core benchmarks{' (quick)' if args.quick else ''}",
        environment_line(env),
        f"ε = {EPS}; lazy chain P = (1−γ)I + γQ, γ = {GAMMA}, Q with Dirichlet(1) rows (seed {SEED}), relaxation "
        f"time {relaxation_time(lazy):,.0f} steps. σ_∞ timings are medians of {REPS} runs, the rest single runs "
        "(cold = fresh model, tables built; JIT warmed up before). The machine is shared, so absolute times are noisy; ratios within one run are the point.",
        "## (a) T-independent scales",
        inf_md,
        "## (b) σ_max(T): fast search vs the naive O(T³) Algorithm 1 (stat mode)",
        max_md,
        "## (c) Quilt accountant: cost per release along a long stream",
        acc_md,
        "## Targets",
        targets,
    ]
    report = "\n\n".join(parts) + "\n"
    print(report)
    (out / f"{stem}.md").write_text(report)
    write_csv(out / f"{stem}.csv", ["table", "chain", "mode", "epsilon", "T_or_position", "sigma_or_eps_max",
                                     "witness_or_radius", "cells_or_segments", "time_s", "naive_or_warm_s", "ratio",
                                     "naive_sigma"], rows)
    progress(f"wrote {out / stem}.md and {stem}.csv")
    return 0 if equal else 1


if __name__ == "__main__":
    raise SystemExit(main())
