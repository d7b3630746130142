"""E_i for a Markov-chain prior over a record of n rows: a sequential sampler (notes/001 §7.5).

The record X = (X_1, …, X_n) has the prior p_X(x) = π₀(x_1)·∏_{i≥2} P(x_i | x_{i−1}) of a
:class:`~streamguard.model.chain.MarkovChain` (its ``initial`` law and ``matrix``). E_i releases Y with
W(y|x) = q(y)·K_ε(x,y)/p_X(x), q = K_ε⁻¹ p_X (paper eq. (26)); its posterior is the RR kernel,
so it is ε-identifiable with expected Hamming distortion h(ε) = n·δ, the least possible (Thm 1a),
and it minimises I(X;Y) (Thm 2). It does not factorise over rows, but with k = k_ε and
kinv = k_ε⁻¹ (signed) the future messages collapse (Σ_c kinv(c,b)·k(x,c) = [b = x]), leaving a
forward filter with one step of look-ahead:

    a = π₀
    for j = 1..n:
        look = P[:, x_{j+1}] if j < n else 1
        w[c] = Σ_b a[b]·kinv[c,b]·look[b] · k[x_j, c]        y_j ~ w / Σ w
        a    = (a ∘ kinv[y_j, :]) · k[x_j, y_j] @ P            (rescaled: only ratios matter)

O(n·m²) per record; y_j needs x_{j+1}, i.e. one row of latency.

**Feasibility.** E_i exists iff q ≥ 0 on all mⁿ outputs (ε ≥ ε̃_X); correlated priors shrink the
range sharply (§7.5 example: δ ≤ 2.9 % per row). There is no cheap certificate for large n, so the
constructor checks q ≥ 0 by enumeration and refuses records with mⁿ > :data:`MAX_ENUMERATION`
(fail closed). Feasibility at n implies it at every shorter record (q's marginals are those of the
shorter prior), so records of any length ≤ n may be sampled. A negative w at run time (rounding
beyond tolerance) raises :class:`DesignError` rather than release anything.

**Draws.** Each row uses one 64-bit word of a :class:`~streamguard.sampling.BitSource`: the
conditional law w/Σw is quantised to integer counts over 2⁶³ (floor, a positive entry never below
one count, the remainder to the largest entry) and the row releases the first c with
(word >> 1) < C_c, the cumulative counts — no float uniform. Unlike the per-row tables
(:mod:`.dyadic`), these conditionals are computed in floating point, so the realised mechanism is
E_i up to ~1e−15 relative rounding and the 2⁻⁶³ quantisation. To absorb that, the sampler is
designed at ε/(1 + 1e−9) and *claims* ε: :meth:`MarkovPriorSampler.realised_table` gives the
exact rational law of what is drawn, for checking that claim on small records.

Guarantees are per record; records of one stream compose, and correlation across records is
outside paper 001 (notes/001 §11).
"""

from __future__ import annotations

import math
from fractions import Fraction
from itertools import product

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import dyadic
from ..support.jit import kernel
from ..model.chain import MarkovChain
from ..sampling import BitSource, CsprngSource
from .identifiability import alpha_of, eps_x, output_law
from .model import DesignError, require_level
from .randomized_response import check_distortion, check_epsilon, h, h_inv

#: Largest mⁿ for which the constructor enumerates q = K⁻¹ p_X to certify feasibility.
MAX_ENUMERATION = 1 << 18
#: The sampler is designed at ε/(1 + DESIGN_SLACK) and claims ε.
DESIGN_SLACK = 1e-9
#: A conditional weight below −NEGATIVE_TOL·Σ|w| means E_i does not exist for this record.
NEGATIVE_TOL = 1e-9

_SCALE_BITS = 63
_ONE = 1 << _SCALE_BITS
_ONE_F = float(_ONE)


def markov_prior_tensor(chain: MarkovChain, n: int) -> NDArray[np.float64]:
    """p_X of a record of n rows as an array of shape (k,)*n (row 1 on axis 0)."""
    p = np.array(chain.initial, dtype=np.float64)
    for _ in range(n - 1):
        p = p[..., None] * chain.matrix[(None,) * (p.ndim - 1)]
    return p


@kernel
def _weights(a, kinv, k, P, xj, xnext, w):  # pragma: no cover - compiled
    m = a.shape[0]
    for c in range(m):
        s = 0.0
        for b in range(m):
            look = P[b, xnext] if xnext >= 0 else 1.0
            s += a[b] * kinv[c, b] * look
        w[c] = s * k[xj, c]


@kernel
def _counts(w, tol, cum):  # pragma: no cover - compiled
    """Cumulative integer counts over 2⁶³ of w / Σw into ``cum``; False if w is infeasible."""
    m = w.shape[0]
    total = 0.0
    size = 0.0
    for c in range(m):
        total += max(w[c], 0.0)
        size += abs(w[c])
    if not total > 0.0:
        return False
    biggest = 0
    used = 0
    for c in range(m):
        if w[c] < -tol * size:
            return False
        p = max(w[c], 0.0) / total
        cnt = np.uint64(p * 9223372036854775808.0) if p < 1.0 else np.uint64(9223372036854775808)
        if p > 0.0 and cnt == 0:
            cnt = np.uint64(1)
        cum[c] = cnt
        used += cnt
        if w[c] > w[biggest]:
            biggest = c
    cum[biggest] += np.uint64(9223372036854775808) - np.uint64(used)
    for c in range(1, m):
        cum[c] += cum[c - 1]
    return True


@kernel
def _advance(a, kinv, k, P, xj, yj, tmp):  # pragma: no cover - compiled
    m = a.shape[0]
    scale = 0.0
    for b2 in range(m):
        s = 0.0
        for b in range(m):
            s += a[b] * kinv[yj, b] * P[b, b2]
        tmp[b2] = s * k[xj, yj]
        scale = max(scale, abs(tmp[b2]))
    for b in range(m):
        a[b] = tmp[b] / scale


@kernel
def _sample_kernel(x, words, pi0, kinv, k, P, tol, out):  # pragma: no cover - compiled
    """Rows of x (records × length) → out; returns the first infeasible record index, or −1."""
    r, n = x.shape
    m = pi0.shape[0]
    a = np.empty(m)
    w = np.empty(m)
    tmp = np.empty(m)
    cum = np.empty(m, dtype=np.uint64)
    for i in range(r):
        for b in range(m):
            a[b] = pi0[b]
        for j in range(n):
            xnext = x[i, j + 1] if j + 1 < n else -1
            _weights(a, kinv, k, P, x[i, j], xnext, w)
            if not _counts(w, tol, cum):
                return i
            u = words[i * n + j] >> np.uint64(1)
            c = 0
            while c < m - 1 and u >= cum[c]:
                c += 1
            out[i, j] = c
            _advance(a, kinv, k, P, x[i, j], c, tmp)
    return -1


class MarkovPriorSampler:
    """E_i under a Markov-chain prior for records of up to ``n`` rows; exactly one of ``epsilon``
    (identifiability level, claimed) or ``distortion`` (expected changed rows per record, ≤ n).

    Raises :class:`DesignError` for a bad budget (a finite ε above :data:`.model.MAX_LEVEL`, or one
    so large — or a D so small — that e^{−ε} underflows and the kernel would be the identity), for
    mⁿ > :data:`MAX_ENUMERATION` (feasibility cannot be certified), or when E_i does not exist at this
    budget (D > h(ε̃_X)).
    """

    def __init__(self, chain: MarkovChain, n: int, *, epsilon: float | None = None,
                 distortion: float | None = None) -> None:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise DesignError(f"record length n must be an integer ≥ 1, got {n!r}")
        if (epsilon is None) == (distortion is None):
            raise DesignError("MarkovPriorSampler: give exactly one of epsilon and distortion")
        m = chain.k
        if m**n > MAX_ENUMERATION:
            raise DesignError(f"feasibility of E_i for {m}^{n} outputs cannot be certified (limit {MAX_ENUMERATION}); "
                              "use shorter records")
        if np.any(chain.initial <= 0) or np.any(chain.matrix <= 0):
            raise DesignError("E_i needs a prior with full support: every initial and transition probability > 0")
        if epsilon is not None:
            self.epsilon = require_level(check_epsilon(epsilon))
            if self.epsilon == math.inf:
                raise DesignError("epsilon = inf gives the identity (raw values released); use a finite budget")
            design = self.epsilon / (1.0 + DESIGN_SLACK)
        else:
            D = check_distortion(distortion, n)  # type: ignore[arg-type]
            if D == 0:
                raise DesignError("distortion D = 0 gives the identity (raw values released)")
            design = h_inv(D, m, n)
            self.epsilon = design * (1.0 + DESIGN_SLACK)
        if math.exp(-design) == 0.0:
            raise DesignError(f"ε = {design:.6g}: e^(−ε) underflows to 0, so E_i's kernel would be the identity "
                              "(raw values released); refused")
        self.chain, self.n, self.m = chain, int(n), m
        prior = markov_prior_tensor(chain, self.n)
        if output_law(prior, design) is None:
            raise DesignError(f"E_i does not exist for this Markov prior at ε = {design:.6g} (D = {h(design, m, self.n):.6g} "
                              "exceeds h(ε̃_X)); lower the distortion or raise ε")
        self.design_epsilon = design
        #: Expected Hamming distortion per record of n rows, n·δ = h(ε).
        self.distortion = h(design, m, self.n)
        #: ε_X of the record prior; E_i's DP level is design ε + ε_X when q > 0 (notes/001 §6.2).
        self.eps_x = eps_x(prior)
        alpha = alpha_of(design, m)
        t = math.exp(-design)
        self._k = np.full((m, m), t / (1.0 + (m - 1) * t))
        np.fill_diagonal(self._k, 1.0 / (1.0 + (m - 1) * t))
        self._kinv = (np.eye(m) - (1.0 - alpha) / m) / alpha
        self._pi0 = np.ascontiguousarray(chain.initial, dtype=np.float64)
        self._P = np.ascontiguousarray(chain.matrix, dtype=np.float64)

    def _records(self, x: ArrayLike) -> NDArray[np.int64]:
        raw = np.asarray(x)
        if raw.dtype.kind not in "iu":
            raise ValueError(f"records must be integer states, got dtype {raw.dtype}; refusing to sample")
        if raw.ndim not in (1, 2) or raw.shape[-1] < 1 or raw.shape[-1] > self.n:
            raise ValueError(f"records must have 1..{self.n} rows (shape (rows,) or (records, rows)), got {raw.shape}")
        bad = int(np.count_nonzero((raw < 0) | (raw >= self.m)))
        if bad:
            raise ValueError(f"{bad} row(s) have a state outside 0..{self.m - 1}; refusing to sample")
        return np.ascontiguousarray(np.atleast_2d(raw), dtype=np.int64)

    def sample(self, x: ArrayLike, source: BitSource | None = None) -> NDArray[np.int64]:
        """Released records for one record (shape (rows,)) or a batch (records, rows), one word of
        ``source`` (default: the OS CSPRNG) per row."""
        recs = self._records(x)
        src = CsprngSource() if source is None else source
        words = np.ascontiguousarray(src.words(recs.size), dtype=np.uint64)
        out = np.empty_like(recs)
        bad = _sample_kernel(recs, words, self._pi0, self._kinv, self._k, self._P, NEGATIVE_TOL, out)
        if bad >= 0:
            raise DesignError(f"record {bad}: E_i's conditional law went negative (infeasible prior/budget); "
                              "nothing released")
        return out if np.ndim(x) == 2 else out[0]

    def conditional_counts(self, x: ArrayLike, prefix: ArrayLike) -> list[int]:
        """The integer counts over 2⁶³ (per output value) the sampler draws row len(prefix) + 1 of
        record x from, after releasing ``prefix`` — exactly the arithmetic of :meth:`sample`."""
        xs = self._records(x)[0]
        ys = [int(v) for v in np.asarray(prefix, dtype=np.int64)]
        if len(ys) >= xs.size:
            raise ValueError("prefix must be shorter than the record")
        a, w, tmp = self._pi0.copy(), np.empty(self.m), np.empty(self.m)
        cum = np.empty(self.m, dtype=np.uint64)
        for j in range(len(ys) + 1):
            xnext = int(xs[j + 1]) if j + 1 < xs.size else -1
            _weights(a, self._kinv, self._k, self._P, int(xs[j]), xnext, w)
            if j == len(ys):
                break
            _advance(a, self._kinv, self._k, self._P, int(xs[j]), ys[j], tmp)
        if not _counts(w, NEGATIVE_TOL, cum):
            raise DesignError("E_i's conditional law went negative (infeasible prior/budget)")
        return [int(c) for c in np.diff(cum, prepend=np.uint64(0))]

    def realised_table(self, length: int | None = None) -> list[list[Fraction]]:
        """The exact law of what :meth:`sample` draws for records of ``length`` rows (default n):
        rows x, columns y, both lexicographic, as rationals (products of counts / 2⁶³). For small
        records only (mⁿ × mⁿ entries; the check of the claim on small n)."""
        L = self.n if length is None else length
        if self.m ** (2 * L) > 1 << 16:
            raise ValueError(f"realised_table enumerates m^(2n) = {self.m ** (2 * L)} entries; limit 65536")
        table = []
        for x in product(range(self.m), repeat=L):
            row = [Fraction(1)]
            for j in range(L):
                row = [mass * Fraction(cnt, _ONE)
                       for prefix_index, mass in enumerate(row)
                       for cnt in self.conditional_counts(x, _digits(prefix_index, self.m, j))]
            table.append(row)
        return table


    def realised_levels(self, length: int | None = None) -> tuple[dyadic.Ratio, Fraction]:
        """Exact (identifiability ratio, expected Hamming distortion) of :meth:`realised_table` under
        the chain's prior taken exactly from its floats: max over outputs y with P(y) > 0 and
        neighbours x ~ x' (records differing in one row) of P(x)W(y|x) / (P(x')W(y|x')), and
        Σ P(x)W(y|x)d(x,y). The claim holds iff ``dyadic.within(ratio, self.epsilon)``."""
        L = self.n if length is None else length
        table = self.realised_table(L)
        pi0 = [Fraction(float(v)) for v in self.chain.initial]
        P = [[Fraction(float(v)) for v in row] for row in self.chain.matrix]
        records = list(product(range(self.m), repeat=L))
        prior = []
        for x in records:
            mass = pi0[x[0]]
            for a, b in zip(x, x[1:]):
                mass *= P[a][b]
            prior.append(mass)
        total = sum(prior)
        position = {x: i for i, x in enumerate(records)}
        worst: dyadic.Ratio = Fraction(1)
        for y in range(len(records)):
            joint = [prior[i] * table[i][y] for i in range(len(records))]
            if max(joint) == 0:
                continue
            for i, x in enumerate(records):
                for row in range(L):
                    for v in range(self.m):
                        if v == x[row]:
                            continue
                        other = joint[position[x[:row] + (v,) + x[row + 1:]]]
                        ratio = math.inf if other == 0 and joint[i] > 0 else (joint[i] / other if other else Fraction(1))
                        worst = max(worst, ratio)
        dist = sum(prior[i] * table[i][j] * sum(a != b for a, b in zip(x, y))
                   for i, x in enumerate(records) for j, y in enumerate(records)) / total
        return worst, dist


def _digits(index: int, base: int, width: int) -> list[int]:
    """The base-``base`` digits of ``index``, most significant first, ``width`` of them."""
    out = []
    for _ in range(width):
        index, d = divmod(index, base)
        out.append(d)
    return out[::-1]
