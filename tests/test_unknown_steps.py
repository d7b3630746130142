"""Issue 24 item 2: the *pattern* of unknown steps must not reveal marked readings.

An on-change sensor's messages come at its changes. With ``stale_after`` and no heartbeat, a stale
(unpublished) step says "no message, so no change, for ``stale_after`` seconds": every held reading
in that span equals the released ones in it, and a mark inside is pinned exactly — whatever figure
the privatizer reports for it. The fix (docs/unknown-steps.md): ``stale_after`` on a resampled
source is refused unless the device's ``heartbeat`` (its guaranteed report interval, whatever its
value) is declared below it; a silence longer than the heartbeat stops the stream for the run.

Everything here runs through the real ingest path in process: firmware_sim's zigbee2mqtt on-change
sensor (continuous time, state-dependent dwell), the zigbee2mqtt preset, presses placed by the resampler
(IngestStream) and the stream's real 3R runtime. The consumer's view is the sanitized records only
(value, redacted, or no record at a grid position); the evaluator below is written for the test:

- **Pinning** (``pinned_marks``). What a consumer can deduce from gaps, as equalities between held
  readings: a stale step at tick t means no message in (g_t − stale_after, g_t], so every tick in
  [g_t − stale_after, g_t] holds the same reading; the first step of a heartbeat stop at tick t
  means no message in (g_t − heartbeat, g_t], so likewise over [g_t − heartbeat, g_t]. Positions
  joined by equalities form components (union–find); a mark is pinned when its component holds a
  released record (then X_p is that value on every path consistent with the view). Pins found with a
  subset of the consumer's knowledge are real pins.
- **No pins after the fix** rests on a stronger fact checked directly: with a heartbeat the device
  honours, no step is unknown at all (the gap pattern is empty, so it says nothing), and a marked
  step is never released.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from brokers import Broker
from firmware_sim.onchange import OnChangeSensor
from ingest_harness import ingest_settings, rig
from streamguard.config import Settings
from streamguard.ingest.resampler import Resampler
from streamguard.ingest.stream import IngestStream
from streamguard.sampling import bit_source
from streamguard.frames.records import Rejection
from streamguard.stream.runtimes import make_runtime

LABELS = ["vacant", "occupied"]
LATENCY = 0.01  # seconds from the sensor to the daemon
T0_TICK = 5_000_000  # the grid index of the simulation's start (any integer)


@dataclass
class Run:
    """One simulated run: the view a consumer gets and the truth beside it."""

    period: float
    ticks: int
    #: position → published value (None: a redacted record); positions absent are unknown steps.
    view: dict[int, str | None] = field(default_factory=dict)
    truth: list[str | None] = field(default_factory=list)
    #: (position, honoured, reported leakage) of every mark.
    marks: list[tuple[int, bool, float | None]] = field(default_factory=list)
    stopped: bool = False

    def missing(self) -> list[int]:
        return [k for k in range(self.ticks) if k not in self.view]


def _settings(tmp: Path, *, alpha: float, beta: float, period: float, stale_after: float | None,
              heartbeat: float | None) -> Settings:
    stream: dict[str, Any] = {
        "name": "hall", "labels": LABELS, "epsilon": 1.0, "sample_period": period,
        "model": {"alpha": alpha, "beta": beta},
        "ingest": {"preset": "zigbee2mqtt", "device": "hall", "field": "occupancy",
                   "values": {"true": "occupied", "false": "vacant"}, "retained": heartbeat is None}}
    if stale_after is not None:
        stream["stale_after"] = stale_after
    if heartbeat is not None:
        stream["heartbeat"] = heartbeat
    return Settings(deterministic_seed=11, outbox={"path": tmp / "o.sqlite"}, streams=[stream])


def simulate(settings: Settings, sensor: OnChangeSensor, presses: list[float], ticks: int, *,
             force_stale: float | None = None) -> Run:
    """Feed the sensor's messages and the presses (seconds after the start) to the real ingest
    stream and runtime, one tick at a time; ``force_stale`` replaces the resampler by one with that
    stale_after and no heartbeat (what the config refuses now: to show what it would leak)."""
    cfg = settings.streams[0]
    period = cfg.sample_period
    assert period is not None
    ingest, rt = IngestStream(cfg), make_runtime(settings, cfg, bit_source(11, 0))
    if force_stale is not None:
        ingest.resampler = Resampler(period, stale_after=force_stale)
    t0 = T0_TICK * period
    events: list[tuple[float, str, bytes]] = [(t0 + p, "press", b"") for p in presses]
    states: list[tuple[float, int]] = []  # (receive time, state) of the sensor's readings
    for m in sensor.messages():
        if m.at > ticks * period:
            break
        events.append((t0 + m.at + LATENCY, m.topic, m.payload))
        if m.state is not None:
            states.append((t0 + m.at + LATENCY, m.state))
    events.sort(key=lambda e: e[0])
    first = next((n for n, e in enumerate(events) if e[1] == sensor.topics()[0]), -1)
    run = Run(period, ticks)
    releases: list[Any] = []
    i = j = 0
    for k in range(ticks):
        g = (T0_TICK + k + 1) * period
        while i < len(events) and events[i][0] <= g:
            at, topic, payload = events[i]
            if topic == "press":  # the button's press, placed by its receive time
                assert ingest.resampler is not None
                ingest.resampler.press(at)
            else:  # (the sensor's first message: its state, delivered on the daemon's subscription)
                ingest.on_message(topic, payload, retain=i == first, now=at)
            i += 1
        while j + 1 < len(states) and states[j + 1][0] <= g:
            j += 1
        run.truth.append(LABELS[states[j][1]] if states and states[0][0] <= g else None)
        releases += rt.on_frame(ingest.tick(g), g)[0]
    releases += rt.drain()
    for r in releases:
        run.view[r.phys] = None if r.state is None else LABELS[r.state]
    core = rt.core  # type: ignore[attr-defined]
    for m in (*core.finished, *core._marks):
        run.marks.append((m.phys, m.honoured, None if m.leakage is None else m.leakage.total))
    run.stopped = "stopped" in ingest.status()
    return run


def pinned_marks(run: Run, *, stale_after: float | None, heartbeat: float | None) -> list[int]:
    """Marks whose held reading a consumer pins from the view (module docstring), checked against
    the truth (a pin that disagrees with the truth would be an evaluator bug)."""
    parent = list(range(run.ticks))

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    def join_back(t: int, span: float) -> None:  # every tick in [g_t − span, g_t] holds one reading
        back = int(span / run.period + 1e-9)
        for s in range(max(0, t - back), t):
            parent[find(s)] = find(t)

    missing = run.missing()
    first_known = min(run.view, default=run.ticks)
    stop = None
    if run.stopped:  # the final run of unknown steps
        stop = missing[-1]
        while stop - 1 in missing:
            stop -= 1
    for t in missing:
        if t < first_known:
            continue  # before the first reading: nothing was held yet
        if stop is not None and t >= stop:
            if t == stop and heartbeat is not None:
                join_back(t, heartbeat)
        elif stale_after is not None:
            join_back(t, stale_after)
    value_of: dict[int, str] = {}
    for pos, v in run.view.items():
        if v is not None:
            root = find(pos)
            assert value_of.setdefault(root, v) == v, "two released values in one component: evaluator bug"
    pinned = []
    for p, _, _ in run.marks:
        root = find(p)
        if root in value_of:
            assert value_of[root] == run.truth[p], "a pin that disagrees with the truth: evaluator bug"
            pinned.append(p)
    return pinned


def start_wait(run: Run, heartbeat: float | None) -> list[int]:
    """The ticks of the start-up wait: with a heartbeat no step is known before it has passed
    (resampler.py, ``no-reading``) — a time set by the grid, not by the readings."""
    if heartbeat is None:
        return []
    g0 = (T0_TICK + 1) * run.period
    return [k for k in range(run.ticks) if (T0_TICK + k + 1) * run.period < g0 + heartbeat]


def _presses(rng: random.Random, duration: float, lo: float, hi: float) -> list[float]:
    out, t = [], rng.uniform(lo, hi)
    while t < duration - 2 * hi:
        out.append(t)
        t += rng.uniform(lo, hi)
    return out


# -- the resampler's rules with a heartbeat ------------------------------------------------------
def test_heartbeat_rules_of_the_resampler() -> None:
    """A wait for a fresh reading (start-up, back online, reconnected) ends exactly a heartbeat
    later, not at a message; an unreadable message counts as heard; the first silence longer than
    the heartbeat (online and connected) stops the stream for the run."""
    from streamguard.ingest.mapping import Reading, Unreadable

    r = Resampler(1.0, heartbeat=3.0)
    r.reading(Reading("on", 10.2), 10.2)
    r.reading(Reading("on", 12.9), 12.9)  # the device keeps its heartbeat
    assert [r.sample(g).reason for g in (11.0, 12.0, 13.0)] == ["no-reading"] * 3  # wait until 11 + 3
    assert r.sample(14.0).value == "on"
    r.reading(Unreadable("unmapped", "field 'x' …", 15.5), 15.5)
    assert [r.sample(g).value for g in (16.0, 17.0, 18.0)] == ["on"] * 3  # heard at 15.5
    assert r.sample(19.0).reason == "heartbeat" and r.silent == 19.0  # 19 − 15.5 > 3
    r.reading(Reading("off", 19.5), 19.5)
    assert [r.sample(g).reason for g in (20.0, 60.0)] == ["heartbeat"] * 2  # for the rest of the run

    r = Resampler(1.0, heartbeat=5.0)
    r.reading(Reading("on", 0.5), 0.5)
    r.reading(Reading("on", 4.0), 4.0)
    assert [r.sample(float(g)).reason for g in range(1, 6)] == ["no-reading"] * 5 and r.sample(6.0).value == "on"
    r.availability(False, 6.5)
    assert r.sample(7.0).reason == "offline"
    r.availability(True, 7.2)
    r.reading(Reading("off", 7.3), 7.3)  # a fresh reading at once: still waits until 12.2
    r.reading(Reading("off", 11.0), 11.0)
    assert [r.sample(float(g)).reason for g in range(8, 13)] == ["no-reading"] * 5 and r.sample(13.0).value == "off"
    r.connection(False, 13.5)
    assert [r.sample(g).reason for g in (14.0, 30.0)] == ["disconnected"] * 2  # silence while away: no stop
    r.connection(True, 30.5)
    r.reading(Reading("on", 30.6), 30.6)
    r.reading(Reading("on", 34.0), 34.0)
    assert [r.sample(float(g)).reason for g in range(31, 36)] == ["no-reading"] * 5  # until 35.5
    assert r.sample(36.0).value == "on" and r.silent is None


# -- the issue's scenario ----------------------------------------------------------------------
ISSUE = {"alpha": 0.02, "beta": 0.05, "period": 0.2}
ISSUE_TICKS = 1500  # 300 s


def _issue_sensor(heartbeat: float = 0.0, seed: int = 24) -> OnChangeSensor:
    # the chain's mean dwell (period/α vacant, period/β occupied) in continuous time
    return OnChangeSensor("zigbee2mqtt", "hall", dwell=(0.2 / 0.02, 0.2 / 0.05), seed=seed, heartbeat=heartbeat)


def _issue_presses() -> list[float]:
    return _presses(random.Random(24), ISSUE_TICKS * 0.2, 12.0, 25.0)


def test_issue_scenario_is_refused(tmp_path: Path) -> None:
    """zigbee2mqtt, sample_period 0.2, stale_after 3, no heartbeat: refused (one line naming it)."""
    with pytest.raises(ValueError, match="stale_after: zigbee2mqtt reports on change.*declare the device's heartbeat"):
        _settings(tmp_path, **ISSUE, stale_after=3.0, heartbeat=None)
    with pytest.raises(ValueError, match="heartbeat.*below stale_after"):
        _settings(tmp_path, **ISSUE, stale_after=3.0, heartbeat=3.0)


def test_the_evaluator_finds_the_issue_leak_when_stale_is_forced(tmp_path: Path) -> None:
    """The evaluator's power: the refused behaviour (stale_after 3 s on the on-change sensor) run
    through the real resampler pins marks the runtime reports as honoured (issue: 9 of 14)."""
    settings = _settings(tmp_path, **ISSUE, stale_after=None, heartbeat=None)
    run = simulate(settings, _issue_sensor(), _issue_presses(), ISSUE_TICKS, force_stale=3.0)
    pinned = pinned_marks(run, stale_after=3.0, heartbeat=None)
    honoured = {p for p, ok, _ in run.marks if ok}
    assert len(run.marks) >= 10 and len(run.missing()) > 100
    assert len(set(pinned) & honoured) >= 3, (len(pinned), len(run.marks))


def test_issue_scenario_with_an_honoured_heartbeat_pins_nothing(tmp_path: Path) -> None:
    """The accepted form of the scenario: the device re-reports every 2 s, heartbeat 2.5 s declared,
    stale_after 3: no step is unknown but the start-up wait (the gap pattern is fixed by the grid),
    no mark is pinned, every mark is honoured at ≤ ε."""
    settings = _settings(tmp_path, **ISSUE, stale_after=3.0, heartbeat=2.5)
    run = simulate(settings, _issue_sensor(heartbeat=2.0), _issue_presses(), ISSUE_TICKS)
    assert run.missing() == start_wait(run, 2.5) == list(range(13)) and not run.stopped
    assert len(run.marks) >= 10 and pinned_marks(run, stale_after=3.0, heartbeat=2.5) == []
    assert all(ok and lk is not None and lk <= 1.0 for _, ok, lk in run.marks)
    assert all(run.view[p] is None for p, _, _ in run.marks)  # a marked step is never released


def test_a_missed_heartbeat_stops_the_stream_for_the_run(tmp_path: Path) -> None:
    """A device that does not honour the declared heartbeat (on change only): the first silence
    longer than it makes every later step unknown — one event, the stream does not resume at the
    next message (which would date a change)."""
    settings = _settings(tmp_path, **ISSUE, stale_after=3.0, heartbeat=2.5)
    run = simulate(settings, _issue_sensor(seed=18), _issue_presses(), ISSUE_TICKS)  # first quiet spell at 8 s
    missing, wait = run.missing(), start_wait(run, 2.5)
    stop = next(k for k in range(len(wait), ISSUE_TICKS) if k in missing)
    assert run.stopped and stop > len(wait) and missing == wait + list(range(stop, ISSUE_TICKS))
    assert all(v is not None for v in run.truth[missing[0]:])  # the sensor kept reporting changes


# -- a randomized family -----------------------------------------------------------------------
def _family_case(seed: int, tmp: Path) -> tuple[str, int]:
    """One random scenario; returns (outcome, pinned marks) after checking the invariants."""
    rng = random.Random(seed)
    period = rng.choice([0.1, 0.2, 0.5, 1.0])
    alpha, beta = rng.uniform(0.01, 0.15), rng.uniform(0.02, 0.3)
    stale_after = rng.choice([None, period * rng.uniform(3, 30)])
    heartbeat = None if rng.random() < 0.3 else period * rng.uniform(2, 30)
    honest = rng.random() < 0.6  # the device honours the declared heartbeat
    ticks = rng.randint(150, 400)
    try:
        settings = _settings(tmp, alpha=alpha, beta=beta, period=period, stale_after=stale_after, heartbeat=heartbeat)
    except ValueError:
        assert stale_after is not None and (heartbeat is None or heartbeat >= stale_after)
        return "refused", 0
    assert stale_after is None or (heartbeat is not None and heartbeat < stale_after)
    device_beat = heartbeat * rng.uniform(0.3, 0.8) if heartbeat is not None and honest else 0.0
    sensor = OnChangeSensor("zigbee2mqtt", "hall", dwell=(period / alpha, period / beta), seed=seed,
                            heartbeat=device_beat)
    presses = _presses(rng, ticks * period, 4 * period, 40 * period)
    run = simulate(settings, sensor, presses, ticks)
    missing = run.missing()
    pinned = pinned_marks(run, stale_after=stale_after, heartbeat=heartbeat)
    wait = start_wait(run, heartbeat)
    if heartbeat is None or honest:
        # no stale_after, or a heartbeat kept: no step is unknown but the start-up wait (set by the
        # grid), nothing to deduce, no pin
        assert missing == wait and not run.stopped and pinned == []
        assert all(run.view.get(p) is None for p, _, _ in run.marks)
        return "held", 0
    # a false declaration: at most one event, the stop, after which nothing is published
    stop = next((k for k in range(len(wait), ticks) if k in missing), ticks)
    assert missing == wait + list(range(stop, ticks)) and run.stopped == (stop < ticks)
    reach = int(heartbeat / period + 1e-9)
    assert all(stop - reach <= p <= stop for p in pinned)  # only marks within the heartbeat before the stop
    return "stopped" if run.stopped else "no-silence", len(pinned)


@pytest.mark.parametrize("seed", range(24))
def test_randomized_family(seed: int, tmp_path: Path) -> None:
    _family_case(seed, tmp_path)


@pytest.mark.slow
def test_randomized_family_long(tmp_path: Path) -> None:
    outcomes: dict[str, int] = {}
    for seed in range(100, 1100):
        outcome, _ = _family_case(seed, tmp_path)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert outcomes.get("refused", 0) > 100 and outcomes.get("held", 0) > 100 and outcomes.get("stopped", 0) > 100


# -- unmapped values ---------------------------------------------------------------------------
def _three_state_messages(rng: random.Random, duration: float, dwell: float) -> list[tuple[float, int]]:
    """An on-change sensor with a third state the map does not know (zigbee2mqtt's ``occupancy``
    null, say): (time, state) per change, state 2 the unmapped one."""
    out, t, state = [(0.0, 0)], 0.0, 0
    while True:
        t += rng.expovariate(1.0 / dwell)
        if t >= duration:
            return out
        state = rng.choice([s for s in (0, 1, 2) if s != state])
        out.append((t, state))


@pytest.mark.parametrize("seed", range(4))
def test_an_unmapped_value_makes_no_gap(seed: int, tmp_path: Path) -> None:
    """Before: an unmapped value made the steps unknown until the next mapped message, so the gaps
    were exactly the periods of the unmapped state — every mark in one had its state named. Now an
    unreadable message is not a reading (the held one stays, counted only in the log): no gap."""
    rng = random.Random(seed)
    settings = _settings(tmp_path, alpha=0.05, beta=0.05, period=0.5, stale_after=None, heartbeat=None)
    cfg = settings.streams[0]
    ingest, rt = IngestStream(cfg), make_runtime(settings, cfg, bit_source(11, 0))
    payloads = [b'{"occupancy":false}', b'{"occupancy":true}', b'{"occupancy":null}']
    changes = _three_state_messages(rng, 200.0, 5.0)
    assert any(s == 2 for _, s in changes[1:])
    t0, steps, i = T0_TICK * 0.5, [], 0
    for k in range(400):
        g = (T0_TICK + k + 1) * 0.5
        while i < len(changes) and t0 + changes[i][0] + LATENCY <= g:
            ingest.on_message("zigbee2mqtt/hall", payloads[changes[i][1]], retain=i == 0,
                              now=t0 + changes[i][0] + LATENCY)
            i += 1
        steps.append(ingest.tick(g))
        rt.on_frame(steps[-1], g)
    assert not any(isinstance(s, Rejection) for s in steps)
    assert ingest.local_counters()["unreadable"] == sum(1 for _, s in changes if s == 2)


# -- the rule, by brute force (docs/unknown-steps.md) --------------------------------------------
Pattern = list[tuple[tuple[bool, ...], float]]  # (unknown mask, probability) given a path


def view_leakage(alpha: float, beta: float, rows: list[tuple[float, float]], p: int, pattern: Any) -> float:
    """Exact leakage (nats) about X_p of the view a consumer gets — each step a value, ⊥ (redacted
    record) or missing (unknown step) — by enumerating every path and every view of a binary chain
    started in its stationary law. ``rows[t][x]`` = Pr(⊥ | X_t = x); ``pattern(path)`` lists the
    unknown masks with their probabilities given the path."""
    import itertools
    import math

    n = len(rows)
    P = ((1 - alpha, alpha), (beta, 1 - beta))
    pi = (beta / (alpha + beta), alpha / (alpha + beta))
    joint: dict[tuple[Any, ...], list[float]] = {}
    prior = [0.0, 0.0]
    for path in itertools.product((0, 1), repeat=n):
        pr = pi[path[0]]
        for a, b in zip(path, path[1:]):
            pr *= P[a][b]
        prior[path[p]] += pr
        for mask, q in pattern(path):
            outcomes = [(("?",),) if mask[t] else ((path[t], 1 - rows[t][path[t]]), ("⊥", rows[t][path[t]]))
                        for t in range(n)]
            for view in itertools.product(*outcomes):
                w = pr * q
                for o in view:
                    w *= o[1] if len(o) > 1 else 1.0
                if w > 0:
                    joint.setdefault(tuple(o[0] for o in view), [0.0, 0.0])[path[p]] += w
    worst = 0.0
    for w0, w1 in joint.values():
        a, b = w0 / prior[0], w1 / prior[1]
        if a == 0 or b == 0:
            return math.inf
        worst = max(worst, abs(math.log(a / b)))
    return worst


def _none(path: tuple[int, ...]) -> Pattern:
    return [(tuple(False for _ in path), 1.0)]


def _independent(q: list[float]) -> Any:
    import itertools

    def pattern(path: tuple[int, ...]) -> Pattern:
        out = []
        for mask in itertools.product((False, True), repeat=len(path)):
            pr = 1.0
            for m, qt in zip(mask, q):
                pr *= qt if m else 1 - qt
            out.append((mask, pr))
        return out
    return pattern


def _stale(m: int) -> Any:
    """On change, stale after m steps: unknown where the reading did not change for m steps."""
    return lambda path: [(tuple(t >= m and len(set(path[t - m:t + 1])) == 1 for t in range(len(path))), 1.0)]


def _stop(h: int) -> Any:
    """A heartbeat of h steps declared but not kept: from the first silence of h steps, unknown."""
    def pattern(path: tuple[int, ...]) -> Pattern:
        first = next((t for t in range(h, len(path)) if len(set(path[t - h:t + 1])) == 1), len(path))
        return [(tuple(t >= first for t in range(len(path))), 1.0)]
    return pattern


def _rows(rng: random.Random, n: int, p: int) -> list[tuple[float, float]]:
    return [(1.0, 1.0) if t == p else (rng.uniform(0, 1), rng.uniform(0, 1)) for t in range(n)]


@pytest.mark.parametrize("seed", range(6))
def test_value_independent_unknown_steps_never_add_leakage(seed: int) -> None:
    """If which steps are unknown does not depend on the path, the view is a post-processing of
    the view without them: its leakage is at most the plan's (exact enumeration, n = 6)."""
    rng = random.Random(seed)
    alpha, beta, n, p = rng.uniform(0.05, 0.5), rng.uniform(0.05, 0.5), 6, rng.randrange(1, 5)
    rows = _rows(rng, n, p)
    base = view_leakage(alpha, beta, rows, p, _none)
    assert 0 < base < float("inf")
    q = [rng.uniform(0, 0.9) for _ in range(n)]
    assert view_leakage(alpha, beta, rows, p, _independent(q)) <= base + 1e-12


@pytest.mark.parametrize("seed", range(6))
def test_stale_and_a_false_heartbeat_pin_the_marked_reading(seed: int) -> None:
    """Unknown steps that depend on the path: stale on an on-change source, and the stop of a
    heartbeat that is declared but not kept — some view pins X_p (infinite leakage), whatever the
    plan's rows below 1. Why stale_after needs a heartbeat, and why the heartbeat is load-bearing."""
    rng = random.Random(seed)
    alpha, beta, n, p = rng.uniform(0.05, 0.5), rng.uniform(0.05, 0.5), 6, rng.randrange(1, 4)
    rows = [(1.0, 1.0) if t == p else (rng.uniform(0, 0.99), rng.uniform(0, 0.99)) for t in range(n)]
    assert view_leakage(alpha, beta, rows, p, _none) < float("inf")
    assert view_leakage(alpha, beta, rows, p, _stale(2)) == float("inf")
    assert view_leakage(alpha, beta, rows, p, _stop(2)) == float("inf")


# -- the real daemon on Mosquitto ----------------------------------------------------------------
async def test_daemon_waits_and_stops_on_the_heartbeat(mosquitto: Broker, tmp_path: Path) -> None:
    """Through the daemon and a real broker (manual clock, release delay 0): with a 3 s heartbeat the
    start-up wait ends 3 ticks after the first, whatever arrived; a reading re-sent in time keeps the
    stream going; the first silence longer than 3 s stops it — a later change is not published, the
    records are exactly the known ticks and the status says stopped."""
    ingest = {"preset": "zigbee2mqtt", "device": "hall", "field": "occupancy",
              "values": {"true": "occupied", "false": "vacant"}}
    settings = ingest_settings(mosquitto.broker_config(), tmp_path, ingest, labels=LABELS, sample_period=1.0,
                               heartbeat=3.0, stale_after=10.0)
    async with rig(settings) as r:
        await r.send("zigbee2mqtt/hall", '{"occupancy":true,"linkquality":90}')
        for _ in range(3):
            await r.tick()  # the wait: unknown although a reading is held
        await r.send("zigbee2mqtt/hall", '{"occupancy":true,"linkquality":91}')  # the heartbeat
        await r.tick()
        await r.tick()
        await r.send("zigbee2mqtt/hall", '{"occupancy":false,"linkquality":92}')  # a change
        for _ in range(5):
            await r.tick()  # silent from here: the 4th tick after the change is > 3 s
        await r.send("zigbee2mqtt/hall", '{"occupancy":true,"linkquality":93}')  # not published
        await r.tick()
        await r.tick()
        known = [(r.ticks[3], "occupied"), (r.ticks[4], "occupied"), (r.ticks[5], "vacant"), (r.ticks[6], "vacant"),
                 (r.ticks[7], "vacant")]
        records = await r.wait_records(len(known))
        assert [(rec["ts"], rec["value"]) for rec in records] == known
        assert dict(r.runtime.counters.rejected) == {"no-reading": 3, "heartbeat": len(r.ticks) - 3 - len(known)}
        status = r.hub.status("s")
        assert status is not None and status["heartbeat"] == 3.0 and "stopped" in status
        assert r.steps() == len(r.ticks)
