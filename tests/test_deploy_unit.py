"""deploy/streamguard.service passes ``systemd-analyze verify`` (issue 26 item 4), as shipped and with
its ``LoadCredential=`` recipes for the broker password and the TLS client key enabled (their
commented lines uncommented) — the recipes that let the daemon read them under ``DynamicUser=yes``. Only
``ExecStart``'s path is replaced (the shipped /opt path does not exist here). Skipped where
``systemd-analyze`` is not installed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[1] / "deploy" / "streamguard.service"
ANALYZE = shutil.which("systemd-analyze")
RECIPE = ("LoadCredential=broker-password:/etc/streamguard/broker-password",
          "Environment=STREAMGUARD_BROKER__PASSWORD_FILE=%d/broker-password",
          "LoadCredential=broker-key:/etc/streamguard/broker-key.pem",
          "Environment=STREAMGUARD_BROKER__KEY_FILE=%d/broker-key")


def _verify(tmp_path: Path, text: str) -> str:
    """``systemd-analyze verify``'s complaints about the unit ``text`` (empty when none)."""
    unit = tmp_path / "streamguard.service"
    unit.write_text(text.replace("/opt/streamguard/.venv/bin/streamguard", str(Path(sys.executable).parent / "streamguard")))
    p = subprocess.run([ANALYZE, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    return (p.stdout + p.stderr).strip() + ("" if p.returncode == 0 else f" (exit {p.returncode})")


@pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed")
def test_unit_verifies_as_shipped_and_with_the_credential_recipe(tmp_path: Path) -> None:
    shipped = UNIT.read_text()
    assert _verify(tmp_path, shipped) == ""
    enabled = shipped
    for line in RECIPE:
        assert f"\n#{line}\n" in enabled, f"the unit no longer ships the commented line {line!r}"
        enabled = enabled.replace(f"\n#{line}\n", f"\n{line}\n")
    assert _verify(tmp_path, enabled) == ""
    # the check itself catches a misspelt key (systemd ignores it with a warning)
    assert "Unknown key" in _verify(tmp_path, enabled.replace("LoadCredential=", "LoadCredentail="))
