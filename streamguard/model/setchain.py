"""Interval Markov set-chains with time-of-day blocks (issue 25 item 2; docs/time-varying.md).

A *set-chain* is a family of time-inhomogeneous processes: at the step t → t+1 the one-step
kernel K_t lies in the row-wise set S_{b(t)} = {K : lo ≤ K ≤ hi entrywise, every row sums to 1}
(box ∩ simplex per row), where b(t) is the time-of-day block of the record at t (local time,
cycle ``period`` seconds). The kernel is chosen anew at every step and may depend on the whole
past (history-dependent nature), so hour-of-day variation, drift inside the sets and higher-order
effects are all members. Leakage figures over a set-chain are certified in :mod:`.tv_leakage`.

This module is only the data type (and its JSON form, the ``"kind": "setchain"`` MODEL.json):
``streamguard calibrate`` produces it, the planners consume per-step bounds from
:meth:`SetChain.sets_for`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .chain import ModelError
from .scenarios import Scenarios

KIND = "setchain"
VERSION = 1
#: Largest memory (order) a set-chain may declare.
MAX_MEMORY = 3
#: Slack allowed on the row sums of lo (≤ 1) and hi (≥ 1) when validating (JSON round trip).
ROW_SLACK = 1e-12


@dataclass(frozen=True, eq=False)
class Block:
    """One time-of-day block: from ``start`` (seconds after local midnight) to the next block's
    start; the row-wise set {lo ≤ K ≤ hi, rows sum to 1}. ``point`` is an estimate (informative
    only, never used for a guarantee); ``n_transitions`` the transitions it was fitted on."""

    start: float
    lo: NDArray[np.float64]
    hi: NDArray[np.float64]
    point: NDArray[np.float64] | None = None
    n_transitions: int = 0

    def __post_init__(self) -> None:
        lo = np.array(self.lo, dtype=np.float64)
        hi = np.array(self.hi, dtype=np.float64)
        object.__setattr__(self, "lo", lo)
        object.__setattr__(self, "hi", hi)
        if self.point is not None:
            object.__setattr__(self, "point", np.array(self.point, dtype=np.float64))
        k = lo.shape[0] if lo.ndim == 2 else 0
        if k < 2 or lo.shape != (k, k) or hi.shape != (k, k):
            raise ModelError("set-chain block: lo and hi must be k×k with k ≥ 2")
        if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
            raise ModelError("set-chain block: bounds must be finite")
        if np.any(lo < 0) or np.any(hi > 1) or np.any(lo > hi):
            raise ModelError("set-chain block: bounds must satisfy 0 ≤ lo ≤ hi ≤ 1")
        if np.any(lo.sum(axis=1) > 1 + ROW_SLACK) or np.any(hi.sum(axis=1) < 1 - ROW_SLACK):
            raise ModelError("set-chain block: every row needs Σ lo ≤ 1 ≤ Σ hi (an empty row set)")
        if self.point is not None and self.point.shape != (k, k):
            raise ModelError("set-chain block: point must be k×k")

    @property
    def k(self) -> int:
        return int(self.lo.shape[0])

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"start": float(self.start), "lo": self.lo.tolist(), "hi": self.hi.tolist(),
                             "n_transitions": int(self.n_transitions)}
        if self.point is not None:
            d["point"] = self.point.tolist()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Block":
        try:
            return cls(start=float(d["start"]), lo=np.array(d["lo"], dtype=np.float64),
                       hi=np.array(d["hi"], dtype=np.float64),
                       point=None if d.get("point") is None else np.array(d["point"], dtype=np.float64),
                       n_transitions=int(d.get("n_transitions", 0)))
        except ModelError:
            raise
        except (KeyError, TypeError, ValueError) as e:
            raise ModelError(f"set-chain block: malformed ({e.__class__.__name__})") from None


@dataclass(frozen=True, eq=False)
class SetChain:
    """An interval Markov set-chain with time-of-day blocks (module docstring).

    ``blocks`` are sorted by ``start``, the first starts at 0, all lie in [0, period); block i
    covers [start_i, start_{i+1}) (the last up to ``period``). The record at epoch ``ts`` is in
    block :meth:`block_at` (ts + utc_offset) mod period; the kernel of the step from the record at
    ts to the next one is drawn from that record's block.

    ``memory`` m: the kernel may also depend on the last m states (higher-order effects), every
    conditional row inside the block's set; 1 is a first-order set-chain. The planners certify over
    the chain of m-tuples (docs/time-varying.md §4)."""

    labels: tuple[str, ...]
    sample_period: float
    blocks: tuple[Block, ...]
    period: float = 86400.0
    utc_offset: float = 0.0
    calibration: dict[str, Any] | None = None
    memory: int = 1
    #: Transition counts per hour and per day of the calibration recording, from which the
    #: scenario plans are made (:mod:`.scenarios`); None for a hand-written set-chain.
    scenarios: Scenarios | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", tuple(str(x) for x in self.labels))
        object.__setattr__(self, "blocks", tuple(self.blocks))
        if not self.blocks:
            raise ModelError("set-chain: needs at least one block")
        k = self.blocks[0].k
        if any(b.k != k for b in self.blocks):
            raise ModelError("set-chain: every block must have the same number of states")
        if self.scenarios is not None and self.scenarios.k != k:
            raise ModelError("set-chain: the scenarios' counts must have as many states as the blocks")
        if len(self.labels) != k or len(set(self.labels)) != k:
            raise ModelError(f"set-chain: needs {k} distinct labels")
        if not (math.isfinite(self.sample_period) and self.sample_period > 0):
            raise ModelError("set-chain: sample_period must be a positive number of seconds")
        if not (math.isfinite(self.period) and self.period > 0):
            raise ModelError("set-chain: period must be a positive number of seconds")
        if not math.isfinite(self.utc_offset):
            raise ModelError("set-chain: utc_offset must be finite")
        if isinstance(self.memory, bool) or not isinstance(self.memory, int) or not 1 <= self.memory <= MAX_MEMORY:
            raise ModelError(f"set-chain: memory must be an integer in 1..{MAX_MEMORY}")
        starts = [b.start for b in self.blocks]
        if starts[0] != 0.0 or any(b >= a for a, b in zip(starts[1:], starts[:-1])) or starts[-1] >= self.period:
            raise ModelError("set-chain: block starts must be sorted, distinct, begin at 0 and lie in [0, period)")

    @property
    def k(self) -> int:
        return self.blocks[0].k

    @property
    def starts(self) -> NDArray[np.float64]:
        return np.array([b.start for b in self.blocks], dtype=np.float64)

    def block_of_clock(self, seconds: float) -> int:
        """The block holding ``seconds`` after local midnight (taken mod ``period``)."""
        c = float(seconds) % self.period
        return int(np.searchsorted(self.starts, c, side="right") - 1)

    def block_at(self, ts: float) -> int:
        """The block of the record at epoch ``ts`` (local clock: ts + utc_offset)."""
        return self.block_of_clock(float(ts) + self.utc_offset)

    def block_end(self, i: int) -> float:
        """Where block ``i`` ends (seconds after local midnight; ``period`` for the last)."""
        return self.blocks[i + 1].start if i + 1 < len(self.blocks) else self.period

    def step_blocks(self, t0_ts: float, n_steps: int) -> NDArray[np.int64]:
        """Block of each of the ``n_steps`` steps from the record at ``t0_ts``: step i goes from the
        record at t0_ts + i·sample_period to the next one, and uses that record's block."""
        if n_steps < 0:
            raise ValueError("n_steps must be ≥ 0")
        ts = float(t0_ts) + self.utc_offset + self.sample_period * np.arange(n_steps, dtype=np.float64)
        return (np.searchsorted(self.starts, np.mod(ts, self.period), side="right") - 1).astype(np.int64)

    def sets_for(self, t0_ts: float, n_steps: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Per-step bounds (lo[n, k, k], hi[n, k, k]) of the ``n_steps`` steps from the record at
        ``t0_ts`` (:meth:`step_blocks`)."""
        idx = self.step_blocks(t0_ts, n_steps)
        los = np.stack([b.lo for b in self.blocks])
        his = np.stack([b.hi for b in self.blocks])
        return los[idx], his[idx]

    # -- JSON ----------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": KIND, "version": VERSION, "labels": list(self.labels),
                             "sample_period": float(self.sample_period), "period": float(self.period),
                             "utc_offset": float(self.utc_offset), "memory": int(self.memory),
                             "blocks": [b.to_dict() for b in self.blocks]}
        if self.calibration is not None:
            d["calibration"] = self.calibration
        if self.scenarios is not None:
            d["scenarios"] = self.scenarios.to_dict()
        return d

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "SetChain":
        if not isinstance(d, dict) or d.get("kind") != KIND:
            raise ModelError('set-chain: not a "setchain" model')
        if d.get("version") != VERSION:
            raise ModelError(f"set-chain: unsupported version {d.get('version')!r} (this build reads {VERSION})")
        try:
            blocks = tuple(Block.from_dict(b) for b in d["blocks"])
            return cls(labels=tuple(d["labels"]), sample_period=float(d["sample_period"]), blocks=blocks,
                       period=float(d.get("period", 86400.0)), utc_offset=float(d.get("utc_offset", 0.0)),
                       calibration=d.get("calibration"), memory=d.get("memory", 1),
                       scenarios=None if d.get("scenarios") is None else Scenarios.from_dict(d["scenarios"]))
        except ModelError:
            raise
        except (KeyError, TypeError, ValueError) as e:
            raise ModelError(f"set-chain: malformed ({e.__class__.__name__})") from None


def is_setchain_json(d: object) -> bool:
    """Whether a parsed MODEL.json is a set-chain (``"kind": "setchain"``)."""
    return isinstance(d, dict) and d.get("kind") == KIND
