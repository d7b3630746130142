"""Estimating a stream's Markov model from calibration data (DESIGN.md §3, "Model").

Input: a file of raw frames, one JSON object per line, as the daemon receives them; values are
mapped to states with the stream's labels or bins, and malformed lines are skipped and counted.
Consecutive valid frames give transition counts n[i, j]; the estimate is the smoothed maximum
likelihood P[i, j] = (n[i, j] + 1) / (n[i, ·] + k) (add-one, so no transition gets probability 0).

Privacy holds under the *estimated* model, so the calibration data must not be the data being
protected (use a separate period), and there must be enough of it: at least ``MIN_VISITS``
departures from every state, otherwise the estimate is refused. The notes' advice (notes/000
§9.3) applies: prefer conservative models — more persistent chains leak more.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from .chain import MarkovChain, ModelError
from .stream.records import RawRecord, StateMap, parse_frame

#: Departures from each state needed before an estimate is accepted.
MIN_VISITS = 30


def transition_counts(path: Path, states: StateMap) -> tuple[np.ndarray, int]:
    """(k×k transition counts, number of skipped lines) of a calibration file."""
    counts = np.zeros((states.k, states.k), dtype=np.int64)
    skipped = 0
    prev: int | None = None
    with open(path, "rb") as fh:
        for line in fh:
            line = line.rstrip(b"\r\n")
            if not line:
                continue
            rec = parse_frame(line, states, now=time.time(), last_ts=None)  # (now: a recorded ts is not in the future)
            if not isinstance(rec, RawRecord):
                skipped += 1
                prev = None  # a gap: do not count a transition across it
                continue
            if prev is not None:
                counts[prev, rec.state] += 1
            prev = rec.state
    return counts, skipped


def estimate_chain(path: Path, states: StateMap) -> MarkovChain:
    """The smoothed maximum-likelihood chain of a calibration file (module docstring)."""
    counts, _ = transition_counts(Path(path), states)
    visits = counts.sum(axis=1)
    if visits.min() < MIN_VISITS:
        worst = int(np.argmin(visits))
        raise ModelError(f"calibration file {path}: state {worst} is left only {int(visits[worst])} times "
                         f"(need ≥ {MIN_VISITS}); record a longer calibration period")
    P = (counts + 1.0) / (visits[:, None] + states.k)
    if not math.isclose(float(P.sum()), states.k):
        raise ModelError(f"calibration file {path}: estimate is not stochastic")
    return MarkovChain(P)
