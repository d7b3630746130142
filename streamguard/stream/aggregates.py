"""A stream's noisy aggregates: tumbling windows of positions, each released by the Markov Quilt
Mechanism (paper 002; notes/002 §3.6 and §8, "streaming release variants" 1).

Window j of a query with length W covers the positions [j·W, (j+1)·W − 1] (physical chain steps,
the same numbering the privatizer and the ledger use). When the first position past a window
arrives, the window's accepted states are released as :class:`~streamguard.quilt.release.
AggregateRelease` with noise scale L·σ, where σ is the stream-length-independent scale of the
model (σ_∞ for the translation-invariant modes, σ̄_supq for ``supq``; notes/002 §3.4), so the
release stays valid however long the stream runs. A rejected frame occupies its position but
contributes no state; its position is still charged (conservative). A window that was open at a
restart is lost with the raw values it held (they were never stored), and the next window starts
with the positions after the restart.

Under the per-position quilt accountant all windows of one query together cost that query's ε
(notes/002 §4.7, duality), and several queries on the same positions add their loads. Each
release is admitted by the ledger's budget filter before it can be published (daemon).
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..model.chain import MarkovChain
from ..config import AggregateConfig, StreamConfig
from ..quilt import QuiltModel
from ..quilt.release import AggregateRelease, count, histogram, mean, quantise_values
from ..quilt.scale import Scale, sigma_inf, sigma_supq
from ..sampling import BitSource


#: Relative margin added to σ. Tumbling windows at exactly σ_∞(ε) cost exactly ε in the interior
#: (duality, notes/002 §4.7), so a budget of ε would refuse them on rounding alone; slightly more
#: noise keeps the accountant's figure at or below ε instead (a margin on the noise, never on the
#: budget).
SIGMA_MARGIN = 1e-9


def stream_scale(model: QuiltModel, epsilon: float) -> Scale:
    """The σ valid for a stream of unknown length under ``model``'s mode (notes/002 §8), plus
    :data:`SIGMA_MARGIN`."""
    scale = sigma_supq(model, epsilon) if model.mode == "supq" else sigma_inf(model, epsilon)
    return dataclasses.replace(scale, sigma=scale.sigma * (1 + SIGMA_MARGIN))


@dataclass
class _Query:
    index: int
    cfg: AggregateConfig
    model: QuiltModel
    scale: Scale
    window: int | None = None  # index of the open window
    lo: int = 0
    hi: int = 0
    states: list[int] = field(default_factory=list)
    ts_lo: float | None = None  # timestamps of the window's first and newest step
    ts_hi: float | None = None


#: Window descriptions kept for payloads not yet built (a release the budget filter refuses is
#: never published, so its description is dropped oldest first).
_WINDOW_INFO_KEEP = 1024


@dataclass(frozen=True)
class WindowInfo:
    """What the published window adds to the release (issue 14): the timestamps of its first
    and last step, and whether it is partial — it does not cover its full tumbling window
    [j·W, (j+1)·W − 1] (the first window after a restart, the last one at shutdown)."""

    ts_start: float | None
    ts_end: float | None
    partial: bool
    #: The number of states the window counted (its positions less rejected frames, missing
    #: readings and records withheld as private; all of them are already public in the status).
    states: int


class StreamAggregates:
    """The aggregate queries of one stream (see module docstring)."""

    def __init__(self, cfg: StreamConfig, chains: Sequence[MarkovChain], source: BitSource) -> None:
        """``chains``: Θ, the chains the quilt model holds under (one, or a finite model set's members;
        the MQM's scale is then exact for the worst of them, notes/002)."""
        self.cfg = cfg
        self.states = cfg.state_map()
        self.source = source
        self.queries: list[_Query] = []
        self._info: OrderedDict[tuple[int, int], WindowInfo] = OrderedDict()
        for i, a in enumerate(cfg.aggregates):
            model = QuiltModel(list(chains), a.influence)
            if a.values is not None and a.step is not None:  # fail at start-up, not at the first window
                quantise_values(a.values, min(a.values), max(a.values), a.step)
            self.queries.append(_Query(i, a, model, stream_scale(model, a.epsilon)))

    @property
    def budget(self) -> float | None:
        return self.cfg.total_aggregate_budget()

    def observe(self, position: int, state: int | None, ts: float | None = None) -> list[tuple[int, AggregateRelease]]:
        """Feed one position (``state`` None for a rejected frame; ``ts`` its step's timestamp);
        returns (query index, release) for every window this position closed."""
        return [r for q in self.queries for r in self._feed(q, position, state, ts)]

    def observe_run(self, first: int, last: int, ts_first: float | None,
                    ts_last: float | None) -> list[tuple[int, AggregateRelease]]:
        """Feed positions ``first``..``last``, none with a state (rejected frames taken in bulk:
        redaction_runtime.HOSTILE_PER_SECOND), in O(1) per query instead of one call per position,
        with the releases of observing each of them: the window open at ``first`` runs to its end
        (or to ``last``), a window wholly inside the run holds no state and releases nothing (it is
        skipped), and the window holding ``last`` opens at its first position. Only the run's first
        and last times are known: the window open at ``first`` ends at ``ts_first`` if the run goes
        past it, and a window the run opens past ``first`` starts at ``ts_last`` (times of the run,
        off by at most its length; the ranges and states, hence the releases, are exact)."""
        out: list[tuple[int, AggregateRelease]] = []
        for q in self.queries:
            out += self._feed(q, first, None, ts_first)
            w_size = q.cfg.window
            if last // w_size != first // w_size:
                q.hi = (first // w_size + 1) * w_size - 1  # (the window of ``first`` ran to its end)
                out += self._feed(q, last // w_size * w_size, None, ts_last)
            out += self._feed(q, last, None, ts_last)
        return out

    def _feed(self, q: _Query, position: int, state: int | None, ts: float | None) -> list[tuple[int, AggregateRelease]]:
        """Feed query ``q`` one position; returns the release of the window it closed, if any."""
        w = position // q.cfg.window
        out = self._close(q) if q.window is not None and w != q.window else []
        if q.window is None:
            q.window, q.lo, q.states, q.ts_lo = w, position, [], ts
        q.hi = position
        if ts is not None:
            q.ts_hi = ts
            q.ts_lo = ts if q.ts_lo is None else q.ts_lo
        if state is not None:
            q.states.append(state)
        return out

    def flush(self) -> list[tuple[int, AggregateRelease]]:
        """Release every open window as it stands (shutdown: a partial window is a shorter window)."""
        return [r for q in self.queries for r in self._close(q)]

    def _close(self, q: _Query) -> list[tuple[int, AggregateRelease]]:
        states, lo, hi, w = np.array(q.states, dtype=np.int64), q.lo, q.hi, q.window
        info = WindowInfo(q.ts_lo, q.ts_hi, w is None or lo != w * q.cfg.window or hi != (w + 1) * q.cfg.window - 1,
                          int(states.size))
        q.window, q.states, q.ts_lo, q.ts_hi = None, [], None, None
        if states.size == 0:  # every frame of the window was rejected: nothing to release
            return []
        a = q.cfg
        if a.query == "histogram":
            rel = histogram(states, lo, q.model, q.scale, self.source)
        elif a.query == "count":
            assert a.state is not None and self.states.labels is not None
            rel = count(states, lo, self.states.labels.index(a.state), q.model, q.scale, self.source)
        else:
            assert a.values is not None and a.step is not None
            rel = mean(states, lo, a.values, min(a.values), max(a.values), a.step, q.model, q.scale, self.source)
        self._info[(q.index, lo)] = info
        while len(self._info) > _WINDOW_INFO_KEEP:
            self._info.popitem(last=False)
        # the window spans its rejected positions too: charge them (conservative)
        return [(q.index, dataclasses.replace(rel, hi=hi))]

    def window_info(self, q: int, lo: int) -> WindowInfo | None:
        """The timestamps and partial flag of query ``q``'s window starting at ``lo`` (taken once)."""
        return self._info.pop((q, lo), None)

    def status(self) -> list[dict[str, object]]:
        """What each query releases and at which scale (for the privacy status)."""
        return [{"query": q.cfg.query, "window": q.cfg.window, "epsilon": q.cfg.epsilon, "influence": q.model.mode,
                 "model": q.model.identifier, "sigma": q.scale.sigma, "witness": q.scale.witness.as_dict(),
                 **({"state": q.cfg.state} if q.cfg.state is not None else {}),
                 **({"values": q.cfg.values, "step": q.cfg.step} if q.cfg.values is not None else {})}
                for q in self.queries]
