"""Window plans per time-of-day block over a set-chain, certified by :mod:`.tv_leakage`
(issue 25 item 3; docs/time-varying.md §5).

A mark at p in block i gets the plan of block i: redact [p − L_i, p + R_i] surely, release every
other record. The plan must hold for *every* p whose clock lies in block i, and the window's steps
cross block boundaries, so the set of the step at offset o from p (o < 0: left, step from X_{p+o};
o ≥ 0: right, step from X_{p+o}) is the hull — entrywise min of lo, max of hi — of every block the
record p + o can fall in as p ranges over block i (:func:`offset_sets`): a superset of each
member's sequence, so one certificate covers the whole block.

Design: the smallest L + R (then the smallest max(L, R)) whose certified bound
(:func:`.tv_leakage.window_terms`: box bound for sides up to ``BOX_MAX`` records, the Birkhoff bound
for every length) is ≤ ε; none within ``max_records`` per side is a refusal (None). The left and
right terms are computed once per length and the pair search is exhaustive over (L, R), so the
budget split between the sides is the cost-optimal one (not a fixed even split). With a memory
m > 1 (``SetChain.memory``) the sets are lifted to m-tuples and the figure is over pairs of tuples
whose latest states differ (docs/time-varying.md §4).

Valid for marks with at least the window and the law horizon (up to ``max_records`` + 1 records)
of stream before them; marks near the start of a stream are not covered here (docs §8).

The plan table's key (:func:`plan_key`) hashes the set-chain's canonical JSON, ε, the block and
this code (and the memory), so a plan cached for one block is never served for another.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from .kinterval import left_bounds_steps, right_bounds_steps
from .setchain import SetChain
from .tv_leakage import ROUND as ROUND_SLACK
from .tv_leakage import _up, birkhoff_sides, lift, pair_mask, prior_odds_bound

#: Longest side for which the (quadratic-cost) box bound is computed; beyond, Birkhoff only.
BOX_MAX = 192
#: Default longest side searched, in records.
MAX_RECORDS = 4096
#: Most lifted states (k^memory) certified: the box bounds enumerate 2^(k−1)·k vertices per step.
MAX_LIFTED = 8

Arr = NDArray[np.float64]


def _blocks_meeting(sc: SetChain, u: float, v: float) -> list[int]:
    """Blocks whose clock interval meets [u, v) (seconds, taken mod period)."""
    P = sc.period
    if v - u >= P:
        return list(range(len(sc.blocks)))
    u0 = u % P
    spans = [(u0, u0 + (v - u))] if u0 + (v - u) <= P else [(u0, P), (0.0, u0 + (v - u) - P)]
    out = []
    for i in range(len(sc.blocks)):
        s, e = sc.blocks[i].start, sc.block_end(i)
        if any(a < e and s < b for a, b in spans):
            out.append(i)
    return out


def offset_sets(sc: SetChain, block: int, offsets: NDArray[np.int64]) -> tuple[Arr, Arr]:
    """(lo, hi) (len(offsets), k, k): the hull of the sets of every block that the record p + o can
    lie in, for p anywhere in ``block`` (module docstring). The step from X_{p+o} uses that set."""
    s, e = sc.blocks[block].start, sc.block_end(block)
    los = np.stack([b.lo for b in sc.blocks])
    his = np.stack([b.hi for b in sc.blocks])
    cache: dict[tuple[int, ...], tuple[Arr, Arr]] = {}
    lo = np.empty((len(offsets), sc.k, sc.k))
    hi = np.empty_like(lo)
    for n, o in enumerate(offsets):
        meet = tuple(_blocks_meeting(sc, s + o * sc.sample_period, e + o * sc.sample_period))
        if meet not in cache:
            cache[meet] = (los[list(meet)].min(axis=0), his[list(meet)].max(axis=0))
        lo[n], hi[n] = cache[meet]
    return lo, hi


@dataclass(frozen=True)
class BlockPlan:
    """The window plan of one block: redact [p − left, p + right]; ``bound`` its certified leakage
    (nats) over the set-chain for every p in the block."""

    block: int
    start: float
    end: float
    left: int
    right: int
    bound: float
    sample_period: float
    memory: int = 1

    @property
    def redacted(self) -> int:
        return self.left + self.right + 1

    def cost_text(self) -> str:
        """e.g. "a mark at 14:00–18:00 redacts 190 records (3 h 10 min) before and 120 (2 h) after"."""
        return (f"a mark at {_clock(self.start)}–{_clock(self.end)} redacts {self.left} records "
                f"({duration(self.left * self.sample_period)}) before and {self.right} "
                f"({duration(self.right * self.sample_period)}) after; leakage ≤ {self.bound:.4f} nats")


def _clock(sec: float) -> str:
    m = int(round(sec / 60.0))
    return f"{m // 60:02d}:{m % 60:02d}"


def duration(sec: float) -> str:
    """Human duration: "3 h 10 min", "45 min", "2 d 4 h", "30 s"."""
    if sec < 60:
        return f"{sec:g} s"
    m = int(round(sec / 60.0))
    d, h, mm = m // 1440, (m % 1440) // 60, m % 60
    if d:
        return f"{d} d {h} h" if h else f"{d} d"
    if h:
        return f"{h} h {mm} min" if mm else f"{h} h"
    return f"{mm} min"


def _side_terms(klo: Arr, khi: Arr, n: int, prior: Arr | None, stride: int) -> Arr:
    """(n + 1, k, k): the left (prior given) or right (prior None) window term for sides 0..n."""
    k = klo.shape[1]
    out = np.full((n + 1, k, k), math.inf)
    birk = birkhoff_sides(klo[:n + 1], khi[:n + 1], stride, left=prior is not None)
    for m in range(n + 1):
        box = np.full((k, k), math.inf)
        if m <= BOX_MAX:
            if prior is not None:
                box = left_bounds_steps(klo[:m + 1], khi[:m + 1], np.ones((m, k)), True) + prior
            else:
                box = right_bounds_steps(klo[:m + 1], khi[:m + 1], np.vstack([np.ones((m, k)), np.zeros((1, k))]),
                                         False)
        out[m] = np.minimum(box, birk[m])
    off = ~np.eye(k, dtype=bool)
    return np.where(off[None], out, 0.0)


def block_plan(sc: SetChain, block: int, epsilon: float, *, max_records: int | None = None,
               memory: int | None = None) -> BlockPlan | None:
    """The cheapest window plan of ``block`` certified ≤ ε (module docstring), or None; sides of at
    most ``max_records`` (default ``MAX_RECORDS``). ``memory``
    (default: the set-chain's): the kernel may depend on that many last states, every conditional
    row in the block's set (the sets lifted, :func:`.tv_leakage.lift`)."""
    m = sc.memory if memory is None else memory
    check_memory(sc.k, m)
    n = MAX_RECORDS if max_records is None else max_records
    llo, lhi = lift(*offset_sets(sc, block, -np.arange(1, n + 2)), m)  # step j back: from X_{p−j}
    rlo, rhi = lift(*offset_sets(sc, block, np.arange(0, n + 1)), m)   # step j forward: from X_{p+j−1}
    llo, lhi, rlo, rhi = (np.ascontiguousarray(a) for a in (llo, lhi, rlo, rhi))
    prior = prior_odds_bound(llo, lhi)
    left = _side_terms(llo, lhi, n, prior, m)
    right = _side_terms(rlo, rhi, n, None, m)
    mask = pair_mask(sc.k, m)
    pairs = list(zip(*np.nonzero(mask)))
    lp = np.stack([left[:, a, b] for a, b in pairs], axis=1)   # (n + 1, pairs)
    rp = np.stack([right[:, a, b] for a, b in pairs], axis=1)
    best: tuple[int, int, int, int, float] | None = None  # (L + R, max(L, R), L, R, bound)
    for R in range(n + 1):
        if best is not None and R > best[0]:
            break  # every later R costs more than the best found
        tot = (lp + rp[R][None, :]).max(axis=1)
        ok = np.nonzero(tot + ROUND_SLACK * (1.0 + np.abs(tot)) <= epsilon)[0]
        if len(ok):
            L = int(ok[0])
            cand = (L + R, max(L, R), L, R, _up(float(tot[L])))
            if best is None or cand[:2] < best[:2]:
                best = cand
    if best is None:
        return None
    return BlockPlan(block=block, start=sc.blocks[block].start, end=sc.block_end(block), left=best[2],
                     right=best[3], bound=best[4], sample_period=sc.sample_period, memory=m)


def check_memory(k: int, memory: int) -> None:
    """Refuse a memory whose lifted chain has more than ``MAX_LIFTED`` states."""
    if memory < 1 or k ** memory > MAX_LIFTED:
        raise ValueError(f"memory {memory} with {k} states lifts to {k ** memory} states; at most {MAX_LIFTED} "
                         "are certified (docs/time-varying.md §4)")


def block_plans(sc: SetChain, epsilon: float, *, max_records: int | None = None,
                memory: int | None = None) -> list[BlockPlan | None]:
    """:func:`block_plan` for every block (None: no window plan within ``max_records`` meets ε)."""
    return [block_plan(sc, i, epsilon, max_records=max_records, memory=memory) for i in range(len(sc.blocks))]


def plan_key(sc: SetChain, epsilon: float, block: int) -> str:
    """Cache key of a block's plan: the set-chain's canonical JSON, ε, the block and this code."""
    h = hashlib.sha256(json.dumps(sc.to_json(), sort_keys=True).encode())
    h.update(f"|eps={float(epsilon)!r}|block={int(block)}|memory={sc.memory}|".encode())
    here = Path(__file__).resolve().parent
    for name in ("tv_plan.py", "tv_leakage.py", "kinterval.py", "setchain.py"):
        h.update((here / name).read_bytes())
    return h.hexdigest()
