"""Loopback networking helpers shared by the demo, the tests' broker fixtures and the benchmarks.

Everything streamguard starts for itself (brokers for demos, tests and benchmarks) listens on
127.0.0.1 only.
"""

from __future__ import annotations

import socket

HOST = "127.0.0.1"


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago (callers retry if it is taken)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def accepts(port: int, timeout: float = 0.2) -> bool:
    """Does something accept TCP connections on 127.0.0.1:port?"""
    try:
        with socket.create_connection((HOST, port), timeout=timeout):
            return True
    except OSError:
        return False
