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

from firmware_sim.onchange import OnChangeSensor
from streamguard.config import Settings
from streamguard.ingest.resampler import Resampler
from streamguard.ingest.stream import IngestStream
from streamguard.sampling import bit_source
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
                   "values": {"true": "occupied", "false": "vacant"}}}
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
            else:
                ingest.on_message(topic, payload, retain=False, now=at)
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


def _presses(rng: random.Random, duration: float, lo: float, hi: float) -> list[float]:
    out, t = [], rng.uniform(lo, hi)
    while t < duration - 2 * hi:
        out.append(t)
        t += rng.uniform(lo, hi)
    return out


# -- the issue's scenario ----------------------------------------------------------------------
ISSUE = {"alpha": 0.02, "beta": 0.05, "period": 0.2}
ISSUE_TICKS = 1500  # 300 s


def _issue_sensor(heartbeat: float = 0.0) -> OnChangeSensor:
    # the chain's mean dwell (period/α vacant, period/β occupied) in continuous time
    return OnChangeSensor("zigbee2mqtt", "hall", dwell=(0.2 / 0.02, 0.2 / 0.05), seed=24, heartbeat=heartbeat)


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
    stale_after 3: no step is unknown (the gap pattern is empty), no mark is pinned, every mark is
    honoured at ≤ ε."""
    settings = _settings(tmp_path, **ISSUE, stale_after=3.0, heartbeat=2.5)
    run = simulate(settings, _issue_sensor(heartbeat=2.0), _issue_presses(), ISSUE_TICKS)
    assert run.missing() == [] and not run.stopped
    assert len(run.marks) >= 10 and pinned_marks(run, stale_after=3.0, heartbeat=2.5) == []
    assert all(ok and lk is not None and lk <= 1.0 for _, ok, lk in run.marks)
    assert all(run.view[p] is None for p, _, _ in run.marks)  # a marked step is never released


def test_a_missed_heartbeat_stops_the_stream_for_the_run(tmp_path: Path) -> None:
    """A device that does not honour the declared heartbeat (on change only): the first silence
    longer than it makes every later step unknown — one event, the stream does not resume at the
    next message (which would date a change)."""
    settings = _settings(tmp_path, **ISSUE, stale_after=3.0, heartbeat=2.5)
    run = simulate(settings, _issue_sensor(), _issue_presses(), ISSUE_TICKS)
    missing = run.missing()
    assert run.stopped and missing == list(range(missing[0], ISSUE_TICKS))
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
    if heartbeat is None or honest:
        # no stale_after, or a heartbeat kept: no step is unknown, nothing to deduce, no pin
        assert missing == [] and not run.stopped and pinned == []
        assert all(run.view[p] is None for p, _, _ in run.marks)
        return "held", 0
    # a false declaration: at most one event, the stop, after which nothing is published
    assert missing == ([] if not run.stopped else list(range(missing[0], ticks)))
    stop = missing[0] if missing else ticks
    reach = int(heartbeat / period + 1e-9)
    assert all(stop - reach <= p <= stop for p in pinned)  # only marks within the heartbeat before the stop
    return "stopped" if run.stopped else "no-silence", len(pinned)


@pytest.mark.parametrize("seed", range(12))
def test_randomized_family(seed: int, tmp_path: Path) -> None:
    _family_case(seed, tmp_path)


@pytest.mark.slow
def test_randomized_family_long(tmp_path: Path) -> None:
    outcomes: dict[str, int] = {}
    for seed in range(100, 300):
        outcome, _ = _family_case(seed, tmp_path)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert outcomes.get("refused", 0) > 10 and outcomes.get("held", 0) > 10 and outcomes.get("stopped", 0) > 10
