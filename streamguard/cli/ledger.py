"""``streamguard ledger``: show the privacy odometer, export the ledger, re-check an export offline.

* ``streamguard ledger show --db PATH [--stream NAME] [--json]`` — the odometer of every stream
  (or of ``NAME``: ``DEVICE/STREAM``, or ``STREAM`` on any device). Opens the ledger read-only.
* ``streamguard ledger export --db PATH [--config FILE] [--out FILE]`` — every event, refusal and
  model description plus the declared figures, as JSON (stdout, or ``FILE``); with ``--config``
  also each redaction stream's model, ε, design and split (:mod:`streamguard.ledger.stream_models`).
* ``streamguard ledger check FILE.json`` — recompute every guarantee from the exported events
  alone (and re-design each exported redaction stream's plan from its model); exit 1 and name each discrepancy (an under-count first of all), exit 0 if there is none.
  An export that cannot be re-checked because it is malformed or was tampered with (an event that
  no longer validates, a missing part) fails the check too: exit 1, one line ``malformed: …``
  naming the event and the problem.

Bad arguments or an unreadable ledger or file (missing, not JSON, not a ledger export at all): one
line on stderr, exit status 2. Positions are the streams' 0-based record positions (the published
``seq``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..ledger.events import NAME
from ..ledger.odometer import odometer
from ..ledger.recheck import RecheckError, recheck
from ..ledger.store import Ledger, LedgerError
from ..support.private_files import write_private

#: The ``format`` of :meth:`Ledger.export`: a JSON file without it is not an export (exit 2), one
#: with it is checked (exit 1 if it does not re-check).
_EXPORT_FORMAT = "streamguard-ledger"


class _Fail(Exception):
    """One line on stderr, exit status 2."""


def _open(path: Path) -> Ledger:
    if not path.is_file():
        raise _Fail(f"--db {path}: no such file")
    try:
        return Ledger.open(path, readonly=True)
    except LedgerError as exc:
        raise _Fail(f"--db {path}: {exc}") from None
    except Exception as exc:  # sqlite3.DatabaseError for a file that is no database
        raise _Fail(f"--db {path}: not a readable ledger ({type(exc).__name__})") from None


def _select(ledger: Ledger, name: str | None) -> list[tuple[str, str]]:
    streams = ledger.streams()
    if name is None:
        return streams
    device, _, stream = name.rpartition("/")
    if not NAME.match(stream) or (device and not NAME.match(device)):
        raise _Fail("--stream: expected STREAM or DEVICE/STREAM (letters, digits, '_', '-')")
    chosen = [k for k in streams if k[1] == stream and (not device or k[0] == device)]
    if not chosen:
        known = ", ".join(f"{d}/{s}" for d, s in streams) or "none"
        raise _Fail(f"--stream {name}: no such stream in the ledger (streams: {known})")
    return chosen


def _fmt(x: Any) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x:.6g}"
    return str(x)


def _text(doc: dict[str, Any]) -> list[str]:
    lines = [f"{doc['device']}/{doc['stream']}"]
    agg = doc["aggregate"]
    if agg:
        lines.append(f"  aggregate  ε = {_fmt(agg['epsilon'])}  budget {_fmt(agg['budget'])}  "
                     f"remaining {_fmt(agg['remaining'])}  releases {agg['releases']}  "
                     f"positions {agg['covered'][0]}..{agg['covered'][1]}")
        for m in agg["models"]:
            paper = "; ".join(f"{label} {_fmt(v['epsilon']) if 'epsilon' in v else 'n/a'}"
                              for label, v in (("Σε (Thm III.7)", m["paper"]["thm_III7_sum"]),
                                               ("K·max (Thm II.6)", m["paper"]["thm_II6_k_max"])))
            lines.append(f"    model {m['model']} ({m['mode']}): accountant ε_max {_fmt(m['eps_max'])}; {paper}")
        if agg.get("warning"):
            lines.append(f"    WARNING: {agg['warning']}")
    red = doc["redaction"]
    if red:
        w = red["worst"]
        at = f"position {w['position']}" if w["position"] is not None else f"seq {w['seq']} (position unknown)"
        lines.append(f"  redaction  worst mark ε = {_fmt(red['epsilon'])} at {at}  "
                     f"budget {_fmt(red['budget'])}  marks {red['count']}  not honoured {red['not_honoured']}")
    ch = doc["channel"]
    if ch:
        claims = ", ".join(f"{n} {_fmt(c['epsilon']) if c['composed'] else 'not composed'}"
                           for n, c in ch["claims"].items())
        leak = ch["stream_leakage"]
        lines.append(f"  channel    releases {ch['releases']}  claims: {claims}  stream leakage "
                     f"{_fmt(leak['epsilon']) if leak['composed'] else 'not composed (' + leak['reason'] + ')'}")
    d = doc.get("drift")
    if d is not None:
        lines.append(f"  drift      {'ALARM (the model stopped holding)' if d['alarm'] else 'cleared'} under model "
                     f"set {d['model']}: {d['reason']}")
    for c in doc["composition"]:
        lines.append(f"  {c['families'][0]} + {c['families'][1]}: not composed — {c['reason']}")
    r = doc["refusals"]
    if r["count"]:
        last = r["last"]
        lines.append(f"  refusals {r['count']}; last: {last['family']} {last['guarantee']} would be "
                     f"{_fmt(last['would_be'])} > {_fmt(last['budget'])}")
    return lines


def cmd_show(args: argparse.Namespace) -> int:
    with _open(args.db) as ledger:
        docs = [odometer(ledger, d, s, limit=None if args.json else 20) for d, s in _select(ledger, args.stream)]
    if args.json:
        print(json.dumps(docs if args.stream is None else docs[0] if len(docs) == 1 else docs,
                         indent=2, allow_nan=False))
        return 0
    if not docs:
        print("the ledger holds no releases")
        return 0
    for doc in docs:
        print("\n".join(_text(doc)))
    print("(nats; under the model — see --json for every figure)")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    with _open(args.db) as ledger:
        doc = ledger.export()
    if args.config is not None:
        from ..config import load_settings
        from ..ledger.stream_models import describe_streams

        doc["stream_models"] = describe_streams(load_settings(args.config))
    text = json.dumps(doc, indent=1, allow_nan=False)
    if args.out is None:
        print(text)
    else:
        try:
            write_private(args.out, text + "\n")  # (the events' times date the private marks)
        except OSError as exc:
            raise _Fail(f"--out {args.out}: {exc.strerror}") from None
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    try:
        doc = json.loads(Path(args.file).read_text())
    except OSError as exc:
        raise _Fail(f"{args.file}: {exc.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise _Fail(f"{args.file}: not valid JSON") from None
    if not isinstance(doc, dict) or doc.get("format") != _EXPORT_FORMAT:
        raise _Fail(f"{args.file}: not a streamguard ledger export (no \"format\": \"{_EXPORT_FORMAT}\")")
    try:
        report = recheck(doc)
    except RecheckError as exc:  # malformed or tampered: the check fails
        print(f"malformed: {exc}")
        return 1
    order = {"under-count": 0, "release-claim": 1, "budget": 2}
    for d in sorted(report["discrepancies"], key=lambda d: order.get(d["kind"], 3)):
        print(f"{d['kind']}: {d['where']}: {d['detail']}")
    if report["ok"]:
        for name, leak in report["plans"].items():
            print(f"{name}: plan re-designed from the exported model: exact leakage {leak:.6f} nats")
        print(f"ok: {report['events']} events, {len(report['streams'])} streams; every guarantee recomputed "
              "from the events matches the ledger"
              + ("" if report["plans"] else " (no stream models exported: give export --config to add them)"))
        return 0
    return 1


def _guard(fn: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            return int(fn(args))
        except _Fail as exc:
            print(f"streamguard: error: {exc}", file=sys.stderr)
            return 2
    return run


def register(subparsers: Any) -> None:
    """Add ``streamguard ledger {show,export,check}`` to the main parser's subcommands."""
    p = subparsers.add_parser("ledger", help="privacy ledger: odometer, export, offline re-check",
                              description="Inspect the persisted privacy ledger (every release recorded "
                              "before it was published), export it, and re-check an export offline.")
    sub = p.add_subparsers(dest="ledger_command", required=True)
    s = sub.add_parser("show", help="the privacy odometer of each stream")
    s.add_argument("--db", type=Path, required=True, help="the ledger's SQLite file")
    s.add_argument("--stream", help="only this stream: STREAM or DEVICE/STREAM")
    s.add_argument("--json", action="store_true", help="print the odometer document(s) as JSON")
    s.set_defaults(func=_guard(cmd_show))
    e = sub.add_parser("export", help="every event, refusal and model, for an offline re-check")
    e.add_argument("--db", type=Path, required=True, help="the ledger's SQLite file")
    e.add_argument("--json", action="store_true", help="export as JSON (the default and only format)")
    e.add_argument("--config", type=Path, help="the daemon's TOML configuration: adds each redaction "
                   "stream's model, ε, design and split, so that check re-designs and re-checks its plan")
    e.add_argument("--out", type=Path, help="write to FILE instead of stdout")
    e.set_defaults(func=_guard(cmd_export))
    c = sub.add_parser("check", help="recompute every guarantee of an export; exit 1 on a discrepancy "
                       "or a malformed / tampered export")
    c.add_argument("file", metavar="FILE.json", help="an export of `streamguard ledger export --json`")
    c.set_defaults(func=_guard(cmd_check))
