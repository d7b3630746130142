"""Stream plans kept across starts, in a private file, and never trusted without the exact audit.

A stream plan (:func:`.plan.plan_stream`) depends on the chain (its matrix), ε, the design, the
split rule, the region threshold and the code that designs it; the key hashes all of them (the
code as the streamguard version plus a hash of the planning modules' source). Only what is costly
is stored: each side's budget, region threshold and redaction rows. On a hit the influences and
regions are recomputed from the model (cheap), the stored rows must have the region layout they
imply, and the exact leakage of each side and of the whole table is recomputed
(notes/000 §9.2) and must meet its budget: a damaged or tampered cache can cost time, never privacy.

The file is JSON, created 0600 (:mod:`streamguard.support.private_files`), replaced atomically, and holds at
most :data:`MAX_ENTRIES` plans (the oldest go first). A cache that cannot be read or written is
ignored with a warning: planning goes on without it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from ..model.chain import MarkovChain
from ..support.private_files import private_file
from .plan import StreamPlan, check_epsilon, plan_stream
from .regions import M, side_redaction
from .side import SidePlan, SideModel, _classified

log = logging.getLogger(__name__)

MAX_ENTRIES = 64
#: Planning that takes longer than this (seconds) is announced before and timed after.
SLOW_SECONDS = 1.0
_FORMAT = 1
_PLANNING_SOURCES = ("plan.py", "side.py", "design.py", "exact_search.py", "regions.py",
                     "../audit/exact.py", "../influence.py", "../model/chain.py", "../privacy/channel.py")


def _code_fingerprint() -> str:
    h = hashlib.sha256(__version__.encode())
    here = Path(__file__).resolve().parent
    for name in _PLANNING_SOURCES:
        try:
            h.update((here / name).read_bytes())
        except OSError:
            h.update(name.encode())
    return h.hexdigest()


_CODE = _code_fingerprint()


def default_cache_path(env: dict[str, str] | None = None) -> Path | None:
    """``$XDG_CACHE_HOME/streamguard/plans.json`` (``~/.cache`` by default); None without a home."""
    env = dict(os.environ) if env is None else env
    base = env.get("XDG_CACHE_HOME") or (str(Path(env["HOME"]) / ".cache") if env.get("HOME") else "")
    return Path(base) / "streamguard" / "plans.json" if base else None


def beside(outbox: Path) -> Path:
    """The daemon's plan cache: ``<outbox stem>.plans.json`` next to the outbox."""
    return Path(outbox).with_name(Path(outbox).stem + ".plans.json")


def plan_key(chain: MarkovChain, epsilon: float, design: str, split: str | float,
             threshold: float | str | None) -> str:
    """Hash of everything a stream plan depends on (module docstring)."""
    doc = {"matrix": [float(x).hex() for x in chain.matrix.ravel()], "k": chain.k,
           "epsilon": float(epsilon).hex(), "design": design,
           "split": split if isinstance(split, str) else float(split).hex(),
           "threshold": threshold if threshold is None or isinstance(threshold, str) else float(threshold).hex(),
           "code": _CODE, "format": _FORMAT}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _plan_doc(plan: StreamPlan) -> dict[str, Any]:
    """What is stored of a plan: each side's budget, region threshold and redaction rows."""
    return {side: {"budget": sp.budget, "threshold": sp.threshold, "red": sp.red.tolist()}
            for side, sp in (("left", plan.left), ("right", plan.right))}


def _side_from(doc: dict[str, Any], model: SideModel) -> SidePlan | None:
    """The side rebuilt from its stored rows, or None if they do not fit the model or leak too much."""
    budget, thr = float(doc["budget"]), float(doc["threshold"])
    red = np.asarray(doc["red"], dtype=np.float64)
    if not (0.0 <= thr <= budget) or red.ndim != 2 or red.shape[1] != 2:
        return None
    infl, regions, common = _classified(model, thr)
    if red.shape[0] != regions.shape[0] or not np.all((red >= 0.0) & (red <= 1.0)):
        return None
    q = np.where(regions == M, red[np.arange(red.shape[0]), common], 0.0)
    if not np.array_equal(side_redaction(regions, common, q), red):  # L, S and M rows as designed
        return None
    if model.exact_leakage(red) > budget:
        return None
    redacted = float(np.sum(model.marginals(red.shape[0]) * red))
    return SidePlan(budget, thr, model.length, infl, regions, red, redacted)


def _plan_from(doc: dict[str, Any], chain: MarkovChain, epsilon: float, design: str) -> StreamPlan | None:
    try:
        left = _side_from(doc["left"], SideModel(chain, 0, "left", None))
        right = _side_from(doc["right"], SideModel(chain, 0, "right", None))
    except (KeyError, TypeError, ValueError):
        return None
    if left is None or right is None or left.budget + right.budget > epsilon:
        return None
    plan = StreamPlan(chain, epsilon, design, left, right)
    return plan if plan.leakage().total <= epsilon else None


class PlanCache:
    """Stream plans in one private JSON file (see module docstring).

    With ``share=True`` (the daemon: one instance per start) a plan this instance designed or
    checked is also kept in memory and returned as the same object to every stream with the same
    key, so 1,000 streams of one model are planned — or read and checked exactly — once, not
    1,000 times; the shared plan's arrays are made read-only (the privatizer never writes them:
    it copies the rows it changes). Without it every lookup reads and checks the file again.
    """

    def __init__(self, path: Path, *, share: bool = False) -> None:
        self.path = Path(path)
        self._shared: dict[str, StreamPlan] | None = {} if share else None
        self._leakages: dict[int, tuple[StreamPlan, Any]] = {}

    def shared(self, key: str) -> StreamPlan | None:
        """The plan this instance already returned for ``key`` (``share=True`` only)."""
        return None if self._shared is None else self._shared.get(key)

    def leakage(self, plan: StreamPlan | Any) -> Any:
        """``plan.leakage()`` (exact, notes/000 §9.2), computed once for a shared plan."""
        if self._shared is None or not any(p is plan for p in self._shared.values()):
            return plan.leakage()
        known = self._leakages.get(id(plan))
        if known is None or known[0] is not plan:
            known = self._leakages[id(plan)] = (plan, plan.leakage())
        return known[1]

    def share(self, key: str, plan: StreamPlan) -> StreamPlan:
        """Keep ``plan`` for later lookups of ``key`` (``share=True``), read-only; returns it."""
        if self._shared is not None:
            for side in (plan.left, plan.right):
                for arr in (side.influences, side.regions, side.red):
                    arr.setflags(write=False)
            if len(self._shared) >= MAX_ENTRIES:
                gone = self._shared.pop(next(iter(self._shared)))
                self._leakages.pop(id(gone), None)
            self._shared[key] = plan
        return plan

    def _read(self) -> dict[str, Any]:
        try:
            doc = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("plan cache %s is unreadable (%s); it is rebuilt", self.path, type(exc).__name__)
            return {}
        return doc if isinstance(doc, dict) else {}

    def entry(self, key: str) -> dict[str, Any] | None:
        """The stored document under ``key`` (unchecked: the caller checks it), None if absent."""
        doc = self._read().get(key)
        return doc if isinstance(doc, dict) else None

    def get(self, key: str, chain: MarkovChain, epsilon: float, design: str) -> StreamPlan | None:
        doc = self.entry(key)
        if doc is None:
            return None
        plan = _plan_from(doc, chain, epsilon, design)
        if plan is None:
            log.warning("plan cache %s: a stored plan failed its exact check; it is designed again", self.path)
        return plan

    def put(self, key: str, doc: dict[str, Any]) -> None:
        entries = self._read()
        entries.pop(key, None)
        entries[key] = doc
        while len(entries) > MAX_ENTRIES:
            entries.pop(next(iter(entries)))
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            if tmp.exists():
                tmp.unlink()
            private_file(tmp)
            tmp.write_text(json.dumps(entries))
            os.replace(tmp, self.path)
        except OSError as exc:
            log.warning("plan cache %s cannot be written (%s); plans are designed at every start",
                        self.path, exc.strerror or type(exc).__name__)


def cached_plan_stream(
    chain: MarkovChain,
    epsilon: float,
    *,
    design: str = "optimal",
    split: str | float = "even",
    threshold: float | str | None = None,
    cache: PlanCache | None = None,
    progress: Callable[[str], None] | None = None,
) -> StreamPlan:
    """:func:`.plan.plan_stream`, looked up in ``cache`` first and stored there after. ``progress``
    (default: the log) hears about a design that is not cached and may be slow (the exact
    design), and how long a slow one took."""
    eps = check_epsilon(epsilon)
    say = progress or log.info
    key = plan_key(chain, eps, design, split, threshold)
    if cache is not None:
        hit = cache.shared(key) or cache.get(key, chain, eps, design)
        if hit is not None:
            return cache.share(key, hit)
    if design == "exact":
        say(f"designing the exact plan (ε={eps:g}, split {split}); it is cached for later starts"
            if cache is not None else f"designing the exact plan (ε={eps:g}, split {split})")
    started = time.monotonic()
    plan = plan_stream(chain, eps, design=design, split=split, threshold=threshold)
    took = time.monotonic() - started
    if took > SLOW_SECONDS:
        say(f"plan designed in {took:.1f} s")
    doc = _plan_doc(plan)
    if cache is not None and _plan_from(doc, chain, eps, design) is not None:
        cache.put(key, doc)  # only what a later start would accept
    return plan if cache is None else cache.share(key, plan)

