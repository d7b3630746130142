"""``streamguard mechanism design|check`` and saved channel files (streamguard.cli.mechanism,
streamguard.perturbation.channel_file): every kind, malformed models, tampered files, exit codes."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from streamguard.cli import main
from streamguard.perturbation import Claim, Joint, PerturbationChannel
from streamguard.perturbation.channel_file import (
    FILE_KINDS,
    ChannelFileError,
    ChannelWriteError,
    document_digest,
    load_channel,
    read_document,
    save_channel,
)
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
    (["--prior", "[0.5, 0.5]", "--joint", "x.json"], "give only one of"),
    ([], "give one of --joint"),
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


def _tamper(path, edit, *, reseal):
    """Edit the saved document; ``reseal`` recomputes its digest, as a deliberate rewrite could, so
    the checks behind the digest are reached."""
    doc = json.loads(path.read_text())
    edit(doc)
    if reseal:
        doc["digest"] = document_digest(doc)
    path.write_text(json.dumps(doc))


def _set_kind(doc, kind):
    doc["channel"]["kind"] = kind


def test_check_without_a_model_uses_the_stored_one(saved, capsys):
    code, out, err = _run(capsys, "mechanism", "check", str(saved))
    assert code == 0, err
    assert "model: as stored in the file" in out and "VIOLATED" not in out
    code, out, _ = _run(capsys, "mechanism", "check", str(saved), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["verified"] is True and doc["model"] == "as stored in the file"


def test_check_without_a_model_still_refuses_an_edited_file(saved, capsys):
    _tamper(saved, lambda d: d["channel"]["claims"][0]["params"].update(eps_u=0.1), reseal=True)
    code, _, err = _run(capsys, "mechanism", "check", str(saved))
    assert code == 1 and err.startswith("streamguard: refused:") and "max-lift" in err


def test_check_with_both_models_is_an_argument_error(saved, joint_file, capsys):
    code, out, err = _run(capsys, "mechanism", "check", str(saved), "--joint", joint_file, "--prior", PRIOR)
    assert code == 2 and out == "" and "give only one of --joint" in err


@pytest.mark.parametrize("edit", [
    lambda d: _set_kind(d, "bogus"),                                      # the new-user trial
    lambda d: _set_kind(d, "watchdog"),                                   # another real kind
    lambda d: d["channel"]["params"].update(epsilon=0.01),                 # a design input
    lambda d: d["channel"]["params"].update(note="x"),
    lambda d: d["model"].update(joint=[[0.2, 0.15, 0.1, 0.05], [0.05, 0.1, 0.2, 0.15]]),
    lambda d: d["metrics"].update(ldp_s=0.001),
    lambda d: d.update(extra=1),
    lambda d: d.update(digest="sha256:" + "0" * 64),
    lambda d: d.pop("digest"),
])
def test_any_edit_breaks_the_digest(saved, joint_file, edit, capsys):
    _tamper(saved, edit, reseal=False)
    with pytest.raises(ChannelFileError, match="digest mismatch: the file was edited"):
        load_channel(saved)
    for model in ([], ["--joint", joint_file]):
        code, out, err = _run(capsys, "mechanism", "check", str(saved), *model)
        assert code == 1 and out == ""
        assert err.startswith("streamguard: refused:") and "digest mismatch: the file was edited" in err
        assert err.count("\n") == 1


def test_an_rr_channel_with_edited_params_is_refused(tmp_path, capsys):
    """The new-user trial: "epsilon": 0.01 written into an rr channel's params was accepted."""
    path = tmp_path / "rr.json"
    assert main(["mechanism", "design", "--kind", "rr", "--prior", "[0.5, 0.5]", "--epsilon", "1",
                 "--out", str(path)]) == 0
    capsys.readouterr()
    _tamper(path, lambda d: d["channel"]["params"].update(epsilon=0.01), reseal=False)
    code, _, err = _run(capsys, "mechanism", "check", str(path), "--prior", "[0.5, 0.5]")
    assert code == 1 and "digest mismatch" in err


def test_reformatting_keeps_the_digest(saved):
    """The digest is over canonical JSON: indentation and key order do not matter, values do."""
    doc = json.loads(saved.read_text())
    reordered = {k: doc[k] for k in reversed(list(doc))}
    saved.write_text(json.dumps(reordered, indent=4))
    channel, _ = load_channel(saved)
    assert channel.kind == "watchdog-subset"


def test_unknown_kind_refused_even_when_resealed(saved, capsys):
    _tamper(saved, lambda d: _set_kind(d, "bogus"), reseal=True)
    with pytest.raises(ChannelFileError, match=r"channel\.kind: unknown kind 'bogus'"):
        load_channel(saved)
    code, _, err = _run(capsys, "mechanism", "check", str(saved))
    assert code == 1 and "unknown kind 'bogus'" in err


def test_file_kinds_are_the_kinds_designers_make():
    assert set(FILE_KINDS) == set(KINDS) | {"direct-eps"}


def test_save_refuses_an_unknown_kind(tmp_path):
    joint = Joint(np.array(JOINT_A))
    ch = PerturbationChannel("bogus", np.full((4, 4), 0.25), "x", 2, 4, (0, 1, 2, 3),
                             (Claim("ldp_s", {"epsilon": 1.0}),))
    with pytest.raises(ChannelFileError, match="unknown kind 'bogus'"):
        save_channel(tmp_path / "x.json", ch, joint)
    assert not list(tmp_path.iterdir())


def test_direct_eps_channel_round_trips(tmp_path):
    """"direct-eps" is made only by linear_reduction.direct_eps_lp (not the registry); its files load."""
    from streamguard.perturbation.linear_reduction import direct_eps_lp

    joint = Joint(np.array(JOINT_A))
    ch = direct_eps_lp(joint, 1.0)
    save_channel(tmp_path / "d.json", ch, joint)
    loaded, stored = load_channel(tmp_path / "d.json")
    assert loaded.kind == "direct-eps" and loaded.matrix.tolist() == ch.matrix.tolist()
    assert np.array_equal(stored.p, joint.p)


@pytest.mark.parametrize("edit, match", [
    # publish symbol 0 alone instead of merging it with 3: still a channel, but the group's max-lift
    # l(1, {3}) = 1.6 breaks ε_u = 0.35
    (lambda d: d["channel"].update(channel=[[0, 0, 0, 1], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]],
                                   outputs=[1, 2, [0, 3], 0]), r"alip.*max-lift.*VIOLATED.*realised 0\.47"),
    (lambda d: d["channel"].update(channel=[[1, 0, 0, 0]] + d["channel"]["channel"][1:]), "matrix of numbers"),
    (lambda d: d["channel"]["claims"][0]["params"].update(eps_l=0.01), r"min-lift.*VIOLATED"),
    (lambda d: d["metrics"].update(ldp_s=0.001), "metrics: stored ldp_s"),
    (lambda d: d.update(version=1), "unsupported version 1"),  # version 1 had no digest
    (lambda d: d.update(version=3), "unsupported version 3"),
    (lambda d: d["channel"].update(claims=[]), "states no claim"),
    (lambda d: d["channel"].update(channel=[[0.5, 0.6, 0]] + d["channel"]["channel"][1:]), "row 0 sums to 1.1"),
    (lambda d: d["channel"].update(outputs=[7] + d["channel"]["outputs"][1:]), "symbols are states"),
    (lambda d: d.update(model={"joint": [[0.5, 0.5]]}), r"\|X\|"),
])
def test_tampered_file_refused(saved, joint_file, edit, match, capsys):
    """Behind the digest, every field is still checked: a resealed edit is refused by name."""
    _tamper(saved, edit, reseal=True)
    with pytest.raises((ClaimViolation, ChannelFileError), match=match):
        load_channel(saved)
    code, _, err = _run(capsys, "mechanism", "check", str(saved), "--joint", joint_file)
    assert code == 1 and err.startswith("streamguard: refused:") and err.count("\n") == 1


def test_tampered_claim_exit_1(saved, joint_file, capsys):
    _tamper(saved, lambda d: d["channel"]["claims"][0]["params"].update(eps_u=0.1), reseal=True)
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
    ch = PerturbationChannel("linear", np.eye(4), "x", 2, 4, (0, 1, 2, 3), (Claim("ldp_s", {"epsilon": 1.0}),))
    with pytest.raises(ClaimViolation, match=r"ldp_s\(epsilon=1\).*VIOLATED.*realised 1\.386"):
        save_channel(tmp_path / "x.json", ch, joint)
    assert not (tmp_path / "x.json").exists()


def test_document_reads_back_bit_for_bit(saved):
    doc = json.loads(saved.read_text())
    channel, _ = read_document(doc)
    assert channel.matrix.tolist() == doc["channel"]["channel"]
    assert doc["metrics"]["ldp_x"] == "inf" and math.isfinite(doc["metrics"]["ldp_s"])


@pytest.mark.parametrize("prior, match", [
    ("[0.5, 0.6]", r"prior: entries sum to 1\.1, not 1"),
    ("[0.5, -0.1, 0.6]", "prior: has negative entries"),
    ("[NaN, 0.5]", "prior: contains NaN or infinity"),
    ("[1, 0]", r"prior: P\(x=1\) is 0"),
])
def test_bad_prior_is_named_as_the_prior(prior, match, capsys):
    code, out, err = _run(capsys, "mechanism", "design", "--kind", "rr", "--prior", prior, "--epsilon", "1")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert re.search(match, err) and "joint" not in err


def test_out_in_a_missing_directory_names_the_path(tmp_path, capsys):
    target = tmp_path / "nonexistent" / "x.json"
    code, out, err = _run(capsys, "mechanism", "design", "--kind", "rr", "--prior", "[0.5, 0.5]", "--epsilon", "1",
                          "--out", str(target))
    assert code == 2 and out == ""
    assert err == f"streamguard: error: --out {target}: directory does not exist\n"
    assert not (tmp_path / "nonexistent").exists()


def test_out_onto_a_directory_leaves_no_temporary_file(tmp_path, capsys):
    target = tmp_path / "d"
    target.mkdir()
    code, _, err = _run(capsys, "mechanism", "design", "--kind", "rr", "--prior", "[0.5, 0.5]", "--epsilon", "1",
                        "--out", str(target))
    assert code == 2 and err.startswith(f"streamguard: error: --out {target}: ") and ".d." not in err
    assert [p.name for p in tmp_path.iterdir()] == ["d"] and not list(target.iterdir())


def test_save_channel_write_error_names_path_and_reason(tmp_path):
    joint = Joint.from_prior([0.5, 0.5])
    from streamguard.perturbation.designers import design

    with pytest.raises(ChannelWriteError) as info:
        save_channel(tmp_path / "missing" / "x.json", design("rr", joint, 1.0), joint)
    assert info.value.reason == "directory does not exist" and info.value.path == str(tmp_path / "missing" / "x.json")
