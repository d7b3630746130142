"""The box certificate of the daemon's per-mark figures (streamguard/model/box_window.py) against the
tests' own evaluator (tests/true_world.py: exact leakage of a finite chain, worst case over every
initial law, no streamguard code): for random rows, random windows that reach the first record or
not, and restart gaps — a gap of G unseen readings *is* G records that published nothing (rows of
ones), which is how the evaluator is given it — the certified bound over a box is ≥ the true
leakage of every member tried (its corners, random members), and at a single chain it equals the
truth when the window does not reach the first record."""

from __future__ import annotations

import math

import numpy as np
import pytest

from streamguard.model import box_window as bw
from true_world import transition, worst_over_initial

TOL = 1e-9


def _rows(rng: np.random.Generator, n: int) -> np.ndarray:
    rows = rng.uniform(0.0, 1.0, (n, 2))
    rows[rng.uniform(size=(n, 2)) < 0.25] = 1.0
    rows[rng.uniform(size=(n, 2)) < 0.15] = 0.0
    return rows


def _world(left: np.ndarray, right: np.ndarray, gap_left: tuple[int, int] | None) -> tuple[np.ndarray, int]:
    """The true world's rows (oldest first) for ``left`` (outward from p) and ``right``, with
    ``gap_left`` = (j, G): G unseen readings between distance j and j + 1 on the left."""
    out = list(left[::-1])
    if gap_left is not None:
        j, G = gap_left
        at = len(out) - j  # index of the record at distance j
        out[at:at] = [np.ones(2)] * G
    p = len(out)
    return np.array(out + [np.ones(2)] + list(right)), p


def _case(left: np.ndarray, right: np.ndarray, gap_left: tuple[int, int] | None) -> bw.WindowCase:
    kinds = [bw.ONE] * left.shape[0]
    if gap_left is not None:  # the kernel stepping from distance j + 1 to j is P^(G+1)
        j, G = gap_left
        kinds[j] = bw.gap_kind(G)
    return bw.WindowCase(bw.LeftCase(left, tuple(kinds), True, None, 0), bw.RightCase(right, (bw.ONE,) * right.shape[0]))


@pytest.mark.parametrize("seed", range(6))
def test_the_certificate_is_never_below_the_truth_of_a_member(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(25):
        a0, b0 = rng.uniform(0.02, 0.6, 2)
        box = ((a0, a0 * rng.uniform(1.0, 1.6)), (b0, b0 * rng.uniform(1.0, 1.6)))
        m, r = int(rng.integers(1, 7)), int(rng.integers(0, 6))
        left, right = _rows(rng, m), _rows(rng, r)
        gap = None
        if m >= 2 and rng.uniform() < 0.5:
            gap = (int(rng.integers(1, m)), int(rng.choice([0, 1, 3, 7, 8, 13, 40])))  # explicit and tail gaps
        case = _case(left, right, gap)
        bound = bw.certify(box, [case], max_boxes=64).total
        world, p = _world(left, right, gap)
        (lo_a, hi_a), (lo_b, hi_b) = box
        members = [(lo_a, lo_b), (lo_a, hi_b), (hi_a, lo_b), (hi_a, hi_b)]
        members += [(rng.uniform(lo_a, hi_a), rng.uniform(lo_b, hi_b)) for _ in range(4)]
        for a, b in members:
            truth = worst_over_initial(transition(a, b), world, p).total
            assert bound >= truth - TOL * max(1.0, truth), (seed, box, a, b, bound, truth, left, right, gap)


def test_a_stationary_window_at_a_single_chain_is_exact() -> None:
    """Not reaching the first record (a released stand-in, law any law at distance d): at a point
    box the bound equals the truth of the world whose first record lies d steps before the stand-in
    (the evaluator maximises over the law of that first record)."""
    rng = np.random.default_rng(7)
    for _ in range(40):
        a, b = rng.uniform(0.03, 0.9, 2)
        m, r, d = int(rng.integers(0, 6)), int(rng.integers(0, 6)), int(rng.integers(0, 5))
        left, right = _rows(rng, m), _rows(rng, r)
        right = np.vstack([right, np.zeros((1, 2))])  # the stream's released stand-in on the right
        case = bw.WindowCase(bw.LeftCase(left, (bw.ONE,) * (m + 1), False, None, d),
                             bw.RightCase(right, (bw.ONE,) * right.shape[0]))
        got = bw.window_bound(((a, a), (b, b)), [case]).total
        # the stand-in (released) and d released records before it: the first record is d steps earlier
        world, p = _world(np.vstack([left, np.zeros((1 + d, 2))]), right, None)
        truth = worst_over_initial(transition(a, b), world, p).total
        assert got == pytest.approx(truth, rel=1e-9, abs=1e-9) or (math.isinf(got) and math.isinf(truth)), (a, b, left, right, d)


def test_a_left_side_redacted_to_the_first_record_leaks_nothing() -> None:
    box = ((0.05, 0.09), (0.1, 0.2))
    right = np.vstack([np.full((3, 2), 0.5), np.zeros((1, 2))])
    full = bw.WindowCase(bw.LeftCase(np.ones((4, 2)), (bw.ONE,) * 4, True, None, 0), bw.RightCase(right, (bw.ONE,) * 4))
    alone = bw.WindowCase(None, bw.RightCase(right, (bw.ONE,) * 4))
    assert bw.window_bound(box, [full]).left == 0.0
    assert bw.window_bound(box, [full]).total == bw.window_bound(box, [alone]).total


def test_kernel_boxes_enclose_every_power() -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):
        a0, b0 = rng.uniform(0.0, 0.9, 2)
        box = ((a0, min(1.0, a0 + rng.uniform(0, 0.3))), (b0, min(1.0, b0 + rng.uniform(0, 0.3))))
        n = int(rng.integers(1, 30))
        for kind, ns in (((n, n), [n]), ((n, math.inf), [n, n + 1, n + 7, 500])):
            lo_a, hi_a, lo_b, hi_b = bw.kernel_box(box, kind)
            for _ in range(5):
                a, b = rng.uniform(*box[0]), rng.uniform(*box[1])
                for k in ns:
                    Pk = np.linalg.matrix_power(transition(max(a, 1e-12), max(b, 1e-12)) if 0 < a < 1 and 0 < b < 1
                                                else np.array([[1 - a, a], [b, 1 - b]]), k)
                    assert lo_a - 1e-12 <= Pk[0, 1] <= hi_a + 1e-12 and lo_b - 1e-12 <= Pk[1, 0] <= hi_b + 1e-12
