"""The demo's zigbee2mqtt-style occupancy sensor (issue 10): an on-change sensor
(firmware_sim.onchange) publishing ``zigbee2mqtt/demo_hall`` — ``{"occupancy": …, "battery": …,
"linkquality": …}`` on change, plus republishes of the unchanged state, retained (zigbee2mqtt's
``retain: true``) — read by the daemon through the zigbee2mqtt preset and the resampler (one step per
``PERIOD`` s tick, stamped with the tick). Its state is on the broker before the daemon starts, so
the stream begins at the state delivered on subscription (docs/unknown-steps.md, "How a wait ends").

The end-of-demo check compares what a consumer saw with the sensor's ground truth: every record's
``ts`` is a grid tick, seqs are 0, 1, … in order, and every released value is the sensor's state at
its tick (ticks within ``MARGIN`` of a change are skipped: there the broker's latency decides).
"""

from __future__ import annotations

from typing import Any

from firmware_sim.onchange import ChangeMessage, OnChangeSensor

from ..ingest.grid import tick_index

NAME = "hall"
PERIOD = 0.2
LABELS = ("vacant", "occupied")
MARGIN = 0.05


def hall_stream() -> dict[str, Any]:
    """The stream's configuration: per 0.2 s step, vacant ~3 s and occupied ~1 s on average."""
    return {"name": NAME, "labels": list(LABELS), "model": {"alpha": 0.067, "beta": 0.2}, "epsilon": 1.0,
            "design": "exact", "sample_period": PERIOD,
            "ingest": {"preset": "zigbee2mqtt", "device": "demo_hall", "field": "occupancy",
                       "values": {"true": "occupied", "false": "vacant"}, "retained": True}}


def hall_sensor(seed: int) -> OnChangeSensor:
    return OnChangeSensor("zigbee2mqtt", "demo_hall", dwell=(3.0, 1.0), republish=0.5, seed=seed, retain=True)


def check_hall(records: list[dict[str, Any]], sent: list[tuple[float, ChangeMessage]]) -> list[str]:
    """Problems found in the hall stream's records against the sensor's truth (module docstring)."""
    unique = {r["seq"]: r for r in records}
    if sorted(unique) != list(range(len(unique))) or [r["seq"] for r in records] != sorted(r["seq"] for r in records):
        return [f"{NAME}: published positions are not 0..{len(unique) - 1} in order"]
    truth = [(at, m.state) for at, m in sent if m.state is not None]
    changes = [at for at, m in sent if m.change and m.state is not None]
    for r in unique.values():
        g = r["ts"]
        if g != tick_index(g, PERIOD) * PERIOD:
            return [f"{NAME}: record {r['seq']} is not stamped with a grid tick"]
        if r["redacted"] or any(abs(c - g) < MARGIN for c in changes):
            continue
        before = [s for at, s in truth if at <= g]
        if before and r["value"] != LABELS[before[-1]]:
            return [f"{NAME}: record {r['seq']} released a value that is not the sensor's state at its tick"]
    return []
