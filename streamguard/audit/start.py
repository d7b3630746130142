"""The left side of a private record when the law of the stream's first record is not known.

The stationary audit (:mod:`.exact`) steps left with the time-reversed kernel of the stationary
chain. A sensor that boots in a known state breaks that: near the start of a stream (and after a
restart) the law of the first record is whatever the device makes it. DESIGN.md §3: unless the
configuration states it, plans must hold for every initial law. This module gives the exact left
side for a *set* of laws of the first record, computed forward (no time reversal).

Setting. Record p; its left neighbours at distances j = 1..m with redaction rows
r_j(x) = Pr(⊥ | X_{p−j} = x) and one-step kernels K_j (X_{p−j} → X_{p−j+1}: P, or P^{G+1} across a
restart gap of G unseen readings). Either the window *reaches the start* — X_{p−m} is the first
record and its law μ lies in a set M — or the record p−m−1 *stands in released* (whatever lies
beyond it counts as released, which only over-states the leakage) and *its* law lies in M.

Derivation. Let v_j(x, a) = Pr(X_{p−j+1..p−1} all redacted, X_p = a | X_{p−j} = x), so v_1 = K_1 and
v_{j+1} = K_{j+1} · diag(r_j) · v_j. A left output either releases first (nearest p) the record
p−j with value x — then, by the Markov property, everything further left is independent of X_p
given X_{p−j} = x, and Pr(X_{p−j} = x) cancels —

    Pr(y | X_p = a) / Pr(y | X_p = b) = v_j(x, a) / v_j(x, b) · Pr(X_p = b) / Pr(X_p = a),

or redacts everything back to the start (reaching windows only), with W(x, a) = r_m(x) v_m(x, a):

    Pr(y | X_p = a) / Pr(y | X_p = b) = (μ·W_a)(μ·Q_b) / ((μ·W_b)(μ·Q_a)),

where Q is the product of the kernels from the first record (or the stand-in) to p, so that
Pr(X_p = ·) ∝ μ·Q. The sup over μ ∈ conv(M) and over outputs commute per ordered pair (a, b):

- release terms: log v_j(x,a)/v_j(x,b) + log sup_μ (μQ)_b/(μQ)_a, and a ratio of two linear
  functions of μ is largest at a vertex of M;
- the all-redacted term: for two states, μ runs over a segment and the ratio is N(u)/D(u) with N, D
  products of two linear functions of u ∈ [0, 1]; its maximum is at an end or at a root of
  N'D − ND' (degree ≤ 2) — exact. For k > 2 states the ratio is a product of two linear-fractional
  functions of μ, whose supremum over a polytope lies on an edge (docs/k-state-redaction.md §4), so
  the same segment maximum over every pair of vertices is exact too.

The sides of p are independent given X_p, so a pair's total is this left term plus the right side's
term for the same pair (:func:`combine`).

Values of X_p of probability 0 (docs/initial-law.md): a law of the first record can make
Pr(X_p = a) = 0 (a sensor that boots in a known state, a transition matrix with zeros). Bayes' rule
then gives no law of the left records given X_p = a, and every version of it is a conditional
probability; we take the worst. A left side with more than one possible output therefore leaks
without bound about a (L[b, a] = +∞ for some b; both orders are set to +∞, the maximum is the same
— docs/initial-law.md), and one with a single possible output
(e.g. every row 1 at every value its record can take, back to the first record: ⊥…⊥) has ratio 1,
L = 0 for every pair. With a set of laws this applies to every value that some law of the set
makes impossible, and the output must be the same one under every law. (The right
side given X_p = a is the chain started from a at p: the Markov property defines it for every a.)
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from ..support.jit import kernel
from ..model.chain import stationary_distribution
from ..redaction.side import MIN_SIDE_BUDGET


def laws_at_distance(P: NDArray[np.float64], d: int, initial: NDArray[np.float64] | None) -> NDArray[np.float64]:
    """Vertices of a set containing the law of a record that lies *at least* ``d`` steps after a
    stream's first record, whose law is ``initial`` (None: any law).

    Binary chains: μP^{d'} = π + λ^{d'}(μ − π), so for d' ≥ d the laws lie on the segment spanned by
    the laws at d and d + 1 (and π, for a given μ); the rows of P^d and P^{d+1} (any μ) or μP^d,
    μP^{d+1} and π (given μ) are therefore vertices of a set containing them all — lost readings
    before the window (a larger true distance) stay covered. For k > 2 states every law d' ≥ d steps
    after the start is (μP^{d'−d})P^d, a mixture of the rows of P^d, so those rows are the vertices
    (with a stated μ too: its own trajectory need not stay in a smaller hull).
    """
    k = P.shape[0]
    Pd = np.linalg.matrix_power(P, d)
    if initial is None or k != 2:
        return np.vstack([Pd, Pd @ P] if k == 2 else [Pd])
    mu = np.asarray(initial, dtype=np.float64)
    return np.vstack([mu @ Pd, mu @ Pd @ P, stationary_distribution(P)])


def _log_ratio(num: float, den: float) -> float:
    """log(num/den) for non-negative numbers: −inf when num = 0 (no such output under a), +inf
    when only den = 0 (the output is possible under a but not under b)."""
    if num <= 0.0:
        return -math.inf
    if den <= 0.0:
        return math.inf
    return math.log(num) - math.log(den)


@kernel
def scaled_product(A, r, B, tmp):  # pragma: no cover - compiled
    """B ← A · diag(r) · B, divided by its largest entry when that is > 0 (ratios within B are what
    the audits use; the scaling keeps long redacted runs from underflowing). ``tmp``: (k, k) scratch."""
    k = A.shape[0]
    s = 0.0
    for x in range(k):
        for a in range(k):
            acc = 0.0
            for y in range(k):
                acc += A[x, y] * r[y] * B[y, a]
            tmp[x, a] = acc
            s = max(s, acc)
    for x in range(k):
        for a in range(k):
            B[x, a] = tmp[x, a] / s if s > 0.0 else tmp[x, a]


@kernel
def _release_kernel(kernels, rows, possible, out, v_last, q_last):  # pragma: no cover - compiled
    """Release terms of :func:`left_pairs` without the law factor: out[a, b] = max over (j, x) of
    log v_j(x,a) − log v_j(x,b) (−inf: none); the record at distance j releases only the x with
    possible[j − 1, x]. Leaves v and Q of the first record in v_last, q_last."""
    m = rows.shape[0]
    k = rows.shape[1]
    steps = kernels.shape[0]
    v = kernels[0].copy()
    q = kernels[0].copy()
    tmp = np.empty((k, k))
    ones = np.ones(k)
    for a in range(k):
        for b in range(k):
            out[a, b] = 0.0 if a == b else -np.inf
    for j in range(1, steps + 1):
        if j > 1:
            K = kernels[j - 1]
            scaled_product(K, rows[j - 2], v, tmp)
            scaled_product(K, ones, q, tmp)
        for x in range(k):
            if (j <= m and rows[j - 1, x] >= 1.0) or not possible[j - 1, x]:
                continue  # never released at this distance
            for a in range(k):
                if v[x, a] <= 0.0:
                    continue
                for b in range(k):
                    if a == b:
                        continue
                    val = np.inf if v[x, b] <= 0.0 else np.log(v[x, a]) - np.log(v[x, b])
                    if val > out[a, b]:
                        out[a, b] = val
    v_last[:, :] = v
    q_last[:, :] = q


def _release_numpy(kernels: NDArray[np.float64], rows: NDArray[np.float64],
                   possible: NDArray[np.bool_]) -> tuple[NDArray[np.float64], ...]:
    """Plain-numpy twin of :func:`_release_kernel` (for the tests): (out, v_last, q_last)."""
    m, k = rows.shape
    out = np.full((k, k), -math.inf)
    np.fill_diagonal(out, 0.0)
    v = np.array(kernels[0], dtype=np.float64)
    q = v.copy()
    for j in range(1, kernels.shape[0] + 1):
        if j > 1:
            v = kernels[j - 1] @ (rows[j - 2][:, None] * v)
            q = kernels[j - 1] @ q
            v, q = (v / v.max() if v.max() > 0 else v), q / q.max()
        can = np.ones(k, dtype=bool) if j > m else rows[j - 1] < 1.0
        for x in np.flatnonzero(can & possible[j - 1]):
            for a in range(k):
                for b in range(k):
                    if a != b and v[x, a] > 0:
                        out[a, b] = max(out[a, b], _log_ratio(v[x, a], v[x, b]))
    return out, v, q


def left_pairs(kernels: NDArray[np.float64], rows: NDArray[np.float64], laws: NDArray[np.float64], *,
               reaches_start: bool, use_numpy: bool = False) -> NDArray[np.float64]:
    """L[a, b] = max over left outputs of log Pr(y | X_p = a)/Pr(y | X_p = b), worst case over the
    laws in conv(``laws``) of the first record (see module docstring).

    ``rows``: (m, k) redaction rows at distances 1..m. ``kernels``: (m, k, k) when the window reaches
    the start (X_{p−m} is the first record), else (m + 1, k, k) with the last one stepping from the
    released stand-in p−m−1. ``laws``: (v, k) vertices of the set of laws of that first record.
    """
    m, k = rows.shape
    if reaches_start and m == 0:
        return np.zeros((k, k))  # nothing on the left of the first record
    if kernels.shape[0] != (m if reaches_start else m + 1):
        raise ValueError("left_pairs: one kernel per step from the first record to p")
    kernels = np.ascontiguousarray(kernels, dtype=np.float64)
    rows = np.ascontiguousarray(rows, dtype=np.float64)
    possible = _possible(kernels, laws)
    if _one_output(rows, possible):
        return np.zeros((k, k))  # one and the same left output surely: every ratio is 1
    if use_numpy:
        out, v, q = _release_numpy(kernels, rows, possible)
    else:
        out, v, q = np.empty((k, k)), np.empty((k, k)), np.empty((k, k))
        _release_kernel(kernels, rows, possible, out, v, q)
    law_q = laws @ q  # Pr(X_p = ·) up to a factor, per vertex law
    sure = law_q.min(axis=0) > 0  # values of X_p of positive probability under every law of the set
    for a in range(k):
        for b in range(k):
            if a == b:
                continue
            if not (sure[a] and sure[b]):
                out[a, b] = math.inf  # a value of probability 0 (module docstring)
                continue
            if out[a, b] > -math.inf:
                out[a, b] += max(_log_ratio(float(lq[b]), float(lq[a])) for lq in law_q)
            if reaches_start:
                out[a, b] = max(out[a, b], _all_redacted(rows[m - 1][:, None] * v, q, laws, a, b))
    return out


def _possible(kernels: NDArray[np.float64], laws: NDArray[np.float64]) -> NDArray[np.bool_]:
    """(steps, k): possible[j − 1, x] when X_{p−j} = x has positive probability under some law of
    the set (the first record, or the stand-in, is at distance steps). A value that no law gives
    cannot be released there: that output is not in the support of Y (paper 000 Def. 1), and
    counting it would over-state the leakage (issue 24: 2.30 nats for a plan whose true leakage is
    1.65). With a set of laws a value given by any of them counts: the sup over the set approaches
    it. Computed on the zero pattern, so no long product underflows to a false 'impossible'."""
    steps, k = kernels.shape[0], kernels.shape[1]
    out = np.zeros((steps, k), dtype=bool)
    reach = laws.max(axis=0) > 0
    for j in range(steps, 0, -1):
        out[j - 1] = reach
        reach = (reach.astype(np.int64) @ (kernels[j - 1] > 0).astype(np.int64)) > 0
    return out


def _one_output(rows: NDArray[np.float64], possible: NDArray[np.bool_]) -> bool:
    """Is the left output one and the same, surely, under every law of the set? Each record (the
    released stand-in too, at distance m + 1) has one possible output: redacted surely at every value
    it can take, or a single possible value released surely."""
    m = rows.shape[0]
    for j in range(possible.shape[0]):
        vals = possible[j]
        if j < m:
            outputs = int(np.count_nonzero(vals & (rows[j] < 1.0))) + int(bool(np.any(vals & (rows[j] > 0.0))))
        else:
            outputs = int(np.count_nonzero(vals))
        if outputs > 1:
            return False
    return True


def _all_redacted(W: NDArray[np.float64], Q: NDArray[np.float64], laws: NDArray[np.float64], a: int, b: int) -> float:
    """sup over μ ∈ conv(laws) of log (μW_a)(μQ_b) / ((μW_b)(μQ_a))."""
    k = W.shape[0]
    if laws.shape[0] == 1:
        mu = laws[0]
        return _log_ratio(float(mu @ W[:, a]) * float(mu @ Q[:, b]), float(mu @ W[:, b]) * float(mu @ Q[:, a]))
    if k != 2:
        # the sup of this product of two linear-fractional functions over a polytope lies on its
        # edges (docs/k-state-redaction.md §4): the largest segment maximum over vertex pairs
        v = laws.shape[0]
        return max(_segment_max(W, Q, laws[i], laws[j], a, b) for i in range(v) for j in range(i + 1, v))
    # two states: the vertices lie on a segment; parametrise it by its two extreme laws
    order = np.argsort(laws[:, 1])
    return _segment_max(W, Q, laws[order[0]], laws[order[-1]], a, b)


def _segment_max(W: NDArray[np.float64], Q: NDArray[np.float64], lo: NDArray[np.float64],
                 hi: NDArray[np.float64], a: int, b: int) -> float:
    """max over μ(u) = lo + u (hi − lo), u ∈ [0, 1], of log (μW_a)(μQ_b) / ((μW_b)(μQ_a))."""

    def line(col: NDArray[np.float64]) -> tuple[float, float]:
        """(c0, c1): c0 + c1·u for μ(u) = lo + u (hi − lo)."""
        return float(lo @ col), float((hi - lo) @ col)

    num: list[tuple[float, float] | None] = [line(W[:, a]), line(Q[:, b])]
    den: list[tuple[float, float] | None] = [line(W[:, b]), line(Q[:, a])]
    const = 1.0
    # two linear factors with the same root (e.g. W_a, W_b both vanish where the first record is
    # surely released) have a constant ratio: cancel them, so no 0/0 is ever evaluated
    for i in range(2):
        for jd in range(2):
            f, g = num[i], den[jd]
            if f is None or g is None:
                continue
            r = _constant_ratio(f, g)
            if r is not None:
                const *= r
                num[i] = den[jd] = None
                break
    N, D = _product(num), _product(den)  # quadratics (n0, n1, n2), (d0, d1, d2)
    # f = N/D is largest at u ∈ {0, 1} or where N'D − ND' = 0: c0 + c1·u + c2·u² (the u³ terms cancel)
    c0 = N[1] * D[0] - N[0] * D[1]
    c1 = 2.0 * (N[2] * D[0] - N[0] * D[2])
    c2 = N[2] * D[1] - N[1] * D[2]
    cands = [0.0, 1.0] + [u for u in _real_roots(c0, c1, c2) if 0.0 < u < 1.0]
    best = -math.inf
    for u in cands:
        n = (N[0] + u * (N[1] + u * N[2])) * const
        d = D[0] + u * (D[1] + u * D[2])
        if n <= 0.0 and d <= 0.0:
            continue  # this μ makes the all-redacted output impossible under both secrets
        best = max(best, _log_ratio(n, d))
    return best


def _product(factors: list[tuple[float, float] | None]) -> tuple[float, float, float]:
    """Coefficients (p0, p1, p2) of the product of the remaining linear factors."""
    p0, p1, p2 = 1.0, 0.0, 0.0
    for f in factors:
        if f is not None:
            p0, p1, p2 = p0 * f[0], p0 * f[1] + p1 * f[0], p1 * f[1] + p2 * f[0]
    return p0, p1, p2


def _real_roots(c0: float, c1: float, c2: float) -> list[float]:
    """Real roots of c0 + c1·u + c2·u² (a degree that vanishes is dropped; none if all do)."""
    if c2 == 0.0:
        return [] if c1 == 0.0 else [-c0 / c1]
    disc = c1 * c1 - 4.0 * c2 * c0
    if disc < 0.0:
        return []
    r = math.sqrt(disc)
    q = -0.5 * (c1 + math.copysign(r, c1))  # the numerically stable form
    roots = [q / c2]
    if q != 0.0:
        roots.append(c0 / q)
    return roots


def _constant_ratio(f: tuple[float, float], g: tuple[float, float]) -> float | None:
    """f/g when the linear functions f = f0 + f1·u and g = g0 + g1·u are proportional, else None."""
    if f[0] * g[1] != f[1] * g[0]:
        return None
    if g[0] != 0:
        return f[0] / g[0]
    if g[1] != 0:
        return f[1] / g[1]
    return None


def exceeds_left_budget(leak: float, budget: float) -> bool:
    """Does a left side's worst-case leakage exceed the plan's left budget (beyond round-off)? Then a
    window that reaches the first record is redacted to it (the privatizer), and ``start_effect``
    reports the position as one that does so."""
    return leak > budget * (1 + 1e-12) + 1e-15


def plan_left_worst(P: NDArray[np.float64], left_rows: NDArray[np.float64], p: int,
                    initial: NDArray[np.float64] | None = None) -> float:
    """The worst-case left leakage, over the laws of the first record (any, unless ``initial``
    states it), of a plan's ``left_rows`` (by distance 1..H) for a mark at 0-based position ``p``
    from that record: the window reaches the first record when p ≤ H, else the record p − H − 1
    stands in released, at distance p − H − 1 from the start. For p ≥ H + 1 it is non-increasing in
    p: only the set of the stand-in's laws changes, and those sets are nested (audit/start.py,
    laws_at_distance)."""
    H = left_rows.shape[0]
    m = min(H, p)
    reaches = m == p
    kern = np.broadcast_to(P, (m if reaches else m + 1, *P.shape)).copy()
    if reaches:
        laws = np.eye(P.shape[0]) if initial is None else np.asarray(initial, dtype=np.float64)[None]
    else:
        laws = laws_at_distance(P, p - m - 1, initial)
    return float(left_pairs(kern, left_rows[:m], laws, reaches_start=reaches).max())


#: The most records :func:`start_hold` holds at the start (and after a restart).
MAX_START_HOLD = 1024


def start_hold(P: NDArray[np.float64], left_rows: NDArray[np.float64], left_budget: float, epsilon: float,
               initial: NDArray[np.float64] | None = None, *, cap: int = MAX_START_HOLD,
               left_worst: Callable[[int], float] | None = None) -> int:
    """S: from S on, a mark at 0-based position p from a stream's first record (or from the first
    record after a restart) keeps the plan's left rows and is honoured; before it, a mark may have
    to redact its left side back to that record (a side that releases nothing leaks nothing,
    whatever the law). Those positions are

    - p ≤ H (the window reaches the first record) where the plan's rows exceed the left budget for
      some law of that record (:func:`exceeds_left_budget`), and
    - p > H where they leave the right side less than ``MIN_SIDE_BUDGET`` of ε
      (:func:`plan_left_worst`; between the two the right side is re-planned with what is left).

    The daemon holds the records before position S − 1 until that record is decided itself, so a
    mark made on time at any p < S still finds its left side undecided back to the first record.
    At most ``cap``: beyond it (a chain that mixes very slowly) the exact figure decides. For
    p ≥ H + 1 the worst case is non-increasing in p, so the last such position is found by
    doubling and bisection. ``left_worst``: p ↦ the left figure to use instead of
    :func:`plan_left_worst` under ``P`` (a bound over a set of chains, model/rows_window.py)."""
    H = left_rows.shape[0]

    def lost(p: int) -> bool:
        worst = plan_left_worst(P, left_rows, p, initial) if left_worst is None else left_worst(p)
        return exceeds_left_budget(worst, left_budget) if p <= H else epsilon - worst < MIN_SIDE_BUDGET

    if H + 1 < cap and lost(H + 1):
        lo, hi = H + 1, H + 2  # lost(lo); look for a hi that is not
        while hi < cap and lost(hi):
            lo, hi = hi, min(cap, 2 * hi)
        if hi >= cap and lost(cap):
            return cap
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if lost(mid) else (lo, mid)
        return min(lo + 1, cap)
    # the last lost p ≤ H, looked for from H down (each lost(p) costs O(p): a slowly mixing chain's
    # positions up to H cost O(H²) when scanned from 0, a few minutes over a 15-chain set at H ≈ 700)
    last = next((p for p in range(min(H, cap - 1), -1, -1) if lost(p)), -1)
    return min(last + 1, cap)


def start_effect(P: NDArray[np.float64], left_rows: NDArray[np.float64], left_budget: float,
                 initial: NDArray[np.float64] | None = None, *, tol: float = 1e-12) -> dict[str, float | int]:
    """How far from a stream's first record its unknown law matters to a stream plan's left side
    (``left_rows`` by distance 1..H), for ``plan --stream`` and ``config check``:

    - ``redact_to_start``: marks at 0-based positions p < this have a window that reaches the first
      record and whose plan rows exceed the left budget for some initial law; the daemon redacts
      their left side to the start (a side that releases nothing leaks nothing);
    - ``worst_left``: the largest worst-case left leakage of the plan's rows over positions
      p ≥ redact_to_start (the daemon gives the right side what is left of ε, so the total holds);
    - ``matters_until``: from this position on, the worst case over initial laws differs from the
      stationary left leakage by less than ``tol`` nats.
    """
    H = left_rows.shape[0]

    def worst(p: int) -> float:
        return plan_left_worst(P, left_rows, p, initial)

    stationary = worst(10**9)  # far from the start, where every law has mixed to π
    redact = 0
    for p in range(H + 1):
        if exceeds_left_budget(worst(p), left_budget):
            redact = p + 1
    worst_left = max(worst(p) for p in range(redact, H + 2))
    lo, hi = H + 1, H + 2
    while worst(hi) - stationary >= tol and hi < 10**9:  # the excess shrinks like |λ|^(p−H−1)
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if worst(mid) - stationary >= tol else (lo, mid)
    return {"redact_to_start": redact, "worst_left": worst_left, "matters_until": hi}
