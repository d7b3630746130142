"""Re-auditing a redaction stream's published claims exactly (issue 14: "the consumer re-audits
the published plan exactly and warns when a claim does not hold").

- **The plan.** The status publishes the table by signed distance (rows Pr(⊥ | state) at
  t = p − d and t = p + d) and the model. The exact leakage about X_p of the table placed in an
  unbounded stationary stream is recomputed with the project's exact audit
  (:func:`streamguard.audit.exact.exact_leakage`; one released record beyond each horizon ends a
  side exactly, notes/000 §4) and compared with ``epsilon`` and ``plan_leakage``.
- **Each finished mark** in the status (``recent_marks``, with its position) is re-audited from
  the rows the records actually carry, around its position: a position between two records with
  consecutive seqs is a rejected frame or a missing reading (redacted with probability 1); a
  position inside a seq gap (a lost record) and every position beyond the examined span count as
  released — both only over-state the leakage (more redaction is a post-processing, notes/000
  §4.5), so a warning is never missed for want of data. The consumer's figure assumes the
  stationary law at the span's start (the producer's own figure also takes the worst initial law
  and restart gap, so it may be larger, never smaller).

The exact audit is for binary chains; for k > 2 the audit says it was not done.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._json import json_number
from ..audit.exact import exact_leakage
from ..channel import ChannelSequence
from .messages import Record
from .model import PublishedModel

#: Relative tolerance of a comparison between a claimed and a recomputed leakage.
TOLERANCE = 1e-6


@dataclass
class AuditReport:
    plan_leakage: float | None = None
    marks_checked: int = 0
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"plan_leakage": json_number(self.plan_leakage),
                "marks_checked": self.marks_checked,
                "warnings": self.warnings, "notes": self.notes}


def _exceeds(value: float, bound: float) -> bool:
    return value > bound + TOLERANCE * max(1.0, abs(bound))


def _table(status: dict[str, Any], k: int) -> tuple[NDArray[np.float64], NDArray[np.float64]] | None:
    plan = status.get("plan")
    if not isinstance(plan, dict):
        return None
    left = np.asarray(plan.get("left", []), dtype=np.float64).reshape(-1, k)
    right = np.asarray(plan.get("right", []), dtype=np.float64).reshape(-1, k)
    return left, right


def audit_redaction(status: dict[str, Any], model: PublishedModel, records: Sequence[Record]) -> AuditReport:
    """Re-audit the plan and the finished marks of one stream (module docstring)."""
    out = AuditReport()
    chain, k = model.chain, model.chain.k
    if k != 2:
        out.notes.append(f"exact re-audit is implemented for binary chains; this stream has {k} states: not audited")
        return out
    eps = float(status.get("epsilon", math.nan))
    table = _table(status, k)
    if table is None:
        out.notes.append("the status publishes no plan table (a producer from before issue 14): plan not audited")
    else:
        left, right = table
        window = np.vstack([np.zeros((1, k)), left[::-1], np.ones((1, k)), right, np.zeros((1, k))])
        leak = exact_leakage(chain, ChannelSequence.from_redaction(window), left.shape[0] + 1).total
        out.plan_leakage = leak
        claimed = status.get("plan_leakage")
        if _exceeds(leak, eps):
            out.warnings.append(f"plan: exact leakage {leak:.6g} exceeds epsilon {eps:.6g}")
        if isinstance(claimed, (int, float)) and abs(leak - claimed) > TOLERANCE * max(1.0, abs(claimed)):
            out.warnings.append(f"plan: exact leakage {leak:.6g} differs from the published plan_leakage {claimed:.6g}")
    span = 4 * (0 if table is None else table[0].shape[0] + table[1].shape[0] + 1) + 8
    rows_at = _rows_by_position(records, k)
    for m in status.get("recent_marks", []) or []:
        p = m.get("position")
        if not isinstance(p, int) or not m.get("honoured"):
            continue
        lo, hi = max(0, p - span), p + span
        rows = np.array([rows_at.get(t, np.zeros(k)) for t in range(lo, hi + 1)])
        rows[p - lo] = 1.0  # the private record itself is never released
        # a released record on each side of the span ends it: what lies beyond cannot leak more
        head = np.zeros((1 if lo > 0 else 0, k))
        window = np.vstack([head, rows, np.zeros((1, k))])
        leak = exact_leakage(chain, ChannelSequence.from_redaction(window), p - lo + head.shape[0]).total
        out.marks_checked += 1
        if _exceeds(leak, eps):
            out.warnings.append(f"mark at seq {m.get('seq')} (position {p}): leakage recomputed from the published "
                                f"rows {leak:.6g} exceeds epsilon {eps:.6g}")
    return out


def _rows_by_position(records: Sequence[Record], k: int) -> dict[int, NDArray[np.float64]]:
    """Rows by position: the records' own rows, and rows of ones at the positions between two
    records with consecutive seqs (steps without a record: always redacted)."""
    out: dict[int, NDArray[np.float64]] = {}
    prev: Record | None = None
    for r in sorted((r for r in records if r.position is not None and r.row is not None), key=lambda r: r.seq):
        assert r.position is not None and r.row is not None
        out[r.position] = np.asarray(r.row, dtype=np.float64)
        if prev is not None and prev.position is not None and r.seq == prev.seq + 1:
            for t in range(prev.position + 1, r.position):
                out[t] = np.ones(k)
        prev = r
    return out
