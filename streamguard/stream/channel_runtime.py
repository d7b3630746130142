"""A stream privatized by a per-record perturbation channel (``mechanism = "channel"``).

Every accepted record goes through the channel at once — there is no release delay, because the
channel protects each record by itself (papers 001, 003, 004; DESIGN.md §2). The channel is a
saved, verified file or is designed at start-up from the config's spec, and is checked exactly
against its claims before the first record (``perturbation.verify``); the sampler draws from the
CSPRNG with integer thresholds. A frame flagged private (or inside a scheduled window) is withheld
entirely (published as redacted): the flag is not the reading, so withholding is a post-processing
of the channel's guarantee for every other record. It does NOT protect the flagged reading from its
correlated neighbours, so each such flag is logged as a warning (issue 12), and a ``schedule`` on a
channel stream is refused by the configuration: private positions need ``mechanism = "redaction"``. Commands cannot change a record that is already
out, so this mechanism refuses them (counted as ``unsupported``).

Sanitized record payload: ``{"device", "stream", "seq", "ts", "value", "output", "redacted",
"mechanism": "channel", "kind", "mode"}``; ``value`` is the output symbol's label — a list of
labels for a merged group — and ``output`` its index in the channel's output alphabet.

The status reports the per-record guarantee (the channel's verified claims) and, separately, the
exact leakage about one record of the whole correlated stream under the Markov model when the
channel is applied to every record: a per-record ε is not the stream's leakage (DESIGN.md §2).
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config import ChannelConfig, Settings, StreamConfig
from ..ledger.events import ChannelClaim, ChannelEvent
from ..perturbation import Joint, PerturbationChannel
from ..sampling import BitSource
from ..frames.records import Element, RawRecord, Rejection, SensitiveField
from .runtime import FRESH, Resume, StreamRuntime
from ..frames.steps import MEMORY, StepTracker

log = logging.getLogger(__name__)

#: Positions one ledger event of a channel stream covers (see ``ChannelRuntime._reserve``).
RESERVE = 4096


def ledger_claims(channel: PerturbationChannel) -> tuple[ChannelClaim, ...]:
    """The channel's privacy claims as the ledger states them, one level per notion: ε where the
    notion has one, ALIP's two budgets as ``alip_l`` and ``alip_u``, and the threshold of the
    lift-based measures (l1/χ²/α-lift and their inverses). Distortion is utility, not privacy, and
    is left out. A channel without any privacy claim is refused (fail closed)."""
    out = []
    for c in channel.claims:
        if c.notion == "alip":
            out += [ChannelClaim("alip_l", c.params["eps_l"]), ChannelClaim("alip_u", c.params["eps_u"])]
        elif "epsilon" in c.params:
            out.append(ChannelClaim(c.notion, c.params["epsilon"]))
        elif "threshold" in c.params:
            out.append(ChannelClaim(c.notion, c.params["threshold"]))
    if not out:
        raise ValueError(f"channel {channel.kind!r} states no privacy guarantee the ledger can record")
    return tuple(out)


@dataclass(frozen=True)
class ChannelRelease:
    """The output for one accepted record: ``output`` is None when the record was withheld."""

    seq: int
    ts: float
    output: int | None
    #: The physical step (chain position) of the record.
    phys: int = -1

    @property
    def redacted(self) -> bool:
        return self.output is None


def build_channel(cfg: ChannelConfig, n_x: int) -> tuple[PerturbationChannel, Joint]:
    """The stream's channel and the joint it is verified against (fails closed with a named reason)."""
    from ..perturbation.channel_file import load_channel
    from ..perturbation.designers import design
    from ..perturbation.verify import require_valid

    if cfg.file is not None:
        channel, joint = load_channel(cfg.file)  # verifies exactly on load
    else:
        assert cfg.kind is not None and cfg.epsilon is not None
        if cfg.joint is not None:
            joint = Joint.from_json(json.loads(cfg.joint.read_text()))
        else:
            joint = Joint.from_prior(cfg.prior or [])
        channel = design(cfg.kind, joint, cfg.epsilon, lam=cfg.lam, measure=cfg.measure)
        require_valid(channel, joint)
    if channel.n_x != n_x:
        raise ValueError(f"channel: designed for {channel.n_x} input states, the stream has {n_x}")
    if channel.inputs == "sx":
        if cfg.sensitive_labels is None:
            raise ValueError(f"channel: kind {channel.kind!r} reads the sensitive attribute S of each record; "
                             "set sensitive_field and sensitive_labels")
        if len(cfg.sensitive_labels) != channel.n_s:
            raise ValueError(f"channel: sensitive_labels has {len(cfg.sensitive_labels)} entries, "
                             f"S has {channel.n_s} states")
    return channel, joint


class ChannelRuntime(StreamRuntime):
    """A per-record channel stream (see module docstring)."""

    mechanism = "channel"

    def __init__(self, settings: Settings, cfg: StreamConfig, source: BitSource, *, resume: Resume = FRESH,
                 aggregate_source: BitSource | None = None) -> None:
        super().__init__(settings, cfg, source, aggregate_source)
        from ..perturbation.metrics import channel_metrics, metrics_json
        from ..perturbation.sampler import ChannelSampler
        from ..perturbation.stream_leakage import stream_leakage_report

        assert cfg.channel is not None
        self.channel, self.joint = build_channel(cfg.channel, self.states.k)
        self.claims = ledger_claims(self.channel)  # refuses a channel with no privacy claim, at start-up
        self.sampler = ChannelSampler(self.channel)
        self.source = source
        self.next_seq = resume.first_seq
        self.next_phys = resume.first_phys
        self.steps = StepTracker(cfg.sample_period, max_missing=MEMORY,
                                 floor=resume.newest_ts)
        self._reserved = resume.first_phys  # positions below this are covered by a ledger event
        self.metrics = channel_metrics(self.channel, self.joint)
        self._metrics_json = metrics_json(self.metrics)
        chains = cfg.model_chains()  # one chain, or a finite model set's members (the worst member's figure)
        self.stream_leakage = (stream_leakage_report(self.channel, chains) if self.channel.inputs == "x"
                               else None)
        # what the ledger states: only an exact (converged) value is a bound for the stream
        exact = self.stream_leakage is not None and not self.stream_leakage["lower_bound"]
        leak = self.stream_leakage["leakage"] if exact and self.stream_leakage is not None else None
        self.stream_leakage_bound: float | None = None if leak is None else float(leak)
        ms = self.model_set = cfg.model_set()
        self.model_id = ("markov:" + hashlib.sha256(np.ascontiguousarray(self.chain.matrix).tobytes()).hexdigest()[:16]
                         if ms is None else f"modelset:{ms.digest()}")
        self.channel_id = f"{self.channel.kind}:" + hashlib.sha256(
            np.ascontiguousarray(self.channel.matrix).tobytes()).hexdigest()[:16]

    def _sensitive(self) -> SensitiveField | None:
        assert self.cfg.channel is not None
        return self.cfg.channel.sensitive() if self.channel.inputs == "sx" else None

    def _outside_model(self, rec: RawRecord) -> Rejection | None:
        """The joint says this (s, x) cannot happen: the channel's row for it was never checked
        against the claims (a hand-made channel may release anything there) — fail closed."""
        if rec.sensitive is not None and self.joint.p[rec.sensitive, rec.state] == 0:
            return Rejection("outside-model", "fields 'value' and the sensitive attribute form a pair the "
                                              "model gives probability 0")
        return None

    def on_frame(self, data: bytes | Element | Rejection, now: float) -> tuple[list[ChannelRelease], Rejection | None]:
        rec, step = self._intake(data, now)
        if not step.new:  # a redelivered reading: drawn once, never twice
            return [], rec if isinstance(rec, Rejection) else None
        for missing in step.missing:  # readings that never arrived still occupy their steps
            self._observe(self.next_phys, None, missing)
            self.steps.taken(missing, self.next_phys)
            self.next_phys += 1
        phys = self.next_phys
        self.next_phys += 1
        self.steps.taken(rec.ts, phys)
        if isinstance(rec, Rejection):
            self._observe(phys, None, now if rec.ts is None else rec.ts)
            return [], rec
        seq = self.next_seq
        self.next_seq += 1
        if rec.private or self._scheduled(rec.ts):
            if rec.private:  # never a silent one-record redaction (issue 12)
                log.warning("stream %s: a private flag on a channel stream withholds only seq %d; its correlated "
                            "neighbours still carry about it (stream leakage %s nats) — use mechanism = \"redaction\" for "
                            "private positions", self.name, seq, self.stream_leakage_bound)
            self._observe(phys, None, rec.ts)  # withheld from the aggregates too (its position is still charged)
            self.counters.redacted += 1
            return [ChannelRelease(seq, rec.ts, None, phys)], None
        self._observe(phys, rec.state, rec.ts)
        self._reserve(phys)
        s = None if rec.sensitive is None else np.array([rec.sensitive], dtype=np.int64)
        out = int(self.sampler.sample(np.array([rec.state], dtype=np.int64), s, self.source)[0])
        self.counters.released += 1
        return [ChannelRelease(seq, rec.ts, out, phys)], None

    def _reserve(self, phys: int) -> None:
        """Write-ahead for the ledger: before position ``phys`` is released, a ledger event must
        cover it. Events cover RESERVE positions at a time (a reservation never released is
        harmless: the per-record guarantee of an unreleased record holds trivially)."""
        if phys < self._reserved:
            return
        lo, hi = phys, phys + RESERVE - 1
        self._reserved = hi + 1
        self._ledger_events.append(ChannelEvent(
            device=self.settings.device, stream=self.name, channel=self.channel_id, claims=self.claims,
            lo=lo, hi=hi, stream_leakage=self.stream_leakage_bound, model=self.model_id))

    def on_command(self, data: bytes) -> Rejection | None:
        return self._bad_command("unsupported", "a channel stream takes no commands (its records are out at once)")

    def tick(self, now: float) -> list[ChannelRelease]:
        return []

    def drain(self) -> list[ChannelRelease]:
        self._flush_aggregates()
        return []

    def take_decisions(self) -> list[tuple[int, float, float]]:
        return []

    def mark_records(self) -> dict[int, dict[str, Any]]:
        return {}

    def _label(self, output: int) -> Any:
        sym = self.channel.outputs[output]
        if isinstance(sym, tuple):
            return [self.states.label_of(x) for x in sym]
        return self.states.label_of(sym)

    def record(self, r: ChannelRelease) -> dict[str, Any]:
        return {
            "device": self.settings.device,
            "stream": self.name,
            "seq": r.seq,
            "position": r.phys,
            "ts": r.ts,
            "value": None if r.output is None else self._label(r.output),
            "output": r.output,
            "redacted": r.output is None,
            "mechanism": "channel",
            "kind": self.channel.kind,
            "mode": self._mode(),
        }

    def payload(self, r: ChannelRelease) -> bytes:
        return json.dumps(self.record(r), separators=(",", ":")).encode()

    def privacy_status(self) -> dict[str, Any]:
        return {
            "stream": self.name,
            "mechanism": f"per-record channel: {self.channel.kind}",
            "guarantee": "per-record guarantees below hold for each record under the stated joint P(S, X); "
                         "stream_leakage is the exact leakage about one record of the whole correlated "
                         "stream under the Markov model",
            "per_record": [c.to_json() for c in self.channel.claims],
            "metrics": self._metrics_json,
            "stream_leakage": self.stream_leakage,
            "model": {"matrix": self.chain.matrix.tolist(), "stationary": self.chain.stationary},
            # a finite model set: stream_leakage is its worst member's (exact over the set)
            **({} if self.model_set is None else {"model_set": self.model_set.describe()}),
            "joint": self.joint.p.tolist(),  # the P(S, X) the per-record claims hold under
            "labels": [self.states.label_of(i) for i in range(self.states.k)],
            # the channel itself (issue 14): Pr(output j | input row), rows by x or by s·|X| + x
            "channel": {"kind": self.channel.kind, "inputs": self.channel.inputs, "n_s": self.channel.n_s,
                        "matrix": self.channel.matrix.tolist(),
                        "outputs": [self._label(j) for j in range(self.channel.n_y)]},
            "deterministic": self.deterministic,
            "next_seq": self.next_seq,
            "counters": self.counters.as_dict(),
        }
