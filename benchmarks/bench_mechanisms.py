"""Per-record perturbation mechanisms: design time vs |X|, and per-record sampling throughput.

(a) Design time of the three lift-based designers of paper 003 — subset merging (``watchdog-subset``,
    Algorithm 1 corrected), SRR and AORR — on random joints P_SX = rand(|S|, |X|) normalised (the
    paper's synthetic setup, notes/003 §4), ε = 1, λ = 0.65, for |S| = 2 … 5 and |X| = 4 … 64
    (``--quick``: |S| ≤ 3, |X| ≤ 16). Each cell runs in its own child process with a budget of
    ``--budget`` seconds (default 30, quick 5); a cell past it is killed and reported "timeout", and
    the larger |X| of that (kind, |S|) are skipped. A cell times its design once (after a warm-up
    design on a 2×3 joint in the same process) and, when that took < 1 s, takes the median of 3 timed
    repetitions. Every designed channel is then verified exactly (``perturbation.verify``) and its
    NMI = I(X;Y)/H(X) reported.
(b) Sampling throughput of k-ary randomized response (k = 4 and 16, ε = 1) over 10⁷ records
    (``--quick``: 10⁵): the streamguard sampler (numba kernel and numpy reference, each with
    ``CsprngSource`` words and with pre-drawn words), the CSPRNG draw alone, and per-call randomized
    response in diffprivlib (``ExponentialCategorical`` with a 0/1 utility, i.e. k-RR) and OpenDP
    (``make_randomized_response``), which run one Python call per record and are timed on 2·10⁴
    records (quick 2·10³). Ratios are against the numba kernel with CSPRNG words, in the same run.
    numba and numpy must return identical outputs on the same words (checked).

diffprivlib 0.6.6's package ``__init__`` imports its scikit-learn models, which fail against recent
scikit-learn releases; the benchmark then loads ``diffprivlib.mechanisms`` without that ``__init__``
(and says so). A library that is not installed is reported "not installed".

Outputs in ``--out``: ``bench_mechanisms.md`` (the printed tables) and ``bench_mechanisms.csv``;
``--quick`` writes ``bench_mechanisms_quick.*``.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import multiprocessing as mp
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from streamguard.perturbation import Joint
from streamguard.perturbation.designers import design
from streamguard.perturbation.metrics import channel_metrics
from streamguard.perturbation.sampler import ChannelSampler
from streamguard.perturbation.verify import verify
from streamguard.sampling import CsprngSource

from ._common import (
    PredrawnSource,
    Timing,
    base_parser,
    environment,
    environment_line,
    fmt_rate,
    fmt_seconds,
    markdown_table,
    measure,
    output_dir,
    progress,
    result_stem,
    write_csv,
)

DESIGN_KINDS = ("watchdog-subset", "srr", "aorr")
S_SIZES, QUICK_S_SIZES = (2, 3, 4, 5), (2, 3)
X_SIZES, QUICK_X_SIZES = (4, 8, 16, 32, 64), (4, 8, 16)
BUDGET_S, QUICK_BUDGET_S = 30.0, 5.0
EPS, LAM = 1.0, 0.65
SEED = 20261122
SAMPLE_K = (4, 16)
SAMPLE_N, QUICK_SAMPLE_N = 10**7, 10**5
PER_CALL_N, QUICK_PER_CALL_N = 20_000, 2_000
REPS = 3
MIN_TIME = 0.02


# ------------------------------------------------------------------------------------ (a) design


def random_joint(n_s: int, n_x: int, seed: int) -> Joint:
    p = np.random.default_rng([seed, n_s, n_x]).random((n_s, n_x))
    return Joint(p / p.sum())


def _design_cell(kind: str, n_s: int, n_x: int, conn: Any) -> None:  # runs in a child process
    try:
        design(kind, random_joint(2, 3, SEED), EPS, lam=LAM)  # warm-up: imports, caches, JIT
        joint = random_joint(n_s, n_x, SEED)
        first, channel = measure(lambda: design(kind, joint, EPS, lam=LAM), reps=1)
        timing = first if first.median >= 1.0 else measure(lambda: design(kind, joint, EPS, lam=LAM), reps=REPS,
                                                           min_time=MIN_TIME)[0]
        m = channel_metrics(channel, joint)
        conn.send({"timing": timing.as_dict(), "verified": verify(channel, joint).ok,
                   "nmi": m["mi_xy"] / m["h_x"], "outputs": channel.n_y})
    except Exception as exc:  # reported in the table, never hidden
        conn.send({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        conn.close()


def run_cell(kind: str, n_s: int, n_x: int, budget: float) -> dict[str, Any]:
    """One design in a child process, killed (by its own handle) past ``budget`` seconds."""
    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_design_cell, args=(kind, n_s, n_x, send), daemon=True)
    proc.start()
    send.close()
    result: dict[str, Any] = {"timeout": True}
    if recv.poll(budget):
        result = recv.recv()
    proc.join(1.0)
    if proc.is_alive():
        proc.terminate()
        proc.join()
    return result


def bench_design(rows: list[list[Any]], s_sizes: Sequence[int], x_sizes: Sequence[int], budget: float) -> str:
    table = []
    for kind in DESIGN_KINDS:
        for n_s in s_sizes:
            skipped = False
            for n_x in x_sizes:
                if skipped:
                    cell, res = "skipped (smaller |X| timed out)", {}
                else:
                    progress(f"design {kind} |S|={n_s} |X|={n_x} (budget {budget:g} s)")
                    res = run_cell(kind, n_s, n_x, budget)
                    if res.get("timeout"):
                        cell, skipped = f"timeout (> {budget:g} s)", True
                    elif "error" in res:
                        cell = f"error: {res['error']}"
                    else:
                        t = Timing(tuple(res["timing"]["times_s"]), res["timing"]["inner"])
                        cell = fmt_seconds(t.median)
                median = res["timing"]["median_s"] if "timing" in res else math.nan
                table.append([kind, n_s, n_x, cell, "yes" if res.get("verified") else ("NO" if "verified" in res else "—"),
                              f"{res['nmi']:.3f}" if "nmi" in res else "—", res.get("outputs", "—")])
                rows.append(["design", kind, n_s, n_x, median, cell, res.get("verified", ""), res.get("nmi", ""), ""])
    return markdown_table(["kind", "|S|", "|X|", "design time (median)", "verified", "NMI", "outputs"], table)


# ---------------------------------------------------------------------------------- (b) sampling


@functools.cache
def _diffprivlib() -> tuple[Any, str]:
    """diffprivlib.mechanisms, loading around a broken package __init__ if need be."""
    spec = importlib.util.find_spec("diffprivlib")
    if spec is None:
        return None, "not installed"
    try:
        import diffprivlib.mechanisms as mech

        return mech, ""
    except ImportError as exc:
        for name in [m for m in sys.modules if m == "diffprivlib" or m.startswith("diffprivlib.")]:
            del sys.modules[name]
        pkg = types.ModuleType("diffprivlib")
        pkg.__path__ = list(spec.submodule_search_locations or [])
        sys.modules["diffprivlib"] = pkg
        import diffprivlib.mechanisms as mech

        return mech, f"mechanisms loaded without the package __init__ ({type(exc).__name__} there)"


def _per_call(k: int, n: int, source_words: NDArray[np.uint64]) -> list[tuple[str, Callable[[], Any] | None, str]]:
    """Per-record randomized-response calls of diffprivlib and OpenDP on n records (or why not)."""
    xs = (source_words[:n] % np.uint64(k)).astype(int).tolist()
    out: list[tuple[str, Callable[[], Any] | None, str]] = []
    mech, note = _diffprivlib()
    if mech is None:
        out.append(("diffprivlib ExponentialCategorical (per call)", None, note))
    else:
        labels = [str(i) for i in range(k)]
        utility = [[a, b, 0 if a == b else 1] for i, a in enumerate(labels) for b in labels[i:]]
        rr = mech.ExponentialCategorical(epsilon=EPS, utility_list=utility)
        out.append(("diffprivlib ExponentialCategorical (per call)", lambda: [rr.randomise(labels[x]) for x in xs],
                    note))
    if importlib.util.find_spec("opendp") is None:
        out.append(("OpenDP make_randomized_response (per call)", None, "not installed"))
    else:
        import opendp.prelude as dp

        dp.enable_features("contrib")
        keep = math.exp(EPS) / (math.exp(EPS) + k - 1)
        meas = dp.m.make_randomized_response(categories=list(range(k)), prob=keep, T="i32")
        out.append(("OpenDP make_randomized_response (per call)", lambda: [meas(x) for x in xs], ""))
    return out


def bench_sampling(rows: list[list[Any]], n: int, per_call_n: int) -> tuple[str, bool]:
    table, identical = [], True
    for k in SAMPLE_K:
        channel = design("rr", Joint.from_prior(np.full(k, 1.0 / k)), EPS)
        sampler = ChannelSampler(channel)
        words = CsprngSource().words(n)
        x = (words % np.uint64(k)).astype(np.int64)  # states: any fixed input will do
        pre = PredrawnSource(CsprngSource().words(n))
        a = sampler.sample(x, source=pre)
        b = sampler.sample(x, source=pre, use_numpy=True)
        identical &= bool(np.array_equal(a, b))
        progress(f"sampling k={k}: n={n:,} records")
        variants: list[tuple[str, Callable[[], Any] | None, int, str]] = [
            ("streamguard numba + CSPRNG words", lambda: sampler.sample(x, source=CsprngSource()), n, ""),
            ("streamguard numba, pre-drawn words", lambda: sampler.sample(x, source=pre), n, ""),
            ("streamguard numpy reference + CSPRNG words",
             lambda: sampler.sample(x, source=CsprngSource(), use_numpy=True), n, ""),
            ("CSPRNG draw alone (os.urandom)", lambda: CsprngSource().words(n), n, ""),
        ]
        variants += [(name, fn, per_call_n, note) for name, fn, note in _per_call(k, per_call_n, words)]
        base = None
        for name, fn, count, note in variants:
            if fn is None:
                table.append([k, name, "—", "—", "—", note])
                rows.append(["sampling", name, k, count, "", "", "", "", note])
                continue
            progress(f"  {name}")
            timing, _ = measure(fn, reps=REPS, min_time=MIN_TIME)
            per_record = timing.median / count
            base = per_record if base is None else base
            table.append([k, name, fmt_rate(1.0 / per_record), f"{per_record * 1e9:,.1f}", f"{per_record / base:,.1f}×",
                          note])
            rows.append(["sampling", name, k, count, timing.median, 1.0 / per_record, per_record / base, "", note])
    md = markdown_table(["k", "variant", "records/s", "ns/record", "time ÷ numba+CSPRNG", "note"], table,
                        align="rlrrrl")
    return md, identical


# -------------------------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, help=f"seconds per design cell (default {BUDGET_S:g}, "
                        f"quick {QUICK_BUDGET_S:g})")
    args = parser.parse_args(argv)
    out = output_dir(args.out)
    stem = result_stem("bench_mechanisms", args.quick)
    env = environment()
    budget = args.budget or (QUICK_BUDGET_S if args.quick else BUDGET_S)
    rows: list[list[Any]] = []
    design_md = bench_design(rows, QUICK_S_SIZES if args.quick else S_SIZES, QUICK_X_SIZES if args.quick else X_SIZES,
                             budget)
    n = QUICK_SAMPLE_N if args.quick else SAMPLE_N
    sample_md, identical = bench_sampling(rows, n, QUICK_PER_CALL_N if args.quick else PER_CALL_N)
    parts = [
        f"# Per-record mechanisms{' (quick)' if args.quick else ''}",
        environment_line(env),
        f"## (a) Design time vs |X| (ε = {EPS:g}, λ = {LAM:g}, random joints, seed {SEED}; budget {budget:g} s per cell)",
        design_md,
        f"## (b) Sampling throughput, k-ary randomized response at ε = {EPS:g} ({n:,} records; per-call libraries "
        f"on {QUICK_PER_CALL_N if args.quick else PER_CALL_N:,})",
        sample_md,
        f"numba and numpy outputs identical on the same words: {'yes' if identical else 'NO'}. Timings are medians "
        f"of {REPS} repetitions after warm-up; the machine is shared, so ratios within one run are the point.",
    ]
    report = "\n\n".join(parts) + "\n"
    print(report)
    (out / f"{stem}.md").write_text(report)
    write_csv(out / f"{stem}.csv", ["table", "kind_or_variant", "n_s_or_k", "n_x_or_records", "median_s",
                                     "cell_or_rate", "verified_or_ratio", "nmi", "note"], rows)
    progress(f"wrote {out / stem}.md and {stem}.csv")
    return 0 if identical else 1


if __name__ == "__main__":
    raise SystemExit(main())
