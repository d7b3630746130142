"""What a per-record channel leaks about one record of a whole correlated stream (DESIGN.md §2).

A per-record guarantee (ε-LDP of each release, ε-identifiability, …) is about one release of one
record. Applied to every record X_1 … X_n of a Markov chain, the releases of the *neighbours* of
X_p carry information about X_p too, so the leakage about X_p of the whole released stream,

    L(X_p → Y_1..n) = log sup_y max_{a,b} Pr(Y = y | X_p = a) / Pr(Y = y | X_p = b),

is larger than the per-record ε whenever the chain is correlated (it equals the per-record level
only for an i.i.d. chain). This module measures it with the exact audit, treating the channel as
the emission table e_t = W at every position (merged outputs are just output columns):

* binary chains: :func:`streamguard.audit.exact.exact_leakage`, exact and O(n);
* k-state chains: :func:`streamguard.audit.brute.brute_force_leakage` by enumeration, small n
  only (refused beyond ``audit.brute.MAX_WORK``).

The leakage about X_p never decreases when more records are released (the likelihood ratio of a
shorter output is a weighted average of its extensions'), so :func:`unbounded_stream_leakage`
doubles the stream around the middle record until the value settles, and a finite window is a
lower bound on any longer stream. The stored channel matrix is used; the sampler's realised
probabilities differ from it by less than 2⁻⁶³ per entry.
"""

from __future__ import annotations

from collections.abc import Sequence

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..support.json_numbers import json_number
from ..audit.brute import MAX_WORK, brute_force_leakage
from ..audit.exact import exact_leakage
from ..model.chain import MarkovChain, ModelError
from ..privacy.channel import ChannelSequence
from .model import ModelInputError, PerturbationChannel

#: Settled when one doubling changes the leakage by at most this (relative to max(1, value)).
TOL = 1e-10
#: Largest stream the doubling search tries.
MAX_N = 1 << 21


def _sequence(channel: PerturbationChannel, chain: MarkovChain, n: int) -> ChannelSequence:
    if channel.inputs != "x":
        raise ModelInputError(f"channel kind {channel.kind!r} reads the sensitive attribute S too; its stream "
                              "leakage needs a joint model of (S, X) over time, which a Markov chain of X is not")
    if channel.n_x != chain.k:
        raise ModelInputError(f"channel reads {channel.n_x} states, the chain has {chain.k}")
    if n < 1:
        raise ValueError("a stream has at least one record")
    return ChannelSequence(channel.matrix[None], np.zeros(n, dtype=np.int64))


def stream_leakage(channel: PerturbationChannel, chain: MarkovChain, n: int, p: int) -> float:
    """Exact L(X_p → Y_1..n) in nats when ``channel`` releases each of n records of ``chain``
    (p 0-based). Binary chains by the O(n) audit; k-state chains by enumeration (small n)."""
    seq = _sequence(channel, chain, n)
    if chain.is_binary:
        return exact_leakage(chain, seq, p).total
    work = chain.k**n * channel.n_y**n
    if work > MAX_WORK:
        raise ValueError(f"k-state stream leakage is computed by enumeration: n = {n} records with k = {chain.k} "
                         f"states and {channel.n_y} outputs is {work:.3g} cases > {MAX_WORK:.3g}; "
                         "use a shorter window (the exact O(n) audit exists for binary chains only)")
    return brute_force_leakage(chain, seq, p)


@dataclass(frozen=True)
class StreamLeakage:
    """Leakage about the middle record ``position`` (0-based) of a stream of ``n`` records.

    ``method`` "exact" (binary, doubled until ``converged``) or "brute" (k-state, the largest
    window enumeration allows: a lower bound on longer streams)."""

    value: float
    n: int
    position: int
    method: str
    converged: bool

    def as_dict(self) -> dict[str, Any]:
        scope = ("one record in the middle of an unbounded stream (n doubled until the value settled)"
                 if self.method == "exact" else
                 f"the middle record of a window of {self.n} records (a lower bound for longer streams)")
        return {"leakage": json_number(self.value), "n": self.n,
                "position": self.position + 1, "method": self.method, "converged": self.converged,
                "lower_bound": self.method != "exact" or not self.converged, "scope": scope}


def unbounded_stream_leakage(channel: PerturbationChannel, chain: MarkovChain, *, tol: float = TOL,
                             max_n: int = MAX_N) -> StreamLeakage:
    """Binary chains: the leakage about the middle record of n = 2m + 1 records, m doubled from 8
    until one doubling changes it by ≤ tol·max(1, value) (``converged``), or n would exceed max_n."""
    if not chain.is_binary:
        raise ModelError("the unbounded-stream leakage needs a binary chain (exact O(n) audit)")
    m = 8
    prev = stream_leakage(channel, chain, 2 * m + 1, m)
    while True:
        if prev == math.inf:
            return StreamLeakage(prev, 2 * m + 1, m, "exact", True)
        if 2 * (2 * m) + 1 > max_n:
            return StreamLeakage(prev, 2 * m + 1, m, "exact", False)
        m *= 2
        value = stream_leakage(channel, chain, 2 * m + 1, m)
        if value - prev <= tol * max(1.0, value):
            return StreamLeakage(value, 2 * m + 1, m, "exact", True)
        prev = value


def largest_brute_window(chain: MarkovChain, n_y: int) -> int:
    """The largest odd n with k^n · m^n ≤ MAX_WORK (at least 1)."""
    n = 1
    while (chain.k * n_y) ** (n + 2) <= MAX_WORK:
        n += 2
    return n


def stream_leakage_report(channel: PerturbationChannel, chain: MarkovChain | Sequence[MarkovChain]) -> dict[str, Any]:
    """JSON-ready leakage of one record of the whole stream (see :class:`StreamLeakage`), next to
    the channel's per-record claims, which it is not. Several chains (a finite model set): the worst
    member's report — exact over the set when every member's is (``members``, ``worst_member``: its
    0-based index); ``lower_bound`` if any member's is one."""
    if not isinstance(chain, MarkovChain):
        chains = list(chain)
        reports = [stream_leakage_report(channel, c) for c in chains]
        values = [math.inf if r["leakage"] == "inf" else float(r["leakage"]) for r in reports]
        i = max(range(len(values)), key=values.__getitem__)
        return {**reports[i], "lower_bound": any(r["lower_bound"] for r in reports), "members": len(chains),
                "worst_member": i}
    if chain.is_binary:
        result = unbounded_stream_leakage(channel, chain)
    else:
        n = largest_brute_window(chain, channel.n_y)
        result = StreamLeakage(stream_leakage(channel, chain, n, n // 2), n, n // 2, "brute", False)
    return {**result.as_dict(), "per_record_claims": [c.to_json() for c in channel.claims]}
