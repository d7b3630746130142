"""The drift guard per time-of-day block (issue 25 item 4; docs/model-sets.md §6).

**The claim it tests.** A model states where *every step's* kernel lies: a homogeneous model set
(ModelSet) says each step's row i lies in its set, a set-chain (SetChain) says a step taken from a
record in block b has its rows in block b's set — chosen anew at each step, possibly depending on
the past. The guard tests that claim per (block, row) with the transitions it observes, so a sensor
that follows the model on average but not at 03:00 is caught (the pooled guard, :mod:`.drift`,
averages the hours and is blind to it). A homogeneous model gets the fixed partition of the day
into :data:`HOMOGENEOUS_BLOCKS` blocks of UTC clock time (any fixed partition keeps the test valid;
the partition only decides where the evidence is looked for); a set-chain its own blocks.

**What it reads.** As :mod:`.drift`: only transitions between records released *unchanged with
probability 1* (an all-zero row) at consecutive steps, with a known time. Everything it uses is
public, so its decision and the fail-closed reaction are post-processing of the released stream:
no privacy budget, no ledger charge.

**The test.** For each (block b, row i, entry j) let [lo, hi] be the range of entry j over the
block's row set (exact projection of {lo ≤ K ≤ hi, rows sum to 1} for a set-chain; a box's α/β
ranges, a region's entry bounds, a finite set's member-wise min and max for a ModelSet). Each
observed transition out of i in block b adds x = 1[it goes to j] to the counts (s hits, f misses).
For θ > hi the likelihood ratio factor θ/hi (hit) or (1−θ)/(1−hi) (miss) has conditional mean
p·θ/hi + (1−p)(1−θ)/(1−hi) ≤ 1 for *every* p ≤ hi (it increases with p and is 1 at p = hi), so

    L⁺_θ = (θ/hi)^s ((1−θ)/(1−hi))^f

is a non-negative supermartingale under the claim whatever kernel of the set each step uses — also
when it varies from step to step or depends on the past (drift inside the set, second-order
effects). Likewise L⁻_θ for θ < lo. The statistic of (b, i) is the mixture

    M_{b,i} = mean over entries j, sides ±, and the grid θ_g (odds(θ_g) = odds(hi)·ρ^g or
              odds(lo)/ρ^g, ρ = 2^{1/4}, g = 1..G) of L^±_θ

(a component whose side cannot be violated — hi = 1, lo = 0 — counts 0), a non-negative
supermartingale with M ≤ 1 at the start. Ville's inequality: Pr(M_{b,i} ever ≥ B·k/δ) ≤ δ/(B·k),
and a union bound over the B blocks and k rows gives

    Pr(the guard ever fires while the model's claim holds) ≤ δ,

however often it is checked. An entry that the set forbids (hi = 0) and that is observed is an
impossible event under the claim: it fires at once.

**Across restarts.** The statistic is a function of the counts only. The counts are persisted
(:class:`DriftState`, written atomically and synced) *before* each test, and only persisted counts
are ever tested; at a restart they are read back and the martingale continues (transitions while
the daemon was down, and those after the last save of a crash, are simply unobserved — like a
missing reading). So δ bounds the false-alarm rate over the whole life of the model, not per run.
A state for another model, another partition or another δ is discarded with a log line (that test
then starts afresh); an unreadable one fails closed.

**Power** (:func:`transitions_to_alarm`, :func:`days_to_alarm`): with a row drifted to ``row``, the
counts grow as N·row; the guard fires once log M_{b,i}(N·row) ≥ log(B·k/δ). The smallest such N,
divided by the transitions out of i observed per day in block b, is the expected number of days to
the alarm (tests/test_block_drift.py checks it against simulation).

Assumption for the false-alarm rate (not for privacy), as in :mod:`.drift`: whether a transition
is observed does not depend on where it goes.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..support.private_files import write_private
from .modelset import ModelSet
from .scenarios import smoothed
from .setchain import SetChain

log = logging.getLogger(__name__)

#: Blocks of a homogeneous model: the day cut into this many equal blocks of UTC clock time.
HOMOGENEOUS_BLOCKS = 6
DAY = 86400.0
#: The default false-alarm rate over the model's whole life (all runs of the daemon).
FALSE_ALARM = 1e-3
#: Persist and test after this many new observed transitions (any schedule keeps δ valid).
CHECK_EVERY = 64
#: The grid of alternatives: odds ratios ρ^g, g = 1..GRID, ρ = 2^{1/4} (up to 2^12).
RHO = 2.0 ** 0.25
GRID = 48
STATE_VERSION = 1


@dataclass(frozen=True)
class Partition:
    """The time-of-day blocks the guard tests and each block's entry ranges ``ranges[b, i, j]`` =
    [lo, hi] of entry (i, j) over block b's row set."""

    starts: NDArray[np.float64]
    ranges: NDArray[np.float64]
    period: float = DAY
    utc_offset: float = 0.0

    @property
    def blocks(self) -> int:
        return int(self.ranges.shape[0])

    @property
    def k(self) -> int:
        return int(self.ranges.shape[1])

    def block_at(self, ts: float) -> int:
        """The block of the record at epoch ``ts``."""
        return int(np.searchsorted(self.starts, (ts + self.utc_offset) % self.period, side="right") - 1)

    def signature(self) -> str:
        """What a persisted state must match besides the model: the blocks' clock."""
        return f"{self.blocks}@{self.period:g}+{self.utc_offset:g}:" + ",".join(f"{s:g}" for s in self.starts)


def _modelset_ranges(ms: ModelSet) -> NDArray[np.float64]:
    """(k, k, 2) range of each entry over a ModelSet (outer for a finite set: member-wise min/max)."""
    if ms.kind == "box":
        (a0, a1), (b0, b1) = ms.box  # type: ignore[misc]
        return np.array([[[1 - a1, 1 - a0], [a0, a1]], [[b0, b1], [1 - b1, 1 - b0]]])
    if ms.kind == "finite":
        mats = np.stack([m.matrix for m in ms.members])
        return np.stack([mats.min(axis=0), mats.max(axis=0)], axis=-1)
    assert ms.bounds is not None
    return np.array(ms.bounds, dtype=np.float64)


def _row_set_ranges(lo: NDArray[np.float64], hi: NDArray[np.float64]) -> NDArray[np.float64]:
    """(k, k, 2) exact entry ranges of {lo ≤ K ≤ hi, rows sum to 1}: entry j can reach neither
    below 1 − Σ_{l≠j} hi_l nor above 1 − Σ_{l≠j} lo_l."""
    lo_x = np.maximum(lo, 1.0 - (hi.sum(axis=1, keepdims=True) - hi))
    hi_x = np.minimum(hi, 1.0 - (lo.sum(axis=1, keepdims=True) - lo))
    return np.clip(np.stack([lo_x, np.maximum(hi_x, lo_x)], axis=-1), 0.0, 1.0)


def _scenario_ranges(ms: ModelSet) -> NDArray[np.float64]:
    """(blocks, k, k, 2): per block of ``ms.setchain``, the entry-wise min and max over the hourly
    kernels of the hours that meet the block and over the day and pooled chains (the members)."""
    sc = ms.setchain
    assert sc is not None and sc.scenarios is not None
    hourly = smoothed(sc.scenarios.hourly)
    members = np.stack([m.matrix for m in ms.members])
    out = []
    for b in range(len(sc.blocks)):
        s, e = sc.blocks[b].start, sc.block_end(b)
        hours = [h for h in range(24) if h * 3600.0 < e and s < (h + 1) * 3600.0]
        mats = np.concatenate([hourly[hours], members])
        out.append(np.stack([mats.min(axis=0), mats.max(axis=0)], axis=-1))
    return np.stack(out)


def partition_for(model: ModelSet | SetChain, blocks: int = HOMOGENEOUS_BLOCKS) -> Partition:
    """The guard's blocks: a set-chain's own, or ``blocks`` equal UTC blocks for a ModelSet (each
    with the set's ranges: its claim holds at every step). For the scenario set read from a set-chain
    (modelset._scenario_set) the set-chain's blocks, each with the range its scenarios span
    (:func:`_scenario_ranges`): the plan holds under the scenarios, not over the set-chain's wider
    confidence sets, so that is what the live chain is held to."""
    if isinstance(model, ModelSet) and model.setchain is not None:
        sc = model.setchain
        return Partition(sc.starts, _scenario_ranges(model), sc.period, sc.utc_offset)
    if isinstance(model, SetChain):
        return Partition(model.starts, np.stack([_row_set_ranges(b.lo, b.hi) for b in model.blocks]),
                         model.period, model.utc_offset)
    if blocks < 1:
        raise ValueError("the drift guard needs at least one block")
    ranges = _modelset_ranges(model)
    return Partition(np.arange(blocks) * (DAY / blocks), np.repeat(ranges[None], blocks, axis=0))


def _log_ratio_grid() -> NDArray[np.float64]:
    return np.log(RHO) * np.arange(1, GRID + 1)


def _logit(p: NDArray[np.float64]) -> NDArray[np.float64]:
    with np.errstate(divide="ignore"):
        return np.log(p) - np.log1p(-p)


def log_statistic(counts: NDArray[np.int64] | NDArray[np.float64], ranges: NDArray[np.float64]) -> NDArray[np.float64]:
    """log M of every row (module docstring) from ``counts[..., i, j]`` and ``ranges[..., i, j, 2]``
    (any leading shape): an array of the leading shape × k. +inf where an observed entry is
    forbidden (hi = 0 hit, or lo = 1 missed)."""
    n = np.asarray(counts, dtype=np.float64)
    s = n[..., None]  # hits, (…, k, k, 1)
    f = n.sum(axis=-1, keepdims=True)[..., None] - s  # misses
    g = _log_ratio_grid()
    terms = []
    for side, edge in ((1.0, ranges[..., 1]), (-1.0, ranges[..., 0])):
        e = edge[..., None]
        theta = 1.0 / (1.0 + np.exp(-(_logit(e) + side * g)))  # odds(e)·ρ^{±g}
        with np.errstate(divide="ignore", invalid="ignore"):
            lr = s * (np.log(theta) - np.log(e)) + f * (np.log1p(-theta) - np.log1p(-e))
        possible = (e < 1.0) if side > 0 else (e > 0.0)  # the side can be violated at all
        lr = np.where(possible, lr, -np.inf)
        impossible = (s > 0) & (e == 0.0) if side > 0 else (f > 0) & (e == 1.0)  # (0·log 0 terms)
        lr = np.where(impossible, np.inf, np.where(np.isnan(lr), -np.inf, lr))
        terms.append(lr)
    allr = np.concatenate(terms, axis=-1)  # (…, k, k, 2G)
    allr = allr.reshape(*allr.shape[:-2], -1)  # per row: entries × sides × grid
    top = allr.max(axis=-1)
    with np.errstate(invalid="ignore"):
        out = top + np.log(np.mean(np.exp(allr - np.where(np.isfinite(top), top, 0.0)[..., None]), axis=-1))
    return np.where(np.isposinf(top), np.inf, np.where(np.isneginf(top), -np.inf, out))


def log_threshold(part: Partition, false_alarm: float) -> float:
    """log(B·k/δ): the level each (block, row) statistic must reach."""
    return math.log(part.blocks * part.k / false_alarm)


def transitions_to_alarm(ranges: NDArray[np.float64], row: NDArray[np.float64], threshold: float,
                         limit: int = 10**8) -> float:
    """Transitions out of a row (entry ranges ``ranges`` (k, 2)) after which the guard fires when the
    observed frequencies are ``row`` (N·row counts): the smallest such N (inf when the row lies in
    the ranges or none up to ``limit``). log M is increasing in N once the row is outside, so a
    doubling search and a bisection find it."""
    row = np.asarray(row, dtype=np.float64)

    def fires(n: float) -> bool:
        return bool(log_statistic((n * row)[None], ranges[None])[0] >= threshold)

    hi = 1.0
    while not fires(hi):
        hi *= 2.0
        if hi > limit:
            return math.inf
    lo = hi / 2.0
    while hi - lo > 0.5:
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if fires(mid) else (mid, hi)
    return math.ceil(hi)


def days_to_alarm(ranges: NDArray[np.float64], row: NDArray[np.float64], threshold: float,
                  per_day: float) -> float:
    """Expected days to the alarm: :func:`transitions_to_alarm` over the transitions out of this row
    observed per day in the block (inf when it never fires or nothing is observed)."""
    n = transitions_to_alarm(ranges, row, threshold)
    return math.inf if per_day <= 0 or math.isinf(n) else n / per_day


class StateError(ValueError):
    """A persisted guard state that cannot be read (the guard then fails closed)."""


@dataclass
class DriftState:
    """The guard's persisted counts, one file per stream (``<outbox stem>.drift.<stream>.json``
    beside the outbox, 0600, written to a temporary file, synced, renamed, directory synced)."""

    path: Path

    @staticmethod
    def beside(outbox: Path, stream: str) -> "DriftState | None":
        """The state file of ``stream`` next to the outbox; None for an in-memory outbox."""
        p = str(outbox)
        if p == ":memory:" or p.startswith("file:"):
            return None
        return DriftState(Path(outbox).with_name(f"{Path(outbox).stem}.drift.{stream}.json"))

    def load(self, key: dict[str, Any], shape: tuple[int, ...]) -> NDArray[np.int64] | None:
        """The counts persisted under ``key`` (model, partition, δ); None when there is no file or it
        was written for another key (logged, discarded). Raises StateError when unreadable."""
        try:
            doc = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise StateError(f"cannot read {self.path} ({exc.__class__.__name__})") from None
        if not isinstance(doc, dict) or doc.get("version") != STATE_VERSION or not isinstance(doc.get("key"), dict):
            raise StateError(f"{self.path} is not a version-{STATE_VERSION} drift state")
        if doc["key"] != key:
            log.info("drift state %s was written for %s, not %s: discarded, the test starts afresh",
                     self.path, doc["key"], key)
            return None
        try:
            counts = np.array(doc["counts"], dtype=np.int64)
        except (KeyError, TypeError, ValueError, OverflowError):
            raise StateError(f"{self.path}: malformed counts") from None
        if counts.shape != shape or np.any(counts < 0):
            raise StateError(f"{self.path}: counts of the wrong shape or negative")
        return counts

    def save(self, key: dict[str, Any], counts: NDArray[np.int64]) -> None:
        """Persist the counts (synced to disk before this returns)."""
        write_private(self.path, json.dumps({"version": STATE_VERSION, "key": key, "counts": counts.tolist()},
                                            separators=(",", ":")), synced=True)


@dataclass
class BlockDriftGuard:
    """A drift guard per time-of-day block for one stream (module docstring). Feed it each decided
    record in step order with :meth:`released`; :attr:`alarm` says whether it fired (it stays)."""

    partition: Partition
    model_id: str
    false_alarm: float = FALSE_ALARM
    check_every: int = CHECK_EVERY
    state: DriftState | None = None
    counts: NDArray[np.int64] = field(init=False)
    alarm: bool = field(default=False, init=False)
    #: Observed transitions when it fired, and the (block, row) that fired it (None: restored).
    fired_at: int | None = field(default=None, init=False)
    fired_block: int | None = field(default=None, init=False)
    fired_row: int | None = field(default=None, init=False)
    #: The alarm was raised before a restart (ledger) or the persisted state was unreadable.
    restored: bool = field(default=False, init=False)
    #: Observed transitions read back from the persisted state at the start.
    resumed: int = field(default=0, init=False)
    #: Writes of the counts that failed (their checks were skipped).
    unsaved: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if not 0.0 < self.false_alarm < 1.0:
            raise ValueError("the drift guard's false-alarm rate must lie strictly between 0 and 1")
        p = self.partition
        self.counts = np.zeros((p.blocks, p.k, p.k), dtype=np.int64)
        self._threshold = log_threshold(p, self.false_alarm)
        self._prev: tuple[int, int, int] | None = None  # (physical index, state, block) of the last free record
        self._since = 0
        if self.state is not None:
            loaded = self.state.load(self.key, self.counts.shape)  # (StateError: the owner fails closed)
            if loaded is not None:
                self.counts, self.resumed = loaded, int(loaded.sum())

    @property
    def key(self) -> dict[str, Any]:
        """What a persisted state must match to be continued."""
        return {"model": self.model_id, "blocks": self.partition.signature(), "false_alarm": self.false_alarm}

    @property
    def transitions(self) -> int:
        return int(self.counts.sum())

    def released(self, phys: int, ts: float, state: int | None, row: tuple[float, ...]) -> bool:
        """One decided record (physical index, epoch time — NaN when unknown —, released state or
        None, row used). Only records released with an all-zero row and a known time are read; a
        transition counts in the block of the record it starts from. True when it fired now."""
        if state is None or any(row) or not math.isfinite(ts):
            self._prev = None
            return False
        prev, self._prev = self._prev, (phys, state, self.partition.block_at(ts))
        if prev is None or prev[0] != phys - 1 or self.alarm:
            return False
        self.counts[prev[2], prev[1], state] += 1
        self._since += 1
        if self._since >= self.check_every:
            return self.check()
        return False

    def persist(self) -> bool:
        """Write the counts (nothing to do without a state file, or once fired: the alarm is the
        ledger's). False when they could not be written: one ERROR line at the 1st, 2nd, 4th, …
        failure, the counts are kept."""
        if self.state is None or self.alarm:
            return True
        try:
            self.state.save(self.key, self.counts)
        except OSError as exc:
            self.unsaved += 1
            if self.unsaved & (self.unsaved - 1) == 0:
                log.error("drift guard: cannot persist its counts (%s): the test waits until they are "
                          "written [%d failures]", exc.__class__.__name__, self.unsaved)
            return False
        return True

    def check(self) -> bool:
        """Persist the counts, then run the test on them; True when it fires now. Counts that could
        not be persisted are not tested (that would void δ across a crash); the next check retries."""
        if self.alarm:
            return False
        self._since = 0
        if not self.persist():
            return False
        stat = log_statistic(self.counts, self.partition.ranges)  # (B, k)
        hit = np.argwhere(stat >= self._threshold)
        if hit.size:
            self.alarm, self.fired_at = True, self.transitions
            self.fired_block, self.fired_row = int(hit[0][0]), int(hit[0][1])
        return self.alarm

    def restore(self, transitions: int) -> None:
        """The alarm holds from the start (raised before a restart under this model, or the state
        cannot be read): the owner fails closed."""
        self.alarm, self.fired_at, self.restored = True, int(transitions), True

    def status(self) -> dict[str, Any]:
        """The guard's part of the privacy status."""
        return {"drift": self.alarm, "false_alarm_rate": self.false_alarm, "observed_transitions": self.transitions,
                "resumed_transitions": self.resumed, "blocks": self.partition.blocks,
                "fired_at_transitions": self.fired_at, "fired_block": self.fired_block, "fired_row": self.fired_row,
                "restored": self.restored, "persisted": self.state is not None, "unsaved_checks": self.unsaved,
                "test": "per time-of-day block and row, anytime valid; δ over the model's life (counts persisted)",
                "reads": "only records released unchanged (an all-zero row): post-processing, no budget"}
