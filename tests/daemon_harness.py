"""Shared pieces of the daemon end-to-end tests (test_daemon_e2e.py, test_daemon_restart.py).

- :class:`Spy` — a reconnecting MQTT subscriber that keeps every message it sees, in order.
- :func:`publish_all` — one producer connection publishing (topic, payload) pairs in order, QoS 1.
- :class:`Truth` — ground truth of one simulated stream (firmware_sim frames carry it in their
  meta): every physical step (accepted reading or rejected frame), seq → state, and where marks go.
- :func:`expected_rows` — the plan's redaction rows for every physical step, given the marks
  (element-wise maximum of the table placed at each private position), written here from the
  issue's semantics, independently of streamguard.stream.privatizer.
- :func:`check_message` — a message on a non-raw topic must be a well-formed sanitized record,
  status or privacy report (nothing else, nothing raw).
- :func:`binomial_tail` — exact two-sided binomial tail, for the statistical checks.

Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import signal
import subprocess
from pathlib import Path
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiomqtt
import numpy as np

from firmware_sim import Frame
from streamguard.config import BrokerConfig, PublishConfig, Settings
from streamguard.redaction.plan import StreamPlan
from streamguard.ledger.store import Ledger
from streamguard.stream.daemon import Daemon
from streamguard.stream.outbox import AsyncOutbox, Outbox
from streamguard.stream.transport import Backoff, Message, MqttTransport, reconnecting

FAST = Backoff(base=0.02, cap=0.2)
RECORD_KEYS = {"device", "stream", "seq", "position", "ts", "value", "redacted", "redaction", "mode"}
AGGREGATE_KEYS = {"device", "stream", "index", "kind", "lo", "hi", "values", "sigma", "beta", "lipschitz", "epsilon",
                  "model", "witness", "influence", "mode"}
PRIVACY_KEYS = {"stream", "epsilon", "horizons", "plan_leakage", "open_marks", "recent_marks", "restarted",
                "counters", "deterministic", "next_seq", "pending", "delay"}


# -- MQTT helpers ------------------------------------------------------------------------------
class Spy:
    """Subscribes to ``topic_filter`` (reconnecting; ``persistent`` keeps a broker-side session)
    and keeps every message in arrival order."""

    def __init__(self, cfg: BrokerConfig, topic_filter: str, *, name: str = "spy", persistent: bool = False) -> None:
        self.transport = MqttTransport(cfg, PublishConfig(), device=name, status_topic=f"spy/{name}/status",
                                       will=False, timeout=3.0, persistent_session=persistent)
        self.topic_filter = topic_filter
        self.messages: list[Message] = []
        self.subscribed = asyncio.Event()
        self._changed = asyncio.Event()

    async def _session(self, t: MqttTransport) -> None:
        await t.subscribe(self.topic_filter)
        self.subscribed.set()
        async for m in t.messages():
            self._received(m)
            self._changed.set()

    def _received(self, m: Message) -> None:
        self.messages.append(m)

    async def run(self) -> None:
        await reconnecting(self.transport, self._session, backoff=FAST)

    async def wait_until(self, done: Callable[[], bool], timeout: float, what: str = "condition") -> None:
        try:
            async with asyncio.timeout(timeout):
                while not done():
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}") from None

    # views
    def on(self, suffix: str) -> list[Message]:
        return [m for m in self.messages if m.topic.endswith(suffix)]

    def json_on(self, topic: str) -> list[dict[str, Any]]:
        return [json.loads(m.payload) for m in self.messages if m.topic == topic]

    def states(self, status_topic: str) -> list[str]:
        return [json.loads(m.payload)["state"] for m in self.messages if m.topic == status_topic]

    def records(self, data_topic: str) -> list[tuple[int, bytes]]:
        """(seq, payload bytes) of every record on ``data_topic``, in arrival order (batches split)."""
        out = []
        for m in self.messages:
            if m.topic != data_topic:
                continue
            body = json.loads(m.payload)
            for r in body if isinstance(body, list) else [body]:
                out.append((r["seq"], m.payload if not isinstance(body, list) else json.dumps(r).encode()))
        return out

    def seqs(self, data_topic: str) -> set[int]:
        return {s for s, _ in self.records(data_topic)}


@asynccontextmanager
async def running(*coros: Coroutine[Any, Any, Any]) -> AsyncIterator[list[asyncio.Task[Any]]]:
    """Run coroutines as tasks for the duration of the block, then cancel them."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        yield tasks
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def publish_all(cfg: BrokerConfig, items: Iterable[tuple[str, bytes]], *, identifier: str = "producer",
                      pause_every: int = 0, pause: float = 0.0,
                      tls: Any = None, on_sent: Callable[[int], None] | None = None) -> int:
    """Publish ``items`` in order over one connection, QoS 1, each acknowledged before the next
    (so a subscriber receives them in this order). Returns how many were acknowledged."""
    import ssl

    ctx = None
    if cfg.tls:
        ctx = ssl.create_default_context(cafile=None if cfg.ca_file is None else str(cfg.ca_file))
    n = 0
    async with aiomqtt.Client(cfg.host, cfg.port, identifier=identifier, username=cfg.username,
                              password=cfg.secret(), tls_context=ctx) as client:
        for topic, payload in items:
            await client.publish(topic, payload, qos=1)
            n += 1
            if on_sent is not None:
                on_sent(n)
            if pause_every and n % pause_every == 0:
                await asyncio.sleep(pause)
    return n


def stop_daemon(p: subprocess.Popen[bytes]) -> int:
    """SIGTERM a daemon process and wait for it (25 s, then SIGKILL and 10 s more): its exit status."""
    p.send_signal(signal.SIGTERM)
    try:
        return p.wait(25)
    except subprocess.TimeoutExpired:
        p.kill()
        return p.wait(10)


def subscribed(daemon: Daemon) -> bool:
    """The running daemon's input subscriptions are confirmed (False before its parts exist)."""
    return hasattr(daemon, "sessions") and daemon.sessions.inputs_ready.is_set()


def claimed(daemon: Daemon) -> bool:
    """The running daemon has published ``online`` (False before its parts exist)."""
    return hasattr(daemon, "sessions") and daemon.sessions.claimed


async def until(done: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``done`` every 20 ms; fail naming ``what`` after ``timeout`` seconds."""
    try:
        async with asyncio.timeout(timeout):
            while not done():
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout} s waiting for {what}") from None


@asynccontextmanager
async def daemon_running(settings: Settings, **kwargs: Any) -> AsyncIterator[tuple[Daemon, asyncio.Event,
                                                                                    asyncio.Task[None]]]:
    """Run ``Daemon(settings).run(stop)`` as a task; on exit set ``stop`` and await it (bounded)."""
    daemon = Daemon(settings, **kwargs)
    stop = asyncio.Event()
    task = asyncio.create_task(daemon.run(stop), name="daemon")
    try:
        yield daemon, stop, task
    finally:
        stop.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(task), 30)
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


# -- ground truth ------------------------------------------------------------------------------
@dataclass
class Truth:
    """One simulated stream as the daemon should see it.

    ``steps[i]`` is physical step i: (accepted?, state or None, ts, flagged?); ``seq_phys[s]`` the
    physical index of accepted record s; ``now_marks`` the physical indices that a ``"now"``
    command (sent right after the reading) makes private.
    """

    labels: tuple[str, ...]
    steps: list[tuple[bool, int | None, float, bool]] = field(default_factory=list)
    seq_phys: list[int] = field(default_factory=list)
    now_marks: set[int] = field(default_factory=set)

    @property
    def accepted(self) -> int:
        return len(self.seq_phys)

    def state_of_seq(self, seq: int) -> int:
        st = self.steps[self.seq_phys[seq]][1]
        assert st is not None
        return st

    def label_of_seq(self, seq: int) -> str:
        return self.labels[self.state_of_seq(seq)]

    def flag_marks(self) -> set[int]:
        """Steps whose frame asked to be private — a rejected frame too, when it may carry the
        request (:func:`may_ask_private`)."""
        return {i for i, (_, _, _, flag) in enumerate(self.steps) if flag}

    def rejected(self) -> int:
        return sum(not ok for ok, *_ in self.steps)


def truth_of(frames: Sequence[Frame], stream: str, labels: Sequence[str]) -> Truth:
    t = Truth(tuple(labels))
    for f in frames:
        if f.stream != stream:
            continue
        if f.meta.channel == "cmd":
            assert t.steps and t.steps[-1][0], "a 'now' command follows its (accepted) reading"
            t.now_marks.add(len(t.steps) - 1)
            continue
        ok = f.meta.accepted
        flag = b'"private": true' in f.payload if ok else may_ask_private(f.payload)
        if ok:
            t.seq_phys.append(len(t.steps))
        t.steps.append((ok, f.meta.state if ok else None, f.meta.ts, flag))
    return t


def daemon_toml(conf: Path, outbox: Path, port: int, *, base: str, device: str, stream: str,
                labels: Sequence[str], source: str = "mqtt", epsilon: float = 1.0, client_id: str | None = None,
                extra: str = "") -> Path:
    """Write the TOML configuration of a one-stream redaction daemon (model α = 0.1, β = 0.2, exact
    design) on a loopback broker at ``port`` to ``conf``; ``extra`` is appended (e.g. aggregates)."""
    conf.write_text(f"""device = "{device}"
topic_base = "{base}"
log_level = "WARNING"
[broker]
host = "127.0.0.1"
port = {port}
{f'client_id = "{client_id}"' if client_id else ''}
[outbox]
path = "{outbox}"
[[streams]]
name = "{stream}"
labels = {json.dumps(list(labels))}
source = "{source}"
epsilon = {epsilon}
design = "exact"
[streams.model]
alpha = 0.1
beta = 0.2
{extra}""")
    return conf


def may_ask_private(payload: bytes) -> bool:
    """Issue 9 item 8, from its text: a rejected frame is private unless it decodes as JSON in which
    no object has a key "private" (any case) with a value other than false. Undecodable frames
    (not UTF-8, not JSON, larger than the 16 KB frame limit, nested too deeply) may carry one."""
    if len(payload) > 16 * 1024:
        return True
    found: list[bool] = []

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        found.extend(v is not False for k, v in pairs if k.strip().lower() == "private")
        return dict(pairs)

    try:
        json.loads(payload.decode("utf-8"), object_pairs_hook=hook)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return True
    return any(found)


def expected_rows(n_steps: int, marks: Iterable[int], plan: StreamPlan) -> np.ndarray:
    """(n_steps, 2) redaction probabilities: for each physical step, the element-wise maximum over
    the marks p of the plan's row at signed distance t − p (1 at p itself, 0 beyond the horizons)."""
    table, offsets = plan.table(), plan.offsets()
    rows = np.zeros((n_steps, 2))
    for p in marks:
        for d, row in zip(offsets, table):
            t = p + int(d)
            if 0 <= t < n_steps:
                np.maximum(rows[t], row, out=rows[t])
    return rows


def covering_marks(n_steps: int, marks: Iterable[int], plan: StreamPlan) -> list[list[int]]:
    """For each physical step t, the marks p whose window (−H_ℓ..H_r around p) covers t."""
    H, R = plan.left_horizon, plan.right_horizon
    cover: list[list[int]] = [[] for _ in range(n_steps)]
    for p in sorted(marks):
        for t in range(max(0, p - H), min(n_steps, p + R + 1)):
            cover[t].append(p)
    return cover


# -- message validation ------------------------------------------------------------------------
def check_message(m: Message, *, base: str, device: str, labels: dict[str, Sequence[str]],
                  mode: str | None = None) -> str:
    """Validate one message on a non-raw, non-command topic; returns its kind (data, status,
    privacy, aggregate). Raises AssertionError naming the topic if it is anything else."""
    parts = m.topic.split("/")
    prefix = base.split("/")
    assert parts[: len(prefix)] == prefix and parts[len(prefix)] == device, m.topic
    rest = parts[len(prefix) + 1:]
    body = json.loads(m.payload)  # every output is JSON (raises otherwise)
    if rest == ["status"]:
        assert isinstance(body, dict) and body.get("device") == device and body.get("state") in ("online", "offline"), \
            m.topic
        return "status"
    assert len(rest) == 2 and rest[0] in labels, m.topic
    stream, kind = rest
    if kind == "data":
        for r in body if isinstance(body, list) else [body]:
            assert isinstance(r, dict) and set(r) == RECORD_KEYS, (m.topic, sorted(r))
            assert r["device"] == device and r["stream"] == stream
            assert isinstance(r["seq"], int) and r["seq"] >= 0 and isinstance(r["ts"], float)
            assert isinstance(r["redacted"], bool) and (r["value"] is None) == r["redacted"]
            assert r["redacted"] or r["value"] in labels[stream]
            row = r["redaction"]  # the redaction row used: Pr(⊥ | state) per state
            assert isinstance(row, list) and len(row) == len(labels[stream]) and all(0 <= x <= 1 for x in row)
            assert r["mode"] in ("csprng", "deterministic") and (mode is None or r["mode"] == mode)
        return "data"
    if kind == "aggregate":  # a noisy window: positions and noisy numbers only
        assert isinstance(body, dict) and AGGREGATE_KEYS <= set(body) and body["stream"] == stream, m.topic
        assert 0 <= body["lo"] <= body["hi"] and body["sigma"] > 0 and body["beta"] > 0
        assert body["kind"] in ("histogram", "count", "mean") and all(isinstance(v, (int, float)) for v in body["values"])
        assert body["mode"] in ("csprng", "deterministic") and (mode is None or body["mode"] == mode)
        return "aggregate"
    if kind == "privacy":
        assert isinstance(body, dict) and PRIVACY_KEYS <= set(body) and body["stream"] == stream, m.topic
        assert isinstance(body["restarted"], bool)
        for mk in body["open_marks"] + body["recent_marks"]:
            assert set(mk) >= {"seq", "source", "late", "honoured", "achieved"}
        return "privacy"
    raise AssertionError(f"unexpected output topic {m.topic}")


def check_outputs(messages: Iterable[Message], *, base: str, device: str, labels: dict[str, Sequence[str]],
                  mode: str | None = None, inputs: Sequence[str] = ("raw", "cmd")) -> dict[str, int]:
    """Validate every message whose topic is not an input topic; count them by kind. The daemon's
    own round-trip marker on ``<base>/<device>/sentinel`` (an opaque token: the identity check
    at a first start, the buttons' connection) is no output: the shipped bridge does not forward it."""
    counts: dict[str, int] = {}
    sentinel = f"{base}/{device}/sentinel"
    for m in messages:
        if m.topic.split("/")[-1] in inputs or m.topic == sentinel:
            continue
        kind = check_message(m, base=base, device=device, labels=labels, mode=mode)
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def first_occurrences(records: Sequence[tuple[int, bytes]]) -> tuple[list[int], dict[int, set[bytes]]]:
    """(seqs in order of first arrival, seq → every distinct payload received for it)."""
    order: list[int] = []
    payloads: dict[int, set[bytes]] = {}
    for s, p in records:
        if s not in payloads:
            order.append(s)
        payloads.setdefault(s, set()).add(p)
    return order, payloads


# -- statistics --------------------------------------------------------------------------------
def binomial_tail(k: int, n: int, p: float) -> float:
    """min(Pr[X ≤ k], Pr[X ≥ k]) for X ~ Binomial(n, p), exact (log-space sums)."""
    if p <= 0.0 or p >= 1.0:
        return 1.0 if (k == 0 and p <= 0.0) or (k == n and p >= 1.0) else 0.0
    lp, lq = math.log(p), math.log1p(-p)

    def logpmf(i: int) -> float:
        return math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq

    def logsum(xs: list[float]) -> float:
        m = max(xs)
        return m + math.log(sum(math.exp(x - m) for x in xs))

    lower = logsum([logpmf(i) for i in range(0, k + 1)])
    upper = logsum([logpmf(i) for i in range(k, n + 1)])
    return min(1.0, math.exp(min(lower, upper)))


@asynccontextmanager
async def restored(settings: Settings) -> AsyncIterator[tuple[Daemon, AsyncOutbox]]:
    """A daemon restored from its outbox and ledger, its parts created (:meth:`Daemon._assemble`),
    without a broker (its start-up only), and its open outbox; the ledger is closed on exit."""
    d = Daemon(settings)
    async with await AsyncOutbox.open(Outbox.from_config, settings.outbox) as box:
        d._ledger = ledger = await box.run(lambda _b: Ledger.open(settings.ledger_path()))
        try:
            await d._restore(box)
            d._assemble(box)
            yield d, box
        finally:
            await box.run(lambda _b: ledger.close())
