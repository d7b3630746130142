"""Model selection for ``streamguard calibrate`` (issue 25 item 1; docs/model-selection.md).

From one recording, decide which departures from a homogeneous first-order chain the data show,
each by a stated test at level ``level``, and put every departure kept inside a set-chain
(:class:`.setchain.SetChain`: per time-of-day block, a row-wise box of kernels, chosen anew at
every step). The set-chain plans certify every fixed kernel sequence in the sets (time of day and
drift); a kernel that depends on the hidden previous state (second order) is in the sets but not
in that certificate (docs/time-varying.md §4): the fit table says so.

Tests (Pearson's X² for homogeneity of count tables, referred to χ² with the stated degrees of
freedom; a row only counts where it has data). X² rather than the likelihood-ratio G: on a
homogeneous chain (200 seeds, below) G kept false effects in 7.5–10.5 % of recordings at level
0.05 and X² in 4.5–7.5 %; on the sparse real tables X² is the larger statistic (keeps effects:
covers more). Over-dispersion of dependent counts can only make a test reject more often, i.e.
keep an effect and cover more:

1. **second order**, inside each hour of the day (so that time-of-day variation is not taken for
   it): P(x_t | x_{t−1} = b, x_{t−2} = a) against P(x_t | b), one row per a. When it is kept, the
   next two tests compare the rows after (a, b) instead of after b (the second-order dependence
   would otherwise show as spurious variation between hours and days).
2. **time of day** (24 h cycle, local clock = ts + ``utc_offset``): one row pooled over hours
   against one per hour. Kept → blocks: adjacent hours (on the circle) are merged greedily, the
   pair whose two-sample X² test has the largest p-value first, while that p-value is ≥ ``level``
   (a block with fewer than ``min_block_transitions`` transitions is merged whatever the test).
   Dropped → one block.
3. **drift between days**: inside each block, per row, one row against one per calendar day
   (local clock).

Measured on a homogeneous chain (α = 0.05, β = 0.2, 14 days of 60 s steps, 200 seeds, level 0.05):
the tests keep a false effect in 6 % (time of day), 7.5 % (drift), 4.5 % (second order) of the
recordings; more than one block in 6 %.

Sets. Each block's row b is the hull (entrywise [min lo, max hi]) of the confidence sets of its
*cells*: one cell when neither drift nor second order is kept; with drift, consecutive days
grouped until a group has ≥ ``min_visits`` visits of b and ≥ ``min_events`` transitions leaving
b (the last, smaller group joins the one before: a group with no departure would put "never
leaves" in the set on no evidence but its shortness); with second order, one cell per state a
before b (the first transition of a run, whose a is unknown, is left out: its row is one of
theirs). Each cell's set is the mixture-martingale row set of :mod:`.confidence` at
δ / (number of cells) (δ = 1 − confidence; union bound over every cell of every row and block),
projected on the entries. So with probability ≥ confidence, under the
model that the kernel is constant inside each cell, every cell's row lies in its block's box —
the spread across days and previous states is inside the set. A row with no data in a block gets
the whole simplex ([0, 1] entries): never a point estimate.

Too little data: a recording that does not cover every hour of the day on at least ``min_days``
days is refused (:class:`SelectionError`); the homogeneous class stays reachable explicitly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .chain import ModelError
from .confidence import entry_bounds, row_threshold
from .scenarios import Scenarios
from .setchain import Block, SetChain

DAY = 86400.0
HOUR = 3600.0


class SelectionError(ModelError):
    """The recording cannot support the default model (one-line reason)."""


@dataclass(frozen=True)
class Transitions:
    """Transitions of a recording: ``ts`` of each source step (epoch s), and (a, b, c) = (state
    before the source or −1, source state, target state)."""

    ts: NDArray[np.float64]
    prev2: NDArray[np.int64]
    prev: NDArray[np.int64]
    nxt: NDArray[np.int64]

    @classmethod
    def from_lists(cls, ts: list[float], trans: list[tuple[int, int, int]]) -> Transitions:
        t = np.asarray(trans, dtype=np.int64).reshape(-1, 3)
        return cls(np.asarray(ts, dtype=np.float64), t[:, 0].copy(), t[:, 1].copy(), t[:, 2].copy())

    @classmethod
    def from_path(cls, states: NDArray[np.int64], ts: NDArray[np.float64]) -> Transitions:
        """The transitions of one unbroken path ``states`` at times ``ts`` (tests, benchmarks)."""
        s = np.asarray(states, dtype=np.int64)
        prev2 = np.concatenate([[-1], s[:-2]]) if s.size > 1 else np.zeros(0, np.int64)
        return cls(np.asarray(ts, dtype=np.float64)[:-1], prev2.astype(np.int64), s[:-1], s[1:])


@dataclass(frozen=True)
class Test:
    """One X² test: statistic, degrees of freedom, p-value and whether the effect is kept."""

    name: str
    g: float
    df: int
    p: float
    kept: bool

    def as_dict(self) -> dict[str, Any]:
        return {"test": self.name, "X2": self.g, "df": self.df, "p": self.p,
                "decision": "kept" if self.kept else "dropped"}


def chi2_statistic(table: NDArray[np.int64]) -> tuple[float, int]:
    """Pearson's X² and its degrees of freedom for homogeneity of the rows of a (groups × k) count
    table: X² = Σ (n_gj − E_gj)² / E_gj, E_gj = n_g· n_·j / n_··; df = (groups with data − 1)
    (columns with data − 1)."""
    t = np.asarray(table, dtype=np.float64)
    t = t[t.sum(axis=1) > 0]
    t = t[:, t.sum(axis=0) > 0]
    if t.shape[0] < 2 or t.shape[1] < 2:
        return 0.0, 0
    expected = t.sum(axis=1)[:, None] * t.sum(axis=0)[None, :] / t.sum()
    return float(np.sum((t - expected) ** 2 / expected)), (t.shape[0] - 1) * (t.shape[1] - 1)


def _p_value(g: float, df: int) -> float:
    from scipy.stats import chi2  # (calibration only: the daemon's import path stays free of scipy)

    return 1.0 if df == 0 else float(chi2.sf(g, df))


def _rows_test(tables: list[NDArray[np.int64]]) -> tuple[float, int]:
    """Sum of the X² statistics (and df) of several (groups × k) tables (rows × blocks)."""
    gs = [chi2_statistic(t) for t in tables]
    return sum(g for g, _ in gs), sum(d for _, d in gs)


def _grouped(keys: NDArray[np.int64], rows: NDArray[np.int64], dst: NDArray[np.int64], n_rows: int,
             k: int) -> list[NDArray[np.int64]]:
    """Per row r (a source state, or a pair of states): the (distinct keys × k) table of the
    transition counts out of r by key."""
    out = []
    for r in range(n_rows):
        m = rows == r
        if not np.any(m):
            continue
        uniq, inv = np.unique(keys[m], return_inverse=True)
        t = np.zeros((uniq.size, k), dtype=np.int64)
        np.add.at(t, (inv, dst[m]), 1)
        out.append(t)
    return out


def _merge_blocks(hc: NDArray[np.int64], level: float, min_block: int) -> tuple[list[list[int]], list[dict[str, Any]]]:
    """Greedy merging of adjacent hours on the 24 h circle (module docstring, test 1)."""
    blocks = [[h] for h in range(24)]
    merges: list[dict[str, Any]] = []

    def pair_p(a: list[int], b: list[int]) -> float:
        ca, cb = hc[a].sum(axis=0), hc[b].sum(axis=0)
        return _p_value(*_rows_test([np.stack([ca[i], cb[i]]) for i in range(hc.shape[1])]))

    while len(blocks) > 1:
        n = len(blocks)
        ps = [pair_p(blocks[i], blocks[(i + 1) % n]) for i in range(n)]
        small = [i for i in range(n) if hc[blocks[i]].sum() < min_block]
        if small:  # too little data for a block: merge it with its more similar neighbour
            i = small[0]
            j = i if ps[i] >= ps[(i - 1) % n] else (i - 1) % n
        else:
            j = int(np.argmax(ps))
            if ps[j] < level:
                break
        merges.append({"hours": [_span(blocks[j]), _span(blocks[(j + 1) % n])], "p": ps[j],
                       "forced": bool(small)})
        merged = blocks[j] + blocks[(j + 1) % n]
        if j + 1 < n:
            blocks[j:j + 2] = [merged]
        else:  # the last and the first block merge across midnight
            blocks = [merged] + blocks[1:-1]
    return blocks, merges


def _span(hours: list[int]) -> str:
    return f"{hours[0]:02d}–{(hours[-1] + 1) % 24:02d} h"


def _day_groups(days: NDArray[np.int64], left: NDArray[np.bool_], min_visits: int,
                min_events: int) -> NDArray[np.int64]:
    """Group consecutive days until each group has ≥ min_visits transitions of which ≥ min_events
    leave the state (``left``); a trailing group below either minimum joins the one before. A
    group index per transition."""
    uniq, inv = np.unique(days, return_inverse=True)
    visits = np.bincount(inv, minlength=uniq.size)
    events = np.bincount(inv, weights=left.astype(np.float64), minlength=uniq.size)
    gid = np.zeros(uniq.size, dtype=np.int64)
    g, acc, ev = 0, 0, 0.0
    for i in range(uniq.size):
        gid[i] = g
        acc, ev = acc + int(visits[i]), ev + float(events[i])
        if acc >= min_visits and ev >= min_events:
            g, acc, ev = g + 1, 0, 0.0
    if (acc or ev) and g > 0:  # a trailing group below the minimum joins the one before
        gid[gid == g] = g - 1
    return gid[inv]


def _cells(tr: Transitions, m: NDArray[np.bool_], b: int, k: int, days: NDArray[np.int64],
           drift: bool, second: bool, min_visits: int, min_events: int) -> tuple[list[NDArray[np.int64]], int]:
    """The count vectors of the cells of row b in the block mask ``m`` (module docstring), and the
    number of day groups among them (0 without drift)."""
    sel = m & (tr.prev == b)
    nxt = tr.nxt[sel]
    if not (drift or second):
        return [np.bincount(nxt, minlength=k)], 0
    cells: list[NDArray[np.int64]] = []
    if drift:
        groups = _day_groups(days[sel], nxt != b, min_visits, min_events)
        cells += [np.bincount(nxt[groups == g], minlength=k) for g in np.unique(groups)]
    n_groups = len(cells)
    if second:  # one cell per previous state; a run's first transition (no previous state) is
        # one of them, so its row is in their hull: left out
        a = tr.prev2[sel]
        cells += [c for c in (np.bincount(nxt[a == av], minlength=k) for av in range(k)) if c.sum() > 0]
    return cells or [np.zeros(k, dtype=np.int64)], n_groups


def select_setchain(tr: Transitions, labels: tuple[str, ...], sample_period: float, confidence: float,
                    level: float = 0.05, utc_offset: float = 0.0, min_visits: int = 50, min_events: int = 20,
                    min_block_transitions: int = 120, min_days: int = 2) -> SetChain:
    """The default model of a recording (module docstring): a :class:`SetChain` whose
    ``calibration`` holds the fit table (tests, decisions, blocks, what is covered)."""
    if not 0.0 < confidence < 1.0:
        raise ModelError("confidence must lie strictly between 0 and 1")
    if not 0.0 < level < 1.0:
        raise ModelError("the test level must lie strictly between 0 and 1")
    k = len(labels)
    local = tr.ts + utc_offset
    hours = (np.floor(np.mod(local, DAY) / HOUR)).astype(np.int64)
    days = np.floor(local / DAY).astype(np.int64)
    days_per_hour = [np.unique(days[hours == h]).size for h in range(24)]
    if min(days_per_hour) < min_days:
        h = int(np.argmin(days_per_hour))
        raise SelectionError(f"too little data for the time-of-day model: hour {h:02d} h is recorded on "
                             f"{days_per_hour[h]} day(s), at least {min_days} needed (record longer, or "
                             "calibrate --model-class homogeneous)")
    # 1. second order, inside each hour (time-of-day variation is not taken for it)
    known = tr.prev2 >= 0
    second_tables = []
    for h in range(24):
        m = known & (hours == h)
        second_tables += _grouped(tr.prev2[m], tr.prev[m], tr.nxt[m], k, k)
    g, df = _rows_test(second_tables)
    second = Test("second order (rows after (a, b) vs after b, inside each hour)", g, df, _p_value(g, df),
                  _p_value(g, df) < level)
    # the rows the other tests compare: after b, or after (a, b) when second order is kept (its
    # dependence would otherwise show as spurious variation between hours and days)
    use = known if second.kept else np.ones(tr.ts.size, dtype=bool)
    ctx = tr.prev2 * k + tr.prev if second.kept else tr.prev
    n_ctx = k * k if second.kept else k
    # 2. time of day
    hc = np.zeros((24, n_ctx, k), dtype=np.int64)
    np.add.at(hc, (hours[use], ctx[use], tr.nxt[use]), 1)
    g, df = _rows_test([hc[:, c, :] for c in range(n_ctx)])
    tod = Test("time of day (24 hourly rows vs one)", g, df, _p_value(g, df), _p_value(g, df) < level)
    if tod.kept:
        hour_blocks, merges = _merge_blocks(hc, level, min_block_transitions)
    else:
        hour_blocks, merges = [list(range(24))], []
    block_of_hour = np.zeros(24, dtype=np.int64)
    for i, hs in enumerate(hour_blocks):
        block_of_hour[hs] = i
    blk = block_of_hour[hours]
    # 3. drift between days, inside each block
    drift_tables = []
    for i in range(len(hour_blocks)):
        m = (blk == i) & use
        drift_tables += _grouped(days[m], ctx[m], tr.nxt[m], n_ctx, k)
    g, df = _rows_test(drift_tables)
    drift = Test("drift between days (per-day rows vs one, inside each block)", g, df, _p_value(g, df),
                 _p_value(g, df) < level)

    cells = [[_cells(tr, blk == i, b, k, days, drift.kept, second.kept, min_visits, min_events) for b in range(k)]
             for i in range(len(hour_blocks))]
    n_cells = sum(len(c) for rows in cells for c, _ in rows)
    delta_cell = (1.0 - confidence) / n_cells
    per_block = []
    table = []
    for i, hs in enumerate(hour_blocks):
        m = blk == i
        counts = np.zeros((k, k), dtype=np.int64)
        np.add.at(counts, (tr.prev[m], tr.nxt[m]), 1)
        lo, hi = np.zeros((k, k)), np.zeros((k, k))
        rows_info = []
        for b in range(k):
            row_cells, n_groups = cells[i][b]
            bounds = np.stack([entry_bounds(c, row_threshold(c, delta_cell)) for c in row_cells])
            lo[b], hi[b] = bounds[:, :, 0].min(axis=0), bounds[:, :, 1].max(axis=0)
            visits = int(counts[b].sum())
            note = ("no data: the whole simplex" if visits == 0 else
                    "one day group (too few departures to split days: the spread between days is not "
                    "resolved, only the pooled set)" if drift.kept and n_groups == 1 else None)
            rows_info.append({"state": labels[b], "visits": visits, "cells": len(row_cells),
                              "day_groups": n_groups, "lo": lo[b].tolist(), "hi": hi[b].tolist(),
                              **({"note": note} if note else {})})
        visits = counts.sum(axis=1)
        point = counts / visits[:, None] if np.all(visits > 0) else None
        per_block.append((hs, lo, hi, point, int(counts.sum())))
        table.append({"hours": _span(hs), "transitions": int(counts.sum()), "rows": rows_info})

    covered = ["a homogeneous first-order chain inside the sets"]
    if tod.kept:
        covered.append(f"time of day: {len(hour_blocks)} block(s) with their own sets")
    if drift.kept:
        covered.append(f"drift between days: each row's set is the hull of the sets of groups of consecutive days "
                       f"(≥ {min_visits} visits and ≥ {min_events} departures each)")
    if second.kept:
        covered.append("second order, in the sets only: each row's set holds the rows after every previous state; "
                       "the set-chain plans certify fixed kernel sequences, not a kernel that depends on the hidden "
                       "previous state (docs/time-varying.md §4)")
    not_covered = ["variation inside a block, a day group or a cell that the tests did not detect",
                   "effects older than two steps (dwell-time laws beyond second order)"]
    if not drift.kept:
        not_covered.append("drift between days (not detected)")
    if second.kept:
        not_covered.append("second-order dependence in the plans' certificate (needs the pair chain of "
                           "docs/time-varying.md §4)")
    else:
        not_covered.append("second-order dependence (not detected)")
    calibration = {
        "model_class": "setchain", "test_level": level, "confidence": confidence,
        "method": "Pearson X² tests at the stated level; per-cell mixture-martingale row sets (Dirichlet ½) at "
                  "δ / cells, union bound; a row's set is the hull of its cells' sets",
        "tests": [t.as_dict() for t in (tod, drift, second)], "merges": merges,
        "cells": n_cells, "delta_per_cell": delta_cell, "min_visits": min_visits,
        "blocks": table, "covered": covered, "not_covered": not_covered}
    scenarios = Scenarios.from_transitions(tr.ts, tr.prev, tr.nxt, k, utc_offset)
    return SetChain(tuple(labels), float(sample_period), _blocks(per_block), utc_offset=float(utc_offset),
                    calibration=calibration, scenarios=scenarios)


def _blocks(per_block: list[tuple[list[int], Any, Any, Any, int]]) -> tuple[Block, ...]:
    """Blocks starting at local midnight: a block that wraps midnight is stored as two (same sets)."""
    out = []
    for hs, lo, hi, point, n in per_block:
        runs: list[list[int]] = [[hs[0]]]
        for h in hs[1:]:
            if h == runs[-1][-1] + 1:
                runs[-1].append(h)
            else:
                runs.append([h])
        out += [Block(run[0] * HOUR, lo, hi, point, n) for run in runs]
    return tuple(sorted(out, key=lambda b: b.start))


def describe_fit(sc: SetChain) -> str:
    """The fit table of a selected model, as text (``calibrate`` prints it)."""
    cal = sc.calibration or {}
    lines = [f"model class chosen from the data (tests at level {cal.get('test_level')}):"]
    for t in cal.get("tests", []):
        lines.append(f"  {t['test']}: X² = {t['X2']:.1f}, df = {t['df']}, p = {t['p']:.3g} → {t['decision']}")
    lines.append(f"blocks (local time; simultaneous {cal.get('confidence'):g} confidence over "
                 f"{cal.get('cells')} cell set(s)):")
    for blk in cal.get("blocks", []):
        lines.append(f"  {blk['hours']}: {blk['transitions']} transitions")
        for r in blk["rows"]:
            ent = " ".join(f"[{lo:.4f}, {hi:.4f}]" for lo, hi in zip(r["lo"], r["hi"]))
            note = f" ({r['note']})" if "note" in r else ""
            lines.append(f"    from {r['state']}: {r['visits']} visits, {r['cells']} cell(s): {ent}{note}")
    lines.append("covered: " + "; ".join(cal.get("covered", [])))
    lines.append("not covered: " + "; ".join(cal.get("not_covered", [])))
    return "\n".join(lines)
