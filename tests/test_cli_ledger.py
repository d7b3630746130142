"""``streamguard ledger show / export / check`` (streamguard/cli/ledger.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from streamguard.model.chain import MarkovChain
from streamguard.cli import main
from streamguard.ledger.events import AggregateEvent, ChannelClaim, ChannelEvent, RedactionEvent
from streamguard.ledger.odometer import odometer
from streamguard.ledger.store import BudgetExceeded, Ledger
from streamguard.quilt import QuiltModel, sigma_inf

C1 = MarkovChain([[0.9, 0.1], [0.2, 0.8]])


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two streams: aggregates + a mark on kitchen/occupancy, a channel on hall/door; one refusal."""
    path = tmp_path_factory.mktemp("cli") / "ledger.sqlite"
    model = QuiltModel(C1, "stat")
    sigma = sigma_inf(model, 1.0).sigma
    with Ledger.open(path) as led:
        for k in range(3):
            led.admit(AggregateEvent(
                device="kitchen", stream="occupancy", kind="histogram", lo=20 * k, hi=20 * k + 19, lipschitz=2.0,
                beta=2 * sigma, sigma=sigma, epsilon=1.0, model=model.identifier, mode="stat", witness={},
                t_independent=True, sampler="csprng", deterministic=False), 1.5, model=model)
        led.commit(RedactionEvent(device="kitchen", stream="occupancy", position=33, seq=33, plan="3R-optimal",
                                  epsilon=1.0, left=0.45, right=0.5, total=0.9, honoured=True, lo=30, hi=36))
        led.commit(ChannelEvent(device="hall", stream="door", channel="rr:eps=1", lo=0, hi=99,
                                claims=(ChannelClaim("ldp_x", 1.0),), stream_leakage=0.7, model="c1"))
        with pytest.raises(BudgetExceeded):
            led.admit(ChannelEvent(device="hall", stream="door", channel="rr:eps=1", lo=50, hi=60,
                                   claims=(ChannelClaim("ldp_x", 1.0),)), 1.5)
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["ledger", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_show_text(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    code, out, err = run(capsys, "show", "--db", str(db))
    assert code == 0 and not err
    assert "hall/door" in out and "kitchen/occupancy" in out
    assert "aggregate  ε = 1 " in out  # tumbling windows of σ_∞(1) cost 1 (notes/002 §4.7)
    assert "worst mark ε = 0.9 at position 33" in out
    assert "aggregate + redaction: not composed" in out
    assert "refusals 1; last: channel channel:claim:ldp_x would be 2 > 1.5" in out


def test_show_json_matches_the_odometer(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    code, out, _ = run(capsys, "show", "--db", str(db), "--stream", "kitchen/occupancy", "--json")
    assert code == 0
    doc = json.loads(out)
    with Ledger.open(db, readonly=True) as led:
        assert doc == json.loads(json.dumps(odometer(led, "kitchen", "occupancy", limit=None)))
    assert doc["aggregate"]["budget"] == 1.5 and doc["aggregate"]["releases"] == 3
    code, out, _ = run(capsys, "show", "--db", str(db), "--stream", "door", "--json")
    assert code == 0 and json.loads(out)["channel"]["claims"]["ldp_x"]["epsilon"] == 1.0


def test_export_and_check_round_trip(capsys: pytest.CaptureFixture[str], db: Path, tmp_path: Path) -> None:
    out_file = tmp_path / "export.json"
    code, out, err = run(capsys, "export", "--db", str(db), "--json", "--out", str(out_file))
    assert code == 0 and out == "" and not err
    doc = json.loads(out_file.read_text())
    assert len(doc["events"]) == 5 and len(doc["refusals"]) == 1
    code, out, _ = run(capsys, "check", str(out_file))
    assert code == 0 and out.startswith("ok: 5 events, 2 streams")
    code, out, _ = run(capsys, "export", "--db", str(db), "--json")
    assert code == 0 and json.loads(out)["events"] == doc["events"]


def test_check_names_an_under_count(capsys: pytest.CaptureFixture[str], db: Path, tmp_path: Path) -> None:
    out_file = tmp_path / "export.json"
    run(capsys, "export", "--db", str(db), "--json", "--out", str(out_file))
    doc = json.loads(out_file.read_text())
    doc["declared"]["kitchen/occupancy"]["redaction:mark:33"] = 0.5
    out_file.write_text(json.dumps(doc))
    code, out, _ = run(capsys, "check", str(out_file))
    assert code == 1
    assert out.splitlines()[0] == ("under-count: kitchen/occupancy redaction:mark:33: "
                                   "recomputed 0.9 > declared 0.5")


def _edited_export(capsys: pytest.CaptureFixture[str], db: Path, tmp_path: Path, edit: Any) -> Path:
    out_file = tmp_path / "export.json"
    run(capsys, "export", "--db", str(db), "--json", "--out", str(out_file))
    doc = json.loads(out_file.read_text())
    edit(doc)
    out_file.write_text(json.dumps(doc))
    return out_file


def _first_aggregate(doc: dict[str, Any]) -> dict[str, Any]:
    return next(row for row in doc["events"] if row["event"]["family"] == "aggregate")


@pytest.mark.parametrize("edit, line", [
    # the new-user trial: σ no longer β / L, so the event does not validate
    (lambda d: _first_aggregate(d)["event"].update(sigma=_first_aggregate(d)["event"]["sigma"] / 2),
     "malformed: event 1: beta: must equal lipschitz·sigma"),
    (lambda d: d["events"][2].update(id="3"), "malformed: events[2]: expected an object with an integer id"),
    (lambda d: d.pop("events"), "malformed: events: missing or not a JSON list"),
    (lambda d: d.update(version=99), "malformed: export version 99; this code reads version"),
])
def test_malformed_or_tampered_export_fails_the_check(capsys: pytest.CaptureFixture[str], db: Path,
                                                      tmp_path: Path, edit: Any, line: str) -> None:
    """A document that claims to be an export but cannot be re-checked is a failed check (exit 1),
    not a bad argument (exit 2): one line naming the event and the problem."""
    code, out, err = run(capsys, "check", str(_edited_export(capsys, db, tmp_path, edit)))
    assert code == 1 and not err
    assert len(out.splitlines()) == 1 and out.startswith(line)


@pytest.mark.parametrize("argv, message", [
    (["show", "--db", "/nonexistent/ledger.sqlite"], "no such file"),
    (["show", "--db", "{db}", "--stream", "nope"],
     "--stream nope: no such stream in the ledger (streams: hall/door, kitchen/occupancy)"),
    (["show", "--db", "{db}", "--stream", "a/b/c"], "--stream: expected STREAM or DEVICE/STREAM"),
    (["check", "{bad}"], "not valid JSON"),
    (["check", "{other}"], "not a streamguard ledger export"),
    (["check", "{missing}"], "No such file"),
    (["show", "--db", "{other}"], "not a readable ledger"),
])
def test_bad_arguments_exit_2_with_one_line(capsys: pytest.CaptureFixture[str], db: Path, tmp_path: Path,
                                            argv: list[str], message: str) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "other.json").write_text(json.dumps({"format": "something else"}))
    argv = [a.format(db=db, bad=tmp_path / "bad.json", other=tmp_path / "other.json",
                     missing=tmp_path / "missing.json") for a in argv]
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err


def test_show_an_empty_ledger(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    Ledger.open(tmp_path / "empty.sqlite").close()
    code, out, _ = run(capsys, "show", "--db", str(tmp_path / "empty.sqlite"))
    assert code == 0 and "no releases" in out


def test_export_is_json_by_default_and_carries_the_stream_models(capsys: pytest.CaptureFixture[str], db: Path,
                                                                 tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("""device = "kitchen"
[outbox]
path = "o.sqlite"
[[streams]]
name = "occupancy"
labels = ["vacant", "occupied"]
epsilon = 1.0
[streams.model]
alpha = 0.1
beta = 0.2
""")
    code, out, _ = run(capsys, "export", "--db", str(db), "--config", str(cfg))
    doc = json.loads(out)
    assert code == 0 and doc["format"] == "streamguard-ledger"
    model = doc["stream_models"]["kitchen/occupancy"]
    assert model["matrix"] == [[0.9, 0.1], [0.2, 0.8]] and model["epsilon"] == 1.0 and model["design"] == "optimal"
    # the fixture's mark names plan "3R-optimal", not what this model's plan is called: the check says so
    (tmp_path / "e.json").write_text(out)
    code, out, _ = run(capsys, "check", str(tmp_path / "e.json"))
    assert code == 1 and "model: event 4: recorded under ε = 1.0, plan 3R-optimal" in out
    doc["events"][3]["event"]["plan"] = "3R:optimal"  # (the digest chain breaks: an edited event)
    model["epsilon"] = 5000.0
    (tmp_path / "f.json").write_text(json.dumps(doc))
    code, out, _ = run(capsys, "check", str(tmp_path / "f.json"))
    assert code == 1 and "kitchen/occupancy model: cannot rebuild the plan (epsilon must be a number in (0, 1000]" in out


def test_check_redesigns_the_plan_of_a_daemon_ledger(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from streamguard.redaction.plan import plan_stream

    plan = plan_stream(C1, 1.0, design="exact")
    lk = plan.leakage()
    with Ledger.open(tmp_path / "l.sqlite") as led:
        led.commit(RedactionEvent(device="d", stream="s", position=40, seq=40, plan="3R:exact", epsilon=1.0,
                                  left=lk.left, right=lk.right, total=lk.total, honoured=True, lo=38, hi=42))
    cfg = tmp_path / "c.toml"
    cfg.write_text('device = "d"\n[outbox]\npath = "o.sqlite"\n[[streams]]\nname = "s"\nlabels = ["a", "b"]\n'
                   'epsilon = 1.0\ndesign = "exact"\n[streams.model]\nalpha = 0.1\nbeta = 0.2\n')
    run(capsys, "export", "--db", str(tmp_path / "l.sqlite"), "--config", str(cfg), "--out", str(tmp_path / "e.json"))
    code, out, _ = run(capsys, "check", str(tmp_path / "e.json"))
    assert code == 0, out
    assert f"d/s: plan re-designed from the exported model: exact leakage {lk.total:.6f} nats" in out
