"""The consumer re-audits a calibrated stream over the model set its status states (issue 24 §5).

The status of a stream with a model set publishes the set itself (``model_set``: a binary box's
α and β ranges, a finite set's chains) beside the point estimate (``model``, one chain), and the
consumer checks the claims over the set: honest claims are confirmed without a warning, on the
real runtime's payloads and on a real daemon through a real Mosquitto; a table or records tampered
so that the claim is false over the set — while it still holds under the point estimate, so a
re-audit under the point alone would miss it — are caught. The test's evaluator is the exact
audit (streamguard.audit.exact) under members of the box, a different computation from the
certificate the consumer uses (the interval bound with branch-and-bound).
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import numpy as np
import pytest
from jsonschema import Draft202012Validator

from consumer_sim import BASE, simulate
from streamguard import MarkovChain
from streamguard.audit.exact import exact_leakage
from streamguard.privacy.channel import ChannelSequence
from streamguard.consumer.audit import audit_redaction
from streamguard.consumer.collector import Collector
from streamguard.consumer.messages import Record
from streamguard.consumer.model import published_model
from streamguard.consumer.report import report
from streamguard.model import modelset
from streamguard.model.calibrate import TransitionData
from streamguard.schemas import load

LABELS = ("closed", "open")
TRUE = np.array([[0.9, 0.1], [0.2, 0.8]])
COUNTS = np.array([[1700, 190], [190, 420]])  # a 99 % box of α ≈ [0.073, 0.133], β ≈ [0.237, 0.393]
MEMBER = re.compile(r"under the chain alpha=([0-9.e-]+), beta=([0-9.e-]+) of the stated model set")


def _box(tmp_path: Path) -> tuple[Path, modelset.ModelSet]:
    path = tmp_path / "MODEL.json"
    modelset.from_calibration(TransitionData(COUNTS), 0.99, LABELS).write(path)
    return path, modelset.load(path)


def _collected(model: Path, n: int = 400):
    sim = simulate({"labels": list(LABELS), "model": {"file": str(model)}, "epsilon": 1.0}, TRUE, n, 3,
                   mark_every=40)
    c = Collector(BASE)
    c.feed_all(sim.messages)
    return sim, c, c.streams[("dev", "s")]


def _leakage(chain: MarkovChain, left: np.ndarray, right: np.ndarray) -> float:
    """Exact leakage of a window (rows outward from p) ended by a released record on each side."""
    stop = np.zeros((1, 2))
    window = np.vstack([stop, left[::-1], np.ones((1, 2)), right, stop])
    return exact_leakage(chain, ChannelSequence.from_redaction(window), left.shape[0] + 1).total


def _grid(ms: modelset.ModelSet, n: int = 5) -> list[MarkovChain]:
    (a0, a1), (b0, b1) = ms.box  # type: ignore[misc]
    return [MarkovChain.binary(a, b) for a in np.linspace(a0, a1, n) for b in np.linspace(b0, b1, n)]


def test_the_status_publishes_the_box_and_honest_claims_are_confirmed_over_it(tmp_path):
    model, ms = _box(tmp_path)
    _, c, log = _collected(model)
    status = log.status
    assert status is not None
    schema = Draft202012Validator(load("privacy-redaction"))
    schema.validate(status)
    box = status["model_set"]
    assert not schema.is_valid({**status, "model_set": {k: v for k, v in box.items() if k != "alpha"}})
    assert box["kind"] == "box" and (tuple(box["alpha"]), tuple(box["beta"])) == ms.box
    # ``model`` is one chain, the point estimate: its α and β are the matrix's, not a design corner's
    assert ms.point is not None
    assert status["model"]["matrix"] == ms.point.matrix.tolist()
    assert (status["model"]["alpha"], status["model"]["beta"]) == (ms.point.alpha, ms.point.beta)
    dev = report(c)["streams"]["s"]["devices"]["dev"]
    audit = dev["audit"]
    assert dev["warnings"] == [] and audit["notes"] == []
    assert audit["marks_checked"] == len(status["recent_marks"]) == 10
    assert {m["verdict"] for m in audit["marks"]} == {"confirmed"}
    # the consumer's plan figure is a bound over the box: no member of the test's grid leaks more
    left, right = (np.array(status["plan"][s]) for s in ("left", "right"))
    exact = max(_leakage(m, left, right) for m in _grid(ms))
    assert exact <= audit["plan_leakage"] + 1e-9 and audit["plan_leakage"] <= 1.0 + 1e-9
    # under the point estimate alone the plan leaks much less: the set is what the claim is about
    assert _leakage(ms.point, left, right) < exact - 0.2


def _tampered_table(status: dict) -> dict:
    """The plan with its outermost row on each side released (both horizons one shorter)."""
    out = json.loads(json.dumps(status))
    out["plan"]["left"][-1] = out["plan"]["right"][-1] = [0.0, 0.0]
    return out


def test_a_table_false_over_the_set_but_true_at_the_point_is_caught(tmp_path):
    model, ms = _box(tmp_path)
    _, _, log = _collected(model)
    assert log.status is not None and ms.point is not None
    status = _tampered_table(log.status)
    left, right = (np.array(status["plan"][s]) for s in ("left", "right"))
    assert _leakage(ms.point, left, right) <= 1.0  # a re-audit under the point estimate would pass it
    rep = audit_redaction(status, published_model(status), log.ordered())
    plan = [w for w in rep.warnings if w.startswith("plan: exact leakage") and "exceeds epsilon" in w]
    assert len(plan) == 1
    found = MEMBER.search(plan[0])
    assert found is not None
    member = MarkovChain.binary(float(found.group(1)), float(found.group(2)))
    assert ms.contains(member) and _leakage(member, left, right) > 1.0  # the test's own exact figure
    assert any("differs from the published plan_leakage" in w for w in rep.warnings)


def test_records_released_against_the_claim_over_the_set_are_caught(tmp_path):
    """The outermost rows of one mark's window forged to released: the mark's leakage is still ≤ ε
    under the point estimate, but not under every chain of the set."""
    model, ms = _box(tmp_path)
    sim, _, log = _collected(model)
    assert log.status is not None and ms.point is not None
    H, R = log.status["horizons"]["left"], log.status["horizons"]["right"]
    mark = log.status["recent_marks"][3]
    p = mark["position"]
    forged = {}
    for t in (p - H, p + R):
        r = next(r for r in log.ordered() if r.position == t)
        forged[t] = Record(r.device, r.stream, r.seq, t, r.ts, sim.labels[sim.truth[r.seq]], False, (0.0, 0.0),
                           None, "redaction", r.mode)
    records = [forged.get(r.position, r) for r in log.ordered()]  # type: ignore[arg-type]
    rows = {r.position: np.array(r.row) for r in records}
    left = np.array([rows[p - d] for d in range(1, H + 2)])
    right = np.array([rows[p + d] for d in range(1, R + 2)])
    assert _leakage(ms.point, left, right) <= 1.0
    rep = audit_redaction(log.status, published_model(log.status), records)
    (w,) = rep.warnings
    assert w.startswith(f"mark at seq {mark['seq']} (position {p})") and "exceeds epsilon" in w
    found = MEMBER.search(w)
    assert found is not None
    member = MarkovChain.binary(float(found.group(1)), float(found.group(2)))
    assert ms.contains(member) and _leakage(member, left, right) > 1.0
    assert rep.marks_checked == 10 and [m["verdict"] for m in rep.marks].count("refuted") == 1


def test_a_finite_set_is_re_audited_exactly_over_its_chains(tmp_path):
    chains = [[[0.9, 0.1], [0.2, 0.8]], [[0.85, 0.15], [0.3, 0.7]], [[0.93, 0.07], [0.25, 0.75]]]
    path = tmp_path / "finite.json"
    path.write_text(json.dumps({"format": "streamguard-model-set/1", "kind": "finite", "states": 2,
                                "members": chains, "point": chains[0]}))
    _, c, log = _collected(path, n=200)
    assert log.status is not None
    assert log.status["model_set"]["chains"] == chains
    Draft202012Validator(load("privacy-redaction")).validate(log.status)
    audit = report(c)["streams"]["s"]["devices"]["dev"]["audit"]
    assert audit["warnings"] == [] and audit["marks_checked"] == 5
    left, right = (np.array(log.status["plan"][s]) for s in ("left", "right"))
    assert audit["plan_leakage"] == pytest.approx(max(_leakage(MarkovChain(m), left, right) for m in chains),
                                                  abs=1e-9)
    # a set published without what it is made of cannot be re-checked: said, never a warning
    status = {**log.status, "model_set": {k: v for k, v in log.status["model_set"].items() if k != "chains"}}
    rep = audit_redaction(status, published_model(status), log.ordered())
    assert rep.warnings == [] and any("not re-checkable over this set" in n for n in rep.notes)


async def test_a_real_daemon_with_a_calibrated_box_gives_the_consumer_nothing_to_warn_about(mosquitto, tmp_path):
    """The real daemon on a real Mosquitto, the consumer subscribed from the start."""
    from daemon_harness import Spy, daemon_running, publish_all, running
    from test_daemon_e2e import STATUS, settings_for, topic, wait_counted

    from streamguard.consumer.subscribe import Selection, consume
    from test_daemon_e2e import BASE as E2E_BASE

    model, ms = _box(tmp_path)
    cfg = mosquitto.broker_config()
    rng = np.random.default_rng(4)
    x, frames = 0, []
    for t in range(300):
        frame: dict[str, object] = {"ts": 1.7e9 + t, "value": LABELS[x]}
        if t % 37 == 20:
            frame["private"] = True
        frames.append((topic("door", "raw"), json.dumps(frame).encode()))
        x = int(rng.random() < TRUE[x, 1])
    settings = settings_for(cfg, tmp_path, [{"name": "door", "labels": list(LABELS), "model": {"file": str(model)},
                                             "epsilon": 1.0}])
    collector = Collector(E2E_BASE)
    spy = Spy(cfg, STATUS)
    async with running(spy.run(), consume(cfg, Selection(E2E_BASE), collector, duration=120, client_id="c")):
        await asyncio.wait_for(spy.subscribed.wait(), 10)
        async with daemon_running(settings) as (daemon, _, task):
            await spy.wait_until(lambda: "online" in spy.states(STATUS), 30, "online")
            await publish_all(cfg, frames)
            await wait_counted(daemon, {"door": len(frames)})
        assert task.done() and task.exception() is None
        await spy.wait_until(lambda: spy.states(STATUS)[-1] == "offline", 20, "offline")

        def done() -> bool:
            log = collector.streams.get(("dev", "door"))
            return (log is not None and log.status is not None and log.status["pending"] == 0
                    and log.status["counters"]["accepted"] == len(frames) and len(log.records) == len(frames))

        for _ in range(200):
            if done():
                break
            await asyncio.sleep(0.05)
        assert done()
    log = collector.streams[("dev", "door")]
    assert log.status is not None and log.status["model_set"]["kind"] == "box"
    dev = report(collector)["streams"]["door"]["devices"]["dev"]
    assert dev["warnings"] == [] and dev["missing"] == 0
    assert dev["audit"]["marks_checked"] == len(log.status["recent_marks"]) >= 7
