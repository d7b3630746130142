"""MQM noise scales (streamguard.quilt.scale): notes/002 §7 oracles, naive Algorithm 1, properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from streamguard import MarkovChain
from streamguard.quilt import (
    InfiniteScaleError,
    QuiltModel,
    epsilon_of_load,
    max_influence,
    sigma_inf,
    sigma_max,
    sigma_max_naive,
    sigma_supq,
)
from streamguard.quilt.influence import E_SLACK, eigengap

CHAINS = {
    "C1": [[0.9, 0.1], [0.2, 0.8]],
    "C2": [[0.8, 0.2], [0.2, 0.8]],
    "C3": [[0.6, 0.4], [0.4, 0.6]],
    "C4": [[0.8, 0.15, 0.05], [0.1, 0.8, 0.1], [0.05, 0.15, 0.8]],
    "C5": [[0.2, 0.7, 0.1], [0.1, 0.2, 0.7], [0.7, 0.1, 0.2]],
}
TOL = 1e-4
EPS = (0.5, 1.0, 2.0)

# notes/002 §7 "Noise scale σ_max": chain → mode → per ε (T = 10 value, saturated value)
SIGMA = {
    "C1": {"stat": [(20, 54.9037), (10, 22.2984), (5, 8.2891)],
           "supq": [(20, 56.4065), (10, 22.9249), (5, 8.6896)],
           "approx": [(20, 97.7399), (10, 42.2865), (5, 17.7433)],
           "approx-rev": [(20, 82.6910), (10, 35.7500), (5, 14.9877)]},
    "C2": {"stat": [(20, 33.5055), (10, 13.0751), (4.4556, 4.4556)],
           "supq": [(20, 35.3414), (10, 14.2152), (4.9813, 5.1246)],
           "approx": [(20, 71.2797), (10, 30.3497), (5, 12.3582)],
           "approx-rev": [(20, 56.5463), (10, 23.9791), (5, 9.7609)]},
    "C3": {"stat": [(8.8257, 8.8257), (3.5718, 3.5718), (0.8410, 0.8410)],
           "supq": [(9.5248, 9.5248), (3.9480, 3.9480), (1.2543, 1.2543)],
           "approx": [(20, 46.7926), (10, 19.8131), (5, 8.0204)],
           "approx-rev": [(20, 27.4154), (10, 11.5368), (4.5933, 4.5933)]},
    "C4": {"stat": [(20, 71.3322), (10, 29.5257), (5, 11.4612)],
           "supq": [(20, 74.0264), (10, 30.9170), (5, 12.1728)],
           "approx": [(20, 117.6059), (10, 51.1957), (5, 21.6798)]},
    "C5": {"stat": [(20, 32.5216), (10, 13.1976), (4.6794, 4.6794)],
           "supq": [(20, 34.0181), (10, 14.2742), (5, 5.4139)],
           "approx": [(20, 71.7569), (10, 30.9202), (5, 12.9812)]},
}
# σ_∞ witnesses (a, b, e) of notes §7
WITNESS = {
    ("C1", "stat"): [(11, 11, 0.1175), (9, 9, 0.2376), (6, 6, 0.6730)],
    ("C1", "approx"): [(22, 20, 0.0805), (19, 16, 0.1960), (16, 13, 0.4219)],
    ("C2", "stat"): [(7, 7, 0.1120), (5, 5, 0.3117), (3, 3, 0.8778)],
    ("C2", "approx"): [(16, 14, 0.0932), (14, 11, 0.2092), (11, 9, 0.4626)],
    ("C3", "stat"): [(2, 2, 0.1601), (2, 2, 0.1601), (1, 1, 0.8109)],
    ("C4", "stat"): [(15, 15, 0.0935), (12, 12, 0.2210), (8, 8, 0.6912)],
    ("C4", "approx"): [(27, 24, 0.0749), (23, 20, 0.1796), (19, 16, 0.4317)],
    ("C5", "stat"): [(7, 7, 0.1003), (5, 5, 0.3181), (3, 3, 0.9315)],
    ("C5", "approx"): [(17, 15, 0.0680), (14, 12, 0.1915), (12, 10, 0.3823)],
}
SUPQ_BAR = {"C1": (57.7954, 23.8441, 9.2380), "C2": (37.1543, 15.0240, 5.6026),
            "C4": (77.3280, 32.6617, 13.1441), "C5": (35.5290, 14.9251, 5.9509)}
SUPQ_BAR_WITNESS = {"C1": ((13, 12), (10, 9), (8, 6))}
SATURATION = {("C1", "stat"): (29, 23, 17), ("C1", "approx"): (50, 43, 36),
              ("C4", "stat"): (37, 31, 23), ("C4", "approx"): (60, 52, 44)}
A_STAR = {"C1": (18, 16, 12), "C3": (10, 8, 6), "C4": (22, 18, 14)}
# binary grid: T = 100, ε = 1, P = [[1−q, q], [1−p, p]]; rows p, columns q = .1 .3 .5 .7 .9
GRID_PQ = (0.1, 0.3, 0.5, 0.7, 0.9)
GRID = {
    "stat": [[1.000, 4.337, 7.737, 13.580, 31.738], [5.715, 1.000, 3.707, 6.724, 13.580],
             [9.898, 3.801, 1.000, 3.707, 7.737], [16.625, 6.724, 3.801, 1.000, 4.337],
             [31.738, 16.625, 9.898, 5.715, 1.000]],
    "approx-rev": [[12.922, 13.709, 16.995, 24.877, 49.220], [15.772, 10.154, 12.005, 15.572, 24.877],
                   [20.183, 12.278, 8.973, 12.005, 16.995], [28.276, 15.572, 12.278, 10.154, 13.709],
                   [49.220, 28.276, 20.183, 15.772, 12.922]],
    "approx": [[26.804, 23.399, 24.826, 31.327, 54.835], [26.867, 21.530, 20.789, 22.824, 31.327],
               [29.233, 21.318, 18.983, 20.789, 24.826], [35.642, 22.824, 21.318, 21.530, 23.399],
               [54.835, 35.642, 29.233, 26.867, 26.804]],
}


def model(name: str, mode: str) -> QuiltModel:
    return QuiltModel([MarkovChain(CHAINS[name])], mode)


CASES = [(c, m, j) for c, modes in SIGMA.items() for m in modes for j in range(3)]


@pytest.mark.parametrize("chain,mode,j", CASES)
def test_sigma_by_mode_t10_and_saturated(chain, mode, j):
    eps = EPS[j]
    t10, saturated = SIGMA[chain][mode][j]
    M = model(chain, mode)
    s10 = sigma_max(M, eps, 10)
    assert s10.sigma == pytest.approx(t10, abs=TOL)
    assert s10.witness.card / (eps - s10.witness.e) == pytest.approx(s10.sigma, rel=1e-12)
    s_long = sigma_max(M, eps, 400)
    assert s_long.sigma == pytest.approx(saturated, abs=TOL)
    assert not s_long.t_independent and s_long.T == 400
    if M.translation_invariant:
        s_inf = sigma_inf(M, eps)
        assert s_inf.t_independent and s_inf.sigma == pytest.approx(saturated, abs=TOL)


def test_c4_approx_at_t50_is_the_empty_quilt():
    M = model("C4", "approx")
    assert sigma_max(M, 0.5, 50).sigma == pytest.approx(100.0, abs=TOL)
    assert sigma_max(M, 1.0, 50).sigma == pytest.approx(50.0, abs=TOL)
    assert sigma_max(M, 0.5, 100).sigma == pytest.approx(117.6059, abs=TOL)


@pytest.mark.parametrize("key", sorted(WITNESS))
def test_sigma_inf_witnesses(key):
    M = model(*key)
    for eps, (a, b, e) in zip(EPS, WITNESS[key]):
        s = sigma_inf(M, eps)
        w = s.witness
        assert (w.a, w.b) == (a, b) and w.e == pytest.approx(e, abs=TOL)
        assert w.card == a + b - 1 and w.i == a + 1 and w.theta == 0
        assert w.e == pytest.approx(max_influence(M, w.i, w.a, w.b), abs=1e-15)


@pytest.mark.parametrize("chain", sorted(SUPQ_BAR))
def test_sigma_supq_table(chain):
    M = model(chain, "supq")
    for j, eps in enumerate(EPS):
        s = sigma_supq(M, eps)
        assert s.sigma == pytest.approx(SUPQ_BAR[chain][j], abs=TOL) and s.t_independent
        if chain in SUPQ_BAR_WITNESS:
            assert (s.witness.a, s.witness.b) == SUPQ_BAR_WITNESS[chain][j]
        assert sigma_max(M, eps, 300).sigma <= s.sigma  # conservative (notes §3.4)


@pytest.mark.parametrize("key", sorted(SATURATION))
def test_saturation_lengths(key):
    M = model(*key)
    for eps, T_sat in zip(EPS, SATURATION[key]):
        s_inf = sigma_inf(M, eps).sigma
        assert sigma_max(M, eps, T_sat).sigma == pytest.approx(s_inf, rel=1e-12)
        assert sigma_max(M, eps, T_sat - 1).sigma < s_inf * (1 - 1e-9)


@pytest.mark.parametrize("mode", sorted(GRID))
def test_binary_grid_of_the_original_paper(mode):
    for r, p in enumerate(GRID_PQ):
        for c, q in enumerate(GRID_PQ):
            M = QuiltModel([MarkovChain([[1 - q, q], [1 - p, p]])], mode)
            assert sigma_max(M, 1.0, 100).sigma == pytest.approx(GRID[mode][r][c], abs=5e-4), (p, q)


@pytest.mark.parametrize("chain", sorted(A_STAR))
def test_authors_a_star_bound(chain):
    """a* = 2⌈c⌉, c = log[(e^{ε/6}+1)/((e^{ε/6}−1)π_min)]/g (authors' code) and σ_∞ ≤ 4a*/ε (notes §3.4)."""
    ch = MarkovChain(CHAINS[chain])
    g, pi_min = eigengap(ch), ch.stationary_law.min()
    for eps, expected in zip(EPS, A_STAR[chain]):
        x = math.exp(eps / 6)
        a_star = 2 * math.ceil(math.log((x + 1) / ((x - 1) * pi_min)) / g)
        assert a_star == expected
        assert sigma_inf(QuiltModel([ch], "approx"), eps).sigma <= 4 * a_star / eps


def test_duality_and_sliding_window_load():
    M = model("C1", "stat")
    for eps in EPS:
        assert epsilon_of_load(M, 1 / sigma_inf(M, eps).sigma) == pytest.approx(eps, abs=1e-9)
    assert epsilon_of_load(M, 2 / sigma_inf(M, 1.0).sigma) == pytest.approx(1.6428, abs=TOL)  # notes §8, h = 2


def test_theta_set_takes_the_worst_chain():
    both = QuiltModel([MarkovChain(CHAINS["C3"]), MarkovChain(CHAINS["C1"])], "stat")
    s = sigma_inf(both, 1.0)
    assert s.sigma == pytest.approx(22.2984, abs=TOL) and s.witness.theta == 1
    assert sigma_max(both, 1.0, 15).sigma == sigma_max(model("C1", "stat"), 1.0, 15).sigma


# ----------------------------------------------------------------------------- properties


@st.composite
def random_models(draw, modes=("q", "stat", "supq", "approx", "approx-rev")):
    k = draw(st.sampled_from([2, 2, 3]))
    mode = draw(st.sampled_from(modes))
    if mode == "approx-rev":
        k = 2
    rows = np.array([[draw(st.floats(0.02, 1.0)) for _ in range(k)] for _ in range(k)])
    P = rows / rows.sum(axis=1, keepdims=True)
    if mode == "q":
        q = np.array([draw(st.floats(0.0, 1.0)) for _ in range(k)]) + 1e-3
        return QuiltModel([MarkovChain(P, q / q.sum())], "q")
    chains = [MarkovChain(P)]
    if draw(st.booleans()):
        extra = np.array([[draw(st.floats(0.02, 1.0)) for _ in range(k)] for _ in range(k)])
        chains.append(MarkovChain(extra / extra.sum(axis=1, keepdims=True)))
    return QuiltModel(chains, mode)


@given(random_models(), st.integers(1, 28), st.floats(0.1, 5.0))
@example(QuiltModel([MarkovChain([[0.5428571428571428, 0.45714285714285713]] * 2)], "supq"), 3, 1.0)
def test_fast_sigma_max_equals_naive_algorithm_1(M, T, eps):
    fast, naive = sigma_max(M, eps, T), sigma_max_naive(M, eps, T)
    assert fast.sigma == pytest.approx(naive.sigma, rel=1e-12)
    w = fast.witness
    assert 1 <= w.i <= T and w.card / (eps - w.e) == pytest.approx(fast.sigma, rel=1e-12)
    exact = max_influence(QuiltModel([M.chains[w.theta]], M.mode, M.initial), w.i, w.a, w.b)
    # the tables add E_SLACK to every positive term (influence.py): a term that is 0 in exact arithmetic
    # can come out +1e-16 on the fast path (then e = E_SLACK) and ≤ 0 on this one (then 0) — Hypothesis
    # found an independent chain (identical rows) with e = 1.0001e-12 against 0. Otherwise they agree.
    assert w.e == pytest.approx(exact, abs=1e-15) or (exact == 0.0 and 0.0 < w.e <= E_SLACK + 1e-15)
    assert w.card == (w.a or w.i) + (w.b or T - w.i + 1) - 1


@given(random_models(), st.floats(0.2, 4.0))
@example(QuiltModel([MarkovChain([[0.8701080132037619, 0.12989198679623812]] * 2, [0.5, 0.5])], "q"), 1.0)
@example(QuiltModel([MarkovChain([[0.20388241405655042, 0.7961175859434497]] * 2)], "supq"), 1.0)
def test_sigma_max_non_decreasing_in_t_and_below_t_independent_scales(M, eps):
    # σ = card/(ε − e) and the tables add E_SLACK to every positive influence term (influence.py:
    # e is rounded up on purpose). A term that is 0 in exact arithmetic comes out +4e-16 at some
    # nodes and ≤ 0 at others (then e = E_SLACK or 0): Hypothesis found such chains (identical rows:
    # σ_max(T) = 1 + 1.0e-12 at T = 5, 6, then 1 at T = 7; σ_max 1 + 1.0e-12 against σ̄_supq = 1).
    # The slack moves σ by a relative E_SLACK·σ/card ≤ E_SLACK·σ, which the comparisons allow for
    # — no more.
    def slack(v: float) -> float:
        return 1 + 1e-12 + E_SLACK * v

    values = [sigma_max(M, eps, T).sigma for T in range(1, 41)]
    assert all(x <= y * slack(y) for x, y in zip(values, values[1:]))
    assert all(v <= T / eps * (1 + 1e-12) for T, v in enumerate(values, start=1))
    if M.translation_invariant:
        bound = sigma_inf(M, eps).sigma
    else:  # E-q ≤ E-supq ≤ σ̄_supq
        bound = sigma_supq(QuiltModel(list(M.chains), "supq"), eps).sigma
    assert values[-1] <= bound * slack(bound)
    if M.translation_invariant:
        assert sigma_max(M, eps, 10**6).sigma == bound


def test_long_chains_are_fast_paths():
    M = model("C4", "stat")
    s = sigma_max(M, 1.0, 10**6)
    assert s.sigma == sigma_inf(M, 1.0).sigma and s.search_cells < 10**5
    sup = sigma_max(model("C1", "supq"), 1.0, 10**5)
    assert sup.sigma == pytest.approx(22.9249, abs=TOL)


def test_bad_input_and_unbounded_chains():
    M = model("C1", "stat")
    for eps in (0, -1.0, math.nan, math.inf, "1"):
        with pytest.raises(ValueError, match="epsilon"):
            sigma_max(M, eps, 10)
    for T in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="length"):
            sigma_max(M, 1.0, T)
    with pytest.raises(ValueError, match="translation-invariant"):
        sigma_inf(model("C1", "supq"), 1.0)
    with pytest.raises(ValueError, match="mode 'supq'"):
        sigma_supq(M, 1.0)
    with pytest.raises(ValueError, match="rho"):
        epsilon_of_load(M, 0.0)
    periodic = QuiltModel([MarkovChain([[0.0, 1.0], [1.0, 0.0]], [0.5, 0.5])], "stat")
    with pytest.raises(InfiniteScaleError, match="periodic"):
        sigma_inf(periodic, 1.0)
    s = sigma_max(periodic, 1.0, 12)  # only the empty quilt is usable: T/ε, never NaN
    assert s.sigma == 12.0 and s.witness.a is None and s.witness.b is None and s.witness.card == 12
    reducible = QuiltModel([MarkovChain([[1.0, 0.0], [0.3, 0.7]], [0.5, 0.5])], "q")
    r = sigma_max(reducible, 1.0, 8)
    assert r.sigma == sigma_max_naive(reducible, 1.0, 8).sigma and math.isfinite(r.sigma)
