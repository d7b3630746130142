"""Issue 26, TLS client certificates (mutual TLS): ``broker.cert_file`` and ``broker.key_file``
authenticate the daemon to a Mosquitto that requires a certificate (``require_certificate
true``). With its certificate the daemon connects and publishes; without one, with one the
broker's CA did not sign, or with a key that cannot be used, it exits 78 (EX_CONFIG) within
seconds in one line that holds no key material. Real Mosquitto on loopback, certificates made
with openssl in the test's directory; every wait bounded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from brokers import Broker, issue_certificate, make_ca
from daemon_harness import Spy, daemon_toml, running

from streamguard.cli.common import EXIT_CONFIG
from streamguard.config import BrokerConfig, PublishConfig
from streamguard.stream.transport import MqttTransport

#: A refused or unusable certificate must end the daemon within this many seconds, the process's
#: start included (measured 2.3-3.4 s on an idle machine, 10 s at load 10 on 2 cores; a refusal
#: taken for a transient failure would be retried until the subprocess timeout).
EXIT_WITHIN = 20.0
FRAMES = 30


def _run(tmp_path: Path, broker: Broker, tls: str, stdin: bytes | None = None) -> tuple[subprocess.CompletedProcess[bytes], float]:
    """The daemon (``streamguard run``) on ``broker`` with the ``[broker]`` lines ``tls``, reading
    ``stdin`` (else its stream's raw MQTT topic: it runs until it fails): its result and how long
    it ran."""
    conf = daemon_toml(tmp_path / "c.toml", tmp_path / "outbox.sqlite", broker.port, base="sgm", device="mtls",
                       stream="s", labels=("off", "on"), source="mqtt" if stdin is None else "stdin")
    conf.write_text(conf.read_text().replace("[broker]\n", "[broker]\n" + tls, 1))
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMGUARD_")}
    t = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "streamguard.cli", "run", "--config", str(conf)],
                          input=b"" if stdin is None else stdin, capture_output=True, timeout=60, env=env)
    return proc, time.monotonic() - t


def _tls(ca: Path, cert: Path | None = None, key: Path | None = None) -> str:
    return f'tls = true\nca_file = "{ca}"\n' + (f'cert_file = "{cert}"\nkey_file = "{key}"\n' if cert else "")


def _one_line(stderr: bytes) -> str:
    text = stderr.decode()
    lines = [ln for ln in text.splitlines() if ln.startswith("streamguard:")]
    assert len(lines) == 1 and "Traceback" not in text, text
    assert "PRIVATE KEY" not in text
    return lines[0]


async def test_a_daemon_with_its_client_certificate_connects_and_publishes(mosquitto_mtls: Broker,
                                                                         tmp_path: Path) -> None:
    """The daemon (a subprocess, frames on stdin) logs in with its certificate and publishes a
    record per frame; a subscriber (itself logged in with the certificate) receives them."""
    import asyncio

    b = mosquitto_mtls
    assert b.ca_file and b.cert_file and b.key_file
    frames = b"".join(json.dumps({"value": ("off", "on")[i % 3 == 0], "ts": 1000.0 + i}).encode() + b"\n"
                      for i in range(FRAMES))
    spy = Spy(b.broker_config(), "sgm/#")
    async with running(spy.run()):
        await asyncio.wait_for(spy.subscribed.wait(), 10)
        proc, took = await asyncio.to_thread(_run, tmp_path, b, _tls(b.ca_file, b.cert_file, b.key_file), frames)
        print(f"mutual TLS: exit {proc.returncode} after {took:.1f} s")
        assert proc.returncode == 0, proc.stderr.decode()
        await spy.wait_until(lambda: len(spy.seqs("sgm/mtls/s/data")) == FRAMES, 10, "a record per frame")
    assert "streamguard-mtls" in b.log_text()  # (the broker's log names the daemon's connections)


async def test_the_client_certificate_is_what_the_broker_accepts(mosquitto_mtls: Broker) -> None:
    """The transport with the client certificate connects and round-trips a message; without it
    the broker's TLS layer refuses the connection (a permanent refusal: no retry loop)."""
    from streamguard.stream.transport import ConnectRefused

    b = mosquitto_mtls
    cfg = b.broker_config()
    async with MqttTransport(cfg, PublishConfig(), device="probe", status_topic="x", will=False, timeout=5.0) as t:
        await t.subscribe("probe/#")
        await t.publish("probe/hello", b"1", qos=1)
        async for m in t.messages():
            assert m.topic == "probe/hello" and m.payload == b"1"
            break
    t0 = time.monotonic()
    with pytest.raises(ConnectRefused) as info:
        async with MqttTransport(b.broker_config(cert_file=None, key_file=None), PublishConfig(), device="probe",
                                 status_topic="x", will=False, timeout=5.0):
            pass
    assert "certificate" in str(info.value) and time.monotonic() - t0 < EXIT_WITHIN


def test_without_a_client_certificate_the_daemon_exits_78(mosquitto_mtls: Broker, tmp_path: Path) -> None:
    assert mosquitto_mtls.ca_file
    proc, took = _run(tmp_path, mosquitto_mtls, _tls(mosquitto_mtls.ca_file))
    print(f"no client certificate: exit {proc.returncode} after {took:.1f} s")
    assert proc.returncode == EXIT_CONFIG, proc.stderr.decode()
    line = _one_line(proc.stderr)
    assert "certificate" in line and "broker.cert_file" in line, line
    assert took < EXIT_WITHIN


def test_a_certificate_from_another_ca_exits_78(mosquitto_mtls: Broker, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    cert, key = issue_certificate(other, "streamguard", make_ca(other, "stranger"), client=True)
    assert mosquitto_mtls.ca_file
    proc, took = _run(tmp_path, mosquitto_mtls, _tls(mosquitto_mtls.ca_file, cert, key))
    print(f"a stranger's client certificate: exit {proc.returncode} after {took:.1f} s")
    assert proc.returncode == EXIT_CONFIG, proc.stderr.decode()
    assert "certificate" in _one_line(proc.stderr)
    assert took < EXIT_WITHIN


@pytest.mark.parametrize("fault", ["missing", "not-a-key", "another-key"])
def test_an_unusable_key_is_a_configuration_error(fault: str, mosquitto_mtls: Broker, tmp_path: Path) -> None:
    """A key file that is missing, is not PEM, or does not belong to the certificate: exit 78 in one
    line naming broker.key_file, before any connection (the broker never sees the daemon)."""
    b = mosquitto_mtls
    assert b.ca_file and b.cert_file and b.key_file
    key = tmp_path / "bad.key"
    if fault == "not-a-key":
        key.write_text("this is not a key\n")
    elif fault == "another-key":
        key = issue_certificate(tmp_path, "someone-else", make_ca(tmp_path, "ca2"), client=True)[1]
    proc, took = _run(tmp_path, b, _tls(b.ca_file, b.cert_file, key))
    assert proc.returncode == EXIT_CONFIG, proc.stderr.decode()
    assert "key_file" in _one_line(proc.stderr)
    assert took < EXIT_WITHIN
    assert "streamguard-mtls" not in b.log_text()


def test_key_file_mode_and_pairing_are_checked(tmp_path: Path) -> None:
    """A key readable by group or others is warned about (like password_file); a certificate
    without its key, or either without TLS, is refused when the configuration loads."""
    from pydantic import ValidationError

    cert, key = issue_certificate(tmp_path, "c", make_ca(tmp_path), client=True)
    assert BrokerConfig(tls=True, cert_file=cert, key_file=key).risks() == []
    key.chmod(0o640)
    (risk,) = BrokerConfig(tls=True, cert_file=cert, key_file=key).risks()
    assert risk.startswith("broker.key_file") and "640" in risk
    for bad in ({"tls": True, "cert_file": cert}, {"tls": True, "key_file": key},
                {"tls": False, "cert_file": cert, "key_file": key}):
        with pytest.raises(ValidationError):
            BrokerConfig(**bad)
