"""The persisted privacy ledger: every release is recorded durably before it is published.

DESIGN.md §4. One SQLite file in WAL mode with ``synchronous=FULL`` (the outbox's conventions,
``stream/outbox.py``): a committed transaction has been synced to disk, an interrupted one
leaves nothing behind.

**Write-ahead semantics.** :meth:`Ledger.commit` (and :meth:`Ledger.admit`) return only after
the event's transaction is durable. The caller publishes the release *after* that call returns,
never before: then a crash at any moment can lose at most a release that was never published,
and never spent budget. (A crash between commit and publish over-counts by one release; that is
the safe side.)

**Replay.** On open, the events are replayed in ledger order into fresh books
(:class:`~streamguard.ledger.book.StreamBook`: fresh quilt accountants, marks, channels), so a
restart never forgets spent budget — starting from the summary checkpoint when it matches the
events (only the events after it are read; ``ledger/checkpoint.py``: written every
``CHECKPOINT_EVERY`` events and at a clean close, never the record of truth). The derived state
stored with every aggregate commit — each accountant's load segments, its ε_max and the last event
it includes (notes/002 §4.8: "persist ρ run-lengths and the release log") — is checked against the
replay: different loads or an ε_max below the stored one (an under-count) raise
:class:`LedgerCorrupt`; the ledger does not open on a state it cannot reproduce. The replay
evaluates ε once over all positions instead of release by release, which can change the last bits:
a replayed ε_max at most :data:`SAME_RTOL` above the stored one is the same figure, and the stored
one is kept (so a restart changes no budget decision), as is a stored one above the replay; a
replay further above is kept (more conservative, with a warning).

**Integrity chain.** Each event row carries digest_n = SHA-256(digest_{n−1} ‖ id ‖ canonical
JSON), so an exported ledger with an edited or deleted event is detected offline
(:mod:`streamguard.ledger.recheck`). It protects against accidents and naive edits, not against
someone who recomputes the chain.

**Budget filter.** :meth:`Ledger.admit` refuses a release that would push a guarantee of its
family on its stream over the budget — raising :class:`BudgetExceeded`, which names the stream,
the family, the guarantee, its would-be value and the budget — and records the refusal (counted
in the odometer) instead of the event, so a refused release is never counted as spent. A report
of leakage that has already happened (e.g. a late redaction mark whose left neighbours were
published) is not a release to refuse: record it with :meth:`Ledger.commit`.

**Models.** Aggregate events name a ``QuiltModel`` by its identifier; the model's
``describe()`` is stored with the events (table ``models``), so the ledger and its export are
self-contained.

**One writer.** A ledger is one connection with a lock (the daemon calls it through
``asyncio.to_thread``, possibly from different worker threads, one call at a time). Each commit
checks, inside its transaction, that no other process appended since this one read the file,
and raises :class:`LedgerError` if one did. Readers (``streamguard ledger show``) open it with
``readonly=True``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from ..support.json_numbers import json_number
from ..support.sqlite_tx import immediate
from ..model.chain import MarkovChain
from ..quilt.accountant import QuiltAccountant
from ..quilt.model import QuiltModel
from ..support.private_files import private_file
from .book import Guarantee, StreamBook
from . import checkpoint
from .checkpoint import Checkpoint, CheckpointError
from .events import AggregateEvent, Event, EventError, Family, canonical, event_from_json

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
GENESIS = "0" * 64
#: Relative tolerance for comparing a replayed ε with a stored one (the same loads, evaluated once
#: over all positions at replay instead of release by release: equal up to the last bits).
REPLAY_RTOL = 1e-9
#: A replayed ε_max this close (relative) below the stored one is the same figure in other rounding:
#: the stored one is kept (far below the noise margin the daemon adds, ``aggregates.SIGMA_MARGIN``).
SAME_RTOL = 1e-12

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS models (
    id TEXT PRIMARY KEY,
    description TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY,
    device TEXT NOT NULL,
    stream TEXT NOT NULL,
    family TEXT NOT NULL,
    body TEXT NOT NULL,
    digest TEXT NOT NULL,
    budget REAL,
    stored_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS refusals (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    device TEXT NOT NULL,
    stream TEXT NOT NULL,
    family TEXT NOT NULL,
    guarantee TEXT NOT NULL,
    would_be TEXT NOT NULL,
    budget REAL NOT NULL,
    body TEXT NOT NULL,
    stored_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS derived (
    device TEXT NOT NULL,
    stream TEXT NOT NULL,
    model TEXT NOT NULL,
    upto INTEGER NOT NULL,
    segments TEXT NOT NULL,
    eps_max REAL NOT NULL,
    PRIMARY KEY (device, stream, model)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS budgets (
    device TEXT NOT NULL,
    stream TEXT NOT NULL,
    family TEXT NOT NULL,
    budget REAL NOT NULL,
    PRIMARY KEY (device, stream, family)
) WITHOUT ROWID;
"""


class LedgerError(Exception):
    """The ledger cannot do what was asked (unknown model, read-only, a second writer, …)."""


class LedgerCorrupt(LedgerError):
    """The stored ledger is inconsistent (replay does not reproduce its stored state, a broken
    digest chain, an unreadable event): it is not used."""


class BudgetExceeded(Exception):
    """A release was refused by the budget filter; nothing of it was recorded as spent."""

    def __init__(self, device: str, stream: str, family: Family, guarantee: str, would_be: float,
                 budget: float) -> None:
        self.device, self.stream, self.family = device, stream, family
        self.guarantee, self.would_be, self.budget = guarantee, would_be, budget
        super().__init__(f"{device}/{stream}: {family} release refused: {guarantee} would be "
                         f"{would_be:.12g} > budget {budget:.12g}")


@dataclass(frozen=True)
class Refusal:
    """A release the budget filter refused (stored; counted in the odometer)."""

    id: int
    event: Event
    guarantee: str
    would_be: float
    budget: float
    stored_at: float


@dataclass
class RefusalTally:
    """What the odometer states of one stream's refusals: how many per family (in the order the
    families were first refused) and the latest. A stream over its budget has every further
    release refused, so the refusals themselves stay in the file (:meth:`Ledger.refusals`)."""

    by_family: dict[str, int] = field(default_factory=dict)
    last: Refusal | None = None

    @property
    def count(self) -> int:
        return sum(self.by_family.values())

    def add(self, refusal: Refusal) -> None:
        family = refusal.event.family
        self.by_family[family] = self.by_family.get(family, 0) + 1
        self.last = refusal


def chain_digest(prev: str, event_id: int, body: str) -> str:
    """digest_n = SHA-256(digest_{n−1} ‖ id ‖ canonical JSON) (module docstring)."""
    return hashlib.sha256(f"{prev}\n{event_id}\n{body}".encode()).hexdigest()


def _finite_or_inf(x: float) -> str:
    return "inf" if math.isinf(x) else repr(float(x))


def _segments_json(acc: QuiltAccountant) -> str:
    return json.dumps([list(map(float, s)) for s in acc.segments()], allow_nan=False)


def model_from_description(desc: Any) -> QuiltModel:
    """Rebuild a ``QuiltModel`` from its ``describe()`` (chains with their initial laws, mode,
    shared initial law). Raises ``ValueError`` if the description is malformed, or rebuilds a
    model whose identifier differs from the one it states (so a stored model is exactly the one
    the releases were calibrated under)."""
    if not isinstance(desc, dict) or not isinstance(desc.get("chains"), list) or not desc["chains"]:
        raise ValueError("model description: expected an object with a non-empty list 'chains'")
    chains = []
    for c in desc["chains"]:
        if not isinstance(c, dict) or "matrix" not in c or "initial" not in c:
            raise ValueError("model description: each chain needs 'matrix' and 'initial'")
        chains.append(MarkovChain(c["matrix"], c["initial"]))
    model = QuiltModel(chains, desc.get("mode"), desc.get("initial"))  # type: ignore[arg-type]
    if model.identifier != desc.get("identifier"):
        raise ValueError(f"model description: rebuilds model {model.identifier}, not {desc.get('identifier')}")
    return model


def model_description(model: QuiltModel) -> dict[str, Any]:
    """What the ledger stores for a model: ``describe()``, checked to rebuild the same model."""
    desc = json.loads(json.dumps(model.describe(), allow_nan=False))
    try:
        model_from_description(desc)
    except ValueError as exc:
        raise LedgerError(f"model {model.identifier}: its description does not rebuild it ({exc})") from None
    return desc


_REFUSAL_COLUMNS = "id, body, guarantee, would_be, budget, stored_at"


def _refusal(row: tuple[Any, ...]) -> Refusal:
    """A row of the refusals table (its columns as in :data:`_REFUSAL_COLUMNS`)."""
    rid, body, guarantee, would_be, budget, stored_at = row
    try:
        event = event_from_json(json.loads(body))
    except (EventError, ValueError) as exc:
        raise LedgerCorrupt(f"refusal {rid}: unreadable ({exc})") from None
    return Refusal(rid, event, guarantee, float(would_be), budget, stored_at)


class Ledger:
    """The persisted ledger (module docstring). Open with :meth:`open`; use as a context manager."""

    def __init__(self, db: sqlite3.Connection, path: str, readonly: bool) -> None:
        self._db = db
        self.path = path
        self.readonly = readonly
        self._lock = threading.Lock()
        self._models: dict[str, QuiltModel] = {}
        self._descriptions: dict[str, dict[str, Any]] = {}
        self._books: dict[tuple[str, str], StreamBook] = {}
        self._refusals: dict[tuple[str, str], RefusalTally] = {}
        self._last_refusal = 0  # the id of the latest refusal replayed or written
        self._budgets: dict[tuple[str, str], dict[Family, float]] = {}
        self._versions: Counter[tuple[str, str]] = Counter()  # (version: changes since opened)
        self._last_id = 0
        self._head = GENESIS
        self._uncovered = 0  # events replayed or written that the stored checkpoint does not cover

    # -- opening and replay ----------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | Path, *, readonly: bool = False) -> Ledger:
        """Open (or create, unless ``readonly``) the ledger at ``path`` and replay it."""
        path = str(path)
        if readonly:
            if not Path(path).exists():
                raise LedgerError(f"{path}: no such ledger")
            db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False)
        else:
            private_file(path)  # the times of private marks: 0600, and so its -wal and -shm files
            db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if tables and "meta" not in tables:  # never add the ledger's tables to another database
                raise LedgerError(f"{path}: a database that is not a streamguard ledger")
            if not readonly:
                mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                if mode != "wal":
                    raise sqlite3.OperationalError(f"{path}: the ledger needs WAL mode, got {mode!r}")
                db.execute("PRAGMA synchronous=FULL")
                db.executescript(_SCHEMA)
                db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            version = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
            if version is None or int(version[0]) != SCHEMA_VERSION:
                raise LedgerError(f"{path}: not a streamguard ledger of schema version {SCHEMA_VERSION}")
            ledger = cls(db, path, readonly)
            ledger._replay()
        except BaseException:
            db.close()
            raise
        return ledger

    def _replay(self) -> None:
        """Load the models and budgets, then the books: from the checkpoint and the events after
        it, or if the checkpoint cannot be used (said in one line) from every event
        (``ledger/checkpoint.py``)."""
        for mid, text in self._db.execute("SELECT id, description FROM models"):
            desc = json.loads(text)
            try:
                model = model_from_description(desc)
            except ValueError as exc:
                raise LedgerCorrupt(f"model {mid}: {exc}") from None
            if model.identifier != mid:
                raise LedgerCorrupt(f"model {mid}: its stored description rebuilds a different model")
            self._models[mid], self._descriptions[mid] = model, desc
        for (device, stream, family, budget) in self._db.execute("SELECT device, stream, family, budget FROM budgets"):
            self._budgets.setdefault((device, stream), {})[family] = budget
        try:
            self._replay_after(self._stored_checkpoint())
        except (CheckpointError, LedgerCorrupt) as exc:
            log.warning("ledger %s: checkpoint not used (%s): replaying every event", self.path, exc)
            self._books, self._refusals, self._last_refusal = {}, {}, 0
            self._last_id, self._head = 0, GENESIS
            self._replay_after(None)
        if self._uncovered >= checkpoint.CHECKPOINT_EVERY and not self.readonly:
            self._save_summaries()

    def _stored_checkpoint(self) -> Checkpoint | None:
        """The stored checkpoint if it matches the events (CheckpointError if not), None if there is none."""
        row = checkpoint.read(checkpoint.path_of(self.path))
        if row is None:
            return None
        try:
            cp = checkpoint.decode(row, self.model)
        except LedgerError as exc:  # (a model it names is not stored)
            raise CheckpointError(str(exc)) from None
        event = self._db.execute("SELECT digest FROM events WHERE id = ?", (cp.upto,)).fetchone()
        if (event[0] if event else GENESIS if cp.upto == 0 else None) != cp.head:
            raise CheckpointError(f"its chain head does not match event {cp.upto}")
        return cp

    def _replay_after(self, cp: Checkpoint | None) -> None:
        """Start from ``cp`` (None: nothing), replay the events and refusals after it, and check
        the accountants against the stored derived state."""
        head = GENESIS
        if cp is not None:
            self._books, self._last_id, head, self._last_refusal = cp.books, cp.upto, cp.head, cp.refusals
            for key, (by_family, last) in cp.tallies.items():
                row = None if last is None else self._db.execute(
                    f"SELECT {_REFUSAL_COLUMNS} FROM refusals WHERE id = ?", (last,)).fetchone()
                if last is not None and (row is None or last > cp.refusals):
                    raise CheckpointError(f"refusal {last}: not stored")
                self._refusals[key] = RefusalTally(dict(by_family), None if row is None else _refusal(row))
        self._uncovered = 0
        rows = self._db.execute("SELECT id, device, stream, body, digest FROM events WHERE id > ? ORDER BY id",
                                (self._last_id,))
        for event_id, device, stream, body, digest in rows:
            if chain_digest(head, event_id, body) != digest:
                raise LedgerCorrupt(f"event {event_id}: digest chain broken (edited or missing events)")
            head = digest
            try:
                event = event_from_json(json.loads(body))
            except (EventError, ValueError) as exc:
                raise LedgerCorrupt(f"event {event_id}: unreadable ({exc})") from None
            if event.key != (device, stream):
                raise LedgerCorrupt(f"event {event_id}: stream columns disagree with the event")
            self._book(event.key).add(event_id, event)
            self._last_id = event_id
            self._uncovered += 1
            if self._uncovered % checkpoint.CHECKPOINT_EVERY == 0:  # (a long replay keeps as few mark objects as a run)
                for book in self._books.values():
                    book.marks.freeze()
        self._head = head
        for row in self._db.execute(f"SELECT {_REFUSAL_COLUMNS} FROM refusals WHERE id > ? ORDER BY id",
                                    (self._last_refusal,)):
            refusal = _refusal(row)
            self._refusals.setdefault(refusal.event.key, RefusalTally()).add(refusal)
            self._last_refusal = refusal.id
        self._check_derived()

    def save_summaries(self) -> bool:
        """Write a checkpoint of the books' summaries up to the latest event (module
        ``ledger/checkpoint.py``); returns whether it was written. A failure (a full disk, a mark
        that cannot be packed) is logged in one line and changes nothing recorded: the events
        stay the record of truth."""
        with self._lock:
            self._writable()
            return self._save_summaries()

    def _save_summaries(self) -> bool:
        tallies = {key: (list(t.by_family.items()), None if t.last is None else t.last.id)
                   for key, t in self._refusals.items()}
        try:
            row = checkpoint.encode(Checkpoint(self._last_id, self._head, self._last_refusal, self._books, tallies))
            checkpoint.write(checkpoint.path_of(self.path), row)
        except (OSError, ValueError) as exc:
            log.warning("ledger %s: checkpoint not written (%s); the next start replays more events", self.path, exc)
            self._uncovered = 0  # (try again after as many events)
            return False
        self._uncovered = 0
        return True

    def _covered(self) -> None:
        """After events were written (lock held): a checkpoint once enough are uncovered."""
        if self._uncovered >= checkpoint.CHECKPOINT_EVERY:
            self._save_summaries()

    def _check_derived(self) -> None:
        stored = {(d, s, m): (upto, json.loads(seg), eps)
                  for d, s, m, upto, seg, eps in self._db.execute(
                      "SELECT device, stream, model, upto, segments, eps_max FROM derived")}
        for key, book in self._books.items():
            last = book.aggregates.last_id
            for mid, acc in book.accountants.items():
                got = stored.pop((*key, mid), None)
                where = f"{key[0]}/{key[1]} under model {mid}"
                if got is None:
                    raise LedgerCorrupt(f"{where}: no stored accountant state")
                upto, segments, eps = got
                if upto != last:
                    raise LedgerCorrupt(f"{where}: stored state ends at event {upto}, the log at {last}")
                if json.loads(_segments_json(acc)) != segments:
                    raise LedgerCorrupt(f"{where}: replayed loads differ from the stored run-lengths")
                replayed = float(acc.eps_max())
                if replayed < eps * (1 - REPLAY_RTOL):
                    raise LedgerCorrupt(f"{where}: replay gives ε_max {replayed:.12g} < stored {eps:.12g}")
                if not acc.adopt(eps, SAME_RTOL):
                    log.warning("%s: replay gives ε_max %.12g > stored %.12g (more conservative; kept)",
                                where, replayed, eps)
        if stored:
            d, s, m = next(iter(stored))
            raise LedgerCorrupt(f"{d}/{s}: stored accountant state for model {m} without its events")

    def close(self) -> None:
        """Close the file; a writable ledger first checkpoints its summaries if events came since
        the last checkpoint (a clean shutdown: the next start reads none of them)."""
        with self._lock:
            if not self.readonly and self._uncovered:
                self._save_summaries()
            self._db.close()

    def checkpoint(self) -> None:
        """Copy the WAL into the database and truncate it to zero bytes (frees its disk space)."""
        with self._lock:
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- reading ---------------------------------------------------------------------------------
    def _book(self, key: tuple[str, str]) -> StreamBook:
        book = self._books.get(key)
        if book is None:
            book = self._books[key] = StreamBook(key[0], key[1], self.model)
        return book

    def model(self, model_id: str) -> QuiltModel:
        """A registered model by its identifier."""
        try:
            return self._models[model_id]
        except KeyError:
            raise LedgerError(f"model {model_id}: not registered with the ledger") from None

    @property
    def models(self) -> dict[str, dict[str, Any]]:
        """Registered models: identifier → ``describe()``."""
        return dict(self._descriptions)

    def streams(self) -> list[tuple[str, str]]:
        """Every (device, stream) with an event or a refusal, sorted."""
        return sorted({*self._books, *self._refusals})

    def book(self, device: str, stream: str) -> StreamBook:
        """The stream's replayed book (an empty one for an unknown stream)."""
        return self._books.get((device, stream)) or StreamBook(device, stream, self.model)

    def version(self, device: str, stream: str) -> int:
        """How many times the stream's book, refusals or budgets changed since the ledger was
        opened: what is derived from them (the odometer) is unchanged while this is."""
        return self._versions[(device, stream)]

    def refused(self, device: str, stream: str) -> RefusalTally:
        """The stream's refusals as the odometer states them (an empty tally if none)."""
        return self._refusals.get((device, stream)) or RefusalTally()

    def refusals(self, device: str, stream: str) -> list[Refusal]:
        """Every refusal of the stream this ledger replayed or wrote, in order, read from the file."""
        with self._lock:
            return self._refusals_where("device = ? AND stream = ? AND", (device, stream))

    def _refusals_where(self, condition: str, args: tuple[Any, ...]) -> list[Refusal]:
        """The refusals this ledger knows that meet ``condition`` (call with the lock held)."""
        rows = self._db.execute(f"SELECT {_REFUSAL_COLUMNS} FROM refusals WHERE {condition} id <= ? "
                                "ORDER BY device, stream, id", (*args, self._last_refusal)).fetchall()
        return [_refusal(row) for row in rows]

    def budgets(self, device: str, stream: str) -> dict[Family, float]:
        """The budget of each family at its latest :meth:`admit` on this stream."""
        return dict(self._budgets.get((device, stream), {}))

    def events_of(self, device: str, stream: str, family: Family) -> list[Event]:
        """Every event of one family of the stream that this ledger has replayed or written, in
        ledger order, read from the file (the book keeps summaries: ``ledger/aggregate_history.py``,
        ``channel_history.py``, ``mark_history.py``). Events another process appended since (a
        read-only ledger beside a running daemon) are left out, so the list matches the figures."""
        with self._lock:
            rows = self._db.execute("SELECT body FROM events WHERE device = ? AND stream = ? AND family = ? AND id <= ? "
                                    "ORDER BY id", (device, stream, family, self._last_id)).fetchall()
        return [event_from_json(json.loads(body)) for (body,) in rows]

    @property
    def head(self) -> tuple[int, str]:
        """(last event id, its digest): what an export's chain must end with."""
        return self._last_id, self._head

    # -- writing ---------------------------------------------------------------------------------
    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with immediate(self._db) as db:
            self._staged_id, self._staged_head = self._last_id, self._head
            latest = db.execute("SELECT COALESCE(MAX(id), 0) FROM events").fetchone()[0]
            if latest != self._last_id:
                raise LedgerError(f"{self.path}: another process wrote to the ledger (event {latest}); reopen it")
            yield db

    def _writable(self) -> None:
        if self.readonly:
            raise LedgerError(f"{self.path}: opened read-only")

    @contextmanager
    def _model_for(self, event: Event, model: QuiltModel | None) -> Iterator[dict[str, Any] | None]:
        """While an aggregate event with a new ``model`` is checked and stored, the model is
        visible to the books (provisionally); yields its description to store, or None if the
        model is known (or the event is no aggregate). The model stays only if the caller
        calls :meth:`_keep_model`."""
        if not isinstance(event, AggregateEvent):
            if model is not None:
                raise LedgerError("a model goes with aggregate events only")
            yield None
            return
        if model is not None and model.identifier != event.model:
            raise LedgerError(f"the event names model {event.model} but model {model.identifier} was given")
        known = self._models.get(event.model, model)
        if known is not None and known.mode != event.mode:
            raise LedgerError(f"the event states mode {event.mode!r} but model {event.model} has mode {known.mode!r}")
        if event.model in self._models:
            yield None
            return
        if model is None:
            raise LedgerError(f"model {event.model}: not registered; pass the QuiltModel with the event")
        desc = model_description(model)
        self._models[event.model] = model
        try:
            yield desc
        finally:
            if event.model not in self._descriptions:  # not stored: forget it again
                del self._models[event.model]

    def commit(self, event: Event, *, model: QuiltModel | None = None) -> int:
        """Record ``event`` durably and return its id; publish the release only after this returns.

        No filter: the event is recorded whatever it costs (use :meth:`admit` to enforce a budget).
        ``model`` is the event's ``QuiltModel`` (aggregate events; needed the first time a model
        is used, then stored with the events)."""
        with self._lock, self._model_for(event, model) as desc:
            self._writable()
            event_id = self._commit(event, desc, None)
            self._covered()
            return event_id

    def admit(self, event: Event, budget: float, *, model: QuiltModel | None = None) -> int:
        """The budget filter: :meth:`commit` ``event`` if no guarantee of its family on its
        stream would exceed ``budget``; otherwise record the refusal durably and raise
        :class:`BudgetExceeded` (the event is not recorded as spent). A release whose guarantee
        lands exactly on the budget is admitted."""
        budget = float(budget)
        if not (budget > 0 and math.isfinite(budget)):
            raise ValueError("budget must be a finite number > 0")
        with self._lock, self._model_for(event, model) as desc:
            self._writable()
            over = self._book(event.key).excess(event, budget)
            if over is None:
                event_id = self._commit(event, desc, budget)
                self._covered()
                return event_id
            self._refuse(event, over, budget)
        raise BudgetExceeded(event.device, event.stream, event.family, over.name,
                             math.inf if over.value is None else over.value, budget)

    def _refuse(self, event: Event, over: Guarantee, budget: float) -> None:
        now = time.time()
        value = math.inf if over.value is None else over.value
        with self._transaction() as db:
            rid = db.execute(
                "INSERT INTO refusals (device, stream, family, guarantee, would_be, budget, body, stored_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (event.device, event.stream, event.family, over.name, _finite_or_inf(value), budget,
                 canonical(event), now)).lastrowid
            self._store_budget(db, event, budget)
        self._refusals.setdefault(event.key, RefusalTally()).add(Refusal(int(rid), event, over.name, value, budget, now))
        self._last_refusal = int(rid)
        self._budgets.setdefault(event.key, {})[event.family] = budget
        self._versions[event.key] += 1
        log.warning("ledger: %s/%s %s release refused: %s would be %.12g > %.12g",
                    event.device, event.stream, event.family, over.name, value, budget)

    @staticmethod
    def _store_budget(db: sqlite3.Connection, event: Event, budget: float) -> None:
        db.execute("INSERT INTO budgets (device, stream, family, budget) VALUES (?, ?, ?, ?) "
                   "ON CONFLICT (device, stream, family) DO UPDATE SET budget = excluded.budget",
                   (event.device, event.stream, event.family, budget))

    def commit_all(self, events: Sequence[Event]) -> list[int]:
        """:meth:`commit` several redaction or channel events in ONE transaction (one disk sync for
        all of them; the daemon's group commit). Aggregates go through :meth:`admit` or
        :meth:`commit` one at a time (each one's accountant state builds on the previous)."""
        if any(isinstance(ev, AggregateEvent) for ev in events):
            raise LedgerError("commit_all takes redaction and channel events only")
        with self._lock:
            self._writable()
            if not events:
                return []
            with self._transaction() as db:
                staged = [self._insert(db, ev, None, None) for ev in events]
            ids = [self._applied(ev, None, None, *st) for ev, st in zip(events, staged)]
            self._covered()
            return ids

    def _commit(self, event: Event, desc: dict[str, Any] | None, budget: float | None) -> int:
        with self._transaction() as db:
            staged = self._insert(db, event, desc, budget)
        return self._applied(event, desc, budget, *staged)

    def _insert(self, db: sqlite3.Connection, event: Event, desc: dict[str, Any] | None,
                budget: float | None) -> tuple[int, str, dict[str, QuiltAccountant] | None]:
        """Write ``event`` inside the open transaction; the in-memory state follows in
        :meth:`_applied` once the transaction is durable. Events staged earlier in the same
        transaction count (ids and digests chain on from them)."""
        book = self._book(event.key)
        body = canonical(event)
        accountants = book.accountants_after(event) if isinstance(event, AggregateEvent) else None
        event_id = self._staged_id + 1
        digest = chain_digest(self._staged_head, event_id, body)
        if desc is not None:
            db.execute("INSERT INTO models (id, description) VALUES (?, ?)",
                       (event.model, json.dumps(desc, sort_keys=True, allow_nan=False)))  # type: ignore[union-attr]
        db.execute(
            "INSERT INTO events (id, device, stream, family, body, digest, budget, stored_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (event_id, event.device, event.stream, event.family, body, digest, budget, time.time()))
        for mid, acc in (accountants or {}).items():
            db.execute(
                "INSERT INTO derived (device, stream, model, upto, segments, eps_max) VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (device, stream, model) DO UPDATE SET upto = excluded.upto, "
                "segments = excluded.segments, eps_max = excluded.eps_max",
                (event.device, event.stream, mid, event_id, _segments_json(acc), float(acc.eps_max())))
        if budget is not None:
            self._store_budget(db, event, budget)
        self._staged_id, self._staged_head = event_id, digest
        return event_id, digest, accountants

    def _applied(self, event: Event, desc: dict[str, Any] | None, budget: float | None, event_id: int,
                 digest: str, accountants: dict[str, QuiltAccountant] | None) -> int:
        """Durable now: the in-memory state follows."""
        if desc is not None:
            self._descriptions[event.model] = desc  # type: ignore[union-attr]
        self._book(event.key).add(event_id, event, accountants)
        self._versions[event.key] += 1
        self._last_id, self._head = event_id, digest
        self._uncovered += 1
        if budget is not None:
            self._budgets.setdefault(event.key, {})[event.family] = budget
        return event_id

    # -- export ----------------------------------------------------------------------------------
    def export(self) -> dict[str, Any]:
        """Every event (with its id, digest and admitted budget), every refusal, the models'
        descriptions, and the numbers the ledger declares per stream — all that
        :func:`streamguard.ledger.recheck.recheck` needs to recompute them from the events alone."""
        with self._lock:
            events = [{"id": i, "digest": d, "budget": b, "stored_at": t, "event": json.loads(body)}
                      for i, body, d, b, t in self._db.execute(
                          "SELECT id, body, digest, budget, stored_at FROM events ORDER BY id").fetchall()]
            refusals = [{"id": r.id, "guarantee": r.guarantee, "would_be": json_number(r.would_be),
                         "budget": r.budget, "stored_at": r.stored_at, "event": r.event.to_json()}
                        for r in self._refusals_where("", ())]
            declared = {f"{d}/{s}": {g.name: json_number(g.value) for g in self._books[(d, s)].guarantees()}
                        for d, s in sorted(self._books)}
            return {
                "format": "streamguard-ledger",
                "version": SCHEMA_VERSION,
                "exported_at": time.time(),
                "head": {"id": self._last_id, "digest": self._head},
                "models": dict(sorted(self._descriptions.items())),
                "events": events,
                "refusals": refusals,
                "declared": declared,
            }


__all__ = ["BudgetExceeded", "GENESIS", "chain_digest", "Ledger", "LedgerCorrupt", "LedgerError", "Refusal", "model_description", "model_from_description"]
