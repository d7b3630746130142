"""``streamguard calibrate``: a model (MODEL.json) from recorded frames, with a simultaneous
confidence region (streamguard.model; docs/model-sets.md). By default the model class is chosen
from the data (time-of-day blocks, drift, second order: :mod:`streamguard.model.select`) and the
output is a set-chain; ``--model-class homogeneous`` gives the homogeneous first-order region."""

from __future__ import annotations

import argparse
import json
import tomllib
from pathlib import Path
from typing import Any

import numpy as np

from ..model.chain import ModelError
from ..model.calibrate import read_transitions
from ..model.modelset import ModelSet, from_calibration, write_model_json
from ..model.select import Transitions, describe_fit, select_setchain
from ..frames.records import StateMap
from .common import CliError, read_text


def _stream_states(config: Path, name: str) -> tuple[StateMap, float | None]:
    """Labels or bins and the sample period of stream ``name`` in a TOML config. Read directly (not
    through the full validation): the stream's model may be the very file being calibrated."""
    try:
        doc = tomllib.loads(read_text(config))
    except tomllib.TOMLDecodeError:
        raise CliError(f"{config}: not valid TOML") from None
    streams = doc.get("streams") if isinstance(doc.get("streams"), list) else []
    for s in streams:
        if isinstance(s, dict) and s.get("name") == name:
            try:
                states = StateMap(labels=None if s.get("labels") is None else tuple(s["labels"]),
                                  bins=None if s.get("bins") is None else tuple(float(b) for b in s["bins"]))
            except (TypeError, ValueError) as exc:
                raise CliError(f"{config}: stream {name}: {exc}") from None
            period = s.get("sample_period")
            return states, None if period is None else float(period)
    raise CliError(f"{config}: no stream named {name!r}")


def _states(args: argparse.Namespace) -> tuple[StateMap, float | None]:
    if args.config is not None:
        if args.labels or args.bins or args.stream is None:
            raise CliError("--config needs --stream NAME and takes labels, bins and period from it")
        states, period = _stream_states(Path(args.config), args.stream)
        return states, period if args.sample_period is None else args.sample_period
    if bool(args.labels) == bool(args.bins):
        raise CliError("give the states: --labels L1,L2[,…] or --bins E0,E1,… (or --config FILE --stream NAME)")
    try:
        if args.labels:
            return StateMap(labels=tuple(x.strip() for x in args.labels.split(","))), args.sample_period
        return StateMap(bins=tuple(float(x) for x in args.bins.split(","))), args.sample_period
    except ValueError as exc:
        raise CliError(f"states: {exc}") from None


def _report(ms: ModelSet) -> str:
    cal = ms.calibration
    k = ms.k
    lines = [f"calibration of {cal.get('file')}: {cal['lines']} lines, {cal['steps']} steps with a reading, "
             f"{cal['transitions']} transitions in {cal['segments']} run(s); {cal['gaps']} gap(s), "
             f"{cal['duplicates']} redelivered, {cal['late']} late, {cal['malformed_total']} malformed"
             + (f" ({', '.join(f'{r}: {c}' for r, c in cal['malformed'].items())})" if cal['malformed'] else ""),
             "", "transition counts (row: from state):"]
    assert ms.counts is not None and ms.bounds is not None
    for i in range(k):
        lines.append("  " + " ".join(f"{int(c):>9d}" for c in ms.counts[i]))
    lines += ["", "point estimate (maximum likelihood, unsmoothed):"]
    if ms.point is None:
        lines.append("  none: a state is never left in the data")
    else:
        for i in range(k):
            lines.append("  " + " ".join(f"{v:9.6f}" for v in ms.point.matrix[i]))
    lines += ["", f"simultaneous {ms.confidence:g} confidence region (every row at once), entry bounds [lo, hi]:"]
    for i in range(k):
        lines.append("  " + " ".join(f"[{lo:.6f}, {hi:.6f}]" for lo, hi in ms.bounds[i]))
    if ms.kind == "box":
        (a0, a1), (b0, b1) = ms.box  # type: ignore[misc]
        lines.append(f"binary box: α = P(0→1) ∈ [{a0:.6g}, {a1:.6g}], β = P(1→0) ∈ [{b0:.6g}, {b1:.6g}]")
    wide = [i for i in range(k) if np.any(ms.bounds[i, :, 1] - ms.bounds[i, :, 0] > 0.5)]
    if wide:
        lines.append(f"note: little data for state(s) {', '.join(map(str, wide))}: the region is wide and robust "
                     "plans redact more (record a longer calibration period to buy utility back)")
    return "\n".join(lines)


def cmd_calibrate(args: argparse.Namespace) -> int:
    states, period = _states(args)
    if period is not None and not period > 0:
        raise CliError("--sample-period must be > 0 seconds")
    if not 0.0 < args.confidence < 1.0:
        raise CliError("--confidence must lie strictly between 0 and 1")
    if not 0.0 < args.test_level < 1.0:
        raise CliError("--test-level must lie strictly between 0 and 1")
    path = Path(args.file)
    auto = args.model_class == "auto"
    if auto and period is None:
        raise CliError("the default model class needs --sample-period (or --model-class homogeneous)")
    try:
        data = read_transitions(path, states, period, keep=auto)
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}") from None
    if auto:
        return _calibrate_setchain(args, data, states, period)
    ms = from_calibration(data, args.confidence, states.labels, {"file": path.name, "sample_period": period})
    if args.out:
        ms.write(Path(args.out))
    if args.json:
        print(json.dumps(ms.to_json()))
    else:
        print(_report(ms))
        if args.out:
            print(f"\nmodel set written to {args.out} (use it as [streams.model] file, or plan/audit --model)")
    return 0


def _calibrate_setchain(args: argparse.Namespace, data: Any, states: StateMap, period: float) -> int:
    """The default: a set-chain chosen by the tests of :mod:`streamguard.model.select`."""
    labels = states.labels or tuple(f"bin{i}" for i in range(states.k))
    try:
        sc = select_setchain(Transitions.from_lists(data.trans_ts, data.trans), labels, period, args.confidence,
                             level=args.test_level, utc_offset=args.utc_offset)
    except ModelError as exc:
        raise CliError(str(exc)) from None
    assert sc.calibration is not None
    sc.calibration.update({**data.as_dict(), "file": Path(args.file).name, "sample_period": period})
    if args.out:
        write_model_json(Path(args.out), sc.to_json())
    if args.json:
        print(json.dumps(sc.to_json()))
        return 0
    cal = sc.calibration
    print(f"calibration of {cal['file']}: {cal['lines']} lines, {cal['steps']} steps with a reading, "
          f"{cal['transitions']} transitions in {cal['segments']} run(s); {cal['gaps']} gap(s), "
          f"{cal['duplicates']} redelivered, {cal['late']} late, {cal['malformed_total']} malformed\n")
    print(describe_fit(sc))
    if args.out:
        print(f"\nset-chain written to {args.out} (kind 'setchain'; for the homogeneous model set of earlier "
              "versions: --model-class homogeneous)")
    return 0


def register(sub: Any) -> None:
    """Add ``calibrate`` to the command parser."""
    c = sub.add_parser("calibrate", help="estimate a stream's model set (MODEL.json) from recorded frames",
                       description="Count transitions between consecutive steps of recorded frames (JSON lines "
                       "{\"value\": …, \"ts\": …}, as the daemon reads them; real epoch timestamps; with "
                       "--sample-period a missing slot breaks the chain; malformed lines are counted) and "
                       "give the unsmoothed maximum-likelihood matrix and a simultaneous confidence region "
                       "(mixture-martingale row sets, union bound over rows; docs/model-sets.md). By "
                       "default the model class is chosen from the data: time-of-day blocks, drift "
                       "between days and second-order dependence are each kept or dropped by an X² test "
                       "(--test-level), and the output is a set-chain whose per-block row sets hold "
                       "what was kept (docs/model-selection.md); a recording that does not cover every "
                       "hour on two days is refused. --model-class homogeneous gives the earlier "
                       "homogeneous region (little data: a wide region, not a refusal).")
    c.add_argument("file", help="JSON lines of frames (or a stream's recorded steps)")
    c.add_argument("--labels", help="state labels, comma-separated (state 0 first)")
    c.add_argument("--bins", help="numeric bin edges, comma-separated (k+1 increasing edges)")
    c.add_argument("--config", help="take labels/bins and sample period from this TOML config …")
    c.add_argument("--stream", help="… for this stream")
    c.add_argument("--sample-period", type=float, help="seconds between steps; frames are placed on this grid")
    c.add_argument("--confidence", type=float, default=0.99, help="level of the simultaneous region (default 0.99)")
    c.add_argument("--model-class", choices=("auto", "homogeneous"), default="auto",
                   help="auto (default): chosen by the tests, a set-chain; homogeneous: one first-order chain's "
                   "region (earlier versions' output)")
    c.add_argument("--test-level", type=float, default=0.05,
                   help="level of each model-selection test (default 0.05; a lower level keeps fewer effects)")
    c.add_argument("--utc-offset", type=float, default=0.0, metavar="SECONDS",
                   help="local clock = UTC + SECONDS, for the time-of-day blocks (default 0)")
    c.add_argument("--out", metavar="MODEL.json", help="write the model set here (created private)")
    c.add_argument("--json", action="store_true", help="print the model set as one JSON object")
    c.set_defaults(func=cmd_calibrate)
