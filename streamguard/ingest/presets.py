"""Presets: the topics, payload paths, timestamps and availability of the sensor projects people
already run, as those projects document them (notes/sensor-ecosystem.md §1):

| preset | readings | value | time | availability |
|---|---|---|---|---|
| zigbee2mqtt | ``<base>/<device>`` (base ``zigbee2mqtt``) | JSON, ``field`` (``occupancy``, ``contact``) | receive | ``<base>/<device>/availability``: ``online``/``offline`` bare or ``{"state": …}`` |
| tasmota | ``tele/<device>/SENSOR``, or ``stat/<device>/<component>`` (``POWER``) and the same key of ``tele/<device>/STATE`` | JSON ``field`` (``DS18B20.Temperature``), or bare ``ON``/``OFF`` | ``Time`` (ISO 8601, local) for SENSOR | ``tele/<device>/LWT``: ``Online``/``Offline`` |
| esphome | ``<device>/<component>/state`` (``binary_sensor/motion``) | bare ``ON``/``OFF`` or a number | receive | ``<device>/status``: ``online``/``offline`` |
| shelly (Gen2) | ``<device>/status/<component>`` and ``<device>/events/rpc`` (``NotifyStatus``, merged) | JSON ``field`` of the component (``state``) | ``params.ts`` (epoch s) for events | ``<device>/online``: ``true``/``false`` |
| homeassistant (statestream) | ``<base>/<domain>/<entity>/state`` (base ``homeassistant``; device = entity id) | JSON-encoded (``"on"``) | receive | none |
| rtl_433 | ``<base>/<device>/events`` (base ``rtl_433``, device = host, default ``+``) | JSON ``field``, routed by ``match`` on model/id/channel | receive | none (radio) |

Every preset is an on-change source (or, for Tasmota's ``TelePeriod`` and rtl_433's weather
sensors, periodic only by a setting streamguard cannot see), so it needs the resampler unless the
stream states ``periodic = true``. An explicit ``topic``, ``timestamp`` or ``availability`` in the
spec overrides the preset's.
"""

from __future__ import annotations

from .mapping import Availability, Mapping, Route, canonical, path_of
from .spec import AvailabilitySpec, ButtonConfig, IngestConfig, TimestampSpec, TopicSpec
from .topics import valid_filter


class PresetError(ValueError):
    """A spec that cannot be resolved (the message names the key)."""


def _need(spec: TopicSpec, *keys: str) -> None:
    for k in keys:
        if getattr(spec, k) is None:
            raise PresetError(f"preset {spec.preset} needs {k}")


def _preset_parts(spec: TopicSpec) -> tuple[tuple[Route, ...], TimestampSpec | None, Availability | None]:
    """The preset's reading routes, timestamp source and availability. A device (or component)
    with a wildcard would merge several sensors into one chain: refused (rtl_433's host aside,
    where ``match`` picks the sensor)."""
    p, dev = spec.preset, spec.device
    for key in ("device", "component", "base"):
        value = getattr(spec, key)
        if value is not None and ("+" in value or "#" in value) and not (p == "rtl_433" and key == "device"):
            raise PresetError(f"{key} must name one sensor (no + or #)")
    if p == "zigbee2mqtt":
        _need(spec, "device", "field")
        base = spec.base or "zigbee2mqtt"
        return ((Route(f"{base}/{dev}"),), None,
                Availability(f"{base}/{dev}/availability", ("state",), frozenset({"online"}), frozenset({"offline"})))
    lwt = Availability(f"tele/{dev}/LWT", None, frozenset({"Online"}), frozenset({"Offline"}))
    if p == "tasmota":
        _need(spec, "device")
        if spec.component is not None:  # a relay: stat/<topic>/POWER bare ON/OFF on change, and the
            # same field in tele/<topic>/STATE every TelePeriod (both at receive time: one clock)
            return (Route(f"stat/{dev}/{spec.component}"),
                    Route(f"tele/{dev}/STATE", prefix=(spec.component,))), None, lwt
        _need(spec, "field")
        return (Route(f"tele/{dev}/SENSOR"),), TimestampSpec(field="Time", format="iso8601"), lwt
    if p == "esphome":
        _need(spec, "device", "component")
        return ((Route(f"{dev}/{spec.component}/state"),), None,
                Availability(f"{dev}/status", None, frozenset({"online"}), frozenset({"offline"})))
    if p == "shelly":
        _need(spec, "device", "component", "field")
        comp = spec.component
        assert comp is not None
        events = Route(f"{dev}/events/rpc", prefix=("params", comp), require=((("method",), "NotifyStatus"),),
                       merge=True, ts=TimestampSpec(field="params.ts", format="epoch-s"))
        return ((Route(f"{dev}/status/{comp}"), events), None,
                Availability(f"{dev}/online", None, frozenset({"true"}), frozenset({"false"})))
    if p == "homeassistant":
        _need(spec, "device")
        assert dev is not None
        domain, dot, entity = dev.partition(".")
        if not dot or not domain or not entity or "/" in dev:
            raise PresetError("preset homeassistant: device is an entity id, e.g. binary_sensor.hall")
        return (Route(f"{spec.base or 'homeassistant'}/{domain}/{entity}/state"),), None, None
    assert p == "rtl_433"
    _need(spec, "field")
    return (Route(f"{spec.base or 'rtl_433'}/{dev or '+'}/events"),), None, None


def _routes(spec: TopicSpec) -> tuple[tuple[Route, ...], TimestampSpec | None, Availability | None]:
    if spec.preset is None:
        assert spec.topic is not None
        return (Route(spec.topic),), None, None
    routes, ts, avail = _preset_parts(spec)
    if spec.topic is not None:  # an explicit topic replaces the preset's (first) reading topic
        routes = (Route(spec.topic, routes[0].prefix, routes[0].require, routes[0].merge, routes[0].ts),
                  *routes[1:])
    return routes, ts, avail


def _check_filters(filters: list[str]) -> None:
    for f in filters:
        if not valid_filter(f):
            raise PresetError(f"{f!r} is not a valid MQTT topic filter")


def resolve(spec: IngestConfig) -> Mapping:
    """The mapping of a stream's ``[streams.ingest]`` table."""
    routes, ts, avail = _routes(spec)
    if spec.timestamp is not None:
        ts = None if spec.timestamp == "receive" else spec.timestamp
    if spec.availability == "none":
        avail = None
    elif isinstance(spec.availability, AvailabilitySpec):
        a = spec.availability
        avail = Availability(a.topic, path_of(a.field), frozenset(a.online), frozenset(a.offline))
    mapping = Mapping(
        preset=spec.preset or "custom", routes=routes, path=path_of(spec.field), values=spec.values,
        unmapped=spec.unmapped, match=_match(spec), timestamp=ts, availability=avail)
    _check_filters(mapping.filters())
    return mapping


def resolve_button(spec: ButtonConfig) -> Mapping:
    """The mapping of a privacy button (topics and value path only)."""
    routes, _, _ = _routes(spec)
    mapping = Mapping(preset=spec.preset or "custom", routes=routes, path=path_of(spec.field), match=_match(spec),
                      timestamp=spec.timestamp)
    _check_filters(mapping.filters())
    return mapping


def _match(spec: TopicSpec) -> tuple[tuple[tuple[str, ...], str], ...]:
    out = []
    for key, want in spec.match.items():
        c = canonical(want)
        if c is None:
            raise PresetError(f"match.{key}: a string, a number or a boolean")
        out.append((tuple(key.split(".")), c))
    return tuple(out)
