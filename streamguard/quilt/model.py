"""The adversary model of the Markov Quilt Mechanism: a finite set Θ of chains and a max-influence mode.

Pufferfish guarantees are relative to Θ (notes/002 §8: "report the guarantee together with Θ and
the mode"), so the model carries a stable short ``identifier`` for the ledger and a JSON-ready
``describe()``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from streamguard.model.chain import MarkovChain, ModelError, as_chain

from .influence import MODES, TRANSLATION_INVARIANT_MODES, ChainTables


class QuiltModel:
    """Θ = ``chains`` with max-influence ``mode`` (one of ``q``, ``stat``, ``supq``, ``approx``, ``approx-rev``).

    Every guarantee computed from the model is the worst case over Θ (Def II.2 takes sup over θ;
    Algorithm 1 takes the max of the per-θ noise scales).

    Parameters
    ----------
    chains:
        One or more :class:`~streamguard.model.chain.MarkovChain` (or transition matrices), all with the
        same number of states k.
    mode:
        ``q``: E-q, each chain with a fixed initial law (``initial`` or the chain's own);
        ``stat``: E-stat, stationary start; ``supq``: E-supq, any initial law;
        ``approx``: Lemma II.3 bound (eigengap of P·P*); ``approx-rev``: the authors' variant for
        reversible chains with 1 − |λ₂| (notes/002 §3.2).
    initial:
        Mode ``q`` only: one law of X_1 shared by every chain in Θ (default: each chain's
        ``initial``). Other modes fix or quantify over the initial law themselves, so passing one
        is an error.
    """

    def __init__(self, chains: Sequence[MarkovChain] | MarkovChain, mode: str,
                 initial: ArrayLike | None = None) -> None:
        if isinstance(chains, MarkovChain):
            chains = [chains]
        chain_list = tuple(as_chain(c) for c in chains)
        if not chain_list:
            raise ModelError("a quilt model needs at least one chain")
        if len({c.k for c in chain_list}) != 1:
            raise ModelError("all chains of a quilt model must have the same number of states")
        if mode not in MODES:
            raise ModelError(f"unknown max-influence mode {mode!r}; expected one of {MODES}")
        self.chains: tuple[MarkovChain, ...] = chain_list
        self.mode = mode
        self.initial: NDArray[np.float64] | None = None
        if initial is not None:
            if mode != "q":
                raise ModelError(f"an initial law only applies to mode 'q', not {mode!r}")
            self.initial = MarkovChain(chain_list[0].matrix, initial).initial
        self._tables = tuple(ChainTables(c, mode, self.initial) for c in chain_list)

    @property
    def k(self) -> int:
        return self.chains[0].k

    @property
    def translation_invariant(self) -> bool:
        """True when e(a, b) does not depend on the node (``stat``, ``approx``, ``approx-rev``)."""
        return self.mode in TRANSLATION_INVARIANT_MODES

    def tables(self, theta: int) -> ChainTables:
        """The max-influence tables of chain ``theta`` (0-based index into ``chains``)."""
        return self._tables[theta]

    def _canonical(self) -> dict[str, object]:
        def hexed(a: NDArray[np.float64]) -> list[object]:
            return [hexed(r) for r in a] if a.ndim > 1 else [float(x).hex() for x in a]

        inits = [hexed(t.q) if t.q is not None else None for t in self._tables]
        return {"mode": self.mode, "matrices": [hexed(c.matrix) for c in self.chains], "initial": inits}

    @property
    def identifier(self) -> str:
        """Stable 16-hex-digit hash of (mode, exact matrices, initial laws used by mode ``q``)."""
        blob = json.dumps(self._canonical(), sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def describe(self) -> dict[str, object]:
        """JSON-ready description: identifier, mode and every chain (matrix, initial law)."""
        return {
            "identifier": self.identifier,
            "mode": self.mode,
            "k": self.k,
            "chains": [c.describe() for c in self.chains],
            "initial": None if self.initial is None else self.initial.tolist(),
        }

    def __repr__(self) -> str:
        return f"QuiltModel(mode={self.mode!r}, chains={len(self.chains)}, k={self.k}, id={self.identifier})"
