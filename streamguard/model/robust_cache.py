"""Robust stream plans kept across starts (issue 11): the daemon's plan cache, keyed by the model
set's canonical content.

The key hashes the model set's canonical JSON (``ModelSet.to_json``: kind, ranges or members, point
estimate, confidence — the whole content, not the short id), ε, the design, split and threshold, and
the code that designs and certifies (the plan cache's fingerprint plus this package's robust planning
sources). What is stored is what the search found: the design member (α, β), the design budget ε'
and the plan's rows (:mod:`streamguard.redaction.plan_cache` format). **Never trusted:** on a hit the
plan is rebuilt on the design member and must pass the plan cache's exact checks for ε', and its
worst case over the whole set is certified again from scratch (:func:`.robust.certified_stream_plan`);
a stored plan that fails either is designed again (a warning). What the cache saves is the search —
design candidates × bisection of ε', each with a certificate — not any check.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from .chain import MarkovChain
from ..redaction.plan import check_epsilon
from ..redaction.plan_cache import _CODE, PlanCache, _plan_doc, _plan_from, cached_plan_stream
from .modelset import ModelSet
from .robust import RobustStreamPlan, certified_stream_plan, robust_stream_plan

log = logging.getLogger(__name__)

_FORMAT = 1
_SOURCES = ("robust.py", "interval.py", "modelset.py", "../audit/exact.py")


def _fingerprint() -> str:
    h = hashlib.sha256(_CODE.encode())
    here = Path(__file__).resolve().parent
    for name in _SOURCES:
        try:
            h.update((here / name).read_bytes())
        except OSError:
            h.update(name.encode())
    return h.hexdigest()


_ROBUST_CODE = _fingerprint()


def robust_key(model_set: ModelSet, epsilon: float, design: str, split: str | float,
               threshold: float | str | None) -> str:
    """Hash of everything a robust stream plan depends on (module docstring)."""
    doc = {"robust": True, "model_set": model_set.to_json(), "epsilon": float(epsilon).hex(), "design": design,
           "split": split if isinstance(split, str) else float(split).hex(),
           "threshold": threshold if threshold is None or isinstance(threshold, str) else float(threshold).hex(),
           "code": _ROBUST_CODE, "format": _FORMAT}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _from_doc(doc: Any, model_set: ModelSet, eps: float, design: str, point_planner: Any) -> RobustStreamPlan | None:
    try:
        member = (float(doc["member"][0]), float(doc["member"][1]))
        budget = float(doc["budget"])
        if not 0.0 < budget <= eps:
            return None
        plan = _plan_from(doc["plan"], MarkovChain.binary(*member), budget, design)
    except (KeyError, TypeError, ValueError, IndexError):
        return None
    if plan is None:
        return None
    return certified_stream_plan(model_set, eps, plan, member, budget, point_planner)


def cached_robust_stream_plan(model_set: ModelSet, epsilon: float, *, design: str = "optimal",
                              split: str | float = "even", threshold: float | str | None = None,
                              cache: PlanCache | None = None) -> RobustStreamPlan:
    """:func:`.robust.robust_stream_plan`, looked up in ``cache`` first (and re-checked), stored
    there after; the point estimate's plan goes through the same cache."""
    eps = check_epsilon(epsilon)

    def point_planner(chain: MarkovChain, e: float) -> Any:
        return cached_plan_stream(chain, e, design=design, split=split, threshold=threshold, cache=cache)

    key = robust_key(model_set, eps, design, split, threshold)
    if cache is not None:
        doc = cache.entry(key)
        if doc is not None:
            hit = _from_doc(doc, model_set, eps, design, point_planner)
            if hit is not None:
                return hit
            log.warning("plan cache %s: a stored robust plan failed its checks; it is designed again", cache.path)
    got = robust_stream_plan(model_set, eps, design=design, split=split, threshold=threshold,
                             point_planner=point_planner)
    if cache is not None:
        cache.put(key, {"member": list(got.design_member), "budget": got.design_budget, "plan": _plan_doc(got.plan)})
    return got
