"""``streamguard mqm``: Markov Quilt Mechanism noise scales and windowed aggregate releases.

    streamguard mqm --matrix "[[0.9,0.1],[0.2,0.8]]" --epsilon E (--T N | --stream)
                    [--influence stat|supq|q|approx|approx-rev] [--initial "[...]"] [--json]
    streamguard mqm --matrix ... --epsilon E --release histogram|count|mean --window W [...] < states

The first form prints the 1-Lipschitz noise scale σ (σ_max(T) for a chain of N records, or the
length-independent σ_∞ / σ̄_supq for a stream) with the active quilt that fixes it (notes/002 §3).
``--matrix`` may repeat: Θ is the set of chains and every number is the worst case over Θ.

The second form reads states from stdin (one integer per line, or JSON lines ``{"state": ..}``),
releases tumbling windows of W records with σ_∞ (σ̄_supq for ``supq``; σ_max(T) when ``--T`` is
given), and prints one JSON line per window and a final summary with the quilt accountant's ε_max
(notes/002 §4.7). A trailing partial window is not released. Noise comes from the OS CSPRNG unless
``--seed`` is given (deterministic mode, flagged in every line).

Positions in the output are 1-based, like the rest of the CLI. Errors are one line naming the
problem (never a data value), exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from ..privacy.budget import check_budget
from ..model.chain import MarkovChain
from ..quilt import MODES, QuiltModel, Scale, sigma_inf, sigma_max, sigma_supq
from ..quilt import release as aggregate
from ..quilt.accountant import QuiltAccountant
from ..quilt.release import AggregateRelease
from ..sampling import BitSource, bit_source


class MqmArgumentError(ValueError):
    """A bad ``mqm`` argument or input line (reported as one line, exit 2)."""


def register(subparsers: Any) -> None:
    """Add the ``mqm`` subcommand to the CLI's subparsers."""
    m = subparsers.add_parser(
        "mqm", help="Markov Quilt Mechanism: noise scale, or noisy windowed aggregates of stdin",
        description="Markov Quilt Mechanism (notes/002): print the noise scale σ with its active quilt, "
        "or (--release) read states from stdin and publish noisy tumbling-window aggregates.")
    m.add_argument("--matrix", action="append",
                   help='transition matrix as JSON, e.g. "[[0.9,0.1],[0.2,0.8]]"; repeat for a set Θ')
    m.add_argument("--model", metavar="MODEL.json",
                   help="Θ = the members of a finite model set (adds to --matrix); a calibrated region is refused")
    m.add_argument("--epsilon", type=float, required=True, help="privacy target ε in nats, 0 < ε ≤ 1000")
    length = m.add_mutually_exclusive_group()
    length.add_argument("--T", type=int, help="chain length N: σ_max(N) (with --release: at most N records)")
    length.add_argument("--stream", action="store_true", help="stream of unknown length: σ_∞ (σ̄_supq for supq)")
    m.add_argument("--influence", choices=MODES, default=None,
                   help="max-influence mode (default: q with --initial, else stat)")
    m.add_argument("--initial", help='law of the first record as JSON (mode q only), e.g. "[0.5,0.5]"')
    m.add_argument("--json", action="store_true", help="print one JSON object (scale form)")
    m.add_argument("--release", choices=aggregate.KINDS, help="release noisy aggregates of the states on stdin")
    m.add_argument("--window", type=int, help="records per tumbling window (with --release)")
    m.add_argument("--state", type=int, help="the state counted by --release count (0-based)")
    m.add_argument("--values", help="per-state values for --release mean, as JSON, e.g. \"[0, 2.5, 10]\"")
    m.add_argument("--v-lo", type=float, dest="v_lo", help="lower bound of the values (--release mean)")
    m.add_argument("--v-hi", type=float, dest="v_hi", help="upper bound of the values (--release mean)")
    m.add_argument("--step", type=float, help="grid step of the released mean's values (--release mean)")
    m.add_argument("--clip", action="store_true", help="clip outputs to their range (post-processing)")
    m.add_argument("--seed", type=int, help="deterministic noise for tests and demos (NOT private); flagged")
    m.set_defaults(func=cmd_mqm)


# ------------------------------------------------------------------------------------ model


def _json_arg(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise MqmArgumentError(f"{what}: not valid JSON") from None


def _model_set_members(path: str, initial: Any) -> list[MarkovChain]:
    """Θ from a finite model set (MODEL.json). A region (a calibrated box or row-wise set) is not a
    finite Θ, and the max-influence over a continuum is not certified here: refused."""
    from ..model import modelset

    try:
        ms = modelset.load(Path(path))
    except (OSError, ValueError) as exc:
        raise MqmArgumentError(f"--model: {exc}") from None
    if ms.kind != "finite":
        raise MqmArgumentError(f"--model: a {ms.kind} region is not a finite Θ; the MQM needs a finite set of "
                               "chains (give its corners or members with --matrix, knowing that a corner "
                               "maximum is not certified over the region)")
    try:
        return [MarkovChain(m.matrix, initial) for m in ms.members]
    except ValueError as exc:
        raise MqmArgumentError(f"--model: {exc}") from None


def _model(args: argparse.Namespace) -> QuiltModel:
    try:
        check_budget(args.epsilon, "--epsilon")
    except ValueError as exc:
        raise MqmArgumentError(str(exc)) from None
    mode = args.influence or ("q" if args.initial is not None else "stat")
    initial = None if args.initial is None else _json_arg(args.initial, "--initial")
    chains = [] if args.model is None else _model_set_members(args.model, initial if mode == "q" else None)
    if not chains and not args.matrix:
        raise MqmArgumentError("give Θ: --matrix (repeatable) or --model MODEL.json")
    for n, text in enumerate(args.matrix or [], start=1):
        matrix = _json_arg(text, f"--matrix #{n}")
        try:
            chains.append(MarkovChain(matrix, initial if mode == "q" else None))
        except ValueError as exc:
            raise MqmArgumentError(f"--matrix #{n}: {exc}") from None
    return QuiltModel(chains, mode, None if mode == "q" else initial)


def _scale(model: QuiltModel, args: argparse.Namespace) -> Scale:
    if args.T is not None:
        if args.T < 1:
            raise MqmArgumentError("--T must be a positive number of records")
        return sigma_max(model, args.epsilon, args.T)
    if model.mode == "q":
        raise MqmArgumentError("mode q (a fixed initial law) has no length-independent σ: give --T, or use supq")
    return sigma_supq(model, args.epsilon) if model.mode == "supq" else sigma_inf(model, args.epsilon)


def _scale_json(model: QuiltModel, scale: Scale) -> dict[str, Any]:
    return {**scale.as_dict(), "model": model.identifier, "description": model.describe()}


# ------------------------------------------------------------------------------------ command


def cmd_mqm(args: argparse.Namespace) -> int:
    model = _model(args)
    if args.release is None:
        if args.T is None and not args.stream:
            raise MqmArgumentError("give --T N (a chain of N records) or --stream (unknown length)")
        _reject_release_options(args)
        scale = _scale(model, args)
        if args.json:
            print(json.dumps(_scale_json(model, scale)))
        else:
            _print_scale(model, scale)
        return 0
    return _release_stream(model, args, sys.stdin)


def _reject_release_options(args: argparse.Namespace) -> None:
    for name in ("window", "state", "values", "v_lo", "v_hi", "step", "seed"):
        if getattr(args, name) is not None:
            raise MqmArgumentError(f"--{name.replace('_', '-')} needs --release")


def _print_scale(model: QuiltModel, scale: Scale) -> None:
    w = scale.witness
    length = f"T = {scale.T}" if scale.T is not None else "any length (stream)"
    print(f"MQM noise scale — Θ: {len(model.chains)} chain(s), k = {model.k}, mode {model.mode}, "
          f"model {model.identifier}")
    print(f"ε = {scale.epsilon:g} nats, {length}")
    print(f"σ = {scale.sigma:.6f}  (a 1-Lipschitz query gets Laplace scale σ; an L-Lipschitz one L·σ)")
    side = {None: "⊥"}
    print(f"active quilt: chain #{w.theta}, node i = {w.i}, a = {side.get(w.a, w.a)}, b = {side.get(w.b, w.b)}, "
          f"card(N) = {w.card}, e = {w.e:.6f}")


# ------------------------------------------------------------------------------------ release


def _states(stream: TextIO, k: int) -> Iterator[int]:
    """States from stdin lines; errors name the line number, never its content."""
    for n, line in enumerate(stream, start=1):
        text = line.strip()
        if not text:
            continue
        state: Any
        if text.startswith("{"):
            try:
                doc = json.loads(text)
            except json.JSONDecodeError:
                raise MqmArgumentError(f"stdin line {n}: not valid JSON") from None
            state = doc.get("state") if isinstance(doc, dict) else None
            if isinstance(state, bool) or not isinstance(state, int):
                raise MqmArgumentError(f'stdin line {n}: needs an integer "state"')
        else:
            try:
                state = int(text)
            except ValueError:
                raise MqmArgumentError(f"stdin line {n}: not an integer state") from None
        if not 0 <= state < k:
            raise MqmArgumentError(f"stdin line {n}: state outside 0..{k - 1}")
        yield state


def _release_stream(model: QuiltModel, args: argparse.Namespace, stream: TextIO) -> int:
    if args.window is None or args.window < 1:
        raise MqmArgumentError("--release needs --window W (records per window, ≥ 1)")
    if args.json:
        raise MqmArgumentError("--release always prints JSON lines; drop --json")
    if args.T is not None and args.window > args.T:
        raise MqmArgumentError(f"--window {args.window} is longer than --T {args.T}")
    if model.mode == "q":
        raise MqmArgumentError("--release needs the quilt accountant, which does not support mode q (a fixed "
                               "initial law): use stat, supq, approx or approx-rev")
    scale = _scale(model, args)
    source = bit_source(args.seed)
    publish = _publisher(model, scale, source, args)
    accountant = QuiltAccountant(model)
    window: list[int] = []
    released = records = 0
    for state in _states(stream, model.k):
        records += 1
        if args.T is not None and records > args.T:
            raise MqmArgumentError(f"more than --T {args.T} records on stdin: σ_max(T) does not cover record {records}")
        window.append(state)
        if len(window) == args.window:
            lo = records - args.window
            rel = publish(window, lo)
            accountant.record(rel.lo, rel.hi, rel.load)  # recorded before it is printed
            doc = rel.to_json()
            doc["lo"], doc["hi"] = rel.lo + 1, rel.hi + 1  # the CLI speaks 1-based positions
            doc["window"] = [rel.lo + 1, rel.hi + 1]
            print(json.dumps(doc), flush=True)
            released += 1
            window = []
    print(json.dumps({
        "summary": True, "records": records, "windows": released, "unreleased_tail": len(window),
        "epsilon": scale.epsilon, "sigma": scale.sigma, "eps_max": accountant.eps_max(),
        "model": model.identifier, "mode": model.mode, "t_independent": scale.t_independent,
        "deterministic": bool(source.deterministic),
    }))
    return 0


def _publisher(
    model: QuiltModel, scale: Scale, source: BitSource, args: argparse.Namespace
) -> Callable[[list[int], int], AggregateRelease]:
    """publish(window states, first position) for ``--release``, its query options checked up front."""
    kind = args.release
    used = {"state": kind == "count", "values": kind == "mean", "v_lo": kind == "mean",
            "v_hi": kind == "mean", "step": kind == "mean"}
    for name, wanted in used.items():
        flag = f"--{name.replace('_', '-')}"
        if wanted and getattr(args, name) is None:
            raise MqmArgumentError(f"--release {kind} needs {flag}")
        if not wanted and getattr(args, name) is not None:
            raise MqmArgumentError(f"{flag} does not apply to --release {kind}")
    k, clip = model.k, args.clip
    if kind == "histogram":
        return lambda w, lo: aggregate.histogram(w, lo, model, scale, source, clip=clip)
    if kind == "count":
        if not 0 <= args.state < k:
            raise MqmArgumentError(f"--state must be one of 0..{k - 1}")
        return lambda w, lo: aggregate.count(w, lo, args.state, model, scale, source, clip=clip)
    values = _json_arg(args.values, "--values")
    if not isinstance(values, list) or len(values) != k:
        raise MqmArgumentError(f"--values must be a JSON list of {k} numbers (one per state)")
    aggregate.quantise_values(values, args.v_lo, args.v_hi, args.step)  # validate before any input is read
    return lambda w, lo: aggregate.mean(w, lo, values, args.v_lo, args.v_hi, args.step, model, scale, source,
                                        clip=clip)
