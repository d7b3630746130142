"""The consumer's re-audit of published claims (streamguard.consumer.audit, issue 14): the plan's
leakage recomputed from the published table equals brute-force enumeration; a tampered table or a
record released next to a private one is caught; a model set (not supported yet) is refused."""

from __future__ import annotations

import json

import numpy as np
import pytest

from consumer_sim import BASE, simulate
from streamguard import MarkovChain
from streamguard.audit import brute_force_leakage
from streamguard.channel import ChannelSequence
from streamguard.consumer.audit import audit_redaction
from streamguard.consumer.collector import Collector
from streamguard.consumer.messages import Record
from streamguard.consumer.model import StatusError, published_model
from streamguard.consumer.report import report

P = np.array([[0.9, 0.1], [0.2, 0.8]])
STREAM = {"labels": ["vacant", "occupied"], "model": {"alpha": 0.1, "beta": 0.2}, "epsilon": 1.0}


def _collected(n=200, seed=3, stream=STREAM, matrix=P):
    sim = simulate(stream, matrix, n, seed, mark_every=40)
    c = Collector(BASE)
    c.feed_all(sim.messages)
    return sim, c.streams[("dev", "s")]


def test_the_recomputed_plan_leakage_is_the_brute_force_value():
    weak = np.array([[0.7, 0.3], [0.4, 0.6]])  # short horizons: the window can be enumerated
    _, log = _collected(stream={**STREAM, "model": {"alpha": 0.3, "beta": 0.4}}, matrix=weak)
    assert log.status is not None
    rep = audit_redaction(log.status, published_model(log.status), log.ordered())
    left = np.array(log.status["plan"]["left"])
    right = np.array(log.status["plan"]["right"])
    window = np.vstack([np.zeros((1, 2)), left[::-1], np.ones((1, 2)), right, np.zeros((1, 2))])
    assert window.shape[0] <= 9  # small enough to enumerate
    brute = brute_force_leakage(MarkovChain(weak), ChannelSequence.from_redaction(window), left.shape[0] + 1)
    assert rep.plan_leakage == pytest.approx(brute, abs=1e-9)
    assert rep.warnings == [] and rep.marks_checked == 5


def test_a_weakened_table_is_caught():
    _, log = _collected()
    assert log.status is not None
    status = json.loads(json.dumps(log.status))
    status["plan"]["right"] = [[0.0, 0.0] for _ in status["plan"]["right"]]  # claims ε but releases the right side
    rep = audit_redaction(status, published_model(status), log.ordered())
    assert any(w.startswith("plan: exact leakage") and "exceeds epsilon" in w for w in rep.warnings)
    assert any("differs from the published plan_leakage" in w for w in rep.warnings)


def test_a_neighbour_released_against_the_claim_is_caught():
    sim, log = _collected()
    assert log.status is not None
    mark = log.status["recent_marks"][0]
    records = log.ordered()
    by_pos = {r.position: r for r in records}
    nb = by_pos[mark["position"] + 1]
    assert nb.redacted  # the plan redacts distance 1 with probability 1 for both states
    forged = Record(nb.device, nb.stream, nb.seq, nb.position, nb.ts, sim.labels[sim.truth[nb.seq]], False,
                    (0.0, 0.0), None, "redaction", nb.mode)
    rep = audit_redaction(log.status, published_model(log.status), [forged if r is nb else r for r in records])
    assert any(f"mark at seq {mark['seq']}" in w and "exceeds epsilon" in w for w in rep.warnings)


def test_a_lost_record_next_to_a_mark_counts_as_released():
    """A neighbour that never arrived might have been released: the audit assumes the worst."""
    _, log = _collected()
    assert log.status is not None
    mark = log.status["recent_marks"][0]
    records = [r for r in log.ordered() if r.position != mark["position"] + 1]
    rep = audit_redaction(log.status, published_model(log.status), records)
    assert any(f"mark at seq {mark['seq']}" in w for w in rep.warnings)


def test_a_model_set_is_refused_not_misread():
    _, log = _collected(60)
    assert log.status is not None
    log.status = {**log.status, "model": {"kind": "set", "members": [P.tolist()]}}
    with pytest.raises(StatusError, match="model kind 'set' is not supported"):
        published_model(log.status)
    c = Collector(BASE)
    c.streams[("dev", "s")] = log
    s = report(c)["streams"]["s"]
    assert s["frequency"] is None and any("not supported" in w for w in s["devices"]["dev"]["warnings"])
