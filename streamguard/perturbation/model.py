"""The objects every per-record perturbation designer shares: a joint law P(S, X) and a channel.

* :class:`Joint` is the model the designers work from: P_SX(s, x), an |S|×|X| matrix with full-support
  marginals (notes/003 §1, notes/004 §1). Paper 001 has no separate S — the sensitive quantity is
  X itself — and :meth:`Joint.from_prior` builds that case as S = X with P_SX = diag(P_X).
* :class:`PerturbationChannel` is one designed mechanism: a row-stochastic matrix from inputs to
  outputs (DESIGN.md §2, "a local channel"). Markov kinds read x only (rows indexed by x,
  P_{Y|X}); non-Markov kinds (paper 004's optimal non-Markov reduction) read the pair (s, x) and
  index rows by s·|X| + x (P_{Y|S,X}). Output symbols are x values, or merged groups of x values
  (the watchdog and subset merging release a group as one symbol, notes/003 §2.2).
* :class:`Claim` is what the designer promises about its channel, in the notion it was designed
  for; ``perturbation.verify`` checks it exactly before the channel may be saved, loaded or used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..privacy.budget import MAX_EPSILON

#: Tolerance for "sums to one" on a joint or a channel row given in floating point.
SUM_TOL = 1e-9

#: The largest privacy level, in nats, that a designer accepts as a budget or a claim may state
#: (every ε-type parameter: ``epsilon``, ``eps_l``, ``eps_u``). A likelihood ratio of e^1000 ≈ 10^434
#: is not a privacy guarantee (the lift of any float model is below 1/5e−324 ≈ e^744.4), and the exact
#: verifier builds e^ε as a rational: a bound keeps its integers, and so its time, small. Above it a
#: budget is refused (:func:`require_level`), never clamped.
MAX_LEVEL = MAX_EPSILON

InputKind = Literal["x", "sx"]
Symbol = int | tuple[int, ...]


class ModelInputError(ValueError):
    """A joint distribution or prior is malformed (negative, not summing to 1, a zero marginal)."""


class DesignError(ValueError):
    """A mechanism cannot be designed for these inputs (e.g. a budget below a paper's threshold)."""


def require_level(value: float, name: str = "epsilon") -> float:
    """``value`` unless it is a finite level above :data:`MAX_LEVEL` (then :class:`DesignError`);
    the caller has already checked that it is a number (∞, where a designer allows it, passes)."""
    if math.isfinite(value) and value > MAX_LEVEL:
        raise DesignError(f"{name} = {value:g} nats is above {MAX_LEVEL:g}: not a privacy guarantee; refused")
    return value


def _floats(values: ArrayLike, what: str, shape: str) -> NDArray[np.float64]:
    """``values`` as a float64 array; :class:`ModelInputError` naming ``what`` if they are not numbers
    or a number does not fit a float (a JSON integer such as 10**400)."""
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ModelInputError(f"{what}: not a numeric {shape}") from None
    except OverflowError:
        raise ModelInputError(f"{what}: contains a number too large for a float") from None


def _matrix(values: ArrayLike, what: str) -> NDArray[np.float64]:
    arr = _floats(values, what, "matrix")
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 2:
        raise ModelInputError(f"{what}: expected a matrix with at least 2 columns, got shape {arr.shape}")
    _require_distribution(arr, what)
    return arr


def _require_distribution(arr: NDArray[np.float64], what: str) -> None:
    """Finite, non-negative entries summing to 1 (within :data:`SUM_TOL`); the message names ``what``."""
    if not np.all(np.isfinite(arr)):
        raise ModelInputError(f"{what}: contains NaN or infinity")
    if np.any(arr < 0):
        raise ModelInputError(f"{what}: has negative entries")
    total = float(arr.sum())
    if abs(total - 1.0) > SUM_TOL:
        raise ModelInputError(f"{what}: entries sum to {total:.12g}, not 1")


@dataclass(frozen=True)
class Joint:
    """A joint law P_SX(s, x): rows s ∈ 𝒮, columns x ∈ 𝒳, all entries ≥ 0, summing to 1,
    with P_S(s) > 0 and P_X(x) > 0 for every s and x (notes/003 §1: keeps every lift finite)."""

    p: NDArray[np.float64]

    def __post_init__(self) -> None:
        p = _matrix(self.p, "joint")
        for axis, name, other in ((1, "s", "P_S"), (0, "x", "P_X")):
            zero = np.flatnonzero(p.sum(axis=axis) <= 0)
            if zero.size:
                raise ModelInputError(f"joint: zero marginal {other}({name}={int(zero[0])})")
        p.setflags(write=False)
        object.__setattr__(self, "p", p)

    @classmethod
    def from_prior(cls, prior: ArrayLike) -> Joint:
        """Paper 001's setting: no separate S, the secret is X itself (P_SX = diag(P_X)).

        The prior is checked as given (finite, non-negative, summing to 1, every P(x) > 0), so a bad
        prior is named as the prior, not as the diagonal joint built from it."""
        px = _floats(prior, "prior", "vector")
        if px.ndim != 1 or px.size < 2:
            raise ModelInputError(f"prior: expected a vector of at least 2 probabilities, got shape {px.shape}")
        _require_distribution(px, "prior")
        zero = np.flatnonzero(px == 0)
        if zero.size:
            raise ModelInputError(f"prior: P(x={int(zero[0])}) is 0 (every state needs a positive probability)")
        return cls(np.diag(px))

    @classmethod
    def from_json(cls, doc: Any) -> Joint:
        """``{"joint": [[P(s, x) …] per s]}`` (the CLI's ``--joint FILE.json``)."""
        if not isinstance(doc, dict) or "joint" not in doc:
            raise ModelInputError('joint file: expected an object with key "joint"')
        return cls(doc["joint"])

    @property
    def n_s(self) -> int:
        return int(self.p.shape[0])

    @property
    def n_x(self) -> int:
        return int(self.p.shape[1])

    @property
    def p_s(self) -> NDArray[np.float64]:
        return self.p.sum(axis=1)

    @property
    def p_x(self) -> NDArray[np.float64]:
        return self.p.sum(axis=0)

    @property
    def x_given_s(self) -> NDArray[np.float64]:
        """P_{X|S}: rows s, each a distribution over x."""
        return self.p / self.p_s[:, None]

    @property
    def s_given_x(self) -> NDArray[np.float64]:
        """P_{S|X}: rows x, each a distribution over s (shape |X|×|S|)."""
        return (self.p / self.p_x[None, :]).T

    @property
    def is_prior_only(self) -> bool:
        """True for a paper-001 joint built by :meth:`from_prior` (S = X)."""
        return self.n_s == self.n_x and not np.any(self.p - np.diag(np.diag(self.p)))

    def to_json(self) -> dict[str, Any]:
        return {"joint": self.p.tolist()}


@dataclass(frozen=True)
class Claim:
    """A designer's promise about its channel, checked exactly by ``perturbation.verify``.

    ``notion`` names the guarantee; ``params`` holds its budgets, e.g.
    ``Claim("ldp_x", {"epsilon": 1.0})`` (classical LDP of the channel w.r.t. its input x),
    ``Claim("ldp_s", {"epsilon": 1.0})`` (LDP w.r.t. S, notes/003 Def. 2, notes/004 eq. 1),
    ``Claim("alip", {"eps_l": 0.65, "eps_u": 0.35})``, ``Claim("lip", {"epsilon": 0.5})``,
    ``Claim("log_lift", {"epsilon": 1.0})``, ``Claim("identifiability", {"epsilon": 1.0})``,
    ``Claim("distortion", {"D": 0.2})``, and the lift-based / lift-inverse measures of notes/003 §2.6
    with a float bound, e.g. ``Claim("l1_lift", {"threshold": 0.5})``,
    ``Claim("alpha_lift_inverse", {"alpha": 2.0, "threshold": 1.8})``. A channel may carry several
    claims. The full list, with the exact constraint of each, is ``verify.NOTIONS`` (definitions in
    :mod:`.lift`); an unknown notion or a missing parameter is refused, never skipped.
    """

    notion: str
    params: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"notion": self.notion, "params": dict(self.params)}


@dataclass(frozen=True)
class PerturbationChannel:
    """A designed per-record mechanism.

    ``matrix[r, j]`` is Pr(output j | input row r). Rows are indexed by x (``inputs == "x"``,
    shape |X|×|Y|) or by s·|X| + x (``inputs == "sx"``, shape |S|·|X|×|Y|). ``outputs[j]`` names
    output j: an x value, or a tuple of x values for a merged group. ``claims`` are the guarantees
    the designer states; ``params`` the design inputs (kind-specific: ε, λ, measure, α, …) so a
    saved channel says how it was made.
    """

    kind: str
    matrix: NDArray[np.float64]
    inputs: InputKind
    n_s: int
    n_x: int
    outputs: tuple[Symbol, ...]
    claims: tuple[Claim, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        m = _floats(self.matrix, "channel", "matrix")
        rows = self.n_x if self.inputs == "x" else self.n_s * self.n_x
        if self.inputs not in ("x", "sx"):
            raise ModelInputError(f"channel: inputs must be 'x' or 'sx', got {self.inputs!r}")
        if m.ndim != 2 or m.shape[0] != rows or m.shape[1] != len(self.outputs):
            raise ModelInputError(
                f"channel: expected shape ({rows}, {len(self.outputs)}) for inputs={self.inputs!r}, got {m.shape}")
        if not np.all(np.isfinite(m)) or np.any(m < 0):
            raise ModelInputError("channel: entries must be finite and non-negative")
        bad = np.flatnonzero(np.abs(m.sum(axis=1) - 1.0) > SUM_TOL)
        if bad.size:
            raise ModelInputError(f"channel: row {int(bad[0])} sums to {m[bad[0]].sum():.12g}, not 1")
        m.setflags(write=False)
        object.__setattr__(self, "matrix", m)
        object.__setattr__(self, "outputs", tuple(o if isinstance(o, int) else tuple(int(v) for v in o)
                                                  for o in self.outputs))

    @property
    def n_y(self) -> int:
        return len(self.outputs)

    def row(self, x: int, s: int | None = None) -> NDArray[np.float64]:
        """P(· | x) for Markov kinds, P(· | s, x) for ``inputs == "sx"`` (then ``s`` is required)."""
        if self.inputs == "x":
            return self.matrix[x]
        if s is None:
            raise ModelInputError(f"channel kind {self.kind!r} needs the sensitive attribute S of each record")
        return self.matrix[s * self.n_x + x]

    def effective(self, joint: Joint) -> NDArray[np.float64]:
        """P_{Y|S}: rows s. For x-input channels P_{X|S}·W; for (s, x) inputs Σ_x P(x|s)·W[(s,x)]."""
        pxs = joint.x_given_s
        if self.inputs == "x":
            return pxs @ self.matrix
        w = self.matrix.reshape(self.n_s, self.n_x, self.n_y)
        return np.einsum("sx,sxy->sy", pxs, w)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "inputs": self.inputs,
            "n_s": self.n_s,
            "n_x": self.n_x,
            "outputs": [o if isinstance(o, int) else list(o) for o in self.outputs],
            "channel": self.matrix.tolist(),
            "claims": [c.to_json() for c in self.claims],
            "params": dict(self.params),
        }
