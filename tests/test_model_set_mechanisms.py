"""A finite model set beside aggregates and channels (issue 11): the MQM's Θ is the set's members
(the quilt model takes a set natively, so its scale holds for every member), a channel's stream
leakage is its worst member's; a region of chains (box) is refused with a one-line reason
(tests/test_model_cli.py). Drift stops aggregates (tests/test_model_drift.py, test_drift_restart.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from streamguard.model.chain import MarkovChain
from streamguard.config import Settings
from streamguard.model import modelset
from streamguard.perturbation.stream_leakage import stream_leakage_report
from streamguard.quilt import QuiltModel
from streamguard.sampling import SeededSource
from streamguard.stream.aggregates import stream_scale
from streamguard.stream.channel_runtime import ChannelRuntime
from streamguard.stream.redaction_runtime import RedactionRuntime

MEMBERS = (MarkovChain.binary(0.05, 0.1), MarkovChain.binary(0.08, 0.06), MarkovChain.binary(0.03, 0.2))


def _finite(tmp_path: Path) -> Path:
    path = tmp_path / "THETA.json"
    modelset.ModelSet("finite", 2, point=MEMBERS[0], members=MEMBERS).write(path)
    return path


def _settings(tmp_path: Path, stream: dict) -> Settings:
    return Settings(device="dev", broker={"host": "127.0.0.1"}, outbox={"path": tmp_path / "o.sqlite"}, streams=[stream])


def test_aggregates_over_a_finite_set_use_every_member(tmp_path: Path) -> None:
    """The aggregate's quilt model is Θ = the members; its scale is at least every single member's
    (it must hold for each), and the redaction plan beside it is robust over the same set."""
    s = _settings(tmp_path, {"name": "s", "labels": ["a", "b"], "epsilon": 1.0, "model": {"file": str(_finite(tmp_path))},
                             "aggregates": [{"query": "histogram", "window": 20, "epsilon": 1.0}]})
    rt = RedactionRuntime(s, s.streams[0], SeededSource(1))
    assert rt.aggregates is not None and rt.robust is not None
    (q,) = rt.aggregates.queries
    assert q.model.identifier == QuiltModel(list(MEMBERS), q.model.mode).identifier
    sigma = q.scale.sigma
    singles = [stream_scale(QuiltModel([m], q.model.mode), 1.0).sigma for m in MEMBERS]
    assert sigma >= max(singles) * (1 - 1e-12) and sigma > min(singles)


def test_a_channel_over_a_finite_set_reports_the_worst_member(tmp_path: Path) -> None:
    s = _settings(tmp_path, {"name": "c", "labels": ["a", "b"], "mechanism": "channel",
                             "model": {"file": str(_finite(tmp_path))}, "channel": {"kind": "rr", "epsilon": 1.0, "prior": [0.5, 0.5]}})
    rt = ChannelRuntime(s, s.streams[0], SeededSource(2))
    singles = [float(stream_leakage_report(rt.channel, m)["leakage"]) for m in MEMBERS]
    assert rt.stream_leakage is not None
    assert float(rt.stream_leakage["leakage"]) == max(singles) and rt.stream_leakage["worst_member"] == int(np.argmax(singles))
    assert rt.stream_leakage_bound == max(singles)  # exact (every member's converged): what the ledger states
    assert rt.model_id == f"modelset:{modelset.load(_finite(tmp_path)).digest()}"
    assert rt.privacy_status()["model_set"]["kind"] == "finite"
