"""JSON Schemas (draft 2020-12) of every topic streamguard publishes, shipped as package data
(issue 14, topic contracts). :data:`TOPICS` maps each topic kind to its schema file; :func:`load`
reads one. A consumer validates a payload with any JSON Schema validator, e.g.
``jsonschema.validate(payload, load("record"))``.

| topic | schema |
|---|---|
| ``<base>/<device>/<stream>/data`` (redaction) | ``record`` — one record, or a list with publisher batching (``data``) |
| ``<base>/<device>/<stream>/data`` (channel) | ``channel-record`` (also inside ``data``) |
| ``<base>/<device>/<stream>/aggregate`` | ``aggregate`` |
| ``<base>/<device>/<stream>/privacy`` (retained) | ``privacy-redaction`` or ``privacy-channel`` |
| ``<base>/<device>/status`` (retained; the will) | ``device-status`` |
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

NAMES = ("data", "record", "channel-record", "aggregate", "privacy-redaction", "privacy-channel", "device-status")


def load(name: str) -> dict[str, Any]:
    """The schema ``name`` (one of :data:`NAMES`) as a dict."""
    if name not in NAMES:
        raise ValueError(f"no schema named {name!r}; there are: {', '.join(NAMES)}")
    text = resources.files(__name__).joinpath(f"{name}.json").read_text(encoding="utf-8")
    doc: dict[str, Any] = json.loads(text)
    return doc
