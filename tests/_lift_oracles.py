"""Hypothesis strategies and independent oracles for the paper-003 tests (lift, watchdog, AORR, SRR).

The oracles recompute what the library computes by a different route: lifts from the posterior
P(s|y) (Bayes on the joint P_SXY), mutual information from the joint P_XY, and polytope vertices by
naive enumeration of every basis of the full constraint system (no support lemma)."""

from __future__ import annotations

from itertools import combinations

import numpy as np
from hypothesis import strategies as st
from numpy.typing import NDArray

from streamguard.perturbation.model import Joint


@st.composite
def joints(draw: st.DrawFn, max_s: int = 4, max_x: int = 8, min_x: int = 2) -> Joint:
    """A random joint with |S| ≤ max_s, |X| ≤ max_x and entries spread over four decades (so some
    lifts are extreme), normalised to sum 1."""
    n_s = draw(st.integers(2, max_s))
    n_x = draw(st.integers(min_x, max_x))
    exps = draw(st.lists(st.floats(-4.0, 0.0), min_size=n_s * n_x, max_size=n_s * n_x))
    p = 10.0 ** np.array(exps).reshape(n_s, n_x)
    return Joint(p / p.sum())


@st.composite
def channels(draw: st.DrawFn, n_x: int, max_y: int = 5) -> NDArray[np.float64]:
    """A random row-stochastic matrix with n_x rows (some entries exactly zero)."""
    n_y = draw(st.integers(1, max_y))
    w = np.array(draw(st.lists(st.sampled_from([0.0, 0.01, 0.1, 0.3, 0.5, 1.0, 2.0]),
                               min_size=n_x * n_y, max_size=n_x * n_y))).reshape(n_x, n_y)
    w[:, 0] += 1e-3  # every row has mass
    return w / w.sum(axis=1, keepdims=True)


def posterior_lifts(joint: Joint, w: NDArray[np.float64]) -> NDArray[np.float64]:
    """l(s, y) = P(s|y)/P(s) from the joint P_SXY(s, x, y) = P_SX(s, x)·W(y|x); outputs with P_Y = 0 dropped."""
    p_sxy = joint.p[:, :, None] * w[None, :, :]
    p_sy = p_sxy.sum(axis=1)
    p_y = p_sxy.sum(axis=(0, 1))
    keep = p_y > 0
    post = p_sy[:, keep] / p_y[keep]
    return post / joint.p_s[:, None]


def mutual_information_xy(joint: Joint, w: NDArray[np.float64]) -> float:
    """I(X;Y) in nats from the joint P_XY = diag(P_X)·W (0·log 0 = 0)."""
    p_xy = joint.p_x[:, None] * w
    p_y = p_xy.sum(axis=0)
    mask = p_xy > 0
    ratio = p_xy[mask] / (joint.p_x[:, None] * p_y[None, :])[mask]
    return float(np.sum(p_xy[mask] * np.log(ratio)))


def mutual_information_sy(joint: Joint, w: NDArray[np.float64]) -> float:
    """I(S;Y) in nats."""
    p_sy = joint.p @ w
    p_y = p_sy.sum(axis=0)
    mask = p_sy > 0
    return float(np.sum(p_sy[mask] * np.log((p_sy / (joint.p_s[:, None] * p_y[None, :]))[mask])))


def entropy_x(joint: Joint) -> float:
    return float(-np.sum(joint.p_x * np.log(joint.p_x)))


def naive_vertices(b: NDArray[np.float64], lo: NDArray[np.float64], hi: NDArray[np.float64],
                   tol: float = 1e-10) -> NDArray[np.float64]:
    """Vertices of {v ≥ 0, Σ v = 1, lo ≤ B v ≤ hi} by brute force: every choice of n − 1 inequalities
    made active together with Σ v = 1, solved, kept if feasible; rows rounded and deduplicated."""
    n_s, n = b.shape
    rows = [np.eye(n)[i] for i in range(n)] + [b[s] for s in range(n_s)] + [b[s] for s in range(n_s)]
    rhs = [0.0] * n + list(lo) + list(hi)
    found = []
    for active in combinations(range(len(rows)), n - 1):
        a = np.array([np.ones(n)] + [rows[i] for i in active])
        r = np.array([1.0] + [rhs[i] for i in active])
        if abs(np.linalg.det(a)) < 1e-12:
            continue
        v = np.linalg.solve(a, r)
        bv = b @ v
        if v.min() >= -tol and np.all(bv >= lo - tol) and np.all(bv <= hi + tol):
            found.append(np.where(np.abs(v) < 1e-12, 0.0, v))
    if not found:
        return np.empty((0, n))
    keys = np.round(np.array(found) * 1e9).astype(np.int64)
    _, first = np.unique(keys, axis=0, return_index=True)
    return np.array(found)[np.sort(first)]
