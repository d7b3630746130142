"""Home Assistant MQTT discovery of the sanitized streams (issue 10; notes/sensor-ecosystem.md §3).

With ``[homeassistant] enabled = true`` the daemon announces one Home Assistant entity per stream,
as a retained discovery config on ``<prefix>/<component>/streamguard_<device>/<stream>/config``:

- a **binary_sensor** for a two-state stream (``device_class`` from the stream's
  ``[streams.homeassistant]``; the ``on`` label, default the second state, is ``ON``), an **enum
  sensor** (``device_class: enum``, ``options``: every value the stream can publish) for more;
- its state comes from the stream's sanitized records (``<base>/<device>/<stream>/data``), never
  from anything raw: the value template renders a released value, and renders a **redacted**
  record as Home Assistant's *unknown* (binary_sensor: ``None``; enum sensor: see below). A
  redacted record therefore never shows as the last value. With
  ``publish.batch_max > 1`` a message holds a list of records and the entity shows the last one;
- its attributes say that it is privatized: ``seq``, ``redacted``, ``mode`` (csprng or
  deterministic) and ``privacy_status_topic`` (the stream's retained privacy status);
- its availability is the daemon's retained status (``online``/``offline``, the will included)
  **and** the stream's retained privacy status saying that this daemon process has published a
  record of the stream (``delivery.stream.published_records > 0``): after a restart the entity is
  *unavailable* until the new process's first record, never showing the previous session's last
  value as current (the daemon publishes the statuses before ``online``: stream/sessions.py).

**Enum streams and Home Assistant versions.** Before 2024.10 Home Assistant's MQTT sensor turns no
payload of a non-numeric sensor into *unknown* (``None`` stays the text ``None``; measured on
2024.3.3, tests/test_hass_real.py). The enum template therefore renders a redacted record as the
text ``unknown`` — Home Assistant's own unknown state string, the same in its REST API, automations
and history — and lists ``unknown`` among the ``options`` (which 2024.10 and later check; versions
before ignore them); a label ``unknown`` or ``unavailable`` is refused (config.hass_options_problem).

**Privacy controls** (a stream with marks, i.e. not a channel stream): beside its entity, a
**button** "Mark this moment private" that publishes ``{"private": "now"}`` on the stream's
command topic (the same command as any app's: a mark with the usual accounting, in the ledger and
the privacy status), a **switch** "Privacy mode" that publishes ``{"privacy_mode": "on"}`` /
``"off"`` there (every step private while on, persisted across restarts: stream/privacy_mode.py;
its state is the retained privacy status's ``privacy_mode``), and a **sensor** "Privacy status"
read from the retained privacy status: its
state is the newest mark's outcome (``protecting`` while its window is open, ``honoured``, ``not
honoured``; ``no marks`` when the ledger holds none, ``no recent marks`` when it does but none is
in memory — after a restart, whose status names no earlier mark), its attributes the budget used (the ledger's worst leakage, ε per
private position, and the budget), the marks counted and not honoured, the last mark's time and
reason, and what a mark costs: the steps it can redact (left + right horizon + 1) and, for a
stream with a ``sample_period``, in minutes.

Home Assistant announces itself with ``online`` on ``<prefix>/status`` (its birth message) and
then reads retained configs again; the daemon re-sends every config when it sees that, and on
every (re)connection.

**Removal.** The outbox database remembers every config topic announced (a topic is remembered
before its config is published). At each connection, a remembered topic that the current
configuration no longer produces (a stream removed or renamed, its component changed, the
prefix changed, or discovery turned off) gets an empty retained payload — Home Assistant deletes
the entity — and is forgotten only after the broker acknowledged that. Nothing here publishes or
logs a reading: configs hold names, labels and topics only.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .. import __version__
from ..config import ConfigError, Settings, hass_options_problem
from .channel_runtime import ChannelRuntime
from .outbox import AsyncOutbox, Outbox
from .redaction_runtime import RedactionRuntime
from .runtime import StreamRuntime
from .transport import Message, Transport

#: Birth messages closer together than this (seconds) get one re-announcement: a client flooding
#: ``<prefix>/status`` cannot make the daemon re-publish every config per message.
RESEND_INTERVAL = 5.0
#: Template pieces: the sanitized record of a message (a batch is a list: its last record), and
#: the start of the value template's ``if``: a redacted record (binary_sensor: ``None``, *unknown*;
#: enum sensor: UNKNOWN).
_RECORD = "{% set r = value_json if value_json is mapping else value_json | last %}"
_IF_REDACTED = "{% if r.redacted or r.value is none %}"
#: Home Assistant's own text of its unknown state: what an enum stream's redacted record renders.
UNKNOWN = "unknown"
#: Button payload: the stream's command that marks the newest step private.
PRESS = '{"private": "now"}'
#: Switch payloads: the stream's privacy mode commands (stream/privacy_mode.py).
MODE_ON, MODE_OFF = '{"privacy_mode": "on"}', '{"privacy_mode": "off"}'


@dataclass(frozen=True)
class Entity:
    """One stream's discovery config: where it is published and what it says."""

    stream: str
    component: str  # "binary_sensor" or "sensor"
    topic: str
    config: dict[str, Any]

    def payload(self) -> bytes:
        return json.dumps(self.config, sort_keys=True, separators=(",", ":")).encode()


def display(value: Any) -> str:
    """How Home Assistant's template shows a published (not redacted) record value: a label as it
    is, a bin's lower edge as Python prints the float, a merged group of states (a channel output)
    as its members joined by ``|`` — exactly what the value template renders."""
    if isinstance(value, list):
        return "|".join(display(v) for v in value)
    return str(value)


def published_values(rt: StreamRuntime) -> list[Any]:
    """Every value a record of ``rt`` can carry when it is not redacted (JSON-ready): the states'
    labels (or bin edges), or for a channel stream the label of each channel output."""
    if isinstance(rt, ChannelRuntime):
        out: list[Any] = []
        for sym in rt.channel.outputs:
            out.append([rt.states.label_of(x) for x in sym] if isinstance(sym, tuple) else rt.states.label_of(sym))
        return out
    return [rt.states.label_of(i) for i in range(rt.states.k)]


def _literal(value: Any) -> str:
    """A Jinja literal equal to the JSON value (strings as escaped ASCII; floats by repr)."""
    return json.dumps(value, ensure_ascii=True)


def _binary_template(on: Any, off: Any) -> str:
    return (f"{_RECORD}{_IF_REDACTED}None{{% elif r.value == {_literal(on)} %}}ON"
            f"{{% elif r.value == {_literal(off)} %}}OFF{{% else %}}None{{% endif %}}")


_ENUM_TEMPLATE = (f"{_RECORD}{_IF_REDACTED}{UNKNOWN}{{% elif r.value is string %}}{{{{ r.value }}}}"
                  "{% elif r.value is sequence %}{{ r.value | join('|') }}{% else %}{{ r.value }}{% endif %}")


def _attributes_template(privacy_topic: str) -> str:
    return (f"{_RECORD}{{{{ {{\"seq\": r.seq, \"redacted\": r.redacted, \"mode\": r.mode, \"privatized\": true, "
            f"\"privacy_status_topic\": {_literal(privacy_topic)}}} | tojson }}}}")


def entity(settings: Settings, rt: StreamRuntime) -> Entity:
    """The discovery config of one stream (module docstring). Raises :class:`ConfigError` for a
    stream whose values cannot be told apart in Home Assistant (:func:`hass_options_problem`,
    applied to every value it can publish, a channel's merged outputs included)."""
    ha = rt.cfg.homeassistant
    node = f"streamguard_{settings.device}"
    config: dict[str, Any] = {
        "name": ha.name or rt.name,
        "unique_id": f"{node}_{rt.name}",
        "state_topic": rt.data_topic(),
        "json_attributes_topic": rt.data_topic(),
        "json_attributes_template": _attributes_template(rt.privacy_topic()),
        "availability": [_DAEMON_ONLINE | {"topic": settings.topic("status")},
                         _PUBLISHED_HERE | {"topic": rt.privacy_topic()}],
        "availability_mode": "all",
        **_common(settings),
    }
    if rt.states.k == 2:
        component = "binary_sensor"
        on_state = 1 if ha.on is None else rt.states.labels.index(ha.on)  # type: ignore[union-attr]
        on, off = rt.states.label_of(on_state), rt.states.label_of(1 - on_state)
        config |= {"payload_on": "ON", "payload_off": "OFF", "value_template": _binary_template(on, off)}
        if ha.device_class is not None:
            config["device_class"] = ha.device_class
    else:
        component = "sensor"
        options = [display(v) for v in published_values(rt)]
        problem = hass_options_problem(options)
        if problem is not None:
            raise ConfigError(f"streams.{rt.name}: Home Assistant cannot show {problem} as an enum option")
        config |= {"device_class": "enum", "options": [*options, UNKNOWN], "value_template": _ENUM_TEMPLATE}
    topic = f"{settings.homeassistant.prefix}/{component}/{node}/{rt.name}/config"
    return Entity(rt.name, component, topic, config)


_DAEMON_ONLINE = {"value_template": "{{ value_json.state }}", "payload_available": "online",
                  "payload_not_available": "offline"}
_PUBLISHED_HERE = {"value_template": "{{ 'online' if value_json.delivery.stream.published_records > 0 else 'offline' }}",
                   "payload_available": "online", "payload_not_available": "offline"}


def _common(settings: Settings) -> dict[str, Any]:
    """The keys every entity of the device shares: QoS, the device and the origin."""
    node = f"streamguard_{settings.device}"
    return {
        "qos": 1,
        "device": {
            "identifiers": [node],
            "name": f"streamguard {settings.device}",
            "manufacturer": "streamguard",
            "model": "on-device privatizer",
            "sw_version": __version__,
        },
        "origin": {"name": "streamguard", "sw_version": __version__},
    }


#: The privacy status sensor's state: the newest mark's outcome (module docstring).
_MARK_STATE = ("{% set m = value_json.open_marks | last if value_json.open_marks else "
               "(value_json.recent_marks | last if value_json.recent_marks else none) %}"
               "{% set n = value_json.ledger.redaction.count if value_json.ledger and value_json.ledger.redaction "
               "else 0 %}"
               "{% if m is none %}{{ 'no recent marks' if n else 'no marks' }}{% elif not m.honoured %}not honoured"
               "{% elif value_json.open_marks %}protecting{% else %}honoured{% endif %}")


def mark_cost(left_horizon: int, right_horizon: int, sample_period: float | None) -> tuple[int, float | None]:
    """What one mark costs: the records its plan's window spans (``left_horizon`` before it,
    itself, ``right_horizon`` after), each redacted with the plan's probability for its distance
    — up to all of them — and, for a stream with a ``sample_period``, their duration in minutes
    (rounded to 0.01). Shown by the privacy status sensor and by ``config check``."""
    steps = left_horizon + right_horizon + 1
    return steps, None if sample_period is None else round(steps * sample_period / 60.0, 2)


def _privacy_attributes(steps: int, minutes: float | None) -> str:
    cost = f'"mark_cost_steps": {steps}, "mark_cost_minutes": {"none" if minutes is None else repr(minutes)}'
    return ("{% set m = value_json.open_marks | last if value_json.open_marks else "
            "(value_json.recent_marks | last if value_json.recent_marks else none) %}"
            "{% set r = value_json.ledger.redaction if value_json.ledger else none %}"
            "{{ {\"epsilon_per_mark\": value_json.epsilon, "
            "\"epsilon_used\": r.epsilon if r else 0, \"budget\": r.budget if r else none, "
            "\"marks\": r.count if r else 0, \"marks_not_honoured\": r.not_honoured if r else 0, "
            "\"last_mark_seq\": m.seq if m else none, \"last_mark_time\": m.ts if m else none, "
            "\"last_mark_source\": m.source if m else none, \"last_mark_reason\": m.reason if m else none, "
            f"{cost}}} | tojson }}}}")


def controls(settings: Settings, rt: StreamRuntime) -> list[Entity]:
    """The privacy button, privacy mode switch and privacy status sensor of a stream with marks
    (module docstring); none for a channel stream (it takes no commands)."""
    if not isinstance(rt, RedactionRuntime):
        return []
    prefix, node = settings.homeassistant.prefix, f"streamguard_{settings.device}"
    name = rt.cfg.homeassistant.name or rt.name
    online = [_DAEMON_ONLINE | {"topic": settings.topic("status")}]
    button = {
        "name": f"{name}: mark this moment private",
        "unique_id": f"{node}_{rt.name}_private",
        "command_topic": rt.command_topic(),
        "payload_press": PRESS,
        "icon": "mdi:incognito",
        "availability": online,
        **_common(settings),
    }
    switch = {
        "name": f"{name}: privacy mode",
        "unique_id": f"{node}_{rt.name}_privacy_mode",
        "command_topic": rt.command_topic(),
        "payload_on": MODE_ON,
        "payload_off": MODE_OFF,
        "state_topic": rt.privacy_topic(),
        "value_template": "{{ 'ON' if value_json.privacy_mode else 'OFF' }}",
        "state_on": "ON",
        "state_off": "OFF",
        "icon": "mdi:shield-account",
        "availability": online,
        **_common(settings),
    }
    steps, minutes = mark_cost(rt.plan.left_horizon, rt.plan.right_horizon, rt.cfg.sample_period)
    status = {
        "name": f"{name}: privacy status",
        "unique_id": f"{node}_{rt.name}_privacy",
        "state_topic": rt.privacy_topic(),
        "value_template": _MARK_STATE,
        "json_attributes_topic": rt.privacy_topic(),
        "json_attributes_template": _privacy_attributes(steps, minutes),
        "icon": "mdi:shield-lock",
        "availability": online,
        **_common(settings),
    }
    return [Entity(rt.name, "button", f"{prefix}/button/{node}/{rt.name}_private/config", button),
            Entity(rt.name, "switch", f"{prefix}/switch/{node}/{rt.name}_privacy_mode/config", switch),
            Entity(rt.name, "sensor", f"{prefix}/sensor/{node}/{rt.name}_privacy/config", status)]


class Discovery:
    """Announces (and removes) the streams' discovery configs for the daemon (module docstring).

    The daemon calls :meth:`sync` once it is online on a connection, and again whenever
    :meth:`wants_resend` says Home Assistant came online; :attr:`subscriptions` are the topics to
    subscribe to (none when discovery is off: stale configs are still removed by :meth:`sync`)."""

    def __init__(self, settings: Settings, runtimes: Iterable[StreamRuntime]) -> None:
        ha = settings.homeassistant
        self.enabled = ha.enabled
        self.status_topic = f"{ha.prefix}/status"
        self.entities: dict[str, Entity] = {}
        self._last_resend = -RESEND_INTERVAL
        if ha.enabled:
            for rt in runtimes:
                for e in (entity(settings, rt), *controls(settings, rt)):
                    self.entities[e.topic] = e

    @property
    def subscriptions(self) -> list[str]:
        return [self.status_topic] if self.enabled else []

    def wants_resend(self, msg: Message) -> bool:
        """Is ``msg`` Home Assistant's birth message (``online`` on ``<prefix>/status``), the first
        one in ``RESEND_INTERVAL`` seconds? (A later one is left to the caller's routing, which
        has no route for it.)"""
        if not (self.enabled and msg.topic == self.status_topic and msg.payload.strip() == b"online"):
            return False
        now = time.monotonic()
        if now - self._last_resend < RESEND_INTERVAL:
            return False
        self._last_resend = now
        return True

    async def sync(self, t: Transport, box: AsyncOutbox) -> None:
        """Remove every remembered config the configuration no longer produces (empty retained
        payload, forgotten once acknowledged), then publish every current config retained
        (remembered first). Raises the transport's error when the connection fails: the next
        connection syncs again."""
        remembered = await box.run(Outbox.announced)
        for topic in sorted(remembered - self.entities.keys()):
            await t.publish(topic, b"", retain=True)
            await box.run(Outbox.set_announced, topic, False)
        for topic, e in self.entities.items():
            if topic not in remembered:
                await box.run(Outbox.set_announced, topic, True)
            await t.publish(topic, e.payload(), retain=True)

