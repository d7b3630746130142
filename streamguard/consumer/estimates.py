"""Estimates that correct for the privatization (issue 14), one function per mechanism.

Every estimate targets the *realised* share of each state among the records received (what
happened in the stream, e.g. "how often was the room occupied this hour"), and every interval is
a 95% interval for it:

- **redaction** (:func:`redaction_shares`): the posterior mean of each state's count given
  everything released, under the published model and the rows actually used
  (:mod:`.posterior`); the interval is mean ± z·sd with the exact posterior sd (a normal
  approximation of the posterior of a count), clipped to what the released records allow. Given
  the model, this is a Bayesian interval whose frequentist coverage over streams drawn from the
  model is its level (checked in simulation: tests/test_consumer_coverage.py, benchmarks).
  The naive share (released records only) is reported beside it. Transition rates: the posterior
  expected transition counts, normalised per row, with 95% intervals from the quantiles of the
  realised rates of paths drawn from the posterior (forward filtering, backward sampling).
  Under a time-of-day **set-chain** (``consume --model MODEL.json``, :func:`setchain_shares`):
  the same posterior with one kernel per step (its block's), the estimate under the set's center
  member, the interval the union over the center and extreme members — a heuristic over vertices
  of the sets, not a certified bound (docs/consumer-guide.md §3b).
- **channel** (:func:`channel_shares`): least squares with the published matrix. With q̂ the
  output frequencies of the N released records and C_x the output law of state x, E[q̂ | X] =
  Cᵀ p (p the realised shares), so p̂ = (Cᵀ)⁺ q̂ is unbiased given X; given X the outputs are
  independent, Cov(q̂ | X) = (1/N) Σ_x p_x (diag C_x − C_x C_xᵀ), and Cov(p̂) = A Cov(q̂) Aᵀ with
  A = (Cᵀ)⁺ (plug-in p̂ clipped to the simplex). No Markov model is needed. A channel whose
  matrix has rank < k cannot be inverted: the estimate is refused (None).
- **aggregates** (:func:`aggregate_shares`): the sum of the noisy counts over windows is unbiased
  for the true count with exact variance Σ Var Z (discrete Laplace: 2τ/(1 − τ)², τ = e^{−1/β'},
  in lattice steps); a histogram's shares are the ratio C_s / Σ C (delta method). Clipping a count
  to [0, states] or a share to [0, 1] is post-processing and changes nothing about privacy; the
  estimate itself is not clipped (clipping would bias it), only the interval's ends.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..model.setchain import SetChain
from ..quilt.noise import DiscreteLaplace
from .messages import Record, Window
from .model import PublishedModel, StatusError
from .posterior import REDACTED, UNKNOWN, Posterior, posterior, sample_paths
from .timevarying import SetChainModel, members

#: Two-sided 95% normal quantile.
Z95 = 1.959963984540054
#: Posterior paths drawn for the transition intervals.
TRANSITION_DRAWS = 400


@dataclass
class Shares:
    """Estimated share of each state (label order) with 95% intervals, and the naive share."""

    frequency: list[float | None]
    frequency_ci: list[list[float] | None]
    naive: list[float] | None
    method: str
    extra: dict[str, Any] = field(default_factory=dict)
    #: Standard deviation of each share's estimate (None where there is no estimate).
    sd: list[float | None] = field(default_factory=list)
    #: The number of records (or counted states) the shares are over.
    n: int = 0


def _interval(est: NDArray[np.float64], sd: NDArray[np.float64], lo: NDArray[np.float64],
              hi: NDArray[np.float64]) -> list[list[float]]:
    return [[float(max(l_, e - Z95 * s)), float(min(h_, e + Z95 * s))] for e, s, l_, h_ in zip(est, sd, lo, hi)]


def state_index(labels: Sequence[Any]) -> dict[Any, int]:
    return {lab: i for i, lab in enumerate(labels)}


def redaction_observations(records: Sequence[Record], labels: Sequence[Any]) -> tuple[
        NDArray[np.int64], NDArray[np.float64], NDArray[np.bool_], int]:
    """The positions first..last of the records (by published ``position``; records without one
    are placed by seq): observation codes, rows and which positions are records, and the first
    position. Positions without a record (rejected frames, missing readings, lost records) are
    UNKNOWN (emission 1: no information, and loss in transit does not depend on the value)."""
    k = len(labels)
    pos = [r.position if r.position is not None else r.seq for r in records]
    first, n = min(pos), max(pos) - min(pos) + 1
    obs = np.full(n, UNKNOWN, dtype=np.int64)
    rows = np.ones((n, k))
    counted = np.zeros(n, dtype=bool)
    index = state_index(labels)
    for r, p in zip(records, pos):
        t = p - first
        if r.row is None or len(r.row) != k:
            raise StatusError(f"record seq {r.seq}: its redaction row does not have {k} entries")
        rows[t] = r.row
        counted[t] = True
        if r.redacted:
            obs[t] = REDACTED
        elif r.value in index:
            obs[t] = index[r.value]
        else:
            raise StatusError(f"record seq {r.seq}: its value is not one of the status's labels")
    return obs, rows, counted, first


def _segments(first: int, n: int, restarts: Collection[int]) -> list[tuple[int, int]]:
    """[a, b) index ranges of the positions first..first+n−1 split at the restart positions."""
    cuts = sorted({b - first for b in restarts if first < b < first + n})
    return list(zip([0, *cuts], [*cuts, n]))


#: What an estimate is corrected under: the status's homogeneous chain, or one member of a
#: time-of-day set-chain (:mod:`.timevarying`); both give the kernels and first law of a segment.
EstimationModel = PublishedModel | SetChainModel


def _anchor(records: Sequence[Record]) -> tuple[int, float]:
    """(position, epoch) of the first record: the clock of a time-varying model's steps."""
    r = min(records, key=lambda r: r.position if r.position is not None else r.seq)
    return (r.position if r.position is not None else r.seq), float(r.ts)


def redaction_posterior(records: Sequence[Record], labels: Sequence[Any], model: EstimationModel,
                        restarts: Collection[int] = ()) -> Posterior:
    """The posterior of the records' states. A restart position b (published by the status) ends
    the chain before it: an unknown number of readings were lost there, so the records from b on
    are solved as a new segment, independent of what came before, whose first law is the model's
    law at b (:meth:`PublishedModel.law_at`; the gap's length is unknown, so the stated initial law
    moved b steps stands in for it; a set-chain member's law at b's clock,
    :meth:`.timevarying.SetChainModel.law_at_ts`)."""
    obs, rows, counted, first = redaction_observations(records, labels)
    k = len(labels)
    anchor = _anchor(records)
    parts = [posterior(*model.segment(first + a, b - a, anchor), obs[a:b], rows[a:b], counted[a:b])
             for a, b in _segments(first, obs.shape[0], restarts)]
    if len(parts) == 1:
        return parts[0]
    trans = sum((p.transitions for p in parts), np.zeros((k, k)))
    return Posterior(np.vstack([p.marginals for p in parts]), sum((p.count_mean for p in parts), np.zeros(k)),
                     sum((p.count_var for p in parts), np.zeros(k)), trans, sum(p.counted for p in parts))


def transition_intervals(records: Sequence[Record], labels: Sequence[Any], model: EstimationModel,
                         restarts: Collection[int] = (), draws: int = TRANSITION_DRAWS,
                         seed: int = 0) -> list[list[list[float] | None]]:
    """95% intervals for the realised transition rates Pr(X_{t+1} = y | X_t = x) over the records'
    consecutive positions: the 2.5% and 97.5% quantiles of the rates of ``draws`` paths drawn from
    the posterior (:func:`.posterior.sample_paths`; seeded, so a report is reproducible). None for
    a state no draw visits."""
    obs, rows, _, first = redaction_observations(records, labels)
    k = len(labels)
    rng = np.random.default_rng(seed)
    counts = np.zeros((draws, k, k))
    anchor = _anchor(records)
    for a, b in _segments(first, obs.shape[0], restarts):
        paths = sample_paths(*model.segment(first + a, b - a, anchor), obs[a:b], rows[a:b], draws, rng)
        for x in range(k):
            for y in range(k):
                counts[:, x, y] += ((paths[:, :-1] == x) & (paths[:, 1:] == y)).sum(axis=1)
    out: list[list[list[float] | None]] = []
    for x in range(k):
        row: list[list[float] | None] = []
        total = counts[:, x, :].sum(axis=1)
        for y in range(k):
            ok = total > 0
            if not ok.any():
                row.append(None)
                continue
            rate = counts[ok, x, y] / total[ok]
            row.append([float(np.quantile(rate, 0.025)), float(np.quantile(rate, 0.975))])
        out.append(row)
    return out


def _released(records: Sequence[Record], labels: Sequence[Any]) -> NDArray[np.float64]:
    """The number of released records of each state."""
    released = np.zeros(len(labels))
    index = state_index(labels)
    for r in records:
        if not r.redacted:
            released[index[r.value]] += 1
    return released


def redaction_shares(records: Sequence[Record], labels: Sequence[Any], model: EstimationModel,
                     restarts: Collection[int] = ()) -> Shares:
    """Corrected shares of a redaction stream (module docstring), under one model (the status's
    chain, or one member of a set-chain)."""
    post = redaction_posterior(records, labels, model, restarts)
    N = post.counted
    released = _released(records, labels)
    hidden = N - released.sum()
    est = post.count_mean / N
    sd = np.sqrt(post.count_var) / N
    naive = released / released.sum() if released.sum() else None
    trans = post.transitions
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = trans / trans.sum(axis=1, keepdims=True)
    method = ("posterior (forward-backward, published model and rows)" if isinstance(model, PublishedModel)
              else f"posterior (forward-backward, time-of-day set-chain member '{model.name}', published rows)")
    return Shares(est.tolist(), _interval(est, sd, released / N, (released + hidden) / N),
                  None if naive is None else naive.tolist(), method,
                  {"transitions": [[None if not np.isfinite(v) else float(v) for v in row] for row in rate]},
                  sd.tolist(), N)


def setchain_shares(records: Sequence[Record], labels: Sequence[Any], sc: SetChain,
                    restarts: Collection[int] = ()) -> Shares:
    """Corrected shares under a time-of-day set-chain (docs/consumer-guide.md §3b).

    Estimand: as everywhere here, the realised share of each state among the records. Estimate: the
    posterior mean under the set's center member (:meth:`.timevarying.SetChainModel.center`, the
    kernel of each step from its block). Interval for the share of s: the union of the 95%
    posterior intervals (mean ± z·sd, exact posterior sd) under the center and the two extreme
    members for s (every block's row set pushed toward s and away from s), clipped to what the
    released records allow. It covers the posterior (sampling) uncertainty under each of those
    members and the spread of the estimate between them; it is a heuristic over those vertices,
    not a certified bound over every kernel sequence in the sets (:mod:`.timevarying`). ``sd`` is
    the larger distance from the estimate to an end of the union, over z (so :func:`combine`'s
    symmetric interval contains the union); ``extra["members"]`` the mean under each member."""
    if tuple(str(x) for x in labels) != sc.labels:
        raise StatusError("the set-chain model's labels differ from the stream's labels")
    center, pairs = members(sc)
    base = redaction_shares(records, labels, center, restarts)
    N = base.n
    released = _released(records, labels)
    lo_clip, hi_clip = released / N, (N - released.sum() + released) / N
    est = np.asarray(base.frequency, dtype=np.float64)
    sd0 = np.asarray(base.sd, dtype=np.float64)
    lo, hi = est - Z95 * sd0, est + Z95 * sd0
    solved: dict[bytes, Posterior] = {}
    means: dict[str, list[float]] = {}
    for s, pair in enumerate(pairs):
        for m in pair:
            key = m.kernels.tobytes()
            if key not in solved:
                solved[key] = redaction_posterior(records, labels, m, restarts)
            post = solved[key]
            mean_s, sd_s = post.count_mean[s] / N, np.sqrt(post.count_var[s]) / N
            lo[s], hi[s] = min(lo[s], mean_s - Z95 * sd_s), max(hi[s], mean_s + Z95 * sd_s)
            means[m.name] = (post.count_mean / N).tolist()
    lo, hi = np.maximum(lo, lo_clip), np.minimum(hi, hi_clip)
    sd = np.maximum(est - lo, hi - est) / Z95
    base.frequency_ci = [[float(a), float(b)] for a, b in zip(lo, hi)]
    base.sd = sd.tolist()
    base.method = ("posterior (forward-backward) under a time-of-day set-chain: estimate under its center member, "
                   "95% interval the union over the center and each state's extreme members (heuristic over "
                   "vertices, not a certified bound)")
    base.extra["members"] = {"center": base.frequency, **means}
    return base


def channel_matrix(status: dict[str, Any], k: int) -> NDArray[np.float64]:
    """The published channel as Pr(output | state) with k rows; a channel that reads S as well is
    averaged over S given X with the published joint P(S, X)."""
    ch = status.get("channel")
    if not isinstance(ch, dict) or "matrix" not in ch:
        raise StatusError("privacy status has no 'channel.matrix'")
    C = np.asarray(ch["matrix"], dtype=np.float64)
    if ch.get("inputs") == "sx":
        joint = np.asarray(status.get("joint"), dtype=np.float64)
        n_s = joint.shape[0]
        if joint.shape != (n_s, k) or C.shape[0] != n_s * k:
            raise StatusError("privacy status: 'joint' and 'channel.matrix' do not fit the stream's states")
        px = joint.sum(axis=0)
        cond = np.divide(joint, px, out=np.zeros_like(joint), where=px > 0)  # P(s | x)
        C = np.einsum("sx,sxy->xy", cond, C.reshape(n_s, k, -1))
    if C.ndim != 2 or C.shape[0] != k:
        raise StatusError(f"privacy status: 'channel.matrix' does not have {k} rows")
    return C


def channel_shares(records: Sequence[Record], C: NDArray[np.float64]) -> Shares | None:
    """Debiased shares of a channel stream's released records (module docstring); None if the
    channel cannot be inverted (rank < k) or nothing was released."""
    k, m = C.shape
    outputs = [r.output for r in records if not r.redacted and r.output is not None]
    N = len(outputs)
    if N == 0 or np.linalg.matrix_rank(C) < k:
        return None
    if max(outputs) >= m:
        raise StatusError("a channel record's output index is outside the published output alphabet")
    q = np.bincount(outputs, minlength=m) / N
    A = np.linalg.pinv(C.T)
    est = A @ q
    p = np.clip(est, 0, None)
    p = p / p.sum() if p.sum() > 0 else np.full(k, 1 / k)
    cov_q = sum(p[x] * (np.diag(C[x]) - np.outer(C[x], C[x])) for x in range(k)) / N
    sd = np.sqrt(np.maximum(np.diag(A @ cov_q @ A.T), 0))
    # the naive share reads each output as its own state (a merged output counts for none)
    naive = np.zeros(k)
    if C.shape[1] == k:
        naive = np.bincount(outputs, minlength=k)[:k] / N
    return Shares(est.tolist(), _interval(est, sd, np.zeros(k), np.ones(k)),
                  naive.tolist() if C.shape[1] == k else None, "least squares with the published channel matrix",
                  sd=sd.tolist(), n=N)


def window_variance(body: dict[str, Any]) -> float:
    """Exact variance of one published value's noise, in the query's units."""
    law = DiscreteLaplace(int(body["noise_num"]), int(body["noise_den"]))
    return float(body["grid"]) ** 2 * law.variance()


def aggregate_shares(windows: Sequence[Window], k: int) -> Shares | None:
    """Shares from a stream's histogram windows, else from its count windows (the counted state's
    share only; the others are None). Windows whose number of states is unknown are skipped."""
    hist = [w for w in windows if w.body.get("kind") == "histogram" and isinstance(w.body.get("states"), int)]
    if hist:
        C = np.sum([np.asarray(w.body["values"], dtype=np.float64) for w in hist], axis=0)
        var = np.sum([window_variance(w.body) for w in hist])  # per bin, i.i.d. across bins
        n = float(sum(w.body["states"] for w in hist))
        est = C / n
        sd = np.full(k, np.sqrt(var) / n)
        return Shares(est.tolist(), _interval(est, sd, np.zeros(k), np.ones(k)), None,
                      "sum of noisy histogram windows / states counted (exact discrete Laplace variance)",
                      {"windows": len(hist), "states": int(n)}, sd.tolist(), int(n))
    counts = [w for w in windows if w.body.get("kind") == "count" and isinstance(w.body.get("states"), int)]
    if not counts:
        return None
    s = int(counts[0].body["query"]["state"])
    counts = [w for w in counts if int(w.body["query"]["state"]) == s]
    n = float(sum(w.body["states"] for w in counts))
    c = float(sum(w.body["values"][0] for w in counts))
    sd = np.sqrt(sum(window_variance(w.body) for w in counts)) / n
    freq: list[float | None] = [None] * k
    ci: list[list[float] | None] = [None] * k
    sds: list[float | None] = [None] * k
    freq[s], sds[s] = c / n, float(sd)
    ci[s] = _interval(np.array([c / n]), np.array([sd]), np.zeros(1), np.ones(1))[0]
    return Shares(freq, ci, None, "sum of noisy count windows / states counted (exact discrete Laplace variance)",
                  {"windows": len(counts), "states": int(n), "state": s}, sds, int(n))


def combine(parts: Sequence[Shares]) -> Shares:
    """Shares over several independent devices' records: the record-weighted mean of their
    estimates, sd = sqrt(Σ (n_d/N)² sd_d²), the interval ± z·sd clipped to [0, 1]."""
    N = sum(p.n for p in parts)
    k = len(parts[0].frequency)
    freq: list[float | None] = []
    sds: list[float | None] = []
    for x in range(k):
        if N == 0 or any(p.frequency[x] is None or p.sd[x] is None for p in parts):
            freq.append(None)
            sds.append(None)
            continue
        freq.append(sum(p.n * p.frequency[x] for p in parts) / N)  # type: ignore[operator]
        sds.append(float(np.sqrt(sum((p.n / N) ** 2 * p.sd[x] ** 2 for p in parts))))  # type: ignore[operator]
    ci: list[list[float] | None] = [
        None if f is None or s_ is None else [max(0.0, f - Z95 * s_), min(1.0, f + Z95 * s_)]
        for f, s_ in zip(freq, sds)]
    naive = None
    if all(p.naive is not None for p in parts) and N:
        naive = [sum(p.n * p.naive[x] for p in parts) / N for x in range(k)]  # type: ignore[index]
    return Shares(freq, ci, naive, parts[0].method + f", combined over {len(parts)} devices", {}, sds, N)


def aggregate_summary(windows: Sequence[Window]) -> list[dict[str, Any]]:
    """Per aggregate query of a stream: the total over its windows, unbiased, with the exact sd of
    the noise (independent across windows and bins) and a 95% interval — the noisy counts summed
    (histogram: per state; count: the counted state) or, for a mean query, the mean over every
    state counted, Σ_j m_j·n_j / Σ_j n_j with sd sqrt(Σ_j n_j² Var_j) / Σ_j n_j (n_j the window's
    ``states``). Partial windows are counted like any other (they are shorter windows)."""
    by_query: dict[int, list[Window]] = {}
    for w in windows:
        by_query.setdefault(w.index, []).append(w)
    out = []
    for q, ws in sorted(by_query.items()):
        ws = [w for w in ws if isinstance(w.body.get("states"), int) and w.body["states"] > 0]
        if not ws:
            continue
        kind = ws[0].body.get("kind")
        n = int(sum(w.body["states"] for w in ws))
        entry: dict[str, Any] = {"query": q, "kind": kind, "windows": len(ws),
                                 "partial": sum(bool(w.body.get("partial")) for w in ws), "states": n}
        if kind == "mean":
            est = sum(w.body["values"][0] * w.body["states"] for w in ws) / n
            sd = math.sqrt(sum(w.body["states"] ** 2 * window_variance(w.body) for w in ws)) / n
            entry.update(mean=est, mean_ci=[est - Z95 * sd, est + Z95 * sd])
        else:
            total = np.sum([np.asarray(w.body["values"], dtype=np.float64) for w in ws], axis=0)
            sd = math.sqrt(sum(window_variance(w.body) for w in ws))
            entry.update(sum=total.tolist(), sum_ci=[[float(t - Z95 * sd), float(t + Z95 * sd)] for t in total])
            if kind == "count":
                entry["state_label"] = ws[0].body.get("state_label")
        out.append(entry)
    return out
