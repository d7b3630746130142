"""The ``[streams.ingest]`` table: where a stream's readings come from on the local broker and how
they become the stream's states (issue 10 "Ingest"; the payload facts are in
notes/sensor-ecosystem.md §1).

A spec names a preset (``zigbee2mqtt``, ``tasmota``, ``esphome``, ``shelly``, ``homeassistant``,
``rtl_433``) and the device, or gives the topic filter itself; :mod:`.presets` resolves either into a
:class:`~.mapping.Mapping`. Value maps are keyed by the *canonical text* of a payload value
(:func:`~.mapping.canonical`): ``true``/``false`` for JSON booleans, the string itself for strings
(a quoted JSON string ``"on"`` is the string ``on``), the decimal integer for integral numbers —
so ``values = { true = "occupied", false = "empty" }`` reads zigbee2mqtt's ``occupancy``, and
``values = { true = "closed", false = "open" }`` is the inversion its ``contact`` needs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

PRESETS = ("zigbee2mqtt", "tasmota", "esphome", "shelly", "homeassistant", "rtl_433")
Preset = Literal["zigbee2mqtt", "tasmota", "esphome", "shelly", "homeassistant", "rtl_433"]

#: A topic filter or name segment: printable, no NUL (MQTT 3.1.1 §4.7); wildcards are checked later.
_TOPIC = r"^[^\x00]{1,512}$"
#: A dot-separated path into a JSON payload (``DS18B20.Temperature``, ``params.state``).
_PATH = r"^[^.\s]+(\.[^.\s]+)*$"


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TopicSpec(_Spec):
    """Where one kind of message is found: a preset with its device (and, where the preset needs
    it, the base topic and component), or an explicit ``topic`` filter (``+``/``#`` allowed);
    ``field`` is a JSON path into the payload (omitted: the bare payload is the value); ``match``
    lists payload keys that must hold the given values (rtl_433 routes by model, id, channel)."""

    preset: Preset | None = None
    #: zigbee2mqtt friendly name, Tasmota topic, ESPHome node, Shelly device id, Home Assistant
    #: entity id (``binary_sensor.hall``), rtl_433 host (default ``+``).
    device: str | None = Field(None, pattern=_TOPIC)
    #: The base topic where the project lets it be configured (zigbee2mqtt, statestream, rtl_433).
    base: str | None = Field(None, pattern=_TOPIC)
    #: ESPHome ``<component>/<name>`` (``binary_sensor/motion``), Shelly ``<component>:<id>``
    #: (``input:0``), Tasmota ``POWER``/``POWER1``… when it reads a relay instead of ``SENSOR``.
    component: str | None = Field(None, pattern=_TOPIC)
    topic: str | None = Field(None, pattern=_TOPIC)
    field: str | None = Field(None, pattern=_PATH)
    match: dict[str, str | int | float | bool] = {}

    @model_validator(mode="after")
    def _where(self) -> TopicSpec:
        if self.preset is None:
            if self.topic is None:
                raise ValueError("give a preset (with its device) or a topic")
            if self.device is not None or self.base is not None or self.component is not None:
                raise ValueError("device, base and component go with a preset")
        return self


class TimestampSpec(_Spec):
    """A reading's time from a payload field: seconds or milliseconds since the epoch, or ISO 8601
    (with a zone, or without one: the device's local time, as Tasmota sends it)."""

    field: str = Field(pattern=_PATH)
    format: Literal["epoch-s", "epoch-ms", "iso8601"]


class AvailabilitySpec(_Spec):
    """A device's availability: its topic, the payload field (omitted: the bare payload) and the
    canonical payloads meaning online and offline. Any other payload counts as offline (fail
    closed)."""

    topic: str = Field(pattern=_TOPIC)
    field: str | None = Field(None, pattern=_PATH)
    online: list[str] = Field(min_length=1)
    offline: list[str] = Field(min_length=1)


class ButtonConfig(TopicSpec):
    """A privacy button on a mapped topic (a zigbee2mqtt button's ``action``, a Tasmota button):
    a message whose value is one of ``press`` marks the stream's current step private. Retained
    messages never mark (they are a previous press, redelivered at start-up). ``timestamp``: where
    the press's own time is in the payload (a press delivered late — queued at the broker while
    the daemon was away — then marks the step it was pressed at; without it, see docs/sensors.md,
    "Privacy buttons across outages")."""

    press: list[str] = Field(min_length=1)
    timestamp: TimestampSpec | None = None


class IngestConfig(TopicSpec):
    """How a stream reads a sensor of the MQTT ecosystem (module docstring)."""

    #: Canonical payload value → the stream's label (omitted: the value must be a label itself, or
    #: a number for a stream with bins).
    values: dict[str, str] | None = None
    #: A value the map does not know (or a payload without the field): ``reject`` makes it an
    #: unreadable message, ``ignore`` not this stream's message at all (for payloads that carry other
    #: things, e.g. a button's empty action). A periodic source's unreadable message is an unknown
    #: step; a resampled source's is not a reading — the held one stays, since unknown steps from it
    #: to the next message would date the source's changes (ingest/resampler.py).
    unmapped: Literal["reject", "ignore"] = "reject"
    #: Where a reading's time comes from: ``receive`` (the daemon's clock when the message
    #: arrives), a payload field, or (omitted) the preset's choice.
    timestamp: TimestampSpec | Literal["receive"] | None = None
    #: The device's availability topic: ``none``, explicit, or (omitted) the preset's.
    availability: AvailabilitySpec | Literal["none"] | None = None
    #: The operator's statement that the device's state is published retained (zigbee2mqtt:
    #: ``retain: true`` in the device's options; ESPHome does by default), so that the broker
    #: delivers it on every subscription. Without a ``heartbeat``, a resampled source's wait for a
    #: fresh reading ends only at such a state; a source that declares neither is refused
    #: (docs/unknown-steps.md, "How a wait ends").
    retained: bool = False
    button: ButtonConfig | None = None

    @model_validator(mode="after")
    def _rtl_433_routes(self) -> IngestConfig:
        if self.preset == "rtl_433" and not self.match:
            raise ValueError("rtl_433 carries every radio device on one topic: give match "
                             "(e.g. { model = \"Nexus-TH\", id = 42, channel = 2 })")
        return self


class RecordConfig(_Spec):
    """``[streams.record]``: write the steps the privatizer sees to ``steps_file`` (JSON lines, see
    :mod:`streamguard.ingest.recorder`), at most ``max_steps`` lines."""

    steps_file: Path
    max_steps: int = Field(1_000_000, ge=1, le=100_000_000)
