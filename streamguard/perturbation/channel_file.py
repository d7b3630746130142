"""Saved channels: one JSON file with the channel, the model it was designed for, and its metrics.

Format (``"version": 1``)::

    {"format": "streamguard-channel", "version": 1,
     "channel": {kind, inputs, n_s, n_x, outputs, channel, claims, params},   # PerturbationChannel.to_json
     "model": {"joint": [[P(s, x) …] per s]}  or  {"prior": [P(x) …]},
     "metrics": {ldp_s, max_lift, …}}                                         # metrics.metrics_json

Floats are written with ``repr`` (JSON numbers that read back as the same double), so the file holds
exactly the channel that was verified. Both :func:`save_channel` and :func:`load_channel` run
:func:`.verify.require_valid` against the file's model: a channel that breaks a claim is neither
written nor read (:class:`.verify.ClaimViolation` names the constraint). A malformed file — wrong
format or version, a missing or mistyped field, a matrix that is not row-stochastic, metrics that
do not match the channel (an edited file) — raises :class:`ChannelFileError` naming the field.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from .metrics import channel_metrics, metrics_from_json, metrics_json, require_compatible
from .model import Claim, Joint, ModelInputError, PerturbationChannel, Symbol
from .verify import require_valid

FORMAT = "streamguard-channel"
VERSION = 1
#: Relative tolerance when comparing stored metrics with recomputed ones (same floats, same code).
METRICS_RTOL = 1e-9


class ChannelFileError(ValueError):
    """A channel file is malformed; the message names the field."""


def channel_document(channel: PerturbationChannel, joint: Joint) -> dict[str, Any]:
    """The file's JSON object, after checking every claim exactly (raises ClaimViolation)."""
    require_valid(channel, joint)
    model: dict[str, Any] = ({"prior": joint.p_x.tolist()} if joint.is_prior_only else joint.to_json())
    return {"format": FORMAT, "version": VERSION, "channel": channel.to_json(), "model": model,
            "metrics": metrics_json(channel_metrics(channel, joint))}


def save_channel(path: str | os.PathLike[str], channel: PerturbationChannel, joint: Joint) -> None:
    """Verify, then write atomically (temporary file + rename)."""
    text = json.dumps(channel_document(channel, joint), indent=1, allow_nan=False) + "\n"
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent or ".")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_channel(path: str | os.PathLike[str]) -> tuple[PerturbationChannel, Joint]:
    """Read, parse and verify a channel file; returns the channel and the model it was verified against."""
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ChannelFileError(f"cannot read {path}: {exc.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ChannelFileError(f"{path}: not valid JSON") from None
    return read_document(doc)


def read_document(doc: Any) -> tuple[PerturbationChannel, Joint]:
    """Parse and verify a channel file's JSON object (see the module docstring)."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ChannelFileError(f'channel file: expected an object with "format": "{FORMAT}"')
    if doc.get("version") != VERSION:
        raise ChannelFileError(f"channel file: unsupported version {doc.get('version')!r} (this build reads {VERSION})")
    joint = _model(doc.get("model"))
    channel = _channel(doc.get("channel"))
    try:
        require_compatible(channel, joint)
    except ModelInputError as exc:
        raise ChannelFileError(f"model: {exc}") from None
    require_valid(channel, joint)
    _check_metrics(doc.get("metrics"), channel, joint)
    return channel, joint


def _model(doc: Any) -> Joint:
    try:
        if isinstance(doc, dict) and set(doc) == {"joint"}:
            return Joint.from_json(doc)
        if isinstance(doc, dict) and set(doc) == {"prior"}:
            return Joint.from_prior(doc["prior"])
    except ModelInputError as exc:
        raise ChannelFileError(f"model: {exc}") from None
    raise ChannelFileError('model: expected {"joint": [[…]]} or {"prior": […]}')


def _int(doc: dict[str, Any], key: str) -> int:
    v = doc.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ChannelFileError(f"channel.{key}: expected a positive integer")
    return v


def _symbol(v: Any, n_x: int) -> Symbol:
    def state(u: Any) -> int:
        if isinstance(u, bool) or not isinstance(u, int) or not 0 <= u < n_x:
            raise ChannelFileError(f"channel.outputs: symbols are states 0..{n_x - 1} or lists of them")
        return u

    if isinstance(v, list):
        if not v:
            raise ChannelFileError("channel.outputs: an empty group")
        return tuple(state(u) for u in v)
    return state(v)


def _claim(v: Any) -> Claim:
    if not (isinstance(v, dict) and set(v) == {"notion", "params"} and isinstance(v["notion"], str)
            and isinstance(v["params"], dict)):
        raise ChannelFileError('channel.claims: each claim is {"notion": str, "params": {name: number}}')
    for name, value in v["params"].items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ChannelFileError(f"channel.claims: {v['notion']}.{name} is not a number")
    return Claim(v["notion"], {str(k): float(x) for k, x in v["params"].items()})


def _channel(doc: Any) -> PerturbationChannel:
    if not isinstance(doc, dict):
        raise ChannelFileError("channel: expected an object")
    kind, inputs = doc.get("kind"), doc.get("inputs")
    if not isinstance(kind, str) or not kind:
        raise ChannelFileError("channel.kind: expected a name")
    if inputs not in ("x", "sx"):
        raise ChannelFileError('channel.inputs: expected "x" or "sx"')
    n_s, n_x = _int(doc, "n_s"), _int(doc, "n_x")
    outputs, claims, params = doc.get("outputs"), doc.get("claims"), doc.get("params", {})
    if not isinstance(outputs, list) or not isinstance(claims, list) or not isinstance(params, dict):
        raise ChannelFileError("channel: outputs and claims must be lists, params an object")
    matrix = doc.get("channel")
    if not isinstance(matrix, list) or not all(isinstance(r, list) and len(r) == len(outputs) for r in matrix) \
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for r in matrix for v in r):
        raise ChannelFileError("channel.channel: expected a matrix of numbers, one column per output")
    try:
        return PerturbationChannel(kind, matrix, inputs, n_s, n_x, tuple(_symbol(o, n_x) for o in outputs),
                                   tuple(_claim(c) for c in claims), params)
    except ModelInputError as exc:
        raise ChannelFileError(f"channel file: {exc}") from None


def _check_metrics(doc: Any, channel: PerturbationChannel, joint: Joint) -> None:
    try:
        stored = metrics_from_json(doc)
    except ModelInputError as exc:
        raise ChannelFileError(str(exc)) from None
    actual = channel_metrics(channel, joint)
    if set(stored) != set(actual):
        raise ChannelFileError(f"metrics: expected the keys {', '.join(actual)}")
    for key, value in actual.items():
        if not math.isclose(stored[key], value, rel_tol=METRICS_RTOL, abs_tol=1e-15):
            raise ChannelFileError(f"metrics: stored {key} = {stored[key]:.12g} does not match the channel's "
                                   f"{value:.12g} (edited file?)")
