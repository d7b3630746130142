"""The MQTT transport: the one module that talks to aiomqtt (DESIGN.md §6, notes/ecosystem.md §1).

:class:`Transport` is the small interface the rest of the daemon uses; :class:`MqttTransport`
implements it on aiomqtt 2.x. Semantics:

- **Connection.** ``async with transport:`` connects (TLS when configured, username and password
  from :meth:`BrokerConfig.secret`) and disconnects cleanly on exit. The transport is reusable but
  not re-entrant, like an aiomqtt client. Each entry uses a fresh aiomqtt client: paho keeps
  unacknowledged QoS 1 messages across reconnects and replays them on CONNACK, but
  retransmission belongs to the publisher, which resends from the durable outbox.
- **Publish.** :meth:`Transport.publish` returns only once the broker acknowledged the message
  (PUBACK for QoS 1). Any failure, a timeout or a lost connection raises :class:`Undelivered`:
  delivery is *unknown*, so the caller keeps the record and resends it later (consumers
  de-duplicate by ``seq``). A lost connection fails pending publishes at once instead of
  letting each wait for the timeout.
- **Subscribe.** :meth:`Transport.subscribe` plus ``async for message in transport.messages()``;
  the iteration raises :class:`TransportError` when the connection is lost (messages received
  before the loss are yielded first). Incoming messages are queued without bound: subscriptions
  are meant for low-rate command topics.
- **Will.** The broker publishes a retained ``offline`` status (:attr:`MqttTransport.will`) if the
  connection drops without a DISCONNECT. A clean exit sends DISCONNECT, so the will is *not*
  published: on shutdown, publish an ``offline`` status yourself.
- **Reconnecting.** :func:`reconnecting` runs a session inside ``async with transport`` and
  re-enters it after a :class:`TransportError`, the pattern aiomqtt documents, waiting an
  exponential backoff with full jitter between attempts.

Errors form one family: :class:`TransportError`, with :class:`ConnectFailed` and
:class:`Undelivered`. Nothing here logs a payload.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol, Self, TypeVar

import aiomqtt

from ..config import BrokerConfig, PublishConfig

log = logging.getLogger(__name__)

T = TypeVar("T")


class TransportError(Exception):
    """Base of every transport failure."""


class ConnectFailed(TransportError):
    """The broker could not be reached, refused the connection (e.g. bad credentials) or the
    TLS handshake failed."""


class Undelivered(TransportError):
    """A publish was not acknowledged: delivery is unknown, so keep the message and resend it."""


@dataclass(frozen=True)
class Message:
    """A topic and its payload bytes (an incoming message, or the will); ``retain`` is set on a
    retained message the broker delivered because of a new subscription."""

    topic: str
    payload: bytes
    retain: bool = False


class Transport(Protocol):
    """What the daemon needs from an MQTT connection (see the module docstring for semantics)."""

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...

    async def publish(self, topic: str, payload: bytes, qos: int = 1, retain: bool = False) -> None:
        """Return once the broker acknowledged the message; raise :class:`Undelivered` otherwise."""
        ...

    async def subscribe(self, topic_filter: str, qos: int = 1) -> None:
        """Subscribe; raise :class:`TransportError` on failure."""
        ...

    def messages(self) -> AsyncIterator[Message]:
        """Incoming messages of this connection; raises :class:`TransportError` once it is lost."""
        ...


TransportT = TypeVar("TransportT", bound=Transport)

_NODELAY = (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
#: Pending calls beyond the publish window before aiomqtt warns: room for subscribes and status.
_EXTRA_CALLS = 32


class MqttTransport:
    """:class:`Transport` on aiomqtt 2.x, configured from :class:`BrokerConfig`.

    The client identifier is ``broker.client_id`` or ``streamguard-<device>``, followed by
    ``identifier_suffix``: a device running several connections gives each its own suffix (two
    clients with one identifier take each other over forever). ``will`` registers the retained
    ``offline`` status as the connection's will (give it to one connection only), with
    ``"instance": instance`` when given (the daemon's takeover check reads it). paho may keep
    ``publish.window`` QoS 1 messages in flight. ``timeout`` bounds every wait for the broker
    (CONNACK, PUBACK, SUBACK, DISCONNECT). ``persistent_session`` keeps the broker-side session
    (subscriptions and queued QoS 1 messages) across connections, for a subscriber that must not
    miss messages while it is disconnected.
    """

    def __init__(
        self,
        broker: BrokerConfig,
        publish: PublishConfig,
        *,
        device: str,
        status_topic: str,
        identifier_suffix: str = "",
        will: bool = True,
        instance: str | None = None,
        timeout: float = 10.0,
        persistent_session: bool = False,
    ) -> None:
        self._broker = broker
        self._window = publish.window
        self._timeout = timeout
        self._persistent = persistent_session
        self.identifier = (broker.client_id or f"streamguard-{device}") + identifier_suffix
        #: Published retained by the broker if the connection drops without a DISCONNECT (or None).
        offline = {"device": device, "state": "offline"} | ({} if instance is None else {"instance": instance})
        self.will = Message(status_topic, json.dumps(offline).encode(), retain=True) if will else None
        cafile = None if broker.ca_file is None else str(broker.ca_file)
        self._tls = ssl.create_default_context(cafile=cafile) if broker.tls else None
        self._client: aiomqtt.Client | None = None
        self._reader: asyncio.Task[None] | None = None
        self._lost: asyncio.Future[None] | None = None
        self._incoming: asyncio.Queue[Message] = asyncio.Queue()

    async def __aenter__(self) -> Self:
        if self._client is not None:
            raise RuntimeError("the transport is reusable, but not re-entrant")
        b = self._broker
        client = aiomqtt.Client(
            b.host,
            b.port,
            username=b.username,
            password=b.secret(),
            identifier=self.identifier,
            will=None if self.will is None else aiomqtt.Will(self.will.topic, self.will.payload, qos=1, retain=True),
            clean_session=not self._persistent,
            keepalive=b.keepalive,
            timeout=self._timeout,
            tls_context=self._tls,
            max_inflight_messages=self._window,
            socket_options=[_NODELAY],
            logger=log.getChild("paho"),
        )
        client.pending_calls_threshold = self._window + _EXTRA_CALLS
        try:
            await client.__aenter__()
        except aiomqtt.MqttError as exc:
            raise ConnectFailed(f"cannot connect to {b.host}:{b.port}: {exc}") from exc
        self._client = client
        self._lost = asyncio.get_running_loop().create_future()
        self._reader = asyncio.create_task(self._read(client, self._lost))
        log.info("connected to %s:%d as %s", b.host, b.port, self.identifier)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        client, reader, lost = self._client, self._reader, self._lost
        self._client = self._reader = None
        if reader is not None:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
        if lost is not None and not lost.done():
            lost.set_result(None)
        if client is None:
            return
        try:
            await client.__aexit__(exc_type, exc, tb)
        except aiomqtt.MqttError as err:  # the connection is gone either way
            log.warning("disconnect from %s:%d was not clean: %s", self._broker.host, self._broker.port, err)

    async def _read(self, client: aiomqtt.Client, lost: asyncio.Future[None]) -> None:
        """Move incoming messages to our queue; mark the connection lost when iteration fails."""
        try:
            async for m in client.messages:
                assert isinstance(m.payload, bytes | bytearray)
                self._incoming.put_nowait(Message(m.topic.value, bytes(m.payload), bool(m.retain)))
        except aiomqtt.MqttError as exc:
            log.warning("connection to %s:%d lost: %s", self._broker.host, self._broker.port, exc)
        if not lost.done():
            lost.set_result(None)

    async def _unless_lost(self, call: Callable[[aiomqtt.Client], Coroutine[Any, Any, T]]) -> T:
        """Await ``call(client)``, failing with MqttError as soon as the connection is lost."""
        client, lost = self._client, self._lost
        if client is None or lost is None or lost.done():
            raise aiomqtt.MqttError("not connected")
        task = asyncio.ensure_future(call(client))
        try:
            done, _ = await asyncio.wait((task, lost), return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            task.cancel()
            raise
        if task in done:
            return task.result()
        task.cancel()
        raise aiomqtt.MqttError("connection lost")

    async def publish(self, topic: str, payload: bytes, qos: int = 1, retain: bool = False) -> None:
        """Return once the broker acknowledged (QoS 1: PUBACK); raise :class:`Undelivered` on any
        failure, timeout or lost connection."""
        try:
            await self._unless_lost(lambda c: c.publish(topic, payload, qos=qos, retain=retain))
        except aiomqtt.MqttError as exc:
            raise Undelivered(f"publish to {topic} not acknowledged: {exc}") from exc

    async def subscribe(self, topic_filter: str, qos: int = 1) -> None:
        """Subscribe (awaits the SUBACK); raise :class:`TransportError` on failure."""
        try:
            await self._unless_lost(lambda c: c.subscribe(topic_filter, qos=qos))
        except aiomqtt.MqttError as exc:
            raise TransportError(f"subscribe to {topic_filter} failed: {exc}") from exc

    async def messages(self) -> AsyncIterator[Message]:
        """Yield incoming messages in arrival order; raise :class:`TransportError` when the
        connection is lost (after yielding what arrived before)."""
        while True:
            if self._incoming.empty():
                try:
                    yield await self._unless_lost(lambda _: self._incoming.get())
                except aiomqtt.MqttError as exc:
                    raise TransportError(f"message iteration stopped: {exc}") from exc
            else:
                yield self._incoming.get_nowait()


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with full jitter: after the n-th consecutive failure (n = 0, 1, …) wait
    a uniform random time in [0, min(cap, base·2ⁿ)] seconds."""

    base: float = 0.5
    cap: float = 30.0

    def delay(self, failures: int) -> float:
        return random.uniform(0.0, min(self.cap, self.base * 2.0 ** min(failures, 64)))


async def reconnecting(
    transport: TransportT,
    session: Callable[[TransportT], Awaitable[T]],
    *,
    backoff: Backoff = Backoff(),
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    max_failures: int | None = None,
) -> T:
    """Run ``session(transport)`` inside ``async with transport`` and return its result.

    After a :class:`TransportError` (from connecting or from the session) wait
    ``backoff.delay(n)`` via ``sleep`` and re-enter, n counting consecutive failures (reset by
    every successful connect). After ``max_failures`` consecutive failures the last error is
    raised (None: retry forever). Any other exception propagates at once.
    """
    failures = 0
    while True:
        try:
            async with transport:
                failures = 0
                return await session(transport)
        except TransportError as exc:
            if max_failures is not None and failures + 1 >= max_failures:
                raise
            delay = backoff.delay(failures)
            failures += 1
            log.warning("%s; retrying in %.2f s (consecutive failures: %d)", exc, delay, failures)
            await sleep(delay)
