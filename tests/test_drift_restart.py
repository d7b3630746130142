"""The drift alarm across a real restart (issue 11; docs/model-sets.md §6): the real daemon (in
process, three lives on one outbox and ledger, a real Mosquitto) with a guarded single chain that
the world does not follow. Life 1: the guard fires — one ``drift`` ledger event (raised). Life 2,
same model: the stream starts in drift (restored from the ledger, no new event), so a private mark
is fully redacted and not honoured with reason ``drift``, and its aggregates stay stopped. Life 3, a new model (re-calibrated): the
alarm is cleared with a ledger event of its own and the mark is honoured again."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np

from brokers import Broker
from streamguard.model.chain import MarkovChain
from streamguard.config import Settings
from streamguard.model.block_drift import BlockDriftGuard, partition_for
from streamguard.model.modelset import ModelSet
from streamguard.ledger.store import Ledger
from streamguard.stream.daemon import Daemon

NAME, DEVICE = "s", "dev"
STICKY = {"alpha": 0.02, "beta": 0.02}  # the model the stream is configured with at first
WORLD = {"alpha": 0.5, "beta": 0.5}  # what the sensor does (far outside the model)
T0 = 1_700_000_000.0


def _settings(broker: Broker, outbox: Path, model: dict[str, float]) -> Settings:
    return Settings(device=DEVICE, topic_base="dr", broker=broker.broker_config(), outbox={"path": outbox},
                    streams=[{"name": NAME, "labels": ["lo", "hi"], "model": model, "epsilon": 1.0,
                              "source": "stdin", "drift_guard": True, "delay": 2,
                              "aggregates": [{"query": "histogram", "window": 10, "epsilon": 1.0}],
                              # room for the windows under both models (the accountant composes across them)
                              "aggregate_budget": 1000.0}],
                    stdout=False, deterministic_seed=3)


async def _life(broker: Broker, outbox: Path, model: dict[str, float], start: int, n: int,
                private: int | None, states: np.ndarray | None = None) -> dict[str, Any]:
    """One daemon life fed ``n`` readings (steps start..start+n−1) of the world (``states``, by
    default α = β = 0.5: independent fair readings); the final status."""
    if states is None:
        states = np.random.default_rng(start).integers(0, 2, n)
    daemon = Daemon(_settings(broker, outbox, model), extra_sources=[])

    async def source() -> AsyncIterator[tuple[str, bytes]]:
        for i, x in enumerate(states):
            frame = {"value": ["lo", "hi"][int(x)], "ts": T0 + start + i}
            if private is not None and start + i == private:
                frame["private"] = True
            yield NAME, json.dumps(frame).encode()

    daemon.extra_sources.append(source)
    await asyncio.wait_for(daemon.run(asyncio.Event()), 60)
    return daemon.runtimes[NAME].privacy_status()


def _events(outbox: Path, family: str) -> list[dict[str, Any]]:
    ledger = Ledger.open(outbox.with_name(outbox.stem + ".ledger.sqlite"), readonly=True)
    try:
        return [e["event"] for e in ledger.export()["events"] if e["event"]["family"] == family]
    finally:
        ledger.close()


def _drift_events(outbox: Path) -> list[dict[str, Any]]:
    return _events(outbox, "drift")


async def test_the_drift_alarm_survives_a_restart_and_clears_on_a_new_model(mosquitto: Broker, tmp_path: Path) -> None:
    outbox = tmp_path / "outbox.sqlite"
    s1 = await _life(mosquitto, outbox, STICKY, 0, 400, None)
    assert s1["drift"]["drift"] and not s1["drift"]["restored"]
    (raised,) = _drift_events(outbox)
    assert raised["raised"] and raised["transitions"] == s1["drift"]["fired_at_transitions"] > 0

    s2 = await _life(mosquitto, outbox, STICKY, 400, 40, private=420)
    assert s2["drift"]["drift"] and s2["drift"]["restored"]
    assert _drift_events(outbox) == [raised]  # restored, not raised again
    (mark,) = [m for m in s2["open_marks"] + s2["recent_marks"] if m["seq"] == 420]
    assert not mark["honoured"] and mark["reason"].startswith("drift")
    # aggregates stop while in drift: none after the alarm, none in the restored life
    aggs = _events(outbox, "aggregate")
    assert aggs and all(e["hi"] < 400 for e in aggs)

    s3 = await _life(mosquitto, outbox, WORLD, 440, 40, private=460)
    assert not s3["drift"]["drift"] and not s3["drift"]["restored"]
    events = _drift_events(outbox)
    assert len(events) == 2 and not events[1]["raised"] and raised["model"] in events[1]["reason"]
    assert events[1]["model"] != raised["model"]
    (mark,) = [m for m in s3["open_marks"] + s3["recent_marks"] if m["seq"] == 460]
    assert mark["honoured"]
    assert any(e["lo"] >= 440 for e in _events(outbox, "aggregate"))  # released again under the new model


def test_a_drift_event_round_trips_charges_nothing_and_is_the_books_latest(tmp_path: Path) -> None:
    """DriftEvent: JSON round trip; in the ledger it spends no budget (admitted under any budget),
    the book keeps the latest one, and the odometer shows it."""
    from streamguard.ledger.events import DriftEvent, EventError, event_from_json
    from streamguard.ledger.odometer import odometer

    up = DriftEvent(device=DEVICE, stream=NAME, raised=True, model="abc", transitions=48, false_alarm=1e-3,
                    reason="the sequential test found the live chain outside the model set")
    assert event_from_json(up.to_json()) == up
    try:
        DriftEvent(device=DEVICE, stream=NAME, raised=True, model="", false_alarm=1e-3, reason="x")
        raise AssertionError("an event without its model's id was accepted")
    except EventError as exc:
        assert "model" in str(exc)
    ledger = Ledger.open(tmp_path / "l.sqlite")
    try:
        ledger.admit(up, 1e-9)  # not a release: nothing to refuse
        down = DriftEvent(device=DEVICE, stream=NAME, raised=False, model="def", false_alarm=1e-3, reason="new set")
        ledger.commit_all([down])
        assert ledger.book(DEVICE, NAME).drift == down
        assert ledger.book(DEVICE, NAME).families() == []  # no release family
        assert odometer(ledger, DEVICE, NAME)["drift"]["alarm"] is False
    finally:
        ledger.close()


def _chain(n: int, switch: float, seed: int) -> np.ndarray:
    """n readings of the binary chain with α = β = ``switch``."""
    rng = np.random.default_rng(seed)
    x = np.zeros(n, dtype=np.int64)
    for t in range(1, n):
        x[t] = 1 - x[t - 1] if rng.random() < switch else x[t - 1]
    return x


async def test_the_guards_evidence_accumulates_across_real_restarts(mosquitto: Broker, tmp_path: Path) -> None:
    """The per-block guard's counts persist beside the outbox (model/block_drift.py). A world at
    α = β = 0.05 against the configured 0.02 (the guard states ~800 transitions out of a row to
    alarm): a fresh guard fed it fires after ``needed`` steps. Two daemon lives on one outbox, the
    first of 0.6·needed steps, the second up to needed + 200: the first ends without an alarm and
    leaves its counts, the second continues them and fires; a fresh guard fed the second life's
    readings alone does not."""
    x = _chain(4000, 0.05, 9)
    guarded = ModelSet("finite", 2, members=(MarkovChain.binary(**STICKY),))

    def first_alarm(part: np.ndarray, start: int) -> int | None:
        g = BlockDriftGuard(partition_for(guarded), "m")
        return next((start + i for i, v in enumerate(part) if g.released(start + i, T0 + start + i, int(v), (0, 0))),
                    None)

    needed = first_alarm(x, 0)
    assert needed is not None
    n1, end = int(0.6 * needed), needed + 200
    outbox = tmp_path / "outbox.sqlite"
    s1 = await _life(mosquitto, outbox, STICKY, 0, n1, None, x[:n1])
    assert not s1["drift"]["drift"] and s1["drift"]["observed_transitions"] > n1 - 10
    state = json.loads(outbox.with_name("outbox.drift.s.json").read_text())
    assert np.sum(state["counts"]) == s1["drift"]["observed_transitions"]
    s2 = await _life(mosquitto, outbox, STICKY, n1, end - n1, None, x[n1:end])
    assert s2["drift"]["resumed_transitions"] == s1["drift"]["observed_transitions"]
    assert s2["drift"]["drift"] and not s2["drift"]["restored"]
    (raised,) = _drift_events(outbox)
    assert raised["raised"] and raised["transitions"] > s1["drift"]["observed_transitions"]
    assert first_alarm(x[n1:end], n1) is None
