"""A real Home Assistant core for tests: started headless on loopback, onboarded and given an MQTT
entry through its REST API, read through its REST API (notes/home-assistant-real.md).

The environment comes from tests/hass_env.py (``.ci/run`` builds it). :func:`home_assistant`
starts one in a fresh config directory and yields a :class:`HomeAssistant`; it skips the test only
when Home Assistant cannot be installed here (the reason says why). Home Assistant runs with
``--skip-pip``: every package it needs was installed with it, nothing is downloaded at test time.
Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import hass_env
from streamguard.support.loopback import HOST, free_port

START_TIMEOUT = 60.0
#: Building the environment inside a test (when ``.ci/run`` did not): within pytest's 600 s limit.
BUILD_TIMEOUT = 480.0
MQTT_TIMEOUT = 30.0

CONFIGURATION = """homeassistant:
  name: streamguard test
  latitude: 52.37
  longitude: 4.89
  elevation: 0
  unit_system: metric
  time_zone: UTC
  country: NL
  currency: EUR
http:
  server_host: {host}
  server_port: {port}
api:
config:
history:
recorder:
  commit_interval: 1
logger:
  default: warning
"""


class HttpError(AssertionError):
    """A REST call answered with an error status (``code``)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class HomeAssistant:
    """A running Home Assistant: its URL, access token and log."""

    config_dir: Path
    port: int
    exe: Path
    proc: subprocess.Popen[bytes] | None = None
    token: str = ""
    #: Logged in with this client id (onboarding's and the token's).
    client_id: str = field(init=False)

    def __post_init__(self) -> None:
        self.client_id = f"http://{HOST}:{self.port}/"

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def log(self) -> str:
        path = self.config_dir / "home-assistant.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def launch(self) -> None:
        """Start ``hass`` on the config directory (its output appended to ``hass.stdout``)."""
        with open(self.config_dir / "hass.stdout", "ab") as log:
            self.proc = subprocess.Popen([str(self.exe), "-c", str(self.config_dir), "--skip-pip"], stdout=log,
                                         stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": ""})

    async def stop(self) -> None:
        """SIGTERM, then SIGKILL after 20 s."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(proc.wait, 20)
        except subprocess.TimeoutExpired:
            proc.kill()
            await asyncio.to_thread(proc.wait, 5)

    async def restart(self) -> None:
        """Stop and start it again (same config directory, users and MQTT entry); back once its
        API answers with this token and the MQTT entry is loaded."""
        await self.stop()
        self.launch()
        await self.until(self._up, START_TIMEOUT, "its HTTP server after a restart")
        await self.until(self._mqtt_loaded, MQTT_TIMEOUT, "the MQTT entry after a restart")

    async def _up(self, path: str = "/api/") -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"Home Assistant exited ({self.proc.returncode})\n{self.log[-3000:]}")
        try:
            await self.call("GET", path, auth=path == "/api/", timeout=2.0)
            return True
        except (OSError, HttpError):
            return False

    async def _mqtt_loaded(self) -> bool:
        entries = await self.call("GET", "/api/config/config_entries/entry")
        return any(e["domain"] == "mqtt" and e["state"] == "loaded" for e in entries)

    def request(self, method: str, path: str, body: Any = None, *, form: dict[str, str] | None = None,
                auth: bool = True, timeout: float = 10.0) -> Any:
        """One REST call; the decoded JSON answer (None when empty). Raises :class:`HttpError`."""
        headers = {}
        data = None
        if form is not None:
            data = urllib.parse.urlencode(form).encode()
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        elif body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if auth:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                text = resp.read().decode()
        except urllib.error.HTTPError as e:
            raise HttpError(f"{method} {path}: {e.code} {e.read()[:300]!r}", e.code) from None
        return json.loads(text) if text else None

    async def call(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        return await asyncio.to_thread(self.request, method, path, body, **kw)

    async def states(self) -> list[dict[str, Any]]:
        return await self.call("GET", "/api/states")

    async def state(self, entity_id: str) -> dict[str, Any]:
        return await self.call("GET", f"/api/states/{entity_id}")

    async def state_if_known(self, entity_id: str) -> dict[str, Any] | None:
        """The entity's state, or None while Home Assistant does not know the entity (404: after
        its restart an MQTT entity exists only once its discovery config has been read again)."""
        try:
            return await self.state(entity_id)
        except HttpError as e:
            if e.code == 404:
                return None
            raise

    async def history(self, entity_ids: list[str], start: float) -> dict[str, list[dict[str, Any]]]:
        """Every recorded state of the entities since ``start`` (epoch seconds), attributes
        included, each attribute change too."""
        iso = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(start - 1))
        q = urllib.parse.urlencode({"filter_entity_id": ",".join(entity_ids), "significant_changes_only": "0"})
        lists = await self.call("GET", f"/api/history/period/{urllib.parse.quote(iso)}?{q}")
        return {lst[0]["entity_id"]: lst for lst in lists if lst}

    async def press(self, entity_id: str) -> None:
        await self.call("POST", "/api/services/button/press", {"entity_id": entity_id})

    async def until(self, probe: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
        """Poll ``probe`` (a function, or a coroutine function) until it returns something truthy."""
        deadline = time.monotonic() + timeout
        while True:
            got = probe()
            if inspect.isawaitable(got):
                got = await got
            if got:
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"Home Assistant: timed out after {timeout} s waiting for {what}\n{self.log[-3000:]}")
            await asyncio.sleep(interval)


def _write_config(config_dir: Path, port: int) -> None:
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "configuration.yaml").write_text(CONFIGURATION.format(host=HOST, port=port))


async def _onboard(ha: HomeAssistant) -> None:
    """Create the owner through onboarding and get an access token (no core_config step: it would
    set up integrations that go to the internet)."""
    await ha.until(lambda: ha._up("/api/onboarding"), START_TIMEOUT, "its HTTP server")
    user = await ha.call("POST", "/api/onboarding/users", {
        "client_id": ha.client_id, "name": "Test", "username": "test", "password": "test-password-1",
        "language": "en"}, auth=False)
    tokens = await ha.call("POST", "/auth/token", form={
        "grant_type": "authorization_code", "code": user["auth_code"], "client_id": ha.client_id}, auth=False)
    ha.token = tokens["access_token"]


async def add_mqtt(ha: HomeAssistant, port: int) -> None:
    """The MQTT entry through the config-entry flow (discovery on, prefix ``homeassistant``), then
    wait until it is loaded."""
    flow = await ha.call("POST", "/api/config/config_entries/flow", {"handler": "mqtt"})
    result = await ha.call("POST", f"/api/config/config_entries/flow/{flow['flow_id']}",
                           {"broker": HOST, "port": port})
    assert result.get("type") == "create_entry", result
    await ha.until(ha._mqtt_loaded, MQTT_TIMEOUT, "the MQTT entry to load")


@asynccontextmanager
async def home_assistant(config_dir: Path, mqtt_port: int) -> AsyncIterator[HomeAssistant]:
    """A fresh Home Assistant on a free loopback port, onboarded, with an MQTT entry for the broker
    on ``mqtt_port``; stopped (SIGTERM, then SIGKILL) afterwards."""
    try:
        exe = await asyncio.to_thread(hass_env.build, BUILD_TIMEOUT)
    except hass_env.InstallError as e:
        pytest.skip(f"Home Assistant {hass_env.VERSION} cannot be installed here: {e}")
    port = free_port()
    _write_config(config_dir, port)
    ha = HomeAssistant(config_dir, port, exe)
    ha.launch()
    try:
        await _onboard(ha)
        await add_mqtt(ha, mqtt_port)
        yield ha
    finally:
        await ha.stop()
        errors = [line for line in ha.log.splitlines() if " ERROR " in line]
        if errors:
            print("Home Assistant errors:\n" + "\n".join(errors[-20:]))
