"""Loopback networking helpers shared by the demo, the tests' broker fixtures and the benchmarks.

Everything streamguard starts for itself (brokers for demos, tests and benchmarks) listens on
127.0.0.1 only.
"""

from __future__ import annotations

import ipaddress
import socket

HOST = "127.0.0.1"


def is_loopback(host: str) -> bool:
    """Is ``host`` this machine: ``localhost`` or a loopback address?"""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago (callers retry if it is taken)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def accepts(port: int, timeout: float = 0.2, host: str = HOST) -> bool:
    """Does something accept TCP connections on host:port (default 127.0.0.1)?"""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
