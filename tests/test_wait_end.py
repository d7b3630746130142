"""The end of a wait for a fresh reading must not depend on the readings (docs/unknown-steps.md,
"How a wait ends").

After start-up, a reconnect or a device back online the resampler's held reading is not trusted
and its steps are unknown until a fresh one. On an on-change source without a heartbeat the first
*live* message is a change: a wait that ends with it says "no change from the wait's start until
then, and then one", so every wait step holds the value the first known step does not (binary) —
a press during the wait, or an unvouched mark placed on a held step, is pinned the moment that step
is released. The rule now: a wait ends on the declared heartbeat's clock, or — ``retained = true``,
the device's state is published retained — only at a retained state the broker delivers on the
daemon's (re)subscription; a source that declares neither is refused.

Everything runs through the real ingest path in process (firmware_sim's zigbee2mqtt on-change
sensor, the preset, the resampler, the stream's 3R runtime) under a small model of the broker
written for the test: live messages reach the daemon only while it is connected; the broker keeps
the device's last state if the device publishes retained, and delivers it (retain flag set) right
after each subscription — at the daemon's start and at every reconnect. The consumer's view is the
sanitized records only. Two checks, written for the test and independent of the product code:

- **The pattern of unknown steps is a function of the data-independent events only.** The same
  events (start, outages, device offline/online, presses) under different sensor paths must give
  the same set of unknown positions (then the view is a post-processing of the plan's view:
  docs/unknown-steps.md, "The rule", checked by brute force below).
- **Pinning** (``wait_pins``), for a wait that ends at the first live message of an on-change
  binary sensor: given where the waits began (data-independent, so an attacker may know them), the
  first known position t after a wait that began at w, with X_t released, pins every mark in
  [w, t−1] to the other value. Checked against the truth (a pin that disagrees is an evaluator bug).
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiomqtt
import pytest

from brokers import Broker
from firmware_sim.onchange import OnChangeSensor
from daemon_harness import claimed, daemon_running
from ingest_harness import ManualClock, ingest_settings, retain, until
from streamguard.config import Settings
from streamguard.ingest.stream import RETAINED_WAIT, IngestHub, IngestStream
from streamguard.sampling import bit_source
from streamguard.stream.runtimes import make_runtime
from test_unknown_steps import view_leakage

LABELS = ["vacant", "occupied"]
LATENCY = 0.01  # sensor → broker → daemon
SUBACK = 0.005  # the daemon's subscription → the retained state delivered after its SUBACK
WARMUP = 40.0  # the sensor runs this long before the daemon starts (its retained state exists)
T0_TICK = 7_000_000


def _settings(tmp: Path, *, alpha: float, beta: float, period: float, heartbeat: float | None = None,
              retained: bool | None = None) -> Settings:
    ingest: dict[str, Any] = {"preset": "zigbee2mqtt", "device": "hall", "field": "occupancy",
                              "values": {"true": "occupied", "false": "vacant"}}
    if retained is not None:
        ingest["retained"] = retained
    stream: dict[str, Any] = {"name": "hall", "labels": LABELS, "epsilon": 1.0, "sample_period": period,
                              "model": {"alpha": alpha, "beta": beta}, "ingest": ingest}
    if heartbeat is not None:
        stream["heartbeat"] = heartbeat
    return Settings(deterministic_seed=11, outbox={"path": tmp / "o.sqlite"}, streams=[stream])


@dataclass
class Events:
    """The data-independent events of a run, in seconds after the daemon's start."""

    presses: list[float] = field(default_factory=list)
    #: The daemon's broker connection is down over [down, up); at ``up`` it re-subscribes.
    outages: list[tuple[float, float]] = field(default_factory=list)
    #: The device is away over [off, on): it publishes nothing, availability says offline.
    offline: list[tuple[float, float]] = field(default_factory=list)

    def wait_starts(self) -> list[float]:
        """When a wait for a fresh reading begins: start-up, each reconnect, each return online."""
        return [0.0] + [u for _, u in self.outages] + [on for _, on in self.offline]


@dataclass
class Run:
    period: float
    ticks: int
    view: dict[int, str | None] = field(default_factory=dict)  # position → value (None: redacted)
    truth: list[str] = field(default_factory=list)
    marks: list[tuple[int, bool, float | None]] = field(default_factory=list)
    #: How many changes of the sensor fall in each tick (position → count; the truth's, for the evaluator).
    changes: dict[int, int] = field(default_factory=dict)

    def missing(self) -> list[int]:
        return [k for k in range(self.ticks) if k not in self.view]


def simulate(settings: Settings, sensor: OnChangeSensor, events: Events, ticks: int, *,
             device_retains: bool, old_end: bool = False) -> Run:
    """The run through the real ingest stream and runtime under the broker model (module
    docstring). ``old_end``: the first live reading after each wait's start arrives flagged as
    retained — a live message taken for a state delivered on subscription, which is how every wait
    of a source without a heartbeat used to end (before the rule)."""
    cfg = settings.streams[0]
    period = cfg.sample_period
    assert period is not None
    ingest, rt = IngestStream(cfg), make_runtime(settings, cfg, bit_source(11, 0))
    assert ingest.resampler is not None
    t0 = T0_TICK * period
    topic, avail = sensor.topics()

    def connected(at: float) -> bool:
        return all(not (t0 + d <= at < t0 + u) for d, u in events.outages)

    def away(at: float) -> bool:
        return any(t0 + a <= at < t0 + b for a, b in events.offline)

    timeline: list[tuple[float, int, str, Any]] = []  # (daemon's receive time, order, kind, data)
    changes: list[tuple[float, int]] = []  # the sensor's true state from each time (published or not)
    retained_store: list[tuple[float, bytes]] = []  # when the broker's retained state became each payload
    subscriptions = [t0] + [t0 + u for _, u in events.outages]
    starts = [t0 + w for w in events.wait_starts()]
    live: list[float] = []  # send times of the live readings so far
    for m in sensor.messages():
        at = t0 - WARMUP + m.at
        if at > t0 + (ticks + 2) * period:
            break
        if m.state is None:
            continue  # (the sensor's own availability at its start: modelled below)
        if m.change or not changes:
            changes.append((at, m.state))
        if away(at):
            continue
        if device_retains:
            retained_store.append((at + LATENCY / 2, m.payload))
        if at >= t0 and connected(at + LATENCY):
            first = old_end and any(s <= at and not any(s <= a < at for a in live) for s in starts)
            live.append(at)
            timeline.append((at + LATENCY, 1, "msg", (topic, m.payload, first)))
    for s in subscriptions:
        held = [p for when, p in retained_store if when <= s]
        if held:
            timeline.append((s + SUBACK, 0, "msg", (topic, held[-1], True)))
    for d, u in events.outages:
        timeline += [(t0 + d, 0, "conn", False), (t0 + u, 0, "conn", True)]
    for a, b in events.offline:
        for at, payload in ((t0 + a, b'{"state":"offline"}'), (t0 + b, b'{"state":"online"}')):
            if connected(at + LATENCY):
                timeline.append((at + LATENCY, 1, "msg", (avail, payload, False)))
    timeline += [(t0 + p, 2, "press", None) for p in events.presses]
    timeline.sort(key=lambda e: (e[0], e[1]))
    run = Run(period, ticks)
    releases: list[Any] = []
    i = j = 0
    for k in range(ticks):
        g = (T0_TICK + k + 1) * period
        while i < len(timeline) and timeline[i][0] <= g:
            at, _, kind, data = timeline[i]
            if kind == "press":
                ingest.resampler.press(at)
            elif kind == "conn":
                ingest.resampler.connection(data, at)
            else:
                ingest.on_message(data[0], data[1], retain=data[2], now=at)
            i += 1
        while j + 1 < len(changes) and changes[j + 1][0] <= g - LATENCY:
            j += 1
        run.truth.append(LABELS[changes[j][1]])
        releases += rt.on_frame(ingest.tick(g), g)[0]
    releases += rt.drain()
    for at, _ in changes[1:]:
        k = math.ceil((at + LATENCY) / period - 1e-9) - T0_TICK - 1
        run.changes[k] = run.changes.get(k, 0) + 1
    for r in releases:
        run.view[r.phys] = None if r.state is None else LABELS[r.state]
    core = rt.core  # type: ignore[attr-defined]
    for m in (*core.finished, *core._marks):
        run.marks.append((m.phys, m.honoured, None if m.leakage is None else m.leakage.total))
    return run


def wait_pins(run: Run, events: Events) -> list[int]:
    """Marks pinned by waits that end at the first live message of an on-change binary sensor
    (module docstring): for a wait from w, the first known position t ≥ the first tick at or after
    w; if X_t was released and no outage or absence began meanwhile, each position in [w, t−1] held
    the other value. Checked against the truth. (Exact when a tick holds at most one change, as in
    the chain; the continuous-time sensor can change twice within one — then no pin is claimed.)"""
    pinned = []
    marked = {p for p, _, _ in run.marks}
    breaks = [d for d, _ in events.outages] + [a for a, _ in events.offline]
    for w in events.wait_starts():
        first = max(math.ceil(w / run.period - 1e-9) - 1, 0)  # the position of the first tick at or after w
        t = next((k for k in range(first, run.ticks) if k in run.view), None)
        if t is None or run.view[t] is None or any(w < b <= (t + 1) * run.period for b in breaks) \
                or run.changes.get(t, 0) > 1:
            continue
        other = LABELS[1 - LABELS.index(run.view[t])]  # type: ignore[arg-type]
        for p in sorted(marked & set(range(first, t))):
            assert run.truth[p] == other, "a pin that disagrees with the truth: evaluator bug"
            pinned.append(p)
    return pinned


def _sensor(period: float, alpha: float, beta: float, seed: int) -> OnChangeSensor:
    return OnChangeSensor("zigbee2mqtt", "hall", dwell=(period / alpha, period / beta), seed=seed)


# -- the rule, by brute force (docs/unknown-steps.md) --------------------------------------------
def _wait_until_change(w: int) -> Any:
    """A wait from step w that ends at the first live message of an on-change source: unknown from
    w up to (not including) the first step whose value differs from step w − 1's."""
    def pattern(path: tuple[int, ...]) -> list[tuple[tuple[bool, ...], float]]:
        end = next((t for t in range(w, len(path)) if path[t] != path[t - 1]), len(path))
        return [(tuple(w <= t < end for t in range(len(path))), 1.0)]
    return pattern


def _wait_fixed(w: int, end: int) -> Any:
    """A wait from step w that ends at a time set by the daemon (a retained state delivered on its
    subscription, a heartbeat's clock): unknown over [w, end) whatever the path."""
    return lambda path: [(tuple(w <= t < end for t in range(len(path))), 1.0)]


@pytest.mark.parametrize("seed", range(6))
def test_a_wait_that_ends_at_a_change_pins_a_mark_in_it(seed: int) -> None:
    """Exact enumeration (binary chain, n = 6): a mark p inside a wait that ends at the first
    change has infinite leakage whatever the rows; a wait whose end is set by the daemon adds none."""
    rng = random.Random(seed)
    alpha, beta, n = rng.uniform(0.05, 0.5), rng.uniform(0.05, 0.5), 6
    w = rng.randrange(1, 3)
    p = rng.randrange(w, 4)
    rows = [(1.0, 1.0) if t == p else (rng.uniform(0, 0.99), rng.uniform(0, 0.99)) for t in range(n)]
    base = view_leakage(alpha, beta, rows, p, lambda path: [(tuple(False for _ in path), 1.0)])
    assert 0 < base < math.inf
    assert view_leakage(alpha, beta, rows, p, _wait_until_change(w)) == math.inf
    assert view_leakage(alpha, beta, rows, p, _wait_fixed(w, rng.randrange(w + 1, n + 1))) <= base + 1e-12


def test_a_wait_that_ends_at_a_change_lowers_the_figure_of_a_mark_beside_it() -> None:
    """A mark p two steps before such a wait is not pinned, but the wait's pattern leaks about X_p
    beyond the plan's figure (the wait's steps act as released neighbours). (The step just before
    the wait is pinned too: the first message may be the change into the wait's first step.)"""
    alpha, beta, n, p = 0.1, 0.2, 6, 1
    rows = [(1.0, 1.0), (1.0, 1.0), (1.0, 1.0), (0.5, 0.5), (0.5, 0.5), (0.5, 0.5)]
    base = view_leakage(alpha, beta, rows, p, lambda path: [(tuple(False for _ in path), 1.0)])
    leak = view_leakage(alpha, beta, rows, p, _wait_until_change(3))
    assert math.inf > leak > base + 0.1, (base, leak)
    assert view_leakage(alpha, beta, rows, p, _wait_until_change(2)) == math.inf
    assert view_leakage(alpha, beta, rows, p, _wait_fixed(3, 5)) <= base + 1e-12


# -- configuration ---------------------------------------------------------------------------------
def test_an_on_change_source_without_heartbeat_or_retained_state_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="zigbee2mqtt reports on change.*retained = true.*heartbeat"):
        _settings(tmp_path, alpha=0.02, beta=0.05, period=0.2)
    with pytest.raises(ValueError, match="retained = true"):
        _settings(tmp_path, alpha=0.02, beta=0.05, period=0.2, retained=False)
    _settings(tmp_path, alpha=0.02, beta=0.05, period=0.2, retained=True)
    _settings(tmp_path, alpha=0.02, beta=0.05, period=0.2, heartbeat=5.0)


# -- the issue's sensor: presses during waits ------------------------------------------------------
ISSUE = {"alpha": 0.02, "beta": 0.05, "period": 0.2}
ISSUE_TICKS = 1500  # 300 s
#: Presses inside the waits: right after start-up, after a reconnect, after the device came back.
ISSUE_EVENTS = Events(presses=[0.5, 1.3, 57.3, 60.7, 61.9, 150.3, 151.1, 215.0, 240.0],
                      outages=[(55.05, 60.05)], offline=[(140.05, 150.05)])


def test_presses_during_waits_were_pinned(tmp_path: Path) -> None:
    """The evaluator's power, on the behaviour the rule replaces: a device that does not retain,
    each wait ended by the first live message — presses during the waits are pinned although the
    runtime reports them honoured, and the unknown pattern changes with the sensor's path."""
    settings = _settings(tmp_path, **ISSUE, retained=True)
    runs = [simulate(settings, _sensor(0.2, 0.02, 0.05, seed), ISSUE_EVENTS, ISSUE_TICKS, device_retains=False,
                     old_end=True) for seed in (24, 25)]
    pinned = [wait_pins(r, ISSUE_EVENTS) for r in runs]
    assert runs[0].missing() != runs[1].missing()
    honoured = [{p for p, ok, _ in r.marks if ok} for r in runs]
    assert sum(len(set(pi) & h) for pi, h in zip(pinned, honoured)) >= 2, (pinned, runs[0].marks)


@pytest.mark.parametrize("seed", [24, 25, 26])
def test_presses_during_waits_with_a_retained_state(tmp_path: Path, seed: int) -> None:
    """retained = true and a device that retains: each wait ends at the first tick after the state
    delivered on (re)subscription — at start-up at once, after the outage one tick after the
    reconnect, whatever the path; after the device was away the stream waits for the next
    subscription (none here: unknown to the end). No wait is ended by the readings, and every mark
    is honoured at ≤ ε (the presses during the outage and the device's absence included)."""
    settings = _settings(tmp_path, **ISSUE, retained=True)
    run = simulate(settings, _sensor(0.2, 0.02, 0.05, seed), ISSUE_EVENTS, ISSUE_TICKS, device_retains=True)
    assert run.missing() == list(range(275, 300)) + list(range(700, ISSUE_TICKS))
    assert len(run.marks) == len(ISSUE_EVENTS.presses)
    assert all(ok and lk is not None and lk <= 1.0 for _, ok, lk in run.marks)
    assert all(run.view.get(p) is None for p, _, _ in run.marks)


def test_a_declared_retained_state_that_never_comes_keeps_the_stream_waiting(tmp_path: Path) -> None:
    """retained = true but the device does not retain (zigbee2mqtt's default): no state is
    delivered on subscription and live changes do not end the wait: nothing is published — the
    stream fails closed instead of dating a change."""
    settings = _settings(tmp_path, **ISSUE, retained=True)
    run = simulate(settings, _sensor(0.2, 0.02, 0.05, 24), ISSUE_EVENTS, 600, device_retains=False)
    assert run.view == {}


# -- a randomized family -----------------------------------------------------------------------------
def _family_events(rng: random.Random, duration: float, period: float) -> Events:
    ev = Events()
    t = rng.uniform(5, 20) * period
    while t < duration - 20 * period:
        kind = rng.choice(["outage", "offline", "none"])
        length = rng.uniform(2, 20) * period
        if kind == "outage":
            ev.outages.append((t, t + length))
        elif kind == "offline":
            ev.offline.append((t, t + length))
        t += length + rng.uniform(10, 60) * period
    starts = ev.wait_starts()
    for s in starts:  # presses in each wait's first steps, and some elsewhere
        ev.presses += [s + rng.uniform(0, 4) * period for _ in range(rng.randint(0, 2))]
    ev.presses += [rng.uniform(0, duration - 5 * period) for _ in range(rng.randint(1, 6))]
    ev.presses.sort()
    return ev


def _family_case(seed: int, tmp: Path) -> dict[str, int]:
    """One random scenario, three sensor paths under the same events: the old end (live messages
    end waits) pins marks and moves the pattern; the rule's ends never do."""
    rng = random.Random(seed)
    period = rng.choice([0.1, 0.2, 0.5, 1.0])
    alpha, beta = rng.uniform(0.01, 0.1), rng.uniform(0.02, 0.2)
    ticks = rng.randint(200, 500)
    events = _family_events(rng, ticks * period, period)
    heartbeat = None if rng.random() < 0.7 else period * rng.uniform(2, 10)
    out = {"pinned_before": 0, "marks": 0, "moved": 0}
    settings = _settings(tmp, alpha=alpha, beta=beta, period=period, heartbeat=heartbeat,
                         retained=None if heartbeat is not None else True)
    device_retains = heartbeat is not None or rng.random() < 0.8
    patterns, before_patterns = set(), set()
    for path_seed in range(3):
        sensor = OnChangeSensor("zigbee2mqtt", "hall", dwell=(period / alpha, period / beta), seed=1000 * seed + path_seed,
                                heartbeat=heartbeat * 0.5 if heartbeat is not None else 0.0)
        run = simulate(settings, sensor, events, ticks, device_retains=device_retains)
        patterns.add(tuple(run.missing()))
        out["marks"] += len(run.marks)
        if heartbeat is None:
            before = simulate(settings, sensor, events, ticks, device_retains=False, old_end=True)
            out["pinned_before"] += len(wait_pins(before, events))
            before_patterns.add(tuple(before.missing()))
    assert len(patterns) == 1, "the unknown pattern depends on the sensor's path"
    out["moved"] = int(len(before_patterns) > 1)
    return out


@pytest.mark.parametrize("seed", range(12))
def test_randomized_family(seed: int, tmp_path: Path) -> None:
    _family_case(seed, tmp_path)


@pytest.mark.slow
def test_randomized_family_long(tmp_path: Path) -> None:
    total = {"pinned_before": 0, "marks": 0, "moved": 0}
    for seed in range(100, 400):
        for k, v in _family_case(seed, tmp_path).items():
            total[k] += v
    assert total["pinned_before"] > 50 and total["moved"] > 100 and total["marks"] > 1000, total


# -- the real daemon on Mosquitto ------------------------------------------------------------------
async def _restart_case(broker: Broker, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> dict[str, Any]:
    """A retaining zigbee2mqtt sensor (its state retained before the daemon starts), a press during
    the broker's outage, the broker restarted, then a live change; the daemon's clock is manual.
    Returns what happened after the reconnect."""

    ingest = {"preset": "zigbee2mqtt", "device": "hall", "field": "occupancy",
              "values": {"true": "occupied", "false": "vacant"}, "retained": True}
    settings = ingest_settings(broker.broker_config(), tmp_path, ingest, labels=LABELS, sample_period=1.0)
    clock = ManualClock(float(int(time.time())) + 0.5)
    hub = IngestHub(settings, clock=clock, sleep=clock.sleep)
    resampler = hub.streams["s"].resampler
    assert resampler is not None

    async def tick() -> None:
        rt = daemon.runtimes["s"]
        before = rt.counters.accepted + sum(rt.counters.rejected.values())
        clock.advance_to(math.floor(clock.t) + 1.0)
        await until(lambda: rt.counters.accepted + sum(rt.counters.rejected.values()) > before, "a step")

    await retain(settings.broker, [("zigbee2mqtt/hall", '{"occupancy":true,"linkquality":50}')])
    async with daemon_running(settings, ingest=hub) as (daemon, _stop, _task):
        await until(lambda: claimed(daemon) and hub.routed >= 1, "the daemon online, the retained state routed")
        await tick()  # occupied: the state delivered on subscription ended the start-up wait
        broker.stop()
        await until(lambda: not resampler.connected, "the daemon to notice the broker is gone")
        resampler.press(clock.t)  # a press during the outage (placed by the resampler, as the button's)
        await tick()  # disconnected, marked
        routed = hub.routed
        broker.start()
        await until(lambda: resampler.connected, "the daemon back", timeout=30)
        await asyncio.sleep(0.5)  # (a retained state, if the broker kept one, is routed by now)
        kept = hub.routed > routed
        await tick()
        await tick()
        async with aiomqtt.Client(broker.host, broker.port, identifier="sensor") as c:  # a live change
            await c.publish("zigbee2mqtt/hall", b'{"occupancy":false,"linkquality":52}', qos=1, retain=True)
        await until(lambda: hub.routed > routed + kept, "the daemon to route the change")
        await tick()
        for _ in range(int(RETAINED_WAIT) + 1):
            await tick()
        rt = daemon.runtimes["s"]
        status = hub.status("s")
        return {"kept": kept, "accepted": rt.counters.accepted, "rejected": dict(rt.counters.rejected),
                "live_in_wait": resampler.counters.live_in_wait, "status": status,
                "marks": [m["position"] for m in rt.core.status()["open_marks"]]
                + [m["position"] for m in rt.core.status()["finished_marks"]]}


async def test_daemon_a_kept_retained_state_ends_the_reconnect_wait(mosquitto_persistent: Broker, tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    """A persistent broker keeps the retained state across its restart: the daemon's new
    subscription gets it, and the wait after the reconnect ends at the next tick — before the live
    change, which does not decide when the stream resumes."""
    got = await _restart_case(mosquitto_persistent, tmp_path, caplog)
    assert got["kept"] and got["live_in_wait"] == 0
    assert got["rejected"] == {"disconnected": 1} and got["accepted"] == 1 + 2 + 1 + int(RETAINED_WAIT) + 1
    assert got["marks"] == [1] and "waiting" not in got["status"]


async def test_daemon_without_a_retained_state_keeps_waiting(mosquitto: Broker, tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    """A broker without persistence forgets the retained state: after the reconnect no state is
    delivered on subscription, the live change does not end the wait, every later step is unknown;
    past RETAINED_WAIT the log (one ERROR) and the privacy status say why."""
    got = await _restart_case(mosquitto, tmp_path, caplog)
    assert not got["kept"] and got["live_in_wait"] == 1
    assert got["accepted"] == 1 and got["rejected"] == {"disconnected": 1, "no-reading": 3 + int(RETAINED_WAIT) + 1}
    assert "no retained state was delivered on subscription" in got["status"]["waiting"]
    errors = [r for r in caplog.records if r.levelname == "ERROR" and "no retained state" in r.getMessage()]
    assert len(errors) == 1
