"""A channel stream whose designer states its guarantee as a lift-measure threshold (watchdog
with measure l1 / chi2: ``Claim("l1_lift", {"threshold": …})``) records that guarantee in the
ledger (``ledger_claims``); before the fix it mapped to no claim at all and the daemon failed at
the first record instead of at start-up.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from streamguard.config import Settings
from streamguard.ledger.events import EventError
from streamguard.stream.runtimes import make_runtime
from streamguard.sampling import bit_source

LABELS = ["low", "mid", "high"]


@pytest.mark.parametrize("measure", ["l1", "chi2"])
def test_threshold_claims_are_refused_at_start_or_recorded(tmp_path: Path, measure: str) -> None:
    joint = tmp_path / "joint.json"
    joint.write_text(json.dumps({"joint": [[0.2, 0.1, 0.15], [0.05, 0.3, 0.2]]}))
    stream = {"name": "s", "labels": LABELS, "source": "stdin", "mechanism": "channel",
              "model": {"matrix": [[0.8, 0.15, 0.05], [0.1, 0.8, 0.1], [0.05, 0.15, 0.8]]},
              "channel": {"kind": "watchdog", "epsilon": 1.0, "measure": measure, "joint": str(joint)}}
    settings = Settings(device="dev", deterministic_seed=7, outbox={"path": tmp_path / "o.sqlite"}, streams=[stream])
    try:
        rt = make_runtime(settings, settings.streams[0], bit_source(7, 0))
    except (ValueError, EventError):
        return  # refused at start-up: fail closed before any record
    releases, rej = rt.on_frame(json.dumps({"value": "mid", "ts": time.time() - 10}).encode(), time.time())
    assert rej is None and len(releases) == 1
    events = rt.take_ledger_events()
    assert len(events) == 1 and events[0].claims
