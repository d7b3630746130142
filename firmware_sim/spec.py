"""Stream specifications as plain data: ``NAME:ALPHA:BETA[:RATE]`` strings and JSON spec files.

A JSON spec file is ``{"streams": [entry, ...]}``; each entry is an object with

- ``name`` (required); the chain as ``"alpha"`` and ``"beta"`` (binary) or ``"matrix"``, and
  optionally ``"initial"`` (default: the stationary law);
- ``"rate"`` (frames/s, default 1), ``"seed"`` (default: derived from the device seed and the
  stream's position);
- ``"labels": [...]`` or ``"ranges": [[low, high], ...]`` (default labels otherwise);
- optional objects ``"sensitive": {"labels", "matrix"}``, ``"bursts": {"every", "size"}``,
  ``"clock_jumps": {"probability", "amounts"}``, ``"button": {"probability", "at", "mode"}`` and
  ``"faults": {"rate", "kinds"}``, with the fields of the classes in :mod:`firmware_sim.config`.

Unknown keys are errors, so a typo never passes silently.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from streamguard.model.chain import MarkovChain

from .config import Bursts, Button, ClockJumps, Faults, SimStream
from .emission import Emission, Labels, NumericRanges, Sensitive

T = TypeVar("T")

_PARTS: dict[str, type] = {
    "sensitive": Sensitive,
    "bursts": Bursts,
    "clock_jumps": ClockJumps,
    "button": Button,
    "faults": Faults,
}
_STREAM_KEYS = frozenset({"name", "alpha", "beta", "matrix", "initial", "rate", "seed", "labels", "ranges", *_PARTS})


def derive_seed(seed: int, index: int) -> int:
    """The default seed of the ``index``-th stream of a device seeded with ``seed`` (SeedSequence hash)."""
    return int(np.random.SeedSequence([seed, index]).generate_state(1, np.uint64)[0])


def parse_stream_arg(text: str) -> dict[str, Any]:
    """``NAME:ALPHA:BETA[:RATE]`` (a binary chain with default labels) as a spec entry."""
    parts = text.split(":")
    if len(parts) not in (3, 4):
        raise ValueError(f"stream {text!r}: expected NAME:ALPHA:BETA[:RATE]")
    try:
        numbers = [float(p) for p in parts[1:]]
    except ValueError as exc:
        raise ValueError(f"stream {text!r}: ALPHA, BETA and RATE must be numbers") from exc
    entry: dict[str, Any] = {"name": parts[0], "alpha": numbers[0], "beta": numbers[1]}
    if len(numbers) == 3:
        entry["rate"] = numbers[2]
    return entry


def load_spec_file(path: str | Path) -> list[dict[str, Any]]:
    """The stream entries of a JSON spec file (``{"streams": [...]}``)."""
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    if not (isinstance(doc, dict) and set(doc) == {"streams"} and isinstance(doc["streams"], list)):
        raise ValueError(f"{path}: a spec file is an object with one key, 'streams', holding a list")
    if not all(isinstance(e, dict) for e in doc["streams"]):
        raise ValueError(f"{path}: each stream must be an object")
    return doc["streams"]


def _build(cls: type[T], value: object, what: str) -> T:
    if not isinstance(value, Mapping):
        raise ValueError(f"{what}: must be an object")
    unknown = set(value) - {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    if unknown:
        raise ValueError(f"{what}: unknown key(s) {', '.join(sorted(unknown))}")
    try:
        return cls(**value)
    except TypeError as exc:  # a missing field
        raise ValueError(f"{what}: {exc}") from exc


def _chain(entry: Mapping[str, Any], name: str) -> MarkovChain:
    initial = entry.get("initial")
    if "matrix" in entry and not ({"alpha", "beta"} & set(entry)):
        return MarkovChain(entry["matrix"], initial)
    if {"alpha", "beta"} <= set(entry) and "matrix" not in entry:
        return MarkovChain.binary(entry["alpha"], entry["beta"], initial)
    raise ValueError(f"stream {name}: give either 'matrix' or both 'alpha' and 'beta'")


def _emission(entry: Mapping[str, Any], name: str) -> Emission | None:
    if "labels" in entry and "ranges" in entry:
        raise ValueError(f"stream {name}: give 'labels' or 'ranges', not both")
    for key in ("labels", "ranges"):
        if key in entry and not isinstance(entry[key], list):
            raise ValueError(f"stream {name}: '{key}' must be a list")
    if "labels" in entry:
        return Labels(tuple(entry["labels"]))
    if "ranges" in entry:
        return NumericRanges(tuple(tuple(r) for r in entry["ranges"]))
    return None


def stream_from_spec(entry: Mapping[str, Any], default_seed: int) -> SimStream:
    """Build a :class:`SimStream` from a spec entry; ``default_seed`` applies when it has no ``seed``."""
    name = entry.get("name")
    if not isinstance(name, str):
        raise ValueError("each stream needs a 'name' string")
    unknown = set(entry) - _STREAM_KEYS
    if unknown:
        raise ValueError(f"stream {name}: unknown key(s) {', '.join(sorted(unknown))}")
    parts = {key: _build(cls, entry[key], f"stream {name}: {key}") for key, cls in _PARTS.items() if key in entry}
    return SimStream(
        name=name,
        chain=_chain(entry, name),
        rate=entry.get("rate", 1.0),
        seed=entry.get("seed", default_seed),
        emission=_emission(entry, name),
        **parts,
    )
