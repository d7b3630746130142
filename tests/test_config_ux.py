"""A configuration that explains itself (issue 13): every error at once with the key named (streams
by name), "did you mean", the environment variable named when it is the source, unknown
STREAMGUARD_* variables warned; relative paths resolve against the config file's directory; state
paths are checked and their directories created, or refused in one line naming the key; schedule
windows take an explicit time zone."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from firmware_sim import MarkovSource
from streamguard import MarkovChain
from streamguard.config import ConfigError, ScheduleWindow, environment_warnings, load_settings
from streamguard.config.paths import make_state_dirs, state_problems

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "streamguard.toml"

TWO_BAD_STREAMS = """
[outbox]
path = "state/outbox.sqlite"
[[streams]]
name = "kitchen"
labels = ["a", "b"]
epsilom = 1.0
[streams.model]
alpha = 0.1
beta = 2
[[streams]]
name = "hall"
labels = ["a", "b"]
epsilon = -1
[streams.model]
alpha = 0.1
beta = 0.2
[brokr]
host = "x"
"""


def test_every_error_at_once_named_by_stream_with_did_you_mean(tmp_path, monkeypatch):
    cfg = tmp_path / "c.toml"
    cfg.write_text(TWO_BAD_STREAMS)
    monkeypatch.setenv("STREAMGUARD_BROKER__PORT", "99999")
    with pytest.raises(ConfigError) as info:
        load_settings(cfg)
    lines = str(info.value).splitlines()
    assert lines[0] == f"{cfg}: 5 problems:"
    assert [line.strip() for line in lines[1:]] == [
        "broker.port: Input should be less than or equal to 65535 (from the environment: STREAMGUARD_BROKER__PORT)",
        "streams[kitchen].model.beta: Input should be less than 1",
        'streams[kitchen].epsilom: unknown key; did you mean "epsilon"?',
        "streams[hall].epsilon: Input should be greater than 0",
        'brokr: unknown key; did you mean "broker"?',
    ]


def test_unknown_environment_variables_are_warned_with_a_suggestion():
    env = {"STREAMGUARD_BROKR__HOST": "x", "STREAMGUARD_BROKER__PROT": "1", "STREAMGUARD_DEVICE": "d",
           "STREAMGUARD_BROKER__PORT": "1", "PATH": "/bin"}
    warnings = environment_warnings(env)
    assert warnings == [
        "environment variable STREAMGUARD_BROKER__PROT matches no configuration key; did you mean STREAMGUARD_BROKER__PORT?",
        "environment variable STREAMGUARD_BROKR__HOST matches no configuration key; did you mean STREAMGUARD_BROKER?",
    ]


def test_relative_paths_resolve_against_the_config_directory(tmp_path, monkeypatch):
    conf = tmp_path / "etc"
    conf.mkdir()
    labels = ("vacant", "occupied")
    states = MarkovSource(MarkovChain.binary(0.1, 0.3), 4).states(5000)
    (conf / "cal.jsonl").write_text("\n".join(json.dumps({"value": labels[s]}) for s in states))
    (conf / "secret").write_text("pw\n")
    os.chmod(conf / "secret", 0o600)
    text = EXAMPLE.read_text().replace('path = "/var/lib/streamguard/outbox.sqlite"', 'path = "state/outbox.sqlite"')
    text = text.replace("alpha = 0.01                 # Pr(vacant → occupied)\nbeta = 0.8", 'calibration = "cal.jsonl"')
    text = text.replace('# password_file = "/etc/streamguard/mqtt-password"', 'password_file = "secret"')
    (conf / "c.toml").write_text(text)
    monkeypatch.chdir(tmp_path)  # not the config's directory
    s = load_settings(conf / "c.toml")
    assert s.outbox.path == conf / "state" / "outbox.sqlite"
    assert s.ledger_path().parent == conf / "state"
    assert s.streams[0].model.calibration == conf / "cal.jsonl"
    assert s.broker.password_file == conf / "secret" and s.broker.secret() == "pw"
    # a default relative path (no [outbox] table) also lands beside the config file
    (conf / "d.toml").write_text(text.split("[outbox]")[0] + "[[streams]]" + text.split("[[streams]]")[1])
    assert load_settings(conf / "d.toml").outbox.path == conf / "streamguard-outbox.sqlite"


def test_a_missing_calibration_file_names_the_key(tmp_path):
    text = EXAMPLE.read_text().replace("alpha = 0.01                 # Pr(vacant → occupied)\nbeta = 0.8",
                                       'calibration = "nope.jsonl"')
    (tmp_path / "c.toml").write_text(text)
    with pytest.raises(ConfigError, match=r"^streams\[occupancy\]: model: .*nope.jsonl"):
        load_settings(tmp_path / "c.toml")


def test_state_paths_are_checked_and_created(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    text = EXAMPLE.read_text()
    (tmp_path / "bad.toml").write_text(text.replace("/var/lib/streamguard/outbox.sqlite", "file/sub/outbox.sqlite"))
    bad = load_settings(tmp_path / "bad.toml")
    problems = state_problems(bad)
    assert problems and all(p.startswith("outbox.path") or p.startswith("ledger.path") for p in problems)
    assert "is not a directory" in problems[0]
    with pytest.raises(ConfigError, match=r"^outbox\.path: cannot create .*file/sub"):
        make_state_dirs(bad)
    (tmp_path / "good.toml").write_text(text.replace("/var/lib/streamguard/outbox.sqlite", "new/state/outbox.sqlite"))
    good = load_settings(tmp_path / "good.toml")
    assert state_problems(good) == []  # the directory will be created
    make_state_dirs(good)
    assert (tmp_path / "new" / "state").is_dir()
    assert (tmp_path / "new" / "state").stat().st_mode & 0o777 == 0o700


def test_run_refuses_an_unusable_state_path_in_one_line_with_the_config_status(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    cfg = tmp_path / "c.toml"
    cfg.write_text(EXAMPLE.read_text().replace("/var/lib/streamguard/outbox.sqlite", "file/outbox.sqlite"))
    proc = subprocess.run([sys.executable, "-m", "streamguard.cli", "run", "--config", str(cfg)],
                          capture_output=True, timeout=60)
    assert proc.returncode == 78
    assert proc.stderr.decode().strip().splitlines() == [f"streamguard: error: outbox.path: cannot create {blocker}: "
                                                         "File exists"]


def test_schedule_windows_take_an_explicit_time_zone():
    w = ScheduleWindow(start=dt.time(23), end=dt.time(6), timezone="Asia/Tokyo")
    tokyo = dt.datetime(2026, 1, 5, 23, 30, tzinfo=dt.timezone(dt.timedelta(hours=9))).timestamp()
    assert w.contains(tokyo) and not w.contains(tokyo - 3600)
    assert w.near(tokyo - 3600, 1800) and not w.near(tokyo - 3 * 3600, 1800)
    assert w.zone_name() == "Asia/Tokyo"
    assert ScheduleWindow(start=dt.time(1), end=dt.time(2)).zone_name().startswith("local time")
    with pytest.raises(ValueError, match='unknown time zone "Mars/Base"'):
        ScheduleWindow(start=dt.time(1), end=dt.time(2), timezone="Mars/Base")


@pytest.mark.parametrize("eps", ["0", "1e9", "-1", "nan"])
def test_one_budget_rule_everywhere(tmp_path, capsys, eps):
    from streamguard.cli import main

    for argv in (["plan", "--alpha", "0.1", "--beta", "0.2", "--epsilon", eps, "--stream"],
                 ["mqm", "--matrix", "[[0.9,0.1],[0.2,0.8]]", "--epsilon", eps, "--stream"],
                 ["mechanism", "design", "--kind", "rr", "--prior", "[0.5,0.5]", "--epsilon", eps]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--epsilon must be a number in (0, 1000] nats" in err
    if eps != "nan":  # (TOML has no bare nan)
        cfg = tmp_path / "c.toml"
        cfg.write_text(EXAMPLE.read_text().replace("epsilon = 1.0", f"epsilon = {float(eps)!r}"))
        with pytest.raises(ConfigError, match=r"streams\[occupancy\]\.epsilon: Input should be"):
            load_settings(cfg)
