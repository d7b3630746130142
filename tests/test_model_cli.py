"""The command line of issue 11: calibrate, plan/audit --model, mqm --model, config check."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from streamguard.audit.exact import exact_leakage
from streamguard.model.chain import MarkovChain
from streamguard.privacy.channel import ChannelSequence
from streamguard.cli import main
from streamguard.model import modelset

TRUE = MarkovChain.binary(0.05, 0.1)


def _recording(tmp_path: Path, n: int = 4000) -> Path:
    rng = np.random.default_rng(3)
    x, lines = 0, []
    for t in range(n):
        lines.append(json.dumps({"value": ["off", "on"][x], "ts": 1_764_000_000 + 60 * t}))
        x = int(rng.random() < TRUE.alpha) if x == 0 else int(rng.random() >= TRUE.beta)
    lines[500] = json.dumps({"value": "sideways", "ts": 1_764_000_000 + 60 * 500})  # an unknown state: a break
    f = tmp_path / "rec.jsonl"
    f.write_text("\n".join(lines) + "\n")
    return f


def test_calibrate_text_json_and_config(tmp_path, capsys):
    rec = _recording(tmp_path)
    assert main(["calibrate", str(rec), "--labels", "off,on", "--sample-period", "60", "--model-class",
                 "homogeneous", "--out", str(tmp_path / "M.json")]) == 0
    text = capsys.readouterr().out
    assert "unknown-state: 1" in text and "binary box" in text and "sideways" not in text
    conf = tmp_path / "c.toml"
    conf.write_text('device = "d"\n[broker]\nhost = "127.0.0.1"\n[[streams]]\nname = "s"\nlabels = ["off", "on"]\n'
                    'epsilon = 1.0\nsample_period = 60\n[streams.model]\nfile = "M.json"\n')
    assert main(["calibrate", str(rec), "--config", str(conf), "--stream", "s", "--model-class", "homogeneous",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    ms = modelset.from_json(doc)
    assert ms.box == modelset.load(tmp_path / "M.json").box  # the config gave the same states and period
    assert doc["calibration"]["transitions"] == 3999 - 2 and ms.contains(TRUE)
    assert main(["calibrate", str(rec), "--config", str(conf), "--stream", "nope"]) == 2
    assert main(["calibrate", str(rec)]) == 2


def test_plan_and_audit_with_a_model_set(tmp_path, capsys):
    model = tmp_path / "M.json"
    assert main(["calibrate", str(_recording(tmp_path)), "--labels", "off,on", "--model-class", "homogeneous",
                 "--out", str(model), "--json"]) == 0
    capsys.readouterr()
    ms = modelset.load(model)
    assert main(["plan", "--model", str(model), "--epsilon", "1", "--stream", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["worst_case"]["bound"] <= 1.0 and doc["utility_cost_per_mark"] >= 0
    assert doc["point_estimate_plan"]["worst_case_over_set"]["bound"] > 1.0  # the point plan is not robust
    table = np.array(doc["redaction"])
    window = np.vstack([np.zeros((1, 2)), table, np.zeros((1, 2))])
    (a0, a1), (b0, b1) = ms.box
    for a in (a0, a1):
        for b in (b0, b1):
            lk = exact_leakage(MarkovChain.binary(a, b), ChannelSequence.from_redaction(window),
                               -doc["offsets"][0] + 1).total
            assert lk <= doc["worst_case"]["bound"] + 1e-12
    assert main(["plan", "--model", str(model), "--epsilon", "1", "--n", "40", "--private", "20", "--json"]) == 0
    fin = json.loads(capsys.readouterr().out)
    assert fin["worst_case"]["bound"] <= 1.0 and fin["utility"] <= fin["point_estimate_utility"]
    (tmp_path / "plan.json").write_text(json.dumps(fin))
    assert main(["audit", str(tmp_path / "plan.json"), "--model", str(model), "--private", "20", "--json"]) == 0
    aud = json.loads(capsys.readouterr().out)
    assert aud["worst_case"]["20"]["bound"] == pytest.approx(fin["worst_case"]["bound"], rel=1e-9)
    assert main(["plan", "--model", str(model), "--alpha", "0.1", "--epsilon", "1", "--stream"]) == 2


def test_mqm_takes_a_finite_set_and_refuses_a_region(tmp_path, capsys):
    fin = tmp_path / "F.json"
    members = (MarkovChain.binary(0.1, 0.2), MarkovChain.binary(0.2, 0.3))
    modelset.ModelSet("finite", 2, members=members).write(fin)
    assert main(["mqm", "--model", str(fin), "--epsilon", "1", "--stream", "--json"]) == 0
    via_set = json.loads(capsys.readouterr().out)["sigma"]
    args = [a for m in members for a in ("--matrix", json.dumps(m.matrix.tolist()))]
    assert main(["mqm", *args, "--epsilon", "1", "--stream", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sigma"] == via_set
    box = tmp_path / "B.json"
    modelset.ModelSet("box", 2, box=((0.1, 0.2), (0.2, 0.3))).write(box)
    assert main(["mqm", "--model", str(box), "--epsilon", "1", "--stream"]) == 2
    assert "not a finite" in capsys.readouterr().err


def test_config_refuses_what_a_model_set_cannot_back(tmp_path):
    from streamguard.config import ConfigError, load_settings

    fin = tmp_path / "K3.json"
    modelset.ModelSet("finite", 3, members=(MarkovChain([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]]),)).write(fin)
    box = tmp_path / "B.json"
    modelset.ModelSet("box", 2, box=((0.1, 0.2), (0.2, 0.3))).write(box)
    base = 'device = "d"\n[broker]\nhost = "127.0.0.1"\n[[streams]]\nname = "s"\nepsilon = 1.0\n'
    cases = [(f'labels = ["a", "b", "c"]\n[streams.model]\nfile = "{fin}"\n', "row-wise region"),
             ('labels = ["a", "b"]\naggregates = [{query = "histogram", window = 10, epsilon = 1.0}]\n'
              f'[streams.model]\nfile = "{box}"\n', "max-influence"),
             ('labels = ["a", "b"]\nmechanism = "channel"\n[streams.channel]\nkind = "rr"\nepsilon = 1.0\nprior = [0.5, 0.5]\n'
              f'[streams.model]\nfile = "{box}"\n', "not certified over a region"),
             (f'labels = ["a", "b"]\n[streams.model]\nfile = "{box}"\nalpha = 0.1\nbeta = 0.2\n', "exactly one"),
             (f'labels = ["a", "b"]\n[streams.model]\nfile = "{tmp_path / "missing.json"}"\n', "model"),
             ('labels = ["a", "b"]\nmechanism = "channel"\ndrift_guard = true\n[streams.model]\nalpha = 0.1\n'
              'beta = 0.2\n', "drift_guard")]
    for body, words in cases:
        conf = tmp_path / "c.toml"
        conf.write_text(base + body)
        with pytest.raises(ConfigError, match=words):
            load_settings(conf)
    conf.write_text(base + f'labels = ["a", "b"]\n[streams.model]\nfile = "{box}"\n')
    s = load_settings(conf)
    assert s.streams[0].model_set().box == ((0.1, 0.2), (0.2, 0.3))


def test_plan_model_stream_text_says_what_the_json_holds(tmp_path, capsys):
    """The text report of ``plan --model --stream`` (binary set) states the figures of its JSON: the
    certified worst case, the design member and horizons, and the point estimate's own plan over
    the set, flagged '> ε' exactly when its worst case exceeds ε."""
    model = tmp_path / "M.json"
    assert main(["calibrate", str(_recording(tmp_path)), "--labels", "off,on", "--model-class", "homogeneous",
                 "--out", str(model), "--json"]) == 0
    capsys.readouterr()
    assert main(["plan", "--model", str(model), "--epsilon", "1", "--stream", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert main(["plan", "--model", str(model), "--epsilon", "1", "--stream"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "robust 3R stream plan over the model set (box), ε=1 nats, design optimal"
    assert f"≤ {doc['worst_case']['bound']:.9f} nats" in lines[1]
    m = doc["design_member"]
    assert lines[2] == (f"designed on α={m['alpha']:.6g}, β={m['beta']:.6g} with budget {doc['design_budget']:.6g}; "
                        f"horizons left {doc['horizons']['left']} / right {doc['horizons']['right']}")
    point = doc["point_estimate_plan"]
    worst = point["worst_case_over_set"]["bound"]
    assert f"worst case over the set is {worst:.6g} nats{' > ε' if worst > 1 else ''};" in lines[4]
    assert f"robustness costs {doc['utility_cost_per_mark']:.4f} redactions per mark" in lines[4]
