"""The daemon's cache of robust plans (model/robust_cache.py): keyed by the model set's content, a
hit skips the search but never the checks — the plan is rebuilt and its worst case over the whole
set certified again; a tampered entry is designed again."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from streamguard.model import modelset, robust_cache
from streamguard.model.calibrate import TransitionData
from streamguard.model.robust import robust_stream_plan
from streamguard.redaction.plan_cache import PlanCache

COUNTS = np.array([[1827, 196], [195, 781]])


def _set(counts: np.ndarray = COUNTS) -> modelset.ModelSet:
    return modelset.from_calibration(TransitionData(counts), 0.99, ("lo", "hi"))


def test_a_hit_skips_the_search_and_gives_the_same_certified_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ms, cache = _set(), PlanCache(tmp_path / "plans.json")
    fresh = robust_stream_plan(ms, 1.0)
    first = robust_cache.cached_robust_stream_plan(ms, 1.0, cache=cache)
    assert first.plan.table().tolist() == fresh.plan.table().tolist() and first.worst == fresh.worst

    def no_search(*_a: object, **_k: object) -> None:
        raise AssertionError("the search ran on a cache hit")

    monkeypatch.setattr(robust_cache, "robust_stream_plan", no_search)
    hit = robust_cache.cached_robust_stream_plan(ms, 1.0, cache=cache)
    assert hit.plan.table().tolist() == fresh.plan.table().tolist()
    assert hit.worst.bound == fresh.worst.bound <= 1.0 and hit.design_member == fresh.design_member
    assert hit.point_expected_redacted == fresh.point_expected_redacted
    # another set (other counts), another ε: other keys, so the search runs
    with pytest.raises(AssertionError, match="search ran"):
        robust_cache.cached_robust_stream_plan(_set(COUNTS * 2), 1.0, cache=cache)
    with pytest.raises(AssertionError, match="search ran"):
        robust_cache.cached_robust_stream_plan(ms, 0.9, cache=cache)


def test_a_tampered_robust_entry_is_designed_again(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Rows lowered (less redaction) in the stored plan: the exact checks refuse it, a warning says
    so, and the plan used is the freshly designed one."""
    ms, path = _set(), tmp_path / "plans.json"
    cache = PlanCache(path)
    fresh = robust_cache.cached_robust_stream_plan(ms, 1.0, cache=cache)
    key = robust_cache.robust_key(ms, 1.0, "optimal", "even", None)
    doc = json.loads(path.read_text())
    doc[key]["plan"]["right"]["red"] = [[0.0, 0.0] for _ in doc[key]["plan"]["right"]["red"]]
    path.write_text(json.dumps(doc))
    with caplog.at_level(logging.WARNING):
        again = robust_cache.cached_robust_stream_plan(ms, 1.0, cache=cache)
    assert "stored robust plan failed its checks" in caplog.text
    assert again.plan.table().tolist() == fresh.plan.table().tolist() and again.worst.bound <= 1.0
