"""``config check`` explains a configuration (issue 13): each stream's model, folded tables, plain
numbers (no Python reprs, no 16-digit floats), and warnings for max_hold, channel stream leakage
against the per-record ε, and noisy aggregates."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from streamguard.cli import main
from streamguard.cli.config_check import fold_rows

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _check(capsys, *files):
    rc = main(["config", "check", *map(str, files)])
    out = capsys.readouterr().out
    assert not re.search(r"\d\.\d{9,}", out.replace("exact leakage", "")), out  # no 16-digit floats
    assert "{'" not in out and "[[" not in out  # no Python reprs
    return rc, out


def test_fold_rows_collapses_runs_and_folds_long_tables():
    offsets = np.arange(-3, 4)
    rows = np.array([[0.5, 1], [1, 1], [1, 1], [1, 1], [1, 1], [1, 1], [0.5, 1]])
    assert fold_rows(offsets, rows) == "-3 (0.5, 1), -2…+2 (1, 1), +3 (0.5, 1)"
    long = np.column_stack([np.linspace(0.1, 0.9, 20), np.ones(20)])
    text = fold_rows(np.arange(20), long, limit=4)
    assert text.startswith("+0 (0.1, 1), +1 (0.1421, 1), … 16 more runs …") and text.endswith("+19 (0.9, 1)")


def test_models_claims_and_the_channel_warning(capsys):
    rc, out = _check(capsys, EXAMPLES / "aggregates-and-channels.toml")
    assert rc == 0
    assert "model (as given): binary chain α=0.05, β=0.2" in out
    assert "verified claims: identifiability ε=1; ldp_x ε=1.405; distortion D=0.4239" in out
    assert "warning: the whole stream leaks 4.724 nats about one record, more than the per-record ε=1" in out


def test_max_hold_noisy_aggregate_estimated_model_and_time_zone(tmp_path, capsys):
    import json

    from firmware_sim import MarkovSource
    from streamguard import MarkovChain

    states = MarkovSource(MarkovChain.binary(0.1, 0.3), 4).states(5000)
    (tmp_path / "cal.jsonl").write_text("\n".join(json.dumps({"value": ("off", "on")[s]}) for s in states))
    cfg = tmp_path / "c.toml"
    cfg.write_text("""
[outbox]
path = "state/outbox.sqlite"
[[streams]]
name = "door"
labels = ["off", "on"]
source = "sim"
sim_rate = 2.0
epsilon = 1.0
max_hold = 1.0
[streams.model]
calibration = "cal.jsonl"
[[streams.schedule]]
start = "22:00"
end = "06:00"
timezone = "Europe/Berlin"
[[streams]]
name = "motion"
labels = ["off", "on"]
source = "sim"
epsilon = 1.0
[streams.model]
alpha = 0.1
beta = 0.3
[[streams.aggregates]]
query = "count"
state = "on"
window = 10
epsilon = 0.5
""")
    rc, out = _check(capsys, cfg)
    assert rc == 0
    assert re.search(rf"model \(estimated from {re.escape(str(tmp_path / 'cal.jsonl'))}\): binary chain α=0\.(09|1)", out)
    assert re.search(r"warning: max_hold 1 s cannot cover delay \+ 1 = (\d+) frame intervals of 0\.5 s", out)
    assert "warning: aggregate count: noise ±" in out and "is large against the window of 10 positions" in out
    assert "schedule: 22:00–06:00 (Europe/Berlin)" in out


def test_an_unwritable_state_path_fails_the_check(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    cfg = tmp_path / "c.toml"
    cfg.write_text((EXAMPLES / "streamguard.toml").read_text().replace("/var/lib/streamguard/outbox.sqlite",
                                                                       "file/outbox.sqlite"))
    rc, out = _check(capsys, cfg)
    assert rc == 78 and "keys valid, but the daemon cannot start as this user" in out
    assert "  error: outbox.path:" in out and ": valid —" not in out


def test_the_group_commit_and_what_a_power_cut_loses_are_said(tmp_path, capsys):
    """``[outbox] commit_delay_ms`` trades durability of acknowledged input for CPU: the check says
    so when it is set, and says nothing when it is 0 (the default)."""
    text = (EXAMPLES / "streamguard.toml").read_text().replace("/var/lib/streamguard/outbox.sqlite",
                                                               str(tmp_path / "outbox.sqlite"))
    (tmp_path / "off.toml").write_text(text)
    assert "commit_delay_ms = 0 " in text
    (tmp_path / "on.toml").write_text(text.replace("commit_delay_ms = 0 ", "commit_delay_ms = 50 "))
    rc, out = _check(capsys, tmp_path / "off.toml")
    assert rc == 0 and "group commit" not in out
    rc, out = _check(capsys, tmp_path / "on.toml")
    assert rc == 0
    assert "outbox group commit: 50 ms" in out and "a power cut loses up to that much acknowledged input" in out
