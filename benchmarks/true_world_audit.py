"""The deployment audit of issue 9, repeatable: the real daemon against the true world.

Runs the daemon (in-process, stdin-like source, a real Mosquitto on loopback) on random binary
chains — sticky, anti-correlated, α > β — with the faults real deployments have (redelivered,
malformed, undecodable and late frames, escaped private keys, lost frames, flags, commands at bad
moments, schedule windows, sensors that boot in a known state, restarts with hidden gaps and
redeliveries across them). For every mark it recomputes the *true* leakage from the rows the daemon
actually used, with the independent evaluator of ``tests/true_world.py`` (numpy only), and reports:

- honoured marks whose true leakage exceeds ε (target 0), and the largest true leakage / ε among
  honoured marks (target ≤ 1);
- reported figures below the truth (target 0);
- runs that crashed or hung (target 0).

    python -m benchmarks.true_world_audit            # 200 worlds, ~5 min on 2 cores
    python -m benchmarks.true_world_audit --quick    # 20 worlds, < 1 min

The worlds are those of the property test in ``tests/test_true_world_daemon.py`` (seeds 1000, 1001,
…); the suite runs 12 of them, this script as many as asked.
"""

from __future__ import annotations

import asyncio
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

from ._common import base_parser, environment, markdown_table, output_dir, progress, result_stem, verdict, write_json

TESTS = Path(__file__).resolve().parent.parent / "tests"


def _number(x: Any) -> float:
    return math.inf if x == "inf" else float(x)


async def _audit(seeds: list[int], workdir: Path) -> dict[str, Any]:
    sys.path.insert(0, str(TESTS))
    from brokers import Broker  # noqa: PLC0415 - the tests' real-broker helper
    from test_true_world_daemon import evaluate, random_world, run_world  # noqa: PLC0415

    stats: dict[str, Any] = {"worlds": 0, "marks": 0, "honoured": 0, "not_honoured": 0, "violations": 0,
                             "under_reports": 0, "crashes": 0, "max_ratio": 0.0, "problems": []}
    (workdir / "broker").mkdir()
    broker = Broker(workdir / "broker", ["allow_anonymous true", "persistence false", "max_queued_messages 100000"])
    broker.start(new_port=True)
    try:
        for i, seed in enumerate(seeds):
            w = random_world(seed)
            try:
                v = evaluate(w, await asyncio.wait_for(run_world(broker, w, workdir / f"run{seed}"), 120))
            except Exception as exc:  # noqa: BLE001 - a crash or a hang is this world's finding
                stats["crashes"] += 1
                stats["problems"].append(f"{w.describe()}: {type(exc).__name__}: {exc}")
                continue
            stats["worlds"] += 1
            stats["problems"] += [f"{w.describe()}: {p}" for p in v.problems]
            for t, marks in v.marks_of.items():
                truth = v.truth[t]
                for mk in marks:
                    stats["marks"] += 1
                    figure = mk.get("achieved") or mk.get("leakage") or {}
                    if "total" in figure and _number(figure["total"]) < truth - 1e-9:
                        stats["under_reports"] += 1
                    if mk.get("honoured"):
                        stats["honoured"] += 1
                        stats["max_ratio"] = max(stats["max_ratio"], truth / w.epsilon)
                        stats["violations"] += truth > w.epsilon * (1 + 1e-9)
                    else:
                        stats["not_honoured"] += 1
            if (i + 1) % 10 == 0 or i + 1 == len(seeds):
                progress(f"{i + 1}/{len(seeds)} worlds, {stats['marks']} marks, {stats['violations']} violations, "
                         f"{stats['under_reports']} under-reports, {stats['crashes']} crashes")
    finally:
        broker.kill()
    return stats


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--worlds", type=int, default=None, help="how many random worlds (default 200; 20 with --quick)")
    args = parser.parse_args(argv)
    n = args.worlds or (20 if args.quick else 200)
    with tempfile.TemporaryDirectory(prefix="sg-audit-") as tmp:
        stats = asyncio.run(_audit(list(range(1000, 1000 + n)), Path(tmp)))
    rows = [
        ["worlds run (crashed or hung)", f"{stats['worlds']} ({stats['crashes']})", "0 crashed", verdict(stats["crashes"] == 0)],
        ["marks evaluated (honoured / not)", f"{stats['marks']} ({stats['honoured']} / {stats['not_honoured']})", "", ""],
        ["honoured marks with true leakage > ε", stats["violations"], "0", verdict(stats["violations"] == 0)],
        ["max true leakage / ε, honoured marks", f"{stats['max_ratio']:.4f}", "≤ 1", verdict(stats["max_ratio"] <= 1 + 1e-9)],
        ["reported figures below the truth", stats["under_reports"], "0", verdict(stats["under_reports"] == 0)],
        ["other contract problems", len(stats["problems"]) - stats["crashes"], "0",
         verdict(len(stats["problems"]) == stats["crashes"])],
    ]
    print(markdown_table(["measure", "value", "target", ""], rows))
    for p in stats["problems"][:20]:
        print(f"- {p}")
    out = output_dir(args.out) / f"{result_stem('true_world_audit', args.quick)}.json"
    write_json(out, {"environment": environment(), "seeds": [1000, 1000 + n - 1], **stats})
    progress(f"wrote {out}")
    return 0 if stats["violations"] == stats["under_reports"] == stats["crashes"] == 0 and not stats["problems"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
