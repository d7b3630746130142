"""The model a stream's privacy status publishes, as the consumer uses it.

Today a status describes a point model (``model.kind == "point"``, or no kind: a status from
before issue 14 with only α and β of a binary chain). A model *set* (issue 14 §model sets) will be
another kind; :func:`published_model` refuses kinds it does not know, so an estimate is never made
under a model the consumer misread (fail closed, one-line reason).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..chain import MarkovChain, ModelError


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


def labels_of(status: dict[str, Any] | None, k: int | None = None) -> list[Any]:
    """The stream's state labels in state order (the status's ``labels``)."""
    labels = None if status is None else status.get("labels")
    if not isinstance(labels, list) or len(labels) < 2:
        raise StatusError("privacy status has no 'labels'")
    if k is not None and len(labels) != k:
        raise StatusError(f"privacy status: {len(labels)} labels for a {k}-state model")
    return labels
