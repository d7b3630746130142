"""Exact max-influence of Markov quilts, in log space (notes/002 §3.2, §3.3, §8).

For a chain θ = (q, P) and a node X_i (1-based, as in the paper), the quilt {X_{i−a}, X_{i+b}}
has max-influence (Def II.2)

    e_θ(a, b | i) = max_{s≠t valid} [ bwd_{i,a}(s,t)·[a present] + fwd_b(s,t)·[b present] ]

with the **joint** max over the secret pair (s,t) (notes §3.2: the sum of separate maxima is
looser), where

    fwd_b(s,t)     = max_y log P^b(s,y)/P^b(t,y)
    bwd_{i,a}(s,t) = max_{x: μ_{i−a}(x)>0} log P^a(x,s)/P^a(x,t) + normaliser_i(s,t).

The normaliser is what distinguishes the modes (notes §3.2 table):

=============  ===============================================  ============================
mode           Θ meaning                                         normaliser_i(s,t)
=============  ===============================================  ============================
``q``          a fixed initial law q (E-q)                       log μ_i(t) − log μ_i(s)
``stat``       stationary start q = π (E-stat)                   log π(t) − log π(s)
``supq``       every initial law with this P (E-supq)            U_{i−1}(t,s) = max_x log P^{i−1}(x,t)/P^{i−1}(x,s)
``approx``     any q, Lemma II.3 bound via the eigengap of PP*   —  (e = 2δ(a) + δ(b))
``approx-rev`` any q, authors' reversible variant, 1 − |λ₂|      —  (e = 2δ(a) + δ(b))
=============  ===============================================  ============================

``stat``, ``approx`` and ``approx-rev`` do not depend on i (translation-invariant); ``supq`` is
non-increasing in i, so its value at i = a + 1 is a T-independent upper bound (the
"conservative" supq table used for σ̄_supq and the accountant, notes §3.4).

**Table layout.** Every table is a pair of arrays ``bwd[a, p]`` and ``fwd[b, p]`` over distances
(rows) and secret pairs (columns). Row 0 is all zeros and encodes an *absent* side, so that

    e(a, b) = max(0, max_p bwd[a, p] + fwd[b, p])       for a, b ≥ 0 (0 = absent, ⊥)

covers all four minimal quilts of Lemma II.5 (both absent gives 0). The Lemma II.3 modes use one
pseudo-pair with bwd = 2δ(a), fwd = δ(b) (notes §3.1: the factor 2 sits on the backward side).

**Numerics** (notes §8 "Numeric pitfalls"). log(0) = −∞; a pair of zero probabilities is skipped;
a positive numerator over a zero denominator gives +∞ ("quilt unusable", never NaN). Each per-pair
term is clamped to ≥ 0, a positive term gets ``E_SLACK`` added (the e < ε decision is taken on a
conservative value), and each pair's column is made non-increasing in the distance by a running
minimum (true values are non-increasing by data processing, so this only removes round-off and
guarantees monotone tables for the pruned searches). Because the running minimum is taken per pair,
e(a, b) is automatically non-increasing in a and b and ≥ the one-sided values.
"""

from __future__ import annotations


import numpy as np
from numpy.typing import ArrayLike, NDArray

from streamguard.support.jit import kernel
from streamguard.model.chain import MarkovChain, ModelError, stationary_distribution

MODES: tuple[str, ...] = ("q", "stat", "supq", "approx", "approx-rev")
#: Modes whose max-influence does not depend on the node i.
TRANSLATION_INVARIANT_MODES: tuple[str, ...] = ("stat", "approx", "approx-rev")
#: Added to every positive per-pair term: e is rounded up, never down (notes §8).
E_SLACK = 1e-12
#: Refuse tables with more cells (rows × pairs) than this: a chain that needs them mixes too slowly.
MAX_TABLE_CELLS = 1 << 25
#: Eigenvalues within this of 1 count as 1 (eigengap, notes §8 item 2).
EIG_TOL = 1e-12


# --------------------------------------------------------------------------------------- kernels


@kernel
def _max_log_ratio(u, v):  # pragma: no cover - compiled
    """max over i with u[i] > −∞ of u[i] − v[i] (log-space likelihood ratio); +∞ where u[i] is
    possible and v[i] is not, −∞ when no u[i] is possible."""
    best = -np.inf
    for i in range(u.shape[0]):
        if u[i] == -np.inf:
            continue
        if v[i] == -np.inf:
            return np.inf
        if u[i] - v[i] > best:
            best = u[i] - v[i]
    return best


@kernel
def _log_ratio_rows_into(logpow, r0, s_idx, t_idx, fwd, braw):  # pragma: no cover - compiled
    """Raw per-pair tables from log P^r for the rows r ≥ r0 of ``logpow``, written to fwd[r − r0]:
    fwd[·,p] = max_y log P^r(s,y)/P^r(t,y), braw[·,p] = max_x log P^r(x,s)/P^r(x,t)."""
    n = logpow.shape[0]
    for r in range(r0, n):
        for p in range(s_idx.shape[0]):
            s = s_idx[p]
            t = t_idx[p]
            fwd[r - r0, p] = _max_log_ratio(logpow[r, s, :], logpow[r, t, :])
            braw[r - r0, p] = _max_log_ratio(logpow[r, :, s], logpow[r, :, t])


@kernel
def _log_powers(P, last, n0, out):  # pragma: no cover - compiled
    """out[r] = log P^r for r ≥ n0, given last = P^{n0−1} (or I when n0 = 0); rows renormalised.

    Returns P^{len(out)−1}. Zero entries stay exactly zero (log = −∞): P is non-negative."""
    k = P.shape[0]
    cur = last.copy()
    for r in range(n0, out.shape[0]):
        if r > 0:
            nxt = np.zeros((k, k))
            for x in range(k):
                for z in range(k):
                    pz = cur[x, z]
                    if pz != 0.0:
                        for y in range(k):
                            nxt[x, y] += pz * P[z, y]
                tot = 0.0
                for y in range(k):
                    tot += nxt[x, y]
                for y in range(k):
                    nxt[x, y] /= tot
            cur = nxt
        for x in range(k):
            for y in range(k):
                out[r, x, y] = np.log(cur[x, y]) if cur[x, y] > 0.0 else -np.inf
    return cur


@kernel
def _braw_masked(logpow_r, mask, s_idx, t_idx, out):  # pragma: no cover - compiled
    """out[p] = max_{x: mask[x]} log P^r(x,s)/P^r(x,t) (E-q: x ranges over supp μ_{i−a})."""
    k = logpow_r.shape[0]
    for p in range(s_idx.shape[0]):
        s = s_idx[p]
        t = t_idx[p]
        g = -np.inf
        for x in range(k):
            if not mask[x]:
                continue
            u = logpow_r[x, s]
            if u == -np.inf:
                continue
            v = logpow_r[x, t]
            if v == -np.inf:
                g = np.inf
                break
            if u - v > g:
                g = u - v
        out[p] = g


@kernel
def _finish_rows(vals, r0, slack):  # pragma: no cover - compiled
    """Make rows r ≥ max(r0, 1) conservative and monotone in place; row 0 is the absent side (0).

    NaN → +∞, negatives → 0, positives + slack, then a running minimum down each column.
    """
    for p in range(vals.shape[1]):
        vals[0, p] = 0.0
    for r in range(max(r0, 1), vals.shape[0]):
        for p in range(vals.shape[1]):
            v = vals[r, p]
            if v != v:
                v = np.inf
            elif v <= 0.0:
                v = 0.0
            else:
                v = v + slack
            if r >= 2 and vals[r - 1, p] < v:
                v = vals[r - 1, p]
            vals[r, p] = v


@kernel
def e_value(bwd, fwd, a, b):  # pragma: no cover - compiled
    """e(a, b) = max(0, max_p bwd[a,p] + fwd[b,p]); a = 0 or b = 0 is an absent side."""
    m = 0.0
    for p in range(bwd.shape[1]):
        v = bwd[a, p] + fwd[b, p]
        if v > m:
            m = v
    return m


def e_table_reference(bwd: NDArray[np.float64], fwd: NDArray[np.float64]) -> NDArray[np.float64]:
    """numpy reference: the whole matrix E[a, b] = e(a, b) for a < len(bwd), b < len(fwd)."""
    if bwd.shape[1] == 0:
        return np.zeros((bwd.shape[0], fwd.shape[0]))
    return np.max(bwd[:, None, :] + fwd[None, :, :], axis=2, initial=0.0)


def side_maxima(table: NDArray[np.float64]) -> NDArray[np.float64]:
    """One-sided values: row r ↦ max(0, max_p table[r, p]) (= e(r, ⊥) for bwd, e(⊥, r) for fwd)."""
    return np.max(table, axis=1, initial=0.0)


def finish_reference(vals: NDArray[np.float64]) -> NDArray[np.float64]:
    """numpy reference of :func:`_finish_rows` on a whole raw table (row 0 ignored)."""
    v = np.array(vals, dtype=np.float64)
    v[np.isnan(v)] = np.inf
    v = np.where(v <= 0.0, 0.0, v + E_SLACK)
    v[0] = 0.0
    if len(v) > 1:
        v[1:] = np.minimum.accumulate(v[1:], axis=0)
    return v


# ------------------------------------------------------------------------------------- the tables


def _regrow(a: NDArray[np.float64], n: int, cap: int) -> NDArray[np.float64]:
    """A new array of ``cap`` rows holding the first ``n`` rows of ``a``."""
    out = np.empty((cap,) + a.shape[1:])
    out[:n] = a[:n]
    return out


def _pairs(k: int) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    s_idx, t_idx = np.array([(s, t) for s in range(k) for t in range(k) if s != t], dtype=np.int64).T
    index = {(int(s), int(t)): p for p, (s, t) in enumerate(zip(s_idx, t_idx))}
    rev = np.array([index[(int(t), int(s))] for s, t in zip(s_idx, t_idx)], dtype=np.int64)
    return np.ascontiguousarray(s_idx), np.ascontiguousarray(t_idx), rev


def _log(x: NDArray[np.float64]) -> NDArray[np.float64]:
    with np.errstate(divide="ignore"):
        return np.log(x)


def eigengap(chain: MarkovChain) -> float:
    """g = 1 − λ₂(P·P*) (Lemma II.3), via the π-symmetrised A·Aᵀ, A = D^{1/2} P D^{−1/2}.

    Returns 0.0 when P·P* has eigenvalue 1 with multiplicity > 1 (the Lemma does not apply).
    """
    pi = stationary_distribution(chain.matrix)
    d = np.sqrt(pi)
    A = d[:, None] * chain.matrix / d[None, :]
    lam = np.sort(np.linalg.eigvalsh(A @ A.T))[::-1]
    lam2 = float(np.clip(lam[1], 0.0, 1.0))
    return 0.0 if lam2 >= 1.0 - EIG_TOL else 1.0 - lam2


def second_eigenvalue_modulus(chain: MarkovChain) -> float:
    """|λ₂(P)| of a reversible chain (largest modulus after the eigenvalue 1)."""
    pi = stationary_distribution(chain.matrix)
    flow = pi[:, None] * chain.matrix
    if not np.allclose(flow, flow.T, rtol=0.0, atol=1e-12):
        raise ModelError("mode 'approx-rev' needs a reversible chain (π_x P(x,y) = π_y P(y,x)); "
                         "use mode 'approx'")
    d = np.sqrt(pi)
    S = d[:, None] * chain.matrix / d[None, :]
    lam = np.sort(np.abs(np.linalg.eigvalsh((S + S.T) / 2.0)))[::-1]
    return float(lam[1])


class ChainTables:
    """Max-influence tables of one chain θ under one mode, grown on demand.

    Parameters
    ----------
    chain:
        The chain θ. Modes other than ``q`` need an irreducible chain (π > 0, every state reachable);
        ``stat`` additionally needs a stationary start (``chain.stationary``), because E-stat is a
        statement about the adversary with q = π.
    mode:
        One of :data:`MODES`.
    initial:
        For mode ``q`` only: the law of X_1 (defaults to ``chain.initial``).
    """

    def __init__(self, chain: MarkovChain, mode: str, initial: ArrayLike | None = None) -> None:
        if mode not in MODES:
            raise ModelError(f"unknown max-influence mode {mode!r}; expected one of {MODES}")
        self.chain = chain
        self.mode = mode
        P = chain.matrix
        self.k = chain.k
        self.ergodic = chain.is_irreducible and chain.period == 1
        #: Why σ_∞ is infinite for this chain (None when it is finite).
        self.unbounded_reason: str | None = None
        if not chain.is_irreducible:
            self.unbounded_reason = "the chain is reducible, so the max-influence never decays"
        elif chain.period != 1:
            self.unbounded_reason = f"the chain is periodic (period {chain.period}), so the max-influence never decays"
        if mode != "q" and not chain.is_irreducible:
            raise ModelError(f"mode {mode!r} needs an irreducible chain (unique π > 0); use mode 'q'")
        if mode == "stat" and not chain.stationary:
            raise ModelError("mode 'stat' assumes a stationary start, but the chain has another initial "
                             "law; use mode 'q' (that law) or 'supq' (any law)")
        self.s_idx, self.t_idx, self.rev = _pairs(self.k)
        self.q: NDArray[np.float64] | None = None
        self._norm_stat: NDArray[np.float64] | None = None
        self._rate: float | None = None  # Lemma II.3: x(t) = exp(−rate·t); None = not applicable
        if mode == "q":
            self.q = np.array(chain.initial if initial is None else initial, dtype=np.float64)
            self._mu = self.q[None, :].copy()  # μ_1, μ_2, ... (row j−1 = μ_j)
        elif mode == "stat":
            pi = stationary_distribution(P)
            self._norm_stat = _log(pi)[self.t_idx] - _log(pi)[self.s_idx]
        elif mode in ("approx", "approx-rev"):
            self.pi_min = float(stationary_distribution(P).min())
            if self.ergodic:
                if mode == "approx":
                    g = eigengap(chain)
                    self._rate = g / 2.0 if g > 0 else None
                    if g <= 0:
                        self.unbounded_reason = "P·P* is reducible (eigengap g = 0), so Lemma II.3 does not apply"
                else:
                    lam2 = second_eigenvalue_modulus(chain)
                    self._rate = 1.0 - lam2 if lam2 < 1.0 - EIG_TOL else None
                    if self._rate is None:
                        self.unbounded_reason = "|λ₂| = 1, so the approximate bound does not apply"
        self.pairs = 1 if mode in ("approx", "approx-rev") else len(self.s_idx)
        self._n = 0  # rows 0.._n−1 are computed; arrays have spare capacity beyond
        npairs = len(self.s_idx)
        self._logpow = np.empty((0, self.k, self.k))  # kept for mode q only (supports of μ)
        self._fwd_raw = np.empty((0, npairs))
        self._braw = np.empty((0, npairs))
        self._fwd_fin = np.empty((0, self.pairs))
        self._bwd_ti = np.empty((0, self.pairs))
        self._last_power = np.eye(self.k)

    # -- growth ------------------------------------------------------------------------------
    @property
    def rows(self) -> int:
        """Distances 0..rows−1 are available."""
        return self._n

    def ensure(self, R: int) -> None:
        """Make distances 0..R available (exactly; storage grows by doubling)."""
        if R < self._n:
            return
        if (R + 1) * max(self.pairs, 1) > MAX_TABLE_CELLS:
            raise ModelError(f"max-influence tables up to distance {R} would need more than {MAX_TABLE_CELLS} "
                             "cells: the chain mixes too slowly for this search")
        n0, n1 = self._n, R + 1
        if n1 > len(self._fwd_fin):
            cap = max(n1, 2 * len(self._fwd_fin), 16)
            self._fwd_fin = _regrow(self._fwd_fin, n0, cap)
            self._bwd_ti = _regrow(self._bwd_ti, n0, cap)
            if self.mode not in ("approx", "approx-rev"):
                self._fwd_raw = _regrow(self._fwd_raw, n0, cap)
                self._braw = _regrow(self._braw, n0, cap)
                if self.mode == "q":
                    self._logpow = _regrow(self._logpow, n0, cap)
        if self.mode in ("approx", "approx-rev"):
            self._grow_approx(n0, n1)
        else:
            self._grow_exact(n0, n1)
        self._n = n1

    def _grow_exact(self, n0: int, n1: int) -> None:
        if self.mode == "q":
            logpow = self._logpow[:n1]
            self._last_power = _log_powers(self.chain.matrix, self._last_power, n0, logpow)
            rows, r0 = logpow, n0
        else:  # only the new rows are needed, in a scratch buffer indexed from n0
            scratch = np.empty((n1, self.k, self.k)) if n0 == 0 else np.empty((n1 - n0 + 1, self.k, self.k))
            off = 0 if n0 == 0 else n0 - 1
            scratch_last = self._last_power
            self._last_power = _log_powers(self.chain.matrix, scratch_last, n0 - off, scratch)
            rows, r0 = scratch, n0 - off
        fwd_raw, braw = self._fwd_raw[n0:n1], self._braw[n0:n1]
        _log_ratio_rows_into(rows, r0, self.s_idx, self.t_idx, fwd_raw, braw)
        self._fwd_fin[n0:n1] = fwd_raw
        _finish_rows(self._fwd_fin[:n1], n0, E_SLACK)
        if self.mode == "stat":
            self._bwd_ti[n0:n1] = braw + self._norm_stat
            _finish_rows(self._bwd_ti[:n1], n0, E_SLACK)
        elif self.mode == "supq":  # conservative i = a + 1: normaliser U_a(t,s) = braw[a, rev]
            self._bwd_ti[n0:n1] = braw + braw[:, self.rev]
            _finish_rows(self._bwd_ti[:n1], n0, E_SLACK)

    def _grow_approx(self, n0: int, n1: int) -> None:
        t = np.arange(n0, n1, dtype=np.float64)
        if self._rate is None:
            delta = np.full(t.shape, np.inf)
        else:
            # δ(t) = log((π_min + x)/(π_min − x)), x = exp(−rate·t); +∞ unless x < π_min (strict)
            r = np.exp(-self._rate * t) / self.pi_min
            ok = r < 1.0
            rs = np.where(ok, r, 0.0)
            delta = np.where(ok, np.log1p(rs) - np.log1p(-rs), np.inf)
        self._fwd_fin[n0:n1, 0] = delta
        self._bwd_ti[n0:n1, 0] = 2.0 * delta
        _finish_rows(self._fwd_fin[:n1], n0, E_SLACK)
        _finish_rows(self._bwd_ti[:n1], n0, E_SLACK)

    # -- views ------------------------------------------------------------------------------
    def ti(self, R: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Translation-invariant tables (bwd, fwd), rows 0..R.

        For ``supq`` this is the conservative version evaluated at i = a + 1, valid at every node
        i ≥ a + 1 because E-supq is non-increasing in i (notes §3.4). Not available for ``q``.
        """
        if self.mode == "q":
            raise ModelError("mode 'q' (fixed initial law) is not translation-invariant; "
                             "use sigma_max with a stream length, or mode 'supq'/'stat'")
        self.ensure(R)
        return self._bwd_ti[: R + 1], self._fwd_fin[: R + 1]

    def node(self, i: int, A: int, B: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Exact tables (bwd rows 0..A, fwd rows 0..B) of node i (1-based); requires A ≤ i − 1."""
        if i < 1 or A < 0 or B < 0 or A > i - 1:
            raise ValueError(f"node {i}: need i ≥ 1 and 0 ≤ A ≤ i − 1, B ≥ 0 (got A={A}, B={B})")
        if self.mode in TRANSLATION_INVARIANT_MODES:
            self.ensure(max(A, B))
            return self._bwd_ti[: A + 1], self._fwd_fin[: B + 1]
        self.ensure(max(A, B))
        if self.mode == "supq":
            U = self._braw_row(i - 1)[self.rev] if A > 0 else np.zeros(len(self.s_idx))
            raw = np.zeros((A + 1, len(self.s_idx)))
            raw[1:] = self._braw[1 : A + 1] + U
            bwd = np.ascontiguousarray(raw)
            _finish_rows(bwd, 1, E_SLACK)
            return bwd, self._fwd_fin[: B + 1]
        # mode q: secrets s with μ_i(s) > 0 only; x over supp μ_{i−a}
        mu_i = self.marginal(i)
        sel = np.flatnonzero((mu_i[self.s_idx] > 0) & (mu_i[self.t_idx] > 0))
        s_sel, t_sel = self.s_idx[sel], self.t_idx[sel]
        raw = np.zeros((A + 1, len(sel)))
        if len(sel) and A > 0:
            norm = _log(mu_i)[t_sel] - _log(mu_i)[s_sel]
            for a in range(1, A + 1):
                mask = self.marginal(i - a) > 0
                if mask.all():
                    raw[a] = self._braw[a, sel]
                else:
                    _braw_masked(self._logpow[a], mask, s_sel, t_sel, raw[a])
            raw[1:] += norm
        bwd = np.ascontiguousarray(raw)
        _finish_rows(bwd, 1, E_SLACK)
        return bwd, np.ascontiguousarray(self._fwd_fin[: B + 1, sel])

    def marginal(self, j: int) -> NDArray[np.float64]:
        """μ_j = q·P^{j−1} (mode ``q``), cached."""
        assert self.q is not None
        while len(self._mu) < j:
            nxt = self._mu[-1] @ self.chain.matrix
            self._mu = np.concatenate([self._mu, (nxt / nxt.sum())[None, :]])
        return self._mu[j - 1]

    def _braw_row(self, m: int) -> NDArray[np.float64]:
        """Raw braw row at distance m (beyond the tables: via P^m by repeated squaring)."""
        if m < self._n:
            return self._braw[m]
        M = np.linalg.matrix_power(self.chain.matrix, m)
        M = M / M.sum(axis=1, keepdims=True)
        lp = _log(M)[None]
        fwd, braw = np.empty((1, len(self.s_idx))), np.empty((1, len(self.s_idx)))
        _log_ratio_rows_into(lp, 0, self.s_idx, self.t_idx, fwd, braw)
        return braw[0]


def max_influence(model, i: int, a: int | None, b: int | None) -> float:
    """e_Θ({X_{i−a}, X_{i+b}} | X_i) = max over θ ∈ Θ, for node i ≥ 1 (1-based, as in the paper).

    ``a``/``b`` are the distances of the left/right quilt nodes (1 ≤ a ≤ i − 1, b ≥ 1), None for an
    absent side; both None is the empty quilt (0). ``model`` is a :class:`~streamguard.quilt.QuiltModel`.
    For mode ``supq`` this is the exact i-dependent value, for ``approx``/``approx-rev`` the bound.
    """
    for name, v in (("i", i), ("a", a), ("b", b)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer))):
            raise ValueError(f"{name} must be an integer")
    if i < 1:
        raise ValueError(f"node positions are 1-based, got i = {i}")
    if a is not None and not 1 <= a <= i - 1:
        raise ValueError(f"left distance a must lie in 1..i−1 = 1..{i - 1}, got {a}")
    if b is not None and b < 1:
        raise ValueError(f"right distance b must be ≥ 1, got {b}")
    A, B = int(a or 0), int(b or 0)
    worst = 0.0
    for theta in range(len(model.chains)):
        bwd, fwd = model.tables(theta).node(int(i), A, B)
        worst = max(worst, float(e_value(bwd, fwd, A, B)))
    return worst
