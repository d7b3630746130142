"""Brute-force leakage by full enumeration, for k-state chains and small n (tests, ``--brute``).

Enumerates every state sequence x ∈ [k]^n with its probability under the chain and every output
sequence y ∈ [m]^n with Pr(y | x) = Π_t e_t(y_t | x_t), accumulates Pr(Y = y, X_p = a), and returns

    L(X_p → Y) = log max_{y ∈ supp(Y)} max_{a, b} Pr(y | X_p = a) / Pr(y | X_p = b)

(+∞ when some supported y is impossible under one value of X_p; a value of X_p of probability 0
counts as in docs/initial-law.md). It shares no code with the O(n)
audit, which is the point: the tests compare the two. Cost k^n · m^n; refused above ``MAX_WORK``.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..model.chain import MarkovChain
from ..privacy.channel import ChannelError, ChannelSequence

#: Largest k^n · m^n the brute force accepts.
MAX_WORK = 60_000_000


def brute_force_leakage(chain: MarkovChain, seq: ChannelSequence, p: int) -> float:
    """Exact leakage about the record at 0-based index ``p`` by enumeration (any k)."""
    n, k, m = seq.n, seq.k, seq.m
    if k != chain.k:
        raise ChannelError(f"emission tables have {k} input states, the chain has {chain.k}")
    if not 0 <= p < n:
        raise ValueError(f"private index {p} is outside 0..{n - 1}")
    if k**n * m**n > MAX_WORK:
        raise ValueError(f"brute force over k^n·m^n = {k**n * m**n:.3g} > {MAX_WORK:.3g} cases refused")
    E = seq.dense()
    P, init = chain.matrix, chain.initial
    acc = np.zeros((k, m**n))  # acc[a, y] = Pr(Y = y, X_p = a)
    for x in itertools.product(range(k), repeat=n):
        px = init[x[0]]
        for t in range(1, n):
            px *= P[x[t - 1], x[t]]
        if px == 0.0:
            continue
        py = np.ones(1)
        for t in range(n):
            py = np.multiply.outer(py, E[t, x[t]]).reshape(-1)
        acc[x[p]] += px * py
    marg = acc.sum(axis=1)
    if np.any(marg <= 0):
        # a value of X_p of probability 0 (docs/initial-law.md): no law of the left outputs given
        # it, the worst version — unbounded unless the left outputs are one and the same
        if np.count_nonzero(acc.sum(axis=0).reshape(m**p, m ** (n - p)).sum(axis=1)) > 1:
            return math.inf
        return _ratio(_from_each_value(P, E, p))
    return _ratio(acc / marg[:, None])


def _from_each_value(P: np.ndarray, E: np.ndarray, p: int) -> np.ndarray:
    """(k, m^(n−p)): Pr(Y_p..Y_{n−1} = y | X_p = a) of the chain started from a at p, for every a."""
    n, k, m = E.shape
    cond = np.zeros((k, m ** (n - p)))
    for a in range(k):
        for rest in itertools.product(range(k), repeat=n - 1 - p):
            x = (a, *rest)
            px = 1.0
            for t in range(1, len(x)):
                px *= P[x[t - 1], x[t]]
            py = np.ones(1)
            for t, xt in enumerate(x):
                py = np.multiply.outer(py, E[p + t, xt]).reshape(-1)
            cond[a] += px * py
    return cond


def _ratio(cond: np.ndarray) -> float:
    """log max over supported y and pairs (a, b) of cond[a, y]/cond[b, y] (+∞ if some is 0)."""
    support = cond.max(axis=0) > 0
    cond = cond[:, support]
    if np.any(cond.min(axis=0) == 0):
        return math.inf
    logs = np.log(cond)
    return float((logs.max(axis=0) - logs.min(axis=0)).max())
