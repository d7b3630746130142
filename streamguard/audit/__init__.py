"""Exact leakage of local channels under a Markov model (O(n) for binary chains, brute force)."""

from .brute import brute_force_leakage
from .exact import Leakage, SideRange, exact_leakage, side_leakage

__all__ = ["Leakage", "SideRange", "brute_force_leakage", "exact_leakage", "side_leakage"]
