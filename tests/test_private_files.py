"""The outbox and the ledger are private to the daemon's user (issue 13, files and secrets): the
database and its -wal and -shm files are 0600 whatever the umask, and an existing world-readable
database is tightened."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from streamguard.ledger.store import Ledger
from streamguard.stream.outbox import Item, Outbox


def _modes(path: Path) -> dict[str, int]:
    return {p.name: stat.S_IMODE(p.stat().st_mode) for p in path.parent.glob(path.name + "*")
            if not p.name.endswith(".lock")}


@pytest.fixture
def open_umask():
    old = os.umask(0o022)  # a usual default: new files 0644
    yield
    os.umask(old)


def test_new_state_files_are_private(tmp_path: Path, open_umask: None) -> None:
    box_path, led_path = tmp_path / "o.sqlite", tmp_path / "o.ledger.sqlite"
    with Outbox(box_path, 100, "drop-oldest") as box:
        box.store([Item("s", 0, "t", b"{}")], keep=10)
        with Ledger.open(led_path) as led:
            assert led is not None
            modes = {**_modes(box_path), **_modes(led_path)}
    assert {"o.sqlite", "o.sqlite-wal", "o.ledger.sqlite"} <= set(modes)
    assert all(m & 0o077 == 0 for m in modes.values()), {k: oct(v) for k, v in modes.items()}


def test_an_existing_readable_outbox_is_tightened(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "o.sqlite"
    with Outbox(path, 100, "drop-oldest"):
        pass
    os.chmod(path, 0o644)
    with Outbox(path, 100, "drop-oldest"):
        pass
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "readable by group or others" in caplog.text


def test_broker_secrets_at_risk_are_named_never_shown(tmp_path: Path) -> None:
    from streamguard.config import BrokerConfig

    secret = tmp_path / "pw"
    secret.write_text("hunter2\n")
    os.chmod(secret, 0o644)
    risks = BrokerConfig(host="broker.example", password_file=secret).risks()
    assert len(risks) == 2 and all("hunter2" not in r for r in risks)
    assert "readable by group or others" in risks[0] and "without TLS" in risks[1]
    os.chmod(secret, 0o600)
    assert BrokerConfig(host="127.0.0.1", password_file=secret).risks() == []
    assert BrokerConfig(host="broker.example", password_file=secret, tls=True).risks() == []
