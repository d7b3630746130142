"""A real Home Assistant core for the end-to-end tests, in a virtual environment of its own.

Home Assistant 2024.3.3 is the newest release for Python 3.11. It pins paho-mqtt 1.6.1 (the
product needs ≥ 2.1), so it cannot share the project's environment: the tests talk to it over
MQTT and HTTP only (notes/home-assistant-real.md).

Built once per machine and Home Assistant version, in ``$STREAMGUARD_HASS_CACHE`` if set, else
``/var/cache/streamguard-hass`` when writable (CI runs as root), else
``${XDG_CACHE_HOME:-~/.cache}/streamguard-hass``; the directory is keyed on the version and the
Python (``homeassistant-2024.3.3-py3.11``) and counts as built only once its ``ready`` file exists
(a half-built one is removed and built again). The install is the one that works here:

- Home Assistant's own ``package_constraints.txt`` (read from the wheel) plus ``josepy<2`` (a
  plain install picks josepy 2, which its pinned ``acme`` cannot use: every HTTP request fails);
- the requirements of every integration it sets up at start (ROOTS: its bootstrap's default set,
  the frontend, the recorder and history, http/api/config, MQTT with its platforms — and their
  dependencies, read from the installed manifests), so the tests run it with ``--skip-pip`` and
  nothing is downloaded at test time. The ``ready`` file records ROOTS: a changed list completes
  the environment in place.

Measured here: 186 s and ~650 MB cold (no pip cache), a few seconds when built.

Run ``python tests/hass_env.py`` to build (``.ci/run`` does, before pytest); it prints the
``hass`` executable. Exit 0 when built, 1 when it cannot be installed (the reason on stderr).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

VERSION = "2024.3.3"
#: Integrations set up at start with the tests' configuration.yaml (bootstrap's default set,
#: frontend, recorder, the configured ones, MQTT and the platforms the product's discovery uses;
#: MQTT's entry also sets up its camera platform, whose ``stream`` needs numpy and ha-av).
ROOTS = ("application_credentials", "backup", "frontend", "hardware", "logger", "network", "system_health",
         "automation", "person", "scene", "script", "tag", "zone", "counter", "input_boolean", "input_button",
         "input_datetime", "input_number", "input_select", "input_text", "schedule", "timer", "system_log",
         "recorder", "http", "api", "config", "onboarding", "mqtt", "button", "switch", "sensor", "binary_sensor",
         "camera", "stream", "history")
#: Whole-build time limit (seconds): a cold pip cache takes several minutes.
BUILD_TIMEOUT = 1200.0


def cache_root() -> Path:
    if env := os.environ.get("STREAMGUARD_HASS_CACHE"):
        return Path(env)
    var = Path("/var/cache")
    if os.access(var, os.W_OK):
        return var / "streamguard-hass"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "streamguard-hass"


def env_dir() -> Path:
    return cache_root() / f"homeassistant-{VERSION}-py{sys.version_info.major}.{sys.version_info.minor}"


def _stamp() -> str:
    return f"homeassistant {VERSION}\nroots {' '.join(ROOTS)}\n"


def hass_exe() -> Path | None:
    """The built environment's ``hass``, or None when it is not built (or built for other ROOTS)."""
    d = env_dir()
    exe = d / "venv" / "bin" / "hass"
    ready = d / "ready"
    return exe if ready.is_file() and ready.read_text() == _stamp() and exe.is_file() else None


class InstallError(RuntimeError):
    """Home Assistant cannot be installed here (the message says which step failed)."""


def _run(cmd: list[str], deadline: float) -> None:
    left = deadline - time.monotonic()
    if left <= 0:
        raise InstallError(f"time limit reached before: {' '.join(cmd[:4])}")
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=left)
    except subprocess.TimeoutExpired:
        raise InstallError(f"time limit reached in: {' '.join(cmd[:4])}") from None
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        raise InstallError(f"{' '.join(cmd[:4])} … failed ({p.returncode}): {' / '.join(tail)}")


def start_requirements(components: Path) -> list[str]:
    """The pinned requirements of ROOTS and their dependencies (the installed manifests)."""
    reqs: set[str] = set()
    seen: set[str] = set()
    todo = list(ROOTS)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        manifest = components / name / "manifest.json"
        if not manifest.is_file():
            raise InstallError(f"Home Assistant {VERSION} has no integration {name!r}")
        doc = json.loads(manifest.read_text())
        reqs.update(doc.get("requirements", []))
        todo.extend(doc.get("dependencies", []))
    return sorted(reqs)


def build(timeout: float = BUILD_TIMEOUT) -> Path:
    """Build the environment unless built (module docstring); returns ``hass``. A venv with Home
    Assistant installed is completed in place (a changed ROOTS installs only what is missing).
    Raises :class:`InstallError` naming the failed step (``timeout`` seconds in all)."""
    d = env_dir()
    d.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    with open(d.parent / f".{d.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (exe := hass_exe()) is not None:
            return exe
        venv, cfile = d / "venv", d / "constraints.txt"
        pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
        if not (d / "installed").is_file():
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir()
            _run([sys.executable, "-m", "venv", str(venv)], deadline)
            with tempfile.TemporaryDirectory() as tmp:
                _run(pip + ["download", "--no-deps", "-d", tmp, f"homeassistant=={VERSION}"], deadline)
                wheel = next(Path(tmp).glob("homeassistant-*.whl"), None)
                if wheel is None:
                    raise InstallError(f"pip download homeassistant=={VERSION} gave no wheel")
                with zipfile.ZipFile(wheel) as z:
                    constraints = z.read("homeassistant/package_constraints.txt").decode()
                cfile.write_text(constraints + "\n# streamguard: acme in this release needs josepy 1\njosepy<2\n")
                _run(pip + ["install", "-c", str(cfile), str(wheel)], deadline)
            (d / "installed").write_text(f"homeassistant {VERSION}\n")
        site = next((venv / "lib").glob("python3*/site-packages/homeassistant/components"), None)
        if site is None:
            raise InstallError(f"no homeassistant package in {venv}")
        reqs = start_requirements(site)
        _run(pip + ["install", "-c", str(cfile), *reqs], deadline)
        (d / "requirements.txt").write_text("\n".join(reqs) + "\n")
        (d / "ready").write_text(_stamp())
    exe = hass_exe()
    assert exe is not None
    return exe


def main() -> int:
    t0 = time.monotonic()
    try:
        exe = build()
    except InstallError as e:
        print(f"hass_env: Home Assistant {VERSION} cannot be installed: {e}", file=sys.stderr)
        return 1
    print(exe)
    print(f"hass_env: ready in {time.monotonic() - t0:.0f} s ({env_dir()})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
