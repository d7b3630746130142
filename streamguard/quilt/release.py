"""Windowed MQM aggregate releases: histogram, count and mean over a window (notes/002 §3.5–3.6, §8).

A release reads the states of one window W = [lo, hi] of the stream and publishes F(X_W) plus
exact discrete Laplace noise (:mod:`streamguard.quilt.noise`). With σ the 1-Lipschitz MQM scale
of the model (σ_max(T) or the length-independent σ_∞ / σ̄_supq) and L the query's Lipschitz
constant (Hamming → L1, notes §3.6), each coordinate gets noise of scale β = L·σ:

| kind | F | L (query units) | lattice step | noise, in lattice steps |
|---|---|---|---|---|
| ``histogram`` | count of every state in W | 2 (one change moves two bins) | 1 | L·σ = 2σ, i.i.d. per bin |
| ``count`` | count of one state in W | 1 | 1 | σ |
| ``mean`` | (1/|W|) Σ_{j∈W} v(X_j) | (v_hi − v_lo)/|W| | step/|W| | G·σ, G = (v_hi − v_lo)/step |

The mean is released on a stated grid: each per-state value v(x) is quantised once, data-
independently, to q(x) = round((v(x) − v_lo)/step) ∈ {0..G}; the window sum S = Σ q(X_j) is an
integer number of grid steps with Lipschitz constant G, gets discrete noise of scale G·σ, and the
mean v_lo + step·(S + Z)/|W| is post-processing. (Quantising moves the mean by ≤ step/2.)

Noise realised: the discrete Laplace scale actually used is β' ≥ β (rounded *up* to a dyadic
rational, stated exactly in the record), so the release is at least as private as claimed.

Privacy cost charged to the per-position quilt accountant: the load ρ = L/β = 1/σ on every
position of W (notes §4.7). Tumbling windows all using σ_∞(ε) therefore cost ε in total; a
short-window σ_max(|W|) must not be used for adjacent windows (notes §6.7: 4.73 > 4).

Post-processing of the *output* (clipping counts to [0, |W|], a mean to [v_lo, v_hi]) is allowed
and optional (``clip=True``); truncating the *noise* is not, and nothing here does it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..sampling import BitSource
from .model import QuiltModel
from .noise import DiscreteLaplace
from .scale import Scale

KINDS = ("histogram", "count", "mean")


class ReleaseError(ValueError):
    """A release request is malformed (names the problem, never a data value)."""


@dataclass(frozen=True)
class AggregateRelease:
    """One published MQM aggregate (module docstring). Positions are 0-based, the window inclusive.

    ``values`` are the noisy outputs in the query's units (one per state for a histogram), after
    optional clipping (``clipped``). ``lipschitz`` is L and ``beta`` = L·σ in the query's units;
    ``grid`` the step of the released lattice in those units, ``noise_scale`` the realised discrete
    Laplace scale in lattice steps (exact ``noise_num/noise_den`` ≥ β/grid). ``epsilon`` is the
    target σ was computed for, ``model`` the identifier of Θ, ``mode`` its max-influence mode,
    ``T`` the chain length σ is valid for (None = any), ``witness`` the active quilt of the scale
    search. With a finite T the ε target holds for the secrets of the T-record segment σ was
    computed on (positions 0..T−1 under mode ``q``); what several releases give together is the
    accountant's business (short-window σ's on adjacent windows exceed ε, notes/002 §6.7). ``sampler``/``deterministic`` say whether the noise came from the OS CSPRNG or a seeded
    test source. ``query`` describes the query itself (state, value table, bounds, grid).
    """

    kind: str
    lo: int
    hi: int
    values: tuple[float, ...]
    lipschitz: float
    sigma: float
    beta: float
    grid: float
    noise_num: int
    noise_den: int
    epsilon: float
    model: str
    mode: str
    t_independent: bool
    T: int | None
    witness: Mapping[str, Any]
    sampler: str
    deterministic: bool
    clipped: bool
    query: Mapping[str, Any]

    @property
    def window_length(self) -> int:
        return self.hi - self.lo + 1

    @property
    def load(self) -> float:
        """ρ = L/β = 1/σ added to every position of the window (notes/002 §4.7)."""
        return self.lipschitz / self.beta

    @property
    def noise_scale(self) -> float:
        """Realised discrete Laplace scale in lattice steps (≥ β/grid)."""
        return self.noise_num / self.noise_den

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict (0-based window). Field names match the ledger's aggregate event."""
        doc = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        doc["values"] = list(self.values)
        doc["witness"] = dict(self.witness)
        doc["query"] = dict(self.query)
        doc["load"] = self.load
        doc["noise_scale"] = self.noise_scale
        return doc


# ---------------------------------------------------------------------------------- releases


def histogram(
    states: ArrayLike, lo: int, model: QuiltModel, scale: Scale, source: BitSource, *, clip: bool = False
) -> AggregateRelease:
    """Noisy count of every state over the window [lo, lo + len(states) − 1] (L = 2).

    ``scale`` must come from ``model`` (σ_max, σ_∞ or σ̄_supq); ``source`` draws the noise.
    """
    x = _window_states(states, lo, model, scale)
    counts = np.bincount(x, minlength=model.k).astype(np.int64)
    return _publish("histogram", counts, 2, lo, len(x), model, scale, source, {"k": model.k}, clip, (0, len(x)))


def count(
    states: ArrayLike, lo: int, state: int, model: QuiltModel, scale: Scale, source: BitSource,
    *, clip: bool = False,
) -> AggregateRelease:
    """Noisy number of records equal to ``state`` in the window (L = 1)."""
    k = model.k
    if isinstance(state, bool) or not (isinstance(state, (int, np.integer)) and 0 <= state < k):
        raise ReleaseError(f"count: state must be one of 0..{k - 1}")
    x = _window_states(states, lo, model, scale)
    c = np.array([np.count_nonzero(x == state)], dtype=np.int64)
    return _publish("count", c, 1, lo, len(x), model, scale, source, {"k": k, "state": int(state)}, clip,
                    (0, len(x)))


def mean(
    states: ArrayLike, lo: int, values: Sequence[float], v_lo: float, v_hi: float, step: float,
    model: QuiltModel, scale: Scale, source: BitSource, *, clip: bool = False,
) -> AggregateRelease:
    """Noisy mean of the per-state value ``values[x]`` ∈ [v_lo, v_hi] over the window, on the grid
    v_lo + step·ℤ/|W| (module docstring): Lipschitz G = (v_hi − v_lo)/step in grid steps."""
    grid_units = quantise_values(values, v_lo, v_hi, step)
    if len(grid_units) != model.k:
        raise ReleaseError(f"mean: values must give one number per state ({model.k})")
    x = _window_states(states, lo, model, scale)
    W = len(x)
    total = np.array([int(grid_units[x].sum())], dtype=np.int64)
    G = int(round((v_hi - v_lo) / step))
    query = {"k": model.k, "values": [float(v) for v in values], "v_lo": float(v_lo), "v_hi": float(v_hi),
             "step": float(step), "grid_units": grid_units.tolist()}
    rel = _publish("mean", total, G, lo, W, model, scale, source, query, clip, (0, G * W))
    # post-processing: grid steps → the mean in the value's units
    to_mean = tuple(float(v_lo + step * s / W) for s in rel.values)
    return dataclasses.replace(rel, values=to_mean, lipschitz=(v_hi - v_lo) / W,
                               beta=(v_hi - v_lo) / W * rel.sigma, grid=step / W)


def quantise_values(values: Sequence[float], v_lo: float, v_hi: float, step: float) -> NDArray[np.int64]:
    """Per-state grid units q(x) = round((v(x) − v_lo)/step) ∈ {0..G}, G = (v_hi − v_lo)/step an integer."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1 or v.size < 2:
        raise ReleaseError("mean: values must give one number per state (k ≥ 2)")
    for name, b in (("v_lo", v_lo), ("v_hi", v_hi), ("step", step)):
        if not (isinstance(b, (int, float)) and math.isfinite(b)):
            raise ReleaseError(f"mean: {name} must be a finite number")
    if not (step > 0 and v_hi > v_lo):
        raise ReleaseError("mean: need v_lo < v_hi and step > 0")
    if not np.all(np.isfinite(v)) or np.any(v < v_lo) or np.any(v > v_hi):
        raise ReleaseError("mean: every per-state value must lie in [v_lo, v_hi]")
    G = (v_hi - v_lo) / step
    if abs(G - round(G)) > 1e-9 * max(1.0, G):
        raise ReleaseError("mean: (v_hi − v_lo)/step must be a whole number of grid steps")
    return np.clip(np.rint((v - v_lo) / step), 0, round(G)).astype(np.int64)


# --------------------------------------------------------------------------------- internals


def _window_states(states: ArrayLike, lo: int, model: QuiltModel, scale: Scale) -> NDArray[np.int64]:
    if scale.mode != model.mode:
        raise ReleaseError(f"σ was computed under mode {scale.mode!r}, the model's mode is {model.mode!r}")
    k = model.k
    raw = np.asarray(states)
    if raw.ndim != 1 or raw.size == 0:
        raise ReleaseError("a window needs a non-empty 1-D sequence of states")
    if raw.dtype.kind not in "iu":
        raise ReleaseError(f"states must be integers, got dtype {raw.dtype}; refusing to release")
    bad = int(np.count_nonzero((raw < 0) | (raw >= k)))
    if bad:
        raise ReleaseError(f"{bad} record(s) have a state outside 0..{k - 1}; refusing to release")
    if not (isinstance(lo, (int, np.integer)) and lo >= 0):
        raise ReleaseError("window start must be a 0-based position")
    hi = int(lo) + raw.size - 1
    if scale.T is not None:
        # σ_max(T) is Algorithm 1 on a chain of T records. Under mode q that chain is the stream's
        # first T positions (the initial law sits at position 0); under every other mode any T
        # consecutive positions are such a chain (stationary, or any start), so a window of at most
        # T records is an MQM release on the segment it lies in.
        if scale.mode == "q" and hi >= scale.T:
            raise ReleaseError(f"window [{lo}, {hi}] reaches beyond the {scale.T} positions σ was computed for")
        if raw.size > scale.T:
            raise ReleaseError(f"window of {raw.size} records is longer than the T = {scale.T} σ was computed for")
    if not (math.isfinite(scale.sigma) and scale.sigma > 0):
        raise ReleaseError("σ is not a finite positive scale for this model and ε; refusing to release")
    return raw.astype(np.int64)


def _publish(
    kind: str, exact: NDArray[np.int64], L: int, lo: int, W: int, model: QuiltModel, scale: Scale,
    source: BitSource, query: dict[str, Any], clip: bool, bounds: tuple[int, int],
) -> AggregateRelease:
    """Add i.i.d. discrete Laplace noise of scale ≥ L·σ (lattice steps) to integer ``exact``."""
    law = DiscreteLaplace.at_least(L * scale.sigma)
    noisy = exact + law.sample(exact.size, source)
    if clip:
        noisy = np.clip(noisy, *bounds)
    return AggregateRelease(
        kind=kind, lo=int(lo), hi=int(lo) + W - 1, values=tuple(int(v) for v in noisy),
        lipschitz=float(L), sigma=float(scale.sigma), beta=float(L * scale.sigma), grid=1.0,
        noise_num=law.num, noise_den=law.den, epsilon=float(scale.epsilon), model=model.identifier, mode=model.mode,
        t_independent=bool(scale.t_independent), T=scale.T, witness=scale.witness.as_dict(),
        sampler="seeded" if source.deterministic else "csprng", deterministic=bool(source.deterministic),
        clipped=bool(clip), query=query,
    )
