"""Optimal kernels that map P_{X|S} onto a target conditional T (paper 004 §III; notes/004 §3.3–3.5).

Given any target T (|S|×|X|, rows distributions — for linear reduction T is eq. (3)):

* **Markov** (:func:`markov_lp_kernel`): the cheapest K (|X|×|X|, rows x' inputs) with
  P_{X|S}·K = T, K·1 = 1, K ≥ 0 — an LP over |X|² variables coupled across s (notes/004 §3.5,
  "optimal Markov LP"). Lemma 1 is one feasible point, so this is never worse.
* **Non-Markov** (:func:`transport_kernel`): problem (10) separates in s, and with the flow
  π_s(x', x) = P_{X|S}(x'|s)·P_{Y|S,X}(x|s,x') it is optimal transport from P_{X|S=s} to T[s]
  (notes/004 §3.3). Solved by the maximal coupling for D_TV (Prop. 1, eq. 11a–e: keep
  min(p, T[s]) on the diagonal, move the surplus (p − T[s])⁺ onto the deficits (T[s] − p)⁺ — filled
  north-west-corner, which reproduces the paper's Example 1 numbers), by the monotone (quantile)
  coupling for ordinal convex costs |i−j| and (i−j)², and by an LP for any other cost. The LP is
  also correct for non-metric costs, where the paper's Prop. 2 reduction is not (notes/004 §2
  errata, reference case D).

Costs d(x', x) (input x', output x): ``"tv"`` — the 0-1 cost, whose expectation is
D_TV = 1 − Σ_x P_X(x)·P_{Y|X}(x|x) (notes/004 §2 errata: the factor-1 convention) —, ``"abs"``,
``"squared"`` on the index order, or an explicit non-negative matrix with a zero diagonal.
Kernel rows whose input has P_{X|S}(x'|s) = 0 are unconstrained; they get the privacy-safe row
T[s] (notes/004 §7: identity there would not be).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import sparse
from scipy.optimize import linprog

from .model import DesignError, Joint

Cost = Literal["tv", "abs", "squared"] | ArrayLike
Method = Literal["auto", "closed", "quantile", "lp"]

#: Relative accuracy to which the LP kernels that realise a target T (:func:`markov_lp_kernel`, the
#: transport LP) meet their equalities: each within TARGET_RTOL·b. With the kernel rows then divided
#: by their sums (also within TARGET_RTOL of theirs), every entry of the realised P_{Y|S} is within a
#: factor 1 ± ~2·TARGET_RTOL of T's, so every leakage of the realised channel (the log of a ratio of
#: two such entries, or of one and its P_S-average) is within ~4·TARGET_RTOL = 4e−8 of the target's:
#: at the exact α(ε) the channel stays tight (notes/004 §3.6). (Not tighter: HiGHS's vertex may have
#: entries −3e−11 — within its 1e−10 bound tolerance — whose clipping alone moves an equality by
#: ~1.3e−9 relative on a well-conditioned joint.)
TARGET_RTOL = 1e-8

#: The largest factor an equality row is multiplied by to make HiGHS's tolerance relative: HiGHS
#: rejects a model with a coefficient ≥ 1e15 ("large_matrix_value"), and every coefficient of the
#: relative LPs here (probabilities and ones) is ≤ 1.
_MAX_WEIGHT = 1e14

#: HiGHS dual-simplex settings tried in turn: tight tolerances give vertex solutions with
#: feasibility error ~1e−15, but HiGHS may call a badly scaled model (probabilities ~1e−10 and
#: below) infeasible under them, so looser settings follow. The designers re-check the realised
#: leakage of whatever is returned, so accuracy here is utility, not privacy.
_HIGHS: tuple[dict[str, Any], ...] = (
    {"presolve": False, "primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10},
    {"presolve": False},
    {},
)


def cost_matrix(cost: Cost, n: int) -> NDArray[np.float64]:
    """d[x', x] for a named cost or a validated explicit matrix (finite, ≥ 0, zero diagonal)."""
    if isinstance(cost, str):
        i = np.arange(n, dtype=np.float64)
        gap = i[:, None] - i[None, :]
        named = {"tv": lambda: 1.0 - np.eye(n), "abs": lambda: np.abs(gap), "squared": lambda: gap * gap}
        if cost not in named:
            raise DesignError(f"linear reduction: cost must be 'tv', 'abs', 'squared' or a matrix, got {cost!r}")
        return named[cost]()
    try:
        d = np.array(cost, dtype=np.float64)
    except (TypeError, ValueError):
        raise DesignError("linear reduction: cost matrix is not numeric") from None
    if d.shape != (n, n):
        raise DesignError(f"linear reduction: cost matrix must be {n}×{n}, got shape {d.shape}")
    if not np.all(np.isfinite(d)) or np.any(d < 0) or np.any(np.diag(d) != 0):
        raise DesignError("linear reduction: cost matrix must be finite, non-negative, with a zero diagonal")
    return d


def cost_label(cost: Cost, n: int) -> dict[str, Any]:
    """How a channel's ``params`` record its cost (validating it)."""
    d = cost_matrix(cost, n)
    return {"cost": cost} if isinstance(cost, str) else {"cost": "matrix", "cost_matrix": d.tolist()}


def expected_cost(joint: Joint, kernel: NDArray[np.float64], cost: Cost = "tv") -> float:
    """E[d(X, Y)] of a Markov kernel (|X|×|X|: Σ P_X(x')·K[x',x]·d(x',x)) or of an (s, x)-input
    kernel (|S|·|X|×|X|: Σ P_SX(s,x')·K[(s,x'),x]·d(x',x), notes/004 eq. 9). With "tv": D_TV."""
    n = joint.n_x
    d = cost_matrix(cost, n)
    k = np.asarray(kernel, dtype=np.float64)
    if k.shape == (n, n):
        return float(np.sum(joint.p_x[:, None] * k * d))
    if k.shape == (joint.n_s * n, n):
        return float(np.einsum("sx,sxy,xy->", joint.p, k.reshape(joint.n_s, n, n), d))
    raise DesignError(f"linear reduction: kernel shape {k.shape} fits neither {n}×{n} nor {joint.n_s * n}×{n}")


def _check_target(joint: Joint, t: ArrayLike) -> NDArray[np.float64]:
    tt = np.asarray(t, dtype=np.float64)
    if tt.shape != (joint.n_s, joint.n_x) or not np.all(np.isfinite(tt)) or np.any(tt < 0) \
            or np.any(np.abs(tt.sum(axis=1) - 1.0) > 1e-9):
        raise DesignError(f"linear reduction: target must be a {joint.n_s}×{joint.n_x} row-stochastic matrix")
    return tt


def _solve(c: NDArray[np.float64], a_eq: sparse.spmatrix, b_eq: NDArray[np.float64], what: str,
           a_ub: sparse.spmatrix | None = None, *, relative: bool = False) -> NDArray[np.float64]:
    """min c·v s.t. a_eq·v = b_eq, a_ub·v ≤ 0, v ≥ 0 (HiGHS dual simplex, settings ``_HIGHS`` in
    turn); DesignError if every one fails.

    With ``relative`` the equalities must hold *relatively*: a setting's solution is accepted only if
    every one holds within :data:`TARGET_RTOL`·b (a row with b = 0 exactly). HiGHS's feasibility
    tolerance is absolute (1e−10 at best), so a right-hand side far below it — a target entry
    ~1e−10 — may be met only in absolute terms, e.g. realised as 0 (the channel then never emits that
    symbol and is no longer the reduction it was asked for). Each setting is therefore tried on the
    model as given and then with every row with b > 0 divided by b (by at most :data:`_MAX_WEIGHT`),
    which makes the tolerance relative but widens the range of the coefficients; neither alone
    resolves every badly scaled joint."""
    ub = a_ub is not None and a_ub.shape[0] > 0
    weights = [np.ones_like(b_eq)]
    if relative:
        weights.append(np.where(b_eq > 0, 1.0 / np.maximum(b_eq, 1.0 / _MAX_WEIGHT), 1.0))
    message = ""
    for options in _HIGHS:
        for weight in weights:
            res = linprog(c, A_ub=a_ub if ub else None, b_ub=np.zeros(a_ub.shape[0]) if ub else None,
                          A_eq=sparse.diags(weight) @ a_eq, b_eq=b_eq * weight, bounds=(0, None),
                          method="highs-ds", options=options)
            v = np.clip(res.x, 0.0, None) if res.status == 0 else None
            if v is not None and (not relative or np.all(np.abs(a_eq @ v - b_eq) <= TARGET_RTOL * b_eq)):
                return v
            message = res.message if v is None else f"equalities missed by more than {TARGET_RTOL:g} relative"
    raise DesignError(f"linear reduction: {what} LP failed ({message})")


def markov_lp_kernel(joint: Joint, t: ArrayLike, cost: Cost = "tv") -> NDArray[np.float64]:
    """The cheapest Markov kernel: min Σ P_X(x')·K[x',x]·d(x',x) s.t. P_{X|S}·K = T, K·1 = 1, K ≥ 0
    (notes/004 §3.5), the equalities met to relative accuracy :data:`TARGET_RTOL`. Variables K
    row-major (index x'·n + x). Raises DesignError if HiGHS finds no such solution — not because the
    LP is infeasible (Lemma 1 meets every linear-reduction target with α ∈ [0, 1]) but on badly
    scaled joints, where its tolerances cannot resolve target entries far below 1e−10."""
    n = joint.n_x
    tt = _check_target(joint, t)
    d = cost_matrix(cost, n)
    eye = sparse.identity(n, format="csr")
    a_eq = sparse.vstack([sparse.kron(sparse.csr_matrix(joint.x_given_s), eye),   # (P_{X|S}·K)[s, x]
                          sparse.kron(eye, np.ones((1, n)))], format="csr")          # Σ_x K[x', x]
    b_eq = np.concatenate([tt.ravel(), np.ones(n)])
    k = _solve((joint.p_x[:, None] * d).ravel(), a_eq, b_eq, "optimal Markov", relative=True).reshape(n, n)
    return k / k.sum(axis=1, keepdims=True)


def northwest_corner(supply: NDArray[np.float64], demand: NDArray[np.float64]) -> NDArray[np.float64]:
    """The north-west-corner flow F ≥ 0 with row sums ``supply`` and column sums ``demand`` (equal
    totals; float residue from unequal sums goes to the last column). In index order this is the
    monotone (quantile) coupling; at most len(supply) + len(demand) − 1 non-zeros."""
    a, b = supply.astype(np.float64).copy(), demand.astype(np.float64).copy()
    flow = np.zeros((a.size, b.size))
    i = j = 0
    while i < a.size and j < b.size:
        f = min(a[i], b[j])
        flow[i, j] += f
        a[i] -= f
        b[j] -= f
        if a[i] == 0.0:
            i += 1
        else:
            j += 1
    flow[i:, -1] += a[i:]
    return flow


def _maximal_coupling(p: NDArray[np.float64], q: NDArray[np.float64]) -> NDArray[np.float64]:
    """Prop. 1 (eq. 11a–e) in flow form: diagonal min(p, q), surplus (p − q)⁺ moved north-west-corner
    onto the deficits (q − p)⁺. Minimises P(Y ≠ X), i.e. it is the D_TV-optimal transport.

    In floats the two totals differ by rounding — a surplus p − q of two numbers near 1 is a multiple
    of their ulp, while a deficit of two tiny ones is exact — and a deficit left unfilled is a tiny
    target entry missed by 100%. So the gap is balanced on the largest entries, where it is below
    their precision: a missing supply is drawn from the row with the largest p (its row then sums to
    p + gap, off by a relative gap/p), an excess one goes to the column with the largest q."""
    supply, demand = np.maximum(p - q, 0.0), np.maximum(q - p, 0.0)
    gap = float(demand.sum() - supply.sum())
    if gap > 0:
        supply[np.argmax(p)] += gap
    else:
        demand[np.argmax(q)] -= gap
    return np.diag(np.minimum(p, q)) + northwest_corner(supply, demand)


def _lp_coupling(p: NDArray[np.float64], q: NDArray[np.float64], d: NDArray[np.float64]) -> NDArray[np.float64]:
    """Optimal transport p → q under cost d by LP over the flow π (row sums p, column sums q, each to
    relative accuracy :data:`TARGET_RTOL`; DesignError if HiGHS finds no such flow)."""
    n = p.size
    eye, ones = sparse.identity(n, format="csr"), np.ones((1, n))
    a_eq = sparse.vstack([sparse.kron(eye, ones), sparse.kron(ones, eye)], format="csr")
    return _solve(d.ravel(), a_eq, np.concatenate([p, q]), "transport", relative=True).reshape(n, n)


def default_method(cost: Cost) -> Method:
    """The transport method that is optimal for ``cost`` without an LP, else "lp" (notes/004 §3.3)."""
    named: dict[str, Method] = {"tv": "closed", "abs": "quantile", "squared": "quantile"}
    return named.get(cost, "lp") if isinstance(cost, str) else "lp"


def transport_kernel(joint: Joint, t: ArrayLike, cost: Cost = "tv", *, method: Method = "auto") -> NDArray[np.float64]:
    """The optimal non-Markov kernel P_{Y|S,X} (rows s·|X| + x', columns x) realising the target T:
    per s, optimal transport from P_{X|S=s} to T[s] (notes/004 §3.3), each kernel row the flow row
    divided by its mass (= P_{X|S}(x'|s)).

    ``method``: "closed" (maximal coupling, optimal for "tv"), "quantile" (north-west corner on the
    full distributions, optimal for "abs" and "squared"), "lp" (any cost), or "auto" (the closed form
    that is optimal for the cost, else LP)."""
    n = joint.n_x
    tt = _check_target(joint, t)
    d = cost_matrix(cost, n)
    if method == "auto":
        method = default_method(cost)
    couple = {"closed": _maximal_coupling, "quantile": northwest_corner,
              "lp": lambda p, q: _lp_coupling(p, q, d)}.get(method)
    if couple is None:
        raise DesignError(f"linear reduction: method must be auto, closed, quantile or lp, got {method!r}")
    out = np.empty((joint.n_s, n, n))
    for s, p in enumerate(joint.x_given_s):
        flow = couple(p, tt[s])
        mass = flow.sum(axis=1, keepdims=True)
        live = (p > 0) & (mass[:, 0] > 0)
        out[s] = np.where(live[:, None], flow / np.where(mass > 0, mass, 1.0), tt[s][None, :])
    return out.reshape(joint.n_s * n, n)


def direct_eps_kernel(joint: Joint, epsilon: float, measure: str, cost: Cost = "tv", *, markov: bool = False,
                      preserve_marginal: bool = True) -> NDArray[np.float64]:
    """The cheapest kernel whose P_{Y|S} meets ε in ``measure`` directly (notes/004 §7 gen. 4), by LP.

    Variables: the Markov kernel K (P_{Y|S} = P_{X|S}·K, rows sum to 1), or per s the flow
    π_s(x', x) = P_{X|S}(x'|s)·P_{Y|S,X}(x|s,x') (P_{Y|S}(x|s) = Σ_x' π_s(x', x), rows sum to
    P_{X|S}(x'|s)). With G the linear map to P_{Y|S} and H = P_Sᵀ·G the map to P_Y, the constraints
    are G[s] − e^ε·G[s'] ≤ 0 for s ≠ s' ("ldp") or G[s] − e^ε·H ≤ 0 and e^{−ε}·H − G[s] ≤ 0
    ("log_lift"), plus H = P_X if ``preserve_marginal``. Returns the kernel (|X|×|X| or
    |S|·|X|×|X|); an (s, x') row with P_{X|S}(x'|s) = 0 gets the realised row P_{Y|S}(·|s)."""
    n, n_s = joint.n_x, joint.n_s
    d = cost_matrix(cost, n)
    eye, ones = sparse.identity(n, format="csr"), np.ones((1, n))
    if markov:
        g = sparse.kron(sparse.csr_matrix(joint.x_given_s), eye, format="csr")
        rows, rows_b = sparse.kron(eye, ones, format="csr"), np.ones(n)
        c = (joint.p_x[:, None] * d).ravel()
    else:
        per_s = sparse.identity(n_s)
        g = sparse.kron(per_s, sparse.kron(ones, eye), format="csr")
        rows, rows_b = sparse.kron(per_s, sparse.kron(eye, ones), format="csr"), joint.x_given_s.ravel()
        c = (joint.p_s[:, None, None] * d[None]).ravel()
    h = sparse.kron(sparse.csr_matrix(joint.p_s[None, :]), eye, format="csr") @ g
    grow = math.exp(epsilon)
    if measure == "ldp":
        pairs = [(s, t) for s in range(n_s) for t in range(n_s) if s != t]
        unit = np.eye(n_s)
        diff = np.array([unit[s] - grow * unit[t] for s, t in pairs]).reshape(len(pairs), n_s)
        a_ub = sparse.kron(sparse.csr_matrix(diff), eye, format="csr") @ g
    elif measure == "log_lift":
        stacked = sparse.vstack([h] * n_s, format="csr")
        a_ub = sparse.vstack([g - grow * stacked, stacked / grow - g], format="csr")
    else:
        raise DesignError(f"linear reduction: measure must be 'ldp' or 'log_lift', got {measure!r}")
    if preserve_marginal:
        rows, rows_b = sparse.vstack([rows, h], format="csr"), np.concatenate([rows_b, joint.p_x])
    v = _solve(c, rows, rows_b, "direct ε", a_ub=a_ub)
    if markov:
        k = v.reshape(n, n)
        return k / k.sum(axis=1, keepdims=True)
    flow = v.reshape(n_s, n, n)
    p_y_given_s = flow.sum(axis=1)
    mass = flow.sum(axis=2, keepdims=True)
    live = (joint.x_given_s[:, :, None] > 0) & (mass > 0)
    fallback = p_y_given_s / p_y_given_s.sum(axis=1, keepdims=True)
    kernel = np.where(live, flow / np.where(mass > 0, mass, 1.0), fallback[:, None, :])
    return kernel.reshape(n_s * n, n)


__all__ = ["Cost", "Method", "cost_label", "cost_matrix", "default_method", "direct_eps_kernel", "expected_cost",
           "markov_lp_kernel", "northwest_corner", "transport_kernel"]
