"""Exact Pufferfish evaluator (streamguard.audit.pufferfish): reference numbers, the lattice
reduction against brute-force scans, and MQM releases / sequences against their ε and the accountant."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamguard import MarkovChain
from streamguard.audit.pufferfish import EvaluatorError, LaplaceRelease, pufferfish_epsilon
from streamguard.ledger.composition import MqmRelease, thm_III7
from streamguard.quilt import QuiltModel, sigma_inf, sigma_max, sigma_supq
from streamguard.quilt import release as aggregate
from streamguard.quilt.accountant import QuiltAccountant
from streamguard.quilt.release import AggregateRelease
from streamguard.sampling import SeededSource

E = math.e
P_CE, Q_CE = 0.9, 0.01  # notes/002 §4.4–5: P(X2=1|X1=1) = p, P(X2=1|X1=0) = q
CE_CHAIN = [[1 - Q_CE, Q_CE], [1 - P_CE, P_CE]]


# --------------------------------------------------------------- Theorem III.4 (notes/002 §5)


def test_thm_III4_closed_forms_for_the_continuous_laplace():
    """The paper's formulas (continuous Lap(1)), evaluated exactly: notes/002 §5 table."""
    p, q = P_CE, Q_CE
    assert ((q + E * (1 - q)) / (p + E * (1 - p))) ** 2 == pytest.approx(5.313163, abs=1e-6)
    assert ((E * p + 1 - p) / (E * q + 1 - q)) ** 2 == pytest.approx(6.267199, abs=1e-6)
    assert (q + E**2 * (1 - q)) / (p + E**2 * (1 - p)) == pytest.approx(4.469547, abs=1e-6)
    assert (E**2 * p + 1 - p) / (E**2 * q + 1 - q) == pytest.approx(6.344779, abs=1e-6)
    single = 1 + 0.5 * math.log(6.267199)
    pair = 2 + math.log((E**2 * p + 1 - p) / (E**2 * q + 1 - q))
    assert single == pytest.approx(1.917665, abs=1e-6)
    assert pair == pytest.approx(3.847632, abs=1e-6) and pair > 2 * single == pytest.approx(3.835330, abs=1e-6)


def test_thm_III4_discrete_mechanism_shows_the_same_failure():
    """F = X_1 + X_2 plus discrete Laplace(1), twice: each release is 1.917665-private about X_1,
    the pair leaks 3.847632 > 2 × 1.917665 (same numbers: integer queries, module docstring)."""
    for initial in ([0.5, 0.5], [0.9, 0.1]):  # the secret X_1 is conditioned on: any start
        chain = MarkovChain(CE_CHAIN, initial)
        F = LaplaceRelease.count(2, 1, 0, 1, 1.0)
        single = pufferfish_epsilon(chain, 2, [F]).eps_at(0)
        pair = pufferfish_epsilon(chain, 2, [F, F]).eps_at(0)
        assert single == pytest.approx(1.917665, abs=1e-6)
        assert pair == pytest.approx(3.847632, abs=1e-6)
        assert pair - 2 * single == pytest.approx(0.012303, abs=1e-6)
    # the full framework (secrets on X_1 and X_2), uniform start: still violated (notes §5)
    chain = MarkovChain(CE_CHAIN, [0.5, 0.5])
    single = pufferfish_epsilon(chain, 2, [F]).epsilon
    pair = pufferfish_epsilon(chain, 2, [F, F]).epsilon
    assert single == pytest.approx(1.921552, abs=1e-6) and pair == pytest.approx(3.849495, abs=1e-6)
    assert pair > 2 * single


# ------------------------------------------------------------ the lattice reduction is exact


def _direct_log_density(chain, T, releases, i, a, w):
    """log P(w | X_i = a) by explicit sums (no lattice, no kernels matrices)."""
    num = den = 0.0
    for x in itertools.product(range(chain.k), repeat=T):
        if x[i] != a:
            continue
        px = chain.initial[x[0]] * np.prod([chain.matrix[x[t - 1], x[t]] for t in range(1, T)])
        lik, c = 1.0, 0
        for r in releases:
            f = r.phi[list(x[r.lo : r.hi + 1])].sum(axis=0)
            tau = math.exp(-1.0 / r.beta)
            for j in range(r.dim):
                lik *= (1 - tau) / (1 + tau) * tau ** abs(w[c] - f[j])
                c += 1
        num += px * lik
        den += px
    return math.log(num / den)


def test_sup_over_a_wide_integer_box_equals_the_lattice_value():
    """Brute-force scan of every integer output in a box well beyond the centres."""
    chain = MarkovChain([[0.7, 0.2, 0.1], [0.2, 0.5, 0.3], [0.3, 0.3, 0.4]], initial=[0.2, 0.5, 0.3])
    T = 3
    rels = [LaplaceRelease.count(3, 2, 0, 1, 0.8), LaplaceRelease.sum_of([0, 3, 5], 1, 2, 2.5)]
    res = pufferfish_epsilon(chain, T, rels)
    box = list(itertools.product(range(-4, 7), range(-6, 17)))
    for i, a, b in [(0, 0, 2), (1, 1, 0), (2, 2, 1), (1, 0, 2)]:
        scan = max(_direct_log_density(chain, T, rels, i, a, w) - _direct_log_density(chain, T, rels, i, b, w)
                   for w in box)
        assert scan == pytest.approx(res.pairs[i, a, b], abs=1e-9)


def test_continuous_laplace_has_the_same_sup_on_a_fine_real_grid():
    """Same query with continuous Lap(β): a fine real grid never exceeds the lattice value and gets within 1e-6."""
    chain = MarkovChain([[0.8, 0.2], [0.3, 0.7]])
    beta = 1.3
    T = 3
    res = pufferfish_epsilon(chain, T, [LaplaceRelease.count(2, 1, 0, 2, beta)])
    X = np.array(list(itertools.product(range(2), repeat=T)))
    px = chain.initial[X[:, 0]] * chain.matrix[X[:, 0], X[:, 1]] * chain.matrix[X[:, 1], X[:, 2]]
    f = X.sum(axis=1)
    w = np.linspace(-3, 6, 90_001)  # includes the centres 0..3 exactly
    dens = np.exp(-np.abs(w[None, :] - f[:, None]) / beta)  # (sequences, grid)
    for i in range(T):
        pa = (px[X[:, i] == 1, None] * dens[X[:, i] == 1]).sum(0) / px[X[:, i] == 1].sum()
        pb = (px[X[:, i] == 0, None] * dens[X[:, i] == 0]).sum(0) / px[X[:, i] == 0].sum()
        grid = np.abs(np.log(pa / pb)).max()
        assert grid <= res.eps_at(i) + 1e-12 and grid == pytest.approx(res.eps_at(i), abs=1e-6)


def test_iid_data_gives_the_classic_laplace_guarantee():
    """Independent records: a count is exactly 1/β-private, a histogram 2/β, outside positions 0."""
    chain = MarkovChain([[0.3, 0.7], [0.3, 0.7]])
    beta = 1.7
    res = pufferfish_epsilon(chain, 5, [LaplaceRelease.count(2, 0, 1, 3, beta)])
    np.testing.assert_allclose(res.per_position, [0, 1 / beta, 1 / beta, 1 / beta, 0], atol=1e-12)
    chain3 = MarkovChain([[0.2, 0.5, 0.3]] * 3)
    res = pufferfish_epsilon(chain3, 4, [LaplaceRelease.histogram(3, 0, 3, beta)])
    np.testing.assert_allclose(res.per_position, 2 / beta, atol=1e-12)


def test_impossible_secrets_are_excluded_and_limits_are_enforced():
    chain = MarkovChain([[0.5, 0.5], [0.5, 0.5]], initial=[1.0, 0.0])
    res = pufferfish_epsilon(chain, 3, [LaplaceRelease.count(2, 1, 0, 2, 1.0)])
    assert np.isnan(res.pairs[0, 0, 1]) and res.eps_at(0) == 0.0  # X_1 = 1 is impossible
    assert res.eps_at(1) == pytest.approx(1.0, abs=1e-12)
    with pytest.raises(EvaluatorError):
        pufferfish_epsilon(MarkovChain([[0.5, 0.5], [0.5, 0.5]]), 20, [LaplaceRelease.count(2, 1, 0, 1, 1.0)])
    with pytest.raises(EvaluatorError):
        pufferfish_epsilon(chain, 3, [LaplaceRelease.count(2, 1, 0, 5, 1.0)])
    with pytest.raises(EvaluatorError):
        LaplaceRelease.count(2, 1, 0, 1, 0.0)


# ------------------------------------------------- MQM releases against their claims (quilt module)

C3 = [[0.6, 0.4], [0.4, 0.6]]
STICKY = [[0.9, 0.1], [0.1, 0.9]]


def _evaluated(rel: AggregateRelease) -> LaplaceRelease:
    """The exact law an aggregate release record describes, in lattice steps at its *realised* noise scale
    (a mean's lattice is its grid: the window sum of grid units; dividing by |W| is post-processing)."""
    k, beta = rel.query["k"], rel.noise_scale
    if rel.kind == "histogram":
        return LaplaceRelease.histogram(k, rel.lo, rel.hi, beta)
    if rel.kind == "count":
        return LaplaceRelease.count(k, rel.query["state"], rel.lo, rel.hi, beta)
    return LaplaceRelease.sum_of(rel.query["grid_units"], rel.lo, rel.hi, beta)


@st.composite
def _chain_case(draw, modes):
    k = draw(st.sampled_from([2, 3]))
    rows = [draw(st.lists(st.floats(0.05, 1.0), min_size=k, max_size=k)) for _ in range(k)]
    P = np.array(rows) / np.array(rows).sum(axis=1, keepdims=True)
    mode = draw(st.sampled_from(modes))
    w = np.array(draw(st.lists(st.floats(0.05, 1.0), min_size=k, max_size=k)))
    q = w / w.sum()
    T = draw(st.integers(2, 8 if k == 2 else 6))
    # the adversary the evaluator plays: π for stat, the model's q for q, an arbitrary start otherwise
    adversary = MarkovChain(P) if mode == "stat" else MarkovChain(P, q)
    model = QuiltModel(MarkovChain(P) if mode in ("stat", "supq", "approx") else MarkovChain(P, q), mode)
    return model, adversary, T


@given(_chain_case(["stat", "supq", "q", "approx"]), st.data())
def test_a_single_mqm_release_is_within_its_epsilon(case, data):
    """Property: exact Pufferfish ε of one released histogram / count / mean record ≤ its ε target,
    for σ_max(T) (and σ_∞ / σ̄_supq) from the quilt module, under every modelled adversary."""
    model, adversary, T = case
    k = model.k
    eps = data.draw(st.floats(0.3, 4.0))
    lo = data.draw(st.integers(0, T - 1))
    hi = data.draw(st.integers(lo, T - 1))
    scales = [sigma_max(model, eps, T)]
    if model.mode in ("stat", "approx"):
        scales.append(sigma_inf(model, eps))
    elif model.mode == "supq":
        scales.append(sigma_supq(model, eps))
    scale = data.draw(st.sampled_from(scales))
    kind = data.draw(st.sampled_from(["histogram", "count", "mean"]))
    states = np.zeros(hi - lo + 1, dtype=np.int64)  # the values do not matter: the law is evaluated
    src = SeededSource(0)
    if kind == "histogram":
        rel = aggregate.histogram(states, lo, model, scale, src)
    elif kind == "count":
        rel = aggregate.count(states, lo, data.draw(st.integers(0, k - 1)), model, scale, src)
    else:
        vals = data.draw(st.lists(st.integers(0, 4), min_size=k, max_size=k))
        rel = aggregate.mean(states, lo, [v / 4 for v in vals], 0.0, 1.0, 0.25, model, scale, src)
    true = pufferfish_epsilon(adversary, T, [_evaluated(rel)]).epsilon
    assert true <= rel.epsilon + 1e-9


@given(_chain_case(["stat", "supq", "approx"]), st.data())
def test_release_sequences_within_accountant_within_sum(case, data):
    """Property: exact ε of 2–3 MQM releases (any windows, different ε and quilts) ≤ the quilt
    accountant's ε_max ≤ Σ ε_k (Thm III.7, whose conditions hold: whole-chain σ's)."""
    model, adversary, T = case
    k = model.k
    acc = QuiltAccountant(model)
    rels, records = [], []
    for _ in range(data.draw(st.integers(2, 3))):
        eps = data.draw(st.floats(0.3, 4.0))
        lo = data.draw(st.integers(0, T - 1))
        hi = data.draw(st.integers(lo, T - 1))
        whole = sigma_max(model, eps, T)
        free = sigma_supq(model, eps) if model.mode == "supq" else sigma_inf(model, eps)
        scale = data.draw(st.sampled_from([whole, free]))
        rel = aggregate.count(np.zeros(hi - lo + 1, dtype=np.int64), lo, data.draw(st.integers(0, k - 1)), model,
                              scale, SeededSource(0))
        acc.record(rel.lo, rel.hi, rel.load)
        rels.append(rel)
        records.append(MqmRelease(rel.epsilon, rel.lo, rel.hi, rel.model, rel.mode, rel.T))
    true = pufferfish_epsilon(adversary, T, [_evaluated(r) for r in rels]).epsilon
    paper = thm_III7(records, T)
    assert paper.applicable and paper.epsilon == pytest.approx(sum(r.epsilon for r in rels))
    assert true <= acc.eps_max() + 1e-9
    assert acc.eps_max() <= paper.epsilon + 1e-9


@pytest.mark.parametrize("T,eps,windows,true,accountant", [
    (8, [1, 2], None, 2.0361, 2.2800),
    (7, [1, 2, 4], None, 5.4585, 5.4690),
    (8, [4, 4], None, 7.1872, 7.1891),
    (8, [2, 2], [(0, 3), (4, 7)], 1.6837, 2.0),
    (12, [2, 2], [(0, 3), (8, 11)], 1.6465, 2.0),
])
def test_notes_accountant_table_C3(T, eps, windows, true, accountant):
    """notes/002 §4.7 table: count releases on C3 with E-stat σ_max(T): true ≤ accountant ≤ Σ ε."""
    chain = MarkovChain(C3)
    model = QuiltModel(chain, "stat")
    acc = QuiltAccountant(model)
    rels = []
    for n, e in enumerate(eps):
        lo, hi = windows[n] if windows else (0, T - 1)
        sigma = sigma_max(model, e, T).sigma
        rels.append(LaplaceRelease.count(2, 1, lo, hi, sigma))
        acc.record(lo, hi, 1 / sigma)
    assert pufferfish_epsilon(chain, T, rels).epsilon == pytest.approx(true, abs=1e-4)
    assert acc.eps_max() == pytest.approx(accountant, abs=1e-4)
    assert acc.eps_max() <= sum(eps) + 1e-9


@pytest.mark.parametrize("P,eps,W,T,short,stream", [
    (STICKY, 4.0, 3, 6, 4.7257, 1.5007),
    (STICKY, 3.0, 4, 8, 3.4669, 0.9589),
    (STICKY, 1.0, 3, 6, 1.4409, None),
    (C3, 1.0, 4, 8, None, 0.4177),
    (C3, 2.0, 3, 6, None, 1.6795),
])
def test_tumbling_windows_need_sigma_inf_not_the_short_window_sigma(P, eps, W, T, short, stream):
    """notes/002 §6.7: adjacent windows each with its own σ_max(W) exceed ε; with σ_∞(ε) they stay within."""
    chain = MarkovChain(P)
    model = QuiltModel(chain, "stat")
    starts = range(0, T, W)
    if short is not None:
        s = sigma_max(model, eps, W).sigma
        got = pufferfish_epsilon(chain, T, [LaplaceRelease.count(2, 1, j, j + W - 1, s) for j in starts]).epsilon
        assert got == pytest.approx(short, abs=1e-4) and got > eps
        records = [MqmRelease(eps, j, j + W - 1, model.identifier, "stat", W) for j in starts]
        assert not thm_III7(records).applicable  # the paper rule refuses them too
    if stream is not None:
        s = sigma_inf(model, eps).sigma
        got = pufferfish_epsilon(chain, T, [LaplaceRelease.count(2, 1, j, j + W - 1, s) for j in starts]).epsilon
        assert got == pytest.approx(stream, abs=1e-4) and got <= eps
