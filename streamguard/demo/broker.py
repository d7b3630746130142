"""An embedded MQTT broker for the demo: amqtt in-process on a free loopback port.

amqtt is an optional dependency (``pip install "streamguard[demo]"``); it speaks MQTT 3.1.1 only
and its bound port is only reachable through a private attribute, so that lookup lives here, in
one place, with its own test (notes/ecosystem.md §2.1). It always binds 127.0.0.1, never the
library's default 0.0.0.0.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


def _bound_port(broker: object) -> int:
    servers = getattr(broker, "_servers")
    return int(servers["default"].instance.sockets[0].getsockname()[1])


@asynccontextmanager
async def embedded_broker() -> AsyncIterator[tuple[str, int]]:
    """Run an anonymous amqtt broker on 127.0.0.1:<free port>; yields (host, port)."""
    try:
        from amqtt.broker import Broker
    except ImportError:
        raise RuntimeError('the embedded broker needs amqtt: pip install "streamguard[demo]"') from None
    broker = Broker({
        "listeners": {"default": {"type": "tcp", "bind": "127.0.0.1:0"}},
        "plugins": {"amqtt.plugins.authentication.AnonymousAuthPlugin": {"allow_anonymous": True}},
    })
    await broker.start()
    try:
        yield "127.0.0.1", _bound_port(broker)
    finally:
        await broker.shutdown()
