"""``streamguard plan --matrix`` and ``streamguard audit --matrix`` (k-state 3R), in-process."""

from __future__ import annotations

import json
import re

import numpy as np

from streamguard.audit.brute import brute_force_leakage
from streamguard.model.chain import MarkovChain
from streamguard.privacy.channel import ChannelSequence
from streamguard.cli import main

M = "[[0.8,0.15,0.05],[0.1,0.8,0.1],[0.05,0.15,0.8]]"


def run(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_plan_matrix_json_rows_and_leakage_by_brute_force(capsys, tmp_path) -> None:
    rc, out, _ = run(capsys, "plan", "--matrix", M, "--epsilon", "1.5", "--n", "6", "--private", "2",
                     "--private", "5", "--split", "optimize", "--json")
    assert rc == 0
    doc = json.loads(out)
    red = np.array(doc["redaction"])
    assert red.shape == (6, 3) and doc["k"] == 3
    chain = MarkovChain(json.loads(M))
    for p1 in (2, 5):
        brute = brute_force_leakage(chain, ChannelSequence.from_redaction(red), p1 - 1)
        assert brute <= 1.5 * (1 + 1e-12)
        assert abs(doc["leakage"][str(p1)] - brute) <= 1e-9
    # the plan's JSON is an audit file as is (model included)
    path = tmp_path / "plan.json"
    path.write_text(out)
    rc, out, _ = run(capsys, "audit", str(path), "--brute", "--json")
    assert rc == 0
    got = json.loads(out)["leakage"]
    for p1 in ("2", "5"):
        assert abs(got[p1]["total"] - got[p1]["brute"]) <= 1e-9


def test_plan_matrix_stream_table(capsys) -> None:
    rc, out, _ = run(capsys, "plan", "--matrix", M, "--epsilon", "1", "--stream", "--json")
    assert rc == 0
    doc = json.loads(out)
    table = np.array(doc["redaction"])
    assert table.shape == (doc["left_horizon"] + doc["right_horizon"] + 1, 3)
    assert np.all(table[doc["left_horizon"]] == 1.0)  # the private record
    assert doc["leakage"] <= 1.0 * (1 + 1e-12)


def test_audit_matrix_emissions_by_enumeration_and_errors(capsys, tmp_path) -> None:
    rr = [[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]]  # randomized response, 3 outputs
    path = tmp_path / "em.json"
    path.write_text(json.dumps({"emissions": [rr] * 4, "private": [2]}))
    rc, out, _ = run(capsys, "audit", str(path), "--matrix", M, "--json")
    assert rc == 0
    assert json.loads(out)["leakage"]["2"]["total"] > np.log(8)  # more than the per-record ε
    rc, _, err = run(capsys, "plan", "--matrix", "[[1, 0], [0.5]]", "--epsilon", "1", "--stream")
    assert rc != 0 and "--matrix" in err and "\n" not in err.strip()
    rc, _, err = run(capsys, "plan", "--matrix", M, "--alpha", "0.1", "--beta", "0.2", "--epsilon", "1", "--stream")
    assert rc != 0 and "either --matrix" in err


K4 = "[[0.8, 0.15, 0.05, 0.0], [0.05, 0.8, 0.1, 0.05], [0.0, 0.1, 0.8, 0.1], [0.1, 0.0, 0.15, 0.75]]"


def _config(tmp_path, streams: str) -> str:
    path = tmp_path / "c.toml"
    path.write_text(f'device = "dev"\n[outbox]\npath = "{tmp_path / "o.sqlite"}"\n{streams}')
    return str(path)


def test_config_check_k_state_redaction_and_channel_warning(capsys, tmp_path) -> None:
    """A 4-state redaction stream is accepted and planned; a 4-state channel stream whose stream
    leakage exceeds its per-record ε is warned about (issue 12: 4.68 vs 1 went unwarned)."""
    cfg = _config(tmp_path, f"""
[[streams]]
name = "activity"
labels = ["idle", "walking", "running", "cycling"]
source = "stdin"
epsilon = 1.0
[streams.model]
matrix = {K4}

[[streams]]
name = "power"
labels = ["p0", "p1", "p2", "p3"]
source = "mqtt"
mechanism = "channel"
[streams.model]
matrix = {K4}
[streams.channel]
kind = "rr-prior"
epsilon = 1.0
prior = [0.25, 0.25, 0.25, 0.25]
""")
    rc, out, _ = run(capsys, "config", "check", cfg)
    assert rc == 0
    assert "stream activity" in out and "states 4, 3R redaction" in out and "exceeds ε" not in out
    assert re.search(r"warning: the whole stream leaks \d+\.\d+ nats about one record, more than the per-record ε=1:", out)


def test_config_refuses_a_schedule_on_a_channel_stream_and_a_non_mixing_k_state_chain(capsys, tmp_path) -> None:
    channel = """
[[streams]]
name = "power"
labels = ["p0", "p1", "p2"]
source = "mqtt"
mechanism = "channel"
schedule = [{start = "22:00", end = "06:00"}]
[streams.model]
matrix = [[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]]
[streams.channel]
kind = "rr-prior"
epsilon = 1.0
prior = [0.3333333333333333, 0.3333333333333333, 0.3333333333333334]
"""
    rc, _, err = run(capsys, "config", "check", _config(tmp_path, channel))
    assert rc != 0 and 'mechanism = "redaction"' in err
    cyclic = """
[[streams]]
name = "room"
labels = ["a", "b", "c"]
source = "mqtt"
epsilon = 1.0
[streams.model]
matrix = [[0, 1, 0], [0, 0, 1], [1, 0, 0]]
"""
    rc, _, err = run(capsys, "config", "check", _config(tmp_path, cyclic))
    assert rc != 0 and "periodic" in err
