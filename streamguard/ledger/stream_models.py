"""The redaction streams' models in a ledger export, and what ``ledger check`` recomputes from them.

The ledger's redaction events carry each mark's exact leakage, the plan's name and ε, but not the
Markov model the plan was designed under. ``ledger export --config FILE`` adds, per redaction
stream of the configuration, the model (its transition matrix), ε, design and split
(:func:`describe_streams`). ``ledger check`` then (:func:`recheck_streams`) re-designs each plan
from that model (:func:`streamguard.redaction.plan.plan_stream`, notes/000), recomputes its exact
leakage in an unbounded stream and requires it ≤ ε, and requires every redaction event of the
stream to name that ε and design — so the export states, and the check confirms, what the
recorded leakages are relative to. Not recomputed: the leakage of a mark that came late (its left
rows were already published; it needs the outbox's recorded rows, which the ledger does not hold).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..model.chain import MarkovChain


def describe_streams(settings: Any) -> dict[str, dict[str, Any]]:
    """``{"device/stream": {...}}`` for every redaction stream of ``settings`` (module docstring)."""
    out = {}
    for cfg in settings.streams:
        if cfg.mechanism != "redaction":
            continue
        chain = cfg.chain()
        out[f"{settings.device}/{cfg.name}"] = {
            "mechanism": "redaction", "matrix": chain.matrix.tolist(), "epsilon": cfg.epsilon,
            "design": cfg.design, "split": cfg.split,
            "source": "calibration" if cfg.model.calibration is not None else "configuration"}
    return out


def recheck_streams(described: Mapping[str, Any], events: list[Mapping[str, Any]],
                    flag: Callable[[str, str, str], None]) -> dict[str, float]:
    """Re-design each described stream's plan and check it and the stream's redaction events;
    returns the recomputed plan leakage per stream."""
    from ..redaction.plan import plan_stream

    leakage: dict[str, float] = {}
    for name, d in sorted(described.items()):
        try:
            chain = MarkovChain(d["matrix"])
            plan = plan_stream(chain, float(d["epsilon"]), design=str(d["design"]), split=d["split"])
        except (KeyError, TypeError, ValueError) as exc:
            flag("model", f"{name} model", f"cannot rebuild the plan ({exc})")
            continue
        total = plan.leakage().total
        leakage[name] = total
        if not total <= plan.epsilon:
            flag("plan", f"{name} model", f"the plan's exact leakage {total:.12g} exceeds ε = {plan.epsilon:.12g}")
        device, _, stream = name.partition("/")
        for row in events:
            ev = row.get("event") if isinstance(row, Mapping) else None
            if not (isinstance(ev, Mapping) and ev.get("family") == "redaction" and ev.get("device") == device
                    and ev.get("stream") == stream):
                continue
            if ev.get("epsilon") != plan.epsilon or ev.get("plan") != f"3R:{plan.design}":
                flag("model", f"event {row.get('id')}", f"recorded under ε = {ev.get('epsilon')}, plan "
                     f"{ev.get('plan')}; the exported model says ε = {plan.epsilon:g}, plan 3R:{plan.design}")
    return leakage
