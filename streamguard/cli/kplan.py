"""``streamguard plan --matrix`` and ``streamguard audit --matrix``: k-state 3R redaction
(docs/k-state-redaction.md). Positions are 1-based, as in the binary commands; ``redaction`` rows
hold Pr(⊥ | X = x) for each of the k states."""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from ..audit.brute import MAX_WORK, brute_force_leakage
from ..audit.kstate import PairLeakage, RowsError, redaction_leakage
from ..audit.start import start_effect
from ..model.chain import MarkovChain, ModelError
from ..privacy.channel import ChannelSequence
from ..redaction.kplan import DESIGNS, KRedactionPlan, plan_kredaction, plan_kstream
from ..redaction.plan import relation
from .common import GUARANTEE_NOTE, CliError, json_arg


def matrix_chain(matrix: Any, initial: Any) -> MarkovChain:
    """The chain of ``--matrix`` (JSON text or a parsed list) and ``--initial`` (None: stationary)."""
    mat = json_arg(matrix, "--matrix") if isinstance(matrix, str) else matrix
    init = json_arg(initial, "--initial") if isinstance(initial, str) else initial
    try:
        return MarkovChain(mat, init)
    except (TypeError, ValueError) as exc:
        raise CliError(f"--matrix: {exc}") from None


def _sides(lk: PairLeakage) -> dict[str, float]:
    return {"total": lk.total, "left": lk.left, "right": lk.right}


def _design(args: argparse.Namespace) -> str:
    design = args.design if args.design in DESIGNS else None
    if args.design == "optimal":  # the binary default: k-state plans have the exact design
        design = "exact"
    if design is None:
        raise CliError(f"--design with --matrix: one of {', '.join(DESIGNS)}")
    return design


def cmd_kplan(args: argparse.Namespace) -> int:
    """``plan --matrix``: a finite plan (--n, --private) or a stream table (--stream)."""
    chain = matrix_chain(args.matrix, args.initial)
    if args.baseline != "none" or args.plot or args.threshold is not None:
        raise CliError("--matrix plans k-state 3R (no --baseline, --threshold or --plot; "
                       "--design window is the data-independent baseline)")
    design = _design(args)
    weights = None if args.weights is None else json_arg(args.weights, "--weights")
    if args.stream:
        if args.n is not None or args.private or args.brute:
            raise CliError("--stream plans by distance to any private position: no --n, --private or --brute")
        initial = None if chain.stationary else chain.initial
        stat = MarkovChain(chain.matrix)
        try:
            sp = plan_kstream(stat, args.epsilon, design=design, split=args.split, weights=weights)
        except ValueError as exc:
            raise CliError(str(exc)) from None
        lk = sp.leakage()
        near = start_effect(stat.matrix, sp.left.red[: sp.left_horizon], sp.left.budget, initial)
        out = {"stream": True, "k": chain.k, "epsilon": sp.epsilon, "design": sp.design,
               "split": [sp.left.budget, sp.right.budget], "model": {"matrix": chain.matrix.tolist()},
               "left_horizon": sp.left_horizon, "right_horizon": sp.right_horizon,
               "offsets": sp.offsets().tolist(), "redaction": sp.table().tolist(),
               "leakage": lk.total, "leakage_sides": {"left": lk.left, "right": lk.right},
               "expected_redacted": sp.expected_redacted(), "start": near}
        if args.json:
            print(json.dumps(out))
            return 0
        print(f"k-state 3R stream plan — {chain.k} states, ε={sp.epsilon:g} nats, design={sp.design}, "
              f"split ε_ℓ={sp.left.budget:.6g} ε_r={sp.right.budget:.6g}")
        print(f"\n{'t − p':>8}  Pr(⊥|X=x) for x = 0..{chain.k - 1}")
        for off, row in zip(sp.offsets(), sp.table(), strict=True):
            print(f"{int(off):>+8}  " + "  ".join(f"{v:8.6f}" for v in row))
        print(f"\nhorizons: left {sp.left_horizon} (release delay), right {sp.right_horizon}; farther records are released")
        print(f"exact leakage in an unbounded stream: {lk.total:.9f} nats (left {lk.left:.6g}, right {lk.right:.6g})")
        print(f"expected redacted records per mark: {sp.expected_redacted():.6g}")
        print(f"near the start: marks at 0-based positions < {near['redact_to_start']} redact their left side to "
              f"the start; from position {near['matters_until']} on the start does not matter (< 1e-12 nats)")
        return 0
    if not args.private:
        raise CliError("name at least one --private position (or use --stream)")
    if args.n is None or args.n < 1:
        raise CliError("--n must be a positive number of records")
    for p in args.private:
        if not 1 <= p <= args.n:
            raise CliError(f"--private {p} is outside 1..{args.n}")
    try:
        plan = plan_kredaction(chain, args.n, [p - 1 for p in args.private], args.epsilon, design=design,
                               split=args.split, weights=weights)
    except (ValueError, ModelError) as exc:
        raise CliError(str(exc)) from None
    brute = _brute(plan) if args.brute else None
    if args.json:
        out: dict[str, Any] = {
            "n": args.n, "k": chain.k, "private": [p + 1 for p in plan.private], "epsilon": plan.epsilon,
            "design": plan.design, "split": {str(p + 1): list(s) for p, s in plan.splits.items()},
            "model": {"matrix": chain.matrix.tolist(), "initial": chain.initial.tolist(),
                      "stationary": chain.stationary},
            "redaction": plan.red.tolist(), "utility": plan.utility,
            "leakage": {str(p + 1): lk.total for p, lk in plan.leakages.items()},
            "leakage_sides": {str(p + 1): {"left": lk.left, "right": lk.right} for p, lk in plan.leakages.items()},
        }
        if brute is not None:
            out["leakage_brute"] = {str(p + 1): v for p, v in brute.items()}
        print(json.dumps(out))
        return 0
    print(f"k-state 3R plan — {chain.k} states, n={args.n}, ε={plan.epsilon:g} nats, design={plan.design}")
    print(f"\n{'t':>8}  Pr(⊥|X=x) for x = 0..{chain.k - 1}")
    for t, row in enumerate(plan.red):
        mark = "  ← private" if t in plan.private else ""
        print(f"{t + 1:>8}  " + "  ".join(f"{v:8.6f}" for v in row) + mark)
    print(f"\nutility ν (expected fraction released): {plan.utility:.6f}")
    for p, lk in plan.leakages.items():
        extra = f", brute force {brute[p]:.9f}" if brute is not None else ""
        print(f"private {p + 1}: exact leakage {lk.total:.9f} nats {relation(lk.total, plan.epsilon)} ε={plan.epsilon:g} "
              f"(left {lk.left:.6g}, right {lk.right:.6g}){extra}")
    print(GUARANTEE_NOTE)
    return 0


def _brute(plan: KRedactionPlan) -> dict[int, float]:
    n, k = plan.red.shape
    if k**n * 2**n > MAX_WORK:
        raise CliError(f"--brute enumerates k^n·2^n cases; n = {n} with k = {k} is too large")
    seq = ChannelSequence.from_redaction(plan.red)
    return {p: brute_force_leakage(plan.chain, seq, p) for p in plan.private}


def kaudit(args: argparse.Namespace, doc: dict[str, Any], model: dict[str, Any]) -> int:
    """``audit --matrix`` (or a file whose model has a 'matrix'): k-state 'redaction' rows exactly,
    O(n·k³); k-state 'emissions' by brute-force enumeration (small n only)."""
    chain = matrix_chain(args.matrix if args.matrix is not None else model.get("matrix"),
                         args.initial if args.initial is not None else (
                             None if model.get("stationary", True) else model.get("initial")))
    private = args.private or doc.get("private") or []
    if not private:
        raise CliError("name the private positions with --private (or a 'private' list in the file)")
    try:
        if "redaction" in doc:
            rows = np.asarray(doc["redaction"], dtype=np.float64)
            seq = ChannelSequence.from_redaction(rows)
        elif "emissions" in doc:
            rows = None
            seq = ChannelSequence.from_dense(np.asarray(doc["emissions"], dtype=np.float64))
        else:
            raise CliError("emission file: needs a 'redaction' (rows of k probabilities) or an 'emissions' list")
    except (TypeError, ValueError) as exc:
        raise CliError(f"{args.file}: {exc}") from None
    if seq.k != chain.k:
        raise CliError(f"{args.file}: rows have {seq.k} states, the chain has {chain.k}")
    small = chain.k**seq.n * seq.m**seq.n <= MAX_WORK
    if rows is None and not small:
        raise CliError(f"emissions on a {chain.k}-state chain are audited by enumeration: n = {seq.n} is too large")
    results: dict[str, dict[str, float]] = {}
    for p1 in private:
        if not isinstance(p1, int) or not 1 <= p1 <= seq.n:
            raise CliError(f"private position {p1} is outside 1..{seq.n}")
        try:
            if rows is not None:
                entry = _sides(redaction_leakage(chain.matrix, chain.initial, rows, p1 - 1))
            else:
                entry = {"total": brute_force_leakage(chain, seq, p1 - 1)}
            if args.brute:
                if not small:
                    raise CliError(f"--brute: n = {seq.n} with {seq.m} outputs is too large to enumerate")
                entry["brute"] = brute_force_leakage(chain, seq, p1 - 1)
        except (RowsError, ModelError) as exc:
            raise CliError(f"{args.file}: {exc}") from None
        results[str(p1)] = entry
    if args.json:
        print(json.dumps({"n": seq.n, "k": chain.k, "outputs": seq.m, "leakage": results}))
        return 0
    how = "exact" if rows is not None else "brute-force"
    print(f"{how} leakage of {seq.n} records ({seq.m} outputs) under a {chain.k}-state chain:")
    for p1, e in results.items():
        sides = f" (left {e['left']:.6g}, right {e['right']:.6g})" if "left" in e else ""
        extra = f", brute force {e['brute']:.9f}" if "brute" in e else ""
        print(f"  private {p1}: {e['total']:.9f} nats{sides}{extra}")
    return 0
