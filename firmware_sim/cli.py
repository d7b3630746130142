"""``python -m firmware_sim``: run a simulated sensor device, to MQTT or to stdout as JSON lines.

In ``--stdout`` mode stdout carries frames only, one raw payload per line, bytes as generated (a
``non_utf8`` fault is written as-is); the summary goes to stderr. Frame and fault formats are in
:mod:`firmware_sim.frames` and :mod:`firmware_sim.faults`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import aiomqtt

from .config import BUTTON_MODES
from .device import DEFAULT_START, SimDevice
from .faults import FaultKind
from .frames import FrameCounts
from .mqtt import DEFAULT_COMMAND_TOPIC, DEFAULT_TOPIC, publish_device
from .onchange import FORMATS, OnChangeSensor, publish_onchange
from .spec import derive_seed, load_spec_file, parse_stream_arg, stream_from_spec

T = TypeVar("T")

#: The stream simulated when neither --stream nor --spec is given.
DEFAULT_STREAM = "occupancy:0.1:0.2:10"


def _csv(convert: Callable[[str], T]) -> Callable[[str], list[T]]:
    """An argparse type for comma-separated values (errors name ``convert``, e.g. "invalid int value")."""

    def parse(text: str) -> list[T]:
        return [convert(part) for part in text.split(",") if part]

    parse.__name__ = getattr(convert, "__name__", "list")
    return parse


def _start(text: str) -> float:
    return time.time() if text == "now" else float(text)


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise argparse.ArgumentTypeError("expected HOST:PORT")
    return host, int(port)


def _onchange(text: str) -> tuple[str, str, tuple[float, float]]:
    parts = text.split(":")
    if len(parts) not in (2, 4) or parts[0] not in FORMATS:
        raise argparse.ArgumentTypeError(f"expected FORMAT:DEVICE[:MEAN0:MEAN1], FORMAT one of {', '.join(FORMATS)}")
    try:
        dwell = (float(parts[2]), float(parts[3])) if len(parts) == 4 else (2.0, 0.5)
    except ValueError:
        raise argparse.ArgumentTypeError("MEAN0 and MEAN1 are seconds") from None
    return parts[0], parts[1], dwell


def _run_onchange(args: argparse.Namespace) -> int:
    fmt, name, dwell = args.onchange
    host, port = args.mqtt
    try:
        sensor = OnChangeSensor(fmt, name, dwell=dwell, republish=0.1 if fmt == "zigbee2mqtt" else 0.0, seed=args.seed,
                                retain=True if args.retain else None)
        sent = asyncio.run(publish_onchange(sensor, host, port, args.duration))
    except (aiomqtt.MqttError, ValueError) as exc:
        print(f"firmware_sim: {exc}", file=sys.stderr)
        return 1
    changes = sum(m.change for _, m in sent if m.state is not None)
    print(f"firmware_sim: {json.dumps({'messages': len(sent), 'changes': changes})}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m firmware_sim``."""
    p = argparse.ArgumentParser(
        prog="python -m firmware_sim",
        description="Simulated sensor firmware: Markov-chain streams of raw JSON frames, with bursts, "
        "clock jumps, privacy-button presses and malformed frames, deterministic under --seed.",
    )
    dev = p.add_argument_group("device and streams")
    dev.add_argument("--device", default="sim1", help="device id (default: %(default)s)")
    dev.add_argument(
        "--stream", action="append", default=[], metavar="NAME:ALPHA:BETA[:RATE]",
        help=f"a binary stream with default labels vacant/occupied; repeatable (default: {DEFAULT_STREAM})",
    )
    dev.add_argument("--spec", metavar="FILE", help="JSON spec file of streams (see firmware_sim.spec)")
    dev.add_argument("--onchange", type=_onchange, metavar="FORMAT:DEVICE[:MEAN0:MEAN1]",
                     help="instead: one binary sensor reporting on change in the format of zigbee2mqtt, tasmota "
                     "or esphome (state 0 lasts MEAN0 s on average, 1 MEAN1 s; default 2:0.5); needs --mqtt "
                     "and --duration (firmware_sim.onchange)")
    dev.add_argument("--retain", action="store_true",
                     help="with --onchange: publish the sensor's state retained (zigbee2mqtt's retain: true; "
                     "ESPHome retains anyway), as a stream with retained = true expects")
    dev.add_argument("--seed", type=int, default=0, help="device seed; stream i defaults to a seed derived from it")
    dev.add_argument("--start", type=_start, default=DEFAULT_START, metavar="EPOCH|now",
                     help="timestamp of the first frame (default: %(default)s, 2026-01-01 UTC)")
    ev = p.add_argument_group("events (defaults for every stream; a spec entry's own settings win)")
    ev.add_argument("--faults", type=float, default=0.0, metavar="RATE", help="probability that a frame is malformed")
    ev.add_argument("--fault-kinds", type=_csv(FaultKind), default=list(FaultKind), metavar="K[,K...]",
                    help=f"kinds of malformed frame (default: all of {', '.join(FaultKind)})")
    ev.add_argument("--button-prob", type=float, default=0.0, metavar="P",
                    help="privacy-button probability per reading")
    ev.add_argument("--button-at", type=_csv(int), default=[], metavar="I[,I...]", help="reading indices pressed")
    ev.add_argument("--button-mode", choices=BUTTON_MODES, default="flag",
                    help="flag: \"private\": true in the reading; command: {\"private\": \"now\"} on the cmd topic")
    ev.add_argument("--burst-every", type=float, metavar="SECONDS", help="send a burst this often")
    ev.add_argument("--burst-size", type=int, default=10, metavar="M", help="readings per burst (default: %(default)s)")
    ev.add_argument("--clock-jump-prob", type=float, default=0.0, metavar="P", help="clock-step probability per frame")
    ev.add_argument("--clock-jump", type=_csv(float), default=[-5.0, 5.0], metavar="S[,S...]",
                    help="clock steps in seconds, one chosen per jump (default: -5,5)")
    run = p.add_argument_group("how long and where")
    length = run.add_mutually_exclusive_group(required=True)
    length.add_argument("--duration", type=float, metavar="SECONDS", help="simulated seconds of frames")
    length.add_argument("--count", type=int, metavar="N", help="number of frames")
    out = run.add_mutually_exclusive_group(required=True)
    out.add_argument("--mqtt", type=_host_port, metavar="HOST:PORT", help="publish to a loopback broker (QoS 1)")
    out.add_argument("--stdout", action="store_true", help="write raw frames to stdout, one per line")
    run.add_argument("--topic", default=DEFAULT_TOPIC, help="raw topic template (default: %(default)s)")
    run.add_argument("--command-topic", default=DEFAULT_COMMAND_TOPIC,
                     help="command topic template (default: %(default)s)")
    run.add_argument("--username", help="MQTT user name")
    run.add_argument("--password", help="MQTT password")
    run.add_argument("--fast", action="store_true", help="MQTT: publish as fast as acknowledged, not in real time")
    return p


def _event_defaults(args: argparse.Namespace) -> dict[str, Any]:
    defaults: dict[str, Any] = {
        "faults": {"rate": args.faults, "kinds": args.fault_kinds},
        "button": {"probability": args.button_prob, "at": args.button_at, "mode": args.button_mode},
    }
    if args.burst_every is not None:
        defaults["bursts"] = {"every": args.burst_every, "size": args.burst_size}
    if args.clock_jump_prob > 0:
        defaults["clock_jumps"] = {"probability": args.clock_jump_prob, "amounts": args.clock_jump}
    return defaults


def build_device(args: argparse.Namespace) -> SimDevice:
    """The device the parsed arguments describe (ValueError/TypeError/OSError on a bad spec)."""
    entries = [parse_stream_arg(s) for s in args.stream]
    if args.spec:
        entries += load_spec_file(args.spec)
    if not entries:
        entries = [parse_stream_arg(DEFAULT_STREAM)]
    defaults = _event_defaults(args)
    streams = [stream_from_spec({**defaults, **e}, derive_seed(args.seed, i)) for i, e in enumerate(entries)]
    return SimDevice(args.device, streams, start=args.start)


def _write_stdout(device: SimDevice, args: argparse.Namespace) -> FrameCounts:
    counts = FrameCounts()
    out = sys.stdout.buffer
    for frame in device.frames(args.count, args.duration):
        out.write(frame.payload + b"\n")
        counts.add(frame)
    out.flush()
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.onchange is not None:
        if args.mqtt is None or args.duration is None:
            parser.error("--onchange publishes to a broker for a time: give --mqtt and --duration")
        return _run_onchange(args)
    try:
        device = build_device(args)
    except (ValueError, TypeError, OSError) as exc:
        parser.error(str(exc))
    if args.stdout and any(s.button.mode == "command" for s in device.streams):
        parser.error("--stdout writes raw frames only: use button mode 'flag' (commands need --mqtt)")
    if args.stdout:
        try:
            counts = _write_stdout(device, args)
        except BrokenPipeError:  # the reader went away (e.g. `| head`): stop without a traceback
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
    else:
        host, port = args.mqtt
        try:
            counts = asyncio.run(publish_device(
                device, host, port, args.duration, args.topic, args.username, args.password,
                count=args.count, command_template=args.command_topic, realtime=not args.fast,
            ))
        except (aiomqtt.MqttError, ValueError) as exc:
            print(f"firmware_sim: {exc}", file=sys.stderr)
            return 1
    print(f"firmware_sim: {json.dumps(counts.as_dict())}", file=sys.stderr)
    return 0
