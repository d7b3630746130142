"""Configuration of a simulated sensor stream: model, emission, timing and injected trouble.

All classes are frozen and validated on construction (``ValueError`` naming the field).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from streamguard.model.chain import MarkovChain

from .emission import Emission, Sensitive, default_labels
from .faults import FaultKind

#: ``flag``: the reading carries ``"private": true``; ``command``: ``{"private": "now"}`` is sent on
#: the stream's command channel right after the reading.
ButtonMode = Literal["flag", "command"]
BUTTON_MODES: tuple[ButtonMode, ...] = ("flag", "command")
_RESERVED_NAME_CHARS = frozenset("/+#\0")


def _check_probability(name: str, p: float) -> None:
    if not (isinstance(p, (int, float)) and 0.0 <= p <= 1.0):
        raise ValueError(f"{name}: must be a probability in [0, 1]")


def check_name(what: str, name: str) -> None:
    """Raise unless ``name`` is a non-empty MQTT topic level (no ``/``, ``+``, ``#`` or NUL)."""
    if not isinstance(name, str) or not name or _RESERVED_NAME_CHARS & set(name):
        raise ValueError(f"{what}: must be a non-empty string without '/', '+', '#' or NUL")


@dataclass(frozen=True)
class Bursts:
    """Every ``every`` seconds, ``size`` extra frames are sent back-to-back.

    A burst follows the last regular slot at or before its time and is sent with it; its frames'
    timestamps lie evenly between that slot's and the next one's, so they stay in order. Like any
    frame, a burst frame is a reading or (at ``faults.rate``) a fault.
    """

    every: float
    size: int

    def __post_init__(self) -> None:
        if not (math.isfinite(self.every) and self.every > 0):
            raise ValueError("bursts.every: must be a positive number of seconds")
        if not (isinstance(self.size, int) and self.size >= 1):
            raise ValueError("bursts.size: must be a positive integer")


@dataclass(frozen=True)
class ClockJumps:
    """Before each frame, with ``probability``, the device clock steps by one of ``amounts`` seconds
    (chosen uniformly). Steps accumulate; a backward step makes later readings out of order."""

    probability: float
    amounts: tuple[float, ...]

    def __post_init__(self) -> None:
        amounts = tuple(float(a) for a in self.amounts)
        object.__setattr__(self, "amounts", amounts)
        _check_probability("clock_jumps.probability", self.probability)
        if not amounts or not all(math.isfinite(a) and a != 0 for a in amounts):
            raise ValueError("clock_jumps.amounts: need at least one finite, non-zero step")


@dataclass(frozen=True)
class Button:
    """Privacy-button presses: each reading independently with ``probability``, plus the readings
    whose 0-based indices are in ``at``."""

    probability: float = 0.0
    at: frozenset[int] = frozenset()
    mode: ButtonMode = "flag"

    def __post_init__(self) -> None:
        at = frozenset(self.at)
        object.__setattr__(self, "at", at)
        _check_probability("button.probability", self.probability)
        if not all(isinstance(i, int) and i >= 0 for i in at):
            raise ValueError("button.at: reading indices must be non-negative integers")
        if self.mode not in BUTTON_MODES:
            raise ValueError(f"button.mode: must be one of {', '.join(BUTTON_MODES)}")


@dataclass(frozen=True)
class Faults:
    """Each frame is, with probability ``rate``, a fault of a kind drawn uniformly from ``kinds``."""

    rate: float
    kinds: tuple[FaultKind, ...] = tuple(FaultKind)

    def __post_init__(self) -> None:
        kinds = tuple(FaultKind(k) for k in self.kinds)
        object.__setattr__(self, "kinds", kinds)
        _check_probability("faults.rate", self.rate)
        if not kinds or len(set(kinds)) != len(kinds):
            raise ValueError("faults.kinds: need at least one kind, each once")


@dataclass(frozen=True)
class SimStream:
    """One simulated sensor stream.

    ``emission`` writes states as labels or numbers (None: :func:`default_labels`); ``rate`` is
    in frames per second (readings and faults); ``seed`` makes every frame reproducible. The other
    fields switch on a sensitive attribute, bursts, clock jumps, button presses and faults.
    """

    name: str
    chain: MarkovChain
    rate: float = 1.0
    seed: int = 0
    emission: Emission | None = None
    sensitive: Sensitive | None = None
    bursts: Bursts | None = None
    clock_jumps: ClockJumps | None = None
    button: Button = field(default_factory=Button)
    faults: Faults | None = None

    def __post_init__(self) -> None:
        check_name("stream name", self.name)
        k = self.chain.k
        if self.effective_emission.k != k:
            raise ValueError(f"stream {self.name}: emission has {self.effective_emission.k} states, chain has {k}")
        if self.sensitive is not None and self.sensitive.matrix.shape[0] != k:
            raise ValueError(f"stream {self.name}: sensitive matrix needs one row per state ({k})")
        if not (isinstance(self.rate, (int, float)) and math.isfinite(self.rate) and self.rate > 0):
            raise ValueError(f"stream {self.name}: rate must be a positive number of frames per second")
        if not (isinstance(self.seed, int) and self.seed >= 0):
            raise ValueError(f"stream {self.name}: seed must be a non-negative integer")
        if self.bursts is not None and self.bursts.every * self.rate < 1:
            raise ValueError(f"stream {self.name}: bursts must be at least one regular interval (1/rate) apart")

    @property
    def effective_emission(self) -> Emission:
        """``emission``, or the chain's :func:`default_labels` when it is None."""
        return self.emission if self.emission is not None else default_labels(self.chain.k)


def unique_names(streams: Iterable[SimStream]) -> None:
    """Raise unless the streams' names are distinct."""
    names = [s.name for s in streams]
    if len(set(names)) != len(names):
        raise ValueError("stream names must be distinct")
