"""The drift guard (issue 11): its false-alarm rate and detection delay on simulated chains, and the
daemon's fail-closed reaction (marks' windows fully redacted, drift in the status and the mark
events, one WARNING)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binom

from streamguard.model.chain import MarkovChain
from streamguard.config import Settings
from streamguard.model.calibrate import TransitionData
from streamguard.model.drift import DriftGuard
from streamguard.model.modelset import ModelSet, from_calibration
from streamguard.sampling import SeededSource
from streamguard.stream.redaction_runtime import RedactionRuntime

CAL = TransitionData(np.array([[13_000, 1_450], [1_450, 5_800]]))  # ≈ 20,000 steps of (0.1, 0.2)
IN_SET = MarkovChain.binary(0.1, 0.2)


def _paths(rng: np.random.Generator, chain: MarkovChain, n: int, runs: int) -> np.ndarray:
    a, b = chain.alpha, chain.beta
    x = np.empty((n, runs), dtype=np.int8)
    x[0] = rng.random(runs) < a / (a + b)
    for t in range(1, n):
        u = rng.random(runs)
        x[t] = np.where(x[t - 1] == 0, u < a, u >= b)
    return x


def _first_alarm(guard: DriftGuard, path: np.ndarray) -> int | None:
    for t, s in enumerate(path):
        if guard.released(t, int(s), (0.0, 0.0)):
            return t
    return None


def test_false_alarm_rate_on_chains_inside_the_set():
    """30 streams of 4,000 steps of a chain inside the set, guard at δ = 0.1: alarms ≤ the 1 − 1e−6
    quantile of Binomial(30, 0.1) (false-failure rate ≤ 1e−6 for a guard that keeps its rate)."""
    ms = from_calibration(CAL, 0.99)
    assert ms.contains(IN_SET)
    paths = _paths(np.random.default_rng(21), IN_SET, 4000, 30)
    alarms = sum(_first_alarm(DriftGuard(ms, 0.1), paths[:, r]) is not None for r in range(30))
    assert alarms <= binom.isf(1e-6, 30, 0.1)


@pytest.mark.parametrize("drifted,within", [(MarkovChain.binary(0.02, 0.05), 2500), (MarkovChain.binary(0.2, 0.1), 1500)])
def test_detection_delay_on_drifted_chains(drifted, within):
    ms = from_calibration(CAL, 0.99)
    assert not ms.contains(drifted)
    paths = _paths(np.random.default_rng(22), drifted, within, 20)
    delays = [_first_alarm(DriftGuard(ms, 1e-3), paths[:, r]) for r in range(20)]
    assert all(d is not None for d in delays), delays


def test_only_records_released_unchanged_at_consecutive_steps_are_read():
    g = DriftGuard(ModelSet("finite", 2, members=(IN_SET,)), 0.01, check_every=1)
    g.released(0, 0, (0.0, 0.0))
    g.released(1, 1, (0.0, 0.0))  # counted: 0 → 1
    g.released(2, 1, (0.3, 1.0))  # near a mark: never read, breaks the chain
    g.released(3, 1, (0.0, 0.0))
    g.released(5, 0, (0.0, 0.0))  # a step in between is missing: not a transition
    g.released(6, None, (0.0, 0.0))
    assert g.counts.tolist() == [[0, 1], [0, 0]]


def test_k_state_releases_are_read_too():
    """A k-state record released unchanged has the all-zero row (0, 0, 0): the guard reads it (it
    compared rows with the binary (0, 0), so a k-state guard never counted and could never fire)."""
    chain = MarkovChain(np.array([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]]))
    g = DriftGuard(ModelSet("finite", 3, members=(chain,)), 0.01, check_every=1)
    g.released(0, 2, (0.0, 0.0, 0.0))
    g.released(1, 0, (0.0, 0.0, 0.0))  # counted: 2 → 0
    g.released(2, 0, (0.0, 0.5, 0.0))  # near a mark: not read
    assert g.counts.tolist() == [[0, 0, 0], [0, 0, 0], [1, 0, 0]]
    alarms = [g.released(t, t % 3, (0.0, 0.0, 0.0)) for t in range(3, 3003)]  # 0 → 1 → 2 → 0 …: far outside
    assert any(alarms) and g.alarm


def test_the_daemon_fails_closed_on_drift(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    model = tmp_path / "MODEL.json"
    from_calibration(CAL, 0.99, ("off", "on")).write(model)
    settings = Settings(device="dev", broker={"host": "127.0.0.1"}, outbox={"path": tmp_path / "o.sqlite"},
                        streams=[{"name": "door", "labels": ["off", "on"], "model": {"file": str(model)},
                                  "epsilon": 1.0, "drift_false_alarm": 1e-3}])
    rt = RedactionRuntime(settings, settings.streams[0], SeededSource(4))
    assert rt.drift is not None and not rt.drift.alarm
    H, R = rt.plan.left_horizon, rt.plan.right_horizon
    path = _paths(np.random.default_rng(5), MarkovChain.binary(0.02, 0.05), 6000, 1)[:, 0]
    releases, fired = [], None
    with caplog.at_level(logging.WARNING, logger="streamguard.stream.redaction_runtime"):  # (the demo quiets it)
        for t, s in enumerate(path):
            frame = {"value": ["off", "on"][s], "ts": 1.7e9 + t}
            if t % 500 == 250:
                frame["private"] = True
            out, _ = rt.on_frame(json.dumps(frame).encode(), now=1.7e9 + t)
            releases += out
            if fired is None and rt.drift.alarm:
                fired = t
        releases += rt.drain()
    assert fired is not None and fired < 4000
    status = rt.privacy_status()
    assert status["drift"]["drift"] is True and "model set" in status["guarantee"]
    drift_logs = [r for r in caplog.records if "DRIFT" in r.getMessage()]
    assert len(drift_logs) == 1 and "off" not in drift_logs[0].getMessage().replace("stop", "")
    rows = {r.phys: r.row for r in releases}
    late_marks = [p for p in range(250, 6000, 500) if p - H > fired + H + 1]
    assert late_marks
    for p in late_marks:  # marks after the alarm: the whole window fully redacted
        assert all(rows[t] == (1.0, 1.0) for t in range(p - H, p + R + 1))
    marks = status["recent_marks"]
    assert all(not m["honoured"] and m["reason"].startswith("drift") for m in marks if m["seq"] in late_marks)
