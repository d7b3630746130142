"""Topic contracts (issue 14): every payload kind the real runtimes publish validates against the
JSON Schema shipped in the package, and the schemas reject what they must."""

from __future__ import annotations

import json

import numpy as np
import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from consumer_sim import simulate
from streamguard.schemas import NAMES, load

P = np.array([[0.9, 0.1], [0.2, 0.8]])
REDACTION = {"labels": ["a", "b"], "model": {"alpha": 0.1, "beta": 0.2}, "epsilon": 1.0,
             "aggregates": [{"query": "histogram", "window": 20, "epsilon": 1.0},
                            {"query": "count", "state": "b", "window": 20, "epsilon": 1.0},
                            {"query": "mean", "values": [0, 2], "step": 1, "window": 20, "epsilon": 1.0}]}
CHANNEL = {"labels": ["a", "b", "c"], "model": {"matrix": [[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]]},
           "mechanism": "channel", "channel": {"kind": "rr", "epsilon": 1.0, "prior": [1 / 3, 1 / 3, 1 / 3]}}


def _validator(name: str) -> Draft202012Validator:
    registry: Registry = Registry().with_resources(
        (f"https://streamguard.invalid/schemas/{n}.json", Resource.from_contents(load(n))) for n in NAMES)
    schema = load(name)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, registry=registry)


def _kind(topic: str) -> str:
    return topic.rsplit("/", 1)[1]


def test_every_payload_kind_validates():
    seen: dict[str, int] = {}
    for stream, privacy in ((REDACTION, "privacy-redaction"), (CHANNEL, "privacy-channel")):
        sim = simulate(stream, P if stream is REDACTION else np.array(CHANNEL["model"]["matrix"]), 60, 3,
                       mark_every=15, bad_every=17)
        record = "record" if stream is REDACTION else "channel-record"
        for m in sim.messages:
            body = json.loads(m.payload)
            kind = _kind(m.topic)
            names = {"data": [record, "data"], "aggregate": ["aggregate"], "privacy": [privacy]}[kind]
            for name in names:
                _validator(name).validate(body)
                seen[name] = seen.get(name, 0) + 1
        batch = [json.loads(m.payload) for m in sim.messages if _kind(m.topic) == "data"][:5]
        _validator("data").validate(batch)  # a publisher batch is a list of records
    for name in ("record", "channel-record", "data", "aggregate", "privacy-redaction", "privacy-channel"):
        assert seen.get(name, 0) > 0, name
    kinds = {json.loads(m.payload)["kind"] for m in simulate(REDACTION, P, 45, 4).messages
             if _kind(m.topic) == "aggregate"}
    assert kinds == {"histogram", "count", "mean"}
    _validator("device-status").validate({"device": "d", "state": "offline", "instance": "x"})


def test_schemas_reject_broken_payloads():
    rec = {"device": "d", "stream": "s", "seq": 0, "position": 0, "ts": 1.0, "value": None, "redacted": False,
           "redaction": [0.0, 0.0], "mode": "csprng"}
    v = _validator("record")
    assert not v.is_valid(rec)  # a null value must be redacted
    assert v.is_valid({**rec, "value": "a"})
    assert not v.is_valid({**rec, "value": "a", "redaction": [0.0, 1.5]})
    assert not v.is_valid({**rec, "value": "a", "seq": -1})
    assert not _validator("device-status").is_valid({"device": "d", "state": "sleepy"})
    with pytest.raises(ValueError, match="no schema named"):
        load("raw")


def test_aggregate_windows_carry_times_labels_and_mark_the_partial_one():
    sim = simulate(REDACTION, P, 45, 4)  # windows of 20: [0,19], [20,39], and [40,44] at shutdown
    wins = [json.loads(m.payload) for m in sim.messages if _kind(m.topic) == "aggregate"]
    hist = [w for w in wins if w["kind"] == "histogram"]
    assert [(w["lo"], w["hi"], w["partial"]) for w in hist] == [(0, 19, False), (20, 39, False), (40, 44, True)]
    for w in hist:
        assert w["ts_end"] - w["ts_start"] == w["hi"] - w["lo"]  # one step a second
        assert w["laplace_scale"] == w["beta"] == 2 * w["sigma"] and w["states"] == w["hi"] - w["lo"] + 1
    assert {w["state_label"] for w in wins if w["kind"] == "count"} == {"b"}
