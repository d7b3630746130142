"""``streamguard consume``: read sanitized streams and print estimates corrected for the
privatization (issue 14; docs/consumer-guide.md).

* ``streamguard consume --broker HOST:PORT [--device D] [--stream S] (--count N | --duration
  SECONDS) [--json]`` — subscribe (QoS 1, persistent session ``--client-id``) until N new records
  arrived or SECONDS passed, then report.
* ``streamguard consume --file CAPTURE [--device D] [--stream S] [--json]`` — the same from a
  capture file (``--capture FILE`` writes one while reading a broker).

``--json`` prints one object whose ``streams`` maps each stream name to ``labels``, ``records``,
``redacted``, ``duplicates``, ``gaps``, ``frequency`` (estimated share of each state, label order)
and ``frequency_ci`` ([low, high] per state, 95%), plus ``naive``, ``method``, ``missing``, ``lost``
and a per-device breakdown with the re-audit of the published claims (over the stated model set
when there is one; each mark confirmed, refuted — a warning — or not checkable from what was
received). ``--model MODEL.json`` corrects the redaction estimates under a time-of-day set-chain
(``streamguard calibrate``'s default output) instead of the status's homogeneous chain: the
estimate under its center member, the 95% interval the union over its center and extreme members
(a heuristic over the sets' vertices, not a certified bound; docs/consumer-guide.md §3b); the
re-audit is unchanged. ``gaps`` and ``missing`` count grid steps (positions) without a received record, ``lost``
the records known lost (seqs). ``--bucket SECONDS`` adds the
share per time bucket; ``--plot FILE.png`` draws it. Bad arguments, an unreachable broker or an
unreadable file: one line on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from ..model.chain import ModelError
from ..config import BrokerConfig
from ..consumer.capture import CaptureError, CaptureWriter, read_capture
from ..consumer.collector import Collector
from ..consumer.report import bucket_table, buckets, plot_buckets, report, table
from ..consumer.subscribe import Selection, consume
from ..model.setchain import SetChain, is_setchain_json
from ..stream.transport import TransportError
from .common import CliError


def register(sub: Any) -> None:
    p = sub.add_parser("consume", help="read sanitized streams (broker or capture file) and estimate state shares "
                                       "corrected for the privatization",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--broker", metavar="HOST:PORT", help="the MQTT broker to subscribe to")
    src.add_argument("--file", type=Path, metavar="CAPTURE", help="a capture file (JSON lines) to read instead")
    p.add_argument("--base", default="streamguard", help="topic base (default: streamguard)")
    p.add_argument("--device", help="only this device (default: every device)")
    p.add_argument("--stream", help="only this stream (default: every stream)")
    stop = p.add_mutually_exclusive_group()
    stop.add_argument("--count", type=int, metavar="N", help="stop after N new records (broker)")
    stop.add_argument("--duration", type=float, metavar="SECONDS", help="stop after SECONDS (broker)")
    p.add_argument("--client-id", default="streamguard-consume",
                   help="MQTT client id of the persistent session (default: streamguard-consume)")
    p.add_argument("--capture", type=Path, metavar="FILE", help="also write every message received to FILE")
    p.add_argument("--bucket", type=float, metavar="SECONDS", help="add the share per time bucket of SECONDS")
    p.add_argument("--plot", type=Path, metavar="FILE.png", help="draw the bucketed shares (needs --bucket)")
    p.add_argument("--model", type=Path, metavar="MODEL.json",
                   help="correct redaction estimates under this time-of-day set-chain (calibrate's default output) "
                        "instead of the status's model")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _broker(text: str) -> BrokerConfig:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise CliError("--broker: expected HOST:PORT")
    return BrokerConfig(host=host.strip("[]"), port=int(port))


def run(args: argparse.Namespace) -> int:
    if args.plot is not None and args.bucket is None:
        raise CliError("--plot needs --bucket SECONDS")
    if args.bucket is not None and not args.bucket > 0:
        raise CliError("--bucket: must be a positive number of seconds")
    setchain = None if args.model is None else _setchain(args.model)
    collector = Collector(args.base)
    selection = Selection(args.base, args.device, args.stream)
    if args.file is not None:
        if args.capture is not None:
            raise CliError("--capture records a broker session; it cannot be used with --file")
        if not args.file.is_file():
            raise CliError(f"--file {args.file}: no such file")
        try:
            collector.feed_all(m for m in read_capture(args.file) if _selected(m.topic, selection))
        except CaptureError as exc:
            raise CliError(str(exc)) from None
    else:
        if args.count is None and args.duration is None:
            raise CliError("--broker needs --count N or --duration SECONDS")
        if (args.count is not None and args.count < 1) or (args.duration is not None and not args.duration > 0):
            raise CliError("--count and --duration must be positive")
        writer = None if args.capture is None else CaptureWriter(args.capture)
        try:
            asyncio.run(consume(_broker(args.broker), selection, collector, count=args.count,
                                duration=args.duration, client_id=args.client_id, capture=writer))
        except TransportError as exc:
            raise CliError(str(exc)) from None
        finally:
            if writer is not None:
                writer.close()
    rep = report(collector, setchain)
    series: dict[str, tuple[list[Any], list[dict[str, Any]]]] = {}
    if args.bucket is not None:
        for (device, stream), log in sorted(collector.streams.items()):
            b = buckets(log, args.bucket, setchain)
            rep["streams"][stream]["devices"][device]["buckets"] = b
            series[f"{device}/{stream}"] = (rep["streams"][stream]["labels"] or [], b)
        if args.plot is not None:
            plot_buckets(series, args.plot)
    print(json.dumps(rep) if args.json else table(rep))
    if args.bucket is not None and not args.json:
        for name, (labels, bs) in series.items():
            print("\n" + bucket_table(name, labels, bs))
    return 0


def _setchain(path: Path) -> SetChain:
    """The set-chain of ``--model`` (one-line error on anything else)."""
    try:
        doc = json.loads(path.read_text())
    except OSError:
        raise CliError(f"--model {path}: cannot be read") from None
    except ValueError:
        raise CliError(f"--model {path}: not valid JSON") from None
    if not is_setchain_json(doc):
        raise CliError(f"--model {path}: not a time-of-day set-chain (kind 'setchain'); without --model the "
                       "status's model is used")
    try:
        return SetChain.from_json(doc)
    except ModelError as exc:
        raise CliError(f"--model {path}: {exc}") from None


def _selected(topic: str, s: Selection) -> bool:
    """Does a captured message's topic pass the --device/--stream selection?"""
    parts = topic.split("/")
    base = s.base.split("/") if s.base else []
    rest = parts[len(base):]
    if s.device is not None and (not rest or rest[0] != s.device):
        return False
    return s.stream is None or (len(rest) >= 2 and rest[1] == s.stream) or rest[1:] == ["status"]
