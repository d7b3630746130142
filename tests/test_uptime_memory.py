"""Issue 28, "memory that does not grow with uptime": a stream's in-memory state is bounded.

The daemon's per-frame path (stream/store.py ``Store._enqueue``: the runtime decides, the records are
formatted, the decisions, mark states and ledger events are taken) is driven in-process on the
shipped example's stream (examples/streamguard.toml: α = 0.01, β = 0.8, design optimal) at 180
frames/s of frame time, with a private frame every 1,000 (a mark, a ledger event) and a privacy
status every second. After a warm-up that fills every bounded structure (the step tracker's 4,096
keys, the core's rows and timestamps, the finished marks kept, the record formatter's row texts),
a further run of frames must leave the traced Python memory where it was — a per-frame leak of a
single small object (≥ 24 B) over 12,000 frames would add ≥ 288 KB — and the named structures at
their caps. (benchmarks/bench_uptime.py measures the real daemon's RSS over minutes.)
"""

from __future__ import annotations

import gc
import json
import time
import tracemalloc
from pathlib import Path

from streamguard.config import Settings
from streamguard.sampling import bit_source
from streamguard.frames import steps
from streamguard.stream.runtimes import make_runtime

RATE = 180.0
PRIVATE_EVERY = 1000
WARM = 6_000
MORE = 12_000
#: Traced bytes a further MORE frames may add: the marks kept (one per PRIVATE_EVERY frames, up to
#: the core's 1,000) and allocator noise, far below a leak of one object per frame (MORE × 24 B =
#: 288 KB).
SLACK = 96 * 1024


def test_a_streams_state_stays_bounded_over_uptime(tmp_path: Path) -> None:
    s = Settings(device="up", outbox={"path": tmp_path / "o.sqlite"},
                 streams=[{"name": "s", "labels": ["vacant", "occupied"], "source": "mqtt", "epsilon": 1.0,
                           "design": "optimal", "model": {"alpha": 0.01, "beta": 0.8}}])
    rt = make_runtime(s, s.streams[0], bit_source(None, 0))
    t0 = time.time() - 2 * (WARM + MORE) / RATE
    taken = {"records": 0, "events": 0}

    def run(start: int, n: int) -> None:
        for i in range(start, start + n):
            now = t0 + i / RATE
            body = {"value": "occupied" if i % 97 < 2 else "vacant", "ts": now}
            if i % PRIVATE_EVERY == PRIVATE_EVERY - 1:
                body["private"] = True
            releases, rejection = rt.on_frame(json.dumps(body).encode(), now)
            assert rejection is None
            releases += rt.tick(now)
            rt.mark_records()  # what the daemon takes per decided group (_enqueue)
            for r in releases:
                rt.payload(r)
            taken["records"] += len(releases)
            rt.take_decisions()
            taken["events"] += len(rt.take_ledger_events())
            rt.take_aggregates()
            if i % int(RATE) == 0:
                json.dumps(rt.privacy_status())

    tracemalloc.start()  # (from the first frame: what replaces a block allocated before would count)
    try:
        run(0, WARM)
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        run(WARM, MORE)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    core = rt.core
    assert taken["records"] >= WARM + MORE - 2 * core._keep  # the frames were decided (the newest may wait)
    assert taken["events"] >= (WARM + MORE) // PRIVATE_EVERY  # and the marks became ledger events
    assert grown <= SLACK, f"{grown / 1024:.0f} KB more traced memory after {MORE:,} further frames"
    assert len(core._rows) <= core._keep and len(core._phys_of_seq) <= core._keep and len(core._ts_of) <= core._keep
    assert len(core.finished) <= core.finished.maxlen
    assert len(rt.steps._by_key) <= steps.MEMORY
