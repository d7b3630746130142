"""Release events: what the privacy ledger records for every release (DESIGN.md §4, §8).

Following Google's ``dp_accounting`` (DESIGN.md §8), a release is a small immutable record. Each
event names its **family**, and each family is composed by the rule that supports it
(:mod:`streamguard.ledger.store`):

* :class:`AggregateEvent` — one Markov Quilt Mechanism release F(X_W) + Lap(β)^⊗d on the window
  W = [lo, hi] of positions. What composes is its load ρ = L/β on every position of W, by the
  per-position quilt accountant (notes/002 §4.7). The fields are what notes/002 §4.8 says an
  accountant must store: window, L, β (= L·σ), the ε target σ was computed for, the model Θ and
  its max-influence mode, whether σ is the length-independent σ_∞, the witness of the active
  quilt (Thm III.3 condition 1), and the noise sampler.
* :class:`RedactionEvent` — a private position p of a 3R redaction plan (or mark) with the exact
  leakage about X_p of the rows used (left side, right side, total; notes/000 §4.1). Several
  private positions combine by the element-wise maximum of their rows (notes/000 §4.5), a
  post-processing of each alone, so each mark's own exact leakage is its guarantee. A mark on a
  record whose position the device no longer knows is recorded too (by its seq, not honoured,
  unbounded leakage): every mark reaches the ledger, honoured or not.
* :class:`ChannelEvent` — records [lo, hi] released through a per-record local channel
  (randomized response, lift-based, linear reduction) with the guarantees its designer claims
  per record (e.g. ε-LDP w.r.t. X or S) and, if known, the exact leakage of the released stream
  under the model (``audit.exact``).
* :class:`DriftEvent` — the drift guard of a stream raised or cleared its alarm (issue 11;
  docs/model-sets.md §6). Not a release: the guard reads only records already released unchanged
  (post-processing), so it charges nothing and composes with nothing; it is in the ledger so that
  the alarm survives a restart (the daemon restores it) and the record says when the stream's
  model stopped holding.

Positions are the stream's record indices (0-based), the same numbering for every family of
one stream. Events carry numbers about positions only — never a reading.

JSON: :meth:`to_json` gives a plain dict (``"family"`` names the class); infinite leakage is
written as the string ``"inf"`` (JSON has no infinity); :func:`event_from_json` reads it back
and validates it like the constructor.
"""

from __future__ import annotations

import json
import math
import re
import time as _time
from dataclasses import MISSING, dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from ..support.json_numbers import json_number, number_from_json

if TYPE_CHECKING:
    from ..quilt.release import AggregateRelease

Family = Literal["aggregate", "redaction", "channel", "drift"]
#: The families of releases (what spends budget); ``drift`` events are records of the guard.
FAMILIES: tuple[Family, ...] = ("aggregate", "redaction", "channel")

#: Device and stream names: the configuration's rule (they become MQTT topic levels).
NAME = re.compile(r"^[A-Za-z0-9_\-]+$")

#: Notion of a per-record claim that composes by summation over channels applied to the same
#: record: independent ε_k-LDP channels on one input x are (Σ ε_k)-LDP about x. No other notion
#: is composed (LDP w.r.t. a correlated S is a Pufferfish-type guarantee, and those do not
#: compose linearly in general — notes/002 §4.4, Thm III.4).
LDP_X = "ldp_x"


class EventError(ValueError):
    """A release event is malformed (the message names the field, never a reading)."""


def _name(value: object, what: str) -> str:
    if not isinstance(value, str) or not NAME.match(value):
        raise EventError(f"{what}: expected a name of letters, digits, '_' or '-'")
    return value


def _position(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise EventError(f"{what}: expected a position (integer ≥ 0)")
    return value


def _number(value: object, what: str, *, positive: bool = False, allow_inf: bool = False) -> float:
    try:
        x = number_from_json(value)
    except ValueError:
        x = None
    if x is None:
        raise EventError(f"{what}: expected a number" + (' or "inf"' if allow_inf else ""))
    if math.isinf(x) and not (allow_inf and x > 0):
        raise EventError(f"{what}: expected a finite number" + (" or +inf" if allow_inf else ""))
    if x < 0 or (positive and x == 0):
        raise EventError(f"{what}: expected a number {'>' if positive else '≥'} 0")
    return x


def _flag(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise EventError(f"{what}: expected true or false")
    return value


def _window(lo: int, hi: int, what: str) -> None:
    _position(lo, f"{what}.lo")
    _position(hi, f"{what}.hi")
    if hi < lo:
        raise EventError(f"{what}: hi < lo")


def widen(span: tuple[int, int] | None, other: tuple[int, int]) -> tuple[int, int]:
    """The positions [min lo, max hi] of ``span`` (None: none yet) and ``other``."""
    return other if span is None else (min(span[0], other[0]), max(span[1], other[1]))


def _json_value(value: Any, what: str) -> Any:
    """A JSON-able value, normalised (so a frozen event holds no caller-owned container)."""
    try:
        return json.loads(json.dumps(value, allow_nan=False, sort_keys=True))
    except (TypeError, ValueError):
        raise EventError(f"{what}: not JSON-serialisable (finite numbers, strings, lists, objects)") from None


@dataclass(frozen=True, kw_only=True)
class _Event:
    """Fields every event has: the stream (``device``, ``stream``) and the time it was made."""

    family: ClassVar[Family]
    device: str
    stream: str
    time: float = field(default_factory=_time.time)

    def __post_init__(self) -> None:
        _name(self.device, "device")
        _name(self.stream, "stream")
        object.__setattr__(self, "time", _number(self.time, "time"))

    @property
    def key(self) -> tuple[str, str]:
        """The stream this event belongs to: (device, stream)."""
        return (self.device, self.stream)

    def span(self) -> tuple[int, int] | None:
        """The positions [lo, hi] whose records the release reads (inclusive); None when they are
        unknown (a redaction mark on a record whose position the device no longer knows)."""
        raise NotImplementedError

    def to_json(self) -> dict[str, Any]:
        doc = {"family": self.family}
        for f in fields(self):
            v = getattr(self, f.name)
            doc[f.name] = json_number(v) if isinstance(v, float) else v
        return doc


@dataclass(frozen=True, kw_only=True)
class AggregateEvent(_Event):
    """One MQM aggregate release on positions [lo, hi] (module docstring; notes/002 §3.6, §4.8).

    ``lipschitz`` L (Hamming/L1 sensitivity of the query, e.g. 2 for a count histogram),
    ``beta`` the Laplace scale actually used, ``sigma`` the 1-Lipschitz MQM scale with
    β = L·σ, ``epsilon`` the target σ was computed for, ``model`` the
    ``QuiltModel.identifier`` of Θ and ``mode`` its max-influence mode, ``t_independent`` whether
    σ is the length-independent σ_∞ (or σ̄_supq) and otherwise ``T``, the chain length σ_max(T)
    was computed for (positions 0..T−1), ``witness`` the active quilt as reported by
    the scale search, ``sampler`` the noise source's id and ``deterministic`` whether it is the
    seeded test source (no privacy at all against anyone who knows the seed).
    """

    family: ClassVar[Family] = "aggregate"
    kind: str
    lo: int
    hi: int
    lipschitz: float
    beta: float
    sigma: float
    epsilon: float
    model: str
    mode: str
    witness: Any = None
    t_independent: bool
    T: int | None = None
    sampler: str
    deterministic: bool

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.kind, str) or not self.kind:
            raise EventError("kind: expected a non-empty string")
        _window(self.lo, self.hi, "window")
        for name in ("lipschitz", "beta", "sigma", "epsilon"):
            object.__setattr__(self, name, _number(getattr(self, name), name, positive=True))
        # β = L·σ is how MQM calibrates (notes/002 §3.6); a mismatch means the event does not
        # describe the release it claims to (fail closed rather than guess which number is right).
        if abs(self.beta - self.lipschitz * self.sigma) > 1e-9 * self.beta:
            raise EventError("beta: must equal lipschitz·sigma")
        for name in ("model", "mode", "sampler"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise EventError(f"{name}: expected a non-empty string")
        _flag(self.t_independent, "t_independent")
        if self.t_independent != (self.T is None):
            raise EventError("T: the chain length σ was computed for, given exactly when σ is not t_independent")
        if self.T is not None and _position(self.T, "T") < 1:
            raise EventError("T: expected a chain length ≥ 1")
        _flag(self.deterministic, "deterministic")
        object.__setattr__(self, "witness", _json_value(self.witness, "witness"))

    @classmethod
    def from_release(cls, release: AggregateRelease, device: str, stream: str,
                     time: float | None = None) -> AggregateEvent:
        """The event of a ``quilt.release.AggregateRelease`` (same field names). Its β is the
        requested L·σ; the realised discrete Laplace scale is ≥ β, so the load L/β recorded is
        never below the true one."""
        return cls(device=device, stream=stream, time=_time.time() if time is None else time,
                   kind=release.kind, lo=release.lo, hi=release.hi, lipschitz=release.lipschitz,
                   beta=release.beta, sigma=release.sigma, epsilon=release.epsilon, model=release.model,
                   mode=release.mode, witness=dict(release.witness), t_independent=release.t_independent,
                   T=release.T, sampler=release.sampler, deterministic=release.deterministic)

    @property
    def load(self) -> float:
        """ρ = L/β added to every position of the window (notes/002 §4.7)."""
        return self.lipschitz / self.beta

    def span(self) -> tuple[int, int]:
        return (self.lo, self.hi)


@dataclass(frozen=True, kw_only=True)
class RedactionEvent(_Event):
    """A private position of a redaction plan and the exact leakage about it (module docstring).

    ``position`` is p, ``seq`` its published sequence number (None for a rejected frame that asked
    to be private), ``plan`` the plan's id or design, ``epsilon`` the budget it was planned for,
    ``left``/``right``/``total`` the exact leakage L(X_p → Y) of each side alone and of both
    (+inf when p itself was already published), ``honoured`` whether the mark met ``epsilon``,
    ``reason`` why not, and [lo, hi] the positions whose rows the mark set (default p alone).
    ``last``: a run's last position — the mark makes every position p..last private and its
    figures bound the leakage about each of them (stream/privatizer.py, ``_extend``); None: p alone.

    ``position`` is None when the mark names a record or step whose position the device no longer
    knows — published too long ago, or before a restart (``seq`` None too when the step had no
    seq). Nothing is bounded about it: such an event is never honoured, its ``total`` is +inf, it
    sets no rows (``lo``/``hi`` None) and its :meth:`span` is None. An honoured mark always has
    ``total`` ≤ ``epsilon``.
    """

    family: ClassVar[Family] = "redaction"
    position: int | None
    seq: int | None = None
    plan: str
    epsilon: float
    left: float
    right: float
    total: float
    honoured: bool
    reason: str | None = None
    lo: int | None = None
    hi: int | None = None
    last: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.position is not None:
            _position(self.position, "position")
        if self.last is not None and (self.position is None or _position(self.last, "last") < self.position):
            raise EventError("last: a run's last position, at or after its position")
        if self.seq is not None:
            _position(self.seq, "seq")
        if not isinstance(self.plan, str) or not self.plan:
            raise EventError("plan: expected a non-empty string")
        object.__setattr__(self, "epsilon", _number(self.epsilon, "epsilon", positive=True))
        for name in ("left", "right", "total"):
            object.__setattr__(self, name, _number(getattr(self, name), name, allow_inf=True))
        # Y_p = ⊥, so the two sides compose: L ≤ L_left + L_right (notes/000 §4.1).
        if self.total > self.left + self.right + 1e-9 * (1 + self.left + self.right):
            raise EventError("total: exceeds left + right (the sides compose additively)")
        _flag(self.honoured, "honoured")
        if self.honoured and not self.total <= self.epsilon * (1 + 1e-12):
            raise EventError("honoured: a mark whose leakage exceeds its epsilon is not honoured")
        if self.reason is not None and not isinstance(self.reason, str):
            raise EventError("reason: expected a string or null")
        if self.position is None:
            if self.honoured or self.total != math.inf:
                raise EventError("total: a mark whose position is unknown is not honoured and bounds nothing (+inf)")
            if self.lo is not None or self.hi is not None:
                raise EventError("rows: a mark whose position is unknown sets no rows")
            return
        lo = self.position if self.lo is None else self.lo
        hi = self.position if self.hi is None else self.hi
        _window(lo, hi, "rows")
        if not lo <= self.position <= hi or (self.last is not None and self.last > hi):
            raise EventError("rows: must contain the position (and a run's last)")
        object.__setattr__(self, "lo", lo)
        object.__setattr__(self, "hi", hi)

    def to_json(self) -> dict[str, Any]:
        doc = super().to_json()
        if self.last is None:  # (a single position: stored as before runs existed)
            del doc["last"]
        return doc

    @property
    def mark(self) -> str | None:
        """The mark as the ledger names it: its position (``"17"``), or ``"seq:17"`` when only its
        seq is known (several events of one mark, e.g. planned then achieved, share the name);
        None when neither is known (the ledger then names it by its event id)."""
        if self.position is not None:
            return str(self.position)
        return None if self.seq is None else f"seq:{self.seq}"

    @property
    def order(self) -> tuple[int, int]:
        """Where the mark sorts: by position, then the marks of unknown position by seq, then the
        marks known by neither."""
        if self.position is not None:
            return (0, self.position)
        return (1, self.seq) if self.seq is not None else (2, 0)

    def span(self) -> tuple[int, int] | None:
        """[lo, hi], or None when the mark's position is unknown."""
        return None if self.lo is None else (self.lo, self.hi)  # type: ignore[return-value]


@dataclass(frozen=True)
class ChannelClaim:
    """A per-record guarantee claimed for a channel: ``notion`` (e.g. ``"ldp_x"``, ``"ldp_s"``,
    as in ``perturbation.model.Claim``) at level ``epsilon``."""

    notion: str
    epsilon: float

    def __post_init__(self) -> None:
        if not isinstance(self.notion, str) or not NAME.match(self.notion):
            raise EventError("claims.notion: expected a name")
        object.__setattr__(self, "epsilon", _number(self.epsilon, f"claims.{self.notion}", allow_inf=True))


@dataclass(frozen=True, kw_only=True)
class ChannelEvent(_Event):
    """Records [lo, hi] released through a per-record channel (module docstring).

    ``channel`` names the mechanism (kind and parameters, e.g. ``"rr:eps=1"``), ``claims`` the
    per-record guarantees, ``stream_leakage`` the exact leakage about any position of the
    released records under ``model`` (a chain description's id), if it was computed.
    """

    family: ClassVar[Family] = "channel"
    channel: str
    claims: tuple[ChannelClaim, ...]
    lo: int
    hi: int
    stream_leakage: float | None = None
    model: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.channel, str) or not self.channel:
            raise EventError("channel: expected a non-empty string")
        claims = tuple(c if isinstance(c, ChannelClaim) else _claim_from_json(c) for c in self.claims)
        if not claims:
            raise EventError("claims: a channel needs at least one stated guarantee")
        if len({c.notion for c in claims}) != len(claims):
            raise EventError("claims: one claim per notion")
        object.__setattr__(self, "claims", claims)
        _window(self.lo, self.hi, "records")
        if self.stream_leakage is not None:
            object.__setattr__(self, "stream_leakage",
                               _number(self.stream_leakage, "stream_leakage", allow_inf=True))
            if not isinstance(self.model, str) or not self.model:
                raise EventError("model: a stream leakage holds under a model; name it")
        elif self.model is not None and (not isinstance(self.model, str) or not self.model):
            raise EventError("model: expected a non-empty string or null")

    def span(self) -> tuple[int, int]:
        return (self.lo, self.hi)

    def to_json(self) -> dict[str, Any]:
        doc = super().to_json()
        doc["claims"] = [{"notion": c.notion, "epsilon": json_number(c.epsilon)} for c in self.claims]
        if self.stream_leakage is not None:
            doc["stream_leakage"] = json_number(self.stream_leakage)
        return doc


@dataclass(frozen=True, kw_only=True)
class DriftEvent(_Event):
    """The stream's drift guard raised (``raised``) or cleared its alarm (module docstring).

    ``model`` is the id of the model (set) the alarm concerns (``ModelSet.digest``); ``transitions``
    the observed transitions when it fired (0 for a clearing); ``false_alarm`` the test's rate over
    the stream's life; ``reason`` one line (never a reading).
    """

    family: ClassVar[Family] = "drift"
    raised: bool
    model: str
    transitions: int = 0
    false_alarm: float
    reason: str

    def __post_init__(self) -> None:
        super().__post_init__()
        _flag(self.raised, "raised")
        if not isinstance(self.model, str) or not self.model:
            raise EventError("model: expected the model set's id")
        _position(self.transitions, "transitions")
        object.__setattr__(self, "false_alarm", _number(self.false_alarm, "false_alarm", positive=True))
        if not isinstance(self.reason, str) or not self.reason:
            raise EventError("reason: expected a non-empty string")

    def span(self) -> tuple[int, int] | None:
        return None  # reads no positions of its own: only what was already released


Event = AggregateEvent | RedactionEvent | ChannelEvent | DriftEvent
_CLASSES: dict[str, type[AggregateEvent] | type[RedactionEvent] | type[ChannelEvent] | type[DriftEvent]] = {
    cls.family: cls for cls in (AggregateEvent, RedactionEvent, ChannelEvent, DriftEvent)}


def _claim_from_json(doc: object) -> ChannelClaim:
    if not isinstance(doc, dict) or set(doc) != {"notion", "epsilon"}:
        raise EventError('claims: each claim is {"notion": ..., "epsilon": ...}')
    return ChannelClaim(doc["notion"], doc["epsilon"])


def event_from_json(doc: object) -> Event:
    """The event a :meth:`to_json` dict describes (validated; unknown or missing keys are errors)."""
    if not isinstance(doc, dict):
        raise EventError("event: expected a JSON object")
    family = doc.get("family")
    cls = _CLASSES.get(family) if isinstance(family, str) else None
    if cls is None:
        raise EventError(f"family: expected one of {', '.join(_CLASSES)}")
    names = {f.name for f in fields(cls)}
    extra = sorted(set(doc) - names - {"family"})
    if extra:
        raise EventError(f"{family} event: unknown key {extra[0]!r}")
    kwargs = {k: v for k, v in doc.items() if k != "family"}
    if cls is ChannelEvent and "claims" in kwargs:
        if not isinstance(kwargs["claims"], list):
            raise EventError("claims: expected a list")
        kwargs["claims"] = tuple(_claim_from_json(c) for c in kwargs["claims"])
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a missing required field
        missing = sorted(f.name for f in fields(cls) if f.name not in kwargs and f.default is MISSING
                         and f.default_factory is MISSING)
        raise EventError(f"{family} event: missing key {missing[0]!r}" if missing else f"{family} event: {exc}") from None


def canonical(event: Event) -> str:
    """The event's canonical JSON text (sorted keys, no spaces): what the ledger stores and hashes."""
    return json.dumps(event.to_json(), sort_keys=True, separators=(",", ":"), allow_nan=False)


__all__ = [
    "FAMILIES", "LDP_X", "AggregateEvent", "ChannelClaim", "ChannelEvent", "Event", "EventError", "Family",
    "RedactionEvent", "canonical", "event_from_json",
]
