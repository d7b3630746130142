"""The consumer's re-audit of published claims (streamguard.consumer.audit, issue 14): the plan's
leakage recomputed from the published table equals brute-force enumeration; a tampered table or a
record released next to a private one is caught; a model set (not supported yet) is refused."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from consumer_sim import BASE, simulate
from streamguard import MarkovChain
from streamguard.audit import brute_force_leakage
from streamguard.privacy.channel import ChannelSequence
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


def test_a_lost_record_next_to_a_mark_is_not_checkable_not_an_alarm():
    """Unobserved is unobserved (issue 24 §5): a neighbour that never arrived is neither taken as
    released (a false alarm) nor as redacted (a false confirmation)."""
    _, log = _collected()
    assert log.status is not None
    mark = log.status["recent_marks"][0]
    records = [r for r in log.ordered() if r.position != mark["position"] + 1]
    rep = audit_redaction(log.status, published_model(log.status), records)
    assert rep.warnings == [] and rep.marks_not_checkable == 1 and rep.marks_checked == 4
    (m,) = [m for m in rep.marks if m["seq"] == mark["seq"]]
    assert m["verdict"] == "not checkable" and m["unseen"] == 1 and m["lower"] <= 1.0 < m["upper"]
    assert any(f"mark at seq {mark['seq']}" in n and "1 of the" in n for n in rep.notes)


def test_a_release_next_to_a_mark_is_refuted_even_with_other_neighbours_unobserved():
    sim, log = _collected()
    assert log.status is not None
    mark = log.status["recent_marks"][0]
    p = mark["position"]
    by_pos = {r.position: r for r in log.ordered()}
    nb = by_pos[p + 1]
    forged = Record(nb.device, nb.stream, nb.seq, nb.position, nb.ts, sim.labels[sim.truth[nb.seq]], False,
                    (0.0, 0.0), None, "redaction", nb.mode)
    records = [forged if r is nb else r for r in log.ordered() if r.position not in (p - 1, p - 2)]
    rep = audit_redaction(log.status, published_model(log.status), records)
    assert any(f"mark at seq {mark['seq']}" in w and "exceeds epsilon" in w for w in rep.warnings)
    (m,) = [m for m in rep.marks if m["seq"] == mark["seq"]]
    assert m["verdict"] == "refuted" and m["unseen"] == 2
    # the test's own lower bound: X_{p+1} released and everything else redacted leaks
    # max log P[a, x] / P[b, x] about X_p under the stationary binary chain (α, β) = (0.1, 0.2)
    assert m["lower"] >= math.log(0.9 / 0.2) - 1e-9 > 1.0


@pytest.mark.parametrize("withheld", [(1, 2), (-1, 3), (-3, -1, 2)])
def test_the_bounds_of_a_partly_unobserved_mark_hold_for_every_row_it_did_not_see(withheld):
    """Brute force: whatever rows the producer used at the positions the consumer did not receive
    (a grid of rows per state), the exact leakage of the whole window lies between the audit's
    ``lower`` and ``upper``; a verdict is only given when every such world agrees with it."""
    weak = np.array([[0.7, 0.3], [0.4, 0.6]])
    stream = {**STREAM, "model": {"alpha": 0.3, "beta": 0.4}}
    _, log = _collected(stream=stream, matrix=weak)
    assert log.status is not None
    H, R = log.status["horizons"]["left"], log.status["horizons"]["right"]
    mark = log.status["recent_marks"][1]
    p = mark["position"]
    missing = {p + d for d in withheld}
    first, last = min(missing | {p - H}) - 1, max(missing | {p + R}) + 1
    by_pos = {r.position: r for r in log.ordered()}
    assert all(by_pos[t].row == (0.0, 0.0) for t in (first, last))  # the window ends released
    rep = audit_redaction(log.status, published_model(log.status), [r for r in log.ordered()
                                                                      if r.position not in missing])
    (m,) = [m for m in rep.marks if m["seq"] == mark["seq"]]
    assert m["unseen"] == len(withheld)
    grid = [(a, b) for a in (0.0, 0.5, 1.0) for b in (0.0, 0.5, 1.0)]
    values = []
    for rows in itertools.product(grid, repeat=len(withheld)):
        got = dict(zip(sorted(missing), rows))
        window = np.array([got.get(t, by_pos[t].row if t != p else (1.0, 1.0)) for t in range(first, last + 1)])
        values.append(brute_force_leakage(MarkovChain(weak), ChannelSequence.from_redaction(window), p - first))
    assert m["lower"] <= min(values) + 1e-9 and max(values) <= m["upper"] + 1e-9
    assert m["lower"] == pytest.approx(min(values), abs=1e-9)  # all redacted is one of the worlds
    verdict = "confirmed" if max(values) <= 1.0 else "refuted" if min(values) > 1.0 else "not checkable"
    assert m["verdict"] in (verdict, "not checkable") and rep.warnings == []


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


def test_a_run_is_audited_at_its_last_step_too():
    """A run of private steps (``last``, issue 28) is checked at both ends: a record released
    right after the run's last step is caught there (a single mark at the run's first step would
    not see it as a neighbour)."""
    sim, log = _collected()
    assert log.status is not None
    status = json.loads(json.dumps(log.status))
    mark = status["recent_marks"][0]
    p = mark["position"]
    records = log.ordered()
    by_pos = {r.position: r for r in records}
    assert all(by_pos[t].redacted for t in range(p + 1, p + 4))
    mark["last"] = p + 3  # the claim: p..p+3 private, right rows from p+3
    nb = by_pos[p + 4]
    forged = Record(nb.device, nb.stream, nb.seq, nb.position, nb.ts, sim.labels[sim.truth[nb.seq]], False,
                    (0.0, 0.0), None, "redaction", nb.mode)
    rep = audit_redaction(status, published_model(status), [forged if r is nb else r for r in records])
    assert any(f"(position {p + 3})" in w and "exceeds epsilon" in w for w in rep.warnings), rep.warnings
    assert [m["position"] for m in rep.marks][:2] == [p, p + 3]
