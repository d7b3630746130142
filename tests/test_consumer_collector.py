"""De-duplication, gaps and order (streamguard.consumer.collector) under injected duplicates,
losses and reordering, on payloads of the real runtime; capture files; ``streamguard consume
--file`` (issue 14)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from consumer_sim import BASE, simulate
from streamguard.cli import main
from streamguard.consumer.capture import CaptureError, CaptureWriter, read_capture
from streamguard.consumer.collector import Collector
from streamguard.consumer.report import report
from streamguard.stream.transport import Message

P = np.array([[0.9, 0.1], [0.2, 0.8]])
STREAM = {"labels": ["vacant", "occupied"], "model": {"alpha": 0.1, "beta": 0.2}, "epsilon": 1.0}


def _data(messages):
    return [m for m in messages if m.topic.endswith("/data")]


def test_duplicates_losses_and_reordering_are_undone():
    sim = simulate(STREAM, P, 400, 5, mark_every=25, bad_every=41)
    data, other = _data(sim.messages), [m for m in sim.messages if not m.topic.endswith("/data")]
    rng = random.Random(9)
    lost = set(rng.sample(range(len(data)), 12))
    kept = [m for i, m in enumerate(data) if i not in lost]
    dups = rng.sample(kept, 30)
    mixed = kept + dups
    rng.shuffle(mixed)
    c = Collector(BASE)
    c.feed_all(mixed + other)
    log = c.streams[("dev", "s")]
    assert log.duplicates == 30 and log.conflicts == 0
    assert [r.seq for r in log.ordered()] == sorted({json.loads(m.payload)["seq"] for m in kept})
    lost_seqs = sorted(json.loads(data[i].payload)["seq"] for i in lost)
    missing = [s for lo, hi in log.gaps() for s in range(lo, hi + 1)]
    first, last = min(log.records), max(log.records)
    assert missing == [s for s in lost_seqs if first < s < last]
    assert log.reordered > 0
    # the same estimate as from the clean, in-order stream minus the lost records
    clean = Collector(BASE)
    clean.feed_all(kept + other)
    a, b = report(c)["streams"]["s"], report(clean)["streams"]["s"]
    assert a["frequency"] == pytest.approx(b["frequency"], abs=1e-12)
    assert a["duplicates"] == 30 and b["duplicates"] == 0 and a["lost"] == b["lost"] == len(missing)
    # gaps are counted in grid steps: the lost records' and the rejected frames' positions alike
    received = {json.loads(m.payload)["position"] for m in kept}
    withheld = [t for t in range(min(received), max(received) + 1) if t not in received]
    runs = sum(1 for t in withheld if t - 1 not in withheld)
    assert len(withheld) > len(missing)  # rejected frames occupy steps without a record
    assert a["missing"] == b["missing"] == len(withheld) and a["gaps"] == b["gaps"] == runs


def test_a_different_second_copy_is_a_conflict_and_the_first_is_kept():
    sim = simulate(STREAM, P, 30, 6)
    data = _data(sim.messages)
    body = json.loads(data[3].payload)
    forged = {**body, "value": None if body["value"] else "vacant", "redacted": not body["redacted"]}
    c = Collector(BASE)
    c.feed_all(data + [Message(data[3].topic, json.dumps(forged).encode())])
    log = c.streams[("dev", "s")]
    assert log.conflicts == 1 and log.records[body["seq"]].redacted == body["redacted"]
    rep = report(c)
    assert any("different content" in w for w in rep["streams"]["s"]["devices"]["dev"]["warnings"])


def test_malformed_messages_are_counted_not_fatal():
    c = Collector(BASE)
    c.feed_all([Message(f"{BASE}/dev/s/data", b"{nope"), Message(f"{BASE}/dev/s/data", b'{"device":"dev"}'),
                Message(f"{BASE}/dev/s/raw", b"raw readings are not ours"), Message("elsewhere/x", b"1")])
    assert c.malformed == {"payload is not JSON": 1, "record does not name the topic's device and stream": 1}
    assert c.records() == 0


def test_capture_round_trip_and_consume_file(tmp_path, capsys):
    sim = simulate(STREAM, P, 300, 7, mark_every=20)
    path = tmp_path / "capture.jsonl"
    w = CaptureWriter(path)
    for m in sim.messages + _data(sim.messages)[:5]:  # five duplicates
        w.write(m)
    w.write(Message(f"{BASE}/dev/s/data", b"\xff\xfe not utf-8"))
    w.close()
    assert path.stat().st_mode & 0o077 == 0
    back = list(read_capture(path))
    assert back[: len(sim.messages)] == sim.messages and back[-1].payload == b"\xff\xfe not utf-8"
    assert main(["consume", "--file", str(path), "--json", "--bucket", "60"]) == 0
    out = json.loads(capsys.readouterr().out)
    s = out["streams"]["s"]
    assert s["labels"] == ["vacant", "occupied"] and s["records"] == 300 and s["duplicates"] == 5
    assert s["gaps"] == 0 and s["redacted"] == sum(json.loads(m.payload)["redacted"] for m in _data(sim.messages))
    assert len(s["frequency"]) == 2 and abs(sum(s["frequency"]) - 1) < 1e-9
    assert all(lo <= f <= hi for f, (lo, hi) in zip(s["frequency"], s["frequency_ci"]))
    bs = s["devices"]["dev"]["buckets"]
    stamps = [json.loads(m.payload)["ts"] for m in _data(sim.messages)]
    assert [b["start"] for b in bs] == sorted({ts // 60 * 60 for ts in stamps}) and sum(b["records"] for b in bs) == 300
    assert s["devices"]["dev"]["audit"]["warnings"] == [] and s["devices"]["dev"]["audit"]["marks_checked"] == 15
    assert out["malformed"] == {"payload is not JSON": 1}
    png = tmp_path / "shares.png"
    assert main(["consume", "--file", str(path), "--bucket", "60", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = capsys.readouterr().out
    assert "occupied" in text and "dev/s: share per bucket" in text
    assert sum(line.startswith("2026-09-21 ") for line in text.splitlines()) == len(bs)  # T0 is 2026-09-21
    # a table without --json; --device selects
    assert main(["consume", "--file", str(path), "--device", "other"]) == 0
    assert "occupied" not in capsys.readouterr().out


def test_consume_argument_errors(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"topic": 1}\n')
    assert main(["consume", "--file", str(bad)]) == 2
    assert "line 1 is not a captured message" in capsys.readouterr().err
    assert main(["consume", "--broker", "127.0.0.1:1883"]) == 2
    assert "--count N or --duration" in capsys.readouterr().err
    assert main(["consume", "--broker", "nohost", "--count", "1"]) == 2
    assert "HOST:PORT" in capsys.readouterr().err
    with pytest.raises(CaptureError):
        list(read_capture(bad))
    from streamguard.support.loopback import free_port

    assert main(["consume", "--broker", f"127.0.0.1:{free_port()}", "--count", "1"]) == 2  # nobody listens
    assert "cannot connect" in capsys.readouterr().err


def test_memory_is_bounded_per_stream():
    sim = simulate(STREAM, P, 120, 8)
    c = Collector(BASE, limit=50)
    c.feed_all(sim.messages)
    log = c.streams[("dev", "s")]
    assert len(log.records) == 50 and log.evicted == 70
    assert sorted(log.records) == list(range(70, 120))  # the newest are kept


def test_an_old_status_delivered_late_does_not_replace_the_newer_one():
    c = Collector(BASE)
    topic = f"{BASE}/dev/s/privacy"
    c.feed_all([Message(topic, json.dumps({"stream": "s", "next_seq": 10, "restart_position": 7}).encode()),
                Message(topic, json.dumps({"stream": "s", "next_seq": 4, "restart_position": None}).encode())])
    log = c.streams[("dev", "s")]
    assert log.status is not None and log.status["next_seq"] == 10 and log.statuses == 2 and log.restarts == {7}
