"""Simulated sanitized streams with known truth, produced by the real stream runtimes (no broker):
a Markov source (numpy, independent of streamguard), frames through RedactionRuntime /
ChannelRuntime, and every payload the daemon would publish — records, aggregate windows, the
privacy status — as MQTT messages. Used by the consumer tests and benchmarks/consumer.py.

:func:`simulate` returns the messages and the truth: the state of every record by seq.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from streamguard.config import Settings
from streamguard.sampling import SeededSource
from streamguard.stream.runtimes import make_runtime
from streamguard.stream.transport import Message

BASE = "streamguard"
T0 = 1.79e9


def markov_path(P: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """n states of the chain P started from its stationary law (numpy only)."""
    k = P.shape[0]
    w, v = np.linalg.eig(P.T)
    pi = np.real(v[:, np.argmin(np.abs(w - 1))])
    pi = pi / pi.sum()
    x = np.empty(n, dtype=np.int64)
    x[0] = rng.choice(k, p=pi)
    u = rng.uniform(size=n)
    cum = np.cumsum(P, axis=1)
    for t in range(1, n):
        x[t] = min(int(np.searchsorted(cum[x[t - 1]], u[t], side="right")), k - 1)
    return x


@dataclass
class Simulated:
    messages: list[Message]
    truth: dict[int, int]  # seq → state
    labels: list[str]
    status: dict[str, Any]


def simulate(stream: dict[str, Any], P: np.ndarray, n: int, seed: int, *, mark_every: int | None = None,
             device: str = "dev", period: float = 1.0, bad_every: int | None = None) -> Simulated:
    """Run ``n`` frames of a Markov path through the runtime of ``stream`` (a [[streams]] table
    without name/source). ``mark_every``: a private flag on every that-many-th frame (at a place
    independent of the readings); ``bad_every``: a malformed frame instead of every that-many-th."""
    with tempfile.TemporaryDirectory(prefix="sg-consumer-sim-") as tmp:  # (a time-of-day model's drift
        return _simulate(stream, P, n, seed, Path(tmp) / "outbox.sqlite",  # guard keeps its state there)
                         mark_every=mark_every, device=device, period=period, bad_every=bad_every)


def _simulate(stream: dict[str, Any], P: np.ndarray, n: int, seed: int, outbox: Path, *, mark_every: int | None,
              device: str, period: float, bad_every: int | None) -> Simulated:
    rng = np.random.default_rng(seed)
    labels = stream["labels"]
    s = Settings(device=device, deterministic_seed=seed, outbox={"path": str(outbox)}, topic_base=BASE,
                 streams=[{"name": "s", "source": "stdin", **stream}])
    rt = make_runtime(s, s.streams[0], SeededSource(seed), aggregate_source=SeededSource(seed, 2))
    x = markov_path(P, n, rng)
    msgs: list[Message] = []
    truth: dict[int, int] = {}
    seq = 0
    for i in range(n):
        ts = T0 + i * period
        if bad_every and i % bad_every == bad_every - 1:
            out, _ = rt.on_frame(b"{broken", now=ts)
        else:
            frame: dict[str, Any] = {"ts": ts, "value": labels[x[i]]}
            if mark_every and i % mark_every == mark_every // 2:
                frame["private"] = True
            out, _ = rt.on_frame(json.dumps(frame).encode(), now=ts)
            truth[seq] = int(x[i])
            seq += 1
        msgs += [Message(rt.data_topic(), rt.payload(r)) for r in out]
        msgs += [Message(rt.aggregate_topic(), rt.aggregate_payload(q, a)) for q, a in rt.take_aggregates()]
    msgs += [Message(rt.data_topic(), rt.payload(r)) for r in rt.drain()]
    msgs += [Message(rt.aggregate_topic(), rt.aggregate_payload(q, a)) for q, a in rt.take_aggregates()]
    rt.mark_records()  # finishes the marks' reports
    status = rt.privacy_status()
    if rt.aggregates is not None:
        status["aggregates"] = rt.aggregates.status()
    msgs.append(Message(rt.privacy_topic(), json.dumps(status).encode(), retain=True))
    return Simulated(msgs, truth, list(labels), status)


def records_of(messages: list[Message]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.topic.endswith("/data"):
            body = json.loads(m.payload)
            out += body if isinstance(body, list) else [body]
    return out


#: The coverage scenarios (issue 14 "Evidence"): a redaction stream with frequent marks whose plan
#: redacts one state more than the other next to a mark (so the naive share is biased), a
#: randomized-response channel on three states, and histogram aggregates.
SCENARIOS: dict[str, tuple[dict[str, Any], np.ndarray, int | None]] = {
    "redaction": ({"labels": ["vacant", "occupied"], "model": {"alpha": 0.1, "beta": 0.3}, "epsilon": 3.0},
                  np.array([[0.9, 0.1], [0.3, 0.7]]), 5),
    "channel": ({"labels": ["rest", "walk", "run"],
                 "model": {"matrix": [[0.8, 0.15, 0.05], [0.1, 0.8, 0.1], [0.05, 0.15, 0.8]]},
                 "mechanism": "channel", "channel": {"kind": "rr", "epsilon": 1.0, "prior": [1 / 3, 1 / 3, 1 / 3]}},
                np.array([[0.8, 0.15, 0.05], [0.1, 0.8, 0.1], [0.05, 0.15, 0.8]]), None),
    "aggregate": ({"labels": ["vacant", "occupied"], "model": {"alpha": 0.1, "beta": 0.3}, "epsilon": 3.0,
                   "aggregates": [{"query": "histogram", "window": 50, "epsilon": 1.0}]},
                  np.array([[0.9, 0.1], [0.3, 0.7]]), None),
}


@dataclass
class Trial:
    truth: list[float]  # realised share of each state among the records the estimate is over
    frequency: list[float | None]
    ci: list[list[float] | None]
    naive: list[float] | None
    #: Redaction only: the realised rate of 1 → 1 among the block's consecutive records, and its interval.
    stay: float | None = None
    stay_ci: list[float] | None = None


def trials(kind: str, n: int, runs: int, seed: int) -> list[Trial]:
    """``runs`` trials of scenario ``kind``: one stream of runs·n frames through the real runtime,
    cut into consecutive blocks of n records, each estimated on its own as a consumer that saw
    only that block would (a block starts and ends mid-stream, which the estimators allow for)."""
    from streamguard.consumer.collector import Collector
    from streamguard.consumer.estimates import (aggregate_shares, channel_matrix, channel_shares, redaction_shares,
                                                transition_intervals)
    from streamguard.consumer.model import published_model

    stream, P, mark_every = SCENARIOS[kind]
    sim = simulate(stream, P, n * runs, seed, mark_every=mark_every)
    c = Collector(BASE)
    c.feed_all(sim.messages)
    log = c.streams[("dev", "s")]
    assert log.status is not None
    k, records = len(sim.labels), log.ordered()
    out = []
    for b in range(runs):
        block = [r for r in records if b * n <= r.seq < (b + 1) * n]
        if kind == "aggregate":  # windows inside the block's positions (no flags: seq = position)
            s = aggregate_shares([w for w in log.windows.values() if b * n <= w.lo and w.hi < (b + 1) * n], k)
            states = [sim.truth[r.seq] for r in block]
        elif kind == "channel":
            s = channel_shares(block, channel_matrix(log.status, k))
            states = [sim.truth[r.seq] for r in block if not r.redacted]
        else:
            s = redaction_shares(block, sim.labels, published_model(log.status))
            states = [sim.truth[r.seq] for r in block]
        assert s is not None
        truth = (np.bincount(states, minlength=k) / len(states)).tolist()
        t = Trial(truth, s.frequency, s.frequency_ci, s.naive)
        if kind == "redaction":  # no rejected frames here: consecutive records are consecutive steps
            x = np.array(states)
            t.stay = float(((x[:-1] == 1) & (x[1:] == 1)).sum() / max(1, (x[:-1] == 1).sum()))
            t.stay_ci = transition_intervals(block, sim.labels, published_model(log.status))[1][1]
        out.append(t)
    return out
