"""The consumer's report: per stream (combined over the devices that publish it) the counts of what
arrived and the corrected estimates, per device the same plus the re-audit, and a time-bucketed
table of shares (``streamguard consume``; the ``--json`` object follows the issue-14 contract:
``streams`` maps each stream name to at least ``labels``, ``records``, ``redacted``,
``duplicates``, ``gaps``, ``frequency`` and ``frequency_ci``). ``gaps`` and ``missing`` count grid
steps (positions) without a received record between the first and the newest received — ranges
and steps; ``lost`` the records known lost (seqs missing).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .audit import audit_redaction
from .collector import Collector, StreamLog
from ..model.setchain import SetChain
from .estimates import (EstimationModel, Shares, aggregate_shares, aggregate_summary, channel_matrix, channel_shares,
                        combine, redaction_posterior, redaction_shares, setchain_shares, transition_intervals)
from .model import StatusError, labels_of, published_model
from .posterior import PosteriorError
from .timevarying import SetChainModel


def estimation_model(status: dict[str, Any], labels: list[Any], setchain: SetChain | None) -> EstimationModel:
    """What a redaction stream's estimates are corrected under: the status's chain, or the center
    member of a set-chain the consumer was given (``consume --model``; its labels must be the
    stream's)."""
    if setchain is None:
        return published_model(status)
    if tuple(str(x) for x in labels) != setchain.labels:
        raise StatusError("the set-chain model's labels differ from the stream's labels")
    return SetChainModel.center(setchain)


def device_report(log: StreamLog, setchain: SetChain | None = None) -> tuple[dict[str, Any], Shares | None,
                                                                             Shares | None]:
    """One device's stream: the counts, the corrected estimate and the aggregate estimate; with a
    ``setchain`` the redaction estimate is made under it (:func:`.estimates.setchain_shares`), the
    re-audit still checks the producer's claims under the status's model."""
    records = log.ordered()
    gaps = log.position_gaps()
    out: dict[str, Any] = {
        "mechanism": log.mechanism, "records": len(records), "redacted": sum(r.redacted for r in records),
        "duplicates": log.duplicates, "conflicts": log.conflicts, "reordered": log.reordered,
        # grid steps without a received record, in positions (a lost record or a step without one);
        # ``lost``: the records known lost (seqs missing)
        "gaps": len(gaps), "missing": sum(hi - lo + 1 for lo, hi in gaps), "lost": log.missing(),
        "evicted": log.evicted,
        "windows": len(log.windows), "window_duplicates": log.window_duplicates,
        "status": log.status is not None, "warnings": [],
    }
    shares: Shares | None = None
    aggregate: Shares | None = None
    try:
        labels = labels_of(log.status)
        out["labels"] = labels
        if log.windows:
            windows = [log.windows[k] for k in sorted(log.windows)]
            aggregate = aggregate_shares(windows, len(labels))
            out["aggregates"] = aggregate_summary(windows)
        if records and log.mechanism == "redaction":
            assert log.status is not None
            model = published_model(log.status)
            shares = (redaction_shares(records, labels, model, log.restarts) if setchain is None
                      else setchain_shares(records, labels, setchain, log.restarts))
            shares.extra["transitions_ci"] = transition_intervals(
                records, labels, estimation_model(log.status, labels, setchain), log.restarts)
            out["audit"] = audit_redaction(log.status, model, records, log.restarts).as_json()
            out["warnings"] += out["audit"]["warnings"]
        elif records and log.mechanism == "channel":
            assert log.status is not None
            shares = channel_shares(records, channel_matrix(log.status, len(labels)))
            if shares is None:
                out["warnings"].append("the published channel cannot be inverted (rank < states): no corrected shares")
    except (StatusError, PosteriorError) as exc:
        out["warnings"].append(str(exc))
    if log.status is None:
        out["warnings"].append("no privacy status received: no corrected estimate (subscribe before the stream "
                               "starts, or wait for the retained status)")
    if log.conflicts:
        out["warnings"].append(f"{log.conflicts} records arrived twice with different content (two writers?)")
    for key, s in (("estimate", shares), ("aggregate", aggregate)):
        if s is not None:
            out[key] = shares_json(s)
    return out, shares, aggregate


def shares_json(s: Shares) -> dict[str, Any]:
    return {"frequency": s.frequency, "frequency_ci": s.frequency_ci, "naive": s.naive, "method": s.method,
            "n": s.n, **s.extra}


def report(collector: Collector, setchain: SetChain | None = None) -> dict[str, Any]:
    """The whole report (module docstring); ``setchain``: correct redaction estimates under it."""
    by_stream: dict[str, list[StreamLog]] = defaultdict(list)
    for (_, stream), log in sorted(collector.streams.items()):
        by_stream[stream].append(log)
    streams: dict[str, Any] = {}
    for name, logs in by_stream.items():
        devices, parts, aggs = {}, [], []
        for log in logs:
            d, s, a = device_report(log, setchain)
            devices[log.device] = d
            if s is not None:
                parts.append(s)
            if a is not None:
                aggs.append(a)
        labels = next((d["labels"] for d in devices.values() if "labels" in d), None)
        same = all(d.get("labels") == labels for d in devices.values() if "labels" in d)
        entry: dict[str, Any] = {
            "labels": labels,
            **{key: sum(d[key] for d in devices.values())
               for key in ("records", "redacted", "duplicates", "gaps", "missing", "lost", "conflicts",
                           "reordered")},
            "devices": devices,
        }
        best = parts or aggs
        if best and same and labels is not None:
            c = best[0] if len(best) == 1 else combine(best)
            entry.update(frequency=c.frequency, frequency_ci=c.frequency_ci, naive=c.naive, method=c.method)
        else:
            entry.update(frequency=None, frequency_ci=None, naive=None, method=None)
            if not same:
                entry["warning"] = "devices publish different labels for this stream: not combined"
        streams[name] = entry
    return {"streams": streams, "messages": collector.messages, "malformed": collector.malformed,
            "devices": collector.devices}


def buckets(log: StreamLog, seconds: float, setchain: SetChain | None = None) -> list[dict[str, Any]]:
    """Share of each state per time bucket of ``seconds`` (by record ts, UTC epoch), corrected as
    the stream's mechanism allows (the posterior restricted to the bucket's records for redaction,
    least squares for a channel; under ``setchain``'s center member when given); [] when there is no
    corrected estimate."""
    records = log.ordered()
    if not records or log.status is None:
        return []
    try:
        labels = labels_of(log.status)
        if log.mechanism == "redaction":
            post = redaction_posterior(records, labels, estimation_model(log.status, labels, setchain), log.restarts)
            first = min(r.position if r.position is not None else r.seq for r in records)
            rows: dict[int, list[Any]] = defaultdict(list)
            for r in records:
                t = (r.position if r.position is not None else r.seq) - first
                rows[math.floor(r.ts / seconds)].append(post.marginals[t])
            return [{"start": b * seconds, "records": len(v), "frequency": np.mean(v, axis=0).tolist()}
                    for b, v in sorted(rows.items())]
        if log.mechanism == "channel":
            C = channel_matrix(log.status, len(labels))
            groups: dict[int, list[Any]] = defaultdict(list)
            for r in records:
                groups[math.floor(r.ts / seconds)].append(r)
            out = []
            for b, rs in sorted(groups.items()):
                s = channel_shares(rs, C)
                out.append({"start": b * seconds, "records": len(rs),
                            "frequency": None if s is None else s.frequency,
                            "frequency_ci": None if s is None else s.frequency_ci})
            return out
    except (StatusError, PosteriorError):
        return []
    return []


def table(rep: dict[str, Any]) -> str:
    """A plain-text table of the report: one line per stream and state."""
    lines = [f"{'stream':<16} {'state':<12} {'share':>7} {'95% interval':>17} {'naive':>7}  records redacted dup gaps"]
    for name, s in rep["streams"].items():
        for i, lab in enumerate(s["labels"] or []):
            f = s["frequency"][i] if s["frequency"] else None
            ci = s["frequency_ci"][i] if s["frequency_ci"] else None
            nv = s["naive"][i] if s["naive"] else None
            lines.append(
                f"{name:<16} {str(lab):<12} {_num(f):>7} {('[' + _num(ci[0]) + ', ' + _num(ci[1]) + ']') if ci else '-':>17}"
                f" {_num(nv):>7}  {s['records']:>7} {s['redacted']:>8} {s['duplicates']:>3} {s['gaps']:>4}")
    return "\n".join(lines)


def bucket_table(name: str, labels: Sequence[Any], bs: list[dict[str, Any]]) -> str:
    """A plain-text table of one stream's shares per time bucket (UTC)."""
    import datetime

    lines = [f"{name}: share per bucket", f"{'bucket start (UTC)':<20} {'records':>7}  "
             + " ".join(f"{str(lab):>10}" for lab in labels)]
    for b in bs:
        start = datetime.datetime.fromtimestamp(b["start"], datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")
        freq = b.get("frequency") or [None] * len(labels)
        lines.append(f"{start:<20} {b['records']:>7}  " + " ".join(f"{_num(f):>10}" for f in freq))
    return "\n".join(lines)


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def plot_buckets(series: dict[str, tuple[Sequence[Any], list[dict[str, Any]]]], path: Path) -> None:
    """Stacked shares per bucket, one panel per stream (``series``: name → (labels, buckets))."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError('plotting needs matplotlib: pip install "streamguard[plot]"') from None
    n = max(1, len(series))
    fig, axes = plt.subplots(n, 1, figsize=(8, 2.5 * n), squeeze=False)
    for ax, (name, (labels, bs)) in zip(axes[:, 0], series.items()):
        bs = [b for b in bs if b.get("frequency") is not None]
        if bs:
            x = np.array([b["start"] for b in bs])
            y = np.array([b["frequency"] for b in bs])
            ax.stackplot(x, y.T, labels=[str(lab) for lab in labels], step="post")
        ax.set_ylim(0, 1)
        ax.set_title(f"{name}: corrected share per bucket")
        ax.legend(loc="upper right", fontsize=8)
    axes[-1, 0].set_xlabel("bucket start (UTC epoch seconds)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
