"""The transport's fast path (issue 15: _RecvBuffer, _Inbox, PUBACK futures): cases an adversarial review found."""

from __future__ import annotations

import asyncio
import time

import paho.mqtt.client as paho_mqtt
import pytest
from brokers import Broker

from streamguard.config import BrokerConfig, PublishConfig
from streamguard.stream.transport import MqttTransport, TransportError

BASE = "sgreview"


def make_transport(cfg: BrokerConfig, name: str, *, persistent: bool = False, suffix: str = "") -> MqttTransport:
    return MqttTransport(cfg, PublishConfig(window=100), device=name, status_topic=f"{BASE}/{name}/status",
                         identifier_suffix=suffix, will=False, timeout=3.0, persistent_session=persistent)


def publish_blocking(broker: Broker, topic: str, payloads: list[bytes]) -> None:
    """Publish from paho's own thread and wait for every PUBACK; the caller blocks its event loop
    meanwhile, so everything the broker forwards piles up in the subscriber's socket buffer."""
    c = paho_mqtt.Client(paho_mqtt.CallbackAPIVersion.VERSION2, client_id="review-pub")
    if broker.ca_file is not None:
        c.tls_set(ca_certs=str(broker.ca_file))
    c.connect(broker.host, broker.port)
    c.loop_start()
    try:
        infos = [c.publish(topic, p, qos=1) for p in payloads]
        for info in infos:
            info.wait_for_publish(5)
            assert info.is_published()
    finally:
        c.disconnect()
        c.loop_stop()


@pytest.mark.parametrize("qos", [0, 1])
@pytest.mark.parametrize("fixture", ["mosquitto", "mosquitto_tls"])
async def test_bytes_left_in_the_recv_buffer_are_parsed_without_more_traffic(fixture: str, qos: int,
                                                                             request: pytest.FixtureRequest) -> None:
    """24 messages of ~3 KB arrive while the loop is busy (72 KB: more than one 64 KiB recv): all
    are delivered at once. (Regression: the read wrapper stopped when a packet that crossed the
    chunk boundary refilled the buffer — its "nothing parsed" guard compared bytes left — and the
    socket had nothing more, so the last messages sat in _RecvBuffer until some other packet
    arrived: the next PINGRESP, up to `keepalive` = 60 s.)"""
    mosquitto: Broker = request.getfixturevalue(fixture)
    cfg = mosquitto.broker_config()
    sub = make_transport(cfg, "stall")
    n = 24
    payloads = [i.to_bytes(2, "big") + b"x" * 2980 for i in range(n)]
    async with sub:
        await sub.subscribe(f"{BASE}/stall/#", qos=qos)
        publish_blocking(mosquitto, f"{BASE}/stall/x", payloads)  # (blocks the loop: all 24 are in the socket)
        time.sleep(0.3)
        got: list[bytes] = []
        groups = sub.message_groups()
        try:
            async with asyncio.timeout(3):
                while len(got) < n:
                    got += [m.payload for m in await anext(groups)]
        except TimeoutError:
            buffered = sub._client._client._sock_recv.__self__.pending()  # type: ignore[union-attr]
            raise AssertionError(f"{len(got)} of {n} messages after 3 s; {buffered} bytes left in the "
                                 "receive buffer") from None
        finally:
            await groups.aclose()
    assert got == payloads


async def test_two_consumers_both_learn_that_the_connection_is_gone(mosquitto: Broker) -> None:
    """Every consumer waiting in _Inbox.arrival() is woken when the connection goes. (Regression: a
    single waiter slot let a second consumer's future replace the first one's, which then waited
    for ever.)"""
    cfg = mosquitto.broker_config()
    sub = make_transport(cfg, "two")
    async with sub:
        await sub.subscribe(f"{BASE}/two/#")

        async def consume() -> None:
            async for _ in sub.messages():
                pass

        first = asyncio.create_task(consume())
        await asyncio.sleep(0.05)
        second = asyncio.create_task(consume())
        await asyncio.sleep(0.05)
    done, pending = await asyncio.wait([first, second], timeout=2)
    for t in pending:
        t.cancel()
    assert not pending, "a consumer still waits after the transport was closed"
    for t in done:
        assert isinstance(t.exception(), TransportError)


@pytest.fixture
def mosquitto_acl(tmp_path):  # type: ignore[no-untyped-def]
    from brokers import _run_broker

    acl = tmp_path / "acl"
    acl.write_text(f"topic read {BASE}/#\n")  # anonymous clients may subscribe, not publish
    yield from _run_broker(tmp_path, ["allow_anonymous true", "persistence false", f"acl_file {acl}"])


async def test_a_refusing_puback_is_undelivered(mosquitto_acl: Broker) -> None:
    """MQTT 5: the broker answers a publish it refuses (here: not authorised by the ACL) with a
    PUBACK whose reason code is >= 0x80: Undelivered, so the publisher keeps the record. (Before,
    aiomqtt and the first fast path took any PUBACK as delivered, and the outbox deleted it.)"""
    from streamguard.stream.transport import Undelivered

    pub = make_transport(mosquitto_acl.broker_config(), "acl")
    async with pub:
        with pytest.raises(Undelivered):
            await pub.publish(f"{BASE}/acl/x", b"record")
