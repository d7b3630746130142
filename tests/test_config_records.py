"""Configuration loading and raw-frame validation: errors name the key or field, never a reading."""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path

import pytest

from streamguard.config import ConfigError, ScheduleWindow, load_settings
from streamguard.sampling import SeededSource
from streamguard.frames.records import MAX_FRAME_BYTES, RawRecord, Rejection, StateMap, parse_frame
from streamguard.stream.redaction_runtime import RedactionRuntime

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "streamguard.toml"
LABELS = StateMap(labels=("vacant", "occupied"))
BINS = StateMap(bins=(0.0, 10.0, 20.0))


def _with(tmp_path: Path, old: str, new: str) -> Path:
    p = tmp_path / "c.toml"
    text = EXAMPLE.read_text()
    assert old in text
    p.write_text(text.replace(old, new))
    return p


def test_example_loads_and_environment_overrides_nested_keys(monkeypatch):
    s = load_settings(EXAMPLE)
    assert s.device == "kitchen-pi" and s.broker.port == 1883 and s.streams[0].chain().is_binary
    monkeypatch.setenv("STREAMGUARD_BROKER__PORT", "8883")
    monkeypatch.setenv("STREAMGUARD_DEVICE", "hall")
    s = load_settings(EXAMPLE)
    assert s.broker.port == 8883 and s.broker.host == "127.0.0.1" and s.device == "hall"


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ("epsilon = 1.0", "epsilon = -1", "streams[occupancy].epsilon"),
        ("alpha = 0.01", "alpha = 1.5", "streams[occupancy].model.alpha"),
        ('labels = ["vacant", "occupied"]', 'labels = ["a", "b", "c"]', "streams[occupancy]"),
        ("port = 1883", 'port = "x"', "broker.port"),
        ('overflow = "drop-oldest"', 'overflow = "sometimes"', "outbox.overflow"),
        ("commit_delay_ms = 0 ", "commit_delay_ms = 0.5 ", "outbox.commit_delay_ms"),
        ("commit_delay_ms = 0 ", "commit_delay_ms = 5000 ", "outbox.commit_delay_ms"),
        ('device = "kitchen-pi"', 'device = "kitchen pi"', "device"),
        ('start = "23:00"', 'start = "25:00"', "streams[occupancy].schedule[0].start"),
        ('design = "optimal"', 'design = "best"', "streams[occupancy].design"),
    ],
)
def test_errors_name_the_key(tmp_path, old, new, key):
    with pytest.raises(ConfigError) as info:
        load_settings(_with(tmp_path, old, new))
    assert str(info.value).startswith(key)


def test_unknown_keys_missing_files_and_bad_toml_are_refused(tmp_path):
    with pytest.raises(ConfigError, match='log_levle: unknown key; did you mean "log_level"'):
        load_settings(_with(tmp_path, 'log_level = "INFO"', 'log_level = "INFO"\nlog_levle = "DEBUG"'))
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("device = ")
    with pytest.raises(ConfigError):
        load_settings(bad)
    with pytest.raises(ConfigError, match="password"):
        load_settings(_with(tmp_path, 'host = "127.0.0.1"', 'host = "127.0.0.1"\npassword = "a"\npassword_file = "/x"'))


def test_password_is_secret_and_read_from_a_file(tmp_path):
    pw = tmp_path / "pw"
    pw.write_text("hunter2\n")
    s = load_settings(_with(tmp_path, 'host = "127.0.0.1"', f'host = "127.0.0.1"\npassword_file = "{pw}"'))
    assert s.broker.secret() == "hunter2"
    s = load_settings(_with(tmp_path, 'host = "127.0.0.1"', 'host = "127.0.0.1"\npassword = "hunter2"'))
    assert "hunter2" not in repr(s) and s.broker.secret() == "hunter2"


def test_schedule_windows_wrap_midnight():
    w = ScheduleWindow(start=dt.time(23, 0), end=dt.time(6, 0))
    at = lambda h: dt.datetime(2026, 1, 1, h, 30).timestamp()  # noqa: E731
    assert w.contains(at(23)) and w.contains(at(2)) and not w.contains(at(12))


SECRET = "occupied-by-alice"


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (b"\xff\xfe" + SECRET.encode(), "not-utf8"),
        (b'{"value": "' + SECRET.encode(), "not-json"),
        (b'{"value": NaN}', "not-finite"),
        (b"[1, 2]", "not-object"),
        (b'{"ts": 5}', "missing-value"),
        (json.dumps({"value": SECRET}).encode(), "unknown-state"),
        (json.dumps({"value": 7}).encode(), "wrong-type"),
        (json.dumps({"value": "vacant", "ts": "noon"}).encode(), "bad-ts"),
        (json.dumps({"value": "vacant", "ts": 5.0}).encode(), "ts-out-of-order"),
        (json.dumps({"value": "vacant", "private": "yes"}).encode(), "bad-private"),
        (json.dumps({"value": "vacant", "pad": "x" * MAX_FRAME_BYTES}).encode(), "oversize"),
    ],
)
def test_rejections_name_the_field_never_the_value(frame, reason):
    r = parse_frame(frame, LABELS, now=100.0, last_ts=10.0)
    assert isinstance(r, Rejection) and r.reason == reason
    assert SECRET not in r.message and "noon" not in r.message and "yes" not in r.message


def test_numeric_bins():
    ok = parse_frame(b'{"value": 12.5, "ts": 11}', BINS, now=0, last_ts=10.0)
    assert ok == RawRecord(1, 11.0, False)
    assert parse_frame(b'{"value": 20.0}', BINS, now=0, last_ts=None).state == 1  # last bin is closed
    # below and above every edge: the open-ended first and last bins (a rejection would be visible)
    for v, state in ((-1e300, 0), (9.5, 0), (25, 1), (10**400, 1), (-(10**400), 0)):
        assert parse_frame(json.dumps({"value": v}).encode(), BINS, now=0, last_ts=None).state == state
    for v, reason in (("12", "wrong-type"), (True, "wrong-type")):
        r = parse_frame(json.dumps({"value": v}).encode(), BINS, now=0, last_ts=None)
        assert isinstance(r, Rejection) and r.reason == reason and "25" not in r.message


def test_runtime_commands_payloads_and_status(tmp_path):
    s = load_settings(_with(tmp_path, 'log_level = "INFO"', 'log_level = "INFO"\ndeterministic_seed = 3'))
    cfg = s.streams[0].model_copy(update={"schedule": []})
    rt = RedactionRuntime(s, cfg, SeededSource(3))
    for i in range(12):
        rt.on_frame(json.dumps({"value": "occupied", "ts": 1.79e9 + i}).encode(), now=1.79e9 + i)
    assert rt.on_command(b'{"private": "now"}') is None
    assert rt.on_command(b'{"private": 9}') is None
    for bad, reason in ((b"{", "not-json"), (b'{"x": 1}', "not-object"), (b'{"private": true}', "bad-private"),
                        (b'{"private": 99}', "unknown-seq"), (b'{"private": -1}', "bad-private")):
        assert rt.on_command(bad).reason == reason
    releases = rt.drain()
    rec = rt.record(releases[-1])
    assert rec["seq"] == 11 and rec["value"] is None and rec["redacted"] and rec["mode"] == "deterministic"
    status = rt.privacy_status()
    assert status["counters"]["accepted"] == 12 and status["counters"]["commands_rejected"]["bad-private"] == 2
    assert status["deterministic"] and status["horizons"]["left"] == rt.plan.left_horizon
    assert {m["seq"] for m in status["open_marks"] + status["recent_marks"]} == {9, 11}


@pytest.mark.parametrize(
    ("frame", "private"),
    [
        (b'{"value": "vacant", "private": "true"}', True),  # bad-private, but it asked
        (b'{"value": "' + SECRET.encode() + b'", "private": true}', True),  # unknown state
        (b'{"value": "vacant", "private": tr', True),  # truncated
        (b'{"value": "vacant", "ts": 5.0, "private": true}', True),  # out of order
        (b'{"value": "vacant", "ts": 5.0, "private": false}', False),
        (b'{"value": "nope"}', False),
    ],
)
def test_rejected_frames_that_ask_for_privacy_say_so(frame, private):
    r = parse_frame(frame, LABELS, now=100.0, last_ts=10.0)
    assert isinstance(r, Rejection) and r.private is private


def _toml(tmp_path: Path, stream: str) -> Path:
    p = tmp_path / "s.toml"
    p.write_text('device = "d"\n[outbox]\npath = "o.sqlite"\n[[streams]]\nname = "s"\nsource = "stdin"\n' + stream)
    return p


@pytest.mark.parametrize(
    ("stream", "message"),
    [
        ('labels = ["a", "b"]\n[streams.model]\nalpha = 0.1\nbeta = 0.2\n', "epsilon: a redaction stream needs"),
        ('labels = ["a", "b"]\nmechanism = "channel"\n[streams.model]\nalpha = 0.1\nbeta = 0.2\n',
         'channel: mechanism = "channel" needs'),
        ('labels = ["a", "b"]\nmechanism = "channel"\n[streams.model]\nalpha = 0.1\nbeta = 0.2\n'
         '[streams.channel]\nkind = "rr"\nepsilon = 1.0\n', "a channel design needs exactly one of joint"),
        ('labels = ["a", "b"]\nmechanism = "channel"\n[streams.model]\nalpha = 0.1\nbeta = 0.2\n'
         '[streams.channel]\nkind = "rr"\nfile = "c.json"\n', "give either file"),
        ('labels = ["a", "b"]\nepsilon = 1.0\n[streams.model]\nalpha = 0.1\nbeta = 0.2\n'
         '[[streams.aggregates]]\nquery = "count"\nwindow = 10\nepsilon = 1.0\n', "state (the label counted)"),
        ('labels = ["a", "b"]\nepsilon = 1.0\n[streams.model]\nalpha = 0.1\nbeta = 0.2\n'
         '[[streams.aggregates]]\nquery = "count"\nstate = "c"\nwindow = 10\nepsilon = 1.0\n',
         "state must be one of the stream's labels"),
        ('labels = ["a", "b"]\nepsilon = 1.0\n[streams.model]\nalpha = 0.1\nbeta = 0.2\n'
         '[[streams.aggregates]]\nquery = "mean"\nvalues = [1.0]\nstep = 0.5\nwindow = 10\nepsilon = 1.0\n',
         "values needs one number per state"),
        ('labels = ["a", "b"]\nepsilon = 1.0\naggregate_budget = 0.5\n[streams.model]\nalpha = 0.1\nbeta = 0.2\n'
         '[[streams.aggregates]]\nquery = "histogram"\nwindow = 10\nepsilon = 1.0\n', "aggregate_budget is below"),
    ],
)
def test_channel_and_aggregate_config_errors(tmp_path, stream, message):
    with pytest.raises(ConfigError) as info:
        load_settings(_toml(tmp_path, stream))
    assert message in str(info.value)


def test_aggregate_budget_defaults_to_the_sum_of_the_windows_epsilon(tmp_path):
    s = load_settings(_toml(tmp_path, 'labels = ["a", "b"]\nepsilon = 1.0\n[streams.model]\nalpha = 0.1\nbeta = 0.2\n'
                                      '[[streams.aggregates]]\nquery = "histogram"\nwindow = 10\nepsilon = 1.0\n'
                                      '[[streams.aggregates]]\nquery = "count"\nstate = "b"\nwindow = 5\nepsilon = 0.5\n'))
    assert s.streams[0].total_aggregate_budget() == 1.5


def test_sensitive_field_is_parsed_like_value_and_never_echoed():
    from streamguard.frames.records import SensitiveField

    sf = SensitiveField("occupancy", StateMap(labels=("away", "home")))
    ok = parse_frame(b'{"value": "vacant", "occupancy": "home"}', LABELS, now=0, last_ts=None, sensitive=sf)
    assert ok == RawRecord(0, 0.0, False, 1)
    missing = parse_frame(b'{"value": "vacant"}', LABELS, now=0, last_ts=None, sensitive=sf)
    assert isinstance(missing, Rejection) and missing.reason == "missing-sensitive" and "occupancy" in missing.message
    bad = parse_frame(b'{"value": "vacant", "occupancy": "sleeping"}', LABELS, now=0, last_ts=None, sensitive=sf)
    assert isinstance(bad, Rejection) and bad.reason == "unknown-state"
    assert "occupancy" in bad.message and "sleeping" not in bad.message


def test_aggregates_and_channels_example_checks(capsys):
    """The second example config is valid, designs and verifies its channel, and `config check`
    reports σ_∞ with its witness per aggregate and the channel's stream leakage."""
    from streamguard.cli import main

    example = EXAMPLE.parent / "aggregates-and-channels.toml"
    s = load_settings(example)
    assert [c.mechanism for c in s.streams] == ["redaction", "channel"]
    assert s.streams[0].total_aggregate_budget() == 1.5
    assert main(["config", "check", str(example)]) == 0
    out = capsys.readouterr().out
    assert "aggregate histogram every 3600 positions" in out and "σ_∞=" in out and "witness quilt" in out
    assert "per-record channel rr-prior" in out and "whole stream under the model" in out


def test_a_command_for_a_record_published_long_ago_is_reported_and_recorded_by_its_seq(tmp_path):
    """Its position is no longer known (phys −1): the mark is reported as not honoured with an
    unbounded leakage, and its ledger event names it by its seq (position None) — found by the
    daemon fuzz test, where it stopped the daemon; every mark reaches the ledger (issue 9, item 4)."""
    s = load_settings(_with(tmp_path, 'log_level = "INFO"', 'log_level = "INFO"\ndeterministic_seed = 3'))
    rt = RedactionRuntime(s, s.streams[0].model_copy(update={"schedule": []}), SeededSource(3))
    for i in range(2000):
        rt.on_frame(json.dumps({"value": "vacant", "ts": 1.79e9 + i}).encode(), now=1.79e9 + i)
    rt.mark_records(), rt.take_ledger_events()
    assert rt.on_command(b'{"private": 0}') is None
    marks = rt.mark_records()
    assert [m["report"]["honoured"] for m in marks.values()] == [False]
    [lost] = rt.take_ledger_events()
    assert (lost.position, lost.seq, lost.honoured, lost.total, lost.span()) == (None, 0, False, math.inf, None)
    assert rt.on_command(b'{"private": 1999}') is None  # a recent one is recorded
    rt.mark_records()
    assert [e.position for e in rt.take_ledger_events()] == [1999]
