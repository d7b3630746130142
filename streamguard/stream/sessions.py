"""The daemon's MQTT sessions (DESIGN.md §6; stream/daemon.py): the control connection (status,
takeover check, ``online``, Home Assistant discovery, mapped sensors' topics), the input
connection (each stream's command and raw topics: a message is acknowledged once handled and its
decisions committed), the privacy buttons' connection and its sentinel, the identity check before
any of them, and ``offline`` at the end. Subscriptions and the routing of each message to the
intake (stream/intake.py) live here; what a message does lives there."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping

from ..config import Settings
from ..ingest.stream import IngestHub
from .hass import Discovery
from .intake import Intake
from .outbox import AsyncOutbox, InUse
from .runtime import StreamRuntime
from .status import Status
from .store import Store
from .tasks import TASK_STOP_TIMEOUT, consume_beside, stop_tasks
from .transport import PROMPT, Message, MqttTransport, Transport, TransportError, reconnecting
from .vouch import ButtonHearing

log = logging.getLogger(__name__)

#: SUBSCRIBE requests of the input connection in flight at once (stream/transport.py).
SUBSCRIBE_WINDOW = 32
#: Seconds to wait for the retained status (the takeover check) before going ``online``.
CLAIM_WAIT = 1.0
#: Seconds after which a sentinel that has not come back is reported (the wait goes on).
SENTINEL_WAIT = 10.0


def transport(settings: Settings, instance: str, suffix: str, *, will: bool,
              persistent: bool = False) -> MqttTransport:
    """A connection of the identity (client id ``<client id><suffix>``); with ``will``, the status
    will carries ``instance``."""
    s = settings
    return MqttTransport(s.broker, s.publish, device=s.device, status_topic=s.topic("status"),
                         identifier_suffix=suffix, will=will, instance=instance if will else None,
                         persistent_session=persistent)


class Sessions:
    """The sessions of one identity (see module docstring): run each with
    ``reconnecting(<transport>, <session>)`` once :meth:`check_identity` passed.

    ``control``: the status connection (with the will); ``buttons``: the privacy buttons' own
    connection, None without a button to hear. ``instance``: the random token of this process's
    retained status."""

    def __init__(self, settings: Settings, runtimes: Mapping[str, StreamRuntime], *, intake: Intake, store: Store,
                 status: Status, discovery: Discovery, box: AsyncOutbox, ingest: IngestHub,
                 hearings: Mapping[str, ButtonHearing], instance: str, control: MqttTransport,
                 buttons: MqttTransport | None) -> None:
        self.settings = settings
        self.runtimes = runtimes
        self.intake = intake
        self.store = store
        self.status = status
        self.discovery = discovery
        self.ingest = ingest
        self.hearings = hearings
        self.instance = instance
        self.control = control
        self.buttons = buttons
        self._box = box
        self.inputs_ready = asyncio.Event()
        #: The sentinel the buttons' connection waits for before they count as heard (its token, and
        #: the future the consumer resolves when the sentinel comes back): :meth:`_buttons_heard`.
        self._sentinel: tuple[bytes, asyncio.Future[None]] | None = None
        self._sentinels = 0
        #: Raw frames received on the input connection and not acknowledged when it last ended.
        self.unacknowledged = 0
        self.claimed = False  # published "online" at least once
        self._status_checked = asyncio.Event()
        #: Set once ``online`` was first published (every input and sensor subscription confirmed),
        #: and once the buttons' connection has subscribed (set at once without one): READY=1.
        self.online = asyncio.Event()
        self.buttons_subscribed = asyncio.Event()
        #: The identity check passed (check_identity): until then nothing is published under it.
        self.identity_checked = False

    async def control_session(self, t: Transport) -> None:
        """The status connection (clean session): the takeover check, ``online`` and the privacy
        status. (Not the persistent input session: statuses queued there while it was away — our
        own previous process's, say — would look like another instance's live status.)"""
        status_topic = self.settings.topic("status")
        self._status_checked.clear()
        self.ingest.connection(True)  # (a sensor's messages sent while we were away are lost)
        # the status first: its retained message (delivered after this SUBACK) is the takeover check
        await t.subscribe(status_topic)
        for topic in self.discovery.subscriptions:
            await t.subscribe(topic)
        for topic_filter in self.ingest.filters():
            await t.subscribe(topic_filter)
        status = asyncio.create_task(self._go_online(t))
        try:
            async for msg in t.messages():
                if msg.topic == status_topic:
                    self.check_status(msg)
                    continue
                if self.discovery.wants_resend(msg):  # Home Assistant (re)started
                    await self.discovery.sync(t, self._box)
                    continue
                await self.intake.ingest_message(msg)
        finally:
            self.ingest.connection(False)
            await stop_tasks([status], TASK_STOP_TIMEOUT)

    async def input_session(self, t: Transport) -> None:
        """The input connection (persistent session, stream/transport.py: Sessions): each stream's
        command topic (but those of streams held for their privacy button: :meth:`button_session`)
        and, for ``source = "mqtt"`` without ``ingest``, its raw topic. A message is acknowledged
        once handled, so a stalled intake stops the broker instead of filling memory."""
        routes: dict[str, tuple[str, bool]] = {}
        for rt in self.runtimes.values():
            if rt.name not in self.hearings:
                routes[rt.command_topic()] = (rt.name, True)
            if rt.cfg.source == "mqtt" and rt.cfg.ingest is None:
                routes[rt.raw_topic()] = (rt.name, False)
        # Messages are handled while the subscriptions are made: a persistent session gets what
        # was queued for it (and what it left unacknowledged) right after connecting, and an
        # intake that waited for every SUBACK first stopped reading the socket once its queue was
        # full (transport.py, Bounds) — the SUBACKs behind those messages never came, and with
        # 1,000 streams a restart never got past subscribing.
        try:
            await consume_beside(self._consume_inputs(t, routes), self._subscribe_inputs(t, list(routes)),
                                 "input")
        finally:
            self.unacknowledged = t.held
            if held := t.held:  # (never acknowledged: the persistent session gets them again)
                log.warning("%d received message(s) left unhandled; unacknowledged, so the broker delivers "
                            "them again to the next session", held)

    async def _subscribe_inputs(self, t: Transport, topics: list[str]) -> None:
        """Subscribe every input topic, up to ``SUBSCRIBE_WINDOW`` SUBSCRIBEs in flight (1,000
        streams: 2,000 topics in a few round trips' time), then say the inputs are ready."""
        window = asyncio.Semaphore(SUBSCRIBE_WINDOW)

        async def one(topic: str) -> None:
            async with window:
                await t.subscribe(topic)

        try:
            async with asyncio.TaskGroup() as group:
                for topic in topics:
                    group.create_task(one(topic))
        except* TransportError as failed:  # the first one stands for all: the session is lost
            raise failed.exceptions[0] from None
        self.inputs_ready.set()

    async def button_session(self, t: Transport) -> None:
        """The privacy buttons' connection (``<client id>-btn``): a persistent session of its own,
        so that no backlog of raw frames shares its queue at the broker (``max_queued_messages``).
        Every button topic, the command topics of the streams held for their button (a command is
        a press too) and ``<base>/<device>/sentinel`` are subscribed (QoS 1), then
        :meth:`_buttons_heard`; a press is handled as it comes (:meth:`Intake.button_message`,
        :meth:`Intake.command_message`). When the connection ends the buttons are no longer heard
        (stream/vouch.py)."""
        sentinel = self.settings.topic("sentinel")
        try:
            await consume_beside(self._consume_buttons(t, sentinel), self._confirm_buttons(t, sentinel), "buttons")
        finally:
            now = self.ingest.clock()
            for hearing in self.hearings.values():
                hearing.lost(now)

    async def _consume_buttons(self, t: Transport, sentinel: str) -> None:
        """Handle the buttons' messages in order; the sentinel being waited for resolves its future."""
        commands = {self.runtimes[name].command_topic(): name for name in self.hearings}
        async for msg in t.messages():
            if msg.topic in commands:
                await self.intake.command_message(commands[msg.topic], msg.payload)
            elif msg.topic != sentinel:
                await self.intake.button_message(msg)
            elif (sent := self._sentinel) is not None and msg.payload == sent[0] and not sent[1].done():
                sent[1].set_result(None)  # everything before it is handled
            await self.store.durable()  # (a press is acknowledged once its mark is stored)

    async def _confirm_buttons(self, t: Transport, sentinel: str) -> None:
        commands = [self.runtimes[name].command_topic() for name in self.hearings]
        for topic in (*self.ingest.button_filters(), *commands, sentinel):
            await t.subscribe(topic)
        self.buttons_subscribed.set()
        if self.hearings:  # (a periodic stream's button is not held for)
            await self._buttons_heard(t)

    async def _buttons_heard(self, t: Transport) -> None:
        """Every subscription is confirmed: publish a sentinel to ``<base>/<device>/sentinel``, which
        this session subscribes to, and once it comes back — after everything the broker had queued
        for the session, presses included, since it delivers a session's messages in order — the
        buttons are heard; the steps taken meanwhile are vouched for if the broker kept the session,
        else decided private (stream/vouch.py)."""
        self._sentinels += 1
        token = f"{self.instance}/{self._sentinels}".encode()
        back = asyncio.get_running_loop().create_future()
        self._sentinel = (token, back)
        topic = self.settings.topic("sentinel")
        await t.publish(topic, token, qos=1)
        try:
            async with asyncio.timeout(SENTINEL_WAIT):
                await asyncio.shield(back)
        except TimeoutError:
            log.error("the sentinel published on %s did not come back within %g s: the privacy buttons are not "
                      "heard (their steps are held, then decided as private); does the broker's ACL let this "
                      "client read and write it?", topic, SENTINEL_WAIT)
            await back
        kept = isinstance(t, MqttTransport) and t.session_present
        for name, hearing in self.hearings.items():
            await self.intake.unvouched(name, hearing.confirmed(kept))
            self.intake.unvouched_said.pop(name, None)

    async def _consume_inputs(self, t: Transport, routes: dict[str, tuple[str, bool]]) -> None:
        async for group in t.message_groups():  # what queued up while the last group was handled
            frames: list[bytes] = []  # consecutive raw frames of one stream, taken together
            name = ""
            for msg in group:
                route = routes.get(msg.topic)
                if route is None:
                    continue
                if frames and (route[1] or route[0] != name):  # (commands keep their place)
                    await self.intake.handle_frame(name, frames)
                    frames = []
                name, is_command = route
                if is_command:
                    await self.intake.handle_command(name, msg.payload)
                else:
                    frames.append(msg.payload)
            if frames:
                await self.intake.handle_frame(name, frames)
            await self.store.durable()  # (acknowledged when the next group is asked for)

    def check_status(self, msg: Message) -> None:
        """Raise :class:`InUse` if ``msg`` (on our status topic) is another streamguard's status
        that can only have been published since we went online: a live one, or a retained one
        found on a reconnect after we had claimed the topic (another daemon connected with our
        client id — taking our connection over — or runs the same device). A retained status of
        another instance before our first claim is a previous run's (ignored)."""
        try:
            body = json.loads(msg.payload)
            other = body.get("instance") if isinstance(body, dict) else None
        except ValueError:
            other = None
        if isinstance(other, str) and other != self.instance and (self.claimed or not msg.retain):
            raise InUse(f"client id {self.control.identifier} (device {self.settings.device}) was taken over by "
                        "another streamguard; stopping")
        self._status_checked.set()

    async def _go_online(self, t: Transport) -> None:
        """Publish ``online`` once the retained status passed :meth:`check_status` (or none came
        within ``CLAIM_WAIT``) and the input subscriptions are in place (a producer that waits for
        ``online`` loses no frame), then keep the privacy status fresh."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLAIM_WAIT):
                await self._status_checked.wait()
        await self.inputs_ready.wait()
        if self.discovery.enabled:
            # Home Assistant shows a stream only once its privacy status counts a record published
            # by this process (stream/hass.py): these go out before ``online``, so the previous
            # process's retained statuses never make its last value look current again
            rts = list(self.runtimes.values())
            for rt, payload in zip(rts, await self.status.privacy_payloads(rts)):
                await t.publish(rt.privacy_topic(), payload, retain=True)
        await t.publish(self.settings.topic("status"), self.status.status_payload("online"), retain=True)
        self.claimed = True
        self.online.set()
        await self.discovery.sync(t, self._box)
        self.status.refresh.dirty.set()
        await self.status.loop(t)

    async def check_identity(self) -> None:
        """One identity, one sequence (issue 28). A stream this outbox holds no position of numbers
        its records from seq 0; if the identity's retained privacy status shows seqs published
        already (by another outbox: a re-install, a lost disk, a second daemon with an outbox of
        its own), consumers would get two payloads for one seq. A short clean connection
        (``<client id>-chk``, no will: a running daemon of the identity is not disturbed) reads
        those streams' retained privacy statuses — everything retained arrives before a sentinel
        published after the subscriptions — and raises :class:`~.outbox.InUse` naming the first
        stream whose ``next_seq`` is above 0. Every other connection waits for it; a broker that
        is down is waited for (``reconnecting``); a stop meanwhile drains what the publisher can
        publish once the check passed, and says ``offline`` only if it did (``identity_checked``).
        A sentinel that does not come back within ``SENTINEL_WAIT`` of the subscriptions (an ACL
        without ``<base>/<device>/sentinel``) is logged and the check passes on what came."""
        names = list(self.runtimes)
        positions = await self._box.run(lambda b: [b.next_position(n) for n in names])
        fresh = {self.runtimes[n].privacy_topic(): n for n, p in zip(names, positions) if p == 0}
        if not fresh:
            self.identity_checked = True
            return
        sentinel = self.settings.topic("sentinel")
        token = f"{self.instance}/identity".encode()

        async def session(t: Transport) -> None:
            for topic in (*fresh, sentinel):
                await t.subscribe(topic)
            await t.publish(sentinel, token, qos=1)
            try:
                async with asyncio.timeout(SENTINEL_WAIT):
                    async for msg in t.messages():
                        if msg.topic == sentinel and msg.payload == token:
                            return
                        if msg.topic in fresh and (published := _next_seq(msg.payload)) > 0:
                            raise InUse(f"stream {fresh[msg.topic]}: seqs 0-{published - 1} were published under "
                                        f"device {self.settings.device} (retained {msg.topic}), but this outbox "
                                        f"({self.settings.outbox.path}) holds none of them and would number from 0 "
                                        "again: run with the outbox that published them, or another device id")
            except TimeoutError:
                log.warning("identity check: the sentinel on %s did not come back within %g s; going on with the "
                            "retained statuses received", sentinel, SENTINEL_WAIT)

        await reconnecting(transport(self.settings, self.instance, "-chk", will=False), session, backoff=PROMPT)
        self.identity_checked = True

    async def say_offline(self) -> None:
        """A clean DISCONNECT suppresses the will, so publish ``offline`` explicitly."""
        try:
            async with self.control as t:
                await t.publish(self.settings.topic("status"), self.status.status_payload("offline"), retain=True)
                rts = list(self.runtimes.values())
                for rt, payload in zip(rts, await self.status.privacy_payloads(rts)):
                    await t.publish(rt.privacy_topic(), payload, retain=True)
        except TransportError as exc:
            log.warning("could not publish the offline status: %s", exc)


def _next_seq(payload: bytes) -> int:
    """The ``next_seq`` of a retained privacy status (0 if it has none)."""
    with contextlib.suppress(ValueError):
        body = json.loads(payload)
        if isinstance(body, dict) and isinstance(n := body.get("next_seq"), int):
            return n
    return 0
