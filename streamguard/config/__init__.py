"""Daemon configuration: a TOML file with environment overrides, validated by pydantic-settings.

Precedence (highest first): keyword arguments, environment variables ``STREAMGUARD_<KEY>`` with
``__`` for nesting (e.g. ``STREAMGUARD_BROKER__PORT=8883``), the TOML file
(notes/ecosystem.md §3.1: the TOML source must be added explicitly, ``toml_file`` alone is
ignored). Unknown keys are errors. All validation errors are reported at once, one line each
naming the key, streams by name, with a "did you mean" for a mistyped key and the environment
variable when it set the value, e.g. ``streams[kitchen].epsilon: Input should be greater than 0``
(:mod:`.errors`). Relative paths resolve against the config file's directory
(:mod:`.paths`).
"""

from __future__ import annotations

import datetime as dt
import math
import os
import tomllib
import zoneinfo
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, TomlConfigSettingsSource

from ..privacy.budget import Epsilon
from ..model.chain import MAX_STATES, MarkovChain, ModelError
from .errors import ConfigError, format_errors, unknown_env
from .paths import relative_to, resolve_paths
from ..ingest.spec import IngestConfig, RecordConfig
from ..ingest.topics import filters_overlap
from ..support.loopback import is_loopback
from ..model.modelset import ModelSet
from ..frames.records import SensitiveField, StateMap


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _relative_paths(cls, data: Any) -> Any:
        return resolve_paths(cls, data)


class BrokerConfig(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(1883, ge=1, le=65535)
    tls: bool = False
    ca_file: Path | None = None
    #: Client certificate and its private key (PEM) for brokers that authenticate clients by TLS
    #: certificate (Mosquitto ``require_certificate true``): both or neither, with ``tls = true``.
    #: Read at start (stream/transport.py); a file that cannot be read or a key that does not fit
    #: the certificate is a configuration error (exit 78).
    cert_file: Path | None = None
    key_file: Path | None = None
    username: str | None = None
    password: SecretStr | None = None
    password_file: Path | None = None
    client_id: str | None = None
    keepalive: int = Field(60, ge=5, le=3600)
    #: MQTT protocol version. "5" bounds what the broker sends (Receive Maximum, Maximum Packet
    #: Size, session expiry: stream/transport.py); "3.1.1" for a broker without MQTT 5.
    protocol: Literal["5", "3.1.1"] = "5"

    @model_validator(mode="after")
    def _one_password(self) -> BrokerConfig:
        if self.password is not None and self.password_file is not None:
            raise ValueError("give either password or password_file, not both")
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("give both cert_file and key_file (a TLS client certificate and its key), or neither")
        if self.cert_file is not None and not self.tls:
            raise ValueError("cert_file and key_file need tls = true")
        return self

    def risks(self) -> list[str]:
        """What the operator should know about how the password and the TLS client key are kept
        and sent (one line each, never the secret): a password or key file readable by group or
        others; a password sent without TLS to a broker that is not on this device."""
        out = []
        for key, path in (("password_file", self.password_file), ("key_file", self.key_file)):
            if path is None:
                continue
            try:
                mode = path.stat().st_mode & 0o777
            except OSError:
                mode = 0
            if mode & 0o077:
                out.append(f"broker.{key} {path} is readable by group or others (mode {mode:o}); chmod 600 it")
        if (self.password is not None or self.password_file is not None) and not self.tls \
                and not is_loopback(self.host):
            out.append(f"broker.password is sent without TLS to {self.host}, which is not on this device; "
                       "set broker.tls = true")
        return out

    def secret(self) -> str | None:
        """The password, read from ``password_file`` when configured (never logged)."""
        if self.password_file is not None:
            return self.password_file.read_text().strip()
        return None if self.password is None else self.password.get_secret_value()


class ModelConfig(_Strict):
    """The Markov model: (alpha, beta) for a binary chain, a full transition matrix, a model set
    ``file`` (MODEL.json, written by ``streamguard calibrate``), or a ``calibration`` file of raw
    frames (JSON lines, read with the stream's labels or bins and sample period) from which the
    model set is calibrated at ``confidence`` when the daemon starts (streamguard.model)."""

    alpha: float | None = Field(None, gt=0, lt=1)
    beta: float | None = Field(None, gt=0, lt=1)
    matrix: list[list[float]] | None = None
    calibration: Path | None = None
    file: Path | None = None
    #: Confidence level of the region calibrated from ``calibration`` (a ``file`` states its own).
    confidence: float = Field(0.99, gt=0, lt=1)
    #: The law of the stream's first reading (and of the first after the sensor restarts), when it
    #: is known; without it the guarantee holds for every initial law (DESIGN.md §3).
    initial: list[float] | None = None

    @model_validator(mode="after")
    def _one_form(self) -> ModelConfig:
        binary = self.alpha is not None or self.beta is not None
        if binary and (self.alpha is None or self.beta is None):
            raise ValueError("a binary model needs both alpha and beta")
        if binary + (self.matrix is not None) + (self.calibration is not None) + (self.file is not None) != 1:
            raise ValueError("give exactly one of: alpha and beta, matrix, calibration, file")
        if self.initial is not None:
            law = self.initial
            if not all(math.isfinite(x) and x >= 0 for x in law) or abs(sum(law) - 1.0) > 1e-9:
                raise ValueError("initial: a law of the first reading (non-negative, summing to 1)")
        return self

    def model_set(self, states: StateMap, sample_period: float | None) -> ModelSet | None:
        """The model set of a ``file`` or a ``calibration`` (None for a single chain)."""
        from ..model import modelset
        from ..model.calibrate import read_transitions

        if self.file is not None:
            ms = modelset.load(self.file)
            if ms.setchain is not None and ms.setchain.sample_period != sample_period:
                raise ModelError(f"model {self.file.name}: calibrated at a sample period of "
                                 f"{ms.setchain.sample_period:g} s, the stream's is "
                                 f"{'not set' if sample_period is None else f'{sample_period:g} s'}: its "
                                 "chains are per record, so the two must match")
            return ms
        if self.calibration is not None:
            data = read_transitions(self.calibration, states, sample_period)
            return modelset.from_calibration(data, self.confidence, states.labels,
                                             {"file": self.calibration.name, "sample_period": sample_period})
        return None

    def chain(self, states: StateMap, sample_period: float | None = None) -> MarkovChain:
        """The single chain, or a model set's point estimate (what aggregates and channels would need;
        redaction streams plan over the whole set)."""
        ms = self.model_set(states, sample_period)
        if ms is not None:
            if ms.point is None:
                raise ModelError("the model set has no point estimate (a state is never left in the calibration data)")
            return ms.point
        if self.matrix is not None:
            return MarkovChain(self.matrix)
        assert self.alpha is not None and self.beta is not None
        return MarkovChain.binary(self.alpha, self.beta)


class ScheduleWindow(_Strict):
    """A daily private window, e.g. start = "22:00", end = "06:00" (wraps midnight), in the IANA
    time zone ``timezone`` (e.g. "Europe/Berlin"; default: the device's local zone, which
    ``config check`` prints)."""

    start: dt.time
    end: dt.time
    timezone: str | None = None

    @model_validator(mode="after")
    def _not_empty(self) -> ScheduleWindow:
        if self.start == self.end:
            raise ValueError("a schedule window needs start ≠ end")
        if self.timezone is not None:
            try:
                zoneinfo.ZoneInfo(self.timezone)
            except (zoneinfo.ZoneInfoNotFoundError, ValueError):
                raise ValueError(f'timezone: unknown time zone "{self.timezone}" (an IANA name such as '
                                 '"Europe/Berlin")') from None
        return self

    def zone(self) -> dt.tzinfo | None:
        """The window's time zone (None: the device's local zone)."""
        return None if self.timezone is None else zoneinfo.ZoneInfo(self.timezone)

    def zone_name(self) -> str:
        """The zone's name as ``config check`` prints it."""
        if self.timezone is not None:
            return self.timezone
        return f"local time ({dt.datetime.now().astimezone().tzname()})"

    def contains(self, ts: float) -> bool:
        t = dt.datetime.fromtimestamp(ts, self.zone()).time()
        if self.start <= self.end:
            return self.start <= t < self.end
        return t >= self.start or t < self.end

    def near(self, ts: float, guard: float) -> bool:
        """Does [ts − guard, ts + guard] meet the window (local time, every day)? Used where the
        time of a step is uncertain (a rejected frame stamped by the daemon's clock)."""
        if self.contains(ts):
            return True
        lo, hi = ts - guard, ts + guard
        zone = self.zone()
        first = dt.datetime.fromtimestamp(lo, zone).date() - dt.timedelta(days=1)
        last = dt.datetime.fromtimestamp(hi, zone).date()
        day = first
        while day <= last:
            begin = dt.datetime.combine(day, self.start, zone).timestamp()
            end_day = day if self.start < self.end else day + dt.timedelta(days=1)
            end = dt.datetime.combine(end_day, self.end, zone).timestamp()
            if begin <= hi and lo < end:
                return True
            day += dt.timedelta(days=1)
        return False


CHANNEL_KINDS = ("rr", "rr-prior", "watchdog", "watchdog-subset", "aorr", "srr", "linear", "linear-optimal",
                 "linear-nonmarkov")


class ChannelConfig(_Strict):
    """A per-record perturbation channel (``mechanism = "channel"``): either a saved channel file
    (``streamguard mechanism design --out``; verified exactly when loaded) or a design spec that
    is designed and verified at start-up. ``joint`` is a JSON file ``{"joint": [[P(s, x) …] per
    s]}``; ``prior`` a list P(x) for the kinds that need only a prior (rr, rr-prior). Kinds that
    read S as well (linear-nonmarkov) take it from the raw frame's ``sensitive_field``, mapped by
    ``sensitive_labels`` (in the joint's row order)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    file: Path | None = None
    kind: Literal[CHANNEL_KINDS] | None = None  # type: ignore[valid-type]
    epsilon: Epsilon | None = None
    lam: float | None = Field(None, alias="lambda", gt=0, lt=1)
    measure: str | None = None
    joint: Path | None = None
    prior: list[float] | None = None
    sensitive_field: str | None = Field(None, pattern=r"^[A-Za-z0-9_\-]+$")
    sensitive_labels: list[str] | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ChannelConfig:
        if (self.file is None) == (self.kind is None):
            raise ValueError("give either file (a saved channel) or kind (a design spec)")
        if self.kind is not None:
            if self.epsilon is None:
                raise ValueError("a channel design needs epsilon")
            if (self.joint is None) == (self.prior is None):
                raise ValueError("a channel design needs exactly one of joint (a file) or prior")
        if (self.sensitive_field is None) != (self.sensitive_labels is None):
            raise ValueError("sensitive_field and sensitive_labels go together")
        return self

    def sensitive(self) -> SensitiveField | None:
        if self.sensitive_field is None or self.sensitive_labels is None:
            return None
        return SensitiveField(self.sensitive_field, StateMap(labels=tuple(self.sensitive_labels)))


class AggregateConfig(_Strict):
    """A noisy aggregate released per tumbling window of ``window`` positions by the Markov Quilt
    Mechanism (paper 002, notes/002 §3.6, §8 "streaming release variants" 1): ``histogram``
    (counts of every state), ``count`` (of the state ``state``) or ``mean`` (of per-state values
    ``values``, released on the grid ``step``). Noise scale L·σ_∞(ε) under the stream's model in
    the max-influence mode ``influence``; each window costs ε under the quilt accountant, and all
    windows of one query together cost ε as well (notes/002 §4.7, duality)."""

    query: Literal["histogram", "count", "mean"]
    window: int = Field(ge=1, le=1_000_000)
    epsilon: Epsilon
    influence: Literal["stat", "supq", "approx", "approx-rev"] = "stat"
    state: str | None = None
    values: list[float] | None = None
    step: float | None = Field(None, gt=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _query_fields(self) -> AggregateConfig:
        if self.query == "count" and self.state is None:
            raise ValueError('query = "count" needs state (the label counted)')
        if self.query != "count" and self.state is not None:
            raise ValueError('state (the label counted) goes with query = "count" only')
        if self.query == "mean" and (self.values is None or self.step is None):
            raise ValueError('query = "mean" needs values (one per state) and step (the release grid)')
        if self.query != "mean" and (self.values is not None or self.step is not None):
            raise ValueError('values and step go with query = "mean" only')
        return self


#: Home Assistant's binary_sensor device classes (homeassistant.components.binary_sensor).
HASS_BINARY_DEVICE_CLASSES = (
    "battery", "battery_charging", "carbon_monoxide", "cold", "connectivity", "door", "garage_door", "gas",
    "heat", "light", "lock", "moisture", "motion", "moving", "occupancy", "opening", "plug", "power",
    "presence", "problem", "running", "safety", "smoke", "sound", "tamper", "update", "vibration", "window")


def sanitized_topic_filters(base: str) -> list[str]:
    """The topics that carry sanitized output: the device's status and each stream's records,
    aggregates and privacy status. Consumers and the device broker's bridge (deploy/mosquitto)
    take exactly these off the device, so no input may be read from them."""
    return [f"{base}/+/status", *(f"{base}/+/+/{kind}" for kind in ("data", "aggregate", "privacy"))]


def hass_options_problem(options: list[str]) -> str | None:
    """Why these enum options (how a stream's values render in Home Assistant) cannot be told
    apart there, or None: an option that renders as ``None`` or is Home Assistant's own text of
    its *unknown* or *unavailable* state (a redacted record renders ``unknown``: stream/hass.py), is
    empty, has surrounding blanks (Home Assistant strips template output), or repeats another."""
    if any(o in ("", "None", "unknown", "unavailable") or o != o.strip() for o in options):
        return "a value that is empty, 'None', 'unknown', 'unavailable' or has surrounding blanks"
    if len(set(options)) != len(options):
        return "two values that render alike"
    return None


class StreamHomeAssistant(_Strict):
    """How a stream appears in Home Assistant when ``[homeassistant] enabled`` (stream/hass.py):
    its entity ``name`` (default: the stream's name), the binary_sensor ``device_class`` of a
    two-state stream, and which label is ``on`` (default: the second state)."""

    name: str | None = Field(None, min_length=1, max_length=100)
    device_class: Literal[HASS_BINARY_DEVICE_CLASSES] | None = None  # type: ignore[valid-type]
    on: str | None = None


class HomeAssistantConfig(_Strict):
    """Home Assistant MQTT discovery of the sanitized streams (off by default; stream/hass.py):
    retained configs under ``<prefix>/<component>/streamguard_<device>/<stream>/config``, re-sent
    when Home Assistant publishes ``online`` on ``<prefix>/status``."""

    enabled: bool = False
    prefix: str = Field("homeassistant", pattern=r"^[A-Za-z0-9_\-]+(/[A-Za-z0-9_\-]+)*$")


class StreamConfig(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_\-]+$")
    labels: list[str] | None = None
    bins: list[float] | None = None
    model: ModelConfig
    source: Literal["mqtt", "stdin", "sim"] = "mqtt"
    raw_topic: str | None = None
    mechanism: Literal["redaction", "channel"] = "redaction"
    #: The redaction budget per private position (``mechanism = "redaction"``).
    epsilon: Epsilon | None = None
    channel: ChannelConfig | None = None
    aggregates: list[AggregateConfig] = []
    #: Budget of the aggregate releases under the quilt accountant; default: the sum of the
    #: aggregates' ε (what tumbling windows cost, forever). The ledger refuses releases beyond it.
    aggregate_budget: float | None = Field(None, gt=0, allow_inf_nan=False)
    design: Literal["paper", "optimal", "exact"] = "optimal"
    split: float | Literal["even", "optimize"] = "even"
    delay: int | None = Field(None, ge=0)
    max_hold: float | None = Field(None, gt=0)
    schedule: list[ScheduleWindow] = []
    #: A frame whose time is uncertain (rejected: its own ``ts`` or, unreadable, the daemon's clock)
    #: is private when it lies within this many seconds of a schedule window (fail closed).
    schedule_guard: float = Field(60.0, ge=0, le=3600)
    #: The period of the stream's steps (seconds). With it a step is a slot of this grid: frames in a
    #: slot already seen are redeliveries, and slots with no frame are missing readings (redacted
    #: steps). Without it every distinct timestamp is a step. For streamguard's own frames and a
    #: ``periodic`` mapped source it is the sensor's period; for an on-change mapped source
    #: (``[streams.ingest]``) it is the grid of the daemon's resampler, which makes exactly one
    #: step per slot (streamguard/ingest/resampler.py).
    sample_period: float | None = Field(None, gt=0, le=86_400, allow_inf_nan=False)
    sim_rate: float = Field(10.0, gt=0, le=100_000)  # frames/s of a ``source = "sim"`` stream
    #: How the stream appears in Home Assistant (only with ``[homeassistant] enabled``).
    homeassistant: StreamHomeAssistant = StreamHomeAssistant()
    #: Read a sensor of the MQTT ecosystem (zigbee2mqtt, Tasmota, …) instead of streamguard's own
    #: frames (streamguard/ingest). Such a source reports on change, so ``sample_period`` is then the
    #: grid of the daemon's resampler — one step per tick, stamped with the tick — unless
    #: ``periodic`` states that its messages already come at value-independent times.
    ingest: IngestConfig | None = None
    #: The operator's statement that the mapped source publishes periodically (not checked; it is
    #: shown in the privacy status): each message is a step, no resampler.
    periodic: bool = False
    #: Resampler: a held reading older than this many seconds makes the step unknown (redacted).
    stale_after: float | None = Field(None, gt=0, le=31 * 86_400, allow_inf_nan=False)
    #: Resampler: the device's guaranteed maximum report interval whatever its value (the operator's
    #: statement, enforced at run time: a longer silence stops the stream for the run). Required below
    #: ``stale_after`` — without it a stale step of an on-change source says "no change" (docs/unknown-steps.md).
    heartbeat: float | None = Field(None, gt=0, le=31 * 86_400, allow_inf_nan=False)
    #: Record the steps the privatizer sees (for calibration; ingest streams).
    record: RecordConfig | None = None
    #: The drift guard (streamguard.model.block_drift): None = on for a model set (file or calibration),
    #: off for a single chain; ``drift_false_alarm`` is its false-alarm rate over the model's life
    #: (its counts persist across restarts).
    drift_guard: bool | None = None
    drift_false_alarm: float = Field(1e-3, gt=0, lt=1)

    @field_validator("raw_topic")
    @classmethod
    def _one_raw_topic(cls, v: str | None) -> str | None:
        """Frames are routed by their exact topic, so a filter (``+``, ``#``) would never be read."""
        if v is not None and (not v or "+" in v or "#" in v or "\x00" in v):
            raise ValueError("raw_topic is one topic name (no + or #): frames are routed by their exact topic")
        return v

    @model_validator(mode="after")
    def _states(self) -> StreamConfig:
        if self.drift_guard and self.mechanism != "redaction":
            raise ValueError("drift_guard: the drift guard watches redaction streams only")
        try:
            smap = self.state_map()
        except ValueError as exc:
            raise ValueError(str(exc)) from None
        if smap.k > MAX_STATES:
            raise ValueError(f"{smap.k} labels/bins: at most {MAX_STATES} states are supported")
        try:
            ms = self.model.model_set(smap, self.sample_period)
            chain = self.model.chain(smap, self.sample_period) if ms is None else None
        except (ModelError, OSError) as exc:
            raise ValueError(f"model: {exc}") from None
        if ms is not None:
            if ms.k != smap.k:
                raise ValueError(f"the model set has {ms.k} states but {smap.k} labels/bins are configured")
            if ms.kind != "finite" and self.aggregates:
                raise ValueError("aggregates: a region of chains (a calibrated box or row-wise set) is refused beside "
                                 "aggregates — the Markov Quilt Mechanism's max-influence is exact over a finite set "
                                 "of chains but not certified over a region; declare a finite model set or one chain")
            if ms.kind != "finite" and self.mechanism == "channel":
                raise ValueError("model: a region of chains (a calibrated box or row-wise set) is refused for a channel "
                                 "stream — its stream leakage is computed exactly per chain, not certified over a "
                                 "region; declare a finite model set or one chain")
            if self.mechanism == "channel" or self.aggregates:  # a finite set: Θ = its members (model_chains)
                chain = ms.point if ms.point is not None else ms.members[0]
                ms = None  # the shared checks below (k, initial law, aggregates)
        if ms is not None:
            if ms.k != 2 and ms.kind == "finite":
                raise ValueError("model: a k-state model set for 3R redaction must be a row-wise region "
                                 "(streamguard calibrate)")
            if self.epsilon is None:
                raise ValueError("epsilon: a redaction stream needs its budget per private position")
            if self.model.initial is not None and len(self.model.initial) != ms.k:
                raise ValueError(f"model.initial: one probability per state ({ms.k})")
            if isinstance(self.split, float) and not 0 <= self.split <= self.epsilon:
                raise ValueError("split: the left budget must lie in [0, epsilon]")
            return self
        assert chain is not None
        if chain.k != smap.k:
            raise ValueError(f"the model has {chain.k} states but {smap.k} labels/bins are configured")
        if self.model.initial is not None and len(self.model.initial) != chain.k:
            raise ValueError(f"model.initial: one probability per state ({chain.k})")
        if self.mechanism == "redaction":
            if chain.k > 2 and not (chain.is_irreducible and chain.period == 1):
                raise ValueError("3R redaction of a k-state stream needs an irreducible aperiodic chain "
                                 "(no window would ever end)")
            if self.epsilon is None:
                raise ValueError("epsilon: a redaction stream needs its budget per private position")
            if self.channel is not None:
                raise ValueError('channel: only for mechanism = "channel"')
            if isinstance(self.split, float) and not 0 <= self.split <= self.epsilon:
                raise ValueError("split: the left budget must lie in [0, epsilon]")
        elif self.channel is None:
            raise ValueError('channel: mechanism = "channel" needs a [streams.channel] table')
        elif self.schedule:
            raise ValueError('schedule: private positions need mechanism = "redaction" (a channel stream can only '
                             'withhold the scheduled records, which does not protect them from their correlated '
                             'neighbours)')
        for a in self.aggregates:
            if a.query == "count" and a.state not in (self.labels or []):
                raise ValueError("aggregates: state must be one of the stream's labels")
            if a.query == "mean" and a.values is not None and len(a.values) != smap.k:
                raise ValueError(f"aggregates: values needs one number per state ({smap.k})")
        self._check_ingest(smap)
        budget = self.aggregate_budget
        if budget is not None and self.aggregates and budget < max(a.epsilon for a in self.aggregates):
            raise ValueError("aggregate_budget is below the ε of one aggregate window: every release would be refused")
        return self

    @model_validator(mode="after")
    def _homeassistant(self) -> StreamConfig:
        """A binary_sensor device class and an ``on`` label only make sense for two states; the
        ``on`` label must be one of the stream's labels."""
        ha, k = self.homeassistant, self.state_map().k
        if k != 2 and (ha.device_class is not None or ha.on is not None):
            raise ValueError("homeassistant: device_class and on are for two-state streams (a binary_sensor); "
                             f"this stream has {k} states (an enum sensor)")
        if ha.on is not None and ha.on not in (self.labels or []):
            raise ValueError("homeassistant.on must be one of the stream's labels")
        return self

    def _check_ingest(self, smap: StateMap) -> None:
        """An ingest stream: where it reads, its value map, and its timing (issue 10)."""
        ing = self.ingest
        if ing is None:
            for key in ("periodic", "stale_after", "heartbeat", "record"):
                if getattr(self, key):
                    raise ValueError(f"{key} goes with [streams.ingest] (a mapped sensor)")
            return
        from ..ingest.presets import PresetError, resolve, resolve_button

        if self.source != "mqtt" or self.raw_topic is not None:
            raise ValueError('ingest: a mapped sensor is read from the broker (source = "mqtt", no raw_topic)')
        if self.channel is not None and self.channel.sensitive_field is not None:
            raise ValueError("ingest: a mapped sensor carries no sensitive attribute (channel.sensitive_field)")
        try:
            mapping = resolve(ing)
            if ing.button is not None:
                resolve_button(ing.button)
        except PresetError as exc:
            raise ValueError(f"ingest: {exc}") from None
        if ing.values is not None:
            if smap.labels is None:
                raise ValueError("ingest.values maps to labels: a stream with bins reads numbers")
            unknown = sorted(set(ing.values.values()) - set(smap.labels))
            if unknown:
                raise ValueError(f"ingest.values: {unknown[0]!r} is not one of the stream's labels")
        if self.periodic:
            for key in ("stale_after", "heartbeat"):
                if getattr(self, key) is not None:
                    raise ValueError(f"{key} is the resampler's: a periodic source has none")
        elif self.sample_period is None:
            raise ValueError(f"ingest: {mapping.preset} publishes on change, so its message times reveal the "
                             "changes: give sample_period (the resampler's grid), or periodic = true if its "
                             "messages already come at value-independent times")
        if self.stale_after is not None and self.sample_period is not None and self.stale_after < self.sample_period:
            raise ValueError("stale_after is shorter than sample_period: every step would be stale")
        if self.stale_after is not None and not self.periodic and (self.heartbeat is None
                                                                    or self.heartbeat >= self.stale_after):
            raise ValueError(f"stale_after: {mapping.preset} reports on change, so a stale step would say 'no change "
                             "for stale_after seconds' and reveal the held readings; declare the device's heartbeat "
                             "(its guaranteed report interval whatever its value) below stale_after, or remove "
                             "stale_after")
        if not self.periodic and self.heartbeat is None and not ing.retained:
            raise ValueError(f"ingest: {mapping.preset} reports on change and no heartbeat is declared, so a wait for "
                             "a fresh reading (start-up, reconnect, device back online) could only end at a live "
                             "message — a change, which would date it and pin the readings before it; publish the "
                             "device's state retained and set retained = true in [streams.ingest] (zigbee2mqtt: "
                             "retain: true in the device's options), or declare heartbeat")

    def resampled(self) -> bool:
        """Is this stream's step the tick of the daemon's resampler (a mapped on-change source)?"""
        return self.ingest is not None and not self.periodic

    def total_aggregate_budget(self) -> float | None:
        """The accountant budget of this stream's aggregates (see ``aggregate_budget``)."""
        if not self.aggregates:
            return None
        return self.aggregate_budget if self.aggregate_budget is not None else sum(a.epsilon for a in self.aggregates)

    def chain(self) -> MarkovChain:
        """The stream's Markov model (a model set's point estimate)."""
        return self.model.chain(self.state_map(), self.sample_period)

    def model_set(self) -> ModelSet | None:
        """The stream's model set (``model.file`` or ``model.calibration``), None for a single chain."""
        return self.model.model_set(self.state_map(), self.sample_period)

    def model_chains(self) -> list[MarkovChain]:
        """The chains Θ the stream's aggregates (the MQM takes a set natively: exact as the worst member)
        and a channel's stream leakage (the worst member's) hold under: a finite model set's members, else
        the single chain. A region of chains is refused by validation before this is asked."""
        ms = self.model_set()
        if ms is None:
            return [self.chain()]
        if ms.kind != "finite":
            raise ModelError("a region of chains has no finite Θ (refused beside aggregates and channels)")
        return list(ms.members)

    def state_map(self) -> StateMap:
        return StateMap(
            labels=None if self.labels is None else tuple(self.labels),
            bins=None if self.bins is None else tuple(self.bins),
        )


class LedgerConfig(_Strict):
    """The privacy ledger (SQLite): every release is recorded here before it is published.
    Default path: beside the outbox, ``<outbox stem>.ledger.sqlite``."""

    path: Path | None = None


class OutboxConfig(_Strict):
    """The outbox (stream/outbox.py). ``commit_delay_ms``: group commit — a store transaction
    waits this long after the oldest record it takes was decided, so that records decided
    meanwhile share its disk sync (fewer syncs: less CPU with many slow streams, at the cost of up
    to this much latency); 0 commits as soon as possible. A record waiting out the delay is not on
    disk yet although its raw frame may be acknowledged: a power cut loses up to this much input,
    never published (entries holding a private mark, ledger events or aggregates do not wait)."""

    path: Path = Path("streamguard-outbox.sqlite")
    max_records: int = Field(100_000, ge=10)
    overflow: Literal["drop-oldest", "stop-input"] = "drop-oldest"
    commit_delay_ms: float = Field(0.0, ge=0, le=1000)

    @field_validator("commit_delay_ms")
    @classmethod
    def _whole_delay(cls, v: float) -> float:
        if 0 < v < 1:  # (it would turn off the prompt commit and group nothing)
            raise ValueError("commit_delay_ms must be 0 or at least 1")
        return v


class PublishConfig(_Strict):
    batch_max: int = Field(1, ge=1, le=1000)
    batch_latency_ms: float = Field(0.0, ge=0)
    window: int = Field(100, ge=1, le=10_000)


class MetricsConfig(_Strict):
    """The Prometheus textfile (stream/metrics.py, mode 0600): off unless ``textfile`` is set.
    ``private_counters`` adds the counters that move with private events and so date them
    (records released and redacted, the ledger's events, ``bad-private`` rejections)."""

    textfile: Path | None = None
    interval: float = Field(15.0, ge=1.0, le=3600.0)
    private_counters: bool = False


class Settings(BaseSettings):
    """The whole daemon configuration (see module docstring for sources and precedence)."""

    model_config = SettingsConfigDict(
        env_prefix="STREAMGUARD_", env_nested_delimiter="__", extra="forbid", frozen=True
    )

    device: str = Field("device-1", pattern=r"^[A-Za-z0-9_\-]+$")
    topic_base: str = Field("streamguard", pattern=r"^[A-Za-z0-9_\-/]+$")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    deterministic_seed: int | None = None
    #: Also write every sanitized record to standard output as a JSON line (a second sink).
    stdout: bool = False
    broker: BrokerConfig = Field(default_factory=BrokerConfig)  # (factories: validated while
    outbox: OutboxConfig = Field(default_factory=OutboxConfig)  # loading, so the default outbox
    ledger: LedgerConfig = Field(default_factory=LedgerConfig)  # path resolves like a given one)
    publish: PublishConfig = Field(default_factory=PublishConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    homeassistant: HomeAssistantConfig = Field(default_factory=HomeAssistantConfig)
    streams: list[StreamConfig] = Field(min_length=1)

    _toml_path: ClassVar[Path | None] = None

    @field_validator("streams")
    @classmethod
    def _unique_names(cls, v: list[StreamConfig]) -> list[StreamConfig]:
        names = [s.name for s in v]
        if len(set(names)) != len(names):
            raise ValueError("stream names must be unique")
        if sum(s.source == "stdin" for s in v) > 1:
            raise ValueError("at most one stream can read standard input")
        return v

    @model_validator(mode="after")
    def _inputs_off_sanitized_topics(self) -> Settings:
        """No stream reads raw input from a topic that carries sanitized output
        (:func:`sanitized_topic_filters`): a consumer or the bridge would take raw readings off the
        device. Checks ``raw_topic`` and the topic filters of a mapped sensor (and its button)."""
        from ..ingest.inputs import stream_inputs

        outputs = sanitized_topic_filters(self.topic_base)
        for x in stream_inputs(self.streams, self.topic):
            if x.kind != "command" and any(filters_overlap(x.filter, o) for o in outputs):
                raise ValueError(f"streams.{x.stream}: input topic {x.filter} can be a sanitized output topic "
                                 f"({', '.join(outputs)}), which consumers and the bridge take off the device")
        return self

    @model_validator(mode="after")
    def _one_stream_per_input(self) -> Settings:
        """No message is read by two streams (ingest/inputs.py): the same readings released twice
        with independent draws leak more than either release, and a mark reaches one of them."""
        from ..ingest.inputs import describe, shared_input, stream_inputs

        shared = shared_input(stream_inputs(self.streams, self.topic))
        if shared is not None:
            raise ValueError(describe(*shared))
        return self

    @model_validator(mode="after")
    def _homeassistant_options(self) -> Settings:
        """With discovery on, a stream of more than two states is an enum sensor whose options are
        its labels (or bin edges): they must be distinct in Home Assistant (stream/hass.py checks
        a channel's merged outputs at start-up)."""
        if self.homeassistant.enabled:
            for s in self.streams:
                smap = s.state_map()
                if smap.k > 2:
                    problem = hass_options_problem([str(smap.label_of(i)) for i in range(smap.k)])
                    if problem is not None:
                        raise ValueError(f"streams.{s.name}: Home Assistant cannot show {problem} "
                                         "as an enum option; rename the labels or disable [homeassistant]")
        return self

    @model_validator(mode="after")
    def _raw_stays_local(self) -> Settings:
        """Raw readings never leave the device: a broker that carries raw frames must be local."""
        if any(s.source == "mqtt" for s in self.streams) and not is_loopback(self.broker.host):
            raise ValueError('broker.host: streams with source = "mqtt" read raw frames from the broker, '
                             "which must be on this device (localhost or a loopback address)")
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml = cls._toml_path
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if toml is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml))
        return tuple(sources)

    def ledger_path(self) -> Path:
        """Where the privacy ledger lives (``ledger.path``, default beside the outbox)."""
        if self.ledger.path is not None:
            return self.ledger.path
        return self.outbox.path.with_name(self.outbox.path.stem + ".ledger.sqlite")

    def topic(self, *parts: str) -> str:
        return "/".join([self.topic_base, self.device, *parts])


def environment_warnings(env: dict[str, str] | None = None) -> list[str]:
    """One line per ``STREAMGUARD_*`` environment variable that names no configuration key."""
    return unknown_env(Settings, dict(os.environ) if env is None else env)


def load_settings(path: Path | None = None, **overrides: Any) -> Settings:
    """Load and validate the configuration from a TOML file (plus environment and overrides).
    Relative paths resolve against the file's directory; errors are all reported at once."""
    raw: dict[str, Any] | None = None
    if path is not None:
        if not Path(path).is_file():
            raise ConfigError(f"config file {path} does not exist")
        try:
            raw = tomllib.loads(Path(path).read_text())
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"{path}: {exc}") from None

    class _FromFile(Settings):
        _toml_path: ClassVar[Path | None] = None if path is None else Path(path)

    try:
        with relative_to(None if path is None else Path(path).parent):
            return _FromFile(**overrides)
    except ValidationError as exc:
        lines = format_errors(exc, Settings, raw, dict(os.environ)).splitlines()
        where = "the configuration" if path is None else str(path)
        if len(lines) == 1:
            raise ConfigError(lines[0]) from None
        raise ConfigError(f"{where}: {len(lines)} problems:\n  " + "\n  ".join(lines)) from None
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc}") from None
