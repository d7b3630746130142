"""The set-chain data type (streamguard/model/setchain.py): clock → block, per-step sets, JSON."""

import json

import numpy as np
import pytest

from streamguard.model.chain import ModelError
from streamguard.model.setchain import Block, SetChain, is_setchain_json


def _two_blocks(utc_offset: float = 0.0) -> SetChain:
    night = Block(0.0, [[0.8, 0.1], [0.2, 0.7]], [[0.9, 0.2], [0.3, 0.8]], n_transitions=100)
    day = Block(8 * 3600.0, [[0.5, 0.3], [0.2, 0.6]], [[0.7, 0.5], [0.4, 0.8]],
                point=[[0.6, 0.4], [0.3, 0.7]], n_transitions=50)
    return SetChain(("off", "on"), 60.0, (night, day), utc_offset=utc_offset)


def test_block_at_follows_local_clock():
    sc = _two_blocks()
    assert sc.block_at(8 * 3600 - 1) == 0 and sc.block_at(8 * 3600) == 1
    assert sc.block_at(86400 + 3) == 0 and sc.block_at(86400 * 5 + 9 * 3600) == 1
    shifted = _two_blocks(utc_offset=3600.0)  # local = UTC + 1 h
    assert shifted.block_at(7 * 3600) == 1 and shifted.block_at(7 * 3600 - 1) == 0


def test_sets_for_steps_follow_the_clock():
    sc = _two_blocks()
    lo, hi = sc.sets_for(8 * 3600 - 120, 4)  # two night steps, then two day steps
    assert lo.shape == (4, 2, 2) and hi.shape == (4, 2, 2)
    assert np.array_equal(lo[0], sc.blocks[0].lo) and np.array_equal(lo[1], sc.blocks[0].lo)
    assert np.array_equal(hi[2], sc.blocks[1].hi) and np.array_equal(hi[3], sc.blocks[1].hi)
    # wraps around midnight
    assert list(sc.step_blocks(86400 - 60, 2)) == [1, 0]


def test_json_round_trip():
    sc = _two_blocks(utc_offset=-18000.0)
    d = json.loads(sc.dumps())
    assert d["kind"] == "setchain" and d["version"] == 1 and is_setchain_json(d)
    back = SetChain.from_json(d)
    assert back.labels == sc.labels and back.utc_offset == -18000.0 and back.period == 86400.0
    for a, b in zip(back.blocks, sc.blocks):
        assert a.start == b.start and np.array_equal(a.lo, b.lo) and np.array_equal(a.hi, b.hi)
    assert back.blocks[1].point is not None and back.blocks[1].n_transitions == 50


@pytest.mark.parametrize("mutate, msg", [
    (lambda d: d["blocks"][0].update(start=5.0), "begin at 0"),
    (lambda d: d["blocks"][1].update(start=0.0), "sorted"),
    (lambda d: d["blocks"][0].update(lo=[[0.8, 0.3], [0.2, 0.7]]), "lo ≤ hi"),
    (lambda d: d["blocks"][0].update(hi=[[0.85, 0.1], [0.3, 0.8]]), "empty row set"),
    (lambda d: d.update(version=99), "version"),
    (lambda d: d.update(labels=["a"]), "labels"),
])
def test_rejects_malformed(mutate, msg):
    d = _two_blocks().to_json()
    mutate(d)
    with pytest.raises(ModelError, match=msg):
        SetChain.from_json(d)


def test_memory_round_trips_and_is_validated():
    sc = _two_blocks()
    assert sc.memory == 1 and SetChain.from_json(sc.to_json()).memory == 1
    d = sc.to_json()
    d["memory"] = 2
    assert SetChain.from_json(d).memory == 2
    del d["memory"]
    assert SetChain.from_json(d).memory == 1  # older files: first order
    for bad in (0, 4, 1.5, True):
        d["memory"] = bad
        with pytest.raises(ModelError, match="memory"):
            SetChain.from_json(d)
