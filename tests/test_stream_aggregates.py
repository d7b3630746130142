"""Aggregate windows of a stream runtime (streamguard/stream/aggregates.py), without a broker.

With a very large ε the discrete Laplace scale is ≈ 2/ε, so the noise is 0 except with
probability ≈ 2e^{−ε/2}: the released histogram shows exactly which records each window counted.
"""

from __future__ import annotations

import json

from streamguard.config import Settings
from streamguard.sampling import SeededSource
from streamguard.stream.runtimes import make_runtime

EPS = 80.0  # P(noise ≠ 0) per bin ≈ 2·e^{−40}


def _runtime(mechanism: dict, window: int = 10):
    s = Settings(device="d", deterministic_seed=1, outbox={"path": "unused.sqlite"},
                 streams=[{"name": "s", "labels": ["a", "b"], "source": "stdin", **mechanism,
                           "aggregates": [{"query": "histogram", "window": window, "epsilon": EPS}]}])
    return make_runtime(s, s.streams[0], SeededSource(1), aggregate_source=SeededSource(1, 2))


def _feed(rt, frames):
    for i, f in enumerate(frames):
        rt.on_frame(json.dumps({"ts": 1.79e9 + i, **f}).encode() if isinstance(f, dict) else f, now=1.79e9 + i)
    rt.drain()
    return [rel for _, rel in rt.take_aggregates()]


def test_flagged_and_rejected_records_stay_out_of_the_counts_but_their_positions_are_charged():
    for mech in ({"model": {"alpha": 0.1, "beta": 0.2}, "epsilon": 1.0},
                 {"model": {"alpha": 0.1, "beta": 0.2}, "mechanism": "channel",
                  "channel": {"kind": "rr", "epsilon": 1.0, "prior": [0.5, 0.5]}}):
        rt = _runtime(mech)
        frames = [{"value": "b"} for _ in range(25)]
        frames[3] = {"value": "b", "private": True}
        frames[12] = b"{broken"
        rels = _feed(rt, frames)
        assert [(r.lo, r.hi) for r in rels] == [(0, 9), (10, 19), (20, 24)]  # the last one partial (drain)
        assert [list(r.values) for r in rels] == [[0, 9], [0, 9], [0, 5]]
        assert all(r.load == 1 / r.sigma for r in rels)


def test_windows_follow_positions_and_the_scale_is_sigma_inf_with_margin():
    from streamguard import MarkovChain
    from streamguard.quilt import QuiltModel, sigma_inf
    from streamguard.stream.aggregates import SIGMA_MARGIN

    rt = _runtime({"model": {"alpha": 0.1, "beta": 0.2}, "epsilon": 1.0}, window=4)
    rels = _feed(rt, [{"value": "ab"[i % 2]} for i in range(9)])
    assert [(r.lo, r.hi) for r in rels] == [(0, 3), (4, 7), (8, 8)]
    assert [list(r.values) for r in rels] == [[2, 2], [2, 2], [1, 0]]
    want = sigma_inf(QuiltModel([MarkovChain.binary(0.1, 0.2)], "stat"), EPS).sigma * (1 + SIGMA_MARGIN)
    assert all(r.sigma == want and r.t_independent and r.deterministic for r in rels)


def test_a_pair_the_joint_rules_out_is_rejected_not_sampled(tmp_path):
    """A non-Markov channel's row for an (s, x) with P(s, x) = 0 is never checked against the
    claims (a hand-made channel could release anything there): such a frame is rejected by name."""
    (tmp_path / "joint.json").write_text(json.dumps({"joint": [[0.5, 0.0], [0.25, 0.25]]}))
    s = Settings(device="d", deterministic_seed=1, outbox={"path": "unused.sqlite"},
                 streams=[{"name": "s", "labels": ["a", "b"], "source": "stdin", "mechanism": "channel",
                           "model": {"alpha": 0.1, "beta": 0.2},
                           "channel": {"kind": "linear-nonmarkov", "epsilon": 0.5, "joint": str(tmp_path / "joint.json"),
                                       "sensitive_field": "who", "sensitive_labels": ["x", "y"]}}])
    rt = make_runtime(s, s.streams[0], SeededSource(1))
    out, rej = rt.on_frame(b'{"value": "b", "who": "x", "ts": 1.79e9}', now=1.79e9)
    assert out == [] and rej is not None and rej.reason == "outside-model" and "'b'" not in rej.message
    out, rej = rt.on_frame(b'{"value": "b", "who": "y", "ts": 1.79e9}', now=1.79e9)
    assert rej is None and len(out) == 1 and out[0].seq == 0
    assert rt.counters.accepted == 1 and rt.counters.rejected == {"outside-model": 1}
