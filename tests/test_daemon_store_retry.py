"""Under ``overflow = "stop-input"`` the writer retries ``Store.persist`` on the same
group after :class:`Full` (store.py ``Store.writer``). The ledger part of ``persist`` (commit_all of
the channel reservations, admit of the aggregate windows) runs before the outbox store that
raises Full, so a retry must not record the same releases a second time.

In-process, no broker: a channel stream (rr, ε = 1) with one histogram query (window 5) on a
stop-input outbox that is already full; six frames close window [0, 4] and reserve positions
[0, 4095] for the channel. The first ``persist`` meets a full outbox, the publisher then acks
what was there, and the retry stores the group — as ``Store.writer`` does.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from streamguard.config import Settings
from streamguard.ledger.store import Ledger
from streamguard.stream.daemon import Daemon
from streamguard.stream.outbox import Full, Item, Outbox

LABELS = ["low", "mid", "high"]


def test_a_retried_group_is_recorded_in_the_ledger_once(tmp_path: Path) -> None:
    stream = {"name": "s", "labels": LABELS, "source": "stdin", "mechanism": "channel",
              "model": {"matrix": [[0.8, 0.15, 0.05], [0.1, 0.8, 0.1], [0.05, 0.15, 0.8]]},
              "channel": {"kind": "rr", "epsilon": 1.0, "prior": [2 / 7, 3 / 7, 2 / 7]},
              "aggregates": [{"query": "histogram", "window": 5, "epsilon": 1.0}]}
    settings = Settings(device="dev", deterministic_seed=7, streams=[stream],
                        outbox={"path": tmp_path / "o.sqlite", "max_records": 10, "overflow": "stop-input"})
    d = Daemon(settings)
    t0 = time.time() - 1000
    with Outbox.from_config(settings.outbox) as box, Ledger.open(settings.ledger_path()) as ledger:
        box.put([Item("other", i, "t", b"{}") for i in range(10)], keep=16)  # full
        d._ledger = ledger

        async def intake() -> None:
            class _Box:  # _restore's thread hop, done inline
                async def run(self, fn, *args, **kw):  # type: ignore[no-untyped-def]
                    return fn(box, *args, **kw)
            await d._restore(_Box())  # type: ignore[arg-type]
            d._assemble(_Box())  # type: ignore[arg-type]
            rt = d.runtimes["s"]
            for i in range(6):
                releases, rej = rt.on_frame(json.dumps({"value": LABELS[i % 3], "ts": t0 + i}).encode(), time.time())
                assert rej is None
                await d.store.put(rt, releases)

        asyncio.run(intake())
        group = list(d.store.queue)
        assert sum(len(e.aggregates) for e in group) == 1 and sum(len(e.events) for e in group) == 1
        with pytest.raises(Full):
            d.store.persist(box, group)
        box.ack(r.id for r in box.peek(100))  # the publisher makes room
        d.store.persist(box, group)  # the writer's retry
        book = ledger.book("dev", "s")
        assert book.channels.count == 1, [ev.span() for ev in ledger.events_of("dev", "s", "channel")]
        assert book.aggregates.count == 1, [ev.span() for ev in ledger.events_of("dev", "s", "aggregate")]
