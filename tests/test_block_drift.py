"""The drift guard per time-of-day block (issue 25 item 4; streamguard/model/block_drift.py): its
stated power against simulation, no false alarm on chains that follow the model's claim (kernels at
the sets' edges, switched from step to step and by the past), the hour-of-day structure the pooled
guard is blind to, and the persisted counts: evidence carries over a restart, a state for another
model is discarded, an unreadable one fails closed."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binom

from streamguard.config import Settings
from streamguard.model.block_drift import (BlockDriftGuard, DriftState, StateError, log_statistic, log_threshold,
                                           partition_for, transitions_to_alarm)
from streamguard.model.drift import DriftGuard
from streamguard.model.calibrate import TransitionData
from streamguard.model.modelset import ModelSet, from_calibration
from streamguard.model.setchain import Block, SetChain
from streamguard.sampling import SeededSource
from streamguard.stream.redaction_runtime import RedactionRuntime

BOX = ModelSet("box", 2, box=((0.08, 0.12), (0.15, 0.25)))
T0 = 1_700_000_000.0 - 1_700_000_000.0 % 86400  # a UTC midnight
MINUTE = 60.0


def _setchain() -> SetChain:
    """Four 6-hour blocks with different binary sets (α and β ranges)."""
    ranges = [((0.01, 0.02), (0.3, 0.4)), ((0.1, 0.15), (0.1, 0.15)), ((0.05, 0.08), (0.2, 0.3)),
              ((0.02, 0.04), (0.05, 0.1))]
    blocks = tuple(Block(start=6 * 3600.0 * i, lo=np.array([[1 - a1, a0], [b0, 1 - b1]]),
                         hi=np.array([[1 - a0, a1], [b1, 1 - b0]])) for i, ((a0, a1), (b0, b1)) in enumerate(ranges))
    return SetChain(labels=("off", "on"), sample_period=MINUTE, blocks=blocks)


def _edge_path(rng: np.random.Generator, sc: SetChain, n: int) -> np.ndarray:
    """n steps of a chain whose kernel at each step is a corner of its block's set, chosen by the
    past (the upper corner after two equal states, else the lower): inside the claim, as far from
    a homogeneous chain as the sets allow."""
    x = np.zeros(n, dtype=np.int64)
    blocks = sc.step_blocks(T0, n)
    for t in range(1, n):
        b = sc.blocks[blocks[t - 1]]
        bound = b.hi if t >= 2 and x[t - 1] == x[t - 2] else b.lo
        p_switch = bound[x[t - 1], 1 - x[t - 1]]
        x[t] = 1 - x[t - 1] if rng.random() < p_switch else x[t - 1]
    return x


def _first_alarm(guard: BlockDriftGuard | DriftGuard, path: np.ndarray, start: int = 0) -> int | None:
    """The step (from ``start``, one a minute from T0) at which the guard fires, None if it does not."""
    for t, s in enumerate(path, start):
        fired = guard.released(t, T0 + t * MINUTE, int(s), (0.0, 0.0)) if isinstance(guard, BlockDriftGuard) \
            else guard.released(t, int(s), (0.0, 0.0))
        if fired:
            return t
    return None


def test_stated_power_matches_simulation():
    """The transitions to the alarm that :func:`transitions_to_alarm` states for α ×2, ×3, ÷2 of a box
    (from the counts N·row) against the mean first-passage of 100 simulated rows, checked at every
    transition: within 15 %."""
    part = partition_for(BOX)
    thr = log_threshold(part, 1e-3)
    rng = np.random.default_rng(11)
    for q in (0.2, 0.3, 0.05):
        stated = transitions_to_alarm(part.ranges[0, 0], np.array([1 - q, q]), thr)
        n = int(4 * stated)
        firsts = []
        for _ in range(100):  # (row 0 alone: counts (n, 1, 2) against its ranges (1, 2, 2))
            hits = np.cumsum(rng.random(n) < q)
            counts = np.stack([np.arange(1, n + 1) - hits, hits], axis=-1)[:, None, :]
            fired = log_statistic(counts, part.ranges[0, :1])[:, 0] >= thr
            assert fired.any()
            firsts.append(int(fired.argmax()) + 1)
        mean = float(np.mean(firsts))
        assert abs(mean - stated) <= 0.15 * stated, (q, stated, mean)
    assert transitions_to_alarm(part.ranges[0, 0], np.array([0.9, 0.1]), thr) == float("inf")  # inside: never


def test_no_false_alarm_in_60_days_of_a_chain_that_follows_the_set_chain():
    """60 days at one step a minute of the set-chain's edge chain (kernels at the sets' corners,
    history-dependent): the guard at δ = 1e−3 never fires."""
    sc = _setchain()
    path = _edge_path(np.random.default_rng(3), sc, 60 * 1440)
    guard = BlockDriftGuard(partition_for(sc), "m", 1e-3)
    assert _first_alarm(guard, path) is None
    assert guard.transitions == len(path) - 1


def test_false_alarm_rate_at_the_edges_stays_below_delta():
    """δ = 0.2, 40 streams of 10 days of the edge chain: alarms ≤ the 1 − 1e−6 quantile of
    Binomial(40, 0.2) (a guard that keeps its rate fails this with probability ≤ 1e−6)."""
    sc = _setchain()
    rng = np.random.default_rng(4)
    alarms = sum(_first_alarm(BlockDriftGuard(partition_for(sc), "m", 0.2), _edge_path(rng, sc, 10 * 1440))
                 is not None for _ in range(40))
    assert alarms <= binom.isf(1e-6, 40, 0.2)


def test_hour_of_day_drift_the_pooled_guard_misses():
    """α = 0.05 and 0.15 in alternate 4-hour blocks averages 0.1, inside the box: the pooled guard
    (model/drift.py) does not fire in 20 days, the per-block one does within 14 (its stated power
    for α ÷ 2 at ~230 transitions out of 0 a block a day: 8.4 days)."""
    rng = np.random.default_rng(5)
    n = 20 * 1440
    x = np.zeros(n, dtype=np.int64)
    for t in range(1, n):
        a = 0.05 if (t % 1440) // 240 % 2 == 0 else 0.15
        x[t] = 1 - x[t - 1] if rng.random() < (a if x[t - 1] == 0 else 0.2) else x[t - 1]
    assert _first_alarm(DriftGuard(BOX, 1e-3), x) is None
    fired = _first_alarm(BlockDriftGuard(partition_for(BOX), "m", 1e-3), x)
    assert fired is not None and fired < 14 * 1440


def _drifted(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.zeros(n, dtype=np.int64)
    for t in range(1, n):
        x[t] = 1 - x[t - 1] if rng.random() < 0.2 else x[t - 1]  # α = 0.2 (the box's ×2), β = 0.2 inside
    return x


def test_counts_persist_and_evidence_accumulates_over_a_restart(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    part = partition_for(BOX)
    state = DriftState(tmp_path / "o.drift.s.json")
    x = _drifted(40_000, 6)
    fresh = _first_alarm(BlockDriftGuard(part, "m", 1e-3), x)
    assert fresh is not None
    half = int(0.6 * fresh)
    g1 = BlockDriftGuard(part, "m", 1e-3, state=state)
    assert _first_alarm(g1, x[:half]) is None
    g1.persist()
    assert (state.path.stat().st_mode & 0o777) == 0o600
    g2 = BlockDriftGuard(part, "m", 1e-3, state=state)  # the next life continues the counts
    assert g2.resumed == half - 1 and np.array_equal(g2.counts, g1.counts)
    second = _first_alarm(g2, x[half:], half)
    assert second is not None and abs(second - fresh) < 128  # as if never restarted (± the check cadence)
    assert _first_alarm(BlockDriftGuard(part, "m", 1e-3), x[half:second + 1], half) is None  # a fresh test would not
    with caplog.at_level(logging.INFO, logger="streamguard.model.block_drift"):
        other = BlockDriftGuard(part, "another-model", 1e-3, state=state)
    assert other.transitions == 0 and any("discarded" in r.getMessage() for r in caplog.records)
    state.path.write_text('{"version": 1, "key": ')
    with pytest.raises(StateError):
        BlockDriftGuard(part, "m", 1e-3, state=state)


def test_counts_that_cannot_be_persisted_are_not_tested(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    """A state file that cannot be written (its directory is gone): the guard keeps counting but
    tests nothing (an unpersisted test would void δ across a crash), says so, and fires once the
    counts can be written again."""
    x = _drifted(40_000, 8)
    blocked = BlockDriftGuard(partition_for(BOX), "m", 1e-3, state=DriftState(tmp_path / "gone" / "s.json"))
    assert _first_alarm(BlockDriftGuard(partition_for(BOX), "m", 1e-3), x[:9000]) is not None  # (it would fire)
    with caplog.at_level(logging.ERROR, logger="streamguard.model.block_drift"):
        assert _first_alarm(blocked, x[:9000]) is None
    assert blocked.transitions == 8999 and blocked.unsaved == 8999 // 64
    assert any("cannot persist" in r.getMessage() for r in caplog.records)
    (tmp_path / "gone").mkdir()
    assert _first_alarm(blocked, x[9000:9200], 9000) is not None


def runtime(tmp_path: Path, model: Path | None = None, sample_period: float | None = None) -> RedactionRuntime:
    """A redaction stream planned over ``model`` (default: a calibrated box around (0.1, 0.2)
    written there), its outbox in tmp_path."""
    if model is None:
        model = tmp_path / "MODEL.json"
        from_calibration(TransitionData(np.array([[13_000, 1_450], [1_450, 5_800]])), 0.99, ("off", "on")).write(model)
    settings = Settings(device="dev", broker={"host": "127.0.0.1"}, outbox={"path": tmp_path / "o.sqlite"},
                        streams=[{"name": "door", "labels": ["off", "on"], "model": {"file": str(model)},
                                  "epsilon": 1.0, "drift_false_alarm": 1e-3, "sample_period": sample_period}])
    return RedactionRuntime(settings, settings.streams[0], SeededSource(4))


def feed(rt: RedactionRuntime, x: np.ndarray, start: int, period: float = MINUTE) -> int | None:
    """Frames x[0], x[1], … one ``period`` apart from T0 + start·period; the step of the first
    drift alarm (None: no alarm, the runtime drained)."""
    for t, s in enumerate(x):
        rt.on_frame(json.dumps({"value": ["off", "on"][s], "ts": T0 + (start + t) * period}).encode(),
                    now=T0 + (start + t) * period)
        if rt.drift is not None and rt.drift.alarm:
            return start + t
    rt.drain()
    return None


def test_the_runtime_continues_the_counts_and_fails_closed_on_an_unreadable_state(tmp_path: Path,
                                                                                 caplog: pytest.LogCaptureFixture):
    x = _drifted(40_000, 7)
    rt = runtime(tmp_path)
    assert feed(rt, x[:600], 0) is None
    n1 = rt.drift.transitions
    assert n1 > 500
    rt2 = runtime(tmp_path)  # a restart on the same outbox: the counts carry over
    assert rt2.drift.resumed == n1
    fired = feed(rt2, x[600:], 600)
    assert fired is not None and rt2.privacy_status()["drift"]["drift"]
    state = tmp_path / "o.drift.door.json"
    state.write_text("not json")
    with caplog.at_level(logging.ERROR, logger="streamguard.stream.redaction_runtime"):
        rt3 = runtime(tmp_path)
    assert rt3.drift.alarm and rt3.core.closed_reason is not None
    assert any("drift guard" in r.getMessage() and "failing closed" in r.getMessage() for r in caplog.records)
    assert state.read_text() == "not json"  # left for the operator, never overwritten
