"""The book keeps a constant-size summary of a stream's aggregate releases, not the releases
(ledger/aggregate_history.py; docs/implementation.md, "Growth").

Every figure the odometer states about aggregates is checked against an oracle written here from
the list of recorded events alone: the quilt accountant fed release by release (notes/002 §4.7),
Thm III.7 and Thm II.6 computed from their conditions (notes/002 §4.2–4.3), the windows, spans and
flags. Histories are random (seeded): several models and modes, gaps and overlaps, finite-T
releases, seeded samplers, a model that appears mid-stream. The live ledger, the replayed one and
a status with a short list all agree with the oracle; a replay keeps no event object in memory.
"""

from __future__ import annotations

import dataclasses
import gc
import random
from pathlib import Path
from typing import Any

import pytest
from ledger_replay import alive

from streamguard.support.json_numbers import json_number
from streamguard.model.chain import MarkovChain
from streamguard.ledger.aggregate_history import KEEP, ModelHistory
from streamguard.ledger.composition import CompositionError
from streamguard.ledger.events import AggregateEvent
from streamguard.ledger.odometer import odometer, paper_rules
from streamguard.ledger.store import BudgetExceeded, Ledger, LedgerError, Refusal
from streamguard.quilt import QuiltModel, sigma_inf, sigma_max
from streamguard.quilt.accountant import QuiltAccountant

MODELS = [QuiltModel(MarkovChain([[0.9, 0.1], [0.2, 0.8]]), "stat"),
          QuiltModel(MarkovChain([[0.8, 0.2], [0.3, 0.7]]), "approx"),
          QuiltModel(MarkovChain([[0.85, 0.15], [0.25, 0.75]]), "stat")]


def _event(rng: random.Random, model: QuiltModel, lo: int, style: int) -> AggregateEvent:
    """style 0: anything; 1: finite T only beyond the stream (Thm III.7 applies), ε varies;
    2: no finite T, one ε after the first release (Thm II.6 may apply too)."""
    hi = lo + rng.randint(0, 30)
    eps = rng.choice([0.5, 1.0, 1.0, 2.0]) if style < 2 or lo == 0 else 1.0
    timed = style < 2 and rng.random() < 0.15
    T = (hi + 1 + rng.choice([0, 5, 200]) if style == 0 else 10**6) if timed else None
    sigma = (sigma_max(model, eps, T) if timed else sigma_inf(model, eps)).sigma
    L = rng.choice([1.0, 2.0])
    return AggregateEvent(device="d", stream="s", time=1.0, kind="count", lo=lo, hi=hi, lipschitz=L, beta=L * sigma,
                          sigma=sigma, epsilon=eps, model=model.identifier, mode=model.mode, witness=None,
                          t_independent=not timed, T=T, sampler="csprng", deterministic=style == 0 and rng.random() < 0.01)


def _history(seed: int, n: int) -> list[AggregateEvent]:
    """Mostly tumbling windows with gaps and overlaps; in style 0 other models join mid-stream."""
    rng = random.Random(seed)
    style = seed % 3
    out, pos = [], 0
    models = MODELS[: rng.choice([1, 2, 3])] if style == 0 else [rng.choice(MODELS)]
    for k in range(n):
        live = models[: 1 + k * len(models) // n]
        ev = _event(rng, rng.choice(live), pos, style)
        out.append(ev)
        pos = ev.hi + 1 + rng.choice([0, 0, 0, 3, -5 if ev.hi - ev.lo > 6 else 0])
    return out


def _oracle_rules(own: list[AggregateEvent], others: int) -> dict[str, Any]:
    """Thm III.7 and Thm II.6 from their conditions (notes/002 §4.2, §4.3), on the list."""
    if others:
        na = {"not_applicable": f"{others} release(s) calibrated under other models read this stream; "
                                "the paper's rules compose releases of one model"}
        return {"thm_III7_sum": na, "thm_II6_k_max": na}
    chain_len = max(ev.hi for ev in own) + 1
    short = [n for n, ev in enumerate(own) if ev.T is not None and ev.T < chain_len]
    if short:
        ev = own[short[0]]
        why = {"not_applicable": f"release {short[0]}: σ was computed for T = {ev.T} < chain length {chain_len}, "
                                 "so it is not an MQM release on the whole chain"}
        return {"thm_III7_sum": why, "thm_II6_k_max": why}
    total = 0.0
    for ev in own:
        total += ev.epsilon
    first = (own[0].mode, own[0].T, own[0].epsilon)
    differ = [n for n, ev in enumerate(own) if (ev.mode, ev.T, ev.epsilon) != first]
    k_max = ({"not_applicable": f"release {differ[0]} differs from release 0 in mode, T or ε: identical quilt sets "
                                "are not established"} if differ
             else {"epsilon": json_number(len(own) * max(ev.epsilon for ev in own))})
    return {"thm_III7_sum": {"epsilon": json_number(total)}, "thm_II6_k_max": k_max}


def _oracle(events: list[AggregateEvent], limit: int | None) -> dict[str, Any]:
    """The aggregate section from the events alone (every model's accountant fed every load)."""
    mids = sorted({ev.model for ev in events})
    eps = {}
    for mid in mids:
        acc = QuiltAccountant(next(m for m in MODELS if m.identifier == mid))
        for ev in events:
            acc.record(ev.lo, ev.hi, ev.load)
        eps[mid] = acc.eps_max()
    windows = [[ev.lo, ev.hi, ev.load] for ev in events]
    shown = windows if limit is None else windows[-limit:]
    return {
        "epsilon": max(eps.values()),
        "releases": len(events),
        "covered": [min(ev.lo for ev in events), max(ev.hi for ev in events)],
        "windows": shown,
        "windows_truncated": len(shown) < len(windows),
        "deterministic": any(ev.deterministic for ev in events),
        "t_independent": all(ev.t_independent for ev in events),
        "models": [{"model": mid, "mode": next(ev.mode for ev in events if ev.model == mid), "eps_max": eps[mid],
                    "releases_calibrated": sum(ev.model == mid for ev in events),
                    "paper": _oracle_rules([ev for ev in events if ev.model == mid],
                                           sum(ev.model != mid for ev in events))} for mid in mids],
    }


def _check(section: dict[str, Any], want: dict[str, Any], *, exact: bool) -> None:
    approx = (lambda x: x) if exact else (lambda x: pytest.approx(x, rel=1e-12))
    assert section["epsilon"] == approx(want["epsilon"])
    for got, exp in zip(section["models"], want["models"], strict=True):
        assert got["eps_max"] == approx(exp["eps_max"])
        assert {k: got[k] for k in exp if k != "eps_max"} == {k: v for k, v in exp.items() if k != "eps_max"}
    for key in ("releases", "covered", "windows", "windows_truncated", "deterministic", "t_independent"):
        assert section[key] == want[key], key


@pytest.mark.parametrize("seed", range(12))
def test_the_summary_states_what_the_events_give(tmp_path: Path, seed: int) -> None:
    events = _history(seed, 150)
    multi = len({ev.model for ev in events}) > 1  # a model that joins later starts from the others' loads
    path = tmp_path / "l.db"
    with Ledger.open(path) as led:
        for k, ev in enumerate(events):
            model = next(m for m in MODELS if m.identifier == ev.model)
            if k % 2:
                led.admit(ev, 1e9, model=model)
            else:
                led.commit(ev, model=model)
        live = odometer(led, "d", "s", limit=None)["aggregate"]
        live20 = odometer(led, "d", "s", limit=20)["aggregate"]
    _check(live, _oracle(events, None), exact=not multi)
    _check(live20, _oracle(events, 20), exact=not multi)
    with Ledger.open(path, readonly=True) as led:  # the replay states the same figures as the live ledger
        assert odometer(led, "d", "s", limit=None)["aggregate"] == live
        assert odometer(led, "d", "s", limit=20)["aggregate"] == live20
        assert led.events_of("d", "s", "aggregate") == events


def test_the_chain_length_is_the_furthest_position_read(tmp_path: Path) -> None:
    """Thm III.7's chain is 0..(last position any release read), not the latest release's end:
    a σ for T = 150 does not cover a stream already read up to position 199."""
    model = MODELS[0]
    wide, narrow = (AggregateEvent(device="d", stream="s", time=1.0, kind="count", lo=0, hi=hi, lipschitz=1.0,
                                   beta=sig, sigma=sig, epsilon=1.0, model=model.identifier, mode=model.mode,
                                   witness=None, t_independent=T is None, T=T, sampler="csprng", deterministic=False)
                    for hi, T, sig in ((199, None, sigma_inf(model, 1.0).sigma), (9, 150, sigma_max(model, 1.0, 150).sigma)))
    with Ledger.open(tmp_path / "l.db") as led:
        led.commit(wide, model=model)
        led.commit(narrow)
        section = odometer(led, "d", "s")["aggregate"]
    _check(section, _oracle([wide, narrow], None), exact=True)
    assert "T = 150 < chain length 200" in section["models"][0]["paper"]["thm_III7_sum"]["not_applicable"]


def test_lists_longer_than_the_summary_keeps_come_from_the_file(tmp_path: Path) -> None:
    events = _history(99, KEEP + 30)
    with Ledger.open(tmp_path / "l.db") as led:
        for ev in events:
            led.commit(ev, model=next(m for m in MODELS if m.identifier == ev.model))
        assert len(led.book("d", "s").aggregates.recent) == KEEP
        for limit in (None, 0, KEEP - 1, KEEP, KEEP + 1, KEEP + 30, KEEP + 31):
            doc = odometer(led, "d", "s", limit=limit)["aggregate"]
            want = [[ev.lo, ev.hi, ev.load] for ev in events]
            assert doc["windows"] == (want if limit is None else want[max(0, len(want) - limit):]), limit
            assert doc["windows_truncated"] == (limit is not None and limit < len(events)), limit


def test_a_replay_keeps_no_release_in_memory(tmp_path: Path) -> None:
    """The summary, not the events: after the replay of 2,000 windows no AggregateEvent is alive."""
    model = MODELS[0]
    sigma = sigma_inf(model, 1.0).sigma
    path = tmp_path / "l.db"
    with Ledger.open(path) as led:
        for k in range(2000):
            led.commit(AggregateEvent(device="d", stream="s", time=1.0, kind="count", lo=10 * k, hi=10 * k + 9,
                                      lipschitz=1.0, beta=sigma, sigma=sigma, epsilon=1.0, model=model.identifier,
                                      mode=model.mode, witness=None, t_independent=True, sampler="csprng",
                                      deterministic=False), model=model)
    gc.collect()
    with Ledger.open(path, readonly=True) as led:
        gc.collect()
        alive = sum(isinstance(o, AggregateEvent) for o in gc.get_objects())
        book = led.book("d", "s")
        assert alive == 0
        assert book.aggregates.count == 2000 and len(book.aggregates.recent) == KEEP
        assert len(book.accountants[model.identifier].segments()) == 1  # tumbling windows: one load run


def test_a_replay_evaluates_what_release_by_release_gives(tmp_path: Path) -> None:
    """8,000 tumbling windows exactly at σ_∞(1): ε = 1 live, after a restart, and a further window
    at budget 1 is admitted on both sides of it (review of stop 23: evaluating the replay in
    chunks of 65,536 positions gave 1 + 2.8e-12 and refused it after the restart)."""
    model = MODELS[0]
    sigma = sigma_inf(model, 1.0).sigma

    def window(k: int) -> AggregateEvent:
        return AggregateEvent(device="d", stream="s", time=1.0, kind="count", lo=10 * k, hi=10 * k + 9, lipschitz=1.0,
                              beta=sigma, sigma=sigma, epsilon=1.0, model=model.identifier, mode=model.mode,
                              witness=None, t_independent=True, sampler="csprng", deterministic=False)

    path = tmp_path / "l.db"
    with Ledger.open(path) as led:
        for k in range(8000):
            led.commit(window(k), model=model)
        live = led.book("d", "s").accountants[model.identifier].eps_max()
        led.admit(window(8000), 1.0)
    with Ledger.open(path) as led:
        assert led.book("d", "s").accountants[model.identifier].eps_max() == live
        led.admit(window(8001), 1.0)
    assert live == pytest.approx(1.0, rel=1e-12)


def test_deferred_and_recorded_loads_give_the_same_figure() -> None:
    """The same 8,000 mixed windows recorded one by one and deferred: ε_max equal within 1e-13
    (relative), also for a second model fed from the first one's load runs (StreamBook)."""
    rng = random.Random(11)
    a, b = QuiltAccountant(MODELS[0]), QuiltAccountant(MODELS[2])
    deferred = QuiltAccountant(MODELS[0])
    pos = 0
    for _ in range(8000):
        w, load = rng.randint(5, 12), rng.choice([0.04, 0.045, 0.05, 0.09])
        a.record(pos, pos + w - 1, load)
        b.record(pos, pos + w - 1, load)
        deferred.defer(pos, pos + w - 1, load)
        pos += w + rng.choice([0, 0, -2, 3])
    joined = QuiltAccountant(MODELS[2])
    for s, e, v in a.segments():
        joined.defer(s, e, v)
    assert deferred.segments() == a.segments() and joined.segments() == b.segments()
    assert deferred.eps_max() == pytest.approx(a.eps_max(), rel=1e-13, abs=0)
    assert joined.eps_max() == pytest.approx(b.eps_max(), rel=1e-13, abs=0)


def test_a_read_only_ledger_lists_only_what_it_replayed(tmp_path: Path) -> None:
    """``ledger show`` beside a running daemon: windows the writer appended after the reader
    opened are not listed with the reader's figures."""
    events = _history(5, 130)
    model = next(m for m in MODELS if m.identifier == events[0].model)
    path = tmp_path / "l.db"
    with Ledger.open(path) as writer:
        for ev in events[:120]:
            writer.commit(ev, model=model)
        with Ledger.open(path, readonly=True) as reader:
            for ev in events[120:]:
                writer.commit(ev)
            doc = odometer(reader, "d", "s", limit=None)["aggregate"]
            assert doc["releases"] == len(doc["windows"]) == 120
            assert reader.events_of("d", "s", "aggregate") == events[:120]


def test_an_event_whose_mode_differs_from_its_model_is_refused(tmp_path: Path) -> None:
    model = MODELS[0]
    sigma = sigma_inf(model, 1.0).sigma
    ev = AggregateEvent(device="d", stream="s", time=1.0, kind="count", lo=0, hi=9, lipschitz=1.0, beta=sigma,
                        sigma=sigma, epsilon=1.0, model=model.identifier, mode="approx", witness=None,
                        t_independent=True, sampler="csprng", deterministic=False)
    with Ledger.open(tmp_path / "l.db") as led:
        with pytest.raises(LedgerError, match="mode"):
            led.commit(ev, model=model)
        led.commit(dataclasses.replace(ev, mode=model.mode), model=model)
        with pytest.raises(LedgerError, match="mode"):
            led.commit(dataclasses.replace(ev, lo=10, hi=19))
        assert led.head[0] == 1


def test_paper_rules_of_a_mix_are_stated_without_reading_the_releases() -> None:
    """A release the rules cannot read (a bad mode in an old ledger) only matters when the rules
    would read it: with releases of other models present they are not applicable anyway."""
    history = ModelHistory("STAT")
    bad = AggregateEvent(device="d", stream="s", time=1.0, kind="count", lo=0, hi=9, lipschitz=1.0, beta=20.0,
                         sigma=20.0, epsilon=1.0, model="m", mode="STAT", witness=None, t_independent=True,
                         sampler="csprng", deterministic=False)
    history.add(bad)
    assert "other models" in paper_rules(history, 1)["thm_III7_sum"]["not_applicable"]
    with pytest.raises(CompositionError):
        paper_rules(history, 0)


def test_refusals_are_counted_not_kept(tmp_path: Path) -> None:
    """A stream over its budget has every further window refused: the ledger keeps their count per
    family and the latest (what the odometer states), and reads the list back from the file."""
    model = MODELS[0]
    sigma = sigma_inf(model, 1.0).sigma
    path = tmp_path / "l.db"
    with Ledger.open(path) as led:
        for k in range(40):
            ev = AggregateEvent(device="d", stream="s", time=1.0, kind="count", lo=0, hi=9 + k, lipschitz=1.0,
                                beta=sigma, sigma=sigma, epsilon=1.0, model=model.identifier, mode=model.mode,
                                witness=None, t_independent=True, sampler="csprng", deterministic=False)
            try:
                led.admit(ev, 2.5, model=model)
            except BudgetExceeded:
                pass
        listed = [(r.id, r.would_be, r.event.span()) for r in led.refusals("d", "s")]
        live = odometer(led, "d", "s")["refusals"]
    assert len(listed) > 30 and [i for i, _, _ in listed] == list(range(1, len(listed) + 1))
    assert live["count"] == len(listed) and live["by_family"] == {"aggregate": len(listed)}
    assert live["last"]["would_be"] == listed[-1][1] and live["last"]["span"] == list(listed[-1][2])
    with Ledger.open(path, readonly=True) as led:
        assert alive(Refusal) == 1  # the latest, for the odometer
        assert odometer(led, "d", "s")["refusals"] == live
        assert [(r.id, r.would_be, r.event.span()) for r in led.refusals("d", "s")] == listed
        assert [r["id"] for r in led.export()["refusals"]] == [i for i, _, _ in listed]
