"""``streamguard config check``: validate configuration files and print what each stream implies —
its model (estimated ones too), plan or channel, aggregates and schedule — with a warning line for
each setting that will not do what it seems to: a ``max_hold`` shorter than ``delay + 1`` frame
intervals, a channel stream that leaks more than its per-record ε, an aggregate whose noise is large
against its window. A redaction stream whose plan's exact leakage exceeds ε is refused (exit 78,
as ``run`` refuses it), never warned about. Numbers are printed to 4–6 significant digits; long
tables are folded."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import numpy as np

from ..audit.start import start_effect
from ..model.krobust import robust_plan_for
from ..redaction.kplan import stream_plan_for
from ..stream.hass import mark_cost
from .common import EXIT_CONFIG, stream_plan

#: A redaction table by t − p prints at most this many runs of equal rows (first and last half).
FOLD_RUNS = 8
#: An aggregate's noise std above this fraction of its range (the window for counts, the value
#: span for means) is warned about.
NOISY_FRACTION = 0.25


def _num(x: float, digits: int = 4) -> str:
    return f"{x:.{digits}g}"


def _model_line(cfg: Any) -> str:
    chain = cfg.chain()
    m = cfg.model
    if chain.is_binary:
        text = f"binary chain α={_num(chain.alpha)}, β={_num(chain.beta)}"
    else:
        text = "matrix " + "; ".join(" ".join(_num(v, 3) for v in row) for row in chain.matrix)
    source = (f"estimated from {m.calibration}" if m.calibration is not None else
              f"the point estimate of {m.file}" if m.file is not None else "as given")
    start = ("first reading's law " + " ".join(_num(v, 3) for v in m.initial) if m.initial is not None
             else "any law of the first reading")
    return f"  model ({source}): {text}; {start}"


def fold_rows(offsets: np.ndarray, rows: np.ndarray, limit: int = FOLD_RUNS) -> str:
    """``−7…−4 (0.9857, 1), −3…+3 (1, 1), …``: runs of equal rows; past ``limit`` runs the middle
    ones are left out (their count is said)."""
    runs: list[str] = []
    start = 0
    for i in range(1, len(offsets) + 1):
        if i == len(offsets) or not np.array_equal(rows[i], rows[start]):
            span = f"{int(offsets[start]):+d}" if i - 1 == start else f"{int(offsets[start]):+d}…{int(offsets[i - 1]):+d}"
            runs.append(f"{span} ({', '.join(_num(v) for v in rows[start])})")
            start = i
    if len(runs) > limit:
        half = limit // 2
        runs = runs[:half] + [f"… {len(runs) - 2 * half} more runs …"] + runs[-half:]
    return ", ".join(runs)


def frame_interval(cfg: Any) -> float | None:
    """Seconds between frames when the config says (sample_period, or a simulated source's rate)."""
    if cfg.sample_period:
        return float(cfg.sample_period)
    if cfg.source == "sim":
        return 1.0 / cfg.sim_rate
    return None


def max_hold_warning(cfg: Any, delay: int) -> str | None:
    """A ``max_hold`` that releases records before ``delay`` later frames can have arrived."""
    period = frame_interval(cfg)
    if cfg.max_hold is None or period is None:
        return None
    need = (delay + 1) * period
    if cfg.max_hold >= need:
        return None
    return (f"max_hold {_num(cfg.max_hold)} s cannot cover delay + 1 = {delay + 1} frame intervals of "
            f"{_num(period)} s ({_num(need)} s): a record may leave before the {delay} records after it "
            "arrive, and a mark on one of those then comes late for it (raise max_hold)")


def _model_set_line(ms: Any, wc: Any) -> str:
    """The region and the plan's certified worst case over it, with the attaining member."""
    if ms.setchain is not None:
        head = (f"  model set (finite: the scenarios of a time-of-day set-chain — {len(ms.members) - 1} recorded "
                "days' chains and the pooled one, docs/time-varying.md §7): ")
    elif ms.confidence is None:
        head = f"  model set ({ms.kind}, {len(ms.members)} chains): "
    else:
        head = f"  model set ({ms.kind}, confidence {_num(ms.confidence)}): "
    if ms.kind == "finite" and not ms.is_binary:
        region = f"{len(ms.members)} chains"
        member = "P with rows " + " ".join("(" + ", ".join(_num(v, 4) for v in row) + ")" for row in wc.matrix)
    elif ms.is_binary:
        (a0, a1), (b0, b1) = ms.alpha_range(), ms.beta_range()
        region = f"α ∈ [{_num(a0, 6)}, {_num(a1, 6)}], β ∈ [{_num(b0, 6)}, {_num(b1, 6)}]"
        member = f"α={_num(wc.member[0], 6)}, β={_num(wc.member[1], 6)}"
    else:
        b = ms.bounds
        region = "P[i][j] ∈ " + "; ".join(
            f"row {i}: " + ", ".join(f"[{_num(b[i, j, 0], 4)}, {_num(b[i, j, 1], 4)}]" for j in range(ms.k))
            for i in range(ms.k))
        member = "P with rows " + " ".join("(" + ", ".join(_num(v, 4) for v in row) + ")" for row in wc.matrix)
    if ms.setchain is not None and wc.bound > wc.attained:  # the time-of-day scenario is the worst (robust.py)
        return (f"{head}{region}; the plan's worst case ≤ {_num(wc.bound, 6)} nats under the time-of-day "
                f"scenario (its worst position of the day; exact), {_num(wc.attained, 6)} under the worst member "
                f"{member}; the figures below are under that member")
    return (f"{head}{region}; the plan's worst case over it ≤ {_num(wc.bound, 6)} nats (certified; attained "
            f"{_num(wc.attained, 6)} at {member}); the figures below are under that member")


def _check_redaction_stream(cfg: Any) -> list[str]:
    from ..stream.redaction_runtime import checked_stream_plan

    ms = cfg.model_set()
    robust = None if ms is None else robust_plan_for(ms, cfg.epsilon, design=cfg.design, split=cfg.split)
    chain = cfg.chain()

    def build() -> Any:
        if robust is not None:
            return robust.evaluation_plan()
        if chain.is_binary:
            return stream_plan(chain, cfg.epsilon, cfg.design, cfg.split, label=f"stream {cfg.name}: ")
        return stream_plan_for(chain, cfg.epsilon, design=cfg.design, split=cfg.split)  # k states

    # a plan over ε is refused here as in run (exit 78, one line naming the stream)
    sp, lk = checked_stream_plan(cfg.name, cfg.epsilon, build, lambda plan: plan.leakage())
    print(f"\nstream {cfg.name}: source {cfg.source}, states {cfg.state_map().k}, 3R redaction "
          f"ε={_num(cfg.epsilon, 6)}, design {sp.design}, split ε_ℓ={_num(sp.left.budget, 6)} "
          f"ε_r={_num(sp.right.budget, 6)}")
    print(_model_line(cfg))
    if robust is not None:
        print(_model_set_line(robust.model_set, robust.worst))
    print("  redaction (Pr(⊥|x) for each state x) by t − p: " + fold_rows(sp.offsets(), sp.table()))
    delay = sp.left_horizon if cfg.delay is None else cfg.delay
    print(f"  horizons left {sp.left_horizon} / right {sp.right_horizon}; release delay {delay} records"
          f"{f', max hold {_num(cfg.max_hold)} s' if cfg.max_hold else ''}; exact leakage {lk.total:.6f} nats")
    warnings = []
    if delay < sp.left_horizon:
        warnings.append(f"delay {delay} < left horizon {sp.left_horizon}: marks on the newest record will be late")
    hold = max_hold_warning(cfg, delay)
    if hold is not None:
        warnings.append(hold)
    initial = None if cfg.model.initial is None else np.array(cfg.model.initial)
    near = start_effect(sp.chain.matrix, sp.left.red[: sp.left_horizon], sp.left.budget, initial)
    print(f"  start of the stream ({'stated initial law' if initial is not None else 'any initial law'}): marks "
          f"before position {near['redact_to_start']} redact their left side to the start; the start matters "
          f"until position {near['matters_until']} (also after every restart)")
    steps = (f"steps are {_num(cfg.sample_period)} s slots" if cfg.sample_period else
             "steps are distinct timestamps (frames without ts cannot be recognised as redeliveries)")
    print(f"  {steps}")
    cost, minutes = mark_cost(sp.left_horizon, sp.right_horizon, cfg.sample_period)
    print(f"  a mark costs up to {cost} records around it ({sp.left_horizon} before, {sp.right_horizon} after)"
          + ("" if minutes is None else f": {_num(minutes)} min of unknown; each record is released "
             f"{_num(round(delay * cfg.sample_period / 60.0, 2))} min after its step"))
    return warnings


def _claim_text(claim: Any) -> str:
    params = ", ".join(f"{'ε' if k == 'epsilon' else k}={_num(float(v))}" for k, v in claim.params.items())
    return f"{claim.notion} {params}"


def _check_channel_stream(cfg: Any) -> list[str]:
    from ..perturbation.stream_leakage import stream_leakage_report
    from ..stream.channel_runtime import build_channel

    channel, _ = build_channel(cfg.channel, cfg.state_map().k)  # designed / loaded and verified exactly
    claims = "; ".join(_claim_text(c) for c in channel.claims)
    print(f"\nstream {cfg.name}: source {cfg.source}, states {cfg.state_map().k}, per-record channel "
          f"{channel.kind} ({channel.n_y} outputs), verified claims: {claims}")
    print(_model_line(cfg))
    warnings = []
    if channel.inputs == "x":
        leak = stream_leakage_report(channel, cfg.model_chains())
        kind = f"a lower bound, window of {leak['n']}" if leak["lower_bound"] else "exact"
        print(f"  leakage about one record of the whole stream under the model: {_num(leak['leakage'], 6)} nats "
              f"({kind})")
        per_record = [float(c.params["epsilon"]) for c in channel.claims if "epsilon" in c.params]
        eps = cfg.channel.epsilon if cfg.channel.epsilon is not None else (max(per_record) if per_record else None)
        if eps is not None and leak["leakage"] > eps:
            warnings.append(f"the whole stream leaks {_num(leak['leakage'])} nats about one record, more than "
                            f"the per-record ε={_num(eps)}: correlated records add up; the per-record ε is not "
                            "the stream's guarantee")
    print('  private flags withhold only the flagged record (not its correlated neighbours; each one is logged): '
          'use mechanism = "redaction" for private positions')
    return warnings


def _aggregate_lines(cfg: Any) -> tuple[list[str], list[str]]:
    from ..quilt import QuiltModel
    from ..stream.aggregates import stream_scale

    if not cfg.aggregates:
        return [], []
    out, warnings = [], []
    chains = cfg.model_chains()
    for a in cfg.aggregates:
        sc = stream_scale(QuiltModel(chains, a.influence), a.epsilon)
        w = sc.witness
        lipschitz = {"histogram": 2.0, "count": 1.0}.get(a.query)
        if lipschitz is not None:
            std, span, unit = math.sqrt(2) * lipschitz * sc.sigma, float(a.window), "per value"
        else:
            span = max(a.values or [0]) - min(a.values or [0])
            std, unit = math.sqrt(2) * span * sc.sigma / a.window, "on the mean"
        share = std / span if span > 0 else math.inf
        out.append(f"  aggregate {a.query} every {a.window} positions: ε={_num(a.epsilon)} ({a.influence}), "
                   f"σ_∞={_num(sc.sigma, 6)}, witness quilt a={w.a} b={w.b} card={w.card} e={w.e:.4f}; noise "
                   f"±{_num(std, 3)} (std) {unit}, {_num(100 * share, 2)}% of its range")
        if share > NOISY_FRACTION:
            what = f"the window of {a.window} positions" if lipschitz is not None else f"the value span {_num(span)}"
            warnings.append(f"aggregate {a.query}: noise ±{_num(std, 3)} (std) is large against {what} "
                            "(a longer window or a larger ε helps)")
    out.append(f"  aggregate budget (quilt accountant): {_num(cfg.total_aggregate_budget(), 6)}")
    return out, warnings


def _ingest_line(cfg: Any) -> str:
    """Where a mapped sensor is read and how its steps are timed (docs/sensors.md)."""
    from ..ingest.presets import resolve

    mapping = resolve(cfg.ingest)
    topics = ", ".join(mapping.filters())
    if cfg.resampled():
        timing = (f"resampled every {cfg.sample_period:g} s (sample and hold, one step per tick)"
                  + (f", heartbeat {cfg.heartbeat:g} s (stated by the operator; a longer silence stops the stream)"
                     if cfg.heartbeat else
                     ", state published retained (stated by the operator): a start or reconnect waits for the "
                     "retained state delivered on subscription")
                  + (f", stale after {cfg.stale_after:g} s" if cfg.stale_after else ""))
    else:
        timing = "stated periodic by the operator (not checked): each message is a step"
    return f"  ingest: {mapping.preset} on {topics}; {timing}"


def cmd_config_check(args: argparse.Namespace) -> int:
    import contextlib
    import io

    from ..config import environment_warnings, load_settings
    from ..config.paths import state_problems

    status = 0
    for warning in environment_warnings():
        print(f"warning: {warning}")
    for file in args.files:
        settings = load_settings(Path(file))
        report = io.StringIO()
        with contextlib.redirect_stdout(report):  # printed only once every stream checked out
            for cfg in settings.streams:
                warnings = _check_channel_stream(cfg) if cfg.mechanism == "channel" else _check_redaction_stream(cfg)
                lines, more = _aggregate_lines(cfg)
                for q in lines:
                    print(q)
                if cfg.ingest is not None:
                    print(_ingest_line(cfg))
                if cfg.schedule:
                    print("  schedule: " + ", ".join(f"{w.start:%H:%M}–{w.end:%H:%M} ({w.zone_name()})"
                                                     for w in cfg.schedule))
                for warning in warnings + more:
                    print(f"  warning: {warning}")
        problems = state_problems(settings)
        verdict = "valid" if not problems else "keys valid, but the daemon cannot start as this user"
        print(f"{file}: {verdict} — device {settings.device}, broker {settings.broker.host}:{settings.broker.port}"
              f"{' (TLS)' if settings.broker.tls else ''}, outbox {settings.outbox.path}, "
              f"ledger {settings.ledger_path()}")
        if settings.outbox.commit_delay_ms:
            print(f"  outbox group commit: {_num(settings.outbox.commit_delay_ms)} ms — records wait up to that long "
                  "for a shared disk sync; a power cut loses up to that much acknowledged input (never "
                  "published); private marks, ledger events and aggregates are committed at once")
        if settings.homeassistant.enabled:
            print(f"  Home Assistant discovery: on, prefix {settings.homeassistant.prefix} (one entity per stream)")
        for problem in problems:
            print(f"  error: {problem}")
        if problems:
            status = EXIT_CONFIG
        if settings.deterministic_seed is not None:
            print("  WARNING: deterministic_seed is set: seeded randomness, for tests only (not private "
                  "against anyone who knows the seed)")
        print(report.getvalue(), end="")
    return status


def register(sub: Any) -> None:
    """Add ``config check`` to the command parser."""
    c = sub.add_parser("config", help="configuration tools")
    csub = c.add_subparsers(dest="config_command", required=True)
    chk = csub.add_parser("check", help="validate config files and print what each stream implies (model, plans, "
                                        "channels and their verified claims, aggregate noise, schedule time zone), "
                                        "with warnings; checks that the state files can be written",
                          description="Exit status 0 when valid, 78 when the configuration (or a state path) "
                                      "is not usable.")
    chk.add_argument("files", nargs="+", metavar="FILE", help="TOML configuration")
    chk.set_defaults(func=cmd_config_check)
