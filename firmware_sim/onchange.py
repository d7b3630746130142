"""On-change sensors in the formats of the MQTT ecosystem (issue 10; notes/sensor-ecosystem.md §1):
a binary sensor that publishes only when its state changes — so its message times reveal the
changes — as zigbee2mqtt, Tasmota or ESPHome would.

The state follows a continuous-time two-state process whose dwell times depend on the state (the
timing leak the resampler must close): state ``s`` lasts ``dwell[s]`` seconds on average
(exponential). With ``heartbeat`` > 0 it also re-reports its unchanged state whenever that many
seconds passed without a message (a device with a guaranteed report interval, whatever its value).
``retain``: its readings are published retained (None: the format's default — ESPHome retains;
zigbee2mqtt does with ``retain: true`` in the device's options). Formats:

| format | reading topic | payload | availability (retained, at start) |
|---|---|---|---|
| ``zigbee2mqtt`` | ``zigbee2mqtt/<device>`` | ``{"occupancy": bool, "battery": …, "linkquality": …}``, plus republishes of the unchanged state with a new link quality (``republish`` per second) | ``zigbee2mqtt/<device>/availability`` ``{"state": "online"}`` |
| ``tasmota`` | ``stat/<device>/POWER`` | ``ON``/``OFF`` | ``tele/<device>/LWT`` ``Online`` |
| ``esphome`` | ``<device>/binary_sensor/motion/state`` (retained) | ``ON``/``OFF`` | ``<device>/status`` ``online`` |

Deterministic under ``seed`` (simulation randomness, not privacy randomness). Each message carries
its ground truth in :class:`ChangeMessage` (the state, and whether it is a change).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Literal

import aiomqtt

from .mqtt import client_identifier, require_loopback

Format = Literal["zigbee2mqtt", "tasmota", "esphome"]
FORMATS: tuple[Format, ...] = ("zigbee2mqtt", "tasmota", "esphome")


@dataclass(frozen=True)
class ChangeMessage:
    """One message: when (seconds after the start), where, what, and its truth."""

    at: float
    topic: str
    payload: bytes
    retain: bool
    state: int | None  # the sensor's state (None: an availability message)
    change: bool


@dataclass(frozen=True)
class OnChangeSensor:
    """A binary on-change sensor (module docstring). ``dwell``: mean seconds in state 0 and 1."""

    format: Format
    device: str
    dwell: tuple[float, float] = (2.0, 0.5)
    republish: float = 0.0
    seed: int = 0
    initial: int = 0
    heartbeat: float = 0.0
    retain: bool | None = None

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"format: one of {', '.join(FORMATS)}")
        if min(self.dwell) <= 0 or self.republish < 0 or self.heartbeat < 0:
            raise ValueError("dwell times must be positive, the republish rate and heartbeat non-negative")

    def topics(self) -> tuple[str, str]:
        """(reading topic, availability topic)."""
        d = self.device
        return {"zigbee2mqtt": (f"zigbee2mqtt/{d}", f"zigbee2mqtt/{d}/availability"),
                "tasmota": (f"stat/{d}/POWER", f"tele/{d}/LWT"),
                "esphome": (f"{d}/binary_sensor/motion/state", f"{d}/status")}[self.format]

    def _reading(self, state: int, rng: random.Random) -> bytes:
        if self.format == "zigbee2mqtt":
            return json.dumps({"occupancy": bool(state), "battery": 97, "linkquality": rng.randrange(20, 255),
                               "voltage": 2950}).encode()
        return b"ON" if state else b"OFF"

    def _online(self) -> bytes:
        return {"zigbee2mqtt": b'{"state":"online"}', "tasmota": b"Online", "esphome": b"online"}[self.format]

    def messages(self) -> Iterator[ChangeMessage]:
        """The messages in time order, forever: availability and the initial state at time 0, then
        a message per change (and zigbee2mqtt's republishes of the unchanged state, and heartbeats)."""
        rng = random.Random(self.seed)
        reading, avail = self.topics()
        retained = self.format == "esphome" if self.retain is None else self.retain
        state = self.initial
        yield ChangeMessage(0.0, avail, self._online(), True, None, False)
        yield ChangeMessage(0.0, reading, self._reading(state, rng), retained, state, True)
        t = 0.0
        next_change = rng.expovariate(1.0 / self.dwell[state])
        next_republish = rng.expovariate(self.republish) if self.republish else float("inf")
        while True:
            next_beat = t + self.heartbeat if self.heartbeat else float("inf")  # t: the last message
            if min(next_republish, next_beat) < next_change:
                t = min(next_republish, next_beat)
                if next_republish == t:
                    next_republish = t + rng.expovariate(self.republish)
                yield ChangeMessage(t, reading, self._reading(state, rng), retained, state, False)
                continue
            t = next_change
            state = 1 - state
            next_change = t + rng.expovariate(1.0 / self.dwell[state])
            yield ChangeMessage(t, reading, self._reading(state, rng), retained, state, True)


async def paced(sensor: OnChangeSensor, duration: float) -> AsyncIterator[tuple[float, ChangeMessage]]:
    """The sensor's messages of the first ``duration`` seconds at their times (wall clock), each
    with the wall-clock time it was due."""
    start = time.time()
    for m in sensor.messages():
        if m.at >= duration:
            return
        delay = start + m.at - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
        yield start + m.at, m


async def retain_state(sensor: OnChangeSensor, host: str, port: int) -> None:
    """Leave the sensor's initial state on a loopback broker as a retained message — what the
    broker holds for a retaining device that ran before the daemon started."""
    require_loopback(host)
    first = next(m for m in sensor.messages() if m.state is not None)
    async with aiomqtt.Client(host, port, identifier=client_identifier(sensor.device)) as client:
        await client.publish(first.topic, first.payload, qos=1, retain=True)


async def publish_onchange(sensor: OnChangeSensor, host: str, port: int, duration: float) -> list[tuple[float, ChangeMessage]]:
    """Publish the sensor's messages for ``duration`` seconds to a loopback broker (QoS 1, in
    order); returns (wall-clock send time, message) for each, the ground truth."""
    require_loopback(host)
    sent: list[tuple[float, ChangeMessage]] = []
    async with aiomqtt.Client(host, port, identifier=client_identifier(sensor.device)) as client:
        async for _, m in paced(sensor, duration):
            at = time.time()
            await client.publish(m.topic, m.payload, qos=1, retain=m.retain)
            sent.append((at, m))
    return sent
