"""The daemon's aggregate windows, per-record channel streams and privacy ledger, end to end with a
real Mosquitto: every published aggregate was admitted by the ledger first, the retained
odometer's numbers equal an independent quilt accountant fed the same windows, the budget filter
refuses what would exceed the budget, and a restart continues the ledger instead of forgetting it.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from brokers import Broker
from daemon_harness import Spy, daemon_running, running

from firmware_sim import MarkovSource
from streamguard import MarkovChain
from streamguard.config import Settings
from streamguard.ledger import checkpoint
from streamguard.ledger.store import Ledger
from streamguard.quilt import QuiltAccountant, QuiltModel, sigma_inf

ALPHA, BETA = 0.1, 0.2
LABELS = ["off", "on"]


def _settings(broker: Broker, tmp_path: Path, stream: dict[str, Any]) -> Settings:
    return Settings(device="dev", broker=broker.broker_config(), deterministic_seed=7,
                    outbox={"path": tmp_path / "o.sqlite"}, streams=[stream])


def _frames(states: list[int], labels: list[str], *, extra: dict[str, Any] | None = None, bad: set[int] = frozenset(),
            t0: float = 1.79e9):
    async def gen():
        for i, x in enumerate(states):
            if i in bad:
                yield "s", b"{not json"
                continue
            yield "s", json.dumps({"value": labels[x], "ts": t0 + i, **(extra or {})}).encode()
    return gen


def _states(n: int, seed: int) -> list[int]:
    return [int(v) for v in MarkovSource(MarkovChain.binary(ALPHA, BETA), seed=seed).states(n)]


def _after_offline(spy: Spy) -> bool:
    """The shutdown publishes ``offline`` and then the final privacy report of each stream."""
    seen_offline = False
    for m in spy.messages:
        if m.topic.endswith("/status") and json.loads(m.payload).get("state") == "offline":
            seen_offline = True
        elif seen_offline and m.topic.endswith("/privacy"):
            return True
    return False


async def _run(settings: Settings, frames, spy_filter: str) -> Spy:
    spy = Spy(settings.broker, spy_filter)
    async with running(spy.run()):
        await asyncio.wait_for(spy.subscribed.wait(), 10)
        async with daemon_running(settings, extra_sources=[frames]) as (_, _, task):
            await asyncio.wait_for(asyncio.shield(task), 60)  # the source ends → drain and stop
        await spy.wait_until(lambda: _after_offline(spy), 10, "the final privacy report")
    return spy


async def test_aggregate_windows_are_admitted_by_the_ledger_and_the_odometer_matches_the_accountant(
        mosquitto: Broker, tmp_path: Path) -> None:
    stream = {"name": "s", "labels": LABELS, "model": {"alpha": ALPHA, "beta": BETA}, "epsilon": 1.0,
              "source": "stdin",
              "aggregates": [{"query": "histogram", "window": 20, "epsilon": 1.0},
                             {"query": "count", "state": "on", "window": 10, "epsilon": 0.5}]}
    settings = _settings(mosquitto, tmp_path, stream)
    n = 95
    states = _states(n, seed=3)
    bad = {40, 41}
    spy = await _run(settings, _frames(states, LABELS, bad=bad), "streamguard/dev/#")

    aggs = [json.loads(m.payload) for m in spy.on("/s/aggregate")]
    hist = [a for a in aggs if a["index"] == 0]
    cnt = [a for a in aggs if a["index"] == 1]
    # tumbling windows over positions 0..94: 5 histogram windows (the last one partial, flushed at
    # shutdown) and 10 count windows
    assert [(a["lo"], a["hi"]) for a in hist] == [(0, 19), (20, 39), (40, 59), (60, 79), (80, 94)]
    assert [(a["lo"], a["hi"]) for a in cnt] == [(10 * j, min(10 * j + 9, n - 1)) for j in range(10)]
    chain = MarkovChain.binary(ALPHA, BETA)
    model = QuiltModel([chain], "stat")
    s_hist, s_cnt = sigma_inf(model, 1.0).sigma, sigma_inf(model, 0.5).sigma
    assert all(a["sigma"] == pytest.approx(s_hist) and a["beta"] == pytest.approx(2 * s_hist) for a in hist)
    assert all(a["sigma"] == pytest.approx(s_cnt) and a["lipschitz"] == 1 for a in cnt)
    assert all(a["mode"] == "deterministic" and a["deterministic"] and a["influence"] == "stat" for a in aggs)
    # noisy counts sit near the truth (the noise is discrete Laplace of scale 2σ ≈ a few tens)
    truth_hist = [np.bincount([x for i, x in enumerate(states) if lo <= i <= hi and i not in bad], minlength=2)
                  for lo, hi in ((a["lo"], a["hi"]) for a in hist)]
    assert all(len(a["values"]) == 2 and all(isinstance(v, int) for v in a["values"]) for a in hist)
    assert np.mean([abs(v - t) for a, tr in zip(hist, truth_hist) for v, t in zip(a["values"], tr)]) < 20 * s_hist

    # an independent accountant fed the same windows gives the odometer's number
    acc = QuiltAccountant(model)
    for a in aggs:
        acc.record(a["lo"], a["hi"], 1.0 / a["sigma"])
    privacy = json.loads(spy.on("/s/privacy")[-1].payload)
    agg = privacy["ledger"]["aggregate"]
    assert agg["releases"] == len(aggs) and agg["budget"] == 1.5
    assert agg["epsilon"] == pytest.approx(acc.eps_max(), rel=1e-12)
    assert agg["models"][0]["model"] == model.identifier
    assert agg["models"][0]["paper"]["thm_III7_sum"]["epsilon"] == pytest.approx(5 * 1.0 + 10 * 0.5)
    assert acc.eps_max() <= 1.5 + 1e-9  # two queries on the same positions: their ε add (notes/002 §4.7)
    assert privacy["aggregates"][0]["sigma"] == pytest.approx(s_hist)

    # the ledger file holds every published window, and nothing was refused
    with Ledger.open(settings.ledger_path(), readonly=True) as led:
        assert led.book("dev", "s").aggregates.count == len(aggs)
        assert sorted(ev.span() for ev in led.events_of("dev", "s", "aggregate")) == \
            sorted((a["lo"], a["hi"]) for a in aggs)
        assert led.refusals("dev", "s") == []


async def test_budget_filter_refuses_windows_beyond_the_budget_and_a_restart_remembers(
        mosquitto: Broker, tmp_path: Path) -> None:
    """With aggregate_budget equal to one query's ε, a second query on the same positions would
    push positions towards 2ε: the ledger admits a window only while every position stays within
    the budget and refuses the rest; after a restart the spent budget is still there (positions
    continue past what the ledger charged)."""
    stream = {"name": "s", "labels": LABELS, "model": {"alpha": ALPHA, "beta": BETA}, "epsilon": 1.0,
              "source": "stdin", "aggregate_budget": 1.0,
              "aggregates": [{"query": "histogram", "window": 10, "epsilon": 1.0},
                             {"query": "count", "state": "on", "window": 10, "epsilon": 1.0}]}
    settings = _settings(mosquitto, tmp_path, stream)
    spy = await _run(settings, _frames(_states(30, seed=4), LABELS), "streamguard/dev/#")
    aggs = [json.loads(m.payload) for m in spy.on("/s/aggregate")]
    ledger = json.loads(spy.on("/s/privacy")[-1].payload)["ledger"]
    refused = ledger["refusals"]["count"]
    assert refused >= 1 and len(aggs) + refused == 6 and ledger["aggregate"]["epsilon"] <= 1.0 + 1e-9
    # what was admitted, fed to an independent accountant, stays within the budget; adding any
    # refused window would not
    model = QuiltModel([MarkovChain.binary(ALPHA, BETA)], "stat")
    acc = QuiltAccountant(model)
    for a in aggs:
        acc.record(a["lo"], a["hi"], 1.0 / a["sigma"])
    assert acc.eps_max() == pytest.approx(ledger["aggregate"]["epsilon"], rel=1e-12)
    last = ledger["refusals"]["last"]
    assert last is not None and last["would_be"] > 1.0

    with Ledger.open(settings.ledger_path(), readonly=True) as led:
        before = led.book("dev", "s").aggregates.count
        # the clean stop checkpointed every event (ledger/checkpoint.py): the restart below starts from it
        stored = checkpoint.read(checkpoint.path_of(settings.ledger_path()))
        assert stored is not None and stored[0] == led.head[0] > 0
    # the sensor's clock goes on (frames stamped at or before the last step of the first run would
    # be redeliveries of it: no new steps)
    spy2 = await _run(settings, _frames(_states(20, seed=5), LABELS, t0=1.79e9 + 1000), "streamguard/dev/#")
    aggs2 = [json.loads(m.payload) for m in spy2.on("/s/aggregate")]
    assert aggs2 and min(a["lo"] for a in aggs2) >= 30  # positions continue: nothing charged twice
    with Ledger.open(settings.ledger_path(), readonly=True) as led:
        book = led.book("dev", "s")
        assert book.aggregates.count == before + len(aggs2)
        eps = max(acc.eps_max() for acc in book.accountants.values())
    assert eps <= 1.0 + 1e-9
async def test_channel_stream_publishes_channel_outputs_and_the_ledger_records_the_channel(
        mosquitto: Broker, tmp_path: Path) -> None:
    stream = {"name": "s", "labels": ["low", "mid", "high"], "source": "stdin", "mechanism": "channel",
              "model": {"matrix": [[0.8, 0.15, 0.05], [0.1, 0.8, 0.1], [0.05, 0.15, 0.8]]},
              "channel": {"kind": "rr", "epsilon": 1.0, "prior": [2 / 7, 3 / 7, 2 / 7]}}
    settings = _settings(mosquitto, tmp_path, stream)
    chain = MarkovChain(stream["model"]["matrix"])
    n = 600
    states = [int(v) for v in MarkovSource(chain, seed=9).states(n)]
    spy = await _run(settings, _frames(states, stream["labels"], bad={5}), "streamguard/dev/#")
    recs = [json.loads(m.payload) for m in spy.on("/s/data")]
    assert [r["seq"] for r in recs] == list(range(n - 1))
    assert all(r["mechanism"] == "channel" and r["kind"] == "rr" and not r["redacted"] for r in recs)
    assert all(r["value"] == stream["labels"][r["output"]] for r in recs)
    accepted = [x for i, x in enumerate(states) if i != 5]
    kept = np.mean([r["output"] == x for r, x in zip(recs, accepted)])
    e = np.exp(1.0)
    assert abs(kept - e / (e + 2)) < 0.07  # k-RR keeps the input with probability e^ε/(e^ε + k − 1)

    privacy = json.loads(spy.on("/s/privacy")[-1].payload)
    assert privacy["mechanism"].endswith("rr")
    assert {"notion": "ldp_x", "params": {"epsilon": 1.0}} in privacy["per_record"]
    leak = privacy["stream_leakage"]
    assert leak is not None
    assert privacy["ledger"]["channel"] is not None
    with Ledger.open(settings.ledger_path(), readonly=True) as led:
        evs = led.events_of("dev", "s", "channel")
        assert led.book("dev", "s").channels.count == len(evs)
    assert evs and evs[0].lo == 0 and evs[-1].hi >= n - 1  # type: ignore[union-attr]
    assert any(c.notion == "ldp_x" and c.epsilon == 1.0 for c in evs[0].claims)  # type: ignore[union-attr]


async def test_non_markov_channel_reads_the_sensitive_field_of_each_frame(mosquitto: Broker, tmp_path: Path) -> None:
    """linear-nonmarkov draws each output from the row of (s, x): the frame's second field gives s.
    A frame without it is rejected (named, never echoed); the released outputs follow P(y | s, x)."""
    joint = [[0.3, 0.1, 0.1], [0.05, 0.15, 0.3]]
    (tmp_path / "joint.json").write_text(json.dumps({"joint": joint}))
    stream = {"name": "s", "labels": ["low", "mid", "high"], "source": "stdin", "mechanism": "channel",
              "model": {"matrix": [[0.8, 0.15, 0.05], [0.1, 0.8, 0.1], [0.05, 0.15, 0.8]]},
              "channel": {"kind": "linear-nonmarkov", "epsilon": 0.5, "joint": str(tmp_path / "joint.json"),
                          "sensitive_field": "occupancy", "sensitive_labels": ["away", "home"]}}
    settings = _settings(mosquitto, tmp_path, stream)
    rng = np.random.default_rng(4)
    n = 1500
    pairs = [divmod(int(v), 3) for v in rng.choice(6, size=n, p=np.array(joint).ravel())]  # (s, x) ~ joint

    async def frames():
        for i, (s, x) in enumerate(pairs):
            body: dict[str, Any] = {"value": stream["labels"][x], "ts": 1.79e9 + i}
            if i != 7:
                body["occupancy"] = ["away", "home"][s]
            yield "s", json.dumps(body).encode()

    spy = await _run(settings, frames, "streamguard/dev/#")
    recs = [json.loads(m.payload) for m in spy.on("/s/data")]
    assert len(recs) == n - 1 and all(r["kind"] == "linear-nonmarkov" for r in recs)
    privacy = json.loads(spy.on("/s/privacy")[-1].payload)
    assert privacy["counters"]["rejected"] == {"missing-sensitive": 1}
    assert privacy["stream_leakage"] is None  # the stream audit covers channels that read x only

    from streamguard.perturbation import Joint
    from streamguard.perturbation.designers import design

    channel = design("linear-nonmarkov", Joint(joint), 0.5)
    kept = [p for i, p in enumerate(pairs) if i != 7]
    for s in (0, 1):  # empirical P(y | s) against the channel's effective law (3σ binomial bands)
        ys = [r["output"] for r, (si, _) in zip(recs, kept) if si == s]
        want = channel.effective(Joint(joint))[s]
        got = np.bincount(ys, minlength=3) / len(ys)
        assert np.all(np.abs(got - want) <= 4 * np.sqrt(want * (1 - want) / len(ys)) + 1e-9)
