"""``streamguard mechanism``: design a per-record perturbation channel, or check a saved one.

* ``streamguard mechanism design --kind KIND (--joint FILE.json | --prior "[...]") --epsilon E
  [--lambda L] [--measure M] [--alpha A] [--cost C] [--json] [--out CHANNEL.json] [--chain "[[...]]"]``
  designs the channel (perturbation.designers), checks every claim exactly (perturbation.verify),
  prints it with its metrics (nats) and, with ``--out``, saves it (perturbation.channel_file).
* ``streamguard mechanism check CHANNEL.json [--joint FILE.json | --prior "[...]"] [--json]
  [--chain "[[...]]"]`` loads a saved channel (refused if edited — its digest must match — or if a
  claim fails under the model stored in it) and checks its claims under the given model, or under
  the stored one when no model is given.

``FILE.json`` is ``{"joint": [[P(s, x) …] per s]}``. ``--chain`` adds the exact leakage about one
record of the whole stream when the channel releases every record of that Markov chain (rows of the
transition matrix, stationary start) — next to, and not to be confused with, the per-record claims.

Exit status: 0 the channel keeps every claim; 1 the channel is refused (a claim is violated, or a
saved file is malformed or was edited), with one line naming the constraint; 2 bad arguments, an
unreadable / malformed model or an ``--out`` that cannot be written (one line naming the problem).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from ..privacy.budget import check_budget
from ..model.chain import MarkovChain
from ..perturbation.channel_file import (
    ChannelFileError,
    ChannelWriteError,
    load_channel,
    save_channel,
)
from ..perturbation.designers import DESIGNERS, KINDS, design
from ..perturbation.metrics import channel_metrics, metrics_json
from ..perturbation.model import Joint, ModelInputError, PerturbationChannel
from ..perturbation.verify import ClaimViolation, VerifyReport, require_valid, verify

_MEASURES = tuple(dict.fromkeys(m for spec in DESIGNERS.values() for m in spec.measures))


class MechanismArgError(ValueError):
    """Bad arguments or model: reported by ``streamguard``'s main as one line, exit status 2."""


def _model(args: argparse.Namespace) -> Joint | None:
    """The model of ``--joint`` or ``--prior`` (at most one may be given); None when neither is."""
    if args.joint is not None and args.prior is not None:
        raise MechanismArgError("give only one of --joint FILE.json and --prior \"[...]\"")
    if args.joint is None and args.prior is None:
        return None
    try:
        if args.joint is not None:
            try:
                doc = json.loads(Path(args.joint).read_text())
            except OSError as exc:
                raise MechanismArgError(f"--joint {args.joint}: {exc.strerror}") from None
            except (json.JSONDecodeError, UnicodeDecodeError):
                raise MechanismArgError(f"--joint {args.joint}: not valid JSON") from None
            return Joint.from_json(doc)
        try:
            prior = json.loads(args.prior)
        except json.JSONDecodeError:
            raise MechanismArgError("--prior: not valid JSON") from None
        return Joint.from_prior(prior)
    except ModelInputError as exc:
        raise MechanismArgError(str(exc)) from None


def _chain(text: str | None) -> MarkovChain | None:
    if text is None:
        return None
    try:
        return MarkovChain(json.loads(text))
    except json.JSONDecodeError:
        raise MechanismArgError("--chain: not valid JSON") from None
    except ValueError as exc:
        raise MechanismArgError(f"--chain: {exc}") from None


def _stream(channel: PerturbationChannel, chain: MarkovChain | None) -> dict[str, Any] | None:
    if chain is None:
        return None
    from ..perturbation.stream_leakage import stream_leakage_report

    try:
        return stream_leakage_report(channel, chain)
    except ValueError as exc:
        raise MechanismArgError(f"--chain: {exc}") from None


def _refused(exc: Exception) -> int:
    print(f"streamguard: refused: {exc}", file=sys.stderr)
    return 1


# -- output -------------------------------------------------------------------------------------


def _symbol(sym: int | tuple[int, ...]) -> str:
    return str(sym) if isinstance(sym, int) else "{" + ",".join(map(str, sym)) + "}"


def _document(channel: PerturbationChannel, joint: Joint, report: VerifyReport,
              stream: dict[str, Any] | None) -> dict[str, Any]:
    doc = channel.to_json()
    out: dict[str, Any] = {
        "kind": channel.kind, "inputs": channel.inputs,
        "rows": "x" if channel.inputs == "x" else "(s, x) as s·|X| + x",
        "channel": doc["channel"], "outputs": doc["outputs"], "claims": doc["claims"], "params": doc["params"],
        "verified": report.ok, "checks": [c.as_dict() for c in report.checks],
        "metrics": metrics_json(channel_metrics(channel, joint)),
    }
    if stream is not None:
        out["stream_leakage"] = stream
    return out


def _fmt(v: float) -> str:
    return "∞" if v == math.inf else f"{v:.6g}"


def _table(channel: PerturbationChannel, joint: Joint, report: VerifyReport, stream: dict[str, Any] | None) -> str:
    m = channel_metrics(channel, joint)
    heads = [_symbol(o) for o in channel.outputs]
    width = max(10, *(len(h) + 2 for h in heads))
    rows_by = "x" if channel.inputs == "x" else "(s, x)"
    lines = [f"{channel.kind} channel: |S| = {channel.n_s}, |X| = {channel.n_x}, {channel.n_y} outputs, "
             f"rows by {rows_by}; params {json.dumps(channel.params)}", "",
             f"{'input':>8} " + "".join(h.rjust(width) for h in heads)]
    for r, row in enumerate(channel.matrix):
        label = f"x={r}" if channel.inputs == "x" else f"s={r // channel.n_x},x={r % channel.n_x}"
        lines.append(f"{label:>8} " + "".join(f"{v:{width}.6f}" for v in row))
    lines += ["", "per-record claims (checked exactly, stored and quantised channel):"]
    for c in report.checks:
        verdict = "holds" if c.holds else "VIOLATED"
        lines.append(f"  [{c.target}] {c.claim.notion} {c.constraint}: {verdict} "
                     f"(realised {_fmt(c.realised)}, allowed {_fmt(c.allowed)})")
    nmi = m["mi_xy"] / m["h_x"] if m["h_x"] > 0 else 1.0
    lines += ["", "metrics (nats):",
              f"  LDP w.r.t. S {_fmt(m['ldp_s'])}, w.r.t. X {_fmt(m['ldp_x'])}; identifiability "
              f"{_fmt(m['identifiability'])}",
              f"  lift: max {_fmt(m['max_lift'])}, min {_fmt(m['min_lift'])} (ALIP ε_l* {_fmt(m['alip_eps_l'])}, "
              f"ε_u* {_fmt(m['alip_eps_u'])}; log-lift {_fmt(m['log_lift'])})",
              f"  I(S;Y) {_fmt(m['mi_sy'])}, I(X;Y) {_fmt(m['mi_xy'])} (NMI {nmi:.4f}), "
              f"Pr(Y ≠ X) {_fmt(m['distortion'])}"]
    if stream is not None:
        value = stream["leakage"]
        lines += ["", f"stream leakage about one record, every record released through this channel "
                      f"({stream['method']}, {stream['scope']}): {'∞' if value == 'inf' else f'{value:.6g}'} nats"
                      f"{' (lower bound)' if stream['lower_bound'] else ''} — the per-record claims above are "
                      "not the stream's leakage"]
    return "\n".join(lines)


def _print(channel: PerturbationChannel, joint: Joint, report: VerifyReport, args: argparse.Namespace,
           extra: dict[str, Any]) -> None:
    stream = _stream(channel, _chain(args.chain))
    if args.json:
        print(json.dumps({**_document(channel, joint, report, stream), **extra}, indent=1))
    else:
        print(_table(channel, joint, report, stream))
        for key, value in extra.items():
            print(f"{key}: {value}")


# -- commands -----------------------------------------------------------------------------------


def cmd_design(args: argparse.Namespace) -> int:
    joint = _model(args)
    if joint is None:
        raise MechanismArgError("give one of --joint FILE.json and --prior \"[...]\"")
    try:
        check_budget(args.epsilon, "--epsilon")
    except ValueError as exc:
        raise MechanismArgError(str(exc)) from None
    channel = design(args.kind, joint, args.epsilon, lam=args.lam, measure=args.measure, alpha=args.alpha,
                     cost=args.cost)
    try:
        report = require_valid(channel, joint)
        if args.out is not None:
            save_channel(args.out, channel, joint)
    except ClaimViolation as exc:
        return _refused(exc)
    except ChannelWriteError as exc:
        raise MechanismArgError(f"--out {args.out}: {exc.reason}") from None
    _print(channel, joint, report, args, {"saved": str(args.out)} if args.out else {})
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    given = _model(args)
    if not Path(args.file).is_file():
        raise MechanismArgError(f"{args.file}: no such file")
    try:
        channel, stored = load_channel(args.file)
        joint = stored if given is None else given
        report = verify(channel, joint)
    except (ClaimViolation, ChannelFileError) as exc:
        return _refused(exc)
    except ModelInputError as exc:  # the given model does not fit the channel's alphabets
        raise MechanismArgError(str(exc)) from None
    same = stored.p.shape == joint.p.shape and bool((stored.p == joint.p).all())
    _print(channel, joint, report, args, {"model": "as stored in the file" if same else
                                          "differs from the one stored in the file (that one verified too)"})
    if not report.ok:
        return _refused(ClaimViolation(report.failures[0].message(channel.kind)))
    return 0


def _guard(func: Any) -> Any:
    """Design errors (unknown kind, bad budget, …) are argument errors: exit 2 via main."""
    from ..perturbation.model import DesignError

    def run(args: argparse.Namespace) -> int:
        try:
            return int(func(args))
        except DesignError as exc:
            raise MechanismArgError(f"--kind {getattr(args, 'kind', '')}: {exc}") from None

    return run


def register(subparsers: Any) -> None:
    """Add ``streamguard mechanism {design,check}`` to the main parser's subcommands."""
    p = subparsers.add_parser("mechanism", help="per-record perturbation channels: design and check",
                              description="Design a per-record perturbation channel (randomized response, "
                              "watchdog, AORR/SRR, linear reduction) for a model, verify its claims exactly, "
                              "and check saved channels. Leakages are in nats.")
    sub = p.add_subparsers(dest="mechanism_command", required=True)
    model = argparse.ArgumentParser(add_help=False)
    model.add_argument("--joint", metavar="FILE.json", help='the joint law: {"joint": [[P(s, x) ...] per s]}; '
                       "design needs it or --prior, check defaults to the model stored in the file")
    model.add_argument("--prior", help='a prior P(x) as JSON (S = X), e.g. "[0.5, 0.3, 0.2]"; '
                       "design needs it or --joint, check defaults to the model stored in the file")
    model.add_argument("--chain", help='also print the stream leakage under this Markov chain of X, '
                       'e.g. "[[0.9, 0.1], [0.2, 0.8]]" (stationary start)')
    model.add_argument("--json", action="store_true", help="print one JSON object")

    d = sub.add_parser("design", parents=[model], help="design a channel, verify it, print or save it",
                       description="Kinds: " + "; ".join(f"{k} ({s.model}) — {s.summary}" for k, s in DESIGNERS.items()))
    d.add_argument("--kind", required=True, choices=KINDS)
    d.add_argument("--epsilon", type=float, required=True, help="privacy budget ε in nats, 0 < ε ≤ 1000")
    d.add_argument("--lambda", dest="lam", type=float,
                   help="ALIP split ε_l = λε, ε_u = (1−λ)ε (watchdog, aorr, srr; default 0.5)")
    d.add_argument("--measure", choices=_MEASURES, help="privacy measure (kinds watchdog*, linear*)")
    d.add_argument("--alpha", type=float, help="α of the alpha-lift measures (> 1)")
    d.add_argument("--cost", choices=("tv", "abs", "squared"), help="utility cost of the linear LP kinds")
    d.add_argument("--out", metavar="CHANNEL.json", help="save the verified channel (sealed with a digest)")
    d.set_defaults(func=_guard(cmd_design))

    c = sub.add_parser("check", parents=[model], help="verify a saved channel's claims under a model",
                       description="Load CHANNEL.json (refused if malformed, edited — its digest must match — "
                       "or failing under its stored model) and check every claim exactly under the model "
                       "given by --joint or --prior, or under the stored model when neither is given.")
    c.add_argument("file", metavar="CHANNEL.json")
    c.set_defaults(func=_guard(cmd_check))
