"""Issue 13, failing like a service: a connection the broker refuses for good (wrong password,
a certificate that does not verify, TLS at one end only) is one clear line and exit status 78
(EX_CONFIG, which the unit's RestartPreventExitStatus lists), not a retry loop ending in 0;
a broker that is merely down is retried. Real Mosquitto on loopback; every wait bounded."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from brokers import Broker
from daemon_harness import daemon_toml

from streamguard.cli.common import EXIT_CONFIG
from streamguard.config import PublishConfig
from streamguard.support.loopback import free_port
from streamguard.stream.transport import Backoff, ConnectFailed, ConnectRefused, MqttTransport, reconnecting

EXIT_WITHIN = 30.0


def _run(conf: Path, extra_broker: str = "") -> subprocess.CompletedProcess[bytes]:
    if extra_broker:
        conf.write_text(conf.read_text().replace("[broker]\n", "[broker]\n" + extra_broker, 1))
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMGUARD_")}
    return subprocess.run([sys.executable, "-m", "streamguard.cli", "run", "--config", str(conf)],
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=EXIT_WITHIN, env=env)


def _conf(tmp_path: Path, port: int) -> Path:
    return daemon_toml(tmp_path / "c.toml", tmp_path / "outbox.sqlite", port, base="sgc", device="cfg",
                       stream="s", labels=("off", "on"), source="mqtt")


def _one_line(stderr: bytes) -> str:
    lines = [ln for ln in stderr.decode().splitlines() if ln.startswith("streamguard:")]
    assert len(lines) == 1 and "Traceback" not in stderr.decode(), stderr.decode()
    return lines[0]


def test_wrong_password_exits_78_in_one_line(mosquitto_auth: Broker, tmp_path: Path) -> None:
    t = time.monotonic()
    proc = _run(_conf(tmp_path, mosquitto_auth.port), 'username = "streamguard"\npassword = "wrong"\n')
    assert proc.returncode == EXIT_CONFIG, proc.stderr.decode()
    line = _one_line(proc.stderr)
    assert "refused" in line and "wrong" not in line  # (never the secret)
    assert time.monotonic() - t < 20


def test_unreadable_password_file_exits_78(mosquitto_auth: Broker, tmp_path: Path) -> None:
    proc = _run(_conf(tmp_path, mosquitto_auth.port),
                f'username = "streamguard"\npassword_file = "{tmp_path / "missing"}"\n')
    assert proc.returncode == EXIT_CONFIG, proc.stderr.decode()
    assert "password_file" in _one_line(proc.stderr)


def test_certificate_that_does_not_verify_exits_78(mosquitto_tls: Broker, tmp_path: Path) -> None:
    """TLS on, but without the broker's CA: the system CAs do not verify its certificate."""
    proc = _run(_conf(tmp_path, mosquitto_tls.port), "tls = true\n")
    assert proc.returncode == EXIT_CONFIG, proc.stderr.decode()
    assert "certificate" in _one_line(proc.stderr)


def test_tls_to_a_plain_listener_exits_78(mosquitto: Broker, tmp_path: Path) -> None:
    proc = _run(_conf(tmp_path, mosquitto.port), "tls = true\n")
    assert proc.returncode == EXIT_CONFIG, proc.stderr.decode()
    assert "TLS" in _one_line(proc.stderr)


async def test_a_broker_that_is_down_is_retried_not_refused() -> None:
    """Connection refused (nothing listens yet) is transient: retried until max_failures."""
    from streamguard.config import BrokerConfig

    t = MqttTransport(BrokerConfig(port=free_port()), PublishConfig(), device="d", status_topic="x", will=False,
                      timeout=2.0)
    attempts: list[float] = []

    async def session(_: MqttTransport) -> None:
        raise AssertionError("connected to nothing")

    async def sleep(d: float) -> None:
        attempts.append(d)

    with pytest.raises(ConnectFailed) as info:
        await asyncio.wait_for(reconnecting(t, session, backoff=Backoff(0.01, 0.02), sleep=sleep, max_failures=4), 20)
    assert not isinstance(info.value, ConnectRefused) and len(attempts) == 3


async def test_a_refusal_read_after_the_connect_was_cancelled_raises_nothing() -> None:
    """The race behind a traceback seen in CI: one of the daemon's connections is refused, the
    others' connects are cancelled, and a socket read already due in the same loop iteration runs
    aiomqtt's disconnect callback on the cancelled CONNACK future. The transport's reader gate
    gives aiomqtt a fresh future first, so the callback returns quietly."""
    import socket

    import paho.mqtt.client as paho_client
    from paho.mqtt.reasoncodes import ReasonCode

    from streamguard.config import BrokerConfig

    transport = MqttTransport(BrokerConfig(port=free_port()), PublishConfig(), device="d", status_topic="x",
                              will=False)
    client = transport._new_client()
    raised: list[BaseException] = []
    refused = ReasonCode(paho_client.CONNACK >> 4, identifier=135)  # Not authorized

    def on_read() -> None:
        try:
            client._on_disconnect(client._client, None, None, refused)
        except BaseException as exc:  # the bug: CancelledError from _connected.exception()
            raised.append(exc)
        finally:
            done.set()

    a, b = socket.socketpair()
    done = asyncio.Event()
    try:
        client._loop.add_reader(a.fileno(), on_read)
        client._connected.cancel()          # Task.cancel() does this synchronously
        b.send(b"x")                         # the refusal is already on the socket
        await asyncio.wait_for(done.wait(), 5.0)
        client._loop.remove_reader(a.fileno())
    finally:
        a.close()
        b.close()
    assert raised == []
    assert not client._connected.cancelled()


def test_plain_mqtt_to_a_tls_listener_exits_78_within_seconds(mosquitto_tls: Broker, tmp_path: Path) -> None:
    """Issue 28: TLS off in the configuration, a TLS listener at the broker. Mosquitto answers the
    plain CONNECT by closing the connection (its TLS layer reads no ClientHello); the daemon finds
    the listener speaking TLS and exits 78 in one line (before: retried for 90 s+, never 78)."""
    t = time.monotonic()
    proc = _run(_conf(tmp_path, mosquitto_tls.port))
    took = time.monotonic() - t
    print(f"plain MQTT to a TLS listener: exit {proc.returncode} in {took:.1f} s")
    assert proc.returncode == EXIT_CONFIG, proc.stderr.decode()
    line = _one_line(proc.stderr)
    assert "TLS" in line and "broker.tls" in line, line
    assert took < 10.0


async def test_the_tls_probe_tells_a_tls_listener_from_mqtt_and_from_nothing(
        mosquitto: Broker, mosquitto_tls: Broker) -> None:
    """The probe behind the classification above: a TLS hello to the TLS listener gets a TLS record
    back; the plain MQTT listener closes without one; a port where nothing listens is no TLS."""
    from streamguard.stream.transport import _speaks_tls

    t = time.monotonic()
    assert await _speaks_tls("127.0.0.1", mosquitto_tls.port)
    assert not await _speaks_tls("127.0.0.1", mosquitto.port)
    assert not await _speaks_tls("127.0.0.1", free_port())
    assert time.monotonic() - t < 5.0
