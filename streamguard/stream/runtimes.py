"""Which runtime a configured stream gets: 3R redaction or a per-record channel."""

from __future__ import annotations

from ..config import Settings, StreamConfig
from ..redaction.plan_cache import PlanCache
from ..sampling import BitSource
from .channel_runtime import ChannelRuntime
from .redaction_runtime import RedactionRuntime
from .runtime import FRESH, Resume, StreamRuntime


def make_runtime(settings: Settings, cfg: StreamConfig, source: BitSource, *, resume: Resume = FRESH,
                 aggregate_source: BitSource | None = None, plan_cache: PlanCache | None = None) -> StreamRuntime:
    """The runtime of a stream's mechanism, continuing where ``resume`` says (after a restart).
    ``aggregate_source`` draws the aggregates' noise (default: ``source``); a redaction stream
    looks its plan up in ``plan_cache`` (and stores it there)."""
    if cfg.mechanism == "channel":
        return ChannelRuntime(settings, cfg, source, resume=resume, aggregate_source=aggregate_source)
    return RedactionRuntime(settings, cfg, source, resume=resume, aggregate_source=aggregate_source,
                            plan_cache=plan_cache)
