"""The MQTT transport: the one module that talks to aiomqtt (DESIGN.md §6, notes/ecosystem.md §1).

:class:`Transport` is the small interface the rest of the daemon uses; :class:`MqttTransport`
implements it on aiomqtt 2.x. Semantics:

- **Connection.** ``async with transport:`` connects (TLS when configured — with a client
  certificate too, :func:`_tls_context` —, username and password from :meth:`BrokerConfig.secret`) and disconnects cleanly on exit. The transport is reusable but
  not re-entrant, like an aiomqtt client. Each entry uses a fresh aiomqtt client: paho keeps
  unacknowledged QoS 1 messages across reconnects and replays them on CONNACK, but
  retransmission belongs to the publisher, which resends from the durable outbox.
- **Publish.** :meth:`Transport.publish` returns only once the broker acknowledged the message
  (PUBACK for QoS 1; under MQTT 5 a PUBACK whose reason code is a failure — not authorised, quota
  exceeded, too large — is a refusal). Any failure, a timeout or a lost connection raises :class:`Undelivered`:
  delivery is *unknown*, so the caller keeps the record and resends it later (consumers
  de-duplicate by ``seq``). A lost connection fails pending publishes at once instead of
  letting each wait for the timeout.
- **Subscribe.** :meth:`Transport.subscribe` plus ``async for message in transport.messages()``;
  the iteration raises :class:`TransportError` when the connection is lost (messages received
  before the loss are yielded first). A QoS 1 message is acknowledged (PUBACK) only when the
  consumer comes back for the next one, i.e. once it has been handled: a consumer that stops
  reading stops the acknowledgements, and the broker stops sending (back-pressure).
- **Bounds** (issue 13). Received messages wait in one queue (aiomqtt's); once it holds
  :data:`INCOMING_LIMIT` messages or :data:`INCOMING_BYTES` of payload the socket is no longer
  read until both are halved, so TCP flow control stops the broker (back-pressure: the broker
  keeps what it could not send, queued for our session). Under MQTT 5 (``broker.protocol = "5"``,
  the default) the CONNECT also carries Receive Maximum :data:`RECEIVE_MAXIMUM` and Maximum Packet
  Size :data:`MAX_PACKET_BYTES` (1 MiB): the broker never sends a larger packet (it discards it).
  Raw input held in memory is thus at most about ``INCOMING_BYTES`` plus a few packets (one read
  of the socket, the message being handled): ≈ 4 MiB. Under MQTT 3.1.1 a packet is bounded only by
  the broker's ``max_packet_size`` (64 KiB in deploy/mosquitto/streamguard-device.conf).
- **Sessions.** ``persistent_session`` keeps the broker-side session (subscriptions and queued
  QoS 1 messages) for :data:`SESSION_EXPIRY` seconds after a disconnect (MQTT 5; MQTT 3.1.1: a
  non-clean session, kept as long as the broker's ``persistent_client_expiration`` allows).
  :attr:`MqttTransport.sessions_lost` counts reconnects on which the broker no longer had the
  session: whatever was published to its subscriptions meanwhile is lost.
- **Will.** The broker publishes a retained ``offline`` status (:attr:`MqttTransport.will`) if the
  connection drops without a DISCONNECT. A clean exit sends DISCONNECT, so the will is *not*
  published: on shutdown, publish an ``offline`` status yourself.
- **Reconnecting.** :func:`reconnecting` runs a session inside ``async with transport`` and
  re-enters it after a :class:`TransportError`, the pattern aiomqtt documents, waiting an
  exponential backoff with full jitter between attempts. A :class:`ConnectRefused` (wrong
  credentials, not authorised, a TLS certificate that does not verify, TLS on one side only, a
  client certificate or key that cannot be loaded or that the broker refuses — found by
  :func:`_tls_alert`) is permanent: retrying cannot help, so it is raised at once. A connection the broker closes before
  its CONNACK fails at once (aiomqtt alone waits out ``timeout``); without TLS, such a close or a
  timeout is followed by a probe (:func:`_speaks_tls`): a listener that answers a TLS hello is a
  TLS listener, and a plain client can never connect to it (issue 28: before, 90 s+ of retries).

- **Speed** (issue 15). aiomqtt spends a task and an ``asyncio.wait`` on every publish and every
  received message; the daemon's hot path avoids them: paho's ``on_message`` puts messages in the
  connection's :class:`_Inbox`, paho's ``on_publish`` resolves one future per publish (which
  :meth:`MqttTransport.start_publish` returns: the publisher needs no task per message), aiomqtt's
  socket registrations run with ``call_soon`` on the loop thread (no self-pipe wake-up), paho reads
  its packets from one 64 KiB ``recv`` (:class:`_RecvBuffer`), a publish is written at once and
  any other write queued in one loop turn goes out on the next, without registering the socket
  unless its buffer is full (:class:`_ReaderGate`). These use paho internals: paho-mqtt is pinned in pyproject.toml.

Errors form one family: :class:`TransportError`, with :class:`ConnectFailed` (and its permanent
kind :class:`ConnectRefused`) and :class:`Undelivered`. Nothing here logs a payload.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import socket
import ssl
import threading
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol, Self, TypeVar

import aiomqtt
import paho.mqtt.client as paho_mqtt

from paho.mqtt.client import MQTT_CLEAN_START_FIRST_ONLY
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from ..config import BrokerConfig, PublishConfig

log = logging.getLogger(__name__)


class _OrdinaryDisconnect(logging.Filter):
    """paho logs a dropped connection at ERROR ("failed to receive on socket: …"); the reconnect
    loop already reports it once, as a warning (issue 13: each failed attempt logged once)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(("failed to receive on socket", "failed to send on socket"))


log.getChild("paho").addFilter(_OrdinaryDisconnect())

T = TypeVar("T")


class TransportError(Exception):
    """Base of every transport failure."""


class ConnectFailed(TransportError):
    """The broker could not be reached, refused the connection (e.g. bad credentials) or the
    TLS handshake failed."""


class ConnectRefused(ConnectFailed):
    """A connection failure that retrying cannot mend (a configuration error: the daemon exits with
    EX_CONFIG): the broker refused the credentials or the client, the protocol version is not
    supported, the TLS certificate does not verify, TLS is on at one end only, or the password
    file cannot be read."""


class Undelivered(TransportError):
    """A publish was not acknowledged: delivery is unknown, so keep the message and resend it."""


@dataclass(frozen=True)
class Message:
    """A topic and its payload bytes (an incoming message, or the will); ``retain`` is set on a
    retained message the broker delivered because of a new subscription. ``mid`` and ``qos``
    identify an incoming message for its acknowledgement."""

    topic: str
    payload: bytes
    retain: bool = False
    mid: int = field(default=0, compare=False)
    qos: int = field(default=0, compare=False)


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

    def message_groups(self) -> AsyncIterator[list[Message]]:
        """Like :meth:`messages`, in groups: one awaited message and those already received after
        it, acknowledged together once handled."""
        ...

    @property
    def held(self) -> int:
        """Incoming messages received and not yet handled."""
        ...


TransportT = TypeVar("TransportT", bound=Transport)

_NODELAY = (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
#: MQTT 5 Receive Maximum: unacknowledged QoS 1 messages the broker may send us at once.
RECEIVE_MAXIMUM = 32
#: MQTT 5 Maximum Packet Size: 1 MiB plus room for the topic and properties. Frames over the 16 KB
#: frame limit (records.MAX_FRAME_BYTES) up to this size still arrive and are refused by the frame
#: check, failing closed (the step is redacted, protected as private: issue 9 item 8); a larger
#: one is discarded by the broker and never seen — like a frame lost on the way.
MAX_PACKET_BYTES = 2**20 + 4096
#: Incoming messages, and their payload bytes, queued before the socket is no longer read (TCP
#: back-pressure); reading resumes at half of each.
INCOMING_LIMIT = 64
INCOMING_BYTES = 2**20
#: A group of received messages handled together (message_groups) stops growing at this many
#: payload bytes.
GROUP_BYTES = 64 * 1024
#: MQTT 5 Session Expiry Interval of a persistent session (seconds the broker keeps it, and the
#: QoS 1 messages queued for it, after a disconnect).
SESSION_EXPIRY = 7 * 24 * 3600
#: Consecutive TLS handshakes reset by the broker that make a TLS-at-one-end-only error.
_TLS_RESETS = 3
#: CONNACK reason codes (MQTT 5; paho maps MQTT 3.1.1 return codes onto them) that retrying cannot
#: mend: malformed packet, protocol error, unsupported protocol version, client identifier not
#: valid, bad user name or password, not authorized, banned, bad authentication method.
_REFUSED = {0x81, 0x82, 0x84, 0x85, 0x86, 0x87, 0x8A, 0x8C}
#: Pending aiomqtt calls before it warns: subscribes only (publishes do not go through aiomqtt;
#: the daemon keeps at most SUBSCRIBE_WINDOW = 32 SUBSCRIBEs in flight).
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
    miss messages while it is disconnected (module docstring: Sessions).
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
        self._tls = _tls_context(broker)
        self._client: aiomqtt.Client | None = None
        self._lost: asyncio.Future[None] | None = None
        self._inbox = _Inbox(None)  # (each connection gets its own: _new_client)
        self._acks: dict[int, asyncio.Future[None]] = {}  # QoS 1 publishes awaiting PUBACK, by mid
        self._handling = 0  # messages of the group being handled (message_groups)
        #: Connections made; reconnects on which the broker had lost our persistent session (since
        #: this transport was created).
        self.connections = 0
        self.sessions_lost = 0
        self._tls_resets = 0  # consecutive TLS handshakes the broker reset
        #: Whether the broker resumed a stored session on the last connect (CONNACK flag).
        self.session_present = False

    def _new_client(self) -> aiomqtt.Client:
        b = self._broker
        try:
            password = b.secret()
        except OSError as exc:
            raise ConnectRefused(f"broker.password_file: cannot read {b.password_file}: {exc.strerror}") from None
        v5 = b.protocol == "5"
        props = None
        if v5:
            props = Properties(PacketTypes.CONNECT)
            props.ReceiveMaximum = RECEIVE_MAXIMUM
            props.MaximumPacketSize = MAX_PACKET_BYTES
            if self._persistent:
                props.SessionExpiryInterval = SESSION_EXPIRY
        client = aiomqtt.Client(
            b.host,
            b.port,
            username=b.username,
            password=password,
            identifier=self.identifier,
            will=None if self.will is None else aiomqtt.Will(self.will.topic, self.will.payload, qos=1, retain=True),
            protocol=aiomqtt.ProtocolVersion.V5 if v5 else aiomqtt.ProtocolVersion.V311,
            clean_session=None if v5 else not self._persistent,
            clean_start=not self._persistent if v5 else MQTT_CLEAN_START_FIRST_ONLY,  # (3.1.1: clean_session)
            properties=props,
            keepalive=b.keepalive,
            timeout=self._timeout,
            tls_context=self._tls,
            max_inflight_messages=self._window,
            socket_options=[_NODELAY],
            logger=log.getChild("paho"),
        )
        client.pending_calls_threshold = _EXTRA_CALLS
        # aiomqtt registers its socket reader through ``client._loop``: the gate can stop reading.
        # aiomqtt exposes its paho client as ``_client`` (its docs: for what aiomqtt does not wrap):
        # acknowledge QoS 1 messages ourselves (back-pressure), read CONNACK's session flag, read
        # the socket in chunks, and take messages and PUBACKs from paho directly (module
        # docstring: Speed).
        paho = client._client
        buffer = _RecvBuffer(paho._sock_recv)
        paho._sock_recv = buffer.recv
        gate = _ReaderGate(client._loop, lambda: _uncancel_connected(client), buffer,
                           lambda: paho._sock is not None and paho.want_write())
        client._loop = gate  # type: ignore[assignment]
        paho.manual_ack_set(True)
        self._inbox = inbox = _Inbox(gate)
        self._acks = acks = {}
        paho.on_message = lambda _c, _u, m: inbox.put(Message(m.topic, m.payload, bool(m.retain), m.mid, m.qos))
        # (MQTT 5: a PUBACK with a reason code >= 0x80 — not authorised, quota exceeded, too large —
        # is the broker refusing the message: not delivered)
        paho.on_publish = lambda _c, _u, mid, rc, _p: _settle(
            acks.pop(mid, None), Undelivered(f"publish not acknowledged: refused by the broker: {rc}")
            if rc.is_failure else None)
        on_connect = paho.on_connect

        def connected(c: Any, userdata: Any, flags: Any, reason: Any, properties: Any = None) -> None:
            self.session_present = bool(flags.session_present)
            on_connect(c, userdata, flags, reason, properties)

        paho.on_connect = connected
        on_disconnect = paho.on_disconnect

        def disconnected(c: Any, userdata: Any, flags: Any, reason: Any, properties: Any = None) -> None:
            # (aiomqtt ignores a close before CONNACK and waits out its timeout)
            if not client._connected.done():
                client._connected.set_exception(_NoConnack(f"the broker closed the connection before CONNACK ({reason})"))
                client._connected.add_done_callback(_retrieve)
            on_disconnect(c, userdata, flags, reason, properties)

        paho.on_disconnect = disconnected
        return client

    async def __aenter__(self) -> Self:
        if self._client is not None:
            raise RuntimeError("the transport is reusable, but not re-entrant")
        b = self._broker
        client = self._new_client()
        # aiomqtt sets its "disconnected" future with an exception when a connection drops (also
        # while connecting); when nothing awaits it then, asyncio logs "Future exception was never
        # retrieved" (issue 13). aiomqtt replaces the future on a successful connect: watch both.
        client._disconnected.add_done_callback(_retrieve)
        try:
            await client.__aenter__()
        except asyncio.CancelledError:
            _uncancel_connected(client)
            raise
        except aiomqtt.MqttError as exc:
            error = _connect_error(b, exc)
            if (self._tls is not None and not isinstance(error, ConnectRefused)
                    and (isinstance(exc, _NoConnack) or isinstance(exc.__context__, ConnectionResetError))
                    and (alert := await _tls_alert(b.host, b.port, self._tls))):
                raise _certificate_refused(b, alert) from exc
            # a plain listener resets a TLS handshake: once may be a broker restarting, every time is
            # TLS at one end only
            self._tls_resets = self._tls_resets + 1 if b.tls and isinstance(exc.__context__, ConnectionResetError) else 0
            if self._tls_resets >= _TLS_RESETS:
                error = ConnectRefused(f"TLS to {b.host}:{b.port}: the broker reset the handshake {self._tls_resets} "
                                       "times in a row: is its listener on that port plain MQTT (broker.tls, broker.port)?")
            if (not b.tls and not isinstance(error, ConnectRefused)
                    and (isinstance(exc, _NoConnack) or isinstance(exc.__context__, TimeoutError))
                    and await _speaks_tls(b.host, b.port)):
                error = ConnectRefused(f"the listener at {b.host}:{b.port} speaks TLS (it answered a TLS hello) but "
                                       "broker.tls is off: set broker.tls = true (and broker.ca_file), or use the "
                                       "broker's plain port (broker.port)")
            raise error from exc
        self._tls_resets = 0
        client._disconnected.add_done_callback(_retrieve)
        self.connections += 1
        if self._persistent and not self.session_present and self.connections > 1:
            self.sessions_lost += 1
            log.warning("the broker at %s:%d no longer had the session of %s: messages published to its "
                        "subscriptions while it was disconnected are lost (%d time(s) so far)",
                        b.host, b.port, self.identifier, self.sessions_lost)
        self._client = client
        self._lost = lost = asyncio.get_running_loop().create_future()
        inbox, acks = self._inbox, self._acks
        client._disconnected.add_done_callback(lambda _: _gone(lost, inbox, acks, "connection lost"))
        log.info("connected to %s:%d as %s", b.host, b.port, self.identifier)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        client = self._client
        self._client = None
        _gone(self._lost, self._inbox, self._acks, "disconnected")
        if client is None:
            return
        try:
            await client.__aexit__(exc_type, exc, tb)
        except aiomqtt.MqttError as err:  # the connection is gone either way
            log.info("disconnect from %s:%d was not clean: %s", self._broker.host, self._broker.port, err)

    @property
    def held(self) -> int:
        """Incoming messages received and not yet handled (unacknowledged: a persistent session
        gets the QoS 1 ones again), the group being handled included."""
        return len(self._inbox.items) + self._handling

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

    def start_publish(self, topic: str, payload: bytes, qos: int = 1, retain: bool = False) -> asyncio.Future[None]:
        """Hand the message to the connection and write it to the socket now (or as soon as the
        socket takes it: :class:`_ReaderGate`), and return a future that is done once the broker
        acknowledged it (QoS 1: PUBACK), or fails with :class:`Undelivered` on a refusal, a timeout
        or a lost connection; raise :class:`Undelivered` at once when not connected. paho's
        publish and its PUBACK callback directly: one future and one timer per message, no task
        (module docstring: Speed)."""
        client, lost = self._client, self._lost
        if client is None or lost is None or lost.done():
            raise Undelivered(f"publish to {topic} not acknowledged: not connected")
        paho = client._client
        info = paho.publish(topic, payload, qos, retain)
        if info.rc != paho_mqtt.MQTT_ERR_SUCCESS:
            raise Undelivered(f"publish to {topic} not acknowledged: {paho_mqtt.error_string(info.rc)}")
        try:  # out now (with anything queued before it); the turn's write then finds nothing
            paho.loop_write()
        except Exception as exc:  # (aiomqtt's own writer takes any such error as a lost connection)
            raise Undelivered(f"publish to {topic} not acknowledged: write failed: {exc}") from exc
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        if qos == 0 or info.is_published():
            fut.set_result(None)
            return fut
        mid, acks = info.mid, self._acks
        acks[mid] = fut
        timer = loop.call_later(self._timeout, _time_out, fut, topic)

        def done(f: asyncio.Future[None]) -> None:
            timer.cancel()
            if acks.get(mid) is f:
                del acks[mid]

        fut.add_done_callback(done)
        return fut

    async def publish(self, topic: str, payload: bytes, qos: int = 1, retain: bool = False) -> None:
        """Return once the broker acknowledged (QoS 1: PUBACK); raise :class:`Undelivered` on any
        failure, timeout or lost connection (:meth:`start_publish`, awaited)."""
        await self.start_publish(topic, payload, qos, retain)

    async def subscribe(self, topic_filter: str, qos: int = 1) -> None:
        """Subscribe (awaits the SUBACK); raise :class:`TransportError` on failure."""
        try:
            await self._unless_lost(lambda c: c.subscribe(topic_filter, qos=qos))
        except aiomqtt.MqttError as exc:
            raise TransportError(f"subscribe to {topic_filter} failed: {exc}") from exc

    def _ack(self, m: Message) -> None:
        """PUBACK a handled QoS 1 message (nothing to do for QoS 0, or once the connection is gone:
        the broker sends an unacknowledged message again to a persistent session)."""
        client = self._client
        if m.qos and client is not None:
            client._client.ack(m.mid, m.qos)

    async def messages(self) -> AsyncIterator[Message]:
        """Yield incoming messages in arrival order, acknowledging each when the next one is asked
        for; raise :class:`TransportError` when the connection is lost — after yielding what
        arrived before on a clean session, at once on a persistent one (the broker redelivers what
        was not acknowledged; only a message being handled as the connection drops can come twice,
        and a frame with ``ts`` is then recognised as the same step)."""
        async for group in self.message_groups(1):
            yield group[0]

    async def message_groups(self, limit: int = INCOMING_LIMIT) -> AsyncIterator[list[Message]]:
        """:meth:`messages` in groups of at most ``limit``: the next message (awaited) and those
        already received after it, in arrival order, each acknowledged when the next group is asked
        for — so a busy intake handles what queued up together (issue 15), an idle one message by
        message."""
        while True:
            lost, inbox = self._lost, self._inbox
            if self._persistent and lost is not None and lost.done():
                # what was received but not handled was not acknowledged: the broker sends it again
                # to the session, and handling it now as well would count it twice
                raise TransportError("message iteration stopped: connection lost")
            if not inbox.items:
                if lost is None or lost.done():
                    raise TransportError("message iteration stopped: "
                                         + ("not connected" if lost is None else "connection lost"))
                await inbox.arrival()
                continue
            group = inbox.take(limit)
            self._handling = len(group)
            try:
                yield group
            finally:
                self._handling = 0
            for m in group:
                self._ack(m)


class _Inbox:
    """The messages one connection received and nobody took yet, in arrival order (paho's
    on_message puts them here). At :data:`INCOMING_LIMIT` messages or :data:`INCOMING_BYTES` of
    payload the gate stops reading the socket (TCP back-pressure), until both are halved."""

    def __init__(self, gate: _ReaderGate | None) -> None:
        self.items: deque[Message] = deque()
        self.size = 0  # payload bytes held
        self._gate = gate
        self._waiters: list[asyncio.Future[None]] = []  # (one per consumer waiting in arrival())

    def put(self, m: Message) -> None:
        self.items.append(m)
        self.size += len(m.payload)
        if (len(self.items) >= INCOMING_LIMIT or self.size >= INCOMING_BYTES) and self._gate is not None:
            self._gate.pause()
        self.wake()

    def wake(self) -> None:
        """Wake whoever waits in :meth:`arrival` (a message came, or the connection is gone)."""
        if self._waiters:
            for waiter in self._waiters:
                _settle(waiter)
            self._waiters.clear()

    async def arrival(self) -> None:
        """Wait until :meth:`wake`."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        finally:
            with contextlib.suppress(ValueError):  # (not there once woken)
                self._waiters.remove(waiter)

    def take(self, limit: int) -> list[Message]:
        """The oldest message and those after it, up to ``limit`` messages; the group stops
        growing once it holds :data:`GROUP_BYTES` of payload."""
        group = [self.items.popleft()]
        size = len(group[0].payload)
        while len(group) < limit and size < GROUP_BYTES and self.items:
            group.append(self.items.popleft())
            size += len(group[-1].payload)
        self.size -= size
        if len(self.items) <= INCOMING_LIMIT // 2 and self.size <= INCOMING_BYTES // 2 and self._gate is not None:
            self._gate.resume()
        return group


def _gone(lost: asyncio.Future[None] | None, inbox: _Inbox, acks: dict[int, asyncio.Future[None]], why: str) -> None:
    """A connection is over (lost, or left by ``__aexit__``): mark it lost, wake whoever waits for
    its messages, and fail every publish still waiting for its PUBACK (Undelivered: ``why``)."""
    _settle(lost)
    inbox.wake()
    for fut in list(acks.values()):
        _settle(fut, Undelivered(f"publish not acknowledged: {why}"))
    acks.clear()


def _time_out(fut: asyncio.Future[None], topic: str) -> None:
    _settle(fut, Undelivered(f"publish to {topic} not acknowledged: timed out"))


def _settle(fut: asyncio.Future[None] | None, error: BaseException | None = None) -> None:
    """Resolve ``fut`` (with ``error``, if given) unless it is None or already done."""
    if fut is not None and not fut.done():
        if error is None:
            fut.set_result(None)
        else:
            fut.set_exception(error)


class _RecvBuffer:
    """paho reads a packet in two to four ``recv`` calls (the command byte, each byte of the
    remaining length, the rest); this gives it those bytes from one ``recv`` of up to
    :data:`_RECV_CHUNK` bytes, so a socket read parses every packet that arrived in it."""

    def __init__(self, recv: Callable[[int], bytes]) -> None:
        self._recv = recv
        self._data = b""
        self._pos = 0
        #: Bytes given to paho so far (a read that parsed nothing leaves it unchanged).
        self.consumed = 0

    def recv(self, n: int) -> bytes:
        if self._pos >= len(self._data):
            self._data, self._pos = self._recv(_RECV_CHUNK), 0  # (raises BlockingIOError when nothing came)
        chunk = self._data[self._pos:self._pos + n]
        self._pos += len(chunk)
        self.consumed += len(chunk)
        return chunk

    def pending(self) -> int:
        """Bytes received and not yet given to paho."""
        return len(self._data) - self._pos


#: Most bytes taken from the socket in one read.
_RECV_CHUNK = 64 * 1024


class _ReaderGate:
    """The event loop as one aiomqtt client sees it: the same loop, except that

    - the socket reader the client registers can be paused (the socket is not read: the kernel's
      receive buffer fills and TCP flow control stops the broker) and resumed. Mosquitto 2.0.11
      does not keep to the Receive Maximum once the first PUBACK came back (measured: 2,000 of
      2,000 queued QoS 1 messages sent with 32 acknowledged), so the client cannot rely on the
      broker's flow control alone;
    - a read goes on while :class:`_RecvBuffer` holds bytes (every packet that arrived is parsed in
      one callback), unless paused;
    - a writer is run as soon as it is registered — on the next loop turn, so everything queued
      in this one goes out together — and registered with the selector only when paho could not
      send it all (the socket's buffer was full): no selector change and no wake-up per packet."""

    def __init__(self, loop: asyncio.AbstractEventLoop, before_io: Callable[[], None], buffer: _RecvBuffer,
                 wants_write: Callable[[], bool]) -> None:
        self._loop = loop
        self._thread = threading.get_ident()  # (made on the loop's thread)
        self._before_io = before_io
        self._buffer = buffer
        self._wants_write = wants_write
        self._reader: tuple[int, Callable[..., object], tuple[Any, ...]] | None = None
        self.paused = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loop, name)

    def call_soon_threadsafe(self, callback: Callable[..., object], *args: Any) -> asyncio.Handle:
        """aiomqtt registers every socket reader and writer through this, since paho may call it
        from the connect thread; on the loop's own thread a plain ``call_soon`` does, without
        waking the loop through its self-pipe (a write and a read per published message)."""
        if threading.get_ident() == self._thread:
            return self._loop.call_soon(callback, *args)
        return self._loop.call_soon_threadsafe(callback, *args)

    def add_reader(self, fd: int, callback: Callable[..., object], *args: Any) -> None:
        def read(*a: Any) -> None:
            self._before_io()
            callback(*a)
            while not self.paused and self._reader is not None and self._reader[1] is read:
                if not self._buffer.pending():
                    break
                consumed = self._buffer.consumed
                self._before_io()
                callback(*a)
                # (Not "pending() >= before": a packet that crossed the end of the buffer refills it
                # from the socket, possibly with everything the socket held — then nothing would
                # read those bytes until some other packet arrived.)
                if self._buffer.consumed == consumed:  # nothing parsed: the connection is gone
                    break

        self._reader = (fd, read, args)
        if not self.paused:
            self._loop.add_reader(fd, read, *args)

    def add_writer(self, fd: int, callback: Callable[..., object], *args: Any) -> None:
        def write(*a: Any) -> object:
            self._before_io()
            return callback(*a)

        write(*args)
        if self._wants_write():
            self._loop.add_writer(fd, write, *args)

    def remove_reader(self, fd: int) -> bool:
        self._reader = None
        return self._loop.remove_reader(fd)

    def pause(self) -> None:
        if not self.paused and self._reader is not None:
            self._loop.remove_reader(self._reader[0])
        self.paused = True

    def resume(self) -> None:
        if self.paused and self._reader is not None:
            fd, callback, args = self._reader
            self._loop.add_reader(fd, callback, *args)
            if self._buffer.pending():  # (already off the socket: it need not become readable again)
                self._loop.call_soon(callback, *args)
        self.paused = False


def _uncancel_connected(client: aiomqtt.Client) -> None:
    """Give aiomqtt a fresh CONNACK future when a cancelled connect left its old one cancelled.

    Cancelling the task that awaits CONNACK cancels aiomqtt's ``_connected`` future at once, and a
    socket read already due in the same loop iteration (a refusal from the broker, say) runs
    aiomqtt's disconnect callback, which calls ``_connected.exception()`` and raises
    CancelledError ("Exception in callback", a traceback on stderr). Called before every socket
    read or write and when the connect is cancelled."""
    if client._connected.cancelled():
        client._connected = asyncio.get_running_loop().create_future()


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


class _NoConnack(aiomqtt.MqttError):
    """The broker closed the connection before its CONNACK."""


#: Seconds the TLS probe (:func:`_speaks_tls`) waits for a listener's answer.
TLS_PROBE_TIMEOUT = 2.0


async def _speaks_tls(host: str, port: int, timeout: float = TLS_PROBE_TIMEOUT) -> bool:
    """Whether the listener at ``host:port`` answers a TLS ClientHello with a TLS record: the first
    bytes back are a handshake (0x16) or alert (0x15) record of major version 3. Only the hello is
    sent (no certificate check, nothing of the client's), then the connection is closed; no
    answer within ``timeout``, a close or any socket error is False. An MQTT listener reads the
    hello as a malformed packet and closes the connection without a byte."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    with contextlib.suppress(ssl.SSLWantReadError):
        context.wrap_bio(incoming, outgoing).do_handshake()  # (writes the ClientHello to ``outgoing``)
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                writer.write(outgoing.read())
                head = await reader.readexactly(2)
            finally:
                writer.close()
    except (OSError, asyncio.IncompleteReadError, TimeoutError):
        return False
    return head[0] in (0x15, 0x16) and head[1] == 3


def _tls_context(b: BrokerConfig) -> ssl.SSLContext | None:
    """The TLS context for ``b`` (None without TLS): the broker's certificate verified against
    ``ca_file`` (else the system's CAs) and, when configured, the client certificate
    ``cert_file`` with its key ``key_file`` (mutual TLS). A file that cannot be read, is not PEM, or
    a key that does not match the certificate raises :class:`ConnectRefused` (one line, no key
    material): no retry can mend it (exit 78)."""
    if not b.tls:
        return None
    try:
        context = ssl.create_default_context(cafile=None if b.ca_file is None else str(b.ca_file))
    except (OSError, ssl.SSLError) as exc:
        raise ConnectRefused(f"broker.ca_file: cannot load {b.ca_file}: {_reason(exc)}") from None
    if b.cert_file is not None:
        try:
            context.load_cert_chain(str(b.cert_file), None if b.key_file is None else str(b.key_file),
                                    password=_no_passphrase)
        except (OSError, ssl.SSLError) as exc:
            raise ConnectRefused(f"broker.cert_file/key_file: cannot load the client certificate {b.cert_file} "
                                 f"with its key {b.key_file}: {_reason(exc)}") from None
    return context


def _no_passphrase() -> str:
    """A passphrase-protected key cannot be unlocked by a service (no one types): refuse it
    instead of letting OpenSSL prompt on the terminal."""
    raise ConnectRefused("broker.key_file is protected by a passphrase, which a service cannot type: "
                         "give the key unencrypted (openssl pkey -in KEY -out KEY.pem; chmod 600)")


def _reason(exc: OSError | ssl.SSLError) -> str:
    """One line for a failed TLS file load: OpenSSL's reason, or an OSError's ``strerror`` (the
    ``ssl`` module reports an unparsable file as "PEM lib", without a reason)."""
    if isinstance(exc, ssl.SSLError):
        return exc.reason or "not a PEM file OpenSSL can read"
    return exc.strerror or str(exc)


async def _tls_alert(host: str, port: int, context: ssl.SSLContext, timeout: float = TLS_PROBE_TIMEOUT) -> str | None:
    """The client-certificate alert (OpenSSL's reason, e.g. ``TLSV13_ALERT_CERTIFICATE_REQUIRED``,
    ``TLSV1_ALERT_UNKNOWN_CA``) the TLS listener at ``host:port`` sends after a handshake with
    ``context``, or None. Under TLS 1.3 the broker checks the client's certificate only after
    the client has finished its handshake: paho has sent its CONNECT by then, and the broker's
    close can reset the connection before the alert is read (the failed connect then looks like
    any close). This probe sends nothing after the handshake, so the alert is read intact."""
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port, ssl=context, server_hostname=host)
            try:
                await reader.read(1)
            finally:
                writer.close()
    except ssl.SSLError as exc:
        reason = exc.reason or ""
        return reason if "_ALERT_" in reason and ("CERTIFICATE" in reason or "UNKNOWN_CA" in reason) else None
    except (OSError, TimeoutError):
        pass
    return None


def _certificate_refused(b: BrokerConfig, alert: str) -> ConnectRefused:
    return ConnectRefused(
        f"TLS to {b.host}:{b.port}: the broker refused the client certificate ({alert}); "
        + ("it requires one: set broker.cert_file and broker.key_file" if b.cert_file is None
           else f"check broker.cert_file {b.cert_file}: signed by a CA the broker trusts, not expired"))


def _connect_error(b: BrokerConfig, exc: aiomqtt.MqttError) -> ConnectFailed:
    """Classify a failed connect: :class:`ConnectRefused` when retrying cannot mend it (a refused
    CONNACK, a TLS failure), else :class:`ConnectFailed`. aiomqtt re-raises the socket's error
    ``from None``: the original is still its ``__context__``."""
    where = f"{b.host}:{b.port}"
    rc = getattr(exc, "rc", None)
    code = getattr(rc, "value", rc)
    if isinstance(code, int) and code in _REFUSED:
        return ConnectRefused(f"the broker at {where} refused the connection: {rc}")
    cause = exc.__context__
    if isinstance(cause, ssl.SSLCertVerificationError):
        return ConnectRefused(f"TLS to {where}: the broker's certificate does not verify "
                              f"({cause.verify_message}); check broker.ca_file and broker.host")
    if isinstance(cause, ssl.SSLError) and not isinstance(cause, ssl.SSLEOFError | ssl.SSLZeroReturnError):
        return ConnectRefused(f"TLS to {where} failed ({cause.reason or cause}): is TLS on at the broker's listener "
                              "too (broker.tls, broker.port)?")
    return ConnectFailed(f"cannot connect to {where}: {exc}")


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
    raised (None: retry forever). A :class:`ConnectRefused` is raised at once (retrying cannot
    mend it); any other exception propagates at once. Each failure is logged once (one line);
    after :data:`_LOGGED_FAILURES` in a row only every 100th is, until a connect succeeds.
    """
    failures = 0
    while True:
        try:
            async with transport:
                if failures > _LOGGED_FAILURES:
                    log.warning("connected again after %d failed attempts", failures)
                failures = 0
                return await session(transport)
        except ConnectRefused:
            raise
        except TransportError as exc:
            if max_failures is not None and failures + 1 >= max_failures:
                raise
            delay = backoff.delay(failures)
            failures += 1
            if failures <= _LOGGED_FAILURES or failures % 100 == 0:
                who = getattr(transport, "identifier", "")  # (the daemon runs three connections)
                log.warning("%s%s; retrying in %.2f s (consecutive failures: %d)", f"{who}: " if who else "", exc,
                            delay, failures)
            await sleep(delay)


#: Consecutive connection failures each logged; after them every 100th is.
_LOGGED_FAILURES = 10
#: The daemon's backoff: its broker is normally on the device, so reconnect promptly when it is
#: back (a broker restart costs at most ~2 s more than its downtime).
PROMPT = Backoff(base=0.1, cap=2.0)
