"""Linear reduction for LDP and log-lift (paper 004, Ding–Liu–Farokhi; notes/004).

Release Y (alphabet 𝒳) instead of X, with the *target* conditional (eq. 3)

    P_{Y|S}(x|s) = (1−α)·P_{X|S}(x|s) + α·P_X(x),        α ∈ [0, 1],

which keeps P_Y = P_X and shrinks every deviation |P_{Y|S}(x|s) − P_Y(x)| by the factor 1−α.
Both leakages about S (notes/004 §1) depend only on that deviation:

    L^LDP(S→Y) = max_{x,s,s'} log P_{Y|S}(x|s)/P_{Y|S}(x|s')          (claim notion "ldp_s")
    L^LL(S→Y)  = max_{x,s} |log P_{Y|S}(x|s)/P_Y(x)|                   (claim notion "log_lift")

This module holds the target, the **exact** α(ε) (notes/004 §3.6 — the paper's Taylor rule
α ≈ 1 − ε/L(S→X) from eq. (6) is *not* an upper bound and under-protects, so it is not offered),
Lemma 1's Markov sanitization, the three linear-reduction designers ("linear", "linear-optimal",
"linear-nonmarkov") and the direct ε-constrained LP ("direct-eps", notes/004 §7 gen. 4). The
optimal kernels live in :mod:`~streamguard.perturbation.linear_reduction_lp`.

Every designer re-evaluates the leakage on the *realised* channel (P_{Y|S} = P_{X|S}·K, or
Σ_x P(x|s)·K[(s,x)]) and never returns a channel whose claim fails: it designs for ε − margin
and, if the realised kernel still misses ε by float error, tightens the margin and re-solves
(notes/004 §7 "Numeric pitfalls"). The float check keeps slacks that bound the rounding error of
those non-negative sums and the sampler's 2⁻⁶³ quantisation; a candidate is accepted only if the
exact verifier (:func:`.verify.verify`) then confirms every claim, on the stored channel and on the
one ``perturbation.sampler`` realises — the float bound does not cover subnormal probabilities.
Budgets are finite, ≥ 0 and at most :data:`.model.MAX_LEVEL`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from .linear_reduction_lp import (Cost, cost_label, default_method, direct_eps_kernel, markov_lp_kernel,
                                  transport_kernel)
from .model import MAX_LEVEL, Claim, DesignError, InputKind, Joint, PerturbationChannel, require_level
from .verify import require_designed, verify

Measure = Literal["ldp", "log_lift"]

#: The claim notion each measure is stated in (model.Claim).
NOTION: dict[str, str] = {"ldp": "ldp_s", "log_lift": "log_lift"}

#: Design margins tried in turn, relative to max(1, ε): the channel is designed for ε − margin.
_MARGINS = (1e-10, 1e-9, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4)


# ------------------------------------------------------------------------------------------
# Target and exact leakages
# ------------------------------------------------------------------------------------------


def _check_alpha(alpha: float) -> float:
    a = float(alpha)
    if not 0.0 <= a <= 1.0:  # also rejects NaN
        raise DesignError(f"linear reduction: alpha must lie in [0, 1], got {alpha!r} (notes/004 §3.2)")
    return a


def _check_epsilon(epsilon: float) -> float:
    try:
        e = float(epsilon)
    except OverflowError:
        e = math.inf
    if not (math.isfinite(e) and e >= 0.0):
        raise DesignError(f"linear reduction: epsilon must be a finite number ≥ 0, got {epsilon!r}")
    return require_level(e)


#: Beyond this ε, e^ε − 1 is near the float limit (it overflows at 709.78): the α(ε) formulas divide
#: through by it instead (1/(e^ε − 1) = e^{−ε} to double precision there).
_EXP_SAFE = 700.0


def target(joint: Joint, alpha: float) -> NDArray[np.float64]:
    """T[s, x] = (1−α)·P_{X|S}(x|s) + α·P_X(x) (eq. 3): the |S|×|X| conditional P_{Y|S} every
    linear-reduction kernel must realise. Rows sum to 1; T's S-average is P_X."""
    a = _check_alpha(alpha)
    return (1.0 - a) * joint.x_given_s + a * joint.p_x[None, :]


def ldp_leakage(p_y_given_s: NDArray[np.float64]) -> float:
    """L^LDP(S→Y) = max_x log(max_s P_{Y|S}(x|s) / min_s P_{Y|S}(x|s)) over outputs x some s can
    produce (eq. 1); ∞ if some s never produces such an x."""
    hi, lo = p_y_given_s.max(axis=0), p_y_given_s.min(axis=0)
    live = hi > 0
    if not np.any(live):
        return 0.0
    if np.any(lo[live] == 0):
        return math.inf
    return float(np.max(np.log(hi[live] / lo[live])))


def log_lift_leakage(p_s: NDArray[np.float64], p_y_given_s: NDArray[np.float64]) -> float:
    """L^LL(S→Y) = max_{x,s} |log P_{Y|S}(x|s)/P_Y(x)| over x with P_Y(x) > 0 (eq. 2); ∞ if some s
    never produces such an x."""
    p_y = p_s @ p_y_given_s
    live = p_y > 0
    if not np.any(live):
        return 0.0
    ratio = p_y_given_s[:, live] / p_y[live]
    if np.any(ratio == 0):
        return math.inf
    return float(np.max(np.abs(np.log(ratio))))


def leakage(joint: Joint, p_y_given_s: NDArray[np.float64], measure: Measure) -> float:
    """The leakage of a conditional P_{Y|S} in ``measure`` ("ldp" or "log_lift")."""
    if measure == "ldp":
        return ldp_leakage(p_y_given_s)
    if measure == "log_lift":
        return log_lift_leakage(joint.p_s, p_y_given_s)
    raise DesignError(f"linear reduction: measure must be 'ldp' or 'log_lift', got {measure!r}")


# ------------------------------------------------------------------------------------------
# Exact α(ε) (notes/004 §3.6)
# ------------------------------------------------------------------------------------------


def alpha_for_ldp(joint: Joint, epsilon: float) -> float:
    """The smallest α with L^LDP(S→Y) ≤ ε for the target (3) (notes/004 §3.6, exact):

        α = max(0, max_x t_x/(1+t_x)),   t_x = (M_x − e^ε·m_x) / (P_X(x)·(e^ε − 1)),

    with M_x, m_x the max and min over s of P_{X|S}(x|s). It solves, per x,
    ((1−α)M_x + αP_X(x)) / ((1−α)m_x + αP_X(x)) = e^ε. ε = 0 needs α = 1 unless X ⊥ S."""
    eps = _check_epsilon(epsilon)
    pxs, px = joint.x_given_s, joint.p_x
    hi, lo = pxs.max(axis=0), pxs.min(axis=0)
    if eps == 0.0:
        return 1.0 if np.any(hi > lo) else 0.0
    if eps <= _EXP_SAFE:
        em1 = math.expm1(eps)
        num, weight = (hi - lo) - em1 * lo, px * em1  # t_x·P_X(x)·(e^ε − 1); t/(1+t) without overflow
    else:
        num, weight = (hi - lo) * math.exp(-eps) - lo, px  # the same, divided by e^ε − 1
    need = num > 0
    return float(np.max(num[need] / (num[need] + weight[need]))) if np.any(need) else 0.0


def alpha_for_loglift(joint: Joint, epsilon: float) -> float:
    """The smallest α with L^LL(S→Y) ≤ ε for the target (3) (notes/004 §3.6, exact):

        α = max(0, 1 − min_{x,s} c(x,s)),  c = (e^ε − 1)/(r − 1) if r > 1, (1 − e^{−ε})/(1 − r) if r < 1,

    with r(x,s) = P_{X|S}(x|s)/P_X(x): |log((1−α)r + α)| ≤ ε ⇔ 1−α ≤ c. (r − 1 is computed as
    (P_{X|S} − P_X)/P_X to avoid cancellation.)"""
    eps = _check_epsilon(epsilon)
    dev = (joint.x_given_s - joint.p_x[None, :]) / joint.p_x[None, :]  # r − 1
    up, down = dev[dev > 0], dev[dev < 0]
    if eps <= _EXP_SAFE:
        c_up = math.expm1(eps) / up
    else:
        with np.errstate(divide="ignore", over="ignore"):  # c beyond the float range (∞): that side binds nowhere
            c_up = 1.0 / (up * math.exp(-eps))
    c = np.concatenate([c_up, -math.expm1(-eps) / -down])
    return float(max(0.0, 1.0 - np.min(c))) if c.size else 0.0


def alpha_for_both(joint: Joint, eps_ldp: float, eps_loglift: float) -> float:
    """The smallest α meeting L^LDP ≤ ``eps_ldp`` and L^LL ≤ ``eps_loglift`` together: both leakages
    are non-increasing in α (notes/004 §2), so it is the larger of the two."""
    return max(alpha_for_ldp(joint, eps_ldp), alpha_for_loglift(joint, eps_loglift))


def alpha_for(joint: Joint, epsilon: float, measure: Measure) -> float:
    """:func:`alpha_for_ldp` or :func:`alpha_for_loglift` by ``measure``."""
    if measure == "ldp":
        return alpha_for_ldp(joint, epsilon)
    if measure == "log_lift":
        return alpha_for_loglift(joint, epsilon)
    raise DesignError(f"linear reduction: measure must be 'ldp' or 'log_lift', got {measure!r}")


# ------------------------------------------------------------------------------------------
# Lemma 1 and the designers
# ------------------------------------------------------------------------------------------


def lemma1_kernel(joint: Joint, alpha: float) -> NDArray[np.float64]:
    """Lemma 1 (eq. 7): K = (1−α)·I + α·1·P_Xᵀ — keep x with probability 1−α, otherwise redraw from
    P_X. P_{X|S}·K equals the target (3) for *every* P_{X|S} (eq. 8); it needs only P_X online.
    Rows are inputs x', columns outputs x."""
    a = _check_alpha(alpha)
    px = joint.p_x
    return (1.0 - a) * np.eye(px.size) + a * np.tile(px, (px.size, 1))


def _slack(joint: Joint) -> float:
    """Bound on the float error of a realised log-ratio leakage: P_{Y|S} and P_Y are sums of
    non-negative products (relative error ≤ (terms + 2)·u each), so a log of a ratio of two is off
    by at most about twice that; 1e−12 on top covers the claim checker's own conversions. A joint
    may sum to 1 only within model.SUM_TOL; whether a checker normalises P_S or not moves P_Y by
    that factor, so its log is added twice."""
    terms = joint.n_s * joint.n_x + 4
    total = abs(math.log(float(joint.p.sum())))
    return 1e-12 + 2.0 * total + 4.0 * terms * float(np.finfo(np.float64).eps)


def _quantisation_slack(values: NDArray[np.float64], n_y: int) -> float:
    """Bound on how far the sampler's quantisation can move a log ratio of two of ``values``
    (kernel entries, or P_{Y|S} / P_Y, which move at most as much since Σ_x P(x|s) = 1). The
    sampler realises every entry within n_y·2⁻⁶³ and keeps zeros zero and positives positive
    (perturbation/sampler.py: largest remainder; an entry below one count is raised to one, taken
    from the row's largest), so |Δ log a| ≤ e/(a − e) with e = n_y·2⁻⁶³; ∞ if some a ≤ e."""
    e = n_y * 2.0 ** -63
    positive = values[values > 0]
    lo = float(positive.min()) if positive.size else 1.0
    return math.inf if lo <= e else 2.0 * e / (lo - e)


Build = Callable[[float], tuple[NDArray[np.float64], dict[str, Any]]]


def _by_alpha(joint: Joint, measure: Measure, method: str, kernel_of: Callable[[float], NDArray[np.float64]]) -> Build:
    """A build step of the linear reduction: the exact α for the design budget, then the kernel."""

    def build(eps_design: float) -> tuple[NDArray[np.float64], dict[str, Any]]:
        alpha = alpha_for(joint, eps_design, measure)
        return kernel_of(alpha), {"alpha": alpha, "method": method}

    return build


def _design(joint: Joint, epsilon: float, measure: Measure, *, kind: str, inputs: InputKind,
            builds: Sequence[Build], params: dict[str, Any],
            extra_claims: Callable[[dict[str, Any], NDArray[np.float64]], tuple[Claim, ...]] | None = None,
            ) -> PerturbationChannel:
    """Try each build in turn (the optimum first, then a closed form it improves on — an LP can fail
    or lose accuracy on badly scaled joints): build for ε − margin, rebuild with larger margins until
    the realised channel meets ε with the float and quantisation slacks to spare and its claims pass
    the exact verifier (the float bound assumes normal floats; a subnormal joint breaks it). Last
    resort, every row P_X (method "independent", α = 1): Y ⊥ (S, X), leakage exactly 0 — the only
    channel exact at ε = 0, or below float resolution, whatever the rounding (identical rows quantise
    identically). The method used is recorded in the channel's params."""
    eps = _check_epsilon(epsilon)
    notion = NOTION.get(measure)
    if notion is None:
        raise DesignError(f"linear reduction: measure must be 'ldp' or 'log_lift', got {measure!r}")
    slack = _slack(joint)
    rows = joint.n_x if inputs == "x" else joint.n_s * joint.n_x

    def channel(kernel: NDArray[np.float64], made: dict[str, Any]) -> PerturbationChannel:
        claims = (Claim(notion, {"epsilon": eps}),) + (extra_claims(made, kernel) if extra_claims else ())
        return PerturbationChannel(kind=kind, matrix=kernel, inputs=inputs, n_s=joint.n_s, n_x=joint.n_x,
                                   outputs=tuple(range(joint.n_x)), claims=claims,
                                   params={"epsilon": eps, "measure": measure, **made, **params})

    for build in builds:
        for margin in _MARGINS:
            eps_design = max(eps - margin * max(1.0, eps), 0.0)
            try:
                kernel, made = build(eps_design)
            except DesignError:
                break
            kernel = np.clip(kernel, 0.0, None)
            kernel /= kernel.sum(axis=1, keepdims=True)
            candidate = channel(kernel, made)
            p_y_given_s = candidate.effective(joint)
            if leakage(joint, p_y_given_s, measure) <= eps - slack - _quantisation_slack(p_y_given_s, joint.n_x) \
                    and verify(candidate, joint).ok:
                return candidate
            if eps_design == 0.0:
                break
    return require_designed(channel(np.tile(joint.p_x, (rows, 1)), {"alpha": 1.0, "method": "independent"}), joint)


def linear_markov_channel(joint: Joint, epsilon: float, *, measure: Measure = "ldp") -> PerturbationChannel:
    """Kind ``"linear"``: Lemma 1's Markov sanitization with the exact α(ε) of ``measure``.

    Claims the leakage about S (``"ldp_s"`` or ``"log_lift"`` ≤ ε) and, when α > 0, the model-free
    input-LDP bonus ``"ldp_x"`` ≤ log(1 + (1−α)/(α·min_x P_X(x))) (notes/004 §7), rounded up to
    cover float and sampler quantisation error (omitted if an entry is below the sampler's grain)."""

    def bonus(made: dict[str, Any], kernel: NDArray[np.float64]) -> tuple[Claim, ...]:
        alpha = made["alpha"]
        quantised = _quantisation_slack(kernel, joint.n_x)
        if alpha == 0.0 or not math.isfinite(quantised):
            return ()  # the identity channel, or entries too small for the sampler: no input-LDP promise
        formula = math.log1p((1.0 - alpha) / (alpha * float(joint.p_x.min())))
        realised = ldp_leakage(kernel)  # input LDP: max_x log(max_x' K[x',x] / min_x' K[x',x])
        level = float(max(formula, realised) + _slack(joint) + quantised)
        return (Claim("ldp_x", {"epsilon": level}),) if level <= MAX_LEVEL else ()  # above: no guarantee

    return _design(joint, epsilon, measure, kind="linear", inputs="x",
                   builds=[_by_alpha(joint, measure, "lemma1", lambda a: lemma1_kernel(joint, a))],
                   params={}, extra_claims=bonus)


def linear_optimal_markov_channel(joint: Joint, epsilon: float, *, measure: Measure = "ldp",
                                  cost: Cost = "tv") -> PerturbationChannel:
    """Kind ``"linear-optimal"``: the cheapest Markov kernel K with P_{X|S}·K = target (notes/004
    §3.5, an LP solved by HiGHS). Lemma 1 is feasible, so it is never worse than ``"linear"``
    at the same α (and Lemma 1 is what it returns, method "lemma1", if the LP fails, cannot realise
    the target to the relative accuracy ``linear_reduction_lp.TARGET_RTOL`` — on badly scaled joints
    — or its solution misses the budget by rounding); with |S| < |X| it is usually strictly better.
    ``cost``: "tv" (D_TV, i.e. the 0-1 distortion), "abs" (|i−j|), "squared" ((i−j)²) or an
    |X|×|X| matrix d(x', x)."""
    return _design(joint, epsilon, measure, kind="linear-optimal", inputs="x",
                   builds=[_by_alpha(joint, measure, "lp", lambda a: markov_lp_kernel(joint, target(joint, a), cost)),
                           _by_alpha(joint, measure, "lemma1", lambda a: lemma1_kernel(joint, a))],
                   params=cost_label(cost, joint.n_x))


def linear_nonmarkov_channel(joint: Joint, epsilon: float, *, measure: Measure = "ldp",
                             cost: Cost = "tv") -> PerturbationChannel:
    """Kind ``"linear-nonmarkov"`` (inputs ``"sx"``): the optimal S-dependent kernel of problem (10),
    per s an optimal transport from P_{X|S=s} to the target row (notes/004 §3.3–3.4): Prop. 1's
    closed form for "tv", the monotone (quantile) coupling for "abs"/"squared", an LP otherwise
    (falling back to Prop. 1's closed form if the LP fails). Needs s at release time (notes/004
    §7); it has zeros, so it carries no input-LDP claim."""
    method = default_method(cost)
    builds = [_by_alpha(joint, measure, method, lambda a: transport_kernel(joint, target(joint, a), cost))]
    if method != "closed":
        builds.append(_by_alpha(joint, measure, "closed",
                                lambda a: transport_kernel(joint, target(joint, a), cost, method="closed")))
    return _design(joint, epsilon, measure, kind="linear-nonmarkov", inputs="sx", builds=builds,
                   params=cost_label(cost, joint.n_x))


def direct_eps_lp(joint: Joint, epsilon: float, *, measure: Measure = "ldp", cost: Cost = "tv",
                  markov: bool = False, preserve_marginal: bool = True) -> PerturbationChannel:
    """Kind ``"direct-eps"`` (notes/004 §7, generalisation 4): drop the linear-reduction restriction
    and minimise the expected cost over *all* kernels whose P_{Y|S} meets ε directly —
    P_{Y|S}(x|s) ≤ e^ε·P_{Y|S}(x|s') (LDP) or e^{−ε}·P_Y(x) ≤ P_{Y|S}(x|s) ≤ e^ε·P_Y(x) (log-lift),
    both linear in the kernel — optionally keeping P_Y = P_X. Non-Markov (inputs "sx") by default,
    ``markov=True`` for a P_{Y|X} kernel. Never worse than the linear reduction of the same kind
    (its kernels are feasible here, and it is the fallback if the LP fails); with
    ``preserve_marginal=False`` it may be strictly better."""
    def direct(eps_design: float) -> tuple[NDArray[np.float64], dict[str, Any]]:
        kernel = direct_eps_kernel(joint, eps_design, measure, cost, markov=markov,
                                   preserve_marginal=preserve_marginal)
        return kernel, {"method": "lp"}

    linear = _by_alpha(joint, measure, "lemma1", lambda a: lemma1_kernel(joint, a)) if markov else \
        _by_alpha(joint, measure, "closed", lambda a: transport_kernel(joint, target(joint, a), cost, method="closed"))
    return _design(joint, epsilon, measure, kind="direct-eps", inputs="x" if markov else "sx",
                   builds=[direct, linear],
                   params={**cost_label(cost, joint.n_x), "preserve_marginal": preserve_marginal})


__all__ = [
    "Measure", "NOTION", "alpha_for", "alpha_for_both", "alpha_for_ldp", "alpha_for_loglift", "direct_eps_lp",
    "ldp_leakage", "leakage", "lemma1_kernel", "linear_markov_channel", "linear_nonmarkov_channel",
    "linear_optimal_markov_channel", "log_lift_leakage", "target",
]
