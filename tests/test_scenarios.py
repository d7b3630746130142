"""Scenario plans (streamguard.model.scenarios; docs/time-varying.md §7) against an evaluator written
here: every hidden path of a short window enumerated, the released boundary records as outputs, and
the law of the left boundary record searched over (vertices and near-vertices, random interior laws)."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from streamguard.cli import main
from streamguard.model.scenarios import Scenarios, hour_plans, side_terms, window_leakage
from streamguard.model.setchain import SetChain


def _enumerated(kernels: list[np.ndarray], L: int, nu: np.ndarray) -> float:
    """max over outputs and ordered pairs of log Pr(y | X_p = a) / Pr(y | X_p = b): positions
    0..L+R+2 with X_0 ~ nu, kernels[i] the step i → i+1, p = L + 1, records 0 and n−1 released,
    the rest redacted; every hidden path summed."""
    k = nu.size
    n = len(kernels) + 1
    p = L + 1
    joint = np.zeros((k, k, k))  # (y_first, X_p, y_last)
    for path in itertools.product(range(k), repeat=n):
        w = nu[path[0]]
        for i in range(n - 1):
            w *= kernels[i][path[i], path[i + 1]]
        joint[path[0], path[p], path[-1]] += w
    cond = joint / joint.sum(axis=(0, 2), keepdims=True)  # Pr(y | X_p)
    worst = -np.inf
    for a, b in itertools.permutations(range(k), 2):
        worst = max(worst, float(np.max(np.log(cond[:, a, :]) - np.log(cond[:, b, :]))))
    return worst


def _figure(kernels: list[np.ndarray], L: int, R: int) -> float:
    """The module's figure for the window of p = L + 1: left rows are the steps before p, right from p."""
    left = np.stack([kernels[L - j] for j in range(L + 1)])[None]   # step from X_{p−j−1}
    right = np.stack([kernels[L + 1 + o] for o in range(R + 1)])[None]
    lft, rgt = side_terms(left, right)
    return float(np.max(lft[L, 0] + rgt[R, 0]))


@pytest.mark.parametrize("k,L,R,seed", [(2, 0, 0, 1), (2, 2, 1, 2), (3, 1, 2, 3), (3, 2, 0, 4), (2, 3, 3, 5)])
def test_figure_is_the_worst_case_over_every_law(k, L, R, seed):
    rng = np.random.default_rng(seed)
    kernels = [rng.dirichlet(np.full(k, 0.7), size=k) for _ in range(L + R + 2)]
    fig = _figure(kernels, L, R)
    # sound: no law of the first record leaks more
    for _ in range(40):
        assert _enumerated(kernels, L, rng.dirichlet(np.ones(k))) <= fig + 1e-9
    # tight: the supremum is approached near a vertex (weight 1 − η on one state, η on the others)
    eta = 1e-9
    near = max(_enumerated(kernels, L, np.where(np.arange(k) == x, 1 - eta * (k - 1), eta)) for x in range(k))
    assert near == pytest.approx(fig, abs=1e-5)


def _smoothed(c: np.ndarray) -> np.ndarray:
    c = c + 0.5
    return c / c.sum(axis=-1, keepdims=True)


def test_hour_plans_hold_under_every_scenario_and_are_the_shortest():
    rng = np.random.default_rng(11)
    k, period = 2, 1800.0  # two positions an hour
    hourly = rng.integers(4, 30, size=(24, k, k))
    daily = rng.integers(8, 60, size=(3, k, k))
    sc = Scenarios(hourly, daily, (20000, 20001, 20002))
    plans = hour_plans(sc, period, 1.0, max_records=8)
    hk, consts = _smoothed(hourly.astype(float)), [_smoothed(d.astype(float)) for d in daily]
    consts.append(_smoothed(hourly.sum(axis=0).astype(float)))

    def sequences(h: int, L: int, R: int) -> list[list[np.ndarray]]:
        seqs = [[c] * (L + R + 2) for c in consts]
        for pos in (h * 3600.0, h * 3600.0 + period):  # kernel of the step from the record at pos + i·period
            seqs.append([hk[int(((pos + (i - L - 1) * period) % 86400) // 3600)] for i in range(L + R + 2)])
        return seqs

    def worst(h: int, L: int, R: int) -> float:
        return max(_figure(s, L, R) for s in sequences(h, L, R))

    assert all(p is not None for p in plans)
    for h in (0, 7, 13, 23):
        hp = plans[h]
        assert hp is not None and hp.hour == h
        # holds at the plan and at every longer window (another mark's window may lengthen it)
        for dl, dr in ((0, 0), (1, 0), (0, 1), (2, 3)):
            assert worst(h, hp.left + dl, hp.right + dr) <= 1.0
        # no shorter window holds
        for L in range(hp.left + hp.right):
            R = hp.left + hp.right - 1 - L
            assert max(worst(h, L2, R2) for L2 in range(L, 9) for R2 in range(R, 9)) > 1.0 - 1e-9


def test_calibrated_model_carries_its_scenarios_and_plan_prints_hours(tmp_path, capsys):
    rng = np.random.default_rng(5)
    t0, n = 1_764_028_800, 3 * 1440
    x = np.zeros(n, dtype=np.int64)
    for t in range(1, n):
        hour = (t - 1) // 60 % 24
        p_on = (0.02 if hour < 8 else 0.2) if x[t - 1] == 0 else 0.1
        x[t] = int(rng.random() < p_on)
    rec = tmp_path / "rec.jsonl"
    rec.write_text("".join(json.dumps({"value": ("off", "on")[v], "ts": t0 + 60 * i}) + "\n" for i, v in enumerate(x)))
    model = tmp_path / "M.json"
    assert main(["calibrate", str(rec), "--labels", "off,on", "--sample-period", "60", "--out", str(model)]) == 0
    sc = SetChain.from_json(json.loads(model.read_text()))
    assert sc.scenarios is not None and sc.scenarios.days == (20417, 20418, 20419)
    assert int(sc.scenarios.hourly.sum()) == int(sc.scenarios.daily.sum()) == n - 1
    capsys.readouterr()
    assert main(["plan", "--model", str(model), "--epsilon", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    hours = doc["scenario_hours"]
    assert [h["hour"] for h in hours] == list(range(24)) and all(h["redacted"] == h["left"] + h["right"] + 1 for h in hours)
    direct = hour_plans(sc.scenarios, 60.0, 1.0)
    assert [(h["left"], h["right"]) for h in hours] == [(p.left, p.right) for p in direct if p is not None]


def _enumerated_rows(kernels: list[np.ndarray], rows: np.ndarray, p: int, nu: np.ndarray) -> float:
    """As :func:`_enumerated`, with redaction rows: each record t ≠ p is ⊥ with probability
    rows[t][x], else its value; record p is ⊥; every output and hidden path enumerated."""
    n = len(kernels) + 1
    like = {}
    for path in itertools.product(range(2), repeat=n):
        w = nu[path[0]]
        for i in range(n - 1):
            w *= kernels[i][path[i], path[i + 1]]
        for mask in itertools.product((0, 1), repeat=n):  # 1: redacted
            if not mask[p]:
                continue
            pr = w
            for t in range(n):
                if t != p:
                    pr *= rows[t][path[t]] if mask[t] else 1.0 - rows[t][path[t]]
            if pr == 0.0:
                continue
            y = tuple(-1 if mask[t] else path[t] for t in range(n))
            like.setdefault(y, np.zeros(2))[path[p]] += pr
    law_p = sum(v for v in like.values())
    worst = -np.inf
    for v in like.values():
        c = v / law_p
        if c.min() > 0:
            worst = max(worst, abs(float(np.log(c[0] / c[1]))))
    return worst


@pytest.mark.parametrize("L,R,seed", [(1, 1, 1), (2, 2, 2), (3, 1, 3), (1, 3, 4)])
def test_any_rows_figure_is_the_worst_case_over_every_law(L, R, seed):
    rng = np.random.default_rng(seed)
    n = L + R + 3  # the released records at both ends, the window, p
    kernels = [rng.dirichlet([0.8, 0.8], size=2) for _ in range(n - 1)]
    p = L + 1
    rows = np.zeros((n, 2))
    rows[1:n - 1] = rng.random((n - 2, 2))
    rows[p] = 1.0
    left = np.vstack([rows[p - 1:0:-1], np.zeros((1, 2))])
    right = np.vstack([rows[p + 1:n - 1], np.zeros((1, 2))])
    left_k = np.stack([kernels[p - j - 1] for j in range(L + 1)])[None]
    right_k = np.stack([kernels[p + o] for o in range(R + 1)])[None]
    fig = float(window_leakage(left_k, right_k, left, right)[0])
    for _ in range(20):
        assert _enumerated_rows(kernels, rows, p, rng.dirichlet([1, 1])) <= fig + 1e-9
    eta = 1e-9
    near = max(_enumerated_rows(kernels, rows, p, np.array([1 - eta, eta])[::s]) for s in (1, -1))
    assert near == pytest.approx(fig, abs=1e-5)


def _feed_until_alarm(guard, x: np.ndarray, t0: float, period: float) -> int | None:
    """Feed a path as records released unchanged; the step at which the guard fired, or None."""
    for t, s in enumerate(x):
        if guard.released(t, t0 + t * period, int(s), (0.0, 0.0)):
            return t
    return None


def _path(rng: np.random.Generator, kernel_at, n: int) -> np.ndarray:
    x = np.zeros(n, dtype=np.int64)
    u = rng.random(n)
    for t in range(1, n):
        x[t] = int(u[t] < kernel_at(t - 1)[x[t - 1], 1])
    return x


def test_drift_guard_of_a_scenario_set_holds_the_live_chain_to_what_the_scenarios_span():
    """The daemon's guard for a set-chain's scenario set tests each block against the range its
    scenarios span (hourly kernels of the block's hours, day and pooled chains), not the set-chain's
    wider confidence sets: 30 days drawn from the time-of-day scenario raise no alarm at δ = 1e-3; a
    day-time departure rate 4× the recording's fires it, where the set-chain's own sets do not."""
    from streamguard.model import modelset
    from streamguard.model.block_drift import BlockDriftGuard, partition_for
    from streamguard.model.select import Transitions, select_setchain

    rng = np.random.default_rng(21)
    t0, period = 1_764_028_800, 60.0

    def rec(t: int) -> np.ndarray:
        day = 480 <= t % 1440 < 1140
        a, b = (0.02, 0.05) if day else (0.002, 0.2)
        return np.array([[1 - a, a], [b, 1 - b]])

    x = _path(rng, rec, 10 * 1440)
    sc = select_setchain(Transitions.from_path(x, t0 + period * np.arange(x.size)), ("off", "on"), period, 0.99)
    ms = modelset.from_json(sc.to_json())
    assert list(partition_for(ms).starts) == list(sc.starts)
    hourly = _smoothed(sc.scenarios.hourly.astype(float))
    quiet = _path(rng, lambda t: hourly[t % 1440 // 60], 30 * 1440)
    assert _feed_until_alarm(BlockDriftGuard(partition_for(ms), "m", 1e-3), quiet, t0, period) is None

    def busier(t: int) -> np.ndarray:
        k = rec(t).copy()
        if 480 <= t % 1440 < 1140:
            k[0] = [1 - 0.08, 0.08]
        return k

    busy = _path(rng, busier, 30 * 1440)
    fired = _feed_until_alarm(BlockDriftGuard(partition_for(ms), "m", 1e-3), busy, t0, period)
    wide = _feed_until_alarm(BlockDriftGuard(partition_for(sc), "m", 1e-3), busy, t0, period)
    assert fired is not None and fired < 10 * 1440, fired
    assert wide is None or wide > fired, (fired, wide)
