"""``streamguard privatize``, ``run`` and ``demo``: the privatizer on stdin, as a daemon, and the
whole pipeline on this machine. ``run`` exits with :data:`EXIT_IN_USE` when another streamguard holds
its outbox, ledger or MQTT identity."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .common import EXIT_CONFIG, EXIT_DISK_FULL, EXIT_IN_USE, CliError, user_plan_cache

#: ``privatize``'s exit status when more frames were rejected than accepted: EX_DATAERR.
EXIT_MOSTLY_REJECTED = 65


def cmd_privatize(args: argparse.Namespace) -> int:
    import time

    from ..config import load_settings
    from ..sampling import bit_source
    from ..stream.runtimes import make_runtime

    settings = load_settings(Path(args.config))
    names = [s.name for s in settings.streams]
    name = args.stream or names[0]
    if name not in names:
        raise CliError(f"--stream {name}: not in the configuration (streams: {', '.join(names)})")
    idx = names.index(name)
    rt = make_runtime(settings, settings.streams[idx], bit_source(settings.deterministic_seed, idx),
                      plan_cache=user_plan_cache())
    rt.wall_clock = False  # historical data: any ts in order; a frame without ts gets no time, not "now"
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
    refused = sum(c.rejected.values())
    if refused > c.accepted:
        print(f"streamguard: error: most frames were rejected ({refused} of {refused + c.accepted}); check the "
              f"stream (--stream {name}) and its labels or bins", file=sys.stderr)
        return EXIT_MOSTLY_REJECTED
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
    import logging
    import signal
    import sqlite3

    from ..config import environment_warnings, load_settings
    from ..config.paths import make_state_dirs
    from ..stream.daemon import Daemon
    from ..stream.intake import stdin_frames
    from ..stream.memory import glibc_malloc_trim, trimmed_heap
    from ..stream.outbox import InUse
    from ..stream.disk import is_disk_full
    from ..stream.transport import ConnectRefused

    settings = load_settings(Path(args.config))
    _setup_logging(settings.log_level)
    for warning in environment_warnings():
        logging.getLogger("streamguard").warning("%s", warning)
    make_state_dirs(settings)  # or a ConfigError: one line naming the key (cli.main)
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
        async with trimmed_heap(glibc_malloc_trim()):  # (this process is the daemon: its C heap, stream/memory.py)
            await Daemon(settings, extra_sources=sources, freeze_heap=True).run(stop)

    try:
        asyncio.run(main())
    except InUse as exc:  # another daemon holds the outbox, the ledger or the MQTT identity
        print(f"streamguard: {exc}", file=sys.stderr)
        return EXIT_IN_USE
    except ConnectRefused as exc:  # retrying cannot mend it: systemd shows the failure
        print(f"streamguard: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except (sqlite3.Error, OSError) as exc:
        if is_disk_full(exc):  # (while running, a full disk holds intake instead: stream/disk.py)
            print(f"streamguard: error: the disk holding {settings.outbox.path} or the ledger is full: {exc}",
                  file=sys.stderr)
            return EXIT_DISK_FULL
        if not isinstance(exc, sqlite3.Error):
            raise
        # e.g. a state file that cannot be opened: one line, no traceback
        print(f"streamguard: error: outbox or ledger ({settings.outbox.path}, {settings.ledger_path()}): {exc}",
              file=sys.stderr)
        return EXIT_CONFIG
    except asyncio.CancelledError:  # a second SIGTERM/SIGINT
        print("streamguard: stopped by a second signal before the shutdown finished", file=sys.stderr)
        return 1
    return 0


def _broker_arg(text: str) -> tuple[str, int]:
    from ..support.loopback import is_loopback

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

    from ..demo.run import run_demo

    _setup_logging("WARNING")
    if args.duration <= 0 or args.rate <= 0:
        raise CliError("--duration and --rate must be positive")
    if args.broker is None:
        try:
            import amqtt.broker  # noqa: F401  (the embedded broker: an optional extra)
        except ImportError:
            raise CliError('the embedded broker needs the demo extra: pip install "streamguard[demo]"; or use a '
                           "broker on this machine: streamguard demo --broker 127.0.0.1:1883") from None
    else:
        from ..support.loopback import accepts

        host, port = args.broker
        if not accepts(port, timeout=2.0, host=host):
            raise CliError(f"--broker {host}:{port}: nothing accepts connections there")
    return asyncio.run(run_demo(args.duration, args.rate, args.seed, args.broker, sys.stdout))


def register(sub: Any) -> None:
    """Add ``privatize``, ``run`` and ``demo`` to the command parser."""
    pz = sub.add_parser("privatize", help="batch mode: raw JSON lines on stdin → sanitized JSON lines on stdout",
                        description="Privatize raw frames (one JSON object per line) with the same core as the "
                        "daemon; counts go to stderr, sanitized records to stdout. Exit status "
                        f"{EXIT_MOSTLY_REJECTED} (EX_DATAERR) when more frames were rejected than accepted.")
    pz.add_argument("--config", required=True, help="TOML configuration")
    pz.add_argument("--stream", help="which configured stream the frames belong to (default: the first)")
    pz.set_defaults(func=cmd_privatize)

    r = sub.add_parser("run", help="run the daemon", description="Run the privatizing daemon until SIGTERM/SIGINT: "
                       "raw frames in (MQTT, stdin or simulated), sanitized records out over MQTT. The first "
                       "signal stops in order within 20 s; a second one cuts the shutdown short (exit status 1). "
                       f"Exit status {EXIT_IN_USE} (EX_TEMPFAIL): another streamguard holds the outbox or the "
                       f"ledger (at start) or took over the MQTT client id; {EXIT_CONFIG} (EX_CONFIG): the configuration "
                       "is invalid, the broker refuses the connection for good (credentials, TLS certificate, TLS at "
                       "one end only) or the password file cannot be read; "
                       f"{EXIT_DISK_FULL} (EX_IOERR): the state disk has no room for the next write at start (the shutdown "
                       "reserve included), or was still full at a stop (the line says whether the reserve held every "
                       "decided record and how many frames stay unacknowledged at the broker).")
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
