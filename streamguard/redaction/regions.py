"""The three regions of 3R redaction (paper 000 §IV, notes/000 §2, §4.1, §4.6).

For one side of a private record p, with region threshold ε' (ε' = the side's budget unless the
threshold option of notes/000 §7.8 is used), each record at distance d gets:

    L  if ε' <  lo_d                 always redact
    M  if lo_d ≤ ε' < hi_d           redact the "risky" value always, the "common" value with prob. q
    S  if hi_d ≤ ε'                  always release

where lo_d ≤ hi_d are the pointwise influences of the two values at d, and the *common* value is
the one with the smaller influence. For α ≤ β that is 0 (paper's convention); for α > β it is 1,
which is exactly the relabelling of notes/000 §4.6 (redacting "1" in M when α > β leaks).

Once a record is always released (S), the side's observations beyond it are independent of X_p
given that released value (Markov property), so every later record on the side is S as well.
For stationary binary chains the influences decrease in d and this changes nothing; it keeps the
rule correct for non-stationary left sides.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

S, M, L = 0, 1, 2
NAMES = ("S", "M", "L")


def classify(influences: NDArray[np.float64], threshold: float) -> tuple[NDArray[np.int8], NDArray[np.int8]]:
    """Regions and common values for a side.

    ``influences`` is (D, 2): row d−1 holds i(X_p ⇝ X_{p±d} = 0) and i(· = 1). A threshold of 0
    makes the whole side L (the ε_ℓ = 0 limit of notes/000 §4.4).
    Returns ``(regions, common)``, both int8 arrays of length D.
    """
    lo = influences.min(axis=1)
    hi = influences.max(axis=1)
    common = np.argmin(influences, axis=1).astype(np.int8)
    regions = np.full(influences.shape[0], L, dtype=np.int8)
    if threshold <= 0.0:
        return regions, common
    regions[lo <= threshold] = M
    regions[hi <= threshold] = S
    first_s = np.flatnonzero(regions == S)
    if first_s.size:
        regions[first_s[0] :] = S
    return regions, common


def side_redaction(regions: NDArray[np.int8], common: NDArray[np.int8], q: NDArray[np.float64]) -> NDArray[np.float64]:
    """(D, 2) redaction probabilities: L → (1, 1), S → (0, 0), M → q[d] for the common value, 1 else."""
    red = np.zeros((regions.shape[0], 2))
    red[regions == L] = 1.0
    m = np.flatnonzero(regions == M)
    red[m, :] = 1.0
    red[m, common[m]] = q[m]
    return red
