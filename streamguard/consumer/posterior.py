"""The posterior of a redacted stream given everything released (issue 14; notes/000 §2).

Model. X_0, X_1, … is a Markov chain with transition matrix P (k states) and a law μ for the
first position; or a time-inhomogeneous chain with one kernel K_t per step t → t+1 (a time-of-day
model, docs/consumer-guide.md §3b: every formula below holds with P replaced by the step's K_t).
At every position t a local channel emits Y_t: for a published record with
redaction row r_t (r_t[x] = Pr(⊥ | X_t = x)), Y_t = X_t with probability 1 − r_t[x] and ⊥
otherwise; a position with no published record (a rejected frame, a missing reading, a record
lost in transit) carries no information, emission 1 for every x. So the likelihood of state x at
t is

    e_t(x) = 1{x = v} (1 − r_t[v])  if the value v was released,
    e_t(x) = r_t[x]                 if ⊥ was published,
    e_t(x) = 1                      if nothing is known.

This is exact when the redaction decisions depend on X only through the published rows (the
rows are functions of the marks' positions; a mark whose *placement* depends on the reading — a
privacy button pressed only when occupied — is informative and no model-based estimate can
correct for it; docs/consumer-guide.md says so).

Segments. A released value fixes X_t, and given X_t the past and the future are independent
(Markov property), so the posterior factorises into independent *runs* of unreleased positions,
each bounded by known states (or by the start law μ / by nothing at the end). Each run is solved
by scaled forward–backward in O(m·k²) for m positions; released positions have a point posterior
and cost nothing. Total cost O(#unreleased · k²).

Moments of counts. Given Y the hidden run is an inhomogeneous Markov chain with kernels
Q_t(x, y) ∝ P(x, y) e_{t+1}(y) b_{t+1}(y). For the count S_s = Σ_t 1{X_t = s} over a run, with
h_t = 1{X_t = s} − γ_t(s) and G_t(x) = E[Σ_{u>t} h_u | X_t = x] = Σ_y Q_t(x, y)(h_{t+1}(y) +
G_{t+1}(y)), the exact posterior variance is Var(S_s | Y) = Σ_t Var(h_t) + 2 Σ_t E[h_t G_t(X_t)].
Runs are independent given Y, so means and variances add.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

#: Observation code for "⊥ published" and for "nothing known at this position".
REDACTED = -1
UNKNOWN = -2


class PosteriorError(ValueError):
    """The observations are impossible under the published model (names the position, never a value)."""


@dataclass(frozen=True)
class Posterior:
    """The posterior of the hidden states X_0..X_{n−1} given the observations.

    ``marginals[t, x]`` = Pr(X_t = x | Y); ``count_mean[s]`` / ``count_var[s]`` the exact posterior
    mean and variance of Σ_{t ∈ counted} 1{X_t = s} (``counted``: the positions that are records);
    ``transitions[x, y]`` the posterior expected number of steps t → t+1 with X_t = x, X_{t+1} = y
    (over consecutive positions).
    """

    marginals: NDArray[np.float64]
    count_mean: NDArray[np.float64]
    count_var: NDArray[np.float64]
    transitions: NDArray[np.float64]
    counted: int


def emissions(obs: NDArray[np.int64], rows: NDArray[np.float64]) -> NDArray[np.float64]:
    """e_t(x) for every position (module docstring): ``obs[t]`` a state, REDACTED or UNKNOWN;
    ``rows[t]`` the redaction row used (ignored where UNKNOWN)."""
    n, k = rows.shape
    e = np.ones((n, k))
    red = obs == REDACTED
    e[red] = rows[red]
    rel = np.flatnonzero(obs >= 0)
    e[rel] = 0.0
    e[rel, obs[rel]] = 1.0 - rows[rel, obs[rel]]
    return e


def step_kernels(matrix: NDArray[np.float64], n: int) -> NDArray[np.float64]:
    """The kernels of the n − 1 steps of n positions, (n − 1, k, k): ``matrix`` is either one
    transition matrix (k, k) — a homogeneous chain, broadcast without copying — or already one
    kernel per step (``matrix[t]`` the kernel of the step t → t+1)."""
    M = np.asarray(matrix, dtype=np.float64)
    if M.ndim == 2:
        return np.broadcast_to(M, (max(n - 1, 0), *M.shape))
    if M.ndim != 3 or M.shape[0] != max(n - 1, 0):
        raise PosteriorError(f"expected one kernel per step ({max(n - 1, 0)}), got shape {M.shape}")
    return M


def posterior(
    matrix: NDArray[np.float64], initial: NDArray[np.float64], obs: Sequence[int] | NDArray[np.int64],
    rows: NDArray[np.float64], counted: NDArray[np.bool_] | None = None,
) -> Posterior:
    """The posterior of a redacted stream (module docstring). ``matrix``: the transition matrix, or
    one kernel per step (:func:`step_kernels`); ``initial`` is the law of X_0; ``counted`` marks the
    positions that are records (default: all)."""
    o = np.asarray(obs, dtype=np.int64)
    R = np.asarray(rows, dtype=np.float64)
    n = o.shape[0]
    K = step_kernels(matrix, n)
    k = K.shape[-1]
    if R.shape != (n, k):
        raise PosteriorError(f"expected {n} redaction rows of {k} probabilities, got shape {R.shape}")
    c = np.ones(n, dtype=bool) if counted is None else np.asarray(counted, dtype=bool)
    e = emissions(o, R)
    gamma = np.zeros((n, k))
    mean = np.zeros(k)
    var = np.zeros(k)
    trans = np.zeros((k, k))
    known = np.flatnonzero(o >= 0)
    gamma[known, o[known]] = 1.0
    for x in range(k):
        mean[x] = np.count_nonzero(c[known] & (o[known] == x))
    # transitions between two consecutive released positions are known
    both = known[:-1][np.diff(known) == 1] if known.size > 1 else known[:0]
    np.add.at(trans, (o[both], o[both + 1]), 1.0)
    # the runs of unreleased positions
    unknown = o < 0
    if unknown.any():
        edges = np.diff(np.concatenate([[0], unknown.astype(np.int8), [0]]))
        starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)  # run = [start, end)
        for a, b in zip(starts.tolist(), ends.tolist()):
            left = initial if a == 0 else K[a - 1][o[a - 1]]
            right = K[b - 1][:, o[b]] if b < n else np.ones(k)
            solved = _run(K[a:b - 1], e[a:b], left, right, c[a:b])
            if solved is None:
                raise PosteriorError(f"positions {a}..{b - 1}: the releases around them are impossible under the model")
            g, m, v, tr_in, tr_left, tr_right = solved
            gamma[a:b] = g
            mean += m
            var += v
            trans += tr_in
            if a > 0:
                trans[o[a - 1]] += tr_left
            if b < n:
                trans[:, o[b]] += tr_right
    return Posterior(gamma, mean, var, trans, int(c.sum()))


def _run(
    K: NDArray[np.float64], e: NDArray[np.float64], left: NDArray[np.float64], right: NDArray[np.float64],
    counted: NDArray[np.bool_],
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], NDArray[np.float64],
           NDArray[np.float64], NDArray[np.float64]] | None:
    """Forward–backward over one run of m unreleased positions, ``K[t]`` the kernel of its step
    t → t+1 (m − 1 of them). ``left`` is the law of the run's
    first state given what precedes it (μ, or the kernel's row from the known state before);
    ``right[x]`` the likelihood of what follows the run's last state (a kernel's column, or ones).
    Returns the marginals, the count mean and variance over the counted positions, the expected
    transitions inside the run, out of the known state before (by next state) and into the known
    state after (by previous state); None when the run's observations have probability 0."""
    m, k = e.shape
    alpha = np.empty((m, k))
    a = left * e[0]
    for t in range(m):
        if t:
            a = (alpha[t - 1] @ K[t - 1]) * e[t]
        s = a.sum()
        if not s > 0:
            return None
        alpha[t] = a / s
    beta = np.empty((m, k))
    bt = right / right.max() if right.max() > 0 else right
    beta[m - 1] = bt
    for t in range(m - 2, -1, -1):
        bt = K[t] @ (e[t + 1] * beta[t + 1])
        beta[t] = bt / bt.max()
    gamma = alpha * beta
    z = gamma.sum(axis=1, keepdims=True)
    if not np.all(z > 0):
        return None
    gamma /= z
    # posterior kernels Q_t(x, y) ∝ K_t(x, y) e_{t+1}(y) β_{t+1}(y), t = 0..m−2
    trans = np.zeros((k, k))
    f = counted.astype(np.float64)
    mean = (gamma * f[:, None]).sum(axis=0)
    var = (f[:, None] * gamma * (1 - gamma)).sum(axis=0)  # Σ Var(h_t), per state s
    G = np.zeros((k, k))  # G[x, s] = E[Σ_{u>t} h_u^{(s)} | X_t = x]
    for t in range(m - 2, -1, -1):
        Q = K[t] * (e[t + 1] * beta[t + 1])[None, :]
        Q /= Q.sum(axis=1, keepdims=True)
        trans += gamma[t][:, None] * Q
        h_next = f[t + 1] * (np.eye(k) - gamma[t + 1][None, :])  # h_next[y, s] = f(1{y=s} − γ_{t+1}(s))
        G = Q @ (h_next + G)
        # 2 E[h_t G_t(X_t)] with h_t(x) = f_t(1{x=s} − γ_t(s))
        h_t = f[t] * (np.eye(k) - gamma[t][None, :])
        var += 2.0 * (gamma[t][:, None] * h_t * G).sum(axis=0)
    # the step from the known state before the run into it, and from the run's last state out
    tr_left = gamma[0]
    tr_right = gamma[m - 1]
    return gamma, mean, np.maximum(var, 0.0), trans, tr_left, tr_right


def sample_paths(
    matrix: NDArray[np.float64], initial: NDArray[np.float64], obs: Sequence[int] | NDArray[np.int64],
    rows: NDArray[np.float64], draws: int, rng: np.random.Generator,
) -> NDArray[np.int64]:
    """``draws`` hidden paths from the posterior (forward filtering, backward sampling, run by run:
    released positions are fixed, and each run of unreleased positions is drawn from its bridge
    between the known states around it). ``matrix`` as in :func:`posterior`. Returns a (draws, n)
    array of states. Cost O(draws · #unreleased · k)."""
    o = np.asarray(obs, dtype=np.int64)
    e = emissions(o, np.asarray(rows, dtype=np.float64))
    n = o.shape[0]
    P = step_kernels(matrix, n)
    k = P.shape[-1]
    paths = np.empty((draws, n), dtype=np.int64)
    known = o >= 0
    paths[:, known] = o[known]
    edges = np.diff(np.concatenate([[0], (~known).astype(np.int8), [0]]))
    for a, b in zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist()):
        left = initial if a == 0 else P[a - 1][o[a - 1]]
        right = P[b - 1][:, o[b]] if b < n else np.ones(k)
        alpha = np.empty((b - a, k))
        f = left * e[a]
        for t in range(b - a):
            if t:
                f = (alpha[t - 1] @ P[a + t - 1]) * e[a + t]
            s = f.sum()
            if not s > 0:
                raise PosteriorError(f"positions {a}..{b - 1}: the releases around them are impossible under the model")
            alpha[t] = f / s
        w = alpha[-1][None, :] * right[None, :]  # (1, k), the same for every draw
        nxt = _draw(np.repeat(w, draws, axis=0), rng)
        paths[:, b - 1] = nxt
        for t in range(b - a - 2, -1, -1):
            nxt = _draw(alpha[t][None, :] * P[a + t][:, nxt].T, rng)
            paths[:, a + t] = nxt
    return paths


def _draw(weights: NDArray[np.float64], rng: np.random.Generator) -> NDArray[np.int64]:
    """One index per row of ``weights`` (non-negative, not normalised)."""
    cum = np.cumsum(weights, axis=1)
    if not np.all(cum[:, -1] > 0):
        raise PosteriorError("a posterior bridge has probability 0 under the model")
    u = rng.uniform(size=(weights.shape[0], 1)) * cum[:, -1:]
    return np.minimum((cum < u).sum(axis=1), weights.shape[1] - 1).astype(np.int64)
