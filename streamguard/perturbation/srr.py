"""SRR, subset randomised response (paper 003 Algorithm 2), in its effective form (notes/003 §2.5, §3.5).

Partition 𝒳_H with Algorithm 1 (subset merging, :func:`.watchdog.subset_partition`: corrected loop, risk
Λ + 1/Ψ, and the E4 repair that makes the last subset private by absorbing low-risk symbols), release
𝒳_L unchanged, and replace the merging of each subset 𝒳_i by the MI-optimal ALIP randomisation of 𝒳_i
alone: the vertex + LP problem of AORR restricted to 𝒳_i (eqs. 19–28, :func:`.aorr.optimal_randomisation`).

Why this is Algorithm 2 (notes/003 §2.5 feasibility fact, E5): the per-subset LP (26) is feasible iff the
merged subset meets (14), so the printed test "Π_i = ∅" is replaced by "(14) fails"; every subset from the
repaired Algorithm 1 meets (14), so no union step or line-17 fallback (a non-private output) is ever needed.
Utility: complete merging ≤ subset merging ≤ SRR ≤ AORR (the merged point of 𝒳_i lies in Π_i, and SRR is
feasible for AORR). Cost: O(max_i n_i) with n_i ≈ Σ_k C(|𝒳_i|,k)·C(|𝒮|,k−1)·2^{k−1} candidate systems,
cheap while Algorithm 1 produces small subsets.
"""

from __future__ import annotations

import numpy as np

from .aorr import forward_block, optimal_randomisation, ordered, output_symbols
from .lift import split_budget, tightened
from .model import Joint, PerturbationChannel, Symbol
from .verify import require_designed
from .watchdog import criterion, subset_partition


def srr_channel(joint: Joint, epsilon: float, *, lam: float = 0.5) -> PerturbationChannel:
    """SRR at (ε_l, ε_u) = (λε, (1−λ)ε) (kind ``"srr"``, rows by x). Outputs: the low-risk symbols in order,
    then each subset's outputs named as in AORR (:func:`.aorr.output_symbols`). The ALIP claim is verified
    exactly before return."""
    eps_l, eps_u = split_budget(epsilon, lam)
    crit = criterion("alip", epsilon, lam=lam)
    partition = subset_partition(joint, crit)
    outputs: list[Symbol] = list(partition.low)
    blocks = []
    for group in partition.groups:
        rand = ordered(optimal_randomisation(joint, group, tightened(eps_l), tightened(eps_u)))
        blocks.append((group, forward_block(joint, rand, "srr")))
        outputs += output_symbols(rand)
    matrix = np.zeros((joint.n_x, len(outputs)))
    matrix[list(partition.low), range(len(partition.low))] = 1.0
    col = len(partition.low)
    for group, block in blocks:
        matrix[np.ix_(list(group), range(col, col + block.shape[1]))] = block
        col += block.shape[1]
    channel = PerturbationChannel("srr", matrix, "x", joint.n_s, joint.n_x, tuple(outputs), crit.claims,
                                  {"epsilon": float(epsilon), "lam": float(lam),
                                   "subsets": [list(g) for g in partition.groups],
                                   "absorbed": list(partition.absorbed)})
    return require_designed(channel, joint)
