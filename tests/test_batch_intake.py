"""Issue 15: a raw message may carry a batch — a JSON list of frames of one stream, each element one
step (frames/records.py: split_batch, parse_element; stream/runtime.py: on_message). Checked here
without a broker (the daemon end to end is in test_batch_daemon.py):

- each element is validated like a frame of its own: malformed elements are rejected steps
  (private when they may ask to be), NaN in one element rejects that element only, duplicates
  inside a list are redeliveries (no new step; a private one marks the step it repeats);
- a list over the bounds is one rejected, private step (fail closed);
- the rows used equal the plan's table around every mark (an independent computation,
  daemon_harness.expected_rows), the same as frame by frame; redaction frequencies pass an exact
  binomial test; a ``"now"`` command after a batch still protects its last record (held);
- nothing decided in a long batch is lost before the daemon takes it (decisions, mark events).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from daemon_harness import binomial_tail, expected_rows

from streamguard.config import Settings
from streamguard.sampling import bit_source
from streamguard.frames.records import MAX_BATCH_BYTES, MAX_BATCH_FRAMES, Rejection, split_batch
from streamguard.stream.redaction_runtime import RedactionRuntime
from streamguard.stream.runtimes import make_runtime

LABELS = ["off", "on"]
T0 = 1.7e9
NOW = T0 + 1e6  # the daemon's clock: after every frame's ts


def _runtime(tmp_path: Path, seed: int | None = 7, **stream: object) -> RedactionRuntime:
    s = Settings(device="d", topic_base="b", broker={"host": "127.0.0.1", "port": 1},
                 outbox={"path": tmp_path / "o.sqlite"},
                 streams=[{"name": "s", "labels": LABELS, "model": {"alpha": 0.1, "beta": 0.2}, "epsilon": 1.0,
                           "design": "exact", "source": "mqtt", **stream}],
                 deterministic_seed=seed)
    rt = make_runtime(s, s.streams[0], bit_source(seed, 0))
    assert isinstance(rt, RedactionRuntime)
    return rt


def _frame(i: int, state: int = 0, **extra: object) -> dict[str, object]:
    return {"value": LABELS[state], "ts": T0 + i, **extra}


def _batch(frames: list[object]) -> bytes:
    return json.dumps(frames).encode()


def _decide_all(rt: RedactionRuntime, messages: list[bytes]) -> list:  # type: ignore[type-arg]
    out = []
    for m in messages:
        out += rt.on_message(m, NOW)
    return out + rt.drain()


def _mark_positions(rt: RedactionRuntime) -> list[int]:
    return sorted(m.phys for m in [*rt.core.finished, *rt.core._marks])


def _rows(releases: list) -> list[tuple[int, int, tuple[float, ...]]]:  # type: ignore[type-arg]
    return [(r.seq, r.phys, r.row) for r in releases]


def test_split_batch_bounds_and_non_batches() -> None:
    assert split_batch(b'{"value":"on"}') is None  # a single frame
    assert split_batch(b"[1, 2") is None  # not JSON: rejected as one frame, as before batches
    assert split_batch(b"[]") == []
    assert len(split_batch(b' \n[{"value":"on"}]') or []) == 1  # leading whitespace
    too_many = split_batch(_batch([_frame(i) for i in range(MAX_BATCH_FRAMES + 1)]))
    assert isinstance(too_many, Rejection) and too_many.reason == "oversize" and too_many.private
    too_big = split_batch(b"[" + b" " * MAX_BATCH_BYTES + b"]")
    assert isinstance(too_big, Rejection) and too_big.reason == "oversize" and too_big.private
    assert len(split_batch(_batch([_frame(i) for i in range(MAX_BATCH_FRAMES)])) or []) == MAX_BATCH_FRAMES


def test_elements_are_validated_one_by_one(tmp_path: Path) -> None:
    """Malformed elements are rejected steps with their reason (never their value), their
    neighbours are accepted; a malformed element that asks to be private marks its step: the
    positions and rows are those of the same frames sent one by one."""
    rt = _runtime(tmp_path / "batch")
    elements: list[object] = [
        _frame(0), _frame(1, 1), "on", _frame(3) | {"value": "maybe"}, [4],
        {"value": "on", "ts": T0 + 5, "private": "yes"},  # bad-private, asks to be private
        _frame(6), {"ts": T0 + 7}, _frame(8, 1),
    ]
    nan = '{"value": "on", "ts": NaN}'
    text = json.dumps(elements)[:-1] + f", {nan}, " + json.dumps(_frame(10)) + "]"
    releases = _decide_all(rt, [text.encode()])
    one_by_one = _decide_all(_runtime(tmp_path / "single"), [json.dumps(e).encode() for e in elements]
                             + [nan.encode(), json.dumps(_frame(10)).encode()])
    c = rt.counters
    assert c.accepted == 5 and c.duplicates == 0
    assert dict(c.rejected) == {"not-object": 2, "unknown-state": 1, "bad-private": 1, "missing-value": 1,
                                "not-finite": 1}
    assert [r.seq for r in releases] == list(range(5))
    assert [r.phys for r in releases] == [0, 1, 6, 8, 10]  # rejected steps keep their positions
    assert _rows(releases) == _rows(one_by_one)
    # the rejected step 5 asked to be private: its neighbours are redacted (the plan fully
    # redacts distances 1..3 for this chain and ε)
    assert _mark_positions(rt) == [5]
    assert all(r.redacted and r.row == (1.0, 1.0) for r in releases if 2 <= r.phys <= 8)


def test_duplicates_inside_a_list_are_redeliveries(tmp_path: Path) -> None:
    """The same ts twice in a list (or again in the next list) is one step: counted as a duplicate,
    never drawn twice; a private copy marks the step it repeats (fail closed)."""
    rt = _runtime(tmp_path / "batch")
    first = _batch([_frame(0), _frame(1), _frame(1), _frame(2, 1)])
    again = _batch([_frame(2, 1, private=True), _frame(3)])  # repeats step 2 and asks to be private
    releases = _decide_all(rt, [first, again])
    assert rt.counters.accepted == 4 and rt.counters.duplicates == 2
    assert [r.seq for r in releases] == [0, 1, 2, 3]
    rows = expected_rows(4, [2], rt.plan)
    for r in releases:
        assert r.row == pytest.approx(tuple(rows[r.phys]), abs=0)
    assert releases[2].redacted and releases[2].row == (1.0, 1.0)
    one_by_one = _decide_all(_runtime(tmp_path / "single"), [json.dumps(f).encode() for f in
                                                             json.loads(first) + json.loads(again)])
    assert _rows(releases) == _rows(one_by_one)


def test_an_oversize_list_is_one_private_rejected_step(tmp_path: Path) -> None:
    rt = _runtime(tmp_path / "batch")
    ok = _batch([_frame(i) for i in range(10)])
    huge = _batch([_frame(10 + i) for i in range(MAX_BATCH_FRAMES + 1)])
    after = _batch([_frame(2000 + i) for i in range(10)])
    releases = _decide_all(rt, [ok, huge, after])
    assert dict(rt.counters.rejected) == {"oversize": 1} and rt.counters.accepted == 20
    assert [r.phys for r in releases] == [*range(10), *range(11, 21)]
    # the refused list's step is private, like an oversize frame's (unreadable: fail closed)
    assert _mark_positions(rt) == [10]
    frames = [json.dumps(f).encode() for f in json.loads(ok)]
    oversize = json.dumps(_frame(10, pad="x" * 20_000)).encode()
    one_by_one = _decide_all(_runtime(tmp_path / "single"), [*frames, oversize,
                                                             *(json.dumps(f).encode() for f in json.loads(after))])
    assert _rows(releases) == _rows(one_by_one)


@pytest.mark.parametrize("size", [1, 7, 100, 1000])
def test_rows_match_the_plan_and_frame_by_frame(tmp_path: Path, size: int) -> None:
    """3,000 frames, a private flag every 97th: in lists of ``size`` the rows used are at least the
    plan's table around every mark and zero outside the marks' windows (independent computation),
    identical to the frame-by-frame rows, and
    every decision and mark event reaches the owner (take_decisions, mark_records: none dropped
    by the core's bounded buffers, even for lists of 1000)."""
    n = 3000
    marks = [i for i in range(n) if i % 97 == 50]
    frames = [_frame(i, (i // 3) % 2, **({"private": True} if i in marks else {})) for i in range(n)]
    per_frame = _runtime(tmp_path / "a")
    single = _decide_all(per_frame, [json.dumps(f).encode() for f in frames])
    rt = _runtime(tmp_path / "b")
    decisions, events, releases = [], 0, []
    for lo in range(0, n, size):
        releases += rt.on_message(_batch(frames[lo:lo + size]), NOW)
        decisions += rt.take_decisions()
        rt.mark_records()
        events += len(rt.take_ledger_events())
    releases += rt.drain()
    decisions += rt.take_decisions()
    rt.mark_records()
    events += len(rt.take_ledger_events())
    rows = expected_rows(n, marks, rt.plan)
    assert [r.seq for r in releases] == list(range(n))
    assert [(r.seq, r.row) for r in releases] == [(r.seq, r.row) for r in single]
    for r in releases:  # at least the plan's table around each mark (the core may re-plan a mark's
        assert all(a >= b for a, b in zip(r.row, rows[r.phys])), r.phys  # right side upwards),
        assert rows[r.phys].any() or r.row == (0.0, 0.0)  # and nothing outside the marks' windows
        assert r.redacted or r.state == (r.phys // 3) % 2  # a released value is the true one
    assert sorted(int(d[0]) for d in decisions) == list(range(n))  # every row persisted, once
    assert events >= len(marks)  # each mark reaches the ledger (created; finished ones again)
    assert all(m.honoured for m in rt.core.finished) and len(rt.core.finished) == len(marks)


@pytest.mark.parametrize("delay", [0, None])
def test_now_after_a_batch_protects_its_last_record(tmp_path: Path, delay: int | None) -> None:
    """The last record of a list is held until the next message, so a ``"now"`` command in between
    still makes it private (redacted with probability 1). With the default delay (H_ℓ) its left
    neighbours are still undecided too and the mark is honoured with the plan's rows; with delay 0
    they are out, so the mark is late and reported as not honoured (never hidden)."""
    rt = _runtime(tmp_path, **({} if delay is None else {"delay": delay}))
    hold = rt.core.delay
    out = rt.on_message(_batch([_frame(i) for i in range(20)]), NOW)
    assert [r.seq for r in out] == list(range(20 - hold - 1))  # the newest hold + 1 are held
    assert rt.on_command(b'{"private": "now"}') is None
    out = rt.on_message(_batch([_frame(20 + i) for i in range(20)]), NOW) + rt.drain()
    held = next(r for r in out if r.seq == 19)
    assert held.redacted and held.row == (1.0, 1.0)
    mark = next(m for m in rt.core.finished if m.phys == 19)
    assert mark.source == "command"
    if delay == 0:
        assert mark.late and not mark.honoured and mark.reason
    else:
        assert not mark.late and mark.honoured
        rows = expected_rows(40, [19], rt.plan)
        for r in out:
            assert all(a >= b for a, b in zip(r.row, rows[r.phys]))


def test_redaction_frequencies_in_batches_pass_an_exact_binomial_test(tmp_path: Path) -> None:
    """CSPRNG, 300 lists of 30 frames with a private flag on element 15: at each signed distance d
    from the mark, the redactions of state-0 and state-1 records follow Binomial(n, table[d]) —
    exact two-sided tail ≥ 1e-6 for every (d, state)."""
    rt = _runtime(tmp_path, seed=None)
    table = {int(d): row for d, row in zip(rt.plan.offsets(), rt.plan.table())}
    rng = np.random.default_rng(3)
    counts: dict[tuple[int, int], list[int]] = {}
    i = 0
    truth: dict[int, tuple[int, int]] = {}  # phys → (distance from its list's mark, state)
    messages = []
    for _ in range(300):
        frames = []
        for j in range(30):
            state = int(rng.integers(2))
            frames.append(_frame(i, state, **({"private": True} if j == 15 else {})))
            truth[i] = (j - 15, state)
            i += 1
        messages.append(_batch(frames))
    for r in _decide_all(rt, messages):
        d, state = truth[r.phys]
        if d in table:
            c = counts.setdefault((d, state), [0, 0])
            c[0] += r.redacted
            c[1] += 1
    assert len(counts) == 2 * len(table)
    for (d, state), (k, n) in counts.items():
        p = float(table[d][state])
        assert binomial_tail(k, n, p) >= 1e-6, (d, state, k, n, p)
    assert math.isclose(sum(k for (d, _), (k, _) in counts.items() if d == 0), 300)


def test_payload_is_the_json_encoding_of_the_record(tmp_path: Path) -> None:
    """payload() formats the record from parts encoded once: byte for byte what the JSON encoder
    writes for record() — labels (non-ASCII, quoted) and bins, NaN ts (null),
    redacted and released records, both modes."""
    from streamguard.stream.privatizer import Release

    rng = np.random.default_rng(5)
    for seed, states in ((7, {"labels": ["off", "ön \"x\""]}), (None, {"bins": [-1.5, 2.25, 1e300]})):
        s = Settings(device="dev-1_x", topic_base="b", broker={"host": "127.0.0.1", "port": 1},
                     outbox={"path": tmp_path / "o.sqlite"}, deterministic_seed=seed,
                     streams=[{"name": "S_2", **states, "epsilon": 1.0, "source": "mqtt",
                               "model": {"alpha": 0.1, "beta": 0.2}}])
        rt = make_runtime(s, s.streams[0], bit_source(seed, 0))
        assert isinstance(rt, RedactionRuntime)
        k = rt.states.k
        for i in range(300):
            state = None if i % 3 == 0 else int(rng.integers(k))
            ts = math.nan if i % 7 == 0 else float(rng.uniform(0, 2e9))
            row = tuple(float(x) for x in rng.choice([0.0, 1.0, 1 / 3, 1e-300, 0.1], size=k))
            r = Release(int(rng.integers(1 << 40)), int(rng.integers(1 << 40)), ts, state, row)
            assert rt.payload(r) == json.dumps(rt.record(r), separators=(",", ":")).encode()


def test_rows_of_a_decision_match_each_marks_row_at(tmp_path: Path) -> None:
    """The core computes the rows of a group of consecutive positions one slice per mark side; by
    brute force over random marks (k = 2, 3; empty and long sides; overlaps; positions before,
    inside and after the group) they equal the element-wise maximum of Mark.row_at."""
    from streamguard.stream.privatizer import Mark

    core = _runtime(tmp_path).core
    rng = np.random.default_rng(11)
    for _ in range(2000):
        k = int(rng.integers(2, 4))
        core.k = k
        core._marks = [Mark(None, int(rng.integers(0, 30)), "flag", rng.random((int(rng.integers(0, 6)), k)),
                            rng.random((int(rng.integers(0, 6)), k))) for _ in range(int(rng.integers(0, 4)))]
        lo, count = int(rng.integers(0, 30)), int(rng.integers(1, 12))
        want = np.zeros((count, k))
        for i in range(count):
            for m in core._marks:
                r = m.row_at(lo + i)
                if r is not None:
                    np.maximum(want[i], r, out=want[i])
        assert np.array_equal(core._rows_of(lo, count), want)


def test_the_cheap_private_key_test_never_changes_a_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    """Frames and batches whose bytes hold neither a backslash nor "private" in any ASCII case are
    decoded without the per-object hook (records.may_name_private). Over 4,000 generated documents
    mixing keys like PRIVATE, " private ", "\\u0070rivate", "prİvate", nested objects and lists,
    duplicates, NaN and bad values, every verdict (record or rejection, its private flag and ts)
    is the one the hook path gives."""
    from streamguard.frames import records

    states = records.StateMap(labels=("off", "on"))
    keys = ['"private"', '"PRIVATE"', '" Private "', '"\\u0070rivate"', '"prİvate"', '"priv"', '"value"',
            '"ts"', '"x"', '"privateX"']
    values = ['true', 'false', '"on"', '"off"', '1', 'NaN', 'null', '"yes"', '[{"private": true}]', '{"a": 1}',
              f'{T0 + 3}', '[]', '{"PRIVATE": 0}']
    rng = np.random.default_rng(8)

    def doc() -> str:
        pairs = [f'{keys[rng.integers(len(keys))]}: {values[rng.integers(len(values))]}'
                 for _ in range(int(rng.integers(0, 5)))]
        if rng.random() < 0.7:
            pairs.append('"value": "on"')
        if rng.random() < 0.7:
            pairs.append(f'"ts": {T0 + int(rng.integers(10))}')
        rng.shuffle(pairs)
        return "{" + ", ".join(pairs) + "}"

    def verdicts() -> list[object]:
        out: list[object] = []
        for data in documents:
            out.append(records.parse_frame(data, states, now=NOW, last_ts=T0 + 2))
            batch = records.split_batch(data)
            if isinstance(batch, list):
                out += [records.parse_element(e, states, now=NOW, last_ts=T0 + 2) for e in batch]
            else:
                out.append(batch)
        return out

    documents = [doc().encode() for _ in range(3000)]
    documents += [("[" + ", ".join(doc() for _ in range(int(rng.integers(1, 5)))) + "]").encode() for _ in range(1000)]
    fast = verdicts()
    assert sum(not records.may_name_private(d) for d in documents) > 500  # the cheap path is exercised
    monkeypatch.setattr(records, "may_name_private", lambda data: True)
    assert verdicts() == fast
