"""Certified worst case and robust plans over k-state row-wise model sets (issue 11;
docs/model-sets.md §3b): the bound is checked against the exact audit of many random members, an
independent brute-force enumeration, the binary certificate on two states, and fails closed."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from streamguard.model.chain import ModelError, stationary_distribution
from streamguard.cli import main
from streamguard.model.calibrate import TransitionData
from streamguard.model.interval import box_leakage_bound, corner_kernels
from streamguard.model.kinterval import law_ratio_bounds, stationary_vertices, tree_weights
from streamguard.model.krobust import (RowBox, kstream_windows, member_leakage, reversed_box, robust_kstream_plan,
                                       windows_bound, worst_over_rows)
from streamguard.model.modelset import from_calibration

rng = np.random.default_rng(20261126)


def _chain(k: int, stick: float) -> np.ndarray:
    P = rng.dirichlet(np.ones(k), size=k) * (1 - stick) + stick * np.eye(k)
    return P / P.sum(axis=1, keepdims=True)


def _box(P: np.ndarray, rel: float) -> RowBox:
    widths = rel * rng.uniform(0.2, 1.0, size=P.shape)
    box = RowBox.of(P * (1 - widths), np.minimum(1.0, P * (1 + widths)))
    assert box is not None
    return box


def _member(box: RowBox) -> np.ndarray:
    """A random member of box ∩ simplex per row (inside the box, rows sum to 1)."""
    x = box.lo + rng.uniform(size=box.lo.shape) * (box.hi - box.lo)
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        s, slo, shi = x[i].sum(), box.lo[i].sum(), box.hi[i].sum()
        out[i] = (box.lo[i] + (x[i] - box.lo[i]) * (1 - slo) / (s - slo) if s > 1
                  else box.hi[i] - (box.hi[i] - x[i]) * (shi - 1) / (shi - s))
    assert np.all(out >= box.lo - 1e-12) and np.all(out <= box.hi + 1e-12)
    return out


def _rows(H: int, k: int) -> np.ndarray:
    return rng.choice([0.0, 0.25, 0.6, 1.0], size=(H, k))


def _brute(P: np.ndarray, left: np.ndarray, right: np.ndarray) -> float:
    """Stream leakage by enumeration of every output, independent of the audit code: the records
    stand-in, left rows (reversed), p (redacted), right rows, stand-in, with the stand-ins released
    and the first one of law π; Pr(y, X_p = a) by a forward pass over the hidden states."""
    k = P.shape[0]
    pi = stationary_distribution(P)
    red = np.vstack([np.zeros((1, k)), left[::-1], np.ones((1, k)), right, np.zeros((1, k))])
    p = 1 + left.shape[0]
    n = red.shape[0]
    best = -math.inf
    choices = [range(k) if t in (0, n - 1) else ([-1] if t == p else range(-1, k)) for t in range(n)]
    for y in itertools.product(*choices):
        probs = []
        for a in range(k):
            f = pi.copy()
            for t in range(n):
                if t:
                    f = f @ P
                e = red[t] if y[t] < 0 else np.where(np.arange(k) == y[t], 1 - red[t], 0.0)
                f = f * e
                if t == p:
                    f = np.where(np.arange(k) == a, f, 0.0)
            probs.append(f.sum() / pi[a])
        for a in range(k):
            for b in range(k):
                if a != b and probs[a] > 0:
                    best = max(best, math.inf if probs[b] <= 0 else math.log(probs[a] / probs[b]))
    return best


@pytest.mark.parametrize("k", [3, 4])
def test_a_point_set_gives_the_exact_leakage(k: int) -> None:
    for _ in range(6):
        P = _chain(k, 0.5)
        w = [(_rows(5, k), _rows(6, k))]
        exact = member_leakage(P, w)
        box = RowBox.of(P, P)
        assert box is not None
        assert windows_bound(box, w) == pytest.approx(exact, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("k", [3, 4])
def test_the_bound_covers_every_random_member(k: int) -> None:
    for rel in (0.02, 0.2):
        for _ in range(4):
            P = _chain(k, 0.4)
            box = _box(P, rel)
            w = [(_rows(4, k), _rows(5, k))]
            bound = windows_bound(box, w)
            worst = max(member_leakage(_member(box), w) for _ in range(40))
            assert worst <= bound + 1e-12


def test_the_bound_covers_brute_force_enumeration() -> None:
    for _ in range(2):
        P = _chain(3, 0.3)
        box = _box(P, 0.15)
        left, right = _rows(2, 3), _rows(2, 3)
        bound = windows_bound(box, [(left, right)])
        for _ in range(3):
            Q = _member(box)
            brute = _brute(Q, left, right)
            assert brute == pytest.approx(member_leakage(Q, [(left, right)]), rel=1e-9)
            assert brute <= bound + 1e-12


def test_the_bound_shrinks_to_the_exact_value() -> None:
    P = _chain(3, 0.5)
    w = [(_rows(6, 3), _rows(6, 3))]
    exact = member_leakage(P, w)
    gaps = [windows_bound(RowBox.of(P * (1 - r), P * (1 + r)), w) - exact for r in (1e-1, 1e-2, 1e-3, 1e-5)]
    assert all(g >= -1e-12 for g in gaps)
    assert gaps == sorted(gaps, reverse=True)
    assert gaps[-1] < 1e-3 and gaps[-1] < gaps[0] / 100


def test_two_states_reduce_to_the_binary_certificate() -> None:
    for _ in range(10):
        a0, b0 = rng.uniform(0.02, 0.3, size=2)
        a1, b1 = a0 * rng.uniform(1, 1.5), b0 * rng.uniform(1, 1.5)
        left, right = _rows(4, 2), _rows(4, 2)
        box = RowBox.of(np.array([[1 - a1, a0], [b0, 1 - b1]]), np.array([[1 - a0, a1], [b1, 1 - b0]]))
        stop = np.zeros((1, 2))
        binary = box_leakage_bound(corner_kernels((a0, a1), (b0, b1)), np.vstack([left, stop]),
                                   np.vstack([right, stop]))
        assert windows_bound(box, [(left, right)]) == pytest.approx(binary, rel=1e-9)


def test_tree_weights_are_the_stationary_law() -> None:
    for k in (2, 3, 4, 5):
        P = _chain(k, 0.2)
        t = tree_weights(P)
        assert t / t.sum() == pytest.approx(stationary_distribution(P), rel=1e-9)


@pytest.mark.parametrize("k", [3, 4, 5])
def test_law_and_time_reversal_bounds_hold_every_member(k: int) -> None:
    """log π_b/π_a ≤ law[a, b] (tree theorem ∧ stationary-law polytope), and the time reversal
    P̃[t, s] = π_s P[s, t]/π_t of every member lies in the reversed box."""
    for _ in range(3 if k < 5 else 1):
        box = _box(_chain(k, 0.3), 0.3)
        vertices = stationary_vertices(box.lo, box.hi)
        assert vertices is not None
        law = law_ratio_bounds(box.lo, box.hi, vertices)
        rev = reversed_box(box, law, vertices)
        assert rev is not None
        for _ in range(40):
            Q = _member(box)
            pi = stationary_distribution(Q)
            assert np.all(np.log(pi[None, :] / pi[:, None]) <= law + 1e-12)
            Qr = (pi[None, :] * Q.T) / pi[:, None]
            assert np.all(Qr >= rev.lo - 1e-12) and np.all(Qr <= rev.hi + 1e-12)


def test_branch_and_bound_brackets_the_worst_member() -> None:
    P = _chain(3, 0.5)
    box = _box(P, 0.1)
    w = [(_rows(4, 3), _rows(4, 3))]
    wc = worst_over_rows(box, w, max_boxes=60)
    assert wc.matrix is not None and box.lo.min() >= 0
    assert member_leakage(wc.matrix, w) == pytest.approx(wc.attained)
    assert wc.attained <= wc.bound <= windows_bound(box, w) + 1e-12
    assert max(member_leakage(_member(box), w) for _ in range(30)) <= wc.bound + 1e-12


def test_a_state_that_may_never_be_left_fails_closed(tmp_path) -> None:
    P = np.array([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]])
    lo, hi = P * 0.5, np.minimum(1.0, P * 1.5)
    lo[0, 1:] = 0.0
    hi[0, 0] = 1.0
    box = RowBox.of(lo, hi)
    assert box is not None and box.never_left() == 0
    assert windows_bound(box, [(np.ones((3, 3)), np.ones((3, 3)))]) == math.inf
    counts = np.array([[500, 0, 0], [10, 80, 10], [10, 10, 80]])  # state 0 never left in the data
    ms = from_calibration(TransitionData(counts), 0.95)
    with pytest.raises(ModelError, match="never leaves state 0"):
        robust_kstream_plan(ms, 1.0)


def _calibrated(P: np.ndarray, steps: int, seed: int):
    g = np.random.default_rng(seed)
    k = P.shape[0]
    counts = np.zeros((k, k), dtype=np.int64)
    x = 0
    for u in g.uniform(size=steps):
        y = min(int(np.searchsorted(np.cumsum(P[x]), u)), k - 1)
        counts[x, y] += 1
        x = y
    return from_calibration(TransitionData(counts), 0.95)


FAST = np.array([[0.6, 0.3, 0.1], [0.2, 0.6, 0.2], [0.25, 0.25, 0.5]])


@pytest.fixture(scope="module")
def fast_set():
    """One calibration of FAST (20,000 steps, 95 %) and its robust plan (split as the daemon's default)."""
    ms = _calibrated(FAST, 20_000, 1)
    return ms, robust_kstream_plan(ms, 1.0, split="even")


def test_the_robust_plan_is_certified_and_audited_exactly_under_members(fast_set) -> None:
    ms, rp = fast_set
    assert rp.worst.bound <= 1.0
    w = kstream_windows(rp.plan)
    box = RowBox.of(ms.bounds[:, :, 0], ms.bounds[:, :, 1])
    assert box is not None
    assert max(member_leakage(_member(box), w) for _ in range(30)) <= rp.worst.bound + 1e-12
    assert member_leakage(FAST, w) <= 1.0  # the true chain lies in the set here
    assert rp.point_expected_redacted is not None and rp.expected_redacted >= rp.point_expected_redacted - 1e-9


def test_plan_model_json_for_a_k_state_set(tmp_path, capsys, fast_set) -> None:
    ms, _ = fast_set
    path = tmp_path / "MODEL.json"
    ms.write(path)
    assert main(["plan", "--model", str(path), "--stream", "--epsilon", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["worst_case"]["bound"] <= 1.0
    assert len(doc["worst_case"]["member"]["matrix"]) == 3
    assert doc["model_set"]["kind"] == "rows"
    assert doc["utility_cost_per_mark"] == pytest.approx(
        doc["expected_redacted_per_mark"] - doc["point_estimate_plan"]["expected_redacted_per_mark"])
    table = np.array(doc["redaction"])
    assert table.shape[1] == 3
    assert main(["plan", "--model", str(path), "--stream", "--epsilon", "1"]) == 0  # the text says the same
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "robust k-state 3R stream plan over the model set (rows, 3 states), ε=1 nats"
    assert f"≤ {doc['worst_case']['bound']:.9f} nats" in lines[1]
    assert lines[2].endswith(f"with budget {doc['design_budget']:.6g}; horizons left {doc['horizons']['left']} / "
                             f"right {doc['horizons']['right']}")
    point = doc["point_estimate_plan"]["worst_case_over_set"]
    assert (f"worst case over the set is ≤ {point['bound']:.6g} nats (attained {point['attained']:.6g})"
            f"{' > ε' if point['attained'] > 1 else ''};") in lines[4]
    assert main(["plan", "--model", str(path), "--n", "5", "--private", "2", "--epsilon", "1"]) == 2
    assert "streams only" in capsys.readouterr().err


def test_the_daemon_runs_the_robust_k_state_plan(tmp_path, capsys, fast_set) -> None:
    """A k-state redaction stream with ``[streams.model] file``: the runtime's table is the robust
    plan's, the status names the set and its certified worst case, every honoured mark's rows (as
    used) are ≤ ε under random members of the set, and ``config check`` prints the region."""
    from streamguard.audit.kstate import redaction_leakage
    from streamguard.config import Settings
    from streamguard.sampling import SeededSource
    from streamguard.stream.redaction_runtime import RedactionRuntime

    labels = ["low", "mid", "high"]
    model = tmp_path / "MODEL.json"
    ms, robust = fast_set
    ms.write(model)
    stream = {"name": "s", "labels": labels, "model": {"file": str(model)}, "epsilon": 1.0, "delay": 4}
    settings = Settings(device="dev", broker={"host": "127.0.0.1"}, outbox={"path": tmp_path / "o.sqlite"},
                        streams=[stream])
    rt = RedactionRuntime(settings, settings.streams[0], SeededSource(8))
    assert settings.streams[0].split == "even"
    assert rt.plan.table().tolist() == robust.plan.table().tolist()
    g = np.random.default_rng(4)
    rows: dict[int, tuple[float, ...]] = {}
    x, n = 0, 300
    for t in range(n):
        frame = {"value": labels[x], "ts": 1.7e9 + t, **({"private": True} if t > 20 and g.random() < 0.03 else {})}
        rt.on_frame(json.dumps(frame).encode(), now=1.7e9 + t)
        x = int(g.choice(3, p=FAST[x]))
        rows.update({int(r[0]): tuple(r[1:]) for r in rt.take_decisions()})
    rt.drain()
    rows.update({int(r[0]): tuple(r[1:]) for r in rt.take_decisions()})
    used = np.array([rows[t] for t in range(n)])
    status = rt.privacy_status()
    assert "model set" in status["guarantee"]
    assert status["model_set"]["kind"] == "rows" and status["model_set"]["id"] == ms.digest()
    assert status["model_set"]["worst_case"]["bound"] <= 1.0
    box = RowBox.of(ms.bounds[:, :, 0], ms.bounds[:, :, 1])
    members = [MarkovChainOf(_member(box)) for _ in range(4)]
    marks = [m for m in status["recent_marks"] if m["honoured"] and not m["late"]]
    assert len(marks) >= 3
    for mk in marks:
        for Q in members:
            assert redaction_leakage(Q.matrix, Q.stationary_law, used, mk["position"]).total <= 1.0 + 1e-9

    toml = tmp_path / "sg.toml"
    toml.write_text(f'device = "dev"\n[broker]\nhost = "127.0.0.1"\n[outbox]\npath = "{tmp_path / "o2.sqlite"}"\n'
                    f'[[streams]]\nname = "s"\nlabels = {json.dumps(labels)}\nepsilon = 1.0\n'
                    f'[streams.model]\nfile = "{model}"\n')
    assert main(["config", "check", str(toml)]) == 0
    out = capsys.readouterr().out
    assert "model set (rows, confidence 0.95): P[i][j] ∈ row 0: [" in out and "worst case over it ≤ " in out
    assert "[[" not in out


def MarkovChainOf(P: np.ndarray):  # noqa: N802 - reads like the constructor it wraps
    from streamguard.model.chain import MarkovChain

    return MarkovChain(P)


def test_audit_model_bounds_a_k_state_table_over_the_set(tmp_path, capsys, fast_set) -> None:
    """``audit --model`` over a k-state region: the bound (records beyond the table count as released)
    is ≥ the exact finite-chain leakage under random stationary members."""
    from streamguard.audit.kstate import redaction_leakage
    from streamguard.model.chain import MarkovChain

    ms, _ = fast_set
    path = tmp_path / "MODEL.json"
    ms.write(path)
    red = rng.choice([0.0, 0.5, 1.0], size=(7, 3))
    red[3] = 1.0
    table = tmp_path / "t.json"
    table.write_text(json.dumps({"redaction": red.tolist(), "private": [4]}))
    assert main(["audit", str(table), "--model", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    wc = doc["worst_case"]["4"]
    assert "stand-ins" in doc["note"] and wc["attained"] <= wc["bound"]
    box = RowBox.of(ms.bounds[:, :, 0], ms.bounds[:, :, 1])
    for _ in range(20):
        Q = MarkovChain(_member(box))
        assert redaction_leakage(Q.matrix, Q.stationary_law, red, 3).total <= wc["bound"] + 1e-12
