"""Leakage of one record of a whole correlated stream when a per-record channel releases every record
(streamguard.perturbation.stream_leakage): a per-record ε is the stream's leakage only for an i.i.d.
chain; on a sticky chain the neighbours leak more."""

from __future__ import annotations

import math

import numpy as np
import pytest

from streamguard import MarkovChain
from streamguard.audit.brute import brute_force_leakage
from streamguard.privacy.channel import ChannelSequence
from streamguard.perturbation import Joint
from streamguard.perturbation.designers import design
from streamguard.perturbation.stream_leakage import (
    largest_brute_window,
    stream_leakage,
    stream_leakage_report,
    unbounded_stream_leakage,
)

EPS = 1.0


def _rr(k: int):
    return design("rr", Joint.from_prior(np.full(k, 1.0 / k)), EPS)


def test_iid_binary_chain_leaks_exactly_epsilon():
    iid = MarkovChain([[0.7, 0.3], [0.7, 0.3]])
    assert stream_leakage(_rr(2), iid, 41, 20) == pytest.approx(EPS, abs=1e-12)
    assert unbounded_stream_leakage(_rr(2), iid).value == pytest.approx(EPS, abs=1e-12)


def test_sticky_binary_chain_leaks_more_than_epsilon():
    sticky = MarkovChain.binary(0.05, 0.1)
    finite = [stream_leakage(_rr(2), sticky, n, n // 2) for n in (1, 3, 9, 33)]
    assert finite[0] == pytest.approx(EPS, abs=1e-12)  # one record alone: the per-record ε
    assert all(b >= a - 1e-12 for a, b in zip(finite, finite[1:]))  # more released neighbours, more leakage
    result = unbounded_stream_leakage(_rr(2), sticky)
    assert result.converged and result.value > EPS + 1.0  # the neighbours' releases add well over 1 nat
    assert result.value >= finite[-1] - 1e-12


@pytest.mark.parametrize("n, p", [(1, 0), (4, 0), (5, 2), (6, 5)])
def test_binary_exact_equals_brute_force(n, p):
    chain = MarkovChain.binary(0.2, 0.3)
    ch = design("watchdog", Joint(np.array([[0.3, 0.1], [0.2, 0.4]])), 0.3)
    seq = ChannelSequence(ch.matrix[None], np.zeros(n, dtype=np.int64))
    assert stream_leakage(_rr(2), chain, n, p) == pytest.approx(
        brute_force_leakage(chain, ChannelSequence(_rr(2).matrix[None], np.zeros(n, dtype=np.int64)), p), abs=1e-9)
    assert stream_leakage(ch, chain, n, p) == pytest.approx(brute_force_leakage(chain, seq, p), abs=1e-9)


def test_k_state_by_brute_force():
    iid = MarkovChain(np.tile([0.5, 0.3, 0.2], (3, 1)))
    sticky = MarkovChain([[0.9, 0.05, 0.05], [0.05, 0.9, 0.05], [0.05, 0.05, 0.9]])
    assert stream_leakage(_rr(3), iid, 5, 2) == pytest.approx(EPS, abs=1e-12)
    assert stream_leakage(_rr(3), sticky, 5, 2) > EPS + 0.5
    with pytest.raises(ValueError, match=r"enumeration: n = 12 records with k = 3 states"):
        stream_leakage(_rr(3), sticky, 12, 6)


def test_report_states_scope_and_claims():
    sticky3 = MarkovChain([[0.9, 0.05, 0.05], [0.05, 0.9, 0.05], [0.05, 0.05, 0.9]])
    rep = stream_leakage_report(_rr(3), sticky3)
    n = largest_brute_window(sticky3, 3)
    assert rep["method"] == "brute" and rep["lower_bound"] and rep["n"] == n and 3**n * 3**n <= 60_000_000
    assert rep["per_record_claims"][0] == {"notion": "ldp_x", "params": {"epsilon": EPS}}
    binary = stream_leakage_report(_rr(2), MarkovChain.binary(0.05, 0.1))
    assert binary["method"] == "exact" and binary["converged"] and not binary["lower_bound"]
    assert binary["leakage"] > EPS


def test_channel_revealing_x_leaks_infinitely():
    """Mechanisms that protect S, not X, may release x itself: the leakage about X_p is ∞."""
    ch = design("linear", Joint(np.array([[0.3, 0.1], [0.2, 0.4]])), 5.0)  # ε above the data's own: Y = X
    assert unbounded_stream_leakage(ch, MarkovChain.binary(0.2, 0.3)).value == math.inf
    assert stream_leakage_report(ch, MarkovChain.binary(0.2, 0.3))["leakage"] == "inf"


def test_refusals():
    joint = Joint(np.array([[0.3, 0.1], [0.2, 0.4]]))
    with pytest.raises(ValueError, match="reads the sensitive attribute S"):
        stream_leakage(design("linear-nonmarkov", joint, 0.5), MarkovChain.binary(0.2, 0.3), 3, 1)
    with pytest.raises(ValueError, match="reads 3 states, the chain has 2"):
        stream_leakage(_rr(3), MarkovChain.binary(0.2, 0.3), 3, 1)
