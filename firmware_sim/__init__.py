"""Simulated sensor firmware: Markov-chain streams of raw JSON frames for the streamguard daemon.

``SimStream`` configures one stream (chain, labels or numeric ranges, rate, seed, bursts, clock
jumps, privacy button, faults); ``SimDevice`` interleaves streams and yields ``(stream, payload,
meta)`` frames, deterministic under the seeds; ``publish_device`` sends them to a loopback MQTT
broker; ``python -m firmware_sim`` does either from the command line. ``MarkovSource`` gives the
bare reproducible state sequences. ``OnChangeSensor`` is a binary sensor that reports on change in
the format of zigbee2mqtt, Tasmota or ESPHome (``onchange.py``; ``--onchange`` on the command line).
"""

from .config import Bursts, Button, ButtonMode, ClockJumps, Faults, SimStream
from .device import DEFAULT_START, SimDevice
from .emission import Labels, NumericRanges, Sensitive, default_labels
from .faults import OVERSIZE_LIMIT, FaultKind
from .frames import COMMAND_NOW, Frame, FrameCounts, FrameMeta
from .mqtt import DEFAULT_COMMAND_TOPIC, DEFAULT_TOPIC, publish_device
from .onchange import ChangeMessage, OnChangeSensor, publish_onchange
from .sources import MarkovSource

__all__ = [
    "COMMAND_NOW",
    "DEFAULT_COMMAND_TOPIC",
    "DEFAULT_START",
    "DEFAULT_TOPIC",
    "OVERSIZE_LIMIT",
    "Bursts",
    "ChangeMessage",
    "Button",
    "ButtonMode",
    "ClockJumps",
    "FaultKind",
    "Faults",
    "Frame",
    "FrameCounts",
    "FrameMeta",
    "Labels",
    "MarkovSource",
    "NumericRanges",
    "OnChangeSensor",
    "Sensitive",
    "SimDevice",
    "SimStream",
    "default_labels",
    "publish_device",
    "publish_onchange",
]
