"""Consumer coverage on real homes (issue 25 item 5): do the consumer's 95% intervals for the share
of time in each state cover the truth on real sensor data?

On each shared real trace (``../shared/data/real-homes/``; never copied into the repository;
skipped when absent):

1. split by time in two halves; calibrate on the first half with the product's CLI
   (``streamguard calibrate … --confidence 0.99 --out``): the default **set-chain** (time-of-day
   blocks) and ``--model-class homogeneous`` (its point estimate is the chain today's consumer
   corrects under: the status's ``model``);
2. privatize the second half (simulated: the estimate is the point here, not the plan): a mark at
   fixed times of the local day — every day at 12:00, every day at 03:00, or two a day at uniform
   random times — and a full-redaction window of ``--side-hours`` on each side of every mark
   (rows (1, 1) inside, (0, 0) outside: released surely); slots without a reading are positions
   without a record;
3. per local calendar day of the second half (days with ≥ 90% of their slots), the records from
   the last released one before the day to the first released one after it (the consumer's
   estimate over them is exact given what surrounds them); the truth is the realised share of
   state 1 (``labels[1]``) over those same records (binary: the share of state 0 is its mirror);
4. the consumer's estimate and 95% interval of that share with
   - **homogeneous** — today's consumer: ``redaction_shares`` under the homogeneous point chain;
   - **tv point** — ``redaction_shares`` under the set-chain's center member (kernel per step from
     its block; the posterior interval only, no set);
   - **set-chain** — the new consumer, ``setchain_shares``: center estimate, interval the union over
     the center and extreme members (docs/consumer-guide.md §3b);

and reports coverage (share of days whose truth is inside), median width and mean |error|, with
the naive share (released records only) beside them. PASS/MISS: coverage ≥ 90% pooled over the
traces, per schedule and consumer.

    python -m benchmarks.consumer_real_homes            # three traces, three schedules, ~1 min
    python -m benchmarks.consumer_real_homes --quick    # the noon schedule only
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from streamguard.consumer.estimates import redaction_shares, setchain_shares
from streamguard.consumer.messages import Record
from streamguard.consumer.model import PublishedModel
from streamguard.consumer.timevarying import SetChainModel
from streamguard.model import modelset
from streamguard.model.setchain import SetChain

from ._common import base_parser, environment, environment_line, markdown_table, output_dir, progress, verdict, \
    write_report
from .real_homes import DATA, DAY, HOUR, TRACES, Trace, _cli, calibration_args, halves, load_trace

NOMINAL = 0.90  # PASS threshold for 95% intervals
MIN_DAY_SHARE = 0.9
SCHEDULES = ("daily 12:00", "daily 03:00", "2 random a day")
CONSUMERS = ("homogeneous", "tv point", "set-chain")


def models(tr: Trace, first: np.ndarray, work: Path) -> tuple[SetChain, PublishedModel]:
    """The set-chain (default) and the homogeneous point chain calibrated on the first half."""
    common = calibration_args(tr, first, work)
    sc_path, h_path = work / f"{tr.name}.setchain.json", work / f"{tr.name}.homogeneous.json"
    for extra, path in ((["--utc-offset", f"{tr.utc_offset:g}"], sc_path), (["--model-class", "homogeneous"], h_path)):
        r = _cli("calibrate", *common, *extra, "--out", str(path))
        if r.returncode != 0:
            raise RuntimeError(f"calibrate {tr.name}: {r.stderr.strip()}")
    sc = SetChain.from_json(json.loads(sc_path.read_text()))
    point = modelset.load(h_path).point
    assert point is not None
    return sc, PublishedModel(point, None)


def mark_positions(schedule: str, grid_ts: np.ndarray, utc_offset: float, rng: np.random.Generator) -> np.ndarray:
    """Grid indices of the marks of a schedule (local clock)."""
    local = grid_ts + utc_offset
    days = np.unique(np.floor(local / DAY))
    if schedule == "2 random a day":
        times = np.concatenate([d * DAY + rng.uniform(0, DAY, size=2) for d in days])
    else:
        hour = 12 if "12:00" in schedule else 3
        times = days * DAY + hour * HOUR
    idx = np.searchsorted(local, times)
    return idx[(idx > 0) & (idx < grid_ts.size)]


def privatize(tr: Trace, second: np.ndarray, schedule: str, side: int, rng: np.random.Generator) -> dict[str, Any]:
    """The second half as records on its grid, with full-redaction windows around the marks."""
    ts, st = tr.ts[second], tr.state[second]
    grid_ts = ts[0] + tr.period * np.arange(int(round((ts[-1] - ts[0]) / tr.period)) + 1)
    pos = np.round((ts - ts[0]) / tr.period).astype(np.int64)
    hidden = np.zeros(grid_ts.size, dtype=bool)
    for m in mark_positions(schedule, grid_ts, tr.utc_offset, rng):
        hidden[max(0, m - side):m + side + 1] = True
    red = hidden[pos]
    records = [Record("d", "s", i, int(p), float(t), None if r else tr.labels[x], bool(r),
                      (1.0, 1.0) if r else (0.0, 0.0), None, "redaction", "normal")
               for i, (p, t, x, r) in enumerate(zip(pos, ts, st, red))]
    return {"records": records, "pos": pos, "state": st, "redacted": red, "grid_ts": grid_ts}


def day_slices(tr: Trace, priv: dict[str, Any]) -> list[tuple[str, int, int]]:
    """Per local day with ≥ MIN_DAY_SHARE of its slots: (day, i0, i1), record indices [i0, i1)
    from the last released record before the day to the first released one after it."""
    pos, red, grid_ts = priv["pos"], priv["redacted"], priv["grid_ts"]
    local = grid_ts[pos] + tr.utc_offset
    day = np.floor(local / DAY).astype(np.int64)
    per_day = int(round(DAY / tr.period))
    released = np.flatnonzero(~red)
    out = []
    for d in np.unique(day):
        idx = np.flatnonzero(day == d)
        if idx.size < MIN_DAY_SHARE * per_day:
            continue
        before = released[released < idx[0]]
        after = released[released > idx[-1]]
        i0 = int(before[-1]) if before.size else int(idx[0])
        i1 = int(after[0]) + 1 if after.size else int(idx[-1]) + 1
        out.append((dt.datetime.fromtimestamp(d * DAY, dt.timezone.utc).strftime("%m-%d"), i0, i1))
    return out


def estimate(consumer: str, records: list[Record], labels: tuple[str, str], sc: SetChain,
             homog: PublishedModel) -> tuple[float, list[float]]:
    """Estimate and 95% interval of the share of labels[1]."""
    if consumer == "homogeneous":
        s = redaction_shares(records, labels, homog)
    elif consumer == "tv point":
        s = redaction_shares(records, labels, SetChainModel.center(sc))
    else:
        s = setchain_shares(records, labels, sc)
    return float(s.frequency[1]), list(s.frequency_ci[1])  # type: ignore[arg-type]


def run_trace(tr: Trace, schedules: tuple[str, ...], side: int, work: Path, seed: int) -> list[dict[str, Any]]:
    first, second = halves(tr)
    sc, homog = models(tr, first, work)
    progress(f"{tr.name}: set-chain with {len(sc.blocks)} blocks (memory {sc.memory}); homogeneous point "
             f"α = {homog.chain.matrix[0, 1]:.4f}, β = {homog.chain.matrix[1, 0]:.4f}")
    rng = np.random.default_rng(seed)
    rows = []
    for schedule in schedules:
        priv = privatize(tr, second, schedule, side, rng)
        recs = priv["records"]
        for day, i0, i1 in day_slices(tr, priv):
            part = recs[i0:i1]
            truth = float(np.mean(priv["state"][i0:i1] == 1))
            rel = [r for r in part if not r.redacted]
            naive = float(np.mean([r.value == tr.labels[1] for r in rel])) if rel else float("nan")
            row: dict[str, Any] = {"trace": tr.name, "schedule": schedule, "day": day, "truth": truth,
                                   "naive": naive, "records": len(part),
                                   "redacted": int(priv["redacted"][i0:i1].sum())}
            for c in CONSUMERS:
                est, ci = estimate(c, part, tr.labels, sc, homog)
                row[c] = {"estimate": est, "ci": ci, "covered": bool(ci[0] <= truth <= ci[1])}
            rows.append(row)
        progress(f"{tr.name} / {schedule}: {sum(r['schedule'] == schedule for r in rows)} days")
    return rows


def summary(rows: list[dict[str, Any]], consumer: str) -> dict[str, float]:
    cov = np.mean([r[consumer]["covered"] for r in rows])
    width = np.median([r[consumer]["ci"][1] - r[consumer]["ci"][0] for r in rows])
    err = np.mean([abs(r[consumer]["estimate"] - r["truth"]) for r in rows])
    return {"days": len(rows), "coverage": float(cov), "median_width": float(width), "mean_abs_error": float(err)}


def main() -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--side-hours", type=float, default=3.0, help="redacted hours on each side of a mark (3)")
    parser.add_argument("--seed", type=int, default=25)
    args = parser.parse_args()
    out = output_dir(args.out)
    paths = [DATA / f"{name}.csv" for name in TRACES]
    if not any(p.exists() for p in paths):
        progress(f"skipped: no traces in {DATA}")
        return 0
    schedules = SCHEDULES[:1] if args.quick else SCHEDULES
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in paths:
            if path.exists():
                tr = load_trace(path)
                rows += run_trace(tr, schedules, int(round(args.side_hours * HOUR / tr.period)), Path(tmp), args.seed)
    table, pooled, verdicts = [], [], {}
    traces = sorted({r["trace"] for r in rows})
    for schedule in schedules:
        for name in traces:
            sel = [r for r in rows if r["schedule"] == schedule and r["trace"] == name]
            naive_err = float(np.nanmean([abs(r["naive"] - r["truth"]) for r in sel]))
            table.append([schedule, name, len(sel), f"{naive_err:.3f}"]
                         + [f"{s['coverage']:.0%} / {s['median_width']:.3f} / {s['mean_abs_error']:.3f}"
                            for s in (summary(sel, c) for c in CONSUMERS)])
        sel = [r for r in rows if r["schedule"] == schedule]
        line = [schedule, len(sel)]
        for c in CONSUMERS:
            s = summary(sel, c)
            ok = s["coverage"] >= NOMINAL
            verdicts[f"{schedule} / {c}"] = {**s, "pass": ok}
            line.append(f"{s['coverage']:.1%} (width {s['median_width']:.3f}) {verdict(ok)}")
        pooled.append(line)
    env = environment()
    report = "\n".join([
        f"# Consumer coverage on real homes (issue 25 item 5): 95% intervals, PASS at ≥ {NOMINAL:.0%}", "",
        f"Second half of each trace, full-redaction windows of {args.side_hours:g} h on each side of every mark; "
        "per local day, the share of time in state 1 (labels[1]). Models calibrated on the first half "
        "(confidence 0.99). Cells: coverage / median interval width / mean |error|.", "",
        markdown_table(["schedule", "trace", "days", "naive |err|", *CONSUMERS], table, "llrrlll"), "",
        "Pooled over the traces:", "",
        markdown_table(["schedule", "days", *CONSUMERS], pooled, "lrlll"), "",
        environment_line(env)])
    write_report(out, "consumer_real_homes", args.quick, report,
                 {"verdicts": verdicts, "days": rows, "side_hours": args.side_hours, "environment": env})
    return 0


if __name__ == "__main__":
    sys.exit(main())
