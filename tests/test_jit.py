"""numba cache-directory choice (streamguard.support.jit.choose_cache_dir)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from streamguard.support.jit import choose_cache_dir


def test_explicit_numba_cache_dir_wins(tmp_path):
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "mine"), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    # even with an unwritable package directory the operator's choice is kept (None = no change)
    assert choose_cache_dir(tmp_path / "pkg", env, is_writable=lambda p: False) is None
    assert not (tmp_path / "xdg").exists()


def test_writable_package_dir_keeps_numba_default(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert choose_cache_dir(pkg, env) is None
    assert choose_cache_dir(pkg, env, is_writable=lambda p: True) is None
    assert not (tmp_path / "xdg").exists()  # nothing created


def test_read_only_package_dir_uses_xdg_cache_home(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    xdg = tmp_path / "xdg"
    env = {"XDG_CACHE_HOME": str(xdg), "HOME": str(tmp_path / "home")}

    def is_writable(path: Path) -> bool:
        return path != pkg and os.access(path, os.W_OK | os.X_OK)

    chosen = choose_cache_dir(pkg, env, is_writable=is_writable)
    assert chosen is not None
    chosen_path = Path(chosen)
    assert chosen_path == xdg / "streamguard" / "numba"
    assert chosen_path.is_dir() and os.access(chosen_path, os.W_OK)
    (chosen_path / "probe").write_text("ok")  # really writable


def test_read_only_package_dir_falls_back_to_home_cache(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    env = {"HOME": str(tmp_path / "home")}
    chosen = choose_cache_dir(pkg, env, is_writable=lambda p: p != pkg and os.access(p, os.W_OK))
    assert Path(chosen) == tmp_path / "home" / ".cache" / "streamguard" / "numba"


def test_unusable_xdg_falls_back_to_temp_dir(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    env = {"XDG_CACHE_HOME": str(blocker)}  # mkdir under a regular file fails
    chosen = choose_cache_dir(pkg, env, is_writable=lambda p: p != pkg and os.access(p, os.W_OK))
    assert chosen is not None
    assert Path(chosen).parent == Path(tempfile.gettempdir())
    assert Path(chosen).name == f"streamguard-numba-{os.getuid()}"
    assert os.access(chosen, os.W_OK)


def test_nothing_writable_returns_none(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert choose_cache_dir(pkg, env, is_writable=lambda p: False) is None


def test_import_sets_numba_cache_dir_only_when_needed(tmp_path):
    """In a fresh interpreter with NUMBA_CACHE_DIR set, importing streamguard keeps it."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "explicit")}
    code = "import os, streamguard.support.jit, numba; print(os.environ['NUMBA_CACHE_DIR']); print(numba.config.CACHE_DIR)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    lines = out.stdout.strip().splitlines()
    assert lines == [str(tmp_path / "explicit")] * 2
