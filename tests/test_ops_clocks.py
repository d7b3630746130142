"""Issue 13, clocks: timestamps are checked against the daemon's clock with a small allowance
(records.MAX_CLOCK_AHEAD), and batch ``privatize`` works on historical data (no clock)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from streamguard.cli import main
from streamguard.config import Settings
from streamguard.sampling import bit_source
from streamguard.stream.records import MAX_CLOCK_AHEAD
from streamguard.stream.runtimes import make_runtime

LABELS = ("off", "on")


def _runtime(tmp_path: Path, **stream: object):
    s = Settings(device="clk", outbox={"path": tmp_path / "o.sqlite"},
                 streams=[{"name": "s", "labels": list(LABELS), "source": "stdin", "epsilon": 1.0,
                           "model": {"alpha": 0.1, "beta": 0.2}, **stream}])
    return make_runtime(s, s.streams[0], bit_source(None, 0))


def _frame(ts: float | None, value: str = "on") -> bytes:
    return json.dumps({"value": value, **({} if ts is None else {"ts": ts})}).encode()


def test_a_frame_an_hour_ahead_does_not_block_its_stream(tmp_path: Path) -> None:
    """Before: a frame stamped an hour ahead was accepted, and every later frame was "out of order"
    for ~58 minutes. Now it is refused (bad-ts), and the next frames on time are accepted."""
    rt = _runtime(tmp_path)
    now = time.time()
    for i in range(3):
        rt.on_frame(_frame(now - 10 + i), now)
    _, rejection = rt.on_frame(_frame(now + 3600), now)
    assert rejection is not None and rejection.reason == "bad-ts"
    for i in range(5):
        _, rejection = rt.on_frame(_frame(now + 1 + i), now + 1 + i)
        assert rejection is None
    assert rt.counters.accepted == 8 and dict(rt.counters.rejected) == {"bad-ts": 1}


def test_the_allowance_is_small_and_holds_back_at_most_that_long(tmp_path: Path) -> None:
    """A frame within the allowance is accepted; it holds back earlier-stamped frames only until the
    clock passes it, which is at most MAX_CLOCK_AHEAD seconds."""
    assert MAX_CLOCK_AHEAD <= 60
    rt = _runtime(tmp_path)
    now = time.time()
    assert rt.on_frame(_frame(now + MAX_CLOCK_AHEAD - 1), now)[1] is None
    assert rt.on_frame(_frame(now + 1), now + 1)[1].reason == "ts-out-of-order"  # type: ignore[union-attr]
    later = now + MAX_CLOCK_AHEAD
    assert rt.on_frame(_frame(later), later)[1] is None
    assert rt.on_frame(_frame(now + 2 * MAX_CLOCK_AHEAD + 1), now)[1].reason == "bad-ts"  # type: ignore[union-attr]


def test_batch_privatize_takes_historical_and_future_data_and_frames_without_ts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """privatize has no clock: frames from 2001 and from 2100 are accepted in order; a frame
    without ts in the middle is a record with ``ts`` null and does not make the later historical
    frames "out of order" (before: it was stamped with the current time and they were all refused)."""
    import io

    conf = tmp_path / "c.toml"
    conf.write_text(f"""device = "clk"
[outbox]
path = "{tmp_path / 'o.sqlite'}"
[[streams]]
name = "s"
labels = ["off", "on"]
source = "stdin"
epsilon = 1.0
[streams.model]
alpha = 0.1
beta = 0.2
""")
    old, future = 1.0e9, 4.1e9  # 2001, 2099
    ts = [old + i for i in range(10)] + [None] + [old + 10 + i for i in range(10)] + [future + i for i in range(5)]
    lines = b"".join(_frame(t, LABELS[i % 2]) + b"\n" for i, t in enumerate(ts))
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(lines)))
    assert main(["privatize", "--config", str(conf)]) == 0
    out, err = capsys.readouterr()
    recs = [json.loads(line) for line in out.splitlines()]
    assert [r["seq"] for r in recs] == list(range(len(ts)))
    assert [r["ts"] for r in recs] == ts
    assert f"{len(ts)} accepted" in err and "rejected: none" in err


def test_batch_frames_without_ts_are_private_under_a_schedule(tmp_path: Path) -> None:
    """With no clock, a frame without ts has an unknown time: under a private schedule it is
    treated as inside it (fail closed), never as outside."""
    rt = _runtime(tmp_path, schedule=[{"start": "00:00", "end": "00:01"}])
    rt.wall_clock = False
    releases = []
    for i in range(30):
        releases += rt.on_frame(_frame(None if i == 15 else 1.0e9 + 7200 + i), time.time())[0]
    releases += rt.drain()
    by_seq = {r.seq: r for r in releases}
    assert by_seq[15].state is None  # withheld
    assert rt.counters.accepted == 30
