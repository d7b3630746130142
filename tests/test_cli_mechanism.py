"""``streamguard mechanism design|check`` and saved channel files (streamguard.cli_mechanism,
streamguard.perturbation.channel_file): every kind, malformed models, tampered files, exit codes."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from streamguard.cli import main
from streamguard.perturbation import Claim, Joint, PerturbationChannel
from streamguard.perturbation.channel_file import ChannelFileError, load_channel, read_document, save_channel
from streamguard.perturbation.designers import DESIGNERS, KINDS
from streamguard.perturbation.verify import ClaimViolation

JOINT_A = [[0.20, 0.15, 0.10, 0.05], [0.05, 0.10, 0.15, 0.20]]  # notes/003 §5.1 Case A
PRIOR = "[0.4, 0.3, 0.2, 0.1]"
STICKY4 = "[[0.9,0.05,0.03,0.02],[0.05,0.9,0.03,0.02],[0.02,0.03,0.9,0.05],[0.02,0.03,0.05,0.9]]"


@pytest.fixture()
def joint_file(tmp_path):
    path = tmp_path / "joint.json"
    path.write_text(json.dumps({"joint": JOINT_A}))
    return str(path)


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _model_args(kind, joint_file):
    return ["--prior", PRIOR] if DESIGNERS[kind].model == "prior" else ["--joint", joint_file]


@pytest.mark.parametrize("kind", KINDS)
def test_design_every_kind_json(kind, joint_file, capsys):
    code, out, err = _run(capsys, "mechanism", "design", "--kind", kind, *_model_args(kind, joint_file),
                          "--epsilon", "2.5", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["kind"] == kind and doc["verified"] is True
    assert {"ldp_s", "max_lift", "min_lift", "mi_sy", "mi_xy"} <= set(doc["metrics"])
    rows = 4 if DESIGNERS[kind].inputs == "x" else 8
    M = np.array(doc["channel"])
    assert M.shape == (rows, len(doc["outputs"])) and np.allclose(M.sum(axis=1), 1.0)
    assert all(isinstance(o, int) or isinstance(o, list) for o in doc["outputs"])


def test_design_reference_aorr_table(joint_file, capsys):
    """notes/003 §5.1: AORR at (0.5, 0.5) has I(X;Y) = 1.156687; the table shows claims and metrics."""
    code, out, _ = _run(capsys, "mechanism", "design", "--kind", "aorr", "--joint", joint_file, "--epsilon", "1")
    assert code == 0
    assert "I(X;Y) 1.15669" in out and "[quantised] alip" in out and "holds" in out
    code, out, _ = _run(capsys, "mechanism", "design", "--kind", "aorr", "--joint", joint_file, "--epsilon", "1",
                        "--json")
    assert json.loads(out)["metrics"]["mi_xy"] == pytest.approx(1.156687, abs=2e-6)


def test_design_with_chain_reports_stream_leakage(capsys):
    code, out, _ = _run(capsys, "mechanism", "design", "--kind", "rr", "--prior", "[0.5, 0.5]", "--epsilon", "1",
                        "--chain", "[[0.95, 0.05], [0.1, 0.9]]", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["claims"][0] == {"notion": "ldp_x", "params": {"epsilon": 1.0}}
    assert doc["stream_leakage"]["method"] == "exact" and doc["stream_leakage"]["leakage"] > 1.0 + 1.0
    code, out, _ = _run(capsys, "mechanism", "design", "--kind", "rr", "--prior", "[0.5, 0.5]", "--epsilon", "1",
                        "--chain", "[[0.95, 0.05], [0.1, 0.9]]")
    assert "not the stream's leakage" in out


@pytest.mark.parametrize("joint, match", [
    ([[0.5, -0.1], [0.3, 0.3]], "negative"),
    ([[0.5, 0.1], [0.3, 0.3]], "sum to 1.2"),
    ([[0.5, 0.0], [0.5, 0.0]], r"zero marginal P_X\(x=1\)"),
    ([[0.5, 0.5], [0.0, 0.0]], r"zero marginal P_S\(s=1\)"),
    ([[0.5, "a"], [0.3, 0.3]], "not a numeric matrix"),
])
def test_malformed_joint_exit_2(joint, match, tmp_path, capsys):
    path = tmp_path / "j.json"
    path.write_text(json.dumps({"joint": joint}))
    code, out, err = _run(capsys, "mechanism", "design", "--kind", "watchdog", "--joint", str(path), "--epsilon", "1")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert re.search(match, err)


@pytest.mark.parametrize("argv, match", [
    (["--joint", "/nonexistent/j.json"], "No such file"),
    (["--prior", "[0.5, 0.5"], "not valid JSON"),
    (["--prior", "[0.5, 0.5]", "--joint", "x.json"], "exactly one of"),
    ([], "exactly one of"),
    (["--prior", "[0.5, 0.5]", "--lambda", "0.3"], "lambda does not apply"),
    (["--prior", "[0.5, 0.5]", "--chain", "[[1.2, -0.2], [0.5, 0.5]]"], "--chain"),
])
def test_bad_arguments_exit_2(argv, match, capsys):
    code, _, err = _run(capsys, "mechanism", "design", "--kind", "rr", "--epsilon", "1", *argv)
    assert code == 2 and match in err


def test_prior_for_a_joint_kind_refused(capsys):
    code, _, err = _run(capsys, "mechanism", "design", "--kind", "srr", "--prior", PRIOR, "--epsilon", "1")
    assert code == 2 and "give a joint, not a prior" in err


# ---------------------------------------------------------------------------------------------
# Saved files: round trip, check, tampering
# ---------------------------------------------------------------------------------------------


@pytest.fixture()
def saved(tmp_path, joint_file, capsys):
    out = tmp_path / "ch.json"
    code, _, err = _run(capsys, "mechanism", "design", "--kind", "watchdog-subset", "--joint", joint_file,
                        "--epsilon", "1", "--lambda", "0.65", "--out", str(out))
    assert code == 0, err
    return out


def test_round_trip_and_check(saved, joint_file, capsys):
    channel, joint = load_channel(saved)
    assert channel.kind == "watchdog-subset" and np.array_equal(joint.p, np.array(JOINT_A))
    assert channel.claims == (Claim("alip", {"eps_l": 0.65, "eps_u": 0.35}),)
    code, out, _ = _run(capsys, "mechanism", "check", str(saved), "--joint", joint_file)
    assert code == 0 and "model: as stored in the file" in out


def _tamper(path, edit):
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("edit, match", [
    # publish symbol 0 alone instead of merging it with 3: still a channel, but the group's max-lift
    # l(1, {3}) = 1.6 breaks ε_u = 0.35
    (lambda d: d["channel"].update(channel=[[0, 0, 0, 1], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]],
                                   outputs=[1, 2, [0, 3], 0]), r"alip.*max-lift.*VIOLATED.*realised 0\.47"),
    (lambda d: d["channel"].update(channel=[[1, 0, 0, 0]] + d["channel"]["channel"][1:]), "matrix of numbers"),
    (lambda d: d["channel"]["claims"][0]["params"].update(eps_l=0.01), r"min-lift.*VIOLATED"),
    (lambda d: d["metrics"].update(ldp_s=0.001), "metrics: stored ldp_s"),
    (lambda d: d.update(version=2), "unsupported version 2"),
    (lambda d: d["channel"].update(claims=[]), "states no claim"),
    (lambda d: d["channel"].update(channel=[[0.5, 0.6, 0]] + d["channel"]["channel"][1:]), "row 0 sums to 1.1"),
    (lambda d: d["channel"].update(outputs=[7] + d["channel"]["outputs"][1:]), "symbols are states"),
    (lambda d: d.update(model={"joint": [[0.5, 0.5]]}), r"\|X\|"),
])
def test_tampered_file_refused(saved, joint_file, edit, match, capsys):
    _tamper(saved, edit)
    with pytest.raises((ClaimViolation, ChannelFileError), match=match):
        load_channel(saved)
    code, _, err = _run(capsys, "mechanism", "check", str(saved), "--joint", joint_file)
    assert code == 1 and err.startswith("streamguard: refused:") and err.count("\n") == 1


def test_tampered_claim_exit_1(saved, joint_file, capsys):
    _tamper(saved, lambda d: d["channel"]["claims"][0]["params"].update(eps_u=0.1))
    code, _, err = _run(capsys, "mechanism", "check", str(saved), "--joint", joint_file)
    assert code == 1 and err.startswith("streamguard: refused:") and "max-lift" in err and "output y=" in err


def test_check_under_another_model(tmp_path, capsys):
    """E_i is ε-identifiable only under its own prior: checked under another one, it is refused."""
    out = tmp_path / "ei.json"
    assert main(["mechanism", "design", "--kind", "rr-prior", "--prior", PRIOR, "--epsilon", "2",
                 "--out", str(out)]) == 0
    capsys.readouterr()
    code, _, _ = _run(capsys, "mechanism", "check", str(out), "--prior", PRIOR)
    assert code == 0
    code, out_text, err = _run(capsys, "mechanism", "check", str(out), "--prior", "[0.1, 0.2, 0.3, 0.4]")
    assert code == 1 and "identifiability" in err and "differs from the one stored" in out_text


def test_check_missing_or_invalid_file(tmp_path, joint_file, capsys):
    code, _, err = _run(capsys, "mechanism", "check", str(tmp_path / "none.json"), "--joint", joint_file)
    assert code == 2 and "no such file" in err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    code, _, err = _run(capsys, "mechanism", "check", str(bad), "--joint", joint_file)
    assert code == 1 and "not valid JSON" in err


def test_save_refuses_a_violating_channel(tmp_path):
    joint = Joint(np.array(JOINT_A))
    ch = PerturbationChannel("test", np.eye(4), "x", 2, 4, (0, 1, 2, 3), (Claim("ldp_s", {"epsilon": 1.0}),))
    with pytest.raises(ClaimViolation, match=r"ldp_s\(epsilon=1\).*VIOLATED.*realised 1\.386"):
        save_channel(tmp_path / "x.json", ch, joint)
    assert not (tmp_path / "x.json").exists()


def test_document_reads_back_bit_for_bit(saved):
    doc = json.loads(saved.read_text())
    channel, _ = read_document(doc)
    assert channel.matrix.tolist() == doc["channel"]["channel"]
    assert doc["metrics"]["ldp_x"] == "inf" and math.isfinite(doc["metrics"]["ldp_s"])
