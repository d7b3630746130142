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


def _sql_counts(path: Path) -> dict[str, int]:
    """Each stream's stored records, counted by SQLite itself on a connection of the test's own."""
    import sqlite3

    with sqlite3.connect(path) as db:
        return dict(db.execute("SELECT stream, COUNT(*) FROM outbox GROUP BY stream"))


def test_per_stream_counts_follow_every_insert_and_delete(tmp_path: Path) -> None:
    """Outbox.count(stream) is kept in memory (a privacy status asks for it often; a COUNT over a
    large outbox cost milliseconds per stream): after random stores of several streams, acks (with
    gaps, duplicates and unknown ids), drop-oldest deletions and a reopen, it equals what SQLite
    counts in the file."""
    rng = np.random.default_rng(7)
    path = tmp_path / "o.sqlite"
    streams = ["a", "b", "c", "d"]
    seq = dict.fromkeys(streams, 0)
    for _ in range(3):  # (each round reopens the outbox: the counts are read back from the file)
        with Outbox(path, 120, "drop-oldest") as box:
            assert {s: box.count(s) for s in streams} == {s: _sql_counts(path).get(s, 0) for s in streams}
            for _ in range(40):
                if rng.random() < 0.6:
                    items = []
                    for _ in range(int(rng.integers(1, 30))):
                        s = streams[int(rng.integers(len(streams)))]
                        items.append(Item(s, seq[s], f"t/{s}", b"x"))
                        seq[s] += 1
                    box.store(items, keep=10)
                else:
                    ids = [r.id for r in box.peek(1000)]
                    pick = [int(x) for x in rng.choice(ids, size=min(len(ids), int(rng.integers(0, 25))),
                                                       replace=False)] if ids else []
                    box.ack(pick + pick[:2] + [10**9])
                sql = _sql_counts(path)
                assert {s: box.count(s) for s in streams} == {s: sql.get(s, 0) for s in streams}
                assert len(box) == sum(sql.values())
            assert box.dropped > 0  # the drop-oldest policy deleted records on the way
            statements: list[str] = []
            box._db.set_trace_callback(statements.append)
            assert [box.count(s) for s in streams] and statements == []  # no query, let alone a scan
