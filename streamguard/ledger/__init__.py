"""Privacy ledger: composition rules, per-position accountant, persistence (DESIGN.md §4)."""

from .composition import (
    Composed,
    MqmRelease,
    NotApplicable,
    PufferfishRelease,
    Quilt,
    active_quilts,
    boundary_influences,
    mqm_release,
    paper_bounds,
    thm_II6,
    thm_III1,
    thm_III1_printed_WRONG,
    thm_III3,
    thm_III6,
    thm_III7,
)

__all__ = [
    "Composed",
    "MqmRelease",
    "NotApplicable",
    "PufferfishRelease",
    "Quilt",
    "active_quilts",
    "boundary_influences",
    "mqm_release",
    "paper_bounds",
    "thm_II6",
    "thm_III1",
    "thm_III1_printed_WRONG",
    "thm_III3",
    "thm_III6",
    "thm_III7",
]

# The persisted ledger: release events, write-ahead store with the budget filter, odometer, re-check.
from .events import AggregateEvent, ChannelClaim, ChannelEvent, Event, EventError, RedactionEvent, event_from_json
from .odometer import odometer
from .recheck import RecheckError, recheck
from .store import BudgetExceeded, Ledger, LedgerCorrupt, LedgerError

__all__ += [
    "AggregateEvent",
    "BudgetExceeded",
    "ChannelClaim",
    "ChannelEvent",
    "Event",
    "EventError",
    "Ledger",
    "LedgerCorrupt",
    "LedgerError",
    "RecheckError",
    "RedactionEvent",
    "event_from_json",
    "odometer",
    "recheck",
]
