"""The real daemon with a calibrated *box* model set against the true world (issue 11): every mark's
figure is certified over the whole box (streamguard/model/box_window.py), so it must be ≥ the true
leakage of the rows the daemon published under *every* chain of the box — checked by the tests'
own evaluator (tests/true_world.py, no streamguard code) under the true chain (a random member)
and under many other random members, for random streams with late marks (commands for published
records), restarts with hidden gaps, lost and malformed frames, and a non-stationary start (a point
mass or a random law of the first reading). An honoured mark's true leakage is ≤ ε under every
member evaluated and every initial law."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from brokers import Broker
from streamguard.model import modelset
from streamguard.model.calibrate import TransitionData
from test_true_world_daemon import World, evaluate, run_world, sample_world, script_faults

#: Transition counts of a calibration: a box of roughly α ∈ [0.07, 0.13], β ∈ [0.15, 0.26] at 99 %.
COUNTS = np.array([[1827, 196], [195, 781]])
MEMBERS = 12  # random members of the box each run is also evaluated under


def _world(seed: int, box: modelset.ModelSet, model_file: Path) -> World:
    rng = np.random.default_rng(seed)
    (a0, a1), (b0, b1) = box.box  # type: ignore[misc]
    a, b = float(rng.uniform(a0, a1)), float(rng.uniform(b0, b1))
    u = float(rng.choice([0.0, 1.0, rng.uniform()]))
    n = int(rng.integers(40, 71))
    w = sample_world(seed, a, b, float(rng.uniform(0.6, 2.5)), np.array([1.0 - u, u]), n, spacing=20.0)
    w.model = {"file": str(model_file)}
    w.delay = int(rng.integers(0, 4))
    script_faults(w, rng)
    return w


async def test_box_figures_hold_for_every_member_of_the_box(mosquitto: Broker, tmp_path: Path) -> None:
    """Random worlds whose true chain is a random member of a calibrated box; each run's marks are
    checked against the truth under the true chain and under MEMBERS other random members."""
    model_file = tmp_path / "MODEL.json"
    modelset.from_calibration(TransitionData(COUNTS), 0.99, ("lo", "hi")).write(model_file)
    ms = modelset.load(model_file)
    assert ms.kind == "box"
    (a0, a1), (b0, b1) = ms.box  # type: ignore[misc]
    failures: list[str] = []
    checked = late = restarted = 0
    for seed in range(5000, 5006):
        w = _world(seed, ms, model_file)
        out = await run_world(mosquitto, w, tmp_path / f"run{seed}")
        rng = np.random.default_rng(seed + 1)
        for i in range(MEMBERS + 1):
            member = w if i == 0 else dataclasses.replace(
                w, alpha=float(rng.uniform(a0, a1)), beta=float(rng.uniform(b0, b1)))
            verdict = evaluate(member, out)
            failures += [f"seed {seed} member ({member.alpha:.4f}, {member.beta:.4f}): {p}" for p in verdict.problems]
            checked += len(verdict.truth)
        marks = [m for life in out.marks for m in life]
        late += sum(bool(m["late"]) for m in marks)
        restarted += len(w.lives) > 1
    assert not failures, "\n".join(failures[:20])
    assert checked > 50 and late > 0 and restarted == 6, (checked, late, restarted)
