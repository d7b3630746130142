"""``streamguard demo``: the whole pipeline on one machine, watched live from a subscriber.

1. An MQTT broker: the embedded one (amqtt, loopback, free port) unless ``--broker`` names one.
2. Simulated devices (``firmware_sim``) publish raw frames — with privacy-button presses and
   malformed frames — to ``streamguard/<device>/<stream>/raw``; and a zigbee2mqtt-style occupancy
   sensor publishes ``zigbee2mqtt/demo_hall`` on change, which the daemon reads through the
   zigbee2mqtt preset and resamples on a 0.2 s grid (stream ``hall``, :mod:`.hall`).
3. The daemon privatizes them and publishes sanitized records, status and privacy reports.
4. A subscriber prints, once a second, what a data consumer sees: records in, released,
   redacted, private marks with their exact achieved leakage, and throughput. The occupancy
   stream also releases a noisy histogram every 100 positions (Markov Quilt Mechanism), admitted
   by the privacy ledger; the summary shows the ledger's odometer.

At the end it checks what arrived against the simulator's ground truth — every accepted record
exactly once, in order, released values equal to the true values, nothing raw on a sanitized
topic — and prints a summary.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import aiomqtt

from firmware_sim import Button, Faults, Labels, SimDevice, SimStream, publish_device

from firmware_sim.onchange import publish_onchange, retain_state

from ..config import Settings
from ..redaction.plan import relation
from ..stream.daemon import Daemon
from .hall import NAME as HALL, check_hall, hall_sensor, hall_stream

DEVICE = "demo-home"


@dataclass(frozen=True)
class DemoStream:
    name: str
    labels: tuple[str, str]
    alpha: float
    beta: float
    epsilon: float
    aggregates: tuple[dict[str, Any], ...] = ()


STREAMS = (
    DemoStream("occupancy", ("vacant", "occupied"), 0.05, 0.2, 1.0,
               ({"query": "histogram", "window": 100, "epsilon": 1.0},)),
    DemoStream("door", ("closed", "open"), 0.1, 0.6, 0.5),
)


def demo_settings(host: str, port: int, outbox: Path) -> Settings:
    """The daemon configuration of the demo (CSPRNG randomness, as in production)."""
    return Settings(
        device=DEVICE,
        broker={"host": host, "port": port, "protocol": "3.1.1"},  # the embedded amqtt speaks 3.1.1 only
        outbox={"path": outbox},
        streams=[{"name": s.name, "labels": list(s.labels), "model": {"alpha": s.alpha, "beta": s.beta},
                  "epsilon": s.epsilon, "design": "exact", "source": "mqtt", "aggregates": list(s.aggregates)}
                 for s in STREAMS] + [hall_stream()],
    )


def demo_device(rate: float, seed: int) -> SimDevice:
    from streamguard import MarkovChain

    return SimDevice(DEVICE, [
        SimStream(s.name, MarkovChain.binary(s.alpha, s.beta), rate=rate, seed=seed + i,
                  emission=Labels(s.labels), button=Button(probability=0.01),
                  faults=Faults(rate=0.02))
        for i, s in enumerate(STREAMS)
    ], start=time.time())


@dataclass
class Watch:
    """What the subscriber saw."""

    records: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    aggregates: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    privacy: dict[str, dict[str, Any]] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)
    bad_payloads: int = 0

    def line(self, elapsed: float) -> str:
        parts = [f"{elapsed:5.1f}s"]
        for s in STREAMS:
            recs = self.records.get(s.name, [])
            red = sum(r["redacted"] for r in recs)
            pv = self.privacy.get(s.name, {})
            c = pv.get("counters", {})
            marks = pv.get("recent_marks", []) + pv.get("open_marks", [])
            worst = max((_leak(m) for m in marks if m.get("achieved")), default=None)
            parts.append(f"{s.name}: in {c.get('accepted', 0)}+{sum(c.get('rejected', {}).values())} bad, "
                         f"out {len(recs)} ({len(recs) - red} released, {red} redacted), marks {len(marks)}"
                         + (f" max leak {worst:.3f} (ε={s.epsilon:g})" if worst is not None else ""))
        hall = self.records.get(HALL, [])
        unknown = sum((self.privacy.get(HALL, {}).get("ingest") or {}).get("unknown_steps", {}).values())
        parts.append(f"{HALL} (zigbee2mqtt, resampled): out {len(hall)} ({sum(r['redacted'] for r in hall)} "
                     f"redacted), unknown steps {unknown}")
        total = sum(len(v) for v in self.records.values())
        parts.append(f"{total / max(elapsed, 1e-9):6.1f} rec/s")
        return " | ".join(parts)


async def _subscribe(host: str, port: int, watch: Watch, ready: asyncio.Event) -> None:
    async with aiomqtt.Client(host, port, identifier="streamguard-demo-subscriber") as client:
        await client.subscribe(f"streamguard/{DEVICE}/#", qos=1)
        ready.set()
        async for msg in client.messages:
            parts = msg.topic.value.split("/")
            if parts[-1] in ("raw", "cmd") or parts[2:] == ["sentinel"]:
                continue  # the simulator's input (raw readings, malformed on purpose), and the daemon's
                # own round-trip marker (its identity check): not output
            try:
                body = json.loads(bytes(msg.payload))  # type: ignore[arg-type]
            except ValueError:
                watch.bad_payloads += 1
                continue
            if parts[-1] == "data":
                watch.records.setdefault(parts[2], []).append(body)
            elif parts[-1] == "aggregate":
                watch.aggregates.setdefault(parts[2], []).append(body)
            elif parts[-1] == "privacy":
                watch.privacy[parts[2]] = body
            elif parts[-1] == "status":
                watch.status = body


def _leak(mark: dict[str, Any]) -> float:
    """A mark's achieved total leakage; the status writes an unbounded one as "inf"."""
    v = mark["achieved"]["total"]
    return math.inf if v == "inf" else float(v)


def _check(watch: Watch, truth: dict[str, list[int | None]]) -> list[str]:
    """Problems found comparing what was published with the simulator's ground truth and with
    the privacy promise (every finished mark honoured, its exact leakage within ε)."""
    problems = []
    for s in STREAMS:
        for m in watch.privacy.get(s.name, {}).get("recent_marks", []):
            if not m["honoured"] or _leak(m) > s.epsilon * (1 + 1e-9):
                problems.append(f"{s.name}: mark at {m['seq']} not honoured ({m.get('reason')})")
        agg = (watch.privacy.get(s.name, {}).get("ledger") or {}).get("aggregate")
        if s.aggregates and agg is not None and not agg["epsilon"] <= agg["budget"] * (1 + 1e-12):
            problems.append(f"{s.name}: the ledger's aggregate guarantee exceeds its budget")
        recs = watch.records.get(s.name, [])
        seqs = [r["seq"] for r in recs]
        unique = {r["seq"]: r for r in recs}
        if sorted(unique) != list(range(len(unique))):
            problems.append(f"{s.name}: published positions are not 0..{len(unique) - 1} without gaps")
        if seqs != sorted(seqs):
            problems.append(f"{s.name}: records arrived out of order")
        accepted = [st for st in truth.get(s.name, []) if st is not None]
        for seq, r in unique.items():
            if seq >= len(accepted):
                problems.append(f"{s.name}: record {seq} has no accepted reading behind it")
                break
            if not r["redacted"] and r["value"] != s.labels[accepted[seq]]:
                problems.append(f"{s.name}: record {seq} released a value that is not the reading")
                break
            if r["redacted"] != (r["value"] is None):
                problems.append(f"{s.name}: record {seq} has a value and is marked redacted")
                break
    return problems


async def run_demo(duration: float, rate: float, seed: int, broker: tuple[str, int] | None,
                   out: TextIO) -> int:
    """Run the demo; returns 0 when every end-to-end check passed."""
    for noisy in ("transitions", "streamguard.stream.transport", "streamguard.stream.runtime",
                  "streamguard.stream.redaction_runtime"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    # The embedded broker logs a traceback for each QoS 1 delivery it gives up on (amqtt's PUBACK
    # timeout, seen when the daemon holds raw frames back on a loaded machine); the demo's own
    # end-to-end checks below say whether anything was lost.
    logging.getLogger("amqtt").setLevel(logging.CRITICAL)
    async with contextlib.AsyncExitStack() as stack:
        if broker is None:
            from .broker import embedded_broker

            host, port = await stack.enter_async_context(embedded_broker())
            out.write(f"embedded MQTT broker (amqtt) on {host}:{port}\n")
        else:
            host, port = broker
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="streamguard-demo-")))
        settings = demo_settings(host, port, tmp / "outbox.sqlite")
        for s in STREAMS:
            out.write(f"stream {s.name}: α={s.alpha:g} β={s.beta:g} ε={s.epsilon:g}, {rate:g} frames/s, "
                      f"2% malformed, 1% privacy-button presses\n")
        watch, ready, stop = Watch(), asyncio.Event(), asyncio.Event()
        listener = asyncio.create_task(_subscribe(host, port, watch, ready))
        await asyncio.wait_for(ready.wait(), 10)
        await retain_state(hall_sensor(seed), host, port)  # zigbee2mqtt ran before: its retained state
        daemon = Daemon(settings)
        daemon_task = asyncio.create_task(daemon.run(stop))
        async with asyncio.timeout(30):  # "online" is published once the raw topics are subscribed
            while watch.status.get("state") != "online":
                await asyncio.sleep(0.05)
        device = demo_device(rate, seed)
        truth: dict[str, list[int | None]] = {}
        frames = [f for f in device.frames(duration=duration)]
        for f in frames:
            if f.meta.channel == "raw":
                truth.setdefault(f.stream, []).append(f.meta.state if f.meta.accepted else None)
        sim = asyncio.create_task(publish_device(device, host, port, duration=duration))
        out.write(f"stream {HALL}: a zigbee2mqtt occupancy sensor reporting on change, resampled every 0.2 s\n")
        hall = asyncio.create_task(publish_onchange(hall_sensor(seed), host, port, duration))
        t0 = time.monotonic()
        while not sim.done():
            await asyncio.sleep(1.0)
            out.write(watch.line(time.monotonic() - t0) + "\n")
            out.flush()
        counts = await sim
        hall_sent = await hall
        await asyncio.sleep(0.5)  # the hall stream's last ticks
        stop.set()
        await daemon_task
        await asyncio.sleep(0.5)  # last records and statuses reach the subscriber
        listener.cancel()
        await asyncio.gather(listener, return_exceptions=True)
        elapsed = time.monotonic() - t0
        out.write("\n" + _summary(watch, counts.as_dict(), elapsed, len(hall_sent)) + "\n")
        problems = _check(watch, truth) + check_hall(watch.records.get(HALL, []), hall_sent)
        if watch.bad_payloads:
            problems.append(f"{watch.bad_payloads} published payloads were not JSON")
        out.write("checks: " + ("all passed" if not problems else "; ".join(problems)) + "\n")
        return 0 if not problems else 1
    return 1


def _summary(watch: Watch, sent: dict[str, Any], elapsed: float, hall_sent: int) -> str:
    lines = [f"summary after {elapsed:.1f} s (device status: {watch.status.get('state', '?')})"]
    for s in STREAMS:
        pv = watch.privacy.get(s.name, {})
        c = pv.get("counters", {})
        recs = watch.records.get(s.name, [])
        red = sum(r["redacted"] for r in recs)
        marks = pv.get("recent_marks", [])
        honoured = sum(m["honoured"] for m in marks)
        leaks = [_leak(m) for m in marks if m.get("achieved")]
        lines.append(
            f"  {s.name}: accepted {c.get('accepted', 0)}, rejected {_counts(c.get('rejected', {}))}, published {len(recs)} "
            f"({len(recs) - red} released, {red} redacted); plan: horizons {_horizons(pv.get('horizons'))}, "
            f"exact plan leakage {pv.get('plan_leakage', float('nan')):.4f} "
            f"{relation(pv.get('plan_leakage', float('nan')), s.epsilon)} ε={s.epsilon:g}; "
            f"marks {len(marks)} ({honoured} honoured), max achieved leakage "
            + (f"{max(leaks):.4f}" if leaks else "—")
        )
        agg = (pv.get("ledger") or {}).get("aggregate")
        if agg is not None:
            sigma = (pv.get("aggregates") or [{}])[0].get("sigma", math.nan)
            lines.append(f"    aggregates: {len(watch.aggregates.get(s.name, []))} noisy histograms published "
                         f"(noise ±{math.sqrt(2) * 2 * sigma:.0f} std per bin: σ_∞ = {sigma:.1f} on this sticky chain); ledger: "
                         f"ε = {agg['epsilon']:.4f} for every position (quilt accountant) of budget {agg['budget']:g}; "
                         f"the paper's Σε would be {agg['models'][0]['paper']['thm_III7_sum'].get('epsilon', '—')}")
    hall = watch.records.get(HALL, [])
    ingest = watch.privacy.get(HALL, {}).get("ingest") or {}
    lines.append(f"  {HALL}: {hall_sent} zigbee2mqtt messages sent, {len(hall)} records out on the "
                 f"0.2 s grid ({sum(r['redacted'] for r in hall)} redacted), unknown steps "
                 f"{_counts(ingest.get('unknown_steps', {}))}")
    lines.append(f"  simulator sent: frames {_counts(sent.get('frames', {}))}; faults {_counts(sent.get('faults', {}))}; "
                 f"commands {sent.get('commands', 0)}")
    return "\n".join(lines)


def _horizons(h: dict[str, int] | None) -> str:
    """The plan's horizons as "left 7, right 7" (records held before / protected after a mark)."""
    return "—" if not h else f"left {h.get('left')}, right {h.get('right')}"


def _counts(counts: dict[str, Any]) -> str:
    """``{"malformed": 3, "unmapped": 1}`` as "3 malformed, 1 unmapped"; "none" when empty or all zero."""
    parts = [f"{n} {name}" for name, n in counts.items() if n]
    return ", ".join(parts) if parts else "none"
