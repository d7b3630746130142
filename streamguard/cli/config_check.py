"""``streamguard config check``: validate configuration files and print what each stream implies."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import numpy as np

from ..audit.start import start_effect
from ..redaction.kplan import stream_plan_for


def _check_redaction_stream(cfg: Any) -> None:
    sp = stream_plan_for(cfg.chain(), cfg.epsilon, design=cfg.design, split=cfg.split)
    lk = sp.leakage()
    print(f"\nstream {cfg.name}: source {cfg.source}, states {cfg.state_map().k}, 3R redaction ε={cfg.epsilon:g}, "
          f"design {sp.design}, split ε_ℓ={sp.left.budget:.6g} ε_r={sp.right.budget:.6g}")
    print("  redaction by t − p: " + ", ".join(
        f"{int(d):+d}:({','.join(f'{v:.4f}' for v in r)})" for d, r in zip(sp.offsets(), sp.table())))
    delay = sp.left_horizon if cfg.delay is None else cfg.delay
    print(f"  horizons left {sp.left_horizon} / right {sp.right_horizon}; release delay {delay} records"
          f"{f', max hold {cfg.max_hold:g} s' if cfg.max_hold else ''}; exact leakage {lk.total:.6f} nats")
    if not lk.total <= cfg.epsilon * (1 + 1e-12):
        print(f"  WARNING: the plan's exact leakage {lk.total:.6f} nats exceeds ε = {cfg.epsilon:g}")
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
    from ..perturbation.stream_leakage import stream_leakage_report
    from ..stream.channel_runtime import build_channel

    channel, _ = build_channel(cfg.channel, cfg.state_map().k)  # designed / loaded and verified exactly
    claims = ", ".join(f"{c.notion} {c.params}" for c in channel.claims)
    print(f"\nstream {cfg.name}: source {cfg.source}, states {cfg.state_map().k}, per-record channel "
          f"{channel.kind} ({channel.n_y} outputs), verified claims: {claims}")
    if channel.inputs == "x":
        leak = stream_leakage_report(channel, cfg.chain())
        kind = "a lower bound (window of " + str(leak["n"]) + ")" if leak["lower_bound"] else "exact"
        print(f"  leakage about one record of the whole stream under the model: {leak['leakage']} nats ({kind})")
        per_record = [float(c.params["epsilon"]) for c in channel.claims
                      if c.notion in ("ldp_x", "identifiability") and "epsilon" in c.params]
        if per_record and float(leak["leakage"]) > min(per_record) * (1 + 1e-12):
            print(f"  WARNING: the stream leakage {float(leak['leakage']):.4g} nats exceeds the per-record "
                  f"ε = {min(per_record):g}: correlated neighbours reveal each record beyond its own release")
    print('  private flags withhold only the flagged record (not its correlated neighbours; each one is logged): '
          'use mechanism = "redaction" for private positions')


def _aggregate_lines(cfg: Any) -> list[str]:
    from ..quilt import QuiltModel
    from ..stream.aggregates import stream_scale

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


def _ingest_line(cfg: Any) -> str:
    """Where a mapped sensor is read and how its steps are timed (README, "Connect your sensors")."""
    from ..ingest.presets import resolve

    mapping = resolve(cfg.ingest)
    topics = ", ".join(mapping.filters())
    if cfg.resampled():
        timing = (f"resampled every {cfg.sample_period:g} s (sample and hold, one step per tick)"
                  + (f", stale after {cfg.stale_after:g} s" if cfg.stale_after else ""))
    else:
        timing = "stated periodic by the operator (not checked): each message is a step"
    return f"  ingest: {mapping.preset} on {topics}; {timing}"


def cmd_config_check(args: argparse.Namespace) -> int:
    import contextlib
    import io

    from ..config import load_settings

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
                if cfg.ingest is not None:
                    print(_ingest_line(cfg))
                if cfg.schedule:
                    print("  schedule: " + ", ".join(f"{w.start:%H:%M}–{w.end:%H:%M}" for w in cfg.schedule))
        print(f"{file}: valid — device {settings.device}, broker {settings.broker.host}:{settings.broker.port}"
              f"{' (TLS)' if settings.broker.tls else ''}, outbox {settings.outbox.path}, "
              f"ledger {settings.ledger_path()}")
        if settings.homeassistant.enabled:
            print(f"  Home Assistant discovery: on, prefix {settings.homeassistant.prefix} (one entity per stream)")
        if settings.deterministic_seed is not None:
            print("  WARNING: deterministic_seed is set: seeded randomness, for tests only (not private "
                  "against anyone who knows the seed)")
        print(report.getvalue(), end="")
    return 0


def register(sub: Any) -> None:
    """Add ``config check`` to the command parser."""
    c = sub.add_parser("config", help="configuration tools")
    csub = c.add_subparsers(dest="config_command", required=True)
    chk = csub.add_parser("check", help="validate config files and print what each stream implies (plans, "
                                        "channels and their verified claims, aggregate noise scales)")
    chk.add_argument("files", nargs="+", metavar="FILE", help="TOML configuration")
    chk.set_defaults(func=cmd_config_check)
