"""Transport, outbox and publisher against a real Mosquitto (tests/brokers.py), and outbox crashes.

Delivery is at-least-once: the checks de-duplicate by (stream, seq) and require that every record
arrives, in order per stream, always with the payload bytes that were stored.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from daemon_harness import FAST, Spy, running
from brokers import Broker

from streamguard.config import BrokerConfig, OutboxConfig, PublishConfig
from streamguard.stream.outbox import AsyncOutbox, Full, Item, Outbox
from streamguard.stream.publisher import Publisher
from streamguard.stream.transport import (
    Backoff,
    ConnectFailed,
    Message,
    MqttTransport,
    TransportError,
    Undelivered,
    reconnecting,
)

BASE = "sgtest"
KEEP = 64


def make_transport(cfg: BrokerConfig, name: str, *, window: int = 100, timeout: float = 3.0,
                   persistent: bool = False, suffix: str = "", will: bool = True) -> MqttTransport:
    return MqttTransport(cfg, PublishConfig(window=window), device=name, status_topic=f"{BASE}/{name}/status",
                         identifier_suffix=suffix, will=will, timeout=timeout, persistent_session=persistent)


def item(stream: str, seq: int, topic: str | None = None) -> Item:
    """A sanitized record whose payload holds a fresh random draw, so a re-drawn resend would show."""
    payload = json.dumps({"stream": stream, "seq": seq, "draw": random.random()}).encode()
    return Item(stream, seq, topic or f"{BASE}/data/{stream}", payload, (0.25, 0.5))


def records_of(m: Message) -> list[tuple[str, int, bytes]]:
    """(stream, seq, payload) of each record in a message, single or batched."""
    body = json.loads(m.payload)
    if isinstance(body, list):
        return [(r["stream"], r["seq"], json.dumps(r).encode()) for r in body]
    return [(body["stream"], body["seq"], m.payload)]


class Collector(Spy):
    """A :class:`Spy` that also splits every message into its records as they arrive."""

    def __init__(self, cfg: BrokerConfig, topic_filter: str, *, persistent: bool = False) -> None:
        super().__init__(cfg, topic_filter, name="collector", persistent=persistent)
        self.records: list[tuple[str, int, bytes]] = []  # in arrival order
        self.seen: set[tuple[str, int]] = set()

    def _received(self, m: Message) -> None:
        super()._received(m)
        new = records_of(m)
        self.records += new
        self.seen.update((s, q) for s, q, _ in new)


# -- transport ---------------------------------------------------------------------------------
async def test_publish_subscribe_round_trip(mosquitto: Broker) -> None:
    """Two connections of one device, told apart by their identifier suffix (no takeover)."""
    cfg = mosquitto.broker_config()
    sub, pub = make_transport(cfg, "dev"), make_transport(cfg, "dev", suffix="-pub", will=False)
    assert (sub.identifier, pub.identifier) == ("streamguard-dev", "streamguard-dev-pub")
    assert sub.will is not None and sub.will.topic == f"{BASE}/dev/status" and pub.will is None
    async with sub, pub:
        await sub.subscribe(f"{BASE}/rt/#")
        await pub.publish(f"{BASE}/rt/x", b"\x00\xffbytes", qos=1)
        got = await asyncio.wait_for(anext(sub.messages()), 5)
    assert got == Message(f"{BASE}/rt/x", b"\x00\xffbytes")


async def test_start_publish_hands_messages_over_at_once_and_returns_the_puback(mosquitto: Broker) -> None:
    """start_publish (the publisher's path, issue 15) queues each message on the connection when
    called, without a task or an await, in call order; its future is done at the PUBACK. Not
    connected, it raises Undelivered at once."""
    cfg = mosquitto.broker_config()
    sub, pub = make_transport(cfg, "sp"), make_transport(cfg, "sp", suffix="-pub", will=False)
    with pytest.raises(Undelivered, match="not connected"):
        pub.start_publish(f"{BASE}/sp/x", b"0")
    async with sub, pub:
        await sub.subscribe(f"{BASE}/sp/#")
        futures = [pub.start_publish(f"{BASE}/sp/x", str(i).encode()) for i in range(20)]
        assert not any(f.done() for f in futures)  # (nothing acknowledged without a loop turn)
        await asyncio.wait_for(asyncio.gather(*futures), 5)
        got: list[bytes] = []
        messages = sub.messages()
        while len(got) < 20:
            got.append((await asyncio.wait_for(anext(messages), 5)).payload)
        assert not pub._acks  # every PUBACK future settled and forgotten
    assert got == [str(i).encode() for i in range(20)]


async def test_a_failed_socket_write_is_undelivered(mosquitto: Broker) -> None:
    """start_publish writes at once; an unexpected error of that write (which aiomqtt's own writer
    would take as a lost connection) is Undelivered, so the publisher reconnects and resends."""
    async with make_transport(mosquitto.broker_config(), "wf", will=False) as t:
        assert t._client is not None
        with pytest.MonkeyPatch.context() as mp, pytest.raises(Undelivered, match="write failed: boom"):
            mp.setattr(t._client._client, "loop_write", lambda: (_ for _ in ()).throw(RuntimeError("boom")))
            t.start_publish(f"{BASE}/wf/x", b"1")


class _StartFailsOnce:
    """A transport whose start_publish fails (``error``: not connected) at its third call, once;
    the others are acknowledged at once."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error or Undelivered("publish not acknowledged: not connected")
        self.calls = 0
        self.sessions = 0
        self.sent: list[int] = []

    async def __aenter__(self) -> _StartFailsOnce:
        self.sessions += 1
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    def start_publish(self, topic: str, payload: bytes, qos: int = 1, retain: bool = False) -> asyncio.Future[None]:
        self.calls += 1
        if self.calls == 3:
            raise self.error
        self.sent.append(json.loads(payload)["seq"])
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut

    async def publish(self, topic: str, payload: bytes, qos: int = 1, retain: bool = False) -> None:
        raise AssertionError("the publisher uses start_publish when the transport has it")


async def test_a_message_that_cannot_be_handed_over_fails_in_its_place(tmp_path: Path) -> None:
    """A start_publish that raises is the failure of that message, met in order: the messages sent
    before it are acknowledged (deleted, never resent), the session ends and the next one resends
    from the failed record on (at-least-once)."""
    t = _StartFailsOnce()
    async with await AsyncOutbox.open(Outbox, tmp_path / "o.sqlite", 100, "drop-oldest") as box:
        await box.run(Outbox.put, [item("a", q) for q in range(6)], keep=KEEP)
        pub = Publisher(box, t, PublishConfig(), backoff=FAST)  # type: ignore[arg-type]
        async with running(pub.run()):
            pub.notify()
            await asyncio.wait_for(pub.idle.wait(), 5)
            assert await box.run(len) == 0
    assert t.sessions == 2
    assert t.sent[:2] == [0, 1] and t.sent.count(0) == 1 and t.sent.count(1) == 1
    assert t.sent[-4:] == [2, 3, 4, 5]  # the second session, from the failed record on
    assert pub.stats.resends == 4  # records 2–5 were tried in the first session (2 failed, 3–5 went out)


async def test_any_error_handing_a_message_over_is_met_in_order(tmp_path: Path) -> None:
    """Review finding (F3): paho's publish raises ValueError (a bad topic, an oversized payload);
    the messages before it are still counted as acknowledged (their deletion is grouped: they are
    deleted by the next start's first session), then the publisher fails with it."""
    t = _StartFailsOnce(ValueError("Invalid topic."))
    async with await AsyncOutbox.open(Outbox, tmp_path / "o.sqlite", 100, "drop-oldest") as box:
        await box.run(Outbox.put, [item("a", q) for q in range(6)], keep=KEEP)
        pub = Publisher(box, t, PublishConfig(), backoff=FAST)  # type: ignore[arg-type]
        task = asyncio.create_task(pub.run())
        pub.notify()
        with pytest.raises(ValueError, match="Invalid topic"):
            await asyncio.wait_for(task, 5)
    assert pub.stats.records == 2 and sorted(pub._ack_later) == [1, 2]  # (outbox ids of seqs 0 and 1)


async def test_messages_that_queued_up_come_as_one_group_in_order(mosquitto: Broker) -> None:
    """Messages received while the consumer was busy come in one group (issue 15: a reader task
    that moved one message at a time made every group 2 messages), in arrival order, each
    acknowledged only when the next group is asked for; the socket is read in chunks, so the 30
    messages are parsed from a few reads, not 60 to 90. (30: below the Receive Maximum of 32 the
    broker keeps to until the first acknowledgement.)"""
    cfg = mosquitto.broker_config()
    sub, pub = make_transport(cfg, "grp"), make_transport(cfg, "grp", suffix="-pub", will=False)
    async with sub, pub:
        await sub.subscribe(f"{BASE}/grp/#")
        paho = sub._client._client  # type: ignore[union-attr]
        reads: list[int] = []
        recv = paho._sock_recv.__self__._recv  # the chunked reader's own socket read

        def counting(n: int) -> bytes:
            reads.append(n)
            return recv(n)

        paho._sock_recv.__self__._recv = counting
        await asyncio.gather(*(pub.publish(f"{BASE}/grp/x", str(i).encode()) for i in range(30)))
        deadline = time.monotonic() + 5
        while sub.held < 30 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        groups = sub.message_groups()
        group = await asyncio.wait_for(anext(groups), 5)
        assert [m.payload for m in group] == [str(i).encode() for i in range(30)]
        assert sub.held == 30  # being handled: not yet acknowledged
        assert len(reads) < 15, reads
        await groups.aclose()


async def test_a_writer_runs_at_once_and_registers_only_when_the_socket_is_full() -> None:
    """The gate runs a registered writer on the spot; it goes to the selector only when paho still
    has bytes to send (the socket's buffer was full)."""
    from streamguard.stream.transport import _ReaderGate, _RecvBuffer

    loop = asyncio.get_running_loop()
    left = [True, False]
    a, b = __import__("socket").socketpair()
    try:
        gate = _ReaderGate(loop, lambda: None, _RecvBuffer(lambda n: b""), lambda: left[0])
        calls: list[int] = []
        gate.add_writer(a.fileno(), lambda: calls.append(1))
        assert calls == [1]  # ran at once
        # paho still wants to write: registered, and run again once the socket is writable
        await asyncio.sleep(0.05)
        assert len(calls) > 1
        loop.remove_writer(a.fileno())
        left[0] = False
        n = len(calls)
        gate.add_writer(a.fileno(), lambda: calls.append(2))
        await asyncio.sleep(0.05)
        assert calls[n:] == [2]  # everything went out: never registered
    finally:
        loop.remove_writer(a.fileno())
        a.close()
        b.close()


def test_recv_buffer_hands_out_one_read_in_pieces() -> None:
    from streamguard.stream.transport import _RecvBuffer

    chunks = [b"\x30\x05hello", b""]
    asked: list[int] = []

    def recv(n: int) -> bytes:
        asked.append(n)
        return chunks.pop(0)

    buf = _RecvBuffer(recv)
    assert buf.recv(1) == b"\x30" and buf.pending() == 6
    assert buf.recv(1) == b"\x05" and buf.recv(10) == b"hello" and buf.pending() == 0
    assert len(asked) == 1
    assert buf.recv(1) == b""  # the connection closed: paho sees it as before


async def test_will_is_published_retained_on_unexpected_loss(mosquitto: Broker) -> None:
    cfg = mosquitto.broker_config()
    child = subprocess.Popen([sys.executable, "-c", _WILL_CHILD, str(mosquitto.port)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "connected"
    finally:
        child.kill()
        child.wait(5)
    async with make_transport(cfg, "sub") as sub:
        await sub.subscribe(f"{BASE}/dying/status")  # retained: arrives on subscribe
        got = await asyncio.wait_for(anext(sub.messages()), 5)
    assert json.loads(got.payload) == {"device": "dying", "state": "offline"}


_WILL_CHILD = f"""
import asyncio, sys
from streamguard.config import BrokerConfig, PublishConfig
from streamguard.stream.transport import MqttTransport
async def main():
    t = MqttTransport(BrokerConfig(port=int(sys.argv[1])), PublishConfig(), device="dying",
                      status_topic="{BASE}/dying/status")
    async with t:
        print("connected", flush=True)
        await asyncio.sleep(30)
asyncio.run(main())
"""


async def test_undelivered_promptly_when_the_broker_stops(mosquitto: Broker) -> None:
    async with make_transport(mosquitto.broker_config(), "pub", timeout=3.0) as t:
        await t.publish(f"{BASE}/x", b"1")
        await asyncio.to_thread(mosquitto.stop)
        start = time.monotonic()
        with pytest.raises(Undelivered):
            await t.publish(f"{BASE}/x", b"2")
        assert time.monotonic() - start < 3.5
        with pytest.raises(TransportError):
            await anext(t.messages())


async def test_tls_connects_with_the_ca_and_fails_without(mosquitto_tls: Broker) -> None:
    async with make_transport(mosquitto_tls.broker_config(), "tls") as t:
        await t.publish(f"{BASE}/tls", b"secure")
    with pytest.raises(ConnectFailed):
        async with make_transport(mosquitto_tls.broker_config(ca_file=None), "tls"):
            pass


async def test_password_auth(mosquitto_auth: Broker, tmp_path: Path) -> None:
    async with make_transport(mosquitto_auth.broker_config(), "auth") as t:
        await t.publish(f"{BASE}/auth", b"ok")
    secret = tmp_path / "secret"
    secret.write_text(f"{mosquitto_auth.password}\n")
    async with make_transport(mosquitto_auth.broker_config(password=None, password_file=secret), "auth") as t:
        await t.publish(f"{BASE}/auth", b"ok")
    with pytest.raises(ConnectFailed):
        async with make_transport(mosquitto_auth.broker_config(password="wrong"), "auth"):
            pass


class _Flaky:
    """A transport whose first ``failures`` connects are refused."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.entered = 0

    async def __aenter__(self) -> _Flaky:
        self.entered += 1
        if self.entered <= self.failures:
            raise ConnectFailed("refused")
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


async def test_reconnecting_backs_off_with_full_jitter() -> None:
    delays: list[float] = []

    async def sleep(d: float) -> None:
        delays.append(d)

    async def session(t: _Flaky) -> str:
        return "done"

    backoff = Backoff()
    assert await reconnecting(_Flaky(12), session, backoff=backoff, sleep=sleep) == "done"  # type: ignore[type-var]
    assert len(delays) == 12
    assert all(0 <= d <= min(30.0, 0.5 * 2**n) for n, d in enumerate(delays))
    assert max(delays[8:]) > 1.0  # grows (full jitter: ≤ 30 s, uniform)
    delays.clear()
    with pytest.raises(ConnectFailed):
        await reconnecting(_Flaky(100), session, backoff=backoff, sleep=sleep, max_failures=5)  # type: ignore[type-var]
    assert len(delays) == 4


# -- outbox ------------------------------------------------------------------------------------
def test_outbox_positions_decisions_marks(tmp_path: Path) -> None:
    path = tmp_path / "o.sqlite"
    with Outbox(path, 100, "drop-oldest") as box:
        box.reserve("a", 10)
        box.reserve("a", 5)
        assert box.next_position("a") == 10 and box.next_position("b") == 0
        box.put([item("a", s) for s in range(12)], keep=4)
        assert box.next_position("a") == 12
        assert box.recent_decisions("a") == {s: (0.25, 0.5) for s in (8, 9, 10, 11)}
        with pytest.raises(sqlite3.IntegrityError):  # a decision is never recorded twice
            box.put([item("a", 12), item("a", 11)], keep=4)
        assert len(box) == 12 and box.next_position("a") == 12
        box.upsert_mark("a", 3, {"honoured": True})
        box.upsert_mark("a", 3, {"honoured": False, "left_leakage": "inf"})
        assert [r.seq for r in box.peek(5, after=box.peek(1)[0].id)] == [1, 2, 3, 4, 5]
    with Outbox(path, 100, "drop-oldest") as box:  # everything persisted
        assert len(box) == 12 and box.next_position("a") == 12
        assert list(box.recent_decisions("a")) == [8, 9, 10, 11]
        assert box.marks("a") == {3: {"honoured": False, "left_leakage": "inf"}}
        assert box.ack(r.id for r in box.peek(3)) == 3
        assert [r.seq for r in box.peek(100)] == list(range(3, 12))


def test_drop_oldest_counts_the_gap(tmp_path: Path) -> None:
    with Outbox(tmp_path / "o.sqlite", 10, "drop-oldest") as box:
        box.put([item("a", s) for s in range(8)], keep=KEEP)
        box.put([item("a", s) for s in range(8, 15)], keep=KEEP)
        assert len(box) == 10 and box.dropped == 5
        assert [r.seq for r in box.peek(100)] == list(range(5, 15))


def test_stop_input_raises_full(tmp_path: Path) -> None:
    with Outbox(tmp_path / "o.sqlite", 10, "stop-input") as box:
        box.put([item("a", s) for s in range(10)], keep=KEEP)
        with pytest.raises(Full):
            box.put([item("a", 10)], keep=KEEP)
        assert len(box) == 10 and box.dropped == 0 and box.next_position("a") == 10
        assert 10 not in box.recent_decisions("a")
        box.ack([box.peek(1)[0].id])
        box.put([item("a", 10)], keep=KEEP)
        assert [r.seq for r in box.peek(100)] == list(range(1, 11))


_CRASH_CHILD = """
import random, sys
from streamguard.stream.outbox import Item, Outbox
def payload(s):
    return (f"record {s};" * (1 + s % 7)).encode()
def say(*words):  # one write per line: a kill never leaves half a line
    sys.stdout.write(" ".join(map(str, words)) + "\\n")
    sys.stdout.flush()
rng = random.Random(int(sys.argv[2]))
with Outbox(sys.argv[1], 10**6, "stop-input") as box:
    seq = box.next_position("s")
    say("start", seq)
    while True:
        k = rng.randint(1, 20)
        box.reserve("s", seq + k + rng.randint(0, 50))
        say("reserved", box.next_position("s"))
        say("putting", seq, k)
        box.put([Item("s", q, "t", payload(q), (q / 1e6, 0.5)) for q in range(seq, seq + k)], keep=50)
        say("put")
        if rng.random() < 0.3:
            rows = box.peek(rng.randint(1, 10))
            say("acking", *[r.seq for r in rows])
            box.ack(r.id for r in rows)
            say("acked")
        seq += k
"""


def test_outbox_survives_sigkill(tmp_path: Path) -> None:
    """A child puts, reserves and acks until SIGKILLed at a random point; after each of three
    kills every confirmed put is present, no put is partial, no row is torn, confirmed acks
    are gone and the position mark never went backwards."""
    path = tmp_path / "crash.sqlite"
    rng = random.Random()
    seed = rng.randrange(2**32)
    rng.seed(seed)
    committed: list[int] = []  # seqs of every committed put, in order
    gone: set[int] = set()  # seqs acknowledged (deleted)
    mark = 0
    for _ in range(3):
        child = subprocess.Popen([sys.executable, "-c", _CRASH_CHILD, str(path), str(rng.randrange(2**32))],
                                 stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        lines: list[list[str]] = []
        while not lines or lines[-1] != ["put"]:  # let the child commit at least one put
            line = child.stdout.readline()
            assert line, f"the child exited early (seed {seed})"
            lines.append(line.split())
        time.sleep(rng.uniform(0.0, 0.15))
        child.send_signal(signal.SIGKILL)
        lines += [ln.split() for ln in child.stdout.read().splitlines()]
        child.wait(5)
        assert lines[0][0] == "start" and int(lines[0][1]) >= mark, f"seed {seed}"
        pending: list[int] = []  # the put in progress when killed: all or nothing
        acking: set[int] = set()  # the ack in progress when killed: all or nothing
        for words in lines[1:]:
            if words[0] == "reserved":
                mark = max(mark, int(words[1]))
            elif words[0] == "putting":
                pending = list(range(int(words[1]), int(words[1]) + int(words[2])))
            elif words[0] == "put":
                committed += pending
                pending = []
            elif words[0] == "acking":
                acking = {int(w) for w in words[1:]}
            elif words[0] == "acked":
                gone |= acking
                acking = set()
        with Outbox(path, 10**6, "stop-input") as box:
            rows = box.peek(10**6)
            seqs = [r.seq for r in rows]
            assert len(box) == len(rows) and len(set(seqs)) == len(seqs), f"seed {seed}"
            assert all(r.payload == (f"record {r.seq};" * (1 + r.seq % 7)).encode() for r in rows)
            if pending and pending[0] in seqs:  # the last put committed before the kill
                committed += pending
            if acking and acking.isdisjoint(seqs):  # the last ack committed before the kill
                gone |= acking
            assert set(seqs) == set(committed) - gone, f"seed {seed}"
            assert box.next_position("s") >= max(mark, max(committed, default=-1) + 1), f"seed {seed}"
            mark = box.next_position("s")
            # decisions are kept for the last 50 *positions* (a restart skips the reserved ones)
            newest = max(committed, default=-1)
            assert box.recent_decisions("s") == {q: (q / 1e6, 0.5) for q in committed if q > newest - 50}, \
                f"seed {seed}"


# -- publisher ---------------------------------------------------------------------------------
async def test_publisher_keeps_records_while_down_and_drains_after_restart(mosquitto: Broker,
                                                                          tmp_path: Path) -> None:
    cfg = mosquitto.broker_config()
    config = OutboxConfig(path=tmp_path / "o.sqlite", max_records=100)
    async with await AsyncOutbox.open(Outbox.from_config, config) as box:
        pub = Publisher(box, make_transport(cfg, "pub", timeout=2.0), PublishConfig(), backoff=FAST)
        async with running(pub.run()):
            await box.run(Outbox.put, [item("a", 0)], keep=KEEP)
            pub.notify()
            await asyncio.wait_for(pub.idle.wait(), 5)
            await asyncio.to_thread(mosquitto.stop)
            await box.run(Outbox.put, [item("a", 1)], keep=KEEP)
            pub.notify()
            await asyncio.sleep(0.5)
            assert await box.run(len) == 1 and not pub.idle.is_set()
            await asyncio.to_thread(mosquitto.start)
            assert await pub.drain(10)
        assert await box.run(len) == 0
    assert pub.stats.records == 2 and pub.stats.messages == 2 and pub.stats.reconnects >= 1


async def test_three_outages_during_2000_records(mosquitto_persistent: Broker, tmp_path: Path) -> None:
    """The broker is stopped and restarted three times while 2,000 records of two streams flow;
    the subscriber (persistent session) gets every record, in order per stream, never two
    different payloads for one record."""
    broker = mosquitto_persistent
    cfg = broker.broker_config()
    per_stream, step = 1000, 10
    stored: dict[tuple[str, int], bytes] = {}
    collector = Collector(cfg, f"{BASE}/data/#", persistent=True)
    async with await AsyncOutbox.open(Outbox, tmp_path / "o.sqlite", 10_000, "stop-input") as box:
        pub = Publisher(box, make_transport(cfg, "pub", window=50, timeout=1.0), PublishConfig(window=50),
                        backoff=FAST)

        async def produce() -> None:
            for first in range(0, per_stream, step):
                items = [item(s, q) for q in range(first, first + step) for s in ("a", "b")]
                await box.run(Outbox.put, items, keep=KEEP)
                pub.notify()
                stored.update({(it.stream, it.seq): it.payload for it in items})
                await asyncio.sleep(0.008)

        async def outages() -> None:
            """Stop the broker while the publisher is busy: after 25 %, 50 % and 75 % of the PUBACKs."""
            for threshold in (500, 1000, 1500):
                while pub.stats.records < threshold:
                    await asyncio.sleep(0.002)
                await asyncio.to_thread(broker.stop)
                await asyncio.sleep(0.15)
                await asyncio.to_thread(broker.start)

        async with running(collector.run()):
            await asyncio.wait_for(collector.subscribed.wait(), 5)
            async with running(pub.run()):
                await asyncio.wait_for(asyncio.gather(produce(), outages()), 30)
                assert await pub.drain(20)
            await collector.wait_until(lambda: len(collector.seen) >= len(stored), 20)

    got = collector.records
    payloads: dict[tuple[str, int], set[bytes]] = {}
    first_seen: dict[str, list[int]] = {"a": [], "b": []}
    for s, q, p in got:
        if (s, q) not in payloads:
            first_seen[s].append(q)
        payloads.setdefault((s, q), set()).add(p)
    assert payloads.keys() == stored.keys()
    assert all(ps == {stored[k]} for k, ps in payloads.items())  # byte-identical resends
    assert all(seqs == sorted(seqs) for seqs in first_seen.values())
    assert pub.stats.reconnects >= 3 and pub.stats.records >= 2 * per_stream


async def test_acknowledged_records_are_deleted_together_and_idle_waits_for_it(mosquitto: Broker,
                                                                              tmp_path: Path) -> None:
    """40 records put one at a time, each published as it comes: their deletions are grouped
    (publisher.ACK_DELAY), not one outbox transaction per PUBACK; idle is set only once all are
    deleted, and a record acknowledged but not deleted is never sent twice in a session."""
    cfg = mosquitto.broker_config()
    collector = Collector(cfg, f"{BASE}/data/#")
    async with await AsyncOutbox.open(Outbox, tmp_path / "o.sqlite", 100, "drop-oldest") as box:
        acks: list[int] = []
        real_ack = Outbox.ack

        def counting_ack(b: Outbox, ids):  # type: ignore[no-untyped-def]
            ids = list(ids)
            acks.append(len(ids))
            return real_ack(b, ids)

        pub = Publisher(box, make_transport(cfg, "pub"), PublishConfig(), backoff=FAST)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(Outbox, "ack", counting_ack)
            async with running(collector.run(), pub.run()):
                await asyncio.wait_for(collector.subscribed.wait(), 5)
                for q in range(40):
                    await box.run(Outbox.put, [item("a", q)], keep=KEEP)
                    pub.notify()
                    await asyncio.sleep(0.001)
                await collector.wait_until(lambda: len(collector.messages) >= 40, 5)
                await asyncio.wait_for(pub.idle.wait(), 5)
                assert await box.run(len) == 0
    assert sum(acks) == 40 and len(acks) < 20, acks
    assert sorted(json.loads(m.payload)["seq"] for m in collector.messages) == list(range(40))
    assert pub.stats.records == 40 and pub.stats.resends == 0


async def test_batching(mosquitto: Broker, tmp_path: Path) -> None:
    """batch_max 5: full batches go at once, partial ones after batch_latency_ms; every message
    is a JSON list of consecutive records of one stream."""
    cfg = mosquitto.broker_config()
    collector = Collector(cfg, f"{BASE}/data/#")
    config = PublishConfig(batch_max=5, batch_latency_ms=300, window=10)
    async with await AsyncOutbox.open(Outbox, tmp_path / "o.sqlite", 100, "drop-oldest") as box:
        pub = Publisher(box, make_transport(cfg, "pub"), config, backoff=FAST)
        async with running(collector.run(), pub.run()):
            await asyncio.wait_for(collector.subscribed.wait(), 5)
            await box.run(Outbox.put, [item("a", q) for q in range(12)] + [item("b", q) for q in range(6)],
                          keep=KEEP)
            pub.notify()
            await collector.wait_until(lambda: len(collector.messages) >= 3, 5)
            await asyncio.sleep(0.05)
            assert pub.stats.messages == 3  # a0–4, a5–9, b0–4; a10–11 and b5 wait for the latency
            await asyncio.wait_for(pub.idle.wait(), 5)
            await collector.wait_until(lambda: len(collector.messages) >= 5, 5)
    batches = [[(r["stream"], r["seq"]) for r in json.loads(m.payload)] for m in collector.messages]
    assert sorted(batches) == [
        [("a", 0), ("a", 1), ("a", 2), ("a", 3), ("a", 4)], [("a", 5), ("a", 6), ("a", 7), ("a", 8), ("a", 9)],
        [("a", 10), ("a", 11)], [("b", 0), ("b", 1), ("b", 2), ("b", 3), ("b", 4)], [("b", 5)],
    ]
    assert pub.stats.records == 18 and pub.stats.messages == 5


async def test_a_topic_change_closes_a_batch(mosquitto: Broker, tmp_path: Path) -> None:
    cfg = mosquitto.broker_config()
    collector = Collector(cfg, f"{BASE}/#")
    async with await AsyncOutbox.open(Outbox, tmp_path / "o.sqlite", 100, "drop-oldest") as box:
        pub = Publisher(box, make_transport(cfg, "pub"), PublishConfig(batch_max=10, batch_latency_ms=5000),
                        backoff=FAST)
        async with running(collector.run(), pub.run()):
            await asyncio.wait_for(collector.subscribed.wait(), 5)
            await box.run(Outbox.put, [item("a", 0), item("a", 1, f"{BASE}/other"), item("a", 2)], keep=KEEP)
            pub.notify()
            await collector.wait_until(lambda: len(collector.messages) >= 2, 5)  # a0, then a1: each closed by a change
            assert await pub.drain(5)  # a2 is flushed at once
            await collector.wait_until(lambda: len(collector.messages) >= 3, 5)
    assert [(m.topic, [r["seq"] for r in json.loads(m.payload)]) for m in collector.messages] == [
        (f"{BASE}/data/a", [0]), (f"{BASE}/other", [1]), (f"{BASE}/data/a", [2])]


def test_store_is_one_transaction_and_prunes_only_closed_marks(tmp_path):
    """``Outbox.store`` writes records, decisions and marks together; closed marks more than
    ``keep`` positions behind are pruned, open ones never."""
    with Outbox(tmp_path / "o.sqlite", 100, "stop-input") as box:
        marks = {i: {"open": i == 3, "state": {"phys": i}, "report": {}} for i in range(30)}
        box.store([Item("s", 0, "t", b"{}")], keep=10, decisions={"s": [(0, 1.0, 1.0)]}, marks={"s": marks})
        assert sorted(box.marks("s")) == [3, *range(19, 30)]
        assert box.recent_decisions("s") == {0: (1.0, 1.0)} and len(box) == 1
    with Outbox(tmp_path / "full.sqlite", 1, "stop-input") as box:
        box.put([Item("s", 0, "t", b"{}")], keep=10)
        with pytest.raises(Full):  # nothing of a refused store is written
            box.store([Item("s", 1, "t", b"{}")], keep=10, decisions={"s": [(1, 0.0, 0.0)]},
                      marks={"s": {1: {"open": True}}})
        assert box.marks("s") == {} and 1 not in box.recent_decisions("s")
