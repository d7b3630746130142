"""Every redaction mark reaches the ledger, unbounded leakage exports as "inf" and re-checks, and a
mark that is not honoured is logged once (issue 9, items 3 and 4).

The runtime is driven as the daemon drives it, without MQTT: after every frame or command its mark
records are taken (which makes the ledger events), the retained status is rebuilt, and the events
are committed to a real ledger file that ``streamguard ledger show / export / check`` then read.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import pytest

from streamguard.model.chain import MarkovChain
from streamguard.cli import main
from streamguard.config import Settings
from streamguard.ledger.events import AggregateEvent, EventError, RedactionEvent
from streamguard.ledger.odometer import odometer
from streamguard.ledger.store import Ledger
from streamguard.quilt import QuiltAccountant, QuiltModel, sigma_inf
from streamguard.sampling import SeededSource
from streamguard.stream.redaction_runtime import RedactionRuntime

ALPHA, BETA, EPS = 0.1, 0.2, 1.0
#: Label values no log line could contain by accident.
LABELS = ["quiet_zq", "busy_zq"]


class Drive:
    """A redaction stream ``dev/s`` and its ledger, driven as the daemon does."""

    def __init__(self, tmp_path: Path, **stream: Any) -> None:
        settings = Settings(device="dev", deterministic_seed=3, outbox={"path": tmp_path / "o.sqlite"},
                            streams=[{"name": "s", "labels": LABELS, "model": {"alpha": ALPHA, "beta": BETA},
                                      "epsilon": EPS, "source": "stdin", **stream}])
        self.rt = RedactionRuntime(settings, settings.streams[0], SeededSource(3))
        self.db = tmp_path / "ledger.sqlite"
        self.ledger = Ledger.open(self.db)
        self.n = 0
        self.reports: dict[int, dict[str, Any]] = {}

    def _store(self) -> None:
        self.reports.update({seq: rec["report"] | {"phys": rec["state"]["phys"]}
                             for seq, rec in self.rt.mark_records().items()})
        self.ledger.commit_all(self.rt.take_ledger_events())
        self.rt.privacy_status()  # a status refresh must not log again

    def frames(self, count: int) -> None:
        for _ in range(count):
            label = LABELS[(self.n // 3) % 2]
            self.rt.on_frame(json.dumps({"value": label, "ts": 1.79e9 + self.n}).encode(), now=1.79e9 + self.n)
            self.n += 1
            self._store()

    def command(self, target: int | str) -> None:
        assert self.rt.on_command(json.dumps({"private": target}).encode()) is None
        self._store()

    def odometer(self) -> dict[str, Any]:
        return odometer(self.ledger, "dev", "s", limit=None)


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["ledger", *argv])
    out, err = capsys.readouterr()
    assert not err
    return code, out


def _strict(text: str) -> Any:
    """``json.loads`` that refuses NaN / Infinity: the document is strict JSON."""
    def refuse(name: str) -> Any:
        raise AssertionError(f"non-JSON constant {name} in the export")
    return json.loads(text, parse_constant=refuse)


def _export(capsys: pytest.CaptureFixture[str], db: Path, out: Path) -> dict[str, Any]:
    code, printed = _cli(capsys, "export", "--db", str(db), "--json", "--out", str(out))
    assert code == 0 and printed == ""
    return _strict(out.read_text())


def _mark(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(m for m in doc["redaction"]["marks"] if m["mark"] == name)


def test_a_mark_on_a_published_record_exports_as_inf_and_rechecks(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    d = Drive(tmp_path)
    d.frames(30)
    d.command("now")  # the newest record and its left neighbours are pending: on time, honoured
    d.command(0)  # record 0 was released long since: not honoured, unbounded leakage
    d.frames(20)  # both marks finish
    assert d.reports[29]["honoured"] and not d.reports[0]["honoured"]
    doc = d.odometer()
    red = doc["redaction"]
    assert (red["count"], red["not_honoured"], red["epsilon"]) == (2, 1, "inf")
    lost, kept = _mark(doc, "0"), _mark(doc, "29")
    assert (lost["position"], lost["total"], lost["honoured"]) == (0, "inf", False)
    assert kept["honoured"] and 0 < kept["total"] <= EPS
    d.ledger.close()

    code, out = _cli(capsys, "show", "--db", str(d.db))
    assert code == 0 and "worst mark ε = inf at position 0" in out and "marks 2  not honoured 1" in out

    export = _export(capsys, d.db, tmp_path / "export.json")
    assert export["declared"]["dev/s"]["redaction:mark:0"] == "inf"
    assert export["declared"]["dev/s"]["redaction:mark:29"] == pytest.approx(kept["total"])
    lost_rows = [r for r in export["events"] if r["event"]["family"] == "redaction" and r["event"]["position"] == 0]
    assert lost_rows and all(r["event"]["total"] == "inf" for r in lost_rows)
    code, out = _cli(capsys, "check", str(tmp_path / "export.json"))
    assert code == 0 and out.startswith(f"ok: {len(export['events'])} events, 1 streams")

    # the declared inf made finite: the events give more than the ledger declares
    forged = json.loads(json.dumps(export))
    forged["declared"]["dev/s"]["redaction:mark:0"] = 0.5
    (tmp_path / "forged.json").write_text(json.dumps(forged))
    code, out = _cli(capsys, "check", str(tmp_path / "forged.json"))
    assert code == 1
    assert out.splitlines()[0] == "under-count: dev/s redaction:mark:0: recomputed inf > declared 0.5"

    # an event's inf made finite: the digest chain breaks and the recomputed figure falls below the declared
    forged = json.loads(json.dumps(export))
    for row in forged["events"]:
        if row["event"]["family"] == "redaction" and row["event"]["position"] == 0:
            row["event"]["total"] = 0.5
    (tmp_path / "forged.json").write_text(json.dumps(forged))
    code, out = _cli(capsys, "check", str(tmp_path / "forged.json"))
    assert code == 1
    assert "chain: event" in out
    assert "inconsistent: dev/s redaction:mark:0: recomputed 0.5 < declared inf" in out


def test_a_mark_on_a_record_older_than_the_privatizers_memory_is_recorded_not_honoured(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    d = Drive(tmp_path, delay=0)
    d.frames(400)  # far more records than the privatizer keeps positions for (a bounded memory)
    d.command(0)
    assert d.reports[0]["phys"] == -1 and not d.reports[0]["honoured"]
    doc = d.odometer()
    red = doc["redaction"]
    assert (red["count"], red["not_honoured"], red["epsilon"]) == (1, 1, "inf")
    assert red["worst"] == _mark(doc, "seq:0")
    assert {k: red["worst"][k] for k in ("position", "seq", "total", "honoured")} == {
        "position": None, "seq": 0, "total": "inf", "honoured": False}
    assert "too long ago" in red["worst"]["reason"]
    assert doc["composition"] == []  # one family only: nothing to compose
    d.ledger.close()

    code, out = _cli(capsys, "show", "--db", str(d.db))
    assert code == 0
    assert "worst mark ε = inf at seq 0 (position unknown)" in out and "marks 1  not honoured 1" in out
    export = _export(capsys, d.db, tmp_path / "export.json")
    assert export["declared"]["dev/s"] == {"redaction:mark:seq:0": "inf"}
    code, out = _cli(capsys, "check", str(tmp_path / "export.json"))
    assert code == 0 and out.startswith("ok: 1 events")


def test_each_mark_not_honoured_logs_one_warning_without_a_reading(
        caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    """Three ways a mark is not honoured — its position forgotten, its record already released, its
    released left neighbours already over the budget — each logged once although the marks stay
    open over several frames and status refreshes, and then finish."""
    d = Drive(tmp_path, delay=0)  # every record is decided as soon as the next one arrives
    d.frames(400)
    with caplog.at_level(logging.WARNING, logger="streamguard.stream.redaction_runtime"):  # (the demo quiets it)
        d.command(0)
        d.command(390)
        d.command("now")  # on record 399, whose left neighbour 398 is out
        d.frames(12)
    assert all(r["honoured"] is False for r in d.reports.values()) and sorted(d.reports) == [0, 390, 399]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 3
    assert "seq 0 (position unknown) NOT honoured: the record was published too long ago" in warnings[0]
    assert "seq 390 (position 390) NOT honoured: the record was already published" in warnings[1]
    assert "seq 399 (position 399) NOT honoured: the published left neighbours already exhaust" in warnings[2]
    assert all(w.startswith("stream s: private mark (command)") for w in warnings)
    assert not any(label in w for w in warnings for label in LABELS)
    red = d.odometer()["redaction"]
    assert (red["count"], red["not_honoured"]) == (3, 3)
    # the released neighbour 398 alone leaks log max_a P(a|0)/P(a|1) about X_399 (stationary backward
    # kernel of the two-state chain: P(0|0) = 0.9, P(0|1) = 0.2 → log(0.1/0.8) in absolute value)
    late = _mark(d.odometer(), "399")
    pi0 = BETA / (ALPHA + BETA)
    back = [[pi0 * (1 - ALPHA) / pi0, (1 - pi0) * BETA / pi0],
            [pi0 * ALPHA / (1 - pi0), (1 - pi0) * (1 - BETA) / (1 - pi0)]]
    assert late["left"] == pytest.approx(max(abs(math.log(back[0][a] / back[1][a])) for a in (0, 1)), rel=1e-12)
    assert late["total"] > EPS


@pytest.mark.parametrize("change, message", [
    ({"honoured": True}, "honoured: a mark whose leakage exceeds its epsilon is not honoured"),
    ({"total": 2.0, "left": 1.5, "right": 0.5, "honoured": True}, "honoured: a mark whose leakage exceeds"),
    ({"position": None}, "rows: a mark whose position is unknown sets no rows"),
    ({"position": None, "lo": None, "hi": None, "total": 0.5, "left": 0.5, "right": 0.5},
     "total: a mark whose position is unknown is not honoured and bounds nothing"),
    ({"position": None, "lo": None, "hi": None, "total": 0.5, "left": 0.5, "right": 0.5, "honoured": True},
     "total: a mark whose position is unknown is not honoured and bounds nothing"),
    ({"total": "-inf"}, "total: expected a finite number or +inf"),
    ({"total": "Infinity"}, 'total: expected a number or "inf"'),
])
def test_redaction_events_take_inf_only_for_marks_not_honoured(change: dict[str, Any], message: str) -> None:
    base: dict[str, Any] = {"device": "dev", "stream": "s", "position": 4, "seq": 4, "plan": "3R:optimal",
                            "epsilon": 1.0, "left": math.inf, "right": math.inf, "total": math.inf,
                            "honoured": False, "reason": "the record was already published", "lo": 4, "hi": 8}
    assert RedactionEvent(**base).to_json()["total"] == "inf"
    lost = RedactionEvent(**base | {"position": None, "lo": None, "hi": None})
    assert (lost.mark, lost.span(), lost.order) == ("seq:4", None, (1, 4))
    with pytest.raises(EventError) as info:
        RedactionEvent(**base | change)
    assert str(info.value).startswith(message)


def test_a_stream_whose_only_mark_has_no_known_position_states_why_families_are_not_composed(
        tmp_path: Path) -> None:
    """Aggregates on positions 0..19 and one mark whose position is unknown: the odometer cannot say
    whether the two families share positions, and says so instead of calling them disjoint."""
    model = QuiltModel(MarkovChain.binary(ALPHA, BETA), "stat")
    sigma = sigma_inf(model, 1.0).sigma
    with Ledger.open(tmp_path / "ledger.sqlite") as led:
        led.commit(AggregateEvent(device="dev", stream="s", kind="histogram", lo=0, hi=19, lipschitz=2.0,
                                  beta=2 * sigma, sigma=sigma, epsilon=1.0, model=model.identifier, mode="stat",
                                  witness={}, t_independent=True, sampler="csprng", deterministic=False), model=model)
        led.commit(RedactionEvent(device="dev", stream="s", position=None, seq=7, plan="3R:optimal", epsilon=1.0,
                                  left=math.inf, right=math.inf, total=math.inf, honoured=False,
                                  reason="the record was published too long ago"))
        doc = odometer(led, "dev", "s")
    [both] = doc["composition"]
    assert both["families"] == ["aggregate", "redaction"] and both["composed"] is False
    assert both["shared_positions"] is None and "positions of some aggregate or redaction releases are unknown" \
        in both["reason"]
    alone = QuiltAccountant(model)  # the aggregate's figure is its own: the mark's inf stays in its family
    alone.record(0, 19, 2.0 / (2 * sigma))
    assert doc["aggregate"]["epsilon"] == pytest.approx(alone.eps_max(), rel=1e-12) and alone.eps_max() <= 1.0 + 1e-9
    assert doc["redaction"]["epsilon"] == "inf"


def test_a_mark_known_by_neither_seq_nor_position_is_its_own_ledger_mark(
        caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    """A private request for a step older than the privatizer's memory has no seq and no position:
    the ledger names it by its event id, and its outbox record cannot take the key of seq 0."""
    d = Drive(tmp_path, delay=0)
    d.frames(5)
    d.command(4)  # its released left neighbours exhaust ε (delay 0): open, not honoured, stored under seq 4
    stored = dict(d.reports)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="streamguard.stream.redaction_runtime"):
        d.rt.core.mark_lost(source="flag", ts=None)
        records = d.rt.mark_records()
        d.ledger.commit_all(d.rt.take_ledger_events())
    assert records == {} and d.reports == stored  # nothing to restore for it, and no key collision
    [line] = [r.getMessage() for r in caplog.records]
    assert "on a step with no known seq (position unknown) NOT honoured" in line
    red = d.odometer()["redaction"]
    assert (red["count"], red["not_honoured"]) == (2, 2)
    [lost] = [m for m in red["marks"] if m["mark"].startswith("event:")]
    assert (lost["position"], lost["seq"], lost["total"]) == (None, None, "inf")
    d.ledger.close()


def test_a_second_command_on_a_record_already_marked_changes_nothing(tmp_path: Path) -> None:
    """Issue 9, item 2: a second command on a record whose mark had finished made a second, late
    mark whose ledger event said "honoured" with an infinite total — the event refused it and the
    daemon stopped. A repeated mark is now idempotent: the first mark stands, exact, and nothing
    more is written (3,000 identical commands wrote 3,000 ledger events before, issue 13)."""
    d = Drive(tmp_path)
    d.frames(21)
    d.command("now")  # on record 20, on time
    d.frames(19)  # the mark finishes: record 20 and its window are decided
    first = _mark(d.odometer(), "20")
    for _ in range(5):
        d.command(20)
    report = d.reports[20]
    assert not report["late"] and report["honoured"] and report["achieved"]["total"] <= EPS
    assert _mark(d.odometer(), "20") == first  # no new event, the same figures
    d.ledger.close()


def test_the_status_lists_the_latest_finished_marks_and_reports_only_those(tmp_path: Path, monkeypatch) -> None:
    """``recent_marks`` is the latest RECENT_MARKS finished marks (all of them while there are
    fewer), oldest first, as the core's own list of finished marks has them; a status builds the
    report of those only (it built all of the up to 1,000 the core keeps, then dropped most:
    1.5 ms per status). Checked at every count from 0 to RECENT_MARKS + 5 (review: a slice from a
    negative start listed only 50 − n of n marks for 26 ≤ n < 50)."""
    from streamguard.stream import privatizer
    from streamguard.stream.redaction_runtime import RECENT_MARKS

    real = privatizer.Mark.report
    reports = 0

    def counted(self: Any) -> dict[str, Any]:
        nonlocal reports
        reports += 1
        return real(self)

    d = Drive(tmp_path)
    monkeypatch.setattr(privatizer.Mark, "report", counted)
    seen = set()
    while len(d.rt.core.finished) <= RECENT_MARKS + 5:
        finished = list(d.rt.core.finished)
        reports = 0
        status = d.rt.privacy_status()
        assert status["recent_marks"] == [real(m) for m in finished[-RECENT_MARKS:]]
        assert len(status["recent_marks"]) == min(len(finished), RECENT_MARKS)
        assert reports == len(status["recent_marks"]) + len(status["open_marks"])
        seen.add(len(finished))
        d.frames(20)
        d.command("now")
    assert set(range(RECENT_MARKS + 6)) <= seen
