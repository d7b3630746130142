"""Real-broker pytest fixtures: Mosquitto subprocesses on loopback (notes/ecosystem.md §2.2).

Import the fixtures into a test module (pytest puts ``tests/`` on ``sys.path``)::

    from brokers import mosquitto, mosquitto_auth, mosquitto_persistent, mosquitto_tls

Each fixture starts ``mosquitto -c CONF`` on a free 127.0.0.1 port with a configuration written in
the test's ``tmp_path`` and yields a :class:`Broker` (``device_and_central``: two of them, the
device broker running the shipped ``deploy/mosquitto`` configuration and bridging to the other), whose ``stop()`` / ``start()`` stop the
broker (SIGTERM) and start it again on the same port, for outage tests. Teardown kills the broker
and prints its log, which pytest shows when the test failed. Tests are skipped where Mosquitto is
not installed. Every wait is bounded.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
import re
from pathlib import Path
from typing import Any

import pytest

from streamguard.support.loopback import HOST, accepts, free_port
from streamguard.config import BrokerConfig

#: Mosquitto lives in an sbin directory, which is not on every PATH.
MOSQUITTO = shutil.which("mosquitto") or shutil.which("mosquitto", path="/usr/local/sbin:/usr/sbin:/sbin")
_START_TIMEOUT = 5.0
_STOP_TIMEOUT = 5.0
_START_ATTEMPTS = 5




@dataclass
class Broker:
    """A Mosquitto subprocess listening on ``host:port``; credentials and CA where configured."""

    workdir: Path
    settings: list[str]
    port: int = 0
    host: str = HOST
    username: str | None = None
    password: str | None = None
    ca_file: Path | None = None
    #: The client certificate and key a broker that requires one (``mosquitto_mtls``) accepts.
    cert_file: Path | None = None
    key_file: Path | None = None
    #: A whole configuration (``settings`` unused), ``@PORT@`` standing for the listener's port.
    conf_text: str | None = None
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def log(self) -> Path:
        return self.workdir / "mosquitto.log"

    def broker_config(self, **overrides: Any) -> BrokerConfig:
        """A :class:`BrokerConfig` for this broker (TLS with its CA, its credentials, its client
        certificate)."""
        values: dict[str, Any] = {"host": self.host, "port": self.port, "username": self.username,
                                  "password": self.password, "tls": self.ca_file is not None,
                                  "ca_file": self.ca_file, "cert_file": self.cert_file, "key_file": self.key_file}
        return BrokerConfig(**(values | overrides))

    def _write_conf(self) -> Path:
        if self.conf_text is not None:
            lines = [self.conf_text.replace("@PORT@", str(self.port)), f"log_dest file {self.log}"]
        else:
            lines = [f"listener {self.port} {HOST}", *self.settings, "set_tcp_nodelay true",
                     f"log_dest file {self.log}"]
        if os.geteuid() == 0:
            lines.append("user root")  # else it drops to user mosquitto and cannot read our files
        conf = self.workdir / "mosquitto.conf"
        conf.write_text("\n".join(lines) + "\n")
        return conf

    def _launch(self) -> bool:
        """Start on ``self.port``; True once it accepts connections, False if it exited."""
        assert MOSQUITTO is not None
        self._proc = subprocess.Popen([MOSQUITTO, "-c", str(self._write_conf())],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + _START_TIMEOUT
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                return False
            if accepts(self.port):
                return True
            time.sleep(0.02)
        self.kill()
        raise RuntimeError(f"mosquitto did not accept connections on port {self.port}:\n{self.log_text()}")

    def start(self, *, new_port: bool = False) -> None:
        """Start the broker (on the same port unless ``new_port``), retrying a start race."""
        assert self._proc is None or self._proc.poll() is not None, "the broker is running"
        for _ in range(_START_ATTEMPTS):
            if new_port:
                self.port = free_port()
            if self._launch():
                return
            time.sleep(0.1)  # the port was taken (start race) or is not free again yet
        raise RuntimeError(f"mosquitto could not start on port {self.port}:\n{self.log_text()}")

    def stop(self) -> None:
        """SIGTERM and wait (a clean shutdown: a persistent broker saves its database)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(_STOP_TIMEOUT)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else "(no log)"


def _require(*tools: str) -> None:
    """Skip the test unless Mosquitto and ``tools`` are installed."""
    missing = [t for t in tools if shutil.which(t) is None] + (["mosquitto"] if MOSQUITTO is None else [])
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)}")


def _run_broker(workdir: Path, settings: list[str], **credentials: Any) -> Iterator[Broker]:
    _require()
    workdir.mkdir(parents=True, exist_ok=True)
    broker = Broker(workdir, settings, **credentials)
    broker.start(new_port=True)
    try:
        yield broker
    finally:
        broker.kill()
        print(f"--- mosquitto log (port {broker.port}) ---\n{broker.log_text()}")


@pytest.fixture
def mosquitto(tmp_path: Path) -> Iterator[Broker]:
    """An anonymous broker without persistence. Its queue per subscriber is large: a test's
    subscriber must see every message even when the daemon drains a backlog in one burst at
    shutdown (Mosquitto's default of 1000 queued QoS 1 messages would drop the rest)."""
    yield from _run_broker(tmp_path, ["allow_anonymous true", "persistence false", "max_queued_messages 100000"])


@pytest.fixture
def mosquitto_persistent(tmp_path: Path) -> Iterator[Broker]:
    """An anonymous broker that saves sessions and queued messages across stop()/start()."""
    yield from _run_broker(tmp_path, ["allow_anonymous true", "persistence true",
                                      f"persistence_location {tmp_path}/", "max_queued_messages 100000"])


@pytest.fixture
def mosquitto_auth(tmp_path: Path) -> Iterator[Broker]:
    """A broker that requires username ``streamguard`` and the password in ``broker.password``."""
    _require("mosquitto_passwd")
    username, password = "streamguard", "s3cret-pw"
    pwfile = tmp_path / "passwd"
    subprocess.run(["mosquitto_passwd", "-c", "-b", str(pwfile), username, password], check=True, timeout=10,
                   capture_output=True)
    yield from _run_broker(tmp_path, ["allow_anonymous false", f"password_file {pwfile}", "persistence false"],
                           username=username, password=password)


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, timeout=30, capture_output=True)


_EC = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


def make_ca(d: Path, name: str = "ca") -> tuple[Path, Path]:
    """A self-signed CA in ``d``: (certificate, key)."""
    ca, ca_key = d / f"{name}.crt", d / f"{name}.key"
    _openssl("req", "-x509", *_EC, "-keyout", str(ca_key), "-out", str(ca), "-days", "2",
             "-subj", f"/CN=streamguard test {name}")
    return ca, ca_key


def issue_certificate(d: Path, name: str, ca: tuple[Path, Path], *, client: bool = False) -> tuple[Path, Path]:
    """A certificate signed by ``ca`` (certificate, key): a server's for 127.0.0.1, or a client's
    (CN ``name``). Files ``<name>.crt`` and ``<name>.key`` (0600) in ``d``."""
    key, csr, cert, ext = (d / f"{name}{n}" for n in (".key", ".csr", ".crt", ".ext"))
    _openssl("req", *_EC, "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={name if client else HOST}")
    ext.write_text(("" if client else f"subjectAltName = IP:{HOST}\n") + "basicConstraints = CA:FALSE\n"
                   "keyUsage = digitalSignature, keyEncipherment\n"
                   f"extendedKeyUsage = {'clientAuth' if client else 'serverAuth'}\n")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-CAcreateserial",
             "-out", str(cert), "-days", "2", "-extfile", str(ext))
    key.chmod(0o600)
    return cert, key


def _make_certificates(d: Path) -> tuple[Path, Path, Path]:
    """A self-signed CA and a server certificate for 127.0.0.1 signed by it: (ca, cert, key)."""
    ca = make_ca(d)
    return ca[0], *issue_certificate(d, "server", ca)


@pytest.fixture
def mosquitto_tls(tmp_path: Path) -> Iterator[Broker]:
    """An anonymous TLS broker whose certificate (SAN 127.0.0.1) is signed by ``broker.ca_file``."""
    _require("openssl")
    ca, cert, key = _make_certificates(tmp_path)
    yield from _run_broker(tmp_path, ["allow_anonymous true", "persistence false", f"cafile {ca}",
                                      f"certfile {cert}", f"keyfile {key}"], ca_file=ca)


@pytest.fixture
def mosquitto_mtls(tmp_path: Path) -> Iterator[Broker]:
    """A TLS broker that requires a client certificate signed by its CA (``require_certificate
    true``, Mosquitto's mutual TLS) and takes its CN as the username; ``broker.cert_file`` and
    ``broker.key_file`` are one it accepts (CN ``streamguard``)."""
    _require("openssl")
    ca = make_ca(tmp_path)
    cert, key = issue_certificate(tmp_path, "server", ca)
    client = issue_certificate(tmp_path, "streamguard", ca, client=True)
    yield from _run_broker(tmp_path, ["allow_anonymous false", "persistence false", f"cafile {ca[0]}",
                                      f"certfile {cert}", f"keyfile {key}", "require_certificate true",
                                      "use_identity_as_username true"],
                           ca_file=ca[0], cert_file=client[0], key_file=client[1])


#: The shipped device-broker configuration (deploy/README.md).
DEPLOY = Path(__file__).resolve().parents[1] / "deploy" / "mosquitto"
#: The users of the shipped ACL (deploy/mosquitto/streamguard.acl) and the test's passwords.
DEVICE_USERS = {name: f"{name}-pw" for name in ("streamguard", "zigbee2mqtt", "sensor", "button", "homeassistant")}


def render_conf(text: str, values: dict[str, str | None]) -> str:
    """``text`` (a Mosquitto configuration) with the value of each directive in ``values``
    replaced on every line that sets it, or the line dropped when the value is None. Comments and
    every other line are kept as shipped. Raises KeyError if a directive is not set in ``text`` (the
    shipped file changed: the test must follow)."""
    out = text
    for key, value in values.items():
        pattern = re.compile(rf"^{re.escape(key)}(?: .*)?$", re.MULTILINE)
        if not pattern.search(out):
            raise KeyError(f"{key} is not set in the configuration")
        out = pattern.sub("" if value is None else f"{key} {value}".replace("\\", "\\\\"), out)
    return out


@dataclass
class DeviceAndCentral:
    """The device broker (shipped configuration and ACL, ``users``' passwords) bridged to
    ``central`` (anonymous, loopback)."""

    device: Broker
    central: Broker
    users: dict[str, str]

    def login(self, user: str) -> BrokerConfig:
        """A :class:`BrokerConfig` for the device broker as ``user``."""
        return self.device.broker_config(username=user, password=self.users[user])


@pytest.fixture
def device_and_central(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[DeviceAndCentral]:
    """Two Mosquitto instances on loopback: a central one (persistent, for outage tests), and the
    device's running deploy/mosquitto/streamguard-device.conf (its ACL verbatim) with the test's
    port, paths, users and the central broker as the bridge's address (plain TCP on loopback, no
    remote login).
    Parametrized indirectly with a tuple of lines, it also enables those lines that the shipped
    file has commented out (its options)."""
    _require("mosquitto_passwd")
    pwfile = tmp_path / "device" / "passwd"
    pwfile.parent.mkdir(parents=True)
    for i, (user, password) in enumerate(DEVICE_USERS.items()):
        subprocess.run(["mosquitto_passwd", *(["-c"] if i == 0 else []), "-b", str(pwfile), user, password],
                       check=True, timeout=10, capture_output=True)
    central_gen = _run_broker(tmp_path / "central", ["allow_anonymous true", "persistence true",
                                                      f"persistence_location {tmp_path / 'central'}/",
                                                      "max_queued_messages 100000"])
    central = next(central_gen)
    try:
        text = render_conf((DEPLOY / "streamguard-device.conf").read_text(), {
            "listener": f"@PORT@ {HOST}",
            "password_file": str(pwfile),
            "acl_file": str(DEPLOY / "streamguard.acl"),
            "persistence_location": f"{tmp_path / 'device'}/",
            "log_dest": None, "log_type": None,  # the fixture logs everything to a file
            "address": f"{HOST}:{central.port}",
            "remote_username": None, "remote_password": None,
            "bridge_cafile": None, "bridge_insecure": None,
            "restart_timeout": "1 2",
        })
        for line in getattr(request, "param", ()):
            if f"\n#{line}\n" not in text:
                raise KeyError(f"the shipped configuration has no commented line {line!r}")
            text = text.replace(f"\n#{line}\n", f"\n{line}\n")
        device = Broker(tmp_path / "device", [], conf_text=text, username="streamguard",
                        password=DEVICE_USERS["streamguard"])
        device.start(new_port=True)
        try:
            yield DeviceAndCentral(device, central, dict(DEVICE_USERS))
        finally:
            device.kill()
            print(f"--- device mosquitto log (port {device.port}) ---\n{device.log_text()}")
    finally:
        central_gen.close()
