"""Reading sanitized streams from a broker: QoS 1 subscriptions on a persistent session (the
broker queues what arrives while the consumer is disconnected), every device or one, every
stream or one, until a number of new records or a duration (both bounded).

Topics: ``<base>/<device>/<stream>/{data,aggregate,privacy}`` and ``<base>/<device>/status``
(``+`` for "all"). On a central broker that bridges many devices' sanitized topics (the
sensor-ingest bridge), the same filters see the whole fleet. Reconnects with backoff through the
project's transport (:func:`streamguard.stream.transport.reconnecting`).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from ..config import BrokerConfig, PublishConfig
from ..stream.transport import Backoff, Message, MqttTransport, reconnecting
from .capture import CaptureWriter
from .collector import Collector
from .messages import Record


@dataclass(frozen=True)
class Selection:
    """Which topics to read: ``device``/``stream`` None means all."""

    base: str
    device: str | None = None
    stream: str | None = None

    def filters(self) -> list[str]:
        d, s = self.device or "+", self.stream or "+"
        prefix = f"{self.base}/" if self.base else ""
        return [f"{prefix}{d}/{s}/{kind}" for kind in ("data", "aggregate", "privacy")] + [f"{prefix}{d}/status"]


async def consume(
    broker: BrokerConfig, selection: Selection, collector: Collector, *, count: int | None = None,
    duration: float | None = None, client_id: str = "streamguard-consume", capture: CaptureWriter | None = None,
    backoff: Backoff = Backoff(base=0.2, cap=5.0), timeout: float = 10.0, linger: float = 1.0,
    linger_max: float = 5.0, max_failures: int | None = 6,
) -> None:
    """Feed ``collector`` until ``count`` new records arrived or ``duration`` seconds passed (at
    least one of them must be given). A persistent session: run again with the same
    ``client_id`` to receive what was published in between.

    The client library acknowledges a QoS 1 message when it arrives, before it is read (aiomqtt
    offers no manual acknowledgement), so after ``count`` is reached the session keeps reading
    until the flow pauses for ``linger`` seconds (at most ``linger_max``), and so does a session
    ended by ``duration``. A message that arrives after that and before the disconnect is acknowledged but not read: the next run reports it as
    a gap (``gaps``), never silently. After ``max_failures`` consecutive failures to connect (or
    lost connections) the last :class:`~streamguard.stream.transport.TransportError` is raised."""
    if count is None and duration is None:
        raise ValueError("give a record count or a duration")
    cfg = broker.model_copy(update={"client_id": client_id})
    transport = MqttTransport(cfg, PublishConfig(), device="consumer", status_topic=f"{client_id}/status",
                              will=False, timeout=timeout, persistent_session=True)
    start_records = collector.records()
    stop = asyncio.Event()

    def take(m: Message) -> bool:
        """Feed one message; True once ``count`` new records arrived."""
        if capture is not None:
            capture.write(m)
        items = collector.feed(m)
        return (count is not None and any(isinstance(i, Record) for i in items)
                and collector.records() - start_records >= count)

    async def read(t: MqttTransport) -> None:
        async for m in t.messages():
            if take(m):
                return

    async def session(t: MqttTransport) -> None:
        for f in selection.filters():
            await t.subscribe(f, qos=1)
        reader, stopper = asyncio.ensure_future(read(t)), asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({reader, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for x in (reader, stopper):
                x.cancel()
            await asyncio.gather(reader, stopper, return_exceptions=True)
        if not reader.cancelled() and (exc := reader.exception()) is not None:
            raise exc
        # the client library acknowledged what it already received: read it before leaving, until
        # the flow pauses for ``linger`` seconds (bounded by ``linger_max``)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(linger_max):
                stream = t.messages()
                while True:
                    async with asyncio.timeout(linger):
                        m = await anext(stream)
                    take(m)

    remaining = None if duration is None else max(0.0, duration)
    task = asyncio.create_task(reconnecting(transport, session, backoff=backoff, max_failures=max_failures))
    try:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(remaining):
                await asyncio.shield(task)  # ends when the count is reached, or fails
        if not task.done():  # the duration passed: end the session so that it disconnects cleanly (a
            stop.set()       # cancel during the DISCONNECT would leave the connection open, acknowledging)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(linger_max + timeout + 1.0):
                    await asyncio.shield(task)
        if task.done() and not task.cancelled() and (exc := task.exception()) is not None:
            raise exc
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
