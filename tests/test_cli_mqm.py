"""``streamguard mqm``: noise scales vs the library and notes/002 §7, windowed releases, bad arguments."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import numpy as np
import pytest

from streamguard import MarkovChain
from streamguard.cli import main
from streamguard.quilt import QuiltModel, sigma_inf, sigma_max
from streamguard.quilt.accountant import QuiltAccountant
from streamguard.quilt.noise import DiscreteLaplace
from streamguard.sampling import bit_source

C1 = "[[0.9,0.1],[0.2,0.8]]"
C2 = "[[0.8,0.2],[0.2,0.8]]"
C4 = "[[0.8,0.15,0.05],[0.1,0.8,0.1],[0.05,0.15,0.8]]"


def run(capsys, *args: str, stdin: str | None = None, monkeypatch=None) -> tuple[int, str, str]:
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    rc = main(["mqm", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def scale_json(capsys, *args: str) -> dict:
    rc, out, err = run(capsys, *args, "--json")
    assert rc == 0, err
    return json.loads(out)


# ------------------------------------------------------------------------------ scale form


def test_json_sigma_and_witness_equal_the_library_and_notes_C1(capsys):
    doc = scale_json(capsys, "--matrix", C1, "--epsilon", "1", "--stream")
    model = QuiltModel(MarkovChain(np.array(json.loads(C1))), "stat")
    lib = sigma_inf(model, 1.0)
    assert doc["sigma"] == lib.sigma and doc["witness"] == lib.witness.as_dict()
    assert doc["model"] == model.identifier and doc["mode"] == "stat" and doc["t_independent"] is True
    # notes/002 §7: C1, E-stat, ε = 1, stream → 22.2984 [(9,9), .2376]
    assert doc["sigma"] == pytest.approx(22.2984, abs=1e-4)
    w = doc["witness"]
    assert (w["a"], w["b"], w["card"]) == (9, 9, 17) and w["e"] == pytest.approx(0.2376, abs=1e-4)
    assert set(w) >= {"i", "a", "b", "card", "e"}


@pytest.mark.parametrize("args,sigma,ab", [
    (("--T", "10"), 10.0, (None, None)),  # short chain: the empty quilt, T/ε
    (("--T", "50"), 22.2984, (9, 9)),  # saturated (saturation length 23 at ε = 1)
    (("--stream", "--influence", "supq"), 23.8441, (10, 9)),  # σ̄_supq
    (("--stream", "--influence", "approx"), 42.2865, (19, 16)),
    (("--stream", "--influence", "approx-rev"), 35.7500, None),
])
def test_notes_reference_scales_for_C1(capsys, args, sigma, ab):
    doc = scale_json(capsys, "--matrix", C1, "--epsilon", "1", *args)
    assert doc["sigma"] == pytest.approx(sigma, abs=1e-4)
    if ab is not None:
        assert (doc["witness"]["a"], doc["witness"]["b"]) == ab


def test_other_chains_and_epsilons_from_notes(capsys):
    assert scale_json(capsys, "--matrix", C1, "--epsilon", "0.5", "--stream")["sigma"] == pytest.approx(54.9037, abs=1e-4)
    assert scale_json(capsys, "--matrix", C2, "--epsilon", "2", "--stream")["sigma"] == pytest.approx(4.4556, abs=1e-4)
    doc = scale_json(capsys, "--matrix", C4, "--epsilon", "1", "--stream")
    assert doc["sigma"] == pytest.approx(29.5257, abs=1e-4) and (doc["witness"]["a"], doc["witness"]["b"]) == (12, 12)


def test_repeated_matrix_is_a_set_and_the_worst_chain_wins(capsys):
    both = scale_json(capsys, "--matrix", C2, "--matrix", C1, "--epsilon", "1", "--stream")
    assert both["sigma"] == pytest.approx(22.2984, abs=1e-4) and both["witness"]["theta"] == 1
    assert len(both["description"]["chains"]) == 2


def test_initial_law_means_mode_q_and_matches_the_library(capsys):
    doc = scale_json(capsys, "--matrix", C1, "--epsilon", "1", "--T", "40", "--initial", "[0.1, 0.9]")
    lib = sigma_max(QuiltModel(MarkovChain(np.array(json.loads(C1)), [0.1, 0.9]), "q"), 1.0, 40)
    assert doc["mode"] == "q" and doc["sigma"] == lib.sigma and doc["witness"] == lib.witness.as_dict()


def test_human_readable_output(capsys):
    rc, out, _ = run(capsys, "--matrix", C1, "--epsilon", "1", "--stream")
    assert rc == 0 and "σ = 22.298361" in out and "a = 9, b = 9" in out
    rc, out, _ = run(capsys, "--matrix", C1, "--epsilon", "1", "--T", "10")
    assert rc == 0 and "a = ⊥, b = ⊥" in out and "T = 10" in out


@pytest.mark.parametrize("args,fragment", [
    (("--matrix", "[[0.9,0.1],[0.2", "--epsilon", "1", "--stream"), "--matrix #1: not valid JSON"),
    (("--matrix", "[[0.9,0.2],[0.2,0.8]]", "--epsilon", "1", "--stream"), "--matrix #1: transition matrix: not row-stochastic"),
    (("--matrix", C1, "--matrix", "[[1]]", "--epsilon", "1", "--stream"), "--matrix #2"),
    (("--matrix", C1, "--epsilon", "1"), "give --T N"),
    (("--matrix", C1, "--epsilon", "0", "--stream"), "--epsilon must be"),
    (("--matrix", C1, "--epsilon", "1", "--T", "0"), "--T must be"),
    (("--matrix", C1, "--epsilon", "1", "--stream", "--initial", "[0.5,0.5]"), "length-independent"),
    (("--matrix", C1, "--epsilon", "1", "--stream", "--influence", "stat", "--initial", "[0.5,0.5]"), "initial law only applies"),
    (("--matrix", "[[0,1],[1,0]]", "--epsilon", "1", "--stream"), "periodic"),
    (("--matrix", C1, "--epsilon", "1", "--stream", "--window", "3"), "--window needs --release"),
])
def test_bad_arguments_exit_2_with_one_line(capsys, args, fragment):
    rc, out, err = run(capsys, *args)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("streamguard: error: ") and fragment in err


# ------------------------------------------------------------------------------ release form


def _states(n: int, seed: int = 0) -> list[int]:
    rng = np.random.default_rng(seed)
    x, out = 0, []
    P = np.array(json.loads(C1))
    for _ in range(n):
        out.append(x)
        x = int(rng.random() < P[x, 1]) if x == 0 else int(rng.random() >= P[1, 0])
    return out


def test_tumbling_histograms_with_seed(capsys, monkeypatch):
    states = _states(203)
    lines = "\n".join(str(s) if i % 2 else json.dumps({"state": s}) for i, s in enumerate(states)) + "\n"
    rc, out, err = run(capsys, "--matrix", C1, "--epsilon", "1", "--release", "histogram", "--window", "10",
                       "--seed", "7", stdin=lines, monkeypatch=monkeypatch)
    assert rc == 0, err
    docs = [json.loads(line) for line in out.splitlines()]
    windows, summary = docs[:-1], docs[-1]
    assert len(windows) == 20 and summary["summary"] and summary["unreleased_tail"] == 3
    sigma = sigma_inf(QuiltModel(MarkovChain(np.array(json.loads(C1))), "stat"), 1.0).sigma
    # the noise each window carries is the seeded source's discrete Laplace draws of scale 2σ
    law, src = DiscreteLaplace.at_least(2 * sigma), bit_source(7)
    noise = [law.sample(2, src) for _ in range(20)]
    for n, doc in enumerate(windows):
        lo = 10 * n
        assert doc["window"] == [lo + 1, lo + 10] and (doc["lo"], doc["hi"]) == (lo + 1, lo + 10)
        exact = np.bincount(states[lo : lo + 10], minlength=2)
        np.testing.assert_array_equal(np.array(doc["values"]) - exact, noise[n])
        assert doc["beta"] == pytest.approx(2 * sigma) and doc["epsilon"] == 1.0 and doc["deterministic"] is True
    # tumbling windows all at σ_∞(ε): the accountant gives exactly ε on a long stream (notes §4.7 duality)
    acc = QuiltAccountant(QuiltModel(MarkovChain(np.array(json.loads(C1))), "stat"))
    for n in range(20):
        acc.record(10 * n, 10 * n + 9, 1 / sigma)
    assert summary["eps_max"] == pytest.approx(acc.eps_max(), abs=1e-12)
    assert summary["eps_max"] <= 1.0 + 1e-9 and summary["eps_max"] == pytest.approx(1.0, abs=1e-6)
    assert summary["deterministic"] is True and summary["records"] == 203


def test_count_and_mean_releases_and_csprng_default(capsys, monkeypatch):
    stdin = "0\n1\n1\n0\n"
    rc, out, _ = run(capsys, "--matrix", C1, "--epsilon", "2", "--T", "4", "--release", "count", "--state", "1",
                     "--window", "2", stdin=stdin, monkeypatch=monkeypatch)
    docs = [json.loads(line) for line in out.splitlines()]
    assert rc == 0 and len(docs) == 3 and docs[0]["kind"] == "count" and docs[0]["deterministic"] is False
    assert docs[0]["T"] == 4 and docs[-1]["t_independent"] is False
    rc, out, _ = run(capsys, "--matrix", C1, "--epsilon", "1", "--release", "mean", "--values", "[0, 3]",
                     "--v-lo", "0", "--v-hi", "4", "--step", "0.5", "--window", "4", "--clip", "--seed", "1",
                     stdin=stdin, monkeypatch=monkeypatch)
    doc = json.loads(out.splitlines()[0])
    assert rc == 0 and doc["kind"] == "mean" and 0.0 <= doc["values"][0] <= 4.0 and doc["clipped"] is True
    assert doc["query"]["grid_units"] == [0, 6] and doc["lipschitz"] == pytest.approx(1.0)


@pytest.mark.parametrize("args,stdin,fragment", [
    (("--release", "histogram"), "0\n", "needs --window"),
    (("--release", "count", "--window", "2"), "0\n", "needs --state"),
    (("--release", "count", "--window", "2", "--state", "5"), "0\n", "--state must be one of 0..1"),
    (("--release", "histogram", "--window", "2", "--state", "1"), "0\n", "does not apply"),
    (("--release", "mean", "--window", "2", "--values", "[0, 9]", "--v-lo", "0", "--v-hi", "4", "--step", "1"),
     "0\n", "lie in"),
    (("--release", "histogram", "--window", "2"), "0\nsecret-17\n", "stdin line 2: not an integer state"),
    (("--release", "histogram", "--window", "2"), "0\n{\"state\": 1.5}\n", 'stdin line 2: needs an integer "state"'),
    (("--release", "histogram", "--window", "2"), "0\n1\n77\n", "stdin line 3: state outside 0..1"),
    (("--release", "histogram", "--window", "1", "--T", "2"), "0\n1\n1\n", "more than --T 2 records"),
    (("--release", "histogram", "--window", "3", "--T", "2"), "0\n", "longer than --T 2"),
    (("--release", "histogram", "--window", "1", "--initial", "[0.5,0.5]", "--T", "3"), "0\n", "mode q"),
])
def test_bad_release_input_exits_2_without_echoing_data(capsys, monkeypatch, args, stdin, fragment):
    rc, _, err = run(capsys, "--matrix", C1, "--epsilon", "1", *args, stdin=stdin, monkeypatch=monkeypatch)
    assert rc == 2 and fragment in err and err.count("\n") == 1
    assert "secret" not in err and "77" not in err and "1.5" not in err


def test_entry_point_subprocess():
    proc = subprocess.run([sys.executable, "-m", "streamguard.cli", "mqm", "--matrix", C1, "--epsilon", "1",
                           "--release", "count", "--state", "0", "--window", "3"],
                          input="0\n0\n1\n", capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert lines[0]["window"] == [1, 3] and lines[-1]["windows"] == 1 and lines[-1]["deterministic"] is False
