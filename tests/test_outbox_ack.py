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
