"""Brute-force leakage by full enumeration, for k-state chains and small n (tests, ``--brute``).

Enumerates every state sequence x ∈ [k]^n with its probability under the chain and every output
sequence y ∈ [m]^n with Pr(y | x) = Π_t e_t(y_t | x_t), accumulates Pr(Y = y, X_p = a), and returns

    L(X_p → Y) = log max_{y ∈ supp(Y)} max_{a, b} Pr(y | X_p = a) / Pr(y | X_p = b)

(+∞ when some supported y is impossible under one value of X_p). It shares no code with the O(n)
audit, which is the point: the tests compare the two. Cost k^n · m^n; refused above ``MAX_WORK``.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..chain import MarkovChain, ModelError
from ..channel import ChannelError, ChannelSequence

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
        raise ModelError("a state of the private record has probability 0 under the model")
    cond = acc / marg[:, None]
    support = cond.max(axis=0) > 0
    cond = cond[:, support]
    if np.any(cond.min(axis=0) == 0):
        return math.inf
    logs = np.log(cond)
    return float((logs.max(axis=0) - logs.min(axis=0)).max())
