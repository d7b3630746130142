"""Outbox.ack deletes exactly the acknowledged records, by runs of consecutive ids (issue 15: one
range delete per run instead of one statement per id): gaps, duplicates, unknown ids and any order."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from streamguard.stream.outbox import Item, Outbox


def test_ack_deletes_exactly_the_acknowledged_ids(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    with Outbox(tmp_path / "o.sqlite", 10_000, "drop-oldest") as box:
        box.put([Item("s", i, "t", b"%d" % i) for i in range(500)], keep=100)
        stored = {r.id for r in box.peek(1000)}
        for _ in range(20):
            left = sorted(stored)
            pick = [int(x) for x in rng.choice(left, size=min(len(left), int(rng.integers(1, 40))), replace=False)]
            extra = [max(stored) + 1000, -5]  # unknown ids are ignored
            acked = pick + pick[:3] + extra  # duplicates count once
            rng.shuffle(acked)
            assert box.ack(acked) == len(set(pick))
            stored -= set(pick)
            assert {r.id for r in box.peek(1000)} == stored and len(box) == len(stored)


def test_store_returns_the_rows_peek_reads(tmp_path: Path) -> None:
    """The rows Outbox.store returns (handed to the publisher without a read back) are exactly
    what peek returns for them — ids included, across groups, acks and a reopened outbox; a store
    whose drop-oldest policy deleted records returns None (the publisher reads the outbox)."""
    path = tmp_path / "o.sqlite"
    seq = 0
    for _ in range(2):  # (the second round on the reopened outbox)
        with Outbox(path, 60, "drop-oldest") as box:
            for size in (1, 7, 20):
                before = {r.id for r in box.peek(1000)}
                rows = box.store([Item("s", seq + i, "t", b"p%d" % (seq + i)) for i in range(size)], keep=100,
                                 decisions={"s": [(seq + i, 0.5, 0.25) for i in range(size)]})
                seq += size
                assert rows == [r for r in box.peek(1000) if r.id not in before]
                box.ack([r.id for r in rows[: size // 2]])
    with Outbox(path, 60, "drop-oldest") as box:
        assert box.store([Item("s", seq + i, "t", b"x") for i in range(60)], keep=100) is None
        assert len(box) == 60
