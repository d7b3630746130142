"""``streamguard run`` serves with start-up's objects out of the garbage collector's sight
(issue 15; Daemon's ``freeze_heap``, lifecycle.frozen_heap): a full collection no longer walks the
~100 k objects of modules, numba and the plans — 50–77 ms with the event loop stopped, several
times a minute under load — and they are given back when it stops serving. A daemon embedded in
another process (the default) leaves that process's collector alone."""

from __future__ import annotations

import gc
import json
import time
from pathlib import Path

from brokers import Broker
from daemon_harness import daemon_running, publish_all, subscribed, until

from streamguard.config import BrokerConfig, Settings


def _visible(obj: object) -> bool:
    """Is ``obj`` among the objects a collection walks (a frozen one is not)?"""
    return any(o is obj for o in gc.get_objects())


def _settings(cfg: BrokerConfig, tmp_path: Path) -> Settings:
    return Settings(device="gcf", topic_base="sggc", broker=cfg, outbox={"path": tmp_path / "o.sqlite"},
                    streams=[{"name": "s", "labels": ["off", "on"], "source": "mqtt", "epsilon": 1.0,
                              "model": {"alpha": 0.1, "beta": 0.2}}])


async def test_start_up_objects_are_frozen_while_serving_and_given_back(mosquitto: Broker, tmp_path: Path) -> None:
    cfg = mosquitto.broker_config()
    settings = _settings(cfg, tmp_path)
    assert gc.get_freeze_count() == 0
    async with daemon_running(settings, freeze_heap=True) as (daemon, _, task):
        await until(lambda: subscribed(daemon), 20, "the input subscription")
        core = daemon.runtimes["s"].core  # built at start-up (a tracked object: it holds dicts and deques)
        assert gc.is_tracked(core)
        assert gc.get_freeze_count() > 10_000 and not _visible(core)
        t0 = time.time() - 100
        frames = [json.dumps({"value": ["off", "on"][i % 2], "ts": t0 + i}).encode() for i in range(20)]
        await publish_all(cfg, [("sggc/gcf/s/raw", f) for f in frames])
        await until(lambda: daemon.stats.stored >= 10, 20, "the records stored")
        assert gc.collect() >= 0 and not _visible(core)  # (a full collection while serving)
    assert task.done() and task.exception() is None
    assert gc.get_freeze_count() == 0 and _visible(core)


async def test_an_embedded_daemon_leaves_the_collector_alone(mosquitto: Broker, tmp_path: Path) -> None:
    async with daemon_running(_settings(mosquitto.broker_config(), tmp_path)) as (daemon, _, task):
        await until(lambda: subscribed(daemon), 20, "the input subscription")
        assert gc.get_freeze_count() == 0 and _visible(daemon.runtimes["s"].core)
    assert task.done() and task.exception() is None
