"""Simulated sensor devices: Markov-chain sources of discrete readings (deterministic under a seed)."""

from .sources import MarkovSource

__all__ = ["MarkovSource"]
