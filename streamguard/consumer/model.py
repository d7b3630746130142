"""The model a stream's privacy status publishes, as the consumer uses it.

A status describes a point model (``model.kind == "point"``, or no kind: a status from before
issue 14 with only α and β of a binary chain): the chain estimates are corrected under.
:func:`published_model` refuses kinds it does not know, so an estimate is never made under a model
the consumer misread (fail closed, one-line reason). A calibrated (or declared) stream also states
the model *set* its claims hold over (``model_set``, :func:`published_set`): the re-audit checks the
claims over that set, not under the point estimate alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..model.chain import MarkovChain, ModelError
from ..model.modelset import ModelSet


class StatusError(ValueError):
    """A privacy status lacks what an estimate or an audit needs (names the field)."""


@dataclass(frozen=True)
class PublishedModel:
    """A point Markov model and the initial law the producer stated (None: any law)."""

    chain: MarkovChain
    initial: NDArray[np.float64] | None

    def law_at(self, position: int) -> NDArray[np.float64]:
        """The prior law of X at ``position``: the stated initial law moved ``position`` steps,
        else the stationary law (a stream whose start is unknown is taken as stationary)."""
        if self.initial is None:
            return self.chain.stationary_law
        return self.initial @ self.chain.power(position)

    def segment(self, position: int, n: int, anchor: tuple[int, float]) -> tuple[NDArray[np.float64],
                                                                                  NDArray[np.float64]]:
        """The transition matrix and the prior law of the n positions from ``position`` (``anchor``,
        a record's (position, epoch), is for time-varying models: a homogeneous one ignores it)."""
        return self.chain.matrix, self.law_at(position)


def published_model(status: dict[str, Any]) -> PublishedModel:
    """The model of a privacy status (see module docstring)."""
    m = status.get("model")
    if not isinstance(m, dict):
        raise StatusError("privacy status has no 'model'")
    kind = m.get("kind", "point")
    if kind != "point":
        raise StatusError(f"privacy status: model kind {kind!r} is not supported by this consumer")
    try:
        if "matrix" in m:
            chain = MarkovChain(m["matrix"])
        elif "alpha" in m and "beta" in m:
            chain = MarkovChain.binary(float(m["alpha"]), float(m["beta"]))
        else:
            raise StatusError("privacy status: 'model' has neither a matrix nor alpha and beta")
        initial = m.get("initial")
        law = None if initial is None else np.asarray(initial, dtype=np.float64)
        if law is not None and (law.shape != (chain.k,) or np.any(law < 0) or abs(law.sum() - 1) > 1e-9):
            raise StatusError("privacy status: 'model.initial' is not a law of the chain's states")
    except (ModelError, TypeError, ValueError) as exc:
        if isinstance(exc, StatusError):
            raise
        raise StatusError(f"privacy status: 'model' is not a valid Markov chain ({exc})") from None
    return PublishedModel(chain, law)


def published_set(status: dict[str, Any], k: int) -> ModelSet | str | None:
    """The model set a status states its claims over (``model_set``; schema privacy-redaction.json):
    None when it states none (the claims are about ``model``); a :class:`ModelSet` the consumer
    can re-check over — a binary box (``alpha``, ``beta`` ranges) or a finite set (``chains``);
    else a one-line reason why it cannot (a k-state region, a finite set published without its
    chains). A malformed set is a :class:`StatusError` (fail closed: never re-checked under a
    misread set)."""
    m = status.get("model_set")
    if m is None:
        return None
    if not isinstance(m, dict):
        raise StatusError("privacy status: 'model_set' is not an object")
    kind = m.get("kind")
    try:
        if kind == "box" and k == 2:
            (a0, a1), (b0, b1) = ((float(x) for x in m[name]) for name in ("alpha", "beta"))
            return ModelSet("box", 2, box=((a0, a1), (b0, b1)))
        if kind == "finite" and "chains" in m:
            return ModelSet("finite", k, members=tuple(MarkovChain(c) for c in m["chains"]))
    except (KeyError, TypeError, ValueError, ModelError) as exc:
        raise StatusError(f"privacy status: 'model_set' of kind {kind!r} is not a valid set ({exc})") from None
    if kind == "finite":
        return "the finite model set is published without its chains"
    return f"a model set of kind {kind!r} over {k} states"


def labels_of(status: dict[str, Any] | None, k: int | None = None) -> list[Any]:
    """The stream's state labels in state order (the status's ``labels``)."""
    labels = None if status is None else status.get("labels")
    if not isinstance(labels, list) or len(labels) < 2:
        raise StatusError("privacy status has no 'labels'")
    if k is not None and len(labels) != k:
        raise StatusError(f"privacy status: {len(labels)} labels for a {k}-state model")
    return labels
