"""Time-of-day set-chains as the consumer uses them (issue 25 item 5; docs/consumer-guide.md §3b).

A set-chain (:class:`streamguard.model.setchain.SetChain`, ``streamguard calibrate``'s default
MODEL.json) gives per time-of-day block b a row-wise set S_b = {lo_b ≤ K ≤ hi_b, rows sum to 1};
the step t → t+1 uses the set of the block of position t's clock. The consumer corrects its
estimates under *members* of that set, each one time-inhomogeneous chain with one kernel per block
(:class:`SetChainModel`, the forward–backward of :mod:`.posterior` with a kernel per step):

- **center** — per block the calibration's point estimate (``Block.point``), or, where a block has
  none, the *proportional fill* of the box (each row lo + (1 − Σ lo)·(hi − lo)/Σ(hi − lo), a point
  of the set). The estimate is the posterior mean under it.
- **toward s / away from s** — per block and row, the vertex of the row set that puts the most
  (least) mass on state s (K(x, s) = min(hi, 1 − Σ_{y≠s} lo) resp. max(lo, 1 − Σ_{y≠s} hi), the
  rest filled proportionally). Used for the interval of the share of s (:func:`.estimates.setchain_shares`).

Every member is mixed with a weight η = :data:`ETA` of the proportional fill, (1 − η)·K + η·fill:
still a member (the sets are convex), and no entry is 0 where the set allows more, so a released
transition the first half never showed does not make the observations impossible under a vertex.

What this is not: the extreme members are the same vertex in every block, a heuristic choice — the
posterior mean of a count over *every* kernel sequence in the sets (chosen anew at each step) is
not bounded by them (the posterior is a ratio of multilinear functions of the kernels, not
monotone in them): tests/test_consumer_timevarying.py enumerates every per-step vertex sequence of
small binary bridges and finds sequences up to 0.66 of a record (over 5 hidden positions) outside
the members' range. The interval covers the spread between these fixed members, not the class.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ..model.setchain import Block, SetChain

#: Weight of the proportional fill mixed into every member (module docstring).
ETA = 1e-3
#: Periods of kernels the law of a segment's first position is moved through (from uniform).
LAW_PERIODS = 2


def fill(lo: NDArray[np.float64], hi: NDArray[np.float64]) -> NDArray[np.float64]:
    """The proportional fill of a row-wise box ∩ simplex: lo + (1 − Σ lo)·(hi − lo)/Σ(hi − lo) per
    row (a row with hi = lo is lo itself, which then sums to 1)."""
    slack = hi - lo
    total = slack.sum(axis=-1, keepdims=True)
    free = 1.0 - lo.sum(axis=-1, keepdims=True)
    share = np.divide(slack, total, out=np.zeros_like(slack), where=total > 0)
    return lo + free * share


def vertex(lo: NDArray[np.float64], hi: NDArray[np.float64], s: int, toward: bool) -> NDArray[np.float64]:
    """Per row, the member of the box ∩ simplex with the most (``toward``) or least mass on column
    ``s``; the other columns take the remaining mass proportionally to their slack."""
    others = np.ones(lo.shape[-1], dtype=bool)
    others[s] = False
    if toward:
        target = np.minimum(hi[:, s], 1.0 - lo[:, others].sum(axis=1))
    else:
        target = np.maximum(lo[:, s], 1.0 - hi[:, others].sum(axis=1))
    K = np.empty_like(lo)
    K[:, s] = target
    lo_o, hi_o = lo[:, others], hi[:, others]
    slack = hi_o - lo_o
    total = slack.sum(axis=1, keepdims=True)
    free = (1.0 - target)[:, None] - lo_o.sum(axis=1, keepdims=True)
    K[:, others] = lo_o + free * np.divide(slack, total, out=np.zeros_like(slack), where=total > 0)
    return K


def _inside(K: NDArray[np.float64], b: Block, tol: float = 1e-9) -> bool:
    return bool(np.all(K >= b.lo - tol) and np.all(K <= b.hi + tol) and np.allclose(K.sum(axis=1), 1.0, atol=tol))


@dataclass(frozen=True, eq=False)
class SetChainModel:
    """One member of a set-chain: ``kernels[b]`` the kernel of block b (module docstring);
    ``name`` says which ("center", "toward <label>", "away from <label>")."""

    setchain: SetChain
    kernels: NDArray[np.float64]
    name: str

    @classmethod
    def center(cls, sc: SetChain) -> "SetChainModel":
        Ks = []
        for b in sc.blocks:
            f = fill(b.lo, b.hi)
            K = b.point if b.point is not None and _inside(b.point, b) else f
            Ks.append((1 - ETA) * K + ETA * f)
        return cls(sc, np.stack(Ks), "center")

    @classmethod
    def extreme(cls, sc: SetChain, s: int, toward: bool) -> "SetChainModel":
        Ks = [(1 - ETA) * vertex(b.lo, b.hi, s, toward) + ETA * fill(b.lo, b.hi) for b in sc.blocks]
        return cls(sc, np.stack(Ks), f"{'toward' if toward else 'away from'} {sc.labels[s]}")

    def step_kernels(self, ts: float, n: int) -> NDArray[np.float64]:
        """Kernels (n − 1, k, k) of the steps of n positions from the one at epoch ``ts``."""
        return self.kernels[self.setchain.step_blocks(ts, max(n - 1, 0))]

    def law_at_ts(self, ts: float) -> NDArray[np.float64]:
        """The prior law of the position at epoch ``ts``: the uniform law moved through the kernels
        of the :data:`LAW_PERIODS` periods before it (a set-chain has no stationary law; this is
        the member's periodic law wherever it forgets its start within that time)."""
        steps = int(round(LAW_PERIODS * self.setchain.period / self.setchain.sample_period))
        law = np.full(self.setchain.k, 1.0 / self.setchain.k)
        for K in self.step_kernels(ts - steps * self.setchain.sample_period, steps + 1):
            law = law @ K
        return law

    def segment(self, position: int, n: int, anchor: tuple[int, float]) -> tuple[NDArray[np.float64],
                                                                                  NDArray[np.float64]]:
        """The step kernels and the first law of the n positions from ``position``; ``anchor`` =
        (position, epoch) of a record, from which the clocks are spaced by the sample period."""
        ts = anchor[1] + (position - anchor[0]) * self.setchain.sample_period
        return self.step_kernels(ts, n), self.law_at_ts(ts)


def members(sc: SetChain) -> tuple[SetChainModel, list[tuple[SetChainModel, SetChainModel]]]:
    """The center and, per state s, the (away from s, toward s) pair of members."""
    return SetChainModel.center(sc), [(SetChainModel.extreme(sc, s, False), SetChainModel.extreme(sc, s, True))
                                      for s in range(sc.k)]
