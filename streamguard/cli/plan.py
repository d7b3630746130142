"""``streamguard plan`` and ``streamguard audit``: 3R plans for binary chains and the exact audit of
any local channels (positions 1-based, as in the papers)."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from ..audit import brute_force_leakage, exact_leakage
from ..audit.brute import MAX_WORK
from ..audit.start import start_effect, start_hold
from ..privacy.budget import check_budget
from ..model.chain import MarkovChain
from ..privacy.channel import ChannelSequence
from ..redaction.baselines import BASELINES, baseline_plan, theorem2_bound
from ..redaction.design import DESIGNS
from ..redaction.plan import RedactionPlan, plan_redaction, relation
from . import robust
from .common import GUARANTEE_NOTE, CliError, json_arg, read_text, stream_plan
from .kplan import cmd_kplan, kaudit
from .setchain_plan import cmd_plan_setchain, load_setchain


def _split_arg(text: str) -> str | float:
    if text in ("even", "optimize"):
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be 'even', 'optimize' or a number (the left budget ε_ℓ)") from None


def _threshold_arg(text: str) -> str | float:
    if text == "optimize":
        return text
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be a fraction in (0, 1] or 'optimize'") from None
    if not 0.0 < v <= 1.0:
        raise argparse.ArgumentTypeError("must be a fraction in (0, 1] or 'optimize'")
    return v


def _chain(alpha: float | None, beta: float | None, initial: str | None) -> MarkovChain:
    if alpha is None or beta is None:
        raise CliError("the model needs both --alpha and --beta")
    init = None if initial is None else json_arg(initial, "--initial")
    return MarkovChain.binary(alpha, beta, init)


# -- plan ---------------------------------------------------------------------------------------
def _plan_json(plan: RedactionPlan, args: argparse.Namespace, brute: dict[int, float] | None) -> dict[str, Any]:
    ch = plan.chain
    out: dict[str, Any] = {
        "n": plan.n,
        "private": [p + 1 for p in plan.private],
        "epsilon": plan.epsilon,
        "design": plan.design,
        "baseline": args.baseline,
        "split": {str(p + 1): list(plan.splits[p]) for p in plan.private} if args.baseline == "none" else None,
        "threshold": args.threshold,
        "model": {"alpha": ch.alpha, "beta": ch.beta, "initial": ch.initial.tolist(), "stationary": ch.stationary},
        "regions": plan.region_names(),
        "redaction": plan.red.tolist(),
        "utility": plan.utility,
        "leakage": {str(p + 1): lk.total for p, lk in plan.leakage.items()},
        "leakage_sides": {str(p + 1): {"left": lk.left, "right": lk.right} for p, lk in plan.leakage.items()},
    }
    if ch.stationary:
        out["dim_bound"] = {
            str(p + 1): {
                "theorem2_printed": theorem2_bound(ch, plan.n, p, plan.epsilon, corrected=False),
                "theorem2_corrected": theorem2_bound(ch, plan.n, p, plan.epsilon, corrected=True),
            }
            for p in plan.private
        }
    if brute is not None:
        out["leakage_brute"] = {str(p + 1): v for p, v in brute.items()}
    return out


def _plan_table(plan: RedactionPlan, brute: dict[int, float] | None) -> str:
    ch = plan.chain
    lines = [
        f"3R redaction plan — binary chain α={ch.alpha:g}, β={ch.beta:g}"
        f"{'' if ch.stationary else ' (non-stationary start)'}, n={plan.n}, ε={plan.epsilon:g} nats, "
        f"design={plan.design}",
        "",
        f"{'t':>8}  region  Pr(⊥|X=0)  Pr(⊥|X=1)",
    ]
    t = 0
    while t < plan.n:
        if plan.red[t].any():
            mark = "  ← private" if t in plan.private else ""
            lines.append(f"{t + 1:>8}  {plan.region_names()[t]:^6}  {plan.red[t, 0]:9.6f}  {plan.red[t, 1]:9.6f}{mark}")
            t += 1
        else:
            u = t
            while u + 1 < plan.n and not plan.red[u + 1].any():
                u += 1
            span = f"{t + 1}" if u == t else f"{t + 1}–{u + 1}"
            lines.append(f"{span:>8}  {'S':^6}  released always")
            t = u + 1
    lines += ["", f"utility ν (expected fraction released): {plan.utility:.6f}"]
    for p in plan.private:
        lk = plan.leakage[p]
        extra = f", brute force {brute[p]:.9f}" if brute is not None else ""
        split = plan.splits.get(p)
        split_s = f", split ε_ℓ={split[0]:.6g} ε_r={split[1]:.6g}" if split and not math.isnan(split[0]) else ""
        lines.append(
            f"private {p + 1}: exact leakage {lk.total:.9f} nats {relation(lk.total, plan.epsilon)} ε={plan.epsilon:g}"
            f" (left {lk.left:.6g}, right {lk.right:.6g}{split_s}){extra}"
        )
    lines.append(GUARANTEE_NOTE)
    return "\n".join(lines)


def _brute(plan: RedactionPlan) -> dict[int, float]:
    seq = plan.channels()
    if 2**plan.n * seq.m**plan.n > MAX_WORK:
        raise CliError(f"--brute enumerates 2^n·3^n cases; n = {plan.n} is too large (n ≤ 9)")
    return {p: brute_force_leakage(plan.chain, seq, p) for p in plan.private}


def _stream_plan(args: argparse.Namespace, chain: MarkovChain) -> int:
    if args.baseline != "none" or args.brute or args.plot:
        raise CliError("--stream plans 3R only (no --baseline, --brute or --plot)")
    if args.n is not None or args.private:
        raise CliError("--stream plans by distance to any private position: no --n or --private")
    initial = None if chain.stationary else chain.initial  # --initial: the first record's law is known
    chain = MarkovChain(chain.matrix)  # the table is planned for the stationary stream
    sp = stream_plan(chain, args.epsilon, args.design, args.split, args.threshold)
    lk = sp.leakage()
    table = sp.table()
    near = start_effect(chain.matrix, sp.left.red[: sp.left_horizon], sp.left.budget, initial)
    near["hold"] = start_hold(chain.matrix, sp.left.red[: sp.left_horizon], sp.left.budget, sp.epsilon, initial)
    if args.json:
        print(json.dumps({
            "stream": True, "epsilon": sp.epsilon, "design": sp.design,
            "split": [sp.left.budget, sp.right.budget],
            "model": {"alpha": chain.alpha, "beta": chain.beta},
            "left_horizon": sp.left_horizon, "right_horizon": sp.right_horizon,
            "offsets": sp.offsets().tolist(), "redaction": table.tolist(),
            "leakage": lk.total, "leakage_sides": {"left": lk.left, "right": lk.right},
            "start": near,
        }))
        return 0
    print(f"3R stream plan — binary chain α={chain.alpha:g}, β={chain.beta:g}, ε={sp.epsilon:g} nats, "
          f"design={sp.design}, split ε_ℓ={sp.left.budget:.6g} ε_r={sp.right.budget:.6g}")
    print(f"\n{'t − p':>8}  Pr(⊥|X=0)  Pr(⊥|X=1)")
    offsets = sp.offsets()
    start = 0
    for end in range(1, len(table) + 1):  # runs of identical rows are shown by their two ends
        if end < len(table) and np.array_equal(table[end], table[start]):
            continue
        run = end - start
        for i in ([start, end - 1] if run > 2 else range(start, end)):
            print(f"{int(offsets[i]):>+8}  {table[i][0]:9.6f}  {table[i][1]:9.6f}")
            if i == start and run > 2:
                print(f"{'⋮':>8}  ({run - 2} more rows equal to the rows around them)")
        start = end
    print(f"\nhorizons: left {sp.left_horizon} (release delay), right {sp.right_horizon}; farther records are released")
    print(f"exact leakage in an unbounded stream: {lk.total:.9f} nats (left {lk.left:.6g}, right {lk.right:.6g})")
    law = "the stated initial law" if initial is not None else "any initial law (a sensor may boot in a known state)"
    print(f"near the start, for {law}: marks at 0-based positions < {near['redact_to_start']} redact their left "
          f"side to the start, and so do marks at positions < {near['hold']} whose plan rows would leave the right "
          f"side nothing (with a delay ≥ the left horizon − 1, as by default, the daemon holds the records before "
          f"position {max(near['hold'] - 1, 0)} until that one "
          f"is due, so a mark made on time finds them undecided); further on the plan's left rows leak up to "
          f"{near['worst_left']:.6g} nats and the right side gets what is left of ε; from position "
          f"{near['matters_until']} on the start does not matter (< 1e-12 nats); the same holds after every restart")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    try:
        check_budget(args.epsilon, "--epsilon")
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if args.model is not None:
        sc = load_setchain(args.model)
        if sc is not None:
            return cmd_plan_setchain(args, sc)
        return robust.cmd_plan_model(args)
    if args.matrix is not None:
        if args.alpha is not None or args.beta is not None:
            raise CliError("give either --matrix or --alpha/--beta")
        return cmd_kplan(args)
    if args.design == "window":
        raise CliError("--design window is for --matrix chains (binary chains: --baseline)")
    chain = _chain(args.alpha, args.beta, args.initial)
    if args.stream:
        return _stream_plan(args, chain)
    if not args.private:
        raise CliError("name at least one --private position (or use --stream)")
    if args.n is None or args.n < 1:
        raise CliError("--n must be a positive number of records")
    private = [p - 1 for p in args.private]
    for p in args.private:
        if not 1 <= p <= args.n:
            raise CliError(f"--private {p} is outside 1..{args.n}")
    if args.baseline == "none":
        plan = plan_redaction(chain, args.n, private, args.epsilon, design=args.design, split=args.split,
                              threshold=args.threshold)
    else:
        plan = baseline_plan(args.baseline, chain, args.n, private, args.epsilon)
    brute = _brute(plan) if args.brute else None
    if args.plot:
        from ..plot import plot_plan

        plot_plan(plan, Path(args.plot))
    if args.json:
        print(json.dumps(_plan_json(plan, args, brute)))
    else:
        print(_plan_table(plan, brute))
    return 0


# -- audit --------------------------------------------------------------------------------------
def _load_channels(doc: dict[str, Any]) -> ChannelSequence:
    if "emissions" in doc:
        return ChannelSequence.from_dense(np.asarray(doc["emissions"], dtype=np.float64))
    if "redaction" in doc:
        return ChannelSequence.from_redaction(np.asarray(doc["redaction"], dtype=np.float64))
    raise CliError("emission file: needs an 'emissions' (per record: [[e(y|0)...], [e(y|1)...]]) or a 'redaction' list")


def cmd_audit(args: argparse.Namespace) -> int:
    path = Path(args.file)
    try:
        doc = json.loads(read_text(path))
    except json.JSONDecodeError:
        raise CliError(f"{path}: not valid JSON") from None
    if not isinstance(doc, dict):
        raise CliError(f"{path}: expected a JSON object")
    try:
        seq = _load_channels(doc)
    except (TypeError, ValueError) as exc:
        raise CliError(f"{path}: {exc}") from None
    if args.model is not None:
        return robust.audit_model(args, seq, doc, args.private or doc.get("private") or [])
    model = doc.get("model", {}) if isinstance(doc.get("model"), dict) else {}
    if args.matrix is not None or (args.alpha is None and "matrix" in model):
        return kaudit(args, doc, model)
    alpha = args.alpha if args.alpha is not None else model.get("alpha")
    beta = args.beta if args.beta is not None else model.get("beta")
    initial = args.initial if args.initial is not None else (
        None if model.get("stationary", True) or "initial" not in model else json.dumps(model["initial"]))
    chain = _chain(alpha, beta, initial)
    private = args.private or doc.get("private") or []
    if not private:
        raise CliError("name the private positions with --private (or a 'private' list in the file)")
    results = {}
    for p1 in private:
        if not isinstance(p1, int) or not 1 <= p1 <= seq.n:
            raise CliError(f"private position {p1} is outside 1..{seq.n}")
        lk = exact_leakage(chain, seq, p1 - 1)
        entry: dict[str, float] = {"total": lk.total, "left": lk.left, "right": lk.right}
        if args.brute:
            if chain.k**seq.n * seq.m**seq.n > MAX_WORK:
                raise CliError(f"--brute: n = {seq.n} with {seq.m} outputs is too large to enumerate")
            entry["brute"] = brute_force_leakage(chain, seq, p1 - 1)
        results[str(p1)] = entry
    if args.json:
        print(json.dumps({"n": seq.n, "outputs": seq.m, "leakage": results}))
    else:
        print(f"exact leakage of {seq.n} local channels ({seq.m} outputs) under α={chain.alpha:g}, β={chain.beta:g}:")
        for p1, e in results.items():
            extra = f", brute force {e['brute']:.9f}" if "brute" in e else ""
            print(f"  private {p1}: {e['total']:.9f} nats (left {e['left']:.6g}, right {e['right']:.6g}){extra}")
    return 0



def register(sub: Any) -> None:
    """Add ``plan`` and ``audit`` to the command parser."""
    model = argparse.ArgumentParser(add_help=False)
    model.add_argument("--alpha", type=float, help="P(0→1) of the binary chain, in (0, 1)")
    model.add_argument("--beta", type=float, help="P(1→0) of the binary chain, in (0, 1)")
    model.add_argument("--initial", help='law of the first record as JSON, e.g. "[0.5, 0.5]" (default: stationary)')
    model.add_argument("--model", metavar="MODEL.json",
                       help="a model set (streamguard calibrate): plan robustly / audit the worst case over it; "
                       "a set-chain (time-of-day blocks, docs/time-varying.md): a window plan per block and "
                       "its cost")
    model.add_argument("--matrix", help='k-state chain instead of --alpha/--beta: transition matrix as JSON, '
                       'e.g. "[[0.8,0.2,0],[0.1,0.8,0.1],[0,0.2,0.8]]" (redaction rows then hold k probabilities)')

    p = sub.add_parser("plan", parents=[model], help="design a redaction plan for private positions",
                       description="Design 3R redaction (paper 000, corrected) or a baseline for a binary "
                       "Markov chain of n records (or a k-state chain with --matrix, docs/k-state-redaction.md) "
                       "and report its exact leakage and utility.")
    p.add_argument("--epsilon", type=float, required=True, help="privacy budget ε in nats, 0 < ε ≤ 1000")
    p.add_argument("--n", type=int, help="number of records (not with --stream)")
    p.add_argument("--private", type=int, action="append",
                   help="a private position (1-based); repeat for several")
    p.add_argument("--stream", action="store_true",
                   help="plan an unbounded stationary stream: a table by signed distance t − p")
    p.add_argument("--design", choices=DESIGNS + ("window",), default="optimal",
                   help="q design: paper (common q), optimal (convex-relaxation optimum), "
                   "exact (smallest q by exact leakage); default optimal. With --matrix: exact "
                   "(the default) or window (the data-independent baseline)")
    p.add_argument("--split", type=_split_arg, default="even",
                   help="budget split: even, optimize, or the left budget ε_ℓ (ε_r = ε − ε_ℓ); default even")
    p.add_argument("--threshold", type=_threshold_arg, default=None,
                   help="region threshold ε' as a fraction of each side's budget, or optimize (notes/000 §7.8)")
    p.add_argument("--baseline", choices=("none",) + BASELINES, default="none",
                   help="plan a data-independent baseline instead of 3R")
    p.add_argument("--brute", action="store_true", help="also compute the leakage by brute force (n ≤ 9)")
    p.add_argument("--weights", help="--matrix only: utility weight per state as JSON (default all 1; "
                   "a state of weight 0 is never released near a private position)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", metavar="FILE.png", help="draw influences, thresholds and regions (needs matplotlib)")
    p.set_defaults(func=cmd_plan)

    a = sub.add_parser("audit", parents=[model], help="exact leakage of given emission tables",
                       description="Exact LDP leakage about private positions of any sequence of local "
                       "channels under a binary Markov chain, or a k-state one with --matrix ('redaction' rows of k "
                       "probabilities exactly; k-state 'emissions' by enumeration, small n). FILE is JSON with "
                       "'emissions' (per record [[e(y|0),...],[e(y|1),...]]) or 'redaction' ([Pr(⊥|0), Pr(⊥|1)] "
                       "per record); "
                       "the output of 'plan --json' is accepted as is, model included.")
    a.add_argument("file", help="JSON emission file")
    a.add_argument("--private", type=int, action="append", help="a private position (1-based); repeat")
    a.add_argument("--brute", action="store_true", help="also enumerate by brute force (small n)")
    a.add_argument("--json", action="store_true", help="print one JSON object")
    a.set_defaults(func=cmd_audit)
