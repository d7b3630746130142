"""Saved channels: one JSON file with the channel, the model it was designed for, and its metrics.

Format (``"version": 2``)::

    {"format": "streamguard-channel", "version": 2,
     "channel": {kind, inputs, n_s, n_x, outputs, channel, claims, params},   # PerturbationChannel.to_json
     "model": {"joint": [[P(s, x) …] per s]}  or  {"prior": [P(x) …]},
     "metrics": {ldp_s, max_lift, …},                                         # metrics.metrics_json
     "digest": "sha256:<hex>"}                                                # document_digest

Floats are written with ``repr`` (JSON numbers that read back as the same double), so the file holds
exactly the channel that was verified. Both :func:`save_channel` and :func:`load_channel` run
:func:`.verify.require_valid` against the file's model: a channel that breaks a claim is neither
written nor read (:class:`.verify.ClaimViolation` names the constraint).

The file is tamper-evident: ``digest`` is the SHA-256 of the canonical JSON of every other field
(format, version, channel, model, metrics), and a file whose digest is missing or does not match is
refused ("digest mismatch: the file was edited") — an edited kind or params would otherwise be read
as the channel's own description, since only the matrix and claims can be re-verified. The digest
is a seal against editing, not a signature: whoever can write the file can recompute it, which is
why the claims and metrics are still re-checked on every load. A malformed file — wrong format or
version, a missing or mistyped field, a kind no designer makes, a matrix that is not
row-stochastic, metrics that do not match the channel — raises :class:`ChannelFileError` naming the
field.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from .designers import KINDS
from .metrics import channel_metrics, metrics_from_json, metrics_json, require_compatible
from .model import Claim, Joint, ModelInputError, PerturbationChannel, Symbol
from .verify import require_valid

FORMAT = "streamguard-channel"
#: 2 added the digest; a version-1 file (no digest) is refused — design it again.
VERSION = 2
#: Every kind a designer makes: the registry's kinds and linear_reduction.direct_eps_lp's "direct-eps"
#: (a library-only designer, not in the registry). A file naming any other kind is refused.
FILE_KINDS = (*KINDS, "direct-eps")
_DIGEST_PREFIX = "sha256:"
#: Relative tolerance when comparing stored metrics with recomputed ones (same floats, same code).
METRICS_RTOL = 1e-9


class ChannelFileError(ValueError):
    """A channel file is malformed; the message names the field."""


class ChannelWriteError(ChannelFileError):
    """A channel file cannot be written at ``path``; ``reason`` says why (e.g. "directory does not exist")."""

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        super().__init__(f"{os.fspath(path)}: {reason}")
        self.path = os.fspath(path)
        self.reason = reason


def document_digest(doc: dict[str, Any]) -> str:
    """``"sha256:<hex>"`` of the canonical JSON (sorted keys, no spaces, floats by ``repr``) of every
    field of ``doc`` except ``digest``. Raises :class:`ChannelFileError` for a value JSON cannot hold
    (NaN, infinity)."""
    try:
        text = json.dumps({k: v for k, v in doc.items() if k != "digest"}, sort_keys=True,
                          separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ChannelFileError(f"channel file: not plain JSON ({exc})") from None
    return _DIGEST_PREFIX + hashlib.sha256(text.encode("utf-8")).hexdigest()


def channel_document(channel: PerturbationChannel, joint: Joint) -> dict[str, Any]:
    """The file's JSON object, sealed with its digest, after checking every claim exactly (raises
    ClaimViolation) and that a designer makes ``channel.kind`` (raises ChannelFileError)."""
    _require_kind(channel.kind)
    require_valid(channel, joint)
    model: dict[str, Any] = ({"prior": joint.p_x.tolist()} if joint.is_prior_only else joint.to_json())
    doc: dict[str, Any] = {"format": FORMAT, "version": VERSION, "channel": channel.to_json(), "model": model,
                           "metrics": metrics_json(channel_metrics(channel, joint))}
    # Seal the document as a reader parses it (tuples become lists, keys strings; floats by repr are
    # unchanged), so load_channel recomputes the same digest.
    doc = json.loads(json.dumps(doc, allow_nan=False))
    doc["digest"] = document_digest(doc)
    return doc


def save_channel(path: str | os.PathLike[str], channel: PerturbationChannel, joint: Joint) -> None:
    """Verify, then write atomically (temporary file + rename). An unwritable ``path`` raises
    :class:`ChannelWriteError` naming ``path`` (never the temporary file) and the reason."""
    text = json.dumps(channel_document(channel, joint), indent=1, allow_nan=False) + "\n"
    target = Path(path)
    directory = target.parent
    if not directory.exists():
        raise ChannelWriteError(path, "directory does not exist")
    if not directory.is_dir():
        raise ChannelWriteError(path, f"{directory} is not a directory")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=directory)
    except OSError as exc:
        raise ChannelWriteError(path, exc.strerror or type(exc).__name__) from None
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise ChannelWriteError(path, exc.strerror or type(exc).__name__) from None
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
    if doc.get("digest") != document_digest(doc):
        raise ChannelFileError("channel file: digest mismatch: the file was edited" if "digest" in doc else
                               "channel file: digest mismatch: the file was edited (it has no digest)")
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


def _require_kind(kind: str) -> None:
    if kind not in FILE_KINDS:
        raise ChannelFileError(f"channel.kind: unknown kind {kind!r}; a channel file holds one of "
                               f"{', '.join(FILE_KINDS)}")


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
    params: dict[str, float] = {}
    for name, value in v["params"].items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ChannelFileError(f"channel.claims: {v['notion']}.{name} is not a number")
        try:
            params[str(name)] = float(value)
        except OverflowError:
            raise ChannelFileError(f"channel.claims: {v['notion']}.{name} is too large for a float") from None
    return Claim(v["notion"], params)


def _channel(doc: Any) -> PerturbationChannel:
    if not isinstance(doc, dict):
        raise ChannelFileError("channel: expected an object")
    kind, inputs = doc.get("kind"), doc.get("inputs")
    if not isinstance(kind, str) or not kind:
        raise ChannelFileError("channel.kind: expected a name")
    _require_kind(kind)
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
