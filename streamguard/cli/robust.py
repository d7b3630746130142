"""``plan --model`` and ``audit --model``: 3R plans and audits over a model set (MODEL.json), with
the certified worst case (streamguard.model.robust; docs/model-sets.md)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from ..privacy.channel import ChannelSequence
from ..model import modelset
from ..model.krobust import region, robust_kstream_plan, worst_over_rows
from ..model.robust import chain_windows, robust_redaction_plan, robust_stream_plan, worst_leakage
from .common import CliError

K_AUDIT_NOTE = ("k-state region: the records beyond each end of the table count as released (stationary "
                "stand-ins), which can only over-state a finite chain's leakage")


def _load(args: argparse.Namespace) -> modelset.ModelSet:
    if args.alpha is not None or args.beta is not None or args.initial is not None:
        raise CliError("--model replaces --alpha/--beta/--initial (members are stationary chains)")
    ms = modelset.load(Path(args.model))
    if not ms.is_binary and ms.kind == "finite":
        raise CliError("--model: a k-state model set must be a row-wise region (calibrate), not a finite set")
    return ms


def _printed_json(args: argparse.Namespace, doc: dict[str, Any]) -> bool:
    """With ``--json``, print ``doc`` as one JSON object and say so."""
    if args.json:
        print(json.dumps(doc))
    return bool(args.json)


def _member_text(wc: Any) -> str:
    if wc.member is not None:
        return f"α={wc.member[0]:.6g}, β={wc.member[1]:.6g}"
    return "" if wc.matrix is None else "P=" + json.dumps(np.round(wc.matrix, 6).tolist())


def _wc_line(wc: Any, epsilon: float) -> str:
    who = f", attained {wc.attained:.9f} at {_member_text(wc)}" if _member_text(wc) else ""
    cert = "exact over the finite set" if wc.boxes == 0 else f"certified over {wc.boxes} sub-box(es)"
    return f"worst-case leakage over the model set ≤ {wc.bound:.9f} nats ({cert}{who}); ε = {epsilon:g}"


def cmd_plan_model(args: argparse.Namespace) -> int:
    """``plan --model``: the robust plan, its worst case, and its cost against the point estimate."""
    ms = _load(args)
    if args.baseline != "none" or args.brute or args.plot:
        raise CliError("--model plans 3R only (no --baseline, --brute or --plot)")
    if not ms.is_binary:
        return _kplan_model(args, ms)
    if args.stream:
        if args.n is not None or args.private:
            raise CliError("--stream plans by distance to any private position: no --n or --private")
        rp = robust_stream_plan(ms, args.epsilon, design=args.design, split=args.split, threshold=args.threshold)
        point = None if rp.point_worst is None else (f"{rp.point_worst.bound:.6g} nats", rp.point_worst.bound)
        return _report_stream_plan(
            args, rp, args.design,
            f"robust 3R stream plan over the model set ({ms.kind}), ε={args.epsilon:g} nats, design {args.design}",
            f"α={rp.design_member[0]:.6g}, β={rp.design_member[1]:.6g}", point)
    if not args.private or args.n is None or args.n < 1:
        raise CliError("name --n and at least one --private position (or use --stream)")
    for p in args.private:
        if not 1 <= p <= args.n:
            raise CliError(f"--private {p} is outside 1..{args.n}")
    rc = robust_redaction_plan(ms, args.n, [p - 1 for p in args.private], args.epsilon, design=args.design,
                               split=args.split, threshold=args.threshold)
    doc = {"n": args.n, "private": sorted(set(args.private)), "epsilon": args.epsilon, "design": rc.plan.design,
           "model_set": ms.describe(), "worst_case": rc.worst.as_dict(),
           "design_member": {"alpha": rc.design_member[0], "beta": rc.design_member[1]},
           "design_budget": rc.design_budget, "redaction": rc.plan.red.tolist(),
           "utility": rc.utility, "point_estimate_utility": rc.point_utility,
           "utility_cost": None if rc.point_utility is None else rc.point_utility - rc.utility}
    if _printed_json(args, doc):
        return 0
    print(f"robust 3R plan over the model set ({ms.kind}), n={args.n}, ε={args.epsilon:g} nats")
    print(_wc_line(rc.worst, args.epsilon))
    print(f"utility under the point estimate {rc.utility:.6f}"
          + ("" if rc.point_utility is None else f" (the point estimate's own plan: {rc.point_utility:.6f})"))
    return 0


def _kplan_model(args: argparse.Namespace, ms: modelset.ModelSet) -> int:
    """``plan --model`` for a k-state row-wise set: the robust stream table (docs/model-sets.md §4)."""
    if not args.stream:
        raise CliError("--model with a k-state set plans streams only (--stream)")
    if args.n is not None or args.private:
        raise CliError("--stream plans by distance to any private position: no --n or --private")
    if args.design not in ("optimal", "exact"):
        raise CliError("--model with a k-state set uses the exact k-state design (--design exact)")
    if args.threshold is not None:
        raise CliError("--threshold applies to binary chains only")
    weights = None if args.weights is None else json.loads(args.weights)
    rp = robust_kstream_plan(ms, args.epsilon, split=args.split, weights=weights)
    point = None if rp.point_worst is None else (
        f"≤ {rp.point_worst.bound:.6g} nats (attained {rp.point_worst.attained:.6g})", rp.point_worst.attained)
    return _report_stream_plan(args, rp, "exact",
                               f"robust k-state 3R stream plan over the model set ({ms.kind}, {ms.k} states), "
                               f"ε={args.epsilon:g} nats",
                               f"P={json.dumps(np.round(rp.design_member, 6).tolist())}", point)


def _report_stream_plan(args: argparse.Namespace, rp: Any, design: str, title: str, designed_on: str,
                        point: tuple[str, float] | None) -> int:
    """Print the line ``title`` and a robust stream plan ``rp``, or write it as JSON (binary: model/robust.py, k states:
    model/krobust.py): its worst case over the set, the member it was designed on, and what the
    point estimate's own plan would leak over the set — ``point`` is that worst case as said and
    the figure compared with ε (the certified bound for a binary set; for a k-state set the
    attained value, its bound being an over-estimate)."""
    doc = {"stream": True, "epsilon": args.epsilon, "design": design, **rp.as_dict(),
           "split": [rp.plan.left.budget, rp.plan.right.budget],
           "offsets": rp.plan.offsets().tolist(), "redaction": rp.plan.table().tolist()}
    if _printed_json(args, doc):
        return 0
    print(title)
    print(_wc_line(rp.worst, args.epsilon))
    print(f"designed on {designed_on} with budget {rp.design_budget:.6g}; "
          f"horizons left {rp.plan.left.horizon} / right {rp.plan.right.horizon}")
    print(f"expected redactions per mark (under the point estimate): {rp.expected_redacted:.4f}")
    if point is not None and rp.point_plan is not None:
        said, figure = point
        print(f"the point estimate's own plan: {rp.point_expected_redacted:.4f} redactions per mark, but its "
              f"worst case over the set is {said}{' > ε' if figure > args.epsilon else ''}; robustness costs "
              f"{rp.expected_redacted - rp.point_expected_redacted:.4f} redactions per mark")
    return 0


def audit_model(args: argparse.Namespace, seq: ChannelSequence, doc: dict[str, Any], private: list[int]) -> int:
    """``audit --model``: the worst case over the set of a redaction table about each private record."""
    ms = _load(args)
    if "redaction" not in doc:
        raise CliError("--model audits redaction tables ('redaction' in the file) only")
    red = np.asarray(doc["redaction"], dtype=np.float64)
    if red.ndim != 2 or red.shape[1] != ms.k:
        raise CliError(f"--model: the redaction rows need {ms.k} probabilities each (the set's states)")
    results = {}
    for p1 in private:
        if not isinstance(p1, int) or not 1 <= p1 <= seq.n:
            raise CliError(f"private position {p1} is outside 1..{seq.n}")
        if red[p1 - 1].min() < 1.0:
            raise CliError(f"private position {p1} is not always redacted: its leakage is unbounded")
        wins = chain_windows(red, [p1 - 1])
        wc = (worst_leakage(ms, wins) if ms.is_binary
              else worst_over_rows(region(ms), wins))
        results[str(p1)] = wc
    doc_out = {"n": seq.n, "model_set": ms.describe(), "worst_case": {p: wc.as_dict() for p, wc in results.items()}}
    if not ms.is_binary:
        doc_out["note"] = K_AUDIT_NOTE
    if _printed_json(args, doc_out):
        return 0
    print(f"worst case over the model set ({ms.kind}) of {seq.n} redaction rows:")
    if not ms.is_binary:
        print(f"  ({K_AUDIT_NOTE})")
    for p1, wc in results.items():
        at = f" at {_member_text(wc)}" if _member_text(wc) else ""
        print(f"  private {p1}: ≤ {wc.bound:.9f} nats (attained {wc.attained:.9f}{at}; {wc.method})")
    return 0
