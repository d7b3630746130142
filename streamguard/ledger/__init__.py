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
