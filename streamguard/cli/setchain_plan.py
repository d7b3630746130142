"""``plan --model MODEL.json`` when MODEL.json holds a set-chain (``"kind": "setchain"``): what a mark
costs in records and in time — the scenario plan of every hour of the day, when the model carries its
calibration's counts (streamguard.model.scenarios; docs/time-varying.md §7), and the certified
window plan of every time-of-day block (streamguard.model.tv_plan; §5). With scenarios, the exit
status follows the scenario plans (the certified ones may refuse: §6)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..model.chain import ModelError
from ..model.setchain import SetChain, is_setchain_json
from ..model import scenarios, tv_plan
from ..model.scenarios import hour_plans
from ..model.tv_plan import block_plans, duration
from .common import CliError


def load_setchain(path: str) -> SetChain | None:
    """The set-chain in ``path``, or None when the file holds another kind of model."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None  # the model-set loader reports it
    if not is_setchain_json(doc):
        return None
    try:
        return SetChain.from_json(doc)
    except ModelError as exc:
        raise CliError(f"--model {path}: {exc}") from None


def _slowest(sc: SetChain, i: int) -> str:
    """Why a block may have no plan: its slowest possible departure from a state (1 − hi_ss: the
    set lets the chain stay that long; a state that may never be left admits no plan)."""
    b = sc.blocks[i]
    leave = 1.0 - b.hi.diagonal()
    s = int(leave.argmin())
    q = float(leave[s])
    if q <= 0.0:
        return f"the set lets '{sc.labels[s]}' never be left"
    return (f"the set lets '{sc.labels[s]}' be left with probability {q:.2g} per record, a mean stay of "
            f"{duration(sc.sample_period / q)}")


def cmd_plan_setchain(args: argparse.Namespace, sc: SetChain) -> int:
    """Print (or write as JSON) one window plan per block; exit 2 when some block has none."""
    if args.alpha is not None or args.beta is not None or args.initial is not None or args.matrix is not None:
        raise CliError("--model replaces --alpha/--beta/--initial/--matrix")
    if args.n is not None or args.private:
        raise CliError("a set-chain plans streams by time of day: no --n or --private")
    if args.baseline != "none" or args.brute or args.plot or args.threshold is not None or args.weights is not None:
        raise CliError("a set-chain is planned with window plans only (no --baseline, --brute, --plot, "
                       "--threshold or --weights)")
    try:
        plans = block_plans(sc, args.epsilon)
    except ValueError as exc:  # a memory too large to certify
        raise CliError(f"--model {args.model}: {exc}") from None
    rows: list[dict[str, Any]] = []
    for i, bp in enumerate(plans):
        b = sc.blocks[i]
        row: dict[str, Any] = {"block": i, "start": b.start, "end": sc.block_end(i)}
        if bp is not None:
            row.update(left=bp.left, right=bp.right, redacted=bp.redacted, bound=bp.bound,
                       left_seconds=bp.left * sc.sample_period, right_seconds=bp.right * sc.sample_period)
        rows.append(row)
    missing = [i for i, bp in enumerate(plans) if bp is None]
    hours = None if sc.scenarios is None else hour_plans(sc.scenarios, sc.sample_period, args.epsilon)
    hour_rows = None if hours is None else [
        {"hour": h, **({} if hp is None else {"left": hp.left, "right": hp.right, "redacted": hp.redacted,
                                                "left_seconds": hp.left * sc.sample_period,
                                                "right_seconds": hp.right * sc.sample_period})}
        for h, hp in enumerate(hours)]
    if args.json:
        print(json.dumps({"kind": "setchain", "epsilon": args.epsilon, "sample_period": sc.sample_period,
                          "memory": sc.memory, "blocks": rows, "refused": missing,
                          **({} if hour_rows is None else {"scenario_hours": hour_rows})}))
    else:
        if hours is not None:
            n_days = len(sc.scenarios.days) if sc.scenarios is not None else 0
            print(f"window plans per hour of the day, exact under every calibration scenario (the time-of-day "
                  f"chain, each of the {n_days} recorded days' chains, the pooled chain), ε={args.epsilon:g} nats, "
                  "any law before the window (docs/time-varying.md §7):")
            for h, hp in enumerate(hours):
                print(f"  {hp.cost_text()}" if hp is not None else
                      f"  a mark at {h:02d}:00: no window of at most {scenarios.MAX_RECORDS} records a side meets ε")
        order = "" if sc.memory == 1 else f", kernels depending on the last {sc.memory} states"
        print(f"window plans per time-of-day block over the set-chain ({len(sc.blocks)} blocks, "
              f"{sc.k} states, sample period {duration(sc.sample_period)}{order}), ε={args.epsilon:g} nats; "
              "certified for every fixed kernel sequence in the block sets (docs/time-varying.md)")
        for i, bp in enumerate(plans):
            if bp is None:
                print(f"block {i}: no window of at most {tv_plan.MAX_RECORDS} records a side meets ε ({_slowest(sc, i)})")
            else:
                print(f"block {i}: {bp.cost_text()}")
    if hours is not None:
        lacking = [h for h, hp in enumerate(hours) if hp is None]
        if lacking:
            raise CliError(f"no scenario plan meets ε={args.epsilon:g} for hour(s) {', '.join(map(str, lacking))}")
        return 0
    if missing:
        raise CliError(f"no window plan meets ε={args.epsilon:g} for block(s) {', '.join(map(str, missing))}")
    return 0
