"""Per-record perturbation mechanisms (DESIGN.md §2): papers 001 (randomized response optimal for
identifiability / DP / MI), 003 (lift-based: watchdog, subset merging, AORR, SRR) and 004 (linear
reduction). Each designer returns a :class:`~streamguard.perturbation.model.PerturbationChannel`
built from a :class:`~streamguard.perturbation.model.Joint`."""

from .model import Claim, DesignError, Joint, ModelInputError, PerturbationChannel

__all__ = ["Claim", "DesignError", "Joint", "ModelInputError", "PerturbationChannel"]
