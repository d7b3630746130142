"""Per-mark cost of the daemon's certified figures over a box (issue 11: model/box_window.py) against
the evaluation it replaces (exactly under finitely many members: the plan's worst member and the box's
corners), side by side in one process, as CPU seconds (``time.process_time``) per mark including the
figures recomputed while its window is decided.

Boxes: 99 % regions calibrated from three sets of transition counts; ε = 1, optimal design. Cases, on
a privatizer fed constant readings: an on-time mark (``now`` on the newest record), a late mark (a
command for the oldest pending record, all its left neighbours decided) whose left neighbours were
redacted by a private record just before it (honourable), the same with its left neighbours
published (they exhaust ε), and a mark right after a restart (every gap hypothesis).
The figure reported by the box certificate must be ≥ the members' (it covers them).

Target (the brief's "bounded work"; no figure in the issue): ≤ 1 s CPU per mark in every case.

Outputs in ``--out``: ``bench_box_marks.md`` and ``.json`` (``_quick`` with ``--quick``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from streamguard.model import modelset
from streamguard.model.calibrate import TransitionData
from streamguard.model.robust import robust_stream_plan
from streamguard.sampling import SeededSource
from streamguard.stream.privatizer import StreamPrivatizer

from ._common import base_parser, environment, environment_line, markdown_table, output_dir, progress, result_stem, verdict, write_json

COUNTS = {"1k steps, (0.1, 0.2)": [[1827, 196], [195, 781]], "11k steps, sticky": [[9000, 95], [96, 1800]],
          "480 steps, wide": [[300, 30], [30, 120]]}
CASES = ("on time", "late, honourable", "late, exhausted", "after a restart")
TARGET_S = 1.0


def _run(plan: Any, ms: modelset.ModelSet, case: str, box: bool) -> tuple[float, Any]:
    kw: dict[str, Any] = {"box": ms.box} if box else {"members": tuple(ms.corners())}
    H = plan.left_horizon
    if case == "after a restart":
        kw.update(first_seq=300, first_phys=300, decided={t: (0.0, 0.0) for t in range(200, 300)}, restarted=True)
    core = StreamPrivatizer(plan, SeededSource(1), **kw)
    n = 3 if case == "after a restart" else 300
    # late: p = n − 1 − H is the oldest pending record, all its left neighbours are decided; honourable
    # when the record before it was private (its left neighbours were redacted by that mark's plan)
    for t in range(n):
        core.accept(0, float(t), now=float(t), private=case == "late, honourable" and t == n - 2 - H)
    t0 = time.process_time()
    m = core.mark(n - 1 - H if case.startswith("late") else None)
    for t in range(n, n + plan.right_horizon + H + 3):
        core.accept(0, float(t), now=float(t))
    return time.process_time() - t0, m


def main(argv: Sequence[str] | None = None) -> int:
    args = base_parser(__doc__.splitlines()[0]).parse_args(argv)
    out = output_dir(args.out)
    env = environment()
    counts = dict(list(COUNTS.items())[:1]) if args.quick else COUNTS
    rows, cells, all_ok = [], [], True
    for name, c in counts.items():
        ms = modelset.from_calibration(TransitionData(np.array(c)), 0.99)
        plan = robust_stream_plan(ms, 1.0).evaluation_plan()
        _run(plan, ms, "on time", True)  # compile / warm the kernels
        for case in CASES:
            progress(f"{name}: {case}")
            t_box, m_box = _run(plan, ms, case, True)
            t_old, m_old = _run(plan, ms, case, False)
            covers = m_box.leakage.total >= m_old.leakage.total - 1e-9
            ok = t_box <= TARGET_S and covers
            all_ok &= ok
            rows.append([name, case, f"{t_box:.4f}", f"{t_old:.4f}", f"{m_box.leakage.total:.4f}",
                         f"{m_old.leakage.total:.4f}", "yes" if m_box.honoured else "no",
                         "yes" if m_old.honoured else "no", verdict(ok)])
            cells.append({"set": name, "case": case, "box_cpu_s": t_box, "members_cpu_s": t_old,
                          "box_figure": m_box.leakage.total, "members_figure": m_old.leakage.total,
                          "box_honoured": m_box.honoured, "members_honoured": m_old.honoured})
    table = markdown_table(["model set", "mark", "box CPU [s]", "members CPU [s]", "box figure", "members figure",
                            "honoured (box)", "honoured (members)", f"≤ {TARGET_S:g} s, covers"], rows)
    report = "\n\n".join(["# Per-mark figures: certified over the box vs finitely many members",
                          environment_line(env), "ε = 1, 99 % boxes, CPU seconds per mark (one run each).",
                          table]) + "\n"
    print(report)
    stem = result_stem("bench_box_marks", args.quick)
    (out / f"{stem}.md").write_text(report)
    write_json(out / f"{stem}.json", {"environment": env, "cells": cells, "target_seconds": TARGET_S})
    progress(f"wrote {out / stem}.md and {stem}.json")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
