"""Fig. 2-style picture of a redaction plan (paper 000): influences by distance, budgets, regions.

Top: the pointwise influences i(X_p ⇝ X_t = 0) and i(X_p ⇝ X_t = 1) against t for the first private
position, with each side's budget; background colours mark the regions (L red, M amber, S green).
Bottom: the plan's redaction probabilities Pr(Y_t = ⊥ | X_t = x) (Fig. 4 style). Needs matplotlib
(``pip install "streamguard[plot]"``).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .influence import pointwise_left, pointwise_right
from .redaction.plan import RedactionPlan

_COLOURS = {"L": "#f4b6b6", "M": "#f7dc9c", "S": "#c8e6c9"}


def plot_plan(plan: RedactionPlan, path: Path) -> None:
    """Write the picture of ``plan`` to ``path`` (PNG)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError('plotting needs matplotlib: pip install "streamguard[plot]"') from None
    p = plan.private[0]
    nz = np.flatnonzero(plan.red.any(axis=1))
    lo = max(0, int(nz.min()) - 2)
    hi = min(plan.n - 1, int(nz.max()) + 2)
    t = np.arange(lo, hi + 1)
    infl = np.full((t.size, 2), np.nan)
    right = pointwise_right(plan.chain, max(0, hi - p))
    left = pointwise_left(plan.chain, p, max(0, p - lo))
    for i, tt in enumerate(t):
        d = tt - p
        if d > 0:
            infl[i] = right[d - 1]
        elif d < 0:
            infl[i] = left[-d - 1]

    fig, (ax, bx) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, height_ratios=[3, 2])
    names = plan.region_names()
    for a in (ax, bx):
        for i, tt in enumerate(t):
            a.axvspan(tt + 0.5, tt + 1.5, color=_COLOURS[names[tt]], alpha=0.6, lw=0)
    ax.plot(t + 1, infl[:, 0], "o-", label="i(X_p ⇝ X_t = 0)")
    ax.plot(t + 1, infl[:, 1], "s-", label="i(X_p ⇝ X_t = 1)")
    el, er = plan.splits.get(p, (math.nan, math.nan))
    if not math.isnan(el):
        ax.hlines(el, lo + 0.5, p + 1, colors="k", linestyles="--", label="ε_ℓ / ε_r")
        ax.hlines(er, p + 1, hi + 1.5, colors="k", linestyles="--")
    finite = infl[np.isfinite(infl)]
    if finite.size:
        ax.set_ylim(0, max(float(finite.max()), el if not math.isnan(el) else 0, er if not math.isnan(er) else 0) * 1.1)
    ax.set_ylabel(f"influence on private {p + 1} (nats)")
    ax.set_title(f"{plan.design}: n={plan.n}, ε={plan.epsilon:g}, private {', '.join(str(q + 1) for q in plan.private)}")
    ax.legend(loc="upper right", fontsize=8)
    bx.step(t + 1, plan.red[t, 0], where="mid", label="Pr(⊥ | X_t = 0)")
    bx.step(t + 1, plan.red[t, 1], where="mid", linestyle="--", label="Pr(⊥ | X_t = 1)")
    bx.set_ylim(-0.05, 1.05)
    bx.set_xlabel("position t (regions: L red, M amber, S green)")
    bx.set_ylabel("redaction probability")
    bx.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
