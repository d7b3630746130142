"""Stream plans cached across starts (redaction/plan_cache.py): a hit is the same plan, the file
is private, the key covers what the plan depends on, and a damaged or tampered entry is never
used (it is checked exactly and designed again)."""

from __future__ import annotations

import json
import logging
import stat

import numpy as np
import pytest

from streamguard import MarkovChain
from streamguard.redaction.plan import plan_stream
from streamguard.redaction.plan_cache import MAX_ENTRIES, PlanCache, beside, cached_plan_stream, plan_key

CHAIN = MarkovChain.binary(0.05, 0.3)


def _same(a, b) -> None:
    for x, y in ((a.left, b.left), (a.right, b.right)):
        assert x.budget == y.budget and x.threshold == y.threshold
        np.testing.assert_array_equal(x.red, y.red)
        np.testing.assert_array_equal(x.regions, y.regions)
        assert x.expected_redacted == pytest.approx(y.expected_redacted, rel=1e-12)


def test_a_hit_is_the_designed_plan_and_the_file_is_private(tmp_path):
    cache = PlanCache(beside(tmp_path / "state" / "outbox.sqlite"))
    assert cache.path == tmp_path / "state" / "outbox.plans.json"
    said: list[str] = []
    first = cached_plan_stream(CHAIN, 1.0, design="exact", cache=cache, progress=said.append)
    assert said and "designing the exact plan" in said[0]
    assert stat.S_IMODE(cache.path.stat().st_mode) == 0o600
    said.clear()
    again = cached_plan_stream(CHAIN, 1.0, design="exact", cache=cache, progress=said.append)
    assert said == []  # nothing designed
    _same(first, again)
    _same(first, plan_stream(CHAIN, 1.0, design="exact"))
    assert again.leakage().total <= 1.0


def test_the_key_covers_model_budget_design_split_and_threshold():
    base = plan_key(CHAIN, 1.0, "exact", "even", None)
    others = [plan_key(MarkovChain.binary(0.05, 0.30000001), 1.0, "exact", "even", None),
              plan_key(CHAIN, 1.0 + 1e-12, "exact", "even", None),
              plan_key(CHAIN, 1.0, "optimal", "even", None),
              plan_key(CHAIN, 1.0, "exact", 0.4, None),
              plan_key(CHAIN, 1.0, "exact", "even", "optimize")]
    assert len({base, *others}) == 1 + len(others)
    assert plan_key(CHAIN, 1.0, "exact", "even", None) == base


def _entry(cache: PlanCache) -> tuple[dict, str]:
    doc = json.loads(cache.path.read_text())
    (key,) = doc
    return doc, key


@pytest.mark.parametrize("damage", ["lower-q", "shorter", "budget", "garbage"])
def test_a_tampered_entry_is_checked_exactly_and_designed_again(tmp_path, caplog, damage):
    cache = PlanCache(tmp_path / "plans.json")
    good = cached_plan_stream(CHAIN, 1.0, design="exact", cache=cache)
    doc, key = _entry(cache)
    side = doc[key]["right"]
    if damage == "lower-q":  # less redaction: the exact leakage exceeds the side's budget
        m = next(i for i, r in enumerate(side["red"]) if 0.0 < min(r) < 1.0)
        side["red"][m] = [min(side["red"][m]) / 4 if v < 1 else v for v in side["red"][m]]
    elif damage == "shorter":
        side["red"] = side["red"][:-1]
    elif damage == "budget":  # a larger claimed budget for the same rows
        side["budget"] = 5.0
    else:
        cache.path.write_text("{not json")
    if damage != "garbage":
        cache.path.write_text(json.dumps(doc))
    with caplog.at_level(logging.WARNING, logger="streamguard.redaction.plan_cache"):
        again = cached_plan_stream(CHAIN, 1.0, design="exact", cache=cache)
    assert caplog.records  # one warning line, and the plan designed again
    _same(good, again)
    assert again.leakage().total <= 1.0


def test_the_cache_keeps_a_bounded_number_of_plans(tmp_path):
    cache = PlanCache(tmp_path / "plans.json")
    for i in range(MAX_ENTRIES + 3):
        cached_plan_stream(CHAIN, 0.5 + i / 100, design="paper", cache=cache)
    assert len(json.loads(cache.path.read_text())) == MAX_ENTRIES


def test_an_unwritable_cache_only_warns(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("")
    cache = PlanCache(blocker / "plans.json")  # its directory cannot be created
    with caplog.at_level(logging.WARNING, logger="streamguard.redaction.plan_cache"):
        plan = cached_plan_stream(CHAIN, 1.0, design="optimal", cache=cache)
    assert plan.leakage().total <= 1.0
    assert any("cannot be written" in r.getMessage() for r in caplog.records)


def test_a_shared_cache_plans_identical_streams_once(tmp_path, monkeypatch):
    """share=True (the daemon's start): streams of one model get one plan object, designed once,
    read-only, and its exact leakage computed once; another model gets its own plan."""
    import streamguard.redaction.plan_cache as pc

    designed: list[float] = []
    leakages: list[object] = []
    real_plan, real_leak = pc.plan_stream, pc.StreamPlan.leakage

    def counting_plan(chain, eps, **kw):
        designed.append(eps)
        return real_plan(chain, eps, **kw)

    def counting_leak(plan):
        leakages.append(plan)
        return real_leak(plan)

    monkeypatch.setattr(pc, "plan_stream", counting_plan)
    cache = PlanCache(tmp_path / "plans.json", share=True)
    plans = [cached_plan_stream(CHAIN, 1.0, design="optimal", cache=cache) for _ in range(50)]
    assert designed == [1.0] and all(p is plans[0] for p in plans)
    for side in (plans[0].left, plans[0].right):
        assert not side.red.flags.writeable and not side.regions.flags.writeable
        with pytest.raises(ValueError):
            side.red[0, 0] = 0.0
    _same(plans[0], plan_stream(CHAIN, 1.0, design="optimal"))
    monkeypatch.setattr(pc.StreamPlan, "leakage", counting_leak)
    figures = [cache.leakage(p) for p in plans]
    assert len(leakages) == 1 and all(f == figures[0] for f in figures)
    assert figures[0] == real_leak(plan_stream(CHAIN, 1.0, design="optimal"))
    other = cached_plan_stream(MarkovChain.binary(0.1, 0.3), 1.0, design="optimal", cache=cache)
    assert other is not plans[0] and designed == [1.0, 1.0]
    # a second start (a new instance) reads the file, checks the entry exactly, designs nothing
    again = cached_plan_stream(CHAIN, 1.0, design="optimal", cache=PlanCache(cache.path, share=True))
    assert designed == [1.0, 1.0] and again is not plans[0]
    _same(again, plans[0])


async def test_a_daemon_start_shares_one_plan_per_model(tmp_path):
    """A daemon with 30 streams of two models (no broker needed: only its start-up restore)
    builds two plans, each shared by the streams of its model."""
    from streamguard.config import Settings
    from streamguard.ledger.store import Ledger
    from streamguard.stream.daemon import Daemon
    from streamguard.stream.outbox import AsyncOutbox, Outbox

    streams = [{"name": f"s{i}", "labels": ["a", "b"], "epsilon": 1.0, "source": "mqtt",
                "model": {"alpha": 0.05, "beta": 0.2} if i % 3 else {"alpha": 0.1, "beta": 0.3}}
               for i in range(30)]
    settings = Settings(device="gw", topic_base="t", broker={"host": "127.0.0.1", "port": 1},
                        outbox={"path": tmp_path / "outbox.sqlite"}, streams=streams)
    daemon = Daemon(settings)
    async with await AsyncOutbox.open(Outbox.from_config, settings.outbox) as box:
        daemon._ledger = await box.run(lambda _b: Ledger.open(settings.ledger_path()))
        try:
            await daemon._restore(box)
        finally:
            await box.run(lambda _b: daemon._ledger.close())
    plans = {id(rt.plan) for rt in daemon.runtimes.values()}
    assert len(daemon.runtimes) == 30 and len(plans) == 2
    by_model = {i % 3 != 0: daemon.runtimes[f"s{i}"].plan for i in range(30)}
    for i in range(30):
        assert daemon.runtimes[f"s{i}"].plan is by_model[i % 3 != 0]
        assert daemon.runtimes[f"s{i}"].plan_leakage == by_model[i % 3 != 0].leakage()
