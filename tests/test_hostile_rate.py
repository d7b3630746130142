"""The per-second cap on rejected frames (redaction_runtime.HOSTILE_PER_SECOND) covers rejected
frames that carry a timestamp and streams with aggregate windows (issue 28): beyond the rate such a
frame is only counted, and the steps counted are taken in bulk — with the outcome of taking them one
by one. Checked here against the one-by-one path (the cap lifted) on the same frames: the same
positions, the same step rule afterwards (a counted step's time is a redelivery, a gap after it
makes the same missing slots), the same aggregate windows (ranges and counted states), every
counted step inside the run and so redacted surely; and ``observe_run`` against observing each
position, over random runs and window lengths."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from streamguard.config import Settings
from streamguard.sampling import bit_source
from streamguard.stream import redaction_runtime
from streamguard.stream.aggregates import StreamAggregates
from streamguard.stream.redaction_runtime import RedactionRuntime
from streamguard.stream.runtimes import make_runtime

LABELS = ["off", "on"]
T0 = 1_700_000_000.0
NOW = T0 + 4000  # (the daemon's clock: every frame's time lies behind it)
AGGREGATES = [{"query": "histogram", "window": 50, "epsilon": 1.0},
              {"query": "count", "state": "on", "window": 64, "epsilon": 1.0}]


def _settings(tmp_path: Path, **stream: Any) -> Settings:
    return Settings(device="d", topic_base="b", broker={"host": "127.0.0.1", "port": 1},
                    outbox={"path": tmp_path / "o.sqlite"},
                    streams=[{"name": "s", "labels": LABELS, "model": {"alpha": 0.1, "beta": 0.2}, "epsilon": 1.0,
                              "design": "exact", "source": "mqtt", "aggregates": AGGREGATES, **stream}],
                    deterministic_seed=5)


def _frame(i: int, value: str = "on", **extra: Any) -> bytes:
    return json.dumps({"value": value, "ts": T0 + i, **extra}).encode()


def _run(tmp_path: Path, **stream: Any) -> dict[str, Any]:
    """Feed 40 readings, a burst of 3,000 timed private rejected frames (bad value, flag readable)
    within one second, a redelivery of a burst step, a gap of 5 slots and 40 readings more; return
    what the stream did."""
    s = _settings(tmp_path, **stream)
    rt = make_runtime(s, s.streams[0], bit_source(5, 0), aggregate_source=bit_source(5, 1))
    assert isinstance(rt, RedactionRuntime)
    assert rt.aggregates is not None
    aggregates = rt.aggregates
    windows: list[tuple[int, int, int, int]] = []  # (query, lo, hi, states counted) of every release
    steps: list[int] = []  # the position of every decided record

    def windows_closed() -> None:
        for q, rel in rt.take_aggregates():
            info = aggregates.window_info(q, rel.lo)
            assert info is not None
            windows.append((q, rel.lo, rel.hi, info.states))

    def feed(data: bytes, now: float) -> None:
        steps.extend(r.phys for r in rt.on_frame(data, now)[0])
        windows_closed()

    for i in range(40):
        feed(_frame(i, LABELS[i % 2]), NOW + i * 0.01)
    for j in range(3000):
        feed(_frame(40 + j, "bogus", private=True), NOW + 1 + j * 1e-4)
    positions_after_burst = rt.core.next_phys + rt._owed
    dup_before = rt.counters.duplicates
    feed(_frame(40 + 1500, "bogus", private=True), NOW + 2)  # a redelivered burst step
    redelivery_seen = rt.counters.duplicates == dup_before + 1
    for i in range(3045, 3085):  # a gap: slots 3040..3044 have no frame
        feed(_frame(i, LABELS[i % 2]), NOW + 3 + i * 1e-3)
    steps.extend(r.phys for r in rt.drain())
    windows_closed()
    return {"positions": rt.core.next_phys, "positions_after_burst": positions_after_burst,
            "redelivery_seen": redelivery_seen, "bulk": rt.bulk_steps, "windows": windows, "steps": steps,
            "rows": dict(rt.core._rows), "rejected": sum(rt.counters.rejected.values())}


def test_timed_rejected_frames_on_an_aggregate_stream_are_capped_with_the_same_outcome(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    capped = _run(tmp_path / "a", sample_period=1.0)
    monkeypatch.setattr(redaction_runtime, "HOSTILE_PER_SECOND", 1e9)  # one by one
    plain = _run(tmp_path / "b", sample_period=1.0)
    assert plain["bulk"] == 0 and capped["bulk"] > 2500  # the cap took most of the burst
    assert capped["rejected"] == plain["rejected"] == 3000
    assert capped["positions_after_burst"] == plain["positions_after_burst"] == 40 + 3000
    assert capped["redelivery_seen"] and plain["redelivery_seen"]
    assert capped["positions"] == plain["positions"] == 40 + 3000 + 5 + 40
    # the same windows: ranges [lo, hi] (what the ledger charges) and the states each counted
    assert sorted(capped["windows"]) == sorted(plain["windows"]) and len(plain["windows"]) >= 4
    # every step of the burst redacted surely on both paths (the run), the readings after it alike
    for rows in (capped["rows"], plain["rows"]):
        assert all(rows[t] == (1.0, 1.0) for t in range(60, 3040) if t in rows)
    assert capped["steps"] == plain["steps"]


def test_observe_run_is_observing_each_position() -> None:
    """Random windows, states and runs of state-less positions: the same releases (query, range)
    and the same window facts (states counted, partial) as one position at a time."""
    rng = random.Random(3)
    for case in range(60):
        windows = [rng.choice([1, 2, 5, 7, 50, 64]) for _ in range(rng.randint(1, 3))]
        cfg = _settings(Path("/nonexistent"), aggregates=[{"query": "histogram", "window": w, "epsilon": 1.0}
                                                          for w in windows]).streams[0]
        one, bulk = (StreamAggregates(cfg, cfg.model_chains(), bit_source(case, 0)) for _ in range(2))
        got: list[list[tuple[int, int, int, int, bool]]] = [[], []]
        pos = rng.randint(0, 30)
        for _ in range(rng.randint(1, 12)):
            if rng.random() < 0.5:
                n = rng.randint(1, 200)
                ts = [float(pos + k) for k in range(n)]
                outs = ([r for k in range(n) for r in one.observe(pos + k, None, ts[k])],
                        bulk.observe_run(pos, pos + n - 1, ts[0], ts[-1]))
                pos += n
            else:
                state = rng.randint(0, 1)
                outs = (one.observe(pos, state, float(pos)), bulk.observe(pos, state, float(pos)))
                pos += 1
            for agg, out, acc in zip((one, bulk), outs, got):
                for q, rel in out:
                    info = agg.window_info(q, rel.lo)
                    assert info is not None
                    acc.append((q, rel.lo, rel.hi, info.states, info.partial))
        for agg, acc in zip((one, bulk), got):
            for q, rel in agg.flush():
                info = agg.window_info(q, rel.lo)
                assert info is not None
                acc.append((q, rel.lo, rel.hi, info.states, info.partial))
        assert sorted(got[0]) == sorted(got[1]), (case, windows)
