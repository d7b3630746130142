"""The per-position quilt accountant (notes/002 §4.7, §4.8, §8 "Incremental update").

Releases k = 1..K publish F_k(X) + Lap(β_k) noise, where F_k reads only a window W_k of stream
positions and is L_k-Lipschitz (Hamming / L1). Each position carries the **load**

    ρ_j = Σ_{k : j ∈ W_k} L_k / β_k           (1/σ_k for an MQM release with L = 1).

For every chain θ ∈ Θ and every position i — released or not — the whole release sequence is
ε_i(θ)-Pufferfish private about X_i, with

    ε_i(θ) = min over Markov quilts X_Q of X_i of [ Σ_{j ∈ N(X_Q)} ρ_j + e_θ(X_Q | X_i) ],
    ε      = max_θ max_i ε_i(θ)

(the Lemma A.2 argument applied to the joint mechanism; validated by exact enumeration in the
notes). It is never above Σ_k ε_k for whole-chain MQM releases, gives exactly ε for tumbling
windows released with σ_∞(ε), and max(ε_A, ε_B) for distant windows.

**Restricted quilt set** (conservative: fewer quilts, larger minimum). The stream is open to the
right, so only two-sided quilts {X_{i−a}, X_{i+b}} with 1 ≤ a, b ≤ R are used (N = [i−a+1, i+b−1],
the left node no earlier than ``chain_start``), plus the left-absent quilts {X_{i+b}}, b ≤ R, for
positions at most R after ``chain_start`` (N = [chain_start, i+b−1]). A release on [lo, hi] then
changes ε_i only for i ∈ [lo−R, hi+R], so a record costs O((hi−lo+4R) + segments touched) plus one
pruned quilt search per affected position — independent of how long the stream already is. The
running maximum of ε_i over positions is monotone because loads only grow. A position far from
every release still has ε_i = e(R, R) > 0 (pure correlation leakage under the restricted quilts):
that is the accountant's floor, and the reason to pick R where e(R, R) is negligible.

Modes: ``stat``, ``approx``, ``approx-rev`` (translation-invariant), and ``supq`` with its
conservative i = a + 1 table (valid at every position for any start). ``q`` (a fixed initial law)
is not translation-invariant and is refused.

Positions here are **0-based stream positions** (the daemon's ``seq``); ``chain_start`` is the
position of X_1.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from streamguard.support.jit import kernel
from streamguard.model.chain import ModelError
from streamguard.privacy.runs import Runs

from ._search import bb_load
from .influence import e_value
from .model import QuiltModel

#: Default radius: the smallest R with e_θ(R, R) ≤ this for every θ (the floor of ε at unloaded positions).
DEFAULT_FLOOR = 1e-9
#: Largest radius the default choice will pick; slower chains need an explicit ``radius``.
MAX_DEFAULT_RADIUS = 1 << 14
JSON_VERSION = 1
#: Positions evaluated per kernel call when deferred releases are settled. ε_i reads differences of
#: prefix sums of the loads taken from the chunk's start, so their rounding grows with the chunk:
#: 65,536 positions of tumbling windows differed from the release-by-release figure by 2.8e-12
#: (relative), 4,096 by 4.5e-14; 1,024 keeps a replay well inside ``ledger.store.SAME_RTOL``.
SETTLE_CHUNK = 1 << 10


@kernel
def _eps_positions(bwd, fwd, S, x0, count, pos0, chain_start, R, eps, theta, a_out, b_out):  # pragma: no cover
    """ε at local indices x0..x0+count−1 of a load window: S[j] = Σ_{m<j} ρ (local), local 0 is
    stream position pos0. Writes ε, the worst θ and its quilt (a = 0: left side absent)."""
    for n in range(count):
        x = x0 + n
        d = pos0 + x - chain_start  # positions between the chain start and x
        worst = -1.0
        wt = 0
        wa = 0
        wb = 0
        for t in range(bwd.shape[0]):
            best = np.inf
            ba = 0
            bb = 0
            if d <= R:  # left-absent quilts {X_{i+b}}: N = [chain_start, i+b−1]
                base = S[x - d]
                for b in range(1, R + 1):
                    load = S[x + b] - base
                    if load >= best:
                        break
                    v = load + e_value(bwd[t], fwd[t], 0, b)
                    if v < best:
                        best = v
                        bb = b
            v, a2, b2, _ = bb_load(bwd[t], fwd[t], S, x, min(R, d), R, best)
            if a2 > 0:
                best = v
                ba = a2
                bb = b2
            if best > worst:
                worst = best
                wt = t
                wa = ba
                wb = bb
        eps[n] = worst
        theta[n] = wt
        a_out[n] = wa
        b_out[n] = wb


def _check_position(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
        raise ValueError(f"{name} must be a non-negative integer stream position, got {v!r}")
    return int(v)


def _check_load(load: Any) -> float:
    if isinstance(load, bool) or not isinstance(load, (int, float, np.floating)):
        raise ValueError("load must be a number")
    x = float(load)
    if not (math.isfinite(x) and x >= 0):
        raise ValueError(f"load must be finite and ≥ 0, got {load!r}")
    return x


class QuiltAccountant:
    """Per-position quilt accountant over the load ρ stored as run-length segments.

    Parameters
    ----------
    model:
        Θ and the max-influence mode (not ``q``).
    radius:
        R, the largest quilt distance searched. Default: the smallest R with e_θ(R, R) ≤
        :data:`DEFAULT_FLOOR` for every θ.
    chain_start:
        Stream position of X_1; no window may start before it.
    """

    def __init__(self, model: QuiltModel, radius: int | None = None, chain_start: int = 0) -> None:
        if model.mode == "q":
            raise ValueError("the quilt accountant needs a translation-invariant mode or 'supq'; mode 'q' "
                             "(a fixed initial law) depends on the position")
        self.model = model
        self.chain_start = _check_position("chain_start", chain_start)
        if radius is None:
            radius = self._default_radius(model)
        elif isinstance(radius, bool) or not isinstance(radius, (int, np.integer)) or radius < 1:
            raise ValueError(f"radius must be an integer ≥ 1, got {radius!r}")
        self.radius = R = int(radius)
        tabs = [model.tables(t).ti(R) for t in range(len(model.chains))]
        width = max(b.shape[1] for b, _ in tabs)
        self._bwd = np.zeros((len(tabs), R + 1, width))
        self._fwd = np.zeros((len(tabs), R + 1, width))
        for t, (b, f) in enumerate(tabs):  # zero columns never raise the max over pairs
            self._bwd[t, :, : b.shape[1]] = b
            self._fwd[t, :, : f.shape[1]] = f
        #: ε of a position far from every release (max over θ of e(R, R)).
        self.floor = max(float(e_value(self._bwd[t], self._fwd[t], R, R)) for t in range(len(tabs)))
        self._runs = Runs()  # the loads ρ_j
        self._eps_max = self.floor
        self._unsettled: list[tuple[int, int]] = []  # ranges whose ε is not in eps_max yet (defer)

    @staticmethod
    def _default_radius(model: QuiltModel) -> int:
        def small(R: int) -> bool:
            for t in range(len(model.chains)):
                bwd, fwd = model.tables(t).ti(R)
                if not e_value(bwd, fwd, R, R) <= DEFAULT_FLOOR:
                    return False
            return True

        hi = 8
        while not small(hi):
            if hi >= MAX_DEFAULT_RADIUS:
                raise ModelError(f"the max-influence does not fall below {DEFAULT_FLOOR} within distance "
                                 f"{MAX_DEFAULT_RADIUS} (slowly mixing, periodic or reducible chain); pass an "
                                 "explicit radius")
            hi *= 2
        lo = hi // 2
        while hi - lo > 1:  # e(R, R) is non-increasing in R
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if small(mid) else (mid, hi)
        return hi

    # -- load segments --------------------------------------------------------------------------
    def segments(self) -> list[tuple[int, int, float]]:
        """The load ρ as [(start, end, value)], inclusive 0-based positions, value > 0."""
        return self._runs.segments()

    # -- evaluation -----------------------------------------------------------------------------
    def _evaluate(self, p0: int, p1: int, extra: tuple[int, int, float] | None = None):
        """ε, θ, a, b at positions p0..p1 (≥ chain_start), optionally with an extra load (lo, hi, x)."""
        R, c0 = self.radius, self.chain_start
        first, last = max(c0, p0 - R), p1 + R
        rho = self._runs.dense(first, last)
        if extra is not None:
            lo, hi, x = extra
            rho[max(lo, first) - first : min(hi, last) - first + 1] += x
        S = np.concatenate([[0.0], np.cumsum(rho)])
        count = p1 - p0 + 1
        eps, theta = np.empty(count), np.empty(count, dtype=np.int64)
        a, b = np.empty(count, dtype=np.int64), np.empty(count, dtype=np.int64)
        _eps_positions(self._bwd, self._fwd, S, p0 - first, count, first, c0, R, eps, theta, a, b)
        return eps, theta, a, b

    def _window(self, lo: Any, hi: Any) -> tuple[int, int]:
        lo, hi = _check_position("lo", lo), _check_position("hi", hi)
        if lo > hi:
            raise ValueError(f"empty window: lo = {lo} > hi = {hi}")
        if lo < self.chain_start:
            raise ValueError(f"window starts at {lo}, before the chain start {self.chain_start}")
        return lo, hi

    def _max_with(self, lo: int, hi: int, load: float) -> float:
        """eps_max if ``load`` were added on [lo, hi] (no state change), evaluated in the same
        pieces as a recorded release, so the check and the figure recorded agree."""
        self._settle()
        return max(self._eps_max, self._peak(max(self.chain_start, lo - self.radius), hi + self.radius, (lo, hi, load)))

    def _peak(self, a: int, b: int, extra: tuple[int, int, float] | None = None) -> float:
        """max of ε_i over i in [a, b], evaluated in pieces of ≤ SETTLE_CHUNK positions."""
        return max(float(self._evaluate(p0, min(b, p0 + SETTLE_CHUNK - 1), extra)[0].max())
                   for p0 in range(a, b + 1, SETTLE_CHUNK))

    # -- public API -----------------------------------------------------------------------------
    def record(self, lo: int, hi: int, load: float) -> float:
        """Add ``load`` (= L/β of a release) to positions lo..hi; returns the new eps_max."""
        self.defer(lo, hi, load)
        return self.eps_max()

    def defer(self, lo: int, hi: int, load: float) -> None:
        """:meth:`record` without evaluating ε yet (a replay of many releases): the positions the
        release can change, [lo − R, hi + R], are evaluated once for all deferred releases before
        anything reads eps_max (:meth:`_settle`). The result is the same: ε_i only grows with the
        loads, and a release on [lo, hi] changes ε_i only for i in [lo − R, hi + R] (module
        docstring), so the final ε over the union of those ranges is the running maximum."""
        lo, hi = self._window(lo, hi)
        x = _check_load(load)
        if x == 0.0:
            return
        self._runs.add(lo, hi, x)
        self._unsettled.append((max(self.chain_start, lo - self.radius), hi + self.radius))

    def _settle(self) -> None:
        """Evaluate the ranges of deferred releases (merged, in pieces of ≤ SETTLE_CHUNK positions);
        they are forgotten only once all are in eps_max."""
        if not self._unsettled:
            return
        ranges = sorted(self._unsettled)
        merged = [list(ranges[0])]
        for a, b in ranges[1:]:
            if a <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        for a, b in merged:
            self._eps_max = max(self._eps_max, self._peak(a, b))
        self._unsettled = []

    def adopt(self, eps_max: float, rtol: float) -> bool:
        """Take ``eps_max`` — the figure a process that recorded the same loads stored — if it is
        not below this accountant's own, or below it by at most ``rtol`` (relative): the same loads
        evaluated in another order (:meth:`defer`) can differ in the last bits. Returns whether
        it did; never takes a figure below the floor."""
        own = self.eps_max()
        if not (eps_max >= own * (1 - rtol) and eps_max >= self.floor):
            return False
        self._eps_max = float(eps_max)
        return True

    def would_exceed(self, lo: int, hi: int, load: float, budget: float) -> bool:
        """Would recording ``load`` on [lo, hi] push eps_max above ``budget``? (no state change)"""
        lo, hi = self._window(lo, hi)
        return self._max_with(lo, hi, _check_load(load)) > float(budget)

    def eps_at(self, i: int) -> tuple[float, int, tuple[int | None, int | None]]:
        """(ε_i, worst θ, its quilt (a, b)) at stream position i; a = None: left side absent."""
        i = self._window(i, i)[0]
        eps, theta, a, b = self._evaluate(i, i)
        return float(eps[0]), int(theta[0]), (int(a[0]) if a[0] > 0 else None, int(b[0]))

    def eps_profile(self, lo: int, hi: int) -> NDArray[np.float64]:
        """ε_i for i = lo..hi."""
        lo, hi = self._window(lo, hi)
        return self._evaluate(lo, hi)[0]

    def eps_max(self) -> float:
        """max over θ and all positions (released or not) of ε_i: the running guarantee."""
        self._settle()
        return self._eps_max

    def calibrate(self, lo: int, hi: int, lipschitz: float, budget: float) -> float:
        """Smallest Laplace scale β for an L-Lipschitz query on [lo, hi] keeping eps_max ≤ budget.

        Bisection on the load x = L/β (eps_max is non-decreasing in x and ≥ x, so x ≤ budget);
        the returned β comes from the feasible side. Raises ValueError when no positive load fits.
        """
        lo, hi = self._window(lo, hi)
        L = _check_load(lipschitz)
        budget = float(budget)
        if L == 0.0 or not math.isfinite(budget):
            raise ValueError("lipschitz must be > 0 and budget finite")
        if self.eps_max() > budget:
            raise ValueError(f"budget {budget} already exceeded (eps_max = {self._eps_max})")
        good, bad = 0.0, budget
        if self._max_with(lo, hi, bad) <= budget:
            good = bad
        else:
            for _ in range(200):
                mid = 0.5 * (good + bad)
                if mid <= good or mid >= bad:
                    break
                if self._max_with(lo, hi, mid) <= budget:
                    good = mid
                else:
                    bad = mid
        if good <= 0.0:
            raise ValueError(f"no positive load on [{lo}, {hi}] keeps eps_max within {budget}")
        beta = L / good
        while self._max_with(lo, hi, L / beta) > budget:  # L/(L/x) may round one ulp above x
            beta = math.nextafter(beta, math.inf)
        return beta

    # -- persistence ----------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """JSON-ready state: model identifier, radius, chain start, load segments and eps_max."""
        return {
            "version": JSON_VERSION,
            "model": self.model.identifier,
            "mode": self.model.mode,
            "radius": self.radius,
            "chain_start": self.chain_start,
            "segments": [[s, e, v] for s, e, v in self.segments()],
            "eps_max": self.eps_max(),
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any], model: QuiltModel) -> QuiltAccountant:
        """Restore from :meth:`to_json`; the model must be the one the state was computed for."""
        if doc.get("version") != JSON_VERSION:
            raise ValueError(f"unsupported accountant state version {doc.get('version')!r}")
        if doc.get("model") != model.identifier:
            raise ValueError(f"accountant state belongs to model {doc.get('model')!r}, not {model.identifier!r}")
        acc = cls(model, radius=doc["radius"], chain_start=doc["chain_start"])
        for s, e, v in doc["segments"]:
            s, e, v = _check_position("segment start", s), _check_position("segment end", e), _check_load(v)
            if s < acc.chain_start:
                raise ValueError("accountant state: a segment starts before the chain start")
            try:
                acc._runs.append(s, e, v)
            except ValueError as exc:
                raise ValueError(f"accountant state: {exc}") from None
        acc._eps_max = max(acc.floor, float(doc["eps_max"]))
        return acc
