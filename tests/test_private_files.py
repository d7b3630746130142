"""The outbox and the ledger are private to the daemon's user (issue 13, files and secrets): the
database and its -wal and -shm files are 0600 whatever the umask, and an existing world-readable
database is tightened."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from streamguard.ledger.store import Ledger
from streamguard.support.private_files import write_private
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


def test_a_private_file_is_0600_before_it_is_written_and_replaces_the_old_one(tmp_path: Path,
                                                                             open_umask: None) -> None:
    """write_private (the metrics textfile, a ledger export): the new file is 0600 from its
    creation whatever the umask, a leftover temporary file of a failed write is replaced, never
    written through (here a symlink to another file), and an old 0644 file is replaced by a 0600
    one, not written into."""
    path = tmp_path / "streamguard.prom"
    path.write_text("old\n")
    os.chmod(path, 0o644)
    old_inode = path.stat().st_ino
    leftover = tmp_path / f".{path.name}.{os.getpid()}.tmp"
    target = tmp_path / "elsewhere"
    target.write_text("keep\n")
    leftover.symlink_to(target)
    modes: list[int] = []
    real_fdopen = os.fdopen

    def spy(fd: int, *args: object, **kwargs: object) -> object:
        modes.append(stat.S_IMODE(os.fstat(fd).st_mode))  # (before a byte is written)
        return real_fdopen(fd, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "fdopen", spy)
        write_private(path, "streamguard_reconnects_total 0\n")
    assert modes == [0o600]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.read_text() == "streamguard_reconnects_total 0\n"
    assert path.stat().st_ino != old_inode
    assert target.read_text() == "keep\n" and not leftover.exists()


def test_a_ledger_export_is_private(tmp_path: Path, open_umask: None) -> None:
    """``streamguard ledger export --out``: the events' times date the private marks."""
    from streamguard.cli import main

    db, out = tmp_path / "l.sqlite", tmp_path / "export.json"
    with Ledger.open(db):
        pass
    assert main(["ledger", "export", "--db", str(db), "--out", str(out)]) == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600 and '"streamguard-ledger"' in out.read_text()
