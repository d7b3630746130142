"""The privacy ledger: events, persistence and replay, the budget filter, the odometer, export and
offline re-check (streamguard/ledger; DESIGN.md §4; notes/002 §4.7–4.8).

Reference numbers (notes/002 §7, §8, computed independently there): chain C1 = [[.9,.1],[.2,.8]],
E-stat, ε = 1: σ_∞ = 22.2984; tumbling windows released with σ_∞(ε) cost exactly ε (duality);
windows overlapping twice (h = 2) cost ε(2/σ_∞) = 1.6428.
"""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamguard.model.chain import MarkovChain
from streamguard.ledger.events import (
    AggregateEvent,
    ChannelClaim,
    ChannelEvent,
    EventError,
    RedactionEvent,
    canonical,
    event_from_json,
)
from streamguard.ledger.odometer import odometer
from streamguard.ledger.recheck import RecheckError, recheck
from streamguard.ledger.store import BudgetExceeded, Ledger, LedgerCorrupt, LedgerError
from streamguard.quilt import QuiltModel, sigma_inf, sigma_max, sigma_supq
from streamguard.quilt.accountant import QuiltAccountant
from streamguard.quilt.release import histogram
from streamguard.sampling import SeededSource

C1 = MarkovChain([[0.9, 0.1], [0.2, 0.8]])
C2 = MarkovChain([[0.8, 0.2], [0.2, 0.8]])


@pytest.fixture(scope="module")
def m1() -> QuiltModel:
    return QuiltModel(C1, "stat")


@pytest.fixture(scope="module")
def m2() -> QuiltModel:
    return QuiltModel(C2, "stat")


@pytest.fixture(scope="module")
def s1(m1: QuiltModel) -> float:
    return sigma_inf(m1, 1.0).sigma


def agg(model: QuiltModel, lo: int, hi: int, sigma: float, *, eps: float = 1.0, L: float = 1.0,
        stream: str = "s", device: str = "d") -> AggregateEvent:
    return AggregateEvent(device=device, stream=stream, time=1.0, kind="count", lo=lo, hi=hi, lipschitz=L,
                          beta=L * sigma, sigma=sigma, epsilon=eps, model=model.identifier, mode=model.mode,
                          witness={"a": 9, "b": 9}, t_independent=True, sampler="csprng", deterministic=False)


def mark(p: int, total: float, *, eps: float = 1.0, left: float | None = None, right: float | None = None,
         honoured: bool | None = None, stream: str = "s") -> RedactionEvent:
    left = total if left is None else left
    right = total if right is None else right
    return RedactionEvent(device="d", stream=stream, time=1.0, position=p, seq=p, plan="3R-optimal", epsilon=eps,
                          left=left, right=right, total=total,
                          honoured=(total <= eps) if honoured is None else honoured, lo=max(0, p - 3), hi=p + 3)


def chan(lo: int, hi: int, *, ldp_x: float | None = 0.5, other: tuple[str, float] | None = None,
         leak: float | None = None, channel: str = "rr:eps=0.5", stream: str = "s") -> ChannelEvent:
    claims = []
    if ldp_x is not None:
        claims.append(ChannelClaim("ldp_x", ldp_x))
    if other is not None:
        claims.append(ChannelClaim(*other))
    return ChannelEvent(device="d", stream=stream, time=1.0, channel=channel, claims=tuple(claims), lo=lo, hi=hi,
                        stream_leakage=leak, model=None if leak is None else "c1")


def fresh(model: QuiltModel, windows: list[tuple[int, int, float]]) -> QuiltAccountant:
    acc = QuiltAccountant(model)
    for lo, hi, load in windows:
        acc.record(lo, hi, load)
    return acc


# ------------------------------------------------------------------------------------------- events


def test_events_round_trip_through_json(m1: QuiltModel, s1: float) -> None:
    events = [agg(m1, 3, 40, s1), mark(7, 0.8),
              RedactionEvent(device="d", stream="s", position=9, plan="3R", epsilon=1.0, left=math.inf,
                             right=0.1, total=math.inf, honoured=False, reason="already published"),
              chan(0, 9, other=("ldp_s", 1.5), leak=math.inf)]
    for ev in events:
        text = canonical(ev)
        back = event_from_json(json.loads(text))
        assert back == ev and canonical(back) == text
    assert '"total":"inf"' in canonical(events[2])


@pytest.mark.parametrize("change, field", [
    ({"device": "a/b"}, "device"),
    ({"lo": 5, "hi": 4}, "window"),
    ({"beta": 3.0}, "beta"),
    ({"epsilon": math.nan}, "epsilon"),
    ({"t_independent": False}, "T"),
    ({"witness": {"x": math.inf}}, "witness"),
])
def test_aggregate_event_rejects_malformed_fields(m1: QuiltModel, s1: float, change: dict, field: str) -> None:
    doc = agg(m1, 0, 9, s1).to_json()
    doc.update(change)
    with pytest.raises(EventError, match=field):
        event_from_json(doc)


def test_redaction_and_channel_events_fail_closed() -> None:
    with pytest.raises(EventError, match="honoured"):
        mark(5, 1.2, honoured=True)  # a mark above its ε is never reported honoured
    with pytest.raises(EventError, match="total"):
        mark(5, 0.9, left=0.2, right=0.3)  # the sides compose additively: total ≤ left + right
    with pytest.raises(EventError, match="claims"):
        ChannelEvent(device="d", stream="s", channel="rr", claims=(), lo=0, hi=1)
    with pytest.raises(EventError, match="model"):
        ChannelEvent(device="d", stream="s", channel="rr", claims=(ChannelClaim("ldp_x", 1.0),), lo=0, hi=1,
                     stream_leakage=0.3)
    doc = mark(5, 0.5).to_json()
    doc["extra"] = 1
    with pytest.raises(EventError, match="unknown key 'extra'"):
        event_from_json(doc)
    del doc["extra"], doc["total"]
    with pytest.raises(EventError, match="missing key 'total'"):
        event_from_json(doc)


def test_event_from_an_aggregate_release(m1: QuiltModel) -> None:
    scale = sigma_max(m1, 1.0, 30)
    rel = histogram(np.zeros(30, dtype=np.int8), 0, m1, scale, SeededSource(5))
    ev = AggregateEvent.from_release(rel, "d", "s", time=2.0)
    assert (ev.lo, ev.hi, ev.lipschitz, ev.T, ev.t_independent) == (0, 29, 2.0, 30, False)
    assert ev.load == rel.load and ev.beta == rel.beta and ev.witness == json.loads(json.dumps(dict(rel.witness)))
    assert ev.deterministic and ev.sampler == "seeded"
    assert event_from_json(ev.to_json()) == ev


# ------------------------------------------------------------------------------- store and replay


def test_sigma_inf_reference_and_tumbling_windows_cost_epsilon(tmp_path: Path, m1: QuiltModel, s1: float) -> None:
    """notes/002 §7: σ_∞(C1, ε=1, E-stat) = 22.2984; §4.7 duality: tumbling windows cost ε."""
    assert s1 == pytest.approx(22.2984, abs=1e-4)
    with Ledger.open(tmp_path / "l.db") as led:
        for k in range(12):
            led.commit(agg(m1, 25 * k, 25 * k + 24, s1), model=m1)
        eps = led.book("d", "s").accountants[m1.identifier].eps_max()
    assert eps == pytest.approx(1.0, abs=1e-6)


def test_replay_after_reopen_equals_live_state(tmp_path: Path, m1: QuiltModel, m2: QuiltModel, s1: float) -> None:
    path = tmp_path / "l.db"
    s2 = sigma_inf(m2, 0.5).sigma
    with Ledger.open(path) as led:
        ids = [led.commit(agg(m1, 30 * k, 30 * k + 29, s1), model=m1) for k in range(6)]
        ids += [led.commit(agg(m2, 30 * k + 15, 30 * k + 44, s2, eps=0.5), model=m2) for k in range(3)]
        ids += [led.commit(mark(p, 0.1 * p)) for p in (2, 5, 9)]
        ids += [led.commit(chan(100, 140)), led.commit(chan(130, 150, ldp_x=0.25))]
        live = {g.name: g.value for g in led.book("d", "s").guarantees()}
        live_doc = odometer(led, "d", "s", limit=None)
        live_segments = {m: a.segments() for m, a in led.book("d", "s").accountants.items()}
    assert ids == list(range(1, 15))
    with Ledger.open(path) as led:
        assert {g.name: g.value for g in led.book("d", "s").guarantees()} == live
        assert odometer(led, "d", "s", limit=None) == live_doc
        assert {m: a.segments() for m, a in led.book("d", "s").accountants.items()} == live_segments
        assert led.head[0] == 14
    with Ledger.open(path, readonly=True) as ro:
        assert {g.name: g.value for g in ro.book("d", "s").guarantees()} == live
        with pytest.raises(LedgerError, match="read-only"):
            ro.commit(mark(50, 0.1))


def test_odometer_equals_an_independent_accountant_under_every_model(
        tmp_path: Path, m1: QuiltModel, m2: QuiltModel, s1: float) -> None:
    """Loads are model-free: each model's accountant counts every aggregate release of the stream."""
    s2 = sigma_inf(m2, 0.5).sigma
    events = [agg(m1, 0, 29, s1), agg(m1, 30, 59, s1), agg(m2, 15, 44, s2, eps=0.5), agg(m1, 20, 49, s1, L=2.0)]
    windows = [(e.lo, e.hi, e.lipschitz / e.beta) for e in events]
    with Ledger.open(tmp_path / "l.db") as led:
        for e in events:
            led.commit(e, model=m1 if e.model == m1.identifier else m2)
        doc = odometer(led, "d", "s")
    by_model = {m["model"]: m for m in doc["aggregate"]["models"]}
    ref1, ref2 = fresh(m1, windows).eps_max(), fresh(m2, windows).eps_max()
    assert by_model[m1.identifier]["eps_max"] == ref1
    assert by_model[m2.identifier]["eps_max"] == ref2
    assert doc["aggregate"]["epsilon"] == max(ref1, ref2)
    # two models on the stream: the paper's one-model rules are not applied to the mix
    assert "not_applicable" in by_model[m1.identifier]["paper"]["thm_III7_sum"]
    assert doc["aggregate"]["releases"] == 4


def test_overlapping_windows_match_the_notes_and_paper_rules_sit_alongside(
        tmp_path: Path, m1: QuiltModel, s1: float) -> None:
    """notes/002 §8 variant 2: each position in h = 2 windows of σ_∞(1) costs 1.6428 (< Σε, K·max)."""
    with Ledger.open(tmp_path / "l.db") as led:
        for k in range(8):
            led.commit(agg(m1, 30 * k, 30 * k + 29, s1), model=m1)
            led.commit(agg(m1, 30 * k + 15, 30 * k + 44, s1), model=m1)
        doc = odometer(led, "d", "s")
    model = doc["aggregate"]["models"][0]
    assert model["eps_max"] == pytest.approx(1.6428, abs=1e-4)
    assert model["paper"]["thm_III7_sum"] == {"epsilon": 16.0}
    assert model["paper"]["thm_II6_k_max"] == {"epsilon": 16.0}
    assert len(doc["aggregate"]["windows"]) == 16 and not doc["aggregate"]["windows_truncated"]


def test_families_that_meet_are_reported_not_composed(tmp_path: Path, m1: QuiltModel, s1: float) -> None:
    with Ledger.open(tmp_path / "l.db") as led:
        led.commit(agg(m1, 0, 49, s1), model=m1)
        led.commit(mark(20, 0.7))
        led.commit(mark(20, 0.9))  # a second report about the same position keeps the worse one
        led.commit(mark(80, 0.4))
        led.commit(chan(200, 260))
        doc = odometer(led, "d", "s")
    assert doc["redaction"]["epsilon"] == 0.9 and doc["redaction"]["worst"]["position"] == 20
    assert doc["redaction"]["count"] == 2 and doc["redaction"]["marks"][0]["events"] == 2
    pairs = {tuple(c["families"]): c for c in doc["composition"]}
    assert set(pairs) == {("aggregate", "redaction"), ("aggregate", "channel"), ("redaction", "channel")}
    assert all(c["composed"] is False and c["reason"] for c in pairs.values())
    assert pairs[("aggregate", "redaction")]["shared_positions"] == [17, 49]
    assert pairs[("aggregate", "channel")]["shared_positions"] is None  # disjoint, still not composed
    # each family keeps its own number; nothing adds them up
    assert doc["aggregate"]["epsilon"] == fresh(m1, [(0, 49, 1 / s1)]).eps_max()
    assert doc["channel"]["claims"]["ldp_x"]["epsilon"] == 0.5
    assert "epsilon" not in doc and "total" not in doc


def test_channel_rules(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "l.db") as led:
        led.commit(chan(0, 9, leak=0.8))
        led.commit(chan(10, 19, leak=0.8))
        doc = odometer(led, "d", "s")["channel"]
        assert doc["stream_leakage"] == {"epsilon": 0.8, "composed": True, "reason": None, "models": ["c1"]}
        led.commit(chan(5, 12, ldp_x=0.25, other=("ldp_s", 1.0), leak=0.3, channel="watchdog"))
        led.commit(chan(12, 14, ldp_x=None, other=("ldp_s", 0.5), leak=0.3, channel="watchdog"))
        doc = odometer(led, "d", "s")["channel"]
    assert doc["claims"]["ldp_x"]["epsilon"] == 0.75  # records 5..12 through two ε-LDP channels: sum
    assert doc["claims"]["ldp_s"] == {"epsilon": None, "composed": False, "rule": doc["claims"]["ldp_s"]["rule"]}
    assert doc["stream_leakage"]["composed"] is False and "different channels" in doc["stream_leakage"]["reason"]


def test_model_must_be_known_and_mode_q_is_refused(tmp_path: Path, m1: QuiltModel, s1: float) -> None:
    with Ledger.open(tmp_path / "l.db") as led:
        with pytest.raises(LedgerError, match="not registered"):
            led.commit(agg(m1, 0, 9, s1))
        with pytest.raises(LedgerError, match="names model"):
            led.commit(agg(m1, 0, 9, s1), model=QuiltModel(C2, "stat"))
        mq = QuiltModel(C1, "q")
        with pytest.raises(ValueError, match="mode 'q'"):
            led.commit(agg(mq, 0, 9, s1), model=mq)
        assert led.head[0] == 0 and not led.models  # nothing stored by a failed commit
        led.commit(agg(m1, 0, 9, s1), model=m1)
        led.commit(agg(m1, 10, 19, s1))  # registered now
        assert list(led.models) == [m1.identifier]


# ------------------------------------------------------------------------------------ budget filter


def test_budget_filter_at_the_boundary_aggregates(tmp_path: Path, m1: QuiltModel, s1: float) -> None:
    path = tmp_path / "l.db"
    first, second = agg(m1, 0, 29, s1), agg(m1, 15, 44, s1)
    e1 = fresh(m1, [(0, 29, 1 / s1)]).eps_max()
    e2 = fresh(m1, [(0, 29, 1 / s1), (15, 44, 1 / s1)]).eps_max()
    with Ledger.open(path) as led:
        assert led.admit(first, e1, model=m1) == 1  # lands exactly on the budget: admitted
        with pytest.raises(BudgetExceeded) as info:
            led.admit(second, math.nextafter(e2, 0.0))
        err = info.value
        assert (err.device, err.stream, err.family) == ("d", "s", "aggregate")
        assert err.would_be == e2 and err.budget == math.nextafter(e2, 0.0)
        assert m1.identifier in err.guarantee and "d/s" in str(err)
        assert led.book("d", "s").accountants[m1.identifier].eps_max() == e1  # not spent
        assert led.head[0] == 1
        assert led.admit(second, e2) == 2
    with Ledger.open(path) as led:
        doc = odometer(led, "d", "s")
        assert doc["refusals"]["count"] == 1 and doc["refusals"]["by_family"] == {"aggregate": 1}
        assert doc["refusals"]["last"]["would_be"] == e2
        assert doc["aggregate"]["budget"] == e2 and doc["aggregate"]["remaining"] == 0.0
        assert doc["aggregate"]["epsilon"] == e2


def test_budget_filter_redaction_and_channels(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "l.db") as led:
        led.admit(mark(10, 1.0), 1.0)
        with pytest.raises(BudgetExceeded, match="redaction:mark:11"):
            led.admit(mark(11, 1.0 + 1e-12, eps=2.0), 1.0)
        led.admit(chan(0, 9, ldp_x=0.5), 1.0)
        led.admit(chan(5, 14, ldp_x=0.5), 1.0)  # records 5..9: 0.5 + 0.5 = 1.0 fits
        with pytest.raises(BudgetExceeded, match="ldp_x") as info:
            led.admit(chan(9, 9, ldp_x=0.01), 1.0)
        assert info.value.would_be == pytest.approx(1.01)
        led.admit(chan(20, 29, ldp_x=None, other=("ldp_s", 0.4)), 1.0)
        with pytest.raises(BudgetExceeded, match="ldp_s") as info:  # no rule composes LDP w.r.t. S
            led.admit(chan(25, 30, ldp_x=None, other=("ldp_s", 0.1)), 1.0)
        assert info.value.would_be == math.inf
        doc = odometer(led, "d", "s")
    assert doc["refusals"]["count"] == 3 and doc["refusals"]["by_family"] == {"redaction": 1, "channel": 2}
    assert doc["channel"]["claims"]["ldp_x"]["epsilon"] == 1.0
    assert doc["redaction"]["count"] == 1


@given(st.lists(st.tuples(st.integers(0, 120), st.integers(1, 40), st.sampled_from([0.5, 1.0, 2.0])),
                min_size=1, max_size=12),
       st.floats(1.0, 3.0))
def test_property_admitted_releases_never_exceed_the_budget(
        tmp_path_factory: pytest.TempPathFactory, m1: QuiltModel, s1: float,
        windows: list[tuple[int, int, float]], budget: float) -> None:
    """Whatever is asked, the admitted set's accountant ε stays ≤ budget, refusals are not spent,
    and the replayed ledger equals an independent accountant fed the admitted windows only."""
    path = tmp_path_factory.mktemp("prop") / "l.db"
    admitted: list[tuple[int, int, float]] = []
    with Ledger.open(path) as led:
        for lo, width, L in windows:
            ev = agg(m1, lo, lo + width - 1, s1, L=L)
            try:
                led.admit(ev, budget, model=m1)
                admitted.append((ev.lo, ev.hi, ev.load))
            except BudgetExceeded as exc:
                assert exc.would_be > budget
            assert led.book("d", "s").accountants.get(m1.identifier) is None or \
                led.book("d", "s").accountants[m1.identifier].eps_max() <= budget
    with Ledger.open(path) as led:
        book = led.book("d", "s")
        assert book.aggregates.count == len(admitted)
        assert len(led.refusals("d", "s")) == len(windows) - len(admitted)
        if admitted:
            assert book.accountants[m1.identifier].eps_max() == fresh(m1, admitted).eps_max()


# --------------------------------------------------------------------------- integrity and writers


def test_tampered_database_does_not_open(tmp_path: Path, m1: QuiltModel, s1: float) -> None:
    path = tmp_path / "l.db"
    with Ledger.open(path) as led:
        led.commit(agg(m1, 0, 29, s1), model=m1)
        led.commit(mark(3, 0.5))
    db = sqlite3.connect(path)
    body = db.execute("SELECT body FROM events WHERE id = 2").fetchone()[0]
    db.execute("UPDATE events SET body = ? WHERE id = 2", (body.replace('"total":0.5', '"total":0.1'),))
    db.commit()
    # the close checkpointed both events: a start reads neither, keeps the figures they gave, and
    # the export's check finds the edit (ledger/checkpoint.py); without the checkpoint the start does
    with Ledger.open(path, readonly=True) as led:
        assert led.book("d", "s").mark_leakage("3") == 0.5
        assert "chain" in {d["kind"] for d in recheck(led.export())["discrepancies"]}
    Path(f"{path}.checkpoint").unlink()
    with pytest.raises(LedgerCorrupt, match="event 2: digest"):
        Ledger.open(path)
    db.execute("UPDATE events SET body = ? WHERE id = 2", (body,))
    db.execute("UPDATE derived SET eps_max = eps_max * 2")  # the stored state says more was spent
    db.commit()
    with pytest.raises(LedgerCorrupt, match="replay gives"):
        Ledger.open(path)
    db.execute("UPDATE derived SET eps_max = eps_max / 2, segments = '[]'")
    db.commit()
    db.close()
    with pytest.raises(LedgerCorrupt, match="loads differ"):
        Ledger.open(path)


def test_a_second_writer_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    with Ledger.open(path) as a, Ledger.open(path) as b:
        a.commit(mark(1, 0.2))
        with pytest.raises(LedgerError, match="another process"):
            b.commit(mark(2, 0.2))
    with Ledger.open(path) as c:
        assert c.head[0] == 1


def test_the_database_is_wal_with_full_sync(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "l.db") as led:
        assert led._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert led._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_another_database_is_left_alone(tmp_path: Path) -> None:
    other = tmp_path / "outbox.sqlite"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE outbox (id INTEGER PRIMARY KEY)")
    db.commit()
    with pytest.raises(LedgerError, match="not a streamguard ledger"):
        Ledger.open(other)
    assert [r[0] for r in db.execute("SELECT name FROM sqlite_master")] == ["outbox"]
    db.close()


# ------------------------------------------------------------------------------- export and recheck


def _export(path: Path, m1: QuiltModel, s1: float) -> dict:
    with Ledger.open(path) as led:
        for k in range(4):
            led.admit(agg(m1, 30 * k, 30 * k + 29, s1), 2.0, model=m1)
        led.commit(mark(12, 0.6))
        led.commit(chan(200, 230, leak=0.4))
        with pytest.raises(BudgetExceeded):
            led.admit(agg(m1, 0, 119, s1 / 4), 2.0)
        return json.loads(json.dumps(led.export()))


def test_export_recheck_round_trip(tmp_path: Path, m1: QuiltModel, s1: float) -> None:
    doc = _export(tmp_path / "a.db", m1, s1)
    assert list(doc["models"]) == [m1.identifier] and len(doc["refusals"]) == 1
    report = recheck(doc)
    assert report["ok"], report["discrepancies"]
    assert report["events"] == 6
    figures = report["streams"]["d/s"]
    assert figures[f"aggregate:eps_max:{m1.identifier}"] == pytest.approx(1.0, abs=1e-6)
    assert figures["redaction:mark:12"] == 0.6 and figures["channel:stream_leakage"] == 0.4


def _kinds(report: dict) -> set[str]:
    return {d["kind"] for d in report["discrepancies"]}


def test_recheck_flags_a_lowered_epsilon(tmp_path: Path, m1: QuiltModel, s1: float) -> None:
    doc = _export(tmp_path / "a.db", m1, s1)
    doc["events"][1]["event"]["epsilon"] = 0.5  # the release's own target, lowered
    report = recheck(doc)
    assert not report["ok"]
    assert {"chain", "release-claim"} <= _kinds(report)
    doc = _export(tmp_path / "b.db", m1, s1)
    doc["events"][4]["event"]["total"] = 0.1  # a redaction mark's leakage, lowered
    doc["events"][4]["event"]["left"] = 0.1
    report = recheck(doc)
    assert {"chain", "inconsistent"} <= _kinds(report)


def test_recheck_flags_a_deleted_event_and_an_under_count(tmp_path: Path, m1: QuiltModel, s1: float) -> None:
    doc = _export(tmp_path / "a.db", m1, s1)
    deleted = json.loads(json.dumps(doc))
    del deleted["events"][2]  # a tumbling window: ε_max is unchanged, only the chain shows it
    report = recheck(deleted)
    assert _kinds(report) == {"chain"}
    assert any("expected event 3" in d["detail"] for d in report["discrepancies"])
    deleted = json.loads(json.dumps(doc))
    del deleted["events"][4]  # the redaction mark
    report = recheck(deleted)
    assert _kinds(report) == {"chain", "inconsistent"}
    assert any(d["where"] == "d/s redaction:mark:12" for d in report["discrepancies"])
    under = json.loads(json.dumps(doc))
    under["declared"]["d/s"][f"aggregate:eps_max:{m1.identifier}"] = 0.5  # the ledger says less was spent
    report = recheck(under)
    assert _kinds(report) == {"under-count"}
    assert report["discrepancies"][0]["where"] == f"d/s aggregate:eps_max:{m1.identifier}"


def test_recheck_flags_an_admission_over_its_budget_and_a_foreign_model(
        tmp_path: Path, m1: QuiltModel, s1: float) -> None:
    doc = _export(tmp_path / "a.db", m1, s1)
    doc["events"][3]["budget"] = 0.5  # the filter would have refused this
    assert "budget" in _kinds(recheck(doc))
    doc = _export(tmp_path / "b.db", m1, s1)
    desc = doc["models"][m1.identifier]
    desc["chains"][0]["matrix"] = [[0.8, 0.2], [0.2, 0.8]]
    report = recheck(doc)
    assert "model" in _kinds(report)
    with pytest.raises(RecheckError, match="format"):
        recheck({"format": "other"})


def test_recheck_accepts_finite_length_releases_the_accountant_charges_more(tmp_path: Path) -> None:
    """σ_max(T) under E-supq: the accountant (restricted quilts, conservative table) charges more
    than the release's own target. That is not a discrepancy: nothing is under-counted."""
    model = QuiltModel(C1, "supq")
    scale = sigma_max(model, 1.0, 30)
    rel = histogram(np.ones(30, dtype=np.int8), 0, model, scale, SeededSource(1))
    with Ledger.open(tmp_path / "l.db") as led:
        led.commit(AggregateEvent.from_release(rel, "d", "s"), model=model)
        eps = led.book("d", "s").accountants[model.identifier].eps_max()
        doc = odometer(led, "d", "s")
        report = recheck(led.export())
    assert eps > 1.0 + 1e-3  # the conservative charge
    assert report["ok"], report["discrepancies"]
    assert doc["aggregate"]["models"][0]["paper"]["thm_III7_sum"] == {"epsilon": 1.0}
    assert doc["aggregate"]["warning"].startswith("a release used the deterministic (seeded) sampler")
    # a length-independent release's own claim is checked: lowering its target is flagged
    sup = sigma_supq(model, 1.0)
    ev = AggregateEvent(device="d", stream="t", kind="count", lo=5, hi=60, lipschitz=1.0, beta=sup.sigma,
                        sigma=sup.sigma, epsilon=0.9, model=model.identifier, mode="supq", witness={},
                        t_independent=True, sampler="csprng", deterministic=False)
    with Ledger.open(tmp_path / "m.db") as led:
        led.commit(ev, model=model)
        report = recheck(led.export())
    assert [d["kind"] for d in report["discrepancies"]] == ["release-claim"]


def test_commit_all_is_one_durable_transaction_equal_to_single_commits(tmp_path):
    """The daemon's group commit: several redaction/channel events in one transaction get the
    same ids, digests and figures as committing them one by one; aggregates are refused there."""
    from streamguard.ledger.events import RedactionEvent
    from streamguard.ledger.store import Ledger, LedgerError

    evs = [RedactionEvent(device="d", stream="s", position=5 * i, seq=5 * i, plan="3R:exact", epsilon=1.0,
                          left=0.4, right=0.5, total=0.9, honoured=True) for i in range(1, 7)]
    with Ledger.open(tmp_path / "a.sqlite") as one, Ledger.open(tmp_path / "b.sqlite") as many:
        ids = [one.commit(e) for e in evs]
        assert many.commit_all(evs[:4]) + many.commit_all(evs[4:]) == ids
        assert one.head[0] == many.head[0] == len(evs)
        assert [g.value for g in one.book("d", "s").guarantees()] == [g.value for g in many.book("d", "s").guarantees()]
    with Ledger.open(tmp_path / "b.sqlite") as again:  # replay checks the digest chain
        assert len(again.book("d", "s").marks) == len(evs)
        model = QuiltModel([MarkovChain([[0.9, 0.1], [0.2, 0.8]])], "stat")
        with pytest.raises(LedgerError, match="redaction and channel events only"):
            again.commit_all([agg(model, 0, 9, 22.3)])
