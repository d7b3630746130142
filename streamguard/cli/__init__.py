"""Command-line interface: ``streamguard`` and its command groups, a module each.

Positions on the command line and in JSON are 1-based, as in the papers; the library is 0-based.
Errors are one line on stderr naming the problem (never a data value), exit status 2; an invalid
configuration exits with :data:`EXIT_CONFIG` (78), listing every problem, one line each; ``run``
exits with :data:`EXIT_IN_USE` when another streamguard holds its outbox, ledger or MQTT identity.
"""


from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .. import __version__
from ..model.chain import ModelError
from ..privacy.channel import ChannelError
from ..config import ConfigError
from . import calibrate, config_check, consume, daemon, ledger, mechanism, mqm, plan
from .common import EXIT_CONFIG, EXIT_IN_USE, CliError

__all__ = ["EXIT_CONFIG", "EXIT_IN_USE", "CliError", "build_parser", "main"]


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

    plan.register(sub)
    config_check.register(sub)
    daemon.register(sub)
    mqm.register(sub)
    ledger.register(sub)
    mechanism.register(sub)
    calibrate.register(sub)
    consume.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except BrokenPipeError:  # e.g. piped into `head`
        sys.stderr.close()
        return 0
    except ConfigError as exc:
        print(f"streamguard: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except (CliError, ModelError, ChannelError, ValueError, OSError) as exc:
        print(f"streamguard: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
