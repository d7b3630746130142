"""Summary checkpoints: a start of the ledger reads only the events after the last checkpoint.

Replaying every event at each start cost time and memory linear in the history (issue 28:
300,000 marks, 16.8 s and 384 MB). What a replay builds is the books' summaries
(``book.py``: aggregate, channel and mark summaries, the quilt accountants, the latest drift
event) and the refusal tallies. A checkpoint stores them — a file beside the ledger,
``<ledger>.checkpoint``, mode 0600, replaced atomically (a temporary file renamed over it) — with
what they cover:

* ``upto``: the last event they include, and ``head``: that event's digest (the chain head);
* ``refusals``: the last refusal they include;
* ``state``: JSON, per stream its book's summaries and refusal tally; ``marks``: the streams' mark
  tables (``mark_table.py``), one after another, as packed bytes;
* ``digest``: SHA-256 over all of the above.

**Start** (:meth:`streamguard.ledger.store.Ledger.open`): the checkpoint is used only if its
digest matches its content and the event stored with id ``upto`` has digest ``head`` (no
checkpoint: ``upto`` 0 and the genesis head); then only the events after ``upto`` (their chain
checked on from ``head``) and the refusals after ``refusals`` are replayed, and the aggregate
accountants are checked against the ``derived`` table as after a full replay. If any of this
fails — a tampered, stale or unreadable checkpoint — the ledger says so in one warning line and
replays every event instead: the event log is the record of truth, a checkpoint only an
optimization, and the full replay either reproduces the state or refuses to open
(``LedgerCorrupt``). That is the safe side: a bad checkpoint costs a slow start, never a wrong
budget. What a checkpoint does not give: the events before ``upto`` are not re-read at a start,
so an edit of an old event is found by the offline check of an export (``recheck.py``, which
recomputes the whole chain) and by any start that falls back, not by every start. Like the chain,
the digest protects against accidents and naive edits, not against someone who recomputes it.

**Writing** (:meth:`~streamguard.ledger.store.Ledger.save_summaries`): after every
:data:`CHECKPOINT_EVERY` events, at a start that replayed at least as many, and at a clean close,
once the events it covers are durable. It is a separate file so that writing it never holds the
ledger's write lock, and it is not synced: the pause on the thread that stores decisions is the
encoding and a copy into the page cache (measured in ``benchmarks/bench_ledger_startup.py``), not
a disk sync of the whole summary. A crash before the rename leaves the previous checkpoint, which
the next start completes from the events; a power loss that leaves the file damaged makes its
digest fail (a full replay, once); a failed write (a full disk) is logged and changes nothing
recorded. Writing one freezes every mark into its
stream's packed table, which is what keeps a stream's memory at ~0.08 KB per mark.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..support.private_files import write_private
from ..quilt.model import QuiltModel
from .book import StreamBook

#: Events between two checkpoints: a start replays at most this many (redaction marks: ~0.5 s).
CHECKPOINT_EVERY = 5_000
FORMAT = 1
MAGIC = b"streamguard-ledger-checkpoint\n"

Row = tuple[int, str, int, str, bytes | memoryview, str]  # (upto, head, refusals, state, marks, digest)

Key = tuple[str, str]


class CheckpointError(ValueError):
    """The checkpoint cannot be used (the message says why, in one line)."""


@dataclass
class Checkpoint:
    """A checkpoint's content: what it covers and the state it restores. ``tallies`` holds per
    stream its refusal counts per family (in the order first refused) and its latest refusal's id."""

    upto: int
    head: str
    refusals: int
    books: dict[Key, StreamBook]
    tallies: dict[Key, tuple[list[tuple[str, int]], int | None]]


def _digest(upto: int, head: str, refusals: int, state: str, marks: bytes | memoryview) -> str:
    h = hashlib.sha256(f"{FORMAT}\n{upto}\n{head}\n{refusals}\n{len(state)}\n".encode())
    h.update(state.encode())
    h.update(marks)
    return h.hexdigest()


def path_of(ledger: str) -> Path:
    """Where the checkpoint of the ledger at ``ledger`` lives."""
    return Path(f"{ledger}.checkpoint")


def write(path: Path, row: Row) -> None:
    """Replace the checkpoint file with ``row``: the magic line, a JSON header line (what it
    covers, the lengths, the digest), the state, the mark tables. OSError if it cannot."""
    upto, head, refusals, state, marks, digest = row
    text = state.encode()
    header = json.dumps({"format": FORMAT, "upto": upto, "head": head, "refusals": refusals, "state": len(text),
                         "marks": len(marks), "digest": digest}, sort_keys=True).encode()
    write_private(path, [MAGIC, header, b"\n", text, marks])


def read(path: Path) -> Row | None:
    """The row of the checkpoint file (None if there is none); CheckpointError if it is not one."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CheckpointError(f"unreadable ({exc.strerror})") from None
    end = data.find(b"\n", len(MAGIC))
    try:
        if not data.startswith(MAGIC) or end < 0:
            raise ValueError("not a ledger checkpoint")
        h = json.loads(data[len(MAGIC):end])
        if h.get("format") != FORMAT:
            raise ValueError(f"format {h.get('format')!r}, this code reads {FORMAT}")
        view, start = memoryview(data), end + 1
        if len(data) != start + h["state"] + h["marks"]:
            raise ValueError("truncated or too long")
        state = bytes(view[start:start + h["state"]]).decode()
        return int(h["upto"]), str(h["head"]), int(h["refusals"]), state, view[start + h["state"]:], str(h["digest"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CheckpointError(f"unreadable ({exc})") from None


def encode(cp: Checkpoint) -> Row:
    """The row (upto, head, refusals, state, marks, digest) of ``cp``. Freezes the books' marks;
    ValueError if a mark cannot be packed (then no checkpoint is written)."""
    streams, tables, offset = [], [], 0
    for (device, stream), book in sorted(cp.books.items()):
        state, table = book.state()
        streams.append({"device": device, "stream": stream, "book": state, "marks": [offset, len(table)]})
        tables.append(table)
        offset += len(table)
    refused = [{"device": d, "stream": s, "by_family": by, "last": last}
               for (d, s), (by, last) in sorted(cp.tallies.items())]
    state_text = json.dumps({"format": FORMAT, "books": streams, "refusals": refused}, sort_keys=True,
                            separators=(",", ":"))  # (unbounded figures as Infinity: read back by json only)
    marks = b"".join(tables)
    return cp.upto, cp.head, cp.refusals, state_text, marks, _digest(cp.upto, cp.head, cp.refusals, state_text, marks)


def decode(row: Row, model_of: Callable[[str], QuiltModel]) -> Checkpoint:
    """The checkpoint of a stored row; :class:`CheckpointError` if its digest does not match its
    content or the content is malformed (its head is checked against the events by the ledger)."""
    upto, head, refusals, state_text, data, digest = row
    marks = memoryview(data)  # (each stream's table a view of it: no copy)
    if _digest(upto, head, refusals, state_text, marks) != digest:
        raise CheckpointError("its digest does not match its content (edited or damaged)")
    try:
        doc = json.loads(state_text)
        if doc.get("format") != FORMAT:
            raise CheckpointError(f"format {doc.get('format')!r}, this code reads {FORMAT}")
        books = {}
        for entry in doc["books"]:
            start, length = entry["marks"]
            key = (entry["device"], entry["stream"])
            books[key] = StreamBook.from_state(*key, model_of, entry["book"], marks[start:start + length])
        tallies = {(t["device"], t["stream"]): ([(f, int(n)) for f, n in t["by_family"]], t["last"])
                   for t in doc["refusals"]}
    except CheckpointError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CheckpointError(f"unreadable ({type(exc).__name__}: {exc})") from None
    return Checkpoint(int(upto), str(head), int(refusals), books, tallies)
