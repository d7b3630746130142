"""Offline re-check of an exported ledger: recompute every guarantee from the events alone.

:func:`recheck` takes the document of :meth:`Ledger.export` (``streamguard ledger export``) and,
with no access to the device's database:

1. rebuilds each model from its stored description and checks it has the identifier the events
   name (``model``);
2. recomputes the digest chain over the events (ids 1, 2, … in order) and compares it with the
   stored digests and the exported head — an edited, inserted or deleted event breaks it
   (``chain``);
3. replays the events into fresh books (fresh quilt accountants) and compares every recomputed
   guarantee with the number the ledger declared: a recomputed number above the declared one is an
   **under-count** (``under-count``), one below it means events are missing or altered
   (``inconsistent``), a number only one side has is ``missing``;
4. checks that every release admitted under a budget fits it on the replayed state (``budget``);
5. checks the own claim of each aggregate release with a length-independent σ (σ_∞, σ̄_supq):
   the release alone, in a fresh accountant, must give at most the ε target σ was computed for
   (``release-claim``; by the duality of notes/002 §4.7 it gives exactly that, up to the
   accountant's floor e(R, R) — checked on 134k random chains, modes, ε and windows: excess
   ≤ 1.2e−14). Releases with σ_max(T) for a finite T are not checked this way: the accountant's
   restricted quilt set (no right-absent quilts on an open stream; the conservative E-supq table)
   may charge them more than their target, which is the accountant being conservative, not the
   release under-stating.

The report lists each discrepancy with its kind and where it is; ``ok`` is true only when there
are none. Malformed documents raise :class:`RecheckError`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..support.json_numbers import number_from_json
from ..quilt.accountant import QuiltAccountant
from ..quilt.model import QuiltModel
from .book import StreamBook
from .events import AggregateEvent, Event, EventError, canonical, event_from_json
from .store import GENESIS, SCHEMA_VERSION, chain_digest, model_from_description
from .stream_models import recheck_streams

#: Relative tolerance of every comparison (numbers recomputed by the same code are identical;
#: this only absorbs round-off of a different platform or library version).
RTOL = 1e-9


class RecheckError(ValueError):
    """The document is not a ledger export this code can read (the message names the part)."""


def _value(x: Any, where: str) -> float | None:
    try:
        return number_from_json(x)
    except ValueError as exc:
        raise RecheckError(f"{where}: {exc}") from None


def _above(a: float, b: float) -> bool:
    """a > b beyond the tolerance (a may be +inf)."""
    return a > b + RTOL * max(1.0, abs(b)) if math.isfinite(b) else False


def recheck(doc: Mapping[str, Any]) -> dict[str, Any]:
    """Recompute an export (module docstring); returns ``{"ok", "events", "streams", "plans",
    "discrepancies"}`` where ``streams`` holds the recomputed figures per ``device/stream`` and
    ``plans`` the exact leakage of each redaction plan re-designed from the exported stream
    models, when the export has them (:mod:`.stream_models`)."""
    if not isinstance(doc, Mapping) or doc.get("format") != "streamguard-ledger":
        raise RecheckError("not a streamguard ledger export (format)")
    if doc.get("version") != SCHEMA_VERSION:
        raise RecheckError(f"export version {doc.get('version')!r}; this code reads version {SCHEMA_VERSION}")
    for key, kind in (("models", dict), ("events", list), ("declared", dict), ("head", dict)):
        if not isinstance(doc.get(key), kind):
            raise RecheckError(f"{key}: missing or not a JSON {'object' if kind is dict else 'list'}")
    found: list[dict[str, Any]] = []

    def flag(kind: str, where: str, detail: str) -> None:
        found.append({"kind": kind, "where": where, "detail": detail})

    models: dict[str, QuiltModel] = {}
    for mid, desc in doc["models"].items():
        try:
            model = model_from_description(desc)
        except ValueError as exc:
            flag("model", f"model {mid}", str(exc))
            continue
        if model.identifier != mid:
            flag("model", f"model {mid}", f"description builds model {model.identifier}")
            continue
        models[mid] = model

    books: dict[tuple[str, str], StreamBook] = {}
    head = GENESIS
    expected_id = 1
    for n, row in enumerate(doc["events"]):
        if not isinstance(row, dict) or not isinstance(row.get("id"), int):
            raise RecheckError(f"events[{n}]: expected an object with an integer id")
        eid = row["id"]
        where = f"event {eid}"
        try:
            event: Event = event_from_json(row.get("event"))
        except EventError as exc:
            raise RecheckError(f"{where}: {exc}") from None
        if eid != expected_id:
            flag("chain", where, f"expected event {expected_id} next (an event was deleted or inserted)")
        expected_id = eid + 1
        head = chain_digest(head, eid, canonical(event))
        if row.get("digest") != head:
            flag("chain", where, "digest does not match its content and predecessors (edited or reordered)")
            head = str(row.get("digest"))  # resynchronise: report each break once
        if isinstance(event, AggregateEvent) and event.model not in models:
            flag("model", where, f"names model {event.model}, which the export does not hold (valid); not replayed")
            continue
        book = books.get(event.key)
        if book is None:
            book = books[event.key] = StreamBook(event.device, event.stream, models.__getitem__)
        budget = _value(row.get("budget"), f"{where}.budget")
        if budget is not None:
            over = book.excess(event, budget)
            if over is not None:
                flag("budget", where, f"admitted under budget {budget:.6g} but {over.name} "
                     f"would be {over.value if over.value is not None else math.inf:.6g}")
        if isinstance(event, AggregateEvent) and event.t_independent:
            _check_claim(event, models[event.model], where, flag)
        book.add(eid, event)
    last_id = expected_id - 1
    if doc["head"].get("id") != last_id or doc["head"].get("digest") != head:
        flag("chain", "head", f"the export's head is event {doc['head'].get('id')}, the events end at {last_id} "
             "(events missing at the end, or the chain was altered)")

    streams: dict[str, dict[str, float | None]] = {}
    for (device, stream), book in sorted(books.items()):
        name = f"{device}/{stream}"
        streams[name] = {g.name: g.value for g in book.guarantees()}
    declared = doc["declared"]
    for name in sorted(set(streams) | set(declared)):
        got = streams.get(name, {})
        said = declared.get(name)
        if not isinstance(said, dict):
            if said is not None:
                raise RecheckError(f"declared.{name}: expected an object")
            flag("missing", name, "the stream has events but no declared figures")
            continue
        for g in sorted(set(got) | set(said)):
            where = f"{name} {g}"
            if g not in said:
                flag("missing", where, "recomputed from the events but not declared")
                continue
            if g not in got:
                flag("inconsistent", where, "declared, but no event gives it (events missing)")
                continue
            mine, theirs = got[g], _value(said[g], f"declared.{where}")
            if (mine is None) != (theirs is None):
                flag("under-count" if theirs is not None else "inconsistent", where,
                     f"recomputed {'not composed' if mine is None else mine}, declared "
                     f"{'not composed' if theirs is None else theirs}")
            elif mine is not None and theirs is not None:
                if _above(mine, theirs):
                    flag("under-count", where, f"recomputed {mine:.12g} > declared {theirs:.12g}")
                elif _above(theirs, mine):
                    flag("inconsistent", where, f"recomputed {mine:.12g} < declared {theirs:.12g} "
                         "(events missing or altered)")
    plans: dict[str, float] = {}
    if doc.get("stream_models") is not None:
        if not isinstance(doc["stream_models"], dict):
            raise RecheckError("stream_models: not a JSON object")
        plans = recheck_streams(doc["stream_models"], doc["events"], flag)
    return {"ok": not found, "events": len(doc["events"]), "streams": streams, "plans": plans,
            "discrepancies": found}


def _check_claim(event: AggregateEvent, model: QuiltModel, where: str, flag: Any) -> None:
    """The release alone must meet its ε target within the stream (module docstring, step 5)."""
    alone = QuiltAccountant(model)
    eps = float(alone.record(event.lo, event.hi, event.load))
    if _above(eps, event.epsilon + alone.floor):
        flag("release-claim", where, f"its noise (L/β = {event.load:.6g}) gives ε = {eps:.12g} on its own, "
             f"above its stated target {event.epsilon:.12g}")
