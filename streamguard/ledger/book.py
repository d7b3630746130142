"""One stream's privacy book: the guarantees its recorded releases give, family by family.

A :class:`StreamBook` is fed the events of one stream (device, stream) in ledger order and keeps
only what the composition rules need: summaries of constant size for aggregates and channels
(``aggregate_history.py``, ``channel_history.py``; the events stay in the ledger file), and one for
each redaction mark (``mark_history.py``). Each family is composed by the rule that supports it
(DESIGN.md §4, §8) — and only by that rule:

* **aggregate** — the per-position quilt accountant (notes/002 §4.7):
  ε_i(θ) = min over quilts X_Q of X_i of [Σ_{j∈N} ρ_j + e_θ(X_Q|X_i)], ε = max_i ε_i. The load
  ρ_j = Σ_k L_k/β_k does not depend on the model, so *every* aggregate release of the stream is
  fed to the accountant of *every* model any of them was calibrated under; the guarantee under
  the union of those models is the max of their ε (a Pufferfish guarantee over Θ₁ ∪ Θ₂ is the
  worse of the two). Sequential and parallel composition (overlapping, adjacent or distant
  windows) are both encoded by the windows (notes/002 §4.7 "Properties").
* **redaction** — each private position's own exact leakage (notes/000 §4.1). Several marks on a
  stream combine by the element-wise maximum of their rows (notes/000 §4.5), a post-processing of
  each mark's plan, so each mark's number stands alone; the family's guarantee is the worst mark.
  Several events for one mark (e.g. planned, then achieved) keep their maximum. A mark is named by
  its position (``RedactionEvent.mark``), or by its seq when the position is unknown, or by its
  ledger event id when both are — a mark of unknown position is not honoured, its leakage +∞.
* **channel** — the designer's per-record claims and the exact stream leakage:
  - ``ldp_x`` claims compose by summation over the channels that released the same record
    (independent ε_k-LDP channels on one input); a record's guarantee is the sum, the family's
    the max over records (summed exactly, reported rounded up);
  - every other per-record notion (LDP w.r.t. a correlated S, lift, …) is a Pufferfish-type
    guarantee with no linear composition (notes/002 §4.4, Thm III.4): a record released by two
    such channels is reported as **not composed**;
  - ``stream_leakage`` is the exact leakage about any position of a stream whose records are
    *all* released through that channel (``audit.exact``). Releasing a subset of them is a
    marginalisation, so events of one channel (same ``channel`` and ``model``) on disjoint records
    share that number; two different channels on a stream, or one record released twice, have no
    composition rule — **not composed**.

Across families there is no composition theorem in the notes (MQM aggregates are Pufferfish
about every position, redaction and channels are LDP-style about chosen positions or records;
Thm III.6 would need a max-divergence bound E that nobody computes). The book states that for
every pair of families present on the stream, with the positions they share, and never adds
their numbers up.

The budget filter asks :meth:`StreamBook.excess` which guarantee an event would push over a
budget; "not composed" counts as +∞ there (fail closed).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..quilt.accountant import QuiltAccountant
from ..quilt.model import QuiltModel
from .aggregate_history import AggregateHistory
from .channel_history import ChannelHistory
from .events import (
    FAMILIES,
    LDP_X,
    AggregateEvent,
    DriftEvent,
    Event,
    Family,
    RedactionEvent,
    event_from_json,
)
from .mark_history import MarkHistory

#: Why no number is given where two families meet (the odometer's ``reason``).
CROSS_FAMILY_REASON = {
    "shared": "both families released positions {lo}..{hi}; no theorem composes {a} with {b} "
              "(different guarantees, and general Pufferfish mechanisms do not compose linearly: "
              "notes/002 §4.4, Thm III.4) — each family's number holds for its own releases only",
    "disjoint": "the families released disjoint positions, but under a Markov model each release "
                "leaks about correlated neighbours; no theorem composes {a} with {b} here — each "
                "family's number holds for its own releases only",
    "unknown": "the positions of some {a} or {b} releases are unknown; no theorem composes {a} with {b} "
               "— each family's number holds for its own releases only",
}


@dataclass(frozen=True)
class Guarantee:
    """One number the book reports: ``family``, a ``name`` unique within the stream (e.g.
    ``"aggregate:eps_max:<model>"``, ``"redaction:mark:17"``), and its ``value`` (None: not composed)."""

    family: Family
    name: str
    value: float | None


def _mark_name(event: RedactionEvent, event_id: int | None) -> str:
    """The book's name of a mark: ``event.mark``, or for a mark known by neither position nor seq
    its ledger event id (``"event:12"``; ``"event:new"`` for an event not recorded yet)."""
    if event.mark is not None:
        return event.mark
    return f"event:{'new' if event_id is None else event_id}"


def _spans_meet(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


class StreamBook:
    """The replayed state of one stream (module docstring). ``model_of(id)`` returns the
    :class:`QuiltModel` an aggregate event names (the ledger registers them)."""

    def __init__(self, device: str, stream: str, model_of: Callable[[str], QuiltModel]) -> None:
        self.device = device
        self.stream = stream
        self._model_of = model_of
        self._agg = AggregateHistory()
        self._accountants: dict[str, QuiltAccountant] = {}
        self._marks = MarkHistory()
        self._chan = ChannelHistory()
        self._drift: tuple[int, DriftEvent] | None = None

    # -- feeding ---------------------------------------------------------------------------------
    def _check_key(self, event: Event) -> None:
        if event.key != (self.device, self.stream):
            raise ValueError(f"event of {event.device}/{event.stream} fed to the book of {self.device}/{self.stream}")

    def accountants_after(self, event: AggregateEvent) -> dict[str, QuiltAccountant]:
        """Fresh copies of this stream's accountants (one more for a new model, fed with every
        earlier load) with ``event`` recorded; the book itself is unchanged."""
        self._check_key(event)
        out: dict[str, QuiltAccountant] = {}
        for mid in {*self._accountants, event.model}:
            acc = self._copy_or_new(mid)
            acc.record(event.lo, event.hi, event.load)
            out[mid] = acc
        return out

    def _copy_or_new(self, model_id: str) -> QuiltAccountant:
        model = self._model_of(model_id)
        if model_id in self._accountants:
            return QuiltAccountant.from_json(self._accountants[model_id].to_json(), model)
        return self._new_accountant(model_id)

    def _new_accountant(self, model_id: str) -> QuiltAccountant:
        """A fresh accountant for the model, fed with every earlier load: loads are model-free, so
        another model's accountant holds them all (the same sums, added in the same order)."""
        acc = QuiltAccountant(self._model_of(model_id))
        for s, e, v in next(iter(self._accountants.values())).segments() if self._accountants else ():
            acc.defer(s, e, v)
        return acc

    def add(self, event_id: int, event: Event, accountants: dict[str, QuiltAccountant] | None = None) -> None:
        """Record ``event`` (ledger id ``event_id``). For an aggregate, ``accountants`` may be the
        result of :meth:`accountants_after` for this event; without it the book's accountants are
        updated in place, their ε evaluated when first read (replay: ``QuiltAccountant.defer``)."""
        self._check_key(event)
        if isinstance(event, AggregateEvent):
            if accountants is None:
                if event.model not in self._accountants:
                    self._accountants[event.model] = self._new_accountant(event.model)
                for acc in self._accountants.values():
                    acc.defer(event.lo, event.hi, event.load)
            else:
                self._accountants = accountants
            self._agg.add(event_id, event)
        elif isinstance(event, RedactionEvent):
            self._marks.add(_mark_name(event, event_id), event_id, event)
        elif isinstance(event, DriftEvent):
            self._drift = (event_id, event)
        else:
            self._chan.add(event)

    # -- summary checkpoints (ledger/checkpoint.py) ---------------------------------------------------
    def state(self) -> tuple[dict[str, Any], memoryview]:
        """The book's summaries, JSON-ready, and its mark table's bytes; the marks are frozen
        (``mark_history.py``). ValueError if a mark cannot be packed."""
        marks, table = self._marks.state()
        return ({"aggregate": self._agg.state(), "accountants": {m: a.to_json() for m, a in self._accountants.items()},
                 "marks": marks, "channel": self._chan.state(),
                 "drift": None if self._drift is None else [self._drift[0], self._drift[1].to_json()]}, table)

    @classmethod
    def from_state(cls, device: str, stream: str, model_of: Callable[[str], QuiltModel], doc: dict[str, Any],
                   table: bytes | memoryview) -> StreamBook:
        """The book :meth:`state` described (``model_of`` as for a new book). ValueError, KeyError
        or TypeError if the state is malformed; LedgerError if it names an unknown model."""
        book = cls(device, stream, model_of)
        book._agg = AggregateHistory.from_state(doc["aggregate"])
        book._accountants = {m: QuiltAccountant.from_json(a, model_of(m)) for m, a in doc["accountants"].items()}
        book._marks = MarkHistory.from_state(doc["marks"], table)
        book._chan = ChannelHistory.from_state(doc["channel"])
        if doc["drift"] is not None:
            drift = event_from_json(doc["drift"][1])
            if not isinstance(drift, DriftEvent) or drift.key != (device, stream):
                raise ValueError("drift: not a drift event of this stream")
            book._drift = (int(doc["drift"][0]), drift)
        return book

    # -- what the releases give ------------------------------------------------------------------
    @property
    def aggregates(self) -> AggregateHistory:
        """The summary of the stream's aggregate releases (read it, do not change it)."""
        return self._agg

    @property
    def accountants(self) -> dict[str, QuiltAccountant]:
        return dict(self._accountants)

    @property
    def marks(self) -> MarkHistory:
        """The stream's marks, each summarised, in mark order: by position, then the marks of
        unknown position by seq (read it, do not change it)."""
        return self._marks

    @property
    def channels(self) -> ChannelHistory:
        """The summary of the stream's channel releases (read it, do not change it)."""
        return self._chan

    @property
    def drift(self) -> DriftEvent | None:
        """The stream's latest drift event (alarm raised or cleared), None if it never fired."""
        return None if self._drift is None else self._drift[1]

    def families(self) -> list[Family]:
        present = {"aggregate": self._agg.count > 0, "redaction": len(self._marks) > 0,
                   "channel": self._chan.count > 0}
        return [f for f in FAMILIES if present[f]]

    def span(self, family: Family) -> tuple[int, int] | None:
        """The positions [min lo, max hi] the family's releases of known positions read, or None."""
        if family == "aggregate":
            return self._agg.span
        return self._chan.span if family == "channel" else self._marks.span

    def mark_leakage(self, mark: str) -> float:
        """The worst recorded exact leakage about the mark's position (max over its events; +∞ for
        a mark whose position is unknown)."""
        return self._marks.get(mark).total

    def ldp_x_max(self) -> float | None:
        """max over records of Σ ε of the ``ldp_x`` claims of the channels that released it."""
        return self._chan.ldp_x_max()

    def notion_claims(self) -> dict[str, float | None]:
        """Per non-``ldp_x`` notion: the max claimed ε, or None when one record was released by two
        channels with that notion (no composition rule)."""
        return self._chan.notion_claims()

    def stream_leakage(self) -> tuple[float | None, str | None]:
        """The channel family's exact stream leakage and, if it cannot be given, why (docstring)."""
        return self._chan.stream_leakage()

    def guarantees(self) -> list[Guarantee]:
        """Every number the book gives (the odometer's and the export's ``declared`` figures)."""
        out: list[Guarantee] = []
        for mid, acc in sorted(self._accountants.items()):
            out.append(Guarantee("aggregate", f"aggregate:eps_max:{mid}", float(acc.eps_max())))
        for k in self._marks.names():
            out.append(Guarantee("redaction", f"redaction:mark:{k}", self.mark_leakage(k)))
        ldp = self.ldp_x_max()
        if ldp is not None:
            out.append(Guarantee("channel", f"channel:claim:{LDP_X}", ldp))
        for notion, v in sorted(self.notion_claims().items()):
            out.append(Guarantee("channel", f"channel:claim:{notion}", v))
        if self._chan.stated:
            out.append(Guarantee("channel", "channel:stream_leakage", self.stream_leakage()[0]))
        return out

    def cross_family(self) -> list[dict[str, Any]]:
        """One statement per pair of families present: ``"composed": false`` and why."""
        fams = self.families()
        out = []
        for i, a in enumerate(fams):
            for b in fams[i + 1:]:
                sa, sb = self.span(a), self.span(b)
                shared: list[int] | None = None
                if sa is None or sb is None:
                    reason = CROSS_FAMILY_REASON["unknown"].format(a=a, b=b)
                elif _spans_meet(sa, sb):
                    lo, hi = max(sa[0], sb[0]), min(sa[1], sb[1])
                    reason = CROSS_FAMILY_REASON["shared"].format(lo=lo, hi=hi, a=a, b=b)
                    shared = [lo, hi]
                else:
                    reason = CROSS_FAMILY_REASON["disjoint"].format(a=a, b=b)
                out.append({"families": [a, b], "composed": False, "shared_positions": shared, "reason": reason})
        return out

    # -- the budget filter -----------------------------------------------------------------------
    def excess(self, event: Event, budget: float) -> Guarantee | None:
        """The first guarantee ``event`` would push over ``budget`` (its would-be value; +∞ for
        "not composed"), or None if the event fits. Nothing is recorded."""
        self._check_key(event)
        if isinstance(event, AggregateEvent):
            for mid in sorted({*self._accountants, event.model}):
                acc = self._copy_or_new(mid)
                if acc.would_exceed(event.lo, event.hi, event.load, budget):
                    return Guarantee("aggregate", f"aggregate:eps_max:{mid}",
                                     float(acc.record(event.lo, event.hi, event.load)))
            return None
        if isinstance(event, DriftEvent):
            return None  # not a release: it spends nothing
        if isinstance(event, RedactionEvent):
            name = _mark_name(event, None)
            prior = self.mark_leakage(name) if name in self._marks else 0.0
            value = max(prior, event.total)
            return Guarantee("redaction", f"redaction:mark:{name}", value) if value > budget else None
        trial = StreamBook(self.device, self.stream, self._model_of)
        trial._chan = self._chan.copy()
        trial._chan.add(event)
        for g in trial.guarantees():
            value = math.inf if g.value is None else g.value
            if value > budget:
                return Guarantee(g.family, g.name, value)
        return None
