"""End-to-end streaming through MQTT: the privatizing daemon against a passthrough relay.

The script starts its own Mosquitto on a free loopback port (``set_tcp_nodelay true``, no
persistence) and compares, in the same run and through the same broker:

(a) **privatized**: producer → ``<base>/<device>/<stream>/raw`` → streamguard ``Daemon`` (a
    subprocess; CSPRNG; outbox in a temporary directory) → ``…/<stream>/data`` → consumer;
(b) **passthrough**: the same topics through a relay built on the same transport
    (``MqttTransport``: one connection subscribes the raw topics, a second one republishes each
    payload unchanged at QoS 1 with up to ``PublishConfig.window`` publishes in flight), so the only
    difference is privatization plus the outbox.

Both run for 1 and for 10 streams. Each stream is the binary chain α = 0.05, β = 0.2 with ε = 1,
``design="optimal"`` (horizons 7 + 7), labels vacant/occupied; every 1000th frame of a stream
carries ``"private": true``. The producer and the consumer are two aiomqtt clients (TCP_NODELAY,
QoS 1) in this process; streams are fed round-robin.

- **Throughput, closed loop.** The producer keeps at most ``E2E_WINDOW`` records in flight end to
  end (sent, not yet received by the consumer), plus the records the daemon holds on purpose (its
  release delay: ``delay + 1`` per stream). Records/s is measured on the consumer side between the
  receipt of the last warm-up record and of the last measured record.
- **Latency, open loop**, paced at ``LATENCY_RATE`` records/s in total, with **delay = 0** for the
  daemon. Even at delay 0 the daemon holds each record until the *next* frame of its stream arrives
  (so that a ``"now"`` command can still protect it), so the privatized latency is measured from
  the publish of the frame that triggers the release (frame s + 1) to the consumer's receipt of
  record s; the passthrough's from the publish of frame s. The latency including that hold is
  reported too.
- **Outbox effect** (1 stream, delay 0): the daemon's publisher with window 100 against window 1,
  and the outbox on tmpfs (``/dev/shm``: no disk sync) against the temporary directory.

Placement (unless ``--no-pin``): Mosquitto and this process on CPU 0, the pipeline process on
CPU 1, as in notes/performance-baselines.md §5b. CPU time per record comes from /proc for the
pipeline process (event-loop thread and other threads — the outbox's SQLite worker), the broker
and this process. ``--profile`` runs the pipelines under cProfile (event-loop thread only), writes
``bench_stream_<pipeline>.prof`` and prints the top functions; its timings are inflated.

- **Batched** (issue 15): 1 stream, each raw message a JSON list of ``BATCH`` frames (docs/daemon.md: batches
  of raw frames), the daemon with ``publish.batch_max = BATCH``, the relay forwarding the lists
  unchanged; closed loop with ``BATCH_WINDOW`` messages in flight.

Targets (issue 15): privatized ≥ 95 % of passthrough throughput; privatization adds < 0.5 ms at p99;
batched: ≥ 50 k records/s end to end with the daemon's CPU ≤ 20 µs per record. An info row gives
the latency floor of the disk: a 4 KiB append and ``fdatasync`` alone, paced like the open loop, in
the outboxes' directory (:func:`disk_sync_floor`; each decision is durable before it is published).
Outputs in ``--out``: ``bench_stream.json`` and ``bench_stream.md`` (``--quick``: ``*_quick``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from streamguard.support.loopback import HOST, accepts, free_port

from ._common import (
    base_parser,
    environment,
    environment_line,
    fmt_rate,
    fmt_seconds,
    markdown_table,
    output_dir,
    progress,
    result_stem,
    verdict,
    write_json,
)

MOSQUITTO = shutil.which("mosquitto") or shutil.which("mosquitto", path="/usr/local/sbin:/usr/sbin:/sbin")
BASE = "sgbench"
LABELS = ("vacant", "occupied")
ALPHA, BETA, EPS, DESIGN = 0.05, 0.2, 1.0, "optimal"
PRIVATE_EVERY = 1000  # every n-th frame of a stream is flagged private
STATES_SEED = 20261122
STREAM_COUNTS = (1, 10)
E2E_WINDOW = 100  # closed loop: records in flight end to end (beyond the daemon's intentional hold)
PUBLISH_WINDOW = 100  # PublishConfig.window (its default): the daemon's publisher and the relay
LATENCY_RATE = 200.0  # open loop, records/s in total
THROUGHPUT_TARGET = 0.95  # privatized ÷ passthrough records/s (issue 15)
LATENCY_TARGET_S = 0.5e-3  # added p99 (issue 15)
BATCH = 100  # batched rows: frames per raw message and the daemon's publish.batch_max (issue 15)
BATCH_WINDOW = 20  # batched rows, closed loop: raw messages in flight end to end (beyond the daemon's hold)
BATCH_RATE_TARGET = 50_000.0  # batched rows: privatized records/s end to end
BATCH_CPU_TARGET_US = 20.0  # batched rows: the daemon's CPU per record
CPU_BENCH, CPU_PIPELINE = 0, 1
FOREIGN_WARN = 0.2  # cores busy in other processes during a measured interval: the report warns

START_TIMEOUT = 30.0  # a pipeline process is online (imports, JIT cache load, subscriptions)
STOP_TIMEOUT = 20.0  # the daemon drains its outbox within 10 s (DRAIN_TIMEOUT)
SETTLE_TIMEOUT = 15.0  # open loop: the last records arrive after the producer stopped
MIN_RATE = 200.0  # closed loop: a run is aborted if it is slower than this many records/s (+ 20 s)


@dataclass(frozen=True)
class Sizes:
    thr_records: int  # per repetition
    batch_records: int  # batched rows, per repetition (thr_reps repetitions)
    thr_reps: int
    thr_warm: int
    lat_records: int
    lat_warm: int
    var_thr_records: int
    var_lat_records: int


FULL = Sizes(thr_records=10_000, batch_records=100_000, thr_reps=2, thr_warm=500, lat_records=2_000, lat_warm=200,
             var_thr_records=5_000, var_lat_records=1_000)
QUICK = Sizes(thr_records=1_500, batch_records=20_000, thr_reps=1, thr_warm=200, lat_records=300, lat_warm=50,
              var_thr_records=600, var_lat_records=150)


# --------------------------------------------------------------------------------------- broker




class Mosquitto:
    """A Mosquitto subprocess on a free 127.0.0.1 port with a generated configuration (plus
    ``settings``, lines appended to it)."""

    def __init__(self, workdir: Path, cpu: int | None, settings: Sequence[str] = ()) -> None:
        self.workdir = workdir
        self.cpu = cpu
        self.settings = list(settings)
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = workdir / "mosquitto.log"

    def start(self) -> None:
        if MOSQUITTO is None:
            raise RuntimeError("mosquitto is not installed (Debian: apt-get install mosquitto)")
        for _ in range(5):  # a free port can be taken between the probe and the bind
            self.port = free_port()
            lines = [f"listener {self.port} {HOST}", "allow_anonymous true", "persistence false",
                     "set_tcp_nodelay true", f"log_dest file {self.log}", *self.settings]
            if os.geteuid() == 0:
                lines.append("user root")  # else it drops to user mosquitto and cannot write its log
            conf = self.workdir / "mosquitto.conf"
            conf.write_text("\n".join(lines) + "\n")
            self.proc = subprocess.Popen([MOSQUITTO, "-c", str(conf)], stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL)
            if self.cpu is not None:
                os.sched_setaffinity(self.proc.pid, {self.cpu})
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline and self.proc.poll() is None:
                if accepts(self.port):
                    return
                time.sleep(0.02)
            self.stop()
        raise RuntimeError(f"mosquitto did not start:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5.0)

    def log_tail(self, n: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"


# ------------------------------------------------------------------------------------- CPU time

_TICK = os.sysconf("SC_CLK_TCK")


def pin_this_process(no_pin: bool) -> tuple[bool, str]:
    """Pin this process (broker-side work: producer, consumer) to CPU_BENCH, so that the pipeline
    gets CPU_PIPELINE to itself (notes/performance-baselines.md §5b), unless ``no_pin`` or those CPUs
    are not ours. Returns whether it pinned and the placement as said in the report."""
    cpus = sorted(os.sched_getaffinity(0))
    pin = not no_pin and CPU_BENCH in cpus and CPU_PIPELINE in cpus
    if pin:
        os.sched_setaffinity(0, {CPU_BENCH})
    return pin, (f"broker and producer/consumer on CPU {CPU_BENCH}, pipeline process on CPU {CPU_PIPELINE}"
                 if pin else "unpinned")


def bench_states(streams: int, length: int) -> tuple[Any, np.ndarray]:
    """The benchmark stream's plan (a :class:`~streamguard.redaction.plan.StreamPlan`), and
    ``length`` states of each of ``streams`` streams (seeded: the same frames in every run)."""
    from firmware_sim import MarkovSource
    from streamguard import MarkovChain
    from streamguard.redaction.plan import plan_stream

    chain = MarkovChain.binary(ALPHA, BETA)
    plan = plan_stream(chain, EPS, design=DESIGN)
    return plan, np.stack([MarkovSource(chain, STATES_SEED + i).states(length) for i in range(streams)])


@contextlib.contextmanager
def broker_in(workdir: Path, pin: bool, placement: str) -> Iterator[Mosquitto]:
    """A Mosquitto of the benchmark's own, started in ``workdir``; stopped, and ``workdir`` removed,
    on the way out (with the broker's log tail printed if the run failed)."""
    broker = Mosquitto(workdir, CPU_BENCH if pin else None)
    try:
        broker.start()
        progress(f"mosquitto on {HOST}:{broker.port} (pid {broker.proc.pid}); {placement}")  # type: ignore[union-attr]
        yield broker
    except BaseException:
        progress(f"failed; mosquitto log:\n{broker.log_tail()}")
        raise
    finally:
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def thread_cpu(pid: int) -> dict[int, tuple[float, float]]:
    """CPU seconds (user, system) of each thread of a process, by thread id."""
    out: dict[int, tuple[float, float]] = {}
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                text = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
                fields = text.rsplit(")", 1)[1].split()
                out[int(tid)] = (int(fields[11]) / _TICK, int(fields[12]) / _TICK)
    return out


def system_busy() -> float:
    """CPU seconds all processes of the machine spent busy (the ``cpu`` line of /proc/stat)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        f = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        return (f[0] + f[1] + f[2] + f[5] + f[6] + f[7]) / _TICK  # user nice system irq softirq steal
    return float("nan")


@dataclass
class CpuSnapshot:
    pipeline: dict[int, tuple[float, float]]
    broker: float
    bench: float
    system: float
    wall: float


def cpu_snapshot(pipeline_pid: int, broker_pid: int) -> CpuSnapshot:
    return CpuSnapshot(thread_cpu(pipeline_pid), sum(map(sum, thread_cpu(broker_pid).values())),
                       time.process_time(), system_busy(), time.perf_counter())


def cpu_per_record(a: CpuSnapshot, b: CpuSnapshot, pid: int, records: int) -> dict[str, float]:
    """µs of CPU per record between two snapshots (the pipeline's event-loop thread, its other
    threads, its system time; the broker; this process), and how busy the pipeline's core was."""
    def delta(tid: int, k: int) -> float:
        return b.pipeline[tid][k] - a.pipeline.get(tid, (0.0, 0.0))[k]

    main = sum(delta(pid, k) for k in (0, 1)) if pid in b.pipeline else 0.0
    other = sum(delta(t, k) for t in b.pipeline if t != pid for k in (0, 1))
    system = sum(delta(t, 1) for t in b.pipeline)
    wall = b.wall - a.wall
    per = 1e6 / max(records, 1)
    ours = main + other + (b.broker - a.broker) + (b.bench - a.bench)
    return {"pipeline_loop_us": main * per, "pipeline_threads_us": other * per,
            "pipeline_us": (main + other) * per, "pipeline_sys_us": system * per,
            "broker_us": (b.broker - a.broker) * per, "bench_us": (b.bench - a.bench) * per,
            "pipeline_busy": (main + other) / wall if wall > 0 else 0.0,
            # CPU used by everything else on the machine, in cores (other processes disturb the run)
            "foreign_cores": max(0.0, (b.system - a.system) - ours) / wall if wall > 0 else 0.0}


# --------------------------------------------------------------- pipeline process (child side)


def stream_names(n: int) -> list[str]:
    return [f"s{i}" for i in range(n)]


def _serve(spec_path: Path) -> int:
    """Entry point of a pipeline process: run the daemon or the relay until SIGTERM."""
    spec = json.loads(spec_path.read_text())
    if spec["cpu"] is not None:
        os.sched_setaffinity(0, {spec["cpu"]})
    import logging

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")

    async def main() -> dict[str, Any]:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        if spec["kind"] == "daemon":
            return await _serve_daemon(spec, stop)
        return await _serve_relay(spec, stop)

    profiler = None
    if spec["profile"]:  # profiled only between SIGUSR1 and SIGUSR2: the measured closed-loop intervals
        import cProfile

        profiler = cProfile.Profile()
        signal.signal(signal.SIGUSR1, lambda *_: profiler.enable())
        signal.signal(signal.SIGUSR2, lambda *_: profiler.disable())
    try:
        stats = asyncio.run(main())
    finally:
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(spec["profile"])
    print(json.dumps(stats), flush=True)
    return 0


async def _serve_daemon(spec: dict[str, Any], stop: asyncio.Event) -> dict[str, Any]:
    from streamguard.config import Settings
    from streamguard.stream.daemon import Daemon

    settings = Settings(
        device=spec["device"], topic_base=BASE, log_level="WARNING",
        broker={"host": HOST, "port": spec["port"]},
        outbox={"path": Path(spec["outbox_dir"]) / "outbox.sqlite", "commit_delay_ms": spec["commit_delay_ms"]},
        publish={"window": spec["window"], "batch_max": spec["batch"]},
        streams=[{"name": name, "labels": list(LABELS), "model": {"alpha": ALPHA, "beta": BETA},
                  "epsilon": EPS, "design": DESIGN, "delay": spec["delay"], "source": "mqtt"}
                 for name in stream_names(spec["streams"])],
    )
    daemon = Daemon(settings, freeze_heap=True)  # (as `streamguard run`: the process is the daemon)
    await daemon.run(stop)
    publisher = getattr(daemon, "_publisher", None)  # read-only: its counters (resends, reconnects)
    return {
        "frames": daemon.stats.frames,
        "stored": daemon.stats.stored,
        "outbox_full_waits": daemon.stats.outbox_full_waits,
        "rejected": sum(sum(rt.counters.rejected.values()) for rt in daemon.runtimes.values()),
        "duplicates": sum(rt.counters.duplicates for rt in daemon.runtimes.values()),
        "publisher": None if publisher is None else {k: v for k, v in asdict(publisher.stats).items()
                                                     if k != "records_by_stream"},
    }


async def _serve_relay(spec: dict[str, Any], stop: asyncio.Event) -> dict[str, Any]:
    """Subscribe the raw topics on one connection, republish unchanged on a second one (QoS 1),
    at most ``window`` publishes in flight — the daemon's connection layout minus privatization
    and outbox."""
    from streamguard.config import BrokerConfig, PublishConfig
    from streamguard.stream.transport import MqttTransport, Undelivered

    device = spec["device"]
    broker = BrokerConfig(host=HOST, port=spec["port"])
    publish = PublishConfig(window=spec["window"])
    status = f"{BASE}/{device}/status"
    rx = MqttTransport(broker, publish, device=device, status_topic=status, will=False)
    tx = MqttTransport(broker, publish, device=device, status_topic=status, identifier_suffix="-pub", will=False)
    routes = {f"{BASE}/{device}/{s}/raw": f"{BASE}/{device}/{s}/data" for s in stream_names(spec["streams"])}
    counts = {"forwarded": 0, "undelivered": 0}
    window = asyncio.Semaphore(spec["window"])
    tasks: set[asyncio.Task[None]] = set()

    async def forward(topic: str, payload: bytes) -> None:
        try:
            await tx.publish(topic, payload, qos=1)
            counts["forwarded"] += 1
        except Undelivered:
            counts["undelivered"] += 1
        finally:
            window.release()

    async def pump() -> None:
        async for m in rx.messages():
            dst = routes.get(m.topic)
            if dst is None:
                continue
            await window.acquire()
            t = asyncio.create_task(forward(dst, m.payload))
            tasks.add(t)
            t.add_done_callback(tasks.discard)

    async with rx, tx:
        for raw in routes:
            await rx.subscribe(raw, qos=1)
        online = {"device": device, "state": "online", "streams": stream_names(spec["streams"])}
        await rx.publish(status, json.dumps(online).encode(), retain=True)
        runner = asyncio.create_task(pump())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait([runner, stopping], return_when=asyncio.FIRST_COMPLETED)
        runner.cancel()
        stopping.cancel()
        await asyncio.gather(runner, stopping, return_exceptions=True)
        if tasks:
            await asyncio.wait(list(tasks), timeout=10.0)
    return counts


# -------------------------------------------------------------- pipeline process (parent side)


@dataclass
class PipelineSpec:
    kind: str  # "daemon" (privatized) or "relay" (passthrough)
    label: str
    streams: int
    delay: int | None = None  # daemon: None = the plan's left horizon
    window: int = PUBLISH_WINDOW
    outbox_root: str | None = None  # daemon: where its temporary outbox directory goes
    #: Frames per raw message (a JSON list when > 1) and the daemon's publish.batch_max; the relay
    #: forwards the lists unchanged.
    batch: int = 1
    commit_delay_ms: float = 0.0  # daemon: outbox.commit_delay_ms (group commit)


class Pipeline:
    """A pipeline subprocess (``python -m benchmarks.bench_stream --serve SPEC``)."""

    def __init__(self, spec: PipelineSpec, workdir: Path, port: int, cpu: int | None, profile: Path | None,
                 left_horizon: int) -> None:
        self.spec = spec
        self.device = f"dev-{spec.label}"
        self.workdir = workdir
        self.port = port
        self.cpu = cpu
        self.profile = profile
        delay = spec.delay if spec.delay is not None else left_horizon
        #: Records per stream the pipeline holds on purpose (the daemon releases record s when
        #: frame s + delay + 1 arrives); 0 for the relay.
        self.hold = delay + 1 if spec.kind == "daemon" else 0
        self.delay = delay if spec.kind == "daemon" else None
        self.proc: subprocess.Popen[str] | None = None
        self.stderr_path = workdir / f"{spec.label}.stderr"
        self.outbox_dir: str | None = None
        self.outbox_fs: str | None = None
        self.final: dict[str, Any] = {}

    def start(self) -> None:
        if self.spec.kind == "daemon":
            root = self.spec.outbox_root or str(self.workdir)
            self.outbox_dir = tempfile.mkdtemp(prefix=f"outbox-{self.spec.label}-", dir=root)
            self.outbox_fs = _filesystem(self.outbox_dir)
        spec = {"kind": self.spec.kind, "device": self.device, "port": self.port, "streams": self.spec.streams,
                "delay": self.delay, "window": self.spec.window, "batch": self.spec.batch,
                "commit_delay_ms": self.spec.commit_delay_ms,
                "outbox_dir": self.outbox_dir, "cpu": self.cpu,
                "profile": None if self.profile is None else str(self.profile)}
        path = self.workdir / f"{self.spec.label}.json"
        path.write_text(json.dumps(spec))
        root = Path(__file__).resolve().parent.parent
        with self.stderr_path.open("w") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "benchmarks.bench_stream", "--serve", str(path)],
                                         cwd=root, stdout=subprocess.PIPE, stderr=err, text=True)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """SIGTERM (the daemon drains its outbox and says offline), bounded wait, then SIGKILL."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            out, _ = self.proc.communicate(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate(timeout=5.0)
        lines = [ln for ln in (out or "").splitlines() if ln.strip()]
        with contextlib.suppress(ValueError, IndexError):
            self.final = json.loads(lines[-1])
        self.final["exit_status"] = self.proc.returncode
        if self.outbox_dir is not None:
            shutil.rmtree(self.outbox_dir, ignore_errors=True)

    def stderr_tail(self, n: int = 15) -> str:
        try:
            return "\n".join(self.stderr_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


def _filesystem(path: str) -> str:
    """The file system type holding ``path`` (from /proc/mounts: the longest matching mount point)."""
    best, kind = "", "unknown"
    with contextlib.suppress(OSError):
        real = os.path.realpath(path)
        for line in Path("/proc/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and (real == parts[1] or real.startswith(parts[1].rstrip("/") + "/")):
                if len(parts[1]) >= len(best):
                    best, kind = parts[1], parts[2]
    return kind


# ----------------------------------------------------------------------- producer and consumer


@dataclass
class Run:
    """Book-keeping of one measurement: frames sent and records received, by stream and local index."""

    streams: int
    per_stream: int  # frames sent per stream
    first_seq: list[int]
    t_pub: np.ndarray = field(init=False)
    t_recv: np.ndarray = field(init=False)
    order: list[int] = field(default_factory=list)  # receipt times (ns), in arrival order
    duplicates: int = 0
    stale: int = 0  # records of an earlier run (released by this run's frames)
    redacted: int = 0
    target: int = 0  # received records that complete the run
    done: asyncio.Event = field(default_factory=asyncio.Event)
    on_record: Any = None
    marks: dict[int, Any] = field(default_factory=dict)  # receipt count → callback

    def __post_init__(self) -> None:
        self.t_pub = np.zeros((self.streams, self.per_stream), dtype=np.int64)
        self.t_recv = np.zeros((self.streams, self.per_stream), dtype=np.int64)

    def receive(self, stream: int, seq: int, redacted: bool, now: int) -> None:
        i = seq - self.first_seq[stream]
        if i < 0:
            self.stale += 1
            return
        if i >= self.per_stream or self.t_recv[stream, i]:
            self.duplicates += 1
            return
        self.t_recv[stream, i] = now
        self.redacted += redacted
        self.order.append(now)
        if self.on_record is not None:
            self.on_record()
        cb = self.marks.get(len(self.order))
        if cb is not None:
            cb()
        if len(self.order) >= self.target:
            self.done.set()


class Harness:
    """Producer and consumer clients attached to one pipeline process."""

    def __init__(self, pipeline: Pipeline, producer: Any, consumer: Any, states: np.ndarray) -> None:
        self.p = pipeline
        self.producer = producer
        self.consumer = consumer
        self.streams = pipeline.spec.streams
        self.next_seq = [0] * self.streams
        self.last_us = [0] * self.streams
        self.states = states  # one Markov path per stream, reused cyclically
        self.raw = [f"{BASE}/{pipeline.device}/{s}/raw" for s in stream_names(self.streams)]
        self.run: Run | None = None
        self.online = asyncio.Event()
        self.tasks: set[asyncio.Task[None]] = set()
        self.undelivered = 0

    async def read(self) -> None:
        import aiomqtt

        privatized = self.p.spec.kind == "daemon"
        async for m in self.consumer.messages:
            now = time.perf_counter_ns()
            parts = m.topic.value.split("/")
            body = json.loads(bytes(m.payload))
            if parts[-1] == "status":
                if body.get("state") == "online":
                    self.online.set()
                continue
            run = self.run
            if run is None:
                continue
            stream = int(parts[2][1:])
            for rec in body if isinstance(body, list) else (body,):  # (a batch: a list of records)
                if privatized:
                    run.receive(stream, rec["seq"], bool(rec["redacted"]), now)
                else:
                    run.receive(stream, rec["n"], False, now)
        raise aiomqtt.MqttError("consumer iteration ended")

    def frame(self, stream: int) -> tuple[int, bytes]:
        seq = self.next_seq[stream]
        self.next_seq[stream] += 1
        # strictly increasing whole microseconds: a frame with an earlier step's ts is a redelivery
        us = max(self.last_us[stream] + 1, time.time_ns() // 1000)
        self.last_us[stream] = us
        path = self.states[stream]
        label = LABELS[int(path[seq % path.shape[0]])]
        private = ',"private":true' if seq % PRIVATE_EVERY == PRIVATE_EVERY - 1 else ""
        return seq, f'{{"value":"{label}","ts":{us // 10**6}.{us % 10**6:06d},"n":{seq}{private}}}'.encode()

    def send(self, run: Run, stream: int) -> None:
        """Publish the next frame of ``stream`` (QoS 1) in a task — with ``batch`` > 1 the next
        ``batch`` frames as one JSON list; its publish time is taken right before the client call."""
        n = self.p.spec.batch
        frames = [self.frame(stream) for _ in range(n)]
        payload = frames[0][1] if n == 1 else b"[" + b",".join(f for _, f in frames) + b"]"
        i = frames[0][0] - run.first_seq[stream]

        async def go() -> None:
            run.t_pub[stream, i:i + n] = time.perf_counter_ns()
            try:
                await self.producer.publish(self.raw[stream], payload, qos=1)
            except Exception:  # noqa: BLE001 - counted and reported: the run then misses records
                self.undelivered += 1

        t = asyncio.create_task(go())
        self.tasks.add(t)
        t.add_done_callback(self.tasks.discard)

    def new_run(self, frames_per_stream: int) -> Run:
        run = Run(self.streams, frames_per_stream, list(self.next_seq))
        self.run = run
        return run

    def check_alive(self) -> None:
        if not self.p.alive():
            raise RuntimeError(f"pipeline {self.p.spec.label} exited:\n{self.p.stderr_tail()}")


@contextlib.asynccontextmanager
async def attached(pipeline: Pipeline, broker: Mosquitto, states: np.ndarray) -> AsyncIterator[Harness]:
    """Start the pipeline process, connect producer and consumer, wait until it is online."""
    import aiomqtt

    nodelay = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
    window = E2E_WINDOW + pipeline.spec.streams * pipeline.hold  # (messages: at most records)
    pipeline.start()
    try:
        async with aiomqtt.Client(HOST, broker.port, identifier=f"bench-consumer-{pipeline.spec.label}",
                                  socket_options=nodelay) as consumer, \
                aiomqtt.Client(HOST, broker.port, identifier=f"bench-producer-{pipeline.spec.label}",
                               socket_options=nodelay, max_inflight_messages=min(window, 1000)) as producer:
            producer.pending_calls_threshold = 10**9  # else aiomqtt warns beyond 10 pending publishes
            consumer.pending_calls_threshold = 10**9
            h = Harness(pipeline, producer, consumer, states)
            await consumer.subscribe(f"{BASE}/{pipeline.device}/+/data", qos=1)
            await consumer.subscribe(f"{BASE}/{pipeline.device}/status", qos=1)
            reader = asyncio.create_task(h.read())
            try:
                t0 = time.perf_counter()
                deadline = t0 + START_TIMEOUT
                while not h.online.is_set():
                    h.check_alive()
                    if reader.done():
                        reader.result()
                    if time.perf_counter() > deadline:
                        raise RuntimeError(f"pipeline {pipeline.spec.label} not online after {START_TIMEOUT:g} s:\n"
                                           f"{pipeline.stderr_tail()}")
                    await asyncio.sleep(0.02)
                progress(f"  {pipeline.spec.label}: online after {time.perf_counter() - t0:.2f} s (pid {pipeline.pid})")
                yield h
            finally:
                reader.cancel()
                for t in list(h.tasks):
                    t.cancel()
                await asyncio.gather(reader, *h.tasks, return_exceptions=True)
    finally:
        pipeline.stop()


async def _await_done(h: Harness, run: Run, deadline: float, what: str) -> bool:
    """Wait for the run's target, polling the pipeline; False on timeout (the run is reported as such)."""
    while not run.done.is_set():
        h.check_alive()
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            progress(f"  {what}: TIMEOUT with {len(run.order)} of {run.target} records received")
            return False
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(run.done.wait(), min(remaining, 0.5))
    return True


async def closed_loop(h: Harness, broker: Mosquitto, records: int, warm: int) -> dict[str, Any]:
    """Closed loop: at most E2E_WINDOW + streams·hold frames sent and not yet received. Records/s
    between the receipt of the warm-th and of the (warm + records)-th record of this run."""
    S, B = h.streams, h.p.spec.batch
    assert records % S == 0 and warm % S == 0
    # the padding releases the last measured records; with batches, whole messages of B frames
    per_stream = -(-((warm + records) // S + h.p.hold) // B) * B
    run = h.new_run(per_stream)
    run.target = warm + records
    window = asyncio.Semaphore(E2E_WINDOW + S * h.p.hold if B == 1 else BATCH_WINDOW * B + S * (h.p.hold + B))
    run.on_record = window.release
    snaps: dict[str, CpuSnapshot] = {}

    def measured_from() -> None:
        snaps["a"] = cpu_snapshot(h.p.pid, broker.proc.pid)  # type: ignore[union-attr]
        if h.p.profile is not None:
            h.p.proc.send_signal(signal.SIGUSR1)  # type: ignore[union-attr]

    run.marks[warm] = measured_from
    what = f"{h.p.spec.label} closed loop"
    deadline = time.perf_counter() + 20.0 + (warm + records) / MIN_RATE
    try:
        for i in range(per_stream * S // B):
            for _ in range(B):
                await asyncio.wait_for(window.acquire(), max(0.0, deadline - time.perf_counter()))
            h.send(run, i % S)
    except TimeoutError:
        pass
    ok = await _await_done(h, run, deadline, what)
    snaps["b"] = cpu_snapshot(h.p.pid, broker.proc.pid)  # type: ignore[union-attr]
    if h.p.profile is not None:
        h.p.proc.send_signal(signal.SIGUSR2)  # type: ignore[union-attr]
    h.run = None
    result: dict[str, Any] = {"records": records, "warm": warm, "completed": ok, "received": len(run.order),
                              "duplicates": run.duplicates, "stale": run.stale, "redacted": run.redacted,
                              "producer_undelivered": h.undelivered}
    if ok and warm > 0:
        span = (run.order[warm + records - 1] - run.order[warm - 1]) / 1e9
        result["seconds"] = span
        result["records_per_s"] = records / span
        result["cpu"] = cpu_per_record(snaps["a"], snaps["b"], h.p.pid, records)
    return result


async def open_loop(h: Harness, broker: Mosquitto, records: int, warm: int, rate: float) -> dict[str, Any]:
    """Open loop at ``rate`` frames/s in total. Latency of record s: receipt − publish of the frame
    that releases it (s + hold for the daemon, s for the relay); also receipt − publish of frame s."""
    S = h.streams
    assert records % S == 0 and warm % S == 0
    hold = h.p.hold
    per_stream = (warm + records) // S + hold
    run = h.new_run(per_stream)
    run.target = warm + records  # released records; the last `hold` per stream stay held
    total = per_stream * S
    snaps: dict[str, CpuSnapshot] = {}
    run.marks[warm] = lambda: snaps.__setitem__("a", cpu_snapshot(h.p.pid, broker.proc.pid))  # type: ignore[union-attr]
    t0 = time.perf_counter()
    late = 0.0
    for i in range(total):
        due = t0 + i / rate
        wait = due - time.perf_counter()
        if wait > 0:
            await asyncio.sleep(wait)
        else:
            late = max(late, -wait)
        h.send(run, i % S)
    ok = await _await_done(h, run, time.perf_counter() + SETTLE_TIMEOUT, f"{h.p.spec.label} open loop")
    snaps["b"] = cpu_snapshot(h.p.pid, broker.proc.pid)  # type: ignore[union-attr]
    h.run = None
    lo, hi = warm // S, (warm + records) // S
    recv = run.t_recv[:, lo:hi]
    got = recv > 0
    trigger = run.t_pub[:, lo + hold:hi + hold]
    own = run.t_pub[:, lo:hi]
    lat = (recv - trigger)[got] / 1e9
    lat_own = (recv - own)[got] / 1e9
    result: dict[str, Any] = {"records": records, "warm": warm, "rate": rate, "completed": ok,
                              "received": int(got.sum()), "duplicates": run.duplicates, "stale": run.stale,
                              "producer_max_late_s": late, "producer_undelivered": h.undelivered,
                              "redacted": run.redacted, "latency": percentiles(lat),
                              "latency_incl_hold": percentiles(lat_own)}
    if "a" in snaps:
        result["cpu"] = cpu_per_record(snaps["a"], snaps["b"], h.p.pid, int(got.sum()))
    return result


def percentiles(x: np.ndarray) -> dict[str, float]:
    if x.size == 0:
        return {"n": 0}
    q = np.percentile(x, [50, 90, 99, 99.9])
    return {"n": int(x.size), "mean": float(x.mean()), "p50": float(q[0]), "p90": float(q[1]), "p99": float(q[2]),
            "p999": float(q[3]), "max": float(x.max()), "min": float(x.min())}


# ---------------------------------------------------------------------------------- the runs


async def measure_all(sizes: Sizes, broker: Mosquitto, workdir: Path, cpu: int | None, profile_dir: Path | None,
                      left_horizon: int, states: np.ndarray) -> dict[str, Any]:
    results: dict[str, Any] = {"throughput": [], "latency": [], "outbox": [], "batched": [], "pipelines": {}}

    def pipeline(spec: PipelineSpec) -> Pipeline:
        prof = None if profile_dir is None else profile_dir / f"bench_stream_{spec.label}.prof"
        return Pipeline(spec, workdir, broker.port, cpu, prof, left_horizon)

    def record_final(p: Pipeline) -> None:
        results["pipelines"][p.spec.label] = {"kind": p.spec.kind, "streams": p.spec.streams, "delay": p.delay,
                                              "window": p.spec.window, "outbox_fs": p.outbox_fs, **p.final}

    async def abba(hr: Harness, hd: Harness, S: int, records: int, warm: int, into: list[dict[str, Any]]) -> None:
        """Closed-loop repetitions of relay and daemon (both alive) in ABBA order."""
        order = [hr, hd, hd, hr] * ((sizes.thr_reps + 1) // 2)
        counts = {hr: 0, hd: 0}
        for h in order:
            if counts[h] >= sizes.thr_reps:
                continue
            counts[h] += 1
            r = await closed_loop(h, broker, records, warm)
            r.update(pipeline=h.p.spec.kind, label=h.p.spec.label, streams=S, delay=h.p.delay,
                     window=h.p.spec.window, batch=h.p.spec.batch, rep=counts[h], outbox_fs=h.p.outbox_fs)
            into.append(r)
            progress(f"  {h.p.spec.label} rep {counts[h]}: " + _thr_line(r))

    for S in STREAM_COUNTS:
        relay = pipeline(PipelineSpec("relay", f"relay-{S}", S))
        daemon = pipeline(PipelineSpec("daemon", f"daemon-{S}", S))
        daemon0 = pipeline(PipelineSpec("daemon", f"daemon-{S}-delay0", S, delay=0))
        # Throughput: relay and daemon processes alive together, repetitions in ABBA order.
        progress(f"{S} stream(s): throughput, closed loop, {sizes.thr_reps} × {sizes.thr_records:,} records "
                 f"(+{sizes.thr_warm} warm-up) per pipeline")
        async with attached(relay, broker, states) as hr, attached(daemon, broker, states) as hd:
            await abba(hr, hd, S, sizes.thr_records, sizes.thr_warm, results["throughput"])
            progress(f"{S} stream(s): latency, open loop, {LATENCY_RATE:g} records/s, {sizes.lat_records:,} "
                     f"records (+{sizes.lat_warm} warm-up); passthrough")
            r = await open_loop(hr, broker, sizes.lat_records, sizes.lat_warm, LATENCY_RATE)
            r.update(pipeline="relay", label=relay.spec.label, streams=S, delay=None, window=relay.spec.window)
            results["latency"].append(r)
            progress(f"  {r['label']}: " + _lat_line(r))
        record_final(relay)
        record_final(daemon)
        progress(f"{S} stream(s): latency, open loop; privatized with delay = 0")
        async with attached(daemon0, broker, states) as h0:
            r = await open_loop(h0, broker, sizes.lat_records, sizes.lat_warm, LATENCY_RATE)
            r.update(pipeline="daemon", label=daemon0.spec.label, streams=S, delay=0, window=daemon0.spec.window,
                     outbox_fs=daemon0.outbox_fs)
            results["latency"].append(r)
            progress(f"  {r['label']}: " + _lat_line(r))
            if S == 1:  # the reference row of the outbox comparison
                results["outbox"].append(await _variant(h0, broker, sizes, "window 100, outbox in the temp dir"))
        record_final(daemon0)
        if S == 1:  # (nothing else runs meanwhile)
            progress(f"disk sync floor: {sizes.var_lat_records:,} × (4 KiB append + fdatasync) at "
                     f"{LATENCY_RATE:g}/s in the outboxes' directory")
            results["disk_sync"] = f = disk_sync_floor(str(workdir), sizes.var_lat_records, LATENCY_RATE)
            progress(f"  {f['fs']}: p50 {fmt_seconds(f['p50'])}, p99 {fmt_seconds(f['p99'])}, "
                     f"max {fmt_seconds(f['max'])}")

    # Batched: raw messages of BATCH frames (a JSON list), publish.batch_max = BATCH; 1 stream.
    relay = pipeline(PipelineSpec("relay", f"relay-1-batch{BATCH}", 1, batch=BATCH))
    daemon = pipeline(PipelineSpec("daemon", f"daemon-1-batch{BATCH}", 1, batch=BATCH))
    progress(f"batched ({BATCH} frames per raw message, batch_max {BATCH}): closed loop, {sizes.thr_reps} × "
             f"{sizes.batch_records:,} records (+{BATCH * 10} warm-up) per pipeline")
    async with attached(relay, broker, states) as hr, attached(daemon, broker, states) as hd:
        await abba(hr, hd, 1, sizes.batch_records, BATCH * 10, results["batched"])
    record_final(relay)
    record_final(daemon)

    # Outbox effect: 1 stream, delay 0.
    variants = [
        (PipelineSpec("daemon", "daemon-1-delay0-window1", 1, delay=0, window=1), "window 1, outbox in the temp dir"),
        (PipelineSpec("daemon", "daemon-1-delay0-shm", 1, delay=0, outbox_root="/dev/shm"),
         "window 100, outbox on tmpfs (/dev/shm)"),
    ]
    for spec, what in variants:
        if spec.outbox_root is not None and not os.path.isdir(spec.outbox_root):
            progress(f"outbox effect: {what}: skipped ({spec.outbox_root} does not exist)")
            continue
        p = pipeline(spec)
        progress(f"outbox effect: {what}")
        async with attached(p, broker, states) as h:
            results["outbox"].append(await _variant(h, broker, sizes, what))
        record_final(p)
    return results


def disk_sync_floor(directory: str, n: int, rate: float) -> dict[str, Any]:
    """The outbox disk's own latency floor: ``n`` appends of one 4 KiB page, each followed by
    ``fdatasync``, paced at ``rate`` a second like the open-loop runs (a file in ``directory``,
    removed after). The daemon's store transaction does at least this (SQLite's WAL: the group's
    pages, then one sync) before a record may be published (DESIGN.md §6), so no daemon on this disk
    adds less at p99 than this row's p99."""
    fd, path = tempfile.mkstemp(prefix="disk-sync-", dir=directory)
    page, times = os.urandom(4096), []
    try:
        nxt = time.perf_counter()
        for _ in range(n):
            nxt += 1.0 / rate
            time.sleep(max(0.0, nxt - time.perf_counter()))
            t = time.perf_counter()
            os.write(fd, page)
            os.fdatasync(fd)
            times.append(time.perf_counter() - t)
    finally:
        os.close(fd)
        os.unlink(path)
    return {"fs": _filesystem(directory), "dir": directory, **percentiles(np.asarray(times))}


async def _variant(h: Harness, broker: Mosquitto, sizes: Sizes, what: str) -> dict[str, Any]:
    thr = await closed_loop(h, broker, sizes.var_thr_records, sizes.thr_warm)
    progress(f"  {h.p.spec.label}: " + _thr_line(thr))
    lat = await open_loop(h, broker, sizes.var_lat_records, sizes.lat_warm, LATENCY_RATE)
    progress(f"  {h.p.spec.label}: " + _lat_line(lat))
    return {"variant": what, "label": h.p.spec.label, "window": h.p.spec.window, "delay": h.p.delay,
            "outbox_fs": h.p.outbox_fs, "throughput": thr, "latency": lat}


def _thr_line(r: dict[str, Any]) -> str:
    if "records_per_s" not in r:
        return f"incomplete ({r['received']} received)"
    c = r["cpu"]
    return (f"{fmt_rate(r['records_per_s'])} over {r['seconds']:.2f} s; CPU/record: pipeline "
            f"{c['pipeline_us']:.0f} µs (busy {c['pipeline_busy']:.0%}), broker {c['broker_us']:.0f} µs, "
            f"bench {c['bench_us']:.0f} µs; other processes {c['foreign_cores']:.2f} cores")


def _lat_line(r: dict[str, Any]) -> str:
    lat = r["latency"]
    if not lat.get("n"):
        return "no latency samples"
    return (f"p50 {fmt_seconds(lat['p50'])}, p99 {fmt_seconds(lat['p99'])}, max "
            f"{fmt_seconds(lat['max'])} (n = {lat['n']}; {r['received']} received)")


# ------------------------------------------------------------------------------------ reporting


def _median(xs: Sequence[float]) -> float:
    return float(np.median(xs)) if xs else float("nan")


def throughput_summary(results: dict[str, Any], key: str = "throughput",
                       counts: Sequence[int] = STREAM_COUNTS) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for S in counts:
        row: dict[str, Any] = {}
        for kind in ("relay", "daemon"):
            reps = [r for r in results[key] if r["streams"] == S and r["pipeline"] == kind]
            rates = [r["records_per_s"] for r in reps if "records_per_s" in r]
            row[kind] = {"median": _median(rates), "min": min(rates, default=float("nan")),
                         "max": max(rates, default=float("nan")), "reps": rates,
                         "complete": bool(reps) and all(r["completed"] for r in reps),
                         "cpu": {k: _median([r["cpu"][k] for r in reps if "cpu" in r])
                                 for k in ("pipeline_us", "pipeline_loop_us", "pipeline_threads_us", "pipeline_sys_us",
                                           "pipeline_busy", "broker_us", "bench_us")},
                         "duplicates": sum(r["duplicates"] for r in reps),
                         "missing": sum(max(0, r["warm"] + r["records"] - r["received"]) for r in reps)}  # (a batch may bring more)
        row["ratio"] = row["daemon"]["median"] / row["relay"]["median"]
        row["pass"] = bool(row["ratio"] >= THROUGHPUT_TARGET and row["daemon"]["complete"] and row["relay"]["complete"])
        out[S] = row
    return out


def latency_summary(results: dict[str, Any]) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for S in STREAM_COUNTS:
        rel = next(r for r in results["latency"] if r["streams"] == S and r["pipeline"] == "relay")
        dae = next(r for r in results["latency"] if r["streams"] == S and r["pipeline"] == "daemon")
        d50 = dae["latency"].get("p50", float("nan")) - rel["latency"].get("p50", float("nan"))
        d99 = dae["latency"].get("p99", float("nan")) - rel["latency"].get("p99", float("nan"))
        ok = bool(d99 < LATENCY_TARGET_S and dae["completed"] and rel["completed"])
        out[S] = {"relay": rel, "daemon": dae, "added_p50": d50, "added_p99": d99, "pass": ok}
    return out


def _rate_cell(x: dict[str, Any]) -> str:
    if not np.isfinite(x["median"]):
        return "—"
    if len(x["reps"]) > 1:
        return f"{fmt_rate(x['median'])} [{x['min'] / 1e3:.3g}–{x['max'] / 1e3:.3g} k]"
    return fmt_rate(x["median"])


def throughput_table(summary: dict[int, dict[str, Any]]) -> str:
    rows = []
    for S, row in summary.items():
        for kind, name in (("relay", "passthrough"), ("daemon", "privatized")):
            x = row[kind]
            c = x["cpu"]
            rows.append([S, name, _rate_cell(x), f"{c['pipeline_us']:.0f} ({c['pipeline_loop_us']:.0f} + "
                         f"{c['pipeline_threads_us']:.0f})", f"{c['pipeline_sys_us']:.0f}",
                         f"{c['pipeline_busy']:.0%}", f"{c['broker_us']:.0f}",
                         f"{c['bench_us']:.0f}", f"{x['missing']} / {x['duplicates']}",
                         f"{row['ratio']:.0%}" if kind == "daemon" else ""])
    return markdown_table(["streams", "pipeline", "records/s: median [min–max]",
                           "pipeline CPU µs/rec (loop + threads)", "of which system", "pipeline core busy",
                           "broker µs/rec", "producer+consumer µs/rec", "missing / dup",
                           "privatized ÷ passthrough"], rows, align="llrrrrrrrr")


def _ms(x: float | None) -> str:
    return "—" if x is None or not np.isfinite(x) else f"{x * 1e3:.2f}"


def latency_table(summary: dict[int, dict[str, Any]]) -> str:
    rows = []
    for S, row in summary.items():
        for kind, name in (("relay", "passthrough"), ("daemon", "privatized (delay 0)")):
            r = row[kind]
            lat, own = r["latency"], r["latency_incl_hold"]
            rows.append([S, name, lat.get("n", 0), _ms(lat.get("p50")), _ms(lat.get("p90")), _ms(lat.get("p99")),
                         _ms(lat.get("max")), _ms(own.get("p50")) if kind == "daemon" else "",
                         _ms(own.get("p99")) if kind == "daemon" else ""])
        rows.append([S, "**added by privatization**", "", f"**{_ms(row['added_p50'])}**", "",
                     f"**{_ms(row['added_p99'])}**", "", "", ""])
    return markdown_table(["streams", "pipeline", "n", "p50 ms", "p90 ms", "p99 ms", "max ms",
                           "p50 ms incl. hold", "p99 ms incl. hold"], rows, align="llrrrrrrr")


def outbox_table(results: dict[str, Any]) -> str:
    rows = []
    for v in results["outbox"]:
        thr, lat = v["throughput"], v["latency"]["latency"]
        c = thr.get("cpu", {})
        nan = float("nan")
        rows.append([v["variant"], v["outbox_fs"] or "?",
                     fmt_rate(thr["records_per_s"]) if "records_per_s" in thr else "incomplete",
                     f"{c.get('pipeline_loop_us', nan):.0f} + {c.get('pipeline_threads_us', nan):.0f}",
                     f"{c.get('pipeline_busy', float('nan')):.0%}", _ms(lat.get("p50")), _ms(lat.get("p99"))])
    return markdown_table(["daemon, 1 stream, delay 0", "outbox fs", "records/s (closed loop)",
                           "pipeline CPU µs/rec (loop + threads)", "pipeline core busy",
                           f"p50 ms @ {LATENCY_RATE:g}/s", f"p99 ms @ {LATENCY_RATE:g}/s"], rows, align="llrrrrr")


def batched_pass(row: dict[str, Any]) -> tuple[bool, bool]:
    """The batched targets: records/s end to end, and the daemon's CPU per record."""
    d = row["daemon"]
    return (bool(d["complete"] and d["median"] >= BATCH_RATE_TARGET),
            bool(d["complete"] and d["cpu"]["pipeline_us"] <= BATCH_CPU_TARGET_US))


def targets_table(thr: dict[int, dict[str, Any]], lat: dict[int, dict[str, Any]],
                  batched: dict[int, dict[str, Any]], disk: dict[str, Any] | None = None) -> str:
    rows = []
    b = batched[1]
    rate_ok, cpu_ok = batched_pass(b)
    rows.append([f"batch_max {BATCH}, 1 stream: ≥ {fmt_rate(BATCH_RATE_TARGET)} end to end",
                 f"{fmt_rate(b['daemon']['median'])} ({b['ratio']:.0%} of the relay's {fmt_rate(b['relay']['median'])})",
                 verdict(rate_ok)])
    rows.append([f"batch_max {BATCH}, 1 stream: daemon CPU ≤ {BATCH_CPU_TARGET_US:g} µs per record",
                 f"{b['daemon']['cpu']['pipeline_us']:.1f} µs (relay {b['relay']['cpu']['pipeline_us']:.1f} µs)",
                 verdict(cpu_ok)])
    for S in STREAM_COUNTS:
        rows.append([f"throughput, {S} stream(s): privatized ≥ {THROUGHPUT_TARGET:.0%} of passthrough",
                     f"{thr[S]['ratio']:.0%} ({fmt_rate(thr[S]['daemon']['median'])} vs "
                     f"{fmt_rate(thr[S]['relay']['median'])})", verdict(thr[S]["pass"])])
    for S in STREAM_COUNTS:  # (no target: says whether the pipeline or the harness bounds the rate)
        d, r = thr[S]["daemon"]["cpu"], thr[S]["relay"]["cpu"]
        rows.append([f"CPU per record, {S} stream(s): privatized ÷ passthrough (pipeline core busy)",
                     f"{d['pipeline_us'] / r['pipeline_us']:.2f}× ({d['pipeline_us']:.0f} vs {r['pipeline_us']:.0f} µs; "
                     f"busy {d['pipeline_busy']:.0%} vs {r['pipeline_busy']:.0%})", "info"])
    for S in STREAM_COUNTS:
        rows.append([f"latency, {S} stream(s): privatization adds < {LATENCY_TARGET_S * 1e3:g} ms at p99",
                     f"+{_ms(lat[S]['added_p99'])} ms (p99 {_ms(lat[S]['daemon']['latency'].get('p99'))} vs "
                     f"{_ms(lat[S]['relay']['latency'].get('p99'))} ms)", verdict(lat[S]["pass"])])
    if disk is not None:  # (no target: the floor the durable store puts under the added latency)
        rows.append([f"latency floor: the outbox disk's 4 KiB append + fdatasync alone, at {LATENCY_RATE:g}/s "
                     f"({disk['fs']})", f"p50 {_ms(disk['p50'])} ms, p99 {_ms(disk['p99'])} ms", "info"])
    return markdown_table(["target", "measured", ""], rows, align="lrl")


def profile_summary(profile_dir: Path, labels: Sequence[str], top: int = 12) -> str:
    """Top functions by own time of each profiled pipeline (cProfile; event-loop thread only)."""
    import io
    import pstats

    parts = []
    for label in labels:
        path = profile_dir / f"bench_stream_{label}.prof"
        if not path.exists():
            continue
        views = []
        for key, restriction in (("tottime", ()), ("cumulative", ("streamguard",))):
            buf = io.StringIO()
            try:
                st = pstats.Stats(str(path), stream=buf)
            except TypeError:  # nothing was profiled (no closed-loop run in this process)
                break
            st.sort_stats(key).print_stats(*restriction, top)
            text = buf.getvalue()
            views.append(f"by {key}{' (streamguard only)' if restriction else ''}:\n"
                         + (text[text.find("   ncalls"):] if "   ncalls" in text else text).rstrip())
        if not views:
            continue
        total = getattr(st, "total_tt", float("nan"))
        body = "\n\n".join(views)
        parts.append(f"### {label} (cProfile total {total:.2f} s)\n\n```\n{body}\n```")
    return "\n\n".join(parts)


# ------------------------------------------------------------------------------------------ main


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--no-pin", action="store_true",
                        help=f"do not pin (default: broker and this process on CPU {CPU_BENCH}, pipeline on "
                             f"CPU {CPU_PIPELINE})")
    parser.add_argument("--profile", action="store_true",
                        help="run the pipeline processes under cProfile (slower; writes .prof files to --out)")
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)  # internal: a pipeline process
    args = parser.parse_args(argv)
    if args.serve is not None:
        return _serve(args.serve)

    sizes = QUICK if args.quick else FULL
    load_before = os.getloadavg()
    out = output_dir(args.out)
    stem = result_stem("bench_stream", args.quick)
    env = environment()
    pin, placement = pin_this_process(args.no_pin)
    plan, states = bench_states(max(STREAM_COUNTS), 5000)
    t_start = time.perf_counter()
    with broker_in(Path(tempfile.mkdtemp(prefix="bench_stream-")), pin, placement) as broker:
        results = asyncio.run(measure_all(sizes, broker, broker.workdir, CPU_PIPELINE if pin else None,
                                          out if args.profile else None, plan.left_horizon, states))
    wall = time.perf_counter() - t_start

    thr = throughput_summary(results)
    lat = latency_summary(results)
    bat = throughput_summary(results, "batched", (1,))
    temp_fs = _filesystem(tempfile.gettempdir())
    foreign = [r["cpu"]["foreign_cores"] for r in results["throughput"] + results["latency"] if "cpu" in r]
    foreign += [v[k]["cpu"]["foreign_cores"] for v in results["outbox"] for k in ("throughput", "latency")
                if "cpu" in v[k]]
    busy_runs = sum(f > FOREIGN_WARN for f in foreign)
    load_line = (f"Load average before the run: {load_before[0]:.2f}. CPU used by other processes during the "
                 f"measured intervals: median {_median(foreign):.2f} cores, max {max(foreign, default=0.0):.2f}"
                 + (f" — **warning: {busy_runs} of {len(foreign)} intervals had more than {FOREIGN_WARN:g} core "
                    f"busy elsewhere; the numbers are disturbed**." if busy_runs else "."))
    daemon_finals = {k: v for k, v in results["pipelines"].items() if v["kind"] == "daemon"}
    resends = sum((v.get("publisher") or {}).get("resends", 0) for v in daemon_finals.values())
    rejected = sum(v.get("rejected", 0) for v in daemon_finals.values())
    redelivered = sum(v.get("duplicates", 0) for v in daemon_finals.values())
    parts = [
        f"# streamguard end-to-end streaming benchmark{' (quick)' if args.quick else ''}",
        environment_line(env),
        f"Mosquitto {broker_version()} on 127.0.0.1 (set_tcp_nodelay true, persistence false); aiomqtt clients "
        f"with TCP_NODELAY, QoS 1; plain asyncio event loops; {placement}. Streams: binary chain α = {ALPHA}, "
        f"β = {BETA}, ε = {EPS}, design = {DESIGN} (horizons {plan.left_horizon} + {plan.right_horizon}), every "
        f"{PRIVATE_EVERY}th frame of a stream flagged private, CSPRNG. Daemon: publish window {PUBLISH_WINDOW}, "
        f"batch_max 1, outbox in {tempfile.gettempdir()} ({temp_fs}; SQLite WAL, synchronous=FULL). Relay: "
        f"MqttTransport, subscribe + republish unchanged, QoS 1, window {PUBLISH_WINDOW}.",
        f"## Throughput, closed loop ({sizes.thr_reps} × {sizes.thr_records:,} records per pipeline after "
        f"{sizes.thr_warm} warm-up, end-to-end window {E2E_WINDOW} + the daemon's held records)",
        f"Daemon release delay = {plan.left_horizon} (the default, = left horizon): it holds "
        f"{plan.left_horizon + 1} records per stream, which the window allows in addition. CPU per record "
        f"from /proc over the measured interval; \"threads\" of the daemon is its SQLite outbox worker.",
        throughput_table(thr),
        f"## Latency, open loop at {LATENCY_RATE:g} records/s in total ({sizes.lat_records:,} records after "
        f"{sizes.lat_warm} warm-up)",
        "**The daemon runs with delay = 0 for these runs** (the intentional release delay is excluded). Even "
        "at delay 0 it holds each record until the next frame of its stream arrives, so privatized latency is "
        "measured from the publish of that releasing frame (s + 1) to the consumer's receipt of record s; "
        "\"incl. hold\" is from the publish of frame s itself (adds one inter-frame interval of the stream: "
        f"{1e3 * STREAM_COUNTS[0] / LATENCY_RATE:g} ms with 1 stream, {1e3 * STREAM_COUNTS[-1] / LATENCY_RATE:g} ms "
        f"with {STREAM_COUNTS[-1]}).",
        latency_table(lat),
        f"## Outbox effect (1 stream, delay 0; closed loop {sizes.var_thr_records:,} records, open loop "
        f"{sizes.var_lat_records:,} records at {LATENCY_RATE:g}/s)",
        outbox_table(results),
        f"## Batched: {BATCH} frames per raw message, publish.batch_max = {BATCH} (closed loop, "
        f"{sizes.thr_reps} × {sizes.batch_records:,} records per pipeline)",
        f"The producer publishes each raw message as a JSON list of {BATCH} frames of one stream (docs/daemon.md: "
        f"batches of raw frames); the daemon decides them in chunks of one kernel call and publishes lists of up "
        f"to {BATCH} records; the relay forwards the lists unchanged. End-to-end window {BATCH_WINDOW} messages "
        f"plus the daemon's held records.",
        throughput_table(bat),
        "## Targets",
        targets_table(thr, lat, bat, results.get("disk_sync")),
        f"Checks: daemon publisher resends {resends}, frames rejected by the daemon {rejected}, "
        f"taken as redeliveries {redelivered}. Total "
        f"{wall:.0f} s. {load_line}",
    ]
    if args.profile:
        parts += ["## Profiles (cProfile, event-loop thread only; timings above are inflated by profiling)",
                  profile_summary(out, list(results["pipelines"]))]
    report = "\n\n".join(parts) + "\n"
    print(report)
    (out / f"{stem}.md").write_text(report)
    write_json(out / f"{stem}.json", {
        "environment": env,
        "config": {"quick": args.quick, "sizes": asdict(sizes), "placement": placement, "pinned": pin,
                   "alpha": ALPHA, "beta": BETA, "epsilon": EPS, "design": DESIGN,
                   "left_horizon": plan.left_horizon, "right_horizon": plan.right_horizon,
                   "private_every": PRIVATE_EVERY, "e2e_window": E2E_WINDOW, "publish_window": PUBLISH_WINDOW,
                   "latency_rate": LATENCY_RATE, "stream_counts": list(STREAM_COUNTS),
                   "temp_dir": tempfile.gettempdir(), "temp_fs": temp_fs, "mosquitto": broker_version(),
                   "profile": args.profile, "load_average_before": load_before},
        "throughput": results["throughput"],
        "throughput_summary": thr,
        "batched": results["batched"],
        "batched_summary": bat,
        "latency": results["latency"],
        "latency_summary": {S: {k: v for k, v in row.items() if k not in ("relay", "daemon")}
                            for S, row in lat.items()},
        "outbox": results["outbox"],
        "pipelines": results["pipelines"],
        "targets": {"throughput_ratio_min": THROUGHPUT_TARGET, "added_p99_max_s": LATENCY_TARGET_S,
                    **{f"throughput_{S}_pass": thr[S]["pass"] for S in STREAM_COUNTS},
                    **{f"latency_{S}_pass": lat[S]["pass"] for S in STREAM_COUNTS},
                    "batched_rate_min": BATCH_RATE_TARGET, "batched_cpu_us_max": BATCH_CPU_TARGET_US,
                    "batched_rate_pass": batched_pass(bat[1])[0], "batched_cpu_pass": batched_pass(bat[1])[1]},
        "seconds": wall,
    })
    progress(f"wrote {out / stem}.md and {stem}.json")
    return 0


def broker_version() -> str:
    if MOSQUITTO is None:
        return "?"
    try:
        text = subprocess.run([MOSQUITTO, "-h"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return "?"
    first = text.splitlines()[0] if text else ""
    return first.split("version", 1)[1].strip() if "version" in first else "?"


if __name__ == "__main__":
    sys.exit(main())
