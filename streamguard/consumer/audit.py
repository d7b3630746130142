"""Re-auditing a redaction stream's published claims exactly (issue 14: "the consumer re-audits
the published plan exactly and warns when a claim does not hold"; issue 24 §5: a re-audit confirms
or refutes on what it saw, and says when it cannot).

**What the claims are about.** The status states ε-LDP about each private position under its
``model`` (one chain), or — for a calibrated or declared model set — under *every* chain of
``model_set`` (:func:`streamguard.consumer.model.published_set`). Over one chain the leakage of a
window is computed exactly (:func:`streamguard.audit.exact.exact_leakage`). Over a binary box the
consumer uses what the daemon's certificate uses (docs/model-sets.md §3: the interval bound, exact
at the box's corners one step at a time, with branch-and-bound over sub-boxes; the corners' fixed
chains alone are not a certificate): :func:`streamguard.model.robust.worst_leakage` with the target
ε gives a certified upper bound over the set and the exact leakage of one member; over a finite set
the worst member exactly. A k-state set, or one published without its members, is reported as not
re-checkable over it.

**The plan.** The table by signed distance (rows Pr(⊥ | state) at t = p − d and t = p + d), one
released record beyond each horizon (which ends a side exactly, notes/000 §4): its worst leakage
over what the claims are about is compared with ``epsilon``, and ``plan_leakage`` with the exact
leakage under the chain the status says it is evaluated under (the model, or over a set the worst
member ``model_set.worst_case.member``, which must be in the set).

**Each finished, honoured mark** (``recent_marks``, with its position) is re-audited from the rows
the records carry, over ±``span`` positions around it; a run of private steps (``last``: its last
position) at both of its ends. A position between two records with
consecutive seqs has no record (a rejected frame or a missing reading: redacted with probability
1). Any other position without a received record — a lost record, one before this consumer joined
or after its newest — is *unobserved*: its row is unknown. Unobserved is unobserved: the consumer
computes two figures,

- ``upper``: unobserved rows taken as released (row 0), and a released record beyond the span's
  ends — every actual row is ≥ 0, and more redaction is a post-processing (a released x can be
  redacted further with a probability depending on x alone, notes/000 §4.5), so the actual leakage
  is at most ``upper``;
- ``lower``: unobserved rows taken as redacted (row 1) and nothing beyond the span — for the same
  reason the actual leakage is at least ``lower``;

and concludes **confirmed** when ``upper`` ≤ ε, **refuted** (a warning) when ``lower`` > ε, and
otherwise **not checkable** (a note saying how many positions it did not see). It never warns
for want of data. A restart position the consumer knows (``restart_position`` of the statuses it
received) is followed by an unknown number of readings: the window is cut there — ``upper`` ends
the side with a released record just before it (revealing X there dominates anything further
away, whatever the gap: the far side depends on X_p only through it), ``lower`` drops the far side.
The consumer's figures take the stationary law at the span's start (the producer's own figure
also takes the worst initial law and restart gap, so it may be larger, never smaller).

The exact audit is for binary chains; for k > 2 the audit says it was not done.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..support.json_numbers import json_number
from ..audit.exact import exact_leakage
from ..model.chain import MarkovChain
from ..privacy.channel import ChannelSequence
from ..model.modelset import ModelSet
from ..model.robust import worst_leakage
from .messages import Record
from .model import PublishedModel, published_set

#: Relative tolerance of a comparison between a claimed and a recomputed leakage.
TOLERANCE = 1e-6
#: Sub-boxes one certificate or refutation over a box may examine (bounded work: a question it
#: cannot settle within them is reported as not re-checkable, never as confirmed or refuted).
MAX_BOXES = 400

Rows = NDArray[np.float64]


@dataclass
class AuditReport:
    #: The plan's recomputed leakage: exact under one chain, a certified upper bound over a set.
    plan_leakage: float | None = None
    #: Marks confirmed or refuted (a verdict reached).
    marks_checked: int = 0
    #: Marks whose claim the records received can neither confirm nor refute.
    marks_not_checkable: int = 0
    #: Per mark re-audited: seq, position, verdict ("confirmed", "refuted", "not checkable"), the
    #: leakage bounds ``lower`` ≤ actual ≤ ``upper`` and the positions around it not received.
    marks: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"plan_leakage": json_number(self.plan_leakage),
                "marks_checked": self.marks_checked, "marks_not_checkable": self.marks_not_checkable,
                "marks": [{**m, "lower": json_number(m["lower"]), "upper": json_number(m["upper"])}
                          for m in self.marks],
                "warnings": self.warnings, "notes": self.notes}


def _exceeds(value: float, bound: float) -> bool:
    return value > bound + TOLERANCE * max(1.0, abs(bound))


@dataclass(frozen=True)
class _Claims:
    """What the claims are about: one chain, or a binary model set."""

    chain: MarkovChain
    model_set: ModelSet | None
    epsilon: float

    def leakage(self, left: Rows, right: Rows) -> tuple[float, float, tuple[float, float] | None]:
        """(attained, bound, member) for the window with rows ``left`` and ``right`` outward from p
        (Y_p = ⊥): ``attained`` the exact leakage under one chain the claims are about (``member``;
        None: the model), ``bound`` a certified upper bound over all of them (equal under one chain)."""
        if self.model_set is None:
            window = np.vstack([left[::-1], np.ones((1, left.shape[1])), right])
            v = exact_leakage(self.chain, ChannelSequence.from_redaction(window), left.shape[0]).total
            return v, v, None
        target = self.epsilon + TOLERANCE * max(1.0, self.epsilon)
        wc = worst_leakage(self.model_set, [(left, right)], target=target, max_boxes=MAX_BOXES)
        return wc.attained, wc.bound, wc.member


def _table(status: dict[str, Any], k: int) -> tuple[Rows, Rows] | None:
    plan = status.get("plan")
    if not isinstance(plan, dict):
        return None
    left = np.asarray(plan.get("left", []), dtype=np.float64).reshape(-1, k)
    right = np.asarray(plan.get("right", []), dtype=np.float64).reshape(-1, k)
    return left, right


def _member_text(member: tuple[float, float] | None) -> str:
    if member is None:
        return ""
    return f" under the chain alpha={member[0]!r}, beta={member[1]!r} of the stated model set"


def audit_redaction(status: dict[str, Any], model: PublishedModel, records: Sequence[Record],
                    restarts: Iterable[int] = ()) -> AuditReport:
    """Re-audit the plan and the finished marks of one stream (module docstring); ``restarts``:
    the restart positions the consumer knows."""
    out = AuditReport()
    chain, k = model.chain, model.chain.k
    stated = published_set(status, k)
    if k != 2:
        over = "" if stated is None else "; its claims are stated over a model set: not re-checkable over this set"
        out.notes.append(f"exact re-audit is implemented for binary chains; this stream has {k} states: "
                         f"not audited{over}")
        return out
    if isinstance(stated, str):
        out.notes.append(f"the claims are stated over {stated}: not re-checkable over this set")
        return out
    eps = float(status.get("epsilon", math.nan))
    claims = _Claims(chain, stated, eps)
    table = _table(status, k)
    if table is None:
        out.notes.append("the status publishes no plan table (a producer from before issue 14): plan not audited")
    else:
        _audit_plan(status, claims, *table, out)
    span = 4 * (0 if table is None else table[0].shape[0] + table[1].shape[0] + 1) + 8
    rows_at = _rows_by_position(records, k)
    cuts = sorted(set(restarts))
    for m in status.get("recent_marks", []) or []:
        p = m.get("position")
        if isinstance(p, int) and m.get("honoured"):
            last = m.get("last", p)
            for q in (p, last) if isinstance(last, int) and last > p else (p,):
                _audit_mark(m, q, span, rows_at, cuts, claims, out)
    return out


def _audit_plan(status: dict[str, Any], claims: _Claims, left: Rows, right: Rows, out: AuditReport) -> None:
    stop = np.zeros((1, left.shape[1]))
    eps = claims.epsilon
    attained, bound, member = claims.leakage(np.vstack([left, stop]), np.vstack([right, stop]))
    out.plan_leakage = bound
    if _exceeds(attained, eps):
        out.warnings.append(f"plan: exact leakage {attained:.6g} exceeds epsilon {eps:.6g}{_member_text(member)}")
    elif _exceeds(bound, eps):
        out.notes.append(f"plan: not re-checkable over this set: certified bound {bound:.6g} above epsilon "
                         f"{eps:.6g} and no chain of the set found above it within {MAX_BOXES} sub-boxes")
    claimed = status.get("plan_leakage")
    if not isinstance(claimed, (int, float)):
        return
    under = claims.chain
    if claims.model_set is not None:  # plan_leakage is stated under the set's worst member found
        wc = (status.get("model_set") or {}).get("worst_case")
        got = wc.get("member") if isinstance(wc, dict) else None
        try:
            under = MarkovChain.binary(float(got["alpha"]), float(got["beta"]))  # type: ignore[index]
        except (KeyError, TypeError, ValueError):
            out.notes.append("plan_leakage: the status names no member of the set it is evaluated under: not checked")
            return
        if not claims.model_set.contains(under):
            out.warnings.append("plan_leakage is stated under a chain outside the stated model set")
    window = np.vstack([stop, left[::-1], np.ones((1, left.shape[1])), right, stop])
    leak = exact_leakage(under, ChannelSequence.from_redaction(window), left.shape[0] + 1).total
    if abs(leak - claimed) > TOLERANCE * max(1.0, abs(claimed)):
        out.warnings.append(f"plan: exact leakage {leak:.6g} differs from the published plan_leakage {claimed:.6g}")


def _audit_mark(m: dict[str, Any], p: int, span: int, rows_at: dict[int, Rows], cuts: list[int],
                claims: _Claims, out: AuditReport) -> None:
    """One mark's verdict: confirmed, refuted (a warning) or not checkable (a note)."""
    k = claims.chain.k
    left_end = max([0, p - span] + [r for r in cuts if p - span < r <= p])
    right_end = min([p + span] + [r - 1 for r in cuts if p < r <= p + span])
    positions = (range(p - 1, left_end - 1, -1), range(p + 1, right_end + 1))
    unseen = sum(t not in rows_at for side in positions for t in side)
    zero, one = np.zeros(k), np.ones(k)

    def side(ts: range, fill: Rows, beyond: bool) -> Rows:
        rows = [rows_at.get(t, fill) for t in ts] + ([zero] if beyond else [])
        return np.array(rows, dtype=np.float64).reshape(-1, k)

    eps, where = claims.epsilon, f"mark at seq {m.get('seq')} (position {p})"
    _, upper, _ = claims.leakage(side(positions[0], zero, left_end > 0), side(positions[1], zero, True))
    lower, _, member = claims.leakage(side(positions[0], one, False), side(positions[1], one, False))
    verdict = ("confirmed" if not _exceeds(upper, eps) else "refuted" if _exceeds(lower, eps)
               else "not checkable")
    out.marks.append({"seq": m.get("seq"), "position": p, "verdict": verdict, "lower": lower, "upper": upper,
                      "unseen": unseen})
    if verdict == "confirmed":
        out.marks_checked += 1
        return
    if verdict == "refuted":
        out.marks_checked += 1
        out.warnings.append(f"{where}: leakage recomputed from the published rows {lower:.6g} exceeds epsilon "
                            f"{eps:.6g}{_member_text(member)}")
        return
    out.marks_not_checkable += 1
    seen = sum(len(s) for s in positions) - unseen
    why = (f"{unseen} of the {unseen + seen} positions around it were not received" if unseen
           else "the certificate over the set is not conclusive" if claims.model_set is not None
           else f"the records beyond ±{span} positions are not examined")
    out.notes.append(f"{where}: not checkable: {why} (leakage between {lower:.6g} and {upper:.6g}, "
                     f"epsilon {eps:.6g})")


def _rows_by_position(records: Sequence[Record], k: int) -> dict[int, Rows]:
    """Rows by position: the records' own rows, and rows of ones at the positions between two
    records with consecutive seqs (steps without a record: always redacted)."""
    out: dict[int, Rows] = {}
    prev: Record | None = None
    for r in sorted((r for r in records if r.position is not None and r.row is not None), key=lambda r: r.seq):
        assert r.position is not None and r.row is not None
        out[r.position] = np.asarray(r.row, dtype=np.float64)
        if prev is not None and prev.position is not None and r.seq == prev.seq + 1:
            for t in range(prev.position + 1, r.position):
                out[t] = np.ones(k)
        prev = r
    return out

