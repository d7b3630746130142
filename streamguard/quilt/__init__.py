"""Markov Quilt Mechanism core (notes/002): max-influence tables, noise scales, quilt accountant.

* :class:`QuiltModel` — the adversary set Θ of Markov chains and a max-influence mode;
* :func:`max_influence` — e_Θ({X_{i−a}, X_{i+b}} | X_i), exact (log space);
* :func:`sigma_max`, :func:`sigma_inf`, :func:`sigma_supq`, :func:`sigma_max_naive` — noise scales
  as :class:`Scale` with the :class:`Witness` quilt; :func:`epsilon_of_load` — the inverse map;
* :class:`QuiltAccountant` — the per-position quilt accountant (notes/002 §4.7).

Positions: witnesses use the paper's 1-based node index; the accountant uses 0-based stream positions.
"""

from .accountant import QuiltAccountant
from .influence import MODES, TRANSLATION_INVARIANT_MODES, max_influence
from .model import QuiltModel
from .scale import (
    InfiniteScaleError,
    Scale,
    Witness,
    epsilon_of_load,
    sigma_inf,
    sigma_max,
    sigma_max_naive,
    sigma_supq,
)

__all__ = [
    "MODES",
    "TRANSLATION_INVARIANT_MODES",
    "InfiniteScaleError",
    "QuiltAccountant",
    "QuiltModel",
    "Scale",
    "Witness",
    "epsilon_of_load",
    "max_influence",
    "sigma_inf",
    "sigma_max",
    "sigma_max_naive",
    "sigma_supq",
]
