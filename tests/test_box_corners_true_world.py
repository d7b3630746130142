"""Review: the box figures of the real daemon against the true world at the box's *corners* and
edge midpoints (where the worst member of a box usually lies; the session's test samples members
at random inside the box only), for boxes the session's test does not use: a sticky chain (small
α, β), a near-absorbing state, a wide box from few counts. Same worlds and the same independent
evaluator as tests/test_true_world_model_set.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from brokers import Broker
from streamguard.model import modelset
from streamguard.model.calibrate import TransitionData
from test_true_world_daemon import evaluate, run_world
from test_true_world_model_set import _world

COUNTS = {
    "sticky": np.array([[1980, 20], [25, 1975]]),
    "near-absorbing": np.array([[1995, 5], [300, 700]]),
    "wide": np.array([[60, 15], [12, 40]]),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(COUNTS))
async def test_box_figures_hold_at_the_corners(mosquitto: Broker, tmp_path: Path, kind: str) -> None:
    model_file = tmp_path / "MODEL.json"
    modelset.from_calibration(TransitionData(COUNTS[kind]), 0.99, ("lo", "hi")).write(model_file)
    ms = modelset.load(model_file)
    assert ms.kind == "box"
    (a0, a1), (b0, b1) = ms.box  # type: ignore[misc]
    grid = [(a, b) for a in (a0, (a0 + a1) / 2, a1) for b in (b0, (b0 + b1) / 2, b1)]
    failures: list[str] = []
    checked = 0
    for seed in range(7100, 7102):
        w = _world(seed, ms, model_file)
        out = await run_world(mosquitto, w, tmp_path / f"run{seed}")
        for a, b in grid:
            verdict = evaluate(dataclasses.replace(w, alpha=float(a), beta=float(b)), out)
            failures += [f"{kind} seed {seed} member ({a:.5f}, {b:.5f}): {p}" for p in verdict.problems]
            checked += len(verdict.truth)
    assert not failures, "\n".join(failures[:20])
    assert checked > 20, checked
