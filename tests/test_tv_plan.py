"""Window plans per time-of-day block over a set-chain (streamguard/model/tv_plan.py) and
``plan --model`` on a set-chain."""

from __future__ import annotations

import json

import numpy as np
import pytest

from streamguard.cli import main
from streamguard.model import tv_plan
from streamguard.model.setchain import Block, SetChain
from streamguard.model.tv_leakage import prior_odds_bound, window_bound
from streamguard.model.tv_plan import block_plan, block_plans, duration, offset_sets, plan_key


def _box(a: float, b: float, w: float) -> tuple[np.ndarray, np.ndarray]:
    lo = np.array([[1 - a - w, a - w], [b - w, 1 - b - w]])
    hi = np.array([[1 - a + w, a + w], [b + w, 1 - b + w]])
    return lo, hi


def _home(sample_period: float = 300.0) -> SetChain:
    """Night: sticky; day: lively; evening: in between (5-minute records)."""
    return SetChain(("away", "home"), sample_period,
                    (Block(0.0, *_box(0.03, 0.02, 0.01)), Block(8 * 3600.0, *_box(0.3, 0.2, 0.05)),
                     Block(18 * 3600.0, *_box(0.1, 0.15, 0.04))))


@pytest.fixture(scope="module")
def plans():
    return block_plans(_home(), 1.0, max_records=600)


def test_every_mark_time_in_a_block_is_certified(plans):
    """For marks at the first, a middle and the last record of each block, the plan's bound over the
    exact per-step sets of that clock is ≤ the block's certified figure ≤ ε."""
    sc = _home()
    for i, bp in enumerate(plans):
        assert bp is not None and bp.bound <= 1.0
        s, e = sc.blocks[i].start, sc.block_end(i)
        for clock in (s, (s + e) / 2, e - sc.sample_period):
            n_left = 600
            lo, hi = sc.sets_for(clock - n_left * sc.sample_period, n_left)  # steps from p − n_left … p − 1
            llo, lhi = lo[::-1], hi[::-1]                                  # step j back from p
            rlo, rhi = sc.sets_for(clock, bp.right + 1)
            exact = window_bound(llo, lhi, rlo, rhi, prior_odds_bound(llo, lhi), bp.left, bp.right)
            assert exact <= bp.bound + 1e-12 <= 1.0 + 1e-12, (i, clock, exact, bp.bound)


def test_plans_differ_by_block_and_are_cheapest(plans):
    sc = _home()
    costs = [bp.redacted for bp in plans]
    assert costs[0] > costs[1]  # the sticky night costs more than the lively day
    for i, bp in enumerate(plans):
        llo, lhi = offset_sets(sc, i, -np.arange(1, 602))
        rlo, rhi = offset_sets(sc, i, np.arange(0, 601))
        prior = prior_odds_bound(llo, lhi)
        if bp.left > 0:  # one record less on either side is not certified
            assert window_bound(llo, lhi, rlo, rhi, prior, bp.left - 1, bp.right) > 1.0
        if bp.right > 0:
            assert window_bound(llo, lhi, rlo, rhi, prior, bp.left, bp.right - 1) > 1.0


def test_offset_sets_cover_neighbouring_blocks():
    sc = _home()
    lo, hi = offset_sets(sc, 1, np.array([0, -1, 10_000 // 300]))
    # offset 0 stays in the day block; one record back from the day's first record is night
    assert np.array_equal(lo[0], sc.blocks[1].lo)
    assert np.array_equal(lo[1], np.minimum(sc.blocks[0].lo, sc.blocks[1].lo))
    assert np.array_equal(hi[1], np.maximum(sc.blocks[0].hi, sc.blocks[1].hi))


def test_plan_key_includes_the_block_and_epsilon():
    sc = _home()
    keys = {plan_key(sc, 1.0, 0), plan_key(sc, 1.0, 1), plan_key(sc, 0.5, 0)}
    assert len(keys) == 3 and plan_key(sc, 1.0, 0) == plan_key(sc, 1.0, 0)


def test_cost_text():
    assert duration(190 * 60) == "3 h 10 min" and duration(120 * 60) == "2 h" and duration(45) == "45 s"
    assert duration(86400 + 4 * 3600) == "1 d 4 h"
    bp = block_plan(_home(), 1, 1.0, max_records=600)
    assert bp is not None and bp.cost_text().startswith("a mark at 08:00–18:00 redacts ")


def test_a_block_that_may_never_leave_a_state_is_refused():
    lo, hi = _box(0.1, 0.1, 0.05)
    lo[0, 1], lo[0, 0] = 0.0, 0.85  # α may be 0: 'away' may never be left
    hi[0, 0] = 1.0
    sc = SetChain(("away", "home"), 300.0, (Block(0.0, lo, hi),))
    assert block_plan(sc, 0, 1.0, max_records=50) is None


def test_plan_model_names_why_a_block_has_no_plan(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(tv_plan, "MAX_RECORDS", 100)
    lo, hi = _box(0.1, 0.1, 0.05)
    lo[0, 1], lo[0, 0], hi[0, 0], hi[0, 1] = 0.0, 0.85, 1.0, 0.15  # 'away' may never be left
    model = tmp_path / "model.json"
    model.write_text(SetChain(("away", "home"), 300.0, (Block(0.0, lo, hi),)).dumps())
    assert main(["plan", "--model", str(model), "--epsilon", "1"]) == 2
    cap = capsys.readouterr()
    assert "block 0: no window of at most 100 records" in cap.out and "the set lets 'away' never be left" in cap.out
    assert "no window plan meets ε=1 for block(s) 0" in cap.err


def test_plan_model_prints_the_cost_per_block(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(tv_plan, "MAX_RECORDS", 600)  # the search length only: the plans fit in it
    model = tmp_path / "model.json"
    model.write_text(_home().dumps())
    assert main(["plan", "--model", str(model), "--epsilon", "1"]) == 0
    out = capsys.readouterr().out
    assert "block 0: a mark at 00:00–08:00 redacts" in out and "block 2: a mark at 18:00–24:00" in out
    assert main(["plan", "--model", str(model), "--epsilon", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [b["block"] for b in doc["blocks"]] == [0, 1, 2] and doc["refused"] == []
    assert all(b["bound"] <= 1.0 and b["left_seconds"] == 300.0 * b["left"] for b in doc["blocks"])
    assert main(["plan", "--model", str(model), "--epsilon", "1", "--n", "5"]) == 2


def test_memory_two_plans_cost_more_and_are_certified_lifted():
    sc = _home()
    first = block_plan(sc, 2, 1.0, max_records=400)
    second = block_plan(sc, 2, 1.0, max_records=400, memory=2)
    assert first is not None and second is not None and second.memory == 2
    assert second.redacted > first.redacted
    llo, lhi = offset_sets(sc, 2, -np.arange(1, 402))
    rlo, rhi = offset_sets(sc, 2, np.arange(0, 401))
    assert window_bound(llo, lhi, rlo, rhi, None, second.left, second.right, memory=2) <= 1.0
    assert window_bound(llo, lhi, rlo, rhi, None, first.left, first.right, memory=2) > 1.0


def test_a_memory_too_large_to_certify_is_refused(tmp_path, capsys):
    three = SetChain(("a", "b", "c"), 60.0, (Block(0.0, np.full((3, 3), 0.2), np.full((3, 3), 0.5)),), memory=2)
    with pytest.raises(ValueError, match="9 states"):
        block_plan(three, 0, 1.0)
    model = tmp_path / "model.json"
    model.write_text(three.dumps())
    assert main(["plan", "--model", str(model), "--epsilon", "1"]) == 2
    assert "9 states" in capsys.readouterr().err


# -- end to end: the designed windows against an exact evaluator on random kernel sequences -------
def _exact_window_leakage(left_seq: np.ndarray, right_seq: np.ndarray, mu: np.ndarray, L: int) -> float:
    """Exact leakage about X_p of the window [p − L, p + R] (released records around it) for one
    kernel sequence: ``left_seq`` the kernels from p − N to p (forward order, N ≥ L + 1), ``mu`` the
    law at p − N, ``right_seq`` the R + 1 kernels from p on. Given the released neighbours x (at
    p − L − 1) and x' (at p + R + 1) the ratio is G_ℓ(x,a)/G_ℓ(x,b) · (νG_ℓ)_b/(νG_ℓ)_a ·
    G_r(a,x')/G_r(b,x'), ν the law at p − L − 1 (Markov property of the fixed sequence)."""
    nu = mu.copy()
    for K in left_seq[: len(left_seq) - (L + 1)]:
        nu = nu @ K
    GL = np.linalg.multi_dot(list(left_seq[len(left_seq) - (L + 1):]) + [np.eye(len(mu))])
    GR = np.linalg.multi_dot(list(right_seq) + [np.eye(len(mu))])
    prior = nu @ GL
    k = len(mu)
    best = 0.0
    for a in range(k):
        for b in range(k):
            if a == b:
                continue
            left = max(np.log(GL[x, a] / GL[x, b]) for x in range(k) if nu[x] > 0) + np.log(prior[b] / prior[a])
            right = max(np.log(GR[a, x] / GR[b, x]) for x in range(k))
            best = max(best, left + right)
    return best


def _random_sequence(rng, lo: np.ndarray, hi: np.ndarray, mode: str) -> np.ndarray:
    """A kernel per step inside the binary boxes: random corners, the stickiest corner, or uniform."""
    n = lo.shape[0]
    if mode == "sticky":
        a, b = lo[:, 0, 1], lo[:, 1, 0]
    elif mode == "corners":
        pick = rng.integers(0, 2, (2, n))
        a = np.where(pick[0] == 1, hi[:, 0, 1], lo[:, 0, 1])
        b = np.where(pick[1] == 1, hi[:, 1, 0], lo[:, 1, 0])
    else:
        a, b = rng.uniform(lo[:, 0, 1], hi[:, 0, 1]), rng.uniform(lo[:, 1, 0], hi[:, 1, 0])
    return np.stack([np.stack([1 - a, a], axis=1), np.stack([b, 1 - b], axis=1)], axis=1)


def test_designed_windows_hold_on_random_kernel_sequences(plans):
    """For marks at random clocks of each block, kernel sequences drawn inside the block sets along
    the clock (random corners, stickiest corner, uniform) and point-mass laws 300 records back: the
    exact leakage of the block's window is ≤ its certified figure ≤ ε."""
    sc = _home()
    rng = np.random.default_rng(5)
    N = 300
    worst = 0.0
    for i, bp in enumerate(plans):
        s, e = sc.blocks[i].start, sc.block_end(i)
        for _ in range(8):
            clock = s + sc.sample_period * int(rng.integers(0, int((e - s) / sc.sample_period)))
            llo, lhi = sc.sets_for(clock - (N + bp.left + 1) * sc.sample_period, N + bp.left + 1)
            rlo, rhi = sc.sets_for(clock, bp.right + 1)
            for mode in ("corners", "sticky", "uniform"):
                left_seq = _random_sequence(rng, llo, lhi, mode)
                right_seq = _random_sequence(rng, rlo, rhi, mode)
                for x0 in range(2):
                    leak = _exact_window_leakage(left_seq, right_seq, np.eye(2)[x0], bp.left)
                    assert leak <= bp.bound + 1e-9 <= 1.0 + 1e-9, (i, clock, mode, leak, bp.bound)
                    worst = max(worst, leak / bp.bound)
    print(f"largest exact leakage / certified figure over the sampled sequences: {worst:.3f}")
    assert worst > 0.2  # the evaluator sees real leakage, not zeros
