"""Simulated sensor firmware (firmware_sim): frames, events, faults, CLI and MQTT publishing.

Statistical checks use |z| < 5 for a binomial count (normal approximation): a false failure has
probability ≈ 5.7e-7 per check. Seeds are fixed, so every test is deterministic; the bound says
that the seeds are not special.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import aiomqtt
import numpy as np
import pytest

from firmware_sim import (
    COMMAND_NOW,
    DEFAULT_START,
    OVERSIZE_LIMIT,
    Bursts,
    Button,
    ClockJumps,
    FaultKind,
    Faults,
    Frame,
    Labels,
    MarkovSource,
    NumericRanges,
    Sensitive,
    SimDevice,
    SimStream,
    publish_device,
)
from firmware_sim.mqtt import require_loopback
from firmware_sim.spec import stream_from_spec
from streamguard.support.loopback import free_port
from streamguard import MarkovChain

ROOT = Path(__file__).resolve().parents[1]
P3 = np.array([[0.2, 0.7, 0.1], [0.1, 0.3, 0.6], [0.5, 0.0, 0.5]])
LABELS3 = Labels(("low", "mid", "high"))
RANGES3 = NumericRanges(((100.0, 250.0), (0.0, 10.0), (10.0, 100.0)))  # unsorted on purpose
Z_BOUND = 5.0


def _z(successes: int, n: int, p: float) -> float:
    return (successes - n * p) / math.sqrt(n * p * (1 - p))


def _raw(frames: list[Frame]) -> list[Frame]:
    return [f for f in frames if f.meta.channel == "raw"]


def _readings(frames: list[Frame]) -> list[Frame]:
    return [f for f in frames if f.meta.channel == "raw" and f.meta.fault is None]


def _full_featured(seed: int) -> SimDevice:
    """Two streams with every feature switched on."""
    return SimDevice(
        "dev-1",
        [
            SimStream(
                "occupancy", MarkovChain.binary(0.1, 0.3), rate=10, seed=seed,
                sensitive=Sensitive(("alone", "company"), [[0.9, 0.1], [0.3, 0.7]]),
                bursts=Bursts(every=3.0, size=4), clock_jumps=ClockJumps(0.02, (-2.0, 1.5)),
                button=Button(probability=0.05, at=frozenset({3})), faults=Faults(0.1),
            ),
            SimStream(
                "power", MarkovChain(P3), rate=7, seed=seed + 1, emission=RANGES3,
                button=Button(probability=0.1, at=frozenset({1}), mode="command"), faults=Faults(0.2),
            ),
        ],
    )


# ------------------------------------------------------------------------------------ determinism


def test_same_seed_gives_the_same_frames_byte_for_byte():
    a = list(_full_featured(5).frames(count=3000))
    b = list(_full_featured(5).frames(count=3000))
    device = _full_featured(5)
    assert list(device.frames(count=3000)) == list(device.frames(count=3000))  # a replay from the start
    assert [f.payload for f in a] == [f.payload for f in b]
    assert [f.meta for f in a] == [f.meta for f in b]
    other = list(_full_featured(6).frames(count=3000))
    assert [f.payload for f in a] != [f.payload for f in other]


def test_readings_do_not_depend_on_the_event_settings():
    chain = MarkovChain(P3)
    plain = SimStream("x", chain, rate=5, seed=9, emission=RANGES3)
    busy = SimStream(
        "x", chain, rate=5, seed=9, emission=RANGES3, faults=Faults(0.3),
        clock_jumps=ClockJumps(0.1, (-1.0,)), button=Button(0.2),
    )
    plain_values = [json.loads(f.payload)["value"] for f in SimDevice("d", [plain]).frames(count=500)]
    busy_readings = _readings(list(SimDevice("d", [busy]).frames(count=700)))
    assert [json.loads(f.payload)["value"] for f in busy_readings] == plain_values[: len(busy_readings)]


# ---------------------------------------------------------------------------- states and the chain


@pytest.mark.parametrize("emission", [LABELS3, RANGES3], ids=["labels", "numeric"])
def test_readings_decode_to_the_chain_path_and_match_the_transition_matrix(emission):
    """Decoded from the payloads alone, the readings are exactly MarkovSource(chain, seed)'s path,
    faults and all; transition counts from state i are Multinomial(n_i, P[i]) given n_i, each
    cell is checked with |z| < 5, and cells with P = 0 must be empty."""
    chain = MarkovChain(P3)
    stream = SimStream("s", chain, rate=50, seed=2024, emission=emission, faults=Faults(0.2))
    frames = list(SimDevice("d", [stream]).frames(count=60_000))
    readings = _readings(frames)
    decoded = np.array([emission.state_of(json.loads(f.payload)["value"]) for f in readings])
    np.testing.assert_array_equal(decoded, [f.meta.state for f in readings])
    np.testing.assert_array_equal(decoded, MarkovSource(chain, 2024).states(len(readings)))
    assert [f.meta.reading for f in readings] == list(range(len(readings)))
    counts = np.zeros((3, 3), dtype=np.int64)
    np.add.at(counts, (decoded[:-1], decoded[1:]), 1)
    for i in range(3):
        n_i = int(counts[i].sum())
        for j in range(3):
            if P3[i, j] == 0.0:
                assert counts[i, j] == 0
            else:
                assert abs(_z(int(counts[i, j]), n_i, P3[i, j])) < Z_BOUND, (i, j, counts[i, j], n_i)


def test_default_labels_and_numeric_values_stay_in_their_ranges():
    frames = list(SimDevice("d", [SimStream("door", MarkovChain.binary(0.3, 0.3))]).frames(count=50))
    assert {json.loads(f.payload)["value"] for f in frames} == {"vacant", "occupied"}
    numeric = SimStream("p", MarkovChain(P3), seed=3, emission=RANGES3)
    for f in SimDevice("d", [numeric]).frames(count=2000):
        lo, hi = RANGES3.ranges[f.meta.state]
        assert lo <= json.loads(f.payload)["value"] < hi


def test_sensitive_attribute_follows_its_conditional_law():
    stream = SimStream(
        "s", MarkovChain.binary(0.3, 0.4), seed=11,
        sensitive=Sensitive(("alone", "company"), [[1.0, 0.0], [0.25, 0.75]]),
    )
    frames = list(SimDevice("d", [stream]).frames(count=20_000))
    by_state: dict[int, list[str]] = defaultdict(list)
    for f in frames:
        doc = json.loads(f.payload)
        assert doc["s"] == ("alone", "company")[f.meta.sensitive]
        by_state[f.meta.state].append(doc["s"])
    assert set(by_state[0]) == {"alone"}
    ones = by_state[1]
    assert abs(_z(ones.count("company"), len(ones), 0.75)) < Z_BOUND


# --------------------------------------------------------------------------------- time and rates


def test_rates_interleaving_and_timestamps():
    start = 1_700_000_000.0
    device = SimDevice(
        "d", [SimStream("fast", MarkovChain.binary(0.2, 0.2), rate=10), SimStream("slow", MarkovChain(P3), rate=4)],
        start=start,
    )
    frames = list(device.frames(duration=5.0))
    per_stream = {name: [f for f in frames if f.stream == name] for name in ("fast", "slow")}
    assert {name: len(fs) for name, fs in per_stream.items()} == {"fast": 50, "slow": 20}
    sends = [f.meta.send_at for f in frames]
    assert sends == sorted(sends)
    for name, rate in (("fast", 10), ("slow", 4)):
        ts = [json.loads(f.payload)["ts"] for f in per_stream[name]]
        assert ts == [start + n / rate for n in range(len(ts))]
        assert [f.meta.send_at for f in per_stream[name]] == [n / rate for n in range(len(ts))]
    assert list(device.frames(count=7)) == frames[:7]
    assert SimDevice("d", [SimStream("a", MarkovChain(P3))]).start == DEFAULT_START


def test_bursts_send_extra_readings_back_to_back_in_timestamp_order():
    stream = SimStream("b", MarkovChain.binary(0.2, 0.3), rate=10, bursts=Bursts(every=0.35, size=3))
    frames = list(SimDevice("d", [stream]).frames(duration=2.0))
    regular = [f for f in frames if not f.meta.burst]
    assert len(regular) == 20
    ts = [f.meta.ts for f in frames]
    assert ts == sorted(ts) and len(set(ts)) == len(ts)
    # bursts k = 1..5 at k·0.35 s follow regular slot ⌊3.5 k⌋ and share its send time
    starts = [i for i, f in enumerate(frames) if f.meta.burst and not frames[i - 1].meta.burst]
    assert [round(frames[i - 1].meta.send_at * 10) for i in starts] == [3, 7, 10, 14, 17]
    for i in starts:
        group = frames[i : i + 3]
        assert all(f.meta.burst and f.meta.send_at == frames[i - 1].meta.send_at for f in group)
    assert len(frames) == 20 + 5 * 3


def test_clock_jumps_step_the_clock_and_make_readings_out_of_order():
    stream = SimStream("c", MarkovChain.binary(0.2, 0.3), rate=10, seed=4, clock_jumps=ClockJumps(0.05, (-3.0, 2.0)))
    frames = list(SimDevice("d", [stream]).frames(count=2000))
    offsets = [0.0] + [f.meta.clock_offset for f in frames]
    steps = {round(b - a, 9) for a, b in zip(offsets, offsets[1:])}
    assert steps == {0.0, -3.0, 2.0}
    latest = -math.inf
    for n, f in enumerate(frames):
        ts = json.loads(f.payload)["ts"]
        assert ts == pytest.approx(DEFAULT_START + n / 10 + f.meta.clock_offset, abs=1e-6)
        assert f.meta.out_of_order == (ts < latest)
        assert f.meta.accepted == (not f.meta.out_of_order)
        latest = max(latest, ts)
    assert any(f.meta.out_of_order for f in frames)


# ---------------------------------------------------------------------------------------- faults


def _faults_of(kind: FaultKind, emission, count: int = 40) -> list[bytes]:
    stream = SimStream("f", MarkovChain(P3), seed=13, emission=emission, faults=Faults(1.0, (kind,)))
    frames = list(SimDevice("d", [stream]).frames(count=count))
    assert all(f.meta.fault is kind and f.meta.state is None and not f.meta.accepted for f in frames)
    return [f.payload for f in frames]


def _strict_json(payload: bytes) -> object:
    def refuse(token: str) -> None:
        raise ValueError(f"{token} is not JSON")

    return json.loads(payload.decode("utf-8"), parse_constant=refuse)


@pytest.mark.parametrize("emission", [LABELS3, RANGES3], ids=["labels", "numeric"])
@pytest.mark.parametrize("kind", list(FaultKind))
def test_each_fault_kind_is_malformed_in_the_stated_way(kind, emission):
    payloads = _faults_of(kind, emission)
    if kind is FaultKind.OVERSIZE:
        assert all(len(p) > OVERSIZE_LIMIT for p in payloads)
        assert all(emission.state_of(_strict_json(p)["value"]) is not None for p in payloads)  # size is the only flaw
        return
    assert all(len(p) < OVERSIZE_LIMIT for p in payloads)
    if kind is FaultKind.NON_UTF8:
        for p in payloads:
            with pytest.raises(UnicodeDecodeError):
                p.decode("utf-8")
        return
    if kind is FaultKind.TRUNCATED:
        for p in payloads:
            with pytest.raises(json.JSONDecodeError):
                json.loads(p)
        return
    if kind in (FaultKind.NAN, FaultKind.INFINITY):
        values = [json.loads(p)["value"] for p in payloads]  # Python's json reads the bare tokens
        for p in payloads:
            with pytest.raises(ValueError, match="not JSON"):
                _strict_json(p)
        if kind is FaultKind.NAN:
            assert all(b'"value": NaN' in p and math.isnan(v) for p, v in zip(payloads, values))
        else:
            assert set(values) == {math.inf, -math.inf}
        return
    docs = [_strict_json(p) for p in payloads]
    assert all(isinstance(d["ts"], float) for d in docs)
    if kind is FaultKind.MISSING_VALUE:
        assert all("value" not in d for d in docs)
        return
    values = [d["value"] for d in docs]
    assert all(emission.state_of(v) is None for v in values)
    if kind is FaultKind.WRONG_TYPE:
        assert {type(v) for v in values} == {dict, list, bool}
    elif kind is FaultKind.UNKNOWN_LABEL:
        assert all(isinstance(v, str) for v in values)
    else:
        assert kind is FaultKind.OUT_OF_RANGE
        assert all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values)


def test_faults_appear_at_their_rate_with_every_kind():
    stream = SimStream("f", MarkovChain.binary(0.2, 0.3), seed=21, faults=Faults(0.1))
    frames = list(SimDevice("d", [stream]).frames(count=20_000))
    faults = [f.meta.fault for f in frames if f.meta.fault is not None]
    assert abs(_z(len(faults), len(frames), 0.1)) < Z_BOUND
    assert set(faults) == set(FaultKind)


# ---------------------------------------------------------------------------------------- button


def test_button_presses_appear_at_their_rate_as_flags():
    stream = SimStream("b", MarkovChain.binary(0.2, 0.3), seed=8, button=Button(probability=0.1), faults=Faults(0.1))
    readings = _readings(list(SimDevice("d", [stream]).frames(count=20_000)))
    for f in readings:
        assert json.loads(f.payload).get("private", False) is f.meta.button
    pressed = sum(f.meta.button for f in readings)
    assert abs(_z(pressed, len(readings), 0.1)) < Z_BOUND


def test_button_at_given_readings_and_in_command_mode():
    flagged = SimStream("b", MarkovChain.binary(0.2, 0.3), button=Button(at=frozenset({0, 5, 7})), faults=Faults(0.3))
    readings = _readings(list(SimDevice("d", [flagged]).frames(count=100)))
    assert [f.meta.reading for f in readings if b'"private": true' in f.payload] == [0, 5, 7]
    command = SimStream("c", MarkovChain.binary(0.2, 0.3), button=Button(probability=0.2, mode="command"))
    frames = list(SimDevice("d", [command]).frames(count=500))
    assert all(b"private" not in f.payload for f in _raw(frames))
    cmds = [i for i, f in enumerate(frames) if f.meta.channel == "cmd"]
    assert cmds and all(frames[i].payload == COMMAND_NOW == b'{"private": "now"}' for i in cmds)
    assert [i - 1 for i in cmds] == [i for i, f in enumerate(frames) if f.meta.channel == "raw" and f.meta.button]
    assert all(frames[i].meta.reading == frames[i - 1].meta.reading for i in cmds)


# ------------------------------------------------------------------------------ run and validation


async def test_run_yields_the_same_frames_paced_in_real_time():
    device = _full_featured(1)
    expected = list(device.frames(duration=0.5))
    assert [f async for f in device.run(0.5, realtime=False)] == expected
    t0 = time.monotonic()
    paced = [f async for f in device.run(0.5)]
    elapsed = time.monotonic() - t0
    assert paced == expected
    assert elapsed >= expected[-1].meta.send_at - 0.01


def test_invalid_configurations_are_refused():
    chain = MarkovChain(P3)
    with pytest.raises(ValueError, match="emission has 2 states"):
        SimStream("s", chain, emission=Labels(("a", "b")))
    with pytest.raises(ValueError, match="overlap"):
        NumericRanges(((0, 10), (5, 20)))
    with pytest.raises(ValueError, match="distinct"):
        SimDevice("d", [SimStream("s", chain), SimStream("s", chain)])
    with pytest.raises(ValueError, match="regular interval"):
        SimStream("s", chain, rate=10, bursts=Bursts(every=0.05, size=2))
    with pytest.raises(ValueError, match="'/'"):
        SimStream("a/b", chain)
    with pytest.raises(ValueError, match="exactly one"):
        list(SimDevice("d", [SimStream("s", chain)]).frames(count=3, duration=1.0))
    with pytest.raises(ValueError, match="loopback"):
        require_loopback("192.0.2.1")
    require_loopback("127.0.0.1")
    require_loopback("localhost")


def test_a_spec_entry_builds_the_same_stream_as_the_classes():
    entry = {
        "name": "occupancy", "alpha": 0.1, "beta": 0.3, "rate": 10, "labels": ["empty", "busy"],
        "sensitive": {"labels": ["alone", "company"], "matrix": [[0.9, 0.1], [0.3, 0.7]]},
        "bursts": {"every": 3.0, "size": 4}, "clock_jumps": {"probability": 0.02, "amounts": [-2, 1.5]},
        "button": {"probability": 0.05, "at": [3], "mode": "command"},
        "faults": {"rate": 0.1, "kinds": ["nan", "oversize"]},
    }
    built = stream_from_spec(entry, default_seed=42)
    by_hand = SimStream(
        "occupancy", MarkovChain.binary(0.1, 0.3), rate=10, seed=42, emission=Labels(("empty", "busy")),
        sensitive=Sensitive(("alone", "company"), [[0.9, 0.1], [0.3, 0.7]]),
        bursts=Bursts(every=3.0, size=4), clock_jumps=ClockJumps(0.02, (-2.0, 1.5)),
        button=Button(probability=0.05, at=frozenset({3}), mode="command"),
        faults=Faults(0.1, (FaultKind.NAN, FaultKind.OVERSIZE)),
    )
    assert list(SimDevice("d", [built]).frames(count=500)) == list(SimDevice("d", [by_hand]).frames(count=500))
    with pytest.raises(ValueError, match="bursts: unknown key"):
        stream_from_spec({**entry, "bursts": {"every": 3.0, "size": 4, "often": True}}, 0)
    with pytest.raises(ValueError, match="either 'matrix'"):
        stream_from_spec({**entry, "matrix": [[0.5, 0.5], [0.5, 0.5]]}, 0)


# ------------------------------------------------------------------------------------------- CLI


def _cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "firmware_sim", *args], cwd=ROOT, capture_output=True, timeout=60, check=False
    )


def test_cli_help():
    res = _cli("--help")
    assert res.returncode == 0
    assert b"--stdout" in res.stdout and b"--mqtt" in res.stdout


def test_cli_stdout_writes_only_frames_and_is_deterministic():
    args = ("--stdout", "--count", "50", "--stream", "a:0.2:0.3:10", "--stream", "b:0.1:0.1:3",
            "--faults", "0.3", "--fault-kinds", "non_utf8,truncated,nan", "--button-prob", "0.2", "--seed", "3")
    first, second = _cli(*args), _cli(*args)
    assert first.returncode == 0, first.stderr
    lines = first.stdout.split(b"\n")
    assert lines[-1] == b"" and len(lines) == 51
    assert first.stdout == second.stdout
    assert any(b"\xe9" in line for line in lines)  # the non-UTF-8 fault is written as-is
    summary = json.loads(first.stderr.decode().removeprefix("firmware_sim: "))
    assert sum(summary["frames"].values()) == 50
    assert _cli("--stdout", "--count", "50").stdout.count(b"\n") == 50  # the default stream


def test_cli_spec_file_and_refusals(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"streams": [
        {"name": "power", "matrix": P3.tolist(), "ranges": [[100, 250], [0, 10], [10, 100]], "rate": 5, "seed": 1},
    ]}))
    res = _cli("--stdout", "--duration", "4", "--spec", str(spec))
    assert res.returncode == 0, res.stderr
    values = [json.loads(line)["value"] for line in res.stdout.splitlines()]
    assert len(values) == 20 and all(RANGES3.state_of(v) is not None for v in values)
    refused = _cli("--stdout", "--count", "5", "--button-mode", "command")
    assert refused.returncode == 2 and refused.stdout == b""
    spec.write_text(json.dumps({"streams": [{"name": "x", "alpha": 0.1, "beta": 0.2, "colour": "red"}]}))
    bad = _cli("--stdout", "--count", "5", "--spec", str(spec))
    assert bad.returncode == 2 and b"colour" in bad.stderr


# ------------------------------------------------------------------------------------------- MQTT


@pytest.fixture
def mosquitto(tmp_path):
    """A Mosquitto broker on a free loopback port; yields the port."""
    binary = shutil.which("mosquitto")
    if binary is None:
        pytest.skip("mosquitto is not installed")
    port = free_port()
    conf = tmp_path / "mosquitto.conf"
    lines = [f"listener {port} 127.0.0.1", "allow_anonymous true", "persistence false", "set_tcp_nodelay true",
             f"log_dest file {tmp_path / 'mosquitto.log'}"]
    if os.geteuid() == 0:
        lines.append("user root")
    conf.write_text("\n".join(lines) + "\n")
    proc = subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"mosquitto did not start: {proc.stderr.read().decode() if proc.stderr else ''}")
                time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def test_publish_device_delivers_the_generated_frames_in_order(mosquitto):
    device = _full_featured(17)
    expected: dict[str, list[bytes]] = defaultdict(list)
    for f in device.frames(duration=1.0):
        expected[f"streamguard/dev-1/{f.stream}/{f.meta.channel}"].append(f.payload)
    total = sum(map(len, expected.values()))
    received: dict[str, list[bytes]] = defaultdict(list)
    async with aiomqtt.Client("127.0.0.1", mosquitto, identifier="firmware-sim-test-subscriber") as sub:
        await sub.subscribe("streamguard/#", qos=1)
        publisher = asyncio.create_task(publish_device(device, "127.0.0.1", mosquitto, 1.0))
        async with asyncio.timeout(15):
            async for msg in sub.messages:
                received[str(msg.topic)].append(bytes(msg.payload))
                if sum(map(len, received.values())) == total:
                    break
        counts = await publisher
    assert received == expected
    assert sum(counts.frames.values()) + counts.commands == total
    assert counts.commands == len(expected["streamguard/dev-1/power/cmd"]) > 0
    assert sum(counts.faults.values()) == sum(1 for f in device.frames(duration=1.0) if f.meta.fault is not None) > 0
