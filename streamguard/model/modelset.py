"""Model sets: what a calibrated (or declared) model really is (DESIGN.md §3 "Model"; issue 11).

Three kinds, one file format (MODEL.json, written by ``streamguard calibrate``):

- ``finite``: a finite set Θ of chains (the worst member is exact);
- ``box``: a binary chain with α = P[0,1] ∈ [α_lo, α_hi] and β = P[1,0] ∈ [β_lo, β_hi] — for a
  binary calibration this box *is* the confidence region (each row set is an interval);
- ``rows``: a k-state region, row by row: row i lies in {p : Σ_j n_ij log p_j > c_i}
  (:mod:`.confidence`), with its per-entry projections as bounds.

Every set carries its point estimate (the MLE for a calibration), used for the utility figures and
as a design candidate — never as the truth: plans are checked over the whole set
(:mod:`.robust`). A set that contains a chain which never leaves some state (α_lo = 0 …) admits no
plan for an unbounded stream; the planners say so instead of pretending.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from .chain import MarkovChain, ModelError
from ..support.private_files import private_file
from .calibrate import TransitionData
from .confidence import entry_bounds, in_row_set, row_threshold

if TYPE_CHECKING:
    from .setchain import SetChain

FORMAT = "streamguard-model-set/1"
KINDS = ("finite", "box", "rows")


@dataclass(frozen=True)
class ModelSet:
    """A set of Markov chains (module docstring). ``point`` is the point estimate (None: none);
    ``members`` the finite members (``finite``); ``box`` ((α_lo, α_hi), (β_lo, β_hi)) for ``box``;
    ``counts``/``thresholds``/``bounds`` the row sets of ``rows`` (and of a calibrated box)."""

    kind: str
    k: int
    point: MarkovChain | None = None
    members: tuple[MarkovChain, ...] = ()
    box: tuple[tuple[float, float], tuple[float, float]] | None = None
    counts: NDArray[np.int64] | None = None
    thresholds: tuple[float, ...] = ()
    bounds: NDArray[np.float64] | None = None
    confidence: float | None = None
    labels: tuple[str, ...] | None = None
    calibration: dict[str, Any] = field(default_factory=dict)
    #: The time-of-day set-chain this set was read from (its scenarios are the members); the drift
    #: guard tests against its per-block sets. None for every other set.
    setchain: "SetChain | None" = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ModelError(f"model set: kind must be one of {', '.join(KINDS)}")
        if self.kind == "finite" and not self.members:
            raise ModelError("model set: a finite set needs at least one member")
        if self.kind == "box":
            if self.box is None or self.k != 2:
                raise ModelError("model set: a box is a binary chain's (alpha, beta) ranges")
            for name, (lo, hi) in zip(("alpha", "beta"), self.box):
                if not (0.0 <= lo <= hi <= 1.0):
                    raise ModelError(f"model set: {name} range must satisfy 0 ≤ lo ≤ hi ≤ 1")
        if self.kind == "rows" and (self.counts is None or len(self.thresholds) != self.k):
            raise ModelError("model set: a row-wise region needs counts and one threshold per row")
        if self.kind == "rows" and self.k == 2:  # the daemon certifies binary regions as boxes only
            raise ModelError("model set: a binary region is a box of (alpha, beta) ranges, not kind 'rows'")

    # -- what the planners need --------------------------------------------------------------
    @property
    def is_binary(self) -> bool:
        return self.k == 2

    def alpha_range(self) -> tuple[float, float]:
        return self._ranges()[0]

    def beta_range(self) -> tuple[float, float]:
        return self._ranges()[1]

    def _ranges(self) -> tuple[tuple[float, float], tuple[float, float]]:
        if self.box is not None:
            return self.box
        if self.kind == "finite" and self.k == 2:
            a = [m.alpha for m in self.members]
            b = [m.beta for m in self.members]
            return (min(a), max(a)), (min(b), max(b))
        raise ModelError("model set: (alpha, beta) ranges exist for binary sets only")

    def contains(self, chain: MarkovChain) -> bool:
        """Is ``chain`` (its transition matrix) in the set?"""
        P = chain.matrix
        if P.shape != (self.k, self.k):
            return False
        if self.kind == "finite":
            return any(np.allclose(P, m.matrix, rtol=0, atol=1e-12) for m in self.members)
        if self.kind == "box":
            (a0, a1), (b0, b1) = self.box  # type: ignore[misc]
            return a0 <= P[0, 1] <= a1 and b0 <= P[1, 0] <= b1
        assert self.counts is not None
        return all(in_row_set(self.counts[i], P[i], self.thresholds[i]) for i in range(self.k))

    def corners(self) -> list[MarkovChain]:
        """The binary box's corners that are chains (0 < α, β < 1), or the finite members."""
        if self.kind == "finite":
            return list(self.members)
        (a0, a1), (b0, b1) = self._ranges()
        out = []
        for a in (a0, a1):
            for b in (b0, b1):
                if 0.0 < a < 1.0 and 0.0 < b < 1.0:
                    out.append(MarkovChain.binary(a, b))
        return out

    def digest(self) -> str:
        """A short id of the set (SHA-256 of its canonical JSON): names it in the status and ledger."""
        text = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def describe(self) -> dict[str, Any]:
        """A JSON-ready summary (privacy status, ``config check``, ``plan --json``)."""
        out: dict[str, Any] = {"id": self.digest(), "kind": self.kind, "states": self.k,
                               "confidence": self.confidence}
        if self.point is not None:
            out["point"] = self.point.matrix.tolist()
        if self.kind == "finite":
            out["members"] = len(self.members)
            out["chains"] = [m.matrix.tolist() for m in self.members]
        if self.is_binary and self.kind != "rows":
            (a0, a1), (b0, b1) = self._ranges()
            out["alpha"], out["beta"] = [a0, a1], [b0, b1]
        if self.bounds is not None:
            out["entry_bounds"] = self.bounds.tolist()
        return out

    # -- MODEL.json ----------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"format": FORMAT, "kind": self.kind, "states": self.k,
                               "labels": None if self.labels is None else list(self.labels),
                               "confidence": self.confidence,
                               "point": None if self.point is None else self.point.matrix.tolist()}
        if self.kind == "finite":
            doc["members"] = [m.matrix.tolist() for m in self.members]
        if self.box is not None:
            doc["alpha"], doc["beta"] = list(self.box[0]), list(self.box[1])
        if self.counts is not None:
            doc["counts"] = self.counts.tolist()
            doc["thresholds"] = list(self.thresholds)
        if self.bounds is not None:
            doc["entry_bounds"] = self.bounds.tolist()
        if self.calibration:
            doc["calibration"] = self.calibration
        return doc

    def write(self, path: Path) -> None:
        """Write MODEL.json (:func:`write_model_json`)."""
        write_model_json(path, self.to_json())


def write_model_json(path: Path, doc: dict[str, Any]) -> None:
    """Write a MODEL.json document (created private: it describes the sensor's behaviour)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    private_file(tmp)  # created 0600 before anything is written
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)


def _matrix(doc: Any, what: str) -> MarkovChain:
    try:
        return MarkovChain(doc)
    except ModelError as exc:
        raise ModelError(f"model set: {what}: {exc}") from None


def _range(doc: dict[str, Any], name: str) -> tuple[float, float]:
    v = doc.get(name)
    if not (isinstance(v, list) and len(v) == 2 and all(isinstance(x, (int, float)) and math.isfinite(x) for x in v)):
        raise ModelError(f"model set: {name} must be a [lo, hi] pair of numbers")
    return float(v[0]), float(v[1])


def from_json(doc: Any) -> ModelSet:
    """Parse a MODEL.json document (ModelError with a one-line reason on anything malformed). A
    set-chain (``calibrate``'s default, :mod:`.setchain`) is not a model set: refused by name."""
    if isinstance(doc, dict) and doc.get("kind") == "setchain":
        return _scenario_set(doc)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ModelError(f"model set: not a {FORMAT} document")
    kind = doc.get("kind")
    k = doc.get("states")
    if kind not in KINDS or not isinstance(k, int) or k < 2:
        raise ModelError("model set: needs a known kind and a number of states ≥ 2")
    point = None if doc.get("point") is None else _matrix(doc["point"], "point")
    labels = doc.get("labels")
    common: dict[str, Any] = {"point": point, "confidence": doc.get("confidence"),
                              "labels": None if labels is None else tuple(str(x) for x in labels),
                              "calibration": doc.get("calibration") or {}}
    counts = thresholds = bounds = None
    if "counts" in doc:
        counts = np.array(doc["counts"], dtype=np.int64)
        if counts.shape != (k, k) or np.any(counts < 0):
            raise ModelError("model set: counts must be a k×k matrix of non-negative integers")
        thresholds = tuple(float(c) for c in doc.get("thresholds", ()))
        if len(thresholds) != k:
            raise ModelError("model set: one threshold per row")
    if "entry_bounds" in doc:
        bounds = np.array(doc["entry_bounds"], dtype=np.float64)
    if kind == "finite":
        members = tuple(_matrix(m, f"member {i + 1}") for i, m in enumerate(doc.get("members") or []))
        if any(m.k != k for m in members):
            raise ModelError("model set: every member needs the set's number of states")
        return ModelSet("finite", k, members=members, **common)
    if kind == "box":
        return ModelSet("box", k, box=(_range(doc, "alpha"), _range(doc, "beta")), counts=counts,
                        thresholds=thresholds or (), bounds=bounds, **common)
    return ModelSet("rows", k, counts=counts, thresholds=thresholds or (), bounds=bounds, **common)


def _scenario_set(doc: dict[str, Any]) -> ModelSet:
    """A time-of-day set-chain (``calibrate``'s default) is used through its calibration's scenarios:
    the ``finite`` set of each recorded day's chain and the pooled chain (docs/time-varying.md §7),
    with the set-chain kept for the drift guard, which holds each of its time-of-day blocks to the
    range the scenarios span (model/block_drift.py). A set-chain without scenarios (written
    by hand, or before they were kept) is refused by name."""
    from .setchain import SetChain

    sc = SetChain.from_json(doc)
    if sc.scenarios is None:
        raise ModelError("model set: this time-of-day set-chain carries no calibration scenarios (write it again "
                         "with streamguard calibrate, or calibrate with --model-class homogeneous)")
    if sc.memory != 1:
        raise ModelError("model set: a set-chain with memory > 1 has no first-order scenarios")
    if sc.k != 2:  # its plans must also hold under the time-of-day chain, checked for binary rows only
        raise ModelError(f"model set: a {sc.k}-state set-chain cannot be run yet (the time-of-day scenario is "
                         "checked for binary streams only); calibrate with --model-class homogeneous")
    from .scenarios import check_period

    check_period(sc.sample_period)  # (its figures cover every clock position only on such a grid)
    ms = sc.scenarios.model_set(sc.labels)
    return replace(ms, calibration={**ms.calibration, "setchain": (sc.calibration or {}).get("file"),
                                    "sample_period": sc.sample_period}, setchain=sc)


def load(path: Path) -> ModelSet:
    """Read MODEL.json."""
    try:
        doc = json.loads(Path(path).read_text())
    except ValueError:
        raise ModelError(f"model set {path}: not valid JSON") from None
    return from_json(doc)


def from_calibration(data: TransitionData, confidence: float, labels: tuple[str, ...] | None = None,
                     info: dict[str, Any] | None = None) -> ModelSet:
    """The model set of a calibration at ``confidence`` = 1 − δ (:mod:`.confidence`): row sets at
    δ/k each (union bound), their entry bounds, and the unsmoothed MLE as the point estimate.

    Why the MLE, unsmoothed: it is the centre of the likelihood region; add-one smoothing pulls a
    sticky chain toward weaker correlation, which is the direction that under-protects (issue 11's
    table). The point is only a summary; plans hold over the region. A state never left has no MLE
    row: the point estimate is then omitted."""
    if not 0.0 < confidence < 1.0:
        raise ModelError("confidence must lie strictly between 0 and 1")
    k = data.counts.shape[0]
    delta_row = (1.0 - confidence) / k
    thresholds = tuple(row_threshold(data.counts[i], delta_row) for i in range(k))
    bounds = np.stack([entry_bounds(data.counts[i], thresholds[i]) for i in range(k)])
    visits = data.counts.sum(axis=1)
    point = None
    if np.all(visits > 0):
        try:
            point = MarkovChain(data.counts / visits[:, None])
        except ModelError:
            point = None  # e.g. an MLE that never leaves a state: no unique stationary law
    calib = {"method": "mixture-martingale row sets (Dirichlet ½), union bound over rows",
             "delta_per_row": delta_row, **data.as_dict(), **(info or {})}
    common: dict[str, Any] = {"point": point, "counts": data.counts.copy(), "thresholds": thresholds,
                              "bounds": bounds, "confidence": confidence, "labels": labels,
                              "calibration": calib}
    if k == 2:
        box = ((float(bounds[0, 1, 0]), float(bounds[0, 1, 1])), (float(bounds[1, 0, 0]), float(bounds[1, 0, 1])))
        return ModelSet("box", 2, box=box, **common)
    return ModelSet("rows", k, **common)
