"""Configuration errors an operator can act on: all of them at once, each on one line naming the
key (streams by their name, not their index), a "did you mean" for a mistyped key, and the
environment variable when it is the source of the value; and the ``STREAMGUARD_*`` variables that
match no key (pydantic-settings ignores them silently).

Generic over the pydantic models: the key names and suggestions come from walking the model
classes' fields along an error's location, so a key added to any config model is covered.
"""

from __future__ import annotations

import difflib
import typing
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

ENV_PREFIX = "STREAMGUARD_"
ENV_NESTED = "__"


class ConfigError(ValueError):
    """The configuration is invalid (or its state paths unusable); the message names the key."""


def _models_in(annotation: Any) -> Iterator[type[BaseModel]]:
    """The pydantic model classes an annotation can hold (through Optional, unions, list[...])."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    for arg in typing.get_args(annotation):
        yield from _models_in(arg)


def _keys(model: type[BaseModel]) -> dict[str, str]:
    """Accepted key → field name (aliases included)."""
    out = {}
    for name, f in model.model_fields.items():
        out[name] = name
        if f.alias:
            out[f.alias] = name
    return out


def model_at(root: type[BaseModel], loc: Sequence[Any]) -> type[BaseModel] | None:
    """The model class that holds the key at ``loc`` (list indices are skipped)."""
    model: type[BaseModel] | None = root
    for part in loc:
        if isinstance(part, int) or model is None:
            continue
        field = _keys(model).get(str(part))
        if field is None:
            return None
        found = list(_models_in(model.model_fields[field].annotation))
        model = found[0] if found else None
    return model


def suggest(word: str, choices: Sequence[str]) -> str | None:
    """The closest accepted key, if one is close enough to be a typo."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return close[0] if close else None


def key_name(loc: Sequence[Any], data: Mapping[str, Any] | None) -> str:
    """``streams[occupancy].model.alpha`` for loc ('streams', 0, 'model', 'alpha'): a list item is
    named by its ``name`` in the raw data when it has one, else by its 0-based index."""
    parts: list[str] = []
    node: Any = data
    for part in loc:
        if isinstance(part, int):
            item = node[part] if isinstance(node, list) and 0 <= part < len(node) else None
            name = item.get("name") if isinstance(item, dict) else None
            parts[-1] += f"[{name}]" if isinstance(name, str) else f"[{part}]"
            node = item
        else:
            parts.append(str(part))
            node = node.get(part) if isinstance(node, dict) else None
    return ".".join(parts) or "config"


def env_source(loc: Sequence[Any], env: Mapping[str, str]) -> str | None:
    """The environment variable that set the value at ``loc`` (or the object holding it), if any."""
    upper = {k.upper(): k for k in env}
    names: list[str] = []
    for part in loc:
        if isinstance(part, int):  # inside a list: the whole list comes from one variable
            break
        names.append(str(part))
    for n in range(len(names), 0, -1):
        var = ENV_PREFIX + ENV_NESTED.join(names[:n]).upper()
        if var in upper:
            return upper[var]
    return None


def _message(err: Mapping[str, Any], root: type[BaseModel]) -> str:
    loc = err["loc"]
    if err["type"] == "extra_forbidden":
        holder = model_at(root, loc[:-1])
        guess = suggest(str(loc[-1]), list(_keys(holder))) if holder is not None else None
        return "unknown key" + (f'; did you mean "{guess}"?' if guess else "")
    msg = str(err["msg"])
    return msg.removeprefix("Value error, ")


def format_errors(exc: ValidationError, root: type[BaseModel], data: Mapping[str, Any] | None,
                  env: Mapping[str, str]) -> str:
    """Every error of ``exc``, one line each: ``key: problem (from VARIABLE)``."""
    lines = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        line = f"{key_name(loc, data)}: {_message(err, root)}"
        var = env_source(loc, env)
        if var is not None:
            line += f" (from the environment: {var})"
        if line not in lines:
            lines.append(line)
    return "\n".join(lines)


def unknown_env(root: type[BaseModel], env: Mapping[str, str]) -> list[str]:
    """One warning per ``STREAMGUARD_*`` variable that names no configuration key."""
    out = []
    for var in sorted(env):
        if not var.upper().startswith(ENV_PREFIX):
            continue
        path = var[len(ENV_PREFIX):].lower().split(ENV_NESTED)
        model: type[BaseModel] | None = root
        for depth, part in enumerate(path):
            keys = _keys(model) if model is not None else {}
            if part not in keys:
                guess = suggest(part, list(keys))
                where = ENV_PREFIX + ENV_NESTED.join(path[:depth]).upper() + (ENV_NESTED if depth else "")
                hint = f'; did you mean {where}{guess.upper()}?' if guess else ""
                out.append(f"environment variable {var} matches no configuration key{hint}")
                break
            found = list(_models_in(model.model_fields[keys[part]].annotation)) if model is not None else []
            model = found[0] if found else None
            if model is None:
                break
    return out
