"""The privacy odometer of one stream: what its recorded releases guarantee, family by family.

:func:`odometer` builds the JSON document the daemon publishes retained on
``<base>/<device>/<stream>/privacy`` and ``streamguard ledger show`` prints. It reports, per
family, the numbers of :class:`~streamguard.ledger.book.StreamBook` (each composed by the rule
that supports it), the budget of the latest admission and what is left of it, the refusals of the
budget filter, and — where families meet — an explicit ``"composed": false`` with the reason,
never a sum of numbers that no theorem adds up.

Aggregates also show the paper's composition rules for comparison: Σ_k ε_k (Thm III.7) and
K·max_k ε_k (Thm II.6), over the releases calibrated under the same model. The quilt accountant
is never above Σ_k ε_k when those ε_k hold (notes/002 §4.7).

All numbers are nats, hold **under the model** (the Markov model or model set Θ each release
was calibrated for, in its max-influence mode), and are about positions only. Positions are the
stream's 0-based record positions (the published ``seq``); a redaction mark whose position is
unknown (a record published too long ago) has ``"position": null``, its ``seq`` and an unbounded
leakage, and counts as not honoured. Unbounded values are the string ``"inf"`` (JSON has no
infinity).
"""

from __future__ import annotations

from typing import Any

from ..support.json_numbers import json_number
from .aggregate_history import ModelHistory
from .book import StreamBook
from .composition import Composed, MqmTally, tally_II6, tally_III7
from .events import LDP_X, AggregateEvent, Family
from .store import Ledger

UNDER_THE_MODEL = (
    "Guarantees hold under the stated Markov model(s): Pufferfish privacy of every position for "
    "aggregates (notes/002), exact LDP-style leakage about each private position for redaction "
    "(notes/000) and the stated per-record guarantees for channels. An adversary whose beliefs the "
    "model does not cover is not bounded by these numbers."
)
SEEDED_NOTE = "a release used the deterministic (seeded) sampler: its noise is predictable and gives no privacy"


def _budget(value: float | None, budget: float | None) -> dict[str, Any]:
    if budget is None:
        return {"budget": None, "remaining": None}
    return {"budget": budget, "remaining": None if value is None else json_number(budget - value)}


def _span(span: tuple[int, int] | None) -> list[int] | None:
    return None if span is None else list(span)


def _recent(items: list[Any], limit: int | None) -> tuple[list[Any], bool]:
    if limit is None or len(items) <= limit:
        return items, False
    return items[len(items) - limit:], True


def paper_rules(model: ModelHistory | None, others: int) -> dict[str, Any]:
    """Thm III.7 (Σ ε_k) and Thm II.6 (K·max ε_k) over the releases calibrated under one model,
    each as ``{"epsilon": …}`` or ``{"not_applicable": reason}`` (``ledger.composition`` checks
    their conditions on the releases' tally). Releases of other models read the same stream: no
    paper rule covers the mix."""
    tally = MqmTally() if model is None else model.tally
    out: dict[str, Any] = {}
    for name, rule in (("thm_III7_sum", tally_III7), ("thm_II6_k_max", tally_II6)):
        if others:
            out[name] = {"not_applicable": f"{others} release(s) calibrated under other models read this stream; "
                                           "the paper's rules compose releases of one model"}
            continue
        if model is not None and model.error is not None:
            raise model.error
        verdict = rule(tally)
        out[name] = ({"epsilon": json_number(verdict.epsilon)} if isinstance(verdict, Composed)
                     else {"not_applicable": verdict.reason})
    return out


def _latest(ledger: Ledger, book: StreamBook, family: Family, limit: int | None) -> tuple[list[Any], bool]:
    """The latest ``limit`` ranges of the family's releases (None: all) — aggregates as [lo, hi,
    load], channels as [lo, hi, channel] — from the book's summary when it keeps that many, else
    from the ledger file; and whether there are more."""
    history = book.aggregates if family == "aggregate" else book.channels
    kept = [list(r) for r in history.recent]
    if limit is not None and limit <= len(kept):
        return kept[len(kept) - limit:], history.count > limit
    if history.count == len(kept):
        return kept, False
    events = ledger.events_of(book.device, book.stream, family)
    return _recent([[ev.lo, ev.hi, ev.load if isinstance(ev, AggregateEvent) else ev.channel]  # type: ignore[union-attr]
                    for ev in events], limit)


def aggregate_section(book: StreamBook, budget: float | None, windows: list[list[Any]],
                      truncated: bool) -> dict[str, Any] | None:
    """The aggregate family; ``windows`` are the (lo, hi, load) listed, ``truncated`` whether
    there are more."""
    history = book.aggregates
    if not history.count:
        return None
    accountants = book.accountants
    models = []
    for mid, acc in sorted(accountants.items()):
        own = history.models.get(mid)
        calibrated = history.calibrated(mid)
        entry: dict[str, Any] = {
            "model": mid,
            "mode": own.mode if own else None,
            "eps_max": json_number(float(acc.eps_max())),
            "releases_calibrated": calibrated,
        }
        entry["paper"] = paper_rules(own, history.count - calibrated)
        models.append(entry)
    eps = max(float(acc.eps_max()) for acc in accountants.values())
    out: dict[str, Any] = {
        "rule": "per-position quilt accountant over all aggregate releases (notes/002 §4.7); "
                "the guarantee under the union of the models is the worst of them",
        "epsilon": json_number(eps),
        **_budget(eps, budget),
        "releases": history.count,
        "covered": list(history.span or []),
        "windows": windows,  # [lo, hi, load ρ = L/β]
        "windows_truncated": truncated,
        "models": models,
        "deterministic": history.deterministic,
        "t_independent": history.t_independent,
    }
    if out["deterministic"]:
        out["warning"] = SEEDED_NOTE
    return out


def redaction_section(book: StreamBook, budget: float | None, limit: int | None) -> dict[str, Any] | None:
    history = book.marks
    if history.worst is None:
        return None
    worst = history.get(history.worst)
    eps = worst.total
    shown = [history.get(name).entry(name) for name in history.latest(limit)]
    return {
        "rule": "each private position's exact leakage; marks combine by the element-wise maximum of "
                "their rows, a post-processing of each (notes/000 §4.5)",
        "epsilon": json_number(eps),
        **_budget(eps, budget),
        "count": len(history),
        "not_honoured": history.not_honoured,
        "worst": worst.entry(history.worst),
        "marks": shown,
        "marks_truncated": len(shown) < len(history),
    }


def channel_section(book: StreamBook, budget: float | None, records: list[list[Any]],
                    truncated: bool) -> dict[str, Any] | None:
    """The channel family; ``records`` are the [lo, hi, channel] ranges listed, ``truncated``
    whether there are more."""
    history = book.channels
    if not history.count:
        return None
    claims: dict[str, Any] = {}
    ldp = book.ldp_x_max()
    if ldp is not None:
        claims[LDP_X] = {"epsilon": json_number(ldp), "composed": True,
                         "rule": "ε-LDP about a record composes by summation over the channels that released it"}
    for notion, value in sorted(book.notion_claims().items()):
        claims[notion] = {"epsilon": json_number(value), "composed": value is not None,
                          "rule": "one channel per record" if value is not None else
                                  "a record was released by two channels with this notion; no theorem composes them"}
    leak, why = book.stream_leakage()
    numbers = [v for v in [ldp, leak] if v is not None]
    return {
        "rule": "per-record claims as stated by the channel's designer; exact stream leakage under the model",
        **_budget(max(numbers) if numbers else None, budget),
        "releases": history.count,
        "covered": list(history.span or []),
        "channels": sorted(history.channels),
        "claims": claims,
        "stream_leakage": {"epsilon": json_number(leak), "composed": why is None, "reason": why,
                           "models": sorted(history.models)},
        "records": records,  # [lo, hi, channel]
        "records_truncated": truncated,
    }


def odometer(ledger: Ledger, device: str, stream: str, *, limit: int | None = 100) -> dict[str, Any]:
    """The odometer document of ``device``/``stream`` (module docstring). Lists of windows,
    marks and channel records show the latest ``limit`` entries (None: all); every figure is
    over all of them."""
    book = ledger.book(device, stream)
    budgets = ledger.budgets(device, stream)
    refused = ledger.refused(device, stream)
    last = refused.last
    return {
        "device": device,
        "stream": stream,
        "under_the_model": UNDER_THE_MODEL,
        "aggregate": aggregate_section(book, budgets.get("aggregate"), *_latest(ledger, book, "aggregate", limit)),
        "redaction": redaction_section(book, budgets.get("redaction"), limit),
        "channel": channel_section(book, budgets.get("channel"), *_latest(ledger, book, "channel", limit)),
        "composition": book.cross_family(),
        # the drift guard's latest event: not a release, no budget (post-processing of the released)
        "drift": None if book.drift is None else {
            "alarm": book.drift.raised, "model": book.drift.model, "transitions": book.drift.transitions,
            "false_alarm": book.drift.false_alarm, "reason": book.drift.reason, "time": book.drift.time},
        "refusals": {
            "count": refused.count,
            "by_family": dict(refused.by_family),
            "last": None if last is None else {
                "family": last.event.family, "guarantee": last.guarantee, "would_be": json_number(last.would_be),
                "budget": last.budget, "time": last.stored_at, "span": _span(last.event.span())},
        },
        "budgets": dict(sorted(budgets.items())),
    }


class OdometerCache:
    """The odometer documents of a ledger's streams, each rebuilt only after its stream's ledger
    state changed (:meth:`Ledger.version`): the daemon refreshes every stream's privacy status
    every few seconds. A rebuild reads the book's summaries (about 0.03 ms; before them it read
    the whole history: 17 ms after 3,000 marks); a hit costs a dictionary lookup. The documents
    returned are shared: read them, do not change them. Use from the thread that writes the
    ledger."""

    def __init__(self, ledger: Ledger, limit: int | None) -> None:
        self.ledger = ledger
        self._limit = limit
        self._docs: dict[tuple[str, str], tuple[int, dict[str, Any]]] = {}

    def __call__(self, device: str, stream: str) -> dict[str, Any]:
        version = self.ledger.version(device, stream)
        kept = self._docs.get((device, stream))
        if kept is not None and kept[0] == version:
            return kept[1]
        doc = odometer(self.ledger, device, stream, limit=self._limit)
        self._docs[(device, stream)] = (version, doc)
        return doc
