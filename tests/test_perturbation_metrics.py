"""Channel metrics (streamguard.perturbation.metrics) against the reference values of notes/001 §10,
notes/003 §5.1 and notes/004 §6, and the inequalities every channel must satisfy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamguard.perturbation import Joint, PerturbationChannel
from streamguard.perturbation.metrics import METRIC_KEYS, channel_metrics, metrics_from_json, metrics_json

LN2 = math.log(2.0)


def _channel(matrix, *, inputs="x", n_s=None, outputs=None) -> PerturbationChannel:
    m = np.asarray(matrix, dtype=np.float64)
    n_x = m.shape[0] if inputs == "x" else m.shape[1]
    return PerturbationChannel("test", m, inputs, n_s or n_x, n_x, tuple(outputs or range(m.shape[1])))


# ---------------------------------------------------------------------------------------------
# notes/004 §6 Case A (paper Example 1, α = 0.5) and Case B
# ---------------------------------------------------------------------------------------------

EX1 = Joint(np.array([[0.3 * 0.2, 0.3 * 0.1, 0.3 * 0.5, 0.3 * 0.2], [0.7 * 0.5, 0.7 * 0.3, 0.7 * 0.1, 0.7 * 0.1]]))


def test_lemma1_kernel_example1():
    """K = (1−α)I + α·1·P_Xᵀ at α = 0.5: D_TV 0.3545, I(X;Y) 0.428423 bits, X-LDP 2.162438,
    LDP w.r.t. S log 2.25, log-lift log(0.36/0.22)."""
    px = EX1.p_x
    K = 0.5 * np.eye(4) + 0.5 * np.tile(px, (4, 1))
    m = channel_metrics(_channel(K), EX1)
    assert m["distortion"] == pytest.approx(0.3545, abs=1e-12)
    assert m["mi_xy"] / LN2 == pytest.approx(0.428423, abs=1e-6)
    assert m["ldp_x"] == pytest.approx(2.162438, abs=1e-6)
    assert m["ldp_s"] == pytest.approx(math.log(2.25), abs=1e-12)
    assert m["log_lift"] == pytest.approx(math.log(0.36 / 0.22), abs=1e-12)
    assert m["max_lift"] == pytest.approx(0.36 / 0.22, abs=1e-12)


def test_nonmarkov_kernel_case_b():
    """Case B's non-Markov TV kernel (rows by (s, x)): D_TV 0.1, LDP log 2, log-lift log 1.5."""
    joint = Joint(np.array([[0.3, 0.15, 0.05], [0.1, 0.15, 0.25]]))
    Q = np.array([
        [5 / 6, 0, 1 / 6], [0, 1, 0], [0, 0, 1],       # s = 0
        [1, 0, 0], [0, 1, 0], [0.2, 0, 0.8],           # s = 1
    ])
    m = channel_metrics(_channel(Q, inputs="sx", n_s=2), joint)
    assert m["distortion"] == pytest.approx(0.1, abs=1e-12)
    assert m["ldp_s"] == pytest.approx(LN2, abs=1e-12)
    assert m["log_lift"] == pytest.approx(math.log(1.5), abs=1e-12)
    assert m["ldp_x"] == math.inf  # non-Markov kernels have zeros (notes/004 §7)


# ---------------------------------------------------------------------------------------------
# notes/003 §5.1 Case A
# ---------------------------------------------------------------------------------------------

LIFT_A = Joint(np.array([[0.20, 0.15, 0.10, 0.05], [0.05, 0.10, 0.15, 0.20]]))


def test_complete_merging_case_a():
    """{0, 3} merged: I(X;Y) = log 4 − ½ log 2, realised LDP log 1.5, lift range [0.8, 1.2]."""
    W = np.array([[0, 0, 1], [1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype=float)
    m = channel_metrics(_channel(W, outputs=[1, 2, (0, 3)]), LIFT_A)
    assert m["mi_xy"] == pytest.approx(1.039721, abs=1e-6)
    assert m["mi_xy"] / m["h_x"] == pytest.approx(0.75, abs=1e-12)
    assert m["ldp_s"] == pytest.approx(math.log(1.5), abs=1e-12)
    assert (m["max_lift"], m["min_lift"]) == (pytest.approx(1.2), pytest.approx(0.8))
    # convention: releasing the merged group counts as a distortion for x = 0 and x = 3
    assert m["distortion"] == pytest.approx(0.5, abs=1e-12)


def test_aorr_closed_form_case_a():
    """AORR at (0.5, 0.5): I = log 4 − ½·h(a) = 1.1566872, min-lift active (|log Ψ| = 0.5),
    max-lift leakage 0.3318."""
    a = (0.8 - 0.5 * math.exp(-0.5)) / 0.6
    W = np.array([[a, 1 - a, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1], [1 - a, a, 0, 0]])
    m = channel_metrics(_channel(W, outputs=[(0, 3), (0, 3), 1, 2]), LIFT_A)
    assert m["mi_xy"] == pytest.approx(1.1566872, abs=1e-7)
    assert m["alip_eps_l"] == pytest.approx(0.5, abs=1e-12)
    assert m["alip_eps_u"] == pytest.approx(0.3318, abs=1e-4)


# ---------------------------------------------------------------------------------------------
# notes/001 §10 exact E_i / E_d matrices (prior-only joints: S = X)
# ---------------------------------------------------------------------------------------------


def test_e_i_and_e_d_case_a():
    prior = Joint.from_prior([0.7, 0.3])
    e_i = channel_metrics(_channel([[27 / 28, 1 / 28], [1 / 4, 3 / 4]]), prior)
    assert e_i["identifiability"] == pytest.approx(math.log(9), abs=1e-12)
    assert e_i["ldp_x"] == pytest.approx(math.log(21), abs=1e-12)
    assert e_i["distortion"] == pytest.approx(0.1, abs=1e-12)
    assert e_i["mi_xy"] == pytest.approx(0.285781, abs=1e-6)  # = R(0.1), the Shannon lower bound
    e_d = channel_metrics(_channel([[0.9, 0.1], [0.1, 0.9]]), prior)
    assert e_d["identifiability"] == pytest.approx(math.log(21), abs=1e-12)
    assert e_d["ldp_x"] == pytest.approx(math.log(9), abs=1e-12)
    assert e_d["mi_xy"] == pytest.approx(0.315953, abs=1e-6)


def test_e_i_case_b():
    W = [[32 / 35, 2 / 35, 1 / 35], [4 / 21, 16 / 21, 1 / 21], [2 / 7, 1 / 7, 4 / 7]]
    m = channel_metrics(_channel(W), Joint.from_prior([0.5, 0.3, 0.2]))
    assert m["identifiability"] == pytest.approx(math.log(8), abs=1e-12)
    assert m["ldp_x"] == pytest.approx(math.log(20), abs=1e-12)
    assert m["distortion"] == pytest.approx(0.2, abs=1e-12)
    assert m["mi_xy"] == pytest.approx(0.390621, abs=1e-6)


# ---------------------------------------------------------------------------------------------
# Properties and JSON
# ---------------------------------------------------------------------------------------------


@st.composite
def joints_and_channels(draw):
    n_s, n_x, n_y = draw(st.integers(2, 4)), draw(st.integers(2, 5)), draw(st.integers(1, 5))
    p = np.array([[draw(st.floats(0.01, 1.0)) for _ in range(n_x)] for _ in range(n_s)])
    W = np.array([[draw(st.one_of(st.just(0.0), st.floats(0.01, 1.0))) for _ in range(n_y)] for _ in range(n_x)])
    W[W.sum(axis=1) == 0, 0] = 1.0
    return Joint(p / p.sum()), _channel(W / W.sum(axis=1, keepdims=True), outputs=range(n_y))


@given(joints_and_channels())
def test_metric_inequalities(case):
    joint, ch = case
    m = channel_metrics(ch, joint)
    assert set(m) == set(METRIC_KEYS)
    tol = 1e-9
    assert m["min_lift"] <= 1 + tol and m["max_lift"] >= 1 - tol  # Σ_s P_S l(s, y) = 1
    assert m["log_lift"] <= m["ldp_s"] + tol  # notes/004 §2: L^LL ≤ L^LDP ≤ 2 L^LL
    assert m["ldp_s"] <= 2 * m["log_lift"] + tol
    assert m["ldp_s"] <= m["ldp_x"] + tol  # post-processing of X
    assert m["mi_sy"] <= m["mi_xy"] + tol  # data processing along S – X – Y
    assert m["mi_sy"] <= m["alip_eps_u"] + tol  # notes/003 Prop. 1.1
    assert m["mi_xy"] <= m["h_x"] + tol
    assert 0.0 <= m["distortion"] <= 1.0


def test_identity_channel():
    m = channel_metrics(_channel(np.eye(4)), LIFT_A)
    assert m["mi_xy"] == pytest.approx(m["h_x"]) and m["distortion"] == 0.0
    # Y = X reveals X: P(x'|y) = 0 < P(y|y) gives infinite identifiability and input LDP (notes/001 §7.6)
    assert m["ldp_x"] == math.inf and m["identifiability"] == math.inf


def test_metrics_json_round_trip():
    m = channel_metrics(_channel(np.eye(4)), LIFT_A)
    doc = metrics_json(m)
    assert doc["ldp_x"] == "inf"
    assert metrics_from_json(doc) == m
    with pytest.raises(ValueError, match="ldp_s"):
        metrics_from_json({**doc, "ldp_s": "NaN"})


def test_incompatible_alphabets_refused():
    with pytest.raises(ValueError, match=r"\|X\| = 3"):
        channel_metrics(_channel(np.eye(3)), LIFT_A)
