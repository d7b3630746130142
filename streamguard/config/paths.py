"""Paths in the configuration: relative ones resolve against the config file's directory, and the
daemon's state files must be writable.

systemd starts services in ``/``, so a path relative to the working directory (``calibration``,
a channel ``file``, ``password_file``, the outbox …) would silently mean something else under the
unit than at the shell. Every ``Path`` field of every config model is therefore resolved against
the directory of the TOML file being loaded (``~`` is expanded), whatever the key's source
(file or environment); a field's relative default is resolved the same way. Without a config file
(the library, tests) paths are left as given.

The state files (outbox, ledger, plan cache) must be creatable and writable by the daemon's user:
:func:`state_problems` says what is not, one line per key, and :func:`make_state_dirs` creates the
missing directories (0700) at start, or fails with one line naming the key.
"""

from __future__ import annotations

import contextlib
import os
import typing
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from .errors import ConfigError

_BASE: ContextVar[Path | None] = ContextVar("streamguard_config_dir", default=None)


@contextlib.contextmanager
def relative_to(directory: Path | None) -> Iterator[None]:
    """Resolve relative config paths against ``directory`` while loading (None: leave them)."""
    token = _BASE.set(None if directory is None else Path(directory).resolve())
    try:
        yield
    finally:
        _BASE.reset(token)


def _holds_path(annotation: Any) -> bool:
    if annotation is Path:
        return True
    return any(_holds_path(a) for a in typing.get_args(annotation))


def _resolved(value: Any, base: Path) -> Any:
    if isinstance(value, (str, Path)) and str(value) and str(value) != ":memory:":
        p = Path(value).expanduser()
        return p if p.is_absolute() else base / p
    return value


def resolve_paths(model: type[BaseModel], data: Any) -> Any:
    """A ``mode="before"`` validator body: ``data`` with the model's relative paths resolved."""
    base = _BASE.get()
    if base is None or not isinstance(data, dict):
        return data
    out = dict(data)
    for name, field in model.model_fields.items():
        if not _holds_path(field.annotation):
            continue
        key = field.alias if field.alias and field.alias in out else name
        if key in out:
            out[key] = _resolved(out[key], base)
        elif isinstance(field.default, Path) and not field.default.is_absolute():
            out[name] = base / field.default
    return out


def _state_files(settings: Any) -> list[tuple[str, Path]]:
    from ..redaction.plan_cache import beside

    return [("outbox.path", Path(settings.outbox.path)), ("ledger.path", Path(settings.ledger_path())),
            ("outbox.path (plan cache)", beside(settings.outbox.path))]


def _nearest_existing(path: Path) -> Path:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def state_problems(settings: Any) -> list[str]:
    """What stops the daemon's user from creating or writing its state files (one line each)."""
    out: list[str] = []
    for key, path in _state_files(settings):
        if str(path) == ":memory:":
            continue
        directory = path.parent
        if path.exists():
            if not os.access(path, os.R_OK | os.W_OK):
                out.append(f"{key}: {path} is not writable by this user")
            elif not os.access(directory, os.W_OK | os.X_OK):  # SQLite's -wal and -shm files go beside it
                out.append(f"{key}: its directory {directory} is not writable by this user")
        elif directory.is_dir():
            if not os.access(directory, os.W_OK | os.X_OK):
                out.append(f"{key}: {path} cannot be created: {directory} is not writable by this user")
        else:
            parent = _nearest_existing(directory)
            if not parent.is_dir():
                out.append(f"{key}: {directory} cannot be created: {parent} is not a directory")
            elif not os.access(parent, os.W_OK | os.X_OK):
                out.append(f"{key}: {directory} does not exist and cannot be created ({parent} is not "
                           "writable by this user; under systemd use StateDirectory=)")
    return list(dict.fromkeys(out))


def make_state_dirs(settings: Any) -> None:
    """Create the state files' missing directories (0700), or raise a :class:`ConfigError` naming
    the key and the path."""
    for key, path in _state_files(settings):
        if str(path) == ":memory:" or path.parent.is_dir():
            continue
        try:
            path.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"{key}: cannot create {path.parent}: {exc.strerror or exc}") from None
