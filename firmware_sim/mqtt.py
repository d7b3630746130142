"""Publish a simulated device's raw frames to the local MQTT broker (aiomqtt, QoS 1, in order).

Raw readings never leave the device (DESIGN.md §1), so the broker must be on a loopback address.
Each publish is awaited before the next (per-stream order is the send order); the client sets
TCP_NODELAY, without which paced publishes wait 10–20 ms (notes/performance-baselines.md §5).
"""

from __future__ import annotations

import ipaddress
import socket

import aiomqtt

from .device import SimDevice
from .frames import FrameCounts

#: Raw frames go here; ``{device}`` and ``{stream}`` are filled in.
DEFAULT_TOPIC = "streamguard/{device}/{stream}/raw"
#: Button commands (``button.mode = "command"``) go here.
DEFAULT_COMMAND_TOPIC = "streamguard/{device}/{stream}/cmd"
_NODELAY = (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def require_loopback(host: str) -> None:
    """Raise ValueError unless ``host`` is ``localhost`` or a loopback IP address."""
    if host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ValueError(f"refusing to publish raw frames to {host!r}: the broker must be on loopback")


def client_identifier(device_id: str) -> str:
    """The MQTT client identifier of a simulated device (stable, so one instance per device)."""
    return f"firmware-sim-{device_id}"


async def publish_device(
    device: SimDevice,
    host: str,
    port: int,
    duration: float | None = None,
    topic_template: str = DEFAULT_TOPIC,
    username: str | None = None,
    password: str | None = None,
    *,
    count: int | None = None,
    command_template: str = DEFAULT_COMMAND_TOPIC,
    realtime: bool = True,
) -> FrameCounts:
    """Publish the device's frames for ``duration`` seconds (or its first ``count`` frames).

    Frames are paced at their send times when ``realtime`` (see :meth:`SimDevice.run`). Returns the
    raw frames per stream, faults per kind and commands that the broker acknowledged. Raises
    ``aiomqtt.MqttError`` when the broker cannot be reached or a publish is not acknowledged.
    """
    require_loopback(host)
    counts = FrameCounts()
    client = aiomqtt.Client(
        host,
        port,
        username=username,
        password=password,
        identifier=client_identifier(device.device_id),
        socket_options=[_NODELAY],
    )
    async with client:
        async for frame in device.run(duration, count=count, realtime=realtime):
            template = topic_template if frame.meta.channel == "raw" else command_template
            topic = template.format(device=device.device_id, stream=frame.stream)
            await client.publish(topic, frame.payload, qos=1)
            counts.add(frame)
    return counts
