"""Command-line interface: ``streamguard plan`` and ``streamguard audit``.

Positions on the command line and in JSON are 1-based, as in the papers; the library is 0-based.
Errors are one line on stderr naming the problem (never a data value), exit status 2; ``run``
exits with :data:`EXIT_IN_USE` when another streamguard holds its outbox, ledger or MQTT identity.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import __version__
from . import cli_ledger
from . import cli_mechanism
from . import cli_mqm
from .audit import brute_force_leakage, exact_leakage
from .audit.brute import MAX_WORK
from .chain import MarkovChain, ModelError
from .channel import ChannelError, ChannelSequence
from .redaction.baselines import BASELINES, baseline_plan, theorem2_bound
from .redaction.design import DESIGNS
from .audit.start import start_effect
from .redaction.plan import RedactionPlan, plan_redaction, plan_stream


#: ``run``'s exit status when another streamguard holds the outbox or the ledger (it exits at once)
#: or took over the MQTT client id (it stops): EX_TEMPFAIL.
EXIT_IN_USE = 75


class CliError(Exception):
    """A user error reported as one line, exit status 2."""


def _json_list(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise CliError(f"{what}: not valid JSON") from None


def _split_arg(text: str) -> str | float:
    if text in ("even", "optimize"):
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be 'even', 'optimize' or a number (the left budget ε_ℓ)") from None


def _threshold_arg(text: str) -> str | float:
    if text == "optimize":
        return text
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be a fraction in (0, 1] or 'optimize'") from None
    if not 0.0 < v <= 1.0:
        raise argparse.ArgumentTypeError("must be a fraction in (0, 1] or 'optimize'")
    return v


def _chain(alpha: float | None, beta: float | None, initial: str | None) -> MarkovChain:
    if alpha is None or beta is None:
        raise CliError("the model needs both --alpha and --beta")
    init = None if initial is None else _json_list(initial, "--initial")
    return MarkovChain.binary(alpha, beta, init)


# -- plan ---------------------------------------------------------------------------------------
def _plan_json(plan: RedactionPlan, args: argparse.Namespace, brute: dict[int, float] | None) -> dict[str, Any]:
    ch = plan.chain
    out: dict[str, Any] = {
        "n": plan.n,
        "private": [p + 1 for p in plan.private],
        "epsilon": plan.epsilon,
        "design": plan.design,
        "baseline": args.baseline,
        "split": {str(p + 1): list(plan.splits[p]) for p in plan.private} if args.baseline == "none" else None,
        "threshold": args.threshold,
        "model": {"alpha": ch.alpha, "beta": ch.beta, "initial": ch.initial.tolist(), "stationary": ch.stationary},
        "regions": plan.region_names(),
        "redaction": plan.red.tolist(),
        "utility": plan.utility,
        "leakage": {str(p + 1): lk.total for p, lk in plan.leakage.items()},
        "leakage_sides": {str(p + 1): {"left": lk.left, "right": lk.right} for p, lk in plan.leakage.items()},
    }
    if ch.stationary:
        out["dim_bound"] = {
            str(p + 1): {
                "theorem2_printed": theorem2_bound(ch, plan.n, p, plan.epsilon, corrected=False),
                "theorem2_corrected": theorem2_bound(ch, plan.n, p, plan.epsilon, corrected=True),
            }
            for p in plan.private
        }
    if brute is not None:
        out["leakage_brute"] = {str(p + 1): v for p, v in brute.items()}
    return out


def _plan_table(plan: RedactionPlan, brute: dict[int, float] | None) -> str:
    ch = plan.chain
    lines = [
        f"3R redaction plan — binary chain α={ch.alpha:g}, β={ch.beta:g}"
        f"{'' if ch.stationary else ' (non-stationary start)'}, n={plan.n}, ε={plan.epsilon:g} nats, "
        f"design={plan.design}",
        "",
        f"{'t':>8}  region  Pr(⊥|X=0)  Pr(⊥|X=1)",
    ]
    t = 0
    while t < plan.n:
        if plan.red[t].any():
            mark = "  ← private" if t in plan.private else ""
            lines.append(f"{t + 1:>8}  {plan.region_names()[t]:^6}  {plan.red[t, 0]:9.6f}  {plan.red[t, 1]:9.6f}{mark}")
            t += 1
        else:
            u = t
            while u + 1 < plan.n and not plan.red[u + 1].any():
                u += 1
            span = f"{t + 1}" if u == t else f"{t + 1}–{u + 1}"
            lines.append(f"{span:>8}  {'S':^6}  released always")
            t = u + 1
    lines += ["", f"utility ν (expected fraction released): {plan.utility:.6f}"]
    for p in plan.private:
        lk = plan.leakage[p]
        extra = f", brute force {brute[p]:.9f}" if brute is not None else ""
        split = plan.splits.get(p)
        split_s = f", split ε_ℓ={split[0]:.6g} ε_r={split[1]:.6g}" if split and not math.isnan(split[0]) else ""
        lines.append(
            f"private {p + 1}: exact leakage {lk.total:.9f} nats ≤ ε={plan.epsilon:g}"
            f" (left {lk.left:.6g}, right {lk.right:.6g}{split_s}){extra}"
        )
    lines.append("Guarantee holds under the stated Markov model; see README 'Guarantees'.")
    return "\n".join(lines)


def _brute(plan: RedactionPlan) -> dict[int, float]:
    seq = plan.channels()
    if 2**plan.n * seq.m**plan.n > MAX_WORK:
        raise CliError(f"--brute enumerates 2^n·3^n cases; n = {plan.n} is too large (n ≤ 9)")
    return {p: brute_force_leakage(plan.chain, seq, p) for p in plan.private}


def _stream_plan(args: argparse.Namespace, chain: MarkovChain) -> int:
    if args.baseline != "none" or args.brute or args.plot:
        raise CliError("--stream plans 3R only (no --baseline, --brute or --plot)")
    if args.n is not None or args.private:
        raise CliError("--stream plans by distance to any private position: no --n or --private")
    initial = None if chain.stationary else chain.initial  # --initial: the first record's law is known
    chain = MarkovChain(chain.matrix)  # the table is planned for the stationary stream
    sp = plan_stream(chain, args.epsilon, design=args.design, split=args.split, threshold=args.threshold)
    lk = sp.leakage()
    table = sp.table()
    near = start_effect(chain.matrix, sp.left.red[: sp.left_horizon], sp.left.budget, initial)
    if args.json:
        print(json.dumps({
            "stream": True, "epsilon": sp.epsilon, "design": sp.design,
            "split": [sp.left.budget, sp.right.budget],
            "model": {"alpha": chain.alpha, "beta": chain.beta},
            "left_horizon": sp.left_horizon, "right_horizon": sp.right_horizon,
            "offsets": sp.offsets().tolist(), "redaction": table.tolist(),
            "leakage": lk.total, "leakage_sides": {"left": lk.left, "right": lk.right},
            "start": near,
        }))
        return 0
    print(f"3R stream plan — binary chain α={chain.alpha:g}, β={chain.beta:g}, ε={sp.epsilon:g} nats, "
          f"design={sp.design}, split ε_ℓ={sp.left.budget:.6g} ε_r={sp.right.budget:.6g}")
    print(f"\n{'t − p':>8}  Pr(⊥|X=0)  Pr(⊥|X=1)")
    offsets = sp.offsets()
    start = 0
    for end in range(1, len(table) + 1):  # runs of identical rows are shown by their two ends
        if end < len(table) and np.array_equal(table[end], table[start]):
            continue
        run = end - start
        for i in ([start, end - 1] if run > 2 else range(start, end)):
            print(f"{int(offsets[i]):>+8}  {table[i][0]:9.6f}  {table[i][1]:9.6f}")
            if i == start and run > 2:
                print(f"{'⋮':>8}  ({run - 2} more rows equal to the rows around them)")
        start = end
    print(f"\nhorizons: left {sp.left_horizon} (release delay), right {sp.right_horizon}; farther records are released")
    print(f"exact leakage in an unbounded stream: {lk.total:.9f} nats (left {lk.left:.6g}, right {lk.right:.6g})")
    law = "the stated initial law" if initial is not None else "any initial law (a sensor may boot in a known state)"
    print(f"near the start, for {law}: marks at 0-based positions < {near['redact_to_start']} redact their left "
          f"side to the start; further on the plan's left rows leak up to {near['worst_left']:.6g} nats and the "
          f"right side gets what is left of ε; from position {near['matters_until']} on the start does not matter "
          f"(< 1e-12 nats)")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    chain = _chain(args.alpha, args.beta, args.initial)
    if not (math.isfinite(args.epsilon) and args.epsilon > 0):
        raise CliError("--epsilon must be a finite number > 0")
    if args.stream:
        return _stream_plan(args, chain)
    if not args.private:
        raise CliError("name at least one --private position (or use --stream)")
    if args.n is None or args.n < 1:
        raise CliError("--n must be a positive number of records")
    private = [p - 1 for p in args.private]
    for p in args.private:
        if not 1 <= p <= args.n:
            raise CliError(f"--private {p} is outside 1..{args.n}")
    if args.baseline == "none":
        plan = plan_redaction(chain, args.n, private, args.epsilon, design=args.design, split=args.split,
                              threshold=args.threshold)
    else:
        plan = baseline_plan(args.baseline, chain, args.n, private, args.epsilon)
    brute = _brute(plan) if args.brute else None
    if args.plot:
        from .plot import plot_plan

        plot_plan(plan, Path(args.plot))
    if args.json:
        print(json.dumps(_plan_json(plan, args, brute)))
    else:
        print(_plan_table(plan, brute))
    return 0


# -- audit --------------------------------------------------------------------------------------
def _load_channels(doc: dict[str, Any]) -> ChannelSequence:
    if "emissions" in doc:
        return ChannelSequence.from_dense(np.asarray(doc["emissions"], dtype=np.float64))
    if "redaction" in doc:
        return ChannelSequence.from_redaction(np.asarray(doc["redaction"], dtype=np.float64))
    raise CliError("emission file: needs an 'emissions' (per record: [[e(y|0)...], [e(y|1)...]]) or a 'redaction' list")


def cmd_audit(args: argparse.Namespace) -> int:
    path = Path(args.file)
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError:
        raise CliError(f"{path}: not valid JSON") from None
    if not isinstance(doc, dict):
        raise CliError(f"{path}: expected a JSON object")
    try:
        seq = _load_channels(doc)
    except (TypeError, ValueError) as exc:
        raise CliError(f"{path}: {exc}") from None
    model = doc.get("model", {}) if isinstance(doc.get("model"), dict) else {}
    alpha = args.alpha if args.alpha is not None else model.get("alpha")
    beta = args.beta if args.beta is not None else model.get("beta")
    initial = args.initial if args.initial is not None else (
        None if model.get("stationary", True) or "initial" not in model else json.dumps(model["initial"]))
    chain = _chain(alpha, beta, initial)
    private = args.private or doc.get("private") or []
    if not private:
        raise CliError("name the private positions with --private (or a 'private' list in the file)")
    results = {}
    for p1 in private:
        if not isinstance(p1, int) or not 1 <= p1 <= seq.n:
            raise CliError(f"private position {p1} is outside 1..{seq.n}")
        lk = exact_leakage(chain, seq, p1 - 1)
        entry: dict[str, float] = {"total": lk.total, "left": lk.left, "right": lk.right}
        if args.brute:
            if chain.k**seq.n * seq.m**seq.n > MAX_WORK:
                raise CliError(f"--brute: n = {seq.n} with {seq.m} outputs is too large to enumerate")
            entry["brute"] = brute_force_leakage(chain, seq, p1 - 1)
        results[str(p1)] = entry
    if args.json:
        print(json.dumps({"n": seq.n, "outputs": seq.m, "leakage": results}))
    else:
        print(f"exact leakage of {seq.n} local channels ({seq.m} outputs) under α={chain.alpha:g}, β={chain.beta:g}:")
        for p1, e in results.items():
            extra = f", brute force {e['brute']:.9f}" if "brute" in e else ""
            print(f"  private {p1}: {e['total']:.9f} nats (left {e['left']:.6g}, right {e['right']:.6g}){extra}")
    return 0


# -- config check / privatize ------------------------------------------------------------------
def _check_redaction_stream(cfg: Any) -> None:
    sp = plan_stream(cfg.chain(), cfg.epsilon, design=cfg.design, split=cfg.split)
    lk = sp.leakage()
    print(f"\nstream {cfg.name}: source {cfg.source}, states {cfg.state_map().k}, 3R redaction ε={cfg.epsilon:g}, "
          f"design {cfg.design}, split ε_ℓ={sp.left.budget:.6g} ε_r={sp.right.budget:.6g}")
    print("  redaction by t − p: " + ", ".join(
        f"{int(d):+d}:({r[0]:.4f},{r[1]:.4f})" for d, r in zip(sp.offsets(), sp.table())))
    delay = sp.left_horizon if cfg.delay is None else cfg.delay
    print(f"  horizons left {sp.left_horizon} / right {sp.right_horizon}; release delay {delay} records"
          f"{f', max hold {cfg.max_hold:g} s' if cfg.max_hold else ''}; exact leakage {lk.total:.6f} nats")
    if delay < sp.left_horizon:
        print(f"  warning: delay {delay} < left horizon {sp.left_horizon}: marks on the newest record will be late")
    initial = None if cfg.model.initial is None else np.array(cfg.model.initial)
    near = start_effect(sp.chain.matrix, sp.left.red[: sp.left_horizon], sp.left.budget, initial)
    print(f"  start of the stream ({'stated initial law' if initial is not None else 'any initial law'}): marks "
          f"before position {near['redact_to_start']} redact their left side to the start; the start matters "
          f"until position {near['matters_until']} (also after every restart)")
    steps = (f"steps are {cfg.sample_period:g} s slots" if cfg.sample_period else
             "steps are distinct timestamps (frames without ts cannot be recognised as redeliveries)")
    print(f"  {steps}")


def _check_channel_stream(cfg: Any) -> None:
    from .perturbation.stream_leakage import stream_leakage_report
    from .stream.channel_runtime import build_channel

    channel, _ = build_channel(cfg.channel, cfg.state_map().k)  # designed / loaded and verified exactly
    claims = ", ".join(f"{c.notion} {c.params}" for c in channel.claims)
    print(f"\nstream {cfg.name}: source {cfg.source}, states {cfg.state_map().k}, per-record channel "
          f"{channel.kind} ({channel.n_y} outputs), verified claims: {claims}")
    if channel.inputs == "x":
        leak = stream_leakage_report(channel, cfg.chain())
        kind = "a lower bound (window of " + str(leak["n"]) + ")" if leak["lower_bound"] else "exact"
        print(f"  leakage about one record of the whole stream under the model: {leak['leakage']} nats ({kind})")


def _aggregate_lines(cfg: Any) -> list[str]:
    from .stream.aggregates import stream_scale
    from .quilt import QuiltModel

    if not cfg.aggregates:
        return []
    out = []
    chain = cfg.chain()
    for a in cfg.aggregates:
        sc = stream_scale(QuiltModel([chain], a.influence), a.epsilon)
        w = sc.witness
        lipschitz = {"histogram": 2.0, "count": 1.0}.get(a.query)
        noise = (f"noise ±{math.sqrt(2) * lipschitz * sc.sigma:.3g} (std) per value" if lipschitz is not None
                 else f"noise ±{math.sqrt(2) * (max(a.values or [0]) - min(a.values or [0])) * sc.sigma / a.window:.3g} "
                      "(std) on the mean")
        out.append(f"  aggregate {a.query} every {a.window} positions: ε={a.epsilon:g} ({a.influence}), "
                   f"σ_∞={sc.sigma:.6g}, witness quilt a={w.a} b={w.b} card={w.card} e={w.e:.4f}; {noise}")
    out.append(f"  aggregate budget (quilt accountant): {cfg.total_aggregate_budget():g}")
    return out


def cmd_config_check(args: argparse.Namespace) -> int:
    import contextlib
    import io

    from .config import load_settings

    for file in args.files:
        settings = load_settings(Path(file))
        report = io.StringIO()
        with contextlib.redirect_stdout(report):  # printed only once every stream checked out
            for cfg in settings.streams:
                if cfg.mechanism == "channel":
                    _check_channel_stream(cfg)
                else:
                    _check_redaction_stream(cfg)
                for q in _aggregate_lines(cfg):
                    print(q)
                if cfg.schedule:
                    print("  schedule: " + ", ".join(f"{w.start:%H:%M}–{w.end:%H:%M}" for w in cfg.schedule))
        print(f"{file}: valid — device {settings.device}, broker {settings.broker.host}:{settings.broker.port}"
              f"{' (TLS)' if settings.broker.tls else ''}, outbox {settings.outbox.path}, "
              f"ledger {settings.ledger_path()}")
        if settings.deterministic_seed is not None:
            print("  WARNING: deterministic_seed is set: seeded randomness, for tests only (not private "
                  "against anyone who knows the seed)")
        print(report.getvalue(), end="")
    return 0


def cmd_privatize(args: argparse.Namespace) -> int:
    import time

    from .config import load_settings
    from .sampling import bit_source
    from .stream.runtime import make_runtime

    settings = load_settings(Path(args.config))
    names = [s.name for s in settings.streams]
    name = args.stream or names[0]
    if name not in names:
        raise CliError(f"--stream {name}: not in the configuration (streams: {', '.join(names)})")
    idx = names.index(name)
    rt = make_runtime(settings, settings.streams[idx], bit_source(settings.deterministic_seed, idx))
    out = sys.stdout
    for line in sys.stdin.buffer:
        data = line.rstrip(b"\r\n")
        if not data:
            continue
        releases, _ = rt.on_frame(data, time.time())
        for r in releases:
            out.write(rt.payload(r).decode() + "\n")
    for r in rt.drain():
        out.write(rt.payload(r).decode() + "\n")
    out.flush()
    c = rt.counters
    rejected = ", ".join(f"{k} {v}" for k, v in sorted(c.rejected.items())) or "none"
    print(f"streamguard: {c.accepted} accepted, {c.released} released, {c.redacted} redacted; rejected: {rejected}",
          file=sys.stderr)
    return 0


# -- run / demo ---------------------------------------------------------------------------------
def _setup_logging(level: str) -> None:
    import logging

    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


_FOREVER = 1e9  # seconds: a simulated source runs until the daemon stops


def _sim_source(settings: Any) -> Any:
    """In-process simulated devices for the ``source = "sim"`` streams (real-time frames)."""
    import time

    from firmware_sim import Labels, NumericRanges, SimDevice, SimStream

    sims = [c for c in settings.streams if c.source == "sim"]
    if not sims:
        return None
    device = SimDevice(settings.device, [
        SimStream(c.name, c.chain(), rate=c.sim_rate, seed=i,
                  emission=Labels(tuple(c.labels)) if c.labels is not None else
                  NumericRanges(tuple(zip(c.bins[:-1], c.bins[1:]))))
        for i, c in enumerate(sims)
    ], start=time.time())

    async def frames() -> Any:
        async for f in device.run(duration=_FOREVER):
            if f.meta.channel == "raw":
                yield f.stream, f.payload

    return frames


def cmd_run(args: argparse.Namespace) -> int:
    import asyncio
    import signal

    from .config import load_settings
    from .stream.daemon import Daemon, stdin_frames
    from .stream.outbox import InUse

    settings = load_settings(Path(args.config))
    _setup_logging(settings.log_level)
    sources = []
    for cfg in settings.streams:
        if cfg.source == "stdin":
            sources.append(lambda name=cfg.name: stdin_frames(name))
    sim = _sim_source(settings)
    if sim is not None:
        sources.append(sim)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None

        def on_signal() -> None:  # the first stops in order (bounded); a second one cuts it short
            if stop.is_set():
                task.cancel()
            stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        await Daemon(settings, extra_sources=sources).run(stop)

    try:
        asyncio.run(main())
    except InUse as exc:  # another daemon holds the outbox, the ledger or the MQTT identity
        print(f"streamguard: {exc}", file=sys.stderr)
        return EXIT_IN_USE
    except asyncio.CancelledError:  # a second SIGTERM/SIGINT
        print("streamguard: stopped by a second signal before the shutdown finished", file=sys.stderr)
        return 1
    return 0


def _broker_arg(text: str) -> tuple[str, int]:
    from .loopback import is_loopback

    host, _, port = text.rpartition(":")
    try:
        host, number = host or "127.0.0.1", int(port)
    except ValueError:
        raise argparse.ArgumentTypeError("expected HOST:PORT") from None
    if not is_loopback(host):
        raise argparse.ArgumentTypeError("the demo sends raw readings through its broker: use one on this "
                                         "machine (localhost or a loopback address)")
    return host, number


def cmd_demo(args: argparse.Namespace) -> int:
    import asyncio

    from .demo.run import run_demo

    _setup_logging("WARNING")
    if args.duration <= 0 or args.rate <= 0:
        raise CliError("--duration and --rate must be positive")
    if args.broker is not None:
        from .loopback import accepts

        host, port = args.broker
        if not accepts(port, timeout=2.0, host=host):
            raise CliError(f"--broker {host}:{port}: nothing accepts connections there")
    return asyncio.run(run_demo(args.duration, args.rate, args.seed, args.broker, sys.stdout))


# -- parser -------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streamguard",
        description="Privatize correlated sensor streams under a Markov model: 3R redaction plans and "
        "their exact audit, Markov Quilt noisy aggregates, per-record perturbation channels, the "
        "privacy ledger, and the daemon. Positions are 1-based in plan, audit and mqm (as in the "
        "papers) and 0-based in the daemon and its ledger.",
    )
    parser.add_argument("--version", action="version", version=f"streamguard {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    model = argparse.ArgumentParser(add_help=False)
    model.add_argument("--alpha", type=float, help="P(0→1) of the binary chain, in (0, 1)")
    model.add_argument("--beta", type=float, help="P(1→0) of the binary chain, in (0, 1)")
    model.add_argument("--initial", help='law of the first record as JSON, e.g. "[0.5, 0.5]" (default: stationary)')

    p = sub.add_parser("plan", parents=[model], help="design a redaction plan for private positions",
                       description="Design 3R redaction (paper 000, corrected) or a baseline for a binary "
                       "Markov chain of n records and report its exact leakage and utility.")
    p.add_argument("--epsilon", type=float, required=True, help="privacy budget ε in nats (> 0)")
    p.add_argument("--n", type=int, help="number of records (not with --stream)")
    p.add_argument("--private", type=int, action="append",
                   help="a private position (1-based); repeat for several")
    p.add_argument("--stream", action="store_true",
                   help="plan an unbounded stationary stream: a table by signed distance t − p")
    p.add_argument("--design", choices=DESIGNS, default="optimal",
                   help="q design: paper (common q), optimal (convex-relaxation optimum), "
                   "exact (smallest q by exact leakage); default optimal")
    p.add_argument("--split", type=_split_arg, default="even",
                   help="budget split: even, optimize, or the left budget ε_ℓ (ε_r = ε − ε_ℓ); default even")
    p.add_argument("--threshold", type=_threshold_arg, default=None,
                   help="region threshold ε' as a fraction of each side's budget, or optimize (notes/000 §7.8)")
    p.add_argument("--baseline", choices=("none",) + BASELINES, default="none",
                   help="plan a data-independent baseline instead of 3R")
    p.add_argument("--brute", action="store_true", help="also compute the leakage by brute force (n ≤ 9)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", metavar="FILE.png", help="draw influences, thresholds and regions (needs matplotlib)")
    p.set_defaults(func=cmd_plan)

    a = sub.add_parser("audit", parents=[model], help="exact leakage of given emission tables",
                       description="Exact LDP leakage about private positions of any sequence of local "
                       "channels under a binary Markov chain. FILE is JSON with 'emissions' (per record "
                       "[[e(y|0),...],[e(y|1),...]]) or 'redaction' ([Pr(⊥|0), Pr(⊥|1)] per record); "
                       "the output of 'plan --json' is accepted as is, model included.")
    a.add_argument("file", help="JSON emission file")
    a.add_argument("--private", type=int, action="append", help="a private position (1-based); repeat")
    a.add_argument("--brute", action="store_true", help="also enumerate by brute force (small n)")
    a.add_argument("--json", action="store_true", help="print one JSON object")
    a.set_defaults(func=cmd_audit)

    c = sub.add_parser("config", help="configuration tools")
    csub = c.add_subparsers(dest="config_command", required=True)
    chk = csub.add_parser("check", help="validate config files and print what each stream implies (plans, "
                                        "channels and their verified claims, aggregate noise scales)")
    chk.add_argument("files", nargs="+", metavar="FILE", help="TOML configuration")
    chk.set_defaults(func=cmd_config_check)

    pz = sub.add_parser("privatize", help="batch mode: raw JSON lines on stdin → sanitized JSON lines on stdout",
                        description="Privatize raw frames (one JSON object per line) with the same core as the "
                        "daemon; counts go to stderr, sanitized records to stdout.")
    pz.add_argument("--config", required=True, help="TOML configuration")
    pz.add_argument("--stream", help="which configured stream the frames belong to (default: the first)")
    pz.set_defaults(func=cmd_privatize)

    r = sub.add_parser("run", help="run the daemon", description="Run the privatizing daemon until SIGTERM/SIGINT: "
                       "raw frames in (MQTT, stdin or simulated), sanitized records out over MQTT. The first "
                       "signal stops in order within 20 s; a second one cuts the shutdown short (exit status 1). "
                       f"Exit status {EXIT_IN_USE} (EX_TEMPFAIL): another streamguard holds the outbox or the "
                       "ledger (at start) or took over the MQTT client id.")
    r.add_argument("--config", required=True, help="TOML configuration (see examples/streamguard.toml)")
    r.set_defaults(func=cmd_run)

    d = sub.add_parser("demo", help="the whole pipeline on this machine, watched live",
                       description="Start an embedded MQTT broker (or use --broker), simulated devices, the "
                       "daemon and a subscriber; show records, redactions, marks and leakage live; then "
                       "check the output against the simulator's ground truth and print a summary.")
    d.add_argument("--duration", type=float, default=10.0, help="seconds to run (default 10)")
    d.add_argument("--rate", type=float, default=20.0, help="frames per second per stream (default 20)")
    d.add_argument("--seed", type=int, default=1, help="simulator seed (the privatizer always uses the CSPRNG)")
    d.add_argument("--broker", type=_broker_arg, help="use this MQTT broker (HOST:PORT, loopback) instead of "
                   "the embedded one")
    d.set_defaults(func=cmd_demo)
    cli_mqm.register(sub)
    cli_ledger.register(sub)
    cli_mechanism.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except BrokenPipeError:  # e.g. piped into `head`
        sys.stderr.close()
        return 0
    except (CliError, ModelError, ChannelError, ValueError, OSError) as exc:
        print(f"streamguard: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
