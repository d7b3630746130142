"""The frames of one simulated stream, in send order, reproducible byte for byte under its seed.

Time is a grid of regular slots n = 0, 1, 2, … sent at n / rate seconds after the start; a burst
adds readings at fractional positions after a regular slot (sent with it). Each slot is a fault
(probability ``faults.rate``) or a reading. Readings take the chain's path in order, so the states
of the readings equal ``MarkovSource(chain, seed).states(n)``; faults draw no state.

Randomness comes from independent PCG64 streams of the seed (SeedSequence spawn keys, as in
:class:`streamguard.sampling.SeededSource`): the Markov path (key 1, :class:`MarkovSource`), slot
events (key 2: fault?, clock jump?, which jump, button?; four uniforms per slot whatever the
configuration), reading values (key 3: numeric values, sensitive attribute) and fault details
(key 4). So the readings' states and values do not depend on the fault, jump or button settings.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Iterator
from typing import TypeVar

import numpy as np

from .config import Bursts, SimStream
from .faults import fault_payload
from .frames import COMMAND_NOW, Frame, FrameMeta, encode
from .sources import MarkovSource

T = TypeVar("T")

_EVENTS_STREAM, _VALUES_STREAM, _FAULTS_STREAM = 2, 3, 4
#: Draws are made in blocks of this many slots (the sequences do not depend on it).
_BLOCK = 256
#: Slack when placing a burst on the slot grid (k · every · rate may land just below an integer).
_GRID_EPS = 1e-9


def _rng(seed: int, stream: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(stream,))))


def _buffered(draw: Callable[[int], list[T]]) -> Iterator[T]:
    """The items of ``draw(_BLOCK)``, ``draw(_BLOCK)``, … one at a time."""
    while True:
        yield from draw(_BLOCK)


def _slots(rate: float, bursts: Bursts | None) -> Iterator[tuple[float, int, bool]]:
    """``(position, regular slot it is sent with, in a burst?)`` forever; positions increase."""
    burst = 1
    for n in itertools.count():
        yield float(n), n, False
        if bursts is not None and n == math.floor(burst * bursts.every * rate + _GRID_EPS):
            for i in range(1, bursts.size + 1):
                yield n + i / (bursts.size + 1), n, True
            burst += 1


def stream_frames(stream: SimStream, start: float) -> Iterator[Frame]:
    """All frames of ``stream`` (an endless generator), timestamps counted from ``start``."""
    emission = stream.effective_emission
    button, jumps, faults, sensitive = stream.button, stream.clock_jumps, stream.faults, stream.sensitive
    source = MarkovSource(stream.chain, stream.seed)
    states: Iterator[int] = _buffered(lambda n: source.states(n).tolist())
    events_rng = _rng(stream.seed, _EVENTS_STREAM)
    events: Iterator[list[float]] = _buffered(lambda n: events_rng.random((n, 4)).tolist())
    values_rng = _rng(stream.seed, _VALUES_STREAM)
    faults_rng = _rng(stream.seed, _FAULTS_STREAM)
    offset, latest, reading = 0.0, -math.inf, 0
    slots = _slots(stream.rate, stream.bursts)
    for (position, sent, burst), (u_fault, u_jump, u_pick, u_button) in zip(slots, events):
        if jumps is not None and u_jump < jumps.probability:
            offset += jumps.amounts[int(u_pick * len(jumps.amounts))]
        ts = start + position / stream.rate + offset
        send_at = sent / stream.rate
        if faults is not None and u_fault < faults.rate:
            kind = faults.kinds[int(faults_rng.integers(len(faults.kinds)))]
            meta = FrameMeta("raw", send_at, ts, None, None, fault=kind, burst=burst, clock_offset=offset)
            yield Frame(stream.name, fault_payload(kind, ts, emission, faults_rng), meta)
            continue
        state = next(states)
        fields: dict[str, object] = {"value": emission.value(state, values_rng), "ts": ts}
        s = None
        if sensitive is not None:
            s = sensitive.draw(state, values_rng)
            fields["s"] = sensitive.labels[s]
        pressed = reading in button.at or u_button < button.probability
        if pressed and button.mode == "flag":
            fields["private"] = True
        meta = FrameMeta(
            "raw", send_at, ts, state, reading, sensitive=s, button=pressed, burst=burst,
            clock_offset=offset, out_of_order=ts < latest,
        )
        latest = max(latest, ts)
        yield Frame(stream.name, encode(fields), meta)
        if pressed and button.mode == "command":
            yield Frame(stream.name, COMMAND_NOW, dataclasses.replace(meta, channel="cmd"))
        reading += 1
